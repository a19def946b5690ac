//! One item's way through a queue: taken (never when its text would change its criteria, nor
//! while another worker holds its lease), its loop started in its worktree from where the team
//! left its branch, then merged, published and closed, a pull request opened, or released.
//! An item whose work a worker already published is closed without running it again.

use std::path::Path;

use super::keeper::Keeper;
use super::publish::{self, Published};
use super::{Outcome, Queue, Running, Taken};
use crate::commands::Context;
use crate::commands::run::begin::Continuation;
use crate::commands::run::{Ended, Link, start_linked};
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::queue::lease::{Next, Stage};
use crate::queue::{self, Claim, Item, Now};
use crate::signals::Cancel;
use crate::state::HaltReason;

/// What taking the next item came to.
pub(super) enum Took {
    /// Its loop runs.
    Running(Running),
    /// Settled without a loop: its work was published already, and it is closed now.
    Settled(Taken),
    /// Nothing is ready.
    Nothing,
}

/// Take the first ready item not seen yet: finish it when its work is on origin already, or
/// claim it and start its loop. One look at the tracker and origin for the whole list: an item
/// another worker took meanwhile loses its compare-and-swap, and the next one is tried.
pub(super) fn take_next(q: &mut Queue<'_>) -> Result<Took> {
    q.desk.look()?;
    let source = q.desk.source();
    for item in q.desk.tracker.ready()? {
        let name = queue::loop_name(source, &item.id);
        // Only items the tracker had when the queue started: one that turns up while loops
        // run (an agent labelling an issue `ralph`) waits for a run a person starts.
        if q.seen.contains(&item.id) || !q.desk.known(&item.id) || q.desk.held_by_another(&name) {
            continue;
        }
        q.seen.insert(item.id.clone());
        if let Some(oid) = q.desk.unreadable(&name) {
            q.ctx.ui.warn(&format!(
                "{source} {}: origin's refs/ralph/leases/{name} is at {oid}, which is no lease ralph can read (forced by hand?); not taken — delete it to free the item: git push origin :refs/ralph/leases/{name}",
                item.id
            ));
            continue;
        }
        if let Some(theirs) = q.desk.foreign(&name) {
            q.ctx.ui.warn(&format!(
                "{source} {}: origin's lease {name} is {theirs}'s item (one origin serves two trackers whose items share a number); not taken",
                item.id
            ));
            continue;
        }
        // Its text as the queue first read it (or the team's): a change since never moves
        // the goal.
        let id = item.id.clone();
        let item = match q.desk.goal(item, &name) {
            Ok(item) => item,
            Err(why) => {
                q.ctx.ui.warn(&format!("{source} {id}: {why}"));
                continue;
            }
        };
        // An item whose text is too large or would change its task file's criteria is never
        // claimed: skipped, said, the queue goes on (one hostile issue does not stop the others).
        if let Some(why) = queue::refusal(source, &item) {
            q.ctx
                .ui
                .warn(&format!("{source} {}: {why}; not taken", item.id));
            continue;
        }
        match already_done(q, &item, &name)? {
            Some(Some(taken)) => return Ok(Took::Settled(taken)),
            Some(None) => continue,
            None => {}
        }
        if q.desk.claim(&item, &name)? == Claim::Taken {
            q.ctx.ui.note(&format!(
                "{source} {}: claimed by someone else, next",
                item.id
            ));
            continue;
        }
        match start(q, &item, &name) {
            Ok(Some(running)) => return Ok(Took::Running(running)),
            Ok(None) => continue,
            Err(e) => {
                let _ = q
                    .desk
                    .release(&item, &name, &format!("ralph: released — error: {e}"));
                return Err(e);
            }
        }
    }
    Ok(Took::Nothing)
}

/// An item a worker already finished in part: its work merged on origin with the close left
/// to do (`Some(Some(taken))`: closed now), or its pull request open (`Some(None)`: its label
/// put right, next). `None`: the item is to be worked.
fn already_done(q: &mut Queue<'_>, item: &Item, name: &str) -> Result<Option<Option<Taken>>> {
    let lease = q.desk.lease(name).map(|l| (l.stage, l.commit.clone()));
    if let Some((Stage::Merged, Some(commit))) = lease {
        if !q.desk.take_lease(name, Stage::Merged, None)? {
            return Ok(Some(None));
        }
        q.ctx.ui.note(&format!(
            "{} {}: its work is on origin at {commit}; closing it",
            q.desk.source(),
            item.id
        ));
        q.desk.close(item, name, &commit)?;
        let taken = Taken::new(item, name, Outcome::Completed);
        return Ok(Some(Some(taken)));
    }
    let pr_open = match lease {
        Some((Stage::PrOpen, _)) => true,
        _ if q.limits.pr => q.desk.tracker.find_pr(&format!("ralph/{name}"))?.is_some(),
        _ => false,
    };
    if pr_open && q.desk.take_lease(name, Stage::PrOpen, None)? {
        // The label a lost answer left off is put right; the pull request closes the item.
        q.desk.mark_pr_open(item)?;
        q.desk.set_lease(name, &Next::free(Stage::PrOpen))?;
        q.ctx.ui.note(&format!(
            "{} {}: its pull request is open already, next",
            q.desk.source(),
            item.id
        ));
    }
    Ok(pr_open.then_some(None))
}

