//! `ralph run --from SOURCE` (SPEC §14, §15): take the first ready item, claim it, run the loop
//! on its task file in worktree `ralph/<source>-<id>`, merge back on exit 0 and close the item;
//! release a halted item with a comment naming the halt (its branch kept) and go on; stop when
//! nothing is ready, after `--max-tasks` items, or on a halt that is not the item's own.
//!
//! The rooms: `desk` (the one place a tracker change is made, committed, recorded and — for a
//! tracker workers share — carried by the item's lease on origin), `ledger` (each item's
//! standing, put back when changed outside ralph's workers), `item` (one item from take to
//! close or release), `keeper` (an item's lease renewed and its branch pushed while its loop
//! runs), `publish` (an item's work pushed where readers see it). Each item's loop runs on a
//! thread of its own and hands back a typed [`Ended`] on one channel; each has a
//! [`Cancel`] the queue stops it with.

mod claims;
mod desk;
mod item;
mod keeper;
mod ledger;
mod publish;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use super::Ended;
use crate::cli::RunOptions;
use crate::commands::Context;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::queue::lease::Leases;
use crate::queue::{self, Item, Tracker};
use crate::signals::{Background, Cancel};
use crate::ui::Ui;
use desk::{Desk, Team};
use item::{Took, conclude, take_next};
use keeper::Keeper;

/// What became of one item.
struct Taken {
    item: Item,
    name: String,
    outcome: Outcome,
}

/// How an item this run took ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Merged (published on origin when the team shares the tracker) and closed.
    Completed,
    /// `--pr`: its pull request is open and the item with it.
    PrOpen,
    /// Open again (or left to the worker that took its lease over), with why.
    Released(String),
}

impl Taken {
    /// The item's `queue_item` event for `--json`.
    fn event(&self, source: &'static str) -> crate::event::Event {
        let (outcome, why) = match &self.outcome {
            Outcome::Completed => ("completed", None),
            Outcome::PrOpen => ("pr-open", None),
            Outcome::Released(why) => ("released", Some(why.clone())),
        };
        crate::event::Event::QueueItem(crate::event::QueueItem {
            source,
            id: self.item.id.clone(),
            title: self.item.title.clone(),
            outcome,
            branch: format!("ralph/{}", self.name),
            why,
        })
    }
}

/// How a queue runs: `--parallel`, `--max-tasks`, `--pr`, and a worker's name and lease.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    pub(super) parallel: usize,
    pub(super) max_tasks: Option<usize>,
    /// A completed item's branch is pushed and a pull request opened instead of a merge.
    pub(super) pr: bool,
    /// `--worker-id` (default `<hostname>-<pid>`).
    pub(super) worker: Option<String>,
    /// `--lease` (else config `lease`, else 10 minutes).
    pub(super) lease: Option<Duration>,
}

/// The lease of an item when neither `--lease` nor the configuration names one.
const DEFAULT_LEASE: Duration = Duration::from_secs(600);

/// An item whose loop runs on a thread of its own.
struct Running {
    item: Item,
    name: String,
    /// Stops its loop as a Ctrl-C would.
    cancel: Cancel,
    /// Its lease's keeper (a team's tracker only).
    keeper: Option<Keeper>,
    thread: std::thread::JoinHandle<()>,
}

/// Word from an item's thread: its loop name and how its loop ended.
type Word = (String, Result<Ended>);

/// The queue run: up to `parallel` loops at once, merges one at a time; the items it took,
/// each completed or released; its exit code.
pub(super) fn from_queue(
    ui: Ui,
    dir: Option<&Path>,
    spec: &str,
    limits: Limits,
    options: &RunOptions,
) -> Result<i32> {
    let ctx = Context::new(dir, ui)?;
    let repo = Repo::discover(&ctx.cwd)?;
    if repo.is_dirty()? {
        return Err(Error::user(
            "the work tree has uncommitted changes: each item's work merges into this branch",
        )
        .with_hint("commit or stash them first"));
    }
    let limits = configured(&repo, limits)?;
    let base = crate::worktree::current_branch(&repo);
    let origin = repo.config_value("remote.origin.url");
    let max_wait = options
        .max_wait
        .map_or(crate::config::DEFAULT_MAX_WAIT, Into::into);
    let mut tracker = queue::open(spec, repo.root(), origin.as_deref(), max_wait)?;
    if limits.pr && !tracker.has_pull_requests() {
        return Err(Error::usage(format!(
            "--pr opens pull requests, and --from {spec} has none"
        ))
        .with_hint("run without --pr: each completed item merges here and is closed"));
    }
    let team = team(&repo, &*tracker, base.as_deref(), &limits)?;
    if limits.parallel > 1 {
        crate::live::LiveView::share_terminal();
    }
    // Counted between items too: a Ctrl-C while nothing runs still stops the queue.
    let interrupts =
        Background::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
    tracker.hurry_on(interrupts.clone());
    let desk = Desk::new(ui, repo, tracker, base, team)?;
    let (tell, words) = std::sync::mpsc::channel();
    let mut q = Queue {
        ctx,
        desk,
        options,
        limits,
        seen: HashSet::new(),
        taken: Vec::new(),
        running: BTreeMap::new(),
        started: 0,
        stop: None,
        failure: None,
        words: tell,
    };
    q.run(&interrupts, &words);
    report_memory(q.taken.len());
    if interrupts.count() > 0 {
        q.stop.get_or_insert(exit::INTERRUPTED);
    }
    let code = report(ui, &*q.desk.tracker, &q.taken, q.stop);
    match q.failure {
        // An error while the queue was being stopped (a request cut short) ends as the stop.
        Some(e) if interrupts.count() > 0 => {
            ui.warn(&e.to_string());
            Ok(exit::INTERRUPTED)
        }
        Some(e) => Err(e),
        None => Ok(code),
    }
}

