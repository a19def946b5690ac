//! `--sandbox` (SPEC §4): every agent attempt, and everything ralph runs on the repository's say,
//! under bubblewrap — the file system read-only but for the repository, a private `/tmp`, `/run`
//! and `/dev/shm`, and the agent CLI's own state (what that CLI later runs read-only); the user's
//! secrets hidden; no host sockets; the repository's git configuration pinned. The rule: nothing
//! the agent can write is later read, followed or run by ralph outside the sandbox.
//!
//! One file per room: [`argv`] builds the `bwrap` argv ([`Sandbox::wrap`], the one place),
//! [`host`] covers the host's sockets and environment, [`cli_state`] holds each CLI's files,
//! [`repo`] the repository's binds, [`confine`] the Landlock step inside, [`bounds`] the sizes
//! and the pids limit ([`cgroup`] where one can be made), [`reach`] what the agent may write
//! and what it never may (ralph's state). What is closed and what is not is written down in
//! ARCHITECTURE.md ("The sandbox").
//!
//! Every path bwrap is given is where it really lies (links resolved, `paths::normal`): bwrap
//! follows a link at a mount point inside the new root, where an absolute link leads nowhere —
//! a dotfile manager's `~/.netrc`, a home reached through a link. And a sandbox that cannot
//! start is found at the start: [`Sandbox::new`] runs it once (`true`), and bwrap's own error
//! is the run's.

mod agent_config;
pub(crate) mod agent_git;
mod argv;
pub(crate) mod bounds;
pub(crate) mod cgroup;
mod cli_state;
pub(crate) mod confine;
mod host;
mod paths;
mod reach;
mod repo;

pub(crate) use host::vanished;
pub(crate) use paths::Make;
pub(crate) use repo::{Include, includes};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// How many times a sandbox is started when a path it was to cover vanished as it started
/// ([`vanished`]).
pub(crate) const START_TRIES: u32 = 3;

/// The Debian/Ubuntu/Fedora/Arch package that ships `bwrap`.
pub(crate) const PACKAGE: &str = "bubblewrap";

/// The network inside the sandbox.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Deserialize,
    serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Net {
    /// The host's network (the agent needs its model API).
    #[default]
    Host,
    /// No network at all (`--unshare-net`): only loopback, and nothing listens there.
    None,
}

/// The merged configuration of the sandbox (SPEC §10): present when it is on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Config {
    pub(crate) net: Net,
    /// `sandbox_writable`: absolute paths (with `~` expanded), from the user's own layers only.
    pub(crate) writable: Vec<PathBuf>,
    /// `sandbox_hidden`: absolute paths hidden besides the built-in secrets.
    pub(crate) hidden: Vec<PathBuf>,
    /// `sandbox_env_keep`: variables the agent keeps although the rule drops them (the user's
    /// own layers only).
    pub(crate) env_keep: Vec<String>,
}

/// The sandbox as `state.json` records it for a resume (SPEC §2.3): on, with this network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Pinned {
    pub(crate) net: Net,
}

/// Hidden whatever the configuration says, when they exist (relative to `$HOME`).
const SECRETS: &[&str] = &[".ssh", ".aws", ".gnupg", ".config/gcloud", ".netrc"];

/// The repository as the sandbox sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RepoPaths {
    pub(crate) work_tree: PathBuf,
    /// The git directory (`.git`, or `<common>/worktrees/<name>` for a linked worktree).
    pub(crate) git_dir: PathBuf,
    /// The common git directory (the same as `git_dir` but for linked worktrees).
    pub(crate) common_dir: PathBuf,
}

