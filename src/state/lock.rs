//! One supervisor per work tree (SPEC §7, §11): an advisory lock the kernel drops when its
//! holder dies, in the work tree's git directory (`$GIT_DIR/ralph.lock`; a linked worktree has
//! its own), where an agent's `git clean -xfd` or `rm -rf .ralph` cannot remove it.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// Where the lock of the work tree whose git directory is `git_dir` lives.
pub fn lock_path(git_dir: &Path) -> std::path::PathBuf {
    git_dir.join("ralph.lock")
}

/// The advisory lock held by a running supervisor (std's `File::try_lock`): the kernel releases
/// it when the holder dies, so a crash never leaves a stale lock.
pub struct Lock {
    _file: File,
}

impl Lock {
    pub fn acquire(path: &Path) -> Result<Lock> {
        // Never through a symlink the agent planted in the git directory (SPEC §4).
        let mut file =
            crate::files::open_own(path, true).map_err(|e| Error::file("open", path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() {
                    "another ralph".to_string()
                } else {
                    format!("ralph (pid {holder})")
                };
                return Err(Error::user(format!(
                    "{who} is already supervising this repository (lock `{}`)",
                    path.display()
                ))
                .with_hint("wait for it, or stop it; `ralph status` shows what it is doing"));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::file("lock", path, e)),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(|e| Error::file("write", path, e))?;
        Ok(Lock { _file: file })
    }

    /// Whether some process holds the lock now (without taking it for long).
    pub fn is_held(path: &Path) -> bool {
        let Ok(file) = File::open(path) else {
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
}
