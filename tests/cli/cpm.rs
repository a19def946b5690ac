//! CPM epic and spec mode (SPEC §3.4) over fake roll-up scripts.

use std::time::Duration;

use crate::common::*;

/// The project's stand-in for CPM's `coverage-rollup.sh` (cpm 3.11.0's records and exit codes),
/// where the sandbox sees it (a copy when the clone is in `/tmp`).
pub(crate) fn rollup_path() -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testing/cpm/coverage-rollup.sh"
    );
    visible_copy(std::path::Path::new(script))
        .display()
        .to_string()
}

pub(crate) fn setup() -> (TestEnv, String) {
    let env = TestEnv::new();
    env.write("README.md", "project\n");
    (env, rollup_path())
}

/// An epic doc as `/cpm:epics` writes one, `[plan]` tags included.
pub(crate) fn epic(status: &str, spec: Option<&str>) -> String {
    let source = spec.map_or(String::new(), |s| format!("**Source spec**: {s}\n"));
    format!(
        "# Epic: Accounts\n\n**Status**: {status}\n{source}\n## Story 1: Login [plan]\n\n**Story**: 1\n\n### Task 1.1: Form [plan]\n\n## Story 2: Logout\n"
    )
}

/// A spec with these `(id, text)` requirements under `### Must Have`.
pub(crate) fn spec_doc(reqs: &[(&str, &str)]) -> String {
    let mut s = "# Spec: search\n\n## Functional Requirements\n\n### Must Have\n\n".to_string();
    for (id, text) in reqs {
        s.push_str(&format!("- **{id}** — {text}\n"));
    }
    s
}

/// A coverage matrix as `/cpm:epics` writes one: `(label, story, approach, verified)` rows.
pub(crate) fn matrix(spec: &str, epic: &str, rows: &[(&str, &str, &str, bool)]) -> String {
    let mut s = format!(
        "# Coverage Matrix: {epic}\n\n**Source spec**: {spec}\n**Epic**: {epic}\n**Date**: 2026-01-01\n\n\
         | # | Spec Requirement | Spec Text (verbatim) | Story Criterion (verbatim) | Covered by | Spec Test Approach | Verified |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for (n, (label, story, approach, verified)) in rows.iter().enumerate() {
        let tick = if *verified { " ✓ " } else { " " };
        s.push_str(&format!(
            "| {} | {label} | {label} holds | {label} is checked {approach} | {story} | `{approach}` |{tick}|\n",
            n + 1
        ));
    }
    s
}

/// `n` unverified `[unit]` rows `FR1`… on stories `Story 1`….
pub(crate) fn unit_rows(n: usize) -> Vec<(String, String)> {
    (1..=n)
        .map(|i| (format!("FR{i}"), format!("Story {i}")))
        .collect()
}

/// [`matrix`] over [`unit_rows`]-shaped rows, none verified.
pub(crate) fn unit_matrix(spec: &str, epic: &str, rows: &[(String, String)]) -> String {
    let rows: Vec<(&str, &str, &str, bool)> = rows
        .iter()
        .map(|(l, s)| (l.as_str(), s.as_str(), "[unit]", false))
        .collect();
    matrix(spec, epic, &rows)
}

/// The fake agent's step that marks the first unverified row of `matrix` verified, as
/// `/cpm:do` does when a story's criterion passes.
pub(crate) fn tick(env: &TestEnv, matrix: &str) -> String {
    agent_sh(env, "tick", &format!("sed -i '0,/| |$/s//| ✓ |/' {matrix}"))
}

pub(crate) fn run_cpm(env: &TestEnv, script: &str, args: &[&str]) -> std::process::Output {
    run_cpm_env(env, script, args, &[])
}

pub(crate) fn run_cpm_env(
    env: &TestEnv,
    script: &str,
    args: &[&str],
    extra: &[(&str, &str)],
) -> std::process::Output {
    let agent = format!("'{}'", fake_agent().display());
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend(["--agent-cmd", &agent, "--yes", "--grace", "1s"]);
    let mut vars = vec![("FAKE_AGENT_SCRIPT", script)];
    vars.extend_from_slice(extra);
    env.ralph_with_limit(&all, &vars, Duration::from_secs(120))
}