/// With `RALPH_REPORT_MEMORY` set (benchmarks and tests, issue 32), one line after the last
/// item: what the queue still holds of its items — running file watchers, the process's
/// threads — and its anonymous resident memory, so growth per item shows as a count.
/// Written even under `--quiet`, to stderr.
fn report_memory(items: usize) {
    if std::env::var_os("RALPH_REPORT_MEMORY").is_none() {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map_or("?", |v| v.trim().trim_end_matches(" kB"))
            .to_string()
    };
    eprintln!(
        "ralph: memory after {items} items: watchers {}, threads {}, RssAnon {} KiB",
        crate::git::watch::Watch::running(),
        field("Threads:"),
        field("RssAnon:")
    );
}

/// The queue's own configuration keys: `lease` (unless `--lease` gave one) and `pass_env`,
/// which only the user's own configuration sets — the agent can write the repository's.
fn configured(repo: &Repo, mut limits: Limits) -> Result<Limits> {
    let layers = crate::config::file_layers(&crate::state::RalphDir::new(repo.root()).path, None)?;
    for s in &layers {
        if let Some(names) = &s.layer.pass_env {
            if s.from_repo {
                return Err(Error::user(format!(
                    "{}: `pass_env` is not taken from the repository (the agent can write it)",
                    s.name
                ))
                .with_hint("set it in ~/.config/ralph/config.toml"));
            }
            crate::proc::withheld::pass(names);
        }
        if limits.lease.is_none()
            && let Some(text) = &s.layer.lease
        {
            let d = humantime::parse_duration(text.trim()).map_err(|e| {
                Error::user(format!("{}: `lease = \"{text}\"`: {e}", s.name))
                    .with_hint("write a duration such as `10m` or `90s`")
            })?;
            limits.lease = Some(d);
        }
    }
    if limits.lease.is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(Error::usage("a lease is at least 1s"));
    }
    Ok(limits)
}

/// The workers sharing a tracker (SPEC §15): this one's leases on `origin`, which must have the
/// queue's base branch. `None` for a tracker of this machine's alone.
fn team(
    repo: &Repo,
    tracker: &dyn Tracker,
    base: Option<&str>,
    limits: &Limits,
) -> Result<Option<Team>> {
    if !tracker.shared() {
        return Ok(None);
    }
    let source = tracker.source();
    let Some(base) = base else {
        return Err(Error::user(format!(
            "--from {source}: the work tree is on a detached HEAD: there is no branch to merge items into"
        ))
        .with_hint("check out the branch the queue's work goes to"));
    };
    if repo.config_value("remote.origin.url").is_none() {
        return Err(Error::user(format!(
            "--from {source}: there is no remote `origin`: each item's work and its lease go there, where the tracker's readers and the other workers see them"
        ))
        .with_hint("run the queue in a clone of the repository"));
    }
    let worker = limits.worker.clone().unwrap_or_else(default_worker);
    let duration = limits.lease.unwrap_or(DEFAULT_LEASE);
    let leases = Leases::new(repo.cli().clone(), "origin", &worker, duration)
        .with_clock(tracker.clock().unwrap_or_default())
        .for_tracker(&tracker.name());
    let seen = leases.look(base).map_err(|e| {
        Error::user(format!(
            "--from {source}: origin's `{base}` cannot be fetched: {e}"
        ))
        .with_hint(format!(
            "push `{base}` to origin first: git push origin {base}"
        ))
    })?;
    if seen.base.is_none() {
        return Err(Error::user(format!("origin has no branch `{base}`"))
            .with_hint(format!("push it first: git push origin {base}")));
    }
    Ok(Some(Team {
        leases,
        seen,
        mine: BTreeMap::new(),
        held_against: BTreeMap::new(),
    }))
}

