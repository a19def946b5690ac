//! Links the agent plants in the git directory never lead ralph's own git writes out of the
//! repository (SPEC §4, "no back doors"). Without the sandbox the git directory is the agent's to
//! write, and git and libgit2 write through the links they find there: `objects/ab` linked to a
//! directory of the user's receives the next object whose id starts with `ab`, a linked
//! `MERGE_MSG` has `git merge` overwrite what it points to. Under `--sandbox` the agent writes a
//! git directory of its own, never the repository's (issue 29), so each test shows the door open
//! for a loop without the sandbox (ralph's git follows the link), then closed for the same agent
//! in it: its link stays in its own directory. A link in the repository's git directory however
//! it came there (a run without the sandbox) is still not written through by the merge of a
//! sandboxed loop, which is confined beneath the repository.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

fn sh_agent(env: &TestEnv, name: &str, body: &str) -> String {
    let path = env.dir().join(format!("{name}.sh"));
    std::fs::write(&path, body).unwrap();
    format!("sh '{}'", path.display())
}

/// A directory of the user's, outside the repository (read-only in the sandbox).
fn elsewhere(env: &TestEnv) -> PathBuf {
    let d = env.home.join("elsewhere");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_linked_object_directory_receives_no_object_from_ralphs_git() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["one"], "");
        env.commit_all("initial");
        let outside = elsewhere(&env);
        // The blob of the agent's file goes where its id's directory leads.
        let agent = sh_agent(
            &env,
            "objects",
            &format!(
                "printf 'echo planted\\n' > payload.sh\n\
                 d=.git/objects/$(git hash-object payload.sh | cut -c1-2)\n\
                 rm -rf \"$d\" && ln -s '{}' \"$d\" && echo linked > linked.txt\n\
                 sed -i 's/- \\[ \\] one/- [x] one/' RALPH_TASK.md\n",
                outside.display()
            ),
        );
        let mut args = vec!["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = env.ralph_with_limit(&args, &[], Duration::from_secs(60));
        if !sandboxed {
            // The door: ralph's git wrote the object through the link.
            assert_exit(&out, 0);
            assert_eq!(entries(&outside).len(), 1, "{}", stderr(&out));
            continue;
        }
        assert_eq!(entries(&outside), Vec::<String>::new(), "{}", stderr(&out));
        // The agent linked the directory in its own git directory; the repository's stays a
        // directory, and ralph's commit of the work is there.
        assert_exit(&out, 0);
        assert_eq!(env.read("linked.txt"), "linked\n");
        let blob = env.git(&["hash-object", "payload.sh"]);
        let d = env.repo.join(".git/objects").join(&blob[..2]);
        assert!(!d.is_symlink(), "{}", d.display());
        assert_eq!(env.git(&["show", "HEAD:payload.sh"]), "echo planted\n");
    }
}

/// libgit2's writes (ralph's commit moving the branch): `refs/heads` linked to a directory of
/// the user's that holds the branch, so HEAD still resolves.
#[test]
fn a_linked_refs_directory_receives_no_branch_from_ralphs_commit() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["one"], "");
        env.commit_all("initial");
        let outside = elsewhere(&env);
        let before = env.git(&["rev-parse", "HEAD"]);
        std::fs::write(outside.join("main"), &before).unwrap();
        let agent = sh_agent(
            &env,
            "refs",
            &format!(
                "rm -rf .git/refs/heads && ln -s '{}' .git/refs/heads && echo linked > linked.txt
                 echo work > work.txt
                 sed -i 's/- \\[ \\] one/- [x] one/' RALPH_TASK.md
",
                outside.display()
            ),
        );
        let mut args = vec!["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = env.ralph_with_limit(&args, &[], Duration::from_secs(60));
        let now = std::fs::read_to_string(outside.join("main")).unwrap();
        if !sandboxed {
            // The door: ralph's commit moved the branch file out there.
            assert_exit(&out, 0);
            assert_ne!(now, before, "{}", stderr(&out));
            continue;
        }
        assert_eq!(now, before, "{}", stderr(&out));
        assert_eq!(entries(&outside), ["main"]);
        // The link was the agent's own git directory's; the repository's branch moved on.
        assert_exit(&out, 0);
        assert_eq!(env.read("linked.txt"), "linked\n");
        assert!(!env.repo.join(".git/refs/heads").is_symlink());
        assert_ne!(env.git(&["rev-parse", "HEAD"]), before);
        assert_eq!(env.git(&["show", "HEAD:work.txt"]), "work\n");
    }
}

/// `ralph run --worktree w A.md` with an agent that links `$GIT_COMMON_DIR/MERGE_MSG` to a file
/// of the user's; the user then commits on `main`, so the merge is not a fast-forward and `git
/// merge` writes its message through the link.
fn loop_that_links_merge_msg(env: &TestEnv, victim: &Path, sandboxed: bool) {
    env.write("A.md", "---\ntask: t\n---\n## Success Criteria\n- [ ] a1\n");
    env.commit_all("task");
    let agent = sh_agent(
        env,
        "merge-msg",
        &format!(
            "ln -sf '{}' \"$(git rev-parse --git-common-dir)/MERGE_MSG\"\n\
             echo w > work-w.txt\n\
             sed -i 's/- \\[ \\] a1/- [x] a1/' A.md\n",
            victim.display()
        ),
    );
    let mut args = vec![
        "run",
        "--worktree",
        "w",
        "A.md",
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ];
    if sandboxed {
        args.push("--sandbox");
    }
    let out = env.ralph_with_limit(&args, &[], Duration::from_secs(60));
    assert_exit(&out, 0);
    let merge_msg = env.repo.join(".git/MERGE_MSG");
    if sandboxed {
        // The agent linked its own git directory's `MERGE_MSG`, never the repository's: the
        // link is planted here by hand, as a run without the sandbox would have.
        assert!(merge_msg.symlink_metadata().is_err(), "{}", stderr(&out));
        std::os::unix::fs::symlink(victim, &merge_msg).unwrap();
    }
    assert!(
        std::fs::symlink_metadata(&merge_msg)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The user's own commit on `main` (made without `git commit`, which would remove
    // `MERGE_MSG` on its way out).
    env.write("main.txt", "the user's own work\n");
    env.git(&["add", "main.txt"]);
    let tree = env.git(&["write-tree"]);
    let commit = env.git(&[
        "commit-tree",
        "-p",
        "HEAD",
        "-m",
        "main moves on",
        tree.trim(),
    ]);
    env.git(&["update-ref", "refs/heads/main", commit.trim()]);
}

#[test]
fn the_merge_of_a_sandboxed_loop_never_writes_through_a_linked_merge_msg() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        let victim = env.home.join(".bashrc");
        std::fs::write(&victim, "the user's own\n").unwrap();
        loop_that_links_merge_msg(&env, &victim, sandboxed);
        let out = env.ralph(&["merge", "w"]);
        if !sandboxed {
            // The door: `git merge` wrote its message over the user's file.
            assert_exit(&out, 0);
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "Merge branch 'ralph/w'",
                "{}{}",
                stdout(&out),
                stderr(&out)
            );
            continue;
        }
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "the user's own\n",
            "{}",
            stderr(&out)
        );
        // Nothing merged, nothing half-merged: the work tree is as the user left it.
        assert_exit(&out, 1);
        assert!(stderr(&out).contains("MERGE_MSG"), "{}", stderr(&out));
        assert!(!env.repo.join("work-w.txt").exists());
        assert_eq!(env.git(&["status", "--porcelain"]), "");
    }
}
