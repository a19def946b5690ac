//! The repository in the sandbox: its work tree pinned onto itself (writable, but not to be
//! moved aside), its git directories out of the agent's reach (the agent's own is bound where
//! they are, `agent_git.rs`), and every file git reads configuration from for it read-only
//! wherever the agent could write it — ralph's own git commands read them outside.

use std::path::{Path, PathBuf};

use super::RepoPaths;
use super::paths::{Make, normal, pinnable, within};
use crate::error::{Error, Result};

/// The repository's binds.
#[derive(Debug, Default)]
pub(super) struct RepoBinds {
    /// Bound onto themselves, outer ones first: the work tree, `.ralph` (writable), and a
    /// worktree loop's common git directory ([`Self::sealed`]).
    pub(crate) pinned: Vec<PathBuf>,
    /// Those of [`Self::pinned`] bound read-only: a worktree loop's common git directory,
    /// which holds its work tree (bound writable after it) and every other loop's.
    pub(crate) sealed: Vec<PathBuf>,
    /// Bound read-only: git's configuration files in the agent's reach, a `.git` file,
    /// `.ralph/config.toml`.
    pub(crate) read_only: Vec<PathBuf>,
}

/// The binds for `repo`, where `writable` are the other places the agent can write (the CLI's
/// state, `sandbox_writable`). A configuration file git would read that does not exist yet, in a
/// place the agent can write (a `config.worktree`, a missing include target), is created empty
/// first: else the agent could plant it.
pub(super) fn repo_binds(repo: &RepoPaths, writable: &[PathBuf], make: Make) -> Result<RepoBinds> {
    check_commondir(repo)?;
    // A worktree loop's common git directory holds its work tree: read-only, with this loop's
    // work tree bound writable after it. The git directories themselves are never the agent's
    // to write: its own is bound where they are (`agent_git.rs`).
    let sealed: Vec<PathBuf> = (repo.common_dir != repo.git_dir)
        .then(|| repo.common_dir.clone())
        .into_iter()
        .collect();
    let mut pinned = pinned_dirs(repo);
    pinned.extend(sealed.iter().cloned());
    pinned.sort_by_key(|p| p.components().count());
    pinned.dedup();
    let reach: Vec<PathBuf> = pinned
        .iter()
        .filter(|p| !sealed.contains(p))
        .chain(writable)
        .map(|p| normal(p))
        .collect();
    let mut read_only = Vec::new();
    for file in [
        repo.work_tree.join(".git"),
        repo.work_tree.join(".ralph/config.toml"),
    ] {
        // A link planted there (between runs: bound, none can be made during one) is refused
        // by name, not followed: bwrap would mount over what it leads to.
        pinnable(&file, &reach)?;
        if file.is_file() {
            read_only.push(normal(&file));
        }
    }
    for file in config_files(repo)? {
        pinnable(&file, &reach)?;
        let file = normal(&file);
        if within(&file, &reach) {
            make.file(&file, b"")?;
            read_only.push(file);
        }
    }
    read_only.sort();
    read_only.dedup();
    Ok(RepoBinds {
        pinned,
        sealed,
        read_only,
    })
}

/// The directories bound onto themselves: the work tree and `.ralph`. A mount point cannot be
/// renamed or removed, so the agent cannot put another `.ralph` in its place (nor, the git
/// directory being bound over `.git`, another `.git`).
fn pinned_dirs(repo: &RepoPaths) -> Vec<PathBuf> {
    let mut pinned = vec![repo.work_tree.clone()];
    let ralph = repo.work_tree.join(".ralph");
    // A link there would have bwrap bind where it leads, writable (ralph makes `.ralph` a real
    // directory before the sandbox; a dry run shows it unbound).
    if ralph.is_dir() && !ralph.is_symlink() {
        pinned.push(ralph);
    }
    pinned
}

