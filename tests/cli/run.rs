//! `ralph run` in checklist mode: completion, stalls, stuck, limits, integrity, failures.

use crate::common::*;

const THREE: [&str; 3] = ["first criterion", "second criterion", "third criterion"];

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.write("README.md", "project\n");
    env.commit_all("initial");
    env
}

#[test]
fn honest_agent_completes_three_criteria_in_three_iterations() {
    let env = setup(&THREE);
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(so.contains("RALPH Loop Complete"), "{so}");
    assert!(so.contains("## Iteration 3/50 complete"), "{so}");
    assert!(!env.agent_ran(4));

    // Three iteration commits with their subjects and trailers, on top of the initial one.
    let subjects = env.commits();
    assert_eq!(
        subjects,
        vec![
            "ralph: iteration 3 — third criterion",
            "ralph: iteration 2 — second criterion",
            "ralph: iteration 1 — first criterion",
            "initial",
        ]
    );
    let body = env.git(&["log", "-1", "--format=%B"]);
    assert!(
        body.contains("\n\nRalph-Iteration: 3\nRalph-Run: "),
        "{body}"
    );
    let trailers = env.git(&["log", "-1", "--format=%(trailers:key=Ralph-Run,valueonly)"]);
    assert!(!trailers.trim().is_empty());

    // activity.log in the §5.4 format.
    let activity = env.activity();
    for n in 1..=3 {
        let line = activity
            .lines()
            .find(|l| {
                l.contains(&format!(
                    "] Iteration {n}: {n}/3 criteria complete (started: "
                ))
            })
            .unwrap_or_else(|| panic!("no line for iteration {n} in\n{activity}"));
        assert!(line.starts_with('['), "{line}");
        assert!(
            line.contains(", ended: ") && line.contains(", duration: "),
            "{line}"
        );
        assert!(line.ends_with(')'), "{line}");
    }

    // ITER records, the last fingerprint equal to what git prints now.
    let recs = env.iter_records();
    assert_eq!(recs.len(), 3, "{recs:?}");
    let head = env.git(&["rev-parse", "--short=7", "HEAD"]);
    let last = &recs[2];
    let want_prefix = format!("ITER 3 | 3/3 criteria | exit 0 | {} | ", head.trim());
    assert!(last.starts_with(&want_prefix), "{last} vs {want_prefix}");
    let fingerprint = last.rsplit(" | ").next().unwrap();
    assert_eq!(fingerprint, env.porcelain_cksum());
    assert_eq!(
        fingerprint, "4294967295 0",
        "the tree is clean after the run"
    );

    // Runtime files are never committed nor shown as untracked.
    let tracked = env.git(&["ls-files"]);
    for runtime in [
        "activity.log",
        "iterations.log",
        "state.json",
        "lock",
        "runs/",
    ] {
        assert!(
            !tracked.contains(&format!(".ralph/{runtime}")),
            "{runtime} committed:\n{tracked}"
        );
    }
    assert!(tracked.contains(".ralph/progress.md") && tracked.contains(".ralph/.gitignore"));
    assert_eq!(env.git(&["status", "--porcelain"]), "");

    // The progress file's status block says where the run ended.
    let progress = env.read(".ralph/progress.md");
    assert!(
        progress.contains("- Iteration: 3\n- Criteria completed: 3/3\n- Status: Complete"),
        "{progress}"
    );

    // Every iteration has its prompt and transcript.
    let run_id = trailers.trim();
    for n in 1..=3 {
        let dir = env.repo.join(".ralph/runs").join(run_id);
        assert!(dir.join(format!("iter-{n:03}.prompt.md")).exists());
        let transcript = std::fs::read_to_string(dir.join(format!("iter-{n:03}.log"))).unwrap();
        assert!(
            transcript.contains(&format!("fake agent: iteration {n}")),
            "{transcript}"
        );
    }
}

