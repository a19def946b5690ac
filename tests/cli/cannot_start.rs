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
