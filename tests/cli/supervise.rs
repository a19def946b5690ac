//! Supervision you can leave running overnight (issue 3): timeouts, leaked pipes, signals,
//! SIGKILL of ralph, resume, the lock. Real processes; every test checks that pids died.

use std::time::{Duration, Instant};

use crate::common::*;

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

fn state(env: &TestEnv) -> serde_json::Value {
    serde_json::from_str(&env.read(".ralph/state.json")).unwrap()
}

/// The duration the activity log recorded for iteration `n`.
fn iteration_line(env: &TestEnv, n: u32) -> String {
    env.activity()
        .lines()
        .find(|l| l.contains(&format!("] Iteration {n}: ")) && l.contains("criteria complete"))
        .unwrap_or_else(|| panic!("no record of iteration {n}:\n{}", env.activity()))
        .to_string()
}

#[test]
fn hung_agent_with_grandchild_is_stopped_by_timeout_and_the_loop_goes_on() {
    let env = setup(&["t1"]);
    let out = env.run_fake(
        "hang+grandchild,check",
        &["--timeout", "2s", "--grace", "1s"],
    );
    assert_exit(&out, 0);
    let pids = env.agent_pids(1);
    assert_eq!(pids.len(), 2, "agent and grandchild recorded");
    assert_all_dead(&pids, Duration::from_millis(200));
    let activity = env.activity();
    assert!(
        activity.contains("Iteration 1: agent timed out after 2s (stopped with SIGTERM)"),
        "{activity}"
    );
    assert!(
        env.iter_records()[0].contains("| exit 143 |"),
        "{:?}",
        env.iter_records()
    );
    // Stopped well within the grace: the iteration took about the timeout.
    let line = iteration_line(&env, 1);
    assert!(
        line.contains("duration: 2s") || line.contains("duration: 3s"),
        "{line}"
    );
}

#[test]
fn agent_ignoring_sigterm_is_killed_after_the_grace() {
    let env = setup(&["t1"]);
    let out = env.run_fake(
        "ignore-term+grandchild+hang,check",
        &["--timeout", "300ms", "--grace", "300ms"],
    );
    assert_exit(&out, 0);
    assert_all_dead(&env.agent_pids(1), Duration::from_millis(200));
    assert!(
        env.activity()
            .contains("Iteration 1: agent timed out after 0.3s (stopped with SIGKILL)"),
        "{}",
        env.activity()
    );
    assert!(env.iter_records()[0].contains("| exit 137 |"));
}

#[test]
fn idle_timeout_stops_a_silent_agent() {
    let env = setup(&["t1"]);
    let out = env.run_fake(
        "hang,check",
        &["--idle-timeout", "300ms", "--grace", "100ms"],
    );
    assert_exit(&out, 0);
    assert_all_dead(&env.agent_pids(1), Duration::from_millis(200));
    assert!(
        env.activity()
            .contains("Iteration 1: agent printed nothing for 0.3s"),
        "{}",
        env.activity()
    );
}

#[test]
fn grandchild_holding_the_pipes_does_not_hang_the_iteration() {
    let env = setup(&["l1"]);
    let out = env.run_fake("check+leak", &[]);
    assert_exit(&out, 0);
    let pids = env.agent_pids(1);
    assert_eq!(pids.len(), 2);
    assert_all_dead(&pids, Duration::from_millis(200));
    assert!(
        env.activity().contains("still held its output"),
        "{}",
        env.activity()
    );
    // The grandchild would hold the pipes for 300 s: the run ended (within run_fake's bound)
    // because the drain is bounded, not because the grandchild let go.
}

