//! Nothing the agent starts outlives its iteration (SPEC §11, issue "Nothing escapes"): daemons
//! that left the agent's process group and session — `setsid`, a double fork — are ended at the
//! iteration's end, when ralph is SIGKILLed, and after a timeout even when they ignore SIGTERM.
//! Real processes; each daemon is identified by its pid and its start time, so a reused pid
//! never passes for a survivor or a death.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

/// A process as the daemon recorded itself: pid, process group, session, start time.
#[derive(Debug, Clone, Copy)]
struct Seen {
    pid: i32,
    pgrp: i32,
    session: i32,
    start: u64,
}

/// `awk` line that records the calling shell (`$$`) as a [`Seen`] into the file `$1`.
const RECORD: &str =
    r#"record() { awk '{print $1, $5, $6, $22}' /proc/$$/stat > "$1.tmp" && mv "$1.tmp" "$1"; }"#;

/// An agent script that starts two daemons outside its process group and session — one with
/// `setsid`, one by a double fork that also calls `setsid` — records them and itself in `dir`,
/// then runs `then`. With `ignore_term`, the daemons ignore SIGTERM. A daemon appends a line to
/// `dir/NAME.beat` every 50 ms: proof that it still runs.
fn daemon_script(dir: &Path, ignore_term: bool, then: &str) -> String {
    let d = dir.display();
    let trap = if ignore_term { "trap '' TERM; " } else { "" };
    let daemon = |name: &str| {
        format!(
            "sh -c '{RECORD_ESC}; {trap}record {d}/{name}; while :; do echo >> {d}/{name}.beat; sleep 0.05; done'",
            RECORD_ESC = RECORD.replace('\'', r"'\''"),
        )
    };
    format!(
        "{RECORD}\nrecord {d}/agent\n\
         setsid {a} </dev/null >/dev/null 2>&1 &\n\
         ( setsid {b} </dev/null >/dev/null 2>&1 & )\n\
         while [ ! -s {d}/a ] || [ ! -s {d}/b ]; do sleep 0.01; done\n{then}\n",
        a = daemon("a"),
        b = daemon("b"),
    )
}

fn read_seen(path: &Path) -> Option<Seen> {
    let text = std::fs::read_to_string(path).ok()?;
    let n: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match n[..] {
        [pid, pgrp, session, start] => Some(Seen {
            pid: pid as i32,
            pgrp: pgrp as i32,
            session: session as i32,
            start,
        }),
        _ => None,
    }
}

/// The daemons and the agent, once all have recorded themselves.
fn wait_seen(dir: &Path) -> (Seen, Vec<Seen>) {
    let mut found = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            found = (|| {
                Some((
                    read_seen(&dir.join("agent"))?,
                    vec![read_seen(&dir.join("a"))?, read_seen(&dir.join("b"))?],
                ))
            })();
            found.is_some()
        }),
        "the daemons did not start"
    );
    found.unwrap()
}

/// The very process that was seen is still running (same pid, same start time, not a zombie).
fn running(s: &Seen) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", s.pid))
        .ok()
        .and_then(|stat| {
            let rest: Vec<String> = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let start: u64 = rest.get(19)?.parse().ok()?;
            Some(start == s.start && !matches!(rest[0].as_str(), "Z" | "X"))
        })
        .unwrap_or(false)
}

/// The control: the daemons really escaped the agent's process group and session, so signalling
/// that group (all ralph did before the guard adopted orphans) could not reach them.
#[track_caller]
fn assert_escaped(agent: &Seen, daemons: &[Seen]) {
    for d in daemons {
        assert_ne!(d.pgrp, agent.pgrp, "{d:?} left the agent's group");
        assert_ne!(d.session, agent.session, "{d:?} left the agent's session");
        assert_eq!(d.pgrp, d.pid, "{d:?} leads a group of its own");
    }
}

fn setup() -> (TestEnv, std::path::PathBuf) {
    let env = TestEnv::new();
    env.write_task(&["serve"], "");
    env.commit_all("initial");
    let dir = env.home.join("daemons");
    std::fs::create_dir_all(&dir).unwrap();
    (env, dir)
}

fn kill_all(seen: &[Seen]) {
    for s in seen.iter().filter(|s| running(s)) {
        // SAFETY: kill takes a pid and a signal number; the pid was checked by start time.
        unsafe { libc::kill(s.pid, libc::SIGKILL) };
    }
}

