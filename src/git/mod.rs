//! Git for the supervisor (SPEC §8): readiness checks, the `git status --porcelain`
//! fingerprint, staging exactly as `git add -A` does, and the iteration's commits.
//!
//! Which tool does what, and why: libgit2 (git2) opens the repository, checks its state, reads
//! HEAD and trees, runs nothing, and makes the commits (commit object, the branch moved). The
//! index is git's alone (`index.rs`: its tree is HEAD's with what `git diff-index --cached`
//! lists, `tree.rs`, or `git write-tree`'s). The git CLI (`cli.rs`) does
//! the two steps libgit2 cannot do as git does:
//! `git status` (ignore rules at every level with nested negations, sparse checkouts, clean
//! filters in the fingerprint, git's stat cache refreshed and written back) and `git add`
//! (clean/smudge filter drivers such as git-lfs, the same rules). With a watcher running
//! (`watch.rs`), ralph is the CLI's file-system monitor (`fsmonitor.rs`), so both cost what
//! changed, not the size of the tree.

mod beneath;
mod cksum;
pub(crate) mod cli;
mod commit;
mod fetch;
pub(crate) mod fsmonitor;
mod full_walk;
mod identity;
mod index;
pub(crate) mod lfs;
pub(crate) mod memory;
mod nested;
mod own;
mod stage;
mod tree;
pub(crate) mod watch;

use std::path::{Component, Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use git2::{DiffOptions, ErrorCode, Oid, Repository, RepositoryState};

pub(crate) use beneath::Beneath;
pub(crate) use cksum::cksum;
use cli::{GitCli, Monitor};
pub(crate) use fetch::Taken;
pub(crate) use identity::Identity;
pub(crate) use own::{OwnHead, foreign_repository_var};

/// Message of the error returned when no repository encloses the directory.
#[cfg(test)]
pub(crate) const NOT_A_REPO_MESSAGE: &str = "Git required. Run git init first.";

/// Identity used when neither the environment nor the configuration names one.
pub(crate) const FALLBACK_NAME: &str = "ralph";
/// E-mail used when neither the environment nor the configuration names one.
pub(crate) const FALLBACK_EMAIL: &str = "ralph@localhost";

/// How long `commit_all` waits for someone else's `index.lock` by default.
pub(crate) const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(2);

const LOCK_POLL: Duration = Duration::from_millis(25);

/// A `git status` writes its refreshed stat data back to the index when the monitor may name
/// more than this many paths since the last status that did (see [`Repo::status`]).
const REFRESH_AFTER: usize = 1_000;

/// Errors from git work.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// No repository encloses the directory.
    #[error("Git required. Run git init first.")]
    NotARepo,
    /// The repository has no work tree.
    #[error("bare repository at {} has no work tree", .0.display())]
    Bare(PathBuf),
    /// A merge, rebase, cherry-pick, revert, bisect or mailbox apply is under way.
    #[error("a {0} is in progress in the repository; finish or abort it first")]
    InProgress(&'static str),
    /// The index holds unresolved conflicts.
    #[error("the index has unresolved merge conflicts; resolve them first")]
    Conflicts,
    /// Another process holds the index lock.
    #[error("the index is locked by another git process: {} exists (remove it only if no git process is running)", .0.display())]
    IndexLocked(PathBuf),
    /// Any other failure reported by libgit2.
    #[error("git error: {0}")]
    Git(#[from] git2::Error),
    /// A git command failed.
    #[error("`{command}` failed: {message}")]
    Cli { command: String, message: String },
    /// The git command could not be run at all.
    #[error("cannot run `git {0}` (is git installed?): {1}")]
    Spawn(String, #[source] std::io::Error),
    /// A git command ran past its deadline and was killed.
    #[error(
        "`git {0}` ran longer than {1} s and was killed (a FIFO where git reads a file, or a filter that never ends?)"
    )]
    Hung(String, u64),
    /// A git command killed because ralph was interrupted (SIGINT, SIGTERM, SIGHUP).
    #[error("`git {0}` was stopped: ralph was interrupted")]
    Stopped(String),
    /// HEAD is not the loop's own: ralph commits onto nothing else.
    #[error(
        "HEAD is on {head}, not on this loop's {own}: ralph commits only onto its loop's own branch, so the work stays uncommitted (put HEAD back with {back})"
    )]
    NotOwnHead {
        head: String,
        own: String,
        back: String,
    },
}

