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

/// `status` after `ralph init --force` wrote a new task (issue 30): the run recorded worked on
/// criteria the task file no longer has, so it is not shown as this task's — no iterations, no
/// halt, no records of it — but named as another task's, with the command that starts this
/// one, which works as printed. The control: the same run, its task file edited but keeping a
/// criterion of the run, is still this task's run.
#[test]
fn after_init_force_the_old_run_is_another_tasks() {
    let env = setup();
    assert_exit(&env.run_fake("check", &["--max-iterations", "2"]), 3);
    let old = status_json(&env);
    let run_id = old["run_id"].as_str().unwrap().to_string();
    // Control: a criterion reworded, two kept: still the run of this task.
    let task = env
        .read("RALPH_TASK.md")
        .replace("- [ ] s3", "- [ ] s3, reworded");
    env.write("RALPH_TASK.md", &task);
    let text = stdout(&env.ralph(&["status"]));
    assert!(
        text.contains("Task: Test task") && text.contains("State: halted — max_iterations"),
        "{text}"
    );

    let init = env.ralph(&[
        "init",
        "A new task",
        "--force",
        "--criterion",
        "n1",
        "--criterion",
        "n2",
    ]);
    assert_exit(&init, 0);
    let out = env.ralph(&["status"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("No run yet for this task."), "{text}");
    assert!(
        text.contains(&format!(
            "The run recorded in .ralph/state.json ({run_id}, \"Test task\", halted: max_iterations) was another task's"
        )),
        "{text}"
    );
    assert!(
        text.contains("(0/2 criteria checked). Start with: ralph run --reset"),
        "{text}"
    );
    for old_run in ["Iteration:", "State: halted", "Last records:", "ITER 2"] {
        assert!(!text.contains(old_run), "{old_run}: {text}");
    }
    let st = status_json(&env);
    assert_eq!(st["task"], "A new task", "{st}");
    assert_eq!(st["run_id"], serde_json::Value::Null, "{st}");
    assert_eq!(st["halt_reason"], serde_json::Value::Null, "{st}");
    assert_eq!(st["iteration"], 0, "{st}");
    assert_eq!(st["last_records"], serde_json::json!([]), "{st}");
    assert_eq!((&st["done"], &st["total"]), (&0.into(), &2.into()), "{st}");
    assert_eq!(st["other_task_run"]["run_id"], run_id.as_str(), "{st}");

    // The command status suggests starts the new task's run.
    let out = env.run_fake("check", &["--reset"]);
    assert_exit(&out, 0);
    let st = status_json(&env);
    assert_eq!(
        (&st["task"], &st["halt_reason"]),
        (&"A new task".into(), &"complete".into())
    );
    assert_ne!(st["run_id"], run_id.as_str());
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
