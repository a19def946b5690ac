//! Completion needs evidence, checked now (SPEC §5.3), and every ending goes through one close
//! (SPEC §5.1): resume and run never claim "already complete" against a failing test or
//! verdict command, a refused commit is not completion, verdict figures that only alternate are
//! not progress, and an agent that cannot log in still leaves its work committed and recorded.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::common::*;

/// Every output the user sees, both streams.
fn said(out: &std::process::Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

/// `ralph run|resume` with the fake agent, unattended, bounded.
fn fake(env: &TestEnv, command: &str, script: &str, extra: &[&str]) -> std::process::Output {
    let agent = fake_agent_cmd();
    let mut args = vec![command, "--agent-cmd", &agent, "--yes", "--grace", "1s"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[("FAKE_AGENT_SCRIPT", script)],
        Duration::from_secs(30),
    )
}

/// A task whose tests pass only once `ok.txt` exists (the test command is in the frontmatter,
/// so `resume` sees it as `run` did).
fn gated_task(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "test_command: \"test -f ok.txt\"\n");
    env.commit_all("initial");
    env
}

// --- Case 9: "already complete" only on the same evidence, checked now ---

/// Promise: after a max-iterations halt with every box checked but the tests failing,
/// `ralph resume` does not report "already complete": it runs (here iteration 2 makes the
/// tests pass and completes). Bug caught: resume saw all boxes checked and answered
/// "already complete", exit 0, spawning nothing, though the tests still failed.
#[test]
fn resume_with_all_boxes_checked_but_failing_tests_runs_instead_of_claiming_completion() {
    let env = gated_task(&["only criterion"]);
    let out = fake(
        &env,
        "run",
        "check,touch:ok.txt",
        &["--max-iterations", "1"],
    );
    assert_exit(&out, 3);
    assert!(env.read("RALPH_TASK.md").contains("- [x] only criterion"));
    assert!(!env.repo.join("ok.txt").exists());

    let out = fake(
        &env,
        "resume",
        "check,touch:ok.txt",
        &["--max-iterations", "3"],
    );
    assert!(
        !said(&out).contains("already complete"),
        "resume claimed completion while the test command fails:\n{}",
        said(&out)
    );
    assert!(env.agent_ran(2), "iteration 2 ran");
    assert_exit(&out, 0);
    assert!(
        env.commits()[0].starts_with("ralph: iteration 2"),
        "{:?}",
        env.commits()
    );
    assert_eq!(status_json(&env)["halt_reason"], "complete");
}

/// Promise: `ralph run` on a task whose boxes are all checked but whose test command fails now
/// is not "already complete": the loop runs. Bug caught: "already complete", exit 0, nothing
/// spawned, with failing tests.
#[test]
fn run_on_a_fully_checked_task_with_failing_tests_runs() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\ntest_command: \"test -f ok.txt\"\n---\n## Success Criteria\n- [x] only criterion\n",
    );
    env.commit_all("initial");
    let out = fake(&env, "run", "touch:ok.txt", &["--max-iterations", "2"]);
    assert!(!said(&out).contains("already complete"), "{}", said(&out));
    assert!(env.agent_ran(1), "the loop ran");
    assert_exit(&out, 0);
}

/// Control: the same fully checked task whose test command passes now is "already complete",
/// exit 0, nothing spawned. Holds today.
#[test]
fn run_on_a_fully_checked_task_with_passing_tests_is_already_complete() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\ntest_command: \"test -f ok.txt\"\n---\n## Success Criteria\n- [x] only criterion\n",
    );
    env.write("ok.txt", "ok\n");
    env.commit_all("initial");
    let out = fake(&env, "run", "touch:ok.txt", &[]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("already complete"), "{}", said(&out));
    assert!(!env.agent_ran(1));
}

