//! Many loops (SPEC §13): a loop in a git worktree of its own, for branch `ralph/NAME`, kept
//! under the repository's git directory (`$GIT_COMMON_DIR/ralph/worktrees/NAME`, outside the
//! main work tree's files), and its merge back into the branch it started from — as
//! `git merge --no-edit` would, only a completed loop, only into a clean work tree, serialised
//! across loops, changing nothing on a conflict.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result, exit};
use crate::git::{GitError, Repo};
use crate::state::{HaltReason, RalphDir, RunState};
use crate::ui::Ui;

/// Where ralph's worktrees live, below the common git directory.
const DIR: &str = "ralph/worktrees";
/// The file (in the worktree's own git directory) naming the branch to merge into.
const BASE_FILE: &str = "ralph-base";

/// A loop's worktree.
#[derive(Debug, Clone)]
pub struct Worktree {
    pub name: String,
    pub path: PathBuf,
    pub branch: String,
    /// The branch it started from and merges into (`None`: started on a detached HEAD).
    pub base: Option<String>,
}

/// A worktree name is one plain path component: letters, digits, `.`, `_`, `-`, starting with
/// a letter or digit, and a name git takes for a branch (`ralph/NAME`: no `..`, not ending in
/// `.` or `.lock`).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-', '_'])
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        return Ok(());
    }
    Err(Error::usage(format!(
        "`{name}` is not a worktree name: start with a letter or digit, then letters, digits, `.`, `_` and `-` (no `..`, not ending in `.` or `.lock`)"
    )))
}

fn git(repo: &Repo, args: &[&str]) -> Result<Vec<u8>> {
    Ok(repo.cli().run(args, None)?)
}

/// The worktree of loop `name`, created from the current HEAD (branch `ralph/NAME`) when it
/// does not exist yet, reused when it does.
pub fn open_or_create(repo: &Repo, name: &str) -> Result<Worktree> {
    check_name(name)?;
    let common = repo.git2().commondir().to_path_buf();
    let path = common.join(DIR).join(name);
    let branch = format!("ralph/{name}");
    // `git worktree add` reads every other worktree's files (is the branch checked out there?)
    // and fails on one another add is still writing: creations and removals take turns.
    let _lock = worktrees_lock(repo)?;
    if let Ok(wt) = repo.git2().find_worktree(name)
        && wt.path().is_dir()
    {
        let opened = Repo::discover(wt.path())?;
        let base = std::fs::read_to_string(opened.git2().path().join(BASE_FILE))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        return Ok(Worktree {
            name: name.to_string(),
            path: opened.root().to_path_buf(),
            branch,
            base,
        });
    }
    let base = current_branch(repo);
    let path_s = path.to_string_lossy().into_owned();
    let exists = repo
        .git2()
        .find_branch(&branch, git2::BranchType::Local)
        .is_ok();
    if exists {
        git(repo, &["worktree", "add", "--quiet", &path_s, &branch])?;
    } else {
        git(
            repo,
            &["worktree", "add", "--quiet", "-b", &branch, &path_s, "HEAD"],
        )?;
    }
    let opened = Repo::discover(&path)?;
    if let Some(b) = &base {
        let file = opened.git2().path().join(BASE_FILE);
        std::fs::write(&file, format!("{b}\n")).map_err(|e| Error::file("write", &file, e))?;
    }
    Ok(Worktree {
        name: name.to_string(),
        path: opened.root().to_path_buf(),
        branch,
        base,
    })
}

/// The branch checked out in `repo`'s work tree.
fn current_branch(repo: &Repo) -> Option<String> {
    let head = repo.git2().head().ok()?;
    head.is_branch()
        .then(|| head.shorthand().ok().map(str::to_string))
        .flatten()
}

