//! A run's start-up steps (`commands/run`): a run the user chose, at the prompt, to resume
//! goes through the very steps `ralph resume` goes through.

use std::time::Duration;

use crate::common::*;

/// `ralph run` meets an unfinished `--sandbox` run in a terminal and is told "resume": the
/// resumed iterations run in the sandbox, as `ralph resume` runs them. Bug caught: the run
/// started over as a resume without resolving the sandbox (`settings.sandboxed` unset), so its
/// agent ran outside it and wrote to `$HOME`. Control: the first iteration, sandboxed, could
/// not; the same agent unsandboxed can.
#[test]
fn a_run_resumed_at_the_prompt_keeps_its_sandbox() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["a", "b"], "");
    env.commit_all("initial");
    let script = env.dir().join("agent.sh");
    std::fs::write(
        &script,
        "echo x > \"$HOME/escaped-$RALPH_ITERATION\" 2>/dev/null || true\n\
         sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md\n",
    )
    .unwrap();
    let agent = format!("sh '{}'", script.display());
    let out = env.ralph(&[
        "run",
        "--sandbox",
        "--max-iterations",
        "1",
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ]);
    assert_exit(&out, 3);
    assert!(!env.home.join("escaped-1").exists(), "the sandbox holds");
    // In a terminal (`script`), answering "r" at the prompt.
    let inner = format!(
        "'{}' run --agent-cmd \"{agent}\" --max-iterations 2 --grace 1s",
        env!("CARGO_BIN_EXE_ralph")
    );
    let mut cmd = env.command("sh");
    cmd.current_dir(&env.repo).arg("-c").arg(format!(
        "printf 'r\\n' | script -qfec {} /dev/null",
        shell_quote(&inner)
    ));
    let out = run_with_limit(cmd, Duration::from_secs(60));
    assert_exit(&out, 0);
    let screen = stdout(&out);
    assert!(screen.contains("Resume it, or reset"), "{screen}");
    assert!(
        env.iter_records()
            .last()
            .is_some_and(|r| r.starts_with("ITER 2 | 2/2")),
        "iteration 2 ran: {:?}",
        env.iter_records()
    );
    assert!(
        !env.home.join("escaped-2").exists(),
        "the resumed iteration ran outside the sandbox"
    );
    // Control: the agent outside the sandbox does write there.
    let plain = TestEnv::outside_tmp();
    plain.write_task(&["a"], "");
    plain.commit_all("initial");
    let out = plain.ralph(&["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"]);
    assert_exit(&out, 0);
    assert!(plain.home.join("escaped-1").exists());
}

/// `text` as one word for `sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
