//! Task files as people write them (SPEC §3.1, issue 18): one criteria section per phase, all
//! of them counted and all of them in the baseline; frontmatter written for other Ralph-loop
//! tools read with a warning; ralph's per-task keys taking effect; a criteria heading that
//! holds nothing; a box with no text; `status` on a file ralph refuses.

use std::time::Duration;

use crate::common::*;

/// A task in three phases, each with its own `### Success Criteria` (criteria nested under a
/// bullet, numbered ones), notes between them, and open questions as task items after every
/// section.
const PHASED: &str = "---
task: Inventory service
---
# Task: Inventory service

Build it in three phases.

## Phase 1: Setup

Set up the project.

### Success Criteria
- [ ] the project builds
- Backend
  - [ ] the server starts

### Notes
- keep it small

## Phase 2: API

### Success Criteria
1. [ ] GET /items lists the items
2. [ ] POST /items validates its input

## Phase 3: UI

### Success Criteria
- [ ] the list page renders
- [ ] the form posts

## Open Questions
1. [ ] which database?
";

/// The agent's move: check the first `[ ] ` box of the file, whatever its list marker.
const CHECK_FIRST: &str = r"sed -i '0,/\[ \] /s//[x] /' RALPH_TASK.md";

fn phased() -> TestEnv {
    let env = TestEnv::new();
    env.write("RALPH_TASK.md", PHASED);
    env.commit_all("initial");
    env
}

/// Every output the user sees, both streams.
fn said(out: &std::process::Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

/// Promise: a task with a criteria section per phase is complete only when every phase is:
/// the run goes on after phase 1 is all checked and completes when phase 3's last criterion
/// is. The open question outside every section is no criterion. Control: ralph before issue 18
/// read the first section only and reported "complete" after iteration 2 (2/2 criteria).
#[test]
fn a_criteria_section_per_phase_completes_only_when_every_phase_is_done() {
    let env = phased();
    let check = agent_sh(&env, "check", CHECK_FIRST);
    let out = env.run_fake(&check, &["--max-iterations", "10"]);
    assert_exit(&out, 0);
    let figures: Vec<String> = env
        .iter_records()
        .iter()
        .map(|r| r.split(" | ").take(2).collect::<Vec<_>>().join(" | "))
        .collect();
    assert_eq!(
        figures,
        (1..=6)
            .map(|n| format!("ITER {n} | {n}/6 criteria"))
            .collect::<Vec<_>>()
    );
    let task = env.read("RALPH_TASK.md");
    assert!(task.contains("- [x] the form posts"), "{task}");
    assert!(task.contains("1. [ ] which database?"), "{task}");
    let v = status_json(&env);
    assert_eq!(
        (v["done"].clone(), v["total"].clone()),
        (6.into(), 6.into())
    );
    assert_eq!(v["halt_reason"], "complete");
}

/// Promise: the baseline covers every phase: deleting an unchecked criterion of phase 3 while
/// working on phase 1 is tampering (exit 8, named). Control: before issue 18 phase 3 was
/// outside the one section read, its deletion went unseen and the run completed (exit 0).
#[test]
fn deleting_a_criterion_of_a_later_phase_is_tampering() {
    let env = phased();
    let step = agent_sh(
        &env,
        "delete-later",
        &format!("sed -i '/the form posts/d' RALPH_TASK.md\n{CHECK_FIRST}"),
    );
    let out = env.run_fake(&step, &["--max-iterations", "10"]);
    assert_exit(&out, 8);
    assert!(said(&out).contains("the form posts"), "{}", said(&out));
    assert_eq!(
        env.iter_records().len(),
        1,
        "halted in the iteration it happened"
    );
}

/// Promise: with several sections, a criterion left unchecked outside them while a checked copy
/// stands inside is still there, unchecked: phase 3's heading renamed and its criteria copied,
/// checked, under phase 1 halts 8. Control: the same file as the start of a run is "already
/// complete" (every criterion in a section is checked): the edit alone reaches "all checked".
#[test]
fn a_phase_moved_out_of_the_sections_with_checked_copies_is_tampering() {
    let moved = PHASED
        .replace(
            "- [ ] the project builds",
            "- [x] the project builds\n- [x] the list page renders\n- [x] the form posts",
        )
        .replace("  - [ ] the server starts", "  - [x] the server starts")
        .replace("1. [ ] GET", "1. [x] GET")
        .replace("2. [ ] POST", "2. [x] POST")
        .replace(
            "## Phase 3: UI\n\n### Success Criteria",
            "## Phase 3: UI\n\n### Ideas",
        );
    let control = TestEnv::new();
    control.write("RALPH_TASK.md", &moved);
    control.commit_all("initial");
    let out = control.run_fake("idle", &[]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("already complete"), "{}", said(&out));

    let env = phased();
    let file = env.home.join("moved.md");
    std::fs::write(&file, &moved).unwrap();
    let out = env.run_fake(
        &format!("copy:{}|RALPH_TASK.md", file.display()),
        &["--max-iterations", "5"],
    );
    assert_exit(&out, 8);
    assert!(
        said(&out).contains("the form posts (left unchecked outside the criteria section)"),
        "{}",
        said(&out)
    );
}

/// A task file written for another Ralph-loop tool: its keys hold lists and mappings.
const OTHER_TOOLS: &str = "---
task: Landing page
completion_criteria:
  - all boxes checked
  - the build passes
browser_validation:
  enabled: true
  viewport: 390x844
max_iterations: 5
---
# Task: Landing page

## Success Criteria
- [ ] the hero renders
";

/// Promise: keys other tools write are a warning naming file and line, shown once at the start
/// of a run and by `status`, and the run goes on (ralph's own `max_iterations` still read).
/// Control: before issue 18 the file was refused (exit 1, "unknown field").
#[test]
fn frontmatter_of_other_tools_runs_with_a_warning_naming_file_and_line() {
    let env = TestEnv::new();
    env.write("RALPH_TASK.md", OTHER_TOOLS);
    env.commit_all("initial");
    let out = env.run_fake("check", &["--json"]);
    assert_exit(&out, 0);
    let err = stderr(&out);
    for (line, key) in [(3, "completion_criteria"), (6, "browser_validation")] {
        let warning =
            format!("RALPH_TASK.md:{line}: frontmatter key `{key}` is not ralph's: ignored");
        assert_eq!(err.matches(&warning).count(), 1, "{err}");
    }
    let started = events_named(&out, "run_started");
    assert_eq!(started[0]["max_iterations"], 5, "{started:?}");
    let out = env.ralph(&["status"]);
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains("RALPH_TASK.md:6: frontmatter key `browser_validation`"),
        "{}",
        said(&out)
    );
    let v = status_json(&env);
    assert_eq!(v["task_warnings"].as_array().map(Vec::len), Some(2), "{v}");
}

