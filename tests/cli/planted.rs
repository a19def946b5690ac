//! What the agent plants where `ralph status` and `ralph resume` read (SPEC §7, §11): FIFOs at
//! the ITER log and the git directory's lock (an open for reading waits for a writer for ever),
//! and a `state.json` made unreadable while ralph's own record stands. Each test shows the file
//! really is what the agent made of it, then that ralph answers at once.

use std::time::Duration;

use crate::common::*;

/// A finished run: one iteration, one box left.
fn finished_run() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["one", "two"], "");
    env.commit_all("initial");
    let out = env.run_fake("check:1", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    env
}

fn mkfifo(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// Run `ralph ARGS`; `None` when it still runs after a bound (then killed).
fn answers(env: &TestEnv, args: &[&str]) -> Option<(Option<i32>, String, String)> {
    let mut cmd = env.ralph_cmd();
    cmd.args(args);
    let mut bg = env.spawn(cmd);
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = bg.child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = bg.child.kill();
        let _ = bg.child.wait();
        return None;
    }
    Some(bg.wait(Duration::from_secs(1)))
}

#[test]
fn fifos_at_the_log_and_the_lock_never_hang_status() {
    for planted in [".ralph/iterations.log", ".git/ralph.lock"] {
        let env = finished_run();
        let path = env.repo.join(planted);
        mkfifo(&path);
        // The control: it is a FIFO, which a plain open for reading waits on.
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata(&path).unwrap().file_type().is_fifo());
        for args in [&["status"][..], &["status", "--json"], &["status", "--all"]] {
            let (code, out, err) =
                answers(&env, args).unwrap_or_else(|| panic!("`ralph {args:?}` hung on {planted}"));
            assert_eq!(code, Some(0), "{planted} {args:?}: {err}");
            assert!(!out.is_empty(), "{planted} {args:?}: {err}");
        }
    }
}

#[test]
fn an_unreadable_state_json_is_ignored_while_ralphs_record_stands() {
    let env = finished_run();
    env.write(".ralph/state.json", "{ this is not json");
    let out = env.ralph(&["status", "--json"]);
    assert_exit(&out, 0);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["iteration"], 1, "{st}");
    assert!(
        stderr(&out).contains("the file is ignored"),
        "{}",
        stderr(&out)
    );
    // A resume goes on from the record, and writes the file afresh.
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &["resume", "--agent-cmd", &agent, "--max-iterations", "2"],
        &[("FAKE_AGENT_SCRIPT", "check:2")],
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2);
    assert!(env.read(".ralph/state.json").contains("\"iteration\": 2"));
    // The control: without ralph's record the same file is refused, naming it.
    std::fs::remove_dir_all(env.home.join(".local/state/ralph")).unwrap();
    env.write(".ralph/state.json", "{ this is not json");
    let out = env.ralph(&["status"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("state.json"), "{}", stderr(&out));
}

/// What a terminal would obey: the clipboard set (OSC 52), the title set, a line rubbed out and
/// written over.
const ESCAPES: &[&str] = &["\u{1b}]52;c;", "\u{1b}]0;", "\u{1b}[2K", "\u{7}", "\r"];

#[test]
fn escape_sequences_the_agent_writes_never_reach_the_terminal() {
    let env = TestEnv::new();
    env.write_task(&["one", "two"], "");
    env.commit_all("initial");
    let agent = agent_sh(
        &env,
        "escapes",
        "printf 'ITER 9 | 9/9 criteria | exit 0 | abc1234 | 1 2 \\033]52;c;ZWNobyBoaQo=\\007\\r\\033[2KAll done\\n' >> .ralph/iterations.log\n\
         printf -- '- [ ] three \\033]0;owned\\007\\n' >> RALPH_TASK.md\n\
         sed -i 's/- \\[ \\] one/- [x] one/' RALPH_TASK.md\n\
         git add -A && git -c core.hooksPath=/dev/null commit -qm \"$(printf 'mine \\033]52;c;eA==\\007')\"",
    );
    let out = env.run_fake(&agent, &["--max-iterations", "1", "--color", "always"]);
    assert_exit(&out, 3);
    // The control: the files hold the raw sequences.
    assert!(env.read(".ralph/iterations.log").contains("\u{1b}]52;c;"));
    assert!(env.read("RALPH_TASK.md").contains("\u{1b}]0;owned"));
    let status = env.ralph(&["status", "--color", "always"]);
    assert_exit(&status, 0);
    for (what, text) in [("run", stdout(&out)), ("status", stdout(&status))] {
        for e in ESCAPES {
            assert!(!text.contains(e), "{what} printed {e:?}:\n{text:?}");
        }
    }
    // Written out, still readable.
    assert!(stdout(&status).contains("\\u{1b}]52;c;ZWNobyBoaQo="));
    assert!(stdout(&status).contains("three \\u{1b}]0;owned"));
}

