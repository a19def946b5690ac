//! The test environment: an isolated HOME and git config, a fresh repository, the fake agent.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

pub(crate) struct TestEnv {
    _dir: tempfile::TempDir,
    pub(crate) home: PathBuf,
    pub(crate) repo: PathBuf,
    /// Where the fake agent records prompts, argv, env and pids.
    pub(crate) log: PathBuf,
}

/// Whether `--sandbox` would hide `p` behind one of its private mounts (`/tmp`, `/run`,
/// `/var/run`, `/dev/shm`): a `CARGO_TARGET_DIR` or a clone under `/tmp`, as many CI systems
/// have them, puts the tests' agents and repositories there.
pub(crate) fn hidden_in_sandbox(p: &std::path::Path) -> bool {
    let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    ["/tmp", "/run", "/var/run", "/dev/shm"]
        .iter()
        .any(|m| p.starts_with(m))
}

/// A directory a sandboxed agent sees: the target's scratch directory, unless the sandbox
/// hides it, then `/var/tmp/ralph-tests`.
pub(crate) fn visible_dir() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if !hidden_in_sandbox(&target) {
        return target;
    }
    let dir = PathBuf::from("/var/tmp/ralph-tests");
    std::fs::create_dir_all(&dir).expect("/var/tmp/ralph-tests");
    dir
}

/// The path of the fake agent built from `testing/fake_agent.rs` (an example target); when the
/// target directory is where the sandbox hides it, a copy in [`visible_dir`].
pub(crate) fn fake_agent() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ralph"));
    let p = bin
        .parent()
        .expect("target dir")
        .join("examples")
        .join("fake-agent");
    assert!(
        p.exists(),
        "the fake agent is not built at {}: run the whole suite with `cargo test` (it builds examples)",
        p.display()
    );
    visible_copy(&p)
}

/// `p` itself when the sandbox sees it, else a copy of the file (made once per process, by
/// rename, keyed by its size and time) in [`visible_dir`]: a test program under a clone or a
/// target directory in `/tmp`, run inside the sandbox.
pub(crate) fn visible_copy(p: &std::path::Path) -> PathBuf {
    static COPIES: std::sync::Mutex<Vec<(PathBuf, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    if !hidden_in_sandbox(p) {
        return p.to_path_buf();
    }
    let mut copies = COPIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, to)) = copies.iter().find(|(from, _)| from == p) {
        return to.clone();
    }
    let meta = std::fs::metadata(p).unwrap();
    let stamp = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = p.file_name().unwrap().to_string_lossy();
    let to = visible_dir().join(format!("{name}-{}-{stamp}", meta.len()));
    if !to.exists() {
        let tmp = tempfile::NamedTempFile::new_in(visible_dir()).unwrap();
        std::fs::copy(p, tmp.path()).unwrap();
        tmp.persist(&to).unwrap();
    }
    copies.push((p.to_path_buf(), to.clone()));
    to
}

impl TestEnv {
    pub(crate) fn new() -> TestEnv {
        Self::in_dir(tempfile::tempdir().expect("tempdir"))
    }

    /// A test environment where the sandbox sees it ([`visible_dir`]): for tests of
    /// `--sandbox`, whose private `/tmp` would hide a HOME or repository there anyway.
    pub(crate) fn outside_tmp() -> TestEnv {
        Self::in_dir(tempfile::tempdir_in(visible_dir()).expect("tempdir"))
    }

    /// The directory holding `home`, `repo` and the agent log.
    pub(crate) fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    fn in_dir(dir: tempfile::TempDir) -> TestEnv {
        let home = dir.path().join("home");
        let repo = dir.path().join("repo");
        let log = dir.path().join("agent-log");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        let env = TestEnv {
            _dir: dir,
            home,
            repo,
            log,
        };
        env.git(&["init", "-q", "-b", "main"]);
        env.git(&["config", "user.name", "Test User"]);
        env.git(&["config", "user.email", "test@example.com"]);
        env
    }