#[test]
fn daemons_outlive_their_parent_without_ralph() {
    // The premise of the promise: outside ralph, such daemons survive the agent that started
    // them. (If this fails, the tests below prove nothing.)
    let (env, dir) = setup();
    let script = env.home.join("control.sh");
    std::fs::write(&script, daemon_script(&dir, false, "exit 0")).unwrap();
    let status = std::process::Command::new("sh")
        .arg(&script)
        .status()
        .unwrap();
    assert!(status.success());
    let (agent, daemons) = wait_seen(&dir);
    assert_escaped(&agent, &daemons);
    // Their parent has exited (and been reaped): each daemon beats on after that.
    let beats = |name: &str| std::fs::read(dir.join(format!("{name}.beat"))).map_or(0, |b| b.len());
    let before = [beats("a"), beats("b")];
    let beat_on = wait_until(Duration::from_secs(10), || {
        beats("a") > before[0] && beats("b") > before[1]
    });
    let alive = daemons.iter().all(running);
    kill_all(&daemons);
    assert!(
        beat_on && alive,
        "the daemons survived their parent: {daemons:?}"
    );
}

#[test]
fn daemons_left_by_the_agent_are_gone_when_the_iteration_ends() {
    let (env, dir) = setup();
    let sh = agent_sh(&env, "daemons", &daemon_script(&dir, false, "exit 0"));
    let out = env.run_fake(&format!("{sh}+check"), &[]);
    assert_exit(&out, 0);
    let (agent, daemons) = wait_seen(&dir);
    assert_escaped(&agent, &daemons);
    // ralph has exited: nothing of the iteration may still run.
    let left: Vec<_> = daemons.iter().filter(|s| running(s)).copied().collect();
    kill_all(&daemons);
    assert!(left.is_empty(), "survived the iteration: {left:?}");
    let activity = env.activity();
    let said = activity
        .lines()
        .find(|l| l.contains("Iteration 1: ended ") && l.contains(" the agent left running"));
    assert!(said.is_some(), "{activity}");
    assert_eq!(env.commits().len(), 2, "the iteration was committed");
}

#[test]
fn daemons_are_gone_after_ralph_is_sigkilled_mid_iteration() {
    let (env, dir) = setup();
    let sh = agent_sh(&env, "daemons", &daemon_script(&dir, false, "sleep 300"));
    let bg = env.spawn_fake(&format!("{sh}+check"), &["--grace", "1s"]);
    let (agent, daemons) = wait_seen(&dir);
    assert_escaped(&agent, &daemons);
    assert!(daemons.iter().all(running), "running while ralph runs");
    bg.signal(libc::SIGKILL);
    let (code, _, _) = bg.wait(Duration::from_secs(5));
    assert_eq!(code, None, "ralph was killed by a signal");
    let mut all = daemons.clone();
    all.push(agent);
    // They get SIGTERM at once, SIGKILL after the grace.
    let ok = wait_until(Duration::from_secs(2), || all.iter().all(|s| !running(s)));
    kill_all(&all);
    assert!(ok, "survived ralph's SIGKILL: {all:?}");
}

#[test]
fn a_daemon_that_ignores_sigterm_is_gone_within_the_grace_after_a_timeout() {
    let (env, dir) = setup();
    let sh = agent_sh(&env, "daemons", &daemon_script(&dir, true, "sleep 300"));
    let bg = env.spawn_fake(
        &format!("{sh}+check"),
        &[
            "--timeout",
            "300ms",
            "--grace",
            "300ms",
            "--max-iterations",
            "1",
        ],
    );
    let (agent, daemons) = wait_seen(&dir);
    let seen_at = Instant::now();
    assert_escaped(&agent, &daemons);
    // Gone within timeout + grace + 1 s of being seen running.
    let limit = Duration::from_millis(300 + 300 + 1000);
    let ok = wait_until(limit, || daemons.iter().all(|s| !running(s)));
    let took = seen_at.elapsed();
    kill_all(&daemons);
    assert!(
        ok,
        "a TERM-ignoring daemon survived: {daemons:?} after {took:?}"
    );
    let (code, _, err) = bg.wait(Duration::from_secs(20));
    assert!(code.is_some(), "ralph ended by itself: {err}");
    assert!(
        env.activity().contains("timed out after 0.3s"),
        "{}",
        env.activity()
    );
}

