//! The one error type shown to users, its exit codes and its hints.

use std::path::Path;

use crate::git::GitError;
use crate::task::document::TaskError;

/// Exit codes of `ralph` (SPEC §6), in one place.
pub(crate) mod exit {
    pub(crate) const COMPLETE: i32 = 0;
    pub(crate) const ERROR: i32 = 1;
    pub(crate) const USAGE: i32 = 2;
    pub(crate) const MAX_ITERATIONS: i32 = 3;
    pub(crate) const STALLED: i32 = 4;
    pub(crate) const STUCK: i32 = 5;
    pub(crate) const TARGET_ONLY: i32 = 6;
    pub(crate) const VERDICT_UNAVAILABLE: i32 = 7;
    pub(crate) const TAMPERED: i32 = 8;
    pub(crate) const PARTIAL: i32 = 9;
    pub(crate) const BUDGET: i32 = 10;
    /// A worktree loop completed but could not merge back (SPEC §13).
    pub(crate) const NOT_MERGED: i32 = 11;
    /// The agent's question went unanswered for `--answer-timeout` (SPEC §16).
    pub(crate) const WAITING_FOR_PERSON: i32 = 12;
    pub(crate) const INTERRUPTED: i32 = 130;
}

/// Everything that can stop a command before or outside the loop's own halt rules.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Git(#[from] GitError),
    /// A user-facing failure with an optional hint (exit 1).
    #[error("{message}")]
    User {
        message: String,
        hint: Option<String>,
    },
    /// Contradictory or malformed arguments (exit 2).
    #[error("{message}")]
    Usage {
        message: String,
        hint: Option<String>,
    },
    /// A wait beyond the waiting budget (`--max-wait`), as a tracker's rate limit whose reset is
    /// further away (exit 10).
    #[error("{message}")]
    Budget {
        message: String,
        hint: Option<String>,
    },
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn user(message: impl Into<String>) -> Self {
        Error::User {
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Error::Usage {
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn budget(message: impl Into<String>) -> Self {
        Error::Budget {
            message: message.into(),
            hint: None,
        }
    }

    /// Attach a hint to a user, usage or budget error (other kinds carry their own).
    pub(crate) fn with_hint(self, text: impl Into<String>) -> Self {
        match self {
            Error::User { message, .. } => Error::User {
                message,
                hint: Some(text.into()),
            },
            Error::Usage { message, .. } => Error::Usage {
                message,
                hint: Some(text.into()),
            },
            Error::Budget { message, .. } => Error::Budget {
                message,
                hint: Some(text.into()),
            },
            other => other,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Wrap an I/O error about a file, naming it.
    pub(crate) fn file(action: &str, path: &Path, source: std::io::Error) -> Self {
        Error::io(format!("failed to {action} `{}`", path.display()), source)
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Error::Usage { .. } => exit::USAGE,
            Error::Budget { .. } => exit::BUDGET,
            _ => exit::ERROR,
        }
    }

    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            Error::Task(e) => e.hint(),
            Error::Git(_) => None,
            Error::User { hint, .. } | Error::Usage { hint, .. } | Error::Budget { hint, .. } => {
                hint.clone()
            }
            Error::Io { .. } => None,
        }
    }
}
