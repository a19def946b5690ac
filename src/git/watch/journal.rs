//! The journal of changed paths the watcher thread keeps and the hook's answers are written
//! from, and the state of the handshake between that thread and ralph's git commands: which
//! barriers are awaited, and whether events may have been lost since the tree was last walked.
//!
//! The invariant: a token the hook hands out is answered incrementally later only if every
//! directory of the work tree was watched from before the token was handed out until the
//! answer. A loss (`lose`) moves the floor above every token handed out so far and stays until
//! the watcher thread has walked the tree again and re-added a watch on every directory
//! (`rewatched`), which moves the floor once more: a token handed out while watches may be
//! missing is never trusted.

use std::collections::HashSet;
use std::ffi::OsString;

/// Past this many recorded paths the journal starts over ("everything"): bounded memory.
const MAX_CHANGES: usize = 100_000;
/// At most this many distinct loss reasons are kept for the supervisor between two reports.
const MAX_REASONS: usize = 8;

/// What the watcher lost since the supervisor last asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Losses {
    /// Why events may have been lost, each once, in the order first seen.
    pub(crate) reasons: Vec<String>,
    /// The tree was walked again and every directory is watched again; false while the last
    /// walk failed (every answer stays "everything" and the next one tries again).
    pub(crate) rewatched: bool,
}

/// The changed paths, in order, since the floor; and the handshake's state.
#[derive(Debug)]
pub(super) struct Journal {
    pub(crate) nonce: String,
    /// Tokens below this position may have missed changes: they are answered "everything".
    pub(crate) floor: u64,
    /// The position of the next recorded change (the token handed out now).
    pub(crate) next: u64,
    pub(crate) changes: Vec<(u64, Vec<u8>)>,
    /// Paths recorded since the last answer (a path is recorded once per answer).
    segment: HashSet<Vec<u8>>,
    /// An agent is running: its touching the git directory makes the journal incomplete.
    pub(crate) agent: bool,
    /// Events may have been lost (why) and the tree has not been walked again since: the next
    /// barrier walks it, and until then every answer is "everything".
    pub(crate) lost: Option<String>,
    /// The watcher thread ended: nothing is watched any more.
    pub(crate) dead: bool,
    /// Barriers created and not seen yet, by their exact file names.
    pub(crate) pending: HashSet<OsString>,
    /// Always reported: gitlinks (submodules, nested repositories), whose commits happen in
    /// git directories ralph does not watch.
    pub(crate) always: Vec<Vec<u8>>,
    /// Always reported too: directories watched without content events (`.ralph/runs`, where
    /// transcripts grow in 64 KiB writes), so git re-checks what it tracks there every time.
    pub(crate) quiet: Vec<Vec<u8>>,
    /// Losses since the supervisor last asked.
    reasons: Vec<String>,
    /// A walk since the supervisor last asked.
    walked: bool,
}

impl Journal {
    pub(crate) fn new(nonce: String, quiet: Vec<Vec<u8>>) -> Journal {
        Journal {
            nonce,
            floor: 0,
            next: 0,
            changes: Vec::new(),
            segment: HashSet::new(),
            agent: false,
            lost: None,
            dead: false,
            pending: HashSet::new(),
            always: Vec::new(),
            quiet,
            reasons: Vec::new(),
            walked: false,
        }
    }

    /// Record a changed path (relative to the work tree; a directory ends in `/`).
    pub(crate) fn record(&mut self, rel: Vec<u8>) {
        if self.segment.insert(rel.clone()) {
            self.changes.push((self.next, rel));
            self.next += 1;
            if self.changes.len() > MAX_CHANGES {
                self.everything();
            }
        }
    }

    /// Every token handed out so far may have missed changes.
    pub(crate) fn everything(&mut self) {
        self.next += 1;
        self.floor = self.next;
        self.changes.clear();
        self.segment.clear();
    }

    /// Events may have been lost: "everything" until the tree is walked again.
    pub(crate) fn lose(&mut self, why: &str) {
        tracing::info!("the file watcher lost events: {why}");
        if self.lost.is_none() {
            self.lost = Some(why.to_string());
        }
        self.note(why);
        self.everything();
    }

    fn note(&mut self, why: &str) {
        if self.reasons.len() < MAX_REASONS && !self.reasons.iter().any(|r| r == why) {
            self.reasons.push(why.to_string());
        }
    }

