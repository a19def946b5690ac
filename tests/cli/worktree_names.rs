//! Loop names (SPEC §13): a name is a branch's name for one task — a new task on the name of a
//! finished loop starts a new branch, the old one kept as `ralph/NAME-<date>`; an unfinished
//! loop keeps its worktree and branch — and `status --all` keeps showing the loops ralph
//! retired, from the records and logs it kept.

use std::time::Duration;

use crate::common::*;

/// An agent that checks the first box and appends `WORD iteration N` to `out.txt`.
fn agent(env: &TestEnv, word: &str) -> String {
    let script = env.home.join(format!("agent-{word}.sh"));
    std::fs::write(
        &script,
        format!(
            "sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\necho '{word} iteration '\"$RALPH_ITERATION\" >> out.txt\n"
        ),
    )
    .unwrap();
    format!("sh '{}'", script.display())
}

fn all_json(env: &TestEnv) -> Vec<serde_json::Value> {
    let out = env.ralph(&["status", "--all", "--json"]);
    assert_exit(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["loops"].as_array().cloned().unwrap_or_default()
}

fn today() -> String {
    chrono::Local::now().format("%Y-%m-%d").to_string()
}

/// The user rewrites the task file for a new task and runs the loop name that merged before:
/// the new task runs on a new `ralph/NAME` from the current HEAD and merges; the merged loop's
/// branch is kept as `ralph/NAME-<date>` (said so), and both loops show in `status --all`.
/// Bug caught: the run started on the stale branch, whose task file was the old, finished one,
/// and reported "already complete, nothing to merge": the new task never ran.
#[test]
fn a_loop_name_reused_after_its_merge_runs_the_new_task_on_a_new_branch() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["old one"]));
    env.commit_all("old task");
    let out = run_loop(&env, "n", "A.md", &agent(&env, "old"), &["--merge"]);
    assert_exit(&out, 0);
    let old_tip = env.git(&["rev-parse", "ralph/n"]);
    env.write("A.md", &task(&["new one", "new two"]));
    env.commit_all("new task");
    let out = run_loop(&env, "n", "A.md", &agent(&env, "new"), &["--merge"]);
    assert_exit(&out, 0);
    let kept = format!("ralph/n-{}", today());
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(said.contains(&kept), "{said}");
    assert!(!said.contains("already complete"), "{said}");
    assert_eq!(
        env.read("out.txt"),
        "old iteration 1\nnew iteration 1\nnew iteration 2\n"
    );
    assert!(env.read("A.md").contains("- [x] new two"));
    // The control: the kept branch is the merged loop's, its task finished — what the stale
    // run found.
    assert_eq!(env.git(&["rev-parse", &kept]), old_tip);
    let old_task = env.git(&["show", &format!("{kept}:A.md")]);
    assert!(old_task.contains("- [x] old one"), "{old_task}");
    assert_ne!(env.git(&["rev-parse", "ralph/n"]), old_tip);
    let loops = all_json(&env);
    let retired: Vec<_> = loops.iter().filter(|l| l["name"] == "n").collect();
    assert_eq!(retired.len(), 2, "{loops:?}");
    // Both retired in the same second can list in either order: their branches are what counts.
    let mut branches: Vec<&str> = retired
        .iter()
        .filter_map(|l| l["branch"].as_str())
        .collect();
    branches.sort_unstable();
    let mut want = vec![kept.as_str(), "ralph/n"];
    want.sort_unstable();
    assert_eq!(branches, want, "{loops:?}");
}

/// A loop that finished without merging, its name taken by a new task: its worktree goes (its
/// logs kept, shown as not merged), its branch stays as `ralph/NAME-<date>` for a person to
/// merge, and the new task runs on a new branch.
#[test]
fn a_finished_unmerged_loops_name_taken_keeps_its_branch_and_logs() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.commit_all("tasks");
    assert_exit(&run_loop(&env, "n", "A.md", &agent(&env, "a"), &[]), 0);
    let tip = env.git(&["rev-parse", "ralph/n"]);
    let out = run_loop(&env, "n", "B.md", &agent(&env, "b"), &[]);
    assert_exit(&out, 0);
    let kept = format!("ralph/n-{}", today());
    assert_eq!(env.git(&["rev-parse", &kept]), tip);
    let wt = env.repo.join(".git/ralph/worktrees/n");
    assert_eq!(
        std::fs::read_to_string(wt.join("out.txt")).unwrap(),
        "b iteration 1\n"
    );
    let loops = all_json(&env);
    let old = loops
        .iter()
        .find(|l| l["branch"] == kept.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(old["merged_at"], serde_json::Value::Null, "{loops:?}");
    assert_eq!(old["halt_reason"], "complete", "{loops:?}");
    assert!(old["logs"].is_string(), "{loops:?}");
    let live = loops
        .iter()
        .find(|l| l["name"] == "n" && l["path"].is_string())
        .cloned()
        .unwrap_or_default();
    assert_eq!(live["branch"], "ralph/n", "{loops:?}");
}

