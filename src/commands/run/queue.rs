//! `ralph run --from SOURCE` (SPEC §14): take the first ready item, claim it, run the loop on
//! its task file in worktree `ralph/<source>-<id>`, merge back on exit 0 and close the item;
//! release a halted item with a comment naming the halt (its branch kept) and go on; stop when
//! nothing is ready, after `--max-tasks` items, or on a halt that is not the item's own.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::begin::Continuation;
use super::start;
use crate::cli::RunOptions;
use crate::commands::Context;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::queue::{self, Claim, Item, Tracker};
use crate::state::{HaltReason, RalphDir, RunState};
use crate::ui::Ui;

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

/// What ralph knows of the tracker's items: each one's state as ralph last left it. An item
/// whose state changed without ralph (an agent running `br close` on the main work tree) is
/// put back, with a comment, before ralph does anything else: an item is closed only on
/// ralph's own exit 0.
struct Ledger(Option<BTreeMap<String, String>>, Option<HashSet<String>>);

impl Ledger {
    /// The states now; the items the tracker has now are the ones this queue may take.
    fn read(tracker: &mut dyn Tracker) -> Result<Ledger> {
        let states = tracker.states()?;
        let start = states.as_ref().map(|s| s.keys().cloned().collect());
        Ok(Ledger(states, start))
    }

    /// Whether the tracker had item `id` when the queue started (without a ledger: any).
    fn known(&self, id: &str) -> bool {
        self.1.as_ref().is_none_or(|start| start.contains(id))
    }

    /// Put back what changed without ralph; then the tracker's files, whoever changed them
    /// (a person adding items meanwhile), are committed, so no merge finds the base dirty.
    fn hold(&mut self, ctx: &Context, repo: &mut Repo, tracker: &mut dyn Tracker) -> Result<()> {
        let (Some(expected), Some(now)) = (&self.0, tracker.states()?) else {
            return Ok(());
        };
        let mut put_back = Vec::new();
        for (id, was) in expected {
            if let Some(is) = now.get(id).filter(|is| *is != was) {
                let why = format!(
                    "ralph: put back from `{is}` to `{was}`: it changed outside ralph while a queue ran"
                );
                tracker.restore(id, is, was, &why)?;
                ctx.ui.warn(&format!("{} {id}: {why}", tracker.source()));
                put_back.push(id.clone());
            }
        }
        let what = if put_back.is_empty() {
            "changes made outside the queue".to_string()
        } else {
            format!("put back {}", put_back.join(", "))
        };
        commit_tracker_files(repo, tracker, &what)?;
        self.0 = tracker.states()?;
        Ok(())
    }

    /// After ralph's own change: the states as they are now.
    fn update(&mut self, tracker: &mut dyn Tracker) -> Result<()> {
        self.0 = tracker.states()?;
        Ok(())
    }
}

/// Claim the first ready item not seen yet and start its loop; `None` when nothing is ready.
fn take_next(
    ctx: &Context,
    repo: &mut Repo,
    tracker: &mut dyn Tracker,
    ledger: &mut Ledger,
    seen: &mut HashSet<String>,
    options: &RunOptions,
) -> Result<Option<Running>> {
    loop {
        ledger.hold(ctx, repo, tracker)?;
        let ready = tracker.ready()?;
        // Only items the tracker had when the queue started: one that turns up while loops
        // run (an agent labelling an issue `ralph`) waits for a run a person starts.
        let Some(item) = ready
            .into_iter()
            .find(|i| !seen.contains(&i.id) && ledger.known(&i.id))
        else {
            return Ok(None);
        };
        seen.insert(item.id.clone());
        // An item whose text would change its task file's criteria is never claimed: skipped,
        // said, the queue goes on (one hostile issue does not stop the others).
        let text = queue::task_file(tracker.source(), &item);
        if !queue::asks_only_its_criteria(tracker.source(), &item, &text) {
            ctx.ui.warn(&format!(
                "{} {}: its text would change the criteria of its task file; not taken",
                tracker.source(),
                item.id
            ));
            continue;
        }
        let claimed = tracker.claim(&item);
        if matches!(claimed, Ok(Claim::Taken)) {
            ctx.ui.note(&format!(
                "{} {}: claimed by someone else, next",
                tracker.source(),
                item.id
            ));
            continue;
        }
        let name = queue::loop_name(tracker.source(), &item.id);
        // From the first claim call on, whatever fails leaves the item released.
        let started = claimed.and_then(|_| {
            commit_tracker_files(repo, tracker, &format!("claimed {}", item.id))?;
            ledger.update(tracker)?;
            start_item(ctx, repo, tracker.source(), &item, &name, options)
        });
        return match started {
            Ok(loop_) => Ok(Some(Running { item, name, loop_ })),
            Err(e) => {
                let _ = tracker.release(&item, &format!("ralph: released — error: {e}"));
                let _ = commit_tracker_files(repo, tracker, &format!("released {}", item.id));
                let _ = ledger.update(tracker);
                Err(e)
            }
        };
    }
}

