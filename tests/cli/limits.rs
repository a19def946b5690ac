//! Limits and logins only from real signals (SPEC §6): an agent whose whole output talks about
//! rate limits, 429s, quotas and login pages — the work of someone building a rate limiter or a
//! login page — completes its task like any other, with every preset and a custom command; a
//! plain-text agent whose failed attempt ends on a real limit message is waited out and then
//! completes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::agents::stand_in;
use crate::common::*;

/// Plain lines an agent at work may print: prose about limiters and login pages, and the real
/// CLI messages quoted in code, docs or tests.
const TALK: &[&str] = &[
    "clients that hit the rate limit now get a 429",
    "Not logged in users are redirected to /login",
    "You've hit your limit · resets 3pm (UTC)",
    "You've hit your session limit · resets 12:43pm (UTC)",
    "API Error: Request rejected (429) · this may be a temporary rate limit",
    "No remaining quota for premium requests",
    "You've hit your usage limit. Try again at 3:28 PM.",
    "exceeded retry limit, last status: 429 Too Many Requests",
    "Attempt 2 failed with status 429. Retrying with backoff...",
    "Invalid API key · Please run /login",
    "Not logged in · Please run /login",
];

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["rate limiter answers 429", "login page at /login"], "");
    env.commit_all("initial");
    std::fs::create_dir_all(&env.log).unwrap();
    env
}

