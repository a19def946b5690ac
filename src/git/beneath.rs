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

use std::path::Path;
use std::sync::Arc;

/// The ruleset as the landlock crate holds it: its descriptor, and whether `no_new_privs` comes
/// first. No Landlock beyond Linux: there is never one.
#[cfg(target_os = "linux")]
type Rules = landlock::RulesetCreated;
#[cfg(not(target_os = "linux"))]
type Rules = std::convert::Infallible;

/// A Landlock ruleset: writes only beneath the repository's directories.
#[derive(Debug, Clone)]
pub(crate) struct Beneath {
    ruleset: Arc<Rules>,
}

impl Beneath {
    /// The ruleset for writes beneath `dirs`; `None` where this kernel's Landlock cannot make it.
    pub(crate) fn new(dirs: &[&Path]) -> Option<Beneath> {
        #[cfg(target_os = "linux")]
        {
            ruleset(dirs).map(|r| Beneath {
                ruleset: Arc::new(r),
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = dirs;
            None
        }
    }

    /// `cmd` restricts itself before it runs the program (and so does all it starts).
    pub(crate) fn command(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let ruleset = Arc::clone(&self.ruleset);
        // SAFETY: between fork and exec the closure duplicates the ruleset's descriptor, makes
        // the `prctl` and `landlock_restrict_self` calls and closes the duplicate: system calls
        // only, no allocation, no lock (an error is the call's own, see `restrict`). The ruleset
        // stays open in the parent until the command is dropped. `pre_exec` is unsafe by its
        // nature (std's only hook between fork and exec), and no crate offers a safe one: the
        // landlock crate restricts the calling thread, which here must be the child's.
        unsafe {
            cmd.pre_exec(move || restrict(&ruleset));
        }
    }

    /// `f` on a thread of its own that is restricted first (Landlock restricts a thread and what
    /// it starts; ralph's other threads stay as they are).
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> std::io::Result<R> {
        let ruleset = &self.ruleset;
        std::thread::scope(|s| {
            s.spawn(move || restrict(ruleset).map(|()| f()))
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a confined git write panicked")))
        })
    }
}

/// Restrict the calling thread (alone: no flag asks for all threads) with `ruleset`:
/// `no_new_privs` (Landlock's condition for an unprivileged process, required), then
/// `landlock_restrict_self`. A restriction the kernel did not enforce is an error. Allocates
/// nothing, even on an error: it runs between fork and exec too.
#[cfg(target_os = "linux")]
fn restrict(ruleset: &Rules) -> std::io::Result<()> {
    use landlock::{RestrictSelfError, RulesetError, RulesetStatus};
    let status = ruleset.try_clone()?.restrict_self().map_err(|e| match e {
        RulesetError::RestrictSelf(
            RestrictSelfError::SetNoNewPrivsCall { source, .. }
            | RestrictSelfError::RestrictSelfCall { source, .. },
        ) => source,
        _ => std::io::ErrorKind::Other.into(),
    })?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(std::io::ErrorKind::Unsupported.into());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict(ruleset: &Rules) -> std::io::Result<()> {
    match *ruleset {}
}

#[cfg(target_os = "linux")]
fn ruleset(dirs: &[&Path]) -> Option<Rules> {
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
    let created = created
        .add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>))
        .ok()?
        // A thread that cannot set `no_new_privs` is not restricted quietly without it.
        .set_compatibility(CompatLevel::HardRequirement);
    // A ruleset the kernel did not make (no Landlock) holds no descriptor: none at all then.
    let probe: Option<std::os::fd::OwnedFd> = created.try_clone().ok()?.into();
    probe.map(|_| created)
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
            // CI's kernel has Landlock: a test that could not run must not pass there.
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "CI is set, and this kernel's Landlock cannot confine writes"
            );
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
