//! The index's tree without rewriting the index: HEAD's tree with the entries that git itself
//! lists as changed in the index (`git diff-index --cached --raw`), one new tree per changed
//! directory through libgit2's tree builder. `git write-tree` gives the same tree, but it also
//! writes the whole index back (to keep its cache of subtrees), and at 100,000 files that
//! write costs more than everything else ralph does in an iteration (see `index.rs` for when
//! each is used).

use std::collections::BTreeMap;

use git2::{ObjectType, Oid, Repository, Tree};

/// The mode of a tree entry that is a directory.
const DIR_MODE: i32 = 0o040_000;

/// An index entry's mode and object, or `None` when there is none.
type Entry = Option<(i32, Oid)>;

/// A change at a path relative to the directory being built.
type Relative<'a> = (&'a [u8], Entry);

/// One path whose index entry differs from HEAD's tree: its new mode and object, or `None`
/// when the index no longer has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Change {
    pub(crate) path: Vec<u8>,
    pub(crate) new: Entry,
}

/// Parse the output of `git diff-index --cached --raw -z --no-renames`: records
/// `:OLDMODE NEWMODE OLDOID NEWOID STATUS\0PATH\0`. `None` for anything but an added,
/// deleted, modified or type-changed entry (an unmerged path, say), or output it cannot read.
pub(super) fn parse_raw(out: &[u8]) -> Option<Vec<Change>> {
    let mut fields = out.split(|&b| b == 0);
    let mut changes = Vec::new();
    while let Some(head) = fields.next() {
        if head.is_empty() {
            continue;
        }
        let head = std::str::from_utf8(head.strip_prefix(b":")?).ok()?;
        let path = fields.next().filter(|p| !p.is_empty())?.to_vec();
        let mut parts = head.split(' ');
        let (_, mode, _, oid, status) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
        let mode = i32::from_str_radix(mode, 8).ok()?;
        let new = match status {
            "D" if mode == 0 => None,
            "A" | "M" | "T" if mode != 0 => Some((mode, Oid::from_str(oid).ok()?)),
            _ => return None,
        };
        changes.push(Change { path, new });
    }
    Some(changes)
}

/// `base` with `changes` applied, written to the object database. An error (a path that
/// would be both a file and a directory, a name the tree builder refuses) means the caller
/// asks `git write-tree` instead.
pub(super) fn apply(
    repo: &Repository,
    base: &Tree<'_>,
    changes: &[Change],
) -> Result<Oid, git2::Error> {
    let parts: Vec<Relative<'_>> = changes.iter().map(|c| (c.path.as_slice(), c.new)).collect();
    match build(repo, Some(base), &parts)? {
        Some(tree) => Ok(tree),
        None => repo.treebuilder(None)?.write(),
    }
}

/// What changes at one name of a directory: the entry itself, and paths under it.
#[derive(Default)]
struct AtName<'a> {
    own: Option<Entry>,
    under: Vec<Relative<'a>>,
}

/// The directory `base` (absent: a new one) with `changes` (paths relative to it) applied;
/// `None` when nothing is left in it, as git keeps no empty trees.
fn build(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    changes: &[Relative<'_>],
) -> Result<Option<Oid>, git2::Error> {
    let mut names: BTreeMap<&[u8], AtName<'_>> = BTreeMap::new();
    for &(path, new) in changes {
        match path.iter().position(|&b| b == b'/') {
            Some(slash) => names
                .entry(&path[..slash])
                .or_default()
                .under
                .push((&path[slash + 1..], new)),
            None => names.entry(path).or_default().own = Some(new),
        }
    }
    let mut builder = repo.treebuilder(base)?;
    for (name, at) in names {
        let existing = builder.get(name)?.map(|e| (e.id(), e.kind()));
        let subtree = if at.under.is_empty() {
            None
        } else {
            let sub_base = match existing {
                Some((id, Some(ObjectType::Tree))) => Some(repo.find_tree(id)?),
                _ => None,
            };
            build(repo, sub_base.as_ref(), &at.under)?
        };
        let entry = match (at.own, subtree) {
            (Some(Some(_)), Some(_)) => {
                return Err(git2::Error::from_str(
                    "a path is both a file and a directory in the index",
                ));
            }
            (Some(Some(file)), None) => Some(file),
            (_, Some(tree)) => Some((DIR_MODE, tree)),
            (Some(None), None) => None,
            // Only paths under it changed, and none is left.
            (None, None) if !at.under.is_empty() => None,
            (None, None) => continue,
        };
        match entry {
            Some((mode, id)) => {
                builder.insert(name, id, mode)?;
            }
            None if existing.is_some() => builder.remove(name)?,
            None => {}
        }
    }
    if builder.is_empty() {
        return Ok(None);
    }
    builder.write().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_records_parse() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let raw = format!(
            ":100644 100644 {z} {a} M\0dir/a b\0:000000 120000 {z} {a} A\0link\0:100644 000000 {a} {z} D\0gone\0"
        );
        let changes = parse_raw(raw.as_bytes()).unwrap();
        assert_eq!(changes.len(), 3);
        assert_eq!(changes[0].path, b"dir/a b");
        assert_eq!(changes[0].new.unwrap().0, 0o100_644);
        assert_eq!(changes[1].new.unwrap().0, 0o120_000);
        assert_eq!(changes[2].new, None);
    }

    #[test]
    fn unmerged_or_unreadable_output_is_refused() {
        let z = "0".repeat(40);
        let unmerged = format!(":000000 000000 {z} {z} U\0f\0");
        assert!(parse_raw(unmerged.as_bytes()).is_none());
        assert!(parse_raw(b"garbage\0f\0").is_none());
        assert!(parse_raw(b":100644 100644 x y M\0").is_none());
        assert_eq!(parse_raw(b"").unwrap(), Vec::new());
    }
}