/// Everything ralph printed, stdout then stderr.
pub(crate) fn output(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

#[test]
fn epic_mode_completes_when_the_rollup_says_zero() {
    let (env, rollup) = setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
    let m = "docs/epics/01-coverage-accounts.md";
    env.write(
        m,
        &unit_matrix("", "docs/epics/01-epic-accounts.md", &unit_rows(2)),
    );
    env.commit_all("initial");
    let out = run_cpm(
        &env,
        &tick(&env, m),
        &["docs/epics/01-epic-accounts.md", "--rollup", &rollup],
    );
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(so.contains("ALL_EPICS_COMPLETE"), "{so}");
    assert!(so.lines().any(|l| l.starts_with("COVERAGE: ")), "{so}");
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    // [plan] stripped before the first iteration, and logged.
    let doc = env.read("docs/epics/01-epic-accounts.md");
    assert!(!doc.contains("[plan]"), "{doc}");
    assert!(so.contains("Stripped [plan] from Story 1: "), "{so}");
    assert!(env.activity().contains("Stripped [plan] from Story 1: "));
    // The prompt is the CPM template working the epic.
    let p1 = env.agent_prompt(1);
    assert!(
        p1.contains("/cpm:do") && p1.contains("01-epic-accounts.md"),
        "{p1}"
    );
    assert!(!p1.contains("/cpm:epics"));
    // ITER records go to the CPM log, with the roll-up's exit code.
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    let log = st["iterations_log"].as_str().unwrap().to_string();
    assert!(log.starts_with("docs/plans/.cpm-ralph-log-"), "{log}");
    let recs = env.read(&log);
    let recs: Vec<&str> = recs.lines().collect();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(
        recs[0].starts_with("ITER 1 | ") && recs[0].contains("| exit 3 |"),
        "{recs:?}"
    );
    assert!(
        recs[1].starts_with("ITER 2 | ") && recs[1].contains("| exit 0 |"),
        "{recs:?}"
    );
    assert_eq!(recs[1].rsplit(" | ").next().unwrap(), env.porcelain_cksum());
    // The session-state ignore lines were applied (--yes) and said.
    assert!(env.read(".gitignore").contains("/docs/plans/.cpm-*"));
}

#[test]
fn auto_discovery_with_every_epic_complete_has_nothing_to_run() {
    let (env, rollup) = setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("Complete", None));
    env.write("docs/epics/02-epic-billing.md", &epic("Done", None));
    env.write("docs/specifications/03-spec-search.md", "# Spec: search\n");
    env.commit_all("initial");
    let out = run_cpm(&env, "check", &["--rollup", &rollup]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(
        so.contains("No incomplete epics found. Nothing to run."),
        "{so}"
    );
    assert!(
        so.contains("ralph run docs/specifications/03-spec-search.md"),
        "{so}"
    );
    assert!(!env.agent_ran(1));
}

#[test]
fn spec_mixed_with_epic_is_a_usage_error() {
    let (env, rollup) = setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
    env.write("docs/specifications/03-spec-search.md", "# Spec\n");
    env.commit_all("initial");
    let out = run_cpm(
        &env,
        "check",
        &[
            "docs/specifications/03-spec-search.md",
            "docs/epics/01-epic-accounts.md",
            "--rollup",
            &rollup,
        ],
    );
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("03-spec-search.md") && err.contains("01-epic-accounts.md"),
        "{err}"
    );
    assert!(!env.agent_ran(1));
}

#[test]
fn spec_mode_plans_once_then_delivers() {
    let (env, rollup) = setup();
    env.write(
        "docs/specifications/03-spec-search.md",
        &spec_doc(&[("FR1", "search works")]),
    );
    env.commit_all("initial");
    let script = plan_script(
        &env,
        &[("FR1", "Story 1")],
        &format!(
            "churn,{}",
            tick(&env, "docs/epics/03-01-coverage-search.md")
        ),
    );
    let out = run_cpm(
        &env,
        &script,
        &["docs/specifications/03-spec-search.md", "--rollup", &rollup],
    );
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(so.contains("SPEC_DELIVERED"), "{so}");
    assert!(so.lines().any(|l| l.starts_with("COVERAGE: ")), "{so}");
    let p1 = env.agent_prompt(1);
    assert!(p1.contains("/cpm:epics"), "iteration 1 plans: {p1}");
    for n in 2..=3 {
        let p = env.agent_prompt(n);
        assert!(p.contains("/cpm:do"), "iteration {n}: {p}");
        assert!(
            !p.contains("/cpm:epics"),
            "iteration {n} must not plan again"
        );
    }
    assert!(!env.agent_ran(4));
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert_eq!(st["mode"], "cpm-spec");
    let recs = env.read(st["iterations_log"].as_str().unwrap());
    assert_eq!(recs.lines().count(), 3, "{recs}");
    assert!(
        recs.lines().nth(1).unwrap().contains(
            "| 0 of 1 row marked verified across 1 matrix, 1 of 1 requirement traced | exit 3 |"
        ),
        "{recs}"
    );
}

