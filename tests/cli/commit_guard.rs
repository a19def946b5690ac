//! The commit guard and the repository's hooks (SPEC §8).

use std::os::unix::fs::PermissionsExt;

use crate::common::*;

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["g1", "g2"], "");
    env.commit_all("initial");
    env
}

fn committed_files(env: &TestEnv) -> String {
    env.git(&["ls-files"])
}

#[test]
fn likely_secrets_and_key_blocks_stay_out_of_the_commit() {
    let env = setup();
    let key = env.home.join("notes.txt");
    std::fs::write(
        &key,
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n",
    )
    .unwrap();
    let script = format!(
        "check+touch:.env+touch:deploy/server.pem+copy:{}|docs/notes.txt,check",
        key.display()
    );
    let out = env.run_fake(&script, &[]);
    assert_exit(&out, 0);
    let files = committed_files(&env);
    for path in [".env", "deploy/server.pem", "docs/notes.txt"] {
        assert!(!files.contains(path), "{path} was committed:\n{files}");
        assert!(env.repo.join(path).exists(), "{path} must stay on disk");
        assert!(
            stderr(&out).contains(&format!("left `{path}` out of the commit")),
            "{}",
            stderr(&out)
        );
    }
    assert!(
        files.contains("work/iter-1.txt"),
        "the rest is committed: {files}"
    );
    assert!(
        env.activity()
            .contains("Commit guard: left .env out of the commit (likely secrets (.env*))")
    );
    // The fingerprint shows what was left out, as git does.
    let last = env.iter_records().pop().unwrap();
    assert_eq!(last.rsplit(" | ").next().unwrap(), env.porcelain_cksum());
}

#[test]
fn an_already_tracked_env_file_is_committed_as_usual() {
    let env = TestEnv::new();
    env.write_task(&["t1"], "");
    env.write(".env", "A=1\n");
    env.commit_all("initial");
    let out = env.run_fake("check+touch:.env", &[]);
    assert_exit(&out, 0);
    assert!(
        env.git(&["show", "--name-only", "--format=", "HEAD"])
            .contains(".env")
    );
}

#[test]
fn files_over_max_file_size_stay_out() {
    let env = setup();
    env.write(".ralph/config.toml", "max_file_size = \"1\"\n");
    env.commit_all("config");
    let out = env.run_fake("check+touch:big.bin,check", &[]);
    assert_exit(&out, 0);
    assert!(!committed_files(&env).contains("big.bin"));
    assert!(stderr(&out).contains("over the"), "{}", stderr(&out));
}