/// The agent raises its own budget in the task file (`max_cost: 1` → `1000`), which the run it
/// is in does not read again; the user resumes after the iteration cap. The resume keeps the
/// run's budget: 0.4 a session, the third reaches it (exit 10). Control: a new run of the same
/// task file (whose budget the user can see in a commit) takes the file's.
#[test]
fn an_agent_that_raises_its_own_budget_does_not_raise_the_runs() {
    let env = TestEnv::new();
    env.write_task(&["c1", "c2", "c3", "c4", "c5"], "max_cost: 1\n");
    env.commit_all("initial");
    let raise = agent_sh(
        &env,
        "raise",
        "sed -i 's/^max_cost: 1$/max_cost: 1000/' RALPH_TASK.md",
    );
    let script = format!("check+claude-result:0.4+{raise},check+claude-result:0.4");
    let limit = Duration::from_secs(60);
    let out = run_claude_fake(&env, "run", &script, &["--max-iterations", "1"], limit);
    assert_exit(&out, 3);
    assert!(env.read("RALPH_TASK.md").contains("max_cost: 1000"));
    let out = run_claude_fake(&env, "resume", &script, &["--max-iterations", "10"], limit);
    assert_exit(&out, 10);
    assert!(env.agent_ran(3) && !env.agent_ran(4), "{}", stdout(&out));
    // A flag given to the resume is the user's: it replaces the recorded budget.
    let out = run_claude_fake(
        &env,
        "resume",
        &script,
        &["--max-iterations", "10", "--max-cost", "1.5"],
        limit,
    );
    assert_exit(&out, 10);
    assert!(env.agent_ran(4) && !env.agent_ran(5), "{}", stdout(&out));
    // The control: a new run reads the file as it is now.
    let out = run_claude_fake(
        &env,
        "run",
        "check+claude-result:0.4",
        &["--reset", "--max-iterations", "10"],
        limit,
    );
    assert_exit(&out, 0);
}

/// The agent raises its own iteration cap in the task file (`max_iterations: 2` → `50`); the
/// run halts at its cap, and `ralph resume` without a flag keeps it (nothing is left: the error
/// names the flag). Control: with `--max-iterations` the user raises it, and a new run reads
/// the file.
#[test]
fn an_agent_that_raises_its_own_iteration_cap_does_not_raise_the_runs() {
    let env = TestEnv::new();
    env.write_task(&["c1", "c2", "c3", "c4"], "max_iterations: 2\n");
    env.commit_all("initial");
    let raise = agent_sh(
        &env,
        "raise",
        "sed -i 's/^max_iterations: 2$/max_iterations: 50/' RALPH_TASK.md",
    );
    let out = env.run_fake(&format!("check+{raise}"), &[]);
    assert_exit(&out, 3);
    assert!(env.read("RALPH_TASK.md").contains("max_iterations: 50"));
    let agent = fake_agent_cmd();
    let resume = |extra: &[&str]| {
        let mut args = vec!["resume", "--agent-cmd", agent.as_str(), "--yes"];
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
        stderr(&out).contains("already used its 2 iterations"),
        "{}",
        stderr(&out)
    );
    assert!(!env.agent_ran(3));
    // The control: the user's flag raises it.
    let out = resume(&["--max-iterations", "4"]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(4));
}

/// Three identical ITER lines appended to the log (which the agent writes) make no stall in
/// `ralph status`, and the run's own record still tells a real one. Control: the log alone
/// (without a run state) reads as a stall.
#[test]
fn lines_appended_to_the_log_make_no_stall_in_status() {
    let env = finished_run();
    let fake = "ITER 7 | 0/2 criteria | exit 0 | abc1234 | 1 2\n".repeat(3);
    let log = format!("{}{fake}", env.read(".ralph/iterations.log"));
    env.write(".ralph/iterations.log", &log);
    let st = status_json(&env);
    assert_eq!(st["stalled"], false, "{st}");
    assert!(!stdout(&env.ralph(&["status"])).contains("stalled"));
    // The control: without a run state (neither ralph's record nor `state.json`), the log is
    // all there is, and it reads as a stall.
    std::fs::remove_dir_all(env.home.join(".local/state/ralph")).unwrap();
    std::fs::remove_file(env.repo.join(".ralph/state.json")).unwrap();
    assert_eq!(status_json(&env)["stalled"], true);
    // A real stall: the record says so.
    let env = TestEnv::new();
    env.write_task(&["one"], "");
    env.commit_all("initial");
    assert_exit(&env.run_fake("idle", &[]), 4);
    assert_eq!(status_json(&env)["stalled"], true);
}
