//! Hostile attacks on `--fallback-agent`, the droid/opencode/qwen presets and usage limits
//! (SPEC §4, §6): an agent controls what it prints, the repository, `.ralph/` (state.json,
//! iterations.log) and ralph's own record (without `--sandbox` it runs as the user). Each test
//! shows the attack (with a control where one makes sense) and holds ralph to its promise.
//! The agents are stand-ins: shell scripts named like the presets, first on PATH, each keeping
//! a count of its calls.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::fallback::{agents_of, calls, path_of, setup, stand_in};

/// `ralph CMD --agent AGENT --yes --json --grace 1s EXTRA` with the stand-ins first on PATH.
fn ralph_as(
    env: &TestEnv,
    cmd: &str,
    agent: &str,
    extra: &[&str],
    limit: Duration,
) -> std::process::Output {
    let path = path_of(env);
    let mut args = vec![cmd, "--agent", agent, "--yes", "--json", "--grace", "1s"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(&args, &[("PATH", &path)], limit)
}

/// Checks the first unchecked box of the task file.
const CHECK: &str = "sed -i '0,/^- \\[ \\] /s//- [x] /' RALPH_TASK.md";

/// Claude's stream-json: `limited SECS` (a rejected five-hour limit resetting SECS from now,
/// its limited attempt costing $0.25), `worked` (one box, $0.50), `limited_at EPOCH COST`.
fn claude_helpers() -> String {
    format!(
        r#"limited_at() {{
  echo "{{\"type\":\"rate_limit_event\",\"rate_limit_info\":{{\"status\":\"rejected\",\"resetsAt\":$1,\"rateLimitType\":\"five_hour\"}}}}"
  echo "{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"num_turns\":1,\"result\":\"You've hit your session limit\",\"session_id\":\"s-l\",\"total_cost_usd\":$2,\"usage\":{{\"input_tokens\":100,\"output_tokens\":5}}}}"
  exit 1
}}
limited() {{ limited_at $(( $(date +%s) + $1 )) 0.25; }}
worked() {{
  {CHECK}
  echo '{{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Checked one box.","session_id":"s-w","total_cost_usd":0.5,"usage":{{"input_tokens":1000,"output_tokens":50}}}}'
}}"#
    )
}

/// Codex's plain text: `limited SECS` (its plan used up, exit 1), `worked`, and `lookalike`:
/// the same words, with the box checked, exit 0 — an agent writing about limits.
fn codex_helpers() -> String {
    format!(
        r#"limited() {{
  echo "You've hit your usage limit. Upgrade to Pro or try again in $1 seconds."
  exit 1
}}
worked() {{ {CHECK}; echo "Checked one box."; }}
lookalike() {{
  {CHECK}
  echo "You've hit your usage limit. Upgrade to Pro or try again in 600 seconds."
  echo "ERROR: exceeded retry limit, last status: 429 Too Many Requests" >&2
  echo "Quota exhausted: your limit will reset at 10:31:41 UTC. Usage limit reached."
  exit 0
}}"#
    )
}

/// `ralph status` (human), bounded; its output and exit.
fn status_text(env: &TestEnv) -> std::process::Output {
    env.ralph_with_limit(&["status"], &[], Duration::from_secs(30))
}

#[track_caller]
fn assert_no_panic(out: &std::process::Output) {
    let err = stderr(out);
    assert!(
        out.status.code() != Some(101) && !err.contains("panicked"),
        "ralph panicked: {err}"
    );
}

// ----- exit-0 look-alikes ------------------------------------------------------------------