/// A commit, as the supervisor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Full hexadecimal object id.
    pub id: String,
    /// First 7 hexadecimal digits of the id.
    pub short: String,
    /// First paragraph of the message, folded onto one line.
    pub summary: String,
}

/// What staging like `git add -A` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    /// The tree the index now holds.
    pub tree: Oid,
    /// Repo-relative paths whose content or presence differs from HEAD's tree
    /// (every path when the branch is unborn), sorted.
    pub(crate) changed: Vec<String>,
    /// Paths left out, with the reason: the commit guard's, and paths git refuses (a FIFO, a
    /// socket, a nested repository without a commit).
    pub(crate) left_out: Vec<(String, String)>,
}

/// Runs the hooks before a commit: given the work tree and the message, the message to use or
/// why the commit is refused.
pub(crate) type HookRunner = dyn Fn(&Path, &str) -> Result<String, String>;

/// What [`Repo::commit_with`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitReport {
    /// The commit, when one was made.
    pub(crate) outcome: Option<CommitOutcome>,
    /// Paths the guard kept out of the commit, with the reason.
    pub(crate) left_out: Vec<(String, String)>,
    /// A hook refused the commit: what it said.
    pub(crate) hook_failure: Option<String>,
}

/// A commit made by [`Repo::commit_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The new commit.
    pub commit: CommitInfo,
    /// True when the author or committer fell back to `ralph <ralph@localhost>`.
    pub used_fallback_identity: bool,
}

/// A non-bare repository and its work tree.
pub struct Repo {
    repo: Repository,
    root: PathBuf,
    lock_wait: Duration,
    git: GitCli,
    /// The configuration as git read it last (see [`Repo::reload_config`]).
    config: std::sync::Mutex<Option<std::sync::Arc<Config>>>,
    /// The index's tree and gitlinks, remembered while the index file is unchanged.
    index_memo: std::sync::Mutex<index::IndexMemo>,
    /// Where the loop's commits may go (`own.rs`); `None`: no loop owns this repository.
    own: Option<OwnHead>,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("root", &self.root)
            .field("git_dir", &self.repo.path())
            .finish()
    }
}

impl Repo {
    /// Open the repository enclosing `dir` (any subdirectory works). Bare repositories are refused.
    pub fn discover(dir: &Path) -> Result<Repo, GitError> {
        let repo = match Repository::discover(dir) {
            Ok(repo) => repo,
            Err(e) if e.code() == ErrorCode::NotFound => return Err(GitError::NotARepo),
            Err(e) => return Err(GitError::Git(e)),
        };
        let root = match repo.workdir() {
            Some(w) if !repo.is_bare() => w.components().collect::<PathBuf>(),
            _ => return Err(GitError::Bare(repo.path().components().collect())),
        };
        // No link the agent plants leads ralph's reads and writes out of the repository
        // (SPEC §4): its work tree and git directories are the trees `files` confines to.
        for tree in [root.as_path(), repo.path(), repo.commondir()] {
            crate::files::confine(tree);
        }
        let git = GitCli::new(repo.path(), &root);
        Ok(Repo {
            repo,
            root,
            lock_wait: DEFAULT_LOCK_WAIT,
            git,
            config: std::sync::Mutex::new(None),
            index_memo: std::sync::Mutex::default(),
            own: None,
        })
    }

    /// Work tree root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The underlying git2 repository.
    pub(crate) fn git2(&self) -> &Repository {
        &self.repo
    }

    /// Set how long `commit_all` waits for another process's `index.lock` (default 2 s).
    #[cfg(test)]
    pub(crate) fn set_lock_wait(&mut self, wait: Duration) {
        self.lock_wait = wait;
    }

    /// Path of the index lock file.
    pub(crate) fn index_lock_path(&self) -> PathBuf {
        self.repo.path().join("index.lock")
    }

    /// Refuse when an operation is in progress or the index has conflicts, and wait up to
    /// `lock_wait` for someone else's `index.lock` to go away (it is never deleted).
    pub(crate) fn check_ready(&self, lock_wait: Duration) -> Result<(), GitError> {
        self.check_refusals()?;
        self.wait_for_lock(lock_wait)
    }

