//! Event hooks (SPEC §10): `[hooks]` commands get the event's JSON — the very object `--json`
//! prints — on stdin; a hook that fails or hangs is logged and cut at `hook_timeout`, and the
//! run's exit code is unchanged.

use std::time::{Duration, Instant};

use crate::common::*;

fn setup(hooks: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["h1", "h2"], "");
    env.write(".ralph/config.toml", &format!("[hooks]\n{hooks}"));
    env.commit_all("initial");
    env
}

fn lines(env: &TestEnv, name: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(env.home.join(name))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// The hooks see exactly the JSON objects `--json` prints, with `RALPH_EVENT` naming them.
#[test]
fn hooks_receive_the_same_objects_json_prints() {
    let home = "\"$HOME\"";
    let env = setup(&format!(
        "on_iteration = 'cat >> {home}/iterations.jsonl; echo \"$RALPH_EVENT\" >> {home}/names'\n\
         on_halt = 'cat >> {home}/halts.jsonl'\n"
    ));
    let out = env.run_fake("check", &["--json"]);
    assert_exit(&out, 0);
    let printed = events_named(&out, "iteration_finished");
    assert_eq!(printed.len(), 2);
    assert_eq!(lines(&env, "iterations.jsonl"), printed);
    assert_eq!(lines(&env, "halts.jsonl"), events_named(&out, "halted"));
    assert_eq!(
        std::fs::read_to_string(env.home.join("names")).unwrap(),
        "iteration_finished\niteration_finished\n"
    );
}

/// A failing hook and a hanging one are logged and shown; the hanging one is stopped at
/// `hook_timeout` (its process dies), and the run completes with exit 0 as without hooks.
#[test]
fn a_failing_or_hanging_hook_never_changes_the_run() {
    let env = setup(
        "on_iteration = 'echo broken >&2; exit 3'\n\
         on_halt = 'echo $$ > \"$HOME/hook.pid\"; exec sleep 30'\n\
         hook_timeout = \"300ms\"\n",
    );
    let start = Instant::now();
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let activity = env.activity();
    assert!(
        activity.contains("hook for `iteration_finished` failed (exit 3)"),
        "{activity}"
    );
    assert!(
        activity.contains("hook for `halted` ran past hook_timeout"),
        "{activity}"
    );
    assert!(stderr(&out).contains("failed (exit 3)"), "{}", stderr(&out));
    let pid: i32 = std::fs::read_to_string(env.home.join("hook.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_all_dead(&[pid], Duration::from_millis(500));
    // Control: the same run without hooks completes the same way.
    let plain = TestEnv::new();
    plain.write_task(&["h1", "h2"], "");
    plain.commit_all("initial");
    assert_exit(&plain.run_fake("check", &[]), 0);
}

/// Hooks come from config files only: an unknown hook name is an error naming the file.
#[test]
fn an_unknown_hook_is_an_error_naming_the_file() {
    let env = setup("on_merge = 'true'\n");
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("config.toml:2") && stderr(&out).contains("on_merge"),
        "{}",
        stderr(&out)
    );
}