#[test]
fn sigint_stops_the_agent_commits_partial_work_and_resume_completes() {
    let env = setup(&["s1", "s2"]);
    let bg = env.spawn_fake("churn+grandchild+hang,check", &["--grace", "1s"]);
    let pids = env.wait_for_pids(1, 2);
    bg.signal(libc::SIGINT);
    let (code, so, _) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130), "{so}");
    assert_all_dead(&pids, Duration::from_millis(100));
    assert_eq!(env.commits()[0], "ralph: iteration 1 (interrupted)");
    assert!(
        env.git(&["show", "--name-only", "--format=", "HEAD"])
            .contains("churn.txt")
    );
    let st = state(&env);
    assert_eq!(st["halt_reason"], "interrupted");
    assert_eq!(st["exit_code"], 130);
    assert_eq!(st["running"], false);
    assert!(so.contains("ralph resume"), "{so}");

    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &["resume", "--agent-cmd", &agent, "--yes"],
        &[("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("resuming run"), "{}", stdout(&out));
    // Every iteration has its record, the interrupted one too (SPEC §5.1).
    let recs = env.iter_records();
    assert!(recs[0].starts_with("ITER 1 | 0/2 criteria"), "{recs:?}");
    assert!(recs[1].starts_with("ITER 2 | 1/2 criteria"), "{recs:?}");
    assert!(recs[2].starts_with("ITER 3 | 2/2 criteria"), "{recs:?}");
    assert_eq!(
        state(&env)["run_id"],
        st["run_id"],
        "the same run continued"
    );
}

/// Ctrl-C leaves nothing of ralph's staged or modified, and says what became of the work
/// (issue 30): an agent stopped before it changed anything has nothing committed — its status
/// block, bookkeeping that never goes alone into a commit, is put back as HEAD has it rather
/// than left staged in the user's index — and the message does not claim a commit. The control:
/// an agent that did change something has its work committed, and the message says so.
#[test]
fn sigint_leaves_the_tree_clean_and_says_what_was_committed() {
    for (script, commits, said) in [
        (
            "churn+hang",
            2,
            "the agent was stopped and its work committed",
        ),
        (
            "hang",
            1,
            "the agent was stopped before it changed anything: there was nothing to commit",
        ),
    ] {
        // As a newcomer starts: `ralph init`, its files committed (ralph's bookkeeping in HEAD).
        let env = TestEnv::new();
        let init = env.ralph(&[
            "init",
            "Test task",
            "--criterion",
            "s1",
            "--criterion",
            "s2",
        ]);
        assert_exit(&init, 0);
        env.commit_all("initial");
        let bg = env.spawn_fake(script, &["--grace", "1s"]);
        env.wait_for_pids(1, 1);
        if script.starts_with("churn") {
            assert!(wait_until(Duration::from_secs(10), || env
                .repo
                .join("churn.txt")
                .exists()));
        }
        bg.signal(libc::SIGINT);
        let (code, so, se) = bg.wait(Duration::from_secs(20));
        assert_eq!(code, Some(130), "{so}\n{se}");
        assert!(so.contains(said), "{script}: {so}");
        assert_eq!(
            env.commits().len(),
            commits,
            "{script}: {:?}",
            env.commits()
        );
        assert_eq!(
            env.git(&["status", "--porcelain"]),
            "",
            "{script}: nothing of ralph's left staged or modified"
        );
        assert_eq!(state(&env)["halt_reason"], "interrupted");
    }
}

#[test]
fn second_sigint_during_the_grace_kills_at_once() {
    let env = setup(&["s1"]);
    let bg = env.spawn_fake("note-term+grandchild+hang", &["--grace", "30s"]);
    let pids = env.wait_for_pids(1, 2);
    bg.signal(libc::SIGINT);
    let stop = env.log.join("term-1.txt");
    assert!(
        wait_until(Duration::from_secs(20), || stop.exists()),
        "the first Ctrl-C sends the agent SIGTERM"
    );
    assert!(
        pids.iter().any(|p| pid_alive(*p)),
        "the agent ignores SIGTERM during the grace"
    );
    let sent = Instant::now();
    bg.signal(libc::SIGINT);
    let (code, _, _) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130));
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "a second Ctrl-C must not wait for the 30s grace"
    );
    assert_all_dead(&pids, Duration::from_millis(100));
}

#[test]
fn sigterm_and_sighup_behave_like_the_first_ctrl_c() {
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        let env = setup(&["s1"]);
        let bg = env.spawn_fake("churn+hang", &["--grace", "1s"]);
        let pids = env.wait_for_pids(1, 1);
        // The agent's work is on disk before the signal: it is what gets committed (ralph's
        // own bookkeeping never commits alone).
        assert!(wait_until(Duration::from_secs(10), || env
            .repo
            .join("churn.txt")
            .exists()));
        bg.signal(sig);
        let (code, _, _) = bg.wait(Duration::from_secs(20));
        assert_eq!(code, Some(130), "signal {sig}");
        assert_all_dead(&pids, Duration::from_millis(100));
        assert_eq!(env.commits()[0], "ralph: iteration 1 (interrupted)");
    }
}

