//! The `bwrap` argv: the one place it is built. Later mounts cover earlier ones, so the order is
//! the design: the read-only root (`/dev` read-only but for a sized `/dev/shm`), the private
//! directories (sized), ralph's binary, the writable state, the pinned repository, the read-only
//! files inside both, the host's sockets, the secrets, the sockets kept on purpose, and last the
//! secrets' empty directories made read-only (a kept socket may lie in one: its mount point had
//! to be made first).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::host::{Host, Layout};
use super::paths::normal;
use super::{Net, Sandbox, cgroup, confine};
use crate::proc::Invocation;

/// What of the sandbox's `/proc` is the kernel's, not the sandbox's processes': bwrap's own list
/// of what it means to cover.
const PROC_READ_ONLY: [&str; 4] = ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

impl Sandbox {
    /// `inv` run inside the sandbox: `bwrap FLAGS -- ralph __confine -- program args…`, stdin
    /// kept, the environment less what the rule drops (`host.rs`). What the host has to cover
    /// (its sockets, ralph's environment) is looked at now, for this attempt.
    pub(crate) fn wrap(&self, inv: Invocation) -> Invocation {
        let layout = self.layout_now();
        let mut host = Host::now(&Layout::from(&layout), &inv.env, &self.env_keep);
        host.hidden_files = self.hidden_files.clone();
        host.retain_present();
        self.wrap_on(&host, inv)
    }

    fn layout_now(&self) -> OwnedLayout {
        let n = |v: &[PathBuf]| v.iter().map(|p| normal(p)).collect::<Vec<_>>();
        OwnedLayout {
            private: n(&self.private.dirs),
            bound: n(&[self.writable.as_slice(), &self.pinned].concat()),
            hidden: n(&self.hidden_dirs),
        }
    }

    /// [`Sandbox::wrap`] with the host as `host` found it.
    fn wrap_on(&self, host: &Host, inv: Invocation) -> Invocation {
        let mut args: Vec<OsString> = Vec::new();
        self.push_namespaces(&mut args);
        let confine_at = self.private.confine_at();
        self.push_private(&mut args, &confine_at);
        self.push_binds(&mut args, host, &confine_at);
        // Last: a kept socket may lie in a private or hidden directory.
        // `-try`: a kept socket gone by the time bwrap starts has nothing to pass.
        for p in &host.passed {
            args.extend(["--bind-try".into(), p.into(), p.into()]);
        }
        for d in &self.hidden_dirs {
            args.extend(["--remount-ro".into(), d.into()]);
        }
        for v in &host.unset {
            args.extend(["--unsetenv".into(), v.clone()]);
        }
        self.push_confine(&mut args, confine_at);
        args.extend(["--".into(), inv.program.into()]);
        args.extend(inv.args);
        let mut env = inv.env;
        if let Some(c) = &self.cgroup {
            // For ralph's guard, which moves bwrap into the cgroup and drops the variable.
            env.push((
                cgroup::JOIN_ENV.to_string(),
                c.procs().to_string_lossy().into_owned(),
            ));
        }
        Invocation {
            program: self.bwrap.to_string_lossy().into_owned(),
            args,
            stdin: inv.stdin,
            env,
        }
    }

    /// `--size BYTES` before a `--tmpfs`, when this bwrap can size one.
    fn size(&self, args: &mut Vec<OsString>, bytes: impl Fn(&super::bounds::Sizes) -> u64) {
        if let Some(s) = &self.sizes {
            args.extend(["--size".into(), bytes(s).to_string().into()]);
        }
    }

