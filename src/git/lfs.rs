//! git-lfs at the boundary (issue 29). ralph's git never downloads anything at the agent's say:
//! every command of ralph's runs with `GIT_LFS_SKIP_SMUDGE=1` (`cli.rs`), so a checkout (a
//! merge, `git worktree add`, `git reset`) leaves LFS files as their pointers, and
//! [`Repo::lfs_fill`] then replaces those it can from the local store only (`git lfs checkout`
//! reads no remote, whatever `lfs.url` the agent's `.lfsconfig` names); a file whose object is
//! not there stays a pointer, for the user to `git lfs pull`.
//!
//! Under `--sandbox` the agent's `git add` of an LFS-tracked file stores the object in its own
//! git directory, which ralph never opens with git and remakes before each attempt. The objects
//! of the commits ralph fetched come through one narrow door, [`Repo::take_agents_lfs`]: each
//! LFS pointer among the blobs the fetch brought (read from the user's repository, at most
//! [`POINTER_MAX`] bytes), its object `lfs/objects/<aa>/<bb>/<oid>` opened beneath the agent's
//! git directory following no link, a regular file of the pointer's size whose sha256, streamed,
//! is the pointer's oid, written into the repository's store through a temporary file and a
//! rename; at most [`MAX_ENV`] bytes in all per fetch. Anything else is refused, never copied.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::Digest;

use super::{GitError, Repo};

/// The most bytes of LFS objects taken from the agent's store per fetch (`8G`, `512M`).
pub(crate) const MAX_ENV: &str = "RALPH_LFS_MAX";

/// The default of [`MAX_ENV`]: 4 GiB.
const DEFAULT_MAX: u64 = 4 << 30;

/// A pointer is a small text: git-lfs itself reads no blob of 1024 bytes or more as one.
pub(crate) const POINTER_MAX: usize = 1024;

/// The first line of a git-lfs pointer.
const VERSION: &str = "version https://git-lfs.github.com/spec/v1";

/// An LFS pointer: the object's oid (sha256, lowercase hex) and size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pointer {
    pub(crate) oid: String,
    pub(crate) size: u64,
}

/// What came of the agent's LFS objects.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TakenLfs {
    /// Objects copied into the repository's store, and their bytes.
    pub(crate) copied: usize,
    pub(crate) bytes: u64,
    /// Each object refused: `LFS object OID: refused: WHY`.
    pub(crate) refused: Vec<String>,
}

/// How one object fared.
enum Took {
    /// The repository's store has it already.
    Had,
    /// The agent's store has no such object: the pointer stays one.
    Absent,
    Copied,
}

