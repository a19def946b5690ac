//! No link leads ralph out of a repository (SPEC §4): every file ralph opens, creates, renames
//! or removes inside a repository it opened is resolved *beneath* that repository's root, so a
//! symbolic link the agent planted may point anywhere inside the tree, never out of it. A
//! sandboxed agent cannot read `~/.netrc`; if it links `.ralph/progress.md` to it, ralph, which
//! runs outside, must not read the secret for it, nor write through a link into `~/.bashrc`.
//!
//! The trees are registered once, when a repository is opened ([`confine`], called by
//! `git::Repo::discover` for the work tree and its git directories), and every open in this
//! module consults them: a caller cannot forget the rule, and a path outside every registered
//! tree (the user's own configuration, ralph's state directory) opens as usual. On Linux the
//! kernel resolves the path (`openat2` with `RESOLVE_BENEATH`, no magic links); where that call
//! is missing (Linux before 5.6, other systems) each component is opened without following any
//! symbolic link, so a link inside the tree is refused too.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::RwLock;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use rustix::fs::FileType;

/// The roots of the trees ralph must not be led out of: each as given and as the file system
/// resolves it (a root reached through a link of the user's, such as `/tmp` on macOS).
static TREES: RwLock<Vec<(PathBuf, PathBuf)>> = RwLock::new(Vec::new());

/// Never leave the tree at `root` (a work tree or a git directory) when opening a path inside
/// it, for the rest of the process.
pub(crate) fn confine(root: &Path) {
    let Ok(lexical) = std::path::absolute(root) else {
        return;
    };
    let lexical: PathBuf = lexical.components().collect();
    let canonical = lexical.canonicalize().unwrap_or_else(|_| lexical.clone());
    let mut trees = TREES
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !trees.iter().any(|(l, _)| *l == lexical) {
        trees.push((lexical, canonical));
    }
}

/// The error of a path that leaves its tree: `EXDEV`, as `openat2` reports it.
pub(super) fn is_outside(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(Errno::EXDEV as i32)
}

/// Where `path` lies: the root of the innermost registered tree holding it and the path
/// relative to that root (which may still try to climb out with `..`: the open refuses that).
fn locate(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let abs: PathBuf = std::path::absolute(path).ok()?.components().collect();
    let trees = TREES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    trees
        .iter()
        .flat_map(|(l, c)| [l, c])
        .filter_map(|root| Some((root, abs.strip_prefix(root).ok()?)))
        .max_by_key(|(root, _)| root.as_os_str().len())
        .map(|(root, rel)| (root.clone(), rel.to_path_buf()))
}

/// Open `path` with `flags` (and `mode` when creating), confined to its tree if it lies in one.
pub(super) fn open(path: &Path, flags: OFlag, mode: Mode) -> std::io::Result<std::fs::File> {
    let flags = flags | OFlag::O_CLOEXEC;
    let fd = match locate(path) {
        None => nix::fcntl::open(path, flags, mode)?,
        Some((root, rel)) => {
            let dir = open_root(&root)?;
            let fd = beneath(&dir, &rel, flags, mode)?;
            not_led_into_a_nested_tree(&root, &rel, &fd)?;
            fd
        }
    };
    Ok(std::fs::File::from(fd))
}

/// A link in a work tree never leads ralph into a tree registered inside it — its git
/// directory — unless the path ralph asked for lies there itself: under `--sandbox` a main
/// tree's real `.git` is hidden from the agent, and a `.ralph/progress.md` it linked to
/// `../.git/…` would have ralph read that file for it. `EXDEV`, as for a link out of the tree.
fn not_led_into_a_nested_tree(root: &Path, rel: &Path, fd: &OwnedFd) -> std::io::Result<()> {
    let trees = TREES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let inside = |p: &PathBuf| p != root && p.starts_with(root);
    let nested: Vec<&PathBuf> = trees
        .iter()
        .filter(|(l, c)| inside(l) || inside(c))
        .flat_map(|(l, c)| [l, c])
        .collect();
    let asked = root.join(rel);
    // Most opens: no tree inside this one, or the path asked for lies in it (no readlink).
    if nested.is_empty() || nested.iter().any(|n| asked.starts_with(n)) {
        return Ok(());
    }
    let real = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(fd)
    ))?;
    if nested.iter().any(|n| real.starts_with(n)) {
        return Err(Errno::EXDEV.into());
    }
    Ok(())
}

