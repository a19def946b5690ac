//! The web view in a real browser (issue 31, SPEC §16): Debian's headless Chromium driven by
//! Playwright for Python (`tests/web/page.py`, installed by `scripts/install-playwright.sh`),
//! finding every loop and action by its accessible role and name, against real `ralph run` loops
//! and a real `ralph serve`. Nothing is mocked between the page and the loops.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

const CHROMIUM: &str = "/usr/bin/chromium";

/// The venv's python with Playwright (`RALPH_PLAYWRIGHT_PYTHON`, else the venv the install
/// script makes), when it and Chromium are there; else skipped (failed under CI).
fn browser() -> Option<PathBuf> {
    let python = match std::env::var_os("RALPH_PLAYWRIGHT_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = std::env::var_os("RALPH_PLAYWRIGHT_VENV")
                .map(PathBuf::from)
                .or_else(|| {
                    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
                    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"));
                    Some(cache.or(home)?.join("ralph/playwright-venv"))
                });
            venv.unwrap_or_default().join("bin/python")
        }
    };
    let playwright = Command::new(&python)
        .args(["-c", "import playwright.sync_api"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !playwright {
        skip_or_fail(&format!(
            "Playwright for Python is not importable by {} (run scripts/install-playwright.sh, \
             or set RALPH_PLAYWRIGHT_PYTHON to its python)",
            python.display()
        ));
        return None;
    }
    if !Path::new(CHROMIUM).exists() {
        skip_or_fail(&format!(
            "{CHROMIUM} is not installed (apt-get install chromium)"
        ));
        return None;
    }
    Some(python)
}

/// `target/web-artifacts/NAME/`, emptied: where the driver puts its screenshots and HTML.
fn artifacts(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    let dir = target.join("web-artifacts").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A child whose stdout lines arrive on a channel (read by a thread, so it never blocks on a
/// full pipe) and whose stderr goes to a file; in its own process group, all of which is ended
/// when it is dropped unwaited.
struct Lines {
    child: Child,
    lines: Receiver<String>,
    err: PathBuf,
    waited: bool,
}

impl Lines {
    fn spawn(mut cmd: Command, err: PathBuf) -> Lines {
        use std::os::unix::process::CommandExt;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err).unwrap())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            child,
            lines,
            err,
            waited: false,
        }
    }

    /// The next stdout line before `deadline`; None at its end or at the deadline.
    fn next(&self, deadline: Instant) -> Option<String> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines.recv_timeout(left).ok()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a signal to our own child.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// The exit code, waiting until `deadline`; None when it is still running then.
    fn wait_until(&mut self, deadline: Instant) -> Option<Option<i32>> {
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                self.waited = true;
                return Some(s.code());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        if self.waited {
            return;
        }
        let group = -(self.child.id() as i32);
        // SAFETY: signals to the process group this test made.
        unsafe {
            libc::kill(group, libc::SIGTERM);
        }
        let soon = Instant::now() + Duration::from_secs(3);
        if self.wait_until(soon).is_none() {
            unsafe {
                libc::kill(group, libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

/// `tests/web/page.py [--selftest] SCENARIO` with the venv's python; its stderr is kept beside
/// its screenshots, in the scenario's `artifacts`.
fn driver(python: &Path, selftest: bool, scenario: &Value) -> Lines {
    let artifacts = PathBuf::from(scenario["artifacts"].as_str().expect("artifacts"));
    std::fs::create_dir_all(&artifacts).unwrap();
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web/page.py");
    let mut cmd = Command::new(python);
    cmd.arg(page);
    if selftest {
        cmd.arg("--selftest");
    }
    cmd.arg(scenario.to_string());
    Lines::spawn(cmd, artifacts.join("driver.stderr"))
}

/// What a driver did: its steps (each stdout line, parsed), its exit code and its stderr.
struct Outcome {
    steps: Vec<Value>,
    code: Option<i32>,
    stderr: String,
}

impl Outcome {
    fn names(&self) -> Vec<&str> {
        self.steps
            .iter()
            .map(|s| s["step"].as_str().unwrap_or("?"))
            .collect()
    }

    fn step(&self, name: &str) -> &Value {
        self.steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name}: {:?}", self.names()))
    }
}

/// Read the driver's steps until it exits (calling `on_step` for each as it comes), within
/// `limit`; a driver still running then is ended and the test fails.
fn drive(mut d: Lines, limit: Duration, mut on_step: impl FnMut(&Value)) -> Outcome {
    let deadline = Instant::now() + limit;
    let mut steps = Vec::new();
    while let Some(line) = d.next(deadline) {
        let step: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("the driver printed a line that is not JSON: {line:?}: {e}")
        });
        on_step(&step);
        steps.push(step);
    }
    let code = d.wait_until(deadline + Duration::from_secs(5));
    let stderr = d.stderr();
    let Some(code) = code else {
        panic!("the driver did not end within {limit:?}; steps {steps:?}\n{stderr}");
    };
    Outcome {
        steps,
        code,
        stderr,
    }
}

/// A static page with a region `x` whose button `Stop x` (wired by a script file, as the CSP of
/// `ralph serve` requires) writes `stopped` into it.
fn static_page(dir: &Path) {
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>harness</title>\
         <script src=\"app.js\" defer></script></head><body>\
         <section aria-labelledby=\"h-x\"><h2 id=\"h-x\">x</h2><p id=\"state\">running</p>\
         <button id=\"stop\" type=\"button\">Stop x</button></section></body></html>\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("app.js"),
        "document.getElementById('stop').addEventListener('click', () => {\n  \
         document.getElementById('state').textContent = 'stopped';\n});\n",
    )
    .unwrap();
}

/// `python -m http.server` on a free loopback port serving `dir`; its URL.
fn http_server(python: &Path, dir: &Path) -> (Lines, String) {
    let mut cmd = Command::new(python);
    cmd.args(["-u", "-m", "http.server", "--bind", "127.0.0.1", "0", "-d"])
        .arg(dir);
    let server = Lines::spawn(cmd, dir.with_extension("http.stderr"));
    let line = server
        .next(Instant::now() + Duration::from_secs(10))
        .unwrap_or_else(|| panic!("http.server printed nothing: {}", server.stderr()));
    let url = line
        .split_once("(http://")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(url, _)| format!("http://{url}"))
        .unwrap_or_else(|| panic!("no URL in http.server's line {line:?}"));
    (server, url)
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The harness itself, on a static page: Chromium starts, finds region `x` and its button
/// `Stop x` by role and name, clicks it (the page's script runs), sees the change and takes a
/// screenshot. Control: asked for a region `y` that is not there, it fails, says why, and keeps
/// the page's screenshot and HTML.
#[test]
fn the_browser_harness_drives_chromium() {
    let Some(python) = browser() else { return };
    let site = tempfile::tempdir().unwrap();
    let root = site.path().join("site");
    std::fs::create_dir_all(&root).unwrap();
    static_page(&root);
    let (server, url) = http_server(&python, &root);
    let art = artifacts("the_browser_harness_drives_chromium");
    let started = Instant::now();
    let scenario = json!({"url": url, "artifacts": art.join("x"), "deadline_s": 30});
    let ok = drive(
        driver(&python, true, &scenario),
        Duration::from_secs(45),
        |_| {},
    );
    let took = started.elapsed();
    assert_eq!(
        (ok.code, ok.names()),
        (
            Some(0),
            vec![
                "launched",
                "loaded",
                "named",
                "stop_clicked",
                "stop_shown",
                "done"
            ]
        ),
        "driver stderr:\n{}\nartifacts: {}",
        ok.stderr,
        art.display()
    );
    assert!(
        is_png(&art.join("x/done.png")),
        "no screenshot in {}",
        art.display()
    );
    assert!(
        server.stderr().contains("GET /app.js"),
        "the page's script was never fetched: {}",
        server.stderr()
    );
    eprintln!("the harness drove Chromium in {took:?}");

    // Control: a region the page does not have.
    let scenario = json!({"url": url, "artifacts": art.join("y"), "deadline_s": 4, "region": "y"});
    let bad = drive(
        driver(&python, true, &scenario),
        Duration::from_secs(30),
        |_| {},
    );
    assert_eq!(bad.code, Some(1), "{:?}\n{}", bad.steps, bad.stderr);
    assert_eq!(bad.names(), vec!["launched", "loaded", "failed"]);
    let reason = bad.step("failed")["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("\"y\""),
        "the reason names the region: {reason}"
    );
    assert!(is_png(&art.join("y/failure.png")), "no failure screenshot");
    let html = std::fs::read_to_string(art.join("y/failure.html")).unwrap_or_default();
    assert!(
        html.contains("Stop x"),
        "the failure's HTML is the page's: {html}"
    );
}

