//! What the agent may write, and what it never may: ralph's state directory (SPEC §4, §11) —
//! its own record of each run, which decides over the repository's `state.json` (a resume trusts
//! it for the sandbox it pins), and the locks between loops. A place the sandbox would make
//! writable that holds it, or lies in it, is refused at the start, naming the place.
//!
//! And what it must not see: the secrets, hidden where they really lie. A `~/.netrc` or `~/.ssh`
//! that is a link (a dotfile manager's) is hidden by its target, which the link's name then leads
//! to inside; one whose target the sandbox does not show anyway (in the private `/tmp` or `/run`,
//! or missing) needs no hiding.

use std::path::{Path, PathBuf};

use super::paths::{Make, normal, within};
use crate::error::{Error, Result};

/// A place the sandbox makes writable, and how to name it to the user.
pub(super) struct Place<'a> {
    pub(super) path: &'a Path,
    pub(super) what: &'a str,
}

/// Refuse any of `places` that holds ralph's state directory `state` or lies in it.
pub(super) fn keep_state_out(state: &Path, places: &[Place<'_>]) -> Result<()> {
    for place in places {
        let p = normal(place.path);
        let holds = state.starts_with(&p);
        if !holds && !p.starts_with(state) {
            continue;
        }
        let how = if holds { "holds" } else { "lies in" };
        return Err(Error::user(format!(
            "--sandbox: {} `{}` {how} ralph's state directory `{}`: the agent could write ralph's own record of the run (and a resume trusts that record)",
            place.what,
            place.path.display(),
            state.display()
        ))
        .with_hint(
            "narrow that place so that it leaves ralph's state out, or move ralph's state elsewhere (XDG_STATE_HOME=/another/dir)",
        ));
    }
    Ok(())
}

/// The secrets to hide as bwrap can mount over them: each where it really lies, but none that
/// the sandbox does not show anyway (under one of `private`, or missing); directories apart from
/// files.
pub(super) fn hidden_targets(
    paths: &[PathBuf],
    private: &[PathBuf],
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for p in paths {
        let Ok(real) = std::fs::canonicalize(p) else {
            continue;
        };
        if within(&real, private) {
            continue;
        }
        match std::fs::metadata(&real) {
            Ok(m) if m.is_dir() => dirs.push(real),
            Ok(_) => files.push(real),
            Err(_) => {}
        }
    }
    for v in [&mut dirs, &mut files] {
        v.sort();
        v.dedup();
    }
    (dirs, files)
}

/// ralph's state directory, to be hidden whole under an empty read-only tmpfs: the agent needs
/// nothing of it, and it holds what must never reach the agent — `ralph serve`'s token (with it
/// an agent could answer its own question through the web view, or stop and merge loops) and
/// each loop's desk (a person's answer and hints). Made first (unless a dry run), so that it is
/// there to be covered before anything is written into it; `None` when there is none, when the
/// sandbox does not show it anyway (under one of `private`), or when one of `hidden` holds it.
pub(super) fn state_out_of_sight(
    state: Option<&Path>,
    private: &[PathBuf],
    hidden: &[PathBuf],
    make: Make,
) -> Result<Option<PathBuf>> {
    let Some(state) = state else { return Ok(None) };
    make.dir(state)?;
    let real = normal(state);
    if within(&real, private) || within(&real, hidden) || !real.is_dir() {
        return Ok(None);
    }
    Ok(Some(real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_holding_ralphs_state_or_inside_it_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let state = root.join("home/.local/state/ralph");
        fn place(p: &Path) -> Place<'_> {
            Place {
                path: p,
                what: "`sandbox_writable` entry",
            }
        }
        for bad in [
            root.join("home/.local"),
            root.join("home"),
            state.clone(),
            state.join("trees"),
        ] {
            let e = keep_state_out(&state, &[place(&bad)])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("sandbox_writable") && e.contains(&bad.display().to_string()),
                "{e}"
            );
        }
        for fine in [
            root.join("home/.local/share"),
            root.join("home/.local/state/ralphx"),
            root.join("home/.claude"),
        ] {
            assert!(keep_state_out(&state, &[place(&fine)]).is_ok(), "{fine:?}");
        }
    }

    #[test]
    fn a_linked_secret_is_hidden_where_it_lies_and_one_out_of_sight_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (home, dotfiles, private) = (root.join("h"), root.join("dotfiles"), root.join("run"));
        for dir in [&home, &dotfiles.join("ssh"), &private] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(dotfiles.join("netrc"), "machine x").unwrap();
        std::fs::write(private.join("aws"), "key").unwrap();
        std::os::unix::fs::symlink(dotfiles.join("netrc"), home.join(".netrc")).unwrap();
        std::os::unix::fs::symlink(dotfiles.join("ssh"), home.join(".ssh")).unwrap();
        std::os::unix::fs::symlink(private.join("aws"), home.join(".aws")).unwrap();
        std::os::unix::fs::symlink(root.join("missing"), home.join(".gnupg")).unwrap();
        std::fs::create_dir(home.join(".kube")).unwrap();
        let names: Vec<PathBuf> = [".netrc", ".ssh", ".aws", ".gnupg", ".kube"]
            .iter()
            .map(|n| home.join(n))
            .collect();
        let (dirs, files) = hidden_targets(&names, std::slice::from_ref(&private));
        assert_eq!(dirs, vec![dotfiles.join("ssh"), home.join(".kube")]);
        assert_eq!(files, vec![dotfiles.join("netrc")]);
    }

    #[test]
    fn ralphs_state_is_made_then_hidden_unless_out_of_sight_already() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let state = root.join("home/.local/state/ralph");
        let hide = |private: &[PathBuf], hidden: &[PathBuf], make| {
            state_out_of_sight(Some(&state), private, hidden, make).unwrap()
        };
        assert_eq!(
            hide(&[], &[], Make::DryRun),
            None,
            "a dry run makes nothing"
        );
        assert!(!state.exists());
        assert_eq!(hide(&[], &[], Make::Create), Some(state.clone()));
        assert!(state.is_dir());
        assert_eq!(hide(&[root.join("home")], &[], Make::Create), None);
        assert_eq!(hide(&[], &[root.join("home/.local")], Make::Create), None);
        assert_eq!(
            hide(&[], &[root.join("home/.loc")], Make::Create),
            Some(state.clone())
        );
        assert_eq!(
            state_out_of_sight(None, &[], &[], Make::Create).unwrap(),
            None
        );
    }
}
