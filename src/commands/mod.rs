//! One module per subcommand: `init`, `run` (and `resume`), `status`, `merge`, `watch`,
//! `person` (`ask`, `answer`, `hint`);
//! `manual`: `completions` and the man pages.

pub(crate) mod init;
pub(crate) mod manual;
pub(crate) mod merge;
pub(crate) mod person;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod watch;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ui::Ui;

/// What every command gets: where to work and how to talk.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The directory given with `-C`, else the current directory (absolute).
    pub(crate) cwd: PathBuf,
    pub(crate) ui: Ui,
}

impl Context {
    /// The context of a command run in `dir` (`-C`), else in the current directory.
    pub(crate) fn new(dir: Option<&Path>, ui: Ui) -> Result<Context> {
        let cwd = match dir {
            Some(d) => {
                let dir = d
                    .canonicalize()
                    .map_err(|e| Error::file("enter directory", d, e))?;
                if !dir.is_dir() {
                    return Err(Error::usage(format!(
                        "-C `{}`: not a directory",
                        d.display()
                    )));
                }
                dir
            }
            None => std::env::current_dir()
                .map_err(|e| Error::io("failed to read the current directory", e))?,
        };
        // ralph's git opens the repository enclosing the directory; the agent's would open
        // the one such a variable names (issue 29).
        if let Some(var) = crate::git::foreign_repository_var() {
            return Err(Error::user(format!(
                "{var} is set: ralph works on the repository enclosing the directory it runs in, and the agent's git would work on the one {var} names"
            ))
            .with_hint(format!("unset {var}, and run ralph in the repository (or with -C)")));
        }
        Ok(Context { cwd, ui })
    }
}
