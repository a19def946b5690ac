//! `--sandbox` has no back doors (SPEC §4): the host's UNIX sockets (pathname ones anywhere,
//! in `/run`, `/var/run`, `/tmp`, `/dev/shm`; abstract ones; the one `SSH_AUTH_SOCK` names),
//! settings and hooks planted for the CLI's next session outside, a resume that would run the
//! agent unsandboxed, and git configuration planted through includes and `config.worktree`.
//! Every test runs the same agent without `--sandbox` first: the door is open there.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use crate::sandbox::{run_script, write_script, write_user_config};

/// A UNIX socket server outside the sandbox: it answers `pong` to every connection and counts
/// them.
struct Server {
    addr: std::os::unix::net::SocketAddr,
    path: Option<PathBuf>,
    /// The directory made for it, removed with it.
    made: Option<PathBuf>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// At a path (its directory created); `None` where this user may not make one there.
    fn at(path: &Path) -> Option<Server> {
        let dir = path.parent()?;
        let made = (!dir.exists()).then(|| dir.to_path_buf());
        std::fs::create_dir_all(dir).ok()?;
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).ok()?;
        let mut s = Server::serve(listener);
        s.path = Some(path.to_path_buf());
        s.made = made;
        Some(s)
    }

    /// An abstract socket (`@name`).
    fn abstract_named(name: &str) -> Server {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
        Server::serve(UnixListener::bind_addr(&addr).unwrap())
    }

    fn serve(listener: UnixListener) -> Server {
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (Arc::clone(&accepted), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(mut c) = conn {
                    a.fetch_add(1, Ordering::SeqCst);
                    use std::io::Write;
                    let _ = c.write_all(b"pong");
                }
            }
        });
        Server {
            addr,
            path: None,
            made: None,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// How the agent names it: a path, or `@name`.
    fn name(&self) -> String {
        use std::os::linux::net::SocketAddrExt;
        match (&self.path, self.addr.as_abstract_name()) {
            (Some(p), _) => p.display().to_string(),
            (None, Some(n)) => format!("@{}", String::from_utf8_lossy(n)),
            (None, None) => unreachable!("a server has an address"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = UnixStream::connect_addr(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
        if let Some(d) = &self.made {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// python3, for the agent's socket client; else the test says why it cannot run.
fn python() -> Option<&'static str> {
    let p = "/usr/bin/python3";
    if Path::new(p).exists() {
        Some(p)
    } else {
        skip_or_fail("python3 (/usr/bin/python3) is not installed");
        None
    }
}

/// The agent's client: exit 0 when the server at ARG (`@name` for an abstract one) answered.
fn client(env: &TestEnv) -> PathBuf {
    let path = env.dir().join("client.py");
    write_script(
        &path,
        "import socket, sys\n\
         a = sys.argv[1]\n\
         a = '\\0' + a[1:] if a.startswith('@') else a\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.settimeout(5)\n\
         s.connect(a)\n\
         sys.exit(0 if s.recv(4) == b'pong' else 1)\n",
    );
    path
}

/// The `try NAME COMMAND` preamble of the agents below: records `NAME ok|denied`.
const TRY: &str = r#"r=attempts.txt
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1 ok" >> $r; else echo "$1 denied" >> $r; fi; }
"#;

fn attempts(env: &TestEnv) -> Vec<String> {
    env.read("attempts.txt")
        .lines()
        .map(str::to_string)
        .collect()
}

fn want(doors: &[(&str, bool)]) -> Vec<String> {
    doors
        .iter()
        .map(|(n, ok)| format!("{n} {}", if *ok { "ok" } else { "denied" }))
        .collect()
}

/// Every kind of host socket, each named for the agent.
struct Sockets {
    servers: Vec<(&'static str, Server)>,
}

impl Sockets {
    fn start(env: &TestEnv, tag: &str) -> Sockets {
        let id = format!("ralph-test-{}-{tag}", std::process::id());
        let mut servers = vec![
            ("dir", Server::at(&env.dir().join("sockets/host.sock"))),
            // Where ssh-agent puts it: in /tmp, private in the sandbox (a kept one is bound in).
            (
                "ssh_agent",
                Server::at(&PathBuf::from(format!("/tmp/{id}-ssh/agent.sock"))),
            ),
            ("run", Server::at(&PathBuf::from(format!("/run/{id}.sock")))),
            (
                "var_run_docker",
                Server::at(&PathBuf::from(format!("/var/run/{id}-docker.sock"))),
            ),
            ("tmp", Server::at(&PathBuf::from(format!("/tmp/{id}.sock")))),
            (
                "dev_shm",
                Server::at(&PathBuf::from(format!("/dev/shm/{id}.sock"))),
            ),
            ("abstract", Some(Server::abstract_named(&id))),
        ];
        // Only root may make a socket in /run; the rest is every user's.
        servers.retain(|(n, s)| s.is_some() || !(*n == "run" || *n == "var_run_docker"));
        Sockets {
            servers: servers
                .into_iter()
                .map(|(n, s)| (n, s.unwrap_or_else(|| panic!("cannot make the {n} socket"))))
                .collect(),
        }
    }

    fn get(&self, name: &str) -> &Server {
        &self.servers.iter().find(|(n, _)| *n == name).unwrap().1
    }

    /// The agent: connect to each, then say whether `SSH_AUTH_SOCK` reached it.
    fn script(&self, env: &TestEnv, python: &str) -> PathBuf {
        let client = client(env);
        let mut text = String::from(TRY);
        for (name, s) in &self.servers {
            text.push_str(&format!(
                "try {name} \"{python} {} '{}'\"\n",
                client.display(),
                s.name()
            ));
        }
        text.push_str("try ssh_auth_sock_set 'test -n \"$SSH_AUTH_SOCK\"'\n");
        text.push_str("sed -i 's/- \\[ \\] doors/- [x] doors/' RALPH_TASK.md\n");
        let path = env.dir().join("sockets.sh");
        write_script(&path, &text);
        path
    }
}

fn doors_env() -> TestEnv {
    let env = TestEnv::outside_tmp();
    env.write_task(&["doors"], "");
    env.commit_all("initial");
    env
}

#[test]
fn host_unix_sockets_are_out_of_reach_in_the_sandbox_net_none_included() {
    let Some(python) = python() else { return };
    if !bwrap_works() {
        return;
    }
    // (sandbox flags, sandbox_env_keep = ["SSH_AUTH_SOCK"] in the user's config)
    let cases: [(&[&str], bool); 4] = [
        (&[], false),
        (&["--sandbox"], false),
        (&["--sandbox", "--sandbox-net", "none"], false),
        (&["--sandbox"], true),
    ];
    for (i, (flags, keep)) in cases.into_iter().enumerate() {
        let env = doors_env();
        let sockets = Sockets::start(&env, &i.to_string());
        if keep {
            write_user_config(&env, "sandbox_env_keep = [\"SSH_AUTH_SOCK\"]\n");
        }
        let script = sockets.script(&env, python);
        let ssh = sockets.get("ssh_agent").name();
        let out = run_script(&env, &script, flags, &[("SSH_AUTH_SOCK", ssh.as_str())]);
        assert_exit(&out, 0);
        if stderr(&out).contains("Landlock has no scopes") {
            skip_or_fail("this kernel's Landlock has no scopes: abstract sockets stay open");
            return;
        }
        let sandboxed = !flags.is_empty();
        // Kept on purpose, the variable passes on with its socket.
        let open = |name: &str| !sandboxed || (keep && name == "ssh_agent");
        let mut doors: Vec<(&str, bool)> =
            sockets.servers.iter().map(|(n, _)| (*n, open(n))).collect();
        doors.push(("ssh_auth_sock_set", !sandboxed || keep));
        assert_eq!(attempts(&env), want(&doors), "{flags:?}\n{}", stderr(&out));
        // The servers saw it: every connection in the control, none from the sandbox but a
        // kept one.
        for (name, s) in &sockets.servers {
            assert_eq!(s.accepted() > 0, open(name), "{name}: {flags:?}");
        }
    }
}

/// A stand-in `claude` on PATH that runs `script` (whatever its arguments): the `claude`
/// preset's sandbox, with its CLI state, around an agent of the test's.
fn claude_running(env: &TestEnv, script: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = env.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join("claude");
    std::fs::write(
        &path,
        format!("#!/bin/sh\nexec sh '{}'\n", script.display()),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// What the CLI runs or obeys in its next session outside, existing or not yet.
const SETTINGS: &str =
    r#"{"statusLine":{"type":"command","command":"bash ~/.claude/statusline.sh"}}"#;

fn settings_env() -> TestEnv {
    let env = doors_env();
    let h = &env.home;
    std::fs::create_dir_all(h.join(".claude")).unwrap();
    std::fs::write(h.join(".claude/settings.json"), SETTINGS).unwrap();
    std::fs::write(h.join(".claude/statusline.sh"), "echo status\n").unwrap();
    std::fs::write(h.join(".claude.json"), "{}").unwrap();
    std::fs::create_dir_all(h.join(".codex")).unwrap();
    std::fs::write(h.join(".codex/config.toml"), "model = \"x\"\n").unwrap();
    // Codex's state is the user's choice here: what it runs stays read-only in it.
    write_user_config(&env, "sandbox_writable = [\"~/.codex\"]\n");
    env
}

fn settings_script(env: &TestEnv) -> PathBuf {
    let path = env.dir().join("plant.sh");
    write_script(
        &path,
        &format!(
            r#"{TRY}try settings 'echo "{{\"hooks\":{{}}}}" > "$HOME/.claude/settings.json"'
try settings_local 'echo "{{}}" > "$HOME/.claude/settings.local.json"'
try hooks 'mkdir -p "$HOME/.claude/hooks" && echo "touch x" > "$HOME/.claude/hooks/planted.sh"'
try commands 'mkdir -p "$HOME/.claude/commands" && echo x > "$HOME/.claude/commands/planted.md"'
try claude_json 'echo "{{\"mcpServers\":{{}}}}" > "$HOME/.claude.json"'
try statusline 'echo "touch x" >> "$HOME/.claude/statusline.sh"'
try codex_config 'echo "notify = [\"x\"]" >> "$HOME/.codex/config.toml"'
try codex_rules 'mkdir -p "$HOME/.codex/rules" && echo x > "$HOME/.codex/rules/planted.rules"'
try claude_state 'echo x > "$HOME/.claude/history.jsonl"'
try codex_state 'echo x > "$HOME/.codex/history.jsonl"'
sed -i 's/- \[ \] doors/- [x] doors/' RALPH_TASK.md
"#
        ),
    );
    path
}

#[test]
fn what_the_cli_runs_later_is_read_only_while_its_state_stays_writable() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = settings_env();
        let script = settings_script(&env);
        let path = claude_running(&env, &script);
        let mut args = vec!["run", "--agent", "claude", "--yes", "--grace", "1s"];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = env.ralph_with_limit(&args, &[("PATH", path.as_str())], Duration::from_secs(60));
        assert_exit(&out, 0);
        let planted = !sandboxed;
        let doors = [
            ("settings", planted),
            ("settings_local", planted),
            ("hooks", planted),
            ("commands", planted),
            ("claude_json", planted),
            ("statusline", planted),
            ("codex_config", planted),
            ("codex_rules", planted),
            ("claude_state", true),
            ("codex_state", true),
        ];
        assert_eq!(
            attempts(&env),
            want(&doors),
            "sandboxed: {sandboxed}\n{}",
            stderr(&out)
        );
        let h = &env.home;
        let read = |rel: &str| std::fs::read_to_string(h.join(rel)).unwrap_or_default();
        assert_eq!(read(".claude/settings.json") == SETTINGS, sandboxed);
        assert_eq!(read(".claude/statusline.sh") == "echo status\n", sandboxed);
        assert_eq!(read(".codex/config.toml") == "model = \"x\"\n", sandboxed);
        assert_eq!(h.join(".claude/hooks/planted.sh").exists(), planted);
        assert_eq!(h.join(".codex/rules/planted.rules").exists(), planted);
        if sandboxed {
            // What did not exist was made in its empty form, so that nothing could be planted.
            assert_eq!(read(".claude/settings.local.json"), "{}");
            assert!(h.join(".claude/hooks").is_dir());
            assert_eq!(read(".claude.json"), "{}");
        }
    }
}

/// An agent that records whether it runs in the sandbox's pid namespace (its pid 1 is bwrap;
/// the host's is its init) and whether it has a network (more interfaces than loopback), and
/// ticks one box per iteration.
fn pid1_script(env: &TestEnv) -> PathBuf {
    let path = env.dir().join("pid1.sh");
    write_script(
        &path,
        "echo \"$RALPH_ITERATION $(grep -c : /proc/net/dev) $(cat /proc/1/comm)\" >> pid1.txt\n\
         if grep -q -- '- \\[ \\] first' RALPH_TASK.md; then\n\
         \x20 sed -i 's/- \\[ \\] first/- [x] first/' RALPH_TASK.md\n\
         else\n\
         \x20 sed -i 's/- \\[ \\] second/- [x] second/' RALPH_TASK.md\n\
         fi\n",
    );
    path
}

#[test]
fn a_resumed_sandboxed_run_is_still_sandboxed() {
    if !bwrap_works() {
        return;
    }
    // (the run's flags, the resume's command): `ralph resume` and `ralph run --resume`, neither
    // saying --sandbox.
    let cases: [(&[&str], &[&str]); 3] = [
        (&[], &["resume"]),
        (&["--sandbox"], &["resume"]),
        (
            &["--sandbox", "--sandbox-net", "none"],
            &["run", "--resume"],
        ),
    ];
    for (flags, resume) in cases {
        let env = TestEnv::outside_tmp();
        env.write_task(&["first", "second"], "");
        env.commit_all("initial");
        let script = pid1_script(&env);
        let mut first = vec!["--max-iterations", "1"];
        first.extend_from_slice(flags);
        let out = run_script(&env, &script, &first, &[]);
        assert_exit(&out, 3);
        let mut again = resume.to_vec();
        again.extend(["--yes", "--max-iterations", "2"]);
        let out = env.ralph_with_limit(&again, &[], Duration::from_secs(60));
        assert_exit(&out, 0);
        let sandboxed = !flags.is_empty();
        let seen = env.read("pid1.txt");
        let in_bwrap: Vec<bool> = seen.lines().map(|l| l.ends_with(" bwrap")).collect();
        assert_eq!(
            in_bwrap,
            [sandboxed, sandboxed],
            "{flags:?} {resume:?}\n{}",
            stderr(&out)
        );
        // `--sandbox-net none` holds on resume: loopback alone, both times.
        let lo_only: Vec<bool> = seen
            .lines()
            .map(|l| l.split(' ').nth(1) == Some("1"))
            .collect();
        let none = flags.contains(&"none");
        let host = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
        if host.matches(':').count() > 1 {
            assert_eq!(lo_only, [none, none], "{seen}");
        }
        let state: serde_json::Value =
            serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
        let net = if flags.contains(&"none") {
            "none"
        } else {
            "host"
        };
        let want = sandboxed.then(|| serde_json::json!({ "net": net }));
        assert_eq!(state["pinned"].get("sandbox").cloned(), want, "{state}");
    }
}

#[test]
fn git_configuration_planted_through_includes_and_config_worktree_is_refused() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        let marks = env.dir().join("marks");
        std::fs::create_dir_all(&marks).unwrap();
        // The user's configuration names an include that does not exist yet, one in the work
        // tree (tracked), and per-worktree configuration with no config.worktree yet.
        env.write("branch.gitconfig", "# the user's\n");
        env.write_task(&["doors"], "");
        env.commit_all("initial");
        env.git(&["config", "include.path", "extra.config"]);
        env.git(&[
            "config",
            "includeIf.onbranch:**.path",
            "../branch.gitconfig",
        ]);
        env.git(&["config", "core.repositoryformatversion", "1"]);
        env.git(&["config", "extensions.worktreeConfig", "true"]);
        let filter = |name: &str| {
            format!(
                "printf '[filter \\\"{name}\\\"]\\n\\tclean = touch {}/{name}; cat\\n' >> ",
                marks.display()
            )
        };
        let script = env.dir().join("include.sh");
        write_script(
            &script,
            &format!(
                "{TRY}try include \"{} .git/extra.config\"\n\
                 try include_if \"{} branch.gitconfig\"\n\
                 try config_worktree \"{} .git/config.worktree\"\n\
                 printf '*.txt filter=a\\n*.md filter=b\\n*.c filter=c\\n' > .gitattributes\n\
                 echo x > f.txt; echo x > f.c\n\
                 sed -i 's/- \\[ \\] doors/- [x] doors/' RALPH_TASK.md\n",
                filter("a"),
                filter("b"),
                filter("c"),
            ),
        );
        let args: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run_script(&env, &script, args, &[]);
        assert_exit(&out, 0);
        let planted = !sandboxed;
        let doors = [
            ("include", planted),
            ("include_if", planted),
            ("config_worktree", planted),
        ];
        assert_eq!(
            attempts(&env),
            want(&doors),
            "sandboxed: {sandboxed}\n{}",
            stderr(&out)
        );
        // Git outside reads what was planted (the control), or nothing.
        let config = env.git(&["config", "--list"]);
        for f in ["a", "b", "c"] {
            let key = format!("filter.{f}.clean=");
            assert_eq!(config.contains(&key), planted, "filter {f}: {config}");
        }
        if sandboxed {
            let left: Vec<_> = std::fs::read_dir(&marks).unwrap().collect();
            assert!(left.is_empty(), "a planted filter ran outside: {left:?}");
            assert_eq!(env.read(".git/extra.config"), "");
            assert_eq!(env.read("branch.gitconfig"), "# the user's\n");
        }
    }
}

#[test]
fn a_settings_link_in_the_cli_state_is_refused_since_a_mount_cannot_pin_a_link() {
    if !bwrap_works() {
        return;
    }
    let env = doors_env();
    let dotfiles = env.dir().join("dotfiles/settings.json");
    std::fs::create_dir_all(dotfiles.parent().unwrap()).unwrap();
    std::fs::write(&dotfiles, SETTINGS).unwrap();
    let state = env.home.join(".claude");
    std::fs::create_dir_all(&state).unwrap();
    let link = state.join("settings.json");
    std::os::unix::fs::symlink(&dotfiles, &link).unwrap();
    // The control: a mount cannot pin the link (bwrap refuses to bind onto it), and with the
    // state bound writable, as the CLI needs it, the agent replaces the link itself.
    let bwrap = |pin: bool, cmd: &str| {
        let mut c = std::process::Command::new("bwrap");
        c.args(["--ro-bind", "/", "/", "--dev", "/dev", "--bind"])
            .args([&state, &state]);
        if pin {
            c.arg("--ro-bind").args([&link, &link]);
        }
        c.args(["sh", "-c", cmd])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    };
    assert!(!bwrap(true, "true").success(), "a link cannot be pinned");
    let replace = format!(
        "rm -f '{0}' && echo '{{\"hooks\":{{}}}}' > '{0}'",
        link.display()
    );
    assert!(bwrap(false, &replace).success());
    assert!(!link.is_symlink(), "the control: the link was replaced");
    assert_eq!(std::fs::read_to_string(&dotfiles).unwrap(), SETTINGS);
    // ralph refuses to start so, naming the link and the cure.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&dotfiles, &link).unwrap();
    let script = env.dir().join("noop.sh");
    write_script(&script, "true\n");
    let path = claude_running(&env, &script);
    let out = env.ralph_with_limit(
        &["run", "--agent", "claude", "--yes", "--sandbox"],
        &[("PATH", path.as_str())],
        Duration::from_secs(60),
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("symbolic link") && err.contains("settings.json") && err.contains("ln -f"),
        "{err}"
    );
    assert!(link.is_symlink());
    // A hard link is a file: pinned, and the run goes.
    std::fs::remove_file(&link).unwrap();
    std::fs::hard_link(&dotfiles, &link).unwrap();
    let out = env.ralph_with_limit(
        &[
            "run",
            "--agent",
            "claude",
            "--yes",
            "--sandbox",
            "--max-iterations",
            "1",
        ],
        &[("PATH", path.as_str())],
        Duration::from_secs(60),
    );
    assert_exit(&out, 3);
}

#[test]
fn a_sandboxed_run_killed_after_its_agent_unpinned_the_sandbox_resumes_sandboxed() {
    let Some(python) = python() else { return };
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["first", "second"], "");
    env.commit_all("initial");
    // The first agent takes the sandbox out of the repository's state.json, then waits to be
    // killed with ralph; the next ticks the boxes and says where it runs.
    let script = env.dir().join("unpin.sh");
    write_script(
        &script,
        &format!(
            "if [ ! -e ../unpinned ] && [ ! -e unpinned ]; then\n\
             \x20 {python} -c \"import json; p='.ralph/state.json'; d=json.load(open(p)); \
             d['pinned'].pop('sandbox'); json.dump(d, open(p, 'w'))\"\n\
             \x20 touch unpinned\n\
             \x20 sleep 30\n\
             fi\n\
             echo \"$(cat /proc/1/comm)\" >> pid1.txt\n\
             sed -i 's/- \\[ \\] first/- [x] first/; s/- \\[ \\] second/- [x] second/' RALPH_TASK.md\n"
        ),
    );
    let agent = format!("sh '{}'", script.display());
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--agent-cmd", &agent, "--yes", "--sandbox"]);
    let bg = env.spawn(cmd);
    assert!(
        wait_until(Duration::from_secs(20), || env
            .repo
            .join("unpinned")
            .exists()),
        "the agent did not start"
    );
    bg.signal(libc::SIGKILL);
    let (code, _, _) = bg.wait(Duration::from_secs(10));
    assert_eq!(code, None, "killed by SIGKILL");
    // The fault happened: the repository's state.json no longer says the run is sandboxed.
    let state: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert!(state["pinned"].get("sandbox").is_none(), "{state}");
    // The resume, without --sandbox, runs in the sandbox all the same (ralph's own copy).
    let out = env.ralph_with_limit(&["resume", "--yes"], &[], Duration::from_secs(60));
    assert_exit(&out, 0);
    assert_eq!(env.read("pid1.txt"), "bwrap\n", "{}", stderr(&out));
}
