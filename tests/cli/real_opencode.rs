//! The real opencode CLI (`opencode-ai`) driven by ralph against the stand-in model server
//! (`testing/standin/`), as `real_agents.rs` drives the others: the loop, its cost, a 429 it
//! gives up on, and its traps — a prompt given as an argument reaches the model re-quoted,
//! everything it would ask for is refused with exit 0 unless permitted, and it sleeps out a
//! 429's `retry-after` in silence. Each test skips, with a message, when opencode is not
//! installed (`bash scripts/install-agent-clis.sh opencode`), and fails so under `CI=true`.

use crate::common::*;
use crate::real_agents::{
    installed, requests, run_args, two_criteria, two_criteria_loop, with_standin,
};

const CLI: &str = "opencode";

/// The main (tool-offering) requests the stand-in answered.
fn main_requests(env: &TestEnv) -> Vec<serde_json::Value> {
    requests(env, CLI)
        .into_iter()
        .filter(|r| r["kind"] == "main")
        .collect()
}

/// The id of the run `--json` output started.
fn run_id(out: &std::process::Output) -> String {
    events_named(out, "run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn opencode_completes_two_criteria_and_reports_its_cost_and_tokens() {
    let Some((env, out)) = two_criteria_loop(CLI) else {
        return;
    };
    // Its `step_finish` events priced by the stand-in's model (3 / 15 USD per million tokens).
    let st = status_json(&env);
    let cost = st["cost_usd"].as_f64().unwrap_or(0.0);
    let (input, output) = (st["input_tokens"].as_u64(), st["output_tokens"].as_u64());
    assert!(cost > 0.0, "{st}");
    assert!(input.unwrap_or(0) > 0 && output.unwrap_or(0) > 0, "{st}");
    let expected = (input.unwrap_or(0) as f64 * 3.0 + output.unwrap_or(0) as f64 * 15.0) / 1e6;
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}: {st}");
    let finished = events_named(&out, "iteration_finished");
    assert_eq!(finished.len(), 2, "{}", stdout(&out));
}

