//! The agent's own git directory (issue 29: the boundary is git's own). Under `--sandbox` the
//! agent never writes the repository's git directory: the sandbox shows, where the agent's git
//! looks for it (`.git`, or a linked worktree's `$GIT_COMMON_DIR/worktrees/NAME`), a git
//! directory of its own, made afresh by ralph before each attempt — `HEAD` on the loop's branch
//! at ralph's tip, the repository's other refs (as `packed-refs`), ralph's index, the
//! repository's configuration less its credentials (`agent_config.rs`), `info/exclude`,
//! `info/attributes` and `shallow`, and the repository's objects borrowed read-only (`objects/info/alternates` naming them, bound at
//! [`OBJECTS`] inside it); its hooks and submodules' git directories are bound read-only
//! where git looks for them. The real git directory is hidden (a main tree's) or read-only (a
//! worktree's common one).
//!
//! Nothing outside the sandbox ever opens it: what the agent committed reaches ralph's
//! repository as a pack fetched with `git upload-pack` run inside the sandbox
//! ([`Sandbox::upload_pack`](super::Sandbox::upload_pack)), and ralph's git checks it (`fsck`).
//! ralph only writes it, in a directory it has just made (no link of the agent's to follow),
//! and removes the previous one (`remove_dir_all` follows no link).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::RepoPaths;
use crate::error::{Error, Result};

/// Where, inside the agent's git directory, the repository's objects are bound read-only.
pub(super) const OBJECTS: &str = "ralph-objects";

/// The agent's git directory: made in a private directory of ralph's, shown in the sandbox at
/// the repository's git directory.
#[derive(Debug, Clone)]
pub(crate) struct AgentGit {
    home: Arc<tempfile::TempDir>,
    /// What [`Self::reset`] last wrote: `HEAD`'s line and the commit it resolves to.
    written: Arc<std::sync::Mutex<(String, Option<String>)>>,
    /// The repository's git directory (where the sandbox shows the agent's).
    pub(super) at: PathBuf,
    /// The repository's objects (its common git directory's).
    pub(super) objects: PathBuf,
    /// Directories of the repository's bound read-only inside the agent's, at these names:
    /// its hooks (which ralph's commits run too) and a main tree's submodules' git
    /// directories.
    pub(super) read_only: Vec<(PathBuf, &'static str)>,
    /// The repository's own git directory and common one (ralph's, never the agent's).
    git_dir: PathBuf,
    common_dir: PathBuf,
}

impl PartialEq for AgentGit {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.home.path() == other.home.path()
    }
}

impl Eq for AgentGit {}

impl AgentGit {
    /// A private directory for the agent's git directory of `repo`, made once as the
    /// repository stands now.
    pub(super) fn new(repo: &RepoPaths) -> Result<AgentGit> {
        let home = tempfile::Builder::new()
            .prefix("ralph-agent-git-")
            .tempdir()
            .map_err(|e| Error::io("failed to make a directory for the agent's git", e))?;
        let mut read_only = vec![(repo.common_dir.join("hooks"), "hooks")];
        if repo.git_dir == repo.common_dir {
            read_only.push((repo.common_dir.join("modules"), "modules"));
        }
        read_only.retain(|(d, _)| d.is_dir() && !d.is_symlink());
        let agent = AgentGit {
            home: Arc::new(home),
            written: Arc::default(),
            at: repo.git_dir.clone(),
            objects: repo.common_dir.join("objects"),
            read_only,
            git_dir: repo.git_dir.clone(),
            common_dir: repo.common_dir.clone(),
        };
        agent.reset()?;
        Ok(agent)
    }

    /// The directory bound at [`Self::at`] inside the sandbox.
    pub(super) fn dir(&self) -> PathBuf {
        self.home.path().join("git")
    }

    /// The agent's git directory as ralph made it (its path outside the sandbox), for ralph's
    /// own reads that follow no link (`git/lfs.rs`): never opened with git.
    pub(crate) fn outside(&self) -> PathBuf {
        self.dir()
    }

