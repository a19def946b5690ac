//! The tree a run leaves, and the stop, against what ralph runs after the agent (issue 29,
//! SPEC §5.1, §7, §8, §11): a `pre-commit` hook or an `[hooks]` command that edits the tree
//! after the final walk, an agent that un-ignores ralph's runtime files, a git command blocked
//! when SIGTERM comes, and an ITER record that cannot be written. Each test shows the mechanism
//! really does what it says (the control), then that ralph accounted for it.

use std::time::{Duration, Instant};

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

/// One criterion, committed.
fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["only"], "");
    env.commit_all("initial");
    env
}

fn said(out: &std::process::Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

fn pre_commit_hook(env: &TestEnv, body: &str) {
    let path = env.repo.join(".git/hooks/pre-commit");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The run left a clean tree, and its last ITER record's fingerprint is git's.
#[track_caller]
fn assert_accounted(env: &TestEnv, out: &std::process::Output) {
    let porcelain = env.git(&["status", "--porcelain"]);
    assert!(
        porcelain.is_empty(),
        "the run ended with a dirty tree:\n{porcelain}\n{}",
        said(out)
    );
    assert_eq!(
        last_fingerprint(env),
        env.porcelain_cksum(),
        "the last ITER record's fingerprint is not git's: {:?}",
        env.iter_records()
    );
}

// --- Break 1: what ralph runs after the final walk edits the tree ---

/// Promise (SPEC §5.1 step 7, §8, issue 29): nothing ralph runs comes after the final walk
/// without another walk. A `pre-commit` hook that formats (writes `formatted.txt`, the same
/// bytes every time) runs at the completing iteration's commit: what it left is committed in
/// that iteration, and the run ends with a clean tree whose fingerprint the ITER record holds.
/// Bug caught: "complete", exit 0, with `formatted.txt` untracked and the ITER fingerprint that
/// of a clean tree.
#[test]
fn a_pre_commit_hook_that_edits_the_tree_leaves_it_committed() {
    let env = setup();
    pre_commit_hook(&env, "echo formatted > formatted.txt");
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    assert_exit(&out, 0);
    // The control: the hook ran at ralph's commit and wrote its file.
    assert!(env.repo.join("formatted.txt").exists(), "the hook ran");
    assert_accounted(&env, &out);
    assert!(
        env.git(&["log", "-1", "--format=%B", "--", "formatted.txt"])
            .contains("Ralph-Iteration: 1"),
        "what the hook left is committed in iteration 1: {:?}",
        env.commits()
    );
}

/// A hook that edits at every commit (a counter it appends to): what it left at the iteration's
/// commit is committed once more, and what it leaves at that commit stays — in the ITER
/// record's fingerprint, which is git's, and named in the activity log. ralph never loops on it.
#[test]
fn a_pre_commit_hook_that_edits_at_every_commit_is_in_the_fingerprint() {
    let env = setup();
    pre_commit_hook(&env, "echo x >> stamped.txt");
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    assert_exit(&out, 0);
    assert_eq!(
        env.read("stamped.txt"),
        "x\nx\n",
        "the hook ran at two commits"
    );
    assert!(
        env.commits()
            .iter()
            .any(|c| c.ends_with("(what its hooks left)")),
        "{:?}",
        env.commits()
    );
    assert_eq!(
        last_fingerprint(&env),
        env.porcelain_cksum(),
        "{:?}",
        env.iter_records()
    );
    assert!(
        env.activity()
            .contains("The commit's hooks left stamped.txt changed"),
        "{}",
        env.activity()
    );
}

/// The same for `[hooks]` commands of `.ralph/config.toml`: `on_iteration` and `on_halt` write
/// into the tree after the iteration was recorded. What they leave is committed before ralph
/// exits, and the last fingerprint is git's. Bug caught: exit 0 with `halted.txt` and
/// `iterated.txt` untracked.
#[test]
fn hooks_commands_that_edit_the_tree_leave_it_committed() {
    let env = TestEnv::new();
    env.write_task(&["only"], "");
    env.write(
        ".ralph/config.toml",
        "[hooks]\non_iteration = 'echo \"$RALPH_ITERATION\" >> iterated.txt'\non_halt = 'echo halted >> halted.txt'\n",
    );
    env.commit_all("initial");
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    assert_exit(&out, 0);
    assert!(env.repo.join("halted.txt").exists(), "on_halt ran");
    assert!(env.repo.join("iterated.txt").exists(), "on_iteration ran");
    assert_accounted(&env, &out);
}

// --- Break 2: the agent un-ignores ralph's runtime files ---

/// ralph's runtime files in the index (`git ls-files`), or in HEAD's tree.
fn runtime_tracked(env: &TestEnv) -> Vec<String> {
    let runtime = |p: &str| {
        [
            "activity.log",
            "activity.now",
            "iterations.log",
            "runs/",
            "state.json",
            "lock",
        ]
        .iter()
        .any(|n| p.starts_with(&format!(".ralph/{n}")))
            || p.starts_with(".ralph/.tmp-")
            || p.starts_with(".ralph/.barrier-")
    };
    let mut listed = env.git(&["ls-files", ".ralph"]);
    listed.push_str(&env.git(&["ls-tree", "-r", "--name-only", "HEAD", ".ralph"]));
    let mut v: Vec<String> = listed
        .lines()
        .filter(|p| runtime(p))
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Promise (SPEC §7, issue 29): ralph's runtime files are never staged and never make the tree
/// dirty, whatever the agent does to the ignore rules. The agent empties `.ralph/.gitignore`, or
/// appends `!*` to it; ralph's commits hold none of its logs, transcripts or state, and the
/// tree is clean at the end, its fingerprint git's. The control: the same `.gitignore` left
/// alone by a plain `git add -A` in that tree does stage them. Bug caught: transcripts,
/// `activity.log`, `iterations.log` and `state.json` committed in iteration 2.
#[test]
fn runtime_files_unignored_by_the_agent_are_never_committed() {
    for (how, edit) in [
        ("emptied", ": > .ralph/.gitignore"),
        ("negated", "printf '!*\\n' >> .ralph/.gitignore"),
    ] {
        let env = TestEnv::new();
        env.write_task(&["one", "two"], "");
        env.commit_all("initial");
        let unignore = agent_sh(&env, "unignore", &format!("{edit}\necho work > work.txt"));
        let out = env.run_fake(&format!("check+{unignore}"), &["--max-iterations", "3"]);
        assert_exit(&out, 0);
        let tracked = runtime_tracked(&env);
        assert!(
            tracked.is_empty(),
            "{how}: ralph committed its runtime files {tracked:?}\n{}",
            said(&out)
        );
        assert_accounted(&env, &out);
        // The control: the agent's rules in place, plain git stages ralph's files.
        let twin = make_twin(&env);
        sh_file_in(&env, &twin, &{
            let p = env.home.join("control.sh");
            std::fs::write(&p, format!("{edit}\ngit add -A\n")).unwrap();
            p
        });
        let staged = git_in(&env, &twin, &["diff", "--cached", "--name-only"]);
        assert!(
            staged.contains(".ralph/activity.log") && staged.contains(".ralph/runs/"),
            "{how}: the control stages ralph's files: {staged}"
        );
    }
}

// --- Break 3: SIGTERM while a git command or a git hook blocks ---

/// Processes (other than the test's) whose working directory is the repository.
fn working_in(env: &TestEnv) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .is_ok_and(|cwd| cwd.starts_with(&env.repo))
        })
        .collect()
}

