//! The file watcher is tested by fault injection, not luck (SPEC §12: the events are an
//! optimisation, never the truth). Each fault really happens — a kernel queue overflow (ralph
//! stopped with SIGSTOP while more events than the queue holds are made and directories are
//! created), two directories exchanged with `renameat2(RENAME_EXCHANGE)`, a bind mount over a
//! tracked directory (ralph and its agent in a mount namespace of their own) — and is followed
//! by edits in the directories it concerns, in later iterations. Every iteration's commit must
//! hold the tree `git add -A` stages after the same steps in a twin, and every ITER record the
//! fingerprint git prints for the tree that iteration left (`git status --porcelain | cksum`,
//! taken without any monitor by the next iteration's agent, or by the test at the end). The
//! controls: ralph logs the loss (so the fault happened), and the final full walk found
//! nothing (so the watcher, not the final check, kept the commits exact).
//!
//! Then what no watcher sees: ralph's own runtime names un-ignored by the agent are committed
//! like any file, and a write through a hard link from outside the work tree (no event names
//! the file) is found by the full walk before a halt and committed in the same iteration.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::*;

/// One iteration's change: what ralph's agent runs, and what the twin runs for the same tree.
pub(crate) struct Step {
    pub(crate) agent: String,
    pub(crate) twin: String,
}

impl Step {
    pub(crate) fn same(body: &str) -> Step {
        Step {
            agent: body.to_string(),
            twin: body.to_string(),
        }
    }
}

/// A repository with a task nobody checks and `setup` committed.
pub(crate) fn repo(setup: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["never checked by the agent"], "");
    let out = env
        .command("sh")
        .args(["-c", &format!("set -e\n{setup}")])
        .current_dir(&env.repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.commit_all("initial");
    env
}

/// [`repo`], and its twin (`cp -a`).
pub(crate) fn scenario(setup: &str) -> (TestEnv, PathBuf) {
    let env = repo(setup);
    let twin = make_twin(&env);
    (env, twin)
}

fn oracle_file(env: &TestEnv) -> PathBuf {
    env.home.join("oracle")
}

/// The fake agent's steps: step k first records git's fingerprint of the tree iteration k - 1
/// left (no monitor, no untracked cache, nothing written), then makes its change and rewrites
/// `zz-step`, so every iteration commits.
pub(crate) fn actions(env: &TestEnv, steps: &[Step]) -> String {
    let oracle = oracle_file(env);
    let list: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let body = format!(
                "git -c core.fsmonitor=false -c core.untrackedCache=false --no-optional-locks \
                 status --porcelain | cksum >> '{}'\n{}\necho {} > zz-step",
                oracle.display(),
                s.agent,
                i + 1
            );
            agent_sh(env, &format!("step{}", i + 1), &body)
        })
        .collect();
    list.join(",")
}

/// The commit ralph made for iteration `k` (its `Ralph-Iteration` trailer).
pub(crate) fn commit_of(env: &TestEnv, k: usize) -> Option<String> {
    let log = env.git(&[
        "log",
        "--format=%(trailers:key=Ralph-Iteration,valueonly,separator=)%x09%H",
    ]);
    log.lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(n, _)| n.trim() == k.to_string())
        .map(|(_, c)| c.to_string())
}