/// Open `rel` beneath `root` following no symbolic link at all, on the way or at the end (a
/// file ralph obeys that the agent may have written: a config layer). A link anywhere is
/// `ELOOP` (or `EXDEV`, [`is_outside`], where the component walk met it).
pub(super) fn open_unlinked(
    root: &Path,
    rel: &Path,
    flags: OFlag,
) -> std::io::Result<std::fs::File> {
    let dir = open_root(root)?;
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{OpenHow, ResolveFlag, openat2};
        let how = OpenHow::new()
            .flags(flags)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        for _ in 0..4 {
            match openat2(dir.as_fd(), rel, how) {
                Err(Errno::ENOSYS | Errno::EPERM) => break,
                Err(Errno::EAGAIN) => continue,
                other => return Ok(std::fs::File::from(other?)),
            }
        }
    }
    by_components(&dir, rel, flags, Mode::empty()).map(std::fs::File::from)
}

fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// `rel` opened from the directory `dir`, never resolving outside it.
fn beneath(dir: &OwnedFd, rel: &Path, flags: OFlag, mode: Mode) -> std::io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{OpenHow, ResolveFlag, openat2};
        let how = OpenHow::new()
            .flags(flags)
            .mode(mode)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        // EAGAIN: a rename elsewhere raced the lookup (the kernel asks to retry); after a few,
        // the component walk below decides.
        for _ in 0..4 {
            match openat2(dir.as_fd(), rel, how) {
                Err(Errno::ENOSYS | Errno::EPERM) => break,
                Err(Errno::EAGAIN) => continue,
                other => return Ok(other?),
            }
        }
    }
    by_components(dir, rel, flags, mode)
}

/// Without `openat2`: each directory opened without following a link, `..` refused, the last
/// component opened with `flags` (a link there refused too, unless the tree has none).
fn by_components(dir: &OwnedFd, rel: &Path, flags: OFlag, mode: Mode) -> std::io::Result<OwnedFd> {
    let parts: Vec<&OsStr> = rel
        .components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Errno::EXDEV.into()),
        })
        .collect::<std::io::Result<_>>()?;
    let Some((last, dirs)) = parts.split_last() else {
        return Ok(nix::fcntl::openat(dir.as_fd(), ".", flags, mode)?);
    };
    let mut cur: Option<OwnedFd> = None;
    for d in dirs {
        let at = cur.as_ref().unwrap_or(dir);
        let next = nix::fcntl::openat(
            at.as_fd(),
            *d,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            // A link where a directory was expected: not followed here.
            Errno::ELOOP | Errno::ENOTDIR if is_link(at, d) => Errno::EXDEV,
            e => e,
        })?;
        cur = Some(next);
    }
    let at = cur.as_ref().unwrap_or(dir);
    match nix::fcntl::openat(at.as_fd(), *last, flags | OFlag::O_NOFOLLOW, mode) {
        Err(Errno::ELOOP) if !flags.contains(OFlag::O_NOFOLLOW) => Err(Errno::EXDEV.into()),
        other => Ok(other?),
    }
}

fn is_link(dir: &OwnedFd, name: &OsStr) -> bool {
    nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

/// The directory holding `path` (opened confined, created when `create`) and the name in it.
fn parent_of(path: &Path, create: bool) -> std::io::Result<(OwnedFd, std::ffi::OsString)> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: no file name", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if create {
        create_dir_all(&parent)?;
    }
    let dir = open(&parent, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())?;
    Ok((OwnedFd::from(dir), name.to_os_string()))
}

