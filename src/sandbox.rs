//! `--sandbox` (SPEC §4): every agent attempt, and everything ralph runs on the repository's say,
//! under bubblewrap — the file system read-only but for the repository, a private `/tmp` and the
//! agent CLI's own state; the user's secrets hidden; the repository's git configuration pinned.
//!
//! [`Sandbox::wrap`] is the one place the `bwrap` argv is built. What is closed and what is not
//! is written down in ARCHITECTURE.md ("The sandbox").

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::agent::Invocation;
use crate::error::{Error, Result};

/// The Debian/Ubuntu/Fedora/Arch package that ships `bwrap`.
pub const PACKAGE: &str = "bubblewrap";

/// The network inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Net {
    /// The host's network (the agent needs its model API).
    #[default]
    Host,
    /// No network at all (`--unshare-net`): only loopback, and nothing listens there.
    None,
}

/// The merged configuration of the sandbox (SPEC §10): present when it is on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    pub net: Net,
    /// `sandbox_writable`: absolute paths (with `~` expanded), from the user's own layers only.
    pub writable: Vec<PathBuf>,
    /// `sandbox_hidden`: absolute paths hidden besides the built-in secrets.
    pub hidden: Vec<PathBuf>,
}

/// Hidden whatever the configuration says, when they exist (relative to `$HOME`).
const SECRETS: &[&str] = &[".ssh", ".aws", ".gnupg", ".config/gcloud", ".netrc"];

/// Each CLI's own state under `$HOME`: the first entry is its state directory, created when
/// missing so the CLI can write it inside the sandbox.
const CLI_STATE: &[(&str, &[&str])] = &[
    (
        "claude",
        &[".claude", ".claude.json", ".config/claude", ".cache/claude"],
    ),
    (
        "copilot",
        &[".copilot", ".config/copilot", ".cache/copilot"],
    ),
    ("codex", &[".codex", ".config/codex", ".cache/codex"]),
    ("gemini", &[".gemini", ".config/gemini", ".cache/gemini"]),
];

/// The repository as the sandbox sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPaths {
    pub work_tree: PathBuf,
    /// The git directory (`.git`, or `<common>/worktrees/<name>` for a linked worktree).
    pub git_dir: PathBuf,
    /// The common git directory (the same as `git_dir` but for linked worktrees).
    pub common_dir: PathBuf,
}

/// A sandbox resolved for one run: every path it binds, checked to exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    bwrap: PathBuf,
    net: Net,
    /// Bound writable onto themselves, in this order: the CLI's state and `sandbox_writable`.
    writable: Vec<PathBuf>,
    /// Bound writable onto themselves after the state: the work tree, the git directories, the
    /// directories on the way to the git directory's configuration. A mount point cannot be
    /// renamed or removed, so the agent cannot put another `.git` or `.ralph` in their place.
    pinned: Vec<PathBuf>,
    /// Bound read-only: the git configuration ralph's own git commands read, `.git` files,
    /// `commondir`, `.ralph/config.toml`.
    read_only: Vec<PathBuf>,
    /// Directories hidden under an empty tmpfs.
    hidden_dirs: Vec<PathBuf>,
    /// Files hidden under `/dev/null`.
    hidden_files: Vec<PathBuf>,
    /// The repository, for ralph's own git commands.
    pub repo: RepoPaths,
}

impl Sandbox {
    /// Resolve the sandbox for `agent` (a preset name, or `custom`) on `repo`. Creates the
    /// preset's missing state directory (mode 0700).
    pub fn new(config: &Config, repo: RepoPaths, agent: &str, home: Option<&Path>) -> Result<Self> {
        if !cfg!(target_os = "linux") {
            return Err(Error::user(
                "--sandbox needs Linux (bubblewrap); it is not available on this platform",
            )
            .with_hint(
                "run without --sandbox (or `sandbox = true` in the configuration), or on Linux",
            ));
        }
        let bwrap = find_bwrap()?;
        probe(&bwrap)?;
        let mut writable = Vec::new();
        if let Some(home) = home {
            writable = cli_state(home, agent)?;
        }
        writable.extend(config.writable.iter().filter(|p| p.exists()).cloned());
        let (pinned, read_only) = repo_binds(&repo)?;
        let mut hidden: Vec<PathBuf> = home
            .map(|h| SECRETS.iter().map(|s| h.join(s)).collect())
            .unwrap_or_default();
        hidden.extend(config.hidden.iter().cloned());
        let (hidden_dirs, hidden_files) = split_hidden(hidden);
        Ok(Sandbox {
            bwrap,
            net: config.net,
            writable,
            pinned,
            read_only,
            hidden_dirs,
            hidden_files,
            repo,
        })
    }

