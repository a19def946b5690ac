//! Leases on a queue's items (SPEC §15): which worker holds an item is decided on `origin` by a
//! compare-and-swap that exactly one worker wins — a push of the ref
//! `refs/ralph/leases/<loop name>` with `--force-with-lease` naming the value the worker last
//! saw (nothing, for an item never taken), which `git receive-pack` checks under the ref's
//! lock. The ref points to a commit of the empty tree whose message is the lease: its stage,
//! its worker and, while it is held, the time it runs out. Each change of the item a worker
//! makes moves the ref, so the ref's history on origin is the team's log of the item, and a
//! worker tells a change made by the team from one made outside it by whether the ref moved.
//! The item's branch `ralph/<loop name>` is pushed in the same atomic push as a renewal, so a
//! worker whose lease was taken over can no longer publish anything.
//!
//! Labels and assignees on the tracker are for people; the lease decides.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::git::cli::GitCli;

mod push;
mod record;

use push::pushed;
pub(crate) use push::{BranchPush, Expect, Pushed, Update};
pub(crate) use record::{Clock, Lease, Next, Stage};
use record::{nonce, one_line, parse, render};

/// Where the leases live on origin.
const ON_ORIGIN: &str = "refs/ralph/leases/";
/// Where a fetch puts origin's leases in the worker's repository.
const SEEN: &str = "refs/ralph/origin/leases/";
/// A push that could not reach origin is tried this many times.
const TRIES: u32 = 3;

/// What a compare-and-swap came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Swap {
    /// The lease is now this commit (and the branch, if any, is pushed).
    Won(String),
    /// Origin had another lease: another worker changed it first.
    Lost,
    /// The lease is still this worker's, but origin's branch is at this commit, which the
    /// worker's branch does not have: someone not holding the lease pushed it. Nothing moved.
    Diverged(String),
}

/// Which of an item's refs origin no longer has as a refused push expected them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Moved {
    /// Its lease: another worker's now.
    Lease,
    /// Only its branch: to a commit the worker's branch has (an agent pushing the work it
    /// was given), or away; the push to make instead.
    Branch(BranchPush),
    /// Only its branch, to this commit, which the worker's branch lacks.
    Diverged(String),
    /// Neither (another ref of the push moved, or a race origin settled meanwhile).
    Neither,
}

/// One worker's view of the leases on a remote.
#[derive(Debug, Clone)]
pub(crate) struct Leases {
    git: GitCli,
    remote: String,
    pub(crate) worker: String,
    pub(crate) duration: Duration,
    clock: Clock,
    /// The tracker whose items these leases are (`github:O/R`): written in each.
    pub(crate) tracker: String,
}

/// What one look at origin found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    /// Every item's lease, by loop name.
    pub(crate) leases: BTreeMap<String, Lease>,
    /// Origin's `ralph/*` branches, by loop name: their tips.
    pub(crate) branches: BTreeMap<String, String>,
    /// Origin's base branch tip.
    pub(crate) base: Option<String>,
    /// Lease refs whose commit is no lease ralph can read (forced by hand, or a format this
    /// ralph does not know), by loop name: their commits. Never taken over blindly.
    pub(crate) unreadable: BTreeMap<String, String>,
}

/// What origin lists, before the leases are read: commits by loop name.
#[derive(Debug, Default)]
struct Listed {
    leases: BTreeMap<String, String>,
    branches: BTreeMap<String, String>,
    base: Option<String>,
}

impl Leases {
    pub(crate) fn new(git: GitCli, remote: &str, worker: &str, duration: Duration) -> Leases {
        Leases {
            git,
            remote: remote.to_string(),
            worker: worker.to_string(),
            duration,
            clock: Clock::default(),
            tracker: String::new(),
        }
    }

    /// Leases of `tracker`'s items (`github:O/R`): one origin may serve two trackers whose
    /// items have the same number, and so the same lease and branch names.
    pub(crate) fn for_tracker(mut self, tracker: &str) -> Leases {
        self.tracker = one_line(tracker);
        self
    }

    /// Leases read and written by `clock` (the tracker's).
    pub(crate) fn with_clock(mut self, clock: Clock) -> Leases {
        self.clock = clock;
        self
    }

