//! ralph's own files never make a merge conflict (SPEC §13): two loops that both completed, of
//! different lengths, both wrote `.ralph/progress.md` (the status block and their notes) and
//! `.ralph/guardrails.md` (a Sign each); git alone stops on both files, ralph merges them in
//! either order, on every merge path — `ralph merge` into a base checked out in a clean work tree
//! or checked out nowhere, `run --worktree NAME --merge`, a sandboxed loop's merge, a
//! `--parallel 2` queue — keeping every note and naming each branch's last status. A hostile
//! `.gitattributes` never turns ralph's driver on the agent's own conflicts.

use std::time::Duration;

use crate::common::*;

/// The status block line of a loop's last status, as the merged block names it.
fn status(iterations: u32) -> String {
    format!(
        "Iteration: {iterations}; Criteria completed: {iterations}/{iterations}; Status: Complete"
    )
}

/// The iterations each loop of these tests takes (one criterion checked per iteration).
fn iterations(name: &str) -> u32 {
    if name == "a" { 1 } else { 3 }
}

/// A `sh` agent for loop `name`: it checks one box, appends a note to `.ralph/progress.md` and
/// its work to `work-NAME.txt`; in its first iteration it adds a Sign to `.ralph/guardrails.md`;
/// `before` runs first.
fn notes_agent(env: &TestEnv, name: &str, before: &str) -> String {
    let script = env.dir().join(format!("agent-{name}.sh"));
    std::fs::write(
        &script,
        format!(
            "set -e\n{before}\n\
             sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n\
             echo \"- {name} did iteration $RALPH_ITERATION\" >> .ralph/progress.md\n\
             echo \"{name} $RALPH_ITERATION\" >> work-{name}.txt\n\
             if [ \"$RALPH_ITERATION\" = 1 ]; then printf '\\n### Sign: {name} learned\\n' >> .ralph/guardrails.md; fi\n"
        ),
    )
    .unwrap();
    format!("sh '{}'", script.display())
}

/// The notes both loops wrote.
fn all_notes() -> Vec<String> {
    let mut notes = vec!["- a did iteration 1".to_string()];
    notes.extend((1..=3).map(|i| format!("- b did iteration {i}")));
    notes
}

/// A repository with task A (one criterion) and task B (three), and loops `a` and `b` on them,
/// both completed from the same base, neither merged. `extra`: more flags for both runs.
fn two_loops(env: &TestEnv, extra: &[&str]) {
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1", "b2", "b3"]));
    env.commit_all("two tasks");
    for (name, file) in [("a", "A.md"), ("b", "B.md")] {
        let out = run_loop(env, name, file, &notes_agent(env, name, ""), extra);
        assert_exit(&out, 0);
    }
}