/// Copy the task files a run needs from the work tree it was started in into the worktree, where
/// HEAD may not have them yet (an uncommitted task file); the run's "state before run" commit
/// then records them on the loop's branch. Returns the targets as the worktree names them.
pub fn carry_targets(from_root: &Path, cwd: &Path, to: &Path, targets: &[String]) -> Result<()> {
    let mut files: Vec<PathBuf> = Vec::new();
    for t in targets {
        let p = cwd.join(t);
        if p.is_file()
            && let Ok(rel) = p.strip_prefix(from_root)
        {
            files.push(rel.to_path_buf());
        }
    }
    if targets.is_empty() {
        for f in [
            crate::task::TASK_FILE,
            crate::task::table::PRD_FILE,
            crate::task::table::PROGRESS_FILE,
        ] {
            files.push(PathBuf::from(f));
        }
    }
    files.push(PathBuf::from(".ralph/config.toml"));
    for rel in files {
        let (src, dst) = (from_root.join(&rel), to.join(&rel));
        // Read and written as files an agent can touch: never through a link out of either
        // repository (a task file linked to `~/.netrc` must not be copied and committed).
        if crate::files::is_regular(&src) && !dst.exists() {
            let bytes = crate::files::read_bytes(&src, crate::files::MAX_TEXT)
                .map_err(|e| Error::user(e.to_string()))?;
            if let Some(dir) = dst.parent() {
                crate::files::create_dir_all(dir)
                    .map_err(|e| Error::file("create directory", dir, e))?;
            }
            crate::state::write_atomic(&dst, &bytes)?;
        }
    }
    Ok(())
}

/// Merge loop `name` back into the branch it started from (SPEC §13). Exit 0 when merged,
/// 11 when it could not be (conflicts named, or the base work tree not clean).
pub fn merge(repo: &Repo, name: &str, ui: Ui) -> Result<i32> {
    check_name(name)?;
    let wt = find(repo, name)?;
    let loop_repo = Repo::discover(&wt.path)?;
    completed(&loop_repo, name)?;
    let Some(base) = wt.base.clone() else {
        return Err(Error::user(format!(
            "loop `{name}` started on a detached HEAD: there is no branch to merge it into"
        ))
        .with_hint(format!("merge `{}` by hand", wt.branch)));
    };
    // The loop's work is on its branch only while its worktree has that branch checked out: an
    // agent that switched branches left its commits elsewhere, and merging `ralph/NAME` would
    // report a merge of nothing.
    let on = current_branch(&loop_repo);
    if on.as_deref() != Some(wt.branch.as_str()) {
        ui.alert(&format!(
            "not merged: the worktree of loop `{name}` ({}) is on {}, not `{}`: its last commits are not on the loop's branch",
            wt.path.display(),
            on.map_or_else(|| "a detached HEAD".to_string(), |b| format!("branch `{b}`")),
            wt.branch
        ));
        ui.plain(
            "The branch and the worktree stay as they are: merge by hand what should be merged.",
        );
        return not_merged(&loop_repo);
    }
    let _lock = worktrees_lock(repo)?;
    let target = checked_out_at(repo, &base)?;
    if let Some(tree) = &target
        && Repo::discover(tree)?.is_dirty_tracked()?
    {
        ui.alert(&format!(
            "not merged: the work tree of `{base}` ({}) has uncommitted changes",
            tree.display()
        ));
        return not_merged(&loop_repo);
    }
    let conflicts = conflicts(repo, &base, &wt.branch)?;
    if !conflicts.is_empty() {
        ui.alert(&format!(
            "not merged: `{}` conflicts with `{base}` in {} file{}:",
            wt.branch,
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" }
        ));
        for c in &conflicts {
            ui.plain(&format!("  {c}"));
        }
        ui.plain(&format!(
            "The branch `{}` and its worktree {} stay as they are: resolve by hand.",
            wt.branch,
            wt.path.display()
        ));
        return not_merged(&loop_repo);
    }
    match &target {
        Some(tree) => merge_in(&Repo::discover(tree)?, &wt.branch, ui)?,
        None => merge_ref(repo, &base, &wt.branch, ui)?,
    }
    retire(repo, &wt, &loop_repo, ui)?;
    Ok(exit::COMPLETE)
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

/// The loop's worktree, by name.
fn find(repo: &Repo, name: &str) -> Result<Worktree> {
    match repo.git2().find_worktree(name) {
        Ok(w) if w.path().is_dir() => open_or_create(repo, name),
        _ => Err(Error::user(format!("no loop worktree named `{name}`"))
            .with_hint("`ralph status --all` lists the loops")),
    }
}

/// Only a completed loop merges.
fn completed(loop_repo: &Repo, name: &str) -> Result<()> {
    let rd = RalphDir::new(loop_repo.root());
    let st = RunState::load(&rd.state_file())?;
    match st
        .as_ref()
        .and_then(|s| (!s.running).then_some(s.halt_reason))
    {
        Some(Some(HaltReason::Complete)) => Ok(()),
        other => {
            let now = match other {
                None if st.is_some() => "still running".to_string(),
                None => "never ran".to_string(),
                Some(r) => format!("halted: {}", r.map_or("unknown", HaltReason::as_str)),
            };
            Err(
                Error::user(format!("loop `{name}` is not complete ({now})"))
                    .with_hint(format!("finish it first: ralph resume --worktree {name}")),
            )
        }
    }
}

/// How long a loop waits for another's merge, worktree creation or removal (each takes seconds
/// at most; a holder that never lets go is a process that should not be trusted to).
const WORKTREES_LOCK_WAIT: Duration = Duration::from_secs(300);

/// One merge, worktree creation or removal at a time across loops: a lock in the common git
/// directory, waited for up to [`WORKTREES_LOCK_WAIT`] (held by an open file, so a killed holder
/// releases it; never waited on forever).
fn worktrees_lock(repo: &Repo) -> Result<std::fs::File> {
    let path = repo.git2().commondir().join("ralph-worktrees.lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::file("open", &path, e))?;
    let deadline = Instant::now() + WORKTREES_LOCK_WAIT;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::file("lock", &path, e)),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::user(format!(
                    "{} is still locked after {}s: another ralph is merging or creating a worktree",
                    path.display(),
                    WORKTREES_LOCK_WAIT.as_secs()
                ))
                .with_hint("`ralph status --all` lists the loops; `fuser` names the holder"));
            }
        }
    }
}

