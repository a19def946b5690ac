//! ralph's own files against an agent that plants symlinks where they live (SPEC §4, §7).
//! ralph writes its logs, transcripts, prompts, barriers, lock and commit message from outside
//! any sandbox, so a symlink the agent puts at one of those paths must never carry ralph's
//! writes — some of whose words are the agent's (its output, its criterion annotations) — into
//! a file outside the repository: `~/.bashrc`, the repository's read-only `.git/config`, the
//! user's own `~/.config/ralph/config.toml`.

use crate::common::*;

/// Every victim starts with this line and must end with it alone.
const INTACT: &str = "precious\n";

/// The agent of iteration 1 replaces each of ralph's files it can name by a symlink to a victim
/// outside the repository (and `.ralph/runs/RUN` by a link to a victim directory); iteration 2
/// prints a line of its own and checks a box. The control shows that writing through such a
/// link does reach the victim; then none of ralph's writes may, and ralph's own records go on
/// in real files.
#[test]
fn symlinks_planted_at_ralphs_own_files_carry_none_of_its_writes() {
    let env = TestEnv::new();
    env.write_task(&["first", "second"], "");
    std::fs::create_dir_all(env.repo.join(".git/hooks")).unwrap();
    // A commit-msg hook, so ralph writes COMMIT_EDITMSG for it.
    std::fs::write(
        env.repo.join(".git/hooks/commit-msg"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    env.command("chmod")
        .args(["+x", ".git/hooks/commit-msg"])
        .current_dir(&env.repo)
        .status()
        .unwrap();
    env.commit_all("initial");
    let victims = env.home.join("victims");
    std::fs::create_dir_all(victims.join("dir")).unwrap();
    let names = [
        "activity.log",
        "iterations.log",
        "tmp-activity",
        "iter-prompt",
        "iter-log",
        "lock",
        "commit-msg",
        "gitignore",
        "reflog-head",
        "reflog-branch",
    ];
    for n in names {
        std::fs::write(victims.join(n), INTACT).unwrap();
    }
    // The control: a write through such a link lands in the victim.
    let probe = env.home.join("probe-link");
    std::os::unix::fs::symlink(victims.join("activity.log"), &probe).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&probe)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"through the link\n"))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(victims.join("activity.log")).unwrap(),
        format!("{INTACT}through the link\n")
    );
    std::fs::write(victims.join("activity.log"), INTACT).unwrap();

    let v = victims.display();
    let script = agent_sh(
        &env,
        "plant",
        &format!(
            "if [ \"$RALPH_ITERATION\" = 1 ]; then\n\
             r=.ralph/runs/$RALPH_RUN_ID\n\
             ln -sfn '{v}/activity.log' .ralph/activity.log\n\
             ln -sfn '{v}/iterations.log' .ralph/iterations.log\n\
             ln -sfn '{v}/tmp-activity' .ralph/.tmp-activity.now\n\
             ln -sfn '{v}/gitignore' .ralph/.gitignore\n\
             ln -sfn '{v}/iter-prompt' $r/iter-002.prompt.md\n\
             ln -sfn '{v}/iter-log' $r/iter-002.log\n\
             ln -sfn '{v}/lock' .git/ralph.lock\n\
             ln -sfn '{v}/commit-msg' .git/COMMIT_EDITMSG\n\
             ln -sfn '{v}/reflog-head' .git/logs/HEAD\n\
             ln -sfn '{v}/reflog-branch' .git/logs/$(git symbolic-ref HEAD)\n\
             sed -i 's/- \\[ \\] first/- [x] first/' RALPH_TASK.md\n\
             else\n\
             echo 'touch PWNED # the agent speaks'\n\
             sed -i 's/- \\[ \\] second/- [x] second/' RALPH_TASK.md\n\
             fi"
        ),
    );
    let out = env.run_fake(&script, &["--max-iterations", "3"]);
    assert_exit(&out, 0);
    for n in names {
        assert_eq!(
            std::fs::read_to_string(victims.join(n)).unwrap(),
            INTACT,
            "ralph wrote through the agent's link into {n}"
        );
    }
    // ralph's records went on in real files of its own.
    for own in [".ralph/activity.log", ".ralph/iterations.log"] {
        let meta = std::fs::symlink_metadata(env.repo.join(own)).unwrap();
        assert!(meta.is_file(), "{own} is a regular file again");
    }
    assert!(
        env.iter_records().iter().any(|r| r.starts_with("ITER 2 ")),
        "{:?}",
        env.iter_records()
    );
    let run = status_json(&env)["run_id"].as_str().unwrap().to_string();
    let log = env.read(&format!(".ralph/runs/{run}/iter-002.log"));
    assert!(log.contains("the agent speaks"), "{log}");
}

/// `.ralph/runs` itself (and so every transcript under it) replaced by a link to a directory
/// outside: ralph puts a real directory back and writes nothing into the victim directory.
#[test]
fn a_runs_directory_linked_outside_gets_no_transcript() {
    let env = TestEnv::new();
    env.write_task(&["first", "second"], "");
    env.commit_all("initial");
    let victim = env.home.join("victim-dir");
    std::fs::create_dir_all(&victim).unwrap();
    let script = agent_sh(
        &env,
        "runs",
        &format!(
            "if [ \"$RALPH_ITERATION\" = 1 ]; then\n\
             rm -rf .ralph/runs && ln -s '{}' .ralph/runs\n\
             sed -i 's/- \\[ \\] first/- [x] first/' RALPH_TASK.md\n\
             else sed -i 's/- \\[ \\] second/- [x] second/' RALPH_TASK.md; fi",
            victim.display()
        ),
    );
    let out = env.run_fake(&script, &["--max-iterations", "3"]);
    assert_exit(&out, 0);
    let inside: Vec<_> = std::fs::read_dir(&victim).unwrap().flatten().collect();
    assert!(
        inside.is_empty(),
        "ralph wrote into the linked directory: {:?}",
        inside.iter().map(|e| e.path()).collect::<Vec<_>>()
    );
    let meta = std::fs::symlink_metadata(env.repo.join(".ralph/runs")).unwrap();
    assert!(meta.is_dir(), ".ralph/runs is a real directory again");
}