/// Every iteration's commit against the twin's `git add -A` after the same steps (ralph's own
/// files aside: the twin has none), and every ITER fingerprint against git's for the tree that
/// iteration left: the next agent's oracle line, or `last` for the last iteration (`None`
/// where the test cannot see the tree ralph saw: the last step is then an oracle only).
pub(crate) fn assert_like_git(
    env: &TestEnv,
    twin: &Path,
    steps: &[Step],
    ran: Ran,
    last: Option<String>,
) {
    let mut problems = String::new();
    if ran.code != Some(3) {
        problems.push_str(&format!("- ralph exited {:?}, not 3\n", ran.code));
    }
    let mut seen: Vec<String> = std::fs::read_to_string(oracle_file(env))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    seen.extend(last);
    let records = env.iter_records();
    let not_ralph = |p: &str| p.starts_with(".ralph/");
    for (i, step) in steps.iter().enumerate() {
        let k = i + 1;
        let script = env.home.join(format!("twin{k}.sh"));
        std::fs::write(
            &script,
            format!("set -e\n{}\necho {k} > zz-step\n", step.twin),
        )
        .unwrap();
        sh_file_in(env, twin, &script);
        let added = git_output_in(env, twin, &["add", "-A"]);
        // `git add -A` exits 1 after staging everything else when it leaves out paths outside
        // a sparse checkout.
        assert!(
            added.status.success()
                || String::from_utf8_lossy(&added.stderr).contains("sparse-checkout definition"),
            "git add -A in the twin: {}",
            String::from_utf8_lossy(&added.stderr)
        );
        git_in(
            env,
            twin,
            &["commit", "-q", "--allow-empty", "-m", &format!("step {k}")],
        );
        let theirs = tree_entries(env, twin, "HEAD", &|_| false);
        match commit_of(env, k) {
            None => problems.push_str(&format!("- no ralph commit for iteration {k}\n")),
            Some(c) => {
                let ours = tree_entries(env, &env.repo, &c, &not_ralph);
                if ours != theirs {
                    problems.push_str(&format!(
                        "- iteration {k}'s commit is not git's:\n{}",
                        entries_diff(&ours, &theirs)
                    ));
                }
            }
        }
        let ours = records.get(i).and_then(|r| r.rsplit(" | ").next());
        let git = seen.get(k);
        if let (Some(ours), Some(git)) = (ours, git)
            && ours != git
        {
            problems.push_str(&format!(
                "- ITER {k}'s fingerprint is {ours}, git's {git}\n"
            ));
        }
        if ours.is_none() {
            problems.push_str(&format!("- no ITER record {k}\n"));
        }
    }
    assert!(
        problems.is_empty(),
        "ralph's run differs from git's:\n{problems}--- activity.log ---\n{}\n--- stderr ---\n{}",
        env.activity(),
        ran.stderr
    );
}

/// How a run ended.
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stderr: String,
}

impl From<Output> for Ran {
    fn from(out: Output) -> Ran {
        Ran {
            code: out.status.code(),
            stderr: stderr(&out),
        }
    }
}

/// The loss was logged, the tree watched again, and the final walk found nothing.
#[track_caller]
fn assert_lost_and_rewatched(env: &TestEnv, why: &str) {
    let log = env.activity();
    assert!(
        log.lines()
            .any(|l| l.contains("the file watcher lost events")
                && l.contains(why)
                && l.contains("every directory is watched again")),
        "no loss logged ({why}):\n{log}"
    );
    assert!(!log.contains("the file watcher missed"), "{log}");
}

/// Kills a stopped ralph if the test fails half-way (it would never finish by itself).
struct KillOnPanic(i32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // SAFETY: signalling the ralph this test started.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
            }
        }
    }
}

fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// A real overflow of the kernel's event queue while 40 directories are created: ralph (its
/// watcher thread with it) is stopped while the agent makes more events than the queue holds
/// and then the directories, whose events are dropped. Later iterations edit files in them and
/// add directories below them.
///
/// Before (the watcher trusted): the overflow made one answer "everything", but the new
/// directories were never watched, so the edits of iterations 2 and 3 were never committed.
#[test]
fn a_queue_overflow_while_directories_are_created() {
    let (env, twin) = scenario("mkdir flood && : > flood/a && : > flood/b");
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(16_384);
    let (ready, go, done) = (
        env.home.join("ready"),
        env.home.join("go"),
        env.home.join("done"),
    );
    let burst = "for k in $(seq 40); do mkdir -p burst/d$k/e && echo 0 > burst/d$k/e/f; done";
    // Each round opens two files for writing: at least two events, none like the last.
    let flood =
        format!("i=0; while [ $i -lt {max} ]; do : > flood/a; : > flood/b; i=$((i+1)); done");
    let steps = vec![
        Step {
            agent: format!(
                "touch '{}'\nwhile [ ! -e '{}' ]; do sleep 0.01; done\n{flood}\n{burst}\ntouch '{}'",
                ready.display(),
                go.display(),
                done.display()
            ),
            twin: burst.to_string(),
        },
        Step::same("for k in $(seq 40); do echo 2 >> burst/d$k/e/f; done"),
        Step::same(
            "for k in $(seq 40); do echo 3 >> burst/d$k/e/f; mkdir burst/d$k/n; \
             echo n > burst/d$k/n/g; done",
        ),
    ];
    let bg = env.spawn_fake(
        &actions(&env, &steps),
        &[
            "--max-iterations",
            "3",
            "--stuck-threshold",
            "99",
            "--grace",
            "1s",
        ],
    );
    let pid = bg.pid();
    let _guard = KillOnPanic(pid);
    assert!(wait_until(Duration::from_secs(30), || ready.exists()));
    // SAFETY: stopping and continuing the ralph this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert!(wait_until(Duration::from_secs(10), || process_state(pid) == Some('T')));
    std::fs::write(&go, "").unwrap();
    assert!(wait_until(Duration::from_secs(60), || done.exists()));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let (code, _, stderr) = bg.wait(Duration::from_secs(60));
    let ran = Ran { code, stderr };
    assert_like_git(&env, &twin, &steps, ran, Some(env.porcelain_cksum()));
    assert_lost_and_rewatched(&env, "the kernel's event queue overflowed");
}