/// The driver fails, saying so, when the browser cannot start (here `/bin/false` in Chromium's
/// place): a harness that cannot launch Chromium never passes.
#[test]
fn the_harness_fails_when_chromium_cannot_start() {
    let Some(python) = browser() else { return };
    let art = artifacts("the_harness_fails_when_chromium_cannot_start");
    let scenario = json!({
        "url": "http://127.0.0.1:9/", "artifacts": art, "deadline_s": 20, "chromium": "/bin/false"
    });
    let out = drive(
        driver(&python, true, &scenario),
        Duration::from_secs(30),
        |_| {},
    );
    assert_eq!(out.code, Some(1), "{:?}\n{}", out.steps, out.stderr);
    assert_eq!(out.names(), vec!["failed"], "{}", out.stderr);
    let reason = out.steps[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("chromium did not start (/bin/false)"),
        "{reason}"
    );
}

/// A shell script `NAME.sh` beside the repository, as `--agent-cmd` runs it (`sh 'PATH'`).
fn script(env: &TestEnv, name: &str, body: &str) -> String {
    let file = env.dir().join(format!("{name}.sh"));
    std::fs::write(&file, body).unwrap();
    format!("sh '{}'", file.display())
}

const QUESTION: &str = "Which database should I use?";
const ANSWER: &str = "postgres, please";

