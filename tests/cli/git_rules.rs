//! ralph's own git rules, sandbox or not (issue 29): a loop's commits go only onto its own
//! branch; `ralph merge` merges only the tip the loop recorded; a git environment naming
//! another repository is refused at the start; replace objects never change what ralph's git
//! reads. Each test has its control: the plain mechanism does what the attack says.

use std::path::{Path, PathBuf};

use crate::common::*;

/// A `sh` agent whose script is `body` (run in the work tree), then the first box checked.
fn agent(env: &TestEnv, name: &str, body: &str) -> String {
    let script = env.dir().join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!("set -e\n{body}\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n"),
    )
    .unwrap();
    format!("sh '{}'", script.display())
}

fn worktree(env: &TestEnv, name: &str) -> PathBuf {
    env.repo.join(".git/ralph/worktrees").join(name)
}

fn rev(env: &TestEnv, dir: &Path, what: &str) -> String {
    git_in(env, dir, &["rev-parse", what]).trim().to_string()
}

fn said(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

/// A `--worktree` loop whose agent points HEAD at `refs/heads/main` (checked out in the main
/// work tree) and works: ralph refuses to commit (exit 1, the iteration recorded as an error,
/// the message naming both branches), and main never moves. Bug caught: ralph committed the
/// loop's work onto main. The control: the same work without the move goes onto `ralph/NAME`.
#[test]
fn a_worktree_loop_commits_only_onto_its_own_branch() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let main_before = env.git(&["rev-parse", "main"]);
    let hostile = agent(
        &env,
        "hostile",
        "git symbolic-ref HEAD refs/heads/main\necho evil > evil.txt",
    );
    let out = run_loop(&env, "w", "A.md", &hostile, &[]);
    assert_exit(&out, 1);
    let text = said(&out);
    assert!(
        text.contains("branch `main`") && text.contains("branch `ralph/w`"),
        "{text}"
    );
    assert_eq!(env.git(&["rev-parse", "main"]), main_before, "main moved");
    let log = std::fs::read_to_string(worktree(&env, "w").join(".ralph/iterations.log")).unwrap();
    assert!(
        log.contains("ITER 1 ") && log.contains("exit error"),
        "{log}"
    );

    let plain = agent(&env, "plain", "echo work > work.txt");
    let out = run_loop(&env, "c", "A.md", &plain, &[]);
    assert_exit(&out, 0);
    assert_eq!(env.git(&["show", "ralph/c:work.txt"]), "work\n");
    assert_eq!(env.git(&["rev-parse", "main"]), main_before);
}

/// A main-tree loop started on branch `feature` whose agent points HEAD at `main`: ralph
/// refuses to commit (exit 1), and neither branch moves. Bug caught: ralph committed onto
/// `main`. The control: `git commit` through such a HEAD does move main.
#[test]
fn a_main_tree_loop_commits_only_onto_the_branch_it_started_on() {
    let env = TestEnv::new();
    env.write_task(&["one"], "");
    env.commit_all("task");
    env.git(&["checkout", "-q", "-b", "feature"]);
    let (main_before, feature_before) = (
        env.git(&["rev-parse", "main"]),
        env.git(&["rev-parse", "feature"]),
    );
    let hostile = agent(
        &env,
        "hostile",
        "git symbolic-ref HEAD refs/heads/main\necho evil > evil.txt",
    );
    let out = env.ralph(&["run", "--agent-cmd", &hostile, "--yes", "--grace", "1s"]);
    assert_exit(&out, 1);
    let text = said(&out);
    assert!(
        text.contains("branch `main`") && text.contains("branch `feature`"),
        "{text}"
    );
    assert_eq!(env.git(&["rev-parse", "main"]), main_before, "main moved");
    assert_eq!(env.git(&["rev-parse", "feature"]), feature_before);
    let state = std::fs::read_to_string(env.repo.join(".ralph/state.json")).unwrap();
    assert!(state.contains("\"halt_reason\": \"error\""), "{state}");

    // The control: git itself commits through the moved HEAD onto main.
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "by hand"]);
    assert_ne!(env.git(&["rev-parse", "main"]), main_before);
}

/// Loop `w` completes; then loop `x`'s agent points `ralph/w` at its own commit. `ralph merge
/// w` refuses (exit 1, naming the branch and the recorded commit), and main does not move.
/// Bug caught: ralph merged loop `x`'s commit as loop `w`'s. The control: `git merge ralph/w`
/// would bring x's file.
#[test]
fn a_branch_another_loop_moved_elsewhere_is_not_merged() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.commit_all("tasks");
    let out = run_loop(&env, "w", "A.md", &agent(&env, "w", "echo w > w.txt"), &[]);
    assert_exit(&out, 0);
    let w_tip = env.git(&["rev-parse", "ralph/w"]).trim().to_string();
    let mover = agent(
        &env,
        "x",
        "echo x > x.txt\ngit add x.txt\ngit commit -qm x\ngit update-ref refs/heads/ralph/w HEAD",
    );
    let out = run_loop(&env, "x", "B.md", &mover, &[]);
    assert_exit(&out, 0);
    let moved = git_in(
        &env,
        &worktree(&env, "w"),
        &["ls-tree", "--name-only", "ralph/w"],
    );
    assert!(moved.contains("x.txt"), "the control: {moved}");
    let main_before = env.git(&["rev-parse", "main"]);
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 1);
    let text = said(&out);
    assert!(
        text.contains("ralph/w") && text.contains(&w_tip[..7]),
        "{text}"
    );
    assert_eq!(env.git(&["rev-parse", "main"]), main_before);
    assert!(!env.repo.join("x.txt").exists());
}

