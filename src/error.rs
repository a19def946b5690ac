//! The one error type shown to users, its exit codes and its hints.

use std::path::Path;

use crate::git::GitError;
use crate::task::document::TaskError;

/// Exit codes of `ralph` (SPEC §6), in one place.
pub mod exit {
    pub const COMPLETE: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const MAX_ITERATIONS: i32 = 3;
    pub const STALLED: i32 = 4;
    pub const STUCK: i32 = 5;
    pub const TARGET_ONLY: i32 = 6;
    pub const VERDICT_UNAVAILABLE: i32 = 7;
    pub const TAMPERED: i32 = 8;
    pub const PARTIAL: i32 = 9;
    pub const BUDGET: i32 = 10;
    /// A worktree loop completed but could not merge back (SPEC §13).
    pub const NOT_MERGED: i32 = 11;
    pub const INTERRUPTED: i32 = 130;
}

/// Everything that can stop a command before or outside the loop's own halt rules.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn user(message: impl Into<String>) -> Self {
        Error::User {
            message: message.into(),
            hint: None,
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage {
            message: message.into(),
            hint: None,
        }
    }

    /// Attach a hint to a user or usage error (other kinds carry their own).
    pub fn with_hint(self, text: impl Into<String>) -> Self {
        match self {
            Error::User { message, .. } => Error::User {
                message,
                hint: Some(text.into()),
            },
            Error::Usage { message, .. } => Error::Usage {
                message,
                hint: Some(text.into()),
            },
            other => other,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Wrap an I/O error about a file, naming it.
    pub fn file(action: &str, path: &Path, source: std::io::Error) -> Self {
        Error::io(format!("failed to {action} `{}`", path.display()), source)
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage { .. } => exit::USAGE,
            _ => exit::ERROR,
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            Error::Task(e) => e.hint(),
            Error::Git(_) => None,
            Error::User { hint, .. } | Error::Usage { hint, .. } => hint.clone(),
            Error::Io { .. } => None,
        }
    }
}