/// The git-lfs pointer `bytes` hold, when they hold one: the version line first, then `oid
/// sha256:<64 hex>` and `size <n>` among the keys, each line `key value`.
pub(crate) fn parse_pointer(bytes: &[u8]) -> Option<Pointer> {
    if bytes.len() >= POINTER_MAX {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.strip_suffix('\n')?.split('\n');
    if lines.next()? != VERSION {
        return None;
    }
    let (mut oid, mut size) = (None, None);
    for line in lines {
        let (key, value) = line.split_once(' ')?;
        match key {
            "oid" => oid = Some(value.strip_prefix("sha256:")?),
            "size" => size = Some(value),
            _ => {}
        }
    }
    let oid = oid.filter(|o| {
        o.len() == 64
            && o.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })?;
    let size = size.filter(|s| s.bytes().all(|b| b.is_ascii_digit()))?;
    Some(Pointer {
        oid: oid.to_string(),
        size: size.parse().ok()?,
    })
}

/// The most bytes taken per fetch: [`MAX_ENV`], else [`DEFAULT_MAX`]; a value that is not a
/// size is an error naming the variable.
pub(crate) fn max_bytes() -> Result<u64, String> {
    match std::env::var(MAX_ENV) {
        Ok(v) if !v.trim().is_empty() => super::memory::parse(&v).ok_or_else(|| {
            format!("{MAX_ENV}=`{v}` is not a size: write bytes, such as `512M` or `8G`")
        }),
        _ => Ok(DEFAULT_MAX),
    }
}

impl Repo {
    /// Fill the LFS files of the work tree that are pointers from the local store (`git lfs
    /// checkout`, which downloads nothing), when the repository's configuration has git-lfs's
    /// filter (else no checkout would have smudged them). Returns the files left as pointers:
    /// their objects are not in this repository.
    pub(crate) fn lfs_fill(&self) -> Result<Vec<String>, GitError> {
        let key = ["config", "--get-regexp", r"^filter\.lfs\.(process|smudge)$"];
        if !self.git.run(&key, None).is_ok_and(|out| !out.is_empty()) {
            return Ok(Vec::new());
        }
        self.git.run(&["lfs", "checkout"], None)?;
        let listed = self.git.unmonitored().run(&["lfs", "ls-files"], None)?;
        // `OID - PATH`: the work tree holds the pointer; `OID * PATH`: the object.
        Ok(String::from_utf8_lossy(&listed)
            .lines()
            .filter_map(|l| l.split_once(" - ").map(|(_, path)| path.to_string()))
            .collect())
    }

    /// The LFS objects of the commits the agent made (`to`, down to `from`, which ralph had
    /// already), taken from its git directory `agent_git` through the door the module names.
    pub(crate) fn take_agents_lfs(
        &self,
        from: Option<&str>,
        to: &str,
        agent_git: &Path,
        max: u64,
    ) -> Result<TakenLfs, GitError> {
        let pointers = self.new_pointers(from, to)?;
        let mut taken = TakenLfs::default();
        if pointers.is_empty() {
            return Ok(taken);
        }
        let store = self.lfs_store();
        for p in pointers {
            let left = max.saturating_sub(taken.bytes);
            match take_one(agent_git, &store, &p, left) {
                Ok(Took::Copied) => {
                    taken.copied += 1;
                    taken.bytes += p.size;
                }
                Ok(Took::Had | Took::Absent) => {}
                Err(why) => taken
                    .refused
                    .push(format!("LFS object {}: refused: {why}", p.oid)),
            }
        }
        Ok(taken)
    }

    /// The LFS pointers among the blobs reachable from `to` and not from `from`, each once.
    fn new_pointers(&self, from: Option<&str>, to: &str) -> Result<Vec<Pointer>, GitError> {
        let mut args = vec!["rev-list", "--objects", "--no-object-names", to];
        if let Some(from) = from {
            args.extend(["--not", from]);
        }
        let listed = self.git.unmonitored().run(&args, None)?;
        let odb = self.repo.odb()?;
        let mut pointers = std::collections::BTreeSet::new();
        for hex in String::from_utf8_lossy(&listed).lines() {
            let Ok(id) = git2::Oid::from_str(hex.trim()) else {
                continue;
            };
            let Ok((size, kind)) = odb.read_header(id) else {
                continue;
            };
            if kind != git2::ObjectType::Blob || size >= POINTER_MAX {
                continue;
            }
            if let Some(p) = odb.read(id).ok().and_then(|o| parse_pointer(o.data())) {
                pointers.insert(p);
            }
        }
        Ok(pointers.into_iter().collect())
    }

    /// The repository's LFS store: `git lfs env`'s `LocalMediaDir`, else (no git-lfs)
    /// `<common git directory>/lfs/objects`, where git-lfs keeps it unless told otherwise.
    fn lfs_store(&self) -> PathBuf {
        let said = self.git.unmonitored().run(&["lfs", "env"], None);
        said.ok()
            .and_then(|out| {
                String::from_utf8_lossy(&out)
                    .lines()
                    .find_map(|l| l.strip_prefix("LocalMediaDir=").map(PathBuf::from))
            })
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| self.repo.commondir().join("lfs/objects"))
    }
}