    /// Where the sandbox shows the agent's copy of the configuration (read-only): where the
    /// repository's own configuration files are, its git directory's and its common one's.
    pub(super) fn config_places(&self) -> Vec<PathBuf> {
        let mut places = vec![self.git_dir.join("config"), self.common_dir.join("config")];
        places.dedup();
        places
    }

    /// Where a file for a hook run in the sandbox is written (`COMMIT_EDITMSG`): this directory,
    /// and where the hook sees it.
    pub(crate) fn message_dir(&self) -> crate::hooks::MessageDir {
        crate::hooks::MessageDir {
            dir: self.dir(),
            shown: self.at.clone(),
        }
    }

    /// Make the agent's git directory afresh from ralph's repository as it stands: `HEAD` as
    /// ralph's (its branch at its tip), ralph's index, the repository's configuration, its
    /// objects borrowed. What the agent left in the last one (its commits are fetched before)
    /// goes.
    pub(crate) fn reset(&self) -> Result<()> {
        let dir = self.dir();
        if dir.symlink_metadata().is_ok() {
            let old = self.home.path().join("old");
            let _ = std::fs::remove_dir_all(&old);
            std::fs::rename(&dir, &old).map_err(|e| Error::file("move aside", &dir, e))?;
            // A directory the agent made unremovable (no write permission inside) is left
            // there; the next reset tries again.
            let _ = std::fs::remove_dir_all(&old);
        }
        let io = |what: &str, p: &Path, e| Error::file(what, p, e);
        let mounts = self.read_only.iter().map(|(_, name)| *name);
        let subs = [
            "objects/info",
            "objects/pack",
            "refs/heads",
            "refs/tags",
            "info",
            OBJECTS,
        ];
        for sub in subs.into_iter().chain(mounts) {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| io("create directory", &p, e))?;
        }
        let write = |rel: &str, bytes: &[u8]| {
            let p = dir.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io("create directory", parent, e))?;
            }
            std::fs::write(&p, bytes).map_err(|e| io("write", &p, e))
        };
        let (head, tip, refs) = self.head()?;
        if let Ok(mut w) = self.written.lock() {
            *w = (head.clone(), tip.clone());
        }
        write("HEAD", format!("{head}\n").as_bytes())?;
        if let (Some(branch), Some(tip)) = (head.strip_prefix("ref: "), tip) {
            write(branch, format!("{tip}\n").as_bytes())?;
        }
        write("packed-refs", refs.as_bytes())?;
        let alternates = format!("{}\n", self.at.join(OBJECTS).display());
        write("objects/info/alternates", alternates.as_bytes())?;
        let common = &self.common_dir;
        for (from, to) in [
            (common.join("config"), "config"),
            (common.join("info/exclude"), "info/exclude"),
            (common.join("info/attributes"), "info/attributes"),
            (common.join("shallow"), "shallow"),
            (self.git_dir.join("index"), "index"),
        ] {
            copy_plain(&from, &dir.join(to))?;
        }
        super::agent_config::scrub(&dir.join("config"))?;
        Ok(())
    }

    /// Whether the agent's `HEAD` is plainly where ralph put it: the same `HEAD` line and, on a
    /// branch, the same commit in its loose ref — two small regular files read by ralph
    /// itself, no link followed. Then it committed nothing to take and the fetch is spared;
    /// anything else (a commit, a link, a packed or another kind of ref) is left to the fetch.
    pub(crate) fn unmoved(&self) -> bool {
        let Ok(w) = self.written.lock() else {
            return false;
        };
        let (head, tip) = &*w;
        let dir = self.dir();
        if small_file(&dir.join("HEAD")).as_deref() != Some(head.as_str()) {
            return false;
        }
        match (head.strip_prefix("ref: "), tip) {
            (Some(branch), Some(tip)) => {
                small_file(&dir.join(branch)).as_deref() == Some(tip.as_str())
            }
            (Some(_), None) => false,
            (None, _) => true,
        }
    }

    /// What the agent left under way in its git directory (a merge, a rebase…), by the files
    /// git marks it with (their names only: nothing of the agent's is read).
    pub(crate) fn in_progress(&self) -> Option<&'static str> {
        let dir = self.dir();
        [
            ("MERGE_HEAD", "merge"),
            ("CHERRY_PICK_HEAD", "cherry-pick"),
            ("REVERT_HEAD", "revert"),
            ("rebase-merge", "rebase"),
            ("rebase-apply", "rebase or mailbox apply (git am)"),
            ("BISECT_LOG", "bisect"),
        ]
        .into_iter()
        .find(|(f, _)| dir.join(f).symlink_metadata().is_ok())
        .map(|(_, what)| what)
    }

    /// ralph's `HEAD` as its file says it (`ref: refs/heads/…`, or a commit), the commit it
    /// is at (none on an unborn branch), and the repository's other refs as `packed-refs`
    /// says them.
    fn head(&self) -> Result<(String, Option<String>, String)> {
        let repo = git2::Repository::open(&self.git_dir)
            .map_err(|e| Error::user(format!("--sandbox: the repository cannot be opened: {e}")))?;
        let tip = repo
            .head()
            .ok()
            .and_then(|h| h.target())
            .map(|o| o.to_string());
        let head = repo
            .find_reference("HEAD")
            .ok()
            .and_then(|r| {
                r.symbolic_target()
                    .ok()
                    .flatten()
                    .map(|t| format!("ref: {t}"))
            })
            .or_else(|| tip.clone())
            .unwrap_or_else(|| "ref: refs/heads/main".to_string());
        let branch = head.strip_prefix("ref: ").unwrap_or_default();
        let mut refs = String::new();
        for r in repo.references().into_iter().flatten().flatten() {
            if let (Some(name), Some(id)) = (r.name().ok(), r.target())
                && name != branch
                && name.starts_with("refs/")
            {
                refs.push_str(&format!("{id} {name}\n"));
            }
        }
        Ok((head, tip, refs))
    }
}