/// SIGTERM once `marker` exists; ralph must exit 130 within a few seconds, with iteration 1
/// recorded and nothing left running in the repository.
#[track_caller]
fn assert_heard(env: &TestEnv, bg: Background, marker: &std::path::Path, what: &str) {
    assert!(
        wait_until(Duration::from_secs(20), || marker.exists()),
        "{what}: never started"
    );
    let t0 = Instant::now();
    bg.signal(libc::SIGTERM);
    let (code, out, err) = bg.wait(Duration::from_secs(20));
    let took = t0.elapsed();
    assert!(
        code == Some(130) && took < Duration::from_secs(3),
        "{what}: SIGTERM ended ralph with {code:?} after {took:?}, not 130 at once\n{out}\n{err}"
    );
    assert!(
        env.iter_records().iter().any(|r| r.starts_with("ITER 1 ")),
        "{what}: iteration 1 has no record: {:?}\n{err}",
        env.iter_records()
    );
    assert!(
        wait_until(Duration::from_secs(2), || working_in(env).is_empty()),
        "{what}: still running in the repository: {:?}",
        working_in(env)
    );
}

/// Promise (SPEC §6, §11, issue 29): SIGTERM is heard within a second whatever git command or
/// git hook is running: the command is killed, the iteration recorded, exit 130. A `pre-commit`
/// hook sleeps 60 s at the iteration's commit (it writes its pid and a marker first); SIGTERM
/// then ends ralph with 130 at once, the hook's process dead. Bug caught: ralph waited the
/// hook out.
#[test]
fn sigterm_while_a_pre_commit_hook_blocks_is_heard_at_once() {
    let env = setup();
    let marker = env.home.join("hook-started");
    let pid_file = env.home.join("hook-pid");
    pre_commit_hook(
        &env,
        &format!(
            "echo $$ > '{}'\ntouch '{}'\nexec sleep 60",
            pid_file.display(),
            marker.display()
        ),
    );
    let bg = env.spawn_fake("check", &["--grace", "1s"]);
    assert_heard(&env, bg, &marker, "a sleeping pre-commit hook");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_all_dead(&[pid], Duration::from_secs(1));
}

