//! One item's way through a queue: claimed (never when its text would change its criteria),
//! its loop started in its worktree, then merged and closed, a pull request opened, or released.

use std::collections::HashSet;

use super::ledger::Ledger;
use super::{Running, Taken};
use crate::cli::RunOptions;
use crate::commands::Context;
use crate::commands::run::begin::Continuation;
use crate::commands::run::start;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::queue::{self, Claim, Item, Tracker};
use crate::state::{HaltReason, RalphDir, RunState};

/// Claim the first ready item not seen yet and start its loop; `None` when nothing is ready.
pub(super) fn take_next(
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
        // An item whose text is too large or would change its task file's criteria is never
        // claimed: skipped, said, the queue goes on (one hostile issue does not stop the others).
        if let Some(why) = queue::refusal(tracker.source(), &item) {
            let source = tracker.source();
            ctx.ui
                .warn(&format!("{source} {}: {why}; not taken", item.id));
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
pub(super) fn next_finished(running: &mut Vec<Running>) -> Option<Running> {
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
pub(super) fn conclude(
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
pub(super) fn commit_tracker_files(
    repo: &mut Repo,
    tracker: &dyn Tracker,
    what: &str,
) -> Result<()> {
    let paths = tracker.own_paths();
    if paths.is_empty() {
        return Ok(());
    }
    let message = format!("ralph: {} {what}", tracker.source());
    repo.commit_paths(paths, &message)?;
    Ok(())
}
