//! What ralph reads from the agent's output (SPEC §9, §6): Claude's stream-json result (cost,
//! tokens), usage limits that are waited out without counting an iteration, `--max-cost`. Driven
//! by a stand-in `claude` on PATH that runs the fake agent.

use std::time::{Duration, Instant};

use crate::common::*;

fn run_claude(env: &TestEnv, script: &str, extra: &[&str]) -> std::process::Output {
    let path = claude_stand_in_path(env);
    let mut args = vec!["run", "--agent", "claude", "--yes"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[("PATH", &path), ("FAKE_AGENT_SCRIPT", script)],
        Duration::from_secs(60),
    )
}

fn setup(n: usize) -> TestEnv {
    let env = TestEnv::new();
    let names: Vec<String> = (1..=n).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    env.write_task(&refs, "");
    env.commit_all("initial");
    env
}

#[test]
fn claude_cost_and_tokens_per_iteration_and_in_total() {
    let env = setup(2);
    let out = run_claude(&env, "check+claude-result:0.25", &["--json"]);
    assert_exit(&out, 0);
    let finished = events_named(&out, "iteration_finished");
    assert_eq!(finished.len(), 2);
    assert_eq!(finished[0]["cost_usd"], 0.25);
    assert_eq!(finished[0]["input_tokens"], 1000);
    assert_eq!(finished[0]["output_tokens"], 50);
    assert_eq!(finished[1]["total_cost_usd"], 0.5);
    let human = stderr(&out);
    assert!(
        human.contains("Cost: $0.2500 (total $0.5000), tokens: 1000 in / 50 out"),
        "{human}"
    );
    let status = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["cost_usd"], 0.5);
    assert_eq!(v["input_tokens"], 2000);
    let text = stdout(&env.ralph(&["status"]));
    assert!(
        text.contains("Cost: $0.5000, tokens: 2000 in / 100 out"),
        "{text}"
    );
    assert!(
        text.contains("Progress: 2/2 criteria") && text.contains("Elapsed: "),
        "{text}"
    );
}

#[test]
fn max_cost_halts_with_exit_ten() {
    let env = setup(5);
    let out = run_claude(&env, "check+claude-result:0.4", &["--max-cost", "1"]);
    assert_exit(&out, 10);
    // 0.4, 0.8, 1.2: the third iteration reaches the budget.
    assert!(env.agent_ran(3) && !env.agent_ran(4));
    assert!(stdout(&out).contains("Budget reached"), "{}", stdout(&out));
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert_eq!(st["halt_reason"], "budget");
}

#[test]
fn a_usage_limit_is_waited_out_and_the_same_iteration_retried() {
    let env = setup(2);
    let start = Instant::now();
    let out = run_claude(
        &env,
        "limit-once:2+check+claude-result:0.1,check+claude-result:0.1",
        &["--json"],
    );
    assert_exit(&out, 0);
    // The reset is two seconds away: ralph waited for it.
    assert!(start.elapsed() >= Duration::from_secs(2));
    let recs = env.iter_records();
    assert_eq!(
        recs.len(),
        2,
        "a limited attempt is not an iteration: {recs:?}"
    );
    let waiting = events_named(&out, "waiting");
    assert_eq!(waiting.len(), 1, "{}", stdout(&out));
    assert_eq!(waiting[0]["iteration"], 1);
    assert!(waiting[0]["reset_at"].is_string());
    assert!(
        stderr(&out).contains("Usage limit (") && stderr(&out).contains("): waiting "),
        "{}",
        stderr(&out)
    );
    assert!(
        env.activity().contains("Iteration 1: usage limit ("),
        "{}",
        env.activity()
    );
    // A limited attempt is neither progress nor a stall.
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert_eq!(st["no_progress_streak"], 0);
}

#[test]
fn waiting_past_max_wait_ends_the_run_with_exit_ten() {
    let env = setup(2);
    let out = run_claude(&env, "limit-once:3600+check", &["--max-wait", "1m"]);
    assert_exit(&out, 10);
    // The iteration closes like any other: recorded (SPEC §5.1), not re-run.
    assert_eq!(env.iter_records().len(), 1, "{:?}", env.iter_records());
    assert!(stdout(&out).contains("--max-wait"), "{}", stdout(&out));
}
