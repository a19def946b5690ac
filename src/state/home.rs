//! ralph's own state directory (SPEC §4, §11): `$XDG_STATE_HOME/ralph`, else
//! `~/.local/state/ralph` — where ralph keeps what decides, out of the agent's reach under
//! `--sandbox` (the home directory is read-only there): its copy of each work tree's run state
//! and the lock that decides (`trees/`), and its records of a repository's loops — their base
//! branches, merge logs and the lock between loops (`repos/`).
//!
//! A directory is keyed by the path it belongs to (a work tree, or a repository's common git
//! directory), and remembers the identity of the git directory it was made for (device and
//! inode): a new repository at the same path (a fresh clone where an old one was) does not
//! inherit the records of the old one. Those are moved aside, never read.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file, in each keyed directory, naming what the directory belongs to.
const IDENTITY: &str = "identity";

/// ralph's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateHome {
    base: PathBuf,
}

impl StateHome {
    /// `$XDG_STATE_HOME/ralph` when that is an absolute path, else `$HOME/.local/state/ralph`;
    /// `None` when neither is set.
    pub fn locate() -> Option<StateHome> {
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
    pub fn at(base: &Path) -> StateHome {
        StateHome {
            base: base.to_path_buf(),
        }
    }

    /// The state directory itself.
    pub fn path(&self) -> &Path {
        &self.base
    }

    /// The records of one work tree, whose git directory is `git_dir`: created (mode 0700)
    /// when missing, and started afresh when they were made for another git directory at the
    /// same place.
    pub fn tree(&self, work_tree: &Path, git_dir: &Path) -> std::io::Result<Keyed> {
        Keyed::open(&self.base.join("trees"), work_tree, git_dir)
    }

    /// The records of one repository (its loops), keyed by its common git directory.
    pub fn repo(&self, common_dir: &Path) -> std::io::Result<Keyed> {
        Keyed::open(&self.base.join("repos"), common_dir, common_dir)
    }
}

/// One keyed directory of the state home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    dir: PathBuf,
}

impl Keyed {
    fn open(parent: &Path, key_path: &Path, identity_of: &Path) -> std::io::Result<Keyed> {
        let key_path = std::path::absolute(key_path)?;
        let key_path = key_path.canonicalize().unwrap_or(key_path);
        let dir = parent.join(dir_name(&key_path));
        let meta = std::fs::metadata(identity_of)?;
        let identity = format!("{}\n{}:{}\n", key_path.display(), meta.dev(), meta.ino());
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
        let mut f = std::fs::File::create(&file)?;
        f.write_all(identity.as_bytes())?;
        Ok(Keyed { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A file or directory in it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
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
    fn names_are_readable_and_plain() {
        let n = dir_name(Path::new("/srv/my repo/é"));
        assert!(n.starts_with("_-"), "{n}");
        assert_eq!(n.len(), 2 + 16);
        assert!(dir_name(Path::new("/a/proj")).starts_with("proj-"));
    }
}
