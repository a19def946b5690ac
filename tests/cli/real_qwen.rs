//! The real Qwen Code CLI (0.24.4, and 0.15.10 for its older output) against the stand-in model
//! server, as `real_agents.rs` runs the others: a two-criterion loop with its tokens, a quota
//! with a reset a few seconds away waited out, and the old version's API errors reported as a
//! successful result read as the errors they are. Each test skips, with a message, when the CLI
//! is not installed (`bash scripts/install-agent-clis.sh qwen` installs both versions).

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::common::*;
use crate::real_agents::{
    installed, requests, run_args, two_criteria, two_criteria_loop, with_standin,
};

/// Qwen Code's older version, installed by the install script beside the current one
/// (`<prefix>/qwen-0.15.10/bin`); `None` after saying the test is skipped.
fn installed_old() -> Option<PathBuf> {
    let bin = installed("qwen")?
        .parent()?
        .parent()?
        .join("qwen-0.15.10/bin");
    if bin.join("qwen").exists() {
        Some(bin)
    } else {
        skip_or_fail(&format!(
            "Qwen Code 0.15.10 is not installed ({}); run `bash scripts/install-agent-clis.sh qwen`",
            bin.display()
        ));
        None
    }
}

/// Writes Qwen's user settings for the next `with_standin` (which writes its own only when there
/// are none).
fn qwen_settings(env: &TestEnv, settings: &str) {
    let dir = env.home.join("standin-qwen/home/.qwen");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("settings.json"), settings).unwrap();
}

