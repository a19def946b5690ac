//! `ralph watch`: the live dashboard of every loop (SPEC §13); off a terminal, an error pointing
//! to `ralph status --all --json`. Exit 0 on `q`, 130 on a signal.

use std::io::IsTerminal;

use super::Context;
use crate::error::{Error, Result};
use crate::git::Repo;

pub(crate) fn run(ctx: &Context) -> Result<i32> {
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Err(Error::user("ralph watch needs a terminal").with_hint(
            "off a terminal, `ralph status --all --json` prints every loop once (run it again to refresh)",
        ));
    }
    let repo = Repo::discover(&ctx.cwd)?;
    crate::watch::run(repo, color())
}

/// Colour unless `--color never`, or `NO_COLOR` under `--color auto`.
fn color() -> bool {
    match anstream::ColorChoice::global() {
        anstream::ColorChoice::Never => false,
        anstream::ColorChoice::Auto => std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        _ => true,
    }
}
