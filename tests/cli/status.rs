//! `ralph status` (SPEC §2.4, §13), whole, as snapshots: before any run, while a run goes on,
//! after it halted (at its iteration cap; stalled), on a task file ralph refuses; `--json` for
//! each; `--all` with the main work tree's loop, a worktree loop and a merged one, as text and
//! as JSON.

use std::time::Duration;

use crate::common::*;

/// The numbers in `status --json` that time and the machine decide.
const VOLATILE: &[&str] = &["elapsed_s", "pid"];

/// `ralph ARGS` (a `status` that prints JSON) as a snapshot shows it: the JSON pretty-printed
/// and normalised, stderr when any, the exit status.
fn json_status(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ralph(args);
    let mut s = json_screen(env, &stdout(&out), VOLATILE);
    s.push('\n');
    screen_of(env, &s, &stderr(&out), out.status.code())
}

/// A checklist of three criteria, committed.
fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["s1", "s2", "s3"], "");
    env.commit_all("initial");
    env
}

#[test]
fn before_any_run() {
    let env = TestEnv::new();
    insta::assert_snapshot!(screen(&env, &env.ralph(&["status"])), @r#"
    No run yet in this repository.
    Start with: ralph init "describe the task" --criterion "..."
    [exit status: 0]
    "#);
    env.write_task(&["s1", "s2"], "");
    insta::assert_snapshot!(screen(&env, &env.ralph(&["status"])), @r"
    No run yet in this repository.
    Task file: $TEST_ENV/repo/RALPH_TASK.md (0/2 criteria checked). Start with: ralph run
    [exit status: 0]
    ");
    insta::assert_snapshot!(
        "before_any_run_json",
        json_status(&env, &["status", "--json"])
    );
}

#[test]
fn while_a_run_goes_on() {
    let env = setup();
    let bg = env.spawn_fake("check,hang", &["--grace", "1s"]);
    env.wait_for_pids(2, 1);
    insta::assert_snapshot!("running", screen(&env, &env.ralph(&["status"])));
    insta::assert_snapshot!("running_json", json_status(&env, &["status", "--json"]));
    bg.signal(libc::SIGINT);
    let (code, _, _) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130));
}

#[test]
fn after_a_halt() {
    let env = setup();
    assert_exit(&env.run_fake("check", &["--max-iterations", "2"]), 3);
    insta::assert_snapshot!("halted", screen(&env, &env.ralph(&["status"])));
    insta::assert_snapshot!("halted_json", json_status(&env, &["status", "--json"]));
}

/// The last three records alike: `status` says the run stalled.
#[test]
fn after_a_stall() {
    let env = setup();
    assert_exit(&env.run_fake("check,idle", &[]), 4);
    insta::assert_snapshot!("stalled", screen(&env, &env.ralph(&["status"])));
}

#[test]
fn a_refused_task_file() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\nmax_iterations: many\n---\n## Success Criteria\n- [ ] a\n",
    );
    env.commit_all("initial");
    insta::assert_snapshot!("refused", screen(&env, &env.ralph(&["status"])));
    insta::assert_snapshot!("refused_json", json_status(&env, &["status", "--json"]));
}

/// Three loops: the main work tree's (no run), `w` in its worktree (halted at its iteration
/// cap), and `m`, which completed and merged (its worktree removed, shown from its kept logs).
/// They run one after the other, so their order is that of `status --all` alone.
#[test]
fn all_loops() {
    let env = TestEnv::new();
    env.write("M.md", &task(&["m1"]));
    env.write("W.md", &task(&["w1", "w2"]));
    env.commit_all("base");
    let agent = fake_agent_cmd();
    assert_exit(&run_loop(&env, "m", "M.md", &agent, &["--merge"]), 0);
    let capped = ["--max-iterations", "1"];
    assert_exit(&run_loop(&env, "w", "W.md", &agent, &capped), 3);
    insta::assert_snapshot!("all", screen(&env, &env.ralph(&["status", "--all"])));
    insta::assert_snapshot!(
        "all_json",
        json_status(&env, &["status", "--all", "--json"])
    );
}
