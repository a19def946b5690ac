//! Phase 5 of an iteration (SPEC §5.1 step 7, §11): the one close every ending goes through —
//! the status block and the commit of what the tree holds, then the fingerprint of the tree the
//! iteration leaves behind. (The logs and `state.json` follow in `conclude`, after the pure
//! decision, in that order.) A step that fails is noted and the steps after it still run: the
//! iteration then ends in an error, recorded like any ending.

use super::Loop;
use super::attempt::Attempted;
use super::commit::{Committer, IterationCommit, Subject};
use super::decide::Halt;
use super::faults::Faults;
use super::prepare::Prepared;
use super::verify::Verified;
use crate::error::Error;
use crate::iter_record::{IterExit, IterKey, UNKNOWN};

/// How an iteration ended: judged and verified, or a halt found before that.
pub(super) type Ending = std::result::Result<Verified, Halt>;

/// What the close wrote.
pub(super) struct Recorded {
    pub(crate) commit: IterationCommit,
    /// The ITER record's identity (figures, commit, fingerprint).
    pub(crate) key: IterKey,
    /// The ITER record's exit: the verdict's when there is one, else the agent's; `error` when
    /// the iteration ended in an error (its ending's, or its close's).
    pub(crate) exit: IterExit,
    pub(crate) done: usize,
    pub(crate) total: usize,
    /// The close could not do all it should (git refused, a write failed): the error the
    /// iteration ends with instead of its ending (which it names first when it was an error).
    pub(crate) failure: Option<Halt>,
}

impl Loop {
    pub(super) fn record(
        &mut self,
        prep: &Prepared,
        attempted: &Attempted,
        ending: &Ending,
    ) -> Recorded {
        let unit = self.source.unit();
        let closing = match ending {
            Ok(v) => {
                let j = &v.judged;
                let complete = v.evidence().complete() && j.tampered.is_empty();
                let figures = match (&v.verdict, &j.figures) {
                    (Some(verdict), _) => verdict.figures(),
                    (None, Some(f)) => f.clone(),
                    (None, None) => format!("{}/{} {unit}", j.done, j.total),
                };
                let status = if complete { "Complete" } else { "In progress" };
                let what = Subject::Work(j.what.clone());
                (what, status.to_string(), j.done, j.total, figures)
            }
            Err(halt) => {
                let (d, t) = self.source.counts();
                let subject = Subject::Stopped(match halt {
                    Halt::Interrupted => "interrupted",
                    Halt::Budget(_) => "budget reached",
                    _ => "halted: error",
                });
                let status = format!("Halted: {}", halt.reason());
                (subject, status, d, t, format!("{d}/{t} {unit}"))
            }
        };
        let committer = Committer {
            tree: &mut self.tree,
            settings: &self.setup.settings,
            ui: self.setup.ui,
            run_id: &self.state.run_id,
        };
        committer.close(prep, attempted, ending, closing)
    }
}

impl Committer<'_> {
    /// Commit, then the fingerprint of the tree the iteration leaves behind, and the ITER
    /// record's identity and exit.
    fn close(
        mut self,
        prep: &Prepared,
        attempted: &Attempted,
        ending: &Ending,
        (subject, status, done, total, figures): (Subject, String, usize, usize, String),
    ) -> Recorded {
        let n = prep.n;
        let mut faults = Faults::default();
        let commit = self.commit_iteration(prep, subject, (&status, done, total), &mut faults);
        if let Some(w) = &self.tree.watch
            && commit.subject.is_some()
        {
            // A commit may have recorded a new submodule or nested repository.
            match self.tree.repo.gitlinks() {
                Ok(links) => w.set_always(links),
                Err(e) => faults.note("the index's submodules cannot be read", &e.into()),
            }
        }
        let fingerprint = if self.settings.no_commit {
            self.tree.repo.fingerprint()
        } else {
            self.tree.repo.fingerprint_after_staging()
        };
        let fingerprint = faults.or(
            fingerprint.map_err(Error::from),
            format_args!("the fingerprint of iteration {n}'s tree cannot be computed"),
            UNKNOWN.to_string(),
        );
        let failure = faults.into_halt(ending.as_ref().err());
        let exit = match ending {
            _ if matches!(failure, Some(Halt::Error { .. })) => IterExit::Error,
            Err(Halt::Error { .. }) => IterExit::Error,
            Ok(Verified {
                verdict: Some(v), ..
            }) => IterExit::Code(v.exit_code),
            _ => IterExit::Code(attempted.finished.exit_code),
        };
        Recorded {
            key: IterKey {
                figures,
                commit: commit.head.clone(),
                fingerprint,
            },
            commit,
            exit,
            done,
            total,
            failure,
        }
    }
}