/// A 429 it retries 5 times (sleeping `retry-after: 2` each time) and then gives up on with an
/// `error` event: ralph waits until that retry-after, then runs the same iteration again.
#[test]
fn opencode_429_it_gives_up_on_is_waited_out_without_counting_an_iteration() {
    if installed(CLI).is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario = r#"{"rate_limit": {"first": 6, "kind": "429", "retry_after": 2}}"#;
    let out = with_standin(&env, CLI, Some(scenario), &[], &run_args(CLI, &["--json"]));
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    let waiting = events_named(&out, "waiting");
    assert_eq!(waiting.len(), 1, "{}", stdout(&out));
    assert_eq!(waiting[0]["kind"], "rate_limit", "{}", waiting[0]);
    assert!(waiting[0]["reset_at"].is_string(), "{}", waiting[0]);
    assert!(waiting[0]["iteration"] == 1, "{}", waiting[0]);
    // The CLI itself failed that attempt: six 429s, then its error event in the transcript.
    let limited: Vec<_> = main_requests(&env)
        .into_iter()
        .filter(|r| r["status"] == 429)
        .collect();
    assert_eq!(limited.len(), 6, "{:?}", requests(&env, CLI));
    let transcript = env.read(&format!(".ralph/runs/{}/iter-001.log", run_id(&out)));
    assert!(
        transcript.contains(r#""type":"error""#) && transcript.contains(r#""statusCode":429"#),
        "{transcript}"
    );
    assert!(transcript.contains("--- ralph: usage limit; retrying iteration 1 with opencode ---"));
}

/// SPEC §4: the prompt goes on stdin. As an argument (`--agent-cmd '… {prompt}'`, the control)
/// opencode hands the model the prompt wrapped in double quotes with its quotes escaped; the
/// preset's reaches it byte for byte.
#[test]
fn opencode_prompt_with_a_double_quote_reaches_the_model_as_written() {
    if installed(CLI).is_none() {
        return;
    }
    let env = TestEnv::new();
    env.write_task(&[r#"say "hi" in hello.txt"#], "");
    env.commit_all("initial");
    let out = with_standin(&env, CLI, None, &[], &run_args(CLI, &["--json"]));
    assert_exit(&out, 0);
    let prompt_file = format!(".ralph/runs/{}/iter-001.prompt.md", run_id(&out));
    let prompt = env.read(&prompt_file);
    assert!(prompt.contains(r#"say "hi" in hello.txt"#), "{prompt}");
    let sum = env
        .command("sha256sum")
        .arg(env.repo.join(&prompt_file))
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sent = main_requests(&env);
    assert!(!sent.is_empty());
    for r in &sent {
        assert_eq!(r["prompt_sha256"].as_str(), sum.split(' ').next(), "{r}");
        assert!(
            !r["prompt_head"].as_str().unwrap_or("\"").starts_with('"'),
            "{r}"
        );
    }

    // The control: the same loop with the prompt as an argument.
    let env = TestEnv::new();
    env.write_task(&[r#"say "hi" in hello.txt"#], "");
    env.commit_all("initial");
    let cmd = "opencode run --format json --auto {prompt}";
    let out = with_standin(
        &env,
        CLI,
        None,
        &[],
        &["run", "--agent-cmd", cmd, "--yes", "--json"],
    );
    assert_exit(&out, 0);
    let sent = main_requests(&env);
    let head = sent[0]["prompt_head"].as_str().unwrap_or("");
    assert!(head.starts_with("\"You are iteration 1"), "{head}");
    let prompt = env.read(&format!(".ralph/runs/{}/iter-001.prompt.md", run_id(&out)));
    assert_eq!(
        sent[0]["prompt_len"].as_u64(),
        Some(prompt.chars().count() as u64 + 2 + prompt.matches('"').count() as u64),
        "{}",
        sent[0]
    );
}

/// What opencode would ask for (here a shell command writing outside the project) it refuses
/// silently with exit 0 unless permitted: the control (`--agent-cmd` without `--auto`) leaves
/// the box unchecked and nothing written; the preset (`--auto`) does it.
#[test]
fn opencode_preset_is_permitted_what_it_would_ask_for() {
    if installed(CLI).is_none() {
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::path::PathBuf::from(format!(
        "/var/tmp/ralph-opencode-{}-{nanos}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let command = format!(
        "mkdir -p {d} && echo hi > {d}/x.txt && sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md",
        d = dir.display()
    );
    let scenario = serde_json::json!({ "tool_command": command }).to_string();

    let control = TestEnv::new();
    control.write_task(&["write outside the project"], "");
    control.commit_all("initial");
    let args = [
        "run",
        "--agent-cmd",
        "opencode run --format json",
        "--yes",
        "--max-iterations",
        "1",
    ];
    let out = with_standin(&control, CLI, Some(&scenario), &[], &args);
    assert_exit(&out, 3);
    let recs = control.iter_records();
    assert!(
        recs[0].starts_with("ITER 1 | 0/1 criteria | exit 0 |"),
        "{recs:?}"
    );
    assert!(!dir.exists(), "the control wrote {}", dir.display());
    let run = status_json(&control)["run_id"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let log = control.read(&format!(".ralph/runs/{run}/iter-001.log"));
    assert!(
        log.contains("auto-rejecting") && log.contains(r#""status":"error""#),
        "{log}"
    );

    let env = TestEnv::new();
    env.write_task(&["write outside the project"], "");
    env.commit_all("initial");
    let out = with_standin(
        &env,
        CLI,
        Some(&scenario),
        &[],
        &run_args(CLI, &["--max-iterations", "1"]),
    );
    assert_exit(&out, 0);
    assert_eq!(
        std::fs::read_to_string(dir.join("x.txt")).ok().as_deref(),
        Some("hi\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// opencode sleeps out a 429's `retry-after` (here 20 s) printing nothing; with `--print-logs`
/// its `stream error` line comes first, and ralph takes the quiet after it as a wait, not a
/// hang: an `--idle-timeout` of 15 s does not end the iteration. The control: the same silence
/// without that line (a model that takes 20 s to answer) is ended as idle. (The idle timeout
/// is that long because opencode itself may print nothing for seconds while it starts on a
/// loaded machine.)
#[test]
fn opencode_sleeping_out_a_429_is_not_idle() {
    if installed(CLI).is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario = r#"{"rate_limit": {"first": 1, "kind": "429", "retry_after": 20}}"#;
    let out = with_standin(
        &env,
        CLI,
        Some(scenario),
        &[],
        &run_args(CLI, &["--json", "--idle-timeout", "15s"]),
    );
    assert_exit(&out, 0);
    let transcript =
        |env: &TestEnv, out| env.read(&format!(".ralph/runs/{}/iter-001.log", run_id(out)));
    assert_eq!(
        env.iter_records().len(),
        2,
        "{:?}\n{}",
        env.iter_records(),
        transcript(&env, &out)
    );
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    assert!(!stderr(&out).contains("idle"), "{}", stderr(&out));
    let sent = main_requests(&env);
    assert_eq!(sent[0]["status"], 429, "{sent:?}");
    let gap = sent[1]["ts"].as_f64().unwrap_or(0.0) - sent[0]["ts"].as_f64().unwrap_or(0.0);
    assert!(gap >= 19.0, "opencode retried after {gap} s");
    let transcript = env.read(&format!(".ralph/runs/{}/iter-001.log", run_id(&out)));
    assert!(
        transcript.contains(r#"message="stream error""#),
        "{transcript}"
    );

    // The control: 12 s of silence with no retry line before it.
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario = r#"{"script": [{"action": "tool", "command": "true", "delay": 20}]}"#;
    let out = with_standin(
        &env,
        CLI,
        Some(scenario),
        &[],
        &run_args(
            CLI,
            &["--json", "--idle-timeout", "15s", "--max-iterations", "1"],
        ),
    );
    assert_exit(&out, 3);
    assert!(
        stderr(&out).contains("Agent idle for 15s"),
        "{}",
        stderr(&out)
    );
}
