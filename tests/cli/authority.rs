//! One authority (SPEC §11, §5.3): ralph's own record of a run and its own lock, in its state
//! directory, decide — never a `state.json` or a lock file the agent can rewrite or delete —
//! and "already complete" needs the checks to pass now, in every mode.

use std::time::Duration;

use crate::common::*;

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
        Duration::from_secs(60),
    )
}

/// ralph's state directory in a test's isolated home.
fn state_home(env: &TestEnv) -> std::path::PathBuf {
    env.home.join(".local/state/ralph")
}

/// The agent deletes criterion `beta`, checks `alpha`, and rewrites `.ralph/state.json` as the
/// record of another run — a new run id, complete, its baseline only `alpha`, its test command
/// `true` — keeping a copy at `forged`; then it hangs until ralph is SIGKILLed.
fn forge_a_new_run_and_get_killed(env: &TestEnv) -> Vec<u8> {
    env.write_task(&["alpha", "beta"], "");
    env.commit_all("initial");
    let forged = env.home.join("forged.json");
    let script = agent_sh(
        env,
        "forge",
        &format!(
            "sed -i '/- \\[ \\] beta/d; s/- \\[ \\] alpha/- [x] alpha/' RALPH_TASK.md\n\
             python3 - <<'PY'\n\
import json\n\
p='.ralph/state.json'\n\
s=json.load(open(p))\n\
s.update(run_id='20990101-000000-beef', baseline=['alpha'], total=1, done=1,\n\
         running=False, halt_reason='complete', exit_code=0)\n\
s['pinned']['test_command']='true'\n\
json.dump(s,open(p,'w'))\n\
PY\n\
             cp .ralph/state.json '{f}'\n\
             sleep 30",
            f = forged.display()
        ),
    );
    let bg = env.spawn_fake(
        &script,
        &["--max-iterations", "3", "--test-command", "false"],
    );
    assert!(
        wait_until(Duration::from_secs(20), || forged.exists()),
        "the agent never forged state.json"
    );
    bg.signal(libc::SIGKILL);
    let (code, _, _) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, None, "killed by the signal");
    std::fs::read(&forged).unwrap()
}

/// Promise (SPEC §11): after a SIGKILL of ralph, a `state.json` the agent rewrote as another
/// run (new id, complete, a shrunk baseline, a harmless test command) is ignored with a
/// warning: `resume` and `run --yes` both halt as tampered (exit 8) naming the deleted
/// criterion, never "already complete". Control: without ralph's own record (its state
/// directory emptied) the same file is believed — "already complete", exit 0 — so the record
/// is what keeps the promise. Bug caught: ralph's copy won only for the same run id, so the
/// new id was believed (`run --yes`: "already complete", exit 0).
#[test]
fn a_forged_state_with_a_new_run_id_after_a_sigkill_is_ignored() {
    let env = TestEnv::new();
    let forged = forge_a_new_run_and_get_killed(&env);
    let state_file = env.repo.join(".ralph/state.json");

    let out = fake(&env, "resume", "idle", &["--max-iterations", "3"]);
    let text = said(&out);
    assert_exit(&out, 8);
    assert!(!text.contains("already complete"), "{text}");
    assert!(text.contains("beta"), "names the deleted criterion: {text}");
    assert!(
        text.contains("state.json names run 20990101-000000-beef") && text.contains("ignored"),
        "warns that state.json was ignored: {text}"
    );
    assert!(!env.agent_ran(2), "nothing spawned");

    // The agent's file again, for `ralph run`.
    std::fs::write(&state_file, &forged).unwrap();
    let out = fake(&env, "run", "idle", &[]);
    let text = said(&out);
    assert_exit(&out, 8);
    assert!(!text.contains("already complete"), "{text}");
    assert!(text.contains("beta") && text.contains("ignored"), "{text}");
    assert!(!env.agent_ran(2), "nothing spawned");

    // Control: without ralph's record, the forged file is all there is, and it is believed.
    std::fs::write(&state_file, &forged).unwrap();
    std::fs::remove_dir_all(state_home(&env)).unwrap();
    let out = fake(&env, "run", "idle", &[]);
    assert_exit(&out, 0);
    assert!(said(&out).contains("already complete"), "{}", said(&out));
}

