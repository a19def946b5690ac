//! `--worktree NAME` (SPEC §13): the run in the loop's own worktree (made, reused or asked
//! about), a dry run's plan there, and — after the run's close — the merge back.

use std::path::{Path, PathBuf};

use super::begin::Continuation;
use super::start;
use crate::cli::RunOptions;
use crate::commands::Context;
use crate::config;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::state::{HaltReason, RalphDir, RunState};
use crate::supervisor;

/// A worktree loop that ran: its repository's, its name, its worktree.
pub(super) struct LoopRan {
    repo: Repo,
    name: String,
    path: PathBuf,
}

/// `--merge` (or `merge = true` in the loop's config): a loop that completed merges back.
pub(super) fn merge_back(
    ctx: &Context,
    options: &RunOptions,
    code: i32,
    ran: LoopRan,
) -> Result<i32> {
    let LoopRan { repo, name, path } = ran;
    let configured = config::file_layers(&RalphDir::new(&path).path, None)?
        .iter()
        .find_map(|s| s.layer.merge)
        .unwrap_or(false);
    if code == exit::COMPLETE && (options.merge || configured) {
        // A task already complete ends at once, before any state: the loop made nothing to merge.
        if RunState::load(&RalphDir::new(&path).state_file())?.is_none() {
            ctx.ui
                .note(&format!("loop `{name}` ran no iteration: nothing to merge"));
            return Ok(code);
        }
        return crate::worktree::merge(&repo, &name, ctx.ui);
    }
    // The work is on the loop's branch: the main work tree the user stands in has none of it.
    if code == exit::COMPLETE && RunState::load(&RalphDir::new(&path).state_file())?.is_some() {
        ctx.ui.next(
            &format!("ralph merge {name}"),
            &format!(
                "bring loop `{name}`'s work (branch ralph/{name}) into the branch it started from"
            ),
        );
    }
    Ok(code)
}

/// `--worktree NAME`: the loop runs in its own worktree (SPEC §13), then merges back with
/// `--merge` when it completed. A run on a finished loop's name starts a new branch; on an
/// unfinished loop it is asked about as any unfinished run (refused when nobody can answer,
/// naming `ralph resume --worktree NAME`). A dry run makes and changes nothing. The exit
/// code, and the loop to merge back when it ran in a worktree.
pub(super) fn in_worktree(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
) -> Result<(i32, Option<LoopRan>)> {
    let Some(named) = &options.worktree else {
        return Ok((start(ctx, targets, options, dry_run, how)?, None));
    };
    let repo = Repo::discover(&ctx.cwd)?;
    let name = &loop_name(ctx, &repo, named.as_deref(), targets)?;
    if dry_run {
        return Ok((
            dry_run_in_worktree(ctx, &repo, name, targets, options, how)?,
            None,
        ));
    }
    let wt = if how == Continuation::Resume {
        crate::worktree::open_for_resume(&repo, name)?
    } else {
        crate::worktree::for_run(&repo, name, ctx.ui)?
    };
    if how == Continuation::Fresh
        && !supervisor::is_interactive(options.yes)
        && let Some(p) = crate::worktree::unfinished(&wt.path)?
    {
        return Err(Error::user(format!(
            "loop `{name}` has an unfinished run ({}, iteration {}/{}, {})",
            p.run_id,
            p.iteration,
            p.max_iterations,
            p.halt_reason.map_or("killed while running", HaltReason::as_str)
        ))
        .with_hint(format!(
            "continue it with `ralph resume --worktree {name}`, or start it over with `ralph run --worktree {name} --reset`"
        )));
    }
    crate::worktree::carry_targets(repo.root(), &ctx.cwd, &wt.path, targets)?;
    let sub = ctx.cwd.strip_prefix(repo.root()).unwrap_or(Path::new(""));
    let cwd = wt.path.join(sub);
    crate::files::create_dir_all(&cwd).map_err(|e| Error::file("create directory", &cwd, e))?;
    ctx.ui.note(&format!(
        "loop `{name}`: worktree {} on branch {}",
        wt.path.display(),
        wt.branch
    ));
    let inner = Context { cwd, ui: ctx.ui };
    let code = start(&inner, targets, options, false, how)?;
    let ran = LoopRan {
        repo,
        name: name.clone(),
        path: wt.path,
    };
    Ok((code, Some(ran)))
}