/// `FAKE_AGENT_SCRIPT='exchange:A|B' fake-agent`, for a script (the agent's and the twin's).
fn exchange(a: &str, b: &str) -> String {
    format!(
        "env -u FAKE_AGENT_LOG FAKE_AGENT_SCRIPT='exchange:{a}|{b}' '{}' < /dev/null > /dev/null",
        fake_agent().display()
    )
}

/// Two directories swapped with `renameat2(RENAME_EXCHANGE)`, then edits on one side or the
/// other, at two depths, in later iterations.
///
/// Before: the exchange's two moves collided on the names, and one directory's watch was lost
/// for good: its later edits were never committed.
#[test]
fn two_directories_exchanged() {
    let (env, twin) = scenario(
        "mkdir -p x/deep y/deep && for d in x y; do echo $d > $d/f; echo $d > $d/deep/g; done",
    );
    let steps = vec![
        Step::same(&exchange("x", "y")),
        Step::same("echo 2 >> x/f && echo 2 >> y/deep/g && echo new > y/new"),
        Step::same("echo 3 >> y/f && echo 3 >> x/deep/g && mkdir x/deep/n && echo n > x/deep/n/h"),
    ];
    let out = env.run_fake(
        &actions(&env, &steps),
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    assert_like_git(&env, &twin, &steps, out.into(), Some(env.porcelain_cksum()));
    let first = commit_of(&env, 1).unwrap();
    assert_eq!(
        env.git(&["show", &format!("{first}:x/f")]),
        "y\n",
        "the exchange happened"
    );
    assert_lost_and_rewatched(&env, "a directory moved (or two were exchanged)");
}

/// Whether this test can make a mount namespace and mount in it (root, `unshare`).
fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail("bind mounts need root");
        return false;
    }
    let ok = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail("`unshare -m` cannot make a mount namespace here");
    }
    ok
}

/// A bind mount over a tracked directory (ralph and its agent run in a mount namespace of
/// their own, so the host's mount table is untouched), then edits, deletions and new
/// directories in the mounted directory in later iterations. The twin gets a copy of the
/// mounted files instead. The last step only records git's fingerprint: once ralph exits, its
/// namespace and the mount are gone.
///
/// Before: nothing told the watcher, whose watch stayed on the directory under the mount: the
/// mount and every later edit were never committed.
#[test]
fn a_bind_mount_over_a_tracked_directory() {
    if !can_mount() {
        return;
    }
    let (env, twin) = scenario("mkdir lib && echo 1 > lib/a && echo 1 > lib/c");
    let template = env.home.join("template");
    let mounted = env.home.join("mounted");
    let sh = format!(
        "mkdir -p '{t}/sub' && echo t > '{t}/a' && echo t > '{t}/c' && echo t > '{t}/sub/d'",
        t = template.display()
    );
    assert!(
        env.command("sh")
            .args(["-c", &sh])
            .status()
            .unwrap()
            .success()
    );
    let (t, m) = (template.display(), mounted.display());
    let steps = vec![
        Step {
            agent: format!("cp -a '{t}' '{m}' && mount --bind '{m}' lib"),
            twin: format!("rm -rf lib && cp -a '{t}' lib"),
        },
        Step::same("echo 2 >> lib/a && echo e > lib/sub/e && rm lib/c"),
        Step::same("echo 3 >> lib/sub/d && mkdir lib/n && echo n > lib/n/f"),
        Step::same(":"),
    ];
    let mut cmd = env.command("unshare");
    cmd.args(["-m", "--propagation", "private"])
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
    let out = run_with_limit(cmd, Duration::from_secs(60));
    // The last iteration changed nothing but `zz-step`; its fingerprint is not seen.
    assert_like_git(&env, &twin, &steps, out.into(), None);
    assert!(
        !std::fs::read_to_string(env.repo.join("lib/a"))
            .unwrap()
            .contains('2'),
        "the mount is gone with ralph's namespace: the test's view is the directory under it"
    );
    assert_lost_and_rewatched(&env, "mounted or unmounted");
}