/// Promise (SPEC §11): `state.json` deleted while ralph was down does not forget the run:
/// ralph's own record stands (a warning says the file is missing), so the resume continues the
/// same run. Control: the file is really gone when the resume starts.
#[test]
fn a_deleted_state_json_does_not_forget_the_run() {
    let env = TestEnv::new();
    env.write_task(&["one", "two"], "");
    env.commit_all("initial");
    let out = fake(&env, "run", "check", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    let run_id = {
        let v: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
        v["run_id"].as_str().unwrap().to_string()
    };
    std::fs::remove_file(env.repo.join(".ralph/state.json")).unwrap();
    assert!(!env.repo.join(".ralph/state.json").exists());
    let out = fake(&env, "resume", "check", &["--max-iterations", "3"]);
    assert_exit(&out, 0);
    let text = said(&out);
    assert!(text.contains("state.json is missing"), "{text}");
    assert!(
        text.contains(&format!("resuming run {run_id} at iteration 2")),
        "{text}"
    );
}

/// The agent deletes every lock file it finds in the git directory and rewrites
/// `.ralph/state.json` to say no supervisor runs; then it hangs.
fn delete_the_locks_script(env: &TestEnv, marker: &std::path::Path) -> String {
    agent_sh(
        env,
        "unlock",
        &format!(
            "find .git -name '*.lock' -exec rm -f {{}} +\n\
             python3 - <<'PY'\n\
import json\n\
p='.ralph/state.json'\n\
s=json.load(open(p))\n\
s.update(running=False, pid=1, halt_reason='interrupted', exit_code=130)\n\
json.dump(s,open(p,'w'))\n\
PY\n\
             touch '{m}'\n\
             sleep 30",
            m = marker.display()
        ),
    )
}

/// Promise (SPEC §11, §2.4): with the git directory's lock file deleted and `state.json`
/// saying nobody runs, `status` still tells the live run by ralph's own lock (running, with
/// ralph's pid), and `ralph run --reset` is refused naming that pid — no second supervisor.
/// Control: the lock file is really gone while ralph runs, and once ralph is gone `--reset`
/// starts a run. Bug caught: `status` said "halted — error" and `--reset` started a second
/// supervisor on the same work tree.
#[test]
fn a_deleted_lock_file_lets_no_second_supervisor_in() {
    let env = TestEnv::new();
    env.write_task(&["one"], "");
    env.commit_all("initial");
    let marker = env.home.join("unlocked");
    let bg = env.spawn_fake(&delete_the_locks_script(&env, &marker), &["--grace", "1s"]);
    assert!(
        wait_until(Duration::from_secs(20), || marker.exists()),
        "the agent never ran"
    );
    assert!(
        !env.repo.join(".git/ralph.lock").exists(),
        "the git directory's lock file is gone"
    );

    let v = status_json(&env);
    assert_eq!(v["running"], true, "{v}");
    assert_eq!(v["pid"], bg.pid(), "{v}");
    assert_eq!(v["halt_reason"], serde_json::Value::Null, "{v}");
    let text = stdout(&env.ralph(&["status"]));
    assert!(
        text.contains(&format!("running (pid {})", bg.pid())),
        "{text}"
    );
    let all = stdout(&env.ralph(&["status", "--all"]));
    assert!(
        all.contains(&format!("running (pid {})", bg.pid())),
        "{all}"
    );

    let out = fake(&env, "run", "check", &["--reset"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(&format!("pid {}", bg.pid())),
        "{}",
        stderr(&out)
    );
    assert!(!env.agent_ran(2), "no second agent");

    bg.signal(libc::SIGKILL);
    let _ = bg.wait(Duration::from_secs(20));
    assert_eq!(status_json(&env)["running"], false);
    let out = fake(&env, "run", "check", &["--reset"]);
    assert_exit(&out, 0);
}

/// A PRD with `n` tasks and a progress table with these statuses.
fn table(statuses: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    let mut prd = String::from("# Accounts\n\n## Goal\n\nUsers can sign in.\n\n## Tasks\n\n");
    let mut progress = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|------|--------|-------|\n",
    );
    for (i, st) in statuses.iter().enumerate() {
        let k = i + 1;
        prd.push_str(&format!(
            "### Task {k}: Part {k}\n\nDo part {k}.\n\n**Acceptance Criteria:**\n- [ ] part {k} works\n\n"
        ));
        progress.push_str(&format!("| {k} | Part {k} | {st} | |\n"));
    }
    prd.push_str("## Completion Promise\n\n`DONE`\n");
    env.write("PRD.md", &prd);
    env.write("PROGRESS.md", &progress);
    env.commit_all("initial");
    env
}

/// Promise (SPEC §5.3): a table whose tasks are all DONE is "already complete" only when the
/// test command passes now; when it fails, the loop runs with its output in the first prompt
/// and completes once the agent makes it pass. Control: the same table with the test passing
/// ends at once, COMPLETE, spawning nothing. Bug caught: "already COMPLETE", exit 0, with the
/// tests failing.
#[test]
fn a_table_all_done_with_failing_tests_is_not_already_complete() {
    let env = table(&["DONE", "DONE"]);
    let out = fake(
        &env,
        "run",
        "touch:fixed.txt",
        &["--test-command", "test -f fixed.txt"],
    );
    assert_exit(&out, 0);
    assert!(env.agent_ran(1) && !env.agent_ran(2), "one iteration");
    let p = env.agent_prompt(1);
    assert!(
        p.contains("every task is DONE, the checks fail") && p.contains("fails now"),
        "{p}"
    );
    assert!(stdout(&out).lines().any(|l| l == "<promise>DONE</promise>"));

    // Control: the tests pass now.
    let env = table(&["DONE", "DONE"]);
    env.write("fixed.txt", "");
    env.commit_all("fixed");
    let out = fake(
        &env,
        "run",
        "touch:fixed.txt",
        &["--test-command", "test -f fixed.txt"],
    );
    assert_exit(&out, 0);
    assert!(!env.agent_ran(1), "nothing spawned");
    assert!(said(&out).contains("already complete"), "{}", said(&out));
}

/// Promise (SPEC §3.2, §5.3): a table with BLOCKED tasks left and nothing to work ends PARTIAL
/// at once (exit 9), spawning nothing, whatever the tests say.
#[test]
fn a_table_with_only_blocked_tasks_left_ends_partial_even_with_failing_tests() {
    let env = table(&["DONE", "BLOCKED"]);
    let out = fake(&env, "run", "check", &["--test-command", "false"]);
    assert_exit(&out, 9);
    assert!(!env.agent_ran(1), "nothing spawned");
}

/// Promise (SPEC §5.3): the last task marked DONE with the tests failing is not the end: the
/// next iteration asks for the tests, and a resume after the limit does not answer "already
/// complete" while they fail — the loop goes on. Control: iteration 1's tests really failed
/// (its record says so). Bug caught: iteration 2 failed with "no task is left to work in the
/// table" (exit 1), and the resume then said COMPLETE, exit 0, spawning nothing.
#[test]
fn a_table_finished_with_failing_tests_goes_on_until_they_pass() {
    let env = table(&["PENDING"]);
    let script = "done-task,touch:fixed.txt";
    let test = ["--test-command", "test -f fixed.txt"];
    let out = fake(
        &env,
        "run",
        script,
        &[&test[..], &["--max-iterations", "1"]].concat(),
    );
    assert_exit(&out, 3);
    assert!(
        env.activity().contains("tests failed"),
        "{}",
        env.activity()
    );
    let out = fake(&env, "resume", script, &["--max-iterations", "3"]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3), "{}", said(&out));
    assert!(
        env.agent_prompt(2)
            .contains("every task is DONE, the checks fail"),
        "{}",
        env.agent_prompt(2)
    );

    // In one run: iteration 2 works the tests.
    let env = table(&["PENDING"]);
    let out = fake(&env, "run", script, &test);
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3), "{}", said(&out));
}