/// `mkdir -p` inside the tree: every directory created or found beneath its root.
pub(crate) fn create_dir_all(path: &Path) -> std::io::Result<()> {
    let Some((root, rel)) = locate(path) else {
        return std::fs::create_dir_all(path);
    };
    let root_fd = open_root(&root)?;
    let mut so_far = PathBuf::new();
    for c in rel.components() {
        so_far.push(c);
        let dir = OFlag::O_PATH | OFlag::O_DIRECTORY;
        if beneath(&root_fd, &so_far, dir, Mode::empty()).is_ok() {
            continue;
        }
        let (parent, name) = match so_far.parent() {
            Some(p) if !p.as_os_str().is_empty() => (beneath(&root_fd, p, dir, Mode::empty())?, c),
            _ => (root_fd.try_clone()?, c),
        };
        match nix::sys::stat::mkdirat(
            parent.as_fd(),
            name.as_os_str(),
            Mode::from_bits_truncate(0o777),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        beneath(&root_fd, &so_far, dir, Mode::empty())?;
    }
    Ok(())
}

/// Replace `path` whole: a temporary file beside it (never through a link), synced, renamed
/// over it — a link at `path` is replaced, never written through. The file keeps the mode of
/// the one it replaces (else `mode`, less the umask).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let (dir, name) = parent_of(path, false)?;
    let keep = nix::sys::stat::fstatat(
        dir.as_fd(),
        name.as_os_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .ok()
    .filter(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    .map(|st| st.st_mode & 0o7777);
    let (tmp, fd) = create_temp(&dir, Mode::from_bits_truncate(keep.unwrap_or(mode)))?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| match keep {
            // The umask does not apply to a mode kept from the file replaced.
            Some(m) => file.set_permissions(std::fs::Permissions::from_mode(m)),
            None => Ok(()),
        })
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            Ok(nix::fcntl::renameat(
                dir.as_fd(),
                tmp.as_str(),
                dir.as_fd(),
                name.as_os_str(),
            )?)
        });
    if written.is_err() {
        let _ = nix::unistd::unlinkat(
            dir.as_fd(),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    written
}

/// A new file in `dir` under a name nobody can predict (`.tmp-` and 32 random hexadecimal
/// digits), created exclusively: whatever the agent made in the directory beforehand (a link, a
/// FIFO, a directory under a name it guessed) is never opened, nor can it stop the write. A
/// name taken after all is passed over for another.
fn create_temp(dir: &OwnedFd, mode: Mode) -> std::io::Result<(String, OwnedFd)> {
    let mut last = None;
    for _ in 0..8 {
        let tmp = format!(".tmp-{}", random_hex()?);
        match nix::fcntl::openat(
            dir.as_fd(),
            tmp.as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            mode,
        ) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(e @ Errno::EEXIST) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.unwrap_or(Errno::EEXIST).into())
}

/// 32 random hexadecimal digits, from the system's generator.
fn random_hex() -> std::io::Result<String> {
    use std::fmt::Write;
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// Append to `path` (created when missing) inside its tree: a link to another file of the
/// tree is followed, a link out of it refused.
pub(crate) fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = open(
        path,
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NONBLOCK,
        Mode::from_bits_truncate(0o666),
    )?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{}: not a regular file",
            path.display()
        )));
    }
    f.write_all(bytes)
}

