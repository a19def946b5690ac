//! One module per subcommand: `init`, `run` (and `resume`), `status`, `merge`, `watch`.

pub(crate) mod init;
pub(crate) mod merge;
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
        Ok(Context { cwd, ui })
    }
}
