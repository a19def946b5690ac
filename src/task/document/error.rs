//! Why a task file is refused: [`TaskError`], each naming the file and, where known, the line.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a task file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    /// The file does not exist.
    #[error("{}: task file not found", .path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read.
    #[error("{}: cannot read task file: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The path holds a FIFO, a device, a directory…: never read (or waited on).
    #[error("{}: is {kind}, not a regular file", .path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: crate::files::Kind,
    },
    /// The file is larger than ralph reads.
    #[error("{}: larger than {} KiB ({size} bytes)", .path.display(), crate::files::MAX_TEXT / 1024)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The file contains a NUL byte.
    #[error("{}:{line}: file contains binary data (a NUL byte)", .path.display())]
    Binary {
        /// The file.
        path: PathBuf,
        /// Line of the first NUL byte.
        line: usize,
    },
    /// The file is not valid UTF-8.
    #[error("{}:{line}: file is not valid UTF-8", .path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Line of the first invalid byte.
        line: usize,
    },
    /// The frontmatter's opening fence has no closing fence.
    #[error("{}:{line}: frontmatter opened at line {line} is never closed", .path.display())]
    UnclosedFrontmatter {
        /// The file.
        path: PathBuf,
        /// Line of the opening fence.
        line: usize,
    },
    /// The frontmatter YAML does not parse into [`Frontmatter`].
    #[error("{}:{line}: invalid frontmatter: {message}", .path.display())]
    InvalidFrontmatter {
        /// The file.
        path: PathBuf,
        /// File line of the YAML error.
        line: usize,
        /// Short description of the YAML error.
        message: String,
    },
    /// A configuration key that only configuration files set.
    #[error(
        "{}:{line}: `{key}` is set in configuration files only, not in a task file's frontmatter",
        .path.display()
    )]
    ConfigFileOnly {
        /// The file.
        path: PathBuf,
        /// Line of the key.
        line: usize,
        /// The key.
        key: String,
    },
    /// The frontmatter has no (non-blank) `task`.
    #[error("{}:{line}: frontmatter has no `task`", .path.display())]
    MissingTaskName {
        /// The file.
        path: PathBuf,
        /// Line of the opening fence.
        line: usize,
    },
    /// No task-list items were found where criteria are expected.
    #[error(
        "{}: no criteria: needs `- [ ]` checkboxes under ## Success Criteria",
        Located(.path, *.line)
    )]
    NoCriteria {
        /// The file.
        path: PathBuf,
        /// Line of the criteria heading, when one exists.
        line: Option<usize>,
    },
}

/// `path` or `path:line`, for messages.
pub(super) struct Located<'a>(pub(super) &'a Path, pub(super) Option<usize>);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(line) => write!(f, "{}:{line}", self.0.display()),
            None => write!(f, "{}", self.0.display()),
        }
    }
}

impl TaskError {
    /// A suggestion for fixing the problem, when there is an obvious one.
    pub(crate) fn hint(&self) -> Option<String> {
        let hint = match self {
            TaskError::Missing { .. } => "run `ralph init` to create one",
            TaskError::Io { .. } => return None,
            TaskError::NotRegular { .. } => {
                "the task file must be a regular file (a symlink to one is fine)"
            }
            TaskError::TooLarge { .. } => "a task file holds at most 1 MiB",
            TaskError::Binary { .. } | TaskError::NotUtf8 { .. } => {
                "the task file must be UTF-8 text"
            }
            TaskError::UnclosedFrontmatter { .. } => {
                "end the frontmatter with a `---` line, or remove the opening `---`"
            }
            TaskError::InvalidFrontmatter { .. } => {
                return Some(format!(
                    "ralph's keys: {}",
                    super::frontmatter::TASK_KEYS.join(", ")
                ));
            }
            TaskError::ConfigFileOnly { .. } => {
                "set it in .ralph/config.toml or ~/.config/ralph/config.toml"
            }
            TaskError::MissingTaskName { .. } => "add `task: <short name>` to the frontmatter",
            TaskError::NoCriteria { .. } => "add `- [ ]` checkboxes under ## Success Criteria",
        };
        Some(hint.to_string())
    }

    /// The 1-based file line the error refers to, when known.
    pub(crate) fn line(&self) -> Option<usize> {
        match self {
            TaskError::Missing { .. }
            | TaskError::Io { .. }
            | TaskError::NotRegular { .. }
            | TaskError::TooLarge { .. } => None,
            TaskError::Binary { line, .. }
            | TaskError::NotUtf8 { line, .. }
            | TaskError::UnclosedFrontmatter { line, .. }
            | TaskError::InvalidFrontmatter { line, .. }
            | TaskError::ConfigFileOnly { line, .. }
            | TaskError::MissingTaskName { line, .. } => Some(*line),
            TaskError::NoCriteria { line, .. } => *line,
        }
    }
}
