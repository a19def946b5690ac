//! `ralph run --from SOURCE` (SPEC §14): take the first ready item, claim it, run the loop on
//! its task file in worktree `ralph/<source>-<id>`, merge back on exit 0 and close the item;
//! release a halted item with a comment naming the halt (its branch kept) and go on; stop when
//! nothing is ready, after `--max-tasks` items, or on a halt that is not the item's own.
//! `item` is one item's way from claim to close or release, `ledger` what ralph knows of the
//! tracker's items.

mod item;
mod ledger;

use std::collections::HashSet;
use std::path::Path;

use crate::cli::RunOptions;
use crate::commands::Context;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::queue::{self, Item, Tracker};
use crate::ui::Ui;
use item::{conclude, next_finished, take_next};
use ledger::Ledger;

/// What became of one item.
struct Taken {
    item: Item,
    name: String,
    /// Closed after its merge (or its pull request opened); else released, with why.
    released: Option<String>,
    /// `--pr`: its pull request is open and the item with it.
    pr_open: bool,
}

impl Taken {
    /// The item's `queue_item` event for `--json`.
    fn event(&self, source: &'static str) -> crate::event::Event {
        crate::event::Event::QueueItem(crate::event::QueueItem {
            source,
            id: self.item.id.clone(),
            title: self.item.title.clone(),
            outcome: match (&self.released, self.pr_open) {
                (Some(_), _) => "released",
                (None, true) => "pr-open",
                (None, false) => "completed",
            },
            branch: format!("ralph/{}", self.name),
            why: self.released.clone(),
        })
    }
}

/// How a queue runs: `--parallel`, `--max-tasks`, `--pr`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) parallel: usize,
    pub(super) max_tasks: Option<usize>,
    /// A completed item's branch is pushed and a pull request opened instead of a merge.
    pub(super) pr: bool,
}

/// An item whose loop runs on a thread of its own.
struct Running {
    item: Item,
    name: String,
    loop_: std::thread::JoinHandle<Result<i32>>,
}

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
    let origin = repo.config_value("remote.origin.url");
    let mut tracker = queue::open(spec, repo.root(), origin.as_deref())?;
    if limits.pr && !tracker.has_pull_requests() {
        return Err(Error::usage(format!(
            "--pr opens pull requests, and --from {spec} has none"
        ))
        .with_hint("run without --pr: each completed item merges here and is closed"));
    }
    if limits.parallel > 1 {
        crate::live::LiveView::share_terminal();
    }
    // Counted between items too: a Ctrl-C while nothing runs still stops the queue.
    let interrupts = crate::signals::Background::install()
        .map_err(|e| Error::io("failed to install signal handlers", e))?;
    let ledger = Ledger::read(&mut *tracker)?;
    let mut q = Queue {
        ctx,
        repo,
        tracker,
        ledger,
        options,
        limits,
        seen: HashSet::new(),
        taken: Vec::new(),
        running: Vec::new(),
        started: 0,
        stop: None,
        failure: None,
    };
    loop {
        q.fill(&interrupts);
        let Some(done) = next_finished(&mut q.running) else {
            break;
        };
        q.settle(done);
    }
    if let Some(e) = q.failure {
        report(ui, &*q.tracker, &q.taken, q.stop);
        return Err(e);
    }
    if interrupts.count() > 0 {
        q.stop.get_or_insert(exit::INTERRUPTED);
    }
    Ok(report(ui, &*q.tracker, &q.taken, q.stop))
}

/// A queue run under way.
struct Queue<'a> {
    ctx: Context,
    repo: Repo,
    tracker: Box<dyn Tracker>,
    ledger: Ledger,
    options: &'a RunOptions,
    limits: Limits,
    /// Items taken in this run, never taken twice.
    seen: HashSet<String>,
    taken: Vec<Taken>,
    running: Vec<Running>,
    started: usize,
    /// The exit code of a halt that is not an item's own: no item is taken after it.
    stop: Option<i32>,
    failure: Option<Error>,
}

impl Queue<'_> {
    /// Start loops until `--parallel` run, `--max-tasks` were taken, nothing is ready, or
    /// the queue stops.
    fn fill(&mut self, interrupts: &crate::signals::Background) {
        let Limits {
            parallel,
            max_tasks,
            ..
        } = self.limits;
        while self.stop.is_none()
            && interrupts.count() == 0
            && self.running.len() < parallel.max(1)
            && max_tasks.is_none_or(|m| self.started < m)
        {
            let next = take_next(
                &self.ctx,
                &mut self.repo,
                &mut *self.tracker,
                &mut self.ledger,
                &mut self.seen,
                self.options,
            );
            match next {
                Ok(Some(r)) => {
                    self.running.push(r);
                    self.started += 1;
                }
                Ok(None) => break,
                Err(e) => self.fail(e),
            }
        }
    }

    /// One loop ended: its item merged and closed, or released.
    fn settle(&mut self, done: Running) {
        let code = done
            .loop_
            .join()
            .unwrap_or_else(|_| Err(Error::user("the item's loop panicked")));
        let concluded = conclude(
            &self.ctx,
            &mut self.repo,
            &mut *self.tracker,
            &mut self.ledger,
            (done.item, done.name, self.limits.pr),
            code,
        );
        match concluded {
            Ok((outcome, halt)) => {
                self.ctx
                    .ui
                    .event(&outcome.event(self.tracker.source()).line_now());
                self.taken.push(outcome);
                if let Some(code) = halt {
                    self.stop.get_or_insert(code);
                }
            }
            Err(e) => self.fail(e),
        }
    }

    /// An error: no item is taken after it, and the queue never returns while loops run —
    /// they are stopped as a Ctrl-C would stop them, and their items released as they end.
    fn fail(&mut self, e: Error) {
        if self.failure.is_none() && !self.running.is_empty() {
            stop_running_loops();
        }
        self.stop = Some(exit::ERROR);
        self.failure.get_or_insert(e);
    }
}

/// Interrupt this process's loops (each halts as on Ctrl-C: its agent stopped, its work
/// committed), so the queue can release their items before it ends.
fn stop_running_loops() {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::INT);
}

/// What the queue did, item by item; the exit code: a halt that stopped it, else 9 when any
/// item was released, else 0.
fn report(ui: Ui, tracker: &dyn Tracker, taken: &[Taken], stopped: Option<i32>) -> i32 {
    let source = tracker.source();
    let released = taken.iter().filter(|t| t.released.is_some()).count();
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
        match &t.released {
            None if t.pr_open => ui.plain(&format!(
                "🔀 {} {}: completed, pull request opened from ralph/{} (the item stays open)",
                t.item.id, t.item.title, t.name
            )),
            None => ui.plain(&format!(
                "✅ {} {}: completed, merged and closed (ralph/{})",
                t.item.id, t.item.title, t.name
            )),
            Some(why) => ui.plain(&format!(
                "↩️ {} {}: released — {why} (branch ralph/{})",
                t.item.id, t.item.title, t.name
            )),
        }
    }
    code
}
