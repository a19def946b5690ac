//! The index as git keeps it: its tree (remembered while the index file is unchanged), its
//! conflicts (`git ls-files --unmerged`) and its gitlinks (read from that tree,
//! remembered per subtree). ralph never parses the index itself: at 100,000 files every read
//! costs a checksum and a parse of ten megabytes, which git does several times faster than
//! libgit2, and git's own tree writer is the one `git commit` uses (its cache of unchanged
//! subtrees, intent-to-add entries left out).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use git2::{ObjectType, Oid};

use super::{GitError, Repo};

/// What identifies one version of the index file: git replaces it (a rename of `index.lock`)
/// at every write, so a new inode, size or change time means new content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(super) fn of(path: &std::path::Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// Paths the index may change from HEAD's tree, since its cache of subtrees was last written,
/// before ralph asks `git write-tree` again: every one of them invalidated that cache for its
/// directories, which `git diff-index --cached` (and `git status`) must then compare in full.
const MAX_UNSAVED: usize = 1_000;

/// What ralph remembers of the index between git commands.
#[derive(Debug, Default)]
pub(super) struct IndexMemo {
    /// The tree of the index file as it was at that stamp.
    tree: Option<(Stamp, Oid)>,
    /// Gitlink paths under each subtree walked last (relative to it), so a walk reads only the
    /// subtrees that changed.
    links: HashMap<Oid, Arc<Vec<Vec<u8>>>>,
    /// The monitor's position handed to the last `git status` that wrote its refreshed stat
    /// data back to the index, and whether that status was answered in part (see
    /// [`Repo::status`]).
    pub(super) refreshed: Option<(u64, bool)>,
    /// Paths of trees made from HEAD's (see [`Repo::index_tree`]) since the last
    /// `git write-tree`.
    unsaved: usize,
    /// The last trees made of the index (by git or from HEAD's): a HEAD holding one of them
    /// holds nothing an index cannot (an empty subtree, a mode git would not write), so only
    /// on such a HEAD is the index's tree made from HEAD's.
    made: Vec<Oid>,
}

/// How many of the trees last made of the index are remembered.
const MADE_KEPT: usize = 8;

impl IndexMemo {
    fn made(&mut self, tree: Oid) {
        self.made.retain(|&t| t != tree);
        self.made.push(tree);
        if self.made.len() > MADE_KEPT {
            self.made.remove(0);
        }
    }
}