/// Loop `w` completes; then someone commits on top of `ralph/w`. `ralph merge w` merges the
/// tip the loop recorded, not the commit after it (said). Bug caught: main received the
/// commit ralph never made. The control: the branch itself holds it.
#[test]
fn a_branch_moved_on_past_the_loop_merges_only_the_recorded_tip() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let out = run_loop(&env, "w", "A.md", &agent(&env, "w", "echo w > w.txt"), &[]);
    assert_exit(&out, 0);
    let w_tip = env.git(&["rev-parse", "ralph/w"]).trim().to_string();
    let wt = worktree(&env, "w");
    std::fs::write(wt.join("sneaky.txt"), "sneaky\n").unwrap();
    git_in(&env, &wt, &["add", "sneaky.txt"]);
    git_in(&env, &wt, &["commit", "-q", "-m", "not ralph's"]);
    let branch_now = rev(&env, &env.repo, "ralph/w");
    assert_ne!(branch_now, w_tip, "the control: the branch moved on");
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 0);
    assert_eq!(env.git(&["rev-parse", "main"]).trim(), w_tip);
    assert_eq!(env.read("w.txt"), "w\n");
    assert!(!env.repo.join("sneaky.txt").exists(), "{}", said(&out));
    assert!(said(&out).contains(&branch_now[..7]), "{}", said(&out));
}

/// An agent commits its work, then plants `refs/replace/<its commit>` naming a commit of other
/// content. The loop's branch and what `ralph merge` brings into main are the agent's real
/// commit and content. Bug caught: the merge checked out the replacement's files into main.
/// The control: plain `git show` of the merged commit shows the replaced content.
#[test]
fn replace_objects_never_change_what_ralph_commits_or_merges() {
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let body = "echo real > f.txt\n\
                sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n\
                git add -A\ngit commit -qm real\nreal=$(git rev-parse HEAD)\n\
                echo fake > f.txt\ngit add f.txt\nfake=$(git commit-tree -p HEAD~1 -m fake $(git write-tree))\n\
                git reset -q --hard \"$real\"\ngit replace \"$real\" \"$fake\"";
    let out = run_loop(&env, "w", "A.md", &agent(&env, "w", body), &[]);
    assert_exit(&out, 0);
    let tip = env.git(&["rev-parse", "ralph/w"]);
    let real = |what: &str| env.git(&["--no-replace-objects", "show", what]);
    assert_eq!(real("ralph/w:f.txt"), "real\n");
    let out = env.ralph(&["merge", "w"]);
    assert_exit(&out, 0);
    assert_eq!(env.git(&["rev-parse", "main"]), tip);
    assert_eq!(env.read("f.txt"), "real\n", "{}", said(&out));
    assert_eq!(real("main:f.txt"), "real\n");
    let clean = git_in(
        &env,
        &env.repo,
        &["--no-replace-objects", "status", "--porcelain"],
    );
    assert_eq!(clean, "", "main's work tree is its commit");
    // The control: git with replace objects shows the planted content.
    assert_eq!(env.git(&["show", "main:f.txt"]), "fake\n");
}

/// `GIT_DIR` (and each variable like it) set when ralph starts: exit 1 naming it, no agent
/// run, nothing committed anywhere. Bug caught: ralph committed in the repository it found,
/// the agent's git in the one `GIT_DIR` named. The control: the agent's git honours it.
#[test]
fn a_git_environment_naming_another_repository_is_refused_at_the_start() {
    let env = TestEnv::new();
    env.write_task(&["one"], "");
    env.commit_all("task");
    let other = env.dir().join("other");
    std::fs::create_dir_all(&other).unwrap();
    git_in(&env, &other, &["init", "-q", "-b", "main"]);
    git_in(&env, &other, &["config", "user.name", "Other"]);
    git_in(&env, &other, &["config", "user.email", "other@example.com"]);
    git_in(
        &env,
        &other,
        &["commit", "-q", "--allow-empty", "-m", "other"],
    );
    let other_git = other.join(".git");
    let other_before = rev(&env, &other, "HEAD");
    let ours_before = env.git(&["rev-parse", "HEAD"]);
    let committer = agent(
        &env,
        "committer",
        "echo work > work.txt\ngit add -A\ngit commit -qm agent",
    );
    let args = ["run", "--agent-cmd", &committer, "--yes", "--grace", "1s"];
    let dir = other_git.to_string_lossy().into_owned();
    let out = env.ralph_with_limit(
        &args,
        &[("GIT_DIR", &dir)],
        std::time::Duration::from_secs(60),
    );
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("GIT_DIR"), "{}", said(&out));
    assert_eq!(
        rev(&env, &other, "HEAD"),
        other_before,
        "the other repository"
    );
    assert_eq!(env.git(&["rev-parse", "HEAD"]), ours_before);
    assert!(!env.repo.join("work.txt").exists(), "no agent ran");
    for var in [
        "GIT_WORK_TREE",
        "GIT_COMMON_DIR",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
    ] {
        let out = env.ralph_with_limit(
            &["status"],
            &[(var, &dir)],
            std::time::Duration::from_secs(60),
        );
        assert_exit(&out, 1);
        assert!(stderr(&out).contains(var), "{var}: {}", said(&out));
    }

    // The control: the agent's git, given that GIT_DIR, commits in the other repository.
    let script = env.dir().join("committer.sh");
    let out = env
        .command("sh")
        .arg(&script)
        .env("GIT_DIR", &dir)
        .env("RALPH_TASK_FILE", env.repo.join("RALPH_TASK.md"))
        .current_dir(&env.repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert_ne!(rev(&env, &other, "HEAD"), other_before);
    assert_eq!(env.git(&["rev-parse", "HEAD"]), ours_before);
}