/// A sandbox resolved for one run: every path it binds, checked to exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sandbox {
    bwrap: PathBuf,
    net: Net,
    /// `/tmp`, `/run`, `/var/run` replaced, and what of them stays.
    private: host::Private,
    /// ralph's own binary, for the confinement step inside.
    own: OwnBinary,
    /// Bound writable onto themselves, in this order: the CLI's state and `sandbox_writable`.
    writable: Vec<PathBuf>,
    /// Bound writable onto themselves after the state: the work tree, `.ralph`, the git
    /// directories (see `repo.rs`).
    pinned: Vec<PathBuf>,
    /// Those of `pinned` bound read-only: the places of other loops (see `repo.rs`).
    sealed: Vec<PathBuf>,
    /// Bound read-only: the git configuration in the agent's reach, `.git` files, `commondir`,
    /// `.ralph/config.toml`, and what the CLIs run or obey that lies in their writable state.
    read_only: Vec<PathBuf>,
    /// Directories hidden under an empty, read-only tmpfs.
    hidden_dirs: Vec<PathBuf>,
    /// Files hidden under `/dev/null`.
    hidden_files: Vec<PathBuf>,
    /// Variables kept although the rule drops them.
    env_keep: Vec<String>,
    /// The kernel has Landlock's scopes (abstract sockets, signals).
    scoped: bool,
    /// The kernel's Landlock has `Refer` (ABI 2): FIFOs are confined, renames are not broken.
    fs_rules: bool,
    /// bwrap can make a user namespace (`--unshare-user`): the user's kernel keyrings are not
    /// the sandbox's.
    userns: bool,
    /// The private tmpfs mounts' sizes (`None`: this bwrap cannot size them).
    sizes: Option<bounds::Sizes>,
    /// The most processes of the sandbox.
    pids: u64,
    /// The cgroup holding every sandboxed command, when one could be made.
    cgroup: Option<Arc<cgroup::Cgroup>>,
    /// A cgroup was tried (not in a dry run, which makes none).
    cgroup_tried: bool,
    /// ralph runs as root: the kernel applies no `RLIMIT_NPROC` to it.
    root: bool,
    /// The agent's own git directory, shown where the repository's is (`agent_git.rs`);
    /// `None` only in the argv's unit tests.
    agent_git: Option<agent_git::AgentGit>,
    /// The repository, for ralph's own git commands.
    pub(crate) repo: RepoPaths,
}

impl Sandbox {
    /// Resolve the sandbox for `agents` (preset names, or `custom`: the run's agent and its
    /// fallbacks) on `repo`. Creates (unless `make` is a dry run) the preset's missing state
    /// directory (mode 0700), and, empty, what a CLI or git would run or read that does not
    /// exist yet where the agent could write it; then starts the sandbox once, so that one that
    /// cannot start is an error now, in bwrap's words.
    pub(crate) fn new(
        config: &Config,
        repo: RepoPaths,
        agents: &[&str],
        around: Around<'_>,
        make: Make,
    ) -> Result<Self> {
        if !cfg!(target_os = "linux") {
            return Err(Error::user(
                "--sandbox needs Linux (bubblewrap); it is not available on this platform",
            )
            .with_hint(
                "run without --sandbox (or `sandbox = true` in the configuration), or on Linux",
            ));
        }
        let bwrap = find_bwrap()?;
        let userns = probe(&bwrap)?;
        let sizes = bounds::sizes_tmpfs(&bwrap_version(&bwrap))
            .then(bounds::Sizes::of_host)
            .transpose()?;
        let pids = bounds::pids()?;
        let places = Places::of(config, &repo, agents, &around, make)?;
        let private = host::Private::of_host();
        let mut hidden: Vec<PathBuf> = around
            .home
            .map(|h| SECRETS.iter().map(|s| h.join(s)).collect())
            .unwrap_or_default();
        hidden.extend(config.hidden.iter().cloned());
        let (mut hidden_dirs, hidden_files) = reach::hidden_targets(&hidden, &private.dirs);
        let state = reach::state_out_of_sight(around.state, &private.dirs, &hidden_dirs, make)?;
        hidden_dirs.extend(state);
        let sandbox = Sandbox {
            bwrap,
            net: config.net,
            private,
            own: OwnBinary::resolve(&places.reach)?,
            writable: places.writable,
            pinned: places.pinned,
            sealed: places.sealed,
            read_only: places.read_only,
            hidden_dirs,
            hidden_files,
            env_keep: config.env_keep.clone(),
            scoped: confine::supported(),
            fs_rules: confine::fs_rules(),
            userns,
            sizes,
            pids,
            cgroup: (make == Make::Create)
                .then(|| cgroup::Cgroup::make(pids))
                .flatten()
                .map(Arc::new),
            cgroup_tried: make == Make::Create,
            // SAFETY: geteuid has no failure mode and touches no memory of ours.
            root: unsafe { libc::geteuid() } == 0,
            agent_git: Some(agent_git::AgentGit::new(&repo)?),
            repo,
        };
        if make == Make::Create {
            sandbox.trial()?;
        }
        Ok(sandbox)
    }