/// The first line of a regular file of at most a few hundred bytes, opened following no link
/// (a FIFO is not waited on); `None` for anything else.
fn small_file(p: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(512).read_to_string(&mut text).ok()?;
    text.lines().next().map(str::to_string)
}

/// Copy `from` to `to` when it is a plain file (never through a link, never a FIFO or device).
fn copy_plain(from: &Path, to: &Path) -> Result<()> {
    if from.symlink_metadata().is_ok_and(|m| m.is_file()) {
        std::fs::copy(from, to).map_err(|e| Error::file("copy to", to, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_git_dir_is_made_afresh_with_ralphs_head_and_borrowed_objects() {
        let d = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .current_dir(d.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .args(["-c", "user.name=u", "-c", "user.email=u@e"])
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q", "-b", "work"]);
        git(&["commit", "-q", "--allow-empty", "-m", "one"]);
        let repo = RepoPaths {
            work_tree: d.path().into(),
            git_dir: d.path().join(".git"),
            common_dir: d.path().join(".git"),
        };
        let agent = AgentGit::new(&repo).unwrap();
        let dir = agent.dir();
        let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
        assert_eq!(read("HEAD"), "ref: refs/heads/work\n");
        assert_eq!(read("refs/heads/work").len(), 41);
        // Nothing committed: unmoved; a commit, a link in place of the ref: not.
        assert!(agent.unmoved());
        std::fs::write(dir.join("refs/heads/work"), format!("{}\n", "1".repeat(40))).unwrap();
        assert!(!agent.unmoved());
        std::fs::remove_file(dir.join("refs/heads/work")).unwrap();
        let tip = d.path().join(".git/refs/heads/work");
        std::os::unix::fs::symlink(&tip, dir.join("refs/heads/work")).unwrap();
        assert!(!agent.unmoved());
        git(&["tag", "v1"]);
        agent.reset().unwrap();
        assert!(read("packed-refs").ends_with(" refs/tags/v1\n"));
        assert!(read("objects/info/alternates").ends_with(".git/ralph-objects\n"));
        std::fs::write(dir.join("planted"), "x").unwrap();
        std::fs::remove_file(dir.join("packed-refs")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("packed-refs")).unwrap();
        agent.reset().unwrap();
        assert!(!dir.join("planted").exists());
        assert!(read("packed-refs").ends_with(" refs/tags/v1\n"));
        assert_eq!(read("HEAD"), "ref: refs/heads/work\n");
    }
}
