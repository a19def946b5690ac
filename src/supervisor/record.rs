//! Phase 5 of an iteration (SPEC §5.1 step 7): the one close every ending goes through — the
//! status block and the commit of what the tree holds, then the fingerprint of the tree the
//! iteration leaves behind. (The logs and `state.json` follow in `conclude`, after the pure
//! decision, in that order.)

use super::Loop;
use super::attempt::Attempted;
use super::commit::{IterationCommit, Subject};
use super::decide::Halt;
use super::prepare::Prepared;
use super::verify::Verified;
use crate::error::Result;
use crate::state::IterKey;

/// How an iteration ended: judged and verified, or a halt found before that.
pub(super) type Ending = std::result::Result<Verified, Halt>;

/// What the close wrote.
pub(super) struct Recorded {
    pub commit: IterationCommit,
    /// The ITER record's identity (figures, commit, fingerprint).
    pub key: IterKey,
    /// The ITER record's exit: the verdict's when there is one, else the agent's.
    pub exit: i32,
    pub done: usize,
    pub total: usize,
}

impl Loop {
    pub(super) fn record(
        &mut self,
        prep: &Prepared,
        attempted: &Attempted,
        ending: &Ending,
    ) -> Result<Recorded> {
        let unit = self.source.unit();
        let closing = match ending {
            Ok(v) => {
                let j = &v.judged;
                let complete = v.evidence() && v.tests_ok && v.promise_ok && j.tampered.is_empty();
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
        self.close(prep, attempted, ending, closing)
    }

    fn close(
        &mut self,
        prep: &Prepared,
        attempted: &Attempted,
        ending: &Ending,
        (subject, status, done, total, figures): (Subject, String, usize, usize, String),
    ) -> Result<Recorded> {
        let commit = self.commit_iteration(prep, subject, (&status, done, total))?;
        if let Some(w) = &self.watch
            && commit.subject.is_some()
        {
            // A commit may have recorded a new submodule or nested repository.
            w.set_always(self.repo.gitlinks()?);
        }
        let fingerprint = if self.settings.no_commit {
            self.repo.fingerprint()?
        } else {
            self.repo.fingerprint_after_staging()?
        };
        let exit = match ending {
            Ok(Verified {
                verdict: Some(v), ..
            }) => v.exit_code,
            _ => attempted.finished.exit_code,
        };
        Ok(Recorded {
            key: IterKey {
                figures,
                commit: commit.head.clone(),
                fingerprint,
            },
            commit,
            exit,
            done,
            total,
        })
    }
}