/// The three loops' agents. `a` checks one box per iteration after a second, once `go` exists
/// (the test makes it when the page has named the loops, so that the page sees `a`'s progress
/// move); `b` sleeps a minute;
/// `c` asks a question in iteration 1 and checks every box only when its prompt holds the answer.
fn agents(env: &TestEnv, go: &Path) -> [String; 3] {
    let a = checking_agent(
        env,
        "agent-a",
        &format!(
            "i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\nsleep 1",
            go.display()
        ),
    );
    let b = script(env, "agent-b", "cat >/dev/null\nsleep 60\n");
    let c = script(
        env,
        "agent-c",
        &format!(
            "RALPH_BIN='{}'\nprompt=$(cat)\n\
             if [ \"$RALPH_ITERATION\" = 1 ]; then \"$RALPH_BIN\" ask '{QUESTION}'; exit 0; fi\n\
             case \"$prompt\" in *'{ANSWER}'*) sed -i 's/- \\[ \\]/- [x]/' \"$RALPH_TASK_FILE\";; esac\n",
            env!("CARGO_BIN_EXE_ralph")
        ),
    );
    [a, b, c]
}

/// `ralph run --worktree NAME NAME.md` for `a` (4 criteria), `b` and `c` (2 each), at once,
/// from the main work tree; each once `status --all --json` shows all three running.
fn start_loops(env: &TestEnv, go: &Path) -> Vec<(&'static str, Lines)> {
    env.write("a.md", &task(&["a1", "a2", "a3", "a4"]));
    env.write("b.md", &task(&["b1", "b2"]));
    env.write("c.md", &task(&["c1", "c2"]));
    env.commit_all("three tasks");
    let mut loops = Vec::new();
    for (name, agent) in ["a", "b", "c"].into_iter().zip(agents(env, go)) {
        let mut cmd = env.ralph_cmd();
        cmd.args(["run", "--worktree", name, &format!("{name}.md")])
            .args(["--agent-cmd", &agent, "--yes", "--grace", "1s"])
            .args(["--max-iterations", "10"]);
        let err = env.dir().join(format!("loop-{name}.stderr"));
        loops.push((name, Lines::spawn(cmd, err)));
    }
    let running = wait_until(Duration::from_secs(30), || {
        let out = env.ralph(&["status", "--all", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let all = v["loops"].as_array().cloned().unwrap_or_default();
        ["a", "b", "c"]
            .iter()
            .all(|n| all.iter().any(|l| l["name"] == *n && l["running"] == true))
    });
    assert!(
        running,
        "the three loops never ran at once:\n{}",
        loop_outputs(&loops)
    );
    loops
}

/// Each loop's stdout (what has come so far) and stderr, for a failure's message.
fn loop_outputs(loops: &[(&str, Lines)]) -> String {
    let mut s = String::new();
    for (name, l) in loops {
        let out: Vec<String> = l.lines.try_iter().collect();
        s.push_str(&format!(
            "--- loop {name} stdout ---\n{}\n--- loop {name} stderr ---\n{}\n",
            out.join("\n"),
            l.stderr()
        ));
    }
    s
}

/// `ralph serve --listen 127.0.0.1:0` from the main work tree, and the URL it printed.
fn start_serve(env: &TestEnv) -> (Lines, String) {
    let mut cmd = env.ralph_cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    let serve = Lines::spawn(cmd, env.dir().join("serve.stderr"));
    let line = serve.next(Instant::now() + Duration::from_secs(20));
    let Some(url) = line.filter(|l| l.starts_with("http://127.0.0.1:") && l.contains("/#token="))
    else {
        panic!(
            "ralph serve printed no URL with a token:\n{}",
            serve.stderr()
        );
    };
    (serve, url)
}

/// Loop `name`'s iteration-`n` prompt as ralph wrote it (`.ralph/runs/RUN/iter-NNN.prompt.md`
/// in its worktree), from whichever run has one.
fn prompt_of(env: &TestEnv, name: &str, n: u32) -> Option<String> {
    let runs = env
        .repo
        .join(format!(".git/ralph/worktrees/{name}/.ralph/runs"));
    std::fs::read_dir(runs).ok()?.flatten().find_map(|run| {
        std::fs::read_to_string(run.path().join(format!("iter-{n:03}.prompt.md"))).ok()
    })
}

/// Issue 31, Done-when 1, in headless Chromium: the page names three running loops (`a`, `b`,
/// `c`); `a`'s progress changes on the page without a reload; `Stop b` halts `b` (its run exits
/// 130, and the page shows it); `c`'s question appears, and the answer typed into `Answer for c`
/// reaches its next prompt (not the one before), after which `c` completes. Then `ralph serve`
/// stops on SIGTERM with exit 0.
#[test]
fn the_page_shows_three_loops_stops_one_and_answers_a_question() {
    let Some(python) = browser() else { return };
    let env = TestEnv::new();
    let go = env.dir().join("go");
    let mut loops = start_loops(&env, &go);
    let (mut serve, url) = start_serve(&env);
    let art = artifacts("the_page_shows_three_loops_stops_one_and_answers_a_question");
    let scenario = json!({
        "url": url, "artifacts": art, "deadline_s": 120, "loops": ["a", "b", "c"],
        "progress": "a", "progress_total": 4, "stop": "b",
        "ask": "c", "question": QUESTION, "answer": ANSWER,
    });
    let out = drive(
        driver(&python, false, &scenario),
        Duration::from_secs(150),
        |s| {
            if s["step"] == "named" {
                std::fs::write(&go, "").unwrap();
            }
        },
    );
    let context = || {
        format!(
            "driver steps {:?}\n--- driver stderr ---\n{}\nscreenshots and HTML: {}\n\
             --- serve stderr ---\n{}\n{}",
            out.steps,
            out.stderr,
            art.display(),
            serve.stderr(),
            loop_outputs(&loops)
        )
    };
    assert_eq!(
        out.code,
        Some(0),
        "the page's scenario failed:\n{}",
        context()
    );
    assert_eq!(
        out.names(),
        vec![
            "launched",
            "loaded",
            "named",
            "progress_first",
            "progress_changed",
            "stop_clicked",
            "stop_shown",
            "question_shown",
            "answer_sent",
            "answer_taken",
            "done"
        ],
        "{}",
        context()
    );
    let seen = out.step("progress_changed");
    assert_ne!(seen["before"], seen["after"], "{seen}");
    let context = context();
    let soon = || Instant::now() + Duration::from_secs(60);
    let codes: Vec<_> = loops
        .iter_mut()
        .map(|(_, l)| l.wait_until(soon()))
        .collect();
    assert_eq!(
        codes,
        vec![Some(Some(0)), Some(Some(130)), Some(Some(0))],
        "a completes, b was stopped (130), c completes after the answer:\n{context}"
    );
    let first = prompt_of(&env, "c", 1).expect("c's first prompt");
    let second = prompt_of(&env, "c", 2).expect("c's second prompt");
    assert!(
        !first.contains(ANSWER),
        "the answer came before the question:\n{first}"
    );
    assert!(
        second.contains(ANSWER),
        "the answer is not in c's next prompt:\n{second}"
    );
    serve.signal(libc::SIGTERM);
    let code = serve.wait_until(Instant::now() + Duration::from_secs(5));
    assert_eq!(
        code,
        Some(Some(0)),
        "ralph serve on SIGTERM:\n{}",
        serve.stderr()
    );
}
