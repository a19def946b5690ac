//! An iteration's errors as endings (SPEC §11): a phase that fails — git refuses, a write fails —
//! ends the iteration as a [`Halt::Error`] that still goes through the close; and each step of
//! the close that fails is noted here while the steps after it still run, so the close records
//! what it can before the run ends with the error.

use std::fmt::Display;

use super::decide::Halt;
use crate::error::{Error, Result};

/// The hint of an iteration that ended in an error of ralph's.
const HINT: &str = "remove what stopped it (see the message), then continue with `ralph resume`: it commits the work left and goes on at the next iteration";

/// An error and its causes on one line: `failed to open `x`: Is a directory (os error 21)`.
pub(crate) fn chain(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let said = s.to_string();
        // Transparent variants repeat their inner message as the first source.
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = s.source();
    }
    text
}

/// The ending of an iteration whose phase failed; `what` says what did not happen.
pub(super) fn failed(what: impl Display, e: &Error) -> Halt {
    Halt::Error {
        message: format!("{what}: {}", chain(e)),
        hint: e.hint().unwrap_or_else(|| HINT.to_string()),
    }
}

/// Whether `e` is a git command killed because ralph was interrupted: what it was for did not
/// happen, and the iteration is interrupted, not in error.
pub(super) fn stopped(e: &Error) -> bool {
    matches!(e, Error::Git(crate::git::GitError::Stopped(_)))
}

/// The steps of a close that failed, in order; and whether one was cut short by an interrupt.
#[derive(Debug, Default)]
pub(super) struct Faults(Vec<String>, bool);

impl Faults {
    /// `r`'s value; or, noting its error under `what`, `fallback`.
    pub(crate) fn or<T>(&mut self, r: Result<T>, what: impl Display, fallback: T) -> T {
        r.unwrap_or_else(|e| {
            self.note(what, &e);
            fallback
        })
    }

    /// Note that `what` did not happen, because of `e`.
    /// A git command killed for an interrupt is no error: the iteration is interrupted.
    pub(crate) fn note(&mut self, what: impl Display, e: &Error) {
        if stopped(e) {
            self.1 = true;
            return;
        }
        self.0.push(format!("{what}: {}", chain(e)));
    }

    /// The error the iteration ends with when its close failed: the ending's own error first
    /// (when it is one), then what the close could not do; `Halt::Interrupted` when only an
    /// interrupt cut it short (an error ending stands). `None`: the ending stands.
    pub(crate) fn into_halt(self, ending: Option<&Halt>) -> Option<Halt> {
        if self.0.is_empty() {
            let error = matches!(ending, Some(Halt::Error { .. }));
            return (self.1 && !error).then_some(Halt::Interrupted);
        }
        Some(self.halt_with(ending))
    }

    /// [`Faults::into_halt`], whether or not anything failed.
    pub(crate) fn halt_with(self, ending: Option<&Halt>) -> Halt {
        let faults = self.0.join("; ");
        match ending {
            Some(Halt::Error { message, hint }) => Halt::Error {
                message: format!("{message}; and {faults}"),
                hint: hint.clone(),
            },
            _ => Halt::Error {
                message: faults,
                hint: HINT.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error() -> Error {
        Error::file(
            "append to",
            std::path::Path::new(".ralph/iterations.log"),
            std::io::Error::from_raw_os_error(libc::EFBIG),
        )
    }

    #[test]
    fn a_fault_reads_with_its_causes_and_joins_the_endings_own_error() {
        let mut f = Faults::default();
        assert_eq!(f.or(Ok(3), "unused", 0), 3);
        assert!(Faults::default().into_halt(None).is_none());
        assert_eq!(
            f.or(Err(io_error()), "iteration 2's record is not written", 0),
            0
        );
        let Some(Halt::Error { message, hint }) = f.into_halt(Some(&Halt::Interrupted)) else {
            panic!("an error")
        };
        assert!(
            message.starts_with("iteration 2's record is not written: failed to append to `.ralph/iterations.log`: File too large"),
            "{message}"
        );
        assert!(hint.contains("ralph resume"));
        let mut f = Faults::default();
        f.note("HEAD cannot be read", &io_error());
        let first = failed("the agent cannot be run", &io_error());
        let Some(Halt::Error { message, .. }) = f.into_halt(Some(&first)) else {
            panic!("an error")
        };
        assert!(
            message.starts_with("the agent cannot be run: failed to append")
                && message.contains("; and HEAD cannot be read: "),
            "{message}"
        );
    }
}
