//! Git access for the supervisor: readiness checks, `git status --porcelain` fingerprints, staging like `git add -A`, and per-iteration commits, all through git2.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use git2::{
    Config, DiffOptions, ErrorCode, Index, IndexAddOption, Oid, Repository, RepositoryState,
    Signature, Status, StatusOptions,
};

/// Message of the error returned when no repository encloses the directory.
pub const NOT_A_REPO_MESSAGE: &str = "Git required. Run git init first.";

/// Identity used when neither the environment nor the configuration names one.
pub const FALLBACK_NAME: &str = "ralph";
/// E-mail used when neither the environment nor the configuration names one.
pub const FALLBACK_EMAIL: &str = "ralph@localhost";

/// How long `commit_all` waits for someone else's `index.lock` by default.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(2);

const LOCK_POLL: Duration = Duration::from_millis(25);

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

/// Result of staging the work tree into the in-memory index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    /// Tree the staged index would commit.
    pub tree: Oid,
    /// Repo-relative paths whose content or presence differs from HEAD's tree
    /// (every path when the branch is unborn), sorted.
    pub changed: Vec<String>,
}

/// Runs the hooks before a commit: given the work tree and the message, the message to use or
/// why the commit is refused.
pub type HookRunner = dyn Fn(&Path, &str) -> Result<String, String>;

/// What [`Repo::commit_with`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitReport {
    /// The commit, when one was made.
    pub outcome: Option<CommitOutcome>,
    /// Paths the guard kept out of the commit, with the reason.
    pub left_out: Vec<(String, String)>,
    /// A hook refused the commit: what it said.
    pub hook_failure: Option<String>,
}

/// A commit made by [`Repo::commit_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The new commit.
    pub commit: CommitInfo,
    /// True when the author or committer fell back to `ralph <ralph@localhost>`.
    pub used_fallback_identity: bool,
}

/// Author and committer resolved from the environment, configuration or fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Author name.
    pub author_name: String,
    /// Author e-mail.
    pub author_email: String,
    /// Committer name.
    pub committer_name: String,
    /// Committer e-mail.
    pub committer_email: String,
    /// True when any field fell back to `ralph <ralph@localhost>`.
    pub used_fallback: bool,
}