/// The same with ralph's own git blocked: the agent plants a FIFO where git reads a file
/// (`.gitignore`), so the close's `git status` waits in `open` (its deadline is 10 minutes).
/// The control: git really blocks there (a plain `git status` in the tree is still running
/// after 300 ms). Bug caught: exit 1 after the deadline, not 130.
#[test]
fn sigterm_while_ralphs_git_blocks_on_a_fifo_is_heard_at_once() {
    let env = setup();
    let marker = env.home.join("fifo-planted");
    let fifo = agent_sh(
        &env,
        "fifo",
        &format!(
            "echo work > work.txt\nmkfifo .gitignore\ntouch '{}'",
            marker.display()
        ),
    );
    let bg = env.spawn_fake(&format!("check+{fifo}"), &["--grace", "1s"]);
    // ralph's git is blocked once the agent is done and the FIFO there.
    assert!(wait_until(Duration::from_secs(20), || marker.exists()));
    std::thread::sleep(Duration::from_millis(300));
    let mut control = env.command("git");
    // Without the index's lock, which a killed control would leave behind.
    control
        .args(["--no-optional-locks", "status", "--porcelain"])
        .current_dir(&env.repo);
    let mut control = control
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        control.try_wait().unwrap().is_none(),
        "the control: git blocks on the FIFO"
    );
    let _ = control.kill();
    let _ = control.wait();
    assert_heard(&env, bg, &marker, "ralph's git on a FIFO");
    std::fs::remove_file(env.repo.join(".gitignore")).unwrap();
}

// --- Break 4: an ITER record that could not be written ---

/// Promise (SPEC §5.1, §11, issue 29): an ITER record is written for every iteration that ran,
/// a full disk included — by the resume if need be. Iteration 2's record cannot be written
/// (`iterations.log` at the file-size limit, as on a full disk): the run ends in that error
/// (the control: the log did not grow). Once there is room, `ralph resume` writes iteration
/// 2's record (`exit error`) before it runs iteration 3. Bug caught: the resume went on at
/// iteration 3 and iteration 2 never had a record.
#[test]
fn an_iter_record_lost_to_a_full_disk_is_written_by_the_resume() {
    const LIMIT: u64 = 4 << 20;
    let env = TestEnv::new();
    env.write_task(&["c1", "c2", "c3"], "");
    env.commit_all("initial");
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let log = env.repo.join(".ralph/iterations.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend(std::iter::repeat_n(b'#', LIMIT as usize - bytes.len() - 1));
    bytes.push(b'\n');
    std::fs::write(&log, &bytes).unwrap();
    let agent = fake_agent_cmd();
    let resume = [
        "resume",
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
        "--max-iterations",
        "5",
    ];
    let out = env.ralph_with_fsize_limit(&resume, &[("FAKE_AGENT_SCRIPT", "check")], LIMIT);
    assert_exit(&out, 1);
    assert!(env.agent_ran(2), "iteration 2 ran");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        bytes,
        "the control: the log did not grow"
    );
    // Room again: the resume records iteration 2 first.
    let out = env.ralph_with_limit(
        &resume,
        &[("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    let records = env.iter_records();
    let at = |n: u32| {
        records
            .iter()
            .position(|r| r.starts_with(&format!("ITER {n} ")))
    };
    assert!(
        at(2).is_some_and(|two| at(3).is_some_and(|three| two < three)),
        "iteration 2 has no record before iteration 3's: {:?}",
        records
            .iter()
            .filter(|r| r.starts_with("ITER"))
            .collect::<Vec<_>>()
    );
    let two = &records[at(2).unwrap()];
    assert!(two.contains("| exit error |"), "{two}");
}