#[test]
fn agent_gets_ralph_environment_and_prompt() {
    let env = setup(&THREE);
    let out = env.run_fake("check", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    let vars = std::fs::read_to_string(env.log.join("env-1.txt")).unwrap();
    assert!(vars.contains("RALPH_ITERATION=1"), "{vars}");
    assert!(vars.contains("RALPH_MAX_ITERATIONS=1"), "{vars}");
    assert!(vars.contains("RALPH_RUN_ID="), "{vars}");
    assert!(
        vars.contains("RALPH_TASK_FILE=") && vars.contains("RALPH_TASK.md"),
        "{vars}"
    );
    let prompt = env.agent_prompt(1);
    assert!(prompt.contains("iteration 1 of 1"), "{prompt}");
    assert!(prompt.contains("\"first criterion\""), "{prompt}");
}

#[test]
fn idle_agent_stalls_at_iteration_three() {
    let env = setup(&THREE);
    let head_before = env.git(&["rev-parse", "--short=7", "HEAD"]);
    let out = env.run_fake("idle", &[]);
    assert_exit(&out, 4);
    let so = stdout(&out);
    let want = format!(
        "STALLED: 3 iterations with no change at {}",
        head_before.trim()
    );
    assert!(so.contains(&want), "{want} missing from\n{so}");
    assert!(env.agent_ran(3) && !env.agent_ran(4));
    assert_eq!(env.iter_records().len(), 3);
    // No iteration commit: bookkeeping alone never commits.
    assert_eq!(env.commits().len(), 1, "{:?}", env.commits());
    let last = env.iter_records().pop().unwrap();
    assert_eq!(last.rsplit(" | ").next().unwrap(), env.porcelain_cksum());
}

#[test]
fn churning_agent_gets_stuck_alert_in_fourth_prompt_and_halts_after_sixth() {
    let env = setup(&THREE);
    let out = env.run_fake("churn", &[]);
    assert_exit(&out, 5);
    for n in 1..=3 {
        assert!(
            !env.agent_prompt(n).contains("STUCK ALERT"),
            "prompt {n} has the alert"
        );
    }
    for n in 4..=6 {
        assert!(
            env.agent_prompt(n).contains("STUCK ALERT"),
            "prompt {n} lacks the alert"
        );
    }
    assert!(!env.agent_ran(7));
    assert!(
        env.activity()
            .contains("Stuck detected — 3 iterations with no progress")
    );
    assert!(stdout(&out).contains("Stuck"));
    // Each churn is committed as an iteration without criteria.
    assert!(env.commits()[0].starts_with("ralph: iteration 6 — no criteria completed"));
}

#[test]
fn max_iterations_exits_three_and_lists_what_remains() {
    let env = setup(&["a1", "a2", "a3", "a4", "a5"]);
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    assert_exit(&out, 3);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    let so = stdout(&out);
    assert!(so.contains("Max Iterations Reached"), "{so}");
    assert!(so.contains("- [ ] a3") && so.contains("- [ ] a5"), "{so}");
    assert!(!so.contains("- [ ] a2"), "{so}");
}

#[test]
fn completing_on_the_last_allowed_iteration_is_completion() {
    let env = setup(&["b1", "b2"]);
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    assert_exit(&out, 0);
}

#[test]
fn deleting_an_unchecked_criterion_halts_tampered() {
    let env = setup(&THREE);
    let out = env.run_fake("check,delete", &[]);
    assert_exit(&out, 8);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    let so = stdout(&out);
    assert!(
        so.contains("tampered") && so.contains("second criterion"),
        "{so}"
    );
    // The iteration's work is still committed, nothing lost.
    assert!(env.commits()[0].starts_with("ralph: iteration 2"));
}

#[test]
fn unchecking_is_a_regression_never_progress() {
    let env = setup(&THREE);
    let out = env.run_fake("check,uncheck,check,churn", &["--max-iterations", "5"]);
    assert_exit(&out, 3);
    let activity = env.activity();
    assert!(
        activity.contains("Iteration 2: regression: criterion unchecked: \"first criterion\""),
        "{activity}"
    );
    assert!(stdout(&out).contains("Regression"));
    // Re-checking the same box in iteration 3 is not progress: iterations 2, 3 and 4 make a
    // no-progress streak of 3, so the fifth prompt carries the alert.
    assert!(!env.agent_prompt(4).contains("STUCK ALERT"));
    assert!(
        env.agent_prompt(5).contains("STUCK ALERT"),
        "{}",
        env.activity()
    );
}

#[test]
fn a_promise_alone_never_completes() {
    let env = setup(&THREE);
    let out = env.run_fake(
        "churn+promise:DONE",
        &["--completion-promise", "DONE", "--max-iterations", "2"],
    );
    assert_exit(&out, 3);
    let env2 = setup(&THREE);
    let out = env2.run_fake("churn+promise:DONE", &["--max-iterations", "2"]);
    assert_exit(&out, 3);
}

#[test]
fn promise_as_second_factor_is_required_when_set() {
    let env = setup(&["only"]);
    // Checked but no promise: not complete.
    let out = env.run_fake(
        "check,churn",
        &["--completion-promise", "DONE", "--max-iterations", "2"],
    );
    assert_exit(&out, 3);
    let env = setup(&["only"]);
    let out = env.run_fake("check+promise:DONE", &["--completion-promise", "DONE"]);
    assert_exit(&out, 0);
}

#[test]
fn failing_agent_does_not_stop_the_loop() {
    let env = setup(&["c1", "c2"]);
    let out = env.run_fake("fail,check", &[]);
    assert_exit(&out, 0);
    assert!(
        env.activity()
            .contains("Iteration 1: agent exited with code 1")
    );
    let recs = env.iter_records();
    assert!(recs[0].contains("| exit 1 |"), "{recs:?}");
    assert_eq!(recs.len(), 3);
}

#[test]
fn test_command_must_pass_for_completion() {
    let env = setup(&["t1"]);
    // The agent checks the box but the tests fail until a file exists.
    let out = env.run_fake(
        "check,churn",
        &[
            "--test-command",
            "test -f churn.txt",
            "--max-iterations",
            "3",
        ],
    );
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    assert!(
        env.activity()
            .contains("Iteration 1: tests failed (exit 1): test -f churn.txt")
    );
}

#[test]
fn dirty_tree_is_committed_before_the_run() {
    let env = setup(&["d1"]);
    env.write("uncommitted.txt", "user work\n");
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    let commits = env.commits();
    assert!(
        commits[1].starts_with("ralph: state before run "),
        "{commits:?}"
    );
    let files = env.git(&["show", "--name-only", "--format=", "HEAD~1"]);
    assert!(files.contains("uncommitted.txt"), "{files}");
}

#[test]
fn agent_own_commit_is_respected() {
    let env = setup(&["e1", "e2"]);
    let out = env.run_fake("check+commit:agent did e1,check", &[]);
    assert_exit(&out, 0);
    let commits = env.commits();
    assert!(commits.contains(&"agent did e1".to_string()), "{commits:?}");
}

#[test]
fn no_commit_leaves_history_alone_and_fingerprint_shows_dirt() {
    let env = setup(&["f1", "f2"]);
    let out = env.run_fake("check", &["--no-commit"]);
    assert_exit(&out, 0);
    assert_eq!(env.commits(), vec!["initial"]);
    let last = env.iter_records().pop().unwrap();
    assert!(last.ends_with(&env.porcelain_cksum()), "{last}");
    assert_ne!(env.porcelain_cksum(), "4294967295 0");
}

#[test]
fn already_complete_spawns_nothing() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n---\n## Success Criteria\n- [x] done\n",
    );
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("already complete"));
    assert!(!env.agent_ran(1));
}

