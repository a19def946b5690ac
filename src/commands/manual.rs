//! `ralph completions SHELL` (clap_complete) and the hidden `ralph __man DIR` that writes the man
//! pages checked in under docs/man/ (clap_mangen), both from the clap types of `cli`.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::error::{Error, Result};

/// The internal command that writes the man pages: `ralph __man DIR`.
pub(crate) const MAN_COMMAND: &str = "__man";

/// The completion script for `args.shell`, on stdout.
pub(crate) fn completions(args: &CompletionsArgs) -> Result<i32> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "ralph", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("write the completion script", e))?;
    Ok(0)
}

/// `ralph __man DIR`: ralph.1 and one page per subcommand (ralph-run.1, …) into DIR. The pages
/// name the version without the commit, so that they change only when the CLI does.
pub(crate) fn man_main(args: &[std::ffi::OsString]) -> i32 {
    let [dir] = args else {
        eprintln!("usage: ralph {MAN_COMMAND} DIR");
        return 2;
    };
    let cmd = Cli::command().version(env!("CARGO_PKG_VERSION"));
    match clap_mangen::generate_to(cmd, Path::new(dir)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "ralph: cannot write the man pages into {}: {e}",
                Path::new(dir).display()
            );
            1
        }
    }
}