    /// `inv` run inside the sandbox: `bwrap FLAGS -- program args…`, stdin and env kept.
    pub fn wrap(&self, inv: Invocation) -> Invocation {
        let mut args: Vec<OsString> = Vec::new();
        let mut words = |ws: &[&str]| args.extend(ws.iter().map(OsString::from));
        // A session of its own: no TIOCSTI into ralph's terminal. A pid namespace: the agent
        // cannot see or signal ralph's processes, and all of it dies with the sandbox.
        words(&["--die-with-parent", "--new-session", "--unshare-pid"]);
        // As root, bwrap keeps every capability unless told otherwise (CAP_SYS_ADMIN would undo
        // the read-only binds).
        words(&["--cap-drop", "ALL"]);
        if self.net == Net::None {
            words(&["--unshare-net"]);
        }
        words(&["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        words(&["--tmpfs", "/tmp"]);
        // Later mounts cover earlier ones: the repository after the state (a repository inside
        // `~/.claude` stays pinned), read-only files inside it after it, secrets last.
        let mut bind = |flag: &str, from: &Path, to: &Path| {
            args.extend([flag.into(), from.into(), to.into()]);
        };
        for p in self.writable.iter().chain(&self.pinned) {
            bind("--bind", p, p);
        }
        for p in &self.read_only {
            bind("--ro-bind", p, p);
        }
        for p in &self.hidden_files {
            bind("--ro-bind", Path::new("/dev/null"), p);
        }
        for p in &self.hidden_dirs {
            args.extend(["--tmpfs".into(), p.into()]);
        }
        args.push("--".into());
        args.push(inv.program.into());
        args.extend(inv.args);
        Invocation {
            program: self.bwrap.to_string_lossy().into_owned(),
            args,
            stdin: inv.stdin,
            env: inv.env,
        }
    }

    /// A `std::process::Command` for `program ARGS` inside the sandbox (for git hooks).
    pub fn command(&self, program: &Path, args: &[&std::ffi::OsStr]) -> std::process::Command {
        let inv = self.wrap(Invocation {
            program: program.to_string_lossy().into_owned(),
            args: args.iter().map(|a| a.into()).collect(),
            stdin: None,
            env: Vec::new(),
        });
        let mut cmd = std::process::Command::new(inv.program);
        cmd.args(inv.args);
        cmd
    }
}

/// `bwrap` on PATH, or an error naming the package.
fn find_bwrap() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            Error::user("--sandbox needs bubblewrap, and `bwrap` is not on PATH")
                .with_hint(install_hint())
        })
}

fn install_hint() -> String {
    format!(
        "install the `{PACKAGE}` package (e.g. `apt-get install {PACKAGE}`), or run without --sandbox"
    )
}

/// A trial run (`bwrap --ro-bind / / true`): namespaces may be denied (a container without
/// user namespaces, an AppArmor rule).
fn probe(bwrap: &Path) -> Result<()> {
    let mut cmd = std::process::Command::new(bwrap);
    cmd.args(["--ro-bind", "/", "/", "--cap-drop", "ALL", "true"]);
    let brief = crate::brief::run(&mut cmd, std::time::Duration::from_secs(10))
        .map_err(|e| Error::io(format!("failed to run `{}`", bwrap.display()), e))?;
    match brief.status {
        Some(s) if s.success() => Ok(()),
        _ => Err(Error::user(format!(
            "--sandbox: `{} --ro-bind / / true` failed: {}",
            bwrap.display(),
            brief.output.trim()
        ))
        .with_hint(format!(
            "bubblewrap needs user namespaces (sysctl kernel.unprivileged_userns_clone=1, or a container allowing them); {}",
            install_hint()
        ))),
    }
}

/// The CLI's own state that exists (`custom`: every known CLI's); the preset's state directory
/// is created first when missing.
fn cli_state(home: &Path, agent: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (name, paths) in CLI_STATE {
        if agent != "custom" && agent != *name {
            continue;
        }
        if agent == *name {
            let dir = home.join(paths[0]);
            if !dir.exists() {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .map_err(|e| Error::file("create directory", &dir, e))?;
            }
        }
        out.extend(paths.iter().map(|p| home.join(p)).filter(|p| p.exists()));
    }
    Ok(out)
}

/// The repository's binds: the directories pinned (work tree, `.ralph`, git directories) and
/// the files bound read-only (git configuration, `.git` file, `commondir`, `gitdir`,
/// `.ralph/config.toml`).
fn repo_binds(repo: &RepoPaths) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    check_commondir(repo)?;
    let mut pinned = vec![repo.work_tree.clone()];
    let ralph = repo.work_tree.join(".ralph");
    if ralph.is_dir() {
        pinned.push(ralph.clone());
    }
    if repo.common_dir != repo.git_dir {
        pinned.push(repo.common_dir.clone());
        if let Some(worktrees) = repo.git_dir.parent() {
            pinned.push(worktrees.to_path_buf());
        }
    }
    pinned.push(repo.git_dir.clone());
    let mut read_only = vec![
        repo.git_dir.join("config"),
        repo.git_dir.join("config.worktree"),
        repo.git_dir.join("commondir"),
        repo.git_dir.join("gitdir"),
        repo.common_dir.join("config"),
        repo.common_dir.join("config.worktree"),
        repo.work_tree.join(".git"),
        ralph.join("config.toml"),
    ];
    read_only.retain(|p| p.is_file());
    read_only.dedup();
    Ok((pinned, read_only))
}

