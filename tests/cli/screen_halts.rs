//! What a run prints, whole, for every way it ends (SPEC §6, §9): the start line, the report
//! block between iterations, the final summary, errors on stderr and the exit status, as
//! snapshots (`tests/cli/snapshots/`) normalised by `common::normalize`.

use std::time::Duration;

use crate::common::*;

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

/// A verdict command answering with `code` and `said` every time.
fn verdict(env: &TestEnv, code: i32, said: &str) -> String {
    crate::verdict::verdict_script(env, &[(code, said)])
}

#[test]
fn complete() {
    let env = setup(&["s1", "s2"]);
    let out = env.run_fake("check", &[]);
    insta::assert_snapshot!("complete", screen(&env, &out));
}

/// `--json`: the events on stdout, one a line; the human output on stderr.
#[test]
fn complete_json() {
    let env = setup(&["s1", "s2"]);
    let out = env.run_fake("check", &["--json"]);
    let events = json_lines_screen(&env, &stdout(&out), &["duration_s"]);
    insta::assert_snapshot!(
        "complete_json",
        screen_of(&env, &events, &stderr(&out), out.status.code())
    );
}

#[test]
fn max_iterations() {
    let env = setup(&["s1", "s2", "s3"]);
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    insta::assert_snapshot!("max_iterations", screen(&env, &out));
}

#[test]
fn stalled() {
    let env = setup(&["s1", "s2"]);
    let out = env.run_fake("check,idle", &[]);
    insta::assert_snapshot!("stalled", screen(&env, &out));
}

#[test]
fn stuck() {
    let env = setup(&["s1", "s2"]);
    let out = env.run_fake("churn", &["--stuck-threshold", "1"]);
    insta::assert_snapshot!("stuck", screen(&env, &out));
}

#[test]
fn target_only() {
    let env = setup(&["v1", "v2"]);
    let said = "TARGET-ONLY: R4 renders on the real CDN\nTARGET-ONLY: R9 SSO with the real IdP\nSUMMARY: 2 target-only";
    let cmd = verdict(&env, 5, said);
    let out = env.run_fake("churn", &["--verdict-cmd", &cmd]);
    insta::assert_snapshot!("target_only", screen(&env, &out));
}

#[test]
fn verdict_unavailable() {
    let env = setup(&["v1", "v2"]);
    let cmd = verdict(&env, 2, "boom: no such table");
    let out = env.run_fake("churn", &["--verdict-cmd", &cmd]);
    insta::assert_snapshot!("verdict_unavailable", screen(&env, &out));
}

#[test]
fn tampered() {
    let env = setup(&["s1", "s2", "s3"]);
    let out = env.run_fake("check,delete", &[]);
    insta::assert_snapshot!("tampered", screen(&env, &out));
}

#[test]
fn partial() {
    let env = TestEnv::new();
    let mut prd = String::from("# Accounts\n\n## Goal\n\nUsers can sign in.\n\n## Tasks\n\n");
    let mut progress = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|------|--------|-------|\n",
    );
    for k in 1..=2 {
        prd.push_str(&format!(
            "### Task {k}: Part {k}\n\nDo part {k}.\n\n**Acceptance Criteria:**\n- [ ] part {k} works\n\n"
        ));
        progress.push_str(&format!("| {k} | Part {k} | PENDING | |\n"));
    }
    env.write("PRD.md", &prd);
    env.write("PROGRESS.md", &progress);
    env.commit_all("initial");
    let out = env.run_fake("done-task-except:2", &[]);
    insta::assert_snapshot!("partial", screen(&env, &out));
}

#[test]
fn budget() {
    let env = setup(&["s1", "s2", "s3"]);
    let out = run_claude_fake(
        &env,
        "run",
        "check+claude-result:0.6",
        &["--max-cost", "1"],
        Duration::from_secs(60),
    );
    let err = without_root_note(&stderr(&out));
    let screen = screen_of(&env, &stdout(&out), &err, out.status.code());
    insta::assert_snapshot!("budget", screen);
}

#[test]
fn interrupted() {
    let env = setup(&["s1", "s2"]);
    let bg = env.spawn_fake("churn+hang", &["--grace", "1s"]);
    env.wait_for_pids(1, 1);
    // The agent's work is on disk before the signal, so the screen names its commit.
    assert!(wait_until(Duration::from_secs(10), || env
        .repo
        .join("churn.txt")
        .exists()));
    bg.signal(libc::SIGINT);
    let (code, out, err) = bg.wait(Duration::from_secs(20));
    insta::assert_snapshot!("interrupted", screen_of(&env, &out, &err, code));
}

#[test]
fn error() {
    let env = setup(&["s1", "s2"]);
    let out = env.run_fake("check+garble", &[]);
    insta::assert_snapshot!("error", screen(&env, &out));
}

/// An error with `--json`: one `halted` event, the message on stderr.
#[test]
fn error_json() {
    let env = setup(&["s1", "s2"]);
    let out = env.run_fake("check+garble", &["--json"]);
    let events = json_lines_screen(&env, &stdout(&out), &["duration_s"]);
    insta::assert_snapshot!(
        "error_json",
        screen_of(&env, &events, &stderr(&out), out.status.code())
    );
}

/// A worktree loop that completes while the main work tree has uncommitted changes: complete,
/// not merged (exit 11).
#[test]
fn not_merged() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write("notes.txt", "the user's notes\n");
    env.commit_all("base");
    env.write("notes.txt", "the user is editing this\n");
    let out = run_loop(&env, "w", "A.md", &fake_agent_cmd(), &["--merge"]);
    insta::assert_snapshot!("not_merged", screen(&env, &out));
}
