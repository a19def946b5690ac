//! `ralph serve` (SPEC §16): real servers on real repositories, spoken to over raw HTTP/1.1
//! (`TcpStream`, so any `Host` or `Origin` can be sent), beside real `ralph run` loops.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;

/// A `ralph serve` running in the background, with what it printed.
pub(crate) struct Server {
    pub(crate) bg: Background,
    pub(crate) port: u16,
    pub(crate) token: String,
}

impl Server {
    pub(crate) fn start(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> Server {
        let mut cmd = env.ralph_cmd();
        cmd.arg("serve").args(args);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let bg = env.spawn(cmd);
        let mut line = String::new();
        assert!(
            wait_until(Duration::from_secs(20), || {
                line = std::fs::read_to_string(&bg.out).unwrap_or_default();
                line.ends_with('\n')
            }),
            "ralph serve printed no URL: {}",
            std::fs::read_to_string(&bg.err).unwrap_or_default()
        );
        let url = line.trim();
        assert_eq!(line.lines().count(), 1, "one line: {line}");
        let rest = url.strip_prefix("http://127.0.0.1:").expect(url);
        let (port, token) = rest.split_once("/#token=").expect(url);
        Server {
            port: port.parse().unwrap(),
            token: token.to_string(),
            bg,
        }
    }

    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// A request with the token and the server's own Host.
    pub(crate) fn get(&self, path: &str) -> Reply {
        let auth = self.bearer();
        request(
            self.port,
            "GET",
            path,
            &[("Host", &self.host()), ("Authorization", &auth)],
            "",
        )
    }

    pub(crate) fn post(&self, path: &str, body: &str) -> Reply {
        let auth = self.bearer();
        let headers = [("Host", &self.host()[..]), ("Authorization", &auth)];
        request(self.port, "POST", path, &headers, body)
    }

    fn loops(&self) -> serde_json::Value {
        let r = self.get("/api/loops");
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    /// The header lines, lowercased.
    pub(crate) headers: String,
    pub(crate) body: String,
}

impl Reply {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request with exactly these headers (and `Connection: close`).
pub(crate) fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/json\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("a reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect(&raw);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect(head);
    Reply {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// An open event stream: the events read one by one, blocking on the socket (no polling).
struct Events(BufReader<TcpStream>);

impl Events {
    fn open(server: &Server) -> Events {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let req = format!(
            "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\r\n",
            server.host(),
            server.bearer()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains(" 200 "), "{line}");
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        Events(r)
    }

    /// The next event (name, data) within `limit`, else `None`. The body is chunked: chunk
    /// sizes and blank lines are skipped.
    fn next(&mut self, limit: Duration) -> Option<(String, String)> {
        self.0.get_ref().set_read_timeout(Some(limit)).unwrap();
        let (mut name, mut data) = (String::new(), String::new());
        let mut line = String::new();
        loop {
            line.clear();
            match self.0.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if let Some(n) = l.strip_prefix("event: ") {
                name = n.to_string();
            } else if let Some(d) = l.strip_prefix("data: ") {
                data.push_str(d);
            } else if l.is_empty() && !name.is_empty() {
                return Some((name, data));
            }
        }
    }

    /// Events until one named `name` holding `holding` arrives within `limit`.
    fn until(&mut self, limit: Duration, name: &str, holding: &str) -> bool {
        let end = Instant::now() + limit;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.next(left) {
                Some((n, d)) if n == name && d.contains(holding) => return true,
                Some(_) => {}
                None => return false,
            }
        }
        false
    }
}

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

pub(crate) fn state_home(env: &TestEnv) -> PathBuf {
    env.home.join(".local/state/ralph")
}

/// The token file of the server, wherever in the state home it is.
fn token_files(env: &TestEnv, name: &str) -> Vec<PathBuf> {
    files_under(&state_home(env))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == name))
        .collect()
}

pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in read.flatten() {
        let p = e.path();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&p));
        } else if t.is_file() {
            out.push(p);
        }
    }
    out
}

