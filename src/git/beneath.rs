//! Under `--sandbox`, ralph's own git writes nothing but beneath the repository (SPEC §4, "no
//! back doors"). The git directory is the agent's to write, also in the sandbox, and git and
//! libgit2 follow the links they find there when they write: `objects/ab` linked to
//! `~/.bashrc.d` puts the next blob whose id starts with `ab` there (its bytes stored as they
//! are when they do not compress), a linked `refs/heads` moves a branch file elsewhere, a linked
//! `MERGE_MSG` has `git merge` overwrite what it points to. ralph's git runs outside the sandbox,
//! as the user, so each of those writes lands where the agent chose.
//!
//! The rule is the kernel's: a Landlock ruleset that handles every kind of write and allows it
//! only beneath the repository's directories (the work tree, the git directory, the common one)
//! and to `/dev/null`; a write through a link that leads elsewhere fails (`EACCES`), and the git
//! command with it, whatever the path. Every git command ralph runs on the repository restricts
//! itself before it starts ([`Beneath::command`]); libgit2's writes (trees, commits, refs) run
//! on a thread of their own that restricts itself ([`Beneath::run`]). Reading stays as it was.
//! Landlock before ABI 2 (Linux 5.19) refuses every rename across directories, which git
//! needs: there, and without Landlock, ralph goes without and says so.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

/// A Landlock ruleset: writes only beneath the repository's directories.
#[derive(Debug, Clone)]
pub struct Beneath {
    ruleset: Arc<OwnedFd>,
}

impl Beneath {
    /// The ruleset for writes beneath `dirs`; `None` where this kernel's Landlock cannot make it.
    pub fn new(dirs: &[&Path]) -> Option<Beneath> {
        #[cfg(target_os = "linux")]
        {
            ruleset(dirs).map(|fd| Beneath {
                ruleset: Arc::new(fd),
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = dirs;
            None
        }
    }

    /// `cmd` restricts itself before it runs the program (and so does all it starts).
    pub fn command(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let fd = self.ruleset.as_raw_fd();
        // SAFETY: the closure makes two system calls and allocates nothing: safe between fork
        // and exec. The ruleset's descriptor stays open (in the parent too) until then.
        unsafe {
            cmd.pre_exec(move || restrict(fd));
        }
    }

    /// `f` on a thread of its own that is restricted first (Landlock restricts a thread and what
    /// it starts; ralph's other threads stay as they are).
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> std::io::Result<R> {
        let fd = self.ruleset.as_raw_fd();
        std::thread::scope(|s| {
            s.spawn(move || restrict(fd).map(|()| f()))
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a confined git write panicked")))
        })
    }
}

/// Restrict the calling thread with the ruleset `fd`: `no_new_privs` (Landlock's condition for
/// an unprivileged process), then `landlock_restrict_self`.
fn restrict(fd: RawFd) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on integers.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above; `fd` is a Landlock ruleset.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
    Ok(())
}

#[cfg(target_os = "linux")]
fn ruleset(dirs: &[&Path]) -> Option<OwnedFd> {
    use landlock::{
        ABI, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr,
    };
    let writes = AccessFs::from_write(ABI::V3);
    let created = Ruleset::default()
        // Every write of ABI 2, renames across directories (`Refer`) included, or nothing.
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_write(ABI::V2))
        .ok()?
        // Truncation (ABI 3) where the kernel knows it: O_TRUNC needs a write right anyway.
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(writes)
        .ok()?
        .create()
        .ok()?;
    let mut rules: Vec<PathBeneath<PathFd>> = Vec::new();
    for dir in dirs {
        rules.push(PathBeneath::new(PathFd::new(dir).ok()?, writes));
    }
    rules.push(PathBeneath::new(
        PathFd::new("/dev/null").ok()?,
        AccessFs::WriteFile | AccessFs::Truncate,
    ));
    let created = created.add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>));
    created.ok()?.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_go_beneath_the_directories_and_nowhere_else() {
        let d = tempfile::tempdir().unwrap();
        let (inside, outside) = (d.path().join("repo"), d.path().join("elsewhere"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("link")).unwrap();
        let Some(b) = Beneath::new(&[&inside]) else {
            eprintln!("skipping: this kernel's Landlock cannot confine writes");
            return;
        };
        let write = |p: &Path| std::fs::write(p, "x").is_ok();
        let got = b
            .run(|| {
                (
                    write(&inside.join("a")),
                    write(&inside.join("link/b")),
                    std::fs::rename(inside.join("a"), inside.join("link-free")).is_ok(),
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open("/dev/null")
                        .is_ok(),
                )
            })
            .unwrap();
        assert_eq!(got, (true, false, true, true));
        assert!(!outside.join("b").exists());
        // The control: this thread is not restricted, and the link leads out.
        assert!(write(&inside.join("link/b")));
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "echo x > link/c"]).current_dir(&inside);
        b.command(&mut cmd);
        assert!(!cmd.status().unwrap().success());
        assert!(!outside.join("c").exists());
    }
}
