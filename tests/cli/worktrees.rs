//! Many loops (SPEC §13): `ralph run --worktree NAME --merge`, `ralph merge`, `status --all`.

use std::time::Duration;

use crate::common::*;

/// An agent script for one loop: it checks the first box of its task file and writes
/// `FILE` (relative to the work tree) with a line naming the loop and the iteration.
fn loop_agent(env: &TestEnv, loop_name: &str, file: &str) -> String {
    let script = format!(
        "sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n\
         mkdir -p \"$(dirname '{file}')\"\n\
         echo '{loop_name} iteration '\"$RALPH_ITERATION\" >> '{file}'\n"
    );
    let path = env.home.join(format!("agent-{loop_name}.sh"));
    std::fs::write(&path, script).unwrap();
    format!("sh:{}", path.display())
}

/// Start `ralph run --worktree NAME TASK --merge` in the background with its own agent log.
fn start_loop(env: &TestEnv, name: &str, task_file: &str, script: &str) -> Background {
    let log = env.home.join(format!("log-{name}"));
    std::fs::create_dir_all(&log).unwrap();
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "run",
        "--worktree",
        name,
        task_file,
        "--merge",
        "--agent-cmd",
        &format!("'{}'", fake_agent().display()),
        "--yes",
        "--grace",
        "1s",
    ])
    .env("FAKE_AGENT_SCRIPT", script)
    .env("FAKE_AGENT_LOG", &log);
    env.spawn(cmd)
}

fn all_json(env: &TestEnv) -> serde_json::Value {
    let out = env.ralph(&["status", "--all", "--json"]);
    assert_exit(&out, 0);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two loops on two task files run at the same time in their worktrees, both complete and
/// both merge into the base branch, whose work tree ends clean; `status --all --json` lists
/// them while they run and after; no process is left behind.
#[test]
fn two_loops_run_at_once_and_both_merge() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1", "a2"]));
    env.write("B.md", &task(&["b1", "b2"]));
    env.commit_all("two tasks");
    // Each agent works once the test has seen both loops running.
    let go = env.home.join("go");
    let wait = agent_sh(
        &env,
        "wait",
        &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
    );
    let agent = |name: &str| {
        format!(
            "{wait}+{}",
            loop_agent(&env, name, &format!("{name}/out.txt"))
        )
    };
    let a = start_loop(&env, "alpha", "A.md", &agent("alpha"));
    let b = start_loop(&env, "beta", "B.md", &agent("beta"));
    let both_running = wait_until(Duration::from_secs(20), || {
        let v = all_json(&env);
        let loops = v["loops"].as_array().cloned().unwrap_or_default();
        ["alpha", "beta"].iter().all(|n| {
            loops.iter().any(|l| {
                l["name"] == *n && l["running"] == true && l["branch"] == format!("ralph/{n}")
            })
        })
    });
    std::fs::write(&go, "").unwrap();
    let (ca, oa, ea) = a.wait(Duration::from_secs(60));
    let (cb, ob, eb) = b.wait(Duration::from_secs(60));
    assert_eq!(ca, Some(0), "alpha:\n{oa}\n{ea}");
    assert_eq!(cb, Some(0), "beta:\n{ob}\n{eb}");
    assert!(both_running, "status --all never showed both loops running");
    // Both loops' work is on main, and main's work tree is clean.
    assert_eq!(
        env.read("alpha/out.txt"),
        "alpha iteration 1\nalpha iteration 2\n"
    );
    assert_eq!(
        env.read("beta/out.txt"),
        "beta iteration 1\nbeta iteration 2\n"
    );
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert_eq!(
        env.git(&["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "main"
    );
    // The branches stay; the merged worktrees are gone.
    let branches = env.git(&["branch", "--list", "ralph/*"]);
    assert!(
        branches.contains("ralph/alpha") && branches.contains("ralph/beta"),
        "{branches}"
    );
    // Only the main tree's loop is live; the merged ones are shown from their kept logs.
    let v = all_json(&env);
    let loops = v["loops"].as_array().unwrap();
    let live: Vec<_> = loops.iter().filter(|l| !l["path"].is_null()).collect();
    assert_eq!(live.len(), 1, "{v}");
    let on_main = env.git(&["log", "--format=%H", "main"]);
    for name in ["alpha", "beta"] {
        let l = loops
            .iter()
            .find(|l| l["name"] == name)
            .expect("a merged loop is listed");
        assert_eq!(l["exit_code"], 0, "{l}");
        let at = l["merged_at"].as_str().expect("merged_at");
        assert!(on_main.contains(at), "{at} is on main");
    }
    for name in ["alpha", "beta"] {
        let pids = std::fs::read_dir(env.home.join(format!("log-{name}")))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("pids-"))
            .flat_map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect::<Vec<i32>>();
        assert!(!pids.is_empty());
        assert_all_dead(&pids, Duration::from_millis(500));
    }
}

/// Two loops edit the same lines from the same base: the first merges, the second exits 11
/// naming the file; the base branch has only the first's work, and the second's branch keeps
/// its commits (and its worktree stays for a person).
#[test]
fn a_conflicting_second_loop_exits_eleven_and_changes_nothing() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.write("shared.txt", "original\n");
    env.commit_all("base");
    let edit = |name: &str| {
        let path = env.home.join(format!("edit-{name}.sh"));
        std::fs::write(
            &path,
            format!(
                "sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\necho '{name} was here' > shared.txt\n"
            ),
        )
        .unwrap();
        format!("sh:{}", path.display())
    };
    // Both start from the same base, at the same time; whichever merges first wins.
    let a = start_loop(&env, "first", "A.md", &edit("first"));
    let b = start_loop(&env, "second", "B.md", &edit("second"));
    let (ca, oa, ea) = a.wait(Duration::from_secs(60));
    let (cb, ob, eb) = b.wait(Duration::from_secs(60));
    let (winner, loser, out) = match (ca, cb) {
        (Some(0), Some(11)) => ("first", "second", format!("{ob}{eb}")),
        (Some(11), Some(0)) => ("second", "first", format!("{oa}{ea}")),
        other => panic!("expected one 0 and one 11, got {other:?}\n{oa}\n{ea}\n{ob}\n{eb}"),
    };
    assert!(out.contains("shared.txt"), "{out}");
    assert_eq!(env.read("shared.txt"), format!("{winner} was here\n"));
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    let log = env.git(&["log", "--format=%s", &format!("ralph/{loser}")]);
    assert!(log.contains("ralph: iteration 1"), "{log}");
    let on_main = env.git(&["log", "--format=%H", "main"]);
    let losers_tip = env.git(&["rev-parse", &format!("ralph/{loser}")]);
    assert!(
        !on_main.contains(losers_tip.trim()),
        "the loser's work is not on main"
    );
    let v = all_json(&env);
    let second = v["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == loser)
        .cloned()
        .expect("the losing loop's worktree stays");
    assert_eq!(second["halt_reason"], "complete");
    assert_eq!(
        second["exit_code"], 11,
        "the loop is complete, its merge did not go in: {second}"
    );
    // Merging it by hand later says the same and still changes nothing.
    let out = env.ralph(&["merge", loser]);
    assert_exit(&out, 11);
    assert_eq!(env.read("shared.txt"), format!("{winner} was here\n"));
}

/// Only a completed loop merges, and only into a work tree without uncommitted changes.
#[test]
fn merge_refuses_an_unfinished_loop_and_a_dirty_base() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1", "a2"]));
    env.commit_all("base");
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "run",
        "--worktree",
        "w",
        "A.md",
        "--max-iterations",
        "1",
        "--yes",
        "--agent-cmd",
        &format!("'{}'", fake_agent().display()),
    ])
    .env("FAKE_AGENT_SCRIPT", loop_agent(&env, "w", "w.txt"));
    let out = run_with_limit(cmd, Duration::from_secs(60));
    assert_exit(&out, 3);
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("not complete"), "{}", stderr(&out));
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "resume",
        "--worktree",
        "w",
        "--max-iterations",
        "3",
        "--yes",
        "--agent-cmd",
        &format!("'{}'", fake_agent().display()),
    ])
    .env("FAKE_AGENT_SCRIPT", loop_agent(&env, "w", "w.txt"));
    assert_exit(&run_with_limit(cmd, Duration::from_secs(60)), 0);
    env.write("A.md", "the user is editing this\n");
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 11);
    assert!(
        stdout(&out).contains("uncommitted changes"),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.read("A.md"), "the user is editing this\n");
    env.git(&["checkout", "A.md"]);
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 0);
    assert!(env.read("w.txt").contains("w iteration 2"));
}