/// Missing or wrong token: 401; the right one (header or cookie): 200. A foreign Host: 403 on
/// the API and the page alike; a POST from a foreign Origin: 403. Every answer carries the
/// security headers, and none a CORS header.
#[test]
fn the_api_wants_the_token_and_the_servers_own_host() {
    let env = setup(&["a"]);
    let s = Server::start(&env, &[], &[]);
    let host = s.host();
    let none = request(s.port, "GET", "/api/loops", &[("Host", &host)], "");
    assert_eq!(none.status, 401, "{}", none.body);
    let wrong = format!("Bearer {}", "0".repeat(64));
    let bad = request(
        s.port,
        "GET",
        "/api/loops",
        &[("Host", &host), ("Authorization", &wrong)],
        "",
    );
    assert_eq!(bad.status, 401);
    assert!(!bad.body.contains("schema_version"));
    let good = s.get("/api/loops");
    assert_eq!(good.status, 200);
    let v = good.json();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["loops"][0]["name"], "main");
    assert_eq!(v["read_only"], false);
    // The cookie: got with the token, then enough alone; a wrong one is not.
    let session = s.post("/api/session", "");
    assert_eq!(session.status, 200);
    let set = session
        .headers
        .lines()
        .find(|l| l.starts_with("set-cookie:"))
        .expect("a cookie");
    assert!(
        set.contains("httponly") && set.contains("samesite=strict") && set.contains("path=/"),
        "{set}"
    );
    let cookie = format!("ralph_token={}", s.token);
    let by_cookie = request(
        s.port,
        "GET",
        "/api/loops/main",
        &[("Host", &host), ("Cookie", &cookie)],
        "",
    );
    assert_eq!(by_cookie.status, 200, "{}", by_cookie.body);
    assert_eq!(by_cookie.json()["name"], "main");
    let bad_cookie = format!("ralph_token={}", "1".repeat(64));
    let refused = request(
        s.port,
        "GET",
        "/api/loops",
        &[("Host", &host), ("Cookie", &bad_cookie)],
        "",
    );
    assert_eq!(refused.status, 401);
    // Host: a rebinding name is refused, on the page too; the server's own is not.
    let evil = format!("evil.example:{}", s.port);
    let auth = s.bearer();
    let r = request(
        s.port,
        "GET",
        "/api/loops",
        &[("Host", &evil), ("Authorization", &auth)],
        "",
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        request(s.port, "GET", "/", &[("Host", &evil)], "").status,
        403
    );
    let page = request(s.port, "GET", "/", &[("Host", &host)], "");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/app.js") && !page.body.contains(&s.token));
    let local = format!("localhost:{}", s.port);
    assert_eq!(
        request(s.port, "GET", "/style.css", &[("Host", &local)], "").status,
        200
    );
    // Origin: a foreign one is refused even with the token; the server's own is not.
    let post = |origin: &str| {
        let h = [
            ("Host", &host[..]),
            ("Authorization", &auth[..]),
            ("Origin", origin),
        ];
        request(s.port, "POST", "/api/session", &h, "").status
    };
    assert_eq!(post("http://evil.example"), 403);
    assert_eq!(post(&format!("http://{host}")), 200);
    for r in [&none, &good, &page] {
        assert!(
            r.headers
                .contains("content-security-policy: default-src 'none'; script-src 'self'"),
            "{}",
            r.headers
        );
        assert!(r.headers.contains("x-frame-options: deny"));
        assert!(r.headers.contains("x-content-type-options: nosniff"));
        assert!(r.headers.contains("cache-control: no-store"));
        assert!(!r.headers.contains("access-control-"), "{}", r.headers);
    }
    s.bg.signal(libc::SIGTERM);
    let (code, _, err) = s.bg.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
}

/// The token file is 0600 and holds the printed token; a loop stopped from the API exits 130
/// as its Ctrl-C would, `status` says interrupted; and the token is in no file of the
/// repository, its git directory or the state home (but its own file), nor on stderr.
#[test]
fn stop_ends_a_running_loop_and_the_token_is_nowhere_else() {
    use std::os::unix::fs::PermissionsExt;
    let env = setup(&["a", "b"]);
    let s = Server::start(&env, &[], &[]);
    let files = token_files(&env, "serve.token");
    assert_eq!(files.len(), 1, "{files:?}");
    let meta = std::fs::metadata(&files[0]).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(&files[0]).unwrap().trim(), s.token);
    assert_eq!(token_files(&env, "serve.pid").len(), 1);
    // Control: stop applies only to a running loop.
    assert_eq!(s.post("/api/loops/main/stop", "").status, 409);
    let run = env.spawn_fake("churn+hang,check", &["--grace", "1s"]);
    env.wait_for_pids(1, 1);
    assert!(wait_until(Duration::from_secs(10), || s.loops()["loops"]
        [0]["running"]
        == true));
    let r = s.post("/api/loops/main/stop", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ok"], true);
    let (code, out, err) = run.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130), "{out}\n{err}");
    assert_eq!(status_json(&env)["halt_reason"], "interrupted");
    let view = s.get("/api/loops/main").json();
    assert_eq!(view["halt_reason"], "interrupted");
    assert!(
        view["records"].as_array().is_some_and(|r| !r.is_empty()),
        "{view}"
    );
    assert_eq!(view["criteria"][0]["text"], "a");
    s.bg.signal(libc::SIGTERM);
    let (code, _, server_err) = s.bg.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0));
    let mut looked = 0;
    for dir in [
        env.repo.join(".ralph"),
        env.repo.join(".git"),
        state_home(&env),
    ] {
        for f in files_under(&dir) {
            let bytes = std::fs::read(&f).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(&s.token), "the token is in {}", f.display());
            looked += 1;
        }
    }
    assert!(looked > 10, "only {looked} files looked at");
    assert!(!server_err.contains(&s.token));
    assert!(!err.contains(&s.token) && !out.contains(&s.token));
}