    /// Start the sandbox once, running `true`: bwrap's own error (a mount it cannot make) is
    /// the run's, at once, never an attempt's.
    fn trial(&self) -> Result<()> {
        // A path listed to be covered that vanished as bwrap started: again, listed afresh.
        let mut tries = 0;
        let brief = loop {
            let inv = self.wrap(crate::proc::Invocation {
                program: "true".into(),
                args: Vec::new(),
                stdin: None,
                env: Vec::new(),
            });
            let mut cmd = std::process::Command::new(&inv.program);
            cmd.args(&inv.args).current_dir(&self.repo.work_tree);
            for (k, v) in inv.env.iter().filter(|(k, _)| k != cgroup::JOIN_ENV) {
                cmd.env(k, v);
            }
            let brief = crate::proc::brief::run(&mut cmd, std::time::Duration::from_secs(30))
                .map_err(|e| Error::io(format!("failed to run `{}`", self.bwrap.display()), e))?;
            if brief.status.is_some_and(|s| s.success()) {
                return Ok(());
            }
            tries += 1;
            if tries >= START_TRIES || !vanished(&brief.output) {
                break brief;
            }
        };
        let said = brief.output.trim();
        Err(Error::user(format!(
            "--sandbox: the sandbox cannot start: {}",
            if said.is_empty() {
                "bwrap did not finish"
            } else {
                said
            }
        ))
        .with_hint(
            "that is bubblewrap's own word on the sandbox ralph asked for (`ralph run --dry-run --sandbox` prints it whole): a path it names may be one it cannot mount over, or this system may refuse a mount",
        ))
    }

    /// Whether the agent can write at `p` (a path as the file system resolves it): in a place
    /// bound writable, or in the repository's own.
    pub(crate) fn agent_writes(&self, p: &Path) -> bool {
        let own: Vec<PathBuf> = self
            .pinned
            .iter()
            .filter(|place| !self.sealed.contains(place))
            .cloned()
            .collect();
        paths::within(p, &self.writable) || paths::within(p, &own)
    }

    /// The agent's own git directory.
    pub(crate) fn agent_git(&self) -> Option<&agent_git::AgentGit> {
        self.agent_git.as_ref()
    }