/// A loop still unfinished keeps its worktree and branch: a new `run --worktree NAME` with
/// nobody to ask is refused naming `ralph resume --worktree NAME`, changing nothing; the resume
/// continues it on the same branch.
#[test]
fn an_unfinished_loop_keeps_its_branch_and_a_new_run_is_told_to_resume_it() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1", "a2"]));
    env.commit_all("task");
    let out = run_loop(
        &env,
        "u",
        "A.md",
        &agent(&env, "u"),
        &["--max-iterations", "1"],
    );
    assert_exit(&out, 3);
    let tip = env.git(&["rev-parse", "ralph/u"]);
    let out = run_loop(&env, "u", "A.md", &agent(&env, "u"), &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("ralph resume --worktree u"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.git(&["rev-parse", "ralph/u"]), tip);
    assert_eq!(env.git(&["branch", "--list", "ralph/u-*"]), "");
    let out = env.ralph_with_limit(
        &[
            "resume",
            "--worktree",
            "u",
            "--agent-cmd",
            &agent(&env, "u"),
            "--yes",
            "--max-iterations",
            "3",
        ],
        &[],
        Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    let log = env.git(&["log", "--format=%s", "ralph/u"]);
    assert!(log.contains("ralph: iteration 2"), "{log}");
}

/// `status --all` keeps the loops that merged — name, branch, halt reason, exit code, the commit
/// they merged at — and the human view shows the exit code the JSON has: 11 for a loop that
/// completed and could not merge. Bugs caught: a merged loop vanished from `status --all`; the
/// human view said "halted: complete" where the JSON said exit 11.
#[test]
fn status_all_keeps_merged_loops_and_both_views_agree_on_exit_eleven() {
    let env = TestEnv::new();
    env.write("M.md", &task(&["m1"]));
    env.write("C.md", &task(&["c1"]));
    env.write("shared.txt", "original\n");
    env.commit_all("tasks");
    assert_exit(
        &run_loop(&env, "m", "M.md", &agent(&env, "m"), &["--merge"]),
        0,
    );
    let merged_at = env.git(&["rev-parse", "main"]).trim().to_string();
    // A loop whose work conflicts with what main did meanwhile.
    let edit = env.home.join("edit.sh");
    std::fs::write(
        &edit,
        "sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\necho loop > shared.txt\n",
    )
    .unwrap();
    let edit = format!("sh '{}'", edit.display());
    assert_exit(&run_loop(&env, "c", "C.md", &edit, &[]), 0);
    env.write("shared.txt", "main\n");
    env.commit_all("main edits the same line");
    assert_exit(&env.ralph(&["merge", "c"]), 11);
    let loops = all_json(&env);
    let m = loops
        .iter()
        .find(|l| l["name"] == "m")
        .cloned()
        .unwrap_or_default();
    assert_eq!(m["branch"], "ralph/m", "{loops:?}");
    assert_eq!(m["halt_reason"], "complete", "{loops:?}");
    assert_eq!(m["exit_code"], 0, "{loops:?}");
    assert_eq!(m["merged_at"], merged_at.as_str(), "{loops:?}");
    let c = loops
        .iter()
        .find(|l| l["name"] == "c")
        .cloned()
        .unwrap_or_default();
    assert_eq!(c["exit_code"], 11, "{loops:?}");
    let out = env.ralph(&["status", "--all"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}  ")))
            .unwrap_or_default()
            .to_string()
    };
    let m_line = line("m");
    assert!(m_line.contains("[ralph/m]"), "{text}");
    assert!(
        m_line.contains(&format!("merged at {}", &merged_at[..7])),
        "{text}"
    );
    assert!(m_line.contains("complete, exit 0"), "{text}");
    assert!(line("c").contains("complete, exit 11"), "{text}");
}

/// Without a state directory (no HOME, no XDG_STATE_HOME) ralph has nowhere to keep a loop's
/// records out of the agent's reach: `--worktree` and `ralph merge` are refused, naming what to
/// set, and nothing is created; `status --all` still answers. Control: with HOME the same run
/// goes through.
#[test]
fn without_a_state_directory_loops_are_refused() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let bare = |args: &[&str]| {
        let mut cmd = env.ralph_cmd();
        cmd.args(args)
            .env_remove("HOME")
            .env_remove("XDG_STATE_HOME");
        run_with_limit(cmd, Duration::from_secs(60))
    };
    let agent = agent(&env, "x");
    let out = bare(&[
        "run",
        "--worktree",
        "x",
        "A.md",
        "--agent-cmd",
        &agent,
        "--yes",
    ]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("state directory") && err.contains("HOME"),
        "{err}"
    );
    assert!(!env.repo.join(".git/ralph").exists());
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
    let out = bare(&["merge", "x"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("state directory"), "{}", stderr(&out));
    assert_exit(&bare(&["status", "--all"]), 0);
    assert_exit(&run_loop(&env, "x", "A.md", &agent, &[]), 0);
}

/// A new run on a loop that is running now is refused by the running loop's lock, naming its
/// supervisor — not told to resume a run that is not over.
#[test]
fn a_new_run_on_a_running_loop_names_its_supervisor() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--worktree", "r", "A.md", "--yes", "--grace", "1s"])
        .args(["--agent-cmd", &format!("'{}'", fake_agent().display())])
        .env("FAKE_AGENT_SCRIPT", "hang");
    let running = env.spawn(cmd);
    let up = wait_until(Duration::from_secs(20), || {
        all_json(&env)
            .iter()
            .any(|l| l["name"] == "r" && l["running"] == true)
    });
    let out = run_loop(&env, "r", "A.md", &agent(&env, "r"), &[]);
    // Stopped once its agent runs: a SIGTERM that arrives while the agent is being started
    // is not acted on today (a supervisor bug of its own, reported to be fixed there).
    env.wait_for_pids(1, 1);
    running.signal(libc::SIGTERM);
    let (code, o, e) = running.wait(Duration::from_secs(20));
    assert!(up, "the loop never ran: {o}\n{e}");
    assert_eq!(code, Some(130), "{o}\n{e}");
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("already supervising"), "{err}");
    assert!(!err.contains("resume"), "{err}");
}
