//! The repository's git configuration against a hostile agent (issue 29, the hostile review):
//! a file the configuration includes from the work tree (`include.path = ../.gitconfig`) is
//! configuration, and a loop that changed it is never merged by ralph; and the copy of the
//! configuration a sandboxed agent's git reads holds no credential (`http.*.extraHeader`, a
//! URL's userinfo, `credential.*`).

use crate::common::*;
use crate::git_boundary::{marks, marks_dir, plain_git, ralph};

/// The user's repository: two task files, its configuration including `../.gitconfig` (a
/// tracked project configuration, absent for now).
fn including_repo(env: &TestEnv) {
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.commit_all("tasks");
    env.git(&["config", "include.path", "../.gitconfig"]);
}

/// The agent commits a `.gitconfig` defining a clean and a smudge filter (each leaves a mark
/// where only a program run outside the sandbox can) and a `.gitattributes` naming it for
/// every file.
fn filter_agent(env: &TestEnv) -> String {
    let m = marks_dir(env).display().to_string();
    checking_agent(
        env,
        "planter",
        &format!(
            "printf '[filter \"ev\"]\\n\\tclean = \"touch {m}/clean; cat\"\\n\\tsmudge = \"touch {m}/smudge; cat\"\\n' > .gitconfig\n\
             echo '* filter=ev' > .gitattributes"
        ),
    )
}

fn worktree_run(
    env: &TestEnv,
    name: &str,
    task_file: &str,
    agent: &str,
    merge: bool,
) -> std::process::Output {
    let extra: &[&str] = if merge {
        &["--sandbox", "--merge"]
    } else {
        &["--sandbox"]
    };
    run_loop(env, name, task_file, agent, extra)
}

/// `ralph run A.md` in the main tree with `agent`, under `--sandbox` when `sandboxed`.
fn main_tree_run(env: &TestEnv, agent: &str, sandboxed: bool) -> std::process::Output {
    let mut args = vec![
        "run",
        "A.md",
        "--agent-cmd",
        agent,
        "--yes",
        "--grace",
        "1s",
    ];
    if sandboxed {
        args.push("--sandbox");
    }
    ralph(env, &args)
}

/// The review's attack: the loop's `--merge` would write the agent's `.gitconfig` into the
/// main tree, and the user's next worktree loop (`git worktree add`, outside) would run its
/// smudge filter. The merge is refused (11), naming the file and why; nothing is merged, and
/// the next loop runs nothing of the agent's outside.
#[test]
fn a_loop_that_changed_an_included_config_file_is_never_merged() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    including_repo(&env);
    let before = env.git(&["rev-parse", "main"]);
    let first = worktree_run(&env, "planter", "A.md", &filter_agent(&env), true);
    assert_exit(&first, 11);
    let said = stdout(&first);
    assert!(
        said.contains(".gitconfig")
            && said.contains("the repository's configuration includes it")
            && said.contains("review and merge it yourself"),
        "{said}"
    );
    assert_eq!(env.git(&["rev-parse", "main"]), before, "main did not move");
    assert!(!env.repo.join(".gitconfig").exists());
    assert!(!env.repo.join(".gitattributes").exists());
    // The loop's work stays on its branch, for the user to review.
    let on_branch = env.git(&["ls-tree", "--name-only", "ralph/planter"]);
    assert!(on_branch.contains(".gitconfig"), "{on_branch}");
    let next = worktree_run(
        &env,
        "next",
        "B.md",
        &checking_agent(&env, "next", ""),
        false,
    );
    assert_exit(&next, 0);
    assert_eq!(marks(&env), Vec::<String>::new(), "{}", stderr(&next));
    // `ralph merge` refuses it the same way.
    let again = ralph(&env, &["merge", "planter"]);
    assert_exit(&again, 11);
    assert!(stdout(&again).contains(".gitconfig"), "{}", stdout(&again));
    assert_eq!(env.git(&["rev-parse", "main"]), before);
}

/// Control: the branch such a loop leaves, merged with a plain `git merge` and followed by a
/// plain `git worktree add`, runs the agent's filter outside.
#[test]
fn control_a_plain_merge_of_that_branch_runs_the_agents_filter() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    including_repo(&env);
    let first = worktree_run(&env, "planter", "A.md", &filter_agent(&env), false);
    assert_exit(&first, 0);
    assert_eq!(marks(&env), Vec::<String>::new(), "{}", stderr(&first));
    let out = plain_git(
        &env,
        &env.repo,
        "git -c user.name=u -c user.email=u@e merge -q --no-edit ralph/planter && git worktree add -q ../w2 -b w2",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        marks(&env).contains(&"smudge".to_string()),
        "{:?}",
        marks(&env)
    );
}