/// The claimed item's worktree (from its branch as the team left it on origin, else the
/// queue's base), its task file, its branch pushed with its lease, then its loop on a thread
/// of its own and its lease's keeper. `None` when its lease was taken over meanwhile.
fn start(q: &mut Queue<'_>, item: &Item, name: &str) -> Result<Option<Running>> {
    let desk = &mut q.desk;
    let base = desk.base.clone().ok_or_else(|| {
        Error::user("the queue runs on a detached HEAD: there is no branch to merge items into")
    })?;
    // A commit the look at origin found, never the ref it was fetched into (another item's
    // agent can write `refs/remotes/origin/ralph/*` while this one is taken), and only where
    // the item's lease says its holder left it.
    let start_at = match desk.start_of(name) {
        Some(oid) => oid,
        None => format!("refs/heads/{base}"),
    };
    let wt = crate::worktree::for_item(&desk.repo, name, &start_at, &base, desk.ui)?;
    write_task_file(&wt.path, desk.source(), item, name)?;
    if desk.team.is_some() && publish::branch(desk, name)? == Published::Lost {
        return Ok(None);
    }
    q.ctx.ui.note(&format!(
        "{} {}: {} — worktree {} on branch {}",
        desk.source(),
        item.id,
        item.title,
        wt.path.display(),
        wt.branch
    ));
    let cancel = Cancel::new();
    let (tell, recorded) = std::sync::mpsc::channel();
    let keeper = match &desk.team {
        Some(team) => {
            let mine = team.mine.get(name).cloned().unwrap_or_default();
            Some(Keeper::start(
                team.leases.clone(),
                desk.repo.cli().clone(),
                name,
                mine,
                recorded,
                (cancel.clone(), desk.ui),
            )?)
        }
        None => None,
    };
    let link = Link {
        cancel: Some(cancel.clone()),
        recorded: Some(tell),
        elsewhere: desk.person_there(item),
    };
    let thread = spawn_loop(q, &wt.path, name, link)?;
    Ok(Some(Running {
        item: item.clone(),
        name: name.to_string(),
        cancel,
        keeper,
        thread,
    }))
}

/// Item `name`'s loop in its worktree at `root`, unattended, on a thread of its own that says
/// how it ended on the queue's channel — once, whatever happens to the loop.
fn spawn_loop(
    q: &Queue<'_>,
    root: &Path,
    name: &str,
    link: Link,
) -> Result<std::thread::JoinHandle<()>> {
    let inner = Context {
        cwd: root.to_path_buf(),
        ui: q.ctx.ui,
    };
    let rel = format!(".ralph/tasks/{name}.md");
    let mut options = q.options.clone();
    options.yes = true;
    let (words, who) = (q.words.clone(), name.to_string());
    // Loops running at once print in turn: each line says whose it is.
    let prefix = (q.limits.parallel > 1).then(|| format!("[{name}] "));
    std::thread::Builder::new()
        .name(format!("ralph-{name}"))
        .spawn(move || {
            crate::ui::set_line_prefix(prefix);
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                start_linked(&inner, &[rel], &options, false, Continuation::Reset, &link)
            }));
            // The link goes first: the keeper sees the loop ended.
            drop(link);
            let ended = ran.unwrap_or_else(|_| Err(Error::user("the item's loop panicked")));
            let _ = words.send((who, ended));
        })
        .map_err(|e| Error::io("failed to start the item's loop", e))
}

/// The item's task file in its worktree: kept when the branch has it asking exactly the item's
/// criteria (checked or not: a worker before this one got that far), else written and
/// committed as the first commit of the item's work — what was asked, as the record.
fn write_task_file(root: &Path, source: &str, item: &Item, name: &str) -> Result<()> {
    let rel = format!(".ralph/tasks/{name}.md");
    let path = root.join(&rel);
    let text = queue::task_file(source, item);
    let asked = |bytes: &[u8]| {
        crate::task::document::parse_task_bytes(Path::new(&rel), bytes)
            .ok()
            .map(|d| {
                d.checklist
                    .criteria
                    .into_iter()
                    .map(|c| c.text)
                    .collect::<Vec<_>>()
            })
    };
    let on_branch = crate::files::read_bytes(&path, crate::files::MAX_TEXT).ok();
    if on_branch.is_some_and(|b| asked(&b) == asked(text.as_bytes())) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        crate::files::create_dir_all(dir).map_err(|e| Error::file("create directory", dir, e))?;
    }
    crate::state::write_atomic(&path, text.as_bytes())?;
    Repo::discover(root)?.commit_paths(&[&rel], &format!("ralph: {source} {} task", item.id))?;
    Ok(())
}