/// The first loop to end (waiting for one), taken out of `running`; `None` when none runs.
fn next_finished(running: &mut Vec<Running>) -> Option<Running> {
    if running.is_empty() {
        return None;
    }
    loop {
        if let Some(i) = running.iter().position(|r| r.loop_.is_finished()) {
            return Some(running.remove(i));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One item's loop has ended: merged and closed, or released. `Some(code)` when its halt is
/// not its own (an interrupt, the cost budget, the waiting budget, an error): the queue takes
/// no more items and ends with that code. Whatever fails, the item is not left claimed.
fn conclude(
    ctx: &Context,
    repo: &mut Repo,
    tracker: &mut dyn Tracker,
    ledger: &mut Ledger,
    (item, name, pr): (Item, String, bool),
    code: Result<i32>,
) -> Result<(Taken, Option<i32>)> {
    if let Err(e) = ledger.hold(ctx, repo, tracker) {
        let _ = tracker.release(&item, &format!("ralph: released — error: {e}"));
        let _ = ledger.update(tracker);
        return Err(e);
    }
    let (released, stop) = match finish(ctx, repo, tracker, (&item, &name, pr), code) {
        Ok(ended) => ended,
        Err(e) => {
            let _ = tracker.release(&item, &format!("ralph: released — error: {e}"));
            let _ = commit_tracker_files(repo, tracker, &format!("released {}", item.id));
            // The release is ralph's own: the ledger must not put it back.
            let _ = ledger.update(tracker);
            return Err(e);
        }
    };
    if let Some(why) = &released {
        let comment = format!("ralph: released — {why}; its work is on branch ralph/{name}");
        tracker.release(&item, &comment)?;
        commit_tracker_files(repo, tracker, &format!("released {}", item.id))?;
    }
    ledger.update(tracker)?;
    Ok((
        Taken {
            item,
            name,
            pr_open: pr && released.is_none(),
            released,
        },
        stop,
    ))
}

/// After the item's loop: its merge and close, or `(why it is released, the queue's stop)`.
fn finish(
    ctx: &Context,
    repo: &mut Repo,
    tracker: &mut dyn Tracker,
    (item, name, pr): (&Item, &str, bool),
    code: Result<i32>,
) -> Result<(Option<String>, Option<i32>)> {
    let code = match code {
        Ok(code) => code,
        Err(e) => return Ok((Some(format!("error: {e}")), Some(exit::ERROR))),
    };
    if code != exit::COMPLETE {
        let own = matches!(
            code,
            exit::MAX_ITERATIONS
                | exit::STALLED
                | exit::STUCK
                | exit::TARGET_ONLY
                | exit::VERDICT_UNAVAILABLE
                | exit::TAMPERED
                | exit::PARTIAL
        );
        return Ok((Some(halt_of(repo, name, code)), (!own).then_some(code)));
    }
    // The tracker's files are the tracker's: a branch that changed them (an agent closing
    // items by editing `.beads/issues.jsonl`) is never merged, whatever else it holds.
    let touched = repo.changed_on_branch(&format!("ralph/{name}"), tracker.own_paths())?;
    if !touched.is_empty() {
        return Ok((
            Some(format!(
                "completed, but not merged: its branch changed the tracker's own files ({})",
                touched.join(", ")
            )),
            None,
        ));
    }
    if pr {
        return Ok((open_pr(ctx, repo, tracker, item, name).err(), None));
    }
    match crate::worktree::merge(repo, name, ctx.ui) {
        Ok(exit::COMPLETE) => {}
        Ok(code) => {
            return Ok((
                Some(format!("completed, but not merged (exit {code})")),
                None,
            ));
        }
        Err(e) => return Ok((Some(format!("completed, but not merged: {e}")), None)),
    }
    let commit = repo.head()?.map(|c| c.id).unwrap_or_default();
    tracker.close(item, &commit)?;
    commit_tracker_files(repo, tracker, &format!("closed {}", item.id))?;
    Ok((None, None))
}

/// `--pr`: the item's branch pushed to `origin` and a pull request opened into the branch the
/// queue started from; the item stays open. `Err(why)` is the item's halt: it is released.
fn open_pr(
    ctx: &Context,
    repo: &Repo,
    tracker: &mut dyn Tracker,
    item: &Item,
    name: &str,
) -> std::result::Result<(), String> {
    let branch = format!("ralph/{name}");
    let base = crate::worktree::current_branch(repo)
        .ok_or("completed, but no pull request: the queue runs on a detached HEAD")?;
    // The issue says so before anything is pushed: a pull request is never left open behind
    // an issue a later run would take again, nor a branch pushed for nothing.
    tracker
        .mark_pr_open(item)
        .map_err(|e| format!("completed, but not marked for its pull request: {e}"))?;
    repo.push_branch("origin", &branch)
        .map_err(|e| format!("completed, but not pushed: {e}"))?;
    let body = halt_of(repo, name, exit::COMPLETE);
    let url = tracker
        .open_pr(item, &branch, &base, &format!("ralph: {branch}, {body}"))
        .map_err(|e| format!("completed and pushed, but no pull request: {e}"))?;
    ctx.ui.note(&format!(
        "{} {}: pull request {url}",
        tracker.source(),
        item.id
    ));
    Ok(())
}

/// The item's worktree and task file, then its loop on a thread of its own, unattended.
fn start_item(
    ctx: &Context,
    repo: &Repo,
    source: &str,
    item: &Item,
    name: &str,
    options: &RunOptions,
) -> Result<std::thread::JoinHandle<Result<i32>>> {
    let wt = crate::worktree::for_run(repo, name, ctx.ui)?;
    let rel = format!(".ralph/tasks/{name}.md");
    let path = wt.path.join(&rel);
    if let Some(dir) = path.parent() {
        crate::files::create_dir_all(dir).map_err(|e| Error::file("create directory", dir, e))?;
    }
    let text = queue::task_file(source, item);
    crate::state::write_atomic(&path, text.as_bytes())?;
    // The first commit of the item's branch: what was asked, as the record.
    Repo::discover(&wt.path)?
        .commit_paths(&[&rel], &format!("ralph: {source} {} task", item.id))?;
    ctx.ui.note(&format!(
        "{source} {}: {} — worktree {} on branch {}",
        item.id,
        item.title,
        wt.path.display(),
        wt.branch
    ));
    let inner = Context {
        cwd: wt.path.clone(),
        ui: ctx.ui,
    };
    let mut options = options.clone();
    options.yes = true;
    std::thread::Builder::new()
        .name(format!("ralph-{name}"))
        // An item released by an earlier queue run starts over on the branch its work was
        // kept on.
        .spawn(move || start(&inner, &[rel], &options, false, Continuation::Reset))
        .map_err(|e| Error::io("failed to start the item's loop", e))
}

/// The halt of a loop that did not complete, in the words of its record.
fn halt_of(repo: &Repo, name: &str, code: i32) -> String {
    let recorded = crate::worktree::existing(repo, name)
        .ok()
        .flatten()
        .and_then(|p| {
            RunState::load(&RalphDir::new(&p).state_file())
                .ok()
                .flatten()
        })
        .and_then(|s| s.halt_reason);
    match recorded {
        Some(r) => format!("halted: {} (exit {code})", HaltReason::as_str(r)),
        None => format!("halted (exit {code})"),
    }
}

/// The tracker's own files, changed by a claim, a close or a release, committed on the base
/// branch (`ralph: beads <id> claimed`), so no item's branch carries them and no merge finds
/// the base dirty.
fn commit_tracker_files(repo: &mut Repo, tracker: &dyn Tracker, what: &str) -> Result<()> {
    let paths = tracker.own_paths();
    if paths.is_empty() {
        return Ok(());
    }
    let message = format!("ralph: {} {what}", tracker.source());
    repo.commit_paths(paths, &message)?;
    Ok(())
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
