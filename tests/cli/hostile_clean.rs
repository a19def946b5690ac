//! The tree a run leaves, and the stop, against what ralph runs after the agent (issue 29,
//! SPEC §5.1, §7, §8, §11): a `pre-commit` hook or an `[hooks]` command that edits the tree
//! after the final walk, an agent that un-ignores ralph's runtime files, a git command blocked
//! when SIGTERM comes, and an ITER record that cannot be written. Each test shows the mechanism
//! really does what it says (the control), then that ralph accounted for it.

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