impl Identity {
    /// Resolve the identity like git: `GIT_{AUTHOR,COMMITTER}_{NAME,EMAIL}` from `env`,
    /// then `author.*`/`committer.*`, then `user.*` from `config`, then the fallback.
    pub fn resolve(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Identity {
        let mut used_fallback = false;
        let mut pick = |var: &str, role_key: &str, user_key: &str, fallback: &str| -> String {
            let found = env(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .or_else(|| config_string(config, role_key))
                .or_else(|| config_string(config, user_key));
            found.unwrap_or_else(|| {
                used_fallback = true;
                fallback.to_string()
            })
        };
        let author_name = pick("GIT_AUTHOR_NAME", "author.name", "user.name", FALLBACK_NAME);
        let author_email = pick(
            "GIT_AUTHOR_EMAIL",
            "author.email",
            "user.email",
            FALLBACK_EMAIL,
        );
        let committer_name = pick(
            "GIT_COMMITTER_NAME",
            "committer.name",
            "user.name",
            FALLBACK_NAME,
        );
        let committer_email = pick(
            "GIT_COMMITTER_EMAIL",
            "committer.email",
            "user.email",
            FALLBACK_EMAIL,
        );
        Identity {
            author_name,
            author_email,
            committer_name,
            committer_email,
            used_fallback,
        }
    }
}

/// A non-bare repository and its work tree.
pub struct Repo {
    repo: Repository,
    root: PathBuf,
    lock_wait: Duration,
    /// The repository's index holds staged changes not written to disk.
    index_dirty: bool,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("root", &self.root)
            .field("git_dir", &self.repo.path())
            .finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Untracked {
    No,
    Normal,
    All,
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
        Ok(Repo {
            repo,
            root,
            lock_wait: DEFAULT_LOCK_WAIT,
            index_dirty: false,
        })
    }

    /// Work tree root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The underlying git2 repository.
    pub fn git2(&self) -> &Repository {
        &self.repo
    }

    /// Set how long `commit_all` waits for another process's `index.lock` (default 2 s).
    pub fn set_lock_wait(&mut self, wait: Duration) {
        self.lock_wait = wait;
    }

    /// Path of the index lock file.
    pub fn index_lock_path(&self) -> PathBuf {
        self.repo.path().join("index.lock")
    }

    /// Refuse when an operation is in progress or the index has conflicts, and wait up to
    /// `lock_wait` for someone else's `index.lock` to go away (it is never deleted).
    pub fn check_ready(&self, lock_wait: Duration) -> Result<(), GitError> {
        self.check_refusals()?;
        self.wait_for_lock(lock_wait)
    }

    /// Refuse during an operation in progress or with conflicts in the index on disk.
    fn check_refusals(&self) -> Result<(), GitError> {
        self.check_state()?;
        let on_disk = Index::open(&self.repo.path().join("index"))?;
        if on_disk.has_conflicts() {
            return Err(GitError::Conflicts);
        }
        Ok(())
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

    /// HEAD's commit, or `None` on an unborn branch.
    pub fn head(&self) -> Result<Option<CommitInfo>, GitError> {
        Ok(self.head_commit()?.map(|c| commit_info(&c)))
    }

    fn head_commit(&self) -> Result<Option<git2::Commit<'_>>, GitError> {
        head_commit_of(&self.repo)
    }

    /// What [`Repo::stage_all`] would stage, without walking the work tree, when the tree is
    /// known clean: HEAD's tree — provided untracked files are shown by `git status` (else a
    /// clean status says nothing about them). `None` when that cannot be vouched for.
    pub fn clean_tree(&self) -> Result<Option<Oid>, GitError> {
        if untracked_mode(&self.repo.config()?) == Untracked::No {
            return Ok(None);
        }
        Ok(self.head_commit()?.map(|c| c.tree_id()))
    }

    /// Bytes `git status --porcelain` (v1) would print, run from anywhere in the work tree.
    ///
    /// Reflects the index on disk, even while `stage_all` holds unwritten changes.
    pub fn porcelain(&self) -> Result<Vec<u8>, GitError> {
        if self.index_dirty {
            let fresh = Repository::open(self.repo.path())?;
            porcelain_of(&fresh)
        } else {
            porcelain_of(&self.repo)
        }
    }

    /// `git status --porcelain | cksum` without its trailing newline, e.g. `4294967295 0`.
    pub fn fingerprint(&self) -> Result<String, GitError> {
        Ok(cksum(&self.porcelain()?))
    }

    /// True when `git status --porcelain` would print anything.
    pub fn is_dirty(&self) -> Result<bool, GitError> {
        Ok(!self.porcelain()?.is_empty())
    }

    /// Stage like `git add -A` into the in-memory index (not written to disk) and report what differs from HEAD.
    pub fn stage_all(&mut self) -> Result<Staged, GitError> {
        let mut index = self.repo.index()?;
        index.read(true)?;
        self.index_dirty = true;
        // libgit2 hands untracked nested repositories over as `dir/` entries it cannot
        // add ("invalid path"): skip them here and record them as gitlinks below.
        let mut skip_dirs = |path: &Path, _: &[u8]| -> i32 {
            i32::from(path.as_os_str().as_encoded_bytes().ends_with(b"/"))
        };
        index.add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip_dirs))?;
        // `git add -A` records nested repositories that have a commit as gitlinks.
        for nested in untracked_nested_repos(&self.repo)? {
            index.add_path(&nested)?;
        }
        let tree = index.write_tree()?;
        let changed = self.changed_paths(tree)?;
        Ok(Staged { tree, changed })
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

    /// Content of `path` (repo-relative) in HEAD's tree, None when absent or unborn.
    pub fn head_file(&self, path: &str) -> Result<Option<Vec<u8>>, GitError> {
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

    /// Stage like `git add -A`, and when the tree differs from HEAD's, write the index and commit with `message` on HEAD's branch (first commit on an unborn branch). Returns None when there was nothing to commit.
    ///
    /// Identity comes from `GIT_AUTHOR_*`/`GIT_COMMITTER_*`, else the configuration, else `ralph <ralph@localhost>`.
    pub fn commit_all(&mut self, message: &str) -> Result<Option<CommitOutcome>, GitError> {
        let config = self.repo.config()?;
        let identity = Identity::resolve(&config, &|var| std::env::var(var).ok());
        self.commit_all_as(message, &identity)
    }

    /// `commit_all` with an explicit identity.
    ///
    /// On failure the in-memory index is re-read from disk, so nothing half-staged lingers.
    pub fn commit_all_as(
        &mut self,
        message: &str,
        identity: &Identity,
    ) -> Result<Option<CommitOutcome>, GitError> {
        self.check_refusals()?;
        let result = self.stage_and_commit(message, identity);
        if result.is_err() && self.index_dirty {
            // Best effort: the original error is the one worth reporting.
            let _ = self.reload_index();
        }
        result
    }

    fn stage_and_commit(
        &mut self,
        message: &str,
        identity: &Identity,
    ) -> Result<Option<CommitOutcome>, GitError> {
        let staged = self.stage_all()?;
        let parent = head_commit_of(&self.repo)?;
        let unchanged = match &parent {
            Some(c) => c.tree_id() == staged.tree,
            None => staged.changed.is_empty(),
        };
        if unchanged {
            drop(parent);
            self.reload_index()?;
            return Ok(None);
        }
        // Validate everything before touching the disk.
        let author = Signature::now(&identity.author_name, &identity.author_email)?;
        let committer = Signature::now(&identity.committer_name, &identity.committer_email)?;
        let mut message = message.to_string();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        let tree = self.repo.find_tree(staged.tree)?;

        let mut index = self.repo.index()?;
        write_index(&mut index, &self.index_lock_path(), self.lock_wait)?;
        self.index_dirty = false;

        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(Some("HEAD"), &author, &committer, &message, &tree, &parents)?;
        let commit = self.repo.find_commit(oid)?;
        Ok(Some(CommitOutcome {
            commit: commit_info(&commit),
            used_fallback_identity: identity.used_fallback,
        }))
    }

    /// `commit_all` with the commit guard and the hooks (SPEC §8): `exclude` names the paths
    /// not yet tracked that must stay out of the commit (and why); `hooks`, when given, runs
    /// before the commit with the index written, and may rewrite the message or refuse.
    pub fn commit_with(
        &mut self,
        message: &str,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        hooks: Option<&HookRunner>,
    ) -> Result<CommitReport, GitError> {
        self.commit_guarded(message, None, exclude, hooks)
    }

    /// `commit_with` on the index [`Repo::stage_all`] just staged (no second walk of the work
    /// tree), after re-staging the `also` paths the caller wrote since.
    pub fn commit_staged_with(
        &mut self,
        message: &str,
        also: &[&str],
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        hooks: Option<&HookRunner>,
    ) -> Result<CommitReport, GitError> {
        self.commit_guarded(message, Some(also), exclude, hooks)
    }

    fn commit_guarded(
        &mut self,
        message: &str,
        staged_plus: Option<&[&str]>,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        hooks: Option<&HookRunner>,
    ) -> Result<CommitReport, GitError> {
        self.check_refusals()?;
        let config = self.repo.config()?;
        let identity = Identity::resolve(&config, &|var| std::env::var(var).ok());
        let result = self.guarded_commit(message, &identity, staged_plus, exclude, hooks);
        if result.is_err() && self.index_dirty {
            let _ = self.reload_index();
        }
        result
    }

    fn guarded_commit(
        &mut self,
        message: &str,
        identity: &Identity,
        staged_plus: Option<&[&str]>,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        hooks: Option<&HookRunner>,
    ) -> Result<CommitReport, GitError> {
        let staged = match staged_plus {
            None => self.stage_all()?,
            Some(also) => {
                let mut index = self.repo.index()?;
                for p in also {
                    if self.root.join(p).exists() {
                        index.add_path(Path::new(p))?;
                    } else {
                        let _ = index.remove_path(Path::new(p));
                    }
                }
                self.index_dirty = true;
                let tree = index.write_tree()?;
                let changed = self.changed_paths(tree)?;
                Staged { tree, changed }
            }
        };
        let parent = head_commit_of(&self.repo)?;
        let head_tree = match &parent {
            Some(c) => Some(c.tree()?),
            None => None,
        };
        let mut index = self.repo.index()?;
        let mut left_out = Vec::new();
        for path in &staged.changed {
            let tracked = head_tree
                .as_ref()
                .is_some_and(|t| t.get_path(Path::new(path)).is_ok());
            if tracked || index.get_path(Path::new(path), 0).is_none() {
                continue;
            }
            if let Some(reason) = exclude(path, &self.root.join(path)) {
                index.remove_path(Path::new(path))?;
                left_out.push((path.clone(), reason));
            }
        }
        let tree_id = index.write_tree()?;
        let unchanged = match &head_tree {
            Some(t) => t.id() == tree_id,
            None => index.is_empty(),
        };
        if unchanged {
            drop(head_tree);
            drop(parent);
            drop(index);
            self.reload_index()?;
            return Ok(CommitReport {
                outcome: None,
                left_out,
                hook_failure: None,
            });
        }
        let author = Signature::now(&identity.author_name, &identity.author_email)?;
        let committer = Signature::now(&identity.committer_name, &identity.committer_email)?;
        let mut message = message.to_string();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        write_index(&mut index, &self.index_lock_path(), self.lock_wait)?;
        self.index_dirty = false;
        if let Some(run_hooks) = hooks {
            match run_hooks(&self.root, &message) {
                Ok(m) => message = m,
                Err(failure) => {
                    // Like git: the changes stay staged, nothing is committed.
                    return Ok(CommitReport {
                        outcome: None,
                        left_out,
                        hook_failure: Some(failure),
                    });
                }
            }
        }
        // A hook may have staged more (a formatter, say): commit the index as it is now.
        let mut index = self.repo.index()?;
        index.read(true)?;
        let tree = self.repo.find_tree(index.write_tree()?)?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(Some("HEAD"), &author, &committer, &message, &tree, &parents)?;
        let commit = self.repo.find_commit(oid)?;
        Ok(CommitReport {
            outcome: Some(CommitOutcome {
                commit: commit_info(&commit),
                used_fallback_identity: identity.used_fallback,
            }),
            left_out,
            hook_failure: None,
        })
    }

    /// Drop in-memory index changes (re-read the index from disk).
    pub fn reload_index(&mut self) -> Result<(), GitError> {
        self.repo.index()?.read(true)?;
        self.index_dirty = false;
        Ok(())
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

fn write_index(index: &mut Index, lock: &Path, wait: Duration) -> Result<(), GitError> {
    let deadline = Instant::now() + wait;
    loop {
        match index.write() {
            Ok(()) => return Ok(()),
            Err(e) if e.code() == ErrorCode::Locked || lock.exists() => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(GitError::IndexLocked(lock.to_path_buf()));
                }
                thread::sleep(LOCK_POLL.min(deadline - now));
            }
            Err(e) => return Err(GitError::Git(e)),
        }
    }
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

fn config_string(config: &Config, key: &str) -> Option<String> {
    config
        .get_string(key)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Git's boolean spelling: `None` when the value is not a boolean.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "false" | "no" | "off" | "0" => Some(false),
        "true" | "yes" | "on" | "1" => Some(true),
        _ => None,
    }
}

fn untracked_mode(config: &Config) -> Untracked {
    match config.get_string("status.showUntrackedFiles") {
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "no" => Untracked::No,
            "all" => Untracked::All,
            "normal" => Untracked::Normal,
            other => match parse_bool(other) {
                Some(false) => Untracked::No,
                _ => Untracked::Normal,
            },
        },
        Err(_) => Untracked::Normal,
    }
}

fn renames_enabled(config: &Config) -> bool {
    for key in ["status.renames", "diff.renames"] {
        if let Ok(v) = config.get_string(key) {
            return parse_bool(&v).unwrap_or(true); // "copies"/"copy" also detect renames
        }
    }
    true
}

fn quote_path_fully(config: &Config) -> bool {
    match config.get_string("core.quotePath") {
        Ok(v) => parse_bool(&v).unwrap_or(true),
        Err(_) => true,
    }
}

fn porcelain_of(repo: &Repository) -> Result<Vec<u8>, GitError> {
    let config = repo.config()?.snapshot()?;
    let untracked = untracked_mode(&config);
    let quote_high = quote_path_fully(&config);

    let mut opts = StatusOptions::new();
    // libgit2 reports nested repositories (which git lists as untracked) as ignored
    // directories, so ignored entries are asked for and sorted out below.
    opts.include_untracked(untracked != Untracked::No)
        .recurse_untracked_dirs(untracked == Untracked::All)
        .include_ignored(untracked != Untracked::No)
        .recurse_ignored_dirs(false)
        .include_unmodified(false)
        .exclude_submodules(false)
        .renames_head_to_index(renames_enabled(&config))
        .renames_index_to_workdir(false);
    let statuses = repo.statuses(Some(&mut opts))?;

    let mut conflicts: Option<HashMap<Vec<u8>, u8>> = None;
    let mut changes: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut others: Vec<Vec<u8>> = Vec::new();

    for entry in statuses.iter() {
        let s = entry.status();
        if s.contains(Status::IGNORED) {
            let path = entry.path_bytes();
            let deep = untracked == Untracked::Normal;
            if is_untracked_nested_repo_dir(repo, path, deep)? {
                others.push(path.to_vec());
            }
            let index_bits = Status::INDEX_NEW
                | Status::INDEX_MODIFIED
                | Status::INDEX_DELETED
                | Status::INDEX_RENAMED
                | Status::INDEX_TYPECHANGE;
            if !s.intersects(index_bits) {
                continue;
            }
        }
        if s.contains(Status::CONFLICTED) {
            if conflicts.is_none() {
                conflicts = Some(conflict_masks(repo)?);
            }
            let path = entry.path_bytes().to_vec();
            let mask = conflicts
                .as_ref()
                .and_then(|m| m.get(&path).copied())
                .unwrap_or(7);
            let mut line = conflict_xy(mask).as_bytes().to_vec();
            line.push(b' ');
            line.extend(quote_path(&path, quote_high));
            changes.push((path, line));
            continue;
        }
        if s.contains(Status::INDEX_NEW) && is_intent_to_add(repo, entry.path_bytes())? {
            // `git add -N`: git shows " A" (or " D" once the file is gone).
            let y = if s.contains(Status::WT_DELETED) {
                b'D'
            } else {
                b'A'
            };
            let path = entry.path_bytes().to_vec();
            let mut line = vec![b' ', y, b' '];
            line.extend(quote_path(&path, quote_high));
            changes.push((path, line));
            continue;
        }
        let x = if s.contains(Status::INDEX_NEW) {
            b'A'
        } else if s.contains(Status::INDEX_DELETED) {
            b'D'
        } else if s.contains(Status::INDEX_RENAMED) {
            b'R'
        } else if s.contains(Status::INDEX_TYPECHANGE) {
            b'T'
        } else if s.contains(Status::INDEX_MODIFIED) {
            b'M'
        } else {
            b' '
        };
        let y = if s.contains(Status::WT_DELETED) {
            b'D'
        } else if s.contains(Status::WT_TYPECHANGE) {
            b'T'
        } else if s.contains(Status::WT_MODIFIED) {
            b'M'
        } else if s.contains(Status::WT_RENAMED) {
            b'R'
        } else {
            b' '
        };
        if x != b' ' || y != b' ' {
            let renamed = if x == b'R' {
                entry.head_to_index().and_then(|d| {
                    let old = d.old_file().path_bytes()?.to_vec();
                    let new = d.new_file().path_bytes()?.to_vec();
                    Some((old, new))
                })
            } else {
                None
            };
            let mut line = vec![x, y, b' '];
            let key = match renamed {
                Some((old, new)) => {
                    line.extend(quote_path(&old, quote_high));
                    line.extend_from_slice(b" -> ");
                    line.extend(quote_path(&new, quote_high));
                    new
                }
                None => {
                    let path = entry.path_bytes().to_vec();
                    line.extend(quote_path(&path, quote_high));
                    path
                }
            };
            changes.push((key, line));
        }
        if s.contains(Status::WT_NEW) {
            others.push(entry.path_bytes().to_vec());
        }
    }

    if untracked == Untracked::Normal && others.iter().any(|p| p.ends_with(b"/")) {
        // git does not list an untracked directory that replaced a file still in the index.
        let index = repo.index()?;
        others.retain(|p| match p.strip_suffix(b"/") {
            Some(dir) => index.get_path(&bytes_to_path(dir), 0).is_none(),
            None => true,
        });
    }
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    others.sort();
    others.dedup();
    let mut out = Vec::new();
    for (_, line) in changes {
        out.extend(line);
        out.push(b'\n');
    }
    for path in others {
        out.extend_from_slice(b"?? ");
        out.extend(quote_path(&path, quote_high));
        out.push(b'\n');
    }
    Ok(out)
}

fn bytes_to_path(bytes: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}

fn is_intent_to_add(repo: &Repository, path: &[u8]) -> Result<bool, GitError> {
    let index = repo.index()?;
    Ok(index.get_path(&bytes_to_path(path), 0).is_some_and(|e| {
        git2::IndexEntryExtendedFlag::from_bits_truncate(e.flags_extended).is_intent_to_add()
    }))
}

/// Whether a directory libgit2 reported as ignored is one git lists as untracked: not
/// ignored by any rule, and a nested repository itself or (when `deep`, for git's
/// collapsed `dir/` listing) holding one among its otherwise ignored contents.
fn is_untracked_nested_repo_dir(
    repo: &Repository,
    rel: &[u8],
    deep: bool,
) -> Result<bool, GitError> {
    let Some(dir) = rel.strip_suffix(b"/") else {
        return Ok(false);
    };
    let Some(workdir) = repo.workdir() else {
        return Ok(false);
    };
    let rel_path = bytes_to_path(dir);
    if repo.is_path_ignored(&rel_path)? {
        return Ok(false);
    }
    let full = workdir.join(&rel_path);
    if full.join(".git").exists() {
        return Ok(true);
    }
    Ok(deep && holds_unignored_repo(repo, &full, &rel_path, 0)?)
}

const MAX_NESTED_REPO_DEPTH: usize = 32;

fn holds_unignored_repo(
    repo: &Repository,
    full: &Path,
    rel: &Path,
    depth: usize,
) -> Result<bool, GitError> {
    if depth >= MAX_NESTED_REPO_DEPTH {
        return Ok(false);
    }
    let Ok(entries) = std::fs::read_dir(full) else {
        return Ok(false);
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let child_rel = rel.join(entry.file_name());
        if repo.is_path_ignored(&child_rel)? {
            continue;
        }
        let child_full = entry.path();
        if child_full.join(".git").exists()
            || holds_unignored_repo(repo, &child_full, &child_rel, depth + 1)?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Nested repositories with a checked-out commit that git would list as untracked,
/// each as a repo-relative path without trailing slash. (libgit2 reports them as ignored
/// directories, or as untracked `dir/` entries when they hold files.)
fn untracked_nested_repos(repo: &Repository) -> Result<Vec<PathBuf>, GitError> {
    let mut opts = StatusOptions::new();
    opts.show(git2::StatusShow::Workdir)
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(true)
        .recurse_ignored_dirs(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut opts))?;
    let mut found = Vec::new();
    let Some(workdir) = repo.workdir() else {
        return Ok(found);
    };
    for entry in statuses.iter() {
        if !entry.status().intersects(Status::IGNORED | Status::WT_NEW) {
            continue;
        }
        let path = entry.path_bytes();
        if !is_untracked_nested_repo_dir(repo, path, false)? {
            continue;
        }
        let rel = bytes_to_path(path.strip_suffix(b"/").unwrap_or(path));
        let has_commit = Repository::open(workdir.join(&rel))
            .ok()
            .is_some_and(|nested| nested.head().and_then(|h| h.peel_to_commit()).is_ok());
        if has_commit {
            found.push(rel);
        }
    }
    Ok(found)
}

/// Stage mask per conflicted path: 1 = ancestor, 2 = ours, 4 = theirs.
fn conflict_masks(repo: &Repository) -> Result<HashMap<Vec<u8>, u8>, GitError> {
    let index = repo.index()?;
    let mut masks = HashMap::new();
    for conflict in index.conflicts()? {
        let conflict = conflict?;
        for (entry, bit) in [
            (conflict.ancestor, 1u8),
            (conflict.our, 2),
            (conflict.their, 4),
        ] {
            if let Some(e) = entry {
                *masks.entry(e.path).or_insert(0) |= bit;
            }
        }
    }
    Ok(masks)
}

/// git's short-status letters for an unmerged path (wt-status.c).
fn conflict_xy(mask: u8) -> &'static str {
    match mask {
        1 => "DD",
        2 => "AU",
        3 => "UD",
        4 => "UA",
        5 => "DU",
        6 => "AA",
        _ => "UU",
    }
}

/// Quote a path as git's short status does (`quote_path` with `QUOTE_PATH_QUOTE_SP`):
/// C-style escapes inside double quotes when the path holds a control character, `"`, `\`,
/// DEL, a byte >= 0x80 (when `core.quotePath` is true), or a space.
pub fn quote_path(path: &[u8], quote_high: bool) -> Vec<u8> {
    let must_escape =
        |c: u8| c < 0x20 || c == b'"' || c == b'\\' || c == 0x7f || (c >= 0x80 && quote_high);
    if !path.iter().any(|&c| must_escape(c) || c == b' ') {
        return path.to_vec();
    }
    let mut out = Vec::with_capacity(path.len() + 8);
    out.push(b'"');
    for &c in path {
        if !must_escape(c) {
            out.push(c);
            continue;
        }
        let short = match c {
            0x07 => Some(b'a'),
            0x08 => Some(b'b'),
            0x09 => Some(b't'),
            0x0a => Some(b'n'),
            0x0b => Some(b'v'),
            0x0c => Some(b'f'),
            0x0d => Some(b'r'),
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            _ => None,
        };
        out.push(b'\\');
        match short {
            Some(s) => out.push(s),
            None => {
                out.push(b'0' + (c >> 6));
                out.push(b'0' + ((c >> 3) & 7));
                out.push(b'0' + (c & 7));
            }
        }
    }
    out.push(b'"');
    out
}

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC_TABLE: [u32; 256] = crc_table();

fn crc_update(crc: u32, byte: u8) -> u32 {
    (crc << 8) ^ CRC_TABLE[(((crc >> 24) as u8) ^ byte) as usize]
}

/// What POSIX `cksum` prints for `bytes`, without the trailing newline: `"{crc} {len}"`.
pub fn cksum(bytes: &[u8]) -> String {
    let mut crc = bytes.iter().fold(0u32, |crc, &b| crc_update(crc, b));
    let mut len = bytes.len() as u64;
    while len != 0 {
        crc = crc_update(crc, (len & 0xff) as u8);
        len >>= 8;
    }
    format!("{} {}", !crc, bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};
    use tempfile::TempDir;

    /// A `git` command isolated from the user's and system's configuration.
    fn git_cmd(dir: &Path) -> Command {
        let mut cmd = Command::new("git");
        cmd.current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C");
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME",
            "GIT_COMMITTER_EMAIL",
            "GIT_EDITOR",
            "GIT_SEQUENCE_EDITOR",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = git_cmd(dir).args(args).output().expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run `git` and return its raw stdout, whatever the exit status.
    fn git_any(dir: &Path, args: &[&str]) -> std::process::Output {
        git_cmd(dir).args(args).output().expect("run git")
    }

    /// Run a shell script in `dir` with the same isolation as `git_cmd`.
    fn sh(dir: &Path, script: &str) -> Vec<u8> {
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(script).current_dir(dir);
        for (k, v) in git_cmd(dir).get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        let out = sh.output().expect("run sh");
        assert!(
            out.status.success(),
            "sh {script:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// An empty repository on branch `main` with a local identity.
    fn empty_repo() -> TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        git(dir.path(), &["init", "-q", "-b", "main"]);
        git(dir.path(), &["config", "user.name", "Config Person"]);
        git(dir.path(), &["config", "user.email", "config@example.com"]);
        dir
    }

    /// A repository with one commit holding `a.txt`, `dir/b.txt` and `z.txt`.
    fn repo_with_commit() -> TempDir {
        let dir = empty_repo();
        sh(
            dir.path(),
            "mkdir dir && printf 'alpha\\n' > a.txt && printf 'beta\\n' > dir/b.txt && \
             printf 'zeta\\n' > z.txt && git add -A && git commit -q -m initial",
        );
        dir
    }

    fn open(dir: &Path) -> Repo {
        Repo::discover(dir).expect("discover")
    }

    fn git_porcelain(dir: &Path) -> Vec<u8> {
        sh(dir, "git status --porcelain")
    }

    fn git_fingerprint(dir: &Path) -> String {
        let out = sh(dir, "git status --porcelain | cksum");
        String::from_utf8_lossy(&out).trim_end().to_string()
    }

    /// Our porcelain and fingerprint equal git's; returns the porcelain text.
    fn assert_like_git(dir: &Path) -> String {
        let repo = open(dir);
        let ours = repo.porcelain().expect("porcelain");
        let theirs = git_porcelain(dir);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "porcelain differs from git's"
        );
        assert_eq!(ours, theirs);
        assert_eq!(
            repo.fingerprint().expect("fingerprint"),
            git_fingerprint(dir)
        );
        assert_eq!(repo.is_dirty().expect("is_dirty"), !theirs.is_empty());
        String::from_utf8_lossy(&ours).into_owned()
    }

    fn scenario(script: &str) -> (TempDir, String) {
        let dir = repo_with_commit();
        sh(dir.path(), script);
        let text = assert_like_git(dir.path());
        (dir, text)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn local_identity(repo: &Repo, env: &dyn Fn(&str) -> Option<String>) -> Identity {
        let config = repo
            .git2()
            .config()
            .and_then(|c| c.open_level(git2::ConfigLevel::Local))
            .expect("local config");
        Identity::resolve(&config, env)
    }

    fn head_id(dir: &Path) -> String {
        git(dir, &["rev-parse", "HEAD"]).trim().to_string()
    }

    // ---- cksum ----

    #[test]
    fn cksum_matches_posix_cksum() {
        assert_eq!(cksum(b""), "4294967295 0");
        let mut big = Vec::new();
        for i in 0..70_000u32 {
            big.push((i % 251) as u8);
        }
        for input in [&b""[..], b"abc", b"hello\n", b"?? a\n M b\n", &big] {
            let mut child = Command::new("cksum")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("run cksum");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input)
                .expect("write");
            let out = child.wait_with_output().expect("cksum output");
            let expected = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
            assert_eq!(cksum(input), expected, "input of {} bytes", input.len());
        }
        assert_eq!(cksum(b"abc"), "1219131554 3");
    }

    // ---- porcelain / fingerprint ----

    #[test]
    fn fingerprint_clean() {
        let dir = repo_with_commit();
        let text = assert_like_git(dir.path());
        assert_eq!(text, "");
        assert_eq!(open(dir.path()).fingerprint().unwrap(), "4294967295 0");
        assert!(!open(dir.path()).is_dirty().unwrap());
    }

    #[test]
    fn fingerprint_modified_staged_and_both() {
        let (_d, text) = scenario("echo x >> a.txt");
        assert_eq!(text, " M a.txt\n");
        let (_d, text) = scenario("echo x >> a.txt && git add a.txt");
        assert_eq!(text, "M  a.txt\n");
        let (_d, text) = scenario("echo x >> a.txt && git add a.txt && echo y >> a.txt");
        assert_eq!(text, "MM a.txt\n");
        let (_d, text) = scenario("echo new > n && git add n && echo more >> n");
        assert_eq!(text, "AM n\n");
        let (_d, text) = scenario("echo new > n && git add n && rm n");
        assert_eq!(text, "AD n\n");
    }

    #[test]
    fn fingerprint_deleted() {
        let (_d, text) = scenario("rm a.txt");
        assert_eq!(text, " D a.txt\n");
        let (_d, text) = scenario("git rm -q z.txt");
        assert_eq!(text, "D  z.txt\n");
        let (_d, text) = scenario("git rm -q --cached a.txt");
        assert_eq!(text, "D  a.txt\n?? a.txt\n");
        let (_d, text) = scenario("git rm -q --cached a.txt && echo a.txt >> .git/info/exclude");
        assert_eq!(text, "D  a.txt\n");
    }

    #[test]
    fn fingerprint_untracked() {
        let (_d, text) = scenario("echo u > untracked.txt");
        assert_eq!(text, "?? untracked.txt\n");
        let (_d, text) = scenario("mkdir -p new/deeper && touch new/x new/deeper/y");
        assert_eq!(text, "?? new/\n");
        let (_d, text) = scenario("mkdir -p dir/sub/deep && touch dir/sub/deep/f dir/c");
        assert_eq!(text, "?? dir/c\n?? dir/sub/\n");
        // A directory replacing a file that is still in the index is not listed...
        let (_d, text) = scenario("rm a.txt && mkdir -p a.txt/s && touch a.txt/in a.txt/s/x");
        assert_eq!(text, " D a.txt\n");
        // ...except file by file with -uall, or once the file has left the index.
        let (_d, text) = scenario(
            "git config status.showUntrackedFiles all && rm a.txt && mkdir a.txt && touch a.txt/in",
        );
        assert_eq!(text, " D a.txt\n?? a.txt/in\n");
        let (_d, text) =
            scenario("git rm -q --cached a.txt && rm a.txt && mkdir a.txt && touch a.txt/in");
        assert_eq!(text, "D  a.txt\n?? a.txt/\n");
        // Empty directories are not shown.
        let (_d, text) = scenario("mkdir -p empty/inner");
        assert_eq!(text, "");
    }

    #[test]
    fn fingerprint_sorts_like_git() {
        let (_d, text) = scenario(
            "mkdir a && touch a/f a-b a.b a0 B && echo x >> z.txt && echo x >> a.txt && \
             git add a.txt && printf 'q' > dir/b.txt",
        );
        assert_eq!(
            text,
            "M  a.txt\n M dir/b.txt\n M z.txt\n?? B\n?? a-b\n?? a.b\n?? a/\n?? a0\n"
        );
    }

    #[test]
    fn fingerprint_ignored() {
        let (_d, text) = scenario(
            "printf '*.log\\nbuild/\\n' > .gitignore && touch x.log && mkdir build && \
             touch build/out && mkdir only-ignored && touch only-ignored/y.log && \
             printf 'secret\\n' >> .git/info/exclude && touch secret && \
             printf 'local.txt\\n' > dir/.gitignore && touch dir/local.txt dir/kept.txt",
        );
        assert_eq!(text, "?? .gitignore\n?? dir/.gitignore\n?? dir/kept.txt\n");
    }

    #[test]
    fn fingerprint_staged_rename() {
        let (_d, text) = scenario("git mv a.txt c.txt");
        assert_eq!(text, "R  a.txt -> c.txt\n");
        let (_d, text) = scenario("git mv z.txt dir/moved.txt && echo tail >> dir/moved.txt");
        assert_eq!(text, "RM z.txt -> dir/moved.txt\n");
        let (_d, text) = scenario("git config status.renames false && git mv a.txt c.txt");
        assert_eq!(text, "D  a.txt\nA  c.txt\n");
    }

    #[test]
    fn fingerprint_quoting() {
        let (_d, text) = scenario("touch 'with space.txt'");
        assert_eq!(text, "?? \"with space.txt\"\n");
        let (_d, text) = scenario("git mv a.txt 'a b.txt'");
        assert_eq!(text, "R  a.txt -> \"a b.txt\"\n");
        let (_d, text) =
            scenario("touch 'caf\u{e9}.txt' && mkdir '\u{fc}ber' && touch '\u{fc}ber/f'");
        assert_eq!(text, "?? \"caf\\303\\251.txt\"\n?? \"\\303\\274ber/\"\n");
        let (_d, text) = scenario("touch 'tab\tx' 'q\"x' 'back\\s' \"$(printf 'bell\\a')\"");
        assert!(text.contains("\"tab\\tx\""), "{text}");
        let (_d, text) = scenario("git config core.quotePath false && touch 'caf\u{e9} x.txt'");
        assert_eq!(text, "?? \"caf\u{e9} x.txt\"\n");
    }

    #[test]
    fn fingerprint_show_untracked_config() {
        let (_d, text) = scenario(
            "git config status.showUntrackedFiles no && mkdir n && touch n/x u && echo x >> a.txt",
        );
        assert_eq!(text, " M a.txt\n");
        let (_d, text) =
            scenario("git config status.showUntrackedFiles all && mkdir -p n/m && touch n/m/x u");
        assert_eq!(text, "?? n/m/x\n?? u\n");
    }

    #[test]
    fn fingerprint_typechange_and_subdir_discovery() {
        let (dir, text) = scenario("rm z.txt && ln -s a.txt z.txt && touch dir/new");
        assert_eq!(text, " T z.txt\n?? dir/new\n");
        // Discovered from a subdirectory, paths stay relative to the root.
        let sub = dir.path().join("dir");
        let repo = open(&sub);
        assert_eq!(
            repo.root().canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
        assert_eq!(repo.porcelain().unwrap(), git_porcelain(&sub));
    }

    const NESTED_REPOS: &str = "mkdir -p nested a/n2 dir/n3 e && \
        (cd nested && git init -q && git -c user.name=n -c user.email=n@n commit -q --allow-empty -m x) && \
        git init -q a/n2 && git init -q dir/n3 && git init -q e && touch a/x.log e/f && \
        mkdir -p ign/n4 && git init -q ign/n4 && printf '*.log\\nign/\\n' > .gitignore";

    #[test]
    fn fingerprint_nested_repositories() {
        let (_d, text) = scenario(NESTED_REPOS);
        assert_eq!(
            text,
            "?? .gitignore\n?? a/\n?? dir/n3/\n?? e/\n?? nested/\n"
        );
        let (_d, text) = scenario(&format!(
            "{NESTED_REPOS} && git config status.showUntrackedFiles all"
        ));
        assert_eq!(
            text,
            "?? .gitignore\n?? a/n2/\n?? dir/n3/\n?? e/\n?? nested/\n"
        );
    }

    #[test]
    fn fingerprint_intent_to_add() {
        let (_d, text) = scenario("echo n > ita && git add -N ita");
        assert_eq!(text, " A ita\n");
        let (_d, text) = scenario("echo n > ita && git add -N ita && rm ita");
        assert_eq!(text, " D ita\n");
    }

    #[test]
    fn fingerprint_conflict_kinds() {
        let dir = diverged_repo();
        let p = dir.path();
        sh(
            p,
            "git checkout -q side && git rm -q z.txt && echo s > both && git add both && \
             git commit -q -m more && git checkout -q main && echo zz >> z.txt && \
             echo m > both && git add both && git commit -q -am more",
        );
        assert!(!git_any(p, &["merge", "-q", "side"]).status.success());
        assert_eq!(assert_like_git(p), "UU a.txt\nAA both\nUD z.txt\n");
    }

    #[test]
    fn submodule_changes_like_git() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("main");
        sh(
            dir.path(),
            "git init -q up && cd up && echo u > u && git add u && \
             git -c user.name=n -c user.email=n@n commit -q -m u && cd .. && \
             git init -q -b main main && cd main && git config user.name c && \
             git config user.email c@c && \
             git -c protocol.file.allow=always submodule add -q ../up sm 2>/dev/null && \
             git commit -q -m sm && cd sm && echo x >> u && \
             git -c user.name=n -c user.email=n@n commit -qam x",
        );
        assert_eq!(assert_like_git(&p), " M sm\n");
        let mut repo = open(&p);
        assert_eq!(repo.stage_all().unwrap().changed, ["sm"]);
        assert!(repo.commit_all("bump sm").unwrap().is_some());
        assert_eq!(assert_like_git(&p), "");
        sh(&p, "touch sm/untracked");
        assert_eq!(assert_like_git(&p), " M sm\n");
        assert!(repo.commit_all("nothing to record").unwrap().is_none());
    }

    // ---- stage_all / commit_all ----

    #[test]
    fn commit_all_records_nested_repositories_like_git_add() {
        let dir = repo_with_commit();
        let p = dir.path();
        sh(p, NESTED_REPOS);
        sh(
            p,
            "git clone -q nested with-files && cd with-files && echo f > f && git add f && \
             git -c user.name=n -c user.email=n@n commit -q -m f",
        );
        let mut repo = open(p);
        let staged = repo.stage_all().unwrap();
        assert_eq!(staged.changed, [".gitignore", "nested", "with-files"]);
        repo.commit_all("nested").unwrap().expect("commit");
        let stage = git(p, &["ls-files", "-s", "nested"]);
        assert!(stage.starts_with("160000 "), "{stage}");
        // Repositories without a commit cannot be recorded (git add -A fails on them).
        assert_eq!(assert_like_git(p), "?? a/\n?? dir/n3/\n?? e/\n");
    }

    #[test]
    fn commit_all_adds_modifies_deletes_and_honours_ignores() {
        let dir = repo_with_commit();
        let p = dir.path();
        sh(
            p,
            "printf '*.log\\n' > .gitignore && echo keep > new.txt && echo skip > x.log && \
             mkdir -p deep/er && echo d > deep/er/f && echo changed > a.txt && rm dir/b.txt && \
             printf 'tmp/\\n' > deep/.gitignore && mkdir deep/tmp && touch deep/tmp/t",
        );
        let mut repo = open(p);
        let staged = repo.stage_all().unwrap();
        assert_eq!(
            staged.changed,
            [
                ".gitignore",
                "a.txt",
                "deep/.gitignore",
                "deep/er/f",
                "dir/b.txt",
                "new.txt"
            ]
        );
        // Nothing was written: git still sees the work tree unstaged.
        assert_eq!(repo.porcelain().unwrap(), git_porcelain(p));
        assert!(String::from_utf8_lossy(&git_porcelain(p)).contains("?? new.txt"));

        let message = "ralph: iteration 3\n\nRalph-Iteration: 3\nRalph-Task: demo";
        let outcome = repo.commit_all(message).unwrap().expect("a commit");
        assert_eq!(outcome.commit.summary, "ralph: iteration 3");
        assert_eq!(outcome.commit.id, head_id(p));
        assert_eq!(outcome.commit.short, &outcome.commit.id[..7]);
        assert_eq!(repo.head().unwrap(), Some(outcome.commit.clone()));
        assert_eq!(git_porcelain(p), b"");
        assert_eq!(repo.fingerprint().unwrap(), "4294967295 0");
        assert_eq!(
            git(p, &["log", "-1", "--format=%B"]),
            format!("{message}\n\n")
        );
        assert_eq!(git(p, &["rev-list", "--count", "HEAD"]).trim(), "2");
        let files = git(p, &["ls-files"]);
        assert!(
            !files.contains("x.log") && !files.contains("deep/tmp"),
            "{files}"
        );
        assert!(!files.contains("dir/b.txt"), "{files}");
        let ignored = git(p, &["status", "--porcelain", "--ignored"]);
        assert!(ignored.contains("!! x.log"), "{ignored}");
        assert_eq!(git(p, &["fsck", "--no-progress"]), "");
    }

    #[test]
    fn tracked_ignored_file_is_still_committed() {
        let dir = repo_with_commit();
        let p = dir.path();
        sh(
            p,
            "printf 'a.txt\\n' > .git/info/exclude && echo more >> a.txt",
        );
        let mut repo = open(p);
        let outcome = repo.commit_all("update").unwrap();
        assert!(outcome.is_some());
        assert_eq!(git_porcelain(p), b"");
        assert_eq!(
            repo.head_file("a.txt").unwrap().as_deref(),
            Some(&b"alpha\nmore\n"[..])
        );
    }

    #[test]
    fn nothing_to_commit_leaves_head_alone() {
        let dir = repo_with_commit();
        let p = dir.path();
        let before = head_id(p);
        let mut repo = open(p);
        assert_eq!(repo.stage_all().unwrap().changed, Vec::<String>::new());
        assert!(repo.commit_all("nothing").unwrap().is_none());
        // Ignored-only and touched-but-identical changes commit nothing either.
        sh(
            p,
            "printf 'alpha\\n' > a.txt && echo '*.tmp' >> .git/info/exclude && touch x.tmp",
        );
        assert!(repo.commit_all("nothing").unwrap().is_none());
        assert_eq!(head_id(p), before);
        assert_eq!(git_porcelain(p), b"");
    }

    #[test]
    fn first_commit_on_unborn_branch() {
        let dir = empty_repo();
        let p = dir.path();
        let mut repo = open(p);
        assert_eq!(repo.head().unwrap(), None);
        assert_eq!(repo.head_file("f").unwrap(), None);
        assert!(repo.commit_all("empty").unwrap().is_none());
        sh(
            p,
            "echo one > f && mkdir d && echo two > d/g && touch 'sp ace'",
        );
        assert_like_git(p);
        let staged = repo.stage_all().unwrap();
        assert_eq!(staged.changed, ["d/g", "f", "sp ace"]);
        repo.reload_index().unwrap();
        let outcome = repo.commit_all("first").unwrap().expect("commit");
        assert_eq!(git(p, &["rev-list", "--count", "HEAD"]).trim(), "1");
        assert_eq!(
            git(p, &["rev-list", "--parents", "-n1", "HEAD"]).trim(),
            outcome.commit.id
        );
        assert_eq!(git(p, &["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
        assert_eq!(git_porcelain(p), b"");
        assert_eq!(
            repo.head_file("d/g").unwrap().as_deref(),
            Some(&b"two\n"[..])
        );
    }

    #[test]
    fn reload_index_drops_staged_changes() {
        let dir = repo_with_commit();
        let p = dir.path();
        sh(p, "echo n > n.txt");
        let mut repo = open(p);
        assert_eq!(repo.stage_all().unwrap().changed, ["n.txt"]);
        repo.reload_index().unwrap();
        assert!(
            repo.repo
                .index()
                .unwrap()
                .get_path(Path::new("n.txt"), 0)
                .is_none()
        );
        assert_like_git(p);
        assert!(!p.join(".git/index.lock").exists());
    }

    #[test]
    fn identity_from_env_config_and_fallback() {
        let dir = repo_with_commit();
        let p = dir.path();
        let mut repo = open(p);

        let env = |var: &str| match var {
            "GIT_AUTHOR_NAME" => Some("Env Author".to_string()),
            "GIT_AUTHOR_EMAIL" => Some("author@env".to_string()),
            "GIT_COMMITTER_NAME" => Some("Env Committer".to_string()),
            "GIT_COMMITTER_EMAIL" => Some("committer@env".to_string()),
            _ => None,
        };
        let ident = local_identity(&repo, &env);
        sh(p, "echo 1 >> a.txt");
        let out = repo.commit_all_as("env", &ident).unwrap().unwrap();
        assert!(!out.used_fallback_identity);
        assert_eq!(
            git(p, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
            "Env Author <author@env>|Env Committer <committer@env>"
        );

        let ident = local_identity(&repo, &no_env);
        sh(p, "echo 2 >> a.txt");
        let out = repo.commit_all_as("config", &ident).unwrap().unwrap();
        assert!(!out.used_fallback_identity);
        assert_eq!(
            git(p, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
            "Config Person <config@example.com>|Config Person <config@example.com>"
        );

        git(p, &["config", "--unset", "user.name"]);
        git(p, &["config", "--unset", "user.email"]);
        let ident = local_identity(&repo, &no_env);
        assert!(ident.used_fallback);
        sh(p, "echo 3 >> a.txt");
        let out = repo.commit_all_as("fallback", &ident).unwrap().unwrap();
        assert!(out.used_fallback_identity);
        assert_eq!(
            git(p, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
            "ralph <ralph@localhost>|ralph <ralph@localhost>"
        );
    }

    #[test]
    fn bad_identity_is_an_error_not_a_panic() {
        let dir = repo_with_commit();
        let p = dir.path();
        let mut repo = open(p);
        let env = |var: &str| (var == "GIT_AUTHOR_NAME").then(|| "Bad <name>".to_string());
        let ident = local_identity(&repo, &env);
        sh(p, "echo 1 >> a.txt");
        let before = head_id(p);
        assert!(matches!(
            repo.commit_all_as("x", &ident),
            Err(GitError::Git(_))
        ));
        assert_eq!(head_id(p), before);
        repo.reload_index().unwrap();
        assert_like_git(p);
    }

    // ---- refusals ----

    #[test]
    fn not_a_repository() {
        let dir = tempfile::tempdir().unwrap();
        let err = Repo::discover(dir.path()).unwrap_err();
        assert!(matches!(err, GitError::NotARepo));
        assert_eq!(err.to_string(), "Git required. Run git init first.");
        assert_eq!(err.to_string(), NOT_A_REPO_MESSAGE);
    }

    #[test]
    fn bare_repository_refused() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare", "b.git"]);
        let err = Repo::discover(&dir.path().join("b.git")).unwrap_err();
        assert!(matches!(err, GitError::Bare(_)), "{err}");
    }

    /// Branch `side` and `main` both change `a.txt`; HEAD is on `main`.
    fn diverged_repo() -> TempDir {
        let dir = repo_with_commit();
        sh(
            dir.path(),
            "git checkout -q -b side && echo side > a.txt && git commit -q -am side && \
             git checkout -q main && echo main > a.txt && git commit -q -am main",
        );
        dir
    }

    #[test]
    fn refuses_during_merge() {
        let dir = diverged_repo();
        let p = dir.path();
        assert!(!git_any(p, &["merge", "-q", "side"]).status.success());
        assert!(p.join(".git/MERGE_HEAD").exists());
        let text = assert_like_git(p);
        assert_eq!(text, "UU a.txt\n");
        let mut repo = open(p);
        let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
        assert!(err.to_string().contains("merge"), "{err}");
        let before = head_id(p);
        assert!(matches!(
            repo.commit_all("x"),
            Err(GitError::InProgress("merge"))
        ));
        assert_eq!(head_id(p), before);

        // Conflicts left behind without MERGE_HEAD are refused too.
        std::fs::remove_file(p.join(".git/MERGE_HEAD")).unwrap();
        let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
        assert!(matches!(err, GitError::Conflicts), "{err}");
        assert!(matches!(repo.commit_all("x"), Err(GitError::Conflicts)));
        assert_eq!(head_id(p), before);
    }

    #[test]
    fn refuses_during_rebase_and_other_operations() {
        let dir = diverged_repo();
        let p = dir.path();
        assert!(!git_any(p, &["rebase", "side"]).status.success());
        assert!(p.join(".git/rebase-merge").exists());
        let repo = open(p);
        let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
        assert!(err.to_string().contains("rebase"), "{err}");
        git(p, &["rebase", "--abort"]);
        repo.check_ready(Duration::from_millis(10)).unwrap();

        for (marker, is_dir, word) in [
            ("rebase-apply", true, "rebase"),
            ("CHERRY_PICK_HEAD", false, "cherry-pick"),
            ("REVERT_HEAD", false, "revert"),
            ("BISECT_LOG", false, "bisect"),
        ] {
            let path = p.join(".git").join(marker);
            if is_dir {
                std::fs::create_dir(&path).unwrap();
                std::fs::write(path.join("rebasing"), "").unwrap();
            } else {
                let head = head_id(p);
                std::fs::write(&path, format!("{head}\n")).unwrap();
            }
            let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
            assert!(err.to_string().contains(word), "{marker}: {err}");
            if is_dir {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
        repo.check_ready(Duration::from_millis(10)).unwrap();
    }

    #[test]
    fn index_lock_waited_for_then_reported() {
        let dir = repo_with_commit();
        let p = dir.path();
        let lock = p.join(".git/index.lock");
        std::fs::write(&lock, "").unwrap();
        let mut repo = open(p);
        let started = Instant::now();
        let err = repo.check_ready(Duration::from_millis(150)).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(matches!(err, GitError::IndexLocked(_)));
        assert!(err.to_string().contains("index.lock"), "{err}");
        assert!(lock.exists(), "the lock must never be deleted");

        sh(p, "echo x >> a.txt");
        repo.set_lock_wait(Duration::from_millis(100));
        let before = head_id(p);
        let err = repo.commit_all("locked").unwrap_err();
        assert!(matches!(err, GitError::IndexLocked(_)), "{err}");
        assert!(lock.exists());
        assert_eq!(head_id(p), before);

        // Released while waiting: both succeed.
        let remover = {
            let lock = lock.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(100));
                std::fs::remove_file(lock).unwrap();
            })
        };
        repo.check_ready(Duration::from_secs(3)).unwrap();
        remover.join().unwrap();
        std::fs::write(&lock, "").unwrap();
        let remover = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            std::fs::remove_file(lock).unwrap();
        });
        repo.set_lock_wait(Duration::from_secs(3));
        assert!(repo.commit_all("unlocked").unwrap().is_some());
        remover.join().unwrap();
        assert_eq!(git_porcelain(p), b"");
    }

    #[test]
    fn head_file_reads_head_tree() {
        let dir = repo_with_commit();
        let p = dir.path();
        sh(p, "echo changed > a.txt");
        let repo = open(p);
        assert_eq!(
            repo.head_file("a.txt").unwrap().as_deref(),
            Some(&b"alpha\n"[..])
        );
        assert_eq!(
            repo.head_file("dir/b.txt").unwrap().as_deref(),
            Some(&b"beta\n"[..])
        );
        assert_eq!(
            repo.head_file("./z.txt").unwrap().as_deref(),
            Some(&b"zeta\n"[..])
        );
        assert_eq!(repo.head_file("missing").unwrap(), None);
        assert_eq!(repo.head_file("dir").unwrap(), None);
        assert_eq!(repo.head_file("dir/missing/x").unwrap(), None);
        assert_eq!(repo.head_file("").unwrap(), None);
        assert_eq!(repo.head_file("/etc/passwd").unwrap(), None);
        assert_eq!(repo.head_file("../a.txt").unwrap(), None);
    }

    #[test]
    fn quote_path_rules() {
        assert_eq!(quote_path(b"plain/path.rs", true), b"plain/path.rs");
        assert_eq!(quote_path(b"a b", true), b"\"a b\"");
        assert_eq!(quote_path(b"\x01\x7f\x1b", true), b"\"\\001\\177\\033\"");
        assert_eq!(quote_path("\u{e9}".as_bytes(), false), "\u{e9}".as_bytes());
        assert_eq!(quote_path(b"a\\b\"c\n", false), b"\"a\\\\b\\\"c\\n\"");
    }
}
