//! One queue, many workers (SPEC §15): real `ralph run --from github` processes, each in its own
//! clone with its own HOME (as on separate machines), one token, against the GitHub stand-in
//! (`testing/github_standin.rs`) and one bare `origin` reached through `insteadOf`. Workers are
//! started at once, killed with SIGKILL and stopped with SIGTERM by pid; nothing sleeps to
//! synchronise but the scenario itself (a lease that must run out).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::queue_github::{Api, TOKEN};

/// A bare origin with `main`, the stand-in, and clones of origin, each a worker's machine.
pub(crate) struct Team {
    pub(crate) server: TestEnv,
    pub(crate) origin: PathBuf,
    pub(crate) api: Api,
    /// Where every agent run is logged: `WORKER TASK-FILE` per line.
    pub(crate) runs: PathBuf,
}

impl Team {
    /// Origin with one commit, and the stand-in holding `issues`.
    pub(crate) fn new(issues: Value) -> Team {
        Team::new_with(issues, json!({}))
    }

    /// [`Team::new`], `extra` added to the stand-in's state (`tokens`, `faults`).
    pub(crate) fn new_with(issues: Value, extra: Value) -> Team {
        let server = TestEnv::new();
        server.write("README.md", "queue\n");
        server.commit_all("initial");
        let origin = server.home.join("origin.git");
        server.git(&[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            &origin.display().to_string(),
        ]);
        server.git(&["push", "-q", &origin.display().to_string(), "main"]);
        let api = Api::start_with(&server, issues, 100, extra);
        let runs = server.home.join("runs.log");
        Team {
            server,
            origin,
            api,
            runs,
        }
    }

    /// A worker's machine: a clone of origin (its URL github.com's, reached as the bare
    /// repository), HOME of its own.
    pub(crate) fn machine(&self) -> TestEnv {
        let env = TestEnv::new();
        env.git(&["remote", "add", "origin", "https://github.com/o/r.git"]);
        env.git(&[
            "config",
            &format!("url.{}.insteadOf", self.origin.display()),
            "https://github.com/o/r.git",
        ]);
        env.git(&["fetch", "-q", "origin"]);
        env.git(&["reset", "-q", "--hard", "origin/main"]);
        env.git(&["branch", "-q", "--set-upstream-to", "origin/main"]);
        env
    }

    /// `ralph run --from github:o/r EXTRA` on `env` as worker `who`, in the background; its
    /// agent logs each run and then does what the fake agent's `script` says.
    pub(crate) fn start(
        &self,
        env: &TestEnv,
        who: &str,
        script: &str,
        extra: &[&str],
    ) -> Background {
        self.start_with(env, who, script, extra, &[])
    }

    /// [`Team::start`] with `vars` added to the worker's environment.
    pub(crate) fn start_with(
        &self,
        env: &TestEnv,
        who: &str,
        script: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Background {
        let mut cmd = env.ralph_cmd();
        cmd.envs(vars.iter().copied());
        cmd.args(["run", "--from", "github:o/r", "--yes", "--grace", "1s"])
            .args(["--agent-cmd", &self.agent(env)])
            .args(["--worker-id", who])
            .args(extra)
            .env("FAKE_AGENT_SCRIPT", script)
            .env("GITHUB_API_URL", self.api.url())
            .env("GITHUB_TOKEN", TOKEN)
            .env("RUNS_LOG", &self.runs)
            .env("WORKER", who);
        env.spawn(cmd)
    }

    /// The agent: one line in the runs log, then the fake agent.
    fn agent(&self, env: &TestEnv) -> String {
        let script = env.home.join("agent.sh");
        std::fs::write(
            &script,
            format!(
                "echo \"$WORKER $(basename \"$RALPH_TASK_FILE\")\" >> \"$RUNS_LOG\"\nexec '{}'\n",
                fake_agent().display()
            ),
        )
        .unwrap();
        format!("sh '{}'", script.display())
    }

    /// Each agent run: (worker, task file).
    pub(crate) fn runs(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(&self.runs)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(w, t)| (w.to_string(), t.to_string()))
            .collect()
    }

    /// `git ARGS` in the bare origin.
    pub(crate) fn origin_git(&self, args: &[&str]) -> std::process::Output {
        git_output_in(&self.server, &self.origin, args)
    }

