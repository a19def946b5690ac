//! Reading the files an agent can touch (SPEC §3.1, §7): only regular files (a symlink to one is
//! fine), at most a bounded size, never waiting on a FIFO or reading a device to the end.
//!
//! A task file, a PRD, an epic or a config file is written by people and agents; an agent can
//! replace it with a FIFO (an open for reading would block forever), link it to `/dev/zero` (a
//! read would never end) or grow it without bound. [`read_text`] opens without blocking, checks
//! what the open file really is, and reads at most the limit.
//!
//! Every open here is confined (`confine`): inside a repository ralph opened, a path is resolved
//! beneath its root, so no link the agent planted leads ralph's reads or writes out of it
//! (SPEC §4). ralph's own files (its logs, transcripts, prompts, lock, barriers) live where the
//! agent can write too, and ralph writes them from outside any sandbox: `own` never writes
//! through a symlink the agent planted there, nor into a FIFO.

mod confine;
mod own;

pub(crate) use confine::{append, confine, create_dir_all, write_atomic};
pub(crate) use own::{open_own, own_dir, write_own};

use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// The most any Markdown or config file ralph reads may hold.
pub(crate) const MAX_TEXT: u64 = 1024 * 1024;

/// What a path holds when it is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Directory,
    Fifo,
    Socket,
    Device,
    /// A symbolic link that leads out of the repository: never followed (SPEC §4).
    LinkOut,
    /// A symbolic link where ralph follows none (a config layer: SPEC §4).
    Link,
    Other,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Directory => "a directory",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::Device => "a device",
            Kind::LinkOut => "a symbolic link out of the repository (not followed)",
            Kind::Link => "a symbolic link (not followed)",
            Kind::Other => "not a regular file",
        })
    }
}

/// Why a file could not be read as text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("{}: no such file", .0.display())]
    Missing(PathBuf),
    #[error("{}: is {kind}, not a regular file", .path.display())]
    NotRegular { path: PathBuf, kind: Kind },
    #[error("{}: larger than {} KiB ({} bytes); ralph reads at most that", .path.display(), .limit / 1024, .size)]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("{}:{line}: not valid UTF-8", .path.display())]
    NotUtf8 { path: PathBuf, line: usize },
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ReadError {
    /// Whether the file is simply not there (deleted or renamed).
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing(_))
    }
}

/// Open a regular file (or a symlink to one inside its repository) for reading. A FIFO, a
/// socket, a device or a directory is refused at once; the open never blocks.
pub(crate) fn open_read(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), ReadError> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It has
    // no effect on regular files, which are all this reads.
    let opened = confine::open(path, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty());
    regular(path, opened, Kind::LinkOut)
}

/// The file `opened` at `path`, when it is a regular one; else why not (`link`: what a link
/// met on the way is).
fn regular(
    path: &Path,
    opened: std::io::Result<std::fs::File>,
    link: Kind,
) -> Result<(std::fs::File, std::fs::Metadata), ReadError> {
    let io = |source: std::io::Error| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_regular = |kind| ReadError::NotRegular {
        path: path.to_path_buf(),
        kind,
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Missing(path.to_path_buf()));
        }
        Err(e) if confine::is_outside(&e) => return Err(not_regular(link)),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            return Err(not_regular(Kind::Link));
        }
        // A socket (or a FIFO without a reader on some systems).
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) => {
            return Err(not_regular(kind_of(path)));
        }
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(not_regular(kind_of_type(meta.file_type())));
    }
    Ok((file, meta))
}

/// Read a regular file (or a symlink to one) of at most `limit` bytes, opened by
/// [`open_read`].
pub(crate) fn read_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (file, meta) = open_read(path)?;
    read_opened(path, file, &meta, limit)
}

/// At most `limit` bytes of the regular file `file` (at `path`, of `meta`).
fn read_opened(
    path: &Path,
    file: std::fs::File,
    meta: &std::fs::Metadata,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit,
        });
    }
    // The file may grow between the stat and the read: never read past the limit.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// A regular file at `rel` beneath `root` (a directory another may write: the agent's git
/// directory), opened following no symbolic link on the way or at the end, never blocking; a
/// link is refused, named, as a FIFO or a device is.
pub(crate) fn open_unlinked(
    root: &Path,
    rel: &Path,
) -> Result<(std::fs::File, std::fs::Metadata), ReadError> {
    let opened = confine::open_unlinked(root, rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK);
    regular(&root.join(rel), opened, Kind::Link)
}

/// [`read_text`] of a file ralph obeys that the agent may have written (a config layer in the
/// repository): `path`, which lies in `root`, opened beneath `root` following no symbolic
/// link — on the way or at the end (SPEC §4). A link is refused, named, as a FIFO or a device is.
pub(crate) fn read_text_unlinked(root: &Path, path: &Path) -> Result<String, ReadError> {
    let rel = path.strip_prefix(root).map_err(|_| ReadError::NotRegular {
        path: path.to_path_buf(),
        kind: Kind::LinkOut,
    })?;
    let opened = confine::open_unlinked(root, rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK);
    let (file, meta) = regular(path, opened, Kind::Link)?;
    utf8(path, read_opened(path, file, &meta, MAX_TEXT)?)
}

/// [`read_bytes`] as UTF-8 text, with [`MAX_TEXT`] as the limit.
pub(crate) fn read_text(path: &Path) -> Result<String, ReadError> {
    utf8(path, read_bytes(path, MAX_TEXT)?)
}

fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        ReadError::NotUtf8 {
            path: path.to_path_buf(),
            line,
        }
    })
}

/// ralph's own text in a work tree, which the agent writes too (`.ralph/progress.md`,
/// `guardrails.md`, `.gitignore`): read beneath `root` following no link, so that a link the
/// agent planted there (to a file the sandbox hides from it) is never read for it. Anything but
/// a regular file — a link, a FIFO, missing — is `None`, and ralph's next write replaces it.
pub(crate) fn read_own_text(root: &Path, path: &Path) -> Option<String> {
    read_text_unlinked(root, path).ok()
}

/// [`read_text`], with a missing file as `None`.
pub(crate) fn read_text_if_exists(path: &Path) -> Result<Option<String>, ReadError> {
    match read_text(path) {
        Ok(t) => Ok(Some(t)),
        Err(ReadError::Missing(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind_of(path: &Path) -> Kind {
    std::fs::metadata(path).map_or(Kind::Other, |m| kind_of_type(m.file_type()))
}

fn kind_of_type(ft: std::fs::FileType) -> Kind {
    if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_dir() {
        Kind::Directory
    } else if ft.is_block_device() || ft.is_char_device() {
        Kind::Device
    } else {
        Kind::Other
    }
}

/// How many programs ralph has started that may have written a work tree (an agent, a check, a
/// hook, a tracker's CLI: every supervised or brief command), counted where they are spawned
/// (`proc`). ralph's own git commands do not count: what ralph learnt of a tree by its own walk
/// (`git/nested.rs`) holds until the count moves.
static WRITERS_STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A program that may write a work tree is being started.
pub(crate) fn writer_started() {
    WRITERS_STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// The count of [`writer_started`] so far.
pub(crate) fn writers_started() -> u64 {
    WRITERS_STARTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether `path` is there as a regular file (following symlinks inside its repository), without
/// reading it.
pub(crate) fn is_regular(path: &Path) -> bool {
    confine::open(path, OFlag::O_PATH, Mode::empty())
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_own_never_writes_through_a_symlink_and_moves_odd_files_aside() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let own = dir.path().join("own.log");
        std::os::unix::fs::symlink(&victim, &own).unwrap();
        open_own(&own, true).unwrap().write_all(b"mine\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(std::fs::read_to_string(&own).unwrap(), "mine\n");
        assert!(std::fs::symlink_metadata(&own).unwrap().is_file());
        // A directory and a FIFO at the path are moved aside, never waited on.
        let d = dir.path().join("d.log");
        std::fs::create_dir(&d).unwrap();
        write_own(&d, b"x").unwrap();
        assert_eq!(std::fs::read(&d).unwrap(), b"x");
        let f = dir.path().join("f.log");
        nix::unistd::mkfifo(&f, Mode::from_bits_truncate(0o600)).unwrap();
        write_own(&f, b"y").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"y");
        let aside = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".displaced-"))
            .count();
        assert_eq!(aside, 2);
    }

    #[test]
    fn open_own_never_appends_to_a_hard_link_to_another_file() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let own = dir.path().join("own.log");
        std::fs::hard_link(&victim, &own).unwrap();
        open_own(&own, true).unwrap().write_all(b"mine\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(std::fs::read_to_string(&own).unwrap(), "mine\n");
    }

    #[test]
    fn own_dir_replaces_a_linked_ralph_dir_and_leaves_other_links_alone() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::os::unix::fs::symlink(&outside, repo.join(".ralph")).unwrap();
        own_dir(&repo.join(".ralph/runs/r1")).unwrap();
        assert!(
            std::fs::symlink_metadata(repo.join(".ralph"))
                .unwrap()
                .is_dir()
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // Outside `.ralph` a linked directory is the repository's: used, never replaced.
        std::os::unix::fs::symlink(&outside, repo.join("docs")).unwrap();
        own_dir(&repo.join("docs/plans")).unwrap();
        assert!(
            std::fs::symlink_metadata(repo.join("docs"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(outside.join("plans").is_dir());
    }

    #[test]
    fn regular_files_and_symlinks_to_them_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.md");
        std::fs::write(&p, "hello\n").unwrap();
        assert_eq!(read_text(&p).unwrap(), "hello\n");
        let link = dir.path().join("link.md");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert_eq!(read_text(&link).unwrap(), "hello\n");
        assert!(
            read_text(&dir.path().join("none"))
                .unwrap_err()
                .is_missing()
        );
        assert_eq!(read_text_if_exists(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn fifo_device_and_directory_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o644)).unwrap();
        let e = read_text(&fifo).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::NotRegular {
                    kind: Kind::Fifo,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_text(&zero).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::NotRegular {
                    kind: Kind::Device,
                    ..
                }
            ),
            "{e}"
        );
        let e = read_text(dir.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn size_limit_and_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, vec![b'a'; 11]).unwrap();
        assert!(matches!(
            read_bytes(&p, 10).unwrap_err(),
            ReadError::TooLarge { size: 11, .. }
        ));
        assert_eq!(read_bytes(&p, 11).unwrap().len(), 11);
        std::fs::write(&p, b"ok\nok\n\xff\n").unwrap();
        assert!(matches!(
            read_text(&p).unwrap_err(),
            ReadError::NotUtf8 { line: 3, .. }
        ));
    }
}