/// The iteration's transcript: everything the CLI printed, every attempt.
fn transcript(env: &TestEnv, out: &std::process::Output, n: u32) -> String {
    let run_id = events_named(out, "run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.read(&format!(".ralph/runs/{run_id}/iter-{n:03}.log"))
}

/// The `result` lines of a transcript.
fn results(transcript: &str) -> Vec<serde_json::Value> {
    transcript
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"result""#))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The time in `will reset at <RFC 3339>.` of a message.
fn reset_in(message: &str) -> DateTime<Utc> {
    let at = message.find("reset at ").expect("a reset time") + "reset at ".len();
    let stamp = message[at..].split([' ', ']']).next().unwrap();
    DateTime::parse_from_rfc3339(stamp.trim_end_matches('.'))
        .unwrap_or_else(|e| panic!("{stamp}: {e}"))
        .with_timezone(&Utc)
}

/// Two criteria, two iterations, two commits; its tokens (no cost: Qwen reports none) are the
/// stand-in's own count in `status --json`.
#[test]
fn qwen_completes_two_criteria_and_reports_its_tokens() {
    let Some((env, out)) = two_criteria_loop("qwen") else {
        return;
    };
    // The stand-in counts a request's bytes / 4 in and 12 tokens out.
    let main: Vec<_> = requests(&env, "qwen")
        .into_iter()
        .filter(|r| r["kind"] == "main")
        .collect();
    assert_eq!(main.len(), 4, "a tool call and a final text per iteration");
    let sent: u64 = main
        .iter()
        .map(|r| r["body_bytes"].as_u64().unwrap() / 4)
        .sum();
    let st = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["input_tokens"].as_u64(), Some(sent), "{v}");
    assert_eq!(v["output_tokens"].as_u64(), Some(12 * 4), "{v}");
    assert_eq!(v["cost_usd"].as_f64(), Some(0.0), "{v}");
    let finished = events_named(&out, "iteration_finished");
    assert!(
        finished
            .iter()
            .all(|f| f["input_tokens"].as_u64() > Some(0))
    );
}

/// A quota with its reset a few seconds away: Qwen 0.24.4 gives up after 4 requests (exit 1,
/// `Quota exhausted: …`), ralph waits until the reset it gave and runs the iteration again.
#[test]
fn qwen_quota_is_waited_out_until_its_reset_without_counting_an_iteration() {
    if installed("qwen").is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario =
        r#"{"rate_limit": {"first": 4, "kind": "quota_reset", "resets_in": 6, "retry_after": 0}}"#;
    let started = std::time::Instant::now();
    let out = with_standin(
        &env,
        "qwen",
        Some(scenario),
        &[],
        &run_args("qwen", &["--json"]),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    assert_eq!(env.commits().len(), 3, "{:?}", env.commits());
    let waiting = events_named(&out, "waiting");
    assert_eq!(waiting.len(), 1, "{}", stdout(&out));
    let w = &waiting[0];
    assert_eq!(w["kind"], "usage_limit", "{w}");
    let message = w["message"].as_str().unwrap();
    assert!(message.starts_with("Quota exhausted: "), "{w}");
    let reset = DateTime::parse_from_rfc3339(w["reset_at"].as_str().unwrap()).unwrap();
    assert_eq!(reset, reset_in(message), "the reset the CLI gave: {w}");
    let wait = w["wait_s"].as_f64().unwrap();
    assert!((0.5..=8.0).contains(&wait), "{w}");
    // The CLI itself gave up: the stand-in limited 4 requests and the first attempt's result
    // is its error.
    let statuses: Vec<u64> = requests(&env, "qwen")
        .iter()
        .filter_map(|r| r["status"].as_u64())
        .collect();
    assert_eq!(&statuses[..5], [429, 429, 429, 429, 200], "{statuses:?}");
    let first = transcript(&env, &out, 1);
    let results = results(&first);
    assert_eq!(
        results.len(),
        2,
        "the limited attempt and its retry:\n{first}"
    );
    assert_eq!(results[0]["is_error"], true, "{}", results[0]);
    assert!(
        results[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Quota exhausted: ")
    );
    assert_eq!(results[1]["is_error"], false, "{}", results[1]);
    eprintln!("qwen quota run: {:.1?}", started.elapsed());
}

/// Qwen 0.15.10 reports a quota 429 as a successful result (`[API Error: 429 …]`, exit 0, after
/// its own retries: 7 requests over about a minute with `maxRetries: 0`). ralph reads the limit
/// and its reset, waits, and the iteration is not counted.
#[test]
fn qwen_0_15_successful_api_error_result_is_a_limit() {
    let Some(old) = installed_old() else {
        return;
    };
    let env = TestEnv::new();
    two_criteria(&env);
    // Without it 0.15.10 retries a 429 ten more times, 1 to 5 minutes apart.
    qwen_settings(
        &env,
        r#"{"model": {"generationConfig": {"maxRetries": 0}}}"#,
    );
    let scenario =
        r#"{"rate_limit": {"first": 7, "kind": "quota_reset", "resets_in": 3, "retry_after": 0}}"#;
    let bin = old.to_string_lossy().into_owned();
    let out = with_standin(
        &env,
        "qwen",
        Some(scenario),
        &["--bin", &bin],
        &run_args("qwen", &["--json"]),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    assert_eq!(env.commits().len(), 3, "{:?}", env.commits());
    let waiting = events_named(&out, "waiting");
    assert_eq!(waiting.len(), 1, "{}", stdout(&out));
    let w = &waiting[0];
    assert_eq!(w["kind"], "rate_limit", "{w}");
    let message = w["message"].as_str().unwrap();
    assert!(message.starts_with("[API Error: 429 "), "{w}");
    let reset = DateTime::parse_from_rfc3339(w["reset_at"].as_str().unwrap()).unwrap();
    assert_eq!(reset, reset_in(message), "{w}");
    // What the CLI said: success.
    let first = transcript(&env, &out, 1);
    let said = &results(&first)[0];
    assert_eq!(
        (said["subtype"].as_str(), said["is_error"].as_bool()),
        (Some("success"), Some(false)),
        "{said}"
    );
    assert!(
        said["result"]
            .as_str()
            .unwrap()
            .starts_with("[API Error: 429 ")
    );
    let limited = requests(&env, "qwen")
        .iter()
        .filter(|r| r["status"] == 429)
        .count();
    assert_eq!(limited, 7);
}

/// Qwen 0.15.10 reports a 401 as a successful result, exit 0: ralph halts on the login failure
/// at once, committing nothing.
#[test]
fn qwen_0_15_successful_401_result_is_a_login_failure() {
    let Some(old) = installed_old() else {
        return;
    };
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario = r#"{"script": [{"action": "error", "status": 401, "message": "Incorrect API key provided."}]}"#;
    let bin = old.to_string_lossy().into_owned();
    let out = with_standin(
        &env,
        "qwen",
        Some(scenario),
        &["--bin", &bin],
        &run_args("qwen", &["--json"]),
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("cannot work: [API Error: 401 Incorrect API key provided.]"),
        "{err}"
    );
    assert!(events_named(&out, "waiting").is_empty());
    assert_eq!(env.commits().len(), 1, "{:?}", env.commits());
    assert!(!env.read("RALPH_TASK.md").contains("- [x]"));
    let said = &results(&transcript(&env, &out, 1))[0];
    assert_eq!(said["is_error"], false, "the CLI said success: {said}");
    assert_eq!(
        said["result"],
        "[API Error: 401 Incorrect API key provided.]"
    );
}

/// The model's own message that opens with `[API Error: 429 …]` (it quotes a log) is its work:
/// with 0.15.10, whose result repeats it as a success, no limit, no wait, two iterations.
#[test]
fn qwen_0_15_api_error_the_model_writes_is_not_a_limit() {
    let Some(old) = installed_old() else {
        return;
    };
    let env = TestEnv::new();
    two_criteria(&env);
    let text = "[API Error: 429 Your free quota is exhausted; it will reset at 2030-01-01T00:00:00Z.] is what the log said; I checked the box.";
    let scenario = serde_json::json!({ "final_text": text }).to_string();
    let bin = old.to_string_lossy().into_owned();
    let out = with_standin(
        &env,
        "qwen",
        Some(&scenario),
        &["--bin", &bin],
        &run_args("qwen", &["--json", "--max-iterations", "4"]),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    let said = &results(&transcript(&env, &out, 1))[0];
    assert_eq!(said["result"], text, "{said}");
}
