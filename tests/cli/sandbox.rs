//! `--sandbox`: what a scripted agent can and cannot touch, the side doors (hooks, repository
//! commands, git configuration) closed in this run and the next, the bwrap argv of `--dry-run`,
//! the refusal without bwrap, and the real Claude Code CLI in the sandbox. Every test has its
//! control: the same agent without `--sandbox` succeeds at what the sandbox stops.
//!
//! The environments live outside `/tmp` (`TestEnv::outside_tmp`): the sandbox's private `/tmp`
//! would hide a HOME there for the wrong reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// Whether bwrap works here; else the test says why it is skipped.
fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub(crate) fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// The user's own `~/.config/ralph/config.toml` (where `sandbox_writable` and
/// `sandbox_env_keep` are taken from).
pub(crate) fn write_user_config(env: &TestEnv, text: &str) {
    let dir = env.home.join(".config/ralph");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// `ralph run --agent-cmd 'sh SCRIPT' --yes ARGS`, bounded.
pub(crate) fn run_script(
    env: &TestEnv,
    script: &Path,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> std::process::Output {
    let agent = format!("sh '{}'", script.display());
    let mut all = vec![
        "run",
        "--agent-cmd",
        agent.as_str(),
        "--yes",
        "--grace",
        "1s",
    ];
    all.extend_from_slice(args);
    env.ralph_with_limit(&all, extra_env, Duration::from_secs(60))
}

/// The escape attempts: each records `NAME ok` or `NAME denied` in `attempts.txt`; then the
/// agent does its work (the box ticked, files in the repository, /tmp and its CLI state).
fn escape_script(env: &TestEnv, etc_file: &str) -> PathBuf {
    let script = env.dir().join("escape.sh");
    let sibling = env.dir().join("sibling");
    write_script(
        &script,
        &format!(
            r#"r=attempts.txt
try() {{ if sh -c "$2" >/dev/null 2>&1; then echo "$1 ok" >> $r; else echo "$1 denied" >> $r; fi; }}
try home 'echo x > "$HOME/x"'
try sibling 'mkdir -p {sibling} && echo x > {sibling}/x'
try etc 'echo x > {etc_file}'
try ssh 'grep -q secret "$HOME/.ssh/id_x"'
try aws 'grep -q secret "$HOME/.aws/credentials"'
try tmp 'echo x > /tmp/ralph-x && grep -q x /tmp/ralph-x'
try state 'echo x > "$HOME/.claude/x"'
try repo 'echo x > work.txt'
sed -i 's/- \[ \] escape/- [x] escape/' RALPH_TASK.md
"#,
            sibling = sibling.display()
        ),
    );
    script
}

fn escape_env() -> TestEnv {
    let env = TestEnv::outside_tmp();
    for (rel, text) in [
        (".ssh/id_x", "secret key"),
        (".aws/credentials", "secret=1"),
    ] {
        let p = env.home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(env.home.join(".claude")).unwrap();
    env.write_task(&["escape"], "");
    env.commit_all("initial");
    env
}

fn attempts(env: &TestEnv) -> Vec<String> {
    env.read("attempts.txt")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn an_agent_in_the_sandbox_cannot_write_outside_or_read_secrets() {
    if !bwrap_works() {
        return;
    }
    let etc_file = format!("/etc/ralph-x-{}", std::process::id());
    // (sandboxed, `sandbox_writable = ["~/.claude"]` in the user's config): a custom command
    // gets no CLI state unless the user names it.
    for (sandboxed, state_named) in [(true, false), (true, true), (false, false)] {
        let env = escape_env();
        if state_named {
            write_user_config(&env, "sandbox_writable = [\"~/.claude\"]\n");
        }
        let script = escape_script(&env, &etc_file);
        let args: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run_script(&env, &script, args, &[]);
        let _ = std::fs::remove_file(&etc_file);
        assert_exit(&out, 0);
        let got = attempts(&env);
        let etc_writable = is_root();
        let want: Vec<String> = [
            ("home", !sandboxed),
            ("sibling", !sandboxed),
            ("etc", !sandboxed && etc_writable),
            ("ssh", !sandboxed),
            ("aws", !sandboxed),
            ("tmp", true),
            ("state", !sandboxed || state_named),
            ("repo", true),
        ]
        .iter()
        .map(|(n, ok)| format!("{n} {}", if *ok { "ok" } else { "denied" }))
        .collect();
        assert_eq!(got, want, "sandboxed: {sandboxed}\n{}", stderr(&out));
        assert_eq!(env.home.join("x").exists(), !sandboxed);
        assert_eq!(env.dir().join("sibling/x").exists(), !sandboxed);
        assert_eq!(
            env.home.join(".claude/x").exists(),
            !sandboxed || state_named
        );
        assert!(env.read("RALPH_TASK.md").contains("- [x] escape"));
    }
}

/// An agent that opens every side door it can find, each writing a marker into `marks/`
/// (outside the repository) when something runs it outside the sandbox: the first iteration
/// opens them and ticks the first box, later ones tick the second.
fn doors_script(env: &TestEnv) -> PathBuf {
    let m = env.dir().join("marks");
    std::fs::create_dir_all(&m).unwrap();
    let m = m.display();
    let script = env.dir().join("doors.sh");
    write_script(
        &script,
        &format!(
            r#"if [ ! -e doors-opened ]; then
  touch doors-opened
  for h in pre-commit commit-msg post-index-change; do
    printf '#!/bin/sh\ntouch {m}/%s 2>/dev/null\nexit 0\n' $h > .git/hooks/$h
    chmod +x .git/hooks/$h
  done
  mkdir -p .ralph
  printf 'test_command = "touch {m}/test 2>/dev/null; true"\n[hooks]\non_iteration = "touch {m}/hook 2>/dev/null; true"\n' > .ralph/config.toml
  git config filter.x.clean "sh -c 'touch {m}/filter 2>/dev/null; cat'" 2>/dev/null
  git config core.fsmonitor "touch {m}/fsmonitor 2>/dev/null; true" 2>/dev/null
  echo '* filter=x' > .gitattributes
  echo 'a file for the filter' > filtered.txt
  sed -i 's/- \[ \] first/- [x] first/' RALPH_TASK.md
else
  echo "$RALPH_ITERATION" >> later.txt
  sed -i 's/- \[ \] second/- [x] second/' RALPH_TASK.md
fi
"#
        ),
    );
    script
}

/// The hooks `doors_script` plants, in the repository's own git directory.
fn plant_hooks(env: &TestEnv) {
    let m = env.dir().join("marks");
    for h in ["pre-commit", "commit-msg", "post-index-change"] {
        let hook = env.repo.join(".git/hooks").join(h);
        let text = format!("#!/bin/sh\ntouch {}/{h} 2>/dev/null\nexit 0\n", m.display());
        std::fs::write(&hook, text).unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
}

fn marks(env: &TestEnv) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(env.dir().join("marks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn the_repositorys_hooks_commands_and_git_config_run_in_the_sandbox_this_run_and_the_next() {
    if !bwrap_works() {
        return;
    }
    // Without the watcher ralph's git commands would use the repository's core.fsmonitor.
    let no_watch = [("RALPH_NO_WATCH", "1")];
    for sandboxed in [true, false] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["first", "second"], "");
        env.commit_all("initial");
        let script = doors_script(&env);
        let mut args = vec!["--max-iterations", "1"];
        if sandboxed {
            args.push("--sandbox");
            // The sandboxed agent writes hooks in its own git directory only (issue 29): the
            // repository's are planted here, as a run without the sandbox would have, to be
            // run by ralph's commits in the sandbox all the same.
            plant_hooks(&env);
        }
        let out = run_script(&env, &script, &args, &no_watch);
        assert_exit(&out, 3);
        // The next run reads the `.ralph/config.toml` the agent wrote (a new run: a resume
        // keeps the test command its run started with).
        let agent = format!("sh '{}'", script.display());
        let mut resume = vec![
            "run",
            "--reset",
            "--agent-cmd",
            agent.as_str(),
            "--yes",
            "--max-iterations",
            "3",
        ];
        if sandboxed {
            resume.push("--sandbox");
        }
        let out = env.ralph_with_limit(&resume, &no_watch, Duration::from_secs(60));
        assert_exit(&out, 0);
        assert!(env.read("RALPH_TASK.md").contains("- [x] second"));
        let got = marks(&env);
        if sandboxed {
            assert_eq!(got, Vec::<String>::new(), "{}", stderr(&out));
            assert!(!env.read(".git/config").contains("filter"));
        } else {
            // Without the sandbox, what ralph runs on the repository's say runs as the user
            // (commit hooks, the filter git applies, the commands), but never a hook or a
            // monitor that git itself would start for ralph's own git commands.
            let want = ["commit-msg", "filter", "hook", "pre-commit", "test"];
            assert_eq!(got, want, "{}", stderr(&out));
        }
        // The control: what the agent planted is live — the user's own git runs it (in the
        // sandbox the agent could not set a monitor: the configuration is read-only there).
        std::fs::write(env.repo.join("later.txt"), "touched by the user\n").unwrap();
        env.git(&["add", "-A"]);
        let after = marks(&env);
        let live: &[&str] = if sandboxed {
            &["post-index-change"]
        } else {
            &["fsmonitor", "post-index-change"]
        };
        for m in live {
            assert!(
                after.iter().any(|x| x == m),
                "{m} did not run for git: {after:?}"
            );
        }
    }
}

#[test]
fn a_commondir_planted_in_the_git_dir_is_refused() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["a"], "");
    env.commit_all("initial");
    // A common directory of the agent's making, with a configuration of its own.
    env.git(&["init", "-q", "evil"]);
    std::fs::write(env.repo.join(".git/commondir"), "../evil/.git\n").unwrap();
    let out = env.ralph(&["run", "--sandbox", "--dry-run", "--agent-cmd", "sh x.sh"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("commondir"), "{}", stderr(&out));
    std::fs::remove_file(env.repo.join(".git/commondir")).unwrap();
    let out = env.ralph(&["run", "--sandbox", "--dry-run", "--agent-cmd", "sh x.sh"]);
    assert_exit(&out, 0);
}

#[test]
fn dry_run_prints_the_bwrap_argv_and_no_bwrap_is_refused() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    std::fs::create_dir_all(env.home.join(".ssh")).unwrap();
    env.write_task(&["a"], "");
    env.commit_all("initial");
    // A socket of the host's, and a variable naming an agent's.
    let sock = env.dir().join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let out = env.ralph_with_limit(
        &[
            "run",
            "--dry-run",
            "--sandbox",
            "--sandbox-net",
            "none",
            "--agent-cmd",
            "/bin/sh x.sh",
        ],
        &[("SSH_AUTH_SOCK", "/nonexistent/agent.sock")],
        Duration::from_secs(30),
    );
    assert_exit(&out, 0);
    let text = stdout(&out);
    let argv = text
        .lines()
        .find_map(|l| l.strip_prefix("argv: "))
        .unwrap_or_else(|| panic!("{text}"));
    let repo = env.repo.display();
    let ssh = env.home.join(".ssh");
    for part in [
        "bwrap --die-with-parent --new-session --unshare-user --unshare-pid --cap-drop ALL --unshare-net --ro-bind / / --dev /dev --proc /proc ".to_string(),
        " --tmpfs /dev/shm --remount-ro /dev --ro-bind-try /proc/sys /proc/sys ".to_string(),
        " --tmpfs /tmp ".to_string(),
        " --tmpfs /run ".to_string(),
        format!("--bind {repo} {repo} "),
        // The agent's own git directory where the repository's is, its objects read-only.
        format!(" {repo}/.git --ro-bind {repo}/.git/objects {repo}/.git/ralph-objects "),
        // The repository's configuration: the agent's copy, without credentials, read-only.
        format!("/git/config {repo}/.git/config "),
        format!("--ro-bind {repo}/.git/config.worktree {repo}/.git/config.worktree "),
        format!("--ro-bind /dev/null {} ", sock.display()),
        format!("--tmpfs {} ", ssh.display()),
        " --unsetenv SSH_AUTH_SOCK ".to_string(),
        " -- /run/ralph/ralph __confine ".to_string(),
    ] {
        assert!(argv.contains(&part), "{part} not in {argv}");
    }
    // The repository's git directory itself is never bound writable, nor its configuration
    // shown as it is.
    let real = format!("--bind {repo}/.git {repo}/.git ");
    assert!(!argv.contains(&real), "{argv}");
    let config = format!("--ro-bind {repo}/.git/config {repo}/.git/config ");
    assert!(!argv.contains(&config), "{argv}");
    // `--scoped` where the kernel has Landlock's scopes.
    let program = argv
        .find(" -- /bin/sh x.sh")
        .unwrap_or_else(|| panic!("{argv}"));
    assert!(
        argv.find(" __confine ").is_some_and(|c| c < program),
        "{argv}"
    );
    // A dry run lists what the sandbox would create, and creates nothing.
    assert!(!env.repo.join(".git/config.worktree").exists());
    // Control: without --sandbox the agent runs as itself.
    let out = env.ralph(&["run", "--dry-run", "--agent-cmd", "/bin/sh x.sh"]);
    assert!(
        stdout(&out).contains("argv: /bin/sh x.sh"),
        "{}",
        stdout(&out)
    );
    // A PATH with git and sh but no bwrap.
    let bin = env.dir().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["git", "sh"] {
        let found = which(tool);
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let path = bin.display().to_string();
    let out = env.ralph_with_limit(
        &["run", "--sandbox", "--agent-cmd", "/bin/sh x.sh", "--yes"],
        &[("PATH", path.as_str())],
        Duration::from_secs(30),
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("`bwrap` is not on PATH") && err.contains("apt-get install bubblewrap"),
        "{err}"
    );
    assert!(!env.repo.join(".ralph/state.json").exists());
}

fn which(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{tool} not on PATH"))
}

/// The real Claude Code CLI, two iterations against the stand-in server, in the sandbox, as
/// `uid` when given.
fn claude_two_iterations(env: &TestEnv, uid: Option<u32>) -> std::process::Output {
    env.write_task(&["first box", "second box"], "");
    env.commit_all("initial");
    if let Some(uid) = uid {
        // The whole environment (home, repository, logs) becomes the user's.
        let status = std::process::Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}")])
            .arg(env.dir())
            .status()
            .unwrap();
        assert!(status.success());
    }
    crate::real_agents::with_standin_as(
        env,
        uid,
        "claude",
        None,
        &[],
        &crate::real_agents::run_args("claude", &["--max-iterations", "4", "--sandbox"]),
    )
}

fn assert_two_iterations(env: &TestEnv, out: &std::process::Output) {
    assert_exit(out, 0);
    let recs = env.iter_records();
    assert_eq!(recs.len(), 2, "{recs:?}\n{}\n{}", stdout(out), stderr(out));
    assert!(env.read("RALPH_TASK.md").contains("- [x] second box"));
    let log = env.read(&format!(
        ".ralph/runs/{}/iter-001.log",
        env.read(".ralph/state.json")
            .split("\"run_id\":")
            .nth(1)
            .and_then(|s| s.split('"').nth(1))
            .unwrap_or_default()
    ));
    assert!(log.contains("\"is_error\":false"), "{log}");
}

#[test]
fn claude_completes_two_iterations_in_the_sandbox() {
    if crate::real_agents::installed("claude").is_none() || !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    let out = claude_two_iterations(&env, None);
    assert_two_iterations(&env, &out);
}

#[test]
fn claude_completes_two_iterations_in_the_sandbox_as_a_normal_user() {
    if crate::real_agents::installed("claude").is_none() || !bwrap_works() {
        return;
    }
    if !is_root() {
        // Already a normal user: the test above is this one.
        eprintln!("skipping: not root, so the sandbox test above already ran as a normal user");
        return;
    }
    const NOBODY: u32 = 65534;
    let probe = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["bwrap", "--ro-bind", "/", "/", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skip_or_fail(
            "this machine lets no normal user make namespaces (`setpriv … bwrap` as uid 65534 fails)",
        );
        return;
    }
    let env = TestEnv::outside_tmp();
    let out = claude_two_iterations(&env, Some(NOBODY));
    assert_two_iterations(&env, &out);
    // It ran as that user: the commits' files are theirs.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(env.repo.join(".ralph/state.json")).unwrap();
    assert_eq!(meta.uid(), NOBODY);
}

/// Copilot, Codex, droid, opencode and Qwen Code in the sandbox against the stand-in server: they
/// work with what they run later (settings, MCP and hook files, skills, rules, agents, plugins)
/// read-only and created empty.
fn completes_two_iterations_in_the_sandbox(cli: &str) {
    if crate::real_agents::installed(cli).is_none() || !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["first box", "second box"], "");
    env.commit_all("initial");
    let out = crate::real_agents::with_standin(
        &env,
        cli,
        None,
        &[],
        &crate::real_agents::run_args(cli, &["--max-iterations", "4", "--sandbox"]),
    );
    assert_exit(&out, 0);
    let recs = env.iter_records();
    assert_eq!(
        recs.len(),
        2,
        "{recs:?}\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(env.read("RALPH_TASK.md").contains("- [x] second box"));
}

#[test]
fn copilot_completes_two_iterations_in_the_sandbox() {
    completes_two_iterations_in_the_sandbox("copilot");
}

#[test]
fn codex_completes_two_iterations_in_the_sandbox() {
    completes_two_iterations_in_the_sandbox("codex");
}

#[test]
fn droid_completes_two_iterations_in_the_sandbox() {
    completes_two_iterations_in_the_sandbox("droid");
}

#[test]
fn opencode_completes_two_iterations_in_the_sandbox() {
    completes_two_iterations_in_the_sandbox("opencode");
}

#[test]
fn qwen_completes_two_iterations_in_the_sandbox() {
    completes_two_iterations_in_the_sandbox("qwen");
}

/// The pids of the processes running `sh SCRIPT` (a sandboxed one as well: the host's `/proc`
/// shows every pid namespace's processes; bwrap's own command line, which also names the
/// script, does not count).
fn processes_running(script: &std::path::Path) -> Vec<i32> {
    let want = [b"sh".as_slice(), script.as_os_str().as_encoded_bytes(), b""];
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).eq(want.iter().copied()))
        })
        .collect()
}