    /// Now, by the team's clock: what a lease's `Until` is compared with.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub(crate) fn remote(&self) -> &str {
        &self.remote
    }

    /// Origin's leases, its `ralph/*` branches and its base branch: what they are, as origin
    /// lists them (`ls-remote`), their commits fetched. Never read back from the refs the fetch
    /// writes: those are in the shared git directory, where an agent (another item's, while
    /// this one is taken) can rewrite them; a commit is what its id says.
    pub(crate) fn look(&self, base: &str) -> Result<Seen> {
        for _ in 0..TRIES {
            let seen = self.listed(base)?;
            self.fetch(base)?;
            let oids: Vec<&String> = seen
                .leases
                .values()
                .chain(seen.branches.values())
                .chain(seen.base.iter())
                .collect();
            let stdin: String = oids.iter().map(|o| format!("{o}\n")).collect();
            let have = self
                .git
                .run(&["cat-file", "--batch-check"], Some(stdin.as_bytes()))?;
            // Origin moved between the listing and the fetch: listed again.
            if String::from_utf8_lossy(&have).contains(" missing") {
                continue;
            }
            return self.read_leases(seen);
        }
        Err(Error::user(format!(
            "`{}` moved its leases on each of {TRIES} looks",
            self.remote
        )))
    }

    /// What origin lists: each lease's and branch's commit, and the base's; the leases not
    /// read yet (their `oid` only).
    fn listed(&self, base: &str) -> Result<Listed> {
        let base_ref = format!("refs/heads/{base}");
        let leases = format!("{ON_ORIGIN}*");
        let args = [
            "ls-remote",
            "--",
            self.remote.as_str(),
            &leases,
            "refs/heads/ralph/*",
            &base_ref,
        ];
        let out = self.with_tries(|| self.git.run(&args, None))?;
        let mut seen = Listed::default();
        for line in String::from_utf8_lossy(&out).lines() {
            let Some((oid, name)) = line.split_once('\t') else {
                continue;
            };
            if let Some(item) = name.strip_prefix(ON_ORIGIN) {
                seen.leases.insert(item.to_string(), oid.to_string());
            } else if let Some(item) = name.strip_prefix("refs/heads/ralph/") {
                seen.branches.insert(item.to_string(), oid.to_string());
            } else if name == base_ref {
                seen.base = Some(oid.to_string());
            }
        }
        Ok(seen)
    }

    /// One fetch of origin's leases, its `ralph/*` branches and its base branch (into
    /// `refs/ralph/origin/leases/*` and `refs/remotes/origin/…`, for people and for merges).
    fn fetch(&self, base: &str) -> Result<()> {
        let remote = &self.remote;
        let specs = [
            format!("+{ON_ORIGIN}*:{SEEN}*"),
            format!("+refs/heads/ralph/*:refs/remotes/{remote}/ralph/*"),
            format!("+refs/heads/{base}:refs/remotes/{remote}/{base}"),
        ];
        let mut args = vec![
            "fetch",
            "--quiet",
            "--no-tags",
            "--prune",
            "--no-write-fetch-head",
            "--",
            remote.as_str(),
        ];
        args.extend(specs.iter().map(String::as_str));
        self.with_tries(|| self.git.run(&args, None).map(drop))
    }

    /// The leases `listed`, each read from its commit (by id): a commit that is no lease is
    /// left out.
    fn read_leases(&self, listed: Listed) -> Result<Seen> {
        let mut seen = Seen {
            leases: BTreeMap::new(),
            branches: listed.branches,
            base: listed.base,
            unreadable: BTreeMap::new(),
        };
        if listed.leases.is_empty() {
            return Ok(seen);
        }
        let stdin: String = listed.leases.values().map(|o| format!("{o}\n")).collect();
        // Each commit with its message, in one command: `OID\0MESSAGE\0`.
        let out = self.git.run(
            &[
                "log",
                "--no-walk=unsorted",
                "--stdin",
                "--format=%H%x00%B%x00",
            ],
            Some(stdin.as_bytes()),
        )?;
        let text = String::from_utf8_lossy(&out);
        let mut fields = text.split('\0');
        let mut messages = BTreeMap::new();
        while let (Some(oid), Some(message)) = (fields.next(), fields.next()) {
            messages.insert(oid.trim().to_string(), message.to_string());
        }
        for (item, oid) in listed.leases {
            match messages.get(&oid).and_then(|m| parse(&oid, m)) {
                Some(lease) => drop(seen.leases.insert(item, lease)),
                None => drop(seen.unreadable.insert(item, oid)),
            }
        }
        Ok(seen)
    }

    /// Compare-and-swap item `name`'s lease on origin from `from` (`None`: no lease there) to
    /// `next`, with its branch in the same atomic push.
    /// A refusal of the branch alone is not a lost lease: origin's branch moved to a commit
    /// the worker's branch has (its agent pushed its own work) is caught up with.
    pub(crate) fn swap(
        &self,
        name: &str,
        from: Option<&str>,
        next: &Next,
        branch: Option<&BranchPush>,
    ) -> Result<Swap> {
        let mut branch = branch.cloned();
        for _ in 0..TRIES {
            let mut next = next.clone();
            if let Some(b) = &branch {
                next.branch = Some(b.tip.clone());
            }
            let (update, oid) = self.lease_update(name, from, &next)?;
            let mut updates = vec![update];
            updates.extend(branch.as_ref().map(BranchPush::update));
            let pushed = self.push(&updates)?;
            if pushed.refused.is_empty() {
                return Ok(Swap::Won(oid));
            }
            if !pushed.lost() {
                return Err(pushed.refusal(&self.remote));
            }
            match self.what_moved(name, from, branch.as_ref())? {
                Moved::Lease => return Ok(Swap::Lost),
                Moved::Branch(b) => branch = Some(b),
                Moved::Diverged(at) => return Ok(Swap::Diverged(at)),
                Moved::Neither => {}
            }
        }
        Err(Error::user(format!(
            "`{}` refused the lease of {name} on each of {TRIES} tries",
            self.remote
        )))
    }

    /// Item `name`'s lease on origin now (`None`: none there).
    pub(crate) fn on_origin(&self, name: &str) -> Result<Option<String>> {
        let lease_ref = format!("{ON_ORIGIN}{name}");
        let args = ["ls-remote", "--", self.remote.as_str(), &lease_ref];
        let out = self.with_tries(|| self.git.run(&args, None))?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(_, r)| *r == lease_ref)
            .map(|(oid, _)| oid.to_string()))
    }

    /// After a push of item `name`'s lease (expected at `lease`) with its `branch` was refused
    /// as moved: which of them origin has otherwise now.
    pub(crate) fn what_moved(
        &self,
        name: &str,
        lease: Option<&str>,
        branch: Option<&BranchPush>,
    ) -> Result<Moved> {
        let lease_ref = format!("{ON_ORIGIN}{name}");
        let branch_ref = branch.map(|b| format!("refs/heads/{}", b.branch));
        let mut args = vec!["ls-remote", "--", self.remote.as_str(), &lease_ref];
        args.extend(branch_ref.as_deref());
        let out = self.with_tries(|| self.git.run(&args, None))?;
        let text = String::from_utf8_lossy(&out);
        let at = |r: &str| {
            text.lines()
                .filter_map(|l| l.split_once('\t'))
                .find(|(_, name)| *name == r)
                .map(|(oid, _)| oid.to_string())
        };
        if at(&lease_ref).as_deref() != lease {
            return Ok(Moved::Lease);
        }
        let (Some(b), Some(r)) = (branch, &branch_ref) else {
            return Ok(Moved::Neither);
        };
        let there = at(r);
        if there == b.on_origin {
            return Ok(Moved::Neither);
        }
        match there {
            Some(t) if !self.descends(&b.tip, &t, r)? => Ok(Moved::Diverged(t)),
            there => Ok(Moved::Branch(BranchPush {
                on_origin: there,
                ..b.clone()
            })),
        }
    }

    /// Whether commit `tip` has commit `from` (origin's `remote_ref`, fetched when this
    /// repository lacks it).
    fn descends(&self, tip: &str, from: &str, remote_ref: &str) -> Result<bool> {
        let object = format!("{from}^{{commit}}");
        if self.git.run(&["cat-file", "-e", &object], None).is_err() {
            let args = [
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
                self.remote.as_str(),
                remote_ref,
            ];
            self.with_tries(|| self.git.run(&args, None).map(drop))?;
        }
        let out = self
            .git
            .output(&["merge-base", "--is-ancestor", from, tip], None)?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(Error::user(format!(
                "git merge-base --is-ancestor {from} {tip}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }

    /// The update that moves item `name`'s lease from `from` to `next`, and the new lease.
    pub(crate) fn lease_update(
        &self,
        name: &str,
        from: Option<&str>,
        next: &Next,
    ) -> Result<(Update, String)> {
        let oid = self.write(name, from, next)?;
        let update = Update {
            src: oid.clone(),
            dst: format!("{ON_ORIGIN}{name}"),
            expect: Expect::Is(from.map(str::to_string)),
        };
        Ok((update, oid))
    }

    /// One atomic push of `updates` to origin: all of them, or none (`refused` names each ref
    /// origin refused, with git's reason). Tried again while origin cannot be reached.
    pub(crate) fn push(&self, updates: &[Update]) -> Result<Pushed> {
        let mut args: Vec<String> = ["push", "--porcelain", "--atomic"]
            .map(String::from)
            .to_vec();
        for u in updates {
            if let Expect::Is(was) = &u.expect {
                args.push(format!(
                    "--force-with-lease={}:{}",
                    u.dst,
                    was.as_deref().unwrap_or("")
                ));
            }
        }
        args.extend(["--".to_string(), self.remote.clone()]);
        args.extend(updates.iter().map(|u| format!("{}:{}", u.src, u.dst)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.with_tries(|| {
            let out = self.git.output(&args, None)?;
            pushed(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| crate::git::GitError::Cli {
                command: format!("git {}", args.join(" ")),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        })
    }

    /// The lease commit for `next`, written in the worker's repository; its parent the lease
    /// it replaces (`from`), so the ref's log on origin is the item's history.
    fn write(&self, name: &str, from: Option<&str>, next: &Next) -> Result<String> {
        let empty = self.git.run(&["mktree"], Some(b""))?;
        let empty = String::from_utf8_lossy(&empty).trim().to_string();
        let until = next.hold.then(|| {
            let d = chrono::Duration::from_std(self.duration).unwrap_or(chrono::Duration::MAX);
            self.clock.now() + d
        });
        let message = render(name, (&self.worker, &self.tracker), next, until, &nonce());
        let mut args = vec![
            "-c",
            "user.name=ralph",
            "-c",
            "user.email=ralph@localhost",
            "commit-tree",
            &empty,
            "-m",
            &message,
        ];
        // A parent this repository lacks (never fetched) is left out: the lease still counts.
        let parent = from.filter(|p| {
            let object = format!("{p}^{{commit}}");
            self.git.run(&["cat-file", "-e", &object], None).is_ok()
        });
        if let Some(p) = parent {
            args.extend(["-p", p]);
        }
        let out = self.git.run(&args, None)?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// `f`, tried again when origin could not be reached (a pause between tries); its last
    /// error names the command.
    fn with_tries<T>(&self, f: impl Fn() -> Result<T, crate::git::GitError>) -> Result<T> {
        let mut pause = Duration::from_millis(500);
        let mut tries = 1;
        loop {
            match f() {
                Ok(t) => return Ok(t),
                Err(e) if tries >= TRIES => {
                    return Err(Error::user(format!(
                        "cannot reach `{}` for the queue's leases ({tries} tries): {e}",
                        self.remote
                    )));
                }
                Err(_) => {
                    std::thread::sleep(pause);
                    pause *= 2;
                    tries += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_reads_back_as_written() {
        let until = DateTime::parse_from_rfc3339("2026-12-07T12:30:00.250Z")
            .unwrap()
            .with_timezone(&Utc);
        let next = Next::held(Stage::Merged)
            .with_commit("abc123")
            .with_note("line one\nline two");
        let m = render(
            "github-3",
            ("host-1", "github:o/r"),
            &next,
            Some(until),
            "00ff",
        );
        let l = parse("oid", &m).unwrap();
        assert_eq!(l.stage, Stage::Merged);
        assert_eq!(l.worker, "host-1");
        assert_eq!(l.until, Some(until));
        assert_eq!(l.commit.as_deref(), Some("abc123"));
        assert_eq!(l.note.as_deref(), Some("line one line two"));
        assert_eq!(l.tracker.as_deref(), Some("github:o/r"));
        assert!(l.held(until - chrono::Duration::seconds(1)));
        assert!(!l.held(until));
        let free = parse(
            "oid",
            &render("x", ("w", ""), &Next::free(Stage::Released), None, "1"),
        )
        .unwrap();
        assert!(!free.held(Utc::now()));
        assert_eq!(parse("oid", "Merge branch 'x'\n"), None);
        assert_eq!(
            parse("oid", "ralph lease x: bogus\n\nStage: bogus\nWorker: w\n"),
            None
        );
    }

    #[test]
    fn porcelain_tells_a_push_from_a_refusal_and_from_no_answer() {
        let ok = "To /o.git\n*\tabc:refs/ralph/leases/x\t[new reference]\nDone\n";
        assert_eq!(pushed(ok), Some(Pushed::default()));
        let refused = "To /o.git\n!\tabc:refs/ralph/leases/x\t[rejected] (stale info)\n!\tdef:refs/heads/ralph/x\t[rejected] (atomic push failed)\nDone\n";
        assert_eq!(
            pushed(refused).unwrap().refused,
            [
                (
                    "refs/ralph/leases/x".to_string(),
                    "[rejected] (stale info)".to_string()
                ),
                (
                    "refs/heads/ralph/x".to_string(),
                    "[rejected] (atomic push failed)".to_string()
                )
            ]
        );
        let same = "To /o.git\n=\tabc:refs/heads/ralph/x\t[up to date]\n \tdef:refs/ralph/leases/x\t1..2\nDone\n";
        assert_eq!(pushed(same), Some(Pushed::default()));
        assert_eq!(pushed(""), None);
    }

    /// `git ARGS` in `dir`, reading no configuration of the user's; its stdout.
    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A bare origin with branch `main`, and `n` clones of it, each a worker's leases.
    fn workers(n: usize) -> (tempfile::TempDir, Vec<Leases>) {
        let d = tempfile::tempdir().unwrap();
        let origin = d.path().join("origin.git");
        git(
            d.path(),
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                origin.to_str().unwrap(),
            ],
        );
        let seed = d.path().join("seed");
        git(
            d.path(),
            &[
                "clone",
                "-q",
                origin.to_str().unwrap(),
                seed.to_str().unwrap(),
            ],
        );
        git(&seed, &["commit", "-q", "--allow-empty", "-m", "first"]);
        git(&seed, &["push", "-q", "origin", "HEAD:main"]);
        let leases = (0..n)
            .map(|i| {
                let c = d.path().join(format!("w{i}"));
                git(
                    d.path(),
                    &["clone", "-q", origin.to_str().unwrap(), c.to_str().unwrap()],
                );
                let cli = GitCli::new(&c.join(".git"), &c);
                Leases::new(cli, "origin", &format!("w{i}"), Duration::from_secs(60))
            })
            .collect();
        (d, leases)
    }

    #[test]
    fn of_workers_taking_a_free_item_at_once_exactly_one_wins() {
        let (_d, ws) = workers(4);
        let won: Vec<bool> = std::thread::scope(|s| {
            let tries: Vec<_> = ws
                .iter()
                .map(|w| s.spawn(|| w.swap("github-1", None, &Next::held(Stage::Working), None)))
                .collect();
            tries
                .into_iter()
                .map(|t| matches!(t.join().unwrap().unwrap(), Swap::Won(_)))
                .collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
        let winner = won.iter().position(|w| *w).unwrap();
        // Every worker, the losers too, now sees the winner's lease, held.
        for w in &ws {
            let seen = w.look("main").unwrap();
            let l = &seen.leases["github-1"];
            assert_eq!(l.worker, format!("w{winner}"));
            assert_eq!(l.stage, Stage::Working);
            assert!(l.held(Utc::now()));
            assert!(seen.base.is_some());
        }
    }

    #[test]
    fn a_stale_lease_loses_and_fences_its_branch() {
        let (_d, ws) = workers(2);
        let Swap::Won(first) = ws[0]
            .swap("github-2", None, &Next::held(Stage::Working), None)
            .unwrap()
        else {
            panic!("the first take")
        };
        // Another worker takes it over from the lease it saw (as after an expiry).
        let seen = ws[1].look("main").unwrap();
        let taken = ws[1]
            .swap(
                "github-2",
                Some(&seen.leases["github-2"].oid),
                &Next::held(Stage::Working),
                None,
            )
            .unwrap();
        assert!(matches!(taken, Swap::Won(_)));
        // The first worker's renewal, with its branch in the same push, is refused whole: its
        // branch never reaches origin.
        let tip = ws[0].git.run(&["rev-parse", "HEAD"], None).unwrap();
        let branch = BranchPush {
            branch: "ralph/github-2".to_string(),
            tip: String::from_utf8_lossy(&tip).trim().to_string(),
            on_origin: None,
        };
        let renewed = ws[0]
            .swap(
                "github-2",
                Some(&first),
                &Next::held(Stage::Working),
                Some(&branch),
            )
            .unwrap();
        assert_eq!(renewed, Swap::Lost);
        let seen = ws[0].look("main").unwrap();
        assert!(
            !seen.branches.contains_key("github-2"),
            "{:?}",
            seen.branches
        );
        assert_eq!(seen.leases["github-2"].worker, "w1");
    }
}
