//! Every ending goes through the iteration's close, errors too (SPEC §5.1, §11): an iteration
//! that ends because git refuses (an `index.lock`, a merge in progress) or a write fails is
//! recorded (`exit error`), what can be committed is, the state is saved (`error`, exit 1), and
//! `ralph resume` goes on at the next iteration without inventing a record. A failed append to
//! the activity log stops nothing.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;

/// The file-size limit ralph runs under where a write must fail ("File too large", as on a
/// full disk); a file made exactly this long can no longer grow.
const LIMIT: u64 = 4 << 20;

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

fn state(env: &TestEnv) -> serde_json::Value {
    serde_json::from_str(&env.read(".ralph/state.json")).unwrap()
}

/// `ralph resume` with the fake agent following `script`, unattended, bounded.
fn resume(env: &TestEnv, script: &str) -> std::process::Output {
    let agent = fake_agent_cmd();
    env.ralph_with_limit(
        &["resume", "--agent-cmd", &agent, "--yes", "--grace", "1s"],
        &[("FAKE_AGENT_SCRIPT", script)],
        Duration::from_secs(60),
    )
}

/// The iteration numbers of the ITER records, in order.
fn recorded(env: &TestEnv) -> Vec<u32> {
    env.iter_records()
        .iter()
        .map(|r| {
            r.strip_prefix("ITER ")
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("not an ITER record: {r}"))
        })
        .collect()
}

/// The run halted with an error after recording iteration `n` as `exit error`: exit 1, the
/// state saved (not running, `error`, exit 1) with `n` as its iteration.
#[track_caller]
fn assert_error_close(env: &TestEnv, out: &std::process::Output, n: u32) {
    assert_exit(out, 1);
    let recs = env.iter_records();
    let last = recs.last().map(String::as_str).unwrap_or_default();
    assert!(
        last.starts_with(&format!("ITER {n} ")) && last.contains(" | exit error | "),
        "iteration {n} is recorded as ended in an error: {recs:?}\n{}",
        stderr(out)
    );
    let st = state(env);
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["halt_reason"], "error", "{st}");
    assert_eq!(st["exit_code"], 1, "{st}");
    assert_eq!(st["iteration"], n, "{st}");
    assert!(
        env.activity().contains("Halt: error (exit 1)"),
        "{}",
        env.activity()
    );
}

/// No record was invented for an iteration ralph was "killed" in.
#[track_caller]
fn assert_nothing_invented(env: &TestEnv) {
    let recs = env.iter_records();
    assert!(
        recs.iter().all(|r| !r.contains("| exit 137 |")),
        "a record was invented: {recs:?}"
    );
    assert!(
        !env.activity().contains("ralph was killed"),
        "{}",
        env.activity()
    );
}

fn git_fails(env: &TestEnv, args: &[&str]) -> String {
    let out = env
        .command("git")
        .args(args)
        .current_dir(&env.repo)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "git {args:?} was expected to fail: {}",
        stdout(&out)
    );
    stderr(&out)
}

