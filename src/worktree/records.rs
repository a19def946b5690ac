//! ralph's records of a repository's loops (SPEC §4, §13), in its state directory
//! (`StateHome::repo`), where no agent can write them (the home directory is read-only under
//! `--sandbox`): the branch each loop started from and merges into, the loops it retired (their
//! worktree removed: merged, or replaced by a new loop of the same name) with their logs, and
//! the lock between loops. Nothing here is read from the git directory an agent can write.
//!
//! Layout: `worktrees.lock`; `loops/NAME.json` (a live loop's record); `kept/NAME-RUN/`
//! (a retired loop: `loop.json`, what `status --all` shows, and the logs ralph wrote).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::git::Repo;
use crate::state::{Keyed, RunState, StateHome};

/// How long a loop waits for another's merge, worktree creation or removal (each takes seconds
/// at most; a holder that never lets go is a process that should not be trusted to).
const LOCK_WAIT: Duration = Duration::from_secs(300);

/// The most a record file may hold (they are a few hundred bytes).
const MAX_RECORD: u64 = 1024 * 1024;

/// A live loop, as ralph made its worktree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoopRecord {
    /// The branch it started from and merges into (`None`: started on a detached HEAD).
    pub(crate) base: Option<String>,
    /// The base's commit once the loop merged (its worktree may have stayed: ignored files).
    #[serde(default)]
    pub(crate) merged_at: Option<String>,
}

/// A loop ralph retired: its worktree removed, this record and its logs kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Kept {
    pub(crate) name: String,
    /// Its branch, as it is called now (`ralph/NAME-<date>` once a new loop took the name).
    pub(crate) branch: String,
    pub(crate) base: Option<String>,
    /// Where its worktree was.
    pub(crate) worktree: PathBuf,
    /// The base branch's commit once the loop was merged into it; `None`: never merged.
    pub(crate) merged_at: Option<String>,
    /// When ralph retired it (RFC 3339).
    pub(crate) kept_at: String,
    /// Its run as ralph last recorded it.
    pub(crate) state: Option<RunState>,
}

/// The records of one repository.
pub(crate) struct Records {
    dir: Keyed,
}

/// Why ralph needs its state directory for loops.
fn no_state_home() -> Error {
    Error::user(
        "ralph keeps each loop's records (the branch it merges into, the lock between loops, the logs of a merged loop) in its state directory, and there is none: neither XDG_STATE_HOME nor HOME is set to an absolute path",
    )
    .with_hint("set HOME (or XDG_STATE_HOME) and run again")
}

impl Records {
    /// The records of `repo`'s repository, created when missing; an error without a state
    /// directory (`--worktree` and `ralph merge` need one).
    pub(crate) fn open(repo: &Repo) -> Result<Records> {
        let home = StateHome::locate().ok_or_else(no_state_home)?;
        let common = repo.git2().commondir();
        let dir = home
            .repo(common)
            .map_err(|e| Error::file("create directory", home.path(), e))?;
        Ok(Records { dir })
    }

    /// The records of `repo`'s repository when there are any (nothing is created).
    pub(crate) fn find(repo: &Repo) -> Option<Records> {
        let dir = StateHome::locate()?.find_repo(repo.git2().commondir())?;
        Some(Records { dir })
    }

    /// One merge, worktree creation or removal at a time across loops, waited for up to
    /// [`LOCK_WAIT`] (held by an open file, so a killed holder releases it).
    pub(crate) fn lock(&self) -> Result<std::fs::File> {
        let path = self.dir.join("worktrees.lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::file("open", &path, e))?;
        let deadline = Instant::now() + LOCK_WAIT;
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
                        LOCK_WAIT.as_secs()
                    ))
                    .with_hint("`ralph status --all` lists the loops; `fuser` names the holder"));
                }
            }
        }
    }

    fn loop_file(&self, name: &str) -> PathBuf {
        self.dir.join("loops").join(format!("{name}.json"))
    }

    /// Loop `name`'s record, if ralph made its worktree.
    pub(crate) fn loop_record(&self, name: &str) -> Result<Option<LoopRecord>> {
        read_json(&self.loop_file(name))
    }

    /// Record loop `name` (its worktree just made, or merged).
    pub(crate) fn set_loop(&self, name: &str, record: &LoopRecord) -> Result<()> {
        write_json(&self.loop_file(name), record)
    }

    /// Loop `name` is retired: its live record goes.
    pub(crate) fn forget_loop(&self, name: &str) -> Result<()> {
        let file = self.loop_file(name);
        match std::fs::remove_file(&file) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::file("remove", &file, e)),
        }
    }

    /// A new directory for a retired loop's record and logs: `kept/NAME-RUN`.
    pub(crate) fn new_kept_dir(&self, name: &str, run: &str) -> Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let parent = self.dir.join("kept");
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(&parent)
            .map_err(|e| Error::file("create directory", &parent, e))?;
        b.recursive(false);
        for n in 1..=1000 {
            let dir = match n {
                1 => parent.join(format!("{name}-{run}")),
                n => parent.join(format!("{name}-{run}-{n}")),
            };
            match b.create(&dir) {
                Ok(()) => return Ok(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::file("create directory", &dir, e)),
            }
        }
        Err(Error::user(format!(
            "{}: a thousand records of run {run} of loop `{name}` already",
            parent.display()
        )))
    }

    /// Write a retired loop's record into its directory.
    pub(crate) fn set_kept(&self, dir: &Path, kept: &Kept) -> Result<()> {
        write_json(&dir.join("loop.json"), kept)
    }

    /// Every retired loop, the earliest first, each with its directory. A record that cannot
    /// be read is skipped (it names nothing ralph decides on).
    pub(crate) fn kept(&self) -> Vec<(PathBuf, Kept)> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("kept")) else {
            return Vec::new();
        };
        let mut out: Vec<(PathBuf, Kept)> = entries
            .flatten()
            .filter_map(|e| {
                let kept = read_json::<Kept>(&e.path().join("loop.json")).ok()??;
                Some((e.path(), kept))
            })
            .collect();
        out.sort_by(|a, b| (&a.1.kept_at, &a.0).cmp(&(&b.1.kept_at, &b.0)));
        out
    }

    /// A branch was renamed: the retired loops that name it follow.
    pub(crate) fn rename_branch(&self, from: &str, to: &str) -> Result<()> {
        for (dir, mut kept) in self.kept() {
            if kept.branch == from {
                kept.branch = to.to_string();
                self.set_kept(&dir, &kept)?;
            }
        }
        Ok(())
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let text = match crate::files::read_bytes(path, MAX_RECORD) {
        Ok(t) => t,
        Err(e) if e.is_missing() => return Ok(None),
        Err(e) => return Err(Error::user(e.to_string())),
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| Error::user(format!("{}: unreadable record: {e}", path.display())))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|e| Error::user(e.to_string()))?;
    text.push(b'\n');
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::file("create directory", dir, e))?;
    }
    crate::state::write_atomic(path, &text)
}
