//! The run's close (SPEC §6, §9): every way a run ends — in the loop, or before it — is
//! announced by exactly one `halted` event, the last line of `--json`, with the reason and the
//! exit code the process exits with.

use std::process::Output;
use std::time::Duration;

use crate::common::*;
use crate::cpm::{epic, matrix, run_cpm, setup as cpm_setup};

/// The one `halted` event of `out`, checked: the last line, `reason`, and `code` (which the
/// process exited with).
#[track_caller]
fn halted_once(out: &Output, reason: &str, code: i32) -> serde_json::Value {
    assert_exit(out, code);
    let events = json_events(out);
    let halted: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "halted").collect();
    assert_eq!(halted.len(), 1, "one `halted` event:\n{}", stdout(out));
    assert_eq!(
        events.last().map(|e| &e["event"]),
        Some(&"halted".into()),
        "`halted` comes last:\n{}",
        stdout(out)
    );
    assert_eq!(halted[0]["reason"], reason, "{}", stdout(out));
    assert_eq!(halted[0]["exit_code"], code, "{}", stdout(out));
    halted[0].clone()
}

fn task_env(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

/// A task whose criteria are all checked already.
fn checked_env() -> TestEnv {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n---\n## Success Criteria\n- [x] a\n- [x] b\n",
    );
    env.commit_all("initial");
    env
}

/// A verdict command that always exits `code`, printing `said`.
fn verdict(env: &TestEnv, code: i32, said: &str) -> String {
    crate::verdict::verdict_script(env, &[(code, said)])
}

/// A table of `rows` (`(title, status)`).
fn table_env(rows: &[(&str, &str)]) -> TestEnv {
    let env = TestEnv::new();
    let mut prd = String::from("# Accounts\n\n## Goal\n\nUsers can sign in.\n\n## Tasks\n\n");
    let mut progress = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|------|--------|-------|\n",
    );
    for (k, (title, status)) in rows.iter().enumerate() {
        let k = k + 1;
        prd.push_str(&format!(
            "### Task {k}: {title}\n\nDo it.\n\n**Acceptance Criteria:**\n- [ ] {title} works\n\n"
        ));
        progress.push_str(&format!("| {k} | {title} | {status} | |\n"));
    }
    prd.push_str("## Completion Promise\n\n`DONE`\n");
    env.write("PRD.md", &prd);
    env.write("PROGRESS.md", &progress);
    env.commit_all("initial");
    env
}

/// A run in the loop: what it is, the criteria, the agent's script, extra flags, the reason and
/// the exit code it halts with.
type Case = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static [&'static str],
    &'static str,
    i32,
);

#[test]
fn each_halt_in_the_loop_is_announced_once() {
    let cases: [Case; 6] = [
        ("complete", &["a"], "check", &[], "complete", 0),
        (
            "max iterations",
            &["a", "b"],
            "check",
            &["--max-iterations", "1"],
            "max_iterations",
            3,
        ),
        ("stalled", &["a"], "idle", &[], "stalled", 4),
        (
            "stuck",
            &["a"],
            "churn",
            &["--stuck-threshold", "1"],
            "stuck",
            5,
        ),
        ("tampered", &["a", "b"], "delete", &[], "tampered", 8),
        ("error", &["a", "b"], "check+garble", &[], "error", 1),
    ];
    for (what, criteria, script, extra, reason, code) in cases {
        let env = task_env(criteria);
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let out = env.run_fake(script, &args);
        let h = halted_once(&out, reason, code);
        assert!(h["run_id"].is_string(), "{what}: {h}");
        let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
        assert_eq!(st["halt_reason"], reason, "{what}: the state says it too");
    }
}

#[test]
fn each_halt_a_verdict_or_the_budget_calls_is_announced_once() {
    let env = task_env(&["a"]);
    let target_only = verdict(&env, 5, "TARGET-ONLY: R4 renders on the real CDN");
    let out = env.run_fake("churn", &["--json", "--verdict-cmd", &target_only]);
    halted_once(&out, "target_only", 6);

    let env = task_env(&["a"]);
    let broken = verdict(&env, 2, "boom");
    let out = env.run_fake("churn", &["--json", "--verdict-cmd", &broken]);
    halted_once(&out, "verdict_unavailable", 7);

    // A task never finished: BLOCKED after three attempts, the table PARTIAL.
    let env = table_env(&[("Part 1", "PENDING")]);
    let out = env.run_fake("idle", &["--json"]);
    halted_once(&out, "partial", 9);

    let env = task_env(&["a", "b", "c"]);
    let out = run_claude_fake(
        &env,
        "run",
        "check+claude-result:0.4",
        &["--json", "--max-cost", "0.5"],
        Duration::from_secs(60),
    );
    halted_once(&out, "budget", 10);
}

/// Interrupted in an iteration, and interrupted while checking the evidence of a task that
/// says it is done (before any run began): one `halted` each. Bug caught: the second printed
/// none at all.
#[test]
fn an_interrupt_is_announced_once_in_the_loop_and_before_it() {
    let env = task_env(&["a"]);
    let bg = env.spawn_fake("hang", &["--json", "--grace", "1s"]);
    env.wait_for_pids(1, 1);
    bg.signal(libc::SIGINT);
    let (code, so, se) = bg.wait(Duration::from_secs(30));
    let out = output_of(code, so, se);
    halted_once(&out, "interrupted", 130);

    let env = checked_env();
    let started = env.home.join("checking");
    let check = format!("touch '{}'; exec sleep 30", started.display());
    let agent = format!("'{}'", fake_agent().display());
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--agent-cmd", &agent, "--yes", "--json"])
        .args(["--test-command", &check, "--grace", "100ms"]);
    let bg = env.spawn(cmd);
    assert!(
        wait_until(Duration::from_secs(20), || started.exists()),
        "the test command did not start"
    );
    bg.signal(libc::SIGINT);
    let (code, so, se) = bg.wait(Duration::from_secs(30));
    let out = output_of(code, so, se);
    let h = halted_once(&out, "interrupted", 130);
    assert_eq!(
        (h["done"].clone(), h["total"].clone()),
        (2.into(), 2.into())
    );
    assert!(!env.agent_ran(1));
}