    /// The `--upload-pack` command through which ralph's git fetches what the agent committed:
    /// `git upload-pack` run inside the sandbox, on the agent's git directory (git appends its
    /// path, which inside the sandbox is the agent's), as one shell command.
    pub(crate) fn upload_pack(&self) -> String {
        let inv = self.wrap(crate::proc::Invocation {
            program: "git".into(),
            args: vec!["upload-pack".into(), "--strict".into()],
            stdin: None,
            env: Vec::new(),
        });
        let words: Vec<String> = std::iter::once(inv.program)
            .chain(inv.args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        shell_words::join(words)
    }

    /// ralph's own binary where the agent cannot write it: the installed one, or a private
    /// copy that lives as long as this sandbox.
    pub(crate) fn own_binary(&self) -> &Path {
        self.own.path()
    }

    /// What stays open on this machine that the sandbox would close elsewhere, to say once.
    pub(crate) fn open_here(&self) -> Option<String> {
        let mut open = Vec::new();
        if !self.scoped && self.net == Net::Host {
            open.push("this kernel's Landlock has no scopes (Linux 6.12 or later has them): the host's abstract UNIX sockets (X11, some D-Bus buses) stay reachable from the sandbox; `--sandbox-net none` closes them".to_string());
        }
        if !self.userns {
            open.push("bwrap cannot make a user namespace here (`--unshare-user` failed): your kernel keyrings (`keyctl`) stay readable from the sandbox".to_string());
        }
        if !self.fs_rules {
            open.push("this kernel's Landlock cannot confine renames (Linux 5.19 or later can): the agent can make FIFOs anywhere it writes, and one where ralph's git reads holds it until its deadline".to_string());
        }
        if self.sizes.is_none() {
            open.push("this bwrap cannot size a tmpfs (`--size` came with bubblewrap 0.8): the sandbox's /tmp, /run and /dev/shm can each fill half the memory".to_string());
        }
        if self.cgroup_tried && self.cgroup.is_none() && (self.root || !self.userns) {
            open.push(format!(
                "no cgroup could be made for the sandbox here, and {}: nothing bounds the number of its processes ({} = {} goes unheeded)",
                if self.root {
                    "the kernel applies no RLIMIT_NPROC to root"
                } else {
                    "without a user namespace RLIMIT_NPROC would count all your processes"
                },
                bounds::PIDS_ENV,
                self.pids
            ));
        }
        (!open.is_empty()).then(|| format!("--sandbox: {}", open.join("; and ")))
    }
}

/// Where ralph runs the sandbox from: the user's home (its CLIs' state, its secrets) and ralph's
/// own state directory, which the sandbox must leave out of the agent's reach.
pub(crate) struct Around<'a> {
    pub(crate) home: Option<&'a Path>,
    pub(crate) state: Option<&'a Path>,
}

/// The places the sandbox binds: what the agent may write, the repository's own pinned and
/// sealed places, and what it may only read; none of them holds ralph's state.
struct Places {
    writable: Vec<PathBuf>,
    pinned: Vec<PathBuf>,
    sealed: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    /// Everything the agent can write: a link there is never followed to a bind.
    reach: Vec<PathBuf>,
}

impl Places {
    fn of(
        config: &Config,
        repo: &RepoPaths,
        agents: &[&str],
        around: &Around<'_>,
        make: Make,
    ) -> Result<Places> {
        let state = around.state.map(paths::normal);
        let entries: Vec<PathBuf> = config
            .writable
            .iter()
            .filter(|p| p.exists())
            .cloned()
            .collect();
        keep_out(state.as_deref(), &entries, "`sandbox_writable` entry")?;
        let mut writable = Vec::new();
        if let Some(h) = around.home {
            for agent in agents {
                writable.extend(cli_state::writable_state(h, agent, make)?);
            }
        }
        keep_out(state.as_deref(), &writable, "the agent CLI's state")?;
        writable.extend(entries);
        let raw_writable = writable;
        let writable: Vec<PathBuf> = raw_writable.iter().map(|p| paths::normal(p)).collect();
        let binds = repo::repo_binds(repo, &writable, make)?;
        let own_places: Vec<PathBuf> = binds
            .pinned
            .iter()
            .filter(|p| !binds.sealed.contains(p))
            .cloned()
            .collect();
        keep_out(state.as_deref(), &own_places, "the repository's")?;
        let mut read_only = binds.read_only;
        if let Some(h) = around.home {
            read_only.extend(cli_state::run_files(h, &writable, make)?);
        }
        let reach: Vec<PathBuf> = writable.iter().chain(&binds.pinned).cloned().collect();
        for p in raw_writable.iter().chain(&binds.pinned) {
            // The agent's link in a writable place, made between runs, would be bound writable.
            paths::pinnable(p, &reach)?;
        }
        Ok(Places {
            writable,
            pinned: binds.pinned,
            sealed: binds.sealed,
            read_only,
            reach,
        })
    }
}