/// ralph's runtime names and transcripts directory, committed by the agent itself (`git add
/// -f`) and then changed: ralph never stages them (they are its own names, SPEC §7), and every
/// ITER fingerprint still shows them changed, as git's does — the watcher drops no event by
/// name.
///
/// Before: the watcher dropped `.ralph/lock`, `.barrier-*`, `.tmp-*` by name and never
/// watched `.ralph/runs`: their changes were missing from the fingerprints.
#[test]
fn ralph_runtime_names_tracked_by_the_agent_are_seen_and_never_staged() {
    let env = repo("");
    let paths = [
        ".ralph/lock",
        ".ralph/.barrier-1",
        ".ralph/.tmp-x",
        ".ralph/runs/x",
    ];
    let write = |text: &str| -> String {
        paths
            .iter()
            .map(|p| format!("echo {text} >> {p}\n"))
            .collect()
    };
    let steps = vec![
        Step::same(&format!(
            "{}git add -f {} && git commit -qm 'agent: runtime names'",
            write("1"),
            paths.join(" ")
        )),
        Step::same(&write("2")),
        Step::same(&write("3")),
    ];
    let out = env.run_fake(
        &actions(&env, &steps),
        &["--max-iterations", "3", "--stuck-threshold", "99"],
    );
    assert_exit(&out, 3);
    for k in [2, 3] {
        let c = commit_of(&env, k).unwrap_or_else(|| panic!("no commit {k}"));
        for p in paths {
            let shown = git_output_in(&env, &env.repo, &["show", &format!("{c}:{p}")]);
            assert_eq!(
                String::from_utf8_lossy(&shown.stdout),
                "1\n",
                "{p} in iteration {k}'s commit: ralph staged its runtime name\n{}",
                env.activity()
            );
        }
    }
    for p in paths {
        assert_eq!(env.read(p), "1\n2\n3\n", "{p}");
    }
    let records = env.iter_records();
    let oracle = std::fs::read_to_string(oracle_file(&env)).unwrap();
    let mut seen: Vec<&str> = oracle.lines().collect();
    let now = env.porcelain_cksum();
    seen.push(&now);
    for (i, r) in records.iter().enumerate() {
        assert!(
            r.ends_with(seen[i + 1]),
            "ITER {}: {r}, git: {}",
            i + 1,
            seen[i + 1]
        );
    }
    assert!(!env.activity().contains("the file watcher missed"));
}

/// A tracked file with an old modification time (no racily clean entry: git trusts its stat
/// data, and the monitor), and a hard link to it outside the work tree.
fn hard_linked(criteria: &[&str]) -> (TestEnv, PathBuf) {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.write("data.txt", "1\n");
    let touched = env
        .command("touch")
        .args(["-d", "2020-01-01", "data.txt"])
        .current_dir(&env.repo)
        .status()
        .unwrap();
    assert!(touched.success());
    env.commit_all("initial");
    let link = env.home.join("link");
    std::fs::hard_link(env.repo.join("data.txt"), &link).unwrap();
    (env, link)
}