#[test]
fn dry_run_prints_everything_and_writes_nothing() {
    let env = setup(&THREE);
    let agent = format!("'{}' --prompt-file {{prompt_file}}", fake_agent().display());
    let out = env.ralph(&[
        "run",
        "--dry-run",
        "--agent-cmd",
        &agent,
        "--max-iterations",
        "7",
        "--timeout",
        "5m",
    ]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    for needle in [
        "mode: checklist",
        "argv: ",
        "--prompt-file",
        "max iterations 7",
        "timeout 5m",
        "You are iteration 1 of 7",
    ] {
        assert!(so.contains(needle), "{needle:?} missing from\n{so}");
    }
    assert!(!env.repo.join(".ralph").exists());
    assert!(!env.agent_ran(1));
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

#[test]
fn prompt_reaches_the_agent_by_file_and_by_stdin() {
    let env = setup(&["g1", "g2"]);
    let by_file = format!("'{}' --prompt-file {{prompt_file}}", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "run",
            "--agent-cmd",
            &by_file,
            "--yes",
            "--max-iterations",
            "1",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
        std::time::Duration::from_secs(60),
    );
    assert_exit(&out, 3);
    assert!(env.agent_prompt(1).contains("You are iteration 1 of 1"));
    // Without a placeholder the prompt arrives on stdin.
    let out = env.run_fake("check", &["--reset"]);
    assert_exit(&out, 0);
    assert!(env.agent_prompt(1).contains("RALPH loop"));
}

#[test]
fn frontmatter_settings_apply_and_flags_win() {
    let env = TestEnv::new();
    env.write_task(&["k1", "k2", "k3"], "max_iterations: 1\n");
    env.commit_all("initial");
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 3);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    let out = env.run_fake("check", &["--reset", "--max-iterations", "5"]);
    assert_exit(&out, 0);
}

#[test]
fn configuration_layers_in_precedence_order() {
    let env = TestEnv::new();
    env.write_task(&["k1"], "max_iterations: 3\n");
    env.write(
        ".ralph/config.toml",
        "max_iterations = 1\nstuck_threshold = 2\ntimeout = \"8m\"\n",
    );
    let user = env.home.join(".config/ralph");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("config.toml"),
        "timeout = \"7m\"\nidle_timeout = \"9m\"\n",
    )
    .unwrap();
    let limits = |args: &[&str], vars: &[(&str, &str)]| {
        let mut all = vec!["run", "--dry-run", "--agent-cmd", "true"];
        all.extend_from_slice(args);
        let out = env.ralph_with_limit(&all, vars, std::time::Duration::from_secs(20));
        assert_exit(&out, 0);
        stdout(&out)
            .lines()
            .find(|l| l.starts_with("limits: "))
            .unwrap()
            .to_string()
    };
    let l = limits(&[], &[]);
    assert!(
        l.contains("max iterations 3,"),
        "frontmatter beats project config: {l}"
    );
    assert!(
        l.contains("stuck threshold 2"),
        "project config applies: {l}"
    );
    assert!(
        l.contains("timeout 8m 00s,"),
        "project config beats user config: {l}"
    );
    assert!(
        l.contains("idle timeout 9m 00s"),
        "user config applies: {l}"
    );
    let l = limits(&[], &[("RALPH_MAX_ITERATIONS", "4")]);
    assert!(
        l.contains("max iterations 4,"),
        "environment beats frontmatter: {l}"
    );
    let l = limits(&["--max-iterations", "5"], &[("RALPH_MAX_ITERATIONS", "4")]);
    assert!(
        l.contains("max iterations 5,"),
        "flag beats environment: {l}"
    );
}

