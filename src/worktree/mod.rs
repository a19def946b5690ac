//! Many loops (SPEC §13): a loop in a git worktree of its own, for branch `ralph/NAME`, kept
//! under the repository's git directory (`$GIT_COMMON_DIR/ralph/worktrees/NAME`, outside the
//! main work tree's files), and its merge back into the branch it started from.
//!
//! The rooms: `place` (where the worktrees live, reached through no link), `records` (ralph's
//! records of the loops, in its state directory: each loop's base branch, the retired loops and
//! their logs, the lock between loops), `retire` (a loop's worktree removed, its logs kept, its
//! branch kept aside when a new loop takes the name), `merge`, and `own_files` (the merge
//! driver that keeps ralph's own files out of a merge's conflicts).
//!
//! A loop name is a branch's name for one task: a run on a name whose loop finished (merged or
//! not) starts a new `ralph/NAME` from the current HEAD, the old branch kept as
//! `ralph/NAME-<date>`; a loop still unfinished keeps its worktree and branch.

mod includes;
mod merge;
pub(crate) mod own_files;
mod place;
mod records;
mod retire;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::git::Repo;
use crate::loops::Retired;
use crate::state::{HaltReason, RalphDir, RunState};
use crate::ui::Ui;

pub(crate) use merge::{conflicts_of, merge, merge_as, merge_commit};
pub(crate) use records::Records;

/// A loop's worktree.
#[derive(Debug, Clone)]
pub(crate) struct Worktree {
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    pub(crate) branch: String,
    /// The branch it started from and merges into, as ralph recorded it (`None`: started on a
    /// detached HEAD, or a worktree ralph has no record of).
    pub(crate) base: Option<String>,
}

