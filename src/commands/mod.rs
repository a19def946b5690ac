//! One module per subcommand: `init`, `run` (and `resume`), `status`, `merge`, `watch`.

pub mod init;
pub mod merge;
pub mod run;
pub mod status;
pub mod watch;

use std::path::PathBuf;

use crate::ui::Ui;

/// What every command gets: where to work and how to talk.
#[derive(Debug, Clone)]
pub struct Context {
    /// The directory given with `-C`, else the current directory (absolute).
    pub cwd: PathBuf,
    pub ui: Ui,
}