#[test]
fn sigkill_of_ralph_takes_the_agent_tree_with_it_and_resume_continues() {
    let env = setup(&["k1", "k2"]);
    let bg = env.spawn_fake("churn+grandchild+hang,check", &["--grace", "1s"]);
    let pids = env.wait_for_pids(1, 2);
    bg.signal(libc::SIGKILL);
    let (code, _, _) = bg.wait(Duration::from_secs(5));
    assert_eq!(code, None, "killed by a signal");
    assert_all_dead(&pids, Duration::from_secs(1));

    // The logs are intact and the state still says running: a crash, not a halt.
    let activity_before = env.activity();
    assert!(activity_before.contains("Run ") && activity_before.contains(" started: "));
    assert_eq!(state(&env)["running"], true);
    let out = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["running"], false, "nobody holds the lock any more");

    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &["resume", "--agent-cmd", &agent, "--yes"],
        &[("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    let commits = env.commits();
    assert!(
        commits.contains(&"ralph: iteration 1 (interrupted)".to_string()),
        "{commits:?}"
    );
    // The iteration ralph was killed in gets its record on resume (exit 137), so no
    // iteration number goes unrecorded; the next one continues.
    let recs = env.iter_records();
    assert!(
        recs[0].starts_with("ITER 1 ") && recs[0].contains("| exit 137 |"),
        "{recs:?}"
    );
    assert!(recs[1].starts_with("ITER 2 "), "{recs:?}");
    assert!(
        env.activity().starts_with(&activity_before),
        "the log was only appended to"
    );
    assert!(env.activity().contains("resumed at iteration 2"));
}

#[test]
fn one_supervisor_per_repository_and_no_stale_lock_after_a_crash() {
    let env = setup(&["o1"]);
    let bg = env.spawn_fake("hang", &["--grace", "100ms"]);
    let pids = env.wait_for_pids(1, 1);

    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("ralph (pid {}) is already supervising", bg.pid())),
        "{err}"
    );

    // status reads without the lock, during the run.
    let out = env.ralph(&["status", "--json"]);
    assert_exit(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["running"], true);
    assert_eq!(v["pid"], bg.pid());
    assert_eq!(v["iteration"], 1);
    assert_eq!(v["halt_reason"], serde_json::Value::Null);
    let text = stdout(&env.ralph(&["status"]));
    assert!(
        text.contains(&format!("running (pid {})", bg.pid())),
        "{text}"
    );

    bg.signal(libc::SIGKILL);
    let _ = bg.wait(Duration::from_secs(5));
    assert_all_dead(&pids, Duration::from_secs(1));

    // No manual clean-up: an unfinished run is named, and --reset starts a new one.
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("ralph resume") && stderr(&out).contains("--reset"),
        "{}",
        stderr(&out)
    );
    let out = env.run_fake("check", &["--reset"]);
    assert_exit(&out, 0);
}

#[test]
fn resume_honours_a_raised_max_iterations() {
    let env = setup(&["m1", "m2", "m3"]);
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let agent = format!("'{}'", fake_agent().display());
    let resume = |extra: &[&str]| {
        let mut args = vec!["resume", "--agent-cmd", &agent, "--yes"];
        args.extend_from_slice(extra);
        env.ralph_with_limit(
            &args,
            &[("FAKE_AGENT_SCRIPT", "check")],
            Duration::from_secs(60),
        )
    };
    let out = resume(&[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("--max-iterations"),
        "{}",
        stderr(&out)
    );
    let out = resume(&["--max-iterations", "2"]);
    assert_exit(&out, 3);
    let out = resume(&["--max-iterations", "5"]);
    assert_exit(&out, 0);
    let recs = env.iter_records();
    let numbers: Vec<&str> = recs
        .iter()
        .map(|r| r.split(" | ").next().unwrap())
        .collect();
    assert_eq!(numbers, ["ITER 1", "ITER 2", "ITER 3"]);
    let out = resume(&[]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("nothing to resume"));
}

#[test]
fn resume_restores_the_no_progress_streak() {
    let env = setup(&["r1", "r2"]);
    // Two iterations without progress, then a halt at the limit.
    assert_exit(&env.run_fake("churn", &["--max-iterations", "2"]), 3);
    assert_eq!(state(&env)["no_progress_streak"], 2);
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--max-iterations",
            "4",
        ],
        &[("FAKE_AGENT_SCRIPT", "churn")],
        Duration::from_secs(60),
    );
    assert_exit(&out, 3);
    // Iteration 3 completes the streak of three: the fourth prompt carries the alert.
    assert!(!env.agent_prompt(3).contains("STUCK ALERT"));
    assert!(env.agent_prompt(4).contains("STUCK ALERT"));
}

