//! ralph's own files where the agent can write too (its logs, transcripts, prompts, barriers,
//! `COMMIT_EDITMSG`): written from outside any sandbox, so never through a link the agent
//! planted, never into a FIFO, never into a second name of someone else's file. Every open is
//! confined to its repository (`confine`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use rustix::fs::FileType;

use super::confine;

/// Open one of ralph's own files for writing, never through a symlink (`O_NOFOLLOW`) and never
/// blocking on a FIFO (`O_NONBLOCK`). A symlink found at `path` is the agent's: the link itself
/// is removed (what it points to is left alone) and the file created afresh. Anything else that
/// is not a regular file there (a directory, a FIFO, a socket, a second name of another file)
/// is moved aside to `NAME.displaced-PID` and the file created afresh, so ralph's own records go
/// on. `append`: add to the end; else start empty. The file's parent must be a real directory
/// ([`own_dir`]).
pub(crate) fn open_own(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let open = || {
        let mut flags = OFlag::O_CREAT | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
        if append {
            flags |= OFlag::O_APPEND;
        }
        confine::open(path, flags, Mode::from_bits_truncate(0o600))
    };
    let fresh = |f: std::fs::File| -> std::io::Result<std::fs::File> {
        // Emptied only once it is known to be ralph's own (O_TRUNC would empty a file the
        // agent hard-linked here before the check).
        if !append {
            f.set_len(0)?;
        }
        Ok(f)
    };
    match open() {
        // A second name for the file (a hard link the agent made to a file elsewhere) is not
        // ralph's own file: moved aside like anything else that is not.
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file() && m.nlink() == 1) => return fresh(f),
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(Errno::ELOOP as i32) => {
            confine::remove_entry(path)?;
            return fresh(open()?);
        }
        Err(e)
            if matches!(
                e.raw_os_error().map(Errno::from_raw),
                Some(Errno::EISDIR | Errno::ENXIO)
            ) => {}
        Err(e) => return Err(e),
    }
    let mut aside = path.file_name().unwrap_or_default().to_owned();
    aside.push(format!(".displaced-{}", std::process::id()));
    confine::rename_entry(path, &aside)?;
    fresh(open()?)
}

/// Write one of ralph's own files whole, through [`open_own`].
pub(crate) fn write_own(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    open_own(path, false)?.write_all(bytes)
}

/// Make `dir` (one of ralph's own directories, mode 0700) a real directory, never one reached
/// through a symlink: every component from `.ralph` down to `dir` that is a symlink the agent
/// planted is replaced by a directory (the link removed, what it points to left alone); a
/// component that is a file is an error. Directories above `.ralph` are the repository's and
/// are created as they are, inside the repository (`confine::create_dir_all`).
pub(crate) fn own_dir(dir: &Path) -> std::io::Result<()> {
    let owned: Vec<&Path> = {
        let chain: Vec<&Path> = dir.ancestors().collect();
        match chain
            .iter()
            .position(|p| matches!(p.file_name().and_then(|n| n.to_str()), Some(".ralph")))
        {
            Some(i) => chain[..=i].to_vec(),
            None => return confine::create_dir_all(dir),
        }
    };
    if let Some(top) = owned.last().and_then(|t| t.parent())
        && !top.as_os_str().is_empty()
    {
        confine::create_dir_all(top)?;
    }
    for d in owned.iter().rev() {
        match confine::entry_kind(d) {
            Ok(FileType::Directory) => {}
            Ok(FileType::Symlink) => {
                confine::remove_entry(d)?;
                confine::make_dir(d, 0o700)?;
            }
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} is not a directory", d.display()),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => confine::make_dir(d, 0o700)?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