/// Refuse a place among `places` that holds ralph's state directory (or lies in it).
fn keep_out(state: Option<&Path>, places: &[PathBuf], what: &str) -> Result<()> {
    let Some(state) = state else { return Ok(()) };
    let places: Vec<reach::Place<'_>> = places
        .iter()
        .map(|p| reach::Place { path: p, what })
        .collect();
    reach::keep_state_out(state, &places)
}

/// `bwrap --version` (`bubblewrap 0.8.0`), or nothing when it does not say.
fn bwrap_version(bwrap: &Path) -> String {
    let mut cmd = std::process::Command::new(bwrap);
    cmd.arg("--version");
    crate::proc::brief::run(&mut cmd, std::time::Duration::from_secs(10))
        .map(|b| b.output)
        .unwrap_or_default()
}

/// ralph's own binary as the sandbox binds it. Where the agent could write the installed one
/// (ralph built in the repository it works on), a copy of the running binary, in a private
/// directory that lives as long as the run.
#[derive(Debug, Clone)]
pub(crate) struct OwnBinary {
    path: PathBuf,
    _copy: Option<Arc<tempfile::TempDir>>,
}

impl PartialEq for OwnBinary {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for OwnBinary {}

impl OwnBinary {
    /// ralph's binary at its path when no directory of `reach` (what an agent can write) holds
    /// it, else a private copy that lives as long as the value.
    pub(crate) fn resolve(reach: &[PathBuf]) -> Result<OwnBinary> {
        let reach: Vec<PathBuf> = reach.iter().map(|p| paths::normal(p)).collect();
        if let Ok(exe) = std::env::current_exe().map(|e| paths::normal(&e))
            && exe.is_file()
            && !paths::within(&exe, &reach)
        {
            return Ok(OwnBinary {
                path: exe,
                _copy: None,
            });
        }
        let dir = tempfile::Builder::new()
            .prefix("ralph-sandbox-")
            .tempdir()
            .map_err(|e| Error::io("failed to make a directory for ralph's own binary", e))?;
        let path = dir.path().join("ralph");
        std::fs::copy("/proc/self/exe", &path)
            .map_err(|e| Error::file("copy ralph's own binary to", &path, e))?;
        Ok(OwnBinary {
            path,
            _copy: Some(Arc::new(dir)),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
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
/// user namespaces, an AppArmor rule). `true` when bwrap can also make a user namespace (a
/// setuid bwrap where the kernel refuses them to users cannot).
fn probe(bwrap: &Path) -> Result<bool> {
    let trial = |userns: bool| {
        let mut cmd = std::process::Command::new(bwrap);
        if userns {
            cmd.arg("--unshare-user");
        }
        cmd.args(["--ro-bind", "/", "/", "--cap-drop", "ALL", "true"]);
        crate::proc::brief::run(&mut cmd, std::time::Duration::from_secs(10))
            .map_err(|e| Error::io(format!("failed to run `{}`", bwrap.display()), e))
    };
    if trial(true)?.status.is_some_and(|s| s.success()) {
        return Ok(true);
    }
    let brief = trial(false)?;
    match brief.status {
        Some(s) if s.success() => Ok(false),
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

/// A `sandbox_writable` / `sandbox_hidden` entry: absolute, or `~/…` under `home`.
pub(crate) fn parse_path(
    source: &str,
    key: &str,
    entry: &str,
    home: Option<&Path>,
) -> Result<PathBuf> {
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

    #[test]
    fn ralphs_binary_in_the_agents_reach_is_a_private_copy() {
        let exe = paths::normal(&std::env::current_exe().unwrap());
        let own = OwnBinary::resolve(&[]).unwrap();
        assert_eq!(own.path, exe);
        let dir = exe.parent().unwrap().to_path_buf();
        let own = OwnBinary::resolve(&[dir]).unwrap();
        assert_ne!(own.path, exe);
        let len = |p: &Path| std::fs::metadata(p).unwrap().len();
        assert_eq!(len(&own.path), len(&exe));
        let copy = own.path.clone();
        drop(own);
        assert!(!copy.exists(), "the copy lives as long as the sandbox");
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
}