/// Write a shell script outside the repository (the agent's tree stays its work).
fn script(env: &TestEnv, name: &str, body: &str) -> String {
    let path = env.home.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// A script printing the talk on stdout and stderr, then exiting 0.
fn plain_talk(env: &TestEnv) -> String {
    let talk = TALK.join("\n");
    script(
        env,
        "talk.sh",
        &format!("cat <<'EOF'\n{talk}\nEOF\ncat >&2 <<'EOF'\n{talk}\nEOF\n"),
    )
}

/// The same as Claude's stream-json: an assistant text, a tool call and its result, and a
/// successful result whose text talks about limits; plus plain lines on stderr.
fn claude_talk(env: &TestEnv) -> String {
    let talk = TALK.join("\n");
    let events = [
        serde_json::json!({"type": "system", "subtype": "init", "session_id": "s", "model": "claude-sonnet-4-5"}),
        serde_json::json!({"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [{"type": "text", "text": talk}]}}),
        serde_json::json!({"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "grep -rn 429 src"}}]}}),
        serde_json::json!({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": talk}]}}),
        serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": 2, "result": talk, "session_id": "s", "total_cost_usd": 0.01, "usage": {"input_tokens": 10, "output_tokens": 5}, "permission_denials": []}),
    ];
    let lines: Vec<String> = events.iter().map(ToString::to_string).collect();
    script(
        env,
        "claude-talk.sh",
        &format!(
            "cat <<'EOF'\n{}\nEOF\ncat >&2 <<'EOF'\n{talk}\nEOF\n",
            lines.join("\n")
        ),
    )
}

fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn run(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let mut all = vec!["run", "--yes", "--grace", "1s"];
    all.extend_from_slice(args);
    env.ralph_with_limit(&all, vars, Duration::from_secs(60))
}

fn assert_completed_normally(env: &TestEnv, out: &std::process::Output, who: &str) {
    assert_exit(out, 0);
    let task = env.read("RALPH_TASK.md");
    assert!(
        task.contains("- [x] rate limiter answers 429")
            && task.contains("- [x] login page at /login"),
        "{who}: {task}"
    );
    let recs = env.iter_records();
    assert_eq!(
        recs.len(),
        2,
        "{who}: one ITER record per iteration: {recs:?}"
    );
    let activity = env.activity();
    assert!(!activity.contains("waiting"), "{who}: {activity}");
    assert!(!activity.contains("usage limit"), "{who}: {activity}");
    assert!(!activity.contains("cannot work"), "{who}: {activity}");
}

/// Every preset ralph knows, as its error for an unknown one lists them (a preset added later is
/// tested without touching this file).
fn every_preset(env: &TestEnv) -> Vec<String> {
    let out = env.ralph(&["run", "--agent", "no-such-agent", "--dry-run"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    let list = err
        .split("use one of ")
        .nth(1)
        .and_then(|rest| rest.split(", or --agent-cmd").next())
        .unwrap_or_else(|| panic!("no preset list in: {err}"));
    let names: Vec<String> = list.split(", ").map(str::to_owned).collect();
    assert!(names.len() >= 7, "{names:?}");
    names
}

#[test]
fn an_agent_talking_about_rate_limits_and_logins_completes_its_task_with_every_preset() {
    let presets = every_preset(&setup());
    for preset in presets.iter().map(String::as_str) {
        let env = setup();
        let bin = stand_in(&env, preset, "  --yolo   allow everything");
        let talk = if preset == "claude" {
            claude_talk(&env)
        } else {
            plain_talk(&env)
        };
        let steps = format!("check+sh:{talk}");
        let out = run(
            &env,
            &["--agent", preset],
            &[("PATH", &path_with(&bin)), ("FAKE_AGENT_SCRIPT", &steps)],
        );
        assert_completed_normally(&env, &out, preset);
    }
}

#[test]
fn a_custom_agent_talking_about_rate_limits_and_logins_completes_its_task() {
    let env = setup();
    let talk = plain_talk(&env);
    let agent = format!("'{}'", fake_agent().display());
    let steps = format!("check+sh:{talk}");
    let out = run(
        &env,
        &["--agent-cmd", &agent],
        &[("FAKE_AGENT_SCRIPT", &steps)],
    );
    assert_completed_normally(&env, &out, "custom");
}

#[test]
fn a_plain_agent_whose_failed_attempt_ends_on_a_limit_is_waited_out_then_completes() {
    let env = setup();
    // Fails once (a marker file remembers), printing a real limit message as its last line;
    // then it is the fake agent.
    let marker = env.home.join("limited-once");
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "if [ ! -e '{marker}' ]; then\n  : > '{marker}'\n  echo 'Working on the task'\n  echo \"You've hit your usage limit. Try again later.\" >&2\n  exit 1\nfi\nexec '{fake}' \"$@\"\n",
            marker = marker.display(),
            fake = fake_agent().display()
        ),
    );
    let start = Instant::now();
    let out = run(
        &env,
        &[
            "--agent-cmd",
            &format!("'{agent}'"),
            "--limit-backoff",
            "1s",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
    );
    assert_exit(&out, 0);
    assert!(start.elapsed() >= Duration::from_secs(1), "it backed off");
    let recs = env.iter_records();
    assert_eq!(
        recs.len(),
        2,
        "a limited attempt is not an iteration: {recs:?}"
    );
    let activity = env.activity();
    assert!(
        activity.contains("Iteration 1: usage limit (usage_limit: You've hit your usage limit."),
        "{activity}"
    );
    assert_eq!(activity.matches("waiting").count(), 1, "{activity}");
}

#[test]
fn a_plain_agent_whose_failed_attempt_ends_on_a_login_failure_halts_the_run() {
    let env = setup();
    let agent = script(
        &env,
        "agent.sh",
        "echo 'Starting'\necho 'Not logged in · Please run /login' >&2\nexit 1\n",
    );
    let out = run(&env, &["--agent-cmd", &format!("'{agent}'")], &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("cannot work: Not logged in · Please run /login"),
        "{}",
        stderr(&out)
    );
    // The same words from an attempt that exited 0 are its work.
    let env = setup();
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "'{}' \"$@\" || exit $?\necho 'Not logged in · Please run /login' >&2\n",
            fake_agent().display()
        ),
    );
    let out = run(
        &env,
        &["--agent-cmd", &format!("'{agent}'")],
        &[("FAKE_AGENT_SCRIPT", "check")],
    );
    assert_completed_normally(&env, &out, "exit 0");
}

/// A limit sentence in the output of a failing test is the test's, not the agent's CLI's: an
/// agent that prints its prompt back (where ralph put the failing test's output) and fails is
/// not usage-limited — no wait, no fallback; the iteration simply failed. Before, ralph read the
/// echoed sentence as its CLI's limit and waited (12,251 s in the hostile pass).
#[test]
fn a_limit_sentence_in_the_tests_output_is_no_limit_of_the_agent() {
    let env = TestEnv::new();
    env.write_task(&["the feature works"], "");
    env.commit_all("initial");
    let test = "echo 'Error: You have hit the rate limit for this model. Try another model.'; echo \"Error: You've hit the rate limit for this model. Try another model.\"; exit 1";
    let out = env.run_fake(
        "check,echo+fail",
        &[
            "--test-command",
            test,
            "--max-iterations",
            "2",
            "--max-wait",
            "1s",
            "--json",
        ],
    );
    // Control: the agent did print the sentence back (it is in its transcript).
    assert!(
        env.agent_prompt(2).contains("You've hit the rate limit"),
        "the prompt carried the test's output"
    );
    assert!(
        events_named(&out, "waiting").is_empty(),
        "ralph waited for a limit:\n{}",
        stdout(&out)
    );
    assert_exit(&out, 3);
}