fn hook(env: &TestEnv, dir: &str, name: &str, body: &str) {
    let path = env.repo.join(dir).join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_failing_pre_commit_hook_leaves_the_changes_uncommitted_and_the_loop_goes_on() {
    let env = setup();
    hook(
        &env,
        ".git/hooks",
        "pre-commit",
        "echo 'lint: 3 problems' >&2; exit 1",
    );
    let out = env.run_fake("check", &["--max-iterations", "2"]);
    // Every box is checked, but work a hook refused to commit is not done (SPEC §5.3).
    assert_exit(&out, 3);
    assert!(
        env.agent_prompt(2).contains("lint: 3 problems"),
        "the hook's output feeds the next prompt: {}",
        env.agent_prompt(2)
    );
    assert_eq!(env.commits(), vec!["initial"], "nothing committed");
    assert!(
        stderr(&out).contains("the pre-commit hook failed (exit 1): lint: 3 problems"),
        "{}",
        stderr(&out)
    );
    assert!(
        env.activity()
            .contains("Commit refused: the pre-commit hook failed")
    );
    assert!(
        env.git(&["diff", "--cached", "--name-only"])
            .contains("RALPH_TASK.md"),
        "left staged"
    );

    // --no-verify skips the hooks.
    let env = setup();
    hook(&env, ".git/hooks", "pre-commit", "exit 1");
    let out = env.run_fake("check", &["--no-verify"]);
    assert_exit(&out, 0);
    assert_eq!(env.commits().len(), 3);
}

#[test]
fn commit_msg_hook_under_core_hooks_path_edits_the_message() {
    let env = setup();
    env.git(&["config", "core.hooksPath", "githooks"]);
    hook(
        &env,
        "githooks",
        "commit-msg",
        "printf '\\nSigned-off-by: Hook <hook@example.com>\\n' >> \"$1\"",
    );
    env.commit_all("hooks");
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    let body = env.git(&["log", "-1", "--format=%B"]);
    assert!(
        body.contains("Signed-off-by: Hook <hook@example.com>"),
        "{body}"
    );
    assert!(body.contains("Ralph-Iteration: 2"), "{body}");
}

/// A `--worktree` loop runs the repository's hooks as git runs them in a linked worktree: from
/// the common git directory's `hooks`, not the worktree's own git directory (which has none).
/// The control: a plain `git commit` in a linked worktree runs the same hook. Before, a
/// worktree loop ran no hook at all.
#[test]
fn a_worktree_loop_runs_the_repositorys_commit_msg_hook() {
    let env = setup();
    hook(
        &env,
        ".git/hooks",
        "commit-msg",
        "printf '\\nHooked-In: worktree\\n' >> \"$1\"",
    );
    // The control: git itself runs it for a commit in a linked worktree.
    let plain = env.home.join("plain-worktree");
    env.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "plain",
        plain.to_str().unwrap(),
    ]);
    let out = std::process::Command::new("git")
        .args(["commit", "-q", "--allow-empty", "-m", "by hand"])
        .current_dir(&plain)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = env.git(&["log", "-1", "--format=%B", "plain"]);
    assert!(body.contains("Hooked-In: worktree"), "{body}");
    env.git(&["worktree", "remove", "--force", plain.to_str().unwrap()]);

    let out = env.run_fake("check", &["--worktree", "w"]);
    assert_exit(&out, 0);
    let body = env.git(&["log", "-1", "--format=%B", "ralph/w"]);
    assert!(
        body.contains("Hooked-In: worktree"),
        "{body}\n{}",
        stderr(&out)
    );
    assert!(body.contains("Ralph-Iteration:"), "{body}");
}

/// A tracked file (and a tracked symlink) replaced by a directory: what the directory holds is
/// new to git, so the guard applies to it as to any new directory — the likely secret and the
/// file over `max_file_size` stay out, with a warning, and the rest is committed.
///
/// Before (found by a hostile probe): the directory went to `git add` whole, and the secrets
/// and the 60 MB file were committed without a word.
#[test]
fn a_tracked_file_replaced_by_a_directory_goes_through_the_guard() {
    let env = TestEnv::new();
    env.write_task(&["never checked by the agent"], "");
    env.write(".ralph/config.toml", "max_file_size = \"1MiB\"\n");
    env.write("a", "a file\n");
    env.write("target", "t\n");
    std::os::unix::fs::symlink("target", env.repo.join("l")).unwrap();
    env.commit_all("initial");
    let script = agent_sh(
        &env,
        "swap",
        "rm a l && mkdir a l && echo S=1 > a/.env && echo k > l/id_rsa \
         && head -c 3000000 /dev/zero > a/big && echo fine > a/ok && echo fine > l/ok",
    );
    let out = env.run_fake(&script, &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    let files = committed_files(&env);
    for path in ["a/.env", "l/id_rsa", "a/big"] {
        assert!(!files.contains(path), "{path} was committed:\n{files}");
        assert!(
            stderr(&out).contains(&format!("left `{path}` out of the commit")),
            "no warning for {path}: {}",
            stderr(&out)
        );
    }
    for path in ["a/ok", "l/ok"] {
        assert!(files.contains(path), "{path} was not committed:\n{files}");
    }
}
