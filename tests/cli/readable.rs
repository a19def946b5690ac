//! A repository ralph worked in stays readable by every git and libgit2 the user may run (issue
//! 22, SPEC §12): after a run — ralph's own git commands wrote the index, with its file-system
//! monitor and the untracked cache while it ran — `git fsck` finds nothing wrong (the index's
//! checksum included), `git status` and libgit2 (the version ralph links, through the `git2`
//! crate) read the index, agree on its entries and see a clean tree. The control corrupts one
//! byte of the index and shows both readers refuse it.

use std::path::Path;

use crate::common::*;

/// git's and libgit2's view of the repository at `repo`: the index's entries as each lists them
/// and whether libgit2 sees the work tree clean; `Err` when either cannot read it.
fn both_read(env: &TestEnv, repo: &Path) -> Result<(), String> {
    let fsck = git_output_in(env, repo, &["fsck", "--no-dangling", "--no-progress"]);
    if !fsck.status.success() {
        return Err(format!(
            "git fsck: {}",
            String::from_utf8_lossy(&fsck.stderr)
        ));
    }
    let listed = git_output_in(env, repo, &["ls-files", "-s"]);
    if !listed.status.success() {
        return Err(format!(
            "git ls-files: {}",
            String::from_utf8_lossy(&listed.stderr)
        ));
    }
    let by_git: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| {
            // `MODE OID STAGE\tPATH` → `OID PATH`
            let (meta, path) = l.split_once('\t').unwrap();
            format!("{} {path}", meta.split(' ').nth(1).unwrap())
        })
        .collect();
    let r = git2::Repository::open(repo).map_err(|e| format!("libgit2 open: {e}"))?;
    let index = r.index().map_err(|e| format!("libgit2 index: {e}"))?;
    let by_libgit2: Vec<String> = index
        .iter()
        .map(|e| format!("{} {}", e.id, String::from_utf8_lossy(&e.path)))
        .collect();
    if by_git != by_libgit2 {
        return Err(format!(
            "git and libgit2 list different entries: {} vs {}",
            by_git.len(),
            by_libgit2.len()
        ));
    }
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).include_ignored(false);
    let statuses = r
        .statuses(Some(&mut opts))
        .map_err(|e| format!("libgit2 status: {e}"))?;
    let dirty: Vec<String> = statuses
        .iter()
        .map(|s| format!("{:?} {}", s.status(), s.path().unwrap_or("?")))
        .collect();
    if !dirty.is_empty() {
        return Err(format!("libgit2 sees changes after the run: {dirty:?}"));
    }
    Ok(())
}

#[test]
fn a_repository_ralph_worked_in_stays_readable_by_git_and_libgit2() {
    let env = TestEnv::new();
    env.write_task(&["first", "second", "third"], "");
    env.write("src/lib.rs", "pub fn a() {}\n");
    env.commit_all("initial");
    let work = agent_sh(
        &env,
        "work",
        "mkdir -p src/new && echo \"fn n$RALPH_ITERATION() {}\" > src/new/n$RALPH_ITERATION.rs\n\
         echo \"// $RALPH_ITERATION\" >> src/lib.rs",
    );
    let before = std::fs::read(env.repo.join(".git/index")).unwrap();
    let steps = format!("check+{work},check+{work},check+{work}");
    let out = env.run_fake(&steps, &[]);
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 3);
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    // ralph's own git commands wrote the index (its last, the full check, without the monitor).
    let index = std::fs::read(env.repo.join(".git/index")).unwrap();
    assert_ne!(index, before, "the index is the one ralph's run wrote");
    both_read(&env, &env.repo).unwrap();

    // Control: one byte of the index changed (an entry's path) and both readers refuse it.
    let at = index
        .windows(9)
        .position(|w| w == b"src/lib.r")
        .expect("an entry's path");
    let mut broken = index.clone();
    broken[at] ^= 0x01;
    std::fs::write(env.repo.join(".git/index"), &broken).unwrap();
    let e = both_read(&env, &env.repo).unwrap_err();
    assert!(e.contains("fsck") || e.contains("libgit2"), "{e}");
    assert!(
        git2::Repository::open(&env.repo)
            .and_then(|r| r.index())
            .is_err(),
        "libgit2 checks the index's checksum"
    );
}

/// The same while a run is under way: ralph killed (`SIGKILL`) while its second agent runs
/// leaves the index its own git wrote with the monitor's token and the untracked cache, and
/// both git and libgit2 read it.
#[test]
fn an_index_ralph_left_mid_run_is_readable_by_git_and_libgit2() {
    let env = TestEnv::new();
    env.write_task(&["first", "second"], "");
    env.commit_all("initial");
    let work = agent_sh(&env, "work", "mkdir -p new && echo n > new/n.txt");
    let bg = env.spawn_fake(&format!("check+{work},hang"), &[]);
    let recorded = wait_until(std::time::Duration::from_secs(20), || {
        env.iter_records().len() == 1 && env.agent_ran(2)
    });
    bg.signal(libc::SIGKILL);
    let _ = bg.wait(std::time::Duration::from_secs(5));
    for pid in env.agent_pids(2) {
        // SAFETY: a signal to a process of this test's agent.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        recorded,
        "iteration 1 recorded and the second agent started"
    );
    let index = std::fs::read(env.repo.join(".git/index")).unwrap();
    for ext in [&b"FSMN"[..], b"UNTR"] {
        assert!(
            index.windows(4).any(|w| w == ext),
            "the index ralph's git wrote mid-run carries {}",
            String::from_utf8_lossy(ext)
        );
    }
    both_read(&env, &env.repo).unwrap();
}