/// Attack: a plain-text agent (codex) whose exit-0 attempt checks a box and then prints every
/// limit message ralph knows (`You've hit your usage limit … try again in 600 seconds`, `exceeded
/// retry limit, last status: 429`, `Quota exhausted … reset at`). Promise (SPEC §6): an exit-0
/// attempt's text is never a limit — no switch to the fallback, no waiting. Control: the same
/// words with exit 1 are the limit, and claude takes over.
#[test]
fn exit_0_text_that_looks_like_a_limit_never_switches_or_waits() {
    let env = setup(&["first box", "second box"]);
    stand_in(&env, "codex", &codex_helpers(), "*) lookalike ;;");
    stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "codex",
        &["--fallback-agent", "claude", "--max-wait", "5s"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert_eq!((calls(&env, "codex"), calls(&env, "claude")), (2, 0));
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    assert_eq!(agents_of(&out), ["codex", "codex"]);
    assert!(
        !env.activity().contains("usage limit"),
        "{}",
        env.activity()
    );

    // Control: the same limit, exit 1, hands the iteration to claude.
    let env = setup(&["first box", "second box"]);
    stand_in(
        &env,
        "codex",
        &codex_helpers(),
        "1) limited 600 ;;\n*) worked ;;",
    );
    stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "codex",
        &["--fallback-agent", "claude", "--max-wait", "5s"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert_eq!(calls(&env, "codex"), 1, "codex limited for 600 s");
    assert_eq!(agents_of(&out), ["claude", "claude"]);
}

/// Qwen's stream-json: a final message the model wrote (`output_tokens` > 0) in `blocks` (JSON
/// array of text blocks), then the successful `result` whose text is `result`, exit 0; or
/// Qwen 0.15's own `[API Error: 429 …]` reported as a success (no tokens), exit 0.
fn qwen_helpers(blocks: &str, result: &str) -> String {
    let message = serde_json::json!({"type": "assistant", "message": {"role": "assistant",
        "content": serde_json::from_str::<Value>(blocks).unwrap(),
        "usage": {"input_tokens": 900, "output_tokens": 40}}});
    let done = serde_json::json!({"type": "result", "subtype": "success", "is_error": false,
        "num_turns": 1, "result": result, "usage": {"input_tokens": 900, "output_tokens": 40},
        "permission_denials": []});
    let api =
        "[API Error: 429 Your free quota is exhausted; it will reset at 2099-01-01T00:00:00Z.]";
    let unwritten = serde_json::json!({"type": "assistant", "message": {"role": "assistant",
        "content": [{"type": "text", "text": api}], "usage": {"input_tokens": 0, "output_tokens": 0}}});
    let unwritten_result = serde_json::json!({"type": "result", "subtype": "success",
        "is_error": false, "num_turns": 1, "result": api,
        "usage": {"input_tokens": 0, "output_tokens": 0}, "permission_denials": []});
    format!(
        "written() {{\n  {CHECK}\n  cat <<'EOF'\n{message}\n{done}\nEOF\n}}\n\
         unwritten() {{\n  cat <<'EOF'\n{unwritten}\n{unwritten_result}\nEOF\n}}"
    )
}

/// Attack: the model's own final message opens with Qwen's error prefix and a far reset
/// (`[API Error: 429 … reset at 2099-01-01 …]`), as one text block and as two (the prefix, then
/// its own words). Promise: a message the model wrote is its work (SPEC §6), never a limit — no
/// switch, no wait. Control: Qwen 0.15's unwritten `[API Error: 429 …]` (a success, no tokens)
/// is the limit it is: claude takes over.
#[test]
fn a_qwen_model_writing_an_api_error_is_never_a_limit() {
    let api =
        "[API Error: 429 Your free quota is exhausted; it will reset at 2099-01-01T00:00:00Z.]";
    let tail = " That is what the provider said in the log; I added a backoff.";
    let one = serde_json::json!([{"type": "text", "text": format!("{api}{tail}")}]).to_string();
    let two = serde_json::json!([{"type": "text", "text": api}, {"type": "text", "text": tail}])
        .to_string();
    for (what, blocks) in [("one block", one), ("two blocks", two)] {
        let env = setup(&["only box"]);
        stand_in(
            &env,
            "qwen",
            &qwen_helpers(&blocks, &format!("{api}{tail}")),
            "*) written ;;",
        );
        stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
        let out = ralph_as(
            &env,
            "run",
            "qwen",
            &["--fallback-agent", "claude", "--max-wait", "5s"],
            Duration::from_secs(40),
        );
        assert_exit(&out, 0);
        assert_eq!(
            (calls(&env, "qwen"), calls(&env, "claude")),
            (1, 0),
            "{what}: {}",
            env.activity()
        );
        assert!(events_named(&out, "waiting").is_empty(), "{what}");
    }

    // Control: Qwen's own unwritten API error is the limit.
    let env = setup(&["only box"]);
    stand_in(
        &env,
        "qwen",
        &qwen_helpers(r#"[{"type":"text","text":"x"}]"#, "x"),
        "*) unwritten ;;",
    );
    stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "qwen",
        &["--fallback-agent", "claude", "--max-wait", "5s"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert_eq!((calls(&env, "qwen"), calls(&env, "claude")), (1, 1));
}

// ----- opencode's quiet retry ----------------------------------------------------------------

/// opencode's log line for a failed model call it retries after a silent sleep.
const STREAM_ERROR: &str = r#"timestamp=2026-12-03T10:31:55.152Z level=ERROR run=a7513966 message="stream error" providerID=standin modelID=standin-model error.error="AI_APICallError: Rate limit exceeded (stand-in). Please retry later.""#;

/// An opencode stand-in: `retry_then_hang` prints its retry line and then never another word
/// (a retried request that hangs); `hang` says nothing at all and hangs. Both record their pid.
fn opencode_hangs(env: &TestEnv, calls: &str) {
    let pids = env.home.join("opencode.pids");
    let helpers = format!(
        "cat > /dev/null\necho $$ >> '{p}'\n\
         retry_then_hang() {{ echo '{STREAM_ERROR}' >&2; exec sleep 600; }}\n\
         hang() {{ exec sleep 600; }}",
        p = pids.display()
    );
    stand_in(env, "opencode", &helpers, calls);
}

fn opencode_pids(env: &TestEnv) -> Vec<i32> {
    std::fs::read_to_string(env.home.join("opencode.pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Attack: opencode prints its own retry line (`message="stream error"`), then hangs. Promise:
/// `--timeout` still stops it (the quiet retry only re-arms the idle timer). Control: the same
/// hang without the retry line is stopped by `--idle-timeout`. One iteration, no waiting
/// allowed: the stopped attempt ends the run (exit 3 or 10), in seconds, its process gone.
#[test]
fn a_retry_line_then_a_hang_is_still_stopped_by_timeout() {
    let env = setup(&["only box"]);
    opencode_hangs(&env, "*) retry_then_hang ;;");
    let t0 = Instant::now();
    let out = ralph_as(
        &env,
        "run",
        "opencode",
        &[
            "--timeout",
            "4s",
            "--idle-timeout",
            "1s",
            "--max-wait",
            "30s",
            "--max-iterations",
            "1",
        ],
        Duration::from_secs(40),
    );
    assert_no_panic(&out);
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(4), "stopped early: {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(
        env.activity().contains("timed out after 4s"),
        "{}",
        env.activity()
    );
    assert_all_dead(&opencode_pids(&env), Duration::from_secs(5));

    // Control: the silent hang is an idle timeout.
    let env = setup(&["only box"]);
    opencode_hangs(&env, "*) hang ;;");
    let t0 = Instant::now();
    let out = ralph_as(
        &env,
        "run",
        "opencode",
        &[
            "--idle-timeout",
            "1s",
            "--max-wait",
            "0s",
            "--max-iterations",
            "1",
        ],
        Duration::from_secs(40),
    );
    assert_exit(&out, 3);
    assert!(t0.elapsed() < Duration::from_secs(15));
    assert!(
        env.activity().contains("idle timeout"),
        "{}",
        env.activity()
    );
}

/// Attack: opencode's retry line, then a hang, with only `--idle-timeout` set (no `--timeout`,
/// its default). The quiet retry is believed while it lasts — but not for ever: a user who set
/// an idle timeout expects a hung agent to be stopped. The quiet of a retry is a wait for a
/// usage limit, bounded by `--max-wait` like ralph's own: here 3 s, then the idle timeout
/// holds. Control: a quiet retry shorter than that is not taken for a hang (opencode prints
/// its retry line, sleeps 3 s, then works).
#[test]
fn a_retry_line_cannot_defeat_the_idle_timeout_for_ever() {
    let env = setup(&["only box"]);
    opencode_hangs(&env, "*) retry_then_hang ;;");
    let t0 = Instant::now();
    let out = ralph_as(
        &env,
        "run",
        "opencode",
        &[
            "--idle-timeout",
            "1s",
            "--max-wait",
            "3s",
            "--max-iterations",
            "1",
        ],
        Duration::from_secs(40),
    );
    assert_no_panic(&out);
    assert!(
        out.status.code().is_some(),
        "still running after 40 s: the idle timeout never fired\n{}",
        env.activity()
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(
        env.activity().contains("idle timeout"),
        "{}",
        env.activity()
    );
    assert_all_dead(&opencode_pids(&env), Duration::from_secs(5));

    // Control: a retry that sleeps 2 s (over the 1 s idle timeout) and then works.
    let env = setup(&["only box"]);
    let helpers = format!(
        "cat > /dev/null\nretry_then_work() {{ echo '{STREAM_ERROR}' >&2; sleep 2; {CHECK}; \
         echo '{{\"type\":\"text\",\"part\":{{\"text\":\"Checked one box.\"}}}}'; }}"
    );
    stand_in(&env, "opencode", &helpers, "*) retry_then_work ;;");
    let out = ralph_as(
        &env,
        "run",
        "opencode",
        &["--idle-timeout", "1s", "--max-wait", "3s"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert!(
        !env.activity().contains("idle timeout"),
        "{}",
        env.activity()
    );
}

// ----- absurd reset times, a chain that is all limited ---------------------------------------

/// A stand-in `name` printing `line` (stdout) and exiting `code`, every call.
fn says(env: &TestEnv, name: &str, line: &str, code: i32) {
    let file = env.home.join(format!("{name}.says"));
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let helpers = format!(
        "cat > /dev/null\nsay() {{ cat '{}'; exit {code}; }}",
        file.display()
    );
    stand_in(env, name, &helpers, "*) say ;;");
}

/// Attack: limits whose reset lies at the end of time, before the epoch, past what a date
/// holds, or in a number too long for any integer — in each preset's own words. Promise: no
/// panic, no spin: each is waited for within `--max-wait` (2 s here) or ends the run (exit
/// 10) in seconds.
#[test]
fn absurd_reset_times_neither_panic_nor_spin() {
    let opencode_error = |timestamp: &str, after: &str| {
        format!(
            r#"{{"type":"error","timestamp":{timestamp},"sessionID":"s","error":{{"name":"APIError","data":{{"message":"Rate limit exceeded","statusCode":429,"isRetryable":true,"responseHeaders":{{"retry-after":"{after}"}}}}}}}}"#
        )
    };
    let claude_limit = |resets: &str| {
        format!(
            r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"rejected","resetsAt":{resets},"rateLimitType":"five_hour"}}}}"#
        )
    };
    let qwen_quota = |when: &str| {
        serde_json::json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
            "num_turns": 1, "usage": {"input_tokens": 0, "output_tokens": 0},
            "error": {"message": format!("Quota exhausted: Your free quota is exhausted; it will reset at {when}.")}})
        .to_string()
    };
    let droid_quota = |when: &str| {
        format!(
            r#"{{"type":"error","source":"agent_loop","message":"429 Usage quota exhausted for this key. Your limit will reset at {when}.","timestamp":1796293898638,"session_id":"e"}}"#
        )
    };
    let cases: Vec<(&str, String)> = vec![
        ("opencode", opencode_error("8210266876799000", "3600")),
        ("opencode", opencode_error("8210266876799999", "2592000")),
        ("opencode", opencode_error("-8334601228800000", "1")),
        ("opencode", opencode_error("1796293831848", "1e308")),
        (
            "opencode",
            opencode_error("1796293831848", "Fri, 31 Dec 9999 23:59:59 GMT"),
        ),
        ("claude", claude_limit("1e300")),
        ("claude", claude_limit("-5")),
        ("claude", claude_limit("99999999999")),
        ("claude", claude_limit("18446744073709551615")),
        ("qwen", qwen_quota("+262142-12-31 23:59:59 UTC")),
        ("qwen", qwen_quota("9999-12-31T23:59:59Z")),
        ("qwen", qwen_quota("0000-01-01T00:00:00Z")),
        ("droid", droid_quota("99:99:99 UTC")),
        ("droid", droid_quota("23:59:59 UTC on 9999-12-31")),
        (
            "codex",
            "You've hit your usage limit. Try again in 999999999999999999999999 seconds.".into(),
        ),
        (
            "codex",
            "You've hit your usage limit. Try again in 99999999 days 99999999 hours.".into(),
        ),
    ];
    for (agent, line) in cases {
        let env = setup(&["only box"]);
        says(&env, agent, &line, 1);
        let t0 = Instant::now();
        let out = ralph_as(
            &env,
            "run",
            agent,
            &[
                "--max-wait",
                "2s",
                "--limit-backoff",
                "1s",
                "--max-iterations",
                "1",
            ],
            Duration::from_secs(40),
        );
        assert_no_panic(&out);
        let code = out.status.code();
        assert!(
            matches!(code, Some(3 | 10)),
            "{agent} `{line}`: exit {code:?}\n{}",
            stderr(&out)
        );
        assert!(t0.elapsed() < Duration::from_secs(25), "{agent} `{line}`");
        assert!(
            calls(&env, agent) <= 4,
            "{agent} `{line}`: {} calls",
            calls(&env, agent)
        );
        // status reads what the run wrote.
        let v = status_json(&env);
        assert!(v["run_id"].is_string(), "{v}");
    }
}

/// Attack: every agent of the chain is limited on every attempt, each reset already past (a
/// clock gone wrong, a CLI that lies), with the smallest backoff. Promise: the chain never
/// spins — attempts stay few per second — and `--max-wait` ends the run (exit 10) through the
/// normal close.
#[test]
fn a_chain_limited_for_ever_with_past_resets_never_spins() {
    let env = setup(&["only box"]);
    stand_in(
        &env,
        "claude",
        &claude_helpers(),
        "*) limited_at $(( $(date +%s) - 100 )) 0 ;;",
    );
    stand_in(&env, "codex", &codex_helpers(), "*) limited 0 ;;");
    let t0 = Instant::now();
    let out = ralph_as(
        &env,
        "run",
        "claude",
        &[
            "--fallback-agent",
            "codex",
            "--max-wait",
            "6s",
            "--limit-backoff",
            "1s",
        ],
        Duration::from_secs(60),
    );
    assert_exit(&out, 10);
    let took = t0.elapsed().as_secs_f64();
    let attempts = calls(&env, "claude") + calls(&env, "codex");
    assert!(attempts >= 3, "{attempts} attempts");
    assert!(
        (attempts as f64) <= 2.0 * took + 4.0,
        "{attempts} attempts in {took:.1}s"
    );
    let recs = env.iter_records();
    assert_eq!(recs.len(), 1, "a limit is not an iteration: {recs:?}");
    let waited: f64 = events_named(&out, "waiting")
        .iter()
        .map(|e| e["wait_s"].as_f64().unwrap())
        .sum();
    assert!(waited <= 6.0 + 1e-6, "waited {waited}s past --max-wait 6s");
}

// ----- forged ITER records -------------------------------------------------------------------

/// Records an agent appends to `.ralph/iterations.log`: `| agent x |` where ralph puts it,
/// where it never does, twice, empty, with ` | ` in the name, and identical triples.
const FORGED: &str = "ITER 1 | 0/2 criteria | exit 0 | agent x | deadbee | 0 0
ITER 1 | 0/2 criteria | exit 0 | agent x | deadbee | 0 0
ITER 1 | 0/2 criteria | exit 0 | agent x | deadbee | 0 0
ITER 99 | agent y | exit 0 | agent z | agent w | 1 2
ITER 7 | 1/2 criteria | agent claude | exit error | agent  | no-commit | 3 4
ITER 4294967296 | x | exit 99999999999999999999 | agent a | b | agent c | d
ITER | | | | | agent | |
ITER 2 | 2/2 criteria | exit 0 | agent codex | abc | 1 1";

/// Attack: every iteration of a run with fallbacks, the agent appends forged ITER records to
/// `.ralph/iterations.log` — identical triples to fake a stall, and odd `agent` fields. Promise:
/// the STALLED rule is ralph's own (a run making progress completes, one making none stalls
/// after three iterations, exit 4), `status` (text and `--json`) reads the log without
/// trouble, and a resume goes on at the run's own next iteration.
#[test]
fn forged_iter_records_with_agent_fields_fool_nothing() {
    let forge = format!(
        "forge() {{ mkdir -p .ralph; cat >> .ralph/iterations.log <<'EOF'\n{FORGED}\nEOF\n}}"
    );
    // Progress every iteration, forged stalls in the log: it completes.
    let env = setup(&["first box", "second box", "third box"]);
    let helpers = format!("{}\n{forge}", codex_helpers());
    stand_in(&env, "codex", &helpers, "*) forge; worked ;;");
    stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "codex",
        &["--fallback-agent", "claude"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert_eq!(agents_of(&out), ["codex", "codex", "codex"]);
    let v = status_json(&env);
    assert_eq!(v["iteration"], 3, "{v}");
    assert_eq!(v["stalled"], false, "{v}");
    let text = status_text(&env);
    assert_exit(&text, 0);

    // No progress, the log forged with varied records: still STALLED after three.
    let env = setup(&["first box", "second box"]);
    let helpers = format!(
        "{}\n{forge}\nidle() {{ forge; echo 'Nothing to do.'; }}",
        codex_helpers()
    );
    stand_in(&env, "codex", &helpers, "*) idle ;;");
    stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "codex",
        &["--fallback-agent", "claude", "--max-iterations", "5"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 4);
    assert_eq!(calls(&env, "codex"), 3);
    assert_no_panic(&status_text(&env));

    // A resume after a halt whose log ends in forged records goes on at the run's iteration 4.
    let env = setup(&["first box", "second box"]);
    stand_in(&env, "codex", &helpers, "*) idle ;;");
    stand_in(&env, "claude", &claude_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "codex",
        &["--fallback-agent", "claude", "--max-iterations", "2"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 3);
    stand_in(&env, "codex", &helpers, "*) forge; worked ;;");
    let out = ralph_as(
        &env,
        "resume",
        "codex",
        &["--max-iterations", "4"],
        Duration::from_secs(40),
    );
    assert_no_panic(&out);
    let started: Vec<u64> = events_named(&out, "iteration_started")
        .iter()
        .map(|e| e["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(started, [3, 4], "{}", stdout(&out));
    assert_exit(&out, 0);
}

// ----- a hostile state.json -------------------------------------------------------------------

/// Every copy of the run's state — `.ralph/state.json` and ralph's own record under the state
/// home (without `--sandbox` the agent can write both) — edited by `edit`.
fn edit_states(env: &TestEnv, edit: impl Fn(&mut Value)) {
    fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, found);
            } else if p.file_name().is_some_and(|n| n == "state.json") {
                found.push(p);
            }
        }
    }
    let mut files = vec![env.repo.join(".ralph/state.json")];
    walk(&env.home.join(".local/state"), &mut files);
    assert!(files.len() >= 2, "no record found: {files:?}");
    for f in files {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&f, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
}

/// A finished first iteration with fallbacks (claude, then codex), halted at max iterations.
fn halted_after_one(env: &TestEnv) {
    stand_in(env, "claude", &claude_helpers(), "*) worked ;;");
    stand_in(env, "codex", &codex_helpers(), "*) worked ;;");
    let out = ralph_as(
        env,
        "run",
        "claude",
        &["--fallback-agent", "codex", "--max-iterations", "1"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 3);
}

/// Attack: the agent rewrites the run's state (both copies) with an `agents` map of 2 000
/// entries (and of 20 000: a file over the 1 MiB ralph reads, refused by name) holding the
/// largest figures JSON allows and names with escape sequences, and a `waited_s` that is
/// negative or too large for any duration. Promise: `status` (text and JSON) answers; a resume
/// runs — its limit waited within `--max-wait` or ending the run (exit 10) — never a panic.
#[test]
fn a_hostile_agents_map_and_waited_s_break_neither_status_nor_resume() {
    for (waited, entries) in [(-5.0, 2_000), (1e300, 2_000), (f64::MAX, 20_000)] {
        let env = setup(&["first box", "second box", "third box"]);
        halted_after_one(&env);
        edit_states(&env, |v| {
            let mut agents = serde_json::Map::new();
            for i in 0..entries {
                agents.insert(
                    format!("agent-{i}\u{1b}]52;c;aGk=\u{7}"),
                    serde_json::json!({"iterations": u32::MAX, "cost_usd": 1.7e308,
                        "input_tokens": u64::MAX, "output_tokens": u64::MAX}),
                );
            }
            // The run's own agents too, at the most their counters hold.
            for name in ["claude", "codex"] {
                agents.insert(
                    name.into(),
                    serde_json::json!({"iterations": u32::MAX, "cost_usd": 1.7e308,
                        "input_tokens": u64::MAX, "output_tokens": u64::MAX}),
                );
            }
            v["agents"] = Value::Object(agents);
            v["input_tokens"] = Value::from(u64::MAX);
            v["output_tokens"] = Value::from(u64::MAX);
            v["agent"] = Value::from("\u{1b}[2J");
            v["waited_s"] = Value::from(waited);
        });
        let text = status_text(&env);
        assert_no_panic(&text);
        assert!(
            !stdout(&text).contains('\u{1b}'),
            "an escape reached the terminal"
        );
        assert_no_panic(&env.ralph_with_limit(&["status", "--json"], &[], Duration::from_secs(30)));
        // The resume meets a limit (codex's reset 1 s away): waited or the run ends.
        stand_in(&env, "claude", &claude_helpers(), "*) limited 1 ;;");
        stand_in(
            &env,
            "codex",
            &codex_helpers(),
            "1) limited 1 ;;\n*) worked ;;",
        );
        let out = ralph_as(
            &env,
            "resume",
            "claude",
            &["--max-iterations", "3", "--max-wait", "1m"],
            Duration::from_secs(60),
        );
        assert_no_panic(&out);
        if entries > 2_000 {
            assert_exit(&out, 1);
            assert!(
                stderr(&out).contains("ralph reads at most"),
                "{}",
                stderr(&out)
            );
            continue;
        }
        assert!(
            matches!(out.status.code(), Some(0 | 3 | 10)),
            "waited_s {waited}: {:?}\n{}",
            out.status.code(),
            stderr(&out)
        );
        assert_no_panic(&status_text(&env));
    }

    // Wrong types: the state is refused with a message naming the file, never a panic.
    let env = setup(&["first box", "second box"]);
    halted_after_one(&env);
    edit_states(&env, |v| {
        v["agents"] =
            serde_json::json!({"claude": "lots", "codex": [1, 2], "x": {"iterations": -1}});
        v["agent"] = serde_json::json!(42);
    });
    let text = status_text(&env);
    assert_no_panic(&text);
    let out = ralph_as(&env, "resume", "claude", &[], Duration::from_secs(40));
    assert_no_panic(&out);
    assert!(
        out.status.code() != Some(0),
        "a broken state resumed as if sound"
    );
}

// ----- cost across agents ----------------------------------------------------------------------

/// opencode's JSON: one box, two model calls costing $0.10 and $0.20.
fn opencode_helpers() -> String {
    format!(
        r#"cat > /dev/null
worked() {{
  {CHECK}
  echo '{{"type":"step_finish","part":{{"tokens":{{"input":100,"output":10,"reasoning":0,"cache":{{"write":0,"read":0}}}},"cost":0.1}}}}'
  echo '{{"type":"text","part":{{"text":"Checked one box."}}}}'
  echo '{{"type":"step_finish","part":{{"tokens":{{"input":200,"output":20,"reasoning":0,"cache":{{"write":0,"read":0}}}},"cost":0.2}}}}'
}}
huge() {{
  {CHECK}
  echo '{{"type":"step_finish","part":{{"tokens":{{"input":1,"output":1}},"cost":1.7e308}}}}'
  echo '{{"type":"step_finish","part":{{"tokens":{{"input":1,"output":1}},"cost":1.7e308}}}}'
}}"#
    )
}

/// Attack: cost reported by two agents across a switch: claude's limited attempt ($0.25),
/// then opencode's two iterations ($0.30 each, in two model calls). Promise: each attempt's
/// cost counts exactly once — per agent and in all, the sums agreeing — and `--max-cost` sees
/// it.
#[test]
fn cost_adds_up_across_agents_exactly_once() {
    let env = setup(&["first box", "second box"]);
    stand_in(&env, "claude", &claude_helpers(), "*) limited 600 ;;");
    stand_in(&env, "opencode", &opencode_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "claude",
        &["--fallback-agent", "opencode", "--max-wait", "5s"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert_eq!((calls(&env, "claude"), calls(&env, "opencode")), (1, 2));
    let v = status_json(&env);
    let cost = |v: &Value| v["cost_usd"].as_f64().unwrap();
    assert!((cost(&v) - 0.85).abs() < 1e-9, "{v}");
    assert!((cost(&v["agents"]["claude"]) - 0.25).abs() < 1e-9, "{v}");
    assert!((cost(&v["agents"]["opencode"]) - 0.60).abs() < 1e-9, "{v}");
    assert_eq!(v["agents"]["opencode"]["iterations"], 2, "{v}");
    assert_eq!(v["input_tokens"], 100 + 2 * 300, "{v}");
    let per_iteration: f64 = events_named(&out, "iteration_finished")
        .iter()
        .map(|e| e["cost_usd"].as_f64().unwrap_or(0.0))
        .sum();
    assert!((per_iteration - 0.85).abs() < 1e-9, "{}", stdout(&out));

    // --max-cost $0.30: claude's $0.25 and opencode's first $0.30 pass it: exit 10 after one.
    let env = setup(&["first box", "second box"]);
    stand_in(&env, "claude", &claude_helpers(), "*) limited 600 ;;");
    stand_in(&env, "opencode", &opencode_helpers(), "*) worked ;;");
    let out = ralph_as(
        &env,
        "run",
        "claude",
        &["--fallback-agent", "opencode", "--max-cost", "0.30"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 10);
    assert_eq!(calls(&env, "opencode"), 1);
}

/// Attack: costs no sum can hold (two model calls at $1.7e308: infinity, which JSON writes as
/// `null`). Promise: the run state stays readable (`status`, `resume`).
#[test]
fn an_infinite_cost_keeps_the_state_readable() {
    let env = setup(&["first box", "second box"]);
    stand_in(&env, "opencode", &opencode_helpers(), "*) huge ;;");
    let out = ralph_as(
        &env,
        "run",
        "opencode",
        &["--max-iterations", "1"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 3);
    let v = status_json(&env);
    let cost = v["cost_usd"].as_f64();
    assert!(cost.is_some_and(f64::is_finite), "{v}");
    let out = ralph_as(
        &env,
        "resume",
        "opencode",
        &["--max-iterations", "2"],
        Duration::from_secs(40),
    );
    assert_no_panic(&out);
    assert!(
        !stderr(&out).contains("state.json"),
        "the state became unreadable: {}",
        stderr(&out)
    );
}

/// Attack: a negative cost (claude's limited attempt at -$100) that would lower the total
/// under `--max-cost`. Promise: what the agents spent only ever adds: with `--max-cost`
/// $0.40, claude's worked $0.50 ends the run after one iteration (exit 10).
#[test]
fn a_negative_cost_never_lowers_the_total() {
    let env = setup(&["first box", "second box", "third box"]);
    stand_in(
        &env,
        "claude",
        &claude_helpers(),
        "1) limited_at $(( $(date +%s) - 100 )) -100 ;;\n*) worked ;;",
    );
    let out = ralph_as(
        &env,
        "run",
        "claude",
        &[
            "--max-cost",
            "0.40",
            "--limit-backoff",
            "1s",
            "--max-wait",
            "10s",
        ],
        Duration::from_secs(40),
    );
    assert_exit(&out, 10);
    assert_eq!(env.iter_records().len(), 1, "{:?}", env.iter_records());
    let v = status_json(&env);
    assert!(v["cost_usd"].as_f64().unwrap() >= 0.5 - 1e-9, "{v}");
}