/// `--read-only` says so and refuses an action (403), the loop left as it was; without it the
/// same resume starts `ralph resume`, which runs the loop to completion.
#[test]
fn read_only_refuses_actions_and_resume_goes_on_without_it() {
    let env = setup(&["a"]);
    let out = env.run_fake("idle", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    let agent = format!("'{}'", fake_agent().display());
    // What the resumed run inherits from the server: the agent, and a limit given now.
    let vars = [
        ("RALPH_AGENT_CMD", agent.as_str()),
        ("FAKE_AGENT_SCRIPT", "check"),
        ("RALPH_MAX_ITERATIONS", "3"),
    ];
    let ro = Server::start(&env, &["--read-only"], &vars);
    assert_eq!(ro.loops()["read_only"], true);
    for action in ["resume", "stop", "merge"] {
        let r = ro.post(&format!("/api/loops/main/{action}"), "");
        assert_eq!(r.status, 403, "{action}: {}", r.body);
    }
    assert_eq!(
        ro.post("/api/loops/main/hint", r#"{"text":"x"}"#).status,
        403
    );
    ro.bg.signal(libc::SIGTERM);
    assert_eq!(ro.bg.wait(Duration::from_secs(5)).0, Some(0));
    assert_eq!(status_json(&env)["halt_reason"], "max_iterations");
    let s = Server::start(&env, &[], &vars);
    let r = s.post("/api/loops/main/resume", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        wait_until(Duration::from_secs(30), || status_json(&env)["halt_reason"]
            == "complete"),
        "{}",
        status_json(&env)
    );
    assert!(env.read("RALPH_TASK.md").contains("- [x] a"));
    // Nothing to resume now.
    assert_eq!(s.post("/api/loops/main/resume", "").status, 409);
    let logs = token_files(&env, "serve-resume-main.log");
    assert_eq!(logs.len(), 1);
    s.bg.signal(libc::SIGTERM);
    assert_eq!(s.bg.wait(Duration::from_secs(5)).0, Some(0));
}

/// The event stream: the loops at connect, then again, with the loop named, when its files
/// change (here: `ralph init` writes its task and `.ralph/`), read as it comes.
#[test]
fn events_come_when_a_loops_files_change() {
    let env = TestEnv::new();
    env.git(&["commit", "-q", "--allow-empty", "-m", "initial"]);
    let s = Server::start(&env, &[], &[]);
    let mut ev = Events::open(&s);
    let (name, data) = ev.next(Duration::from_secs(10)).expect("the first event");
    assert_eq!(name, "loops");
    let first: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(first["loops"][0]["total"], 0);
    // Control: nothing changes, nothing comes.
    assert!(ev.next(Duration::from_millis(500)).is_none());
    let mut ev = Events::open(&s);
    ev.next(Duration::from_secs(10)).expect("the first event");
    let out = env.ralph(&["init", "Test", "--criterion", "one", "--criterion", "two"]);
    assert_exit(&out, 0);
    assert!(
        ev.until(Duration::from_secs(10), "loops", "\"total\":2"),
        "no update"
    );
    assert!(
        ev.until(Duration::from_secs(5), "loop", "main"),
        "no loop event"
    );
    s.bg.signal(libc::SIGTERM);
    assert_eq!(s.bg.wait(Duration::from_secs(5)).0, Some(0));
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of the line; 3 is the first after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Idle, with a client on the event stream, after a real run and after a change was read: not
/// one tick of CPU in 10 s (SPEC §16) — the server's own reads wake nothing. Control: the
/// watcher is live — a write to a loop's file brings an event at once.
#[test]
fn an_idle_server_uses_no_cpu() {
    let env = setup(&["a"]);
    assert_exit(&env.run_fake("check", &[]), 0);
    let s = Server::start(&env, &[], &[]);
    let mut ev = Events::open(&s);
    ev.next(Duration::from_secs(10)).expect("the first event");
    let log = env.repo.join(".ralph/iterations.log");
    let touch = || {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"x\n").unwrap();
    };
    touch();
    assert!(
        ev.until(Duration::from_secs(5), "loop", "main"),
        "the watcher is live"
    );
    assert!(ev.next(Duration::from_millis(500)).is_none(), "settled");
    let before = cpu_ticks(s.bg.pid());
    std::thread::sleep(Duration::from_secs(10));
    let after = cpu_ticks(s.bg.pid());
    assert_eq!(before, after, "ticks used while idle");
    touch();
    assert!(
        ev.until(Duration::from_secs(5), "loop", "main"),
        "still live"
    );
    s.bg.signal(libc::SIGTERM);
    assert_eq!(s.bg.wait(Duration::from_secs(5)).0, Some(0));
}

/// SIGTERM (and SIGINT) end the server within a second, exit 0, its files removed.
#[test]
fn sigterm_stops_the_server_and_removes_its_files() {
    let env = setup(&["a"]);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let s = Server::start(&env, &[], &[]);
        let _ev = Events::open(&s); // an open stream does not hold it up
        assert_eq!(token_files(&env, "serve.token").len(), 1);
        assert_eq!(token_files(&env, "serve.pid").len(), 1);
        let at = Instant::now();
        s.bg.signal(sig);
        let (code, _, err) = s.bg.wait(Duration::from_secs(5));
        assert!(at.elapsed() < Duration::from_secs(1), "{:?}", at.elapsed());
        assert_eq!(code, Some(0), "{err}");
        assert!(token_files(&env, "serve.token").is_empty());
        assert!(token_files(&env, "serve.pid").is_empty());
    }
}

/// Beyond loopback the server warns (without the token); a bad address is a clear error.
#[test]
fn a_network_listen_warns_and_a_bad_one_is_refused() {
    let env = setup(&["a"]);
    let bad = env.ralph(&["serve", "--listen", "nowhere"]);
    assert_exit(&bad, 2);
    assert!(
        stderr(&bad).contains("--listen `nowhere`"),
        "{}",
        stderr(&bad)
    );
    let mut cmd = env.ralph_cmd();
    cmd.args(["serve", "--listen", "0.0.0.0:0"]);
    let bg = env.spawn(cmd);
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&bg.out).is_ok_and(|o| o.ends_with('\n'))
    }));
    bg.signal(libc::SIGTERM);
    let (code, out, err) = bg.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0));
    assert!(err.contains("reachable from the network"), "{err}");
    let token = out.trim().rsplit_once("token=").unwrap().1;
    assert!(!err.contains(token));
}

