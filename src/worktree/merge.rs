//! A loop merged back into the branch it started from (SPEC §13), as `git merge --no-edit`
//! would: only a completed loop, only into a clean work tree, serialised across loops, changing
//! nothing on a conflict. The branch to merge into is ralph's record, never a file in the git
//! directory; ralph's git looks inside no submodule (whose configuration an agent could write).
//! ralph's own files (`own_files`) merge through ralph's driver, on every path: the check, a
//! merge in the base's work tree, a merge of the base's ref alone.

use std::path::{Path, PathBuf};

use super::includes;
use super::own_files::{self, Driver, Side};
use super::records::Records;
use super::{Worktree, current_branch, retire};
use crate::error::{Error, Result, exit};
use crate::git::{GitError, Repo};
use crate::state::{HaltReason, RalphDir, RunState};
use crate::ui::Ui;

/// Merge loop `name` back into the branch it started from. Exit 0 when merged, 11 when it could
/// not be (conflicts named, the base work tree not clean, the loop's worktree off its branch).
pub(crate) fn merge(repo: &Repo, name: &str, ui: Ui) -> Result<i32> {
    merge_as(repo, name, false, ui)
}

/// [`merge`], for a caller that saw the loop end complete (`vouched`): a run that ended at
/// once, already complete by its checks, before any state was recorded (a queue's item whose
/// branch a worker before finished), merges too.
pub(crate) fn merge_as(repo: &Repo, name: &str, vouched: bool, ui: Ui) -> Result<i32> {
    let records = Records::open(repo)?;
    let wt = super::open(repo, &records, name)?;
    let mut loop_repo = Repo::discover(&wt.path)?;
    let recorded = RunState::load(&RalphDir::new(loop_repo.root()).state_file())?;
    let sandboxed = match recorded {
        None if vouched => false,
        _ => completed(&loop_repo, name)?,
    };
    // A sandboxed loop's agent could write the common git directory: the merge's git writes
    // only beneath the repository too (`MERGE_MSG` linked to a file of the user's would have
    // `git merge` overwrite it), as the loop's own did.
    let confined;
    let repo = if sandboxed {
        loop_repo.confine_writes();
        confined = opened(repo.root(), true)?;
        &confined
    } else {
        repo
    };
    let Some(base) = wt.base.clone() else {
        return Err(Error::user(format!(
            "ralph has no record of a branch loop `{name}` started from (a detached HEAD, or a worktree ralph did not make): there is no branch to merge it into"
        ))
        .with_hint(format!("merge `{}` by hand", wt.branch)));
    };
    if !on_its_branch(&wt, &loop_repo, ui) {
        return not_merged(&loop_repo);
    }
    let _lock = records.lock()?;
    let tip = recorded.as_ref().and_then(|s| s.tip.as_deref());
    let theirs = recorded_tip(repo, &wt, tip, ui)?;
    if includes::refused(repo, &base, theirs.label, &theirs.rev, ui)? {
        return not_merged(&loop_repo);
    }
    let target = checked_out_at(repo, &base)?;
    if let Some((tree, Some(pid))) = &target {
        // A supervisor works there now: a merge would change files under its agent's feet
        // (and its next commit would take them as the agent's work).
        ui.alert(&format!(
            "not merged: a loop is running in the work tree of `{base}` ({}, ralph pid {}): merge once it halted",
            tree.display(),
            pid.map_or_else(|| "?".to_string(), |p| p.to_string())
        ));
        ui.next(&format!("ralph merge {}", wt.name), "once that loop halted");
        return not_merged(&loop_repo);
    }
    let target = target.map(|(tree, _)| tree);
    let base_tree = target
        .as_deref()
        .map(|t| opened(t, sandboxed))
        .transpose()?;
    if let Some(tree) = &base_tree
        && is_dirty_tracked(tree)?
    {
        ui.alert(&format!(
            "not merged: the work tree of `{base}` ({}) has uncommitted changes",
            tree.root().display()
        ));
        ui.next(
            &format!("ralph merge {}", wt.name),
            "once those changes are committed (or stashed)",
        );
        return not_merged(&loop_repo);
    }
    let driver = driver(repo, &base, &theirs, sandboxed)?;
    // The check runs where the merge will: git reads the attributes of that work tree.
    let checked_in = base_tree.as_ref().unwrap_or(repo);
    let conflicts = conflicts(checked_in, &base, &theirs, driver.as_ref())?;
    if !conflicts.is_empty() {
        report_conflicts(&wt, &base, &conflicts, ui);
        return not_merged(&loop_repo);
    }
    let at = match &base_tree {
        Some(tree) => merge_in(tree, &base, &theirs, driver.as_ref(), ui)?,
        None => merge_ref(repo, &base, &theirs, driver.as_ref(), ui)?,
    };
    settle(repo, &records, &wt, &loop_repo, at, ui)?;
    Ok(exit::COMPLETE)
}

