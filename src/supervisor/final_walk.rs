//! The final check (SPEC §12): the file watcher is an optimisation, never the truth. Before a
//! halt — "complete" included — one full walk without the monitor checks the tree the run
//! leaves (`Repo::missed_by_monitor`). What it finds is committed in the same iteration, as a
//! second commit of it (`ralph: iteration N — the file watcher missed K paths`): the
//! iteration's own commit is made and its hooks have run by then, a commit the agent made
//! itself is never rewritten, and the history shows what the watcher missed. The ITER record
//! then describes the tree after that commit, the decision is taken again on it (it may no
//! longer be a halt: a stall that was not one), and the rest of the run walks in full: the
//! monitor is dropped and the watcher stopped.
//!
//! Every iteration also logs what the watcher lost on the way (a queue overflow, a directory
//! moved…), after which git walked the whole tree and the watcher watched it again.

use super::Loop;
use super::commit::{commit_message, guarded_commit};
use super::decide::{Counters, Decision, decide};
use super::faults::failed;
use super::prepare::Prepared;
use super::record::{Ending, Recorded};
use crate::error::Result;

/// What the full walk found and committed.
struct Found {
    /// Short HEAD afterwards.
    head: String,
    /// The subject of the commit holding what was missed, when one was made.
    subject: Option<String>,
    /// A hook refused that commit: what it said.
    refused: Option<String>,
    /// `git status --porcelain | cksum` after it, from a walk of the whole tree.
    fingerprint: String,
}

impl Loop {
    /// Between `decide` and the logs: note the watcher's losses, and when the decision is to
    /// halt (or to ask, which may halt), walk the tree in full; if that finds anything, commit
    /// it, describe the tree after that commit in `recorded`, and decide again. A check that
    /// cannot run ends the run with its error: the tree it would have vouched for is unknown.
    pub(super) fn check_the_tree(
        &mut self,
        prev: &Counters,
        prep: &Prepared,
        ending: &Ending,
        recorded: &mut Recorded,
        first: (Counters, Decision),
    ) -> (Counters, Decision) {
        self.log_watcher_losses(prep.n);
        let why = match &first.1 {
            Decision::Halt(halt) => halt.reason().to_string(),
            Decision::AskStuck => "stuck".to_string(),
            Decision::Continue { .. } => return first,
        };
        let found = match self.walk_in_full(prep.n, &why) {
            Ok(Some(found)) => found,
            Ok(None) => return first,
            // Interrupted while git hangs: the interrupt stands (its record says the rest).
            Err(e) if super::faults::stopped(&e) => {
                self.log(&format!(
                    "Iteration {}: the full check of the tree was cut short: {}",
                    prep.n,
                    super::faults::chain(&e)
                ));
                return first;
            }
            Err(e) => {
                let halt = failed(
                    format_args!("iteration {}: the full check of the tree failed", prep.n),
                    &e,
                );
                return (first.0, Decision::Halt(halt));
            }
        };
        if found.subject.is_some() {
            recorded.commit.subject = found.subject;
        }
        if found.refused.is_some() {
            recorded.commit.refused = found.refused;
        }
        recorded.commit.head = found.head.clone();
        recorded.key.commit = found.head;
        recorded.key.fingerprint = found.fingerprint;
        decide(prev, &self.outcome(ending, recorded))
    }

    /// An interrupt between iterations halts the run: the last iteration's record is written,
    /// so what the walk finds is committed after it (logged with its commit). A walk that
    /// cannot run is logged; the interrupt stands.
    pub(super) fn check_the_tree_between(&mut self) {
        let n = self.counters.iteration;
        if let Err(e) = self.walk_in_full(n, "interrupted") {
            self.log(&format!(
                "the full check of the tree before halting failed: {}",
                super::faults::chain(&e)
            ));
        }
    }

    /// One full walk without the monitor; `None` when it found nothing the monitored view had
    /// not (or there is no monitor: every status walked in full already).
    fn walk_in_full(&mut self, n: u32, why: &str) -> Result<Option<Found>> {
        if self.tree.watch.is_none() {
            return Ok(None);
        }
        let missed = self.tree.repo.missed_by_monitor()?;
        if missed.is_empty() {
            return Ok(None);
        }
        // The rest of the run walks in full.
        self.tree.repo.set_monitor(None);
        if let Some(w) = self.tree.watch.take() {
            w.stop();
        }
        let what = match missed.len() {
            1 => "the file watcher missed 1 path".to_string(),
            k => format!("the file watcher missed {k} paths"),
        };
        let subject = format!("ralph: iteration {n} — {what}");
        let message = commit_message(&subject, n, &self.state.run_id);
        let g = guarded_commit(
            &mut self.tree.repo,
            &self.setup.settings,
            self.setup.ui,
            &self.tree.rd,
            &message,
        )?;
        let head = self
            .tree
            .repo
            .head()?
            .map_or_else(|| "no-commit".to_string(), |h| h.short);
        let committed = match (&g.outcome, &g.refused) {
            (Some(_), _) => format!("committed as {head}"),
            (None, Some(_)) => "the commit was refused".to_string(),
            (None, None) => "nothing to commit".to_string(),
        };
        self.log(&format!(
            "Iteration {n}: {what} (found by the full check before the halt: {why}): {}; {committed}; git walks the whole tree for the rest of the run",
            shown(&missed)
        ));
        self.setup.ui.warn(&format!(
            "{what}, found by the full check before halting: {}; {committed}",
            shown(&missed)
        ));
        Ok(Some(Found {
            head,
            subject: g.outcome.map(|o| o.commit.summary),
            refused: g.refused,
            fingerprint: self.tree.repo.fingerprint()?,
        }))
    }

    /// The activity log's line for events the watcher lost during the iteration.
    fn log_watcher_losses(&mut self, n: u32) {
        let Some(losses) = self.tree.watch.as_ref().and_then(|w| w.take_losses()) else {
            return;
        };
        let then = if losses.rewatched {
            "git walked the whole tree, and every directory is watched again"
        } else {
            "git walks the whole tree until every directory can be watched again"
        };
        self.log(&format!(
            "Iteration {n}: the file watcher lost events ({}): {then}",
            losses.reasons.join("; ")
        ));
    }
}

/// At most ten paths, then how many more.
pub(super) fn shown(paths: &[String]) -> String {
    let mut s = paths
        .iter()
        .take(10)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > 10 {
        s.push_str(&format!(" and {} more", paths.len() - 10));
    }
    s
}