    /// The pull requests the stand-in holds.
    pub(crate) fn pulls(&self) -> Vec<Value> {
        self.api.doc()["pulls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Item `name`'s lease on origin, as its commit's message says it.
    pub(crate) fn lease(&self, name: &str) -> String {
        let out = self.origin_git(&[
            "log",
            "-1",
            "--format=%B",
            &format!("refs/ralph/leases/{name}"),
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// An open issue labelled `ralph` with `criteria` as task items.
pub(crate) fn issue(n: u64, criteria: &[&str]) -> Value {
    let body: String = criteria.iter().map(|c| format!("- [ ] {c}\n")).collect();
    json!({
        "number": n, "title": format!("Item {n}"), "body": body,
        "labels": ["ralph"], "assignees": [], "state": "open", "blocked_by": [],
    })
}

fn labels(i: &Value) -> Vec<String> {
    i["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_string))
        .collect()
}

/// Wait for `path` to exist (the scenario's own signal), failing after `limit`.
#[track_caller]
fn wait_for(path: &Path, limit: Duration) {
    assert!(
        wait_until(limit, || path.exists()),
        "{} never appeared",
        path.display()
    );
}

#[test]
fn three_workers_with_one_token_work_each_issue_once() {
    let team = Team::new(json!(
        (1..=8)
            .map(|n| issue(n, &[&format!("first of {n}"), &format!("second of {n}")]))
            .collect::<Vec<_>>()
    ));
    let machines: Vec<TestEnv> = (0..3).map(|_| team.machine()).collect();
    let workers: Vec<Background> = machines
        .iter()
        .enumerate()
        .map(|(i, env)| team.start(env, &format!("w{i}"), "check", &["--pr"]))
        .collect();
    let ended: Vec<(Option<i32>, String, String)> = workers
        .into_iter()
        .map(|w| w.wait(Duration::from_secs(240)))
        .collect();
    for (i, (code, out, err)) in ended.iter().enumerate() {
        assert_eq!(*code, Some(0), "worker w{i}:\n{out}\n{err}");
        assert!(
            !err.contains("put back"),
            "worker w{i} put back another worker's change:\n{err}"
        );
    }
    // Every issue worked by exactly one worker, one agent run per criterion.
    let runs = team.runs();
    assert_eq!(runs.len(), 16, "{runs:#?}");
    for n in 1..=8 {
        let file = format!("github-{n}.md");
        let by: Vec<&String> = runs
            .iter()
            .filter(|(_, t)| *t == file)
            .map(|(w, _)| w)
            .collect();
        assert_eq!(by.len(), 2, "#{n}: {runs:#?}");
        assert_eq!(by[0], by[1], "#{n} was worked by two workers: {runs:#?}");
    }
    // One pull request each, from the item's branch into main; nothing left claimed.
    let pulls = team.pulls();
    assert_eq!(pulls.len(), 8, "{pulls:#?}");
    for n in 1..=8 {
        let head = format!("ralph/github-{n}");
        assert_eq!(
            pulls.iter().filter(|p| p["head"] == head.as_str()).count(),
            1,
            "{head}"
        );
        let i = team.api.issue(n);
        assert_eq!(i["state"], "open");
        assert_eq!(labels(&i), ["ralph", "ralph:pr-open"], "#{n}: {i}");
        assert!(
            team.lease(&format!("github-{n}"))
                .contains("Stage: pr-open")
        );
    }
    // More workers than the three finds nothing left (every issue has its pull request).
    let late = team.machine();
    let (code, out, err) = team
        .start(&late, "w3", "check", &["--pr"])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("nothing is ready"), "{out}");
}

/// The first worker is SIGKILLed while its agent works on the item's second criterion (the
/// first is on origin): its lease (4 s) runs out, and a worker started 6 s later takes the item
/// over from the branch it left and completes it — one pull request. Control: a worker started
/// while the lease still holds leaves the item alone.
#[test]
fn a_killed_workers_item_is_taken_over_once_its_lease_runs_out() {
    let team = Team::new(json!([issue(1, &["first", "second"])]));
    let (a, b, c) = (team.machine(), team.machine(), team.machine());
    let w1 = team.start(&a, "w1", "check,hang", &["--pr", "--lease", "4s"]);
    // The scenario: iteration 2's agent runs, and origin has iteration 1's commit.
    wait_for(&a.log.join("pids-2.txt"), Duration::from_secs(60));
    assert!(wait_until(Duration::from_secs(20), || {
        let log = team.origin_git(&["log", "--format=%s", "ralph/github-1"]);
        String::from_utf8_lossy(&log.stdout).contains("ralph: iteration 1")
    }));
    let agents = a.agent_pids(2);
    w1.signal(libc::SIGKILL);
    let killed = Instant::now();
    let (code, _, _) = w1.wait(Duration::from_secs(10));
    assert_eq!(code, None, "killed by a signal");
    // Control: the lease still holds, so a worker started now takes nothing.
    let (code, out, err) = team
        .start(&b, "w2", "check", &["--pr", "--lease", "4s"])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("nothing is ready"), "{out}\n{err}");
    assert!(
        killed.elapsed() < Duration::from_secs(4),
        "the control came too late to count"
    );
    // 6 s after the kill the lease ran out: the next worker takes the item over.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(killed.elapsed()));
    let (code, out, err) = team
        .start(&c, "w3", "check", &["--pr", "--lease", "4s"])
        .wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let runs = team.runs();
    let by_w3 = runs.iter().filter(|(w, _)| w == "w3").count();
    assert_eq!(
        by_w3, 1,
        "w3 went on from the branch w1 left (one criterion left): {runs:#?}"
    );
    assert_eq!(team.pulls().len(), 1, "{:#?}", team.pulls());
    let head = team.origin_git(&["show", "ralph/github-1:.ralph/tasks/github-1.md"]);
    let task = String::from_utf8_lossy(&head.stdout);
    assert!(
        task.contains("- [x] first") && task.contains("- [x] second"),
        "{task}"
    );
    assert!(team.lease("github-1").contains("Worker: w3"));
    for p in agents {
        // The killed worker's agent is not left working (its guard outlives nobody).
        assert!(
            wait_until(Duration::from_secs(20), || !pid_alive(p)),
            "agent {p} still alive"
        );
    }
}

/// SIGTERM (a pod deleted) stops the worker within 15 s with exit 130, the item released:
/// open, unassigned, without `ralph:in-progress`, a comment naming the stop; the next worker
/// takes it at once.
#[test]
fn a_worker_stopped_with_sigterm_releases_its_item_for_the_next() {
    let team = Team::new(json!([issue(1, &["first", "second"])]));
    let (a, b) = (team.machine(), team.machine());
    let w1 = team.start(&a, "w1", "check,hang", &["--pr"]);
    wait_for(&a.log.join("pids-2.txt"), Duration::from_secs(60));
    let claimed = team.api.issue(1);
    assert!(
        labels(&claimed).contains(&"ralph:in-progress".to_string()),
        "{claimed}"
    );
    w1.signal(libc::SIGTERM);
    let stopped = Instant::now();
    let (code, out, err) = w1.wait(Duration::from_secs(30));
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "took {:?}",
        stopped.elapsed()
    );
    assert_eq!(code, Some(130), "{out}\n{err}");
    let i = team.api.issue(1);
    assert_eq!(i["state"], "open");
    assert_eq!(i["assignees"], json!([]));
    assert_eq!(labels(&i), ["ralph"], "{i}");
    let comments = i["comments"].to_string();
    assert!(comments.contains("interrupted"), "{comments}");
    assert!(team.lease("github-1").contains("Stage: released"));
    // The next worker takes it at once (no lease to wait out) and completes it.
    let (code, out, err) = team
        .start(&b, "w2", "check", &["--pr"])
        .wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.pulls().len(), 1);
}

/// The fake agent's step that completes an item without touching another item's files.
const CHECK: &str = "check-unless:no such text";

/// Without `--pr` every item's work goes to origin's `main` before its issue is closed, and a
/// commit a person pushed meanwhile is kept: each closing comment names a commit origin's main
/// has. (Before, the issue was closed "complete at" a commit only the worker's machine had.)
#[test]
fn without_pr_each_issue_is_closed_at_a_commit_origins_main_has() {
    let team = Team::new(json!([issue(1, &["one"]), issue(2, &["two"])]));
    let (a, person) = (team.machine(), team.machine());
    // While item 1's agent works, a person pushes to main (once).
    let marker = a.dir().join("person-pushed");
    let push = agent_sh(
        &a,
        "person",
        &format!(
            "if [ ! -e '{m}' ]; then touch '{m}'; echo person > '{p}/PERSON.md'; git -C '{p}' add PERSON.md; git -C '{p}' commit -qm 'a person'; git -C '{p}' push -q origin main; fi",
            m = marker.display(),
            p = person.repo.display()
        ),
    );
    let (code, out, err) = team
        .start(&a, "w1", &format!("{push}+{CHECK}"), &[])
        .wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(marker.exists(), "control: the person's push happened");
    let main = |path: &str| {
        team.origin_git(&["cat-file", "-e", &format!("main:{path}")])
            .status
            .success()
    };
    assert!(main("PERSON.md"), "the person's commit was lost");
    assert!(main("work/github-1-1.txt") && main("work/github-2-1.txt"));
    for n in [1, 2] {
        let i = team.api.issue(n);
        assert_eq!(i["state"], "closed", "#{n}: {i}");
        let said = i["comments"].to_string();
        let sha = said
            .split("complete at ")
            .nth(1)
            .and_then(|r| r.get(..40))
            .unwrap_or_else(|| panic!("#{n}: no commit named: {said}"))
            .to_string();
        let on_main = team.origin_git(&["merge-base", "--is-ancestor", &sha, "main"]);
        assert!(
            on_main.status.success(),
            "#{n} closed at {sha}, which origin's main has not"
        );
        assert!(team.lease(&format!("github-{n}")).contains("Stage: closed"));
    }
}

/// The tracker's token is not the agent's: no `GITHUB_TOKEN`, `GH_TOKEN` or other variable
/// holding its value in the agent's environment, and the value in no file under the
/// repository, its `.git` or ralph's state directory. `pass_env` in the user's configuration
/// gives it back on purpose; the repository's configuration cannot.
#[test]
fn the_trackers_token_is_not_the_agents() {
    let team = Team::new(json!([issue(1, &["one"]), issue(2, &["two"])]));
    let a = team.machine();
    let dump = a.dir().join("agent-env.txt");
    let env_of = agent_sh(&a, "dump-env", &format!("env > '{}'", dump.display()));
    let mut cmd = a.ralph_cmd();
    cmd.args(["run", "--from", "github:o/r", "--yes", "--max-tasks", "1"])
        .args(["--agent-cmd", &format!("'{}'", fake_agent().display())])
        .env("FAKE_AGENT_SCRIPT", format!("{env_of}+{CHECK}"))
        .env("GITHUB_API_URL", team.api.url())
        .env("GITHUB_TOKEN", TOKEN)
        .env("GH_TOKEN", TOKEN)
        .env("BOT_SECRET", TOKEN)
        .env("UNRELATED", "kept");
    let out = run_with_limit(cmd, Duration::from_secs(120));
    assert_exit(&out, 0);
    let seen = std::fs::read_to_string(&dump).unwrap();
    assert!(
        seen.contains("UNRELATED=kept"),
        "control: the agent's environment was read"
    );
    for var in ["GITHUB_TOKEN=", "GH_TOKEN=", "BOT_SECRET="] {
        assert!(
            !seen.lines().any(|l| l.starts_with(var)),
            "{var} reached the agent"
        );
    }
    assert!(!seen.contains(TOKEN), "the token's value reached the agent");
    let mut holding = Vec::new();
    for root in [&a.repo, &a.home] {
        for entry in walk(root) {
            let bytes = std::fs::read(&entry).unwrap_or_default();
            if bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()) {
                holding.push(entry);
            }
        }
    }
    assert!(holding.is_empty(), "files holding the token: {holding:#?}");
    // On purpose: the user's own configuration passes GITHUB_TOKEN (and only it) on.
    let config = a.home.join(".config/ralph");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "pass_env = [\"GITHUB_TOKEN\"]\n",
    )
    .unwrap();
    let mut cmd = a.ralph_cmd();
    cmd.args(["run", "--from", "github:o/r", "--yes"])
        .args(["--agent-cmd", &format!("'{}'", fake_agent().display())])
        .env("FAKE_AGENT_SCRIPT", format!("{env_of}+{CHECK}"))
        .env("GITHUB_API_URL", team.api.url())
        .env("GITHUB_TOKEN", TOKEN)
        .env("GH_TOKEN", TOKEN);
    assert_exit(&run_with_limit(cmd, Duration::from_secs(120)), 0);
    let seen = std::fs::read_to_string(&dump).unwrap();
    assert!(
        seen.lines().any(|l| l == format!("GITHUB_TOKEN={TOKEN}")),
        "{seen}"
    );
    assert!(!seen.lines().any(|l| l.starts_with("GH_TOKEN=")));
    // Not from the repository, which the agent writes.
    std::fs::remove_file(config.join("config.toml")).unwrap();
    a.write(".ralph/config.toml", "pass_env = [\"GITHUB_TOKEN\"]\n");
    a.commit_all("config");
    let out = a.ralph_with_limit(
        &[
            "run",
            "--from",
            "github:o/r",
            "--yes",
            "--agent-cmd",
            "true",
        ],
        &[("GITHUB_API_URL", &team.api.url()), ("GITHUB_TOKEN", TOKEN)],
        Duration::from_secs(60),
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("`pass_env` is not taken from the repository"),
        "{}",
        stderr(&out)
    );
}

/// Every regular file under `root`, links not followed.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out
}

