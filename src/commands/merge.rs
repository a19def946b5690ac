//! `ralph merge NAME`: merge a completed worktree loop back (SPEC §13).

use super::Context;
use crate::error::Result;
use crate::git::Repo;

pub(crate) fn run(ctx: &Context, name: &str) -> Result<i32> {
    let repo = Repo::discover(&ctx.cwd)?;
    crate::worktree::merge(&repo, name, ctx.ui)
}