/// `<hostname>-<pid>`.
fn default_worker() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .map(|h| h.to_string_lossy().into_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_string());
    format!("{host}-{}", std::process::id())
}

/// A queue run under way.
struct Queue<'a> {
    ctx: Context,
    desk: Desk,
    options: &'a RunOptions,
    limits: Limits,
    /// Items taken in this run, never taken twice.
    seen: HashSet<String>,
    taken: Vec<Taken>,
    running: BTreeMap<String, Running>,
    started: usize,
    /// The exit code of a halt that is not an item's own: no item is taken after it.
    stop: Option<i32>,
    failure: Option<Error>,
    /// Where each item's thread says how its loop ended.
    words: Sender<Word>,
}

impl Queue<'_> {
    /// Fill, then settle each loop as it ends, until nothing runs.
    fn run(&mut self, interrupts: &Background, words: &Receiver<Word>) {
        loop {
            self.fill(interrupts);
            if self.running.is_empty() {
                return;
            }
            // Every running item's thread sends its word once, whatever happens to its loop.
            let Ok((name, ended)) = words.recv() else {
                return;
            };
            if interrupts.count() > 0 {
                self.desk.tracker.hurry();
            }
            if let Some(done) = self.running.remove(&name) {
                self.settle(done, ended);
            }
        }
    }

    /// Start loops until `--parallel` run, `--max-tasks` were taken, nothing is ready, or
    /// the queue stops.
    fn fill(&mut self, interrupts: &Background) {
        while self.stop.is_none()
            && interrupts.count() == 0
            && self.running.len() < self.limits.parallel.max(1)
            && self.limits.max_tasks.is_none_or(|m| self.started < m)
        {
            match take_next(self) {
                Ok(Took::Running(r)) => {
                    self.running.insert(r.name.clone(), r);
                    self.started += 1;
                }
                Ok(Took::Settled(t)) => {
                    self.started += 1;
                    self.record(t, None);
                }
                Ok(Took::Nothing) => break,
                Err(e) => self.fail(e),
            }
        }
    }

    /// One loop ended: its item merged and closed, or released.
    fn settle(&mut self, done: Running, ended: Result<Ended>) {
        match conclude(self, done, ended) {
            Ok((taken, halt)) => self.record(taken, halt),
            Err(e) => self.fail(e),
        }
    }

    fn record(&mut self, taken: Taken, halt: Option<i32>) {
        let event = taken.event(self.desk.source());
        self.ctx.ui.event(&event.line_now());
        self.taken.push(taken);
        if let Some(code) = halt {
            self.stop.get_or_insert(code);
        }
    }

    /// An error: no item is taken after it, and the queue never returns while loops run —
    /// each is stopped as a Ctrl-C would stop it, and its item released as it ends.
    fn fail(&mut self, e: Error) {
        if self.failure.is_none() {
            for r in self.running.values() {
                r.cancel.stop();
            }
        }
        self.stop = Some(exit::ERROR);
        self.failure.get_or_insert(e);
    }
}

/// What the queue did, item by item; the exit code: a halt that stopped it, else 9 when any
/// item was released, else 0.
fn report(ui: Ui, tracker: &dyn Tracker, taken: &[Taken], stopped: Option<i32>) -> i32 {
    let source = tracker.source();
    let released = taken
        .iter()
        .filter(|t| matches!(t.outcome, Outcome::Released(_)))
        .count();
    let code = match stopped {
        Some(code) => code,
        None if released > 0 => exit::PARTIAL,
        None => exit::COMPLETE,
    };
    let nothing_ready = taken.is_empty() && stopped.is_none();
    ui.event(
        &crate::event::Event::QueueFinished(crate::event::QueueFinished {
            source,
            taken: taken.len(),
            completed: taken.len() - released,
            released,
            nothing_ready,
            exit_code: code,
        })
        .line_now(),
    );
    if nothing_ready {
        ui.plain(&format!("{source}: nothing is ready"));
        return code;
    }
    ui.plain(&format!("## {source}: {} item(s) taken", taken.len()));
    for t in taken {
        let (id, title, name) = (&t.item.id, &t.item.title, &t.name);
        ui.plain(&match &t.outcome {
            Outcome::PrOpen => format!(
                "🔀 {id} {title}: completed, pull request opened from ralph/{name} (the item stays open)"
            ),
            Outcome::Completed => {
                format!("✅ {id} {title}: completed, merged and closed (ralph/{name})")
            }
            Outcome::Released(why) => {
                format!("↩️ {id} {title}: released — {why} (branch ralph/{name})")
            }
        });
    }
    code
}
