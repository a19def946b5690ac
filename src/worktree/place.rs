//! Where the loops' worktrees live (SPEC §13): `$GIT_COMMON_DIR/ralph/worktrees/NAME`, reached
//! without following a link. An agent can write the common git directory (a sandboxed worktree
//! loop's agent too), so `ralph`, `ralph/worktrees` or `NAME` may be a link it planted to a
//! directory of its choosing; `git worktree add` would then write a checkout there, and ralph
//! would read a loop's state from there. A link on the way is refused, never followed nor
//! replaced: ralph cannot tell the user's link from the agent's, and replacing it would hide the
//! worktrees behind it from git.
//!
//! What this does not close: git resolves the path again when it creates the worktree, so an
//! agent running at that very moment (a sandboxed loop in the main work tree, which can write
//! the git directory) could swap a link in between the check and `git worktree add`.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};

use crate::error::{Error, Result};

/// The directories below the common git directory, above each worktree.
const STEPS: [&str; 2] = ["ralph", "worktrees"];

/// The path of loop `name`'s worktree below the common git directory `common`, each step of
/// which is a real directory or not there yet (`make`: `ralph/worktrees` is created). A link or
/// anything but a directory on the way is an error naming it.
pub(crate) fn check(common: &Path, name: &str, make: bool) -> Result<PathBuf> {
    let path = common.join(STEPS[0]).join(STEPS[1]).join(name);
    let io = |at: &Path, e: Errno| Error::file("open", at, e.into());
    let mut dir = nix::fcntl::open(
        common,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(common, e))?;
    let mut at = common.to_path_buf();
    for (i, step) in STEPS.iter().chain([&name]).enumerate() {
        at.push(step);
        match kind(&dir, step) {
            Ok(k) if k == SFlag::S_IFDIR => {}
            Ok(k) => return Err(refused(&at, k)),
            Err(Errno::ENOENT) if make && i < STEPS.len() => {
                match nix::sys::stat::mkdirat(dir.as_fd(), *step, Mode::from_bits_truncate(0o777)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(Error::file("create directory", &at, e.into())),
                }
            }
            Err(Errno::ENOENT) => return Ok(path),
            Err(e) => return Err(io(&at, e)),
        }
        dir = nix::fcntl::openat(
            dir.as_fd(),
            *step,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            // Replaced by a link since it was looked at.
            Errno::ELOOP | Errno::ENOTDIR => refused(&at, SFlag::S_IFLNK),
            e => io(&at, e),
        })?;
    }
    Ok(path)
}

/// What `name` in `dir` is, a link not followed.
fn kind(dir: &OwnedFd, name: &str) -> std::result::Result<SFlag, Errno> {
    let st = nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    Ok(SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()))
}

fn refused(at: &Path, kind: SFlag) -> Error {
    let what = if kind == SFlag::S_IFLNK {
        match std::fs::read_link(at) {
            Ok(to) => format!("a symbolic link (to {})", to.display()),
            Err(_) => "a symbolic link".to_string(),
        }
    } else {
        "not a directory".to_string()
    };
    Error::user(format!(
        "{} is {what}: ralph keeps its loops' worktrees in real directories there and follows no link (an agent can write the git directory)",
        at.display()
    ))
    .with_hint(format!(
        "see where it leads and remove it (`rm {}`); `git worktree list` names every worktree",
        at.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_on_the_way_is_refused_and_nothing_is_made_through_it() {
        let d = tempfile::tempdir().unwrap();
        let common = d.path().join("git");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&common).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // Plain: made on demand, and found again.
        let p = check(&common, "a", true).unwrap();
        assert_eq!(p, common.join("ralph/worktrees/a"));
        assert!(common.join("ralph/worktrees").is_dir());
        assert!(!p.exists(), "the worktree itself is git's to make");
        // A link at each step is refused, and nothing is made where it leads.
        for (link, step) in [
            ("ralph", common.join("ralph")),
            ("worktrees", common.join("ralph/worktrees")),
            ("name", common.join("ralph/worktrees/a")),
        ] {
            let _ = std::fs::remove_dir_all(common.join("ralph"));
            if link != "ralph" {
                std::fs::create_dir_all(common.join("ralph/worktrees")).unwrap();
            }
            if link == "worktrees" {
                std::fs::remove_dir(&step).unwrap();
            }
            std::os::unix::fs::symlink(&outside, &step).unwrap();
            let e = check(&common, "a", true).unwrap_err().to_string();
            assert!(
                e.contains("symbolic link") && e.contains(&*outside.to_string_lossy()),
                "{link}: {e}"
            );
            assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{link}");
            std::fs::remove_file(&step).unwrap();
        }
        // A file where a directory belongs.
        let _ = std::fs::remove_dir_all(common.join("ralph"));
        std::fs::write(common.join("ralph"), "x").unwrap();
        let e = check(&common, "a", true).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
}
