//! Many loops against a hostile agent (SPEC §4, §13): what a loop's agent writes into the git
//! directory — hooks, links, the old base-branch file, a submodule's configuration — is never
//! run, followed or believed by ralph's worktree creation and merge, which run outside the
//! sandbox. A sandboxed agent writes a git directory of its own and never the repository's
//! (issue 29): each test shows that its plant does not get there, then has an agent without the
//! sandbox (or the test itself) plant the same, which ralph's git still does not run or follow.
//! Each test has its control: the user's own git runs (or follows) what was planted.
//!
//! The environments live outside `/tmp` (`TestEnv::outside_tmp`): the sandbox's private `/tmp`
//! would hide the test's files from the agent for the wrong reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// A `sh` agent whose script is `body`, then its work (`work-NAME.txt`) and the first box checked.
fn agent(env: &TestEnv, name: &str, body: &str) -> String {
    let script = env.dir().join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!(
            "{body}\necho {name} > work-{name}.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n"
        ),
    )
    .unwrap();
    format!("sh '{}'", script.display())
}

/// The markers directory, outside the repository (read-only to a sandboxed agent).
fn marks_dir(env: &TestEnv) -> PathBuf {
    let m = env.dir().join("marks");
    std::fs::create_dir_all(&m).unwrap();
    m
}

fn marks(env: &TestEnv) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(env.dir().join("marks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

const HOOKS: [&str; 4] = [
    "post-checkout",
    "post-index-change",
    "post-merge",
    "reference-transaction",
];

/// A loop's agent plants hooks in the common git directory (the worktree's hooks are the
/// repository's), each touching a marker outside the repository when run. In the sandbox they
/// land in its own git directory, never the repository's. Without it they land there, and
/// neither its own `--merge` (`git merge` into the main work tree: post-merge,
/// reference-transaction, post-index-change) nor the user's next `--worktree` loop (`git
/// worktree add`: post-checkout) runs them. Control: the user's own `git merge` and `git
/// worktree add` run every one.
#[test]
fn hooks_a_sandboxed_loop_plants_run_neither_at_its_merge_nor_at_the_next_loop() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.write("C.md", &task(&["c1"]));
    env.commit_all("tasks");
    let m = marks_dir(&env).display().to_string();
    let mut plant =
        String::from("h=\"$(git rev-parse --git-common-dir)/hooks\"\nmkdir -p \"$h\"\n");
    for hook in HOOKS {
        plant.push_str(&format!(
            "printf '#!/bin/sh\\ntouch {m}/{hook} 2>/dev/null\\nexit 0\\n' > \"$h/{hook}\"\nchmod +x \"$h/{hook}\"\n"
        ));
    }
    let out = run_loop(
        &env,
        "boxed",
        "C.md",
        &agent(&env, "boxed", &plant),
        &["--sandbox", "--merge"],
    );
    assert_exit(&out, 0);
    assert_eq!(env.read("work-boxed.txt"), "boxed\n", "merged");
    for hook in HOOKS {
        let h = env.repo.join(".git/hooks").join(hook);
        assert!(
            h.symlink_metadata().is_err(),
            "{hook} reached the repository"
        );
    }
    assert_eq!(marks(&env), Vec::<String>::new(), "{}", stderr(&out));
    let out = run_loop(
        &env,
        "planter",
        "A.md",
        &agent(&env, "planter", &plant),
        &["--merge"],
    );
    assert_exit(&out, 0);
    assert_eq!(env.read("work-planter.txt"), "planter\n", "merged");
    for hook in HOOKS {
        assert!(
            env.repo.join(".git/hooks").join(hook).is_file(),
            "{hook} was planted"
        );
    }
    assert_eq!(
        marks(&env),
        Vec::<String>::new(),
        "at the merge: {}",
        stderr(&out)
    );
    // The user's next loop: a worktree added for it.
    let out = run_loop(&env, "next", "B.md", &agent(&env, "next", ""), &[]);
    assert_exit(&out, 0);
    assert!(
        env.repo
            .join(".git/ralph/worktrees/next/work-next.txt")
            .is_file()
    );
    assert_eq!(
        marks(&env),
        Vec::<String>::new(),
        "at the next loop: {}",
        stderr(&out)
    );
    // The control: what was planted is live for the user's own git.
    env.git(&["checkout", "-q", "-b", "side"]);
    env.write("side.txt", "side\n");
    env.commit_all("side");
    env.git(&["checkout", "-q", "main"]);
    env.git(&["merge", "-q", "--no-edit", "side"]);
    env.git(&["worktree", "add", "-q", "../by-hand"]);
    assert_eq!(marks(&env), HOOKS.to_vec());
}

/// An agent links `$GIT_COMMON_DIR/ralph` to a directory outside the repository — in the
/// sandbox its own git directory's, without it the repository's: the next `--worktree` loop
/// refuses the link (exit 1, naming it) and creates nothing where it leads. Control: the user's
/// own `git worktree add` at that path writes its checkout out there.
#[test]
fn a_linked_ralph_directory_in_the_git_dir_is_refused_not_followed() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["first"], "");
    env.write("B.md", &task(&["b1"]));
    env.commit_all("tasks");
    let outside = env.dir().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // A loop in the main work tree: in the sandbox its agent writes a `.git` of its own.
    let link = format!(
        "ln -s '{}' .git/ralph && echo linked >> linked.txt",
        outside.display()
    );
    let linker = agent(&env, "linker", &link);
    let run = |sandbox: &[&str]| {
        let args = [&["run", "--agent-cmd", &linker, "--yes"][..], sandbox].concat();
        env.ralph_with_limit(&args, &[], Duration::from_secs(60))
    };
    let out = run(&["--sandbox"]);
    assert_exit(&out, 0);
    assert_eq!(env.read("linked.txt"), "linked\n");
    let planted = env.repo.join(".git/ralph");
    assert!(planted.symlink_metadata().is_err(), "{}", stderr(&out));
    // Without the sandbox, `.git` is the agent's to write.
    env.write_task(&["again"], "");
    env.commit_all("again");
    let out = run(&[]);
    assert_exit(&out, 0);
    assert_eq!(std::fs::read_link(&planted).unwrap(), outside);
    let out = run_loop(&env, "next", "B.md", &agent(&env, "next", ""), &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(".git/ralph") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        entries(&outside),
        Vec::<String>::new(),
        "nothing made out there"
    );
    assert!(!env.repo.join("work-next.txt").exists());
    // The control: the link leads git out of the repository.
    env.git(&["worktree", "add", "-q", "-b", "y", ".git/ralph/worktrees/y"]);
    assert!(outside.join("worktrees/y/B.md").is_file());
}