/// A worktree name is one plain path component: letters, digits, `.`, `_`, `-`, starting with
/// a letter or digit, and a name git takes for a branch (`ralph/NAME`: no `..`, not ending in
/// `.` or `.lock`).
pub(crate) fn check_name(name: &str) -> Result<()> {
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

/// The worktree for a new run of loop `name` (SPEC §13): the loop's own when it is unfinished
/// (or never ran); else — it finished, merged or not, or is gone and left its branch — a new
/// one, on a new `ralph/NAME` from the current HEAD, the finished loop retired (its logs kept)
/// and its branch kept as `ralph/NAME-<date>`.
pub(crate) fn for_run(repo: &Repo, name: &str, ui: Ui) -> Result<Worktree> {
    check_name(name)?;
    let records = Records::open(repo)?;
    // `git worktree add` reads every other worktree's files (is the branch checked out there?)
    // and fails on one another add is still writing: creations and removals take turns.
    let _lock = records.lock()?;
    if let Some(wt) = find(repo, &records, name)? {
        if !finished(&wt.path)? {
            return brought_up(repo, &records, wt);
        }
        let loop_repo = Repo::discover(&wt.path)?;
        replace(repo, &records, &wt, &loop_repo, ui)?;
    }
    retire::set_branch_aside(repo, &records, name, ui)?;
    create(repo, &records, name, ui)
}

/// The worktree of a queue's item (SPEC §14, §15): loop `name` on branch `ralph/NAME` from
/// `start` (the item's branch as the team left it on origin, else the queue's base branch),
/// merging into `base` — the branch the queue started from, whatever the main tree has checked
/// out now. An unfinished loop whose branch is at `start` or ahead of it (this machine's own
/// commits, not pushed yet) goes on in its worktree; any other is retired (logs kept), and a
/// branch `ralph/NAME` that is not at `start` is kept as `ralph/NAME-<date>`.
pub(crate) fn for_item(
    repo: &Repo,
    name: &str,
    start: &str,
    base: &str,
    ui: Ui,
) -> Result<Worktree> {
    check_name(name)?;
    let records = Records::open(repo)?;
    let _lock = records.lock()?;
    let branch = format!("ralph/{name}");
    let tip = |r: &Repo| {
        r.git2()
            .revparse_single(&format!("refs/heads/{branch}"))
            .ok()
            .map(|o| o.id())
    };
    let start_id = repo
        .git2()
        .revparse_single(start)
        .map_err(crate::git::GitError::from)?
        .id();
    let contains_start = |t: git2::Oid| {
        t == start_id
            || repo
                .git2()
                .graph_descendant_of(t, start_id)
                .unwrap_or(false)
    };
    if let Some(wt) = find(repo, &records, name)? {
        let loop_repo = Repo::discover(&wt.path)?;
        let on_branch = current_branch(&loop_repo).as_deref() == Some(branch.as_str());
        if !finished(&wt.path)? && on_branch && tip(repo).is_some_and(contains_start) {
            let record = records::LoopRecord {
                base: Some(base.to_string()),
                merged_at: None,
            };
            records.set_loop(name, &record)?;
            return Ok(Worktree {
                base: Some(base.to_string()),
                ..wt
            });
        }
        replace(repo, &records, &wt, &loop_repo, ui)?;
    }
    let path = place::check(repo.git2().commondir(), name, true)?;
    let path_s = path.to_string_lossy().into_owned();
    if tip(repo) == Some(start_id) {
        repo.cli()
            .run(&["worktree", "add", "--quiet", &path_s, &branch], None)?;
    } else {
        retire::set_branch_aside(repo, &records, name, ui)?;
        repo.cli().run(
            &["worktree", "add", "--quiet", "-b", &branch, &path_s, start],
            None,
        )?;
    }
    let record = records::LoopRecord {
        base: Some(base.to_string()),
        merged_at: None,
    };
    records.set_loop(name, &record)?;
    let opened = Repo::discover(&path)?;
    fill_lfs(&opened, ui);
    Ok(Worktree {
        name: name.to_string(),
        path: opened.root().to_path_buf(),
        branch,
        base: Some(base.to_string()),
    })
}

/// Loop `name`'s worktree, which must exist (`ralph resume --worktree`, `ralph merge`).
pub(crate) fn open(repo: &Repo, records: &Records, name: &str) -> Result<Worktree> {
    check_name(name)?;
    find(repo, records, name)?.ok_or_else(|| {
        Error::user(format!("no loop worktree named `{name}`"))
            .with_hint("`ralph status --all` lists the loops")
    })
}

/// [`open`], with ralph's records of the repository.
pub(crate) fn open_for_resume(repo: &Repo, name: &str) -> Result<Worktree> {
    open(repo, &Records::open(repo)?, name)
}

/// The run recorded in the worktree at `path`, when it is not finished and no supervisor runs
/// it now: halted short of complete, or killed while running.
pub(crate) fn unfinished(path: &Path) -> Result<Option<RunState>> {
    let status = crate::loops::report(&Repo::discover(path)?)?;
    Ok(status
        .st
        .filter(|s| !status.running && (s.running || s.halt_reason != Some(HaltReason::Complete))))
}

/// Every loop of the repository ralph retired, the earliest first.
pub(crate) fn retired(repo: &Repo) -> Vec<Retired> {
    let Some(records) = Records::find(repo) else {
        return Vec::new();
    };
    records
        .kept()
        .into_iter()
        .map(|(logs, k)| Retired::kept(k.name, k.branch, k.merged_at, logs, k.state))
        .collect()
}

/// Whether the loop at `path` completed its run (merged or not): its name is free for a new
/// task.
pub(crate) fn finished(path: &Path) -> Result<bool> {
    let st = RunState::load(&RalphDir::new(path).state_file())?;
    Ok(st.is_some_and(|s| !s.running && s.halt_reason == Some(HaltReason::Complete)))
}

/// Loop `name`'s worktree: the registered worktree at ralph's place for it, reached through no
/// link, its base branch from ralph's records.
fn find(repo: &Repo, records: &Records, name: &str) -> Result<Option<Worktree>> {
    let Some(path) = existing(repo, name)? else {
        return Ok(None);
    };
    let opened = Repo::discover(&path)?;
    Ok(Some(Worktree {
        name: name.to_string(),
        path: opened.root().to_path_buf(),
        branch: format!("ralph/{name}"),
        base: records.loop_record(name)?.and_then(|r| r.base),
    }))
}

/// The path of loop `name`'s worktree when git has one registered there (reading only).
pub(crate) fn existing(repo: &Repo, name: &str) -> Result<Option<PathBuf>> {
    check_name(name)?;
    let want = place::check(repo.git2().commondir(), name, false)?;
    let main =
        git2::Repository::open(repo.git2().commondir()).map_err(crate::git::GitError::from)?;
    let ids = main.worktrees().map_err(crate::git::GitError::from)?;
    let found = ids
        .iter()
        .flatten()
        .flatten()
        .filter_map(|id| main.find_worktree(id).ok())
        .any(|w| same_path(w.path(), &want));
    Ok((found && want.is_dir()).then_some(want))
}

fn same_path(a: &Path, b: &Path) -> bool {
    let plain = |p: &Path| p.components().collect::<PathBuf>();
    plain(a) == plain(b)
        || a.canonicalize()
            .ok()
            .is_some_and(|c| Some(c) == b.canonicalize().ok())
}

/// A new worktree for loop `name`, on a new branch `ralph/NAME` from the current HEAD, its base
/// branch recorded.
fn create(repo: &Repo, records: &Records, name: &str, ui: Ui) -> Result<Worktree> {
    let path = place::check(repo.git2().commondir(), name, true)?;
    let branch = format!("ralph/{name}");
    let base = current_branch(repo);
    let path_s = path.to_string_lossy().into_owned();
    repo.cli().run(
        &["worktree", "add", "--quiet", "-b", &branch, &path_s, "HEAD"],
        None,
    )?;
    let record = records::LoopRecord {
        base: base.clone(),
        merged_at: None,
    };
    records.set_loop(name, &record)?;
    let opened = Repo::discover(&path)?;
    fill_lfs(&opened, ui);
    Ok(Worktree {
        name: name.to_string(),
        path: opened.root().to_path_buf(),
        branch,
        base,
    })
}

/// The LFS files a checkout of ralph's left as their pointers (its git downloads nothing,
/// `git/lfs.rs`) filled from the repository's own store; those whose objects are not there are
/// said once, for the user to `git lfs pull`.
pub(crate) fn fill_lfs(tree: &Repo, ui: Ui) {
    let at = tree.root().display();
    match tree.lfs_fill() {
        Ok(left) if left.is_empty() => {}
        Ok(left) => ui.warn(&format!(
            "{} LFS file(s) in {at} stay pointers, their objects not in this repository ({}{}): ralph's git downloads nothing; run `git lfs pull` there to fetch them",
            left.len(),
            left.iter().take(5).map(String::as_str).collect::<Vec<_>>().join(", "),
            if left.len() > 5 { ", …" } else { "" }
        )),
        Err(e) => ui.warn(&format!(
            "the LFS files in {at} cannot be filled from this repository's store ({e}): they stay pointers; run `git lfs checkout` (or `git lfs pull`) there"
        )),
    }
}

/// A loop that never ran (its run ended before any state: a task already complete, refused
/// before iteration 1) holds nothing of its own when its branch is behind HEAD and its work
/// tree clean: it is brought up to HEAD (a fast-forward) and its base recorded anew, so that
/// the next run works on the task as it is now, not on the one the loop found complete.
fn brought_up(repo: &Repo, records: &Records, wt: Worktree) -> Result<Worktree> {
    if RalphDir::new(&wt.path).state_file().exists() {
        return Ok(wt);
    }
    let loop_repo = Repo::discover(&wt.path)?;
    let (Some(head), Some(tip)) = (head_id(repo), head_id(&loop_repo)) else {
        return Ok(wt);
    };
    let behind = tip != head && repo.git2().graph_descendant_of(head, tip).unwrap_or(false);
    if !behind
        || current_branch(&loop_repo).as_deref() != Some(wt.branch.as_str())
        || !retire::foreign_files(&loop_repo)?.is_empty()
    {
        return Ok(wt);
    }
    let head = head.to_string();
    loop_repo
        .cli()
        .run(&["merge", "--ff-only", "--quiet", &head], None)?;
    let base = current_branch(repo);
    let record = records::LoopRecord {
        base: base.clone(),
        merged_at: None,
    };
    records.set_loop(&wt.name, &record)?;
    Ok(Worktree { base, ..wt })
}

/// The commit `repo`'s HEAD is at.
fn head_id(repo: &Repo) -> Option<git2::Oid> {
    repo.git2()
        .head()
        .ok()?
        .peel_to_commit()
        .ok()
        .map(|c| c.id())
}

/// A finished loop whose name a new run takes: retired (logs kept, worktree removed). One that
/// holds anything ralph would delete with it stays, and the new run is refused.
fn replace(repo: &Repo, records: &Records, wt: &Worktree, loop_repo: &Repo, ui: Ui) -> Result<()> {
    let foreign = retire::foreign_files(loop_repo)?;
    let merged_at = records.loop_record(&wt.name)?.and_then(|r| r.merged_at);
    if foreign.is_empty() && retire::retire(repo, records, wt, loop_repo, merged_at, ui)? {
        return Ok(());
    }
    let path = wt.path.display();
    Err(Error::user(format!(
        "loop `{}` finished, and its worktree {path} holds what ralph does not delete{}: a new loop of that name needs its place",
        wt.name,
        if foreign.is_empty() { String::new() } else { format!(" ({})", retire::some_of(&foreign)) }
    ))
    .with_hint(format!(
        "keep what you need from it, then `git worktree remove --force {path}`; or name the new loop differently"
    )))
}

/// The branch (`refs/heads/ralph/NAME`) of the loop whose worktree `repo` is, if it is one.
pub(crate) fn own_branch_of(repo: &Repo) -> Option<String> {
    let name = repo.root().file_name()?.to_str()?;
    let path = existing(repo, name).ok()??;
    same_path(&path, repo.root()).then(|| format!("refs/heads/ralph/{name}"))
}

/// ` --worktree NAME` when `repo` is loop NAME's worktree, else nothing: what a command
/// suggested to the user, who stands in the main work tree, needs to reach the loop.
pub(crate) fn loop_flag(repo: &Repo) -> String {
    loop_name(repo).map_or_else(String::new, |name| format!(" --worktree {name}"))
}

/// NAME when `repo` is loop NAME's worktree (`run --worktree NAME`), else `None`.
pub(crate) fn loop_name(repo: &Repo) -> Option<String> {
    own_branch_of(repo).and_then(|b| b.strip_prefix("refs/heads/ralph/").map(str::to_string))
}

/// The branch checked out in `repo`'s work tree (`None`: a detached HEAD).
pub(crate) fn current_branch(repo: &Repo) -> Option<String> {
    let head = repo.git2().head().ok()?;
    head.is_branch()
        .then(|| head.shorthand().ok().map(str::to_string))
        .flatten()
}

/// Copy the task files a run needs from the work tree it was started in into the worktree, where
/// HEAD may not have them yet (an uncommitted task file); the run's "state before run" commit
/// then records them on the loop's branch. Returns the targets as the worktree names them.
pub(crate) fn carry_targets(
    from_root: &Path,
    cwd: &Path,
    to: &Path,
    targets: &[String],
) -> Result<()> {
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
