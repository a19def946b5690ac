//! The verdict command (SPEC §3.3): its exit code decides; its SUMMARY line is relayed verbatim.

use crate::common::*;

/// A verdict script that answers `answers[k]` (exit code, stdout) on its k-th run (the last
/// answer repeats), counting runs in a file outside the repository.
pub(crate) fn verdict_script(env: &TestEnv, answers: &[(i32, &str)]) -> String {
    let counter = env.home.join("verdict-count");
    let mut arms = String::new();
    for (i, (code, out)) in answers.iter().enumerate() {
        let pat = if i + 1 == answers.len() {
            "*".to_string()
        } else {
            (i + 1).to_string()
        };
        arms.push_str(&format!("  {pat}) printf '%s\\n' '{out}'; exit {code};;\n"));
    }
    let script = format!(
        "#!/bin/sh\nn=$(cat '{c}' 2>/dev/null || echo 0)\nn=$((n+1))\necho $n > '{c}'\ncase $n in\n{arms}esac\n",
        c = counter.display()
    );
    let path = env.home.join("verdict.sh");
    std::fs::write(&path, script).unwrap();
    format!("sh '{}'", path.display())
}

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["v1", "v2", "v3"], "");
    env.commit_all("initial");
    env
}

#[test]
fn verdict_three_then_zero_completes_when_it_says_zero() {
    let env = setup();
    let cmd = verdict_script(
        &env,
        &[
            (
                3,
                "row R2 unverified\nSUMMARY: 1 of 2 rows verified, 1 unverified",
            ),
            (0, "SUMMARY: 2 of 2 rows verified, 0 unverified"),
        ],
    );
    let out = env.run_fake("churn", &["--verdict-cmd", &cmd]);
    assert_exit(&out, 0);
    let recs = env.iter_records();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(
        recs[0].starts_with("ITER 1 | SUMMARY: 1 of 2 rows verified, 1 unverified | exit 3 | "),
        "{recs:?}"
    );
    assert!(
        recs[1].starts_with("ITER 2 | SUMMARY: 2 of 2 rows verified, 0 unverified | exit 0 | ")
    );
    assert!(
        stdout(&out).contains("Verdict exit 3: SUMMARY: 1 of 2 rows verified"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn all_boxes_checked_with_the_verdict_still_three_does_not_complete() {
    let env = TestEnv::new();
    env.write_task(&["only"], "");
    env.commit_all("initial");
    let cmd = verdict_script(&env, &[(3, "SUMMARY: 0 of 1 verified")]);
    let out = env.run_fake(
        "check,churn",
        &["--verdict-cmd", &cmd, "--max-iterations", "2"],
    );
    assert_exit(&out, 3);
    assert!(env.read("RALPH_TASK.md").contains("- [x] only"));
}

#[test]
fn verdict_five_halts_target_only_after_that_iteration() {
    let env = setup();
    let cmd = verdict_script(
        &env,
        &[
            (3, "SUMMARY: 1 unverified"),
            (
                5,
                "TARGET-ONLY: R4 renders on the real CDN\nTARGET-ONLY: R9 SSO with the real IdP\nSUMMARY: 2 target-only",
            ),
        ],
    );
    let out = env.run_fake("churn", &["--verdict-cmd", &cmd]);
    assert_exit(&out, 6);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    let so = stdout(&out);
    assert!(
        so.contains("TARGET-ONLY: 2 rows unverifiable in this environment"),
        "{so}"
    );
    assert!(
        so.contains("R4 renders on the real CDN") && so.contains("R9 SSO"),
        "{so}"
    );
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert_eq!(st["halt_reason"], "target_only");
}

#[test]
fn verdict_that_cannot_run_twice_in_a_row_halts_seven() {
    let env = setup();
    let cmd = verdict_script(
        &env,
        &[
            (3, "SUMMARY: a"),
            (2, "boom"),
            (3, "SUMMARY: b"),
            (127, "sh: not found"),
        ],
    );
    let out = env.run_fake("churn", &["--verdict-cmd", &cmd]);
    assert_exit(&out, 7);
    // Iterations 2 (exit 2) then 3 (exit 3) reset the count; 4 and 5 fail in a row.
    assert!(env.agent_ran(5) && !env.agent_ran(6));
    assert!(
        env.activity()
            .contains("the verdict command could not run (exit 127)")
    );
}

/// Exit 4 means "nothing planned" only to CPM spec mode's roll-up; from any other verdict
/// command it is a command that could not run (SPEC §3.3): twice in a row halts with 7. Before,
/// it was read as "nothing planned" and the run went on to max iterations.
#[test]
fn verdict_four_outside_spec_mode_is_a_command_that_could_not_run() {
    let env = setup();
    let cmd = verdict_script(&env, &[(4, "what plan?")]);
    let out = env.run_fake("churn", &["--verdict-cmd", &cmd, "--max-iterations", "5"]);
    assert_exit(&out, 7);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
}

#[test]
fn verdict_command_from_frontmatter() {
    let env = TestEnv::new();
    let cmd = verdict_script(&env, &[(0, "SUMMARY: all verified")]);
    env.write_task(
        &["f1"],
        &format!("verdict_command: \"{}\"\n", cmd.replace('\'', "")),
    );
    env.commit_all("initial");
    let out = env.run_fake("churn", &[]);
    assert_exit(&out, 0);
    assert!(env.iter_records()[0].contains("| SUMMARY: all verified | exit 0 |"));
}