/// The object of `p` taken from the agent's git directory `agent_git` into `store`, with at
/// most `left` bytes to go; `Err` says why it is refused.
fn take_one(agent_git: &Path, store: &Path, p: &Pointer, left: u64) -> Result<Took, String> {
    let rel: PathBuf = ["lfs/objects", &p.oid[..2], &p.oid[2..4], &p.oid]
        .iter()
        .collect();
    let dest = store.join(&p.oid[..2]).join(&p.oid[2..4]).join(&p.oid);
    if dest
        .symlink_metadata()
        .is_ok_and(|m| m.is_file() && m.len() == p.size)
    {
        return Ok(Took::Had);
    }
    let (file, meta) = match crate::files::open_unlinked(agent_git, &rel) {
        Ok(opened) => opened,
        Err(e) if e.is_missing() => return Ok(Took::Absent),
        Err(crate::files::ReadError::NotRegular { kind, .. }) => {
            return Err(format!("it is {kind} in the agent's git directory"));
        }
        Err(e) => return Err(e.to_string()),
    };
    if meta.len() != p.size {
        return Err(format!(
            "it holds {} bytes, its pointer says {}",
            meta.len(),
            p.size
        ));
    }
    if p.size > left {
        return Err(format!(
            "its {} bytes are more than {MAX_ENV} leaves for this fetch ({left} bytes)",
            p.size
        ));
    }
    copy_checked(file, &dest, p)?;
    Ok(Took::Copied)
}

/// Stream `file` into a temporary file beside `dest`, hashing it; renamed to `dest` only when
/// it held exactly the pointer's size and its sha256 is the pointer's oid.
fn copy_checked(file: std::fs::File, dest: &Path, p: &Pointer) -> Result<(), String> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    let cannot = |e: std::io::Error| format!("it cannot be written to {}: {e}", dir.display());
    crate::files::create_dir_all(dir).map_err(cannot)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".ralph-lfs-")
        .tempfile_in(dir)
        .map_err(cannot)?;
    let mut hash = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut seen: u64 = 0;
    // Never more than one byte past the size: a file that grows is refused, not read on.
    let mut from = file.take(p.size + 1);
    loop {
        let n = from
            .read(&mut buf)
            .map_err(|e| format!("it cannot be read: {e}"))?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        hash.update(&buf[..n]);
        tmp.write_all(&buf[..n]).map_err(cannot)?;
    }
    if seen != p.size {
        return Err(format!("it changed while read ({seen} bytes)"));
    }
    let got: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if got != p.oid {
        return Err(format!("its content's sha256 is {got}, not its oid"));
    }
    let perms = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    tmp.as_file().set_permissions(perms).map_err(cannot)?;
    tmp.persist(dest).map_err(|e| cannot(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OID: &str = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";

    #[test]
    fn a_pointer_is_git_lfs_s_text_and_nothing_else() {
        let text = format!("{VERSION}\noid sha256:{OID}\nsize 12\n");
        let want = Pointer {
            oid: OID.into(),
            size: 12,
        };
        assert_eq!(parse_pointer(text.as_bytes()), Some(want.clone()));
        let ext = format!("{VERSION}\next-0-foo sha256:{OID}\noid sha256:{OID}\nsize 12\n");
        assert_eq!(parse_pointer(ext.as_bytes()), Some(want));
        for bad in [
            format!("{VERSION}\noid sha256:{OID}\nsize 12"),
            format!("version 2\noid sha256:{OID}\nsize 12\n"),
            format!("{VERSION}\noid sha256:{}\nsize 12\n", OID.to_uppercase()),
            format!("{VERSION}\noid sha256:{}\nsize 12\n", &OID[1..]),
            format!("{VERSION}\noid sha256:../../{}\nsize 12\n", &OID[6..]),
            format!("{VERSION}\noid md5:{OID}\nsize 12\n"),
            format!("{VERSION}\noid sha256:{OID}\nsize -1\n"),
            format!("{VERSION}\noid sha256:{OID}\n"),
            format!(
                "{VERSION}\noid sha256:{OID}\nsize 12\n{}",
                "x".repeat(POINTER_MAX)
            ),
        ] {
            assert_eq!(parse_pointer(bad.as_bytes()), None, "{bad:.200}");
        }
    }
}