/// An epic whose coverage matrix has every row verified: the roll-up answers 0.
fn cpm_all_verified() -> (TestEnv, String) {
    let (env, rollup) = crate::cpm::setup();
    let epic = "docs/epics/01-epic-accounts.md";
    env.write(epic, &crate::cpm::epic("In Progress", None));
    env.write(
        "docs/epics/01-coverage-accounts.md",
        &crate::cpm::matrix("", epic, &[("FR1", "Story 1", "[unit]", true)]),
    );
    env.commit_all("initial");
    (env, rollup)
}

/// Promise (SPEC §3.4, §5.3): a CPM pre-flight roll-up that verifies every row is "already
/// complete" only when the test command passes now; when it fails the loop runs, the failing
/// output in the first prompt. Control: with the test passing the run ends at once,
/// ALL_EPICS_COMPLETE, spawning nothing. Bug caught: exit 0 without running the tests.
#[test]
fn a_cpm_rollup_at_zero_with_failing_tests_is_not_already_complete() {
    let (env, rollup) = cpm_all_verified();
    let args = [
        "docs/epics/01-epic-accounts.md",
        "--rollup",
        &rollup,
        "--test-command",
        "test -f fixed.txt",
    ];
    let out = crate::cpm::run_cpm(&env, "touch:fixed.txt", &args);
    assert_exit(&out, 0);
    assert!(env.agent_ran(1) && !env.agent_ran(2), "one iteration");
    assert!(
        env.agent_prompt(1).contains("fails now"),
        "{}",
        env.agent_prompt(1)
    );
    assert!(stdout(&out).contains("ALL_EPICS_COMPLETE"));

    // Control: the tests pass now.
    let (env, rollup) = cpm_all_verified();
    env.write("fixed.txt", "");
    env.commit_all("fixed");
    let args = [
        "docs/epics/01-epic-accounts.md",
        "--rollup",
        &rollup,
        "--test-command",
        "test -f fixed.txt",
    ];
    let out = crate::cpm::run_cpm(&env, "touch:fixed.txt", &args);
    assert_exit(&out, 0);
    assert!(!env.agent_ran(1), "nothing spawned");
    assert!(stdout(&out).contains("ALL_EPICS_COMPLETE"));
}