/// An `Output` from what a background ralph left.
fn output_of(code: Option<i32>, stdout: String, stderr: String) -> Output {
    use std::os::unix::process::ExitStatusExt;
    Output {
        status: std::process::ExitStatus::from_raw(code.map_or(9, |c| c << 8)),
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

#[test]
fn each_ending_before_the_loop_is_announced_once() {
    // Every box checked, no check set: complete, nothing spawned, no run recorded.
    let env = checked_env();
    let h = halted_once(&env.run_fake("check", &["--json"]), "complete", 0);
    assert_eq!(
        (h["iteration"].clone(), h["done"].clone()),
        (0.into(), 2.into())
    );
    assert!(!env.agent_ran(1));
    // The same with a test command that passes now (SPEC §5.3).
    let env = checked_env();
    let out = env.run_fake("check", &["--json", "--test-command", "true"]);
    halted_once(&out, "complete", 0);
    assert!(!env.agent_ran(1));
    // A table whose only task is BLOCKED: PARTIAL at once.
    let env = table_env(&[("Part 1", "DONE"), ("Part 2", "BLOCKED")]);
    halted_once(&env.run_fake("check", &["--json"]), "partial", 9);
    assert!(!env.agent_ran(1));
    // Not a repository: the error is the ending.
    let env = TestEnv::new();
    let dir = env.plain_dir();
    let dir = dir.to_str().unwrap();
    let out = env.ralph(&["-C", dir, "run", "--json", "--agent-cmd", "true"]);
    let h = halted_once(&out, "error", 1);
    assert!(h["message"].as_str().unwrap().contains("git init"), "{h}");
    // A usage error keeps its exit code.
    let env = task_env(&["a"]);
    let out = env.run_fake("check", &["--json", "a.md", "b.md"]);
    let h = halted_once(&out, "error", 2);
    assert!(h.get("iteration").is_none(), "{h}");
}

/// A run that deleted a criterion (halted tampered), then resumed, and then met by a new run
/// unattended: each ends tampered at once, with one `halted`, and the record says tampered.
#[test]
fn a_tampered_run_met_again_is_announced_once() {
    let env = task_env(&["a", "b"]);
    halted_once(&env.run_fake("delete", &["--json"]), "tampered", 8);
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &["resume", "--json", "--agent-cmd", &agent, "--yes"],
        &[("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(60),
    );
    let h = halted_once(&out, "tampered", 8);
    assert_eq!(h["iteration"], 1, "{h}");
    assert!(!env.agent_ran(2));
    halted_once(&env.run_fake("check", &["--json"]), "tampered", 8);
    assert!(!env.agent_ran(2));
    assert_eq!(status_json(&env)["halt_reason"], "tampered");
}

/// CPM: nothing left to run, and a roll-up that verifies every row before the first
/// iteration: complete, announced once.
#[test]
fn cpm_endings_before_an_iteration_are_announced_once() {
    let (env, rollup) = cpm_setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("Complete", None));
    env.commit_all("initial");
    let out = run_cpm(&env, "check", &["--json", "--rollup", &rollup]);
    halted_once(&out, "complete", 0);

    let (env, rollup) = cpm_setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
    let rows = [("FR1", "Story 1", "[unit]", true)];
    env.write(
        "docs/epics/01-coverage-accounts.md",
        &matrix("", "docs/epics/01-epic-accounts.md", &rows),
    );
    env.commit_all("initial");
    let epic_path = "docs/epics/01-epic-accounts.md";
    let out = run_cpm(&env, "check", &[epic_path, "--json", "--rollup", &rollup]);
    halted_once(&out, "complete", 0);
    assert!(!env.agent_ran(1));
}

/// A worktree loop that completes, whose agent then broke the loop's `.ralph/config.toml`:
/// the merge step after the close fails (exit 1, said), and the run still announced its end
/// once — the error after the close is no second ending. Bug this guards: a second `halted`
/// (an error) after the first, which a global flag used to hide.
#[test]
fn an_error_after_the_close_is_no_second_halted() {
    let env = TestEnv::new();
    env.write("M.md", &task(&["m1"]));
    env.commit_all("tasks");
    let agent = agent_sh(
        &env,
        "break",
        "sed -i 's/- \\[ \\]/- [x]/' \"$RALPH_TASK_FILE\"\nmkdir -p .ralph\necho 'bogus = 1' > .ralph/config.toml",
    );
    let fake = format!("'{}'", fake_agent().display());
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--worktree", "m", "M.md", "--agent-cmd", &fake])
        .args(["--yes", "--grace", "1s", "--json", "--merge"])
        .env("FAKE_AGENT_SCRIPT", &agent);
    let out = run_with_limit(cmd, Duration::from_secs(60));
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("bogus"), "{}", stderr(&out));
    let halted = events_named(&out, "halted");
    assert_eq!(halted.len(), 1, "{}", stdout(&out));
    assert_eq!(halted[0]["reason"], "complete");
}
