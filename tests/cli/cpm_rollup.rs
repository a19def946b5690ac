//! CPM mode against the roll-up as the real plugin runs it (cpm 3.11.0's contract, through the
//! stand-in `testing/cpm/coverage-rollup.sh`): no SUMMARY in epic scope, a requirement-level
//! SUMMARY in spec scope, diagnostics on stderr only, exit 1 on a spec it cannot read or parse,
//! relative paths taken against `CLAUDE_PROJECT_DIR`. One test per way ralph got it wrong.

use crate::common::*;
use crate::cpm::{
    epic, matrix, output, plan_script, run_cpm, run_cpm_env, setup, spec_doc, tick, unit_matrix,
    unit_rows,
};

const EPIC: &str = "docs/epics/01-epic-accounts.md";
const MATRIX: &str = "docs/epics/01-coverage-accounts.md";
const SPEC: &str = "docs/specifications/03-spec-search.md";

/// Epic scope prints no SUMMARY: ralph counts the rows, so one row verified per iteration is
/// progress every time, the progress line reads rows, and the COVERAGE line its own counts.
#[test]
fn an_epic_verified_one_row_per_iteration_completes_in_eight() {
    let (env, rollup) = setup();
    env.write(EPIC, &epic("In Progress", None));
    env.write(MATRIX, &unit_matrix("", EPIC, &unit_rows(8)));
    env.commit_all("initial");
    let out = run_cpm(&env, &tick(&env, MATRIX), &[EPIC, "--rollup", &rollup]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(8) && !env.agent_ran(9));
    let so = stdout(&out);
    assert!(
        so.contains(
            "COVERAGE: 8 of 8 rows marked verified across 1 matrix -- aggregation, not verification"
        ),
        "{so}"
    );
    assert!(so.contains("ALL_EPICS_COMPLETE"), "{so}");
    assert!(so.contains("Progress: 3/8 rows"), "{so}");
    // Exit 3 names the rows still unverified.
    assert!(
        so.contains("unverified: FR2 — Story 2; FR3 — Story 3"),
        "{so}"
    );
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    let recs = env.read(st["iterations_log"].as_str().unwrap());
    let third = recs.lines().nth(2).unwrap();
    assert!(
        third.starts_with("ITER 3 | 3 of 8 rows marked verified across 1 matrix | exit 3 | "),
        "{recs}"
    );
    assert!(!so.contains("Stuck"), "{so}");
}

/// SUMMARY counts requirements: a requirement on seven rows stays in progress until the
/// seventh, but ralph's rows move one by one.
#[test]
fn a_requirement_on_seven_rows_completes_in_spec_mode() {
    let (env, rollup) = setup();
    env.write(SPEC, &spec_doc(&[("FR1", "search works")]));
    env.commit_all("initial");
    let rows: Vec<(&str, &str)> = (1..=7).map(|_| ("FR1", "Story 1")).collect();
    let script = plan_script(
        &env,
        &rows,
        &tick(&env, "docs/epics/03-01-coverage-search.md"),
    );
    let out = run_cpm(&env, &script, &[SPEC, "--rollup", &rollup]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(8) && !env.agent_ran(9));
    assert!(env.agent_prompt(1).contains("/cpm:epics"));
    let so = stdout(&out);
    assert!(
        so.contains(
            "COVERAGE: 7 of 7 rows marked verified across 1 matrix, 1 of 1 requirement traced -- aggregation of the marks"
        ),
        "{so}"
    );
    assert!(so.contains("SPEC_DELIVERED"), "{so}");
}

/// Spec mode's phase comes from the roll-up's exit code: a spec it cannot parse (exit 1) is
/// a check that could not run, never phase 1, and the pre-flight says so before any agent.
#[test]
fn a_spec_the_rollup_cannot_parse_never_starts_planning() {
    let (env, rollup) = setup();
    env.write(SPEC, "# Spec: search\n\nSearch should work, somehow.\n");
    env.write(
        "docs/epics/03-01-coverage-search.md",
        &unit_matrix(SPEC, "docs/epics/03-01-epic-search.md", &unit_rows(1)),
    );
    env.commit_all("initial");
    let out = run_cpm(&env, "idle", &[SPEC, "--rollup", &rollup]);
    assert_exit(&out, 7);
    assert!(!env.agent_ran(1), "{}", env.agent_prompt(1));
    assert!(
        output(&out).contains("no requirements found"),
        "{}",
        output(&out)
    );
}

/// Pre-flight exit 5: only target-only rows are left, so nothing is spawned.
#[test]
fn preflight_target_only_rows_halt_before_any_agent() {
    let (env, rollup) = setup();
    env.write(EPIC, &epic("In Progress", None));
    env.write(
        MATRIX,
        &matrix(
            "",
            EPIC,
            &[
                ("FR1", "Story 1", "[unit]", true),
                ("ENV1", "Story 2", "[target]", false),
            ],
        ),
    );
    env.commit_all("initial");
    let out = run_cpm(&env, "idle", &[EPIC, "--rollup", &rollup]);
    assert_exit(&out, 6);
    assert!(!env.agent_ran(1));
    let all = output(&out);
    assert!(
        all.contains("TARGET-ONLY: 1 rows unverifiable in this environment"),
        "{all}"
    );
    assert!(all.contains("ENV1 — Story 2"), "{all}");
}