/// Remove the entry at `path` itself (a link is removed, not what it points to).
pub(super) fn remove_entry(path: &Path) -> std::io::Result<()> {
    let (dir, name) = parent_of(path, false)?;
    Ok(nix::unistd::unlinkat(
        dir.as_fd(),
        name.as_os_str(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    )?)
}

/// Rename the entry at `from` to `to`, a name in the same directory.
pub(super) fn rename_entry(from: &Path, to: &OsStr) -> std::io::Result<()> {
    let (dir, name) = parent_of(from, false)?;
    Ok(nix::fcntl::renameat(
        dir.as_fd(),
        name.as_os_str(),
        dir.as_fd(),
        to,
    )?)
}

/// Create the directory `path` (its parent must exist), mode `mode`, inside its tree.
pub(super) fn make_dir(path: &Path, mode: u32) -> std::io::Result<()> {
    let (dir, name) = parent_of(path, false)?;
    Ok(nix::sys::stat::mkdirat(
        dir.as_fd(),
        name.as_os_str(),
        Mode::from_bits_truncate(mode),
    )?)
}

/// What is at `path` itself (a link is not followed), looked up inside its tree.
pub(super) fn entry_kind(path: &Path) -> std::io::Result<FileType> {
    let (dir, name) = parent_of(path, false)?;
    let st = nix::sys::stat::fstatat(
        dir.as_fd(),
        name.as_os_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )?;
    Ok(FileType::from_raw_mode(st.st_mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registered tree with a secret beside it, outside.
    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("repo");
        std::fs::create_dir_all(root.join("docs/real")).unwrap();
        let secret = d.path().join("netrc");
        std::fs::write(&secret, "machine example password hunter2\n").unwrap();
        confine(&root);
        (d, root, secret)
    }

    fn read(p: &Path) -> std::io::Result<String> {
        use std::io::Read;
        let mut s = String::new();
        open(p, OFlag::O_RDONLY, Mode::empty())?.read_to_string(&mut s)?;
        Ok(s)
    }

    #[test]
    fn links_inside_the_tree_are_followed_and_links_out_are_refused() {
        let (_d, root, secret) = tree();
        std::fs::write(root.join("docs/real/a.md"), "inside\n").unwrap();
        std::os::unix::fs::symlink("real/a.md", root.join("docs/in.md")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("docs/out.md")).unwrap();
        std::os::unix::fs::symlink("../../netrc", root.join("docs/up.md")).unwrap();
        std::os::unix::fs::symlink(secret.parent().unwrap(), root.join("away")).unwrap();
        assert_eq!(read(&root.join("docs/in.md")).unwrap(), "inside\n");
        for p in [
            "docs/out.md",
            "docs/up.md",
            "away/netrc",
            "docs/../../netrc",
        ] {
            let e = read(&root.join(p)).unwrap_err();
            assert!(is_outside(&e), "{p}: {e}");
        }
        // Outside every tree, a path opens as usual (the control: the secret is readable).
        assert!(read(&secret).unwrap().contains("hunter2"));
    }

    #[test]
    fn a_link_in_the_work_tree_never_leads_into_its_git_directory() {
        let (_d, root, _secret) = tree();
        let git = root.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("SECRET"), "in the git dir\n").unwrap();
        confine(&git);
        std::fs::write(root.join("docs/real/a.md"), "inside\n").unwrap();
        std::os::unix::fs::symlink("../.git/SECRET", root.join("docs/into-git.md")).unwrap();
        std::os::unix::fs::symlink(".git", root.join("gitlink")).unwrap();
        std::os::unix::fs::symlink("real/a.md", root.join("docs/in.md")).unwrap();
        for p in ["docs/into-git.md", "gitlink/SECRET"] {
            let e = read(&root.join(p)).unwrap_err();
            assert!(is_outside(&e), "{p}: {e}");
        }
        // Control: the git directory's file by its own path, and a link within the work tree.
        assert_eq!(read(&git.join("SECRET")).unwrap(), "in the git dir\n");
        assert_eq!(read(&root.join("docs/in.md")).unwrap(), "inside\n");
    }

    #[test]
    fn writes_never_go_through_a_link_out_of_the_tree() {
        let (_d, root, secret) = tree();
        std::os::unix::fs::symlink(&secret, root.join("progress.md")).unwrap();
        write_atomic(&root.join("progress.md"), b"mine\n", 0o644).unwrap();
        assert!(read(&secret).unwrap().contains("hunter2"));
        assert_eq!(
            std::fs::read_to_string(root.join("progress.md")).unwrap(),
            "mine\n"
        );
        std::os::unix::fs::symlink(&secret, root.join(".gitignore")).unwrap();
        assert!(is_outside(
            &append(&root.join(".gitignore"), b"x\n").unwrap_err()
        ));
        std::os::unix::fs::symlink(secret.parent().unwrap(), root.join("plans")).unwrap();
        assert!(is_outside(
            &create_dir_all(&root.join("plans/new")).unwrap_err()
        ));
        assert!(!secret.parent().unwrap().join("new").exists());
        let e = write_atomic(&root.join("plans/log.md"), b"x", 0o644).unwrap_err();
        assert!(is_outside(&e), "{e}");
        assert!(!secret.parent().unwrap().join("log.md").exists());
        // Inside the tree, directories are made as `mkdir -p` would.
        create_dir_all(&root.join("docs/plans/deep")).unwrap();
        assert!(root.join("docs/plans/deep").is_dir());
    }

    #[test]
    fn an_atomic_write_keeps_the_mode_of_the_file_it_replaces() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, root, _) = tree();
        let p = root.join("run.sh");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o751)).unwrap();
        write_atomic(&p, b"new", 0o600).unwrap();
        let m = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(m & 0o777, 0o751);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
    }

    #[test]
    fn without_openat2_every_link_is_refused_and_plain_paths_work() {
        let (_d, root, secret) = tree();
        std::fs::write(root.join("docs/real/a.md"), "inside\n").unwrap();
        std::os::unix::fs::symlink("real/a.md", root.join("docs/in.md")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("docs/out.md")).unwrap();
        let dir = open_root(&root).unwrap();
        let rd = |rel: &str| by_components(&dir, Path::new(rel), OFlag::O_RDONLY, Mode::empty());
        assert!(rd("docs/real/a.md").is_ok());
        for rel in ["docs/in.md", "docs/out.md", "../netrc"] {
            assert!(is_outside(&rd(rel).unwrap_err()), "{rel}");
        }
    }
}
