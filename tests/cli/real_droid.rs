//! The real Factory droid CLI against the stand-in model server (`testing/standin/`, its custom
//! BYOK model, no Factory login): the loop, its tokens, a quota waited out, and droid's trap — a
//! shell call rated above its `--auto` level ends the exec early (exit 1). Each test skips, with
//! a message, when droid is not installed (`bash scripts/install-agent-clis.sh droid`); under
//! `CI=true` it fails instead.

use crate::common::*;
use crate::real_agents::{
    installed, requests, run_args, two_criteria, two_criteria_loop, with_standin,
};

/// droid's words when a shell call is above its `--auto` level.
const ENDED_EARLY: &str = "Exec ended early: insufficient permission to proceed";

/// The run's id, from its `run_started` event.
fn run_id(out: &std::process::Output) -> String {
    events_named(out, "run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The stand-in's answers to droid's model requests (`main`: those offering tools).
fn main_requests(env: &TestEnv) -> Vec<serde_json::Value> {
    requests(env, "droid")
        .into_iter()
        .filter(|r| r["kind"] == "main")
        .collect()
}

/// The two-criterion loop; droid reports tokens (its `completion` event's `usage`), no USD cost
/// for a custom model: the tokens of both iterations reach `status --json`.
#[test]
fn droid_completes_two_criteria_and_its_tokens_reach_status_json() {
    let Some((env, out)) = two_criteria_loop("droid") else {
        return;
    };
    let finished = events_named(&out, "iteration_finished");
    assert_eq!(finished.len(), 2, "{}", stdout(&out));
    let mut sum = 0;
    for f in &finished {
        let input = f["input_tokens"].as_u64().unwrap();
        assert!(input > 0, "{f}");
        assert!(f["output_tokens"].as_u64().unwrap() > 0, "{f}");
        assert!(f["turns"].as_u64().unwrap() >= 2, "{f}");
        sum += input;
    }
    let st = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["input_tokens"].as_u64(), Some(sum), "{v}");
    assert!(v["output_tokens"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        v["cost_usd"].as_f64(),
        Some(0.0),
        "no cost for a custom model: {v}"
    );
}

/// A provider's quota 429 whose reset is a few seconds away: droid gives up at once (one request
/// per attempt, exit 1, its `error` event in the transcript) and ralph waits it out — the
/// iteration runs again after the reset, and only the two real iterations are recorded.
#[test]
fn droid_quota_is_waited_out_without_counting_an_iteration() {
    if installed("droid").is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario =
        r#"{"rate_limit": {"first": 1, "kind": "quota", "resets_in": 4, "until_reset": true}}"#;
    let out = with_standin(
        &env,
        "droid",
        Some(scenario),
        &[],
        &run_args("droid", &["--json", "--limit-backoff", "1s"]),
    );
    assert_exit(&out, 0);
    let recs = env.iter_records();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r.contains("| exit 0 |")), "{recs:?}");
    let waits = events_named(&out, "waiting");
    assert!(!waits.is_empty(), "{}", stdout(&out));
    for w in &waits {
        assert_eq!(w["iteration"], 1, "{w}");
        assert_eq!(w["kind"], "usage_limit", "{w}");
        assert!(
            w["message"].as_str().unwrap().contains("quota exhausted"),
            "{w}"
        );
    }
    // droid itself gave up on every limited request: one request per limited attempt.
    let reqs = main_requests(&env);
    let limited: Vec<_> = reqs.iter().filter(|r| r["status"] == 429).collect();
    assert_eq!(limited.len(), waits.len(), "{reqs:?}");
    // The iteration ran again only once the reset had passed.
    let reset = limited[0]["reset_at"].as_f64().unwrap();
    let served = reqs.iter().find(|r| r["status"] == 200).unwrap();
    assert!(served["ts"].as_f64().unwrap() >= reset, "{reqs:?}");
    // The limited attempt's transcript holds droid's own error.
    let transcript = env.read(&format!(".ralph/runs/{}/iter-001.log", run_id(&out)));
    assert!(
        transcript.contains(
            r#""type":"error","source":"agent_loop","message":"429 Usage quota exhausted"#
        ),
        "{transcript}"
    );
    assert!(transcript.contains(r#""message":"Exec failed""#));
}

/// The trap: the model rates the shell call "high". The preset (`--auto high`) runs it; the
/// same call ends droid's exec early without `--auto` (the control, through `--agent-cmd`).
#[test]
fn droid_runs_a_call_rated_high_and_ends_early_without_auto() {
    if installed("droid").is_none() {
        return;
    }
    let scenario = r#"{"risk_level": "high"}"#;
    let env = TestEnv::new();
    two_criteria(&env);
    let out = with_standin(
        &env,
        "droid",
        Some(scenario),
        &[],
        &run_args("droid", &["--max-iterations", "4"]),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    let calls: Vec<_> = main_requests(&env)
        .into_iter()
        .filter(|r| r["tool"] == "Execute")
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|r| r["tool_args"]["riskLevel"] == "high"));

    // The control: droid without --auto ends early on the same call, and changes nothing.
    let env = TestEnv::new();
    two_criteria(&env);
    let out = with_standin(
        &env,
        "droid",
        Some(scenario),
        &[],
        &[
            "run",
            "--agent-cmd",
            "droid exec -o stream-json {prompt}",
            "--yes",
            "--timeout",
            "120s",
            "--max-iterations",
            "1",
            "--json",
        ],
    );
    assert_exit(&out, 3);
    let recs = env.iter_records();
    assert!(
        recs[0].starts_with("ITER 1 | 0/2 criteria | exit 1 |"),
        "{recs:?}"
    );
    assert!(env.read("RALPH_TASK.md").contains("- [ ] first box"));
    let transcript = env.read(&format!(".ralph/runs/{}/iter-001.log", run_id(&out)));
    assert!(transcript.contains(ENDED_EARLY), "{transcript}");
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
}

/// A call droid blocks even at `--auto high` ends the preset's exec early too: ralph says what
/// droid said in the iteration's report and its activity log, as an agent that failed — not a
/// usage limit to wait for, not a login failure that halts the run.
#[test]
fn droid_ending_early_under_the_preset_is_reported_as_such() {
    if installed("droid").is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    // Blocked before it runs (and harmless if it ran: the path does not exist).
    let scenario = r#"{"tool_command": "sudo rm -rf /nonexistent-ralph-droid-test"}"#;
    let out = with_standin(
        &env,
        "droid",
        Some(scenario),
        &[],
        &run_args("droid", &["--max-iterations", "1", "--json"]),
    );
    assert_exit(&out, 3);
    let recs = env.iter_records();
    assert!(
        recs[0].starts_with("ITER 1 | 0/2 criteria | exit 1 |"),
        "{recs:?}"
    );
    let said = format!("Agent exited with code 1: {ENDED_EARLY}");
    assert!(stderr(&out).contains(&said), "{}", stderr(&out));
    assert!(
        env.activity()
            .contains(&format!("agent exited with code 1: {ENDED_EARLY}")),
        "{}",
        env.activity()
    );
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    assert!(!stderr(&out).contains("Usage limit"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("cannot work"), "{}", stderr(&out));
}