/// Merge: a completed worktree loop merges from the page's API (`ralph merge`'s exit code and
/// output in the reply, its work in the main tree after); the main tree's loop never merges.
#[test]
fn merge_brings_a_completed_worktree_loops_work() {
    let env = setup(&["a"]);
    let agent = format!("'{}'", fake_agent().display());
    let vars = [
        ("RALPH_AGENT_CMD", agent.as_str()),
        ("FAKE_AGENT_SCRIPT", "check"),
    ];
    let out = env.ralph_with_limit(
        &["run", "--worktree", "w", "--yes"],
        &vars,
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    let s = Server::start(&env, &[], &[]);
    let names: Vec<String> = s.loops()["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["main", "w"]);
    // Control: the main work tree has none of the loop's work yet.
    assert!(env.read("RALPH_TASK.md").contains("- [ ] a"));
    assert_eq!(s.post("/api/loops/main/merge", "").status, 409);
    assert_eq!(s.post("/api/loops/nosuch/merge", "").status, 404);
    let r = s.post("/api/loops/w/merge", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["message"].as_str().unwrap().contains("exit 0"),
        "{}",
        r.body
    );
    assert!(env.read("RALPH_TASK.md").contains("- [x] a"));
    s.bg.signal(libc::SIGTERM);
    assert_eq!(s.bg.wait(Duration::from_secs(5)).0, Some(0));
}

/// A second server for the same repository is refused while the first runs (its token file
/// left as it was), and starts once the first is gone.
#[test]
fn one_server_per_repository() {
    let env = setup(&["a"]);
    let first = Server::start(&env, &[], &[]);
    let second = env.ralph(&["serve"]);
    assert_exit(&second, 1);
    assert!(
        stderr(&second).contains(&format!("another ralph serve (pid {})", first.bg.pid())),
        "{}",
        stderr(&second)
    );
    assert!(stdout(&second).is_empty(), "no URL printed");
    let files = token_files(&env, "serve.token");
    assert_eq!(
        std::fs::read_to_string(&files[0]).unwrap().trim(),
        first.token
    );
    assert_eq!(first.get("/api/loops").status, 200);
    first.bg.signal(libc::SIGTERM);
    assert_eq!(first.bg.wait(Duration::from_secs(5)).0, Some(0));
    let again = Server::start(&env, &[], &[]);
    assert_eq!(again.get("/api/loops").status, 200);
    again.bg.signal(libc::SIGTERM);
    assert_eq!(again.bg.wait(Duration::from_secs(5)).0, Some(0));
}