/// The control: git's own merge of the two loops' branches stops on ralph's files.
#[track_caller]
fn git_alone_conflicts(env: &TestEnv) {
    let out = git_output_in(
        env,
        &env.repo,
        &[
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "ralph/a",
            "ralph/b",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "git alone merges them: {out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    for file in [".ralph/progress.md", ".ralph/guardrails.md"] {
        assert!(listed.lines().any(|l| l == file), "{listed}");
    }
}

/// What the base branch holds after `first` then `second` merged: both loops' work, every note,
/// both Signs, the merged status block, and `second`'s merge commit with both tips in its past.
#[track_caller]
fn both_merged(env: &TestEnv, first: &str, second: &str) {
    let progress = env.git(&["show", "main:.ralph/progress.md"]);
    for note in all_notes() {
        assert_eq!(
            progress.lines().filter(|l| *l == note).count(),
            1,
            "{note}:\n{progress}"
        );
    }
    let block = format!(
        "## Current Status\n- Status: Merged; the branches' last statuses follow\n- main: {}\n- ralph/{second}: {}\n\n## Iteration Log\n",
        status(iterations(first)),
        status(iterations(second))
    );
    assert!(progress.contains(&block), "{progress}");
    let guardrails = env.git(&["show", "main:.ralph/guardrails.md"]);
    for name in ["a", "b"] {
        assert!(
            guardrails.contains(&format!("### Sign: {name} learned\n")),
            "{guardrails}"
        );
    }
    for name in ["a", "b"] {
        let work = env.git(&["show", &format!("main:work-{name}.txt")]);
        assert_eq!(work.lines().count() as u32, iterations(name), "{work}");
        let tip = format!("ralph/{name}");
        let ancestor = git_output_in(
            env,
            &env.repo,
            &["merge-base", "--is-ancestor", &tip, "main"],
        );
        assert!(ancestor.status.success(), "{tip} is not merged into main");
    }
    let merges = env.git(&["log", "--merges", "--format=%s", "main"]);
    assert_eq!(merges, format!("Merge branch 'ralph/{second}'\n"));
}

/// Two loops of different lengths merge in either order into `main`, checked out in the main
/// work tree (`git merge` there) or checked out nowhere (its ref moved, `git merge-tree`), each
/// in a repository of its own. Bug caught: the second `ralph merge` exited 11 on
/// `.ralph/progress.md`.
#[test]
fn two_loops_of_different_lengths_merge_in_either_order() {
    for nowhere in [false, true] {
        for (first, second) in [("a", "b"), ("b", "a")] {
            let env = TestEnv::new();
            two_loops(&env, &[]);
            if nowhere {
                env.git(&["checkout", "-q", "-b", "elsewhere"]);
            }
            let head = env.git(&["rev-parse", "HEAD"]);
            git_alone_conflicts(&env);
            for name in [first, second] {
                let out = env.ralph(&["merge", name]);
                assert_exit(&out, 0);
            }
            both_merged(&env, first, second);
            assert_eq!(env.git(&["status", "--porcelain"]), "");
            if nowhere {
                assert_eq!(env.git(&["rev-parse", "HEAD"]), head, "elsewhere stays");
                assert!(
                    !env.repo.join("work-a.txt").exists(),
                    "its work tree is untouched"
                );
            } else {
                assert_eq!(
                    env.read(".ralph/progress.md"),
                    env.git(&["show", "main:.ralph/progress.md"])
                );
            }
            // ralph's driver left no file of its own or of git's behind.
            let left = env.git(&["status", "--porcelain", "--ignored"]);
            assert!(
                !left.contains(".merge_file_") && !left.contains(".ralph-merge-"),
                "{left}"
            );
        }
    }
}

/// `run --worktree b --merge` merges itself after loop `a` merged while it ran: its merge goes
/// through the driver too.
#[test]
fn a_loop_run_with_merge_merges_after_another_did() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1", "b2", "b3"]));
    env.commit_all("two tasks");
    let out = run_loop(&env, "a", "A.md", &notes_agent(&env, "a", ""), &[]);
    assert_exit(&out, 0);
    // Loop b waits in its first iteration until `a` is merged.
    let go = env.dir().join("go");
    let wait = format!(
        "if [ \"$RALPH_ITERATION\" = 1 ]; then while [ ! -e '{}' ]; do sleep 0.05; done; fi",
        go.display()
    );
    let mut cmd = env.ralph_cmd();
    cmd.args([
        "run",
        "--worktree",
        "b",
        "B.md",
        "--merge",
        "--agent-cmd",
        &notes_agent(&env, "b", &wait),
        "--yes",
        "--grace",
        "1s",
    ]);
    let b = env.spawn(cmd);
    let running = wait_until(Duration::from_secs(30), || {
        let out = env.ralph(&["status", "--all", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["loops"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["name"] == "b" && l["running"] == true))
    });
    let merged_a = env.ralph(&["merge", "a"]);
    std::fs::write(&go, "").unwrap();
    let (code, out, err) = b.wait(Duration::from_secs(60));
    assert!(running, "loop b never ran");
    assert_exit(&merged_a, 0);
    assert_eq!(code, Some(0), "{out}\n{err}");
    both_merged(&env, "a", "b");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

/// Two sandboxed loops: their merge's git writes only beneath the repository and cannot run
/// ralph through `/proc`; the driver still runs, from ralph's own binary.
#[test]
fn sandboxed_loops_merge_their_own_files_too() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    two_loops(&env, &["--sandbox"]);
    git_alone_conflicts(&env);
    for name in ["b", "a"] {
        let out = env.ralph(&["merge", name]);
        assert_exit(&out, 0);
    }
    both_merged(&env, "b", "a");
}

/// Loop `name` whose agent writes `shared.txt` (and `.gitattributes` when `attributes` is some)
/// besides its notes; task `{NAME}.md` of one criterion.
fn clashing_loop(env: &TestEnv, name: &str, attributes: Option<&str>) -> std::process::Output {
    let plant = attributes.map_or(String::new(), |a| format!("printf '{a}' > .gitattributes"));
    let body = format!("{plant}\necho '{name} was here' > shared.txt");
    let file = format!("{}.md", name.to_uppercase());
    run_loop(env, name, &file, &notes_agent(env, name, &body), &[])
}

/// The base with `shared.txt` and one task per loop name.
fn clash_base(env: &TestEnv, names: &[&str]) {
    env.write("shared.txt", "original\n");
    for name in names {
        env.write(&format!("{}.md", name.to_uppercase()), &task(&[name]));
    }
    env.commit_all("base");
}

/// An agent's `.gitattributes`, merged with its first loop, names ralph's driver for a file its
/// second loop changed too: the user's git, given a driver of that name that takes any path,
/// would merge the conflict away (the control); ralph's driver refuses the path, and the merge
/// stops with exit 11 naming `shared.txt`, changing nothing.
#[test]
fn an_attributes_file_naming_ralphs_driver_never_merges_the_agents_conflict() {
    let env = TestEnv::new();
    clash_base(&env, &["plant", "clash"]);
    let out = clashing_loop(&env, "plant", Some("shared.txt merge=ralph-own\\n"));
    assert_exit(&out, 0);
    let out = clashing_loop(&env, "clash", None);
    assert_exit(&out, 0);
    assert_exit(&env.ralph(&["merge", "plant"]), 0);
    assert_eq!(env.read(".gitattributes"), "shared.txt merge=ralph-own\n");
    // The control: git lists `shared.txt` as a conflict, unless a driver of that name takes it.
    let conflicts = |driver: &[&str]| {
        let mut args = driver.to_vec();
        args.extend([
            "merge-tree",
            "--write-tree",
            "--name-only",
            "main",
            "ralph/clash",
        ]);
        let out = git_output_in(&env, &env.repo, &args);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(conflicts(&[]).lines().any(|l| l == "shared.txt"));
    let taken = conflicts(&["-c", "merge.ralph-own.driver=true"]);
    assert!(
        !taken.lines().any(|l| l == "shared.txt"),
        "control: {taken}"
    );
    let before = env.git(&["rev-parse", "main"]);
    let out = env.ralph(&["merge", "clash"]);
    assert_exit(&out, 11);
    let said = stdout(&out);
    assert!(
        said.contains("conflicts with `main` in 1 file:\n  shared.txt (left by ralph's merge driver: not one of ralph's own files)\n"),
        "{said}"
    );
    assert_eq!(env.git(&["rev-parse", "main"]), before);
    assert_eq!(env.read("shared.txt"), "plant was here\n");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

/// The same `.gitattributes` on the branch being merged: git reads the attributes of the branch
/// merged into, so the agent's conflict in `shared.txt` stays one (exit 11), and its `-merge` for
/// `.ralph/progress.md` does not stop ralph's file from merging.
#[test]
fn an_attributes_file_on_the_branch_merged_is_not_read() {
    let env = TestEnv::new();
    clash_base(&env, &["first", "hostile"]);
    assert_exit(&clashing_loop(&env, "first", None), 0);
    let hostile = "shared.txt merge=ralph-own\\n.ralph/progress.md -merge\\n";
    assert_exit(&clashing_loop(&env, "hostile", Some(hostile)), 0);
    assert_exit(&env.ralph(&["merge", "first"]), 0);
    let before = env.git(&["rev-parse", "main"]);
    let out = env.ralph(&["merge", "hostile"]);
    assert_exit(&out, 11);
    let said = stdout(&out);
    assert!(said.contains("in 1 file:\n  shared.txt\n"), "{said}");
    assert_eq!(env.git(&["rev-parse", "main"]), before);
    assert_eq!(env.read("shared.txt"), "first was here\n");
}

/// A repository whose own attributes say `.ralph/progress.md` must not be merged (`merge=binary`,
/// `-merge`) is obeyed: a real conflict there, exit 11, nothing changed. The control: without
/// them, the same two loops merge.
#[test]
fn a_repository_that_says_how_ralphs_files_merge_is_obeyed() {
    for attributes in [None, Some("merge=binary"), Some("-merge")] {
        let env = TestEnv::new();
        env.write("A.md", &task(&["a1"]));
        env.write("B.md", &task(&["b1"]));
        if let Some(a) = attributes {
            env.write(".gitattributes", &format!(".ralph/progress.md {a}\n"));
        }
        env.commit_all("base");
        for (name, file) in [("a", "A.md"), ("b", "B.md")] {
            let out = run_loop(&env, name, file, &notes_agent(&env, name, ""), &[]);
            assert_exit(&out, 0);
        }
        assert_exit(&env.ralph(&["merge", "a"]), 0);
        let before = env.git(&["rev-parse", "main"]);
        let out = env.ralph(&["merge", "b"]);
        if attributes.is_none() {
            assert_exit(&out, 0);
            continue;
        }
        assert_exit(&out, 11);
        assert!(
            stdout(&out).contains("  .ralph/progress.md\n"),
            "{attributes:?}: {}",
            stdout(&out)
        );
        assert_eq!(env.git(&["rev-parse", "main"]), before, "{attributes:?}");
    }
}

/// A `--parallel 2` beads queue whose items take one and three iterations: both merge, both are
/// closed, exit 0, every agent's notes on the base branch. Bug caught: the second item's merge
/// stopped on `.ralph/progress.md`, and the item was released (exit 9).
#[test]
fn a_parallel_queue_of_items_of_different_lengths_closes_them_all() {
    let Some(b) = crate::queue::Beads::new() else {
        return;
    };
    let one = b.create("One", "- [ ] one done", 1);
    let three = b.create("Three", "- [ ] three a\n- [ ] three b\n- [ ] three c", 1);
    b.env.commit_all("items");
    let notes = agent_sh(
        &b.env,
        "notes",
        "echo \"- $(basename \"$RALPH_TASK_FILE\" .md) did iteration $RALPH_ITERATION\" >> .ralph/progress.md",
    );
    let out = b.run_queue(
        &format!("{notes}+check-unless:no such text"),
        &["--parallel", "2"],
    );
    assert_exit(&out, 0);
    for id in [&one, &three] {
        assert_eq!(b.status(id), "closed", "{id}: {}", stdout(&out));
    }
    let progress = b.env.read(".ralph/progress.md");
    let mut expected = vec![format!("- beads-{one} did iteration 1")];
    expected.extend((1..=3).map(|i| format!("- beads-{three} did iteration {i}")));
    for note in expected {
        assert!(progress.lines().any(|l| l == note), "{note}:\n{progress}");
    }
    assert!(
        progress.contains("- Status: Merged; the branches' last statuses follow\n"),
        "{progress}"
    );
    assert_eq!(b.env.git(&["status", "--porcelain"]), "");
}

/// The user's own attributes file (git's default, `~/.config/git/attributes`) still counts in
/// ralph's merge, whose `core.attributesFile` replaces it for the merge: `shared.txt
/// merge=union` there merges the two loops' lines, as the user's own git does. The control:
/// without that file, `shared.txt` conflicts.
#[test]
fn the_users_own_attributes_still_apply_in_ralphs_merge() {
    let env = TestEnv::new();
    clash_base(&env, &["first", "second"]);
    assert_exit(&clashing_loop(&env, "first", None), 0);
    assert_exit(&clashing_loop(&env, "second", None), 0);
    let conflicts = || {
        let args = [
            "merge-tree",
            "--write-tree",
            "--name-only",
            "ralph/first",
            "ralph/second",
        ];
        let out = git_output_in(&env, &env.repo, &args);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(conflicts().lines().any(|l| l == "shared.txt"), "control");
    let user = env.home.join(".config/git");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("attributes"), "shared.txt merge=union\n").unwrap();
    assert!(!conflicts().lines().any(|l| l == "shared.txt"));
    for name in ["first", "second"] {
        assert_exit(&env.ralph(&["merge", name]), 0);
    }
    assert_eq!(env.read("shared.txt"), "first was here\nsecond was here\n");
}
