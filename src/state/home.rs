//! ralph's own state directory (SPEC §4, §11): `$XDG_STATE_HOME/ralph`, else
//! `~/.local/state/ralph` — where ralph keeps what decides, out of the agent's reach under
//! `--sandbox` (the home directory is read-only there): its copy of each work tree's run state
//! and the lock that decides (`trees/`), and its records of a repository's loops — their base
//! branches, merge logs and the lock between loops (`repos/`).
//!
//! A directory is keyed by the path it belongs to (a work tree, or a repository's common git
//! directory), and remembers the identity of the git directory it was made for (device, inode
//! and, where the file system keeps it, its birth time): a new repository at the same path (a
//! fresh clone where an old one was) does not inherit the records of the old one. Those are
//! moved aside, never read.
//!
//! Readers that must write nothing (`ralph status`) [`find`](StateHome::find_tree) the
//! records; a run [`opens`](StateHome::tree) them. [`records_of`] finds a work tree's records
//! from its path alone, looking its git directory up once per process, so that what the agent
//! does to a `.git` file later in the run never moves them.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file, in each keyed directory, naming what the directory belongs to.
const IDENTITY: &str = "identity";

/// ralph's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateHome {
    base: PathBuf,
}

impl StateHome {
    /// `$XDG_STATE_HOME/ralph` when that is an absolute path, else `$HOME/.local/state/ralph`;
    /// `None` when neither is set.
    pub(crate) fn locate() -> Option<StateHome> {
        let absolute = |v: std::ffi::OsString| {
            let p = PathBuf::from(v);
            p.is_absolute().then_some(p)
        };
        let base = std::env::var_os("XDG_STATE_HOME")
            .and_then(absolute)
            .or_else(|| {
                std::env::var_os("HOME")
                    .and_then(absolute)
                    .map(|h| h.join(".local/state"))
            })?;
        Some(StateHome {
            base: base.join("ralph"),
        })
    }

    /// A state home at `base` (tests).
    #[cfg(test)]
    pub(crate) fn at(base: &Path) -> StateHome {
        StateHome {
            base: base.to_path_buf(),
        }
    }

    /// The state directory itself.
    pub(crate) fn path(&self) -> &Path {
        &self.base
    }

    /// The records of one work tree, whose git directory is `git_dir`: created (mode 0700)
    /// when missing, and started afresh when they were made for another git directory at the
    /// same place.
    pub(crate) fn tree(&self, work_tree: &Path, git_dir: &Path) -> std::io::Result<Keyed> {
        Keyed::open(&self.base.join("trees"), work_tree, git_dir)
    }

    /// The records of one work tree when they exist for its git directory now: nothing is
    /// created or set aside (a reader that writes nothing).
    pub(crate) fn find_tree(&self, work_tree: &Path, git_dir: &Path) -> Option<Keyed> {
        Keyed::find(&self.base.join("trees"), work_tree, git_dir)
    }

    /// The records of one repository (its loops), keyed by its common git directory.
    pub(crate) fn repo(&self, common_dir: &Path) -> std::io::Result<Keyed> {
        Keyed::open(&self.base.join("repos"), common_dir, common_dir)
    }

    /// The records of one repository when they exist for its common git directory now:
    /// nothing is created or set aside.
    pub(crate) fn find_repo(&self, common_dir: &Path) -> Option<Keyed> {
        Keyed::find(&self.base.join("repos"), common_dir, common_dir)
    }

    /// The records of the work tree at `work_tree`, found from its path: opened (`create`, a
    /// run) or only found (a reader). `Ok(None)` when no repository has its root there, or,
    /// not creating, when there are no records yet.
    pub(crate) fn records_of(
        &self,
        work_tree: &Path,
        create: bool,
    ) -> std::io::Result<Option<Keyed>> {
        let Some(git_dir) = git_dir_of(work_tree) else {
            return Ok(None);
        };
        if create {
            self.tree(work_tree, &git_dir).map(Some)
        } else {
            Ok(self.find_tree(work_tree, &git_dir))
        }
    }
}

/// The git directory of the repository whose work tree's root is `work_tree`, looked up once
/// per process: later lookups answer as the first did, whatever `.git` has become since.
fn git_dir_of(work_tree: &Path) -> Option<PathBuf> {
    static KNOWN: Mutex<Option<HashMap<PathBuf, PathBuf>>> = Mutex::new(None);
    let key: PathBuf = std::path::absolute(work_tree).ok()?.components().collect();
    let mut known = KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let known = known.get_or_insert_with(HashMap::new);
    if let Some(g) = known.get(&key) {
        return Some(g.clone());
    }
    let repo = git2::Repository::open(&key).ok()?;
    let root: PathBuf = repo.workdir()?.components().collect();
    if root != key {
        return None;
    }
    let git_dir: PathBuf = repo.path().components().collect();
    known.insert(key, git_dir.clone());
    Some(git_dir)
}

/// One keyed directory of the state home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keyed {
    dir: PathBuf,
}

