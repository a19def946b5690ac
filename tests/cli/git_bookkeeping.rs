//! ralph's own bookkeeping against an agent that uses git itself (SPEC §8, §7, §11): an agent
//! committing its own work, and an agent running `git clean -xfd` while ralph supervises it.

use std::time::Duration;

use crate::common::*;

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["never checked by the agent"], "");
    env.commit_all("initial");
    env
}

/// SPEC §8: ralph's bookkeeping (the Current Status block of `.ralph/progress.md`, its new files
/// under `.ralph/`) never makes a commit by itself, also when the agent committed its own work:
/// it rides along with the next commit. An agent that commits every iteration (`churn` then
/// `git add -A && git commit`) leaves ralph nothing of its own to commit, so no commit in the
/// history holds only files under `.ralph/`.
///
/// Before the git CLI staged (libgit2 only): every iteration gets a `ralph: iteration N — agent work` commit holding only
/// `.ralph/progress.md`.
#[test]
fn an_agent_committing_its_own_work_gets_no_commit_of_ralph_files_alone() {
    let env = setup();
    let out = env.run_fake(
        "churn+commit:agent work",
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    assert_exit(&out, 3);
    let subjects = env.commits();
    assert_eq!(
        subjects.iter().filter(|s| *s == "agent work").count(),
        3,
        "the agent committed its work every iteration: {subjects:?}"
    );
    let mut alone = Vec::new();
    for commit in env.git(&["rev-list", "HEAD"]).lines() {
        let names = env.git(&["show", "--name-only", "--format=", commit]);
        let names: Vec<&str> = names.lines().filter(|l| !l.is_empty()).collect();
        if !names.is_empty() && names.iter().all(|n| n.starts_with(".ralph/")) {
            let subject = env.git(&["log", "-1", "--format=%s", commit]);
            alone.push(format!("{} {names:?}", subject.trim()));
        }
    }
    assert!(
        alone.is_empty(),
        "commits holding only ralph's own files:\n{}",
        alone.join("\n")
    );
}

/// SPEC §8: an iteration whose changes cancel out makes no commit, however git got there — a
/// file added to the index then deleted (`AD`), a change staged then undone in the work tree
/// (`MM` back to HEAD's content), a file taken out of the index but left on disk (`git rm
/// --cached`, which `git add -A` puts back). Only ralph's status block would differ from HEAD,
/// and bookkeeping never commits alone: HEAD stays where it was, and the third identical record
/// is a stall (exit 4).
///
/// Before (found by a hostile probe): ralph counted every path git's status named, so each of
/// these iterations got a commit holding only `.ralph/progress.md`.
#[test]
fn changes_that_cancel_out_make_no_commit() {
    let env = setup();
    env.write("a", "a\n");
    env.write("b", "b\n");
    env.commit_all("files");
    let head = env.git(&["rev-parse", "HEAD"]);
    let script = agent_sh(
        &env,
        "cancel",
        "case $RALPH_ITERATION in\n\
         1) echo n > n && git add n && rm n ;;\n\
         2) echo x >> a && git add a && git show HEAD:a > a ;;\n\
         3) git rm -q --cached b ;;\n\
         esac",
    );
    let out = env.run_fake(
        &script,
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    assert_exit(&out, 4);
    assert_eq!(
        env.git(&["rev-parse", "HEAD"]),
        head,
        "commits were made: {:?}",
        env.commits()
    );
}

/// SPEC §11/§7: one supervisor per work tree, and nothing the agent does to the work tree lets a
/// second one in — the lock lives in the git dir, where `git clean -xfd` cannot remove it. The
/// agent of the first run runs `git clean -xfd` (deleting everything untracked or ignored,
/// `.ralph/` included) and then hangs; a second `ralph run` meanwhile exits 1 naming the first
/// one's pid, and the first goes on unaffected (an interrupt then ends it as usual, exit 130).
///
/// Before the git CLI staged (libgit2 only): `git clean -xfd` deletes `.ralph/lock`; the second `ralph run` takes a new lock
/// and runs its iteration beside the first.
#[test]
fn git_clean_by_the_agent_does_not_let_a_second_supervisor_in() {
    let env = setup();
    let marker = env.home.join("cleaned");
    let clean = agent_sh(
        &env,
        "clean",
        &format!("git clean -xfdq\ntouch '{}'", marker.display()),
    );
    let first = env.spawn_fake(
        &format!("{clean}+hang"),
        &["--max-iterations", "1", "--grace", "1s"],
    );
    // A bound on a condition, not a timing: generous, for a loaded machine.
    let cleaned = wait_until(Duration::from_secs(60), || marker.exists());
    let second = cleaned.then(|| env.run_fake("idle", &["--max-iterations", "1"]));
    let first_alive = pid_alive(first.pid());
    let first_pid = first.pid();
    // Stop the first run before asserting anything, so a failure leaves no ralph behind.
    first.signal(libc::SIGINT);
    let (code, first_out, first_err) = first.wait(Duration::from_secs(30));

    assert!(
        cleaned,
        "the first run's agent never ran `git clean -xfd` (first run: exit {code:?})\n--- stdout ---\n{first_out}\n--- stderr ---\n{first_err}"
    );
    let second = second.expect("second run");
    assert_eq!(
        second.status.code(),
        Some(1),
        "a second supervisor started after `git clean -xfd`: exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        second.status.code(),
        stdout(&second),
        stderr(&second)
    );
    assert!(
        stderr(&second).contains(&format!("pid {first_pid}")),
        "the refusal names the holder's pid {first_pid}: {}",
        stderr(&second)
    );
    assert!(first_alive, "the first run died while the second started");
    assert_eq!(
        code,
        Some(130),
        "the first run, interrupted, ends as usual\n--- stdout ---\n{first_out}\n--- stderr ---\n{first_err}"
    );
}

/// SPEC §12: the stat data git refreshes goes back into the index, so a repository whose files
/// were all touched (a copy, a restore, a formatter) is re-hashed once, not at every iteration.
/// `git diff-files` compares stat data only (it never refreshes), so it lists every entry whose
/// stat data in the index is stale. Every tracked file's times are set to a day in the past
/// (contents unchanged, and no entry can be racily clean); the control shows git sees them all
/// stale, then two iterations of ralph — committing, and with `--no-commit` — must leave none.
///
/// Fails when no status of the iteration writes the index back (the fingerprint's status under
/// `--no-optional-locks` where nothing was staged: with `--no-commit` every entry stays stale).
#[test]
fn refreshed_stat_data_is_written_back_once() {
    for no_commit in [false, true] {
        let env = TestEnv::new();
        env.write_task(&["never checked by the agent"], "");
        for i in 0..300 {
            env.write(&format!("src/d{}/f{i}.txt", i % 7), &format!("file {i}\n"));
        }
        env.commit_all("initial");
        let touched = env
            .command("sh")
            .args([
                "-c",
                "git ls-files -z | xargs -0 touch -d 2020-01-01T00:00:00",
            ])
            .current_dir(&env.repo)
            .status()
            .unwrap();
        assert!(touched.success());
        let stale = |env: &TestEnv| -> Vec<String> {
            env.git(&["diff-files", "--name-only"])
                .lines()
                .map(str::to_string)
                .collect()
        };
        let before = stale(&env);
        assert!(
            before.len() > 300,
            "control: every entry should be stat-dirty, git lists {}",
            before.len()
        );
        let mut args = vec!["--max-iterations", "2", "--stuck-threshold", "99"];
        if no_commit {
            args.push("--no-commit");
        }
        let out = env.run_fake("churn", &args);
        assert_exit(&out, 3);
        let left: Vec<String> = stale(&env)
            .into_iter()
            .filter(|p| p.starts_with("src/"))
            .collect();
        assert!(
            left.is_empty(),
            "no_commit={no_commit}: {} entries still stat-dirty after the run, e.g. {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
    }
}

/// SPEC §12: after git refreshed a touched tree once, the index keeps knowing it unchanged, so
/// later statuses look at what changed only. git marks every entry whose stat data it refreshes
/// as unknown to the file-system monitor; only a status that then finds it unchanged marks it
/// known again, and that knowledge lasts only if the status writes the index. Read with
/// `git ls-files -f` (a lowercase tag: known unchanged) through a hook that reports no change,
/// so the bits are the index's own. The control: before the run none is known (the index has
/// no monitor data).
///
/// Fails when no status after the first full refresh writes the index (every later status of
/// the run then stats every file again).
#[test]
fn a_touched_tree_is_known_unchanged_after_the_first_iteration() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: ralph watches the tree with inotify (Linux) only");
        return;
    }
    let env = TestEnv::new();
    env.write_task(&["never checked by the agent"], "");
    for i in 0..200 {
        env.write(&format!("src/d{}/f{i}.txt", i % 7), &format!("file {i}\n"));
    }
    env.commit_all("initial");
    // ralph's own files exist already (as after `ralph init`): no ignore file of ralph's
    // appears during the run below, which would make git check everything once more.
    assert_exit(&env.run_fake("churn", &["--max-iterations", "1"]), 3);
    let touched = env
        .command("sh")
        .args([
            "-c",
            "git ls-files -z | xargs -0 touch -d 2020-01-01T00:00:00 && \
             git update-index --no-fsmonitor",
        ])
        .current_dir(&env.repo)
        .status()
        .unwrap();
    assert!(touched.success());
    let hook = env.home.join("no-change-hook");
    std::fs::write(&hook, "#!/bin/sh\nprintf '%s\\0' \"$2\"\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let monitor = format!("core.fsmonitor={}", hook.display());
    let unknown = |env: &TestEnv| -> usize {
        env.git(&["-c", &monitor, "ls-files", "-f", "--", "src"])
            .lines()
            .filter(|l| l.starts_with("H "))
            .count()
    };
    assert_eq!(
        unknown(&env),
        200,
        "control: before the run no entry is known unchanged"
    );
    let out = env.run_fake(
        "churn",
        &[
            "--reset",
            "--max-iterations",
            "3",
            "--stuck-threshold",
            "99",
        ],
    );
    assert_exit(&out, 3);
    assert_eq!(
        unknown(&env),
        0,
        "entries the monitor does not know unchanged after the run: every status stats them again"
    );
}

/// SPEC §7/§11: one supervisor per work tree, even when the agent deletes the lock file itself
/// (`.git/ralph.lock` is in the git directory, which the agent can write). The agent removes the
/// lock and starts a second supervisor (`ralph resume`) inside the iteration: it is refused (exit 1,
/// naming the live supervisor's pid) and the first goes on to complete. Bug caught: the second
/// ralph took a new lock and ran beside the first, recording the first one's live iteration as
/// interrupted and interleaving commits.
#[test]
fn deleting_the_lock_file_does_not_let_a_second_supervisor_in() {
    let env = TestEnv::new();
    env.write_task(&["only"], "");
    env.commit_all("initial");
    let nested = env.home.join("nested.out");
    let script = agent_sh(
        &env,
        "nest",
        &format!(
            "rm -f .git/ralph.lock\n\
             set +e\n\
             FAKE_AGENT_SCRIPT=check '{ralph}' resume --yes --agent-cmd \"$RALPH_SELF_AGENT\" --max-iterations 1 > '{out}' 2>&1\n\
             echo \"exit $?\" >> '{out}'\n\
             set -e\n\
             sed -i 's/- \\[ \\] only/- [x] only/' RALPH_TASK.md",
            ralph = env!("CARGO_BIN_EXE_ralph"),
            out = nested.display()
        ),
    );
    let agent = fake_agent_cmd();
    let out = env.ralph_with_limit(
        &[
            "run",
            "--agent-cmd",
            &agent,
            "--yes",
            "--max-iterations",
            "2",
        ],
        &[
            ("FAKE_AGENT_SCRIPT", script.as_str()),
            ("RALPH_SELF_AGENT", agent.as_str()),
        ],
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    let said = std::fs::read_to_string(&nested).unwrap();
    assert!(said.contains("exit 1"), "{said}");
    assert!(said.contains("already supervising"), "{said}");
    let records = env.iter_records();
    assert_eq!(
        records.len(),
        1,
        "only the first supervisor recorded: {records:?}"
    );
}