    /// Refuse during an operation in progress or with conflicts in the index on disk.
    fn check_refusals(&self) -> Result<(), GitError> {
        self.check_state()?;
        self.check_conflicts()
    }

    fn check_state(&self) -> Result<(), GitError> {
        let what = match self.repo.state() {
            RepositoryState::Clean => return Ok(()),
            RepositoryState::Merge => "merge",
            RepositoryState::Revert | RepositoryState::RevertSequence => "revert",
            RepositoryState::CherryPick | RepositoryState::CherryPickSequence => "cherry-pick",
            RepositoryState::Bisect => "bisect",
            RepositoryState::Rebase => "rebase",
            RepositoryState::RebaseInteractive => "rebase (interactive)",
            RepositoryState::RebaseMerge => "rebase (merge)",
            RepositoryState::ApplyMailbox => "mailbox apply (git am)",
            RepositoryState::ApplyMailboxOrRebase => "rebase or mailbox apply (git am)",
        };
        Err(GitError::InProgress(what))
    }

    fn wait_for_lock(&self, lock_wait: Duration) -> Result<(), GitError> {
        let lock = self.index_lock_path();
        let deadline = Instant::now() + lock_wait;
        loop {
            if !lock.exists() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(GitError::IndexLocked(lock));
            }
            thread::sleep(LOCK_POLL.min(deadline - now));
        }
    }

    pub(crate) fn head(&self) -> Result<Option<CommitInfo>, GitError> {
        Ok(self.head_commit()?.map(|c| commit_info(&c)))
    }

    fn head_commit(&self) -> Result<Option<git2::Commit<'_>>, GitError> {
        head_commit_of(&self.repo)
    }

    /// A configuration value as git sees it (trimmed; `None` when unset or empty), as git
    /// read it at ralph's last status (or now, the first time).
    pub(crate) fn config_value(&self, key: &str) -> Option<String> {
        self.config()
            .get(&key.to_ascii_lowercase())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    fn config(&self) -> std::sync::Arc<Config> {
        let mut config = self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::sync::Arc::clone(config.get_or_insert_with(|| read_config(&self.git).into()))
    }

    /// Read the configuration again: the agent (or code the repository runs) may have changed
    /// it anywhere — `.git/config`, a linked worktree's common directory, an included file in
    /// the work tree, `~/.gitconfig` — where no watch sees it. When it changed, no monitor
    /// token is trusted: how git compares a file it was told is unchanged (`core.fileMode`,
    /// `core.trustctime`, `core.checkStat`, …) may have changed with it. One `git config` of
    /// about 2 ms, before each status.
    fn reload_config(&self) {
        let fresh = std::sync::Arc::new(read_config(&self.git));
        let old = self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(fresh.clone());
        if old.is_some_and(|old| *old != *fresh) {
            self.git.distrust();
        }
    }

    /// The identity git would commit with (the environment, then the configuration), else
    /// `ralph <ralph@localhost>`.
    pub(crate) fn identity(&self) -> Identity {
        Identity::resolve(&|k| self.config_value(k), &|var| std::env::var(var).ok())
    }

    /// Use ralph's watcher as the git CLI's file-system monitor from now on.
    pub(crate) fn set_monitor(&mut self, monitor: Option<Monitor>) {
        self.git.monitor = monitor;
        self.memo().refreshed = None;
    }

    /// `git status ARGS`, writing git's refreshed stat data back to the index only where that
    /// saves work. git writes it whenever anything was refreshed — with ralph's monitor, that
    /// is every time (the monitor's token changes) — and at 100,000 files the write costs more
    /// than the status. What a status leaves unwritten the next one redoes, for the paths the
    /// monitor named since the last write-back; so a status writes when that may be many (more
    /// than [`REFRESH_AFTER`]), when the monitor answers "everything" (the first status of a
    /// run, lost events, an agent that touched `.git`, a changed ignore file: a copied or
    /// touched tree is re-hashed once, not at every iteration), and always without a monitor,
    /// as `git status` does. After a status answered "everything" the next one writes too: git
    /// marks every entry whose stat data it refreshed as unknown to the monitor, and only a
    /// status that finds it unchanged marks it known again.
    fn status(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        self.reload_config();
        let last = self.memo().refreshed;
        let since = match (&self.git.monitor, last) {
            // A foreign index is answered "everything" and written back at once (`cli.rs`).
            (Some(m), Some((at, _))) if !self.git.index_foreign() => (m.changed_since)(at),
            _ => None,
        };
        let settled = last.is_some_and(|(_, in_part)| in_part);
        let write = !(settled && since.is_some_and(|n| n <= REFRESH_AFTER));
        let mut full = Vec::with_capacity(args.len() + 2);
        if !write {
            full.push("--no-optional-locks");
        }
        full.push("status");
        full.extend_from_slice(args);
        let (out, handed) = self.git.run_handed(&full, None)?;
        if write && let Some(at) = handed {
            self.memo().refreshed = Some((at, since.is_some()));
        }
        Ok(out)
    }

    /// Under `--sandbox`: ralph's git commands on the pinned common git directory, without the
    /// repository's hooks, monitors and submodules (`GitCli::sandboxed`), and writing only
    /// beneath the repository ([`Self::confine_writes`]). `false` when this kernel cannot
    /// confine the writes.
    /// `own_binary`: ralph's binary where the agent cannot write it (the sandbox's), for the
    /// file-system monitor's hook.
    pub(crate) fn sandbox_git(&mut self, common_dir: &Path, own_binary: &Path) -> bool {
        self.git.sandboxed = Some(common_dir.to_path_buf());
        self.git.hook_program = Some(own_binary.to_path_buf());
        self.confine_writes()
    }

    /// Every write of ralph's git on this repository — the git commands and libgit2's objects,
    /// refs and reflogs — only beneath its work tree, git directory and common git directory,
    /// never through a link the agent planted there to elsewhere (`beneath.rs`). `false` when
    /// this kernel cannot (Landlock before ABI 2, or none).
    pub(crate) fn confine_writes(&mut self) -> bool {
        let dirs = [self.root.as_path(), self.repo.path(), self.repo.commondir()];
        self.git.beneath = Beneath::new(&dirs);
        self.git.beneath.is_some()
    }

    /// `f` on the repository, where libgit2 writes (trees, commits, refs): under
    /// [`Self::confine_writes`], on a thread that is confined first, with a handle of its own.
    pub(crate) fn writing<R: Send>(
        &self,
        f: impl FnOnce(&Repository) -> Result<R, git2::Error> + Send,
    ) -> Result<R, GitError> {
        let Some(beneath) = &self.git.beneath else {
            return Ok(f(&self.repo)?);
        };
        let path = self.repo.path();
        let done = beneath
            .run(|| Repository::open(path).and_then(|repo| f(&repo)))
            .map_err(|e| GitError::Spawn("a confined libgit2 write".into(), e))?;
        Ok(done?)
    }

    /// Bytes `git status --porcelain` (v1) prints, with the user's configuration.
    pub(crate) fn porcelain(&self) -> Result<Vec<u8>, GitError> {
        self.status(&["--porcelain"])
    }

    /// `git status --porcelain | cksum` without its trailing newline, e.g. `4294967295 0`.
    pub fn fingerprint(&self) -> Result<String, GitError> {
        Ok(cksum(&self.porcelain()?))
    }

    /// [`Self::fingerprint`] right after ralph staged: this status leaves the index alone
    /// (`--no-optional-locks`), as the iteration's first status has just refreshed and, where
    /// that was worth it, written back what it would (see [`Self::status`]). Where nothing
    /// staged this iteration (`--no-commit`), [`Self::fingerprint`] is the iteration's status.
    /// The output is the same.
    pub(crate) fn fingerprint_after_staging(&self) -> Result<String, GitError> {
        let out = self
            .git
            .run(&["--no-optional-locks", "status", "--porcelain"], None)?;
        Ok(cksum(&out))
    }

    /// `git push REMOTE BRANCH` (the branch of the same name there): SPEC §14's one exception
    /// to "ralph never pushes", for `--pr`.
    pub(crate) fn push_branch(&self, remote: &str, branch: &str) -> Result<(), GitError> {
        let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
        self.git
            .run(&["push", "--quiet", "--", remote, &refspec], None)
            .map(|_| ())
    }

    /// The paths under `paths` that `branch` changed since it left `base`'s line of history
    /// (`git diff --name-only BASE...BRANCH -- PATHS`), sorted.
    pub(crate) fn changed_on_branch(
        &self,
        base: &str,
        branch: &str,
        paths: &[&str],
    ) -> Result<Vec<String>, GitError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let range = format!("{base}...refs/heads/{branch}");
        let literal: Vec<String> = paths.iter().map(|p| format!(":(literal){p}")).collect();
        let mut args = vec!["diff", "--name-only", "-z", "--no-renames", &range, "--"];
        args.extend(literal.iter().map(String::as_str));
        let out = self.git.run(&args, None)?;
        let mut names: Vec<String> = out
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The git CLI on this repository.
    pub(crate) fn cli(&self) -> &GitCli {
        &self.git
    }

    /// True when `git status --porcelain` would print anything.
    pub(crate) fn is_dirty(&self) -> Result<bool, GitError> {
        Ok(!self.porcelain()?.is_empty())
    }

    fn changed_paths(&self, tree: Oid) -> Result<Vec<String>, GitError> {
        let head_tree = match self.head_commit()? {
            Some(c) => Some(c.tree()?),
            None => None,
        };
        if head_tree.as_ref().map(|t| t.id()) == Some(tree) {
            return Ok(Vec::new());
        }
        let new_tree = self.repo.find_tree(tree)?;
        let mut opts = DiffOptions::new();
        opts.include_typechange(true);
        let diff =
            self.repo
                .diff_tree_to_tree(head_tree.as_ref(), Some(&new_tree), Some(&mut opts))?;
        let mut paths = Vec::new();
        for delta in diff.deltas() {
            for file in [delta.old_file(), delta.new_file()] {
                if let Some(p) = file.path_bytes() {
                    paths.push(String::from_utf8_lossy(p).into_owned());
                }
            }
        }
        paths.sort();
        paths.dedup();
        Ok(paths)
    }

    pub(crate) fn head_file(&self, path: &str) -> Result<Option<Vec<u8>>, GitError> {
        let Some(commit) = self.head_commit()? else {
            return Ok(None);
        };
        // Only plain components name something inside the tree.
        let mut rel = PathBuf::new();
        for component in Path::new(path).components() {
            match component {
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                _ => return Ok(None),
            }
        }
        if rel.as_os_str().is_empty() {
            return Ok(None);
        }
        let tree = commit.tree()?;
        let entry = match tree.get_path(&rel) {
            Ok(entry) => entry,
            Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::InvalidSpec) => {
                return Ok(None);
            }
            Err(e) => return Err(GitError::Git(e)),
        };
        let object = entry.to_object(&self.repo)?;
        Ok(object.as_blob().map(|b| b.content().to_vec()))
    }
}