    /// The namespaces, the capabilities dropped and the read-only root, `/dev`, `/proc`.
    fn push_namespaces(&self, args: &mut Vec<OsString>) {
        // A session of its own: no TIOCSTI into ralph's terminal. A pid namespace: the agent
        // cannot see or signal ralph's processes, and all of it dies with the sandbox.
        words(args, &["--die-with-parent", "--new-session"]);
        // A user namespace: the kernel keyrings (the user's `@u`, a Kerberos `KEYRING:`
        // cache) are per user namespace, and as root bwrap makes none unless told.
        if self.userns {
            words(args, &["--unshare-user"]);
        }
        words(args, &["--unshare-pid"]);
        // As root, bwrap keeps every capability unless told otherwise (CAP_SYS_ADMIN would undo
        // the read-only binds).
        words(args, &["--cap-drop", "ALL"]);
        if self.net == Net::None {
            words(args, &["--unshare-net"]);
        }
        words(
            args,
            &["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"],
        );
        // bwrap's `/dev` is a tmpfs of half the memory, writable by the sandbox's root: a sized
        // one of its own for `/dev/shm`, and the rest read-only (devices still work: a
        // read-only mount refuses writes to files, not to devices).
        self.size(args, |s| s.tmp);
        words(args, &["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]);
        // The kernel's settings, read-only: a process whose uid is root writes `/proc/sys`
        // (`kernel.core_pattern`: a program the kernel runs as root, outside every namespace)
        // and `/proc/sysrq-trigger` with no capability at all, and bwrap, dropping them, leaves
        // these two writable.
        for p in PROC_READ_ONLY {
            words(args, &["--ro-bind-try", p, p]);
        }
    }

    /// ralph's own binary where the sandbox runs it, then what is writable, pinned, read-only
    /// and hidden.
    fn push_binds(&self, args: &mut Vec<OsString>, host: &Host, confine_at: &Path) {
        let mut bind = |flag: &str, from: &Path, to: &Path| {
            args.extend([flag.into(), from.into(), to.into()]);
        };
        bind("--ro-bind", &self.own.path, confine_at);
        for p in &self.writable {
            bind("--bind", p, p);
        }
        for p in &self.pinned {
            let flag = if self.sealed.contains(p) {
                "--ro-bind"
            } else {
                "--bind"
            };
            bind(flag, p, p);
        }
        // The agent's own git directory where the repository's is, the repository's objects
        // read-only inside it (`agent_git.rs`).
        if let Some(a) = &self.agent_git {
            bind("--bind", &a.dir(), &a.at);
            bind(
                "--ro-bind",
                &a.objects,
                &a.at.join(super::agent_git::OBJECTS),
            );
            for (from, name) in &a.read_only {
                bind("--ro-bind", from, &a.at.join(name));
            }
        }
        // The repository's configuration files show the agent's copy, without its credentials
        // (`agent_config.rs`): a main tree's `.git/config` and a worktree loop's common one.
        let configs = self.agent_git.iter().flat_map(|a| a.config_places());
        let configs: Vec<PathBuf> = configs.map(|p| normal(&p)).collect();
        for p in self.read_only.iter().filter(|p| !configs.contains(p)) {
            bind("--ro-bind", p, p);
        }
        if let Some(a) = &self.agent_git {
            for p in &configs {
                bind("--ro-bind-try", &a.dir().join("config"), p);
            }
        }
        let null = Path::new("/dev/null");
        for p in host.sockets.iter().chain(&host.hidden_files) {
            bind("--ro-bind", null, p);
        }
        for p in &self.hidden_dirs {
            args.extend(["--tmpfs".into(), p.into()]);
        }
    }

    /// `ralph __confine` inside the sandbox, with its options, before the command.
    fn push_confine(&self, args: &mut Vec<OsString>, confine_at: PathBuf) {
        args.extend(["--".into(), confine_at.into(), confine::COMMAND.into()]);
        if self.scoped {
            args.push(confine::SCOPED.into());
        }
        // FIFOs only where nothing of ralph's reads (the private directories, `/dev/shm` of
        // bwrap's `/dev`): never in the repository or the CLI's state.
        let private = || {
            self.private
                .dirs
                .iter()
                .map(PathBuf::as_path)
                .chain([Path::new("/dev/shm")])
        };
        for d in private() {
            args.extend([confine::FIFOS.into(), d.into()]);
        }
        // Renames across directories wherever the agent writes: git's own (`git mv`, its object
        // files), a build's. Nowhere else (all of it read-only anyway).
        let own = self.pinned.iter().filter(|p| !self.sealed.contains(p));
        let agent_git = self.agent_git.iter().map(|a| a.at.as_path());
        for d in private()
            .chain(self.writable.iter().chain(own).map(PathBuf::as_path))
            .chain(agent_git)
        {
            args.extend([confine::REFER.into(), d.into()]);
        }
        // In a user namespace of its own the count is the sandbox's; without one it would be
        // all the user's processes (and root is never counted).
        if self.userns && !self.root {
            args.extend([confine::NPROC.into(), self.pids.to_string().into()]);
        }
    }

    /// The private directories, the files of theirs bound back and their links made again
    /// (not one in the way of ralph's binary).
    fn push_private(&self, args: &mut Vec<OsString>, confine_at: &Path) {
        for d in &self.private.dirs {
            let run = d.starts_with("/run") || d.starts_with("/var/run");
            self.size(args, |s| if run { s.run } else { s.tmp });
            args.extend(["--tmpfs".into(), d.into()]);
        }
        for f in &self.private.files {
            args.extend(["--ro-bind".into(), f.into(), f.into()]);
        }
        for (target, link) in &self.private.links {
            if !confine_at.starts_with(link) {
                args.extend(["--symlink".into(), target.into(), link.into()]);
            }
        }
    }
}

fn words(args: &mut Vec<OsString>, ws: &[&str]) {
    args.extend(ws.iter().map(OsString::from));
}

/// A [`Layout`] of owned, normalised paths.
struct OwnedLayout {
    private: Vec<PathBuf>,
    bound: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
}

impl<'a> From<&'a OwnedLayout> for Layout<'a> {
    fn from(l: &'a OwnedLayout) -> Layout<'a> {
        Layout {
            private: &l.private,
            bound: &l.bound,
            hidden: &l.hidden,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bounds::Sizes;
    use super::super::host::Private;
    use super::super::{OwnBinary, RepoPaths};
    use super::*;

    fn sandbox(net: Net) -> Sandbox {
        Sandbox {
            bwrap: "/usr/bin/bwrap".into(),
            net,
            private: Private {
                dirs: vec!["/tmp".into(), "/run".into()],
                files: vec!["/run/resolve/resolv.conf".into()],
                links: vec![("/dev/shm".into(), "/run/shm".into())],
            },
            own: OwnBinary {
                path: "/usr/bin/ralph".into(),
                _copy: None,
            },
            writable: vec!["/h/.claude".into()],
            pinned: vec![
                "/r".into(),
                "/r/.git".into(),
                "/r/.git/worktrees".into(),
                "/r/.git/worktrees/w".into(),
            ],
            sealed: vec!["/r/.git/worktrees".into()],
            read_only: vec!["/r/.git/config".into(), "/h/.claude/settings.json".into()],
            hidden_dirs: vec!["/h/.ssh".into()],
            hidden_files: vec!["/h/.netrc".into()],
            env_keep: Vec::new(),
            scoped: true,
            fs_rules: true,
            userns: true,
            sizes: Some(Sizes {
                tmp: 1 << 30,
                run: 64 << 20,
            }),
            pids: 4096,
            cgroup: None,
            cgroup_tried: true,
            root: false,
            agent_git: None,
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

    fn host() -> Host {
        Host {
            sockets: vec!["/r/agent.sock".into(), "/var/lib/docker.sock".into()],
            unset: vec!["DISPLAY".into()],
            passed: vec!["/run/user/1/ssh.sock".into()],
            hidden_files: vec!["/h/.netrc".into()],
        }
    }

    #[test]
    fn wrap_puts_bwrap_and_the_confinement_in_front_and_keeps_stdin_and_env() {
        let w = sandbox(Net::Host).wrap_on(&host(), inv());
        assert_eq!(w.program, "/usr/bin/bwrap");
        assert_eq!(w.stdin.as_deref(), Some(&b"x"[..]));
        assert_eq!(w.env, inv().env);
        let argv: Vec<String> = w.args.iter().map(|a| a.to_string_lossy().into()).collect();
        let line = argv.join(" ");
        assert!(
            line.starts_with(
                "--die-with-parent --new-session --unshare-user --unshare-pid --cap-drop ALL --ro-bind / / --dev /dev --proc /proc --size 1073741824 --tmpfs /dev/shm --remount-ro /dev --ro-bind-try /proc/sys /proc/sys --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger --ro-bind-try /proc/irq /proc/irq --ro-bind-try /proc/bus /proc/bus --size 1073741824 --tmpfs /tmp --size 67108864 --tmpfs /run --ro-bind /run/resolve/resolv.conf /run/resolve/resolv.conf --symlink /dev/shm /run/shm --ro-bind /usr/bin/ralph /run/ralph/ralph "

            ),
            "{line}"
        );
        assert!(
            line.ends_with(
                " -- /run/ralph/ralph __confine --scoped --fifos /tmp --fifos /run --fifos /dev/shm --refer /tmp --refer /run --refer /dev/shm --refer /h/.claude --refer /r --refer /r/.git --refer /r/.git/worktrees/w --nproc 4096 -- claude -p hi there"
            ),
            "{line}"
        );
        assert!(!line.contains("--unshare-net"), "{line}");
        // Order: state, the pinned repository, read-only files in both, sockets, secrets.
        let at = |w: &str| line.find(w).unwrap_or_else(|| panic!("{w} in {line}"));
        assert!(at("--bind /h/.claude /h/.claude") < at("--bind /r /r"));
        assert!(at("--bind /r/.git /r/.git") < at("--ro-bind /r/.git/config /r/.git/config"));
        // Other loops' places read-only, this loop's own writable after them.
        assert!(
            at("--ro-bind /r/.git/worktrees /r/.git/worktrees")
                < at("--bind /r/.git/worktrees/w /r/.git/worktrees/w")
        );
        assert!(at("--bind /h/.claude ") < at("--ro-bind /h/.claude/settings.json"));
        assert!(at("--bind /r /r") < at("--ro-bind /dev/null /r/agent.sock"));
        assert!(at("--ro-bind /dev/null /var/lib/docker.sock") < at("--tmpfs /h/.ssh"));
        assert!(at("--ro-bind /dev/null /h/.netrc") > at("--bind /r /r"));
        assert!(at("--tmpfs /h/.ssh") < at("--bind-try /run/user/1/ssh.sock /run/user/1/ssh.sock"));
        // The secrets' empty directories read-only, after what may be bound inside them.
        assert!(
            at("--bind-try /run/user/1/ssh.sock /run/user/1/ssh.sock") < at("--remount-ro /h/.ssh")
        );
        assert!(
            line.contains(" --remount-ro /h/.ssh --unsetenv DISPLAY -- "),
            "{line}"
        );
        assert_eq!(argv.iter().filter(|a| *a == "--").count(), 2);
    }

    #[test]
    fn without_the_scopes_the_confinement_does_what_it_can() {
        let mut s = sandbox(Net::Host);
        s.scoped = false;
        let w = s.wrap_on(&Host::default(), inv());
        let line: Vec<String> = w.args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert!(line.join(" ").ends_with(
            " __confine --fifos /tmp --fifos /run --fifos /dev/shm --refer /tmp --refer /run --refer /dev/shm --refer /h/.claude --refer /r --refer /r/.git --refer /r/.git/worktrees/w --nproc 4096 -- claude -p hi there"
        ));
    }

    #[test]
    fn without_sizes_or_a_user_namespace_or_as_root_the_bounds_go_as_far_as_they_can() {
        let mut s = sandbox(Net::Host);
        s.sizes = None;
        let w = s.wrap_on(&Host::default(), inv());
        let line: Vec<String> = w.args.iter().map(|a| a.to_string_lossy().into()).collect();
        let line = line.join(" ");
        assert!(!line.contains("--size"), "{line}");
        assert!(
            line.contains(" --tmpfs /dev/shm --remount-ro /dev "),
            "{line}"
        );
        for (userns, root) in [(false, false), (true, true)] {
            let mut s = sandbox(Net::Host);
            (s.userns, s.root) = (userns, root);
            let w = s.wrap_on(&Host::default(), inv());
            assert!(!w.args.iter().any(|a| a == "--nproc"), "{userns} {root}");
        }
    }

    #[test]
    fn no_network_unshares_it() {
        let w = sandbox(Net::None).wrap_on(&Host::default(), inv());
        assert!(w.args.iter().any(|a| a == "--unshare-net"));
    }

    #[test]
    fn a_run_link_in_the_way_of_ralphs_binary_is_not_made() {
        let mut s = sandbox(Net::Host);
        s.private
            .links
            .push(("/elsewhere".into(), "/run/ralph".into()));
        let w = s.wrap_on(&Host::default(), inv());
        assert!(!w.args.iter().any(|a| a == "/elsewhere"));
    }

    /// A sandbox of this machine's real paths, its confinement step a script that runs the
    /// command (the test binary is no ralph); `None` where bwrap cannot run.
    fn real_sandbox(dir: &Path, hidden_files: Vec<PathBuf>) -> Option<Sandbox> {
        let bwrap = super::super::find_bwrap().ok()?;
        let userns = super::super::probe(&bwrap).ok()?;
        let confine = dir.join("confine.sh");
        std::fs::write(
            &confine,
            "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n",
        )
        .unwrap();
        std::fs::set_permissions(
            &confine,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let mut s = sandbox(Net::Host);
        s.bwrap = bwrap;
        s.private = Private::of_host();
        s.own = OwnBinary {
            path: normal(&confine),
            _copy: None,
        };
        (s.writable, s.pinned, s.sealed, s.read_only) = Default::default();
        (s.hidden_dirs, s.hidden_files) = (Vec::new(), hidden_files);
        (s.sizes, s.userns) = (None, userns);
        // SAFETY: geteuid has no failure mode and touches no memory of ours.
        s.root = unsafe { libc::geteuid() } == 0;
        Some(s)
    }

    /// bwrap cannot mount `/dev/null` over a path that is no longer there in the read-only
    /// root ("Can't create file at …", or "Can't mkdir parents for …" when its directory went
    /// too): a secret or a host socket that vanished after ralph listed it is skipped, not a
    /// sandbox that cannot start. The control: one that is there is covered (a device inside).
    #[test]
    fn a_covered_path_that_vanished_is_skipped_and_one_there_is_covered() {
        // Outside /tmp, which is the sandbox's own (bwrap could make anything there): beside the
        // clone, or in /var/tmp when the clone is itself where the sandbox has its own mounts.
        let clone = Path::new(env!("CARGO_MANIFEST_DIR"));
        let private = ["/tmp", "/run", "/var/run", "/dev/shm"];
        let base = if private.iter().any(|m| clone.starts_with(m)) {
            PathBuf::from("/var/tmp")
        } else {
            clone.join("target")
        };
        std::fs::create_dir_all(&base).unwrap();
        let dir = tempfile::tempdir_in(base).unwrap();
        let d = normal(dir.path());
        let live = d.join("live.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        std::fs::create_dir(d.join("gone")).unwrap();
        let gone = [d.join("secret"), d.join("gone/secret")];
        for g in &gone {
            std::fs::write(g, "x").unwrap();
        }
        std::fs::remove_file(&gone[0]).unwrap();
        std::fs::remove_dir_all(d.join("gone")).unwrap();
        for g in &gone {
            let Some(s) = real_sandbox(&d, vec![g.clone()]) else {
                return;
            };
            let w = s.wrap(Invocation {
                program: "sh".into(),
                args: vec!["-c".into(), format!("test -c '{}'", live.display()).into()],
                stdin: None,
                env: Vec::new(),
            });
            let out = std::process::Command::new(&w.program)
                .args(&w.args)
                .envs(w.env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{}: {said}", g.display());
        }
    }
}