/// A git directory with a `commondir` file must be a linked worktree's (`<common>/worktrees/
/// <name>`, pointing back at `<common>`): an agent could have written one into `.git` to hand
/// ralph's own git commands a configuration of its own.
fn check_commondir(repo: &RepoPaths) -> Result<()> {
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

/// Hidden paths that exist, directories apart from files.
fn split_hidden(paths: Vec<PathBuf>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for p in paths {
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => dirs.push(p),
            Ok(_) => files.push(p),
            Err(_) => {}
        }
    }
    (dirs, files)
}

/// A `sandbox_writable` / `sandbox_hidden` entry: absolute, or `~/…` under `home`.
pub fn parse_path(source: &str, key: &str, entry: &str, home: Option<&Path>) -> Result<PathBuf> {
    let bad = |why: &str| {
        Error::user(format!("{source}: `{key}` entry `{entry}` {why}"))
            .with_hint("write absolute paths, or paths under your home as `~/…`")
    };
    let path = match (entry.strip_prefix("~/"), entry == "~") {
        (_, true) => home
            .ok_or_else(|| bad("needs $HOME, which is not set"))?
            .to_path_buf(),
        (Some(rest), _) => home
            .ok_or_else(|| bad("needs $HOME, which is not set"))?
            .join(rest),
        (None, _) => PathBuf::from(entry),
    };
    if entry.trim().is_empty() {
        return Err(bad("is empty"));
    }
    if !path.is_absolute() {
        return Err(bad("is not an absolute path"));
    }
    if path
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(bad("contains `..`"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(net: Net) -> Sandbox {
        Sandbox {
            bwrap: "/usr/bin/bwrap".into(),
            net,
            writable: vec!["/h/.claude".into()],
            pinned: vec!["/r".into(), "/r/.git".into()],
            read_only: vec!["/r/.git/config".into()],
            hidden_dirs: vec!["/h/.ssh".into()],
            hidden_files: vec!["/h/.netrc".into()],
            repo: RepoPaths {
                work_tree: "/r".into(),
                git_dir: "/r/.git".into(),
                common_dir: "/r/.git".into(),
            },
        }
    }

    fn inv() -> Invocation {
        Invocation {
            program: "claude".into(),
            args: vec!["-p".into(), "hi there".into()],
            stdin: Some(b"x".to_vec()),
            env: vec![("A".into(), "1".into())],
        }
    }

    #[test]
    fn wrap_puts_bwrap_in_front_and_keeps_stdin_and_env() {
        let w = sandbox(Net::Host).wrap(inv());
        assert_eq!(w.program, "/usr/bin/bwrap");
        assert_eq!(w.stdin.as_deref(), Some(&b"x"[..]));
        assert_eq!(w.env, inv().env);
        let argv: Vec<String> = w.args.iter().map(|a| a.to_string_lossy().into()).collect();
        let line = argv.join(" ");
        assert!(line.starts_with("--die-with-parent --new-session --unshare-pid --cap-drop ALL --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp "), "{line}");
        assert!(line.ends_with(" -- claude -p hi there"), "{line}");
        assert!(!line.contains("--unshare-net"), "{line}");
        // Order: state, then the pinned repository, read-only files in it, then secrets.
        let at = |w: &str| line.find(w).unwrap_or_else(|| panic!("{w} in {line}"));
        assert!(at("--bind /h/.claude /h/.claude") < at("--bind /r /r"));
        assert!(at("--bind /r/.git /r/.git") < at("--ro-bind /r/.git/config /r/.git/config"));
        assert!(at("--ro-bind /dev/null /h/.netrc") > at("--bind /r /r"));
        assert!(at("--tmpfs /h/.ssh") > at("--tmpfs /tmp"));
        assert_eq!(argv.iter().filter(|a| *a == "--").count(), 1);
    }

    #[test]
    fn no_network_unshares_it() {
        let w = sandbox(Net::None).wrap(inv());
        assert!(w.args.iter().any(|a| a == "--unshare-net"));
    }

    #[test]
    fn config_paths_are_absolute_or_under_home() {
        let home = Path::new("/home/u");
        let ok = |e: &str| parse_path("c.toml", "sandbox_hidden", e, Some(home)).unwrap();
        assert_eq!(ok("~/.kube"), PathBuf::from("/home/u/.kube"));
        assert_eq!(ok("/srv/keys"), PathBuf::from("/srv/keys"));
        for bad in ["", "keys", "~user/x", "/a/../b"] {
            let e = parse_path("c.toml", "sandbox_hidden", bad, Some(home))
                .unwrap_err()
                .to_string();
            assert!(e.contains("c.toml") && e.contains("sandbox_hidden"), "{e}");
        }
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
