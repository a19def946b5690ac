//! An agent that cannot start (SPEC §4, issue 20): the run halts at once with exit 1 naming the
//! command and what the shell said, one ITER record at most — never three iterations of
//! `exit 127` ending STALLED.

use crate::common::*;

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["a", "b"], "");
    env.commit_all("initial");
    env
}

fn run(env: &TestEnv, agent: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--agent-cmd", agent, "--yes", "--grace", "1s"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(&args, &[], std::time::Duration::from_secs(60))
}

#[test]
fn a_missing_script_halts_at_once_naming_it() {
    let env = setup();
    let out = run(&env, "bash ./agent.sh {prompt}", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("could not start (exit 127)"), "{err}");
    assert!(
        err.contains("./agent.sh: No such file or directory"),
        "{err}"
    );
    assert!(env.iter_records().len() <= 1, "{:?}", env.iter_records());
}

#[test]
fn a_script_that_is_not_executable_halts_at_once() {
    let env = setup();
    env.write("agent.sh", "#!/bin/sh\necho never\n");
    env.commit_all("agent");
    // Through a shell, as `sh -c` runs it: 126, permission denied.
    let out = run(&env, "sh -c ./agent.sh", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("could not start (exit 126)"), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(env.iter_records().len() <= 1);
}

#[test]
fn an_agent_that_fails_with_other_output_is_not_taken_for_one_that_never_started() {
    // Control: exit 127 after output of its own is an agent that ran and failed.
    let env = setup();
    let out = run(
        &env,
        "sh -c 'echo working on it; echo ./x: not found >&2; exit 127'",
        &["--max-iterations", "1"],
    );
    assert_exit(&out, 3);
    assert!(
        !stderr(&out).contains("could not start"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_tmp_script_under_the_sandbox_says_the_sandboxs_tmp_is_private() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    let script = std::env::temp_dir().join(format!("ralph-agent-{}.sh", std::process::id()));
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let agent = format!("bash {} {{prompt}}", script.display());
    let out = run(&env, &agent, &["--sandbox"]);
    let _ = std::fs::remove_file(&script);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("could not start (exit 127)"), "{err}");
    assert!(
        err.contains("/tmp, /run and /dev/shm are the sandbox's own"),
        "{err}"
    );
}

/// A test command that cannot run at all (`pytset`: the shell says "not found", exit 127) is
/// an error after the first iteration that ran it: exit 1 naming the command and what the
/// shell said, that one iteration recorded (its work committed), never "Tests failed" until
/// STALLED. Controls, each going on to a second iteration: a test command that runs and fails
/// (exit 1), and one that runs a test script which itself meets a missing program (exit 127,
/// the shell naming the program inside the script, not the command's own). Failed before: the
/// run went on with "Tests failed (exit 127)" every iteration.
#[test]
fn a_test_command_that_cannot_run_halts_after_its_first_iteration() {
    let env = setup();
    let out = env.run_fake("check", &["--test-command", "pytset -q"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("the test command `pytset -q` could not run (exit 127)")
            && err.contains("pytset: not found"),
        "{err}"
    );
    let recs = env.iter_records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(recs[0].contains("| exit error |"), "{recs:?}");
    assert!(!stdout(&out).contains("Tests failed"), "{}", stdout(&out));
    assert!(
        env.read("RALPH_TASK.md").contains("- [x] a"),
        "its work is kept"
    );
    for (test_command, script) in [("false", None), ("sh ./run_tests.sh", Some("pytset -q\n"))] {
        let env = setup();
        if let Some(s) = script {
            env.write("run_tests.sh", s);
            env.commit_all("tests");
        }
        let out = env.run_fake(
            "check",
            &["--test-command", test_command, "--max-iterations", "2"],
        );
        assert_exit(&out, 3);
        assert!(env.agent_ran(2), "{test_command}: the run went on");
        assert!(stdout(&out).contains("Tests failed"), "{}", stdout(&out));
    }
}

/// The same for a verdict command: one that cannot run at all halts as "the verdict command
/// could not run" (exit 7) after its first iteration, not its second. Failed before: two
/// iterations ran.
#[test]
fn a_verdict_command_that_cannot_run_halts_after_its_first_iteration() {
    let env = setup();
    let out = env.run_fake("churn", &["--verdict-cmd", "verdikt --all"]);
    assert_exit(&out, 7);
    assert_eq!(env.iter_records().len(), 1, "{:?}", env.iter_records());
    assert!(!env.agent_ran(2));
    assert!(
        env.activity().contains("verdikt: not found"),
        "{}",
        env.activity()
    );
}