/// A loop's agent links the places ralph used to keep its own files in the common git directory
/// (`ralph/merged`, where a merged loop's logs went, and `ralph-worktrees.lock`) to a directory
/// outside — in the sandbox its own git directory's, never the repository's; without it the
/// repository's: its merge creates and moves nothing there; the logs are kept in ralph's state
/// directory, and `status --all` shows the merged loop from them.
#[test]
fn links_in_the_git_dir_never_receive_a_merged_loops_logs_or_the_lock() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.commit_all("task");
    let outside = env.dir().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let o = outside.display();
    let plant = format!(
        "c=\"$(git rev-parse --git-common-dir)\"\nln -sfn '{o}' \"$c/ralph/merged\"\nln -sfn '{o}/lock' \"$c/ralph-worktrees.lock\"\n"
    );
    let common = env.repo.join(".git");
    let out = run_loop(
        &env,
        "boxed",
        "B.md",
        &agent(&env, "boxed", &plant),
        &["--sandbox", "--merge"],
    );
    assert_exit(&out, 0);
    assert_eq!(env.read("work-boxed.txt"), "boxed\n", "merged");
    assert!(!common.join("ralph/merged").is_symlink());
    assert!(!common.join("ralph-worktrees.lock").is_symlink());
    let out = run_loop(&env, "w", "A.md", &agent(&env, "w", &plant), &["--merge"]);
    assert_exit(&out, 0);
    assert_eq!(env.read("work-w.txt"), "w\n", "merged");
    // The control: the agent did plant both links, leading out.
    assert_eq!(
        std::fs::read_link(common.join("ralph/merged")).unwrap(),
        outside
    );
    assert_eq!(
        std::fs::read_link(common.join("ralph-worktrees.lock")).unwrap(),
        outside.join("lock")
    );
    assert_eq!(
        entries(&outside),
        Vec::<String>::new(),
        "nothing created or moved out there"
    );
    let out = env.ralph(&["status", "--all", "--json"]);
    assert_exit(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = v["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "w")
        .cloned()
        .unwrap_or_default();
    let logs = PathBuf::from(w["logs"].as_str().unwrap_or_default());
    assert!(logs.starts_with(env.home.join(".local/state/ralph")), "{w}");
    assert!(
        std::fs::read_to_string(logs.join("iterations.log"))
            .unwrap()
            .contains("ITER 1"),
        "{w}"
    );
}

/// The branch a loop merges into is ralph's record, in its state directory: a sandboxed agent
/// cannot write it there, and rewriting the file ralph used to keep in the worktree's git
/// directory (`ralph-base`) no longer redirects the merge into another branch. Control: the
/// agent did write `ralph-base`, and looked for ralph's record where it lies outside the
/// sandbox — which hides ralph's whole state directory from the agent (issue 31), so it found
/// none to write.
#[test]
fn the_agent_cannot_change_the_branch_its_loop_merges_into() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    env.git(&["branch", "victim"]);
    let victim_before = env.git(&["rev-parse", "victim"]);
    let redirect = "echo victim > \"$(git rev-parse --git-dir)/ralph-base\" && echo base-written >> attempts.txt\n\
         for f in \"$HOME\"/.local/state/ralph/repos/*/loops/w.json; do\n\
           [ -f \"$f\" ] || { echo missing >> attempts.txt; continue; }\n\
           if echo '{\"base\":\"victim\"}' > \"$f\" 2>/dev/null; then echo written >> attempts.txt; else echo denied >> attempts.txt; fi\n\
         done";
    let out = run_loop(
        &env,
        "w",
        "A.md",
        &agent(&env, "w", redirect),
        &["--sandbox", "--merge"],
    );
    assert_exit(&out, 0);
    assert_eq!(
        env.git(&["rev-parse", "victim"]),
        victim_before,
        "victim untouched"
    );
    assert_eq!(
        env.read("work-w.txt"),
        "w\n",
        "merged into main, where it started"
    );
    // The control: the agent rewrote `ralph-base` (which went with the worktree); ralph's
    // record, there outside the sandbox, is out of its sight.
    assert_eq!(env.read("attempts.txt"), "base-written\nmissing\n");
}