/// Epics `/cpm:epics` writes get their `[plan]` tags stripped, logged, before `/cpm:do`.
#[test]
fn plan_tags_cpm_epics_wrote_are_stripped_before_cpm_do() {
    let (env, rollup) = setup();
    env.write(SPEC, &spec_doc(&[("FR1", "search works")]));
    env.commit_all("initial");
    let look = agent_sh(
        &env,
        "look",
        "grep -c '\\[plan\\]' docs/epics/03-01-epic-search.md > plan-tags.txt || true\n\
         sed -i '0,/| |$/s//| ✓ |/' docs/epics/03-01-coverage-search.md",
    );
    let script = plan_script(&env, &[("FR1", "Story 1")], &look);
    let out = run_cpm(&env, &script, &[SPEC, "--rollup", &rollup]);
    assert_exit(&out, 0);
    assert_eq!(
        env.read("plan-tags.txt"),
        "0\n",
        "iteration 2 met [plan] tags"
    );
    let activity = env.activity();
    assert!(
        activity.contains("Stripped [plan] from Story 1: Login (docs/epics/03-01-epic-search.md)"),
        "{activity}"
    );
    assert!(stdout(&out).contains("Stripped [plan] from Story 1: "));
}

/// Exit 9 names the requirements `/cpm:epics` left untraced, not a count.
#[test]
fn the_partial_set_halt_names_the_untraced_requirements() {
    let (env, rollup) = setup();
    env.write(
        SPEC,
        &spec_doc(&[("FR1", "search works"), ("FR2", "results are ranked")]),
    );
    env.commit_all("initial");
    let script = plan_script(&env, &[("FR1", "Story 1")], "idle");
    let out = run_cpm(&env, &script, &[SPEC, "--rollup", &rollup]);
    assert_exit(&out, 9);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    let so = stdout(&out);
    assert!(so.contains("- FR2 — results are ranked"), "{so}");
    assert!(so.contains("Traced: FR1"), "{so}");
}

/// A coverage matrix whose name holds `-epic-` is no epic: a range leaves it out.
#[test]
fn a_range_leaves_out_a_matrix_named_like_an_epic() {
    let (env, rollup) = setup();
    let epic_path = "docs/epics/02-epic-epic-scope.md";
    let m = "docs/epics/02-coverage-epic-scope.md";
    env.write(epic_path, &epic("In Progress", None));
    env.write(m, &unit_matrix("", epic_path, &unit_rows(2)));
    env.commit_all("initial");
    let out = run_cpm(&env, &tick(&env, m), &["2..2", "--rollup", &rollup]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    let p1 = env.agent_prompt(1);
    assert!(p1.contains(epic_path) && !p1.contains(m), "{p1}");
}

/// ... and spec mode starts beside one (it has no `**Status**`, and never needed one).
#[test]
fn spec_mode_starts_beside_a_matrix_named_like_an_epic() {
    let (env, rollup) = setup();
    let epic_path = "docs/epics/03-01-epic-epic-tags.md";
    let m = "docs/epics/03-01-coverage-epic-tags.md";
    env.write(SPEC, &spec_doc(&[("FR1", "search works")]));
    env.write(epic_path, &epic("In Progress", Some(SPEC)));
    env.write(m, &unit_matrix(SPEC, epic_path, &unit_rows(1)));
    env.commit_all("initial");
    let out = run_cpm(&env, &tick(&env, m), &[SPEC, "--rollup", &rollup]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    assert!(env.agent_prompt(1).contains("/cpm:do"));
}

/// Inside Claude Code, `CLAUDE_PROJECT_DIR` names the project Claude was opened in; the
/// roll-up resolves relative paths against it first. ralph passes absolute paths and sets it
/// to the work tree.
#[test]
fn claude_project_dir_naming_another_project_changes_nothing() {
    let (env, rollup) = setup();
    env.write(EPIC, &epic("In Progress", None));
    env.write(MATRIX, &unit_matrix("", EPIC, &unit_rows(1)));
    env.commit_all("initial");
    let elsewhere = env.plain_dir();
    let out = run_cpm_env(
        &env,
        &tick(&env, MATRIX),
        &[EPIC, "--rollup", &rollup],
        &[("CLAUDE_PROJECT_DIR", elsewhere.to_str().unwrap())],
    );
    assert_exit(&out, 0);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
}

/// When the roll-up cannot run, ralph shows why: the script's stderr, and the command to run
/// by hand.
#[test]
fn a_rollup_that_cannot_run_shows_what_it_said() {
    let (env, rollup) = setup();
    env.write(EPIC, &epic("In Progress", None));
    env.write(MATRIX, &unit_matrix("", EPIC, &unit_rows(2)));
    env.commit_all("initial");
    let lose = agent_sh(&env, "lose", &format!("rm -f {MATRIX}"));
    let out = run_cpm(&env, &lose, &[EPIC, "--rollup", &rollup]);
    assert_exit(&out, 7);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    let all = output(&out);
    assert!(
        all.contains("It said:") && all.contains("coverage-rollup: cannot read the matrix for"),
        "{all}"
    );
    assert!(
        all.contains("Check it by hand: CLAUDE_PROJECT_DIR=")
            && all.contains(&format!(" bash {rollup} --epic /")),
        "{all}"
    );
    assert!(
        env.activity().contains("cannot read the matrix for"),
        "{}",
        env.activity()
    );
}