/// Promise: `max_cost` in the frontmatter bounds the run (exit 10 once the cost reaches it).
/// Control: the same task without it runs to completion; before issue 18 the key was refused.
#[test]
fn max_cost_in_frontmatter_takes_effect() {
    let setup = |frontmatter: &str| {
        let env = TestEnv::new();
        env.write_task(&["c1", "c2", "c3", "c4", "c5"], frontmatter);
        env.commit_all("initial");
        env
    };
    let script = "check+claude-result:0.4";
    let control = setup("");
    let out = run_claude_fake(&control, "run", script, &[], Duration::from_secs(60));
    assert_exit(&out, 0);
    assert!(control.agent_ran(5));

    let env = setup("max_cost: 1\n");
    let out = run_claude_fake(&env, "run", script, &[], Duration::from_secs(60));
    assert_exit(&out, 10);
    // 0.4, 0.8, 1.2: the third iteration reaches the budget.
    assert!(env.agent_ran(3) && !env.agent_ran(4));
    assert_eq!(status_json(&env)["halt_reason"], "budget");
}

/// Promise: `status` on a task file ralph refuses says so with the error (file:line) and exits
/// 1; `--json` still prints one object, with `refused` and no made-up counts. Control: before
/// issue 18 it said "No run yet", 0/0 criteria, exit 0.
#[test]
fn status_on_a_refused_task_file_says_so_and_exits_one() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\nmax_iterations: many\n---\n## Success Criteria\n- [ ] a\n",
    );
    env.commit_all("initial");
    let out = env.ralph(&["status"]);
    assert_exit(&out, 1);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(!so.contains("No run yet") && !so.contains("0/0"), "{so}");
    assert!(so.contains("RALPH_TASK.md is refused"), "{so}");
    assert!(
        se.contains("error: ")
            && se.contains("RALPH_TASK.md:3: invalid frontmatter: max_iterations"),
        "{se}"
    );
    let out = env.ralph(&["status", "--json"]);
    assert_exit(&out, 1);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["refused"]["line"], 3, "{v}");
    assert!(
        v["refused"]["error"]
            .as_str()
            .unwrap()
            .contains("RALPH_TASK.md:3:")
    );
    assert!(v["done"].is_null() && v["total"].is_null(), "{v}");
    // `run` refuses it with the same error.
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("RALPH_TASK.md:3: invalid frontmatter"));
    let out = env.ralph(&["status", "--all"]);
    assert_exit(&out, 1);
    assert!(stdout(&out).contains("task file refused"), "{}", said(&out));
}