/// The loop `--worktree [NAME]` names: NAME, else the `prd.json` target's (its `branchName`).
fn loop_name(
    ctx: &Context,
    repo: &Repo,
    named: Option<&str>,
    targets: &[String],
) -> Result<String> {
    match named {
        // `ralph run --worktree prd.json` reads as the loop `prd.json` on the default task:
        // the file was meant, not a name.
        Some(name) if targets.is_empty() && ctx.cwd.join(name).is_file() => Err(Error::usage(
            format!("`--worktree {name}`: `{name}` is a file here, taken as the loop's NAME"),
        )
        .with_hint(format!(
            "put the target first (`ralph run {name} --worktree`), or name the loop and the target (`--worktree NAME {name}`)"
        ))),
        Some(name) => Ok(name.to_string()),
        None => loop_of_stories(ctx, repo, targets),
    }
}

/// `--worktree` without a NAME: the loop whose branch is the `prd.json` target's `branchName`,
/// exactly as written (SPEC §14). Loops run on `ralph/NAME` (SPEC §13), so it must be
/// `ralph/NAME` with a NAME `--worktree NAME` takes; any other is an error naming the file,
/// never a branch of another name.
fn loop_of_stories(ctx: &Context, repo: &Repo, targets: &[String]) -> Result<String> {
    let plan = super::plan::resolve_plan(ctx, repo.root(), targets)?;
    let super::plan::Plan::Stories { rel, stories } = plan else {
        return Err(Error::usage(
            "`--worktree` needs a NAME: only a prd.json target names its loop (its `branchName`)",
        )
        .with_hint("name the loop: `ralph run --worktree NAME`"));
    };
    let text = crate::files::read_text(&repo.root().join(&rel)).unwrap_or_default();
    let line = text
        .find("\"branchName\"")
        .map_or(1, |i| text[..i].matches('\n').count() + 1);
    let hint = "set `\"branchName\": \"ralph/NAME\"` in it, or name the loop: `--worktree NAME`";
    let Some(branch) = &stories.branch else {
        return Err(Error::user(format!(
            "{rel}: no `branchName`, and `--worktree` was given no NAME"
        ))
        .with_hint(hint));
    };
    match branch.strip_prefix("ralph/") {
        Some(name) if crate::worktree::check_name(name).is_ok() => Ok(name.to_string()),
        _ => Err(Error::user(format!(
            "{rel}:{line}: `branchName` {branch:?} is not a loop's branch: `--worktree` loops run on `ralph/NAME`, NAME of letters, digits, `.`, `_` and `-`"
        ))
        .with_hint(hint)),
    }
}

/// `--dry-run --worktree NAME`: the plan in the loop's worktree when a run would continue there,
/// else in this work tree (whose task files a new worktree would start with).
pub(super) fn dry_run_in_worktree(
    ctx: &Context,
    repo: &Repo,
    name: &str,
    targets: &[String],
    options: &RunOptions,
    how: Continuation,
) -> Result<i32> {
    let reused = match crate::worktree::existing(repo, name)? {
        Some(path) if !crate::worktree::finished(&path)? => Some(path),
        _ => None,
    };
    let Some(path) = reused else {
        ctx.ui.note(&format!(
            "loop `{name}`: a run would start branch ralph/{name} afresh from HEAD, in a new worktree"
        ));
        return start(ctx, targets, options, true, how);
    };
    ctx.ui
        .note(&format!("loop `{name}`: worktree {}", path.display()));
    let sub = ctx.cwd.strip_prefix(repo.root()).unwrap_or(Path::new(""));
    let inner = Context {
        cwd: path.join(sub),
        ui: ctx.ui,
    };
    start(&inner, targets, options, true, how)
}