fn head_commit_of(repo: &Repository) -> Result<Option<git2::Commit<'_>>, GitError> {
    let head = match repo.head() {
        Ok(head) => head,
        Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
            return Ok(None);
        }
        Err(e) => return Err(GitError::Git(e)),
    };
    Ok(Some(head.peel_to_commit()?))
}

fn commit_info(commit: &git2::Commit<'_>) -> CommitInfo {
    let id = commit.id().to_string();
    let short = id.chars().take(7).collect();
    let summary = commit
        .summary_bytes()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default();
    CommitInfo { id, short, summary }
}

/// Configuration keys (lowercase) and their values, the last one of each.
type Config = std::collections::HashMap<String, String>;

/// The repository's configuration as git reads it (`git config --list -z`): every level, the
/// includes, and `GIT_CONFIG_GLOBAL`/`GIT_CONFIG_NOSYSTEM`/`GIT_CONFIG_*`, which libgit2 does
/// not honour. Keys are looked up case-insensitively; the last value wins, as in git.
fn read_config(git: &GitCli) -> Config {
    let mut map = std::collections::HashMap::new();
    let Ok(out) = git.run(&["config", "--list", "-z"], None) else {
        return map;
    };
    for rec in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let rec = String::from_utf8_lossy(rec);
        let (key, value) = rec.split_once('\n').unwrap_or((&rec, ""));
        map.insert(key.to_ascii_lowercase(), value.to_string());
    }
    map
}

#[cfg(test)]
mod tests;