/// The agent leaves `.git/index.lock` (as a git killed mid-write does) beside its work: the
/// close cannot stage, so the work stays uncommitted and the message names the lock; the
/// iteration is still recorded (`exit error`, the fingerprint of the tree as left) and the state
/// saved. ralph never deletes the lock. Once the user removed it, `resume` commits the work
/// left and goes on at iteration 2. Control: the lock really stops git (the test's own `git
/// add` fails while it is there).
#[test]
fn an_index_lock_left_by_the_agent_is_recorded_and_its_work_committed_on_resume() {
    let env = setup(&["c1", "c2"]);
    let lock = agent_sh(&env, "lock", "echo work > work.txt\n: > .git/index.lock");
    let out = env.run_fake(&format!("{lock},check"), &["--json"]);
    assert_error_close(&env, &out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("iteration 1's work is not committed") && err.contains("index.lock"),
        "{err}"
    );
    let halted = events_named(&out, "halted");
    assert_eq!(halted.len(), 1, "{}", stdout(&out));
    assert_eq!(halted[0]["reason"], "error");
    assert_eq!(halted[0]["exit_code"], 1);
    assert!(
        halted[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("index.lock")),
        "{}",
        halted[0]
    );
    let finished = events_named(&out, "iteration_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["exit_code"], serde_json::Value::Null);
    assert_eq!(finished[0]["error"], true);

    let status = status_json(&env);
    assert_eq!(status["halt_reason"], "error");
    assert_eq!(status["exit_code"], 1);
    assert!(
        status["last_records"][0]
            .as_str()
            .is_some_and(|r| r.contains(" | exit error | ")),
        "{status}"
    );
    let human = env.ralph(&["status"]);
    assert!(
        stdout(&human)
            .contains("(iteration 1 ended in an error: the reason is in .ralph/activity.log)"),
        "{}",
        stdout(&human)
    );
    assert!(
        env.activity()
            .contains("Halt: error (exit 1): iteration 1's work is not committed: ")
    );

    let index_lock = env.repo.join(".git/index.lock");
    assert!(index_lock.exists(), "ralph never deletes the lock");
    // The control: git itself is stopped by it.
    assert!(git_fails(&env, &["add", "work.txt"]).contains("index.lock"));
    assert_eq!(env.commits(), vec!["initial"], "nothing was committed");
    assert!(
        env.iter_records()[0].ends_with(&format!(" | {}", env.porcelain_cksum())),
        "the fingerprint is the tree left behind: {:?} vs {}",
        env.iter_records(),
        env.porcelain_cksum()
    );

    std::fs::remove_file(&index_lock).unwrap();
    let out = resume(&env, "check");
    assert_exit(&out, 0);
    assert_nothing_invented(&env);
    assert_eq!(recorded(&env), vec![1, 2, 3]);
    let commits = env.commits();
    assert!(
        commits.contains(&"ralph: iteration 1 (halted: error)".to_string()),
        "{commits:?}"
    );
    let holds = env.git(&[
        "log",
        "-1",
        "--format=",
        "--name-only",
        "--grep=iteration 1 (halted",
    ]);
    assert!(holds.lines().any(|l| l == "work.txt"), "{holds}");
    assert!(env.activity().contains("resumed at iteration 2"));
}

/// The iteration that ended in an error had checked the last box: its work is uncommitted.
/// `resume` finds the task complete, but settles that work first — committed as the iteration's
/// leftovers — and only then says "already complete"; it never leaves it behind. Control: the
/// task file really was complete and uncommitted when the resume started.
#[test]
fn a_resume_of_a_task_completed_in_an_error_iteration_commits_its_work_first() {
    let env = setup(&["only"]);
    let lock = agent_sh(&env, "lock", ": > .git/index.lock");
    let out = env.run_fake(&format!("check+{lock}"), &[]);
    assert_error_close(&env, &out, 1);
    std::fs::remove_file(env.repo.join(".git/index.lock")).unwrap();
    assert!(env.read("RALPH_TASK.md").contains("- [x] only"));
    assert!(
        env.git(&["status", "--porcelain"])
            .contains("RALPH_TASK.md")
    );
    let out = resume(&env, "idle");
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("already complete"),
        "{}",
        stdout(&out)
    );
    assert!(!env.agent_ran(2), "nothing runs for a complete task");
    let commits = env.commits();
    assert_eq!(
        commits[0], "ralph: iteration 1 (halted: error)",
        "{commits:?}"
    );
    assert!(
        !env.git(&["status", "--porcelain", "--untracked-files=no"])
            .contains("RALPH_TASK.md"),
        "the checked box is committed"
    );
}

