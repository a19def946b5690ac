//! A loop's own branch (issue 29): ralph's commits go onto the branch its loop owns — a
//! `--worktree NAME` loop's `ralph/NAME`, a main-tree loop's the branch its run started on —
//! and no other ref moves. HEAD is the agent's to write (`git symbolic-ref HEAD
//! refs/heads/main`, a checkout, a detached HEAD): a commit whose HEAD is not the loop's own is
//! refused, and the branch moves only from the commit the new one was made on (a
//! compare-and-swap), never through whatever HEAD names by then.
//!
//! The git environment ralph starts in is refused when it names another repository or part of
//! one (`GIT_DIR`, …): ralph's git opens the repository it discovers, the agent's git would open
//! the one the variable names.

use git2::{Oid, Repository};

use super::{GitError, Repo};

/// The variables that make git open another repository, or another part of one, than the one
/// enclosing the directory: set when ralph starts, its git and the agent's would differ.
pub(crate) const FOREIGN_REPOSITORY_VARS: [&str; 7] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

/// The first of [`FOREIGN_REPOSITORY_VARS`] set in ralph's environment.
pub(crate) fn foreign_repository_var() -> Option<&'static str> {
    FOREIGN_REPOSITORY_VARS
        .into_iter()
        .find(|v| std::env::var_os(v).is_some())
}

/// Where a loop's commits may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OwnHead {
    /// This branch (a full ref name, `refs/heads/…`), HEAD pointing at it.
    Branch(String),
    /// A detached HEAD (a run started on one): no branch moves.
    Detached,
}

impl OwnHead {
    /// How a message names it.
    fn said(&self) -> String {
        match self {
            OwnHead::Branch(b) => format!("branch `{}`", short(b)),
            OwnHead::Detached => "a detached HEAD".to_string(),
        }
    }
}

fn short(full: &str) -> &str {
    full.strip_prefix("refs/heads/").unwrap_or(full)
}

/// What HEAD is now: the branch it points at (born or not), or detached.
fn head_of(repo: &Repository) -> Result<OwnHead, GitError> {
    let head = repo.find_reference("HEAD")?;
    Ok(match head.symbolic_target_bytes() {
        Some(t) => OwnHead::Branch(String::from_utf8_lossy(t).into_owned()),
        None => OwnHead::Detached,
    })
}

impl Repo {
    /// What HEAD is now.
    pub(crate) fn head_now(&self) -> Result<OwnHead, GitError> {
        head_of(&self.repo)
    }

    /// From now on, every commit of ralph's goes to `own` only ([`Self::check_own_head`]).
    pub(crate) fn set_own_head(&mut self, own: OwnHead) {
        self.own = Some(own);
    }

    /// The loop's own branch (`None`: a detached HEAD, or no loop's repository).
    pub(crate) fn own_branch(&self) -> Option<&str> {
        match &self.own {
            Some(OwnHead::Branch(b)) => Some(b),
            _ => None,
        }
    }

    /// The commit the loop's own branch is at (full id); `None` without one or unborn.
    pub(crate) fn own_tip(&self) -> Option<String> {
        let branch = self.own_branch()?;
        let id = self.repo.refname_to_id(branch).ok()?;
        Some(id.to_string())
    }

    /// Refuse when HEAD is not the loop's own (nothing is refused where no loop owns the
    /// repository: a merge's, a tracker's commits on the base branch).
    pub(crate) fn check_own_head(&self) -> Result<(), GitError> {
        let Some(own) = &self.own else {
            return Ok(());
        };
        let now = self.head_now()?;
        if now == *own {
            return Ok(());
        }
        Err(GitError::NotOwnHead {
            head: now.said(),
            own: own.said(),
            back: match own {
                OwnHead::Branch(b) => format!("`git symbolic-ref HEAD {b}`"),
                OwnHead::Detached => "`git checkout --detach`".to_string(),
            },
        })
    }
}

/// Move what HEAD is (checked to be the loop's own) to the new commit `new`, made on `parent`:
/// a branch only while it is still at `parent` (its reflog and HEAD's say `message`), a
/// detached HEAD directly.
pub(super) fn advance(
    repo: &Repository,
    new: Oid,
    parent: Option<Oid>,
    summary: &str,
) -> Result<(), git2::Error> {
    let head = repo.find_reference("HEAD")?;
    let message = match parent {
        Some(_) => format!("commit: {summary}"),
        None => format!("commit (initial): {summary}"),
    };
    let target = head
        .symbolic_target_bytes()
        .map(|t| String::from_utf8_lossy(t).into_owned());
    match (target.as_deref(), parent) {
        (Some(branch), Some(was)) => repo
            .reference_matching(branch, new, true, was, &message)
            .map(drop),
        (Some(branch), None) => repo.reference(branch, new, false, &message).map(drop),
        (None, _) => repo.set_head_detached(new),
    }
}
