//! A hostile agent against the file watcher and git's exactness (SPEC §8, §12): not faults of
//! the kernel's, but an agent that writes what ralph's own git commands trust — the index's
//! caches, ralph's monitor's tokens and answers file, the configuration git compares with.
//! As in `watcher_faults.rs`, every iteration's commit must hold the tree `git add -A` stages
//! after the same steps in a twin, and every ITER record git's fingerprint of the tree the
//! iteration left; each test's control shows that the attack really happened.

use crate::common::*;
use crate::watcher_faults::{Step, actions, assert_like_git, commit_of, scenario};

/// `git status --porcelain | cksum` as git prints it without any cache: no monitor, no
/// untracked cache.
fn true_cksum(env: &TestEnv) -> String {
    let out = env
        .command("sh")
        .args([
            "-c",
            "git -c core.fsmonitor=false -c core.untrackedCache=false --no-optional-locks \
             status --porcelain | cksum",
        ])
        .current_dir(&env.repo)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The fake agent's `forge-index:PATH`, for a script.
fn forge_index(path: &str) -> String {
    format!(
        "env -u FAKE_AGENT_LOG FAKE_AGENT_SCRIPT='forge-index:{path}' '{}' < /dev/null > /dev/null",
        fake_agent().display()
    )
}

#[track_caller]
fn assert_no_miss(env: &TestEnv) {
    let log = env.activity();
    assert!(!log.contains("the file watcher missed"), "{log}");
}

/// The agent plants an untracked cache (the index's `UNTR` extension) that says `d` holds no
/// untracked file, and `d/secret` is one: built by git while `d/secret` was staged, then the
/// entry dropped from the index by hand. `git status` trusts the cache (with the repository's
/// default `core.untrackedCache`, and with the `true` ralph's statuses pass); `git add -A` does
/// not read it and stages `d/secret`. The attack in the last iteration too: the run must not
/// halt with it uncommitted. With the watcher, and without (`RALPH_NO_WATCH`: every status
/// walks the tree, with the repository's own `core.untrackedCache`).
///
/// Before: ralph found what changed with `git status`, so iteration 2 committed without
/// `d/secret` and recorded a clean tree; the final check found it but its own commit, staged
/// through the same cache, committed nothing, and the run halted with it uncommitted; without
/// the watcher nothing ever found it.
#[test]
fn an_untracked_cache_the_agent_planted_hides_nothing() {
    for no_watch in [false, true] {
        planted_untracked_cache(no_watch);
    }
}

fn planted_untracked_cache(no_watch: bool) {
    let (env, twin) = scenario("mkdir d && echo a > d/a");
    let saw = env.home.join("agent-saw");
    let plant = |file: &str| {
        format!(
            "echo work > d/{file} && git add d/{file} && touch -d 2020-01-01 d && \
             git -c core.untrackedCache=true status --porcelain > /dev/null && {} && \
             git status --porcelain > '{saw}.st' && \
             if grep -q 'd/{file}' '{saw}.st'; then echo seen >> '{saw}'; else echo hidden >> '{saw}'; fi",
            forge_index(&format!("d/{file}")),
            saw = saw.display()
        )
    };
    let steps = vec![
        Step::same(":"),
        Step::same(&plant("secret")),
        Step::same(&format!("echo 2 >> d/a && {}", plant("other"))),
    ];
    let script = actions(&env, &steps);
    let vars: &[(&str, &str)] = if no_watch {
        &[("RALPH_NO_WATCH", "1")]
    } else {
        &[]
    };
    let out = env.run_fake_with(
        &script,
        &["--max-iterations", "3", "--stuck-threshold", "99"],
        vars,
    );
    // The control: git's own status, trusting the planted cache, did not see the file.
    assert_eq!(std::fs::read_to_string(&saw).unwrap(), "hidden\nhidden\n");
    assert_like_git(&env, &twin, &steps, out.into(), Some(true_cksum(&env)));
    assert_eq!(true_cksum(&env), "4294967295 0", "nothing left uncommitted");
    assert_no_miss(&env);
}

/// The agent forges ralph's monitor's token: it reads the nonce and position from ralph's
/// answers file, edits the tracked `a`, has its own git write an index whose monitor token is
/// ralph's nonce at a position ahead (its own hook answers "nothing changed", so `a` stays
/// marked unchanged), then makes enough events (ignored files) for ralph's journal to pass that
/// position. ralph's hook, asked with that token, answered only what changed since it.
///
/// Before: iteration 2's commit missed `a` and its ITER record described a clean tree; only
/// the final check found it.
#[test]
fn a_monitor_token_the_agent_forged_is_not_trusted() {
    let (env, twin) = scenario("echo 1 > a && touch -d 2020-01-01 a && echo junk/ > .gitignore");
    let hook = env.home.join("forged-hook");
    let saw = env.home.join("agent-saw");
    let forge = format!(
        "nonce=$(sed -n 2p .git/ralph-fsmonitor); pos=$(sed -n 4p .git/ralph-fsmonitor)\n\
         echo 2 >> a\n\
         printf '#!/bin/sh\\nprintf \"%s:%s\\\\0\"\\n' \"$nonce\" $((pos + 3000)) > '{hook}'\n\
         chmod +x '{hook}'\n\
         git -c core.fsmonitor='{hook}' status --porcelain > '{saw}'\n\
         mkdir -p junk; i=0; while [ $i -lt 4000 ]; do : > junk/f$i; i=$((i+1)); done",
        hook = hook.display(),
        saw = saw.display()
    );
    let steps = vec![
        Step::same(":"),
        Step {
            agent: forge,
            twin: "echo 2 >> a".to_string(),
        },
        Step::same(":"),
    ];
    let out = env.run_fake(
        &actions(&env, &steps),
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    // The control: a git trusting the forged index did not see `a` change.
    let seen = std::fs::read_to_string(&saw).unwrap();
    assert!(!seen.lines().any(|l| l.ends_with(" a")), "{seen}");
    assert!(std::fs::read_to_string(&hook).unwrap().contains("ralph-"));
    assert_like_git(&env, &twin, &steps, out.into(), Some(true_cksum(&env)));
    assert_no_miss(&env);
}

/// A configuration git compares with, changed where no watch sees it: `core.fileMode` in a
/// file of the work tree that `.git/config` includes (as a linked worktree's `git config`
/// writes the common directory's, and `~/.gitconfig` lies outside the tree). The executable bit
/// set while the mode was ignored counts once it is not: `git add -A` stages it.
///
/// Before: the monitor answered only the included file, git trusted `a` unchanged, and
/// iteration 3's commit missed the mode; only the final check found it.
#[test]
fn a_configuration_changed_outside_the_git_directory_is_seen() {
    let (env, twin) = scenario(
        "echo aaaa > a && touch -d 2020-01-01 a && \
         printf '[core]\\n\\tfileMode = false\\n' > inc.cfg && git config include.path ../inc.cfg",
    );
    let steps = vec![
        Step::same(":"),
        Step::same("chmod +x a"),
        Step::same("printf '[core]\\n\\tfileMode = true\\n' > inc.cfg"),
        Step::same(":"),
    ];
    let out = env.run_fake(
        &actions(&env, &steps),
        &["--max-iterations", "4", "--stuck-threshold", "99"],
    );
    assert_like_git(&env, &twin, &steps, out.into(), Some(true_cksum(&env)));
    // The control: iteration 2 (mode ignored) did not commit the bit; iteration 3 did.
    let mode = |k: usize| {
        let c = commit_of(&env, k).unwrap();
        env.git(&["ls-tree", &c, "a"])
    };
    assert!(mode(2).starts_with("100644"), "{}", mode(2));
    assert!(mode(3).starts_with("100755"), "{}", mode(3));
    assert_no_miss(&env);
}

/// The agent turns a sparse checkout on mid-run and writes outside it: `git add -A` leaves
/// the new files outside the sparse definition out (and says so).
///
/// Before: ralph read the configuration once per run, did not know the checkout was sparse,
/// and staged them.
#[test]
fn a_sparse_checkout_turned_on_mid_run_is_honoured() {
    let (env, twin) = scenario("mkdir -p keep other && echo k > keep/a && echo o > other/b");
    let steps = vec![
        Step::same(":"),
        Step::same(
            "git sparse-checkout set --no-cone '/*' '!/other/' && mkdir -p other && \
             echo new > other/new.txt && echo 2 >> keep/a",
        ),
        Step::same("echo x > other/x.txt && echo 3 >> keep/a"),
    ];
    let out = env.run_fake(
        &actions(&env, &steps),
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    assert_like_git(&env, &twin, &steps, out.into(), None);
    // The control: the checkout is sparse, and the twin's `git add -A` left the files out.
    let c = commit_of(&env, 3).unwrap();
    assert!(!env.git(&["ls-tree", "-r", &c]).contains("other/new.txt"));
    assert!(env.repo.join("other/x.txt").exists());
}

/// The agent replaces ralph's answers file (`.git/ralph-fsmonitor`) with a directory, so
/// ralph cannot write its answers: its git commands run without the monitor (git walks the
/// whole tree), and the run goes on, every iteration committed.
///
/// Before: every git command failed ("cannot run `git status` (is git installed?)"), and the
/// run halted with exit 1 and iteration 2's work uncommitted.
#[test]
fn an_answers_file_the_agent_blocked_costs_a_walk_not_the_run() {
    let (env, twin) = scenario("echo a > a");
    let steps = vec![
        Step::same(":"),
        Step {
            agent: "rm -f .git/ralph-fsmonitor && mkdir -p .git/ralph-fsmonitor/x && echo 2 >> a"
                .to_string(),
            twin: "echo 2 >> a".to_string(),
        },
        Step::same("echo 3 >> a && mkdir n && echo n > n/f"),
    ];
    let out = env.run_fake(
        &actions(&env, &steps),
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    assert_like_git(&env, &twin, &steps, out.into(), Some(true_cksum(&env)));
    // The control: the directory is still there.
    assert!(env.repo.join(".git/ralph-fsmonitor/x").is_dir());
}

/// Whether this test can make a user namespace of its own with its own inotify watch limit
/// (`unshare -U -r`; the limit is the namespace's, the host's is untouched).
fn can_limit_watches() -> bool {
    let ok = std::process::Command::new("unshare")
        .args([
            "-U",
            "-r",
            "sh",
            "-c",
            "echo 20 > /proc/sys/user/max_inotify_watches",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail("`unshare -U -r` cannot set a user namespace's inotify watch limit here");
    }
    ok
}

/// The agent makes more directories than inotify's watch limit allows (ralph runs in a user
/// namespace of its own whose limit is 20 watches), edits files in them in the next iteration
/// and deletes most of them, then edits the rest: every directory that could not be watched is
/// walked by git, and once watches are free again the tree is watched again.
#[test]
fn directories_past_the_watch_limit_are_walked() {
    if !can_limit_watches() {
        return;
    }
    let (env, twin) = scenario("for i in 1 2 3; do mkdir d$i && echo $i > d$i/f; done");
    let steps = vec![
        Step::same(":"),
        Step::same("for i in $(seq 4 33); do mkdir -p d$i/e && echo $i > d$i/e/f; done"),
        Step::same(
            "for i in $(seq 4 33); do echo 3 >> d$i/e/f; done; \
             for i in $(seq 4 31); do rm -r d$i; done",
        ),
        Step::same("for i in 32 33; do echo 4 >> d$i/e/f && mkdir d$i/n && echo n > d$i/n/g; done"),
    ];
    let mut cmd = env.command("unshare");
    cmd.args([
        "-U",
        "-r",
        "sh",
        "-c",
        "echo 20 > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\"",
    ])
    .arg(env!("CARGO_BIN_EXE_ralph"))
    .args([
        "run",
        "--agent-cmd",
        &fake_agent_cmd(),
        "--yes",
        "--grace",
        "1s",
    ])
    .args(["--max-iterations", "4", "--stuck-threshold", "99"])
    .env("FAKE_AGENT_SCRIPT", actions(&env, &steps))
    .current_dir(&env.repo);
    let out = run_with_limit(cmd, std::time::Duration::from_secs(60));
    assert_like_git(&env, &twin, &steps, out.into(), Some(true_cksum(&env)));
    // The control: watches could not be added; later every directory was watched again.
    let log = env.activity();
    assert!(
        log.lines().any(|l| l.starts_with('[')
            && l.contains("Iteration 2: the file watcher lost events (a watch could not be added")),
        "{log}"
    );
    assert!(log.contains("every directory is watched again"), "{log}");
    assert_no_miss(&env);
}

/// A write no inotify event names: through a descriptor fanotify opened (root only), which
/// carries `FMODE_NONOTIFY` — as a write through a hard link from outside the tree, through a
/// loop device over the file, or through `open_by_handle_at` on an evicted dentry names no path
/// of the tree. The completing iteration's own commit misses it (the control: no event named
/// it), and the full walk before "complete" commits it in the same iteration.
#[test]
fn a_write_through_fanotify_is_found_before_the_halt() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail("fanotify needs root");
        return;
    }
    let env = TestEnv::new();
    env.write_task(&["one", "two"], "");
    env.write("data.txt", "1111\n");
    let touched = env
        .command("touch")
        .args(["-d", "2020-01-01", "data.txt"])
        .current_dir(&env.repo)
        .status()
        .unwrap();
    assert!(touched.success());
    env.commit_all("initial");
    let out = env.run_fake("check,check+fanotify-write:data.txt|2222", &[]);
    assert_exit(&out, 0);
    let subjects = env.commits();
    assert_eq!(
        subjects[0],
        "ralph: iteration 2 — the file watcher missed 1 path"
    );
    assert_eq!(env.git(&["show", "HEAD~1:data.txt"]), "1111\n", "missed");
    assert_eq!(env.git(&["show", "HEAD:data.txt"]), "2222\n");
    assert_eq!(last_fingerprint(&env), "4294967295 0");
    assert_eq!(true_cksum(&env), "4294967295 0");
}