/// Promise: with a verdict command, "already complete" needs it to answer 0 now. Bug caught:
/// all boxes checked was reported "already complete" (exit 0) while the verdict said 3.
#[test]
fn run_on_a_fully_checked_task_whose_verdict_says_unverified_runs() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\nverdict_command: \"echo 'SUMMARY: 0 of 1 rows verified'; exit 3\"\n---\n## Success Criteria\n- [x] only criterion\n",
    );
    env.commit_all("initial");
    let out = fake(&env, "run", "churn", &["--max-iterations", "1"]);
    assert!(!said(&out).contains("already complete"), "{}", said(&out));
    assert!(env.agent_ran(1), "the loop ran");
    assert_exit(&out, 3);
}

// --- Case 10: a refused commit is not completion ---

fn pre_commit_hook(env: &TestEnv, body: &str) {
    let path = env.repo.join(".git/hooks/pre-commit");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Promise (SPEC §5.3, §8): a `pre-commit` hook that refuses the finishing iteration's commit
/// makes the iteration not complete; the hook's output goes into the next prompt; the work is
/// not lost and is committed once the hook passes. The hook refuses once (a marker file outside
/// the repository). Bug caught: the run ended "complete", exit 0, in iteration 1 with the work
/// uncommitted.
#[test]
fn a_pre_commit_hook_refusing_the_finishing_commit_is_not_completion() {
    let env = TestEnv::new();
    env.write_task(&["only criterion"], "");
    env.commit_all("initial");
    let marker = env.home.join("hook-refused-once");
    pre_commit_hook(
        &env,
        &format!(
            "if [ ! -e '{m}' ]; then touch '{m}'; echo 'lint: trailing whitespace in src/lib.rs' >&2; exit 1; fi\nexit 0",
            m = marker.display()
        ),
    );
    let out = fake(&env, "run", "check,churn", &["--max-iterations", "3"]);
    assert!(marker.exists(), "the hook ran");
    assert!(
        env.agent_ran(2),
        "the refused commit ended the run as complete in iteration 1:\n{}",
        said(&out)
    );
    assert!(
        env.agent_prompt(2)
            .contains("trailing whitespace in src/lib.rs"),
        "the hook's output reaches the next prompt:\n{}",
        env.agent_prompt(2)
    );
    assert_exit(&out, 0);
    // The checked box is committed now, nothing left behind.
    let head_task = env.git(&["show", "HEAD:RALPH_TASK.md"]);
    assert!(head_task.contains("- [x] only criterion"), "{head_task}");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert_eq!(status_json(&env)["halt_reason"], "complete");
}

/// Promise: a hook that always refuses never lets the run complete: max iterations (exit 3),
/// and the work stays in the tree. Bug caught: exit 0 "complete" with nothing committed.
#[test]
fn a_pre_commit_hook_that_always_refuses_never_lets_the_run_complete() {
    let env = TestEnv::new();
    env.write_task(&["only criterion"], "");
    env.commit_all("initial");
    pre_commit_hook(&env, "echo 'lint: 3 problems' >&2; exit 1");
    let out = fake(&env, "run", "check,churn", &["--max-iterations", "2"]);
    assert_exit(&out, 3);
    assert_eq!(env.commits(), vec!["initial"], "nothing got past the hook");
    assert!(
        env.read("RALPH_TASK.md").contains("- [x] only criterion"),
        "the work stays in the tree"
    );
    assert_eq!(status_json(&env)["halt_reason"], "max_iterations");
}

/// SPEC §5.3 says the hook's output reaches the next prompt "as failing tests do": a failing
/// test command's output reaches the next prompt. Bug caught: the next prompt held only the
/// test command's name, not what failed.
#[test]
fn a_failing_test_commands_output_reaches_the_next_prompt() {
    let env = TestEnv::new();
    // The failure text lives in a script, not in the command line the prompt names.
    let tests = env.home.join("tests.sh");
    std::fs::write(
        &tests,
        "echo 'assertion failed: widget_count == 3' >&2\nexit 1\n",
    )
    .unwrap();
    env.write_task(
        &["c1", "c2"],
        &format!("test_command: \"sh {}\"\n", tests.display()),
    );
    env.commit_all("initial");
    let out = fake(&env, "run", "check", &["--max-iterations", "2"]);
    assert_exit(&out, 3);
    assert!(
        env.agent_prompt(2)
            .contains("assertion failed: widget_count == 3"),
        "{}",
        env.agent_prompt(2)
    );
}

// --- Case 14: verdict figures that only alternate are not progress ---

/// A verdict command that answers exit 3 with SUMMARY lines cycling through `summaries`
/// (run count in a file outside the repository).
fn cycling_verdict(env: &TestEnv, summaries: &[&str]) -> String {
    let counter = env.home.join("verdict-count");
    let mut arms = String::new();
    for (i, s) in summaries.iter().enumerate() {
        arms.push_str(&format!("  {i}) echo 'SUMMARY: {s}';;\n"));
    }
    let script = format!(
        "n=$(cat '{c}' 2>/dev/null || echo 0)\necho $((n+1)) > '{c}'\ncase $((n % {len})) in\n{arms}esac\nexit 3\n",
        c = counter.display(),
        len = summaries.len()
    );
    let path = env.home.join("verdict.sh");
    std::fs::write(&path, script).unwrap();
    format!("sh '{}'", path.display())
}

/// Promise (SPEC §3.3): figures are progress only when this run has not seen them before, so
/// figures that alternate between two values trip the stuck rule (exit 5 after
/// 2 × stuck-threshold iterations without new figures; threshold 1: iterations 3 and 4 repeat
/// known figures). Bug caught: every change of figures counted as progress, so the run went
/// on to max iterations (exit 3).
#[test]
fn verdict_figures_alternating_between_two_values_trip_the_stuck_rule() {
    let env = TestEnv::new();
    env.write_task(&["v1", "v2", "v3"], "");
    env.commit_all("initial");
    let verdict = cycling_verdict(&env, &["1 of 3 rows verified", "2 of 3 rows verified"]);
    let out = fake(
        &env,
        "run",
        "churn",
        &[
            "--verdict-cmd",
            &verdict,
            "--stuck-threshold",
            "1",
            "--max-iterations",
            "10",
        ],
    );
    assert_exit(&out, 5);
    assert!(
        env.agent_ran(4) && !env.agent_ran(5),
        "halted at iteration 4"
    );
    assert_eq!(status_json(&env)["halt_reason"], "stuck");
}

/// Control: figures that keep moving to new values are progress; the same threshold lets the
/// run reach the verdict's 0. Holds today.
#[test]
fn verdict_figures_that_keep_moving_are_progress() {
    let env = TestEnv::new();
    env.write_task(&["v1"], "");
    env.commit_all("initial");
    let counter = env.home.join("verdict-count");
    let path = env.home.join("verdict.sh");
    std::fs::write(
        &path,
        format!(
            "n=$(cat '{c}' 2>/dev/null || echo 0)\nn=$((n+1))\necho $n > '{c}'\necho \"SUMMARY: $n of 5 rows verified\"\n[ $n -ge 5 ] && exit 0\nexit 3\n",
            c = counter.display()
        ),
    )
    .unwrap();
    let verdict = format!("sh '{}'", path.display());
    let out = fake(
        &env,
        "run",
        "churn",
        &["--verdict-cmd", &verdict, "--stuck-threshold", "1"],
    );
    assert_exit(&out, 0);
    assert!(env.agent_ran(5) && !env.agent_ran(6));
}

// --- Case 24: an agent that cannot log in goes through the same close ---

/// Promise (SPEC §5.1): an agent that cannot log in (Claude's result with `is_error`, 401,
/// "Invalid API key") after changing a file: the change is committed, an ITER record written,
/// `halt_reason: error` (exit 1), and `resume` continues at the next iteration number without
/// reusing this one. Bug caught: ralph returned at once — the change left uncommitted, no ITER
/// record for the iteration.
#[test]
fn an_agent_that_cannot_log_in_still_has_its_work_committed_and_recorded() {
    let env = TestEnv::new();
    env.write_task(&["only criterion"], "");
    env.commit_all("initial");
    let script = agent_sh(
        &env,
        "auth",
        r#"mkdir -p src && echo 'fn login() {}' > src/login.rs
echo '{"type":"system","subtype":"init","session_id":"s-401","tools":["Bash"]}'
echo '{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"duration_ms":120,"num_turns":1,"result":"Invalid API key · Fix external API key","session_id":"s-401","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}'
exit 1"#,
    );
    let out = run_claude_fake(&env, "run", &script, &[], Duration::from_secs(30));
    assert_exit(&out, 1);
    assert!(said(&out).contains("Invalid API key"), "{}", said(&out));
    let head = env.git(&["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(
        head.contains("src/login.rs"),
        "the agent's change is committed: {:?}\n{}",
        env.commits(),
        env.git(&["status", "--porcelain"])
    );
    let recs = env.iter_records();
    assert_eq!(recs.len(), 1, "one ITER record for iteration 1: {recs:?}");
    assert!(recs[0].starts_with("ITER 1 | "), "{recs:?}");
    let v = status_json(&env);
    assert_eq!(v["halt_reason"], "error", "{v}");
    assert_eq!(v["exit_code"], 1, "{v}");

    // Logged in again: resume goes on at iteration 2.
    let out = run_claude_fake(
        &env,
        "resume",
        "check",
        &["--max-iterations", "3"],
        Duration::from_secs(30),
    );
    assert_exit(&out, 0);
    let recs = env.iter_records();
    let numbers: Vec<&str> = recs
        .iter()
        .map(|r| r.split(" | ").next().unwrap())
        .collect();
    assert_eq!(numbers, ["ITER 1", "ITER 2"], "{recs:?}");
}

// --- Resume continues the same run: its baseline, its agent, its checks ---

/// SPEC §2.3/§5.3: a run halted as tampered (the agent deleted an unchecked criterion and
/// checked the rest) is not "already complete" when resumed: the resume holds the file to the
/// run's baseline and halts as tampered again at once (exit 8), naming the criterion, spawning
/// nothing. Bug caught: `resume` saw every remaining box checked and answered "already
/// complete", exit 0.
#[test]
fn resume_after_a_tamper_halt_is_tampered_again_not_complete() {
    let env = TestEnv::new();
    env.write_task(&["alpha", "beta"], "");
    env.commit_all("initial");
    let tamper = agent_sh(
        &env,
        "tamper",
        "sed -i '/- \\[ \\] beta/d; s/- \\[ \\] alpha/- [x] alpha/' RALPH_TASK.md",
    );
    let out = fake(&env, "run", &tamper, &["--max-iterations", "3"]);
    assert_exit(&out, 8);
    let ran = env.iter_records().len();
    let out = fake(&env, "resume", "check", &["--max-iterations", "5"]);
    assert_exit(&out, 8);
    let text = said(&out);
    assert!(!text.contains("already complete"), "{text}");
    assert!(text.contains("beta"), "names the criterion: {text}");
    assert_eq!(env.iter_records().len(), ran, "nothing ran");
    assert!(!env.agent_ran(2), "no agent was spawned");
    let st = status_json(&env);
    assert_eq!(st["halt_reason"], "tampered", "{st}");
}

/// SPEC §2.3: a resume keeps the run's test command given as a flag. The run's tests
/// (`--test-command false`) fail with every box checked (exit 3); `ralph resume` without the
/// flag must not answer "already complete": the tests still fail, so it runs and halts at max
/// iterations again. Bug caught: resume forgot the flag and reported complete, exit 0.
#[test]
fn resume_keeps_the_runs_test_command_flag() {
    let env = TestEnv::new();
    env.write_task(&["only criterion"], "");
    env.commit_all("initial");
    let out = fake(
        &env,
        "run",
        "check",
        &["--max-iterations", "1", "--test-command", "false"],
    );
    assert_exit(&out, 3);
    // Without the run's own record of its flag, this resume would see no check at all.
    let out = fake(&env, "resume", "idle", &["--max-iterations", "2"]);
    let text = said(&out);
    assert!(!text.contains("already complete"), "{text}");
    assert_exit(&out, 3);
}

/// SPEC §2.3: a resume keeps the test command the run started with, not the one the agent wrote
/// into the task file's frontmatter since. The agent replaces `test_command: "false"` with
/// `"true"` and checks the box; the run holds it (exit 3, its own command still fails); the
/// resume must too. Bug caught: resume read the edited frontmatter and reported complete.
#[test]
fn resume_ignores_a_test_command_the_agent_wrote_into_the_task_file() {
    let env = TestEnv::new();
    env.write_task(&["only criterion"], "test_command: \"false\"\n");
    env.commit_all("initial");
    let edit = agent_sh(
        &env,
        "edit",
        "sed -i 's/test_command: \"false\"/test_command: \"true\"/; s/- \\[ \\]/- [x]/' RALPH_TASK.md",
    );
    let out = fake(&env, "run", &edit, &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    assert!(env.read("RALPH_TASK.md").contains("test_command: \"true\""));
    let out = fake(&env, "resume", "idle", &["--max-iterations", "2"]);
    let text = said(&out);
    assert!(!text.contains("already complete"), "{text}");
    assert_exit(&out, 3);
}

/// SPEC §2.3: `ralph resume` after a run with a custom agent runs that agent again, as the hint
/// it printed (`ralph resume --max-iterations N`) promises. Bug caught: the resume fell back to
/// the default preset (`copilot`) and failed, "agent `copilot` not found".
#[test]
fn resume_keeps_the_runs_agent() {
    let env = TestEnv::new();
    env.write_task(&["a", "b"], "");
    env.commit_all("initial");
    let out = fake(&env, "run", "check", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    let out = env.ralph_with_limit(
        &["resume", "--yes", "--max-iterations", "3"],
        &[("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(30),
    );
    assert_exit(&out, 0);
    assert!(env.agent_ran(2), "the run's own agent ran iteration 2");
}

/// `.ralph/state.json` is in the agent's reach, and a ralph killed mid-iteration cannot write it
/// again: a resume then goes by ralph's own copy (outside the repository), not by what the agent
/// wrote. The agent deletes a criterion, checks the other, rewrites `state.json` (baseline
/// without the deleted criterion, the run's test command `true`) and hangs; ralph is SIGKILLed;
/// the resume halts as tampered (exit 8), never "already complete". Bug caught: the resume took
/// the edited file at its word and answered "already complete", exit 0.
#[test]
fn a_resume_after_ralph_was_killed_ignores_the_agents_edit_of_state_json() {
    let env = TestEnv::new();
    env.write_task(&["alpha", "beta"], "");
    env.commit_all("initial");
    let marker = env.home.join("edited");
    let script = agent_sh(
        &env,
        "rewrite",
        &format!(
            "sed -i '/- \\[ \\] beta/d; s/- \\[ \\] alpha/- [x] alpha/' RALPH_TASK.md\n\
             python3 - <<'PY'\n\
import json\n\
p='.ralph/state.json'\n\
s=json.load(open(p))\n\
s['baseline']=['alpha']\n\
s['total']=1\n\
s['pinned']['test_command']='true'\n\
json.dump(s,open(p,'w'))\n\
PY\n\
             touch '{m}'\n\
             sleep 30",
            m = marker.display()
        ),
    );
    let bg = env.spawn_fake(
        &script,
        &["--max-iterations", "3", "--test-command", "false"],
    );
    assert!(
        wait_until(Duration::from_secs(20), || marker.exists()),
        "the agent never edited state.json"
    );
    bg.signal(libc::SIGKILL);
    let _ = bg.wait(Duration::from_secs(20));
    let out = fake(&env, "resume", "idle", &["--max-iterations", "3"]);
    let text = said(&out);
    assert!(!text.contains("already complete"), "{text}");
    assert_exit(&out, 8);
    assert!(text.contains("beta"), "{text}");
}