/// With the base branch checked out nowhere (the user switched branches), the merge moves its
/// ref only — a merge commit of git's merged tree — and touches no work tree.
#[test]
fn a_base_branch_checked_out_nowhere_gets_its_ref_moved() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("base");
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "run",
        "--worktree",
        "r",
        "A.md",
        "--yes",
        "--agent-cmd",
        &format!("'{}'", fake_agent().display()),
    ])
    .env("FAKE_AGENT_SCRIPT", loop_agent(&env, "r", "r.txt"));
    assert_exit(&run_with_limit(cmd, Duration::from_secs(60)), 0);
    // main moves on meanwhile, and the user works on another branch.
    env.write("other.txt", "main's own work\n");
    env.commit_all("main moves on");
    env.git(&["checkout", "-q", "-b", "elsewhere"]);
    let out = env.ralph(&["merge", "r"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("only its ref moved"),
        "{}",
        stdout(&out)
    );
    assert!(
        !env.repo.join("r.txt").exists(),
        "the work tree on `elsewhere` is untouched"
    );
    let files = env.git(&["ls-tree", "-r", "--name-only", "main"]);
    assert!(
        files.contains("r.txt") && files.contains("other.txt"),
        "{files}"
    );
    let parents = env.git(&["rev-list", "--parents", "-n1", "main"]);
    assert_eq!(
        parents.split_whitespace().count(),
        3,
        "a merge commit: {parents}"
    );
}