/// The work tree that has `branch` checked out, if any.
fn checked_out_at(repo: &Repo, branch: &str) -> Result<Option<PathBuf>> {
    Ok(crate::loops::all(repo)?
        .into_iter()
        .find(|e| e.branch.as_deref() == Some(branch))
        .map(|e| e.path))
}

/// The files a merge of `theirs` into `ours` would conflict in (nothing is touched).
fn conflicts(repo: &Repo, ours: &str, theirs: &str) -> Result<Vec<String>> {
    let out = repo.cli().output(
        &[
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            ours,
            theirs,
        ],
        None,
    )?;
    match out.status.code() {
        Some(0) => Ok(Vec::new()),
        Some(1) => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(str::to_string)
            .collect()),
        _ => Err(GitError::Cli {
            command: format!("git merge-tree {ours} {theirs}"),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into()),
    }
}

/// `git merge --no-edit BRANCH` in the work tree that has the base checked out.
fn merge_in(base_tree: &Repo, branch: &str, ui: Ui) -> Result<()> {
    let out = base_tree
        .cli()
        .output(&["merge", "--no-edit", branch], None)?;
    if !out.status.success() {
        let _ = base_tree.cli().output(&["merge", "--abort"], None);
        return Err(GitError::Cli {
            command: format!("git merge --no-edit {branch}"),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into());
    }
    let head = base_tree.head()?.map(|h| h.short).unwrap_or_default();
    ui.success(&format!(
        "merged `{branch}` into {} (now at {head})",
        base_tree.root().display()
    ));
    Ok(())
}

/// The base branch is checked out nowhere: move its ref (fast-forward, or a merge commit of
/// git's merged tree) without touching any work tree.
fn merge_ref(repo: &Repo, base: &str, branch: &str, ui: Ui) -> Result<()> {
    let g = repo.git2();
    let base_ref = format!("refs/heads/{base}");
    let ours = g
        .revparse_single(&base_ref)
        .and_then(|o| o.peel_to_commit())
        .map_err(GitError::from)?;
    let theirs = g
        .revparse_single(&format!("refs/heads/{branch}"))
        .and_then(|o| o.peel_to_commit())
        .map_err(GitError::from)?;
    let new = if g
        .graph_descendant_of(theirs.id(), ours.id())
        .map_err(GitError::from)?
    {
        theirs.id()
    } else {
        let out = repo
            .cli()
            .run(&["merge-tree", "--write-tree", base, branch], None)?;
        let tree_id = String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        let tree = g
            .find_tree(git2::Oid::from_str(&tree_id).map_err(GitError::from)?)
            .map_err(GitError::from)?;
        let who = repo.identity();
        let sig = git2::Signature::now(&who.committer_name, &who.committer_email)
            .map_err(GitError::from)?;
        let message = format!("Merge branch '{branch}'\n");
        g.commit(None, &sig, &sig, &message, &tree, &[&ours, &theirs])
            .map_err(GitError::from)?
    };
    g.reference_matching(
        &base_ref,
        new,
        true,
        ours.id(),
        &format!("ralph: merge {branch}"),
    )
    .map_err(GitError::from)?;
    ui.success(&format!(
        "merged `{branch}` into `{base}` (not checked out: only its ref moved)"
    ));
    Ok(())
}

/// The ignored files and directories of a loop's worktree (as `git status --ignored` names
/// them), ralph's own `.ralph/` runtime files aside.
fn ignored_files(loop_repo: &Repo) -> Result<Vec<String>> {
    let out = loop_repo.cli().run(
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--ignored",
            "--untracked-files=normal",
        ],
        None,
    )?;
    Ok(out
        .split(|&b| b == 0)
        .filter_map(|e| e.strip_prefix(b"!! "))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| !p.starts_with(".ralph/"))
        .collect())
}