/// Every file git reads configuration from for this repository, or would read once it exists:
/// the repository's own (`config`, both `config.worktree`s), the user's global ones, the files
/// `git config --list --show-origin` names, and every `include.path` / `includeIf.*.path`
/// target at any level, whatever its condition (the agent can switch branches or directories).
fn config_files(repo: &RepoPaths) -> Result<Vec<PathBuf>> {
    let mut files = vec![
        repo.git_dir.join("config"),
        repo.git_dir.join("config.worktree"),
        repo.common_dir.join("config"),
        repo.common_dir.join("config.worktree"),
    ];
    files.extend(global_files());
    let listed = git_config_list(repo)?;
    for entry in parse_list(&listed) {
        let Some(origin) = entry
            .origin
            .map(|o| absolute(&repo.work_tree, Path::new(o)))
        else {
            continue;
        };
        if let Some(include) = include_of(&entry, &origin) {
            files.push(include.target);
        }
        files.push(origin);
    }
    Ok(files)
}

/// A file git's configuration includes for this repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Include {
    /// The file included, resolved as git resolves it (beside the including file).
    pub(crate) target: PathBuf,
    /// The key that includes it (`include.path`, `includeIf.<condition>.path`).
    pub(crate) key: String,
    /// The file that says so.
    pub(crate) from: PathBuf,
}

/// Every `include.path` / `includeIf.*.path` target of the configuration git reads for `repo`
/// (the repository's own files, the user's, and what they include in turn), whatever its
/// condition.
pub(crate) fn includes(repo: &RepoPaths) -> Result<Vec<Include>> {
    let listed = git_config_list(repo)?;
    Ok(parse_list(&listed)
        .iter()
        .filter_map(|entry| {
            let origin = absolute(&repo.work_tree, Path::new(entry.origin?));
            include_of(entry, &origin)
        })
        .collect())
}

fn include_of(entry: &Entry<'_>, origin: &Path) -> Option<Include> {
    if !is_include(entry.key) {
        return None;
    }
    Some(Include {
        target: include_target(origin, entry.value?)?,
        key: entry.key.to_string(),
        from: origin.to_path_buf(),
    })
}