#[test]
fn json_output_is_only_json_lines_ending_in_halted() {
    let env = setup(&["j1", "j2"]);
    let out = env.run_fake("check", &["--json"]);
    assert_exit(&out, 0);
    let events = json_events(&out);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "run_started",
            "iteration_started",
            "iteration_finished",
            "iteration_started",
            "iteration_finished",
            "halted"
        ]
    );
    for e in &events {
        assert_eq!(e["schema_version"], 1);
        assert!(e["ts"].as_str().unwrap().contains('T'));
    }
    let fin = &events[4];
    assert_eq!(fin["done"], 2);
    assert_eq!(fin["total"], 2);
    assert_eq!(fin["exit_code"], 0);
    assert_eq!(fin["fingerprint"], "4294967295 0");
    assert_eq!(fin["commit"].as_str().unwrap().len(), 7);
    assert!(fin["duration_s"].is_number() && fin["cost_usd"].is_number());
    assert_eq!(events[5]["reason"], "complete");
    assert_eq!(events[5]["exit_code"], 0);
    // The human report went to stderr.
    assert!(stderr(&out).contains("RALPH Loop Complete"));
}

#[test]
fn json_reports_stuck_and_errors_as_halted() {
    let env = setup(&["j1"]);
    let out = env.run_fake("churn", &["--json"]);
    assert_exit(&out, 5);
    assert_eq!(events_named(&out, "stuck").len(), 1, "{}", stdout(&out));
    let last = json_events(&out).pop().unwrap();
    assert_eq!(last["event"], "halted");
    assert_eq!(last["reason"], "stuck");
    assert_eq!(last["exit_code"], 5);
    // It names the task, as `run_started` did: a hook or a log reader of many loops needs it.
    let started = &events_named(&out, "run_started")[0];
    assert!(started["task"].is_string(), "{started}");
    assert_eq!(last["task"], started["task"], "{last}");
    assert_eq!(last["task_file"], "RALPH_TASK.md", "{last}");

    let env = TestEnv::new();
    let out = env.run_fake("check", &["--json"]);
    assert_exit(&out, 1);
    let so = stdout(&out);
    let lines: Vec<&str> = so.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["event"], "halted");
    assert_eq!(v["reason"], "error");
}

