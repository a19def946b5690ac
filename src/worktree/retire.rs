//! A loop retired (SPEC §13): its logs kept in ralph's state directory, its worktree removed,
//! its branch kept — under its own name after a merge, as `ralph/NAME-<date>` once a new loop
//! takes the name. ralph deletes nothing that is not its own: a worktree holding anything but
//! the branch's commits and ralph's runtime files stays.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};

use super::Worktree;
use super::records::{Kept, Records};
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::state::{RalphDir, RunState};
use crate::ui::Ui;

/// The logs a retired loop keeps (ralph's own `.ralph/` runtime files; `state.json` is kept as
/// ralph loaded it, in the record).
const LOGS: [&str; 3] = ["activity.log", "iterations.log", "runs"];

/// What the worktree holds besides the branch's commits and ralph's runtime files: changes,
/// untracked and ignored files (as `git status` names them, without looking inside submodules),
/// and nested repositories that are not the branch's gitlinks. ralph's git never opens a nested
/// repository's git directory here — the loop's agent may have written it, sandboxed or not
/// (`git/nested.rs`): they are found by ralph's own walk and left out of the status, whose
/// ignored paths are those the rules match (`--ignored=matching`: git's walk enters no ignored
/// directory, where it would look into a nested repository whatever the pathspecs say).
pub(crate) fn foreign_files(loop_repo: &Repo) -> Result<Vec<String>> {
    let git = loop_repo.cli().leaving_nested();
    let out = git.run(
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--ignored=matching",
            "--untracked-files=normal",
            "--ignore-submodules=dirty",
        ],
        None,
    )?;
    let links = loop_repo.gitlinks()?;
    let nested = git
        .nested()?
        .iter()
        .filter(|n| !links.contains(n))
        .map(|n| format!("{}/", String::from_utf8_lossy(n)))
        .collect::<Vec<_>>();
    Ok(out
        .split(|&b| b == 0)
        .filter(|e| e.len() > 3)
        .map(|e| String::from_utf8_lossy(&e[3..]).into_owned())
        .chain(nested)
        .filter(|p| !p.starts_with(".ralph/"))
        .collect())
}

/// A short list of paths for a message.
pub(crate) fn some_of(paths: &[String]) -> String {
    let mut s = paths.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > 3 {
        s.push_str(", …");
    }
    s
}