/// The agent starts a merge that conflicts and leaves it so: ralph stages nothing (`git add -A`
/// would mark the conflict resolved, markers and all) and commits nothing (a plain commit would
/// drop MERGE_HEAD and turn the merge into half of one); MERGE_HEAD, the unmerged entries and
/// the agent's other work stay as they were for the user. The iteration is recorded and the
/// state saved; `resume` refuses while the merge is in progress, and once the user aborted
/// it, commits the work left and goes on. Control: the merge really stops git's own commit.
#[test]
fn a_merge_in_progress_is_left_to_the_user_and_the_iteration_recorded() {
    let env = setup(&["c1"]);
    env.write("shared.txt", "base\n");
    env.commit_all("shared");
    env.git(&["checkout", "-q", "-b", "other"]);
    env.write("shared.txt", "theirs\n");
    env.commit_all("theirs");
    env.git(&["checkout", "-q", "main"]);
    let merge = agent_sh(
        &env,
        "merge",
        "echo mine > shared.txt\ngit commit -qam mine\necho work > work.txt\ngit merge -q other || true",
    );
    let out = env.run_fake(&format!("{merge},check"), &[]);
    assert_error_close(&env, &out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("iteration 1's work is not committed") && err.contains("merge"),
        "{err}"
    );
    assert!(
        env.repo.join(".git/MERGE_HEAD").exists(),
        "the merge is left as it was"
    );
    assert!(
        !env.git(&["ls-files", "-u", "shared.txt"]).is_empty(),
        "the conflict is not marked resolved"
    );
    assert!(
        env.git(&["ls-files", "work.txt"]).is_empty(),
        "nothing was staged"
    );
    let head = env.git(&["log", "-1", "--format=%s %h"]);
    assert!(head.starts_with("mine "), "ralph committed nothing: {head}");
    let short = head.trim().rsplit(' ').next().unwrap().to_string();
    assert!(
        env.iter_records()[0].contains(&format!(" | exit error | {short} | ")),
        "{:?}",
        env.iter_records()
    );
    // The control: git's own commit refuses too.
    assert!(git_fails(&env, &["commit", "-qm", "x"]).contains("unmerged"));
    // A resume refuses while the merge is in progress, and writes nothing.
    let refused = resume(&env, "check");
    assert_exit(&refused, 1);
    assert!(stderr(&refused).contains("merge is in progress"));
    assert_eq!(recorded(&env), vec![1]);

    env.git(&["merge", "--abort"]);
    let out = resume(&env, "check");
    assert_exit(&out, 0);
    assert_nothing_invented(&env);
    assert_eq!(recorded(&env), vec![1, 2]);
    let commits = env.commits();
    assert_eq!(
        commits[..2],
        [
            "ralph: iteration 2 — c1".to_string(),
            "ralph: iteration 1 (halted: error)".to_string()
        ],
        "{commits:?}"
    );
    assert!(env.git(&["status", "--porcelain"]).is_empty());
}

/// Fill `path` up to [`LIMIT`] bytes with whole comment lines, so that nothing more can be
/// appended to it under the limit.
fn fill_to_limit(path: &std::path::Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let pad = LIMIT as usize - bytes.len();
    bytes.extend(std::iter::repeat_n(b'#', pad - 1));
    bytes.push(b'\n');
    std::fs::write(path, &bytes).unwrap();
}

/// A run directory of this test's run: `.ralph/runs/{run_id}`.
fn run_dir(env: &TestEnv) -> PathBuf {
    let st = state(env);
    env.repo
        .join(".ralph/runs")
        .join(st["run_id"].as_str().unwrap())
}

/// The activity log is for people: when it cannot be appended to (here: it reached the file
/// size limit ralph runs under, as on a full disk), the run warns once and goes on to
/// completion, every iteration recorded. Control: not a byte reached the log.
#[test]
fn an_activity_log_that_cannot_be_written_stops_nothing() {
    let env = setup(&["c1", "c2", "c3"]);
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let log = env.repo.join(".ralph/activity.log");
    fill_to_limit(&log);
    let before = std::fs::read(&log).unwrap();
    let agent = fake_agent_cmd();
    let out = env.ralph_with_fsize_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
            "--max-iterations",
            "5",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
        LIMIT,
    );
    assert_exit(&out, 0);
    assert_eq!(recorded(&env), vec![1, 2, 3]);
    let st = state(&env);
    assert_eq!(st["halt_reason"], "complete", "{st}");
    // The control: the log really could not be written.
    assert!(std::fs::read(&log).unwrap() == before, "the log grew");
    let err = stderr(&out);
    let warnings = err
        .lines()
        .filter(|l| l.contains("warning:") && l.contains("activity.log"))
        .count();
    assert_eq!(
        warnings, 1,
        "one warning, however many lines were lost:\n{err}"
    );
    assert!(err.contains("File too large"), "{err}");
}

/// The run directory (so the prompt and the transcript) of iteration 2 cannot be created: the
/// agent replaced it with a file. No agent ran, so iteration 2 is not spent: no record, the
/// state keeps iteration 1 and says error, exit 1. Once the file is gone, `resume` runs
/// iteration 2 — once, with its record, and without inventing one. Control: the agent of
/// iteration 2 never started.
#[test]
fn an_iteration_whose_transcript_cannot_be_created_is_not_spent() {
    let env = setup(&["c1", "c2"]);
    let sabotage = agent_sh(
        &env,
        "sabotage",
        "run=.ralph/runs/$RALPH_RUN_ID\nrm -rf \"$run\"\n: > \"$run\"",
    );
    let out = env.run_fake(&format!("check+{sabotage},check"), &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("iteration 2 could not start") && err.contains("not a directory"),
        "{err}"
    );
    assert!(!env.agent_ran(2), "the agent of iteration 2 never started");
    assert_eq!(recorded(&env), vec![1]);
    let st = state(&env);
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["halt_reason"], "error", "{st}");
    assert_eq!(st["exit_code"], 1, "{st}");
    assert_eq!(st["iteration"], 1, "iteration 2 was not spent: {st}");

    std::fs::remove_file(run_dir(&env)).unwrap();
    let out = resume(&env, "check");
    assert_exit(&out, 0);
    assert!(env.agent_ran(2));
    assert_nothing_invented(&env);
    assert_eq!(recorded(&env), vec![1, 2]);
    assert!(env.activity().contains("resumed at iteration 2"));
}