impl Repo {
    /// The tree the index on disk holds, written to the object database. Unresolved conflicts
    /// are [`GitError::Conflicts`].
    ///
    /// Made from HEAD's tree and the entries `git diff-index --cached` lists as changed
    /// (`tree.rs`), which leaves the index file alone; `git write-tree` — the same tree, and a
    /// rewrite of the whole index to keep its cache of subtrees — where that cannot be done
    /// (an unborn branch, a sparse index, an unmerged path, a name the tree builder refuses, a
    /// HEAD whose tree was not made of an index in this process) and once more than
    /// [`MAX_UNSAVED`] paths went through the first way, so that cache, which `git status`
    /// and `git diff-index` use too, stays mostly valid.
    pub(crate) fn index_tree(&self) -> Result<Oid, GitError> {
        let path = self.repo.path().join("index");
        let before = Stamp::of(&path);
        if let (Some(now), Some((then, tree))) = (before, self.memo().tree)
            && now == then
        {
            return Ok(tree);
        }
        if let Some((tree, paths)) = self.tree_from_head()? {
            let mut memo = self.memo();
            memo.unsaved += paths;
            memo.made(tree);
            // Only while the index file is the one diff-index read.
            if let Some(stamp) = before.filter(|&b| Stamp::of(&path) == Some(b)) {
                memo.tree = Some((stamp, tree));
            }
            return Ok(tree);
        }
        let out = self.git.output(&["write-tree"], None)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("unmerged") {
                return Err(GitError::Conflicts);
            }
            return Err(GitError::Cli {
                command: "git write-tree".into(),
                message: stderr.trim().to_string(),
            });
        }
        let hex = String::from_utf8_lossy(&out.stdout);
        let tree = Oid::from_str(hex.trim())?;
        // git may have written the index back (its cache of subtrees): remember the new file.
        let mut memo = self.memo();
        memo.unsaved = 0;
        memo.made(tree);
        if let Some(stamp) = Stamp::of(&path) {
            memo.tree = Some((stamp, tree));
        }
        Ok(tree)
    }

    /// The index's tree as HEAD's with what the index changes applied, and how many paths
    /// that was; `None` where `git write-tree` must make it (see [`Self::index_tree`]).
    pub(super) fn tree_from_head(&self) -> Result<Option<(Oid, usize)>, GitError> {
        let unsaved = self.memo().unsaved;
        if unsaved >= MAX_UNSAVED || self.sparse() {
            return Ok(None);
        }
        let Some(head) = self.head_commit()? else {
            return Ok(None);
        };
        // A HEAD the agent made by hand (`git commit-tree`, `git reset --soft`) may hold what
        // no index can: `git write-tree` says what the index holds.
        if !self.memo().made.contains(&head.tree_id()) {
            return Ok(None);
        }
        let hex = head.id().to_string();
        let args = [
            // The commit itself, as libgit2 reads it, not a `git replace` of it.
            "--no-replace-objects",
            "diff-index",
            "--cached",
            "--raw",
            "-z",
            "--no-renames",
            // An intent-to-add entry (`git add -N`) is not in the index's tree.
            "--ita-invisible-in-index",
            // Whatever the configuration hides, a gitlink's recorded commit counts.
            "--ignore-submodules=none",
            &hex,
            "--",
        ];
        let out = self.git.unmonitored().output(&args, None)?;
        if !out.status.success() {
            return Ok(None);
        }
        let Some(changes) = super::tree::parse_raw(&out.stdout) else {
            return Ok(None);
        };
        if unsaved + changes.len() > MAX_UNSAVED {
            return Ok(None);
        }
        let base = head.tree_id();
        let changes = &changes;
        Ok(self
            .writing(|r| super::tree::apply(r, &r.find_tree(base)?, changes))
            .ok()
            .map(|tree| (tree, changes.len())))
    }

    /// Refuse when the index holds unresolved conflicts.
    pub(super) fn check_conflicts(&self) -> Result<(), GitError> {
        let out = self
            .git
            .unmonitored()
            .run(&["ls-files", "--unmerged", "-z"], None)?;
        if out.is_empty() {
            Ok(())
        } else {
            Err(GitError::Conflicts)
        }
    }

    /// The gitlinks of the index (submodules, recorded nested repositories), as repo-relative
    /// paths: their commits change in git directories no watcher sees. Read from the index's
    /// tree, so an intent-to-add gitlink (`git add -N`), which has no tree yet, is not among
    /// them.
    pub(crate) fn gitlinks(&self) -> Result<Vec<Vec<u8>>, GitError> {
        let tree = self.index_tree()?;
        let mut fresh = HashMap::new();
        let links = self.links_under(tree, &mut fresh)?;
        self.memo().links = fresh;
        Ok(links.to_vec())
    }

    /// The gitlinks under `tree`, relative to it; `fresh` collects what the next walk may reuse.
    fn links_under(
        &self,
        tree: Oid,
        fresh: &mut HashMap<Oid, Arc<Vec<Vec<u8>>>>,
    ) -> Result<Arc<Vec<Vec<u8>>>, GitError> {
        let known = self.memo().links.get(&tree).cloned();
        if let Some(links) = known.or_else(|| fresh.get(&tree).cloned()) {
            fresh.insert(tree, Arc::clone(&links));
            return Ok(links);
        }
        let mut links = Vec::new();
        for entry in self.repo.find_tree(tree)?.iter() {
            if entry.filemode() == 0o160_000 {
                links.push(entry.name_bytes().to_vec());
            } else if entry.kind() == Some(ObjectType::Tree) {
                for sub in self.links_under(entry.id(), fresh)?.iter() {
                    let mut path = entry.name_bytes().to_vec();
                    path.push(b'/');
                    path.extend_from_slice(sub);
                    links.push(path);
                }
            }
        }
        let links = Arc::new(links);
        fresh.insert(tree, Arc::clone(&links));
        Ok(links)
    }

    pub(super) fn memo(&self) -> std::sync::MutexGuard<'_, IndexMemo> {
        self.index_memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
