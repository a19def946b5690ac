//! Usage limits (SPEC §6, §5.1): the back-off never spins, `--max-wait` bounds the waiting,
//! a limited attempt's cost counts, and a budget halt while waiting closes the iteration like
//! any other ending. Driven by a stand-in `claude` on PATH (the preset whose stream-json ralph
//! parses) running the fake agent.

use std::time::{Duration, Instant};

use crate::common::*;

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

/// Claude's result line for an API-key rate limit: no reset time given.
const LIMIT_429: &str = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"duration_ms":90,"num_turns":1,"result":"API Error: Request rejected (429) · rate limit exceeded","session_id":"s-429","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}"#;

/// Promise: `--limit-backoff` is at least 1s, so an agent limited without a reset time is
/// retried at most once a second, and `--max-wait 2s` ends the run with exit 10 (`budget`)
/// within a few seconds. Bug caught: `--limit-backoff 0s` retried at once, forever (hundreds of
/// attempts a second; the waited time stayed 0, so `--max-wait` never ended it).
#[test]
fn a_zero_backoff_still_waits_a_second_between_attempts_and_max_wait_ends_the_run() {
    let env = setup(&["only criterion"]);
    let attempts = env.home.join("attempts");
    let script = agent_sh(
        &env,
        "limited",
        &format!(
            "date +%s.%N >> '{}'\necho '{LIMIT_429}'\nexit 1",
            attempts.display()
        ),
    );
    let path = claude_stand_in_path(&env);
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "run",
        "--agent",
        "claude",
        "--yes",
        "--grace",
        "1s",
        "--limit-backoff",
        "0s",
        "--max-wait",
        "2s",
    ])
    .env("PATH", &path)
    .env("FAKE_AGENT_SCRIPT", &script);
    let mut bg = env.spawn(cmd);
    let start = Instant::now();
    let ended = wait_until(Duration::from_secs(8), || {
        bg.child.try_wait().unwrap().is_some()
    });
    let starts: Vec<f64> = std::fs::read_to_string(&attempts)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if !ended {
        let _ = bg.child.kill();
        let _ = bg.child.wait();
        panic!(
            "ralph was still retrying after {:?}: {} attempts, no wait between them",
            start.elapsed(),
            starts.len()
        );
    }
    let (code, out, err) = bg.wait(Duration::from_secs(1));
    assert_eq!(code, Some(10), "exit 10 (budget)\n{out}\n{err}");
    assert!(
        (2..=4).contains(&starts.len()),
        "a few attempts in ~2s of waiting: {starts:?}"
    );
    for w in starts.windows(2) {
        assert!(
            w[1] - w[0] >= 0.95,
            "attempts {:.3}s apart, under the 1s floor: {starts:?}",
            w[1] - w[0]
        );
    }
    let v = status_json(&env);
    assert_eq!(v["halt_reason"], "budget", "{v}");
    assert_eq!(v["exit_code"], 10, "{v}");
}

/// Promise: every limited attempt's cost counts toward the totals. A limited attempt that
/// reports `total_cost_usd: 0.5`, then a retry reporting 0.25: `cost_usd` is 0.75. Bug caught:
/// the limited attempt's observer was dropped with its cost; the total was 0.25.
#[test]
fn a_limited_attempts_cost_counts_toward_the_total() {
    let env = setup(&["only criterion"]);
    let marker = env.home.join("limited-once");
    let script = agent_sh(
        &env,
        "costly-limit",
        &format!(
            r#"if [ ! -e '{m}' ]; then
  touch '{m}'
  echo "{{\"type\":\"rate_limit_event\",\"rate_limit_info\":{{\"status\":\"rejected\",\"resetsAt\":$(date +%s),\"rateLimitType\":\"five_hour\"}}}}"
  echo '{{"type":"result","subtype":"success","is_error":true,"num_turns":3,"result":"You'"'"'ve hit your session limit","session_id":"s-1","total_cost_usd":0.5,"usage":{{"input_tokens":100,"output_tokens":10}}}}'
  exit 1
fi
sed -i 's/^- \[ \] /- [x] /' RALPH_TASK.md
echo '{{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Checked the box.","session_id":"s-2","total_cost_usd":0.25,"usage":{{"input_tokens":1000,"output_tokens":50}}}}'"#,
            m = marker.display()
        ),
    );
    let out = run_claude_fake(&env, "run", &script, &[], Duration::from_secs(30));
    assert_exit(&out, 0);
    assert!(marker.exists(), "the first attempt was limited");
    let v = status_json(&env);
    let cost = v["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - 0.75).abs() < 1e-9,
        "cost_usd {cost}: the limited attempt's $0.50 plus the retry's $0.25"
    );
}

/// Promise (SPEC §5.1): a budget reached while waiting on a usage limit goes through the same
/// close as any ending: the attempt's work is committed, an ITER record and `halt_reason:
/// budget` are written, exit 10. Bug caught: ralph halted straight from the wait — the work
/// left uncommitted and no ITER record for the iteration.
#[test]
fn a_budget_halt_while_waiting_commits_the_attempts_work() {
    let env = setup(&["first criterion", "second criterion"]);
    let script = agent_sh(
        &env,
        "work-then-limit",
        r#"mkdir -p work && echo half-done > work/partial.txt
echo "{\"type\":\"rate_limit_event\",\"rate_limit_info\":{\"status\":\"rejected\",\"resetsAt\":$(( $(date +%s) + 3600 )),\"rateLimitType\":\"five_hour\"}}"
echo '{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":"You'"'"'ve hit your session limit","session_id":"s-1","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}'
exit 1"#,
    );
    let out = run_claude_fake(
        &env,
        "run",
        &script,
        &["--max-wait", "1m"],
        Duration::from_secs(30),
    );
    assert_exit(&out, 10);
    let head = env.git(&["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(
        head.contains("work/partial.txt"),
        "the attempt's work is committed: {:?}\n{}",
        env.commits(),
        env.git(&["status", "--porcelain"])
    );
    assert_eq!(env.git(&["status", "--porcelain"]), "", "the tree is clean");
    let recs = env.iter_records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(recs[0].starts_with("ITER 1 | "), "{recs:?}");
    let v = status_json(&env);
    assert_eq!(v["halt_reason"], "budget", "{v}");
    assert_eq!(v["exit_code"], 10, "{v}");
}