/// Promise: after a run, a task file left unreadable is reported with the run's own record
/// (iteration, counts as recorded) and the error, exit 1.
#[test]
fn status_after_a_run_on_a_file_refused_now() {
    let env = TestEnv::new();
    env.write_task(&["a", "b"], "");
    env.commit_all("initial");
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\ntimeout: soon\n---\n## Success Criteria\n- [x] a\n- [ ] b\n",
    );
    let out = env.ralph(&["status"]);
    assert_exit(&out, 1);
    assert!(stdout(&out).contains("Iteration: 1/1"), "{}", said(&out));
    assert!(
        stderr(&out)
            .contains("RALPH_TASK.md:3: invalid frontmatter: timeout: `soon` is not a duration"),
        "{}",
        said(&out)
    );
    let out = env.ralph(&["status", "--json"]);
    assert_exit(&out, 1);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        (v["done"].clone(), v["total"].clone()),
        (1.into(), 2.into())
    );
    assert_eq!(v["refused"]["line"], 3);
}

/// Promise: a criteria heading with no task item under it does not hide the criteria the
/// document holds elsewhere: every checkbox counts, with a warning naming the heading's line.
/// Control: before issue 18 the file was refused ("no criteria", exit 1).
#[test]
fn an_empty_criteria_heading_falls_through_to_every_checkbox() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n---\n# Task: t\n\n## Success Criteria\n\nEvery phase below is done.\n\n## Phase 1\n- [ ] a\n- Frontend\n  - [ ] nested b\n",
    );
    env.commit_all("initial");
    let out = env.run_fake("check", &["--max-iterations", "5"]);
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains(
            "RALPH_TASK.md:6: no criterion under \"Success Criteria\": every checkbox in the document counts"
        ),
        "{}",
        said(&out)
    );
    assert_eq!(env.iter_records().len(), 2);
    assert!(env.read("RALPH_TASK.md").contains("  - [x] nested b"));
}

/// Promise: a box with no text (`- [ ]`, `- [ ]   `) is no criterion, as GFM renders it: the
/// task is complete once its one real criterion is checked. Control: before issue 18 both
/// counted (1/3): the run went on past the real criterion and never completed.
#[test]
fn a_box_without_text_is_no_criterion() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n---\n## Success Criteria\n- [ ] the only criterion\n- [ ]\n- [ ]   \n",
    );
    env.commit_all("initial");
    let out = env.run_fake("check", &["--max-iterations", "3"]);
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 1);
    assert!(env.iter_records()[0].starts_with("ITER 1 | 1/1 criteria"));
}

/// Promise: `run --dry-run` counts the criteria of every section. Control: before issue 18 it
/// said 1/2 (phase 1 only).
#[test]
fn dry_run_counts_every_section() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        &PHASED.replace("- [ ] the project builds", "- [x] the project builds"),
    );
    env.commit_all("initial");
    let out = env.ralph(&["run", "--dry-run", "--agent-cmd", "true"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("(RALPH_TASK.md; 1/6 criteria checked)")
            || stdout(&out).contains("1/6 criteria checked"),
        "{}",
        said(&out)
    );
}
