//! One supervisor per work tree (SPEC §7, §11): advisory locks the kernel drops when their
//! holder dies. The lock that decides is ralph's own, in the work tree's directory of its state
//! home, where the agent cannot reach it under `--sandbox` (the home is read-only there) and
//! nothing it does to the work tree or the git directory removes it. A supervisor also holds
//! the lock in the work tree's git directory (`$GIT_DIR/ralph.lock`; a linked worktree has its
//! own), the only one an older ralph takes, and the only one there is without a state home.
//! `status` tells a live run by these locks, never by a file's presence.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::home::StateHome;
use crate::error::{Error, Result};

/// The name of the lock in a work tree's directory of the state home.
const OWN: &str = "lock";

/// How long a lock another process holds for a moment (a `status` looking at it) is waited for.
const PROBE_WAIT: Duration = Duration::from_millis(100);

/// Where the lock of the work tree whose git directory is `git_dir` lives in that directory.
pub(crate) fn lock_path(git_dir: &Path) -> PathBuf {
    git_dir.join("ralph.lock")
}

/// The locks of one work tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeLocks {
    /// ralph's own, in its state home: the lock that decides. `None` when there is no state
    /// home, or (found by a reader) no records of this work tree yet.
    pub(crate) own: Option<PathBuf>,
    /// The one in the git directory.
    pub(crate) git: PathBuf,
}

impl TreeLocks {
    /// The locks of the work tree at `work_tree` as a reader finds them: nothing is created.
    pub(crate) fn find(work_tree: &Path, git_dir: &Path) -> TreeLocks {
        let own = StateHome::locate()
            .and_then(|h| h.find_tree(work_tree, git_dir))
            .map(|k| k.join(OWN));
        TreeLocks {
            own,
            git: lock_path(git_dir),
        }
    }

    /// The pid of the supervisor holding a lock of the work tree now (`Some(None)` when the
    /// holder did not say), ralph's own lock first; `None` when nobody holds either.
    pub(crate) fn holder(&self) -> Option<Option<u32>> {
        self.own
            .iter()
            .chain([&self.git])
            .find(|p| Lock::is_held(p))
            .map(|p| holder_pid(p))
    }
}

/// The advisory locks held by a running supervisor (std's `File::try_lock`): the kernel
/// releases them when the holder dies, so a crash never leaves a stale lock.
pub(crate) struct Lock {
    _files: Vec<File>,
}

impl Lock {
    /// Take the locks of the work tree at `work_tree` (SPEC §11): ralph's own, then the git
    /// directory's. Held by another process, either is an error naming its pid. Without a state
    /// home, or when it cannot be written, the git directory's lock is the only one taken — but
    /// ralph's own, held by another, still refuses — and the returned warning says so.
    pub(crate) fn acquire_tree(work_tree: &Path, git_dir: &Path) -> Result<(Lock, Option<String>)> {
        let mut files = Vec::new();
        let mut warning = None;
        match StateHome::locate() {
            None => {
                warning = Some(
                    "no state directory (neither XDG_STATE_HOME nor HOME is set): the lock in the git directory and .ralph/state.json, both in the agent's reach, are all ralph has to go by".to_string(),
                );
            }
            Some(home) => match home.tree(work_tree, git_dir) {
                Ok(k) => files.push(take(&k.join(OWN))?),
                Err(e) => {
                    if let Some(k) = home.find_tree(work_tree, git_dir) {
                        refuse_if_held(&k.join(OWN))?;
                    }
                    warning = Some(format!(
                        "ralph's state directory {} cannot be written ({e}): the lock in the git directory and .ralph/state.json, both in the agent's reach, are all ralph has to go by",
                        home.path().display()
                    ));
                }
            },
        }
        files.push(take(&lock_path(git_dir))?);
        Ok((Lock { _files: files }, warning))
    }

    /// Take the lock at `path` alone.
    #[cfg(test)]
    pub(crate) fn acquire(path: &Path) -> Result<Lock> {
        Ok(Lock {
            _files: vec![take(path)?],
        })
    }

    /// Whether some process holds the lock now (without taking it for long).
    /// The file is opened as any the agent can touch: a FIFO the agent put in place of
    /// `$GIT_DIR/ralph.lock` is refused, never waited on (`ralph status` hung on one).
    pub(crate) fn is_held(path: &Path) -> bool {
        let Ok((file, _)) = crate::files::open_read(path) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(_) => true,
        }
    }
}

/// Take the lock at `path` and write this process's pid into it.
fn take(path: &Path) -> Result<File> {
    // Never through a symlink the agent planted in the git directory (SPEC §4).
    let mut file = crate::files::open_own(path, true).map_err(|e| Error::file("open", path, e))?;
    let deadline = std::time::Instant::now() + PROBE_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            // A reader probing the lock holds it shared for a moment: try again, briefly.
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(already(path, holder.trim().parse().ok()));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::file("lock", path, e)),
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| Error::file("write", path, e))?;
    Ok(file)
}

/// Refuse when another process holds the lock at `path` (which this process cannot take).
fn refuse_if_held(path: &Path) -> Result<()> {
    if Lock::is_held(path) {
        return Err(already(path, holder_pid(path)));
    }
    Ok(())
}

/// The pid a lock's holder wrote into it.
fn holder_pid(path: &Path) -> Option<u32> {
    let text = crate::files::read_bytes(path, 64).ok()?;
    std::str::from_utf8(&text).ok()?.trim().parse().ok()
}

fn already(path: &Path, pid: Option<u32>) -> Error {
    let who = pid.map_or_else(
        || "another ralph".to_string(),
        |p| format!("ralph (pid {p})"),
    );
    Error::user(format!(
        "{who} is already supervising this work tree (lock `{}`)",
        path.display()
    ))
    .with_hint("wait for it, or stop it; `ralph status` shows what it is doing")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = Lock::acquire(&p).unwrap();
        assert!(Lock::is_held(&p));
        let e = Lock::acquire(&p).err().unwrap().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        assert!(!Lock::is_held(&p));
        Lock::acquire(&p).unwrap();
    }

    #[test]
    fn the_holder_of_either_lock_is_found_own_first() {
        let dir = tempfile::tempdir().unwrap();
        let locks = TreeLocks {
            own: Some(dir.path().join("own")),
            git: dir.path().join("git"),
        };
        assert_eq!(locks.holder(), None);
        let git = Lock::acquire(&locks.git).unwrap();
        assert_eq!(locks.holder(), Some(Some(std::process::id())));
        drop(git);
        std::fs::write(locks.own.as_ref().unwrap(), "").unwrap();
        let own = File::open(locks.own.as_ref().unwrap()).unwrap();
        own.lock().unwrap();
        assert_eq!(locks.holder(), Some(None), "held, no pid written");
    }
}
