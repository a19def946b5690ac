//! `--from github` (SPEC §14) against a stand-in of GitHub's issue API (`testing/github_standin.rs`,
//! loopback, the token checked, every request recorded): labelled issues oldest first across
//! pages, blockers respected, pull requests and unlabelled issues untouched, closed with
//! `state_reason: completed` on ralph's own exit 0; a refused token is exit 1 naming it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::common::*;

pub(crate) const TOKEN: &str = "ghp_standin";

/// The stand-in, on its state file (`page_size` issues a page); killed when dropped.
pub(crate) struct Api {
    child: std::process::Child,
    state: PathBuf,
    pub(crate) port: u16,
}

impl Api {
    pub(crate) fn start(env: &TestEnv, issues: Value, page_size: u64) -> Api {
        Api::start_with(env, issues, page_size, json!({}))
    }

    /// [`Api::start`] with more of the state: `extra`'s fields (`tokens`, `faults`, `pulls`…)
    /// added to it (see the state file's format in `testing/github_standin.rs`).
    pub(crate) fn start_with(env: &TestEnv, issues: Value, page_size: u64, extra: Value) -> Api {
        let state = env.home.join("github.json");
        let mut doc = json!({ "token": TOKEN, "login": "ralph-bot", "page_size": page_size, "issues": issues });
        if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        std::fs::write(&state, doc.to_string()).unwrap();
        // Beside the built fake agent (not its copy where a sandbox sees it: this runs outside).
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_ralph"))
            .parent()
            .expect("target dir")
            .join("examples/github-standin");
        let mut child = std::process::Command::new(&bin)
            .arg(&state)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (cargo build --examples)", bin.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Api {
            child,
            state,
            port: line.trim().parse().unwrap(),
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn doc(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(&self.state).unwrap()).unwrap()
    }