/// The transcript of a running agent cannot be written (a full disk): the agent is stopped and
/// the iteration, which ran, is recorded as ended in an error — not as an agent killed by
/// SIGKILL. Control: the transcript really could not grow.
#[test]
fn a_transcript_that_cannot_be_written_is_recorded_as_an_error() {
    let env = setup(&["c1", "c2"]);
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let transcript = run_dir(&env).join("iter-002.log");
    std::fs::write(&transcript, vec![b'.'; LIMIT as usize]).unwrap();
    let agent = fake_agent_cmd();
    let out = env.ralph_with_fsize_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
            "--max-iterations",
            "5",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
        LIMIT,
    );
    assert_error_close(&env, &out, 2);
    assert!(stderr(&out).contains("File too large"), "{}", stderr(&out));
    // The control: ralph's writes to the transcript all failed.
    assert_eq!(std::fs::metadata(&transcript).unwrap().len(), LIMIT);
    assert_nothing_invented(&env);
}

/// The ITER record itself cannot be written (`iterations.log` at the size limit): the close
/// still commits the work and saves the state, and the run ends with the error — it does not
/// go on past an iteration without its record. Control: the log did not grow.
#[test]
fn an_iter_record_that_cannot_be_written_still_saves_the_state_and_ends_the_run() {
    let env = setup(&["c1", "c2", "c3"]);
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let log = env.repo.join(".ralph/iterations.log");
    fill_to_limit(&log);
    let before = std::fs::read(&log).unwrap();
    let agent = fake_agent_cmd();
    let out = env.ralph_with_fsize_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
            "--max-iterations",
            "5",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
        LIMIT,
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("iterations.log") && err.contains("File too large"),
        "{err}"
    );
    assert!(std::fs::read(&log).unwrap() == before, "the log grew");
    let st = state(&env);
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["halt_reason"], "error", "{st}");
    assert_eq!(st["exit_code"], 1, "{st}");
    assert_eq!(st["iteration"], 2, "{st}");
    assert!(
        env.commits()
            .first()
            .is_some_and(|c| c == "ralph: iteration 2 — c2"),
        "the work is committed: {:?}",
        env.commits()
    );
    assert!(!env.agent_ran(3), "the run did not go on");
}

/// The agent leaves a FIFO where git reads a file (`.gitignore`): every git that reads it
/// waits for a writer for ever. ralph's git commands have a deadline (`RALPH_GIT_TIMEOUT`, 10
/// minutes by default): the command is killed, the iteration ends in an error that names it and
/// is recorded, and the run exits 1 instead of hanging overnight. Control: git itself hangs on
/// it (`timeout` kills it). Once the FIFO is gone, `resume` commits the work and completes.
#[test]
fn a_git_command_that_hangs_on_a_fifo_ends_the_iteration_in_an_error() {
    let env = setup(&["only"]);
    let fifo = agent_sh(&env, "fifo", "echo work > work.txt\nmkfifo .gitignore");
    let agent = fake_agent_cmd();
    let out = env.ralph_with_limit(
        &["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"],
        &[("FAKE_AGENT_SCRIPT", &fifo), ("RALPH_GIT_TIMEOUT", "2s")],
        Duration::from_secs(60),
    );
    assert_error_close(&env, &out, 1);
    assert!(
        stderr(&out).contains("ran longer than 2 s and was killed"),
        "{}",
        stderr(&out)
    );
    // The control: git itself waits on the FIFO.
    let hung = env
        .command("timeout")
        .args(["2", "git", "status", "--porcelain"])
        .current_dir(&env.repo)
        .output()
        .unwrap();
    assert_eq!(hung.status.code(), Some(124), "git did not hang");
    std::fs::remove_file(env.repo.join(".gitignore")).unwrap();
    let out = resume(&env, "check");
    assert_exit(&out, 0);
    assert!(env.git(&["log", "--format=%s"]).contains("(halted: error)"));
}
