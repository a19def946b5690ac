//! The agent's activity visible while it works (issue 30): `--stream` renders a JSON agent's
//! events as text — its messages, one line per tool call, its tool results shortened, the result
//! and cost — while the transcript keeps the raw lines; an API retry of Claude's is the latest
//! activity (`.ralph/activity.now`, the live line), whatever the error. Driven by a stand-in
//! `claude` on PATH that prints a scripted stream-json session.

use std::time::Duration;

use crate::common::*;

/// A Claude session as stream-json: a message, a Bash call and its result (three lines), an
/// Edit call, the result with its cost.
const SESSION: &[&str] = &[
    r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-test-1"}"#,
    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Looking at the failing test first."}]}}"#,
    r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]}}"#,
    r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"running 3 tests\ntest a ... ok\ntest result: ok. 3 passed"}]}}"#,
    r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Edit","input":{"file_path":"src/lib.rs","old_string":"a","new_string":"b"}}]}}"#,
    r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"edited"}]}}"#,
    r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"Fixed the parser.","session_id":"s1","total_cost_usd":0.0123,"usage":{"input_tokens":1000,"output_tokens":50}}"#,
];

/// A script (outside the repository) that prints `lines` as the agent's stdout.
fn printer(env: &TestEnv, name: &str, lines: &[&str]) -> String {
    let path = env.home.join(name);
    let mut script = String::from("cat <<'EOF'\n");
    for line in lines {
        script.push_str(line);
        script.push('\n');
    }
    script.push_str("EOF\n");
    std::fs::write(&path, script).unwrap();
    path.display().to_string()
}

fn one_criterion() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["c1"], "");
    env.commit_all("initial");
    env
}

#[test]
fn stream_renders_claudes_events_as_text_and_the_transcript_stays_raw() {
    let env = one_criterion();
    let session = printer(&env, "session.sh", SESSION);
    let script = format!("check+sh:{session}");
    let out = run_claude_fake(&env, "run", &script, &["--stream"], Duration::from_secs(60));
    assert_exit(&out, 0);
    // Control: the agent printed raw JSON events — the transcript holds them, byte for byte.
    let log = transcript(&env);
    assert!(
        log.ends_with(&format!("\nchecked: c1\n{}\n", SESSION.join("\n"))),
        "the raw transcript: {log}"
    );
    let shown = stdout(&out);
    for want in [
        "Looking at the failing test first.",
        "→ Bash: cargo test",
        "  ← running 3 tests (+2 lines)",
        "→ Edit: src/lib.rs",
        "  ← edited",
        "Fixed the parser.",
        "= done: 3 turns, $0.0123, 1000 in / 50 out tokens",
        "· Starting: claude-test-1",
        // The agent's plain lines, as they are.
        "checked: c1",
    ] {
        assert!(
            shown.lines().any(|l| l == want),
            "no line {want:?} in:\n{shown}"
        );
    }
    assert!(
        !shown.contains(r#"{"type":"#),
        "raw JSON on stdout:\n{shown}"
    );
}

/// The one transcript of the run (`.ralph/runs/<run>/iter-001.log`).
fn transcript(env: &TestEnv) -> String {
    let runs = env.repo.join(".ralph/runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a run directory");
    std::fs::read_to_string(run.join("iter-001.log")).unwrap()
}

/// Claude retrying a 401 showed only "Starting: claude-…" for minutes (issue 30): the retry is
/// the latest activity now, in `.ralph/activity.now` as `ralph watch` reads it, and in
/// `--stream`. Its control: the line before it, the session's start, was shown.
#[test]
fn an_api_retry_of_claudes_is_the_latest_activity_whatever_the_error() {
    let env = one_criterion();
    let retries = printer(
        &env,
        "retries.sh",
        &[
            r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-test-1"}"#,
            r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":600,"error_status":401,"error":"authentication_failed"}"#,
            r#"{"type":"system","subtype":"api_retry","attempt":3,"max_retries":10,"retry_delay_ms":2400,"error_status":401,"error":"authentication_failed"}"#,
        ],
    );
    let out = run_claude_fake(
        &env,
        "run",
        &format!("sh:{retries}"),
        &["--stream", "--max-iterations", "1"],
        Duration::from_secs(60),
    );
    let want = "Retrying (API retry 3/10: authentication_failed (401), next in 3s)";
    assert_eq!(
        std::fs::read_to_string(env.repo.join(".ralph/activity.now")).unwrap(),
        format!("{want}\n"),
        "{}",
        stderr(&out)
    );
    let shown = stdout(&out);
    assert!(
        shown.contains("· Starting: claude-test-1"),
        "control: the session's start was shown:\n{shown}"
    );
    assert!(shown.lines().any(|l| l == format!("· {want}")), "{shown}");
}

/// `--parallel 2` loops print in turn: every line a loop prints (its header, its reports, the
/// agent's streamed output) opens with its loop name. Control: `--parallel 1`, one loop at a
/// time, prints its lines bare. Through the GitHub stand-in (no `br` needed).
#[test]
fn parallel_loops_lines_open_with_their_loop_name() {
    use crate::queue_github::{Api, TOKEN, fresh, issue, run_from_with};
    use serde_json::json;
    for parallel in ["1", "2"] {
        let env = fresh();
        let api = Api::start(
            &env,
            json!([
                issue(1, "One", &["ralph"], json!({})),
                issue(2, "Two", &["ralph"], json!({}))
            ]),
            10,
        );
        let out = run_from_with(
            &env,
            &api,
            TOKEN,
            "github:o/r",
            "check-unless:no such text+print:streamed words",
            &["--stream", "--parallel", parallel],
        );
        assert_exit(&out, 0);
        let shown = stdout(&out);
        let loops: Vec<&str> = shown
            .lines()
            .filter(|l| {
                l.contains("Iteration 1/")
                    || l.contains("streamed words")
                    || l.contains("Progress:")
            })
            .collect();
        assert!(loops.len() >= 6, "{shown}");
        for line in loops {
            let named = line.starts_with("[github-1] ") || line.starts_with("[github-2] ");
            assert_eq!(named, parallel == "2", "{line:?} in:\n{shown}");
        }
    }
}