    pub(crate) fn issue(&self, n: u64) -> Value {
        self.doc()["issues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["number"] == n)
            .unwrap()
            .clone()
    }

    pub(crate) fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(format!("{}.log", self.state.display()))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Every request with its user and answer: `{user, method, target, status, fault}`.
    pub(crate) fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(format!("{}.calls", self.state.display()))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The bodies of issue `n`'s comments, oldest first.
    pub(crate) fn comments(&self, n: u64) -> Vec<String> {
        self.comment_field(n, |c| c["body"].as_str().unwrap_or("").to_string())
    }

    /// Who wrote each of issue `n`'s comments, oldest first.
    pub(crate) fn comment_authors(&self, n: u64) -> Vec<String> {
        self.comment_field(n, |c| c["user"]["login"].as_str().unwrap_or("").to_string())
    }

    fn comment_field(&self, n: u64, f: impl Fn(&Value) -> String) -> Vec<String> {
        self.issue(n)["comments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(f)
            .collect()
    }

    /// Add faults (one or an array) while ralph runs: through the stand-in itself, in line
    /// with every other request, so no change of the state is lost.
    pub(crate) fn add_fault(&self, fault: Value) {
        let (status, _) = self.request("", "POST", "/_standin/faults", Some(&fault));
        assert_eq!(status, 201);
    }

    /// Drop every fault, in line with every request.
    pub(crate) fn clear_faults(&self) {
        let (status, _) = self.request("", "POST", "/_standin/faults/clear", Some(&json!({})));
        assert_eq!(status, 201);
    }

    /// Set fields of issue `n` as the state file has them (`{"deleted": true}`), in line with
    /// every request.
    pub(crate) fn set_issue(&self, n: u64, fields: Value) {
        let (status, _) = self.request("", "POST", &format!("/_standin/issues/{n}"), Some(&fields));
        assert_eq!(status, 201);
    }

    /// A person (or a second worker) acting with `token`: a real HTTP request, its status and
    /// body (`null` when empty).
    pub(crate) fn as_user(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.request(token, method, path, body.as_ref())
    }

    fn request(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let payload = body.map(Value::to_string).unwrap_or_default();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            payload.len()
        )
        .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let status = raw
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {raw:?}"));
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An open issue `n` with one task item in its body; `extra` overrides or adds fields.
pub(crate) fn issue(n: u64, title: &str, labels: &[&str], extra: Value) -> Value {
    let mut v = json!({
        "number": n, "title": title, "body": format!("{title}.\n\n- [ ] {title} works"),
        "labels": labels, "assignees": [], "state": "open", "blocked_by": [],
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// A repository with one commit, a clone of its `origin` (SPEC §15: a worker publishes there).
pub(crate) fn fresh() -> TestEnv {
    let env = TestEnv::new();
    with_origin(&env);
    env
}

/// The user's own configuration gives the agent the tracker's token on purpose (`pass_env`,
/// SPEC §15): what an agent holding it could do to the tracker is what these tests attack.
pub(crate) fn agent_gets_the_token(env: &TestEnv) {
    let dir = env.home.join(".config/ralph");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), "pass_env = [\"GITHUB_TOKEN\"]\n").unwrap();
}

/// A repository whose `origin` names o/r on github.com, reached as a local bare repository.
pub(crate) fn with_origin(env: &TestEnv) -> PathBuf {
    env.write("README.md", "queue\n");
    env.commit_all("initial");
    let bare = env.home.join("origin.git");
    env.git(&["init", "-q", "--bare", &bare.display().to_string()]);
    env.git(&["remote", "add", "origin", "https://github.com/o/r.git"]);
    env.git(&[
        "config",
        &format!("url.{}.insteadOf", bare.display()),
        "https://github.com/o/r.git",
    ]);
    env.git(&["push", "-q", "origin", "main"]);
    bare
}

fn run_queue(env: &TestEnv, api: &Api, token: &str, extra: &[&str]) -> std::process::Output {
    run_from(env, api, token, "github:o/r", extra)
}

/// `ralph run --from FROM` against the stand-in, with the token given.
fn run_from(
    env: &TestEnv,
    api: &Api,
    token: &str,
    from: &str,
    extra: &[&str],
) -> std::process::Output {
    run_from_with(env, api, token, from, "check-unless:no such text", extra)
}

/// [`run_from`] with the fake agent following `script`.
pub(crate) fn run_from_with(
    env: &TestEnv,
    api: &Api,
    token: &str,
    from: &str,
    script: &str,
    extra: &[&str],
) -> std::process::Output {
    let agent = fake_agent_cmd();
    let mut args = vec![
        "run",
        "--from",
        from,
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[
            ("FAKE_AGENT_SCRIPT", script),
            ("GITHUB_API_URL", &api.url()),
            ("GITHUB_TOKEN", token),
        ],
        std::time::Duration::from_secs(120),
    )
}

#[test]
fn labelled_issues_run_oldest_first_blockers_respected_and_others_untouched() {
    let env = fresh();
    let api = Api::start(
        &env,
        json!([
            issue(1, "Schema", &["ralph"], json!({})),
            issue(2, "API", &["ralph"], json!({ "blocked_by": [1] })),
            issue(
                3,
                "A pull request",
                &["ralph"],
                json!({ "pull_request": true })
            ),
            issue(4, "Not for ralph", &["bug"], json!({})),
            issue(5, "Docs", &["ralph"], json!({})),
            issue(
                6,
                "Taken by a peer",
                &["ralph"],
                json!({ "assignees": ["someone"] })
            ),
        ]),
        2,
    );
    let out = run_queue(&env, &api, TOKEN, &[]);
    assert_exit(&out, 0);
    for n in [1, 2, 5] {
        let i = api.issue(n);
        assert_eq!(i["state"], "closed", "#{n}: {}", stdout(&out));
        assert_eq!(i["state_reason"], "completed");
        assert!(api.comments(n)[0].starts_with("ralph: complete at "));
        assert_eq!(api.comment_authors(n)[0], "ralph-bot");
        assert!(env.repo.join(format!("work/github-{n}-1.txt")).exists());
    }
    // Oldest first (page size 2, so the Link pages were followed): #2 is older than #5 and is
    // taken as soon as #1, its blocker, is closed — not before.
    let requests = api.requests();
    let at = |wanted: &str| {
        requests
            .iter()
            .position(|r| r == wanted)
            .unwrap_or_else(|| panic!("no `{wanted}` in {requests:#?}"))
    };
    assert!(at("PATCH /repos/o/r/issues/1") < at("POST /repos/o/r/issues/2/assignees"));
    assert!(at("PATCH /repos/o/r/issues/2") < at("POST /repos/o/r/issues/5/assignees"));
    assert!(
        requests.iter().any(|r| r.contains("page=2")),
        "the next page was never asked for: {requests:#?}"
    );
    // The pull request, the unlabelled issue and the peer's were never touched.
    for n in [3, 4, 6] {
        let touched: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|r| {
                r.starts_with(&format!("POST /repos/o/r/issues/{n}/"))
                    || r.starts_with(&format!("PATCH /repos/o/r/issues/{n}"))
            })
            .collect();
        assert!(touched.is_empty(), "#{n} touched: {touched:?}");
        assert_eq!(api.issue(n)["state"], "open");
    }
    // Every request carried the token; none left the loopback stand-in.
    assert!(api.requests().iter().any(|r| r.contains("direction=asc")));
}

#[test]
fn a_refused_token_is_exit_one_naming_the_variables_and_the_401() {
    let env = fresh();
    let api = Api::start(&env, json!([issue(1, "Schema", &["ralph"], json!({}))]), 2);
    let out = run_queue(&env, &api, "wrong", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("HTTP 401: Bad credentials"), "{err}");
    assert!(
        err.contains("GITHUB_TOKEN") && err.contains("GH_TOKEN"),
        "{err}"
    );
    assert!(!env.agent_ran(1));
    let i = api.issue(1);
    assert_eq!(i["assignees"], json!([]));
    assert_eq!(i["state"], "open");
}

#[test]
fn a_stalled_issue_is_released_open_unassigned_with_a_comment() {
    let env = fresh();
    let mut stuck = issue(1, "Hard", &["ralph"], json!({}));
    stuck["body"] = json!("- [ ] never done");
    let api = Api::start(&env, json!([stuck]), 2);
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "run",
            "--from",
            "github:o/r",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
        ],
        &[
            ("FAKE_AGENT_SCRIPT", "check-unless:never done"),
            ("GITHUB_API_URL", &api.url()),
            ("GITHUB_TOKEN", TOKEN),
        ],
        std::time::Duration::from_secs(120),
    );
    assert_exit(&out, 9);
    let i = api.issue(1);
    assert_eq!(i["state"], "open");
    assert_eq!(i["assignees"], json!([]));
    assert_eq!(i["labels"], json!(["ralph"]));
    let comment = api.comments(1)[0].clone();
    assert!(
        comment.contains("stalled") && comment.contains("ralph/github-1"),
        "{comment}"
    );
}

#[test]
fn owner_and_repo_come_from_origin_as_configured_before_insteadof() {
    let env = TestEnv::new();
    // git itself reaches the local bare repository; the configured URL still names o/r.
    with_origin(&env);
    let api = Api::start(&env, json!([issue(1, "Schema", &["ralph"], json!({}))]), 2);
    let out = run_from(&env, &api, TOKEN, "github", &[]);
    assert_exit(&out, 0);
    assert_eq!(api.issue(1)["state"], "closed");
    // Control: an origin that is not GitHub's is refused, naming it.
    env.git(&["remote", "set-url", "origin", "https://gitlab.com/o/r.git"]);
    let out = run_from(&env, &api, TOKEN, "github", &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("https://gitlab.com/o/r.git"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pr_pushes_the_branch_and_opens_a_pull_request_that_closes_the_issue_left_open() {
    let env = TestEnv::new();
    let bare = with_origin(&env);
    let base = env.git(&["branch", "--show-current"]).trim().to_string();
    let api = Api::start(&env, json!([issue(1, "Schema", &["ralph"], json!({}))]), 2);
    let out = run_from(&env, &api, TOKEN, "github", &["--pr", "--json"]);
    assert_exit(&out, 0);
    // Pushed to the bare origin, not merged here.
    let pushed = git_in(&env, &bare, &["log", "--format=%s", "ralph/github-1"]);
    assert!(pushed.contains("ralph: iteration 1"), "{pushed}");
    assert!(
        !env.repo.join("work/github-1-1.txt").exists(),
        "merged anyway"
    );
    let state: Value = serde_json::from_str(&std::fs::read_to_string(&api.state).unwrap()).unwrap();
    let pull = &state["pulls"][0];
    assert_eq!(pull["head"], "ralph/github-1");
    assert_eq!(pull["base"], base.as_str());
    assert_eq!(pull["title"], "Schema");
    assert!(
        pull["body"].as_str().unwrap().ends_with("Closes #1"),
        "{pull}"
    );
    let i = api.issue(1);
    assert_eq!(i["state"], "open");
    assert_eq!(i["labels"], json!(["ralph", "ralph:pr-open"]));
    let items = events_named(&out, "queue_item");
    assert_eq!(items[0]["outcome"], "pr-open");
    // A later run skips it.
    let again = run_from(&env, &api, TOKEN, "github", &["--pr"]);
    assert_exit(&again, 0);
    assert!(
        stdout(&again).contains("github: nothing is ready"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn pr_whose_push_fails_is_the_items_halt_never_a_silent_success() {
    let env = TestEnv::new();
    let bare = with_origin(&env);
    let api = Api::start(&env, json!([issue(1, "Schema", &["ralph"], json!({}))]), 2);
    // Origin goes away while the agent works: the item's push fails.
    let gone = agent_sh(&env, "origin-gone", &format!("rm -rf '{}'", bare.display()));
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "run",
            "--from",
            "github",
            "--pr",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
        ],
        &[
            (
                "FAKE_AGENT_SCRIPT",
                &format!("{gone}+check-unless:no such text"),
            ),
            ("GITHUB_API_URL", &api.url()),
            ("GITHUB_TOKEN", TOKEN),
        ],
        std::time::Duration::from_secs(120),
    );
    assert_exit(&out, 9);
    assert!(!bare.exists(), "control: origin is gone");
    let i = api.issue(1);
    assert_eq!(i["state"], "open");
    assert_eq!(i["labels"], json!(["ralph"]));
    assert_eq!(i["assignees"], json!([]));
    let comment = api.comments(1)[0].clone();
    assert!(comment.contains("not pushed"), "{comment}");
    let state: Value = serde_json::from_str(&std::fs::read_to_string(&api.state).unwrap()).unwrap();
    assert!(
        state["pulls"].is_null(),
        "a pull request was opened: {state}"
    );
}

#[test]
fn an_issue_an_agent_closed_through_the_api_is_reopened_and_worked() {
    let env = fresh();
    let api = Api::start(
        &env,
        json!([
            issue(1, "Schema", &["ralph"], json!({})),
            issue(2, "Docs", &["ralph"], json!({})),
        ]),
        2,
    );
    // Working #1, the agent closes #2 with the token it was given.
    agent_gets_the_token(&env);
    let script = agent_sh(
        &env,
        "close-two",
        "if grep -q 'Task: Schema' \"$RALPH_TASK_FILE\"; then curl -s -o /dev/null -X PATCH -H \"Authorization: Bearer $GITHUB_TOKEN\" -d '{\"state\":\"closed\"}' \"$GITHUB_API_URL/repos/o/r/issues/2\"; fi",
    );
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "run",
            "--from",
            "github:o/r",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
        ],
        &[
            (
                "FAKE_AGENT_SCRIPT",
                &format!("{script}+check-unless:no such text"),
            ),
            ("GITHUB_API_URL", &api.url()),
            ("GITHUB_TOKEN", TOKEN),
        ],
        std::time::Duration::from_secs(120),
    );
    assert_exit(&out, 0);
    // Control: the agent's PATCH reached the API.
    let requests = api.requests();
    let patches = requests
        .iter()
        .filter(|r| *r == "PATCH /repos/o/r/issues/2")
        .count();
    assert!(
        patches >= 3,
        "the agent's close, ralph's reopen, ralph's close: {requests:#?}"
    );
    let two = api.issue(2);
    let comments = api.comments(2).join("\n");
    assert!(
        comments.contains("put back from `closed||ralph|completed` to `open||ralph|`"),
        "{comments}"
    );
    // Then worked as any other: closed by ralph's own run, its work merged.
    assert_eq!(two["state"], "closed");
    assert!(comments.contains("ralph: complete at"), "{comments}");
    assert!(env.repo.join("work/github-2-1.txt").exists());
}