/// Written through a hard link from outside the work tree in the completing iteration: no
/// event names `data.txt`, so the iteration's commit misses it (the fault, shown by that commit
/// and by the line ralph logs); the full walk before "complete" finds it, commits it in the
/// same iteration, and the ITER record describes the tree after that commit.
///
/// Before: the run reported "complete" with `data.txt` modified and uncommitted, its ITER
/// fingerprint the clean tree's.
#[test]
fn the_final_walk_commits_what_a_blinded_watcher_missed() {
    let (env, link) = hard_linked(&["one", "two"]);
    let write = agent_sh(
        &env,
        "through-link",
        &format!("echo 2 >> '{}'", link.display()),
    );
    let out = env.run_fake(&format!("check,check+{write}"), &[]);
    assert_exit(&out, 0);
    let subjects = env.commits();
    assert_eq!(
        subjects[0],
        "ralph: iteration 2 — the file watcher missed 1 path"
    );
    assert_eq!(subjects[1], "ralph: iteration 2 — two");
    assert_eq!(
        env.git(&["show", "HEAD~1:data.txt"]),
        "1\n",
        "the watcher missed it"
    );
    assert_eq!(env.git(&["show", "HEAD:data.txt"]), "1\n2\n");
    let trailer = env.git(&[
        "log",
        "-1",
        "--format=%(trailers:key=Ralph-Iteration,valueonly)",
    ]);
    assert_eq!(trailer.trim(), "2");
    let head = env.git(&["rev-parse", "--short=7", "HEAD"]);
    let last = env.iter_records().last().cloned().unwrap();
    assert!(
        last.starts_with("ITER 2 |") && last.contains(&format!("| {} |", head.trim())),
        "{last}"
    );
    assert_eq!(last_fingerprint(&env), env.porcelain_cksum());
    assert_eq!(env.porcelain_cksum(), "4294967295 0");
    let log = env.activity();
    assert!(
        log.contains(
            "Iteration 2: the file watcher missed 1 path (found by the full check before the halt: complete): data.txt"
        ),
        "{log}"
    );
    assert!(
        stderr(&out).contains("the file watcher missed 1 path"),
        "{}",
        stderr(&out)
    );
}

/// The same miss in the third of three iterations that changed nothing else: the monitored
/// view saw a stall (three identical records). The full walk finds the write, commits it, and
/// the decision taken again on that tree is to go on; the rest of the run walks in full, so
/// the next write through the link is committed by iteration 4's own commit.
#[test]
fn a_stall_the_watcher_made_up_is_no_stall_and_the_run_walks_in_full_after() {
    let (env, link) = hard_linked(&["never checked"]);
    let w3 = agent_sh(&env, "w3", &format!("echo 3 >> '{}'", link.display()));
    let w4 = agent_sh(&env, "w4", &format!("echo 4 >> '{}'", link.display()));
    let out = env.run_fake(
        &format!("idle,idle,{w3},{w4}"),
        &["--max-iterations", "4", "--stuck-threshold", "99"],
    );
    assert_exit(&out, 3);
    let log = env.activity();
    let missed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the file watcher missed"))
        .collect();
    assert_eq!(missed.len(), 1, "{log}");
    assert!(missed[0].contains("Iteration 3: the file watcher missed 1 path (found by the full check before the halt: stalled)"), "{log}");
    assert!(
        !log.contains("STALLED") && !log.contains("Halt: stalled"),
        "{log}"
    );
    let subjects = env.commits();
    assert_eq!(subjects[0], "ralph: iteration 4 — no criteria completed");
    assert_eq!(
        subjects[1],
        "ralph: iteration 3 — the file watcher missed 1 path"
    );
    assert_eq!(env.git(&["show", "HEAD:data.txt"]), "1\n3\n4\n");
    assert_eq!(last_fingerprint(&env), env.porcelain_cksum());
}

/// An interrupt between iterations (sent by the `on_iteration` hook after iteration 2, whose
/// agent wrote through the link): the walk before the halt commits what was missed.
#[test]
fn an_interrupt_between_iterations_walks_in_full_first() {
    let (env, link) = hard_linked(&["never checked"]);
    env.write(
        ".ralph/config.toml",
        "[hooks]\non_iteration = 'if [ \"$RALPH_ITERATION\" = 2 ]; then read -r _ _ _ ralph _ < /proc/$PPID/stat; kill -INT $ralph; fi'\n",
    );
    env.commit_all("hook");
    let w2 = agent_sh(&env, "w2", &format!("echo 2 >> '{}'", link.display()));
    let out = env.run_fake(
        &format!("churn,churn+{w2}"),
        &["--max-iterations", "5", "--stuck-threshold", "99"],
    );
    assert_exit(&out, 130);
    let subjects = env.commits();
    assert_eq!(
        subjects[0],
        "ralph: iteration 2 — the file watcher missed 1 path"
    );
    assert_eq!(env.git(&["show", "HEAD:data.txt"]), "1\n2\n");
    assert_eq!(env.iter_records().len(), 2);
    let log = env.activity();
    assert!(
        log.contains("found by the full check before the halt: interrupted"),
        "{log}"
    );
    assert_eq!(env.porcelain_cksum(), "4294967295 0");
}