/// The loop's work is on its branch only while its worktree has that branch checked out: an
/// agent that switched branches left its commits elsewhere, and merging `ralph/NAME` would
/// report a merge of nothing. Said when it is not.
fn on_its_branch(wt: &Worktree, loop_repo: &Repo, ui: Ui) -> bool {
    let on = current_branch(loop_repo);
    if on.as_deref() == Some(wt.branch.as_str()) {
        return true;
    }
    ui.alert(&format!(
        "not merged: the worktree of loop `{}` ({}) is on {}, not `{}`: its last commits are not on the loop's branch",
        wt.name,
        wt.path.display(),
        on.map_or_else(|| "a detached HEAD".to_string(), |b| format!("branch `{b}`")),
        wt.branch
    ));
    ui.plain("The branch and the worktree stay as they are: merge by hand what should be merged.");
    false
}

/// The repository at `path`, its git's writes kept beneath it when `confined`.
fn opened(path: &Path, confined: bool) -> Result<Repo> {
    let mut repo = Repo::discover(path)?;
    if confined {
        repo.confine_writes();
    }
    Ok(repo)
}

/// After the merge: the loop's worktree removed and its logs kept, unless it holds files ralph
/// does not delete (then it stays, state and logs included, its merge recorded).
fn settle(
    repo: &Repo,
    records: &Records,
    wt: &Worktree,
    loop_repo: &Repo,
    at: String,
    ui: Ui,
) -> Result<()> {
    let foreign = retire::foreign_files(loop_repo)?;
    if foreign.is_empty() && retire::retire(repo, records, wt, loop_repo, Some(at.clone()), ui)? {
        return Ok(());
    }
    let mut record = records.loop_record(&wt.name)?.unwrap_or_default();
    record.merged_at = Some(at);
    records.set_loop(&wt.name, &record)?;
    if !foreign.is_empty() {
        let path = wt.path.display();
        ui.warn(&format!(
            "kept the worktree {path}: it holds untracked or ignored files ralph does not delete ({}); remove it with `git worktree remove --force {path}`",
            retire::some_of(&foreign)
        ));
    }
    Ok(())
}

fn report_conflicts(wt: &Worktree, base: &str, conflicts: &[String], ui: Ui) {
    ui.alert(&format!(
        "not merged: `{}` conflicts with `{base}` in {} file{}:",
        wt.branch,
        conflicts.len(),
        if conflicts.len() == 1 { "" } else { "s" }
    ));
    for c in conflicts {
        ui.plain(&format!("  {c}"));
    }
    ui.plain(&format!(
        "The branch `{}` and its worktree {} stay as they are: resolve by hand.",
        wt.branch,
        wt.path.display()
    ));
}

/// A merge that did not go in: the loop stays complete, and its recorded exit code says 11, so
/// `status --all` tells this loop from one that merged (SPEC §13).
fn not_merged(loop_repo: &Repo) -> Result<i32> {
    let file = RalphDir::new(loop_repo.root()).state_file();
    if let Some(mut st) = RunState::load(&file)? {
        st.exit_code = Some(exit::NOT_MERGED);
        st.save(&file)?;
    }
    Ok(exit::NOT_MERGED)
}

/// Only a completed loop merges; `true` when it ran in the sandbox.
fn completed(loop_repo: &Repo, name: &str) -> Result<bool> {
    let rd = RalphDir::new(loop_repo.root());
    let st = RunState::load(&rd.state_file())?;
    match st
        .as_ref()
        .and_then(|s| (!s.running).then_some(s.halt_reason))
    {
        Some(Some(HaltReason::Complete)) => Ok(st
            .as_ref()
            .and_then(|s| s.pinned.as_ref())
            .is_some_and(|p| p.sandbox.is_some())),
        other => {
            let now = match other {
                None if st.is_some() => "still running".to_string(),
                None => "never ran".to_string(),
                Some(r) => format!("halted: {}", r.map_or("unknown", HaltReason::as_str)),
            };
            // A loop that never ran has no run to resume: it is started.
            let finish = if st.is_some() { "resume" } else { "run" };
            Err(
                Error::user(format!("loop `{name}` is not complete ({now})")).with_hint(format!(
                    "finish it first: `ralph {finish} --worktree {name}`"
                )),
            )
        }
    }
}