/// One item's loop has ended: merged, published and closed, its pull request opened, or
/// released. `Some(code)` when its halt is not its own (an interrupt, the cost budget, the
/// waiting budget, an error): the queue takes no more items and ends with that code.
/// Whatever fails, the item is not left claimed.
pub(super) fn conclude(
    q: &mut Queue<'_>,
    done: Running,
    ended: Result<Ended>,
) -> Result<(Taken, Option<i32>)> {
    let Running {
        item,
        name,
        keeper,
        thread,
        ..
    } = done;
    let _ = thread.join();
    if let Some(kept) = keeper.and_then(Keeper::finish) {
        if let Some(team) = &mut q.desk.team {
            team.mine.insert(name.clone(), kept.mine);
        }
        if kept.lost {
            let why = "its lease was taken over by another worker".to_string();
            return Ok((Taken::new(&item, &name, Outcome::Released(why)), None));
        }
        if kept.lapsed {
            // The item's halt, not the queue's: released while its lease may still be this
            // worker's; after that, the next worker's to take over.
            let why = "its lease could not be renewed (origin out of reach)".to_string();
            let comment = format!("ralph: released — {why}; its work is on branch ralph/{name}");
            q.desk.release_lapsed(&item, &name, &comment, kept.until)?;
            return Ok((Taken::new(&item, &name, Outcome::Released(why)), None));
        }
    }
    let finished = q.desk.look().and_then(|()| finish(q, &item, &name, ended));
    let (outcome, stop) = match finished {
        Ok(ended) => ended,
        // Published, its close failed: the next worker that looks closes it.
        Err(e) if q.desk.close_pending(&name) => return Err(e),
        Err(e) => {
            let _ = q
                .desk
                .release(&item, &name, &format!("ralph: released — error: {e}"));
            return Err(e);
        }
    };
    if let Outcome::Released(why) = &outcome {
        let comment = format!("ralph: released — {why}; its work is on branch ralph/{name}");
        q.desk.release(&item, &name, &comment)?;
    }
    Ok((Taken::new(&item, &name, outcome), stop))
}

/// After the item's loop: merged, published and closed, or its pull request opened; else
/// `(Released(why), the queue's stop)`.
fn finish(
    q: &mut Queue<'_>,
    item: &Item,
    name: &str,
    ended: Result<Ended>,
) -> Result<(Outcome, Option<i32>)> {
    let ended = match ended {
        Ok(ended) => ended,
        Err(e) => return Ok((Outcome::Released(format!("error: {e}")), Some(exit::ERROR))),
    };
    if ended.code != exit::COMPLETE {
        let own = matches!(
            ended.code,
            exit::MAX_ITERATIONS
                | exit::STALLED
                | exit::STUCK
                | exit::TARGET_ONLY
                | exit::VERDICT_UNAVAILABLE
                | exit::TAMPERED
                | exit::PARTIAL
        );
        let halt = Outcome::Released(halt_words(&ended));
        return Ok((halt, (!own).then_some(ended.code)));
    }
    // A person's decision on the tracker stands: an item closed as not planned, or deleted,
    // while its loop ran is neither merged nor closed as completed.
    match q.desk.tracker.now(item)? {
        Now::NotPlanned => {
            let why = "completed, but not merged: a person closed the item as not planned";
            return Ok((Outcome::Released(why.to_string()), None));
        }
        Now::Gone => {
            let why = "completed, but not merged: the item is gone from the tracker";
            return Ok((Outcome::Released(why.to_string()), None));
        }
        Now::Open | Now::Completed => {}
    }
    // The tracker's files are the tracker's: a branch that changed them (an agent closing
    // items by editing `.beads/issues.jsonl`) is never merged, whatever else it holds.
    let base = q.desk.base.clone().unwrap_or_default();
    let touched = q.desk.repo.changed_on_branch(
        &format!("refs/heads/{base}"),
        &format!("ralph/{name}"),
        q.desk.tracker.own_paths(),
    )?;
    if !touched.is_empty() {
        let why = format!(
            "completed, but not merged: its branch changed the tracker's own files ({})",
            touched.join(", ")
        );
        return Ok((Outcome::Released(why), None));
    }
    if q.limits.pr {
        return Ok((open_pr(q, item, name), None));
    }
    merge_and_close(q, item, name)
}