/// A loop's agent that switches its worktree to another branch: ralph commits nothing there
/// (issue 29: only onto `ralph/NAME`), the iteration ends in an error naming the branch (exit
/// 1), nothing is merged, main is unchanged, and the worktree stays. Bug caught: ralph merged
/// the untouched `ralph/NAME`, said "merged", exit 0, and removed the worktree, the work on no
/// branch anyone would look at.
#[test]
fn a_loop_whose_agent_switched_branches_is_not_merged() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let main_before = env.git(&["rev-parse", "main"]);
    let script = agent_sh(
        &env,
        "switch",
        "git checkout -q -b elsewhere\necho work > w.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"",
    );
    let (code, out, err) = start_loop(&env, "sw", "A.md", &script).wait(Duration::from_secs(60));
    assert_eq!(code, Some(1), "{out}\n{err}");
    let said = format!("{out}{err}");
    assert!(said.contains("branch `elsewhere`"), "{said}");
    assert_eq!(env.git(&["rev-parse", "main"]), main_before);
    assert!(!env.repo.join("w.txt").exists());
    let wts = env.git(&["worktree", "list"]);
    assert!(
        wts.contains("ralph/worktrees/sw"),
        "the worktree stays: {wts}"
    );
}

/// Merging a loop whose worktree holds ignored files (a build output, a `.env`): the merge goes
/// in, and the worktree stays with them — `git worktree remove` would delete them silently, and
/// ralph never deletes. The control: a loop leaving no ignored file has its worktree removed.
#[test]
fn a_merged_loop_with_ignored_files_keeps_its_worktree() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.write(".gitignore", "build/\n.env\n");
    env.commit_all("tasks");
    let messy = agent_sh(
        &env,
        "messy",
        "echo SECRET=1 > .env\nmkdir -p build && echo out > build/out\necho a > a.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"",
    );
    let clean = agent_sh(
        &env,
        "clean",
        "echo b > b.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"",
    );
    let (code, out, err) = start_loop(&env, "messy", "A.md", &messy).wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(env.read("a.txt"), "a\n", "merged");
    let common = env.repo.join(".git/ralph/worktrees");
    assert_eq!(
        std::fs::read_to_string(common.join("messy/.env")).unwrap(),
        "SECRET=1\n"
    );
    assert!(common.join("messy/build/out").is_file());
    assert!(
        format!("{out}{err}").contains("ignored files"),
        "{out}{err}"
    );
    // The kept worktree keeps its state and logs: `status --all` still shows the loop.
    let v = all_json(&env);
    let kept = v["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "messy")
        .cloned()
        .unwrap_or_default();
    assert_eq!(kept["halt_reason"], "complete", "{v}");
    let (code, out, err) = start_loop(&env, "clean", "B.md", &clean).wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(env.read("b.txt"), "b\n");
    assert!(
        !common.join("clean").exists(),
        "the control's worktree is removed"
    );
}

/// `run --worktree NAME TASK --merge` on a task that is already complete ends at once, exit 0,
/// with nothing to merge. Bug caught: "already complete" followed by "error: loop is not
/// complete (never ran)", exit 1.
#[test]
fn an_already_complete_task_in_a_worktree_has_nothing_to_merge() {
    let env = TestEnv::new();
    env.write(
        "A.md",
        "---\ntask: t\n---\n## Success Criteria\n- [x] done already\n",
    );
    env.commit_all("done");
    let (code, out, err) = start_loop(&env, "z", "A.md", "check").wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let said = format!("{out}{err}");
    assert!(said.contains("already complete"), "{said}");
    assert!(!said.contains("error"), "{said}");
}

/// A completed loop is not merged into a work tree where another loop runs now: the merge would
/// change files under that agent (and its next commit would take them as the agent's work).
/// Exit 11, nothing touched; once that loop finished, the merge goes in. The control: the
/// running loop really holds the main work tree (`status` says running).
#[test]
fn a_merge_waits_for_the_loop_running_in_the_base_work_tree() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write_task(&["main work"], "");
    env.commit_all("base");
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "run",
        "--worktree",
        "w",
        "A.md",
        "--yes",
        "--agent-cmd",
        &format!("'{}'", fake_agent().display()),
    ])
    .env("FAKE_AGENT_SCRIPT", loop_agent(&env, "w", "w.txt"));
    assert_exit(&run_with_limit(cmd, Duration::from_secs(60)), 0);
    // The main loop's agent works until the test says `go`.
    let go = env.home.join("go");
    let wait = agent_sh(
        &env,
        "wait",
        &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
    );
    let main_loop = env.spawn_fake(&format!("{wait}+check"), &["--grace", "1s"]);
    assert!(
        wait_until(Duration::from_secs(60), || status_json(&env)["running"]
            == true),
        "the main loop never started"
    );
    let head = env.git(&["rev-parse", "HEAD"]);
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 11);
    assert!(
        stdout(&out).contains("a loop is running"),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.git(&["rev-parse", "HEAD"]), head, "nothing merged");
    std::fs::write(&go, "").unwrap();
    let (code, so, _) = main_loop.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{so}");
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 0);
    assert!(env.read("w.txt").contains("w iteration 1"));
}