/// A merged loop's worktree is removed (its branch stays); its `.ralph/` runtime files (logs,
/// transcripts, state) are kept under `$GIT_COMMON_DIR/ralph/merged/NAME-RUN`. A worktree that
/// holds ignored files stays as it is, state and logs included: `git worktree remove` would
/// delete those files without a word, and ralph never deletes.
fn retire(repo: &Repo, wt: &Worktree, loop_repo: &Repo, ui: Ui) -> Result<()> {
    let path = wt.path.to_string_lossy().into_owned();
    let ignored = ignored_files(loop_repo)?;
    if !ignored.is_empty() {
        ui.warn(&format!(
            "kept the worktree {path}: it holds ignored files ralph does not delete ({}{}); remove it with `git worktree remove --force {path}`",
            ignored.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if ignored.len() > 3 { ", …" } else { "" }
        ));
        return Ok(());
    }
    let rd = RalphDir::new(loop_repo.root());
    let run = RunState::load(&rd.state_file())
        .ok()
        .flatten()
        .map_or_else(|| "run".to_string(), |s| s.run_id);
    let keep = repo
        .git2()
        .commondir()
        .join("ralph/merged")
        .join(format!("{}-{run}", wt.name));
    let _ = std::fs::create_dir_all(&keep);
    for name in ["activity.log", "iterations.log", "state.json", "runs"] {
        let _ = std::fs::rename(rd.path.join(name), keep.join(name));
    }
    let out = repo.cli().output(&["worktree", "remove", &path], None)?;
    if out.status.success() {
        ui.note(&format!(
            "removed the worktree {path} (branch `{}` stays; logs kept in {})",
            wt.branch,
            keep.display()
        ));
    } else {
        ui.warn(&format!(
            "kept the worktree {path}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn names_git_refuses_for_a_branch_are_refused_first() {
        for ok in ["auth", "a-b", "v1.2", "x_y", "9lives"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", ".x", "-x", "_x", "x.", "x.lock", "a..b", "a/b", "a b", "é",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