/// A submodule of the main work tree whose `.gitmodules` entry says `ignore = none`, with a
/// clean filter in the submodule's configuration (in the common git directory) and its index
/// reset, so that any git looking inside the submodule runs the filter. A sandboxed loop's agent
/// cannot plant it (it writes a git directory of its own): the test does, as an agent without
/// the sandbox could. `ralph merge` of the sandboxed loop — its cleanliness check and `git merge`
/// (which looks inside before a merge that is not a fast-forward) — runs it not. Control: the
/// user's own `git status` does.
#[test]
fn the_merge_never_looks_inside_a_submodule_the_agent_configured() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    add_submodule(&env);
    env.write("A.md", &task(&["a1"]));
    env.commit_all("a submodule and a task");
    let plant = format!(
        "git config -f '{}/.git/modules/sub/config' x.y z || echo denied > denied.txt\n{}",
        env.repo.display(),
        submodule_filter(&env)
    );
    let out = run_loop(&env, "w", "A.md", &agent(&env, "w", &plant), &["--sandbox"]);
    assert_exit(&out, 0);
    assert!(!env.read(".git/modules/sub/config").contains("filter"));
    assert_eq!(
        read_in(&env, ".git/ralph/worktrees/w/denied.txt"),
        "denied\n"
    );
    sh_in(&env, &submodule_filter(&env));
    // main moves on, so the merge is a real one (git's `stash create` before it); the user's
    // commit itself told not to look inside.
    env.write("other.txt", "main's own\n");
    let quiet = ["-c", "submodule.sub.ignore=all"];
    env.git(&[&quiet[..], &["add", "other.txt"]].concat());
    env.git(&[&quiet[..], &["commit", "-q", "-m", "main moves on"]].concat());
    assert_eq!(marks(&env), Vec::<String>::new());
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 0);
    assert_eq!(env.read("work-w.txt"), "w\n", "merged");
    let parents = env.git(&["rev-list", "--parents", "-n1", "main"]);
    assert_eq!(parents.split_whitespace().count(), 3, "a merge commit");
    assert_eq!(marks(&env), Vec::<String>::new(), "{}", stderr(&out));
    // The control: the planted filter is live for a git that looks inside.
    env.git(&["status", "--porcelain"]);
    assert_eq!(marks(&env), vec!["filter".to_string()]);
}