/// Two workers without `--pr`, four issues of one or two criteria: each publishes to origin's
/// main while the other does, origin's main merged in when it moved (ralph's own `.ralph/`
/// files, whose status block differs with each item's length, never conflict): every issue
/// closed at a commit origin's main has, all the work there.
#[test]
fn two_workers_without_pr_publish_every_item_to_main() {
    let team = Team::new(json!(
        (1..=4)
            .map(|n| match n % 2 {
                0 => issue(n, &[&format!("item {n}")]),
                _ => issue(n, &[&format!("item {n}"), &format!("more of {n}")]),
            })
            .collect::<Vec<_>>()
    ));
    let (a, b) = (team.machine(), team.machine());
    let workers = [
        team.start(&a, "w1", CHECK, &[]),
        team.start(&b, "w2", CHECK, &[]),
    ];
    for (i, w) in workers.into_iter().enumerate() {
        let (code, out, err) = w.wait(Duration::from_secs(240));
        assert_eq!(code, Some(0), "worker {i}:\n{out}\n{err}");
    }
    assert_eq!(team.runs().len(), 6, "{:#?}", team.runs());
    for n in 1..=4 {
        let i = team.api.issue(n);
        assert_eq!(i["state"], "closed", "#{n}: {i}");
        let on_main = team.origin_git(&["cat-file", "-e", &format!("main:work/github-{n}-1.txt")]);
        assert!(
            on_main.status.success(),
            "#{n}'s work is not on origin's main"
        );
    }
}