#[test]
fn run_meeting_an_unfinished_run_needs_a_choice() {
    let env = setup(&["u1", "u2"]);
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("unfinished run") && err.contains("ralph resume") && err.contains("--reset"),
        "{err}"
    );
    assert!(!env.agent_ran(2));
    let out = env.run_fake("check", &["--resume", "--max-iterations", "3"]);
    assert_exit(&out, 0);
    assert!(env.iter_records().last().unwrap().starts_with("ITER 2 "));
}

#[test]
fn status_reads_the_tail_of_a_long_log() {
    let env = setup(&["x1"]);
    assert_exit(&env.run_fake("idle", &[]), 4);
    let mut log = String::new();
    for i in 1..=20_000 {
        log.push_str(&format!(
            "ITER {i} | 0/1 criteria | exit 0 | abcdef0 | 4294967295 0\n"
        ));
    }
    std::fs::write(env.repo.join(".ralph/iterations.log"), log).unwrap();
    let out = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = v["last_records"].as_array().unwrap();
    assert_eq!(recs.len(), 3);
    assert!(recs[2].as_str().unwrap().starts_with("ITER 20000 "));
    assert_eq!(v["stalled"], true);
}

/// Run ralph under a pseudo-terminal (`script`), typing `input` into it.
fn in_terminal(env: &TestEnv, args: &str, script: &str, input: &str) -> (Option<i32>, String) {
    let agent = format!("'{}'", fake_agent().display());
    let inner = format!(
        "{} run --agent-cmd \"{agent}\" {args}",
        env!("CARGO_BIN_EXE_ralph")
    );
    let mut cmd = env.command("sh");
    cmd.env("TERM", "xterm")
        .env("FAKE_AGENT_SCRIPT", script)
        .arg("-c")
        .arg(format!(
            "printf '{input}' | script -qfec '{}' /dev/null",
            inner.replace('\'', "'\\''")
        ))
        .current_dir(&env.repo);
    let out = run_with_limit(cmd, Duration::from_secs(60));
    let code = std::fs::read_to_string(env.repo.join(".ralph/state.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["exit_code"].as_i64())
        .map(|c| c as i32);
    (code, stdout(&out))
}

#[test]
fn in_a_terminal_an_unfinished_run_is_resumed_when_the_user_says_so() {
    let env = setup(&["t1", "t2"]);
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let (code, screen) = in_terminal(&env, "--max-iterations 2", "check", "r\\n");
    assert!(screen.contains("Resume it, or reset"), "{screen}");
    assert_eq!(code, Some(0), "{screen}");
    let recs = env.iter_records();
    assert!(
        recs.last().unwrap().starts_with("ITER 2 "),
        "the same run went on: {recs:?}"
    );
}

#[test]
fn in_a_terminal_a_stuck_run_asks_and_stops_when_told() {
    let env = setup(&["s1"]);
    let (code, screen) = in_terminal(&env, "--stuck-threshold 1", "churn", "s\\n");
    assert!(
        screen.contains("no progress for 2 iterations. Continue or stop?"),
        "{screen}"
    );
    assert_eq!(code, Some(5), "{screen}");
    assert!(env.agent_ran(2) && !env.agent_ran(3));
}

/// A SIGTERM that arrives while the agent is being started — after "▶ Iteration 1" is printed,
/// before the agent's run began watching for interrupts — stops the run like any other. The
/// control is the window itself: the signal is sent as soon as the line appears, while ralph
/// still sets up the agent's run. Before: the run counted it as already seen and waited for a
/// second one, with the agent hanging (exit only when the test killed ralph).
#[test]
fn an_interrupt_while_the_agent_starts_is_not_lost() {
    let env = setup(&["s1"]);
    let bg = env.spawn_fake("hang", &["--grace", "1s"]);
    assert!(
        wait_until(Duration::from_secs(60), || std::fs::read_to_string(&bg.out)
            .is_ok_and(|o| o.contains("▶ Iteration 1"))),
        "the iteration never started"
    );
    bg.signal(libc::SIGTERM);
    let (code, so, se) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130), "{so}\n{se}");
    let st = state(&env);
    assert_eq!(st["halt_reason"], "interrupted", "{st}");
}