/// A script that plants, in the submodule's git directory, a clean filter touching the `filter`
/// marker and resets the submodule's index.
fn submodule_filter(env: &TestEnv) -> String {
    let m = marks_dir(env).display().to_string();
    format!(
        "s=\"$(git rev-parse --path-format=absolute --git-common-dir)/modules/sub\"\n\
         git config -f \"$s/config\" filter.x.clean \"sh -c 'touch {m}/filter 2>/dev/null; cat'\"\n\
         mkdir -p \"$s/info\" && echo '* filter=x' > \"$s/info/attributes\"\n\
         GIT_DIR=\"$s\" git read-tree HEAD\n"
    )
}

/// Run `script` with `sh` in the main work tree, as the user.
fn sh_in(env: &TestEnv, script: &str) {
    let mut cmd = std::process::Command::new("sh");
    env.isolate(&mut cmd);
    let ok = cmd
        .args(["-c", script])
        .current_dir(&env.repo)
        .status()
        .unwrap();
    assert!(ok.success(), "{script}");
}

fn read_in(env: &TestEnv, rel: &str) -> String {
    std::fs::read_to_string(env.repo.join(rel)).unwrap_or_default()
}

/// A submodule `sub` (one file, `f.txt`) whose `.gitmodules` entry says `ignore = none`.
fn add_submodule(env: &TestEnv) {
    let sub_src = env.dir().join("sub-src");
    std::fs::create_dir_all(&sub_src).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "s",
        ],
    ] {
        git_in(env, &sub_src, args);
    }
    std::fs::write(sub_src.join("f.txt"), "inside\n").unwrap();
    git_in(env, &sub_src, &["add", "f.txt"]);
    git_in(
        env,
        &sub_src,
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e",
            "commit",
            "-q",
            "-m",
            "f",
        ],
    );
    let url = sub_src.display().to_string();
    env.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        &url,
        "sub",
    ]);
    env.git(&[
        "config",
        "-f",
        ".gitmodules",
        "submodule.sub.ignore",
        "none",
    ]);
}

/// The same door in a sandboxed run on the main work tree: a clean filter in the submodule's
/// configuration and its index reset (so a git looking inside must hash its files through the
/// filter) — planted by the test, as an agent without the sandbox could: a sandboxed one's
/// `.git` is its own — and the agent says `ignore = none` in `.gitmodules` (which beats `-c
/// diff.ignoreSubmodules=dirty`). ralph's own statuses — staging, the fingerprint, the final
/// check — run outside the sandbox and must not look inside. Control: the user's own `git
/// status` runs the filter.
#[test]
fn ralphs_own_statuses_never_look_inside_a_submodule_the_sandboxed_agent_configured() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    add_submodule(&env);
    env.write("RALPH_TASK.md", &task(&["a1"]));
    env.commit_all("a submodule and a task");
    sh_in(&env, &submodule_filter(&env));
    let plant = "git config -f .gitmodules submodule.sub.ignore none\n\
                 git config -f .git/modules/sub/config x.y z || echo denied > denied.txt\n";
    let agent = agent(&env, "m", plant);
    let out = env.ralph_with_limit(
        &["run", "--agent-cmd", &agent, "--yes", "--sandbox"],
        &[],
        std::time::Duration::from_secs(60),
    );
    assert_exit(&out, 0);
    assert_eq!(marks(&env), Vec::<String>::new(), "{}", stderr(&out));
    assert_eq!(read_in(&env, "denied.txt"), "denied\n");
    // The control: the planted filter is live for a git that looks inside.
    env.git(&["status", "--porcelain"]);
    assert_eq!(marks(&env), vec!["filter".to_string()]);
}