/// The work tree that has `branch` checked out, if any, and whether a supervisor runs a loop
/// there now (`Some(its pid, when it said)`).
fn checked_out_at(repo: &Repo, branch: &str) -> Result<Option<(PathBuf, Option<Option<u32>>)>> {
    Ok(crate::loops::all(repo)?
        .into_iter()
        .find(|e| e.branch.as_deref() == Some(branch))
        .map(|e| {
            let running = e.status.running.then_some(e.status.pid);
            (e.path, running)
        }))
}

/// Whether tracked files differ from HEAD, a submodule compared by its commit only (on the
/// command line, which no `.gitmodules` can override).
fn is_dirty_tracked(tree: &Repo) -> Result<bool> {
    let out = tree.cli().run(
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--ignore-submodules=dirty",
        ],
        None,
    )?;
    Ok(!out.is_empty())
}

/// The driver that merges ralph's own files for a merge of branch `theirs` into branch `ours`
/// (`None`: no file of ralph's differs between them, or a branch is not there — git's merge
/// then says so).
fn driver(repo: &Repo, ours: &str, theirs: &Theirs, confined: bool) -> Result<Option<Driver>> {
    let tip = |rev: &str| commit_of(repo, rev).ok().map(|c| c.id());
    let (Some(ours_tip), Some(theirs_tip)) = (tip(ours), tip(&theirs.rev)) else {
        return Ok(None);
    };
    let label = |given: &str| -> String {
        given
            .strip_prefix("refs/remotes/")
            .or_else(|| given.strip_prefix("refs/heads/"))
            .unwrap_or(given)
            .to_string()
    };
    let (ours_label, theirs_label) = (label(ours), label(theirs.label));
    let ours = Side {
        label: &ours_label,
        tip: ours_tip,
    };
    let theirs = Side {
        label: &theirs_label,
        tip: theirs_tip,
    };
    Driver::for_merge(repo, &ours, &theirs, confined)
}