    /// The watcher thread walked the tree again: every directory is watched (`Ok`), or not
    /// (why). Either way the floor moves past every token handed out while watches may have
    /// been missing, and every barrier awaited is answered: the walk began after each was
    /// created, so it saw every directory made before it.
    pub(crate) fn rewatched(&mut self, walk: Result<(), String>) {
        match walk {
            Ok(()) => {
                tracing::info!("the file watcher walked the tree again");
                self.lost = None;
                self.walked = true;
            }
            Err(why) => {
                tracing::info!("the file watcher could not watch the tree again: {why}");
                self.note(&why);
                self.lost = Some(why);
            }
        }
        self.everything();
        self.pending.clear();
    }

    /// Whether every answer must be "everything" now.
    pub(crate) fn untrusted(&self) -> bool {
        self.lost.is_some() || self.dead
    }

    /// Start a new segment after an answer was written.
    pub(crate) fn answered(&mut self) {
        self.segment.clear();
    }

    /// What was lost since the last call, if anything.
    pub(crate) fn take_losses(&mut self) -> Option<Losses> {
        if self.reasons.is_empty() {
            self.walked = false;
            return None;
        }
        let losses = Losses {
            reasons: std::mem::take(&mut self.reasons),
            rewatched: self.walked && !self.untrusted(),
        };
        self.walked = false;
        Some(losses)
    }

    /// Every path answered in every answer: gitlinks, then the quiet directories.
    pub(crate) fn always_answered(&self) -> Vec<Vec<u8>> {
        self.always.iter().chain(&self.quiet).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a token of `at` gets an incremental answer now.
    fn trusted(j: &Journal, at: u64) -> bool {
        !j.untrusted() && at >= j.floor && at <= j.next
    }

    /// A write of the answers, as `Watch::write_answers` does it: the token handed out.
    fn answer(j: &mut Journal) -> u64 {
        if j.untrusted() {
            j.everything();
        }
        j.answered();
        j.next
    }

    #[test]
    fn a_loss_is_everything_until_the_tree_is_walked_again() {
        let mut j = Journal::new("n".into(), Vec::new());
        j.record(b"a".to_vec());
        let t0 = answer(&mut j);
        assert!(trusted(&j, t0));
        j.lose("the kernel's event queue overflowed");
        assert!(!trusted(&j, t0), "a token from before the loss");
        // An answer written before the walk (a loss seen after the barrier): its token is
        // not trusted later either.
        let t1 = answer(&mut j);
        assert!(!trusted(&j, t1));
        // A walk that failed: still everything, and the reason kept.
        j.rewatched(Err("a watch could not be added on /x: No space left".into()));
        let t2 = answer(&mut j);
        assert!(!trusted(&j, t1) && !trusted(&j, t2));
        // The walk that succeeds: tokens from before it are not trusted, tokens after are.
        j.rewatched(Ok(()));
        assert!(!trusted(&j, t2));
        let t3 = answer(&mut j);
        assert!(trusted(&j, t3));
        j.record(b"b".to_vec());
        assert!(trusted(&j, t3));
        let losses = j.take_losses().unwrap();
        assert_eq!(
            losses.reasons,
            [
                "the kernel's event queue overflowed",
                "a watch could not be added on /x: No space left"
            ]
        );
        assert!(losses.rewatched);
        assert_eq!(j.take_losses(), None);
    }

    #[test]
    fn a_failed_walk_is_reported_as_not_rewatched() {
        let mut j = Journal::new("n".into(), Vec::new());
        j.lose("a directory moved");
        j.rewatched(Err("a watch could not be added".into()));
        let losses = j.take_losses().unwrap();
        assert!(!losses.rewatched);
        assert!(j.untrusted(), "still everything after the report");
    }

    #[test]
    fn a_walk_answers_every_barrier_awaited() {
        let mut j = Journal::new("n".into(), Vec::new());
        j.pending.insert(".barrier-aa".into());
        j.pending.insert(".barrier-bb".into());
        // Another name (one the agent made) answers none.
        assert!(!j.pending.remove(std::ffi::OsStr::new(".barrier-99999")));
        assert_eq!(j.pending.len(), 2);
        j.lose("a directory moved");
        j.rewatched(Ok(()));
        assert!(j.pending.is_empty());
    }

    #[test]
    fn the_journal_is_bounded() {
        let mut j = Journal::new("n".into(), vec![b".ralph/runs/".to_vec()]);
        let t0 = answer(&mut j);
        for i in 0..=MAX_CHANGES {
            j.record(format!("f{i}").into_bytes());
        }
        assert!(j.changes.len() <= MAX_CHANGES);
        assert!(!trusted(&j, t0));
        // Starting over is not a loss: no walk is due.
        assert!(!j.untrusted());
        assert_eq!(j.always_answered(), [b".ralph/runs/".to_vec()]);
    }
}
