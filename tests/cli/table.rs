//! Table mode (SPEC §3.2): PRD.md + PROGRESS.md, one task per iteration, attempts, BLOCKED,
//! the reviewer, the planning phase.

use crate::common::*;

fn prd(n: u32) -> String {
    let mut s = String::from("# Accounts\n\n## Goal\n\nUsers can sign in.\n\n## Tasks\n\n");
    for k in 1..=n {
        s.push_str(&format!(
            "### Task {k}: Part {k}\n\nDo part {k}.\n\n**Acceptance Criteria:**\n- [ ] part {k} works\n\n"
        ));
    }
    s.push_str("## Completion Promise\n\n`DONE`\n");
    s
}

fn progress(n: u32) -> String {
    let mut s = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|------|--------|-------|\n",
    );
    for k in 1..=n {
        s.push_str(&format!("| {k} | Part {k} | PENDING | |\n"));
    }
    s
}

fn setup(n: u32) -> TestEnv {
    let env = TestEnv::new();
    env.write("PRD.md", &prd(n));
    env.write("PROGRESS.md", &progress(n));
    env.commit_all("initial");
    env
}

#[test]
fn an_agent_that_finishes_its_task_completes_in_three_iterations() {
    let env = setup(3);
    let out = env.run_fake("done-task", &[]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(3) && !env.agent_ran(4));
    for k in 1..=3 {
        let p = env.agent_prompt(k);
        assert!(
            p.starts_with(&format!("# Ralph iteration {k}/50: task {k}")),
            "{p}"
        );
        // The prompt names only its task.
        for other in (1..=3).filter(|o| *o != k) {
            assert!(
                !p.contains(&format!("Part {other}")),
                "prompt {k} names task {other}"
            );
        }
    }
    let progress = env.read("PROGRESS.md");
    assert!(progress.contains("## Status: COMPLETE"), "{progress}");
    let so = stdout(&out);
    assert!(so.lines().any(|l| l == "<promise>DONE</promise>"), "{so}");
    let recs = env.iter_records();
    assert!(
        recs[0].starts_with("ITER 1 | 1/3 tasks done, task 1 attempt 1/3 | exit 0 |"),
        "{recs:?}"
    );
    assert_eq!(env.commits()[0], "ralph: iteration 3 — task 3: Part 3");
    assert!(
        env.git(&["show", "--name-only", "--format=", "HEAD"])
            .contains("PROGRESS.md")
    );
}

#[test]
fn a_task_never_finished_is_blocked_after_three_attempts_and_the_run_is_partial() {
    let env = setup(3);
    let out = env.run_fake("done-task-except:2", &[]);
    assert_exit(&out, 9);
    // 1 (task 1) + 3 attempts at task 2 + 1 (task 3).
    assert!(env.agent_ran(5) && !env.agent_ran(6));
    // The first PENDING task goes first; then the FAILED one with attempts left.
    for (n, k) in [(2, 2), (3, 3), (4, 2), (5, 2)] {
        assert!(
            env.agent_prompt(n)
                .starts_with(&format!("# Ralph iteration {n}/50: task {k}"))
        );
    }
    assert!(env.agent_prompt(4).contains("Attempt 2/3"));
    let progress = env.read("PROGRESS.md");
    assert!(progress.contains("## Status: PARTIAL"), "{progress}");
    let row2 = progress.lines().find(|l| l.starts_with("| 2 |")).unwrap();
    assert!(row2.contains("BLOCKED"), "{row2}");
    let recs = env.iter_records();
    assert!(
        recs[3].contains("task 2 attempt 2/3"),
        "retries are not a stall: {recs:?}"
    );
    assert!(recs[4].contains("task 2 attempt 3/3"), "{recs:?}");
    let so = stdout(&out);
    // PARTIAL, and no promise: `<promise>DONE</promise>` would tell a reader (or a script
    // grepping for it) that the work is done.
    assert!(so.contains("PARTIAL") && !so.contains("<promise>"), "{so}");
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert_eq!(st["halt_reason"], "partial");
    let out = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "table");
    assert_eq!(
        (v["done"].as_u64(), v["total"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(v["remaining"], serde_json::json!(["task 2: Part 2"]));
    assert_eq!(v["exit_code"], 9);
    assert!(v["elapsed_s"].as_f64().unwrap() >= 0.0);
}

#[test]
fn a_reviewer_answering_fail_sends_the_task_back_with_the_reason() {
    let env = setup(2);
    let out = env.run_fake(
        "done-task+review:FAIL the tests were not run",
        &["--review", "--max-iterations", "1"],
    );
    assert_exit(&out, 3);
    let progress = env.read("PROGRESS.md");
    let row1 = progress.lines().find(|l| l.starts_with("| 1 |")).unwrap();
    assert!(row1.contains("FAILED"), "{row1}");
    assert!(row1.contains("the tests were not run"), "{row1}");
    assert!(
        env.activity()
            .contains("review of task 1: FAIL the tests were not run")
    );
    let env = setup(2);
    let out = env.run_fake("done-task+review:PASS", &["--review"]);
    assert_exit(&out, 0);
}

#[test]
fn a_description_is_planned_then_run() {
    let env = TestEnv::new();
    env.write("README.md", "x\n");
    env.commit_all("initial");
    let out = env.run_fake(
        "write-table:2+done-task,done-task",
        &["build the widget factory"],
    );
    assert_exit(&out, 0);
    let commits = env.commits();
    assert!(
        commits.contains(&"ralph: initialize PRD and progress tracking".to_string()),
        "{commits:?}"
    );
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l == "<promise>SHIPPED</promise>"),
        "{}",
        stdout(&out)
    );
    assert!(env.read("PROGRESS.md").contains("## Status: COMPLETE"));
}

#[test]
fn a_matching_plan_under_docs_plans_is_used_without_a_planning_run() {
    let env = TestEnv::new();
    env.write(
        "docs/plans/2026-11-01-widget-factory.md",
        &prd(2).replace("# Accounts", "# Widget factory"),
    );
    env.commit_all("initial");
    let out = env.run_fake("done-task", &["widget factory"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("docs/plans/2026-11-01-widget-factory.md"),
        "{}",
        stdout(&out)
    );
    assert!(
        env.agent_prompt(1)
            .starts_with("# Ralph iteration 1/50: task 1")
    );
}

#[test]
fn init_table_scaffolds_a_table_run_accepts() {
    let env = TestEnv::new();
    let out = env.ralph(&[
        "init",
        "--table",
        "Ship v2",
        "--criterion",
        "Migrate",
        "--criterion",
        "Port",
    ]);
    assert_exit(&out, 0);
    assert!(env.read("PRD.md").contains("### Task 2: Port"));
    assert!(
        env.read("PROGRESS.md")
            .contains("| 1 | Migrate | PENDING |")
    );
    let out = env.ralph(&["run", "--dry-run", "--agent-cmd", "true"]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(
        so.contains("mode: table") && so.contains("# Ralph iteration 1/50: task 1"),
        "{so}"
    );
    assert_eq!(
        env.ralph(&["init", "--table", "again"]).status.code(),
        Some(1)
    );
}

#[test]
fn a_broken_progress_table_is_an_error_naming_file_and_line() {
    let env = TestEnv::new();
    env.write("PRD.md", &prd(2));
    env.write(
        "PROGRESS.md",
        &progress(2).replace("| 2 | Part 2 | PENDING |", "| 2 | Part 2 | MAYBE |"),
    );
    env.commit_all("initial");
    let out = env.run_fake("done-task", &[]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("PROGRESS.md:8:"), "{}", stderr(&out));
    assert!(!env.agent_ran(1));
}