#[test]
fn dry_run_in_each_mode_prints_everything_and_touches_nothing() {
    let (env, rollup) = setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
    env.write("docs/specifications/03-spec-search.md", "# Spec\n");
    env.write_task(&["c1"], "");
    env.write(
        "PRD.md",
        "# P\n\n## Goal\n\nG.\n\n### Task 1: One\n\n**Acceptance Criteria:**\n- [ ] one works\n",
    );
    env.write("PROGRESS.md", "## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | One | PENDING | |\n");
    env.commit_all("initial");
    let agent = format!("'{}'", fake_agent().display());
    let cases: [(&[&str], &str, &str); 4] = [
        (&[], "mode: checklist", "You are iteration 1"),
        (&["PRD.md"], "mode: table", "# Ralph iteration 1/9: task 1"),
        (
            &["docs/epics/01-epic-accounts.md"],
            "mode: cpm-epic",
            "/cpm:do",
        ),
        (
            &["docs/specifications/03-spec-search.md"],
            "mode: cpm-spec",
            "/cpm:epics",
        ),
    ];
    for (targets, mode, prompt) in cases {
        let mut args = vec!["run", "--dry-run"];
        args.extend_from_slice(targets);
        args.extend([
            "--agent-cmd",
            &agent,
            "--rollup",
            &rollup,
            "--max-iterations",
            "9",
        ]);
        let out = env.ralph(&args);
        assert_exit(&out, 0);
        let so = stdout(&out);
        for needle in [
            mode,
            "argv: ",
            "max iterations 9",
            "--- prompt of iteration 1 ---",
            prompt,
        ] {
            assert!(
                so.contains(needle),
                "{targets:?}: {needle:?} missing from\n{so}"
            );
        }
        assert_eq!(
            env.git(&["status", "--porcelain", "--ignored"]),
            "",
            "{targets:?} wrote something"
        );
    }
    assert!(
        env.read("docs/epics/01-epic-accounts.md")
            .contains("[plan]"),
        "dry-run strips nothing"
    );
}

#[test]
fn preflight_reports_earlier_runs_and_warns_about_an_armed_stop_hook() {
    let (env, rollup) = setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
    env.write(
        "docs/plans/.cpm-ralph-log-old.md",
        "ITER 1 | a | exit 3 | abc1234 | 1 2\nITER 2 | a | exit 3 | abc1234 | 1 2\nITER 3 | a | exit 3 | abc1234 | 1 2\n",
    );
    env.write(".claude/ralph-loop.local.md", "armed\n");
    let m = "docs/epics/01-coverage-accounts.md";
    env.write(
        m,
        &unit_matrix("", "docs/epics/01-epic-accounts.md", &unit_rows(2)),
    );
    env.commit_all("initial");
    let out = run_cpm(&env, &tick(&env, m), &["--rollup", &rollup]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(
        so.contains("earlier run: ") && so.contains(".cpm-ralph-log-old.md"),
        "{so}"
    );
    assert!(
        stderr(&out).contains(".claude/ralph-loop.local.md exists"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn without_a_rollup_cpm_mode_refuses_to_start_unless_yes() {
    let (env, _) = setup();
    env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
    env.commit_all("initial");
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "run",
            "docs/epics/01-epic-accounts.md",
            "--agent-cmd",
            &agent,
        ],
        &[("CLAUDE_PLUGIN_ROOT", "/nonexistent")],
        Duration::from_secs(20),
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no coverage roll-up script found"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("--rollup"), "{}", stderr(&out));
    assert!(!env.agent_ran(1));
}

/// The planning iteration's step: write the spec's epic (with `[plan]` tags) and its matrix
/// over `rows` as `/cpm:epics` would, then `rest` (the next iterations' steps).
pub(crate) fn plan_script(env: &TestEnv, rows: &[(&str, &str)], rest: &str) -> String {
    let spec = "docs/specifications/03-spec-search.md";
    let epic_src = env.home.join("epic.md");
    std::fs::write(&epic_src, epic("In Progress", Some(spec))).unwrap();
    let rows: Vec<(String, String)> = rows
        .iter()
        .map(|(l, s)| ((*l).to_string(), (*s).to_string()))
        .collect();
    let matrix_src = env.home.join("matrix.md");
    std::fs::write(
        &matrix_src,
        unit_matrix(spec, "docs/epics/03-01-epic-search.md", &rows),
    )
    .unwrap();
    format!(
        "copy:{}|docs/epics/03-01-epic-search.md+copy:{}|docs/epics/03-01-coverage-search.md,{rest}",
        epic_src.display(),
        matrix_src.display()
    )
}

/// CPM under `--sandbox`: the roll-up runs in the sandbox, whose `/tmp` is a private one, and
/// its captured output must still reach ralph (it was captured in the host's `/tmp`: every
/// roll-up "could not run", exit 7). The control is the same run without the sandbox.
#[test]
fn epic_mode_completes_in_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write("README.md", "project\n");
        env.write("docs/epics/01-epic-accounts.md", &epic("In Progress", None));
        let m = "docs/epics/01-coverage-accounts.md";
        env.write(
            m,
            &unit_matrix("", "docs/epics/01-epic-accounts.md", &unit_rows(2)),
        );
        env.commit_all("initial");
        let rollup = rollup_path();
        let mut args = vec!["docs/epics/01-epic-accounts.md", "--rollup", &rollup];
        if sandboxed {
            args.push("--sandbox");
        }
        // The fake agent's log is outside the repository: the sandbox's private /tmp instead.
        let log = [("FAKE_AGENT_LOG", "/tmp/fake-agent-log")];
        let out = run_cpm_env(&env, &tick(&env, m), &args, &log);
        assert_exit(&out, 0);
        assert!(
            stdout(&out).contains("ALL_EPICS_COMPLETE"),
            "{}",
            output(&out)
        );
    }
}