    /// A directory that is not a git repository.
    pub(crate) fn plain_dir(&self) -> PathBuf {
        let p = self.home.join("plain");
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub(crate) fn isolate(&self, cmd: &mut std::process::Command) {
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LANG", "C.UTF-8")
            .env("FAKE_AGENT_LOG", &self.log);
    }

    /// A command with the isolated environment of this test.
    pub(crate) fn command(&self, program: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new(program);
        self.isolate(&mut cmd);
        cmd
    }

    pub(crate) fn git(&self, args: &[&str]) -> String {
        let mut cmd = std::process::Command::new("git");
        self.isolate(&mut cmd);
        let out = cmd
            .args(args)
            .current_dir(&self.repo)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What `git status --porcelain | cksum` prints in the repository, without the newline.
    pub(crate) fn porcelain_cksum(&self) -> String {
        let mut cmd = std::process::Command::new("sh");
        self.isolate(&mut cmd);
        let out = cmd
            .args(["-c", "git status --porcelain | cksum"])
            .current_dir(&self.repo)
            .output()
            .expect("sh");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub(crate) fn write(&self, rel: &str, text: &str) {
        let p = self.repo.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, text).unwrap();
    }

    pub(crate) fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.repo.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// A task file with the given criteria and optional extra frontmatter lines.
    pub(crate) fn write_task(&self, criteria: &[&str], frontmatter: &str) {
        let mut s = format!(
            "---\ntask: Test task\n{frontmatter}---\n# Task: Test task\n\nDo it.\n\n## Success Criteria\n"
        );
        for c in criteria {
            s.push_str(&format!("- [ ] {c}\n"));
        }
        self.write("RALPH_TASK.md", &s);
    }

    /// Commit everything as the user would before a run.
    pub(crate) fn commit_all(&self, msg: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", msg]);
    }

    pub(crate) fn ralph_cmd(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"));
        self.isolate(&mut cmd);
        cmd.current_dir(&self.repo);
        cmd
    }

    /// Run ralph with args; kill it if it runs longer than `limit`.
    pub(crate) fn ralph_with_limit(
        &self,
        args: &[&str],
        extra_env: &[(&str, &str)],
        limit: Duration,
    ) -> Output {
        let mut cmd = self.ralph_cmd();
        cmd.args(args);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        run_with_limit(cmd, limit)
    }

    /// Run ralph (bounded) with a file-size limit of `bytes` (`prlimit --fsize`) and SIGXFSZ
    /// ignored: a write past the limit fails with "File too large", as a full disk makes a write
    /// fail, without one. A file made exactly `bytes` long beforehand can no longer grow.
    pub(crate) fn ralph_with_fsize_limit(
        &self,
        args: &[&str],
        extra_env: &[(&str, &str)],
        bytes: u64,
    ) -> Output {
        let mut cmd = self.command("sh");
        cmd.current_dir(&self.repo)
            .arg("-c")
            .arg(format!(
                "trap '' XFSZ; exec prlimit --fsize={bytes}:{bytes} \"$0\" \"$@\""
            ))
            .arg(env!("CARGO_BIN_EXE_ralph"))
            .args(args);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        run_with_limit(cmd, Duration::from_secs(60))
    }

    pub(crate) fn ralph(&self, args: &[&str]) -> Output {
        self.ralph_with_limit(args, &[], Duration::from_secs(60))
    }

    /// `ralph run` with the fake agent following `script`, unattended.
    pub(crate) fn run_fake(&self, script: &str, extra: &[&str]) -> Output {
        self.run_fake_with(script, extra, &[])
    }

    /// [`Self::run_fake`] with more variables in ralph's environment.
    pub(crate) fn run_fake_with(
        &self,
        script: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Output {
        let agent = format!("'{}'", fake_agent().display());
        let mut args = vec!["run", "--agent-cmd", &agent, "--yes"];
        if !extra.contains(&"--grace") {
            args.extend(["--grace", "1s"]);
        }
        args.extend_from_slice(extra);
        let mut env = vec![("FAKE_AGENT_SCRIPT", script)];
        env.extend_from_slice(vars);
        self.ralph_with_limit(&args, &env, Duration::from_secs(60))
    }

    pub(crate) fn commits(&self) -> Vec<String> {
        self.git(&["log", "--format=%s"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub(crate) fn activity(&self) -> String {
        self.read(".ralph/activity.log")
    }

    pub(crate) fn iter_records(&self) -> Vec<String> {
        std::fs::read_to_string(self.repo.join(".ralph/iterations.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub(crate) fn agent_prompt(&self, n: usize) -> String {
        std::fs::read_to_string(self.log.join(format!("prompt-{n}.txt"))).unwrap_or_default()
    }

    pub(crate) fn agent_ran(&self, n: usize) -> bool {
        self.log.join(format!("prompt-{n}.txt")).exists()
    }
}

/// Run a command, killing it after `limit` so a hang fails the test instead of blocking CI.
pub(crate) fn run_with_limit(mut cmd: std::process::Command, limit: Duration) -> Output {
    use std::io::Read;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ralph");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ralph did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// `--json` output: every stdout line parsed (a line that is not JSON fails the test).
pub(crate) fn json_events(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

/// The events named `name`.
pub(crate) fn events_named(o: &Output, name: &str) -> Vec<serde_json::Value> {
    json_events(o)
        .into_iter()
        .filter(|e| e["event"] == name)
        .collect()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code with both streams in the panic message when it is not the expected one.
#[track_caller]
pub(crate) fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "unexpected exit status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// A ralph running in the background, its output going to files.
pub(crate) struct Background {
    pub(crate) child: std::process::Child,
    pub(crate) out: PathBuf,
    pub(crate) err: PathBuf,
}

impl Background {
    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Wait for exit (killing it after `limit`) and return the status code.
    pub(crate) fn wait(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "ralph did not exit within {limit:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    std::fs::read_to_string(&self.out).unwrap_or_default(),
                    std::fs::read_to_string(&self.err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        (
            status.code(),
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default(),
        )
    }
}

impl TestEnv {
    /// Start `ralph run` with the fake agent in the background.
    pub(crate) fn spawn_fake(&self, script: &str, extra: &[&str]) -> Background {
        let agent = format!("'{}'", fake_agent().display());
        let mut cmd = self.ralph_cmd();
        cmd.args(["run", "--agent-cmd", &agent, "--yes"])
            .args(extra);
        cmd.env("FAKE_AGENT_SCRIPT", script);
        self.spawn(cmd)
    }

    pub(crate) fn spawn(&self, mut cmd: std::process::Command) -> Background {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let out = self.home.join(format!("bg-{n}.out"));
        let err = self.home.join(format!("bg-{n}.err"));
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        Background {
            child: cmd.spawn().expect("spawn ralph"),
            out,
            err,
        }
    }

    /// The pids the fake agent recorded for iteration `n` (itself first, then its children).
    pub(crate) fn agent_pids(&self, n: usize) -> Vec<i32> {
        std::fs::read_to_string(self.log.join(format!("pids-{n}.txt")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Wait until the fake agent of iteration `n` has recorded `count` pids.
    pub(crate) fn wait_for_pids(&self, n: usize, count: usize) -> Vec<i32> {
        assert!(
            wait_until(Duration::from_secs(20), || self.agent_pids(n).len()
                >= count),
            "the agent of iteration {n} did not start"
        );
        self.agent_pids(n)
    }
}

/// Poll `cond` every few milliseconds until it holds or `limit` passes.
pub(crate) fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// Whether a process is alive (a zombie waiting to be reaped counts as dead).
pub(crate) fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => {
            // No /proc (macOS): fall back to kill(pid, 0).
            // SAFETY: signal 0 only checks for existence.
            !std::path::Path::new("/proc/self").exists() && unsafe { libc::kill(pid, 0) == 0 }
        }
    }
}

/// Assert every pid dies within `limit` (polling, no fixed sleep).
#[track_caller]
pub(crate) fn assert_all_dead(pids: &[i32], limit: Duration) {
    let ok = wait_until(limit, || pids.iter().all(|p| !pid_alive(*p)));
    let alive: Vec<_> = pids.iter().filter(|p| pid_alive(**p)).collect();
    assert!(
        ok,
        "processes of the agent's tree still alive after {limit:?}: {alive:?}"
    );
}

// --- Helpers shared by the integrity, completion, limits and files tests. ---

/// Write a shell script for the fake agent's `sh:FILE` action into the test's home (outside the
/// repository) and return the action (`sh:/abs/path`). The script runs in the repository root.
pub(crate) fn agent_sh(env: &TestEnv, name: &str, body: &str) -> String {
    let path = env.home.join(format!("{name}.sh"));
    std::fs::write(&path, format!("set -e\n{body}\n")).unwrap();
    format!("sh:{}", path.display())
}

/// A `sh` agent script at `NAME.sh` beside the repository: `body`, then its work
/// (`work-NAME.txt`) and the first unchecked box of the task file checked.
pub(crate) fn checking_agent(env: &TestEnv, name: &str, body: &str) -> String {
    let file = env.dir().join(format!("{name}.sh"));
    std::fs::write(
        &file,
        format!(
            "{body}\necho {name} > work-{name}.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n"
        ),
    )
    .unwrap();
    format!("sh '{}'", file.display())
}

/// `ralph status --json`, parsed (exit 0 asserted).
#[track_caller]
pub(crate) fn status_json(env: &TestEnv) -> serde_json::Value {
    let out = env.ralph_with_limit(&["status", "--json"], &[], Duration::from_secs(20));
    assert_exit(&out, 0);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json is not one JSON object: {e}\n{}",
            stdout(&out)
        )
    })
}

/// Put a stand-in `claude` on PATH that runs the fake agent (the `claude` preset's stream-json
/// is then parsed); returns the PATH value.
pub(crate) fn claude_stand_in_path(env: &TestEnv) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = env.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join("claude");
    std::fs::write(
        &path,
        format!("#!/bin/sh\nexec '{}' \"$@\"\n", fake_agent().display()),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `ralph <args> --agent claude --yes --grace 1s` with the stand-in `claude` following `script`.
pub(crate) fn run_claude_fake(
    env: &TestEnv,
    command: &str,
    script: &str,
    extra: &[&str],
    limit: Duration,
) -> Output {
    let path = claude_stand_in_path(env);
    let mut args = vec![command, "--agent", "claude", "--yes", "--grace", "1s"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[("PATH", &path), ("FAKE_AGENT_SCRIPT", script)],
        limit,
    )
}

/// Run ralph with `args` under `ulimit -v KIB` (address space), killed after `limit`: a ralph
/// that reads without bound dies of it quickly instead of eating the machine's memory.
pub(crate) fn ralph_with_memory_limit(
    env: &TestEnv,
    kib: u64,
    args: &[&str],
    extra_env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut cmd = env.command("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_ralph"))
        .args(args)
        .current_dir(&env.repo);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    run_with_limit(cmd, limit)
}

/// The fake agent as `--agent-cmd` (quoted for the template splitter).
pub(crate) fn fake_agent_cmd() -> String {
    format!("'{}'", fake_agent().display())
}

// --- Helpers shared by the git differential tests (git_exact, git_props, git_bookkeeping). ---

/// `git args` in `dir` (any repository: ralph's or its twin) with the test's isolated
/// environment; the output whatever the exit status.
pub(crate) fn git_output_in(env: &TestEnv, dir: &std::path::Path, args: &[&str]) -> Output {
    env.command("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git")
}

/// `git args` in `dir`, success asserted; its stdout.
#[track_caller]
pub(crate) fn git_in(env: &TestEnv, dir: &std::path::Path, args: &[&str]) -> String {
    let out = git_output_in(env, dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `sh FILE` in `dir` with the test's isolated environment (as the fake agent's `sh:FILE`
/// action runs it), success asserted.
#[track_caller]
pub(crate) fn sh_file_in(env: &TestEnv, dir: &std::path::Path, file: &std::path::Path) -> Output {
    let out = env
        .command("sh")
        .arg(file)
        .current_dir(dir)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "sh {} in {} failed: {}",
        file.display(),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What `git status --porcelain | cksum` prints in `dir`, without the newline.
pub(crate) fn porcelain_cksum_in(env: &TestEnv, dir: &std::path::Path) -> String {
    let out = env
        .command("sh")
        .args(["-c", "git status --porcelain | cksum"])
        .current_dir(dir)
        .output()
        .expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `git status --porcelain` in `dir`, for failure messages.
pub(crate) fn porcelain_in(env: &TestEnv, dir: &std::path::Path) -> String {
    String::from_utf8_lossy(&git_output_in(env, dir, &["status", "--porcelain"]).stdout)
        .into_owned()
}

/// Every entry of a tree, recursively, as `git ls-tree -r` prints it (mode, type, id, path;
/// paths unquoted), leaving out the paths for which `skip` holds. Git trees hold no empty
/// directories, so this listing determines the tree exactly.
pub(crate) fn tree_entries(
    env: &TestEnv,
    dir: &std::path::Path,
    treeish: &str,
    skip: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let out = git_output_in(env, dir, &["ls-tree", "-r", "-z", "--full-tree", treeish]);
    assert!(
        out.status.success(),
        "git ls-tree {treeish} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|e| !e.is_empty())
        .filter(|e| !skip(e.split_once('\t').map_or("", |(_, p)| p)))
        .map(str::to_string)
        .collect()
}

/// The entries only in `ours` and only in `theirs`, one per line (`{:?}`, so odd names show),
/// or an empty string when both hold the same entries.
pub(crate) fn entries_diff(ours: &[String], theirs: &[String]) -> String {
    let mut s = String::new();
    for e in ours.iter().filter(|e| !theirs.contains(e)) {
        s.push_str(&format!("  only in ralph's: {e:?}\n"));
    }
    for e in theirs.iter().filter(|e| !ours.contains(e)) {
        s.push_str(&format!("  only in git's:   {e:?}\n"));
    }
    s
}

/// The last field of ralph's last `ITER` record: the fingerprint it wrote.
pub(crate) fn last_fingerprint(env: &TestEnv) -> String {
    env.iter_records()
        .last()
        .and_then(|r| r.rsplit(" | ").next().map(str::to_string))
        .unwrap_or_default()
}

/// `cp -a` ralph's repository into a twin beside it (same files, modes, links and git dir)
/// and return the twin's path.
pub(crate) fn make_twin(env: &TestEnv) -> PathBuf {
    let twin = env.repo.with_file_name("twin");
    let out = env
        .command("cp")
        .arg("-a")
        .arg(&env.repo)
        .arg(&twin)
        .output()
        .expect("cp");
    assert!(
        out.status.success(),
        "cp -a: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    twin
}

/// A test cannot run here for want of a tool (bwrap, tmux, git-lfs, an agent CLI): on a
/// developer's machine it says so and skips; in CI (`CI` set to anything but `false` or `0`)
/// it fails, so a green CI run never hides a missing install step.
#[track_caller]
pub(crate) fn skip_or_fail(why: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if ci {
        panic!("CI is set, and this test cannot run: {why} (.ci/run must install it)");
    }
    eprintln!("skipping: {why}");
}

/// Whether bubblewrap can make its namespaces here (for `--sandbox` tests); says why it skips,
/// and fails in CI. A build or clone under `/tmp` works: what the sandbox runs of the tests' is
/// copied where it sees it ([`visible_copy`], [`visible_dir`]).
#[track_caller]
pub(crate) fn bwrap_works() -> bool {
    let ok = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail("bubblewrap (`bwrap`) is not installed or cannot make namespaces here");
    }
    ok
}

/// A task file with frontmatter `task: t` and these criteria under `## Success Criteria`.
pub(crate) fn task(criteria: &[&str]) -> String {
    let mut s = String::from("---\ntask: t\n---\n## Success Criteria\n");
    for c in criteria {
        s.push_str(&format!("- [ ] {c}\n"));
    }
    s
}

/// `ralph run --worktree NAME TASK --agent-cmd AGENT --yes --grace 1s EXTRA…`, bounded.
pub(crate) fn run_loop(
    env: &TestEnv,
    name: &str,
    task_file: &str,
    agent: &str,
    extra: &[&str],
) -> Output {
    let mut args = vec![
        "run",
        "--worktree",
        name,
        task_file,
        "--agent-cmd",
        agent,
        "--yes",
        "--grace",
        "1s",
    ];
    args.extend_from_slice(extra);
    env.ralph_with_limit(&args, &[], Duration::from_secs(60))
}

// --- The snapshot tests' view of the screen (as jj's `TestEnvironment` normalises its output). ---

/// `text` as a snapshot shows it, the same on every machine and in every run: the test's
/// directory as `$TEST_ENV`, the fake agent as `$FAKE_AGENT`, ralph as `$RALPH`, this source
/// tree as `$SRC`; the repository's commits as `[commit-N]`, numbered in the order the text
/// first names them (so two lines naming the same commit still say so); run ids as `[run]`,
/// RFC 3339 times as `[time]`, the durations ralph prints as `[duration]`, pids as `[pid]`, the
/// hash of a path in ralph's state directory as `[hash]`, the live view's spinner as `[spinner]`.
/// Everything else is left as ralph printed it.
pub(crate) fn normalize(env: &TestEnv, text: &str) -> String {
    let mut s = text.to_string();
    // The longest first: the test's directory and the fake agent lie under the source tree.
    let paths = [
        (env.dir().to_path_buf(), "$TEST_ENV"),
        (fake_agent(), "$FAKE_AGENT"),
        (PathBuf::from(env!("CARGO_BIN_EXE_ralph")), "$RALPH"),
        (PathBuf::from(env!("CARGO_MANIFEST_DIR")), "$SRC"),
    ];
    for (path, name) in paths {
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        for p in [canonical, path] {
            s = s.replace(p.to_str().expect("a UTF-8 path"), name);
        }
    }
    let s = name_commits(env, &s);
    let rules = [
        (r"\b\d{8}-\d{6}-[0-9a-f]{4}\b", "[run]"),
        (
            r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})",
            "[time]",
        ),
        (r"\bpid \d+\b", "pid [pid]"),
        // The live view's spinner (a braille pattern), as a terminal shows it at that instant.
        (r"[\u{2801}-\u{28FF}]", "[spinner]"),
        // ralph's state directory names a repository or work tree by its path's hash.
        (
            r"(/ralph/(?:repos|trees)/[\w-]*-)[0-9a-f]{16}\b",
            "${1}[hash]",
        ),
    ];
    let s = rules.iter().fold(s, |s, (re, to)| {
        regex::Regex::new(re)
            .expect("a valid pattern")
            .replace_all(&s, *to)
            .into_owned()
    });
    name_durations(&s)
}

/// Every duration as ralph writes one (`1h 02m 03s`, `4m 05s`, `6s`, `0.4s`, and `-v`'s
/// `12.5ms`, `1.234s`) written `[duration]`. In a table's column (two spaces or more after it)
/// the column keeps its width, so a duration of another length does not move the columns after
/// it.
fn name_durations(text: &str) -> String {
    let re = regex::Regex::new(
        r"\b(?:\d+h \d{2}m \d{2}s|\d+m \d{2}s|\d+\.\dms|\d+\.\d{3}s|\d+\.\ds|\d+s)\b( {2,})?",
    )
    .expect("a valid pattern");
    re.replace_all(text, |c: &regex::Captures| match c.get(1) {
        Some(_) => format!(
            "{:<w$}",
            "[duration]",
            w = c[0].len().max("[duration] ".len())
        ),
        None => "[duration]".to_string(),
    })
    .into_owned()
}

/// Every commit id (7 to 40 hex digits) of the repository's history — every ref and reflog —
/// written `[commit-N]`.
fn name_commits(env: &TestEnv, text: &str) -> String {
    let known: Vec<String> = git_in(env, &env.repo, &["rev-list", "--all", "--reflog"])
        .lines()
        .map(str::to_string)
        .collect();
    let mut named: Vec<String> = Vec::new();
    let re = regex::Regex::new(r"\b[0-9a-f]{7,40}\b").expect("a valid pattern");
    re.replace_all(text, |c: &regex::Captures| {
        let id = &c[0];
        let Some(full) = known.iter().find(|k| k.starts_with(id)) else {
            return id.to_string();
        };
        let n = named.iter().position(|k| k == full).unwrap_or_else(|| {
            named.push(full.clone());
            named.len() - 1
        });
        format!("[commit-{}]", n + 1)
    })
    .into_owned()
}

/// `text` without the note ralph prints for the `claude` preset when it runs as root (that it
/// sets `IS_SANDBOX=1`), which says who runs the tests, not what ralph did.
pub(crate) fn without_root_note(text: &str) -> String {
    text.replace(
        "note: running as root: setting IS_SANDBOX=1 so claude accepts --dangerously-skip-permissions\n",
        "",
    )
}

/// A command's whole screen as a snapshot shows it ([`normalize`]d): its stdout, then its
/// stderr under a rule (when it wrote any), then its exit status.
pub(crate) fn screen(env: &TestEnv, o: &Output) -> String {
    screen_of(env, &stdout(o), &stderr(o), o.status.code())
}

/// [`screen`] from the parts (a background run's files).
pub(crate) fn screen_of(env: &TestEnv, out: &str, err: &str, code: Option<i32>) -> String {
    let mut s = normalize(env, out);
    if !err.is_empty() {
        s.push_str("----- stderr -----\n");
        s.push_str(&normalize(env, err));
    }
    match code {
        Some(c) => s.push_str(&format!("[exit status: {c}]")),
        None => s.push_str("[killed by a signal]"),
    }
    s
}

/// One JSON document (`status --json`) as a snapshot shows it: parsed (a line that is not one
/// object fails the test), the values of `volatile` keys — numbers that time or the machine
/// decide (`elapsed_s`, `pid`) — written `"[key]"` wherever they are not null, pretty-printed
/// and [`normalize`]d.
pub(crate) fn json_screen(env: &TestEnv, text: &str, volatile: &[&str]) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not one JSON document: {e}\n{text}"));
    blank_keys(&mut v, volatile);
    normalize(env, &serde_json::to_string_pretty(&v).expect("JSON"))
}

/// JSON Lines (`--json` events) as a snapshot shows them: one event a line, each parsed (a line
/// that is not JSON fails the test), `volatile` keys blanked as in [`json_screen`], normalised.
pub(crate) fn json_lines_screen(env: &TestEnv, text: &str, volatile: &[&str]) -> String {
    let mut s = String::new();
    for line in text.lines() {
        let mut v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
        blank_keys(&mut v, volatile);
        s.push_str(&v.to_string());
        s.push('\n');
    }
    normalize(env, &s)
}

fn blank_keys(v: &mut serde_json::Value, keys: &[&str]) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if keys.contains(&k.as_str()) && !x.is_null() {
                    *x = format!("[{k}]").into();
                } else {
                    blank_keys(x, keys);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| blank_keys(x, keys)),
        _ => {}
    }
}
