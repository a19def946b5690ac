//! Path helpers the sandbox's rooms share: where a path really lies, whether it lies in a place,
//! and making a file or directory exist (empty) so that it can be bound read-only before the
//! agent could plant it.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// `p` with `.`/`..` resolved as the kernel would, and its symlinks resolved as far as it exists.
pub(super) fn normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if let Ok(real) = out.canonicalize() {
                    out = real;
                }
                out.pop();
            }
            other => out.push(other),
        }
    }
    let mut tail = Vec::new();
    let mut base = out.as_path();
    loop {
        if let Ok(mut real) = base.canonicalize() {
            real.extend(tail.iter().rev());
            return real;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_os_string());
                base = parent;
            }
            _ => return out,
        }
    }
}

/// Whether `p` is one of `places` or lies under one (both as [`normal`] gives them).
pub(super) fn within(p: &Path, places: &[PathBuf]) -> bool {
    places.iter().any(|place| p.starts_with(place))
}

/// `p` can be bound (pinned read-only, or writable): neither it nor a directory on its way is a
/// symbolic link in a directory that lies in one of `places` (where the agent could replace the
/// link itself — a mount follows a link, it cannot pin one, and the next run would bind what
/// the agent's link leads to).
pub(super) fn pinnable(p: &Path, places: &[PathBuf]) -> Result<()> {
    let planted = p.ancestors().find(|a| {
        std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink())
            && a.parent().is_some_and(|dir| within(&normal(dir), places))
    });
    let Some(link) = planted else {
        return Ok(());
    };
    let target = std::fs::read_link(link).unwrap_or_default();
    let through = if link == p {
        String::new()
    } else {
        format!(" (on the way to `{}`)", p.display())
    };
    Err(Error::user(format!(
        "--sandbox: `{}` is a symbolic link (to `{}`){through} where the agent can write: it could replace the link, and what it points to would be its own",
        link.display(),
        target.display()
    ))
    .with_hint(format!(
        "replace the link by the file itself: a copy, or a hard link (`ln -f '{}' '{}'`)",
        normal(link).display(),
        link.display()
    )))
}

/// Whether what the sandbox needs to exist is made, or only listed (`--dry-run`: the argv shows
/// the binds, nothing is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Make {
    Create,
    DryRun,
}

impl Make {
    /// [`ensure_file`], unless this is a dry run.
    pub(super) fn file(self, p: &Path, empty: &[u8]) -> Result<()> {
        match self {
            Make::Create => ensure_file(p, empty),
            Make::DryRun => Ok(()),
        }
    }

    /// [`ensure_dir`], unless this is a dry run.
    pub(super) fn dir(self, p: &Path) -> Result<()> {
        match self {
            Make::Create => ensure_dir(p),
            Make::DryRun => Ok(()),
        }
    }
}

/// Make `p` exist as a file holding `empty` when nothing is there (its missing directories
/// created mode 0700); whatever is there is left as it is.
pub(super) fn ensure_file(p: &Path, empty: &[u8]) -> Result<()> {
    if std::fs::symlink_metadata(p).is_ok() {
        return Ok(());
    }
    if let Some(parent) = p.parent() {
        ensure_dir(parent)?;
    }
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(p);
    match made {
        Ok(mut f) => f.write_all(empty).map_err(|e| Error::file("write", p, e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::file("create", p, e)),
    }
}

/// Make `p` exist as a directory (mode 0700 for what is created).
pub(super) fn ensure_dir(p: &Path) -> Result<()> {
    if std::fs::symlink_metadata(p).is_ok() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| Error::file("create directory", p, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_resolves_what_exists_and_the_rest_lexically() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
        assert_eq!(normal(&real.join("link/x/../y")), real.join("a/y"));
        assert_eq!(normal(&real.join("a/./b/c")), real.join("a/b/c"));
        assert!(within(&real.join("a/y"), &[real.join("a")]));
        assert!(!within(&real.join("ab"), &[real.join("a")]));
    }

    #[test]
    fn a_link_in_a_writable_place_cannot_be_pinned() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap();
        let (state, dotfiles) = (real.join("state"), real.join("dotfiles"));
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&dotfiles).unwrap();
        std::fs::write(dotfiles.join("settings.json"), "{}").unwrap();
        std::os::unix::fs::symlink(dotfiles.join("settings.json"), state.join("settings.json"))
            .unwrap();
        let places = [state.clone()];
        let e = pinnable(&state.join("settings.json"), &places)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("symbolic link") && e.contains("settings.json"),
            "{e}"
        );
        // The file it points to, a link outside the places, a missing file: fine.
        assert!(pinnable(&dotfiles.join("settings.json"), &places).is_ok());
        assert!(
            pinnable(
                &state.join("settings.json"),
                std::slice::from_ref(&dotfiles)
            )
            .is_ok()
        );
        assert!(pinnable(&state.join("missing"), &places).is_ok());
        // A link named itself as writable (its directory is not) is the user's choice.
        assert!(pinnable(&state.join("settings.json"), &[state.join("settings.json")]).is_ok());
        // A link on the way there counts as much as one at the end.
        std::fs::create_dir_all(dotfiles.join("hooks")).unwrap();
        std::os::unix::fs::symlink(dotfiles.join("hooks"), state.join("hooks")).unwrap();
        let e = pinnable(&state.join("hooks/pre.sh"), &places)
            .unwrap_err()
            .to_string();
        assert!(e.contains("on the way to") && e.contains("pre.sh"), "{e}");
    }

    #[test]
    fn ensure_file_creates_only_what_is_missing() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("x/y/settings.json");
        ensure_file(&f, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{}");
        std::fs::write(&f, "{\"a\":1}").unwrap();
        ensure_file(&f, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{\"a\":1}");
    }
}
