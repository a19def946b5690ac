//! The one place where a queue changes the tracker (STYLE.md, "One place per outside effect"):
//! each claim, release, close and pull-request mark is made on the tracker, the tracker's own
//! files committed on the base branch, the ledger told, and — for a tracker whose items workers
//! on other machines share — the item's lease on origin moved with it (SPEC §15).

use std::collections::BTreeMap;

use chrono::Utc;

use super::claims::Claims;
use super::ledger::Ledger;
use crate::error::Result;
use crate::git::Repo;
use crate::queue::lease::{Lease, Leases, Next, Seen, Stage, Swap};
use crate::queue::{self, Claim, Item, Tracker};
use crate::ui::Ui;

/// The tracker, its ledger and the team's leases, as one queue run holds them.
pub(super) struct Desk {
    pub(super) ui: Ui,
    /// The main work tree's repository.
    pub(super) repo: Repo,
    pub(super) tracker: Box<dyn Tracker>,
    ledger: Ledger,
    /// The branch the queue started from: items start from it and merge into it, and their
    /// pull requests go to it, wherever the main tree's HEAD is later (`None`: a detached HEAD).
    pub(super) base: Option<String>,
    pub(super) team: Option<Team>,
    /// The claims this machine holds on a tracker of its own (no team).
    claims: Option<Claims>,
}

/// The workers sharing the tracker, as this one sees them.
pub(super) struct Team {
    pub(super) leases: Leases,
    /// What the last look at origin found.
    pub(super) seen: Seen,
    /// The leases this worker holds or last held, by loop name: each one's commit on origin
    /// and the item branch's tip there.
    pub(super) mine: BTreeMap<String, Mine>,
    /// Every lease as the ledger last held the tracker against them: a lease that moved since
    /// (whoever looked at origin in between) marks its item's changes as the team's.
    pub(super) held_against: BTreeMap<String, String>,
}

/// A lease this worker moved last.
#[derive(Debug, Clone, Default)]
pub(super) struct Mine {
    pub(super) oid: String,
    /// What it says (`None`: not this worker's to say any more).
    pub(super) stage: Option<Stage>,
    /// The item's branch on origin as this worker last pushed it (or found it).
    pub(super) branch: Option<String>,
    /// When the lease was written (this machine's monotonic clock): it is held for the
    /// lease's duration from then, however long its push took.
    pub(super) written: Option<std::time::Instant>,
    /// The hash of the item's text this worker works on (`queue::text_hash`).
    pub(super) text: Option<String>,
}

impl Desk {
    pub(super) fn new(
        ui: Ui,
        repo: Repo,
        mut tracker: Box<dyn Tracker>,
        base: Option<String>,
        team: Option<Team>,
    ) -> Result<Desk> {
        let ledger = Ledger::read(&mut *tracker)?;
        let claims = match team {
            None => Claims::open(&repo)?,
            Some(_) => None,
        };
        let mut desk = Desk {
            ui,
            repo,
            tracker,
            ledger,
            base,
            team,
            claims,
        };
        if let (Some(team), Some(base)) = (&mut desk.team, &desk.base) {
            team.seen = team.leases.look(base)?;
            team.held_against = lease_oids(&team.seen);
        }
        desk.release_orphans()?;
        Ok(desk)
    }

    /// Items a queue of this machine claimed and never gave back (it was killed, or the
    /// tracker refused the release): released now, before anything is taken.
    fn release_orphans(&mut self) -> Result<()> {
        let Some(claims) = &self.claims else {
            return Ok(());
        };
        let orphans = claims.orphans()?;
        if orphans.is_empty() {
            return Ok(());
        }
        let standing = self.tracker.states()?.unwrap_or_default();
        for (name, claim) in orphans {
            let held = standing
                .get(&claim.id)
                .is_some_and(|is| self.tracker.claimed(is));
            if held {
                let item = Item {
                    id: claim.id.clone(),
                    title: String::new(),
                    body: String::new(),
                    criteria: Vec::new(),
                };
                let why = format!(
                    "ralph: released — the queue that claimed it (pid {}) ended without giving it back",
                    claim.pid
                );
                self.tracker.release(&item, &why)?;
                self.after_change(&format!("released {}", claim.id))?;
                self.ui.note(&format!(
                    "{} {}: {}",
                    self.tracker.source(),
                    claim.id,
                    &why[7..]
                ));
            }
            if let Some(claims) = &self.claims {
                claims.strike(&name)?;
            }
        }
        Ok(())
    }