/// The user's global configuration files, as git finds them (`GIT_CONFIG_GLOBAL` wins).
fn global_files() -> Vec<PathBuf> {
    if let Some(g) = std::env::var_os("GIT_CONFIG_GLOBAL").filter(|g| !g.is_empty()) {
        return vec![PathBuf::from(g)];
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|x| !x.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let mut out: Vec<PathBuf> = home.iter().map(|h| h.join(".gitconfig")).collect();
    out.extend(xdg.map(|x| x.join("git/config")));
    out.retain(|p| p.is_absolute());
    out
}

/// `git config --list --show-origin -z` on the repository, as ralph's git sees it.
fn git_config_list(repo: &RepoPaths) -> Result<Vec<u8>> {
    let mut cmd = std::process::Command::new("git");
    cmd.arg("--git-dir")
        .arg(&repo.git_dir)
        .arg("--work-tree")
        .arg(&repo.work_tree)
        .args(["config", "--list", "--show-origin", "-z"])
        .env("GIT_COMMON_DIR", &repo.common_dir)
        .current_dir(&repo.work_tree)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    crate::git::memory::bound(&mut cmd);
    let out = cmd
        .output()
        .map_err(|e| Error::io("failed to run `git config --list`", e))?;
    if !out.status.success() {
        return Err(Error::user(format!(
            "--sandbox: `git config --list --show-origin` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// One entry of `git config --list --show-origin -z`.
#[derive(Debug, PartialEq, Eq)]
struct Entry<'a> {
    /// The file it came from (`file:` origins only).
    origin: Option<&'a str>,
    key: &'a str,
    value: Option<&'a str>,
}

/// `origin NUL key [LF value] NUL`, repeated.
fn parse_list(bytes: &[u8]) -> Vec<Entry<'_>> {
    let text = std::str::from_utf8(bytes).unwrap_or_default();
    let mut fields = text.split('\0');
    let mut out = Vec::new();
    while let (Some(origin), Some(item)) = (fields.next(), fields.next()) {
        let (key, value) = match item.split_once('\n') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        out.push(Entry {
            origin: origin.strip_prefix("file:"),
            key,
            value,
        });
    }
    out
}

fn is_include(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"))
}

/// An include's target as git resolves it: `~/` under `$HOME`, a relative path beside the file
/// that includes it.
fn include_target(including: &Path, value: &str) -> Option<PathBuf> {
    if value.is_empty() || value.starts_with("%(prefix)") {
        return None;
    }
    if let Some(rest) = value.strip_prefix("~/") {
        return std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest));
    }
    Some(absolute(including.parent()?, Path::new(value)))
}

fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// A git directory with a `commondir` file must be a linked worktree's (`<common>/worktrees/
/// <name>`, pointing back at `<common>`): an agent could have written one into `.git` to hand
/// ralph's own git commands a configuration of its own.
pub(super) fn check_commondir(repo: &RepoPaths) -> Result<()> {
    let file = repo.git_dir.join("commondir");
    if !file.exists() {
        return Ok(());
    }
    let expected = repo.git_dir.parent().and_then(Path::parent);
    let text = std::fs::read_to_string(&file).map_err(|e| Error::file("read", &file, e))?;
    let target = repo.git_dir.join(text.trim());
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    match expected {
        Some(e) if same(&target, e) && same(e, &repo.common_dir) => Ok(()),
        _ => Err(Error::user(format!(
            "{}: points the git directory at `{}`, which is not the repository's own: refusing to run ralph's git commands on it under --sandbox",
            file.display(),
            target.display()
        ))
        .with_hint("remove that file if you did not put it there (an agent may have)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_parses_into_origins_keys_and_values() {
        let raw = b"file:/h/.gitconfig\0user.name\nA B\0file:.git/config\0include.path\nx.inc\0command line:\0core.bare\0";
        let got = parse_list(raw);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].origin, Some("/h/.gitconfig"));
        assert_eq!(got[0].value, Some("A B"));
        assert_eq!(got[1].key, "include.path");
        assert_eq!(got[2].origin, None);
        assert_eq!(got[2].value, None);
        assert!(is_include("includeIf.onbranch:main.path"));
        assert!(is_include("include.path"));
        assert!(!is_include("include.other"));
    }

    #[test]
    fn include_targets_resolve_beside_the_including_file() {
        let inc = |v: &str| include_target(Path::new("/r/.git/config"), v);
        assert_eq!(
            inc("extra.config"),
            Some(PathBuf::from("/r/.git/extra.config"))
        );
        assert_eq!(inc("../x.inc"), Some(PathBuf::from("/r/.git/../x.inc")));
        assert_eq!(inc("/etc/x"), Some(PathBuf::from("/etc/x")));
        assert_eq!(inc(""), None);
    }

    fn init(dir: &Path) -> RepoPaths {
        let ok = std::process::Command::new("git")
            .args(["init", "-q"])
            .arg(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok);
        RepoPaths {
            work_tree: dir.to_path_buf(),
            git_dir: dir.join(".git"),
            common_dir: dir.join(".git"),
        }
    }

    #[test]
    fn config_files_in_reach_are_read_only_and_missing_ones_created_empty() {
        let d = tempfile::tempdir().unwrap();
        let repo = init(d.path());
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .current_dir(d.path())
                .args(args)
                .status()
                .unwrap()
        };
        git(&["config", "include.path", "planted.config"]);
        git(&[
            "config",
            "includeIf.onbranch:nowhere.path",
            "../inc/other.config",
        ]);
        git(&[
            "config",
            "--add",
            "include.path",
            "/nonexistent-ralph-test/x.config",
        ]);
        let b = repo_binds(&repo, &[], Make::Create).unwrap();
        let git_dir = d.path().join(".git");
        for f in [
            git_dir.join("config"),
            git_dir.join("config.worktree"),
            git_dir.join("planted.config"),
            d.path().join("inc/other.config"),
        ] {
            assert!(b.read_only.contains(&f), "{f:?} in {:?}", b.read_only);
            assert!(f.is_file(), "{f:?} exists");
        }
        // Outside the agent's reach: left alone.
        assert!(!Path::new("/nonexistent-ralph-test").exists());
        assert!(
            b.read_only
                .iter()
                .all(|p| !p.starts_with("/nonexistent-ralph-test"))
        );
    }

    #[test]
    fn a_commondir_in_a_main_git_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let git = d.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        let repo = RepoPaths {
            work_tree: d.path().into(),
            git_dir: git.clone(),
            common_dir: git.clone(),
        };
        assert!(check_commondir(&repo).is_ok());
        std::fs::create_dir_all(d.path().join("evil")).unwrap();
        std::fs::write(git.join("commondir"), "../evil\n").unwrap();
        let e = check_commondir(&repo).unwrap_err().to_string();
        assert!(e.contains("commondir"), "{e}");
    }
}