/// A killed worker's item whose text someone rewrote before the next worker started (so that
/// worker first read the new text): the lease names the text its holder worked on, and the
/// item is never taken over on another — not taken, said; once the text is put back, taken
/// over on it and finished from where the killed worker left it.
#[test]
fn an_item_is_taken_over_only_on_the_text_its_lease_was_taken_with() {
    let mallory = "ghp_mallory";
    let team = Team::new_with(
        json!([issue(1, &["alpha", "beta", "gamma"])]),
        json!({ "tokens": { TOKEN: "ralph-bot", mallory: "mallory" } }),
    );
    let first = team.api.issue(1)["body"].clone();
    let (a, b, c) = (team.machine(), team.machine(), team.machine());
    let w1 = team.start(&a, "w1", "check,hang", &["--pr", "--lease", "3s"]);
    wait_for(&a.log.join("pids-2.txt"), Duration::from_secs(60));
    assert!(wait_until(Duration::from_secs(20), || {
        let log = team.origin_git(&["log", "--format=%s", "ralph/github-1"]);
        String::from_utf8_lossy(&log.stdout).contains("ralph: iteration 1")
    }));
    w1.signal(libc::SIGKILL);
    let killed = Instant::now();
    let _ = w1.wait(Duration::from_secs(10));
    let trivial = json!({ "body": "- [ ] trivial\n" });
    let (status, _) = team
        .api
        .as_user(mallory, "PATCH", "/repos/o/r/issues/1", Some(trivial));
    assert_eq!(status, 200);
    std::thread::sleep(Duration::from_millis(4500).saturating_sub(killed.elapsed()));
    let (code, out, err) = team
        .start(&b, "w2", "check", &["--pr", "--lease", "3s"])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        err.contains("github 1: its lease says it was being worked on another text"),
        "{out}\n{err}"
    );
    let runs = team.runs();
    assert!(runs.iter().all(|(w, _)| w == "w1"), "{runs:#?}");
    assert!(team.pulls().is_empty(), "{:#?}", team.pulls());
    // Control: the text put back, the next worker takes it over on it, from where w1 left it.
    let (status, _) = team.api.as_user(
        mallory,
        "PATCH",
        "/repos/o/r/issues/1",
        Some(json!({ "body": first })),
    );
    assert_eq!(status, 200);
    let (code, out, err) = team
        .start(&c, "w3", "check", &["--pr", "--lease", "3s"])
        .wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let by_w3 = team.runs().iter().filter(|(w, _)| w == "w3").count();
    assert_eq!(by_w3, 2, "{:#?}", team.runs());
    let head = team.origin_git(&["show", "ralph/github-1:.ralph/tasks/github-1.md"]);
    let task = String::from_utf8_lossy(&head.stdout);
    assert!(
        ["alpha", "beta", "gamma"]
            .iter()
            .all(|c| task.contains(&format!("- [x] {c}"))),
        "{task}"
    );
}
