//! An item's lease kept while its loop runs (SPEC §15): renewed every third of the lease, and
//! the item's branch pushed with the renewal after each iteration the loop records — one atomic
//! push, so a worker whose lease another took over publishes nothing more. Such a worker stops
//! its loop (as a Ctrl-C would: the iteration recorded) and leaves the item to the new holder.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::desk::Mine;
use crate::error::{Error, Result};
use crate::git::cli::GitCli;
use crate::queue::lease::{BranchPush, Leases, Next, Stage, Swap};
use crate::signals::Cancel;
use crate::ui::Ui;

/// The shortest time between two renewals.
const MIN_EVERY: Duration = Duration::from_millis(200);

/// The thread keeping one item's lease.
pub(super) struct Keeper {
    thread: JoinHandle<Kept>,
}

/// What a keeper leaves: the lease as it last moved it, and why it stopped the loop.
pub(super) struct Kept {
    pub(super) mine: Mine,
    /// Another worker took the lease over: the loop was stopped.
    pub(super) lost: bool,
    /// The lease could not be renewed while a sixth of it was left (origin out of reach): the
    /// loop was stopped before another worker may take the item over.
    pub(super) lapsed: bool,
    /// When the lease runs out, as of its last renewal (this machine's monotonic clock).
    pub(super) until: Instant,
}

impl Keeper {
    /// Keep item `name`'s lease (`mine`) until `recorded` closes (its loop ended): renewed
    /// every third of the lease, branch `ralph/NAME` pushed with each renewal once it moved.
    pub(super) fn start(
        leases: Leases,
        git: GitCli,
        name: &str,
        mine: Mine,
        recorded: Receiver<u32>,
        (cancel, ui): (Cancel, Ui),
    ) -> Result<Keeper> {
        let name = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("ralph-lease-{name}"))
            .spawn(move || {
                let k = Keeping {
                    leases,
                    git,
                    name,
                    mine,
                    ui,
                    warned: false,
                };
                let (k, ended, until) = k.run(&recorded);
                if ended != Ending::Done {
                    cancel.stop();
                }
                Kept {
                    mine: k.mine,
                    lost: ended == Ending::Lost,
                    lapsed: ended == Ending::Lapsed,
                    until,
                }
            })
            .map_err(|e| Error::io("failed to start the lease's keeper", e))?;
        Ok(Keeper { thread })
    }

    /// Wait for the keeper (its loop has ended): what it leaves.
    pub(super) fn finish(self) -> Option<Kept> {
        self.thread.join().ok()
    }
}

/// Why a keeper stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The loop ended.
    Done,
    /// Another worker took the lease over.
    Lost,
    /// Not renewed in time.
    Lapsed,
}

#[derive(Clone)]
struct Keeping {
    leases: Leases,
    git: GitCli,
    name: String,
    mine: Mine,
    ui: Ui,
    /// A renewal that failed was said once.
    warned: bool,
}

impl Keeping {
    /// Renew until the loop ends, or until the lease is lost or lapses. A lease held until
    /// `until` (as of the last renewal, on this machine's monotonic clock) that is not renewed
    /// while a sixth of it is left stops the loop: another worker may take the item over once
    /// it runs out, and two workers never work one item at once. Each renewal runs on a thread
    /// of its own, so an origin that hangs cannot hold the loop past its lease.
    fn run(mut self, recorded: &Receiver<u32>) -> (Keeping, Ending, Instant) {
        let every = (self.leases.duration / 3).max(MIN_EVERY);
        // Held from when the lease was last written (taken, or renewed with the branch just
        // before the keeper started), however long that push took.
        let written = self.mine.written.unwrap_or_else(Instant::now);
        let mut until = written + self.leases.duration;
        loop {
            let stop_at = until.checked_sub(every / 2).unwrap_or(until);
            let wait = every.min(stop_at.saturating_duration_since(Instant::now()));
            match recorded.recv_timeout(wait) {
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return (self, Ending::Done, until),
            }
            let asked = Instant::now();
            let (tell, answer) = std::sync::mpsc::channel();
            let mut renewal = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ralph-renew-{}", self.name))
                .spawn(move || {
                    let renewed = renewal.renew();
                    let _ = tell.send((renewal, renewed));
                });
            let left = stop_at.saturating_duration_since(Instant::now());
            let answered = match spawned {
                Ok(_) => answer.recv_timeout(left.max(MIN_EVERY)).ok(),
                Err(_) => None,
            };
            match answered {
                Some((renewal, Ok(true))) => {
                    self = renewal;
                    self.mine.written = Some(asked);
                    until = asked + self.leases.duration;
                }
                Some((renewal, Ok(false))) => {
                    self.ui.warn(&format!(
                        "{}: another worker took its lease over: its loop stops, the item is theirs",
                        self.name
                    ));
                    return (renewal, Ending::Lost, until);
                }
                Some((renewal, Err(e))) => {
                    self = renewal;
                    if !self.warned {
                        self.warned = true;
                        self.ui.warn(&format!(
                            "{}: the lease could not be renewed ({e}); trying again",
                            self.name
                        ));
                    }
                }
                None => {}
            }
            if Instant::now() >= until.checked_sub(every / 2).unwrap_or(until) {
                self.ui.warn(&format!(
                    "{}: the lease could not be renewed while a sixth of it was left: its loop stops, before another worker may take the item over",
                    self.name
                ));
                return (self, Ending::Lapsed, until);
            }
        }
    }

    /// One renewal, the branch with it when it moved; `Ok(false)` when the lease was lost.
    fn renew(&mut self) -> Result<bool> {
        let branch = push_of(&self.git, &self.name, &self.mine)?;
        let next = Next::held(Stage::Working)
            .on_branch(self.mine.branch.as_deref())
            .on_text(self.mine.text.as_deref());
        match self
            .leases
            .swap(&self.name, Some(&self.mine.oid), &next, branch.as_ref())?
        {
            Swap::Won(oid) => {
                self.mine.oid = oid;
                if let Some(b) = branch {
                    self.mine.branch = Some(b.tip);
                }
                Ok(true)
            }
            Swap::Lost => Ok(false),
            Swap::Diverged(at) => {
                // Someone without the lease pushed to the item's branch: the lease is kept
                // (the loop goes on), the branch left for the item's publish to refuse.
                if !self.warned {
                    self.warned = true;
                    self.ui.warn(&format!(
                        "{}: origin's ralph/{} is at {at}, which this worker's branch does not have (pushed by someone not holding the item's lease); the lease is renewed without the branch",
                        self.name, self.name
                    ));
                }
                let next = Next::held(Stage::Working).on_text(self.mine.text.as_deref());
                match self
                    .leases
                    .swap(&self.name, Some(&self.mine.oid), &next, None)?
                {
                    Swap::Won(oid) => {
                        self.mine.oid = oid;
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
        }
    }
}

/// Branch `ralph/NAME` as this worker would push it: its local tip, when origin does not have
/// it yet (`None`: nothing to push).
pub(super) fn push_of(git: &GitCli, name: &str, mine: &Mine) -> Result<Option<BranchPush>> {
    let branch = format!("ralph/{name}");
    let tip = git.run(
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
        None,
    )?;
    let tip = String::from_utf8_lossy(&tip).trim().to_string();
    if tip.is_empty() || mine.branch.as_deref() == Some(tip.as_str()) {
        return Ok(None);
    }
    Ok(Some(BranchPush {
        branch,
        tip,
        on_origin: mine.branch.clone(),
    }))
}