/// With the same configuration, a loop that changes no included file merges as always.
#[test]
fn a_loop_that_changed_other_files_still_merges() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    including_repo(&env);
    let agent = checking_agent(&env, "plain", "echo x > notes.txt");
    let out = worktree_run(&env, "plain", "A.md", &agent, true);
    assert_exit(&out, 0);
    assert_eq!(env.read("work-plain.txt"), "plain\n");
    assert_eq!(env.read("notes.txt"), "x\n");
}

/// Credentials in the repository's configuration, as CI leaves them (actions/checkout's
/// `extraheader`, a token in a remote's URL or an `insteadOf` base, a credential helper).
fn with_credentials(env: &TestEnv) {
    env.write("A.md", &task(&["a1"]));
    env.commit_all("tasks");
    for (k, v) in [
        (
            "http.https://github.com/.extraheader",
            "AUTHORIZATION: basic SECRET-1",
        ),
        ("http.extraHeader", "Authorization: bearer SECRET-2"),
        (
            "remote.origin.url",
            "https://x-access-token:SECRET-3@github.com/o/r.git",
        ),
        (
            "remote.origin.pushurl",
            "https://SECRET-4@github.com/o/r.git",
        ),
        (
            "url.https://x:SECRET-5@example.com/.insteadOf",
            "https://example.com/",
        ),
        (
            "url.https://github.com/.insteadOf",
            "https://u:SECRET-6@gh.example/",
        ),
        ("credential.helper", "store --file /SECRET-7"),
        ("credential.https://github.com.username", "SECRET-8"),
        ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
    ] {
        env.git(&["config", "--add", k, v]);
    }
}

/// What the agent's git shows it of its configuration, and the file itself, in `seen.txt`.
/// The repository's own `.git/config` by its path too (a worktree loop's common one, read-only).
fn config_reader(env: &TestEnv) -> String {
    let real = env.repo.join(".git/config");
    checking_agent(
        env,
        "reader",
        &format!(
            "{{ git config --list --show-origin; cat \"$(git rev-parse --git-dir)/config\" '{}'; }} > seen.txt 2>&1",
            real.display()
        ),
    )
}

/// A sandboxed agent reads its git configuration: no credential is in it, and everything else
/// is (the user, the remote's URL without its userinfo, its refspec).
#[test]
fn the_agent_sees_no_credential_of_the_repository_configuration() {
    if !bwrap_works() {
        return;
    }
    for worktree in [false, true] {
        let env = TestEnv::outside_tmp();
        with_credentials(&env);
        let agent = config_reader(&env);
        let out = if worktree {
            worktree_run(&env, "reader", "A.md", &agent, true)
        } else {
            main_tree_run(&env, &agent, true)
        };
        assert_exit(&out, 0);
        sees_no_credential(&env);
    }
}

fn sees_no_credential(env: &TestEnv) {
    let seen = env.read("seen.txt");
    assert!(seen.contains("[user]"), "the file itself was read: {seen}");
    assert!(!seen.contains("SECRET"), "{seen}");
    assert!(!seen.to_lowercase().contains("credential"), "{seen}");
    assert!(!seen.to_lowercase().contains("extraheader"), "{seen}");
    for kept in [
        "user.name=Test User",
        "remote.origin.url=https://github.com/o/r.git",
        "remote.origin.pushurl=https://github.com/o/r.git",
        "remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*",
        "url.https://example.com/.insteadof=https://example.com/",
        "url.https://github.com/.insteadof=https://gh.example/",
    ] {
        assert!(seen.contains(kept), "{kept} in {seen}");
    }
    // The repository's own configuration is as the user wrote it.
    let own = env.git(&["config", "--list"]);
    for k in 1..=8 {
        assert!(own.contains(&format!("SECRET-{k}")), "{own}");
    }
}

/// Control: the same reader, unsandboxed, sees the credentials (the reader reads what is there).
#[test]
fn control_an_unsandboxed_agent_reads_the_credentials() {
    let env = TestEnv::outside_tmp();
    with_credentials(&env);
    let agent = config_reader(&env);
    let out = main_tree_run(&env, &agent, false);
    assert_exit(&out, 0);
    let seen = env.read("seen.txt");
    for k in 1..=8 {
        assert!(
            seen.contains(&format!("SECRET-{k}")),
            "SECRET-{k} in {seen}"
        );
    }
}