/// A sandboxed loop's agent tries to move the directories on the way to its own work tree
/// (`$GIT_COMMON_DIR/ralph`, `ralph/worktrees`) aside, to put links in their place: each is
/// pinned, so the move fails and the loop completes. Control: the same agent without the
/// sandbox moves them (and the loop then breaks).
#[test]
fn the_directories_on_the_way_to_a_loops_work_tree_cannot_be_moved_in_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write("A.md", &task(&["a1"]));
        env.commit_all("a task");
        let body = String::from(
            "c=\"$(git rev-parse --git-common-dir)\"\n\
             for d in ralph/worktrees ralph; do\n\
               if mv \"$c/$d\" \"$c/$d-moved\" 2>/dev/null; then echo \"$d moved\"; mv \"$c/$d-moved\" \"$c/$d\"; else echo \"$d denied\"; fi\n\
             done > work-tries.txt\n",
        );
        let extra: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run_loop(&env, "p", "A.md", &agent(&env, "p", &body), extra);
        let wt = env.repo.join(".git/ralph/worktrees/p");
        let said = std::fs::read_to_string(wt.join("work-tries.txt")).unwrap_or_default();
        if sandboxed {
            assert_eq!(
                said,
                "ralph/worktrees denied\nralph denied\n",
                "{}",
                stderr(&out)
            );
            assert_exit(&out, 0);
        } else {
            // The control: nothing stops the same agent outside the sandbox.
            assert_eq!(
                said,
                "ralph/worktrees moved\nralph moved\n",
                "{}",
                stderr(&out)
            );
        }
    }
}

/// Loop `b` halts with a box left; loop `a`'s agent then checks `b`'s boxes in `b`'s worktree,
/// which lies in the common git directory `a` writes, and plants a file in `b`'s git
/// directory. In the sandbox both are refused (the other loops' places are bound read-only),
/// and `b` resumes to do its own work. Control: without the sandbox `a`'s agent writes them,
/// and `b` resumes to "already complete" on work it never did.
#[test]
fn a_sandboxed_loop_cannot_touch_another_loops_worktree() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write("A.md", &task(&["a1"]));
        env.write("B.md", &task(&["b1", "b2"]));
        env.commit_all("tasks");
        let b = agent(&env, "b", "");
        let out = run_loop(
            &env,
            "b",
            "B.md",
            &b,
            &["--sandbox", "--max-iterations", "1"],
        );
        assert_exit(&out, 3);
        let a = agent(
            &env,
            "a",
            "c=\"$(git rev-parse --git-common-dir)\"\n\
             sed -i 's/- \\[ \\]/- [x]/g' \"$c/ralph/worktrees/b/B.md\" 2>/dev/null\n\
             echo planted > \"$c/worktrees/b/planted\" 2>/dev/null\n",
        );
        let flags: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run_loop(&env, "a", "A.md", &a, flags);
        assert_exit(&out, 0);
        let b_dir = env.repo.join(".git/ralph/worktrees/b");
        let b_task = std::fs::read_to_string(b_dir.join("B.md")).unwrap();
        let planted = env.repo.join(".git/worktrees/b/planted").exists();
        let out = env.ralph_with_limit(
            &[
                "resume",
                "--worktree",
                "b",
                "--agent-cmd",
                &b,
                "--yes",
                "--max-iterations",
                "3",
            ],
            &[],
            Duration::from_secs(60),
        );
        assert_exit(&out, 0);
        if !sandboxed {
            // The door: `a`'s agent did `b`'s work, and `b` took it as done.
            assert!(b_task.contains("- [x] b2") && planted);
            assert!(
                stdout(&out).contains("already complete"),
                "{}",
                stdout(&out)
            );
            continue;
        }
        assert!(b_task.contains("- [ ] b2") && !planted, "{b_task}");
        assert!(
            !stdout(&out).contains("already complete"),
            "{}",
            stdout(&out)
        );
        assert!(b_dir.join("work-b.txt").is_file());
    }
}