/// `args` after the driver's `-c` options.
fn with_driver<'a>(driver: Option<&'a Driver>, args: &[&'a str]) -> Vec<&'a str> {
    driver
        .into_iter()
        .flat_map(Driver::args)
        .chain(args.iter().copied())
        .collect()
}

/// The files a merge of `theirs` into `ours` would conflict in (nothing is touched).
fn conflicts(
    repo: &Repo,
    ours: &str,
    theirs: &Theirs,
    driver: Option<&Driver>,
) -> Result<Vec<String>> {
    let args = with_driver(
        driver,
        &[
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            ours,
            &theirs.rev,
        ],
    );
    let out = repo.cli().output(&args, None)?;
    match out.status.code() {
        Some(0) => Ok(Vec::new()),
        Some(1) => {
            let said = String::from_utf8_lossy(&out.stderr);
            Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .skip(1)
                .take_while(|l| !l.is_empty())
                .map(|file| match own_files::refused(&said, file) {
                    Some(why) => format!("{file} (left by ralph's merge driver: {why})"),
                    None => file.to_string(),
                })
                .collect())
        }
        _ => Err(GitError::Cli {
            command: format!("git merge-tree {ours} {}", theirs.label),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into()),
    }
}

/// `git merge --no-edit BRANCH` in the work tree that has the base checked out; returns the
/// commit the base is at then. git looks inside a submodule (`git stash create`, before a
/// merge that is not a fast-forward) whose `.gitmodules` entry says `ignore = none`, whatever
/// `diff.ignoreSubmodules` says: every submodule named is told `ignore = dirty` (the
/// configuration beats `.gitmodules`).
fn merge_in(
    base_tree: &Repo,
    base: &str,
    theirs: &Theirs,
    driver: Option<&Driver>,
    ui: Ui,
) -> Result<String> {
    let branch = theirs.label;
    let mut args: Vec<String> = driver
        .into_iter()
        .flat_map(Driver::args)
        .map(String::from)
        .collect();
    for name in submodule_names(base_tree)? {
        args.extend(["-c".to_string(), format!("submodule.{name}.ignore=dirty")]);
    }
    args.extend(["-c", "diff.ignoreSubmodules=dirty", "merge", "--no-edit"].map(String::from));
    if theirs.rev != theirs.label {
        // A commit by its id, named in the message as git names the branch.
        let into = match base {
            "main" | "master" => String::new(),
            other => format!(" into {other}"),
        };
        args.extend(["-m".to_string(), format!("Merge branch '{branch}'{into}")]);
    }
    args.push(theirs.rev.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = base_tree.cli().output(&args, None)?;
    if !out.status.success() {
        let _ = base_tree.cli().output(&["merge", "--abort"], None);
        return Err(GitError::Cli {
            command: format!("git merge --no-edit {branch}"),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into());
    }
    super::fill_lfs(base_tree, ui);
    let head = base_tree
        .head()?
        .map(|h| (h.id, h.short))
        .unwrap_or_default();
    ui.success(&format!(
        "merged `{branch}` into {} (now at {})",
        base_tree.root().display(),
        head.1
    ));
    Ok(head.0)
}

/// The names of the submodules `.gitmodules` declares, in the work tree, the index and HEAD (git
/// reads the first of them that exists), as git reads them. A `.gitmodules` git cannot read, or
/// a name `-c` cannot carry (an `=` in it), is refused: git might look inside that submodule.
fn submodule_names(tree: &Repo) -> Result<Vec<String>> {
    let g = tree.git2();
    let in_index = g
        .index()
        .is_ok_and(|i| i.get_path(Path::new(GITMODULES), 0).is_some());
    let in_head = g
        .head()
        .and_then(|h| h.peel_to_tree())
        .is_ok_and(|t| t.get_path(Path::new(GITMODULES)).is_ok());
    let file = tree.root().join(GITMODULES);
    let file_arg = file.to_string_lossy();
    let mut sources: Vec<[&str; 2]> = Vec::new();
    if in_index {
        sources.push(["--blob", ":.gitmodules"]);
    }
    if in_head {
        sources.push(["--blob", "HEAD:.gitmodules"]);
    }
    // Never a FIFO (git would wait on it), nor a link out of the repository.
    if crate::files::is_regular(&file) {
        sources.push(["--file", &file_arg]);
    }
    let mut names = Vec::new();
    for [how, what] in sources {
        let args = [
            "config",
            "--null",
            "--name-only",
            how,
            what,
            "--get-regexp",
            r"^submodule\.",
        ];
        let out = tree.cli().output(&args, None)?;
        // 1: no key matched.
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Err(unmergeable(&format!(
                "git cannot read {what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        for key in out.stdout.split(|&b| b == 0).filter(|k| !k.is_empty()) {
            let key = String::from_utf8_lossy(key);
            let Some((name, _)) = key
                .strip_prefix("submodule.")
                .and_then(|k| k.rsplit_once('.'))
            else {
                continue;
            };
            if name.contains('=') {
                return Err(unmergeable(&format!(
                    "the submodule name `{name}` in {what} cannot be passed to git"
                )));
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    Ok(names)
}

const GITMODULES: &str = ".gitmodules";

fn unmergeable(why: &str) -> Error {
    Error::user(format!(
        "not merged: {why}; ralph's merge must not look inside a submodule (an agent can write its configuration)"
    ))
    .with_hint("merge by hand")
}

/// The base branch is checked out nowhere: move its ref (fast-forward, or a merge commit of
/// git's merged tree) without touching any work tree; returns the commit it is at then.
fn merge_ref(
    repo: &Repo,
    base: &str,
    tip: &Theirs,
    driver: Option<&Driver>,
    ui: Ui,
) -> Result<String> {
    let g = repo.git2();
    let base_ref = format!("refs/heads/{base}");
    let branch = tip.label;
    let ours = commit_of(repo, &base_ref)?;
    let theirs = commit_of(repo, &tip.rev)?;
    let new = if g
        .graph_descendant_of(theirs.id(), ours.id())
        .map_err(GitError::from)?
    {
        theirs.id()
    } else {
        let args = with_driver(driver, &["merge-tree", "--write-tree", base, &tip.rev]);
        let out = repo.cli().run(&args, None)?;
        let tree_id = String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        let tree = git2::Oid::from_str(&tree_id).map_err(GitError::from)?;
        let who = repo.identity();
        let message = format!("Merge branch '{branch}'\n");
        let (ours, theirs) = (ours.id(), theirs.id());
        repo.writing(|g| {
            let sig = git2::Signature::now(&who.committer_name, &who.committer_email)?;
            let tree = g.find_tree(tree)?;
            let (ours, theirs) = (g.find_commit(ours)?, g.find_commit(theirs)?);
            g.commit(None, &sig, &sig, &message, &tree, &[&ours, &theirs])
        })?
    };
    let (was, why) = (ours.id(), format!("ralph: merge {branch}"));
    repo.writing(|g| {
        g.reference_matching(&base_ref, new, true, was, &why)
            .map(drop)
    })?;
    ui.success(&format!(
        "merged `{branch}` into `{base}` (not checked out: only its ref moved)"
    ));
    Ok(new.to_string())
}

/// The files a merge of `theirs` (any commit, such as origin's base) into branch `ours` would
/// conflict in; nothing is touched.
pub(crate) fn conflicts_of(repo: &Repo, ours: &str, theirs: &str) -> Result<Vec<String>> {
    let theirs = Theirs::named(theirs);
    let driver = driver(repo, ours, &theirs, false)?;
    conflicts(repo, ours, &theirs, driver.as_ref())
}

/// `theirs` (any commit, such as origin's base) merged into branch `base` as a loop's branch
/// is: in the clean work tree that has `base` checked out, else by moving its ref. The commit
/// `base` is at then. The caller checked it does not conflict.
pub(crate) fn merge_commit(repo: &Repo, base: &str, theirs: &str, ui: Ui) -> Result<String> {
    let theirs = Theirs::named(theirs);
    let driver = driver(repo, base, &theirs, false)?;
    match checked_out_at(repo, base)? {
        Some((tree, _)) => merge_in(&opened(&tree, false)?, base, &theirs, driver.as_ref(), ui),
        None => merge_ref(repo, base, &theirs, driver.as_ref(), ui),
    }
}

/// What a merge brings in: a commit (`rev`: a branch's name, any ref's full name, or a commit's
/// id), and the name messages give it.
struct Theirs<'a> {
    label: &'a str,
    rev: String,
}

impl<'a> Theirs<'a> {
    /// A ref by its name, merged as it is now.
    fn named(name: &'a str) -> Theirs<'a> {
        Theirs {
            label: name,
            rev: name.to_string(),
        }
    }
}

/// The commit `rev` names: a branch by its name, any ref by its full name (origin's base:
/// `refs/remotes/…`), or a commit by its full id.
fn commit_of<'r>(repo: &'r Repo, rev: &str) -> Result<git2::Commit<'r>, GitError> {
    let full =
        if rev.starts_with("refs/") || git2::Oid::from_str(rev).is_ok_and(|_| rev.len() == 40) {
            rev.to_string()
        } else {
            format!("refs/heads/{rev}")
        };
    Ok(repo.git2().revparse_single(&full)?.peel_to_commit()?)
}

/// What `ralph merge` merges of loop `wt` (issue 29): the commit its run recorded last, never
/// another its branch was moved to since — a descendant ralph did not make is left out (said),
/// anything else refused. A run that recorded none (an older ralph's; a queue's loop that
/// ended at once on a finished branch) merges the branch as it is.
fn recorded_tip<'a>(
    repo: &Repo,
    wt: &'a Worktree,
    tip: Option<&str>,
    ui: Ui,
) -> Result<Theirs<'a>> {
    let now = commit_of(repo, &wt.branch)?.id();
    let Some(tip) = tip else {
        return Ok(Theirs {
            label: &wt.branch,
            rev: now.to_string(),
        });
    };
    let recorded = git2::Oid::from_str(tip).map_err(GitError::from)?;
    let contains = now == recorded
        || repo
            .git2()
            .graph_descendant_of(now, recorded)
            .map_err(GitError::from)?;
    if !contains {
        return Err(Error::user(format!(
            "not merged: `{}` is at {}, which does not hold {}, the commit loop `{}` recorded last: the branch was moved since, and ralph merges only its loop's own work",
            wt.branch,
            &now.to_string()[..7],
            &tip[..tip.len().min(7)],
            wt.name
        ))
        .with_hint(format!(
            "look at `git log {}`; merge by hand what should be merged",
            wt.branch
        )));
    }
    if now != recorded {
        ui.warn(&format!(
            "`{}` moved on to {} since loop `{}` recorded {}: only the recorded commit is merged",
            wt.branch,
            &now.to_string()[..7],
            wt.name,
            &tip[..tip.len().min(7)]
        ));
    }
    Ok(Theirs {
        label: &wt.branch,
        rev: recorded.to_string(),
    })
}