/// Retire loop `wt` (its worktree holds nothing foreign: the caller checked): its logs and
/// record kept, its live record forgotten, its worktree removed. `Ok(false)` when git would not
/// remove the worktree (a submodule, a lock: it says why): the worktree stays as it was, logs
/// included.
pub(crate) fn retire(
    repo: &Repo,
    records: &Records,
    wt: &Worktree,
    loop_repo: &Repo,
    merged_at: Option<String>,
    ui: Ui,
) -> Result<bool> {
    let state = RunState::load(&RalphDir::new(loop_repo.root()).state_file())?;
    let run = state.as_ref().map_or("run", |s| s.run_id.as_str());
    let keep = records.new_kept_dir(&wt.name, run)?;
    let moved =
        keep_logs(&wt.path, &keep).map_err(|e| Error::file("keep the logs of", &wt.path, e))?;
    let path = wt.path.to_string_lossy().into_owned();
    let out = repo.cli().output(&["worktree", "remove", &path], None)?;
    if !out.status.success() {
        ui.warn(&format!(
            "kept the worktree {path}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        // Put back, so the worktree stays whole; what was copied is only a copy.
        if put_back(&keep, &wt.path, &moved).is_ok() {
            let _ = std::fs::remove_dir_all(&keep);
        }
        return Ok(false);
    }
    let kept = Kept {
        name: wt.name.clone(),
        branch: wt.branch.clone(),
        base: wt.base.clone(),
        worktree: wt.path.clone(),
        merged_at,
        kept_at: crate::state::now_rfc3339(),
        state,
    };
    records.set_kept(&keep, &kept)?;
    records.forget_loop(&wt.name)?;
    ui.note(&format!(
        "removed the worktree {path} (branch `{}` stays; logs kept in {})",
        wt.branch,
        keep.display()
    ));
    Ok(true)
}

fn open_dir(at: &OwnedFd, name: &str) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(
        at.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn open_path(p: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        p,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Move a worktree's logs into `to` (ralph's state directory), following no link: `.ralph`
/// and each log must be a real directory or a file of its own (not a second name of another
/// file); anything else stays where it is, for `git worktree remove` to take. Returns the logs
/// moved (the rest, on another file system than the state directory, were copied).
fn keep_logs(root: &Path, to: &Path) -> std::io::Result<Vec<&'static str>> {
    let ralph = match open_dir(&open_path(root)?, crate::state::DIR) {
        Ok(d) => d,
        Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let dest = open_path(to)?;
    let mut moved = Vec::new();
    for name in LOGS {
        if !is_own(&ralph, name) {
            continue;
        }
        match nix::fcntl::renameat(ralph.as_fd(), name, dest.as_fd(), name) {
            Ok(()) => moved.push(name),
            Err(Errno::EXDEV) => copy(&ralph, name, &dest, 2)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(moved)
}

/// The logs [`keep_logs`] moved, moved back.
fn put_back(from: &Path, root: &Path, moved: &[&str]) -> std::io::Result<()> {
    let ralph = open_dir(&open_path(root)?, crate::state::DIR)?;
    let kept = open_path(from)?;
    for name in moved {
        nix::fcntl::renameat(kept.as_fd(), *name, ralph.as_fd(), *name)?;
    }
    Ok(())
}

/// A real directory, or a regular file with no other name.
fn is_own(dir: &OwnedFd, name: &str) -> bool {
    nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        kind == SFlag::S_IFDIR || (kind == SFlag::S_IFREG && st.st_nlink == 1)
    })
}

/// Copy `name` from `from` into `to` as [`is_own`] allows, directories `depth` levels down
/// (`runs/RUN/FILE`: ralph writes no deeper).
fn copy(from: &OwnedFd, name: &str, to: &OwnedFd, depth: u32) -> std::io::Result<()> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let src = std::fs::File::from(nix::fcntl::openat(
        from.as_fd(),
        name,
        flags,
        Mode::empty(),
    )?);
    let meta = src.metadata()?;
    if meta.is_file() && meta.nlink() == 1 {
        let dst = nix::fcntl::openat(
            to.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        std::io::copy(&mut &src, &mut std::fs::File::from(dst))?;
        return Ok(());
    }
    if !meta.is_dir() || depth == 0 {
        return Ok(());
    }
    nix::sys::stat::mkdirat(to.as_fd(), name, Mode::from_bits_truncate(0o700))?;
    let sub_to = nix::fcntl::openat(
        to.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let sub_from = OwnedFd::from(src);
    let names: Vec<String> = nix::dir::Dir::from_fd(sub_from.try_clone()?)?
        .iter()
        .flatten()
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| n != "." && n != "..")
        .collect();
    for n in names {
        if is_own(&sub_from, &n) {
            copy(&sub_from, &n, &sub_to, depth - 1)?;
        }
    }
    Ok(())
}

/// A new loop takes the name of one whose branch `ralph/NAME` is still there (merged, or
/// finished and retired): that branch is kept as `ralph/NAME-<date>` (`-2`, `-3`… when taken),
/// and said so.
pub(crate) fn set_branch_aside(repo: &Repo, records: &Records, name: &str, ui: Ui) -> Result<()> {
    let branch = format!("ralph/{name}");
    let exists = |b: &str| repo.git2().find_branch(b, git2::BranchType::Local).is_ok();
    if !exists(&branch) {
        return Ok(());
    }
    let date = chrono::Local::now().format("%Y-%m-%d").to_string();
    let aside = (1..=1000)
        .map(|n| match n {
            1 => format!("{branch}-{date}"),
            n => format!("{branch}-{date}-{n}"),
        })
        .find(|b| !exists(b))
        .ok_or_else(|| Error::user(format!("no free name to keep `{branch}` under")))?;
    repo.cli().run(&["branch", "-m", &branch, &aside], None)?;
    records.rename_branch(&branch, &aside)?;
    ui.note(&format!(
        "branch `{branch}` held loop `{name}`'s earlier task: kept as `{aside}`; the new loop starts `{branch}` afresh from HEAD"
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A worktree's `.ralph` with ralph's logs, and what an agent could have put among them: a
    /// log hard-linked to a secret, a symlink and a FIFO in a run's directory.
    fn planted(root: &Path, secret: &Path) {
        let runs = root.join(".ralph/runs/r1");
        std::fs::create_dir_all(&runs).unwrap();
        std::fs::write(root.join(".ralph/activity.log"), "activity\n").unwrap();
        std::fs::write(runs.join("t.log"), "transcript\n").unwrap();
        std::os::unix::fs::symlink(secret, runs.join("link")).unwrap();
        nix::unistd::mkfifo(&runs.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::hard_link(secret, root.join(".ralph/iterations.log")).unwrap();
    }

    fn check_kept(to: &Path) {
        assert_eq!(
            std::fs::read_to_string(to.join("activity.log")).unwrap(),
            "activity\n"
        );
        assert_eq!(
            std::fs::read_to_string(to.join("runs/r1/t.log")).unwrap(),
            "transcript\n"
        );
        assert!(
            !to.join("iterations.log").exists(),
            "a second name of a secret"
        );
    }

    #[test]
    fn logs_are_kept_without_following_links_moved_or_copied() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "password\n").unwrap();
        // The same file system: moved (a link moved is still only a link).
        let (root, to) = (d.path().join("wt"), d.path().join("kept"));
        std::fs::create_dir_all(&to).unwrap();
        planted(&root, &secret);
        assert_eq!(keep_logs(&root, &to).unwrap(), vec!["activity.log", "runs"]);
        check_kept(&to);
        assert!(root.join(".ralph/iterations.log").exists());
        // Another file system: copied, regular files of their own only.
        let shm = Path::new("/dev/shm");
        let other = shm.is_dir()
            && std::fs::metadata(shm).unwrap().dev() != std::fs::metadata(d.path()).unwrap().dev();
        if !other {
            eprintln!("skipping the copy: /dev/shm is not another file system here");
            return;
        }
        let far = tempfile::tempdir_in(shm).unwrap();
        let root = d.path().join("wt2");
        let to = far.path().join("kept");
        std::fs::create_dir_all(&to).unwrap();
        planted(&root, &secret);
        assert_eq!(keep_logs(&root, &to).unwrap(), Vec::<&str>::new());
        check_kept(&to);
        assert!(!to.join("runs/r1/link").exists() && !to.join("runs/r1/fifo").exists());
        // A `.ralph` that is a link keeps nothing.
        let root = d.path().join("wt3");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(d.path().join("wt2/.ralph"), root.join(".ralph")).unwrap();
        let to = far.path().join("kept3");
        std::fs::create_dir_all(&to).unwrap();
        assert_eq!(keep_logs(&root, &to).unwrap(), Vec::<&str>::new());
        assert_eq!(std::fs::read_dir(&to).unwrap().count(), 0);
    }
}
