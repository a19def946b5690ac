//! The `.ralph/` directory (SPEC §7): scaffolding (mode 0700), atomic writes, and the rooms
//! below it: the run state (`run_state`), the append-only logs (`logs`) and the one-supervisor
//! locks (`lock`); and ralph's own
//! state directory outside the repository (`home`), where the run state's authority and the
//! lock that decides live (SPEC §11).

mod home;
mod lock;
mod logs;
mod run_state;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub(crate) use home::{Keyed, StateHome};
pub(crate) use lock::{Lock, TreeLocks};
pub(crate) use logs::{append_line, tail_lines};
pub(crate) use run_state::{HaltReason, Limits, Mode, Pinned, Recorded, RunState, SCHEMA_VERSION};

pub(crate) const DIR: &str = ".ralph";

/// What `.ralph/.gitignore` keeps out of git: the runtime files.
pub(crate) const GITIGNORE: &str = "\
# Written by ralph: runtime files stay out of git.
# progress.md and guardrails.md are the agent's memory across fresh contexts: commit them.
activity.log
activity.now
iterations.log
question.md
runs/
state.json
state.json.tmp*
lock
.barrier-*
.tmp-*
";

/// ralph's runtime files as paths from the work tree's root, for `Repo::keep_out`: the
/// patterns of [`GITIGNORE`] under `.ralph/` (`runs/` a directory, `state.json.tmp*` a
/// prefix).
pub(crate) fn runtime_paths() -> Vec<String> {
    GITIGNORE
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| format!("{DIR}/{l}"))
        .collect()
}

pub(crate) const GUARDRAILS: &str = "\
# RALPH Guardrails

Rules and lessons learned across iterations. Each \"Sign\" prevents repeating mistakes.

## Signs

<!-- Signs are added by the agent when it learns something important. Example:
### Sign: Always run tests before finishing
- **Trigger**: After any code change
- **Instruction**: Run the test suite and fix failures before finishing
- **Added after**: Iteration 2 — left broken code
-->
";

/// Paths inside `.ralph/`.
#[derive(Debug, Clone)]
pub(crate) struct RalphDir {
    pub(crate) path: PathBuf,
}

impl RalphDir {
    pub(crate) fn new(root: &Path) -> RalphDir {
        RalphDir {
            path: root.join(DIR),
        }
    }
    pub(crate) fn progress(&self) -> PathBuf {
        self.path.join("progress.md")
    }
    pub(crate) fn guardrails(&self) -> PathBuf {
        self.path.join("guardrails.md")
    }
    pub(crate) fn activity_log(&self) -> PathBuf {
        self.path.join("activity.log")
    }
    pub(crate) fn iterations_log(&self) -> PathBuf {
        self.path.join("iterations.log")
    }
    pub(crate) fn state_file(&self) -> PathBuf {
        self.path.join("state.json")
    }
    pub(crate) fn run_dir(&self, run_id: &str) -> PathBuf {
        self.path.join("runs").join(run_id)
    }

    /// Make sure ralph's runtime files can be written and stay ignored, even if the agent
    /// deleted `.ralph/` (the logs start again; nothing else is recreated).
    pub(crate) fn ensure_runtime(&self) -> Result<()> {
        create_private_dir(&self.path)?;
        let ignore = self.path.join(".gitignore");
        if !ignore.exists() {
            crate::files::write_own(&ignore, GITIGNORE.as_bytes())
                .map_err(|e| Error::file("write", &ignore, e))?;
        }
        Ok(())
    }

    /// `.ralph/.gitignore` with ralph's lines last, so that `git status` as the user sees it
    /// leaves the runtime files out again after an agent emptied the file or negated them (`!*`)
    /// — the lines before ralph's are kept, ralph's block is moved last. ralph's own staging
    /// never relies on it (`Repo::keep_out`). `true` when the file was written.
    pub(crate) fn keep_ignoring(&self) -> Result<bool> {
        let path = self.path.join(".gitignore");
        // Anything odd there (a link, a FIFO, too big) is no rule of ralph's: replaced.
        let root = self.path.parent().unwrap_or(&self.path);
        let now = crate::files::read_own_text(root, &path).unwrap_or_default();
        if now.ends_with(GITIGNORE) {
            return Ok(false);
        }
        let mut kept = now.replace(GITIGNORE, "");
        if !kept.is_empty() && !kept.ends_with('\n') {
            kept.push('\n');
        }
        kept.push_str(GITIGNORE);
        crate::files::write_own(&path, kept.as_bytes())
            .map_err(|e| Error::file("write", &path, e))?;
        Ok(true)
    }

    /// Create `.ralph/` (mode 0700) and every file that is missing; existing files are kept.
    /// Returns the files it created.
    pub(crate) fn scaffold(
        &self,
        task_name: &str,
        total: usize,
        max_iterations: u32,
    ) -> Result<Vec<PathBuf>> {
        create_private_dir(&self.path)?;
        let mut created = Vec::new();
        let files = [
            (self.path.join(".gitignore"), GITIGNORE.to_string()),
            (self.progress(), initial_progress(total)),
            (self.guardrails(), GUARDRAILS.to_string()),
            (
                self.activity_log(),
                format!(
                    "# RALPH Activity Log\n# Task: {task_name}\n# Started: {}\n# Max iterations: {max_iterations}\n",
                    now_rfc3339()
                ),
            ),
        ];
        for (path, text) in files {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    f.write_all(text.as_bytes())
                        .map_err(|e| Error::file("write", &path, e))?;
                    created.push(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::file("create", &path, e)),
            }
        }
        Ok(created)
    }
}

/// `mkdir -p` with mode 0700 for the last component (transcripts can hold secrets).
pub(crate) fn create_private_dir(path: &Path) -> Result<()> {
    crate::files::own_dir(path).map_err(|e| Error::file("create directory", path, e))
}

pub(crate) fn now_rfc3339() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

pub(crate) fn initial_progress(total: usize) -> String {
    format!(
        "# RALPH Progress\n\n{}\n## Iteration Log\n<!-- Each iteration appends here -->\n",
        crate::task::status_block::status_block(0, 0, total, "Not started")
    )
}

/// Write a file atomically: temp file in the same directory, fsync, rename (`files::write_atomic`).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    if dir.file_name().is_some_and(|n| n == DIR) {
        // `.ralph` itself may have become the agent's symlink since ralph last looked.
        crate::files::own_dir(dir).map_err(|e| Error::file("create directory", dir, e))?;
    }
    // Never through a link out of the repository, never writing through a link at `path`.
    crate::files::write_atomic(path, bytes, 0o644).map_err(|e| Error::file("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn scaffold_keeps_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        let rd = RalphDir::new(dir.path());
        create_private_dir(&rd.path).unwrap();
        std::fs::write(rd.guardrails(), "mine").unwrap();
        let created = rd.scaffold("t", 2, 5).unwrap();
        assert_eq!(created.len(), 3);
        assert_eq!(std::fs::read_to_string(rd.guardrails()).unwrap(), "mine");
        assert!(
            std::fs::read_to_string(rd.progress())
                .unwrap()
                .contains("0/2")
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&rd.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