/// Promise (SPEC §5.3): `ralph init --table --test-command CMD` records the command where table
/// mode reads it (`.ralph/config.toml`), so the next `ralph run` runs it and names it in the
/// prompt. Control: without `--test-command` the run never runs it. Bug caught: the command
/// was written nowhere.
#[test]
fn init_table_records_the_test_command_for_run() {
    let ran = |env: &TestEnv| env.home.join("tests-ran");
    let init_and_run = |with: bool| {
        let env = TestEnv::new();
        env.write("README.md", "project\n");
        let cmd = format!("touch '{}'", ran(&env).display());
        let mut args = vec!["init", "--table", "Sign in", "--criterion", "a form"];
        if with {
            args.extend(["--test-command", &cmd]);
        }
        assert_exit(&env.ralph(&args), 0);
        env.commit_all("initial");
        let out = fake(&env, "run", "done-task", &[]);
        assert_exit(&out, 0);
        (env, cmd)
    };
    let (env, cmd) = init_and_run(true);
    assert!(env.read(".ralph/config.toml").contains("test_command"));
    assert!(ran(&env).exists(), "the test command ran");
    assert!(
        env.agent_prompt(1).contains(&cmd),
        "{}",
        env.agent_prompt(1)
    );
    let (env, _) = init_and_run(false);
    assert!(!ran(&env).exists(), "nothing ran it");
}

/// `init --table --test-command` keeps what `.ralph/config.toml` already holds, and refuses
/// (naming the file, writing nothing) when it sets another test command.
#[test]
fn init_table_keeps_the_config_and_refuses_a_conflicting_test_command() {
    let env = TestEnv::new();
    env.write(".ralph/config.toml", "[hooks]\non_halt = \"true\"\n");
    let out = env.ralph(&["init", "--table", "Goal", "--test-command", "make test"]);
    assert_exit(&out, 0);
    let config = env.read(".ralph/config.toml");
    assert!(
        config.starts_with("test_command = \"make test\"\n") && config.contains("on_halt"),
        "{config}"
    );
    let env = TestEnv::new();
    env.write(".ralph/config.toml", "test_command = \"cargo test\"\n");
    let out = env.ralph(&["init", "--table", "Goal", "--test-command", "make test"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("config.toml"), "{}", stderr(&out));
    assert!(!env.repo.join("PRD.md").exists(), "nothing written");
    assert_eq!(
        env.read(".ralph/config.toml"),
        "test_command = \"cargo test\"\n"
    );
}

/// Promise (SPEC §4, §11): under `--sandbox` the agent can neither rewrite ralph's record of
/// the run, nor delete its lock, nor remove its state directory (the home is read-only there),
/// and the record still names the run afterwards. Control: without the sandbox the same agent
/// does all three — it runs as the user, which is why the record is the authority only as far
/// as the agent's reach ends.
#[test]
fn a_sandboxed_agent_cannot_touch_ralphs_record_or_lock() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [true, false] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["one"], "");
        env.commit_all("initial");
        let script = env.dir().join("reach.sh");
        std::fs::write(
            &script,
            r#"r=attempts.txt
export d="$HOME/.local/state/ralph"
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1 ok" >> $r; else echo "$1 denied" >> $r; fi; }
try record 'for f in "$d"/trees/*/state.json; do echo "{}" > "$f" || exit 1; done'
try lock 'rm "$d"/trees/*/lock'
try home 'rm -rf "$d" && test ! -e "$d"'
sed -i 's/- \[ \] one/- [x] one/' RALPH_TASK.md
"#,
        )
        .unwrap();
        let agent = format!("sh '{}'", script.display());
        let mut args = vec!["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = env.ralph_with_limit(&args, &[], Duration::from_secs(60));
        assert_exit(&out, 0);
        let word = if sandboxed { "denied" } else { "ok" };
        let want: Vec<String> = ["record", "lock", "home"]
            .iter()
            .map(|n| format!("{n} {word}"))
            .collect();
        let got: Vec<String> = env
            .read("attempts.txt")
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(got, want, "sandboxed: {sandboxed}\n{}", said(&out));
        if sandboxed {
            let v = status_json(&env);
            assert_eq!(v["halt_reason"], "complete", "{v}");
        }
    }
}