#[test]
fn an_agent_echoing_the_prompt_does_not_satisfy_the_promise() {
    let env = setup(&["p1"]);
    // It checks the box (so the task source alone would complete) and echoes the prompt, whose
    // instructions contain `<promise>DONE</promise>`: the promise is not in its final message.
    let out = env.run_fake(
        "check+echo,churn+echo",
        &["--completion-promise", "DONE", "--max-iterations", "2"],
    );
    assert_exit(&out, 3);
    assert!(env.agent_prompt(1).contains("<promise>DONE</promise>"));
}

#[test]
fn a_full_run_without_a_terminal_has_no_control_codes() {
    let env = setup(&["n1", "n2"]);
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    assert!(!stdout(&out).contains('\x1b'), "{:?}", stdout(&out));
    assert!(!stderr(&out).contains('\x1b'), "{:?}", stderr(&out));
}

#[test]
fn an_agent_deleting_ralphs_directory_does_not_break_the_run() {
    let env = setup(&["r1", "r2"]);
    let out = env.run_fake("check+rmrf:.ralph,check", &[]);
    assert_exit(&out, 0);
    assert!(env.repo.join(".ralph/.gitignore").exists());
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "runtime files stay ignored"
    );
    assert!(!env.git(&["ls-files"]).contains(".ralph/state.json"));
}

#[test]
fn idle_iterations_after_a_clean_one_commit_nothing_and_stall() {
    // Iteration 1 leaves the tree clean, so iteration 2 takes HEAD's tree as its "before"
    // without walking: an idle agent must still make no commit.
    let env = setup(&THREE);
    let out = env.run_fake("check,idle", &[]);
    assert_exit(&out, 4);
    assert!(env.agent_ran(4) && !env.agent_ran(5));
    assert_eq!(env.commits().len(), 2, "{:?}", env.commits());
    let recs = env.iter_records();
    assert!(recs[0].ends_with("| 4294967295 0"), "{recs:?}");
}

#[test]
fn stream_with_json_keeps_stdout_to_json_lines() {
    let env = setup(&["s1"]);
    let out = env.run_fake("check+print:agent chatter", &["--json", "--stream"]);
    assert_exit(&out, 0);
    assert!(!json_events(&out).is_empty(), "only JSON lines on stdout");
    assert!(
        stderr(&out).contains("agent chatter"),
        "the stream goes to stderr"
    );
}
