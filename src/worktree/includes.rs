//! A merge never brings in a change to a file the repository's configuration includes (issue
//! 29): `include.path = ../.gitconfig` makes a tracked file part of the configuration every git
//! on the repository reads — ralph's own, outside any sandbox, at the next `git worktree add`
//! or staging — so a loop's agent that committed a filter there would have it run outside once
//! the loop merged. ralph leaves such a merge to the user.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use crate::error::Result;
use crate::git::{GitError, Repo};
use crate::sandbox::{Include, RepoPaths};
use crate::ui::Ui;

/// A path the merge would change that the configuration includes (or leads to it: a
/// directory on the way, which the merge could make a link).
#[derive(Debug)]
pub(super) struct Touched {
    /// The path in the tree, as the merge changes it.
    pub(super) path: String,
    pub(super) include: Include,
}

/// The first file the configuration of `repo` includes that a merge of commit `theirs` into
/// branch tip `ours` (`None`: not there) would change: every path `theirs` changed since each
/// merge base, held against every include target lying in one of the repository's work trees.
pub(super) fn touched(
    repo: &Repo,
    ours: Option<git2::Oid>,
    theirs: git2::Oid,
) -> Result<Option<Touched>> {
    let includes = crate::sandbox::includes(&paths(repo))?;
    if includes.is_empty() {
        return Ok(None);
    }
    let roots = work_trees(repo);
    let changed = changed_paths(repo.git2(), ours, theirs).map_err(GitError::from)?;
    for include in includes {
        for rel in relative_in(&include.target, &roots) {
            let hit = changed.iter().find(|c| rel.starts_with(c.as_str()));
            if let Some(path) = hit {
                return Ok(Some(Touched {
                    path: path.clone(),
                    include,
                }));
            }
        }
    }
    Ok(None)
}

/// Whether the merge of `theirs` (`label`, a commit `rev`) into branch `base` is refused for
/// changing an included file: said, nothing touched.
pub(super) fn refused(repo: &Repo, base: &str, label: &str, rev: &str, ui: Ui) -> Result<bool> {
    let g = repo.git2();
    let ours = g.refname_to_id(&format!("refs/heads/{base}")).ok();
    let theirs = git2::Oid::from_str(rev)
        .or_else(|_| g.refname_to_id(&format!("refs/heads/{rev}")))
        .map_err(GitError::from)?;
    let Some(t) = touched(repo, ours, theirs)? else {
        return Ok(false);
    };
    ui.alert(&format!(
        "not merged: `{label}` changes `{}`, and the repository's configuration includes it (`{}` in {}): review and merge it yourself",
        t.path,
        t.include.key,
        t.include.from.display()
    ));
    ui.plain(&format!(
        "A file git reads as configuration can make every git on the repository run a program of its choosing, outside any sandbox. The branch `{label}` and its worktree stay as they are."
    ));
    Ok(true)
}

fn paths(repo: &Repo) -> RepoPaths {
    let plain = |p: &Path| p.components().collect::<PathBuf>();
    RepoPaths {
        work_tree: repo.root().to_path_buf(),
        git_dir: plain(repo.git2().path()),
        common_dir: plain(repo.git2().commondir()),
    }
}

/// The repository's work trees: the main one and every linked one git knows.
fn work_trees(repo: &Repo) -> Vec<PathBuf> {
    let g = repo.git2();
    let mut roots = vec![repo.root().to_path_buf()];
    if let Some(main) = g.commondir().parent()
        && g.commondir().file_name().is_some_and(|n| n == ".git")
    {
        roots.push(main.to_path_buf());
    }
    if let Ok(names) = g.worktrees() {
        for name in names.iter().flatten().flatten() {
            if let Ok(wt) = g.find_worktree(name) {
                roots.push(wt.path().to_path_buf());
            }
        }
    }
    roots
}

/// `target` relative to each work tree it lies in, both as written and with the links on its
/// way resolved (a tracked link in a work tree leads there too).
fn relative_in(target: &Path, roots: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for root in roots {
        let real_root = root.canonicalize().unwrap_or_else(|_| root.clone());
        for (t, r) in [
            (lexical(target), lexical(root)),
            (resolved(target), real_root),
        ] {
            if let Ok(rel) = t.strip_prefix(&r)
                && !rel.as_os_str().is_empty()
            {
                out.insert(rel.to_path_buf());
            }
        }
    }
    out
}

/// `..` and `.` taken away as text (git joins an include's relative path to its file's
/// directory the same way before opening it).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `p` with the links on the way to its deepest existing ancestor resolved.
fn resolved(p: &Path) -> PathBuf {
    let p = lexical(p);
    let mut rest = Vec::new();
    let mut at = p.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |acc, c| acc.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p,
        }
    }
}

/// Every path `theirs` changed since each merge base with `ours` (since nothing when there is
/// none), renames as a removal and an addition. libgit2 compares the trees: no filter, driver
/// or configuration of the repository's is run or read.
fn changed_paths(
    g: &git2::Repository,
    ours: Option<git2::Oid>,
    theirs: git2::Oid,
) -> Result<BTreeSet<String>, git2::Error> {
    let to = g.find_commit(theirs)?.tree()?;
    let bases: Vec<git2::Oid> = match ours {
        Some(o) => g
            .merge_bases(o, theirs)
            .map(|b| b.iter().copied().collect())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let froms = if bases.is_empty() {
        vec![None]
    } else {
        bases
            .iter()
            .map(|b| g.find_commit(*b).and_then(|c| c.tree()).map(Some))
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut out = BTreeSet::new();
    for from in froms {
        let diff = g.diff_tree_to_tree(from.as_ref(), Some(&to), None)?;
        for d in diff.deltas() {
            for f in [d.old_file(), d.new_file()] {
                if let Some(p) = f.path() {
                    out.insert(p.to_string_lossy().into_owned());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_targets_are_compared_within_each_work_tree() {
        let roots = [PathBuf::from("/r"), PathBuf::from("/r/.git/wt/x")];
        let rel = relative_in(Path::new("/r/.git/../.gitconfig"), &roots);
        assert!(rel.contains(Path::new(".gitconfig")), "{rel:?}");
        let rel = relative_in(Path::new("/elsewhere/x.inc"), &roots);
        assert!(rel.is_empty(), "{rel:?}");
        assert_eq!(lexical(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
    }
}