/// An agent that says so in the repository when SIGTERM reaches it, then exits.
fn graceful_script(env: &TestEnv) -> PathBuf {
    let script = env.dir().join("graceful.sh");
    write_script(
        &script,
        "trap 'echo term > got-term.txt; exit 143' TERM\n\
         echo started > started.txt\n\
         while :; do sleep 0.05; done\n",
    );
    script
}

#[test]
fn a_sandboxed_agent_stopped_by_a_timeout_gets_sigterm_and_its_grace() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["stop"], "");
    env.commit_all("initial");
    let script = graceful_script(&env);

    // The control: bubblewrap itself dies of SIGTERM without passing it on, and what it runs
    // dies with its PID namespace before its handler can run.
    let mut bwrap = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--bind"])
        .arg(&env.repo)
        .arg(&env.repo)
        .args(["--dev", "/dev", "--proc", "/proc", "--die-with-parent"])
        .args(["--new-session", "--unshare-pid", "--chdir"])
        .arg(&env.repo)
        .arg("sh")
        .arg(&script)
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || env
        .repo
        .join("started.txt")
        .exists()));
    let agent = processes_running(&script);
    assert!(!agent.is_empty(), "the agent runs in bwrap");
    // SAFETY: kill takes a pid and a signal number; the child is ours and unreaped.
    unsafe { libc::kill(bwrap.id() as i32, libc::SIGTERM) };
    let _ = bwrap.wait();
    // Once the agent is gone, its handler can no longer run.
    assert_all_dead(&agent, Duration::from_secs(10));
    assert!(
        !env.repo.join("got-term.txt").exists(),
        "the control: SIGTERM to bwrap never reaches the agent"
    );
    std::fs::remove_file(env.repo.join("started.txt")).unwrap();

    // Under ralph's guard, the stop reaches the agent inside the sandbox.
    let out = run_script(
        &env,
        &script,
        &["--sandbox", "--timeout", "500ms", "--max-iterations", "1"],
        &[],
    );
    assert!(env.repo.join("started.txt").exists(), "{}", stderr(&out));
    assert!(
        env.repo.join("got-term.txt").exists(),
        "the sandboxed agent got SIGTERM: {}",
        env.activity()
    );
    assert!(
        env.activity().contains("(stopped with SIGTERM)"),
        "{}",
        env.activity()
    );
}
