//! Presets against stand-in CLIs on PATH: the argv each preset builds, copilot's permission-flag
//! probe, claude's `IS_SANDBOX=1` as root, stdin for huge prompts; and a transcript that cannot
//! be written, told apart from an agent that cannot be spawned.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// Write a stand-in CLI named `name` into a bin dir: it records its argv (NUL-separated) and
/// stdin, answers `--help` with `help`, and delegates the work to the fake agent.
pub(crate) fn stand_in(env: &TestEnv, name: &str, help: &str) -> PathBuf {
    let bin = env.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        r#"#!/bin/sh
for a in "$@"; do if [ "$a" = "--help" ]; then printf '%s\n' '{help}'; exit 0; fi; done
for a in "$@"; do printf '%s\0' "$a"; done > "$FAKE_AGENT_LOG/{name}-argv-$RALPH_ITERATION.txt"
env | grep -E '^(IS_SANDBOX|RALPH_)' > "$FAKE_AGENT_LOG/{name}-env-$RALPH_ITERATION.txt"
exec '{agent}' "$@"
"#,
        agent = fake_agent().display()
    );
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn run_preset(env: &TestEnv, preset: &str, bin: &Path) -> std::process::Output {
    std::fs::create_dir_all(&env.log).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    env.ralph_with_limit(
        &["run", "--agent", preset, "--yes", "--max-iterations", "1"],
        &[("PATH", &path), ("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(60),
    )
}

fn argv(env: &TestEnv, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.log.join(format!("{name}-argv-1.txt")))
        .unwrap_or_default()
        .split_terminator('\0')
        .map(str::to_string)
        .collect()
}

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["p1", "p2"], "");
    env.commit_all("initial");
    env
}

#[test]
fn copilot_uses_yolo_when_its_help_lists_it() {
    let env = setup();
    let bin = stand_in(&env, "copilot", "  --yolo   allow everything");
    assert_exit(&run_preset(&env, "copilot", &bin), 3);
    let a = argv(&env, "copilot");
    assert_eq!(a[0], "-p");
    assert!(a[1].contains("You are iteration 1 of 1"));
    assert_eq!(a[2..], ["--yolo"]);
}

#[test]
fn copilot_falls_back_to_allow_all_when_yolo_is_unknown() {
    let env = setup();
    let bin = stand_in(
        &env,
        "copilot",
        "  --allow-all-tools  x\n  --allow-all  everything",
    );
    let out = run_preset(&env, "copilot", &bin);
    assert_exit(&out, 3);
    assert_eq!(argv(&env, "copilot")[2..], ["--allow-all"]);
    assert!(stderr(&out).contains("rejects --yolo"), "{}", stderr(&out));
}

#[test]
fn claude_gets_its_flags_and_is_sandbox_as_root() {
    let env = setup();
    let bin = stand_in(&env, "claude", "usage: claude");
    let out = run_preset(&env, "claude", &bin);
    assert_exit(&out, 3);
    let a = argv(&env, "claude");
    assert_eq!(a[0], "-p");
    assert_eq!(
        a[2..],
        [
            "--dangerously-skip-permissions",
            "--output-format",
            "stream-json",
            "--verbose"
        ]
    );
    let vars = std::fs::read_to_string(env.log.join("claude-env-1.txt")).unwrap_or_default();
    if nix_is_root() {
        assert!(vars.contains("IS_SANDBOX=1"), "{vars}");
        assert!(
            stderr(&out).contains("IS_SANDBOX=1"),
            "said once: {}",
            stderr(&out)
        );
    } else {
        assert!(!vars.contains("IS_SANDBOX"), "{vars}");
    }
}

#[test]
fn codex_gets_exec_and_bypass() {
    let env = setup();
    let bin = stand_in(&env, "codex", "usage: codex");
    assert_exit(&run_preset(&env, "codex", &bin), 3);
    let a = argv(&env, "codex");
    assert_eq!(
        a[..2],
        ["exec", "--dangerously-bypass-approvals-and-sandbox"]
    );
    assert!(a[2].contains("You are iteration 1"));
}

#[test]
fn huge_prompt_goes_to_a_preset_on_stdin() {
    let env = TestEnv::new();
    // A 150 KiB criterion makes a prompt too long for one argument.
    let long = "x".repeat(150 * 1024);
    env.write_task(&[&long, "short"], "");
    env.commit_all("initial");
    let bin = stand_in(&env, "codex", "usage: codex");
    assert_exit(&run_preset(&env, "codex", &bin), 3);
    assert_eq!(
        argv(&env, "codex"),
        ["exec", "--dangerously-bypass-approvals-and-sandbox", "-"]
    );
    // The fake agent saw the whole prompt (it reads stdin when its last argument is `-`).
    assert!(env.agent_prompt(1).len() > 150 * 1024);
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_transcript_that_cannot_be_written_is_named_as_such() {
    let env = setup();
    let out = env.run_fake("check", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    // The next iteration's transcript is as long as the file-size limit ralph runs under:
    // every write to it fails, as on a full disk.
    let runs = env.repo.join(".ralph/runs");
    let run_dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .expect("a run directory")
        .unwrap()
        .path();
    const LIMIT: u64 = 4 << 20;
    std::fs::write(run_dir.join("iter-002.log"), vec![b'.'; LIMIT as usize]).unwrap();
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_fsize_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--max-iterations",
            "2",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
        LIMIT,
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("failed to write the transcript"), "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(!err.contains("spawn"), "{err}");
    // The iteration still closes: recorded, and the run halted with an error.
    let recs = env.iter_records();
    assert!(
        recs.last().is_some_and(|r| r.starts_with("ITER 2 ")),
        "{recs:?}"
    );
    let st: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    assert_eq!(st["halt_reason"], "error");
}