    pub(super) fn source(&self) -> &'static str {
        self.tracker.source()
    }

    /// Listed `item` as this worker works it: on its text as the queue first read it, never a
    /// later one — but an item whose lease says its holder was working it (now lapsed) on
    /// another text is worked on that one, the team's goal (SPEC §15), when the tracker lists
    /// it now (its holder put it back; this queue first read it changed), and pinned to it;
    /// else `Err(why)`, not taken.
    pub(super) fn goal(&mut self, item: Item, name: &str) -> std::result::Result<Item, String> {
        let pinned = self.ledger.pinned(item.clone());
        let named = self
            .lease(name)
            .filter(|l| l.stage == Stage::Working)
            .and_then(|l| l.text.clone());
        let Some(named) = named else {
            return Ok(pinned);
        };
        if queue::text_hash(&pinned) == named {
            return Ok(pinned);
        }
        if queue::text_hash(&item) == named {
            self.ledger.repin(&item);
            return Ok(item);
        }
        Err(format!(
            "its lease says it was being worked on another text (hash {named}) than the one this queue first read and the tracker lists now; not taken — release its lease to work it on this text: git push origin :refs/ralph/leases/{name}"
        ))
    }

    /// Whether the ledger may let the queue take item `id` (it was there at the start).
    pub(super) fn known(&self, id: &str) -> bool {
        self.ledger.known(id)
    }

    /// Look at the tracker, then at origin's leases (in that order: a worker moves an item's
    /// lease before it claims and after it releases, so a change seen on the tracker shows on
    /// the lease too); put back what changed outside ralph's workers.
    pub(super) fn look(&mut self) -> Result<()> {
        let now = self.tracker.states()?;
        let before = match (&mut self.team, &self.base) {
            (Some(team), Some(base)) => match team.leases.look(base) {
                Ok(fresh) => {
                    let oids = lease_oids(&fresh);
                    team.seen = fresh;
                    Some(std::mem::replace(&mut team.held_against, oids))
                }
                Err(e) => {
                    // Without the team's leases a change cannot be told from the team's:
                    // nothing is put back this time. Taking an item still needs origin.
                    self.ui.warn(&format!(
                        "{e}; the tracker's changes are left as they are this time"
                    ));
                    return Ok(());
                }
            },
            _ => None,
        };
        let source = self.tracker.source();
        let (team, me) = (
            self.team.as_ref().map(|t| &t.seen.leases),
            self.team.as_ref().map(|t| t.leases.worker.as_str()),
        );
        let at = self.team.as_ref().map_or_else(Utc::now, |t| t.leases.now());
        let by_team = |id: &str| {
            let (Some(after), Some(before), Some(me)) = (team, &before, me) else {
                return false;
            };
            let name = queue::loop_name(source, id);
            let (was, is) = (before.get(&name), after.get(&name));
            was != is.map(|l| &l.oid) || is.is_some_and(|l| l.held(at) && l.worker != me)
        };
        let worked_on = |id: &str| {
            let lease = team?.get(&queue::loop_name(source, id))?;
            lease.held(at).then(|| lease.text.clone()).flatten()
        };
        self.ledger
            .hold(self.ui, &mut *self.tracker, now, &by_team, &worked_on)?;
        self.commit_tracker_files("changes made outside the queue")
    }

    /// Item `name`'s lease as the last look found it.
    pub(super) fn lease(&self, name: &str) -> Option<&Lease> {
        self.team.as_ref()?.seen.leases.get(name)
    }

    /// The tracker item `name`'s lease on origin names, when it is another than this queue's
    /// (a queue of another tracker publishes to the same origin): not this queue's item.
    pub(super) fn foreign(&self, name: &str) -> Option<String> {
        let team = self.team.as_ref()?;
        let theirs = team.seen.leases.get(name)?.tracker.as_ref()?;
        (*theirs != team.leases.tracker).then(|| theirs.clone())
    }

    /// The commit item `name`'s work goes on from: origin's branch as the lease's last holder
    /// left it (`None`: the queue's base — no lease said where its branch was). A branch that
    /// someone not holding the lease pushed (an agent with the clone's remote planting finished
    /// work) is not started from; said.
    pub(super) fn start_of(&self, name: &str) -> Option<String> {
        let team = self.team.as_ref()?;
        let start = self.trusted(name);
        let there = team.seen.branches.get(name);
        if there.is_some() && start.as_ref() != there {
            self.ui.warn(&format!(
                "{name}: origin's ralph/{name} is not where its lease's holder left it (pushed outside the lease): the item goes on from {}",
                start.as_deref().unwrap_or("the queue's base")
            ));
        }
        start
    }

    /// Item `name`'s branch as the team left it: the commit its lease names, when this
    /// repository has it (fetched with the branch, or an ancestor of what origin has now).
    fn trusted(&self, name: &str) -> Option<String> {
        let team = self.team.as_ref()?;
        let named = team.seen.leases.get(name)?.branch.clone()?;
        if team.seen.branches.get(name) == Some(&named) {
            return Some(named);
        }
        let object = format!("{named}^{{commit}}");
        let has = self.repo.cli().run(&["cat-file", "-e", &object], None);
        has.is_ok().then_some(named)
    }

    /// The commit of item `name`'s lease ref on origin when it is no lease ralph can read.
    pub(super) fn unreadable(&self, name: &str) -> Option<&str> {
        let team = self.team.as_ref()?;
        team.seen.unreadable.get(name).map(String::as_str)
    }

    /// Whether another worker holds item `name` now.
    pub(super) fn held_by_another(&self, name: &str) -> bool {
        let Some(team) = &self.team else {
            return false;
        };
        team.seen
            .leases
            .get(name)
            .is_some_and(|l| l.held(team.leases.now()) && l.worker != team.leases.worker)
    }

    /// Take item `name`'s lease at `stage` (a compare-and-swap from the lease the last look
    /// saw): `false` when another worker holds it or took it first. Without a team: `true`.
    /// The lease names `text` (the hash of the item's text worked on), else the one it named.
    pub(super) fn take_lease(
        &mut self,
        name: &str,
        stage: Stage,
        text: Option<&str>,
    ) -> Result<bool> {
        if self.held_by_another(name) {
            return Ok(false);
        }
        let start = self.trusted(name);
        let Some(team) = &mut self.team else {
            return Ok(true);
        };
        let seen = team.seen.leases.get(name);
        let text = text
            .map(str::to_string)
            .or(seen.and_then(|l| l.text.clone()));
        let seen = seen.map(|l| l.oid.clone());
        let next = Next::held(stage)
            .on_branch(start.as_deref())
            .on_text(text.as_deref());
        let written = Some(std::time::Instant::now());
        match team.leases.swap(name, seen.as_deref(), &next, None)? {
            Swap::Won(oid) => {
                let branch = team.seen.branches.get(name).cloned();
                let stage = Some(stage);
                let mine = Mine {
                    oid,
                    stage,
                    branch,
                    written,
                    text,
                };
                team.mine.insert(name.to_string(), mine);
                Ok(true)
            }
            Swap::Lost | Swap::Diverged(_) => Ok(false),
        }
    }

    /// Move this worker's lease of item `name` to `next`; one taken over meanwhile is said
    /// and left to its new holder.
    pub(super) fn set_lease(&mut self, name: &str, next: &Next) -> Result<()> {
        let Some(team) = &mut self.team else {
            return Ok(());
        };
        let Some(mine) = team.mine.get(name).cloned() else {
            return Ok(());
        };
        let next = next
            .clone()
            .on_branch(mine.branch.as_deref())
            .on_text(mine.text.as_deref());
        let written = Some(std::time::Instant::now());
        match team.leases.swap(name, Some(&mine.oid), &next, None)? {
            Swap::Won(oid) => {
                let stage = Some(next.stage);
                let mine = Mine {
                    oid,
                    stage,
                    written,
                    ..mine
                };
                team.mine.insert(name.to_string(), mine);
            }
            Swap::Lost | Swap::Diverged(_) => {
                team.mine.insert(
                    name.to_string(),
                    Mine {
                        stage: None,
                        ..mine
                    },
                );
                self.ui.warn(&format!(
                    "{name}: another worker took its lease over; left to them"
                ));
            }
        }
        Ok(())
    }

    /// Whether item `name`'s work is published and only its close is left (this worker's
    /// lease says `merged`): a failure then leaves the item to the next worker to close, never
    /// released to be worked again.
    pub(super) fn close_pending(&self, name: &str) -> bool {
        self.team
            .as_ref()
            .and_then(|t| t.mine.get(name))
            .is_some_and(|m| m.stage == Some(Stage::Merged))
    }

    /// Claim `item`: its lease first (which decides), then the tracker's claim for people to
    /// see. Whatever fails after the lease was taken leaves the item released.
    pub(super) fn claim(&mut self, item: &Item, name: &str) -> Result<Claim> {
        let text = queue::text_hash(item);
        if !self.take_lease(name, Stage::Working, Some(&text))? {
            return Ok(Claim::Taken);
        }
        let claimed = self.tracker.claim(item).and_then(|c| {
            if c == Claim::Ours {
                self.after_change(&format!("claimed {}", item.id))?;
            }
            Ok(c)
        });
        match claimed {
            Ok(Claim::Ours) => {
                if let Some(claims) = &self.claims {
                    claims.add(name, &item.id)?;
                }
                Ok(Claim::Ours)
            }
            Ok(Claim::Taken) => {
                let why = "claimed by someone else";
                self.set_lease(name, &Next::free(Stage::Released).with_note(why))?;
                Ok(Claim::Taken)
            }
            Err(e) => {
                let _ = self.release(item, name, &format!("ralph: released — error: {e}"));
                Err(e)
            }
        }
    }

    /// Give `item` back with a comment saying `why`: on the tracker (open, unassigned, no
    /// `ralph:in-progress`) and its lease released — the lease even when the tracker failed, so
    /// no item stays held for ever; a lease origin does not take now runs out by itself (said).
    /// The tracker's error, after both were tried.
    /// An item whose lease another worker took over meanwhile is theirs: left as it is.
    pub(super) fn release(&mut self, item: &Item, name: &str, why: &str) -> Result<()> {
        if self.taken_over(name) {
            self.ui.note(&format!(
                "{name}: its lease is another worker's now: the item is left to them"
            ));
            return self.strike(name);
        }
        let tracker = self.tracker.release(item, why);
        let recorded = self.after_change(&format!("released {}", item.id));
        self.let_go(name, &Next::free(Stage::Released).with_note(why));
        if tracker.is_ok() {
            self.strike(name)?;
        }
        tracker.and(recorded)
    }

    /// Give back `item`, whose lease could not be renewed (origin out of reach) and runs out
    /// at `until`: on the tracker only before then — after, another worker may hold it, and
    /// it is theirs (the lease, out of reach, is left to run out).
    pub(super) fn release_lapsed(
        &mut self,
        item: &Item,
        name: &str,
        why: &str,
        until: std::time::Instant,
    ) -> Result<()> {
        if std::time::Instant::now() >= until {
            self.ui.note(&format!(
                "{name}: its lease ran out: the item is left to the next worker"
            ));
            return self.strike(name);
        }
        let tracker = self.tracker.release(item, why);
        let recorded = self.after_change(&format!("released {}", item.id));
        self.let_go(name, &Next::free(Stage::Released).with_note(why));
        tracker.and(recorded)
    }

    /// Whether this worker held item `name`'s lease and another worker has it now (as origin
    /// says, asked now: a look may be older than this worker's last renewal). Origin out of
    /// reach: not known to be taken over.
    fn taken_over(&mut self, name: &str) -> bool {
        let Some(team) = &mut self.team else {
            return false;
        };
        let Some(mine) = team.mine.get_mut(name) else {
            return false;
        };
        if mine.stage.is_none() {
            return true;
        }
        match team.leases.on_origin(name) {
            Ok(now) if now.as_deref() != Some(mine.oid.as_str()) => {
                mine.stage = None;
                true
            }
            _ => false,
        }
    }

    /// Item `name` no longer claimed by this machine.
    fn strike(&self, name: &str) -> Result<()> {
        match &self.claims {
            Some(claims) => claims.strike(name),
            None => Ok(()),
        }
    }

    /// [`Desk::set_lease`] when nothing else hangs on it: a lease origin does not take now is
    /// said, and runs out by itself.
    fn let_go(&mut self, name: &str, next: &Next) {
        if let Err(e) = self.set_lease(name, next) {
            let left = self.team.as_ref().map_or_else(String::new, |t| {
                format!(
                    " (it runs out within {})",
                    humantime::format_duration(t.leases.duration)
                )
            });
            self.ui
                .warn(&format!("{name}: the lease could not be let go{left}: {e}"));
        }
    }

    /// Close `item`, done at `commit` (on origin's base branch when the team shares it); its
    /// lease then says so.
    pub(super) fn close(&mut self, item: &Item, name: &str, commit: &str) -> Result<()> {
        let closed = self
            .tracker
            .close(item, commit)
            .and_then(|()| self.after_change(&format!("closed {}", item.id)));
        match closed {
            Ok(()) => {
                self.let_go(name, &Next::free(Stage::Closed).with_commit(commit));
                self.strike(name)
            }
            Err(e) => {
                // The work is where readers see it: the next worker that looks finishes the
                // close at once, without running the item again.
                self.let_go(name, &Next::free(Stage::Merged).with_commit(commit));
                Err(e)
            }
        }
    }

    /// `--pr`: the item marked as having its pull request, before anything is pushed.
    pub(super) fn mark_pr_open(&mut self, item: &Item) -> Result<()> {
        self.tracker.mark_pr_open(item)?;
        self.after_change(&format!("pull request for {}", item.id))
    }

    /// Where `item`'s loop also asks a person and reads the reply (GitHub: the issue's
    /// comments) — the one tracker change made from the item's own thread, while its loop
    /// waits: a comment, which no ledger keeps and no lease carries.
    pub(super) fn person_there(
        &self,
        item: &Item,
    ) -> Option<std::sync::Arc<dyn crate::person::Elsewhere>> {
        self.tracker.person_there(item)
    }

    /// A tracker change made: its files committed on the base branch, the ledger told.
    fn after_change(&mut self, what: &str) -> Result<()> {
        self.commit_tracker_files(what)?;
        self.ledger.update(&mut *self.tracker)
    }

    /// The tracker's own files, changed by a claim, a close or a release (or a person adding
    /// items meanwhile), committed on the base branch (`ralph: beads <id> claimed`), so no
    /// item's branch carries them and no merge finds the base dirty.
    fn commit_tracker_files(&mut self, what: &str) -> Result<()> {
        let paths = self.tracker.own_paths();
        if paths.is_empty() {
            return Ok(());
        }
        let message = format!("ralph: {} {what}", self.tracker.source());
        self.repo.commit_paths(paths, &message)?;
        Ok(())
    }
}

/// Each lease's commit, by loop name.
fn lease_oids(seen: &Seen) -> BTreeMap<String, String> {
    seen.leases
        .iter()
        .map(|(k, l)| (k.clone(), l.oid.clone()))
        .collect()
}