#[test]
fn a_daemon_started_by_a_git_hook_is_gone_after_the_commit() {
    // The hook is the repository's (an agent could have written it): ralph runs it under the
    // same guard as the agent.
    use std::os::unix::fs::PermissionsExt;
    let (env, dir) = setup();
    let hook = env.repo.join(".git/hooks/pre-commit");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        format!("#!/bin/sh\n{}", daemon_script(&dir, true, "exit 0")),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    let (hook_seen, daemons) = wait_seen(&dir);
    assert_escaped(&hook_seen, &daemons);
    let left: Vec<_> = daemons.iter().filter(|s| running(s)).copied().collect();
    kill_all(&daemons);
    assert!(left.is_empty(), "survived the hook: {left:?}");
}

/// An agent that stops its own guard (`kill -STOP` on it) and ignores SIGTERM cannot make ralph
/// wait forever: every order to the guard continues it first, and a guard that still does not
/// carry out SIGKILL is killed itself. The agent (found by pid and start time) is gone and ralph
/// has ended, well within timeout + grace + ralph's last resort. Bug caught: ralph waited on the
/// stopped guard for ever, deaf to its timeout and to Ctrl-C.
#[test]
fn an_agent_that_stops_its_guard_is_still_stopped() {
    let (env, dir) = setup();
    let d = dir.display();
    let sh = agent_sh(
        &env,
        "stopper",
        &format!(
            "trap '' TERM INT HUP\n\
             echo \"$$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$) $(awk '{{print $22}}' /proc/$$/stat)\" > {d}/agent.tmp && mv {d}/agent.tmp {d}/agent\n\
             p=$$\n\
             while ! tr '\\0' ' ' < /proc/$p/cmdline | grep -q __guard; do p=$(awk '{{print $4}}' /proc/$p/stat); done\n\
             kill -STOP $p\n\
             touch {d}/stopped\n\
             while :; do sleep 0.05; done"
        ),
    );
    let started = Instant::now();
    let out = env.ralph_with_limit(
        &[
            "run",
            "--agent-cmd",
            &fake_agent_cmd(),
            "--yes",
            "--timeout",
            "2s",
            "--grace",
            "300ms",
            "--max-iterations",
            "1",
        ],
        &[("FAKE_AGENT_SCRIPT", sh.as_str())],
        Duration::from_secs(30),
    );
    let took = started.elapsed();
    let agent = read_seen(&dir.join("agent")).expect("the agent recorded itself");
    // Under load the timeout may come before the guard is found: then this case was not shown.
    assert!(
        dir.join("stopped").exists(),
        "the agent had stopped its guard before the timeout"
    );
    let gone = wait_until(Duration::from_secs(2), || !running(&agent));
    kill_all(&[agent]);
    assert!(
        took < Duration::from_secs(10),
        "ralph took {took:?} (limit 30 s): {}",
        stderr(&out)
    );
    assert!(
        out.status.code().is_some(),
        "ralph ended by itself: {}",
        stderr(&out)
    );
    assert!(gone, "the agent that stopped its guard survived");
}

/// A fast fork-and-exit chain (20,000 links, some calling `setsid`, the last ignoring SIGTERM)
/// started by the agent. Without `--sandbox` it is the documented limit: each link lives for
/// microseconds, so signals by pid (the guard's `/proc` walks) keep missing the current one,
/// and the chain's end outlives the guard (the control, noted rather than asserted: it is a
/// race). Under `--sandbox` the agent's PID namespace dies with its init, and the chain with
/// it: nothing left, by pid and start time. Skipped (with a message) where bwrap cannot run.
#[test]
fn a_fast_pid_hopping_chain_escapes_only_without_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["serve"], "");
        env.commit_all("initial");
        let rec = env.repo.join("hopper-end");
        let mut args = vec!["--max-iterations", "1", "--grace", "300ms"];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = env.run_fake(&format!("hop:{}:20000,check", rec.display()), &args);
        // The chain ends by itself within seconds, unless it was killed on the way.
        wait_until(Duration::from_secs(10), || read_seen(&rec).is_some());
        let last = read_seen(&rec);
        let alive = last
            .as_ref()
            .is_some_and(|l| !wait_until(Duration::from_secs(2), || !running(l)));
        if let Some(l) = &last {
            kill_all(std::slice::from_ref(l));
        }
        if sandboxed {
            assert!(
                !alive,
                "the chain survived the sandbox: {last:?}\n{}",
                stderr(&out)
            );
        } else if !alive {
            // The control is a race the chain wins nearly always (every run here); a guard that
            // happened to catch its current link proves nothing either way.
            eprintln!("note: without the sandbox the guard caught the chain this time ({last:?})");
        }
    }
}