/// Merged into the base branch, published on origin (when the team shares the tracker), closed.
fn merge_and_close(q: &mut Queue<'_>, item: &Item, name: &str) -> Result<(Outcome, Option<i32>)> {
    let base = q.desk.base.clone().unwrap_or_default();
    let before = q
        .desk
        .repo
        .cli()
        .run(&["rev-parse", &format!("refs/heads/{base}")], None)?;
    let before = String::from_utf8_lossy(&before).trim().to_string();
    let not_merged = |why: String| Ok((Outcome::Released(why), None));
    // Its loop ended complete (the caller saw it: `finish`), at once too — a branch a worker
    // before this one finished.
    match crate::worktree::merge_as(&q.desk.repo, name, true, q.ctx.ui) {
        Ok(exit::COMPLETE) => {}
        Ok(code) => return not_merged(format!("completed, but not merged (exit {code})")),
        Err(e) => return not_merged(format!("completed, but not merged: {e}")),
    }
    let commit = match publish::merged(&mut q.desk, name, &before)? {
        Published::Done(commit) => commit,
        Published::Conflict(files) => {
            return not_merged(format!(
                "completed, but not published: origin's `{base}` moved and conflicts in {} (exit {})",
                files.join(", "),
                exit::NOT_MERGED
            ));
        }
        Published::Lost => {
            let why = "completed, but its lease was taken over before it was published";
            return Ok((Outcome::Released(why.to_string()), None));
        }
        Published::Diverged(at) => return not_merged(diverged(name, &at)),
        Published::Busy => {
            return not_merged(format!(
                "completed, but not published: origin's `{base}` moved on each of its tries (its work is on its branch; the next worker merges it)"
            ));
        }
    };
    q.desk.close(item, name, &commit)?;
    Ok((Outcome::Completed, None))
}

/// `--pr`: the item marked, its branch pushed with its lease, and a pull request into the
/// branch the queue started from found or opened; the item stays open. `Released(why)` is the
/// item's halt.
fn open_pr(q: &mut Queue<'_>, item: &Item, name: &str) -> Outcome {
    match pr(q, item, name) {
        Ok(outcome) => outcome,
        Err(why) => Outcome::Released(why),
    }
}

fn pr(q: &mut Queue<'_>, item: &Item, name: &str) -> std::result::Result<Outcome, String> {
    let branch = format!("ralph/{name}");
    let base = q
        .desk
        .base
        .clone()
        .ok_or("completed, but no pull request: the queue runs on a detached HEAD")?;
    // The issue says so before anything is pushed: a pull request is never left open behind
    // an issue a later run would take again, nor a branch pushed for nothing.
    q.desk
        .mark_pr_open(item)
        .map_err(|e| format!("completed, but not marked for its pull request: {e}"))?;
    match publish::branch(&mut q.desk, name) {
        Ok(Published::Lost) => {
            return Err("completed, but its lease was taken over before it was pushed".into());
        }
        Ok(Published::Diverged(at)) => return Err(diverged(name, &at)),
        Ok(_) => {}
        Err(e) => return Err(format!("completed, but not pushed: {e}")),
    }
    let body = format!("ralph: {branch}, completed");
    let url = match q.desk.tracker.find_pr(&branch) {
        Ok(Some(url)) => url,
        _ => q
            .desk
            .tracker
            .open_pr(item, &branch, &base, &body)
            .map_err(|e| format!("completed and pushed, but no pull request: {e}"))?,
    };
    let lease = Next::free(Stage::PrOpen).with_note(&url);
    if let Err(e) = q.desk.set_lease(name, &lease) {
        q.ctx.ui.warn(&format!("{name}: {e}"));
    }
    q.ctx.ui.note(&format!(
        "{} {}: pull request {url}",
        q.desk.source(),
        item.id
    ));
    Ok(Outcome::PrOpen)
}

/// An item whose branch on origin has a commit its worker's branch lacks, in words.
fn diverged(name: &str, at: &str) -> String {
    format!(
        "completed, but not published: origin's ralph/{name} is at {at}, which this worker's branch does not have (pushed by someone not holding the item's lease)"
    )
}

/// A loop that did not complete, in the words of its halt.
fn halt_words(ended: &Ended) -> String {
    match ended.halt {
        Some(r) => format!("halted: {} (exit {})", HaltReason::as_str(r), ended.code),
        None => format!("halted (exit {})", ended.code),
    }
}

impl Taken {
    fn new(item: &Item, name: &str, outcome: Outcome) -> Taken {
        Taken {
            item: item.clone(),
            name: name.to_string(),
            outcome,
        }
    }
}