impl Keyed {
    fn open(parent: &Path, key_path: &Path, identity_of: &Path) -> std::io::Result<Keyed> {
        let (dir, identity) = place(parent, key_path, identity_of)?;
        private_dirs(parent)?;
        let file = dir.join(IDENTITY);
        match std::fs::read_to_string(&file) {
            Ok(found) if found == identity => return Ok(Keyed { dir }),
            Ok(_) => {
                // Made for another repository at this path: kept aside, never read.
                let mut aside = dir.as_os_str().to_owned();
                aside.push(".old");
                let aside = PathBuf::from(aside);
                let _ = std::fs::remove_dir_all(&aside);
                std::fs::rename(&dir, &aside)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        private_dirs(&dir)?;
        // Whole or not at all: another ralph opening the same directory at the same moment
        // must not read a half-written identity and set the directory aside as another's.
        // The temporary file's name is unpredictable and made exclusively (`files::write_atomic`).
        crate::files::write_atomic(&file, identity.as_bytes(), 0o600)?;
        Ok(Keyed { dir })
    }

    fn find(parent: &Path, key_path: &Path, identity_of: &Path) -> Option<Keyed> {
        let (dir, identity) = place(parent, key_path, identity_of).ok()?;
        let found = std::fs::read_to_string(dir.join(IDENTITY)).ok()?;
        (found == identity).then_some(Keyed { dir })
    }

    /// The directory.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// A file or directory in it.
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Where the records of `key_path` live below `parent`, and the identity they must name.
fn place(parent: &Path, key_path: &Path, identity_of: &Path) -> std::io::Result<(PathBuf, String)> {
    let key_path = std::path::absolute(key_path)?;
    let key_path = key_path.canonicalize().unwrap_or(key_path);
    let dir = parent.join(dir_name(&key_path));
    let meta = std::fs::metadata(identity_of)?;
    // The birth time tells a directory made where a removed one was, even on its inode.
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let identity = format!(
        "{}\n{}:{}:{born}\n",
        key_path.display(),
        meta.dev(),
        meta.ino()
    );
    Ok((dir, identity))
}

/// `NAME-HASH`: the last component (for people reading the directory) and a stable hash of
/// the whole path (FNV-1a: std's hasher may change between Rust versions).
fn dir_name(path: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let name: String = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    format!("{name}-{h:016x}")
}

/// `mkdir -p`, the directories ralph creates mode 0700.
fn private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_directory_is_stable_for_its_repository_and_fresh_for_a_new_one() {
        let d = tempfile::tempdir().unwrap();
        let home = StateHome::at(&d.path().join("state"));
        let tree = d.path().join("repo");
        let git = tree.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        let k = home.tree(&tree, &git).unwrap();
        std::fs::write(k.join("state.json"), "recorded").unwrap();
        assert_eq!(home.tree(&tree, &git).unwrap(), k);
        assert_eq!(
            std::fs::read_to_string(k.join("state.json")).unwrap(),
            "recorded"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(k.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Another repository at the same path (a fresh clone): the old records are set aside.
        // (The old one is kept elsewhere, so its inode cannot be reused for the new one.)
        std::fs::rename(&tree, d.path().join("old-repo")).unwrap();
        std::fs::create_dir_all(&git).unwrap();
        let again = home.tree(&tree, &git).unwrap();
        assert_eq!(again.path(), k.path());
        assert!(!again.join("state.json").exists());
        // A different work tree gets a different directory.
        let other = d.path().join("other");
        std::fs::create_dir_all(other.join(".git")).unwrap();
        assert_ne!(
            home.tree(&other, &other.join(".git")).unwrap().path(),
            k.path()
        );
    }

    #[test]
    fn records_are_found_from_the_work_tree_and_made_only_by_a_writer() {
        let d = tempfile::tempdir().unwrap();
        let home = StateHome::at(&d.path().join("state"));
        let tree = d.path().join("repo");
        git2::Repository::init(&tree).unwrap();
        assert_eq!(home.records_of(&tree, false).unwrap(), None);
        assert!(!home.path().exists(), "a reader makes nothing");
        let k = home.records_of(&tree, true).unwrap().unwrap();
        assert_eq!(home.records_of(&tree, false).unwrap(), Some(k.clone()));
        assert_eq!(home.find_tree(&tree, &tree.join(".git")), Some(k));
        // Not the root of a repository: no records.
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        assert_eq!(home.records_of(&tree.join("sub"), true).unwrap(), None);
    }

    #[test]
    fn a_repositorys_records_are_found_only_once_made_and_only_for_it() {
        let d = tempfile::tempdir().unwrap();
        let home = StateHome::at(&d.path().join("state"));
        let common = d.path().join("repo/.git");
        std::fs::create_dir_all(&common).unwrap();
        assert_eq!(home.find_repo(&common), None);
        assert!(!home.path().exists(), "looking creates nothing");
        let made = home.repo(&common).unwrap();
        assert_eq!(home.find_repo(&common), Some(made.clone()));
        // Another repository at the same path: not its records.
        std::fs::rename(&common, d.path().join("old-git")).unwrap();
        std::fs::create_dir_all(&common).unwrap();
        assert_eq!(home.find_repo(&common), None);
    }

    #[test]
    fn ralphs_opening_the_same_new_directory_at_once_all_keep_it() {
        for _ in 0..200 {
            let d = tempfile::tempdir().unwrap();
            let home = StateHome::at(&d.path().join("state"));
            let common = d.path().join("repo/.git");
            std::fs::create_dir_all(&common).unwrap();
            std::thread::scope(|s| {
                for _ in 0..16 {
                    s.spawn(|| home.repo(&common).unwrap());
                }
            });
            let repos: Vec<String> = std::fs::read_dir(home.path().join("repos"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(
                repos.len(),
                1,
                "a half-written identity set aside: {repos:?}"
            );
        }
    }

    #[test]
    fn names_are_readable_and_plain() {
        let n = dir_name(Path::new("/srv/my repo/é"));
        assert!(n.starts_with("_-"), "{n}");
        assert_eq!(n.len(), 2 + 16);
        assert!(dir_name(Path::new("/a/proj")).starts_with("proj-"));
    }
}
