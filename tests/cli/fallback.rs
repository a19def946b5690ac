//! `--fallback-agent` (SPEC §4): a usage-limited agent hands the iteration to the next agent of
//! the chain at once; the first comes back once its reset has passed; when every agent is
//! limited, ralph waits for the earliest reset. Driven by stand-in `claude` and `codex` programs
//! on PATH (shell scripts printing what the real CLIs print when limited), each keeping a count
//! of its calls.

use std::time::{Duration, Instant};

use crate::common::*;

/// Claude's stream-json lines for a subscription limit that resets `$1` seconds from now.
const CLAUDE_LIMITED: &str = r#"limited() {
  echo "{\"type\":\"rate_limit_event\",\"rate_limit_info\":{\"status\":\"rejected\",\"resetsAt\":$(( $(date +%s) + $1 )),\"rateLimitType\":\"five_hour\"}}"
  echo '{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":"You'"'"'ve hit your session limit","session_id":"s-l","total_cost_usd":0.25,"usage":{"input_tokens":100,"output_tokens":5}}'
  exit 1
}
worked() {
  sed -i '0,/^- \[ \] /s//- [x] /' RALPH_TASK.md
  echo '{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Checked one box.","session_id":"s-w","total_cost_usd":0.5,"usage":{"input_tokens":1000,"output_tokens":50}}'
}"#;

/// Codex's text when its plan is used up, with the reset `$1` seconds away.
const CODEX_LIMITED: &str = r#"limited() {
  echo "You've hit your usage limit. Upgrade to Pro or try again in $1 seconds."
  exit 1
}
worked() {
  sed -i '0,/^- \[ \] /s//- [x] /' RALPH_TASK.md
  echo "Checked one box."
}"#;

/// A stand-in `name` on PATH: `helpers` defines shell functions (here `limited` and `worked`),
/// `calls` is a `case "$n" in … esac` body on the call number `$n` (1, 2, …). `opencode run
/// --help` (that preset's probe) is answered with the flags it looks for and not counted.
pub(crate) fn stand_in(env: &TestEnv, name: &str, helpers: &str, calls: &str) {
    use std::os::unix::fs::PermissionsExt;
    let bin = env.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let count = env.home.join(format!("{name}.calls"));
    let script = format!(
        "#!/bin/sh\n[ \"$2\" = --help ] && {{ echo '--auto --print-logs'; exit 0; }}\n{helpers}\n\
         echo x >> '{c}'\nn=$(wc -l < '{c}')\ncase \"$n\" in\n{calls}\nesac\n",
        c = count.display()
    );
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// PATH with the stand-ins first.
pub(crate) fn path_of(env: &TestEnv) -> String {
    format!(
        "{}:{}",
        env.home.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

pub(crate) fn calls(env: &TestEnv, name: &str) -> usize {
    std::fs::read_to_string(env.home.join(format!("{name}.calls")))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

pub(crate) fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

/// `ralph run --agent claude --yes --json EXTRA` with the stand-ins first on PATH.
fn run(env: &TestEnv, extra: &[&str], limit: Duration) -> std::process::Output {
    let path = path_of(env);
    let mut args = vec![
        "run", "--agent", "claude", "--yes", "--json", "--grace", "1s",
    ];
    args.extend_from_slice(extra);
    env.ralph_with_limit(&args, &[("PATH", &path)], limit)
}

pub(crate) fn agents_of(out: &std::process::Output) -> Vec<String> {
    events_named(out, "iteration_finished")
        .iter()
        .map(|e| e["agent"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Promise: claude limited with its reset ten minutes away hands iteration 2 to codex at once;
/// the loop finishes in seconds, each ITER record names its agent, and the cost adds up over
/// both. The control: without the fallback the same limit is waited for (here `--max-wait 1m`
/// ends the run instead, exit 10).
#[test]
fn a_limited_agent_hands_the_iteration_to_its_fallback_at_once() {
    let claude = "1) worked ;;\n*) limited 600 ;;";
    // Control: no fallback — the ten minutes cannot be waited within --max-wait.
    let env = setup(&["first box", "second box"]);
    stand_in(&env, "claude", CLAUDE_LIMITED, claude);
    let out = run(&env, &["--max-wait", "1m"], Duration::from_secs(30));
    assert_exit(&out, 10);
    assert!(env.read("RALPH_TASK.md").contains("- [ ] second box"));

    let env = setup(&["first box", "second box"]);
    stand_in(&env, "claude", CLAUDE_LIMITED, claude);
    stand_in(&env, "codex", CODEX_LIMITED, "*) worked ;;");
    let t0 = Instant::now();
    let out = run(
        &env,
        &["--fallback-agent", "codex", "--max-wait", "1m"],
        Duration::from_secs(30),
    );
    assert_exit(&out, 0);
    assert!(t0.elapsed() < Duration::from_secs(25));
    assert_eq!((calls(&env, "claude"), calls(&env, "codex")), (2, 1));
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    assert_eq!(agents_of(&out), ["claude", "codex"]);
    let recs = env.iter_records();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs[0].contains("| exit 0 | agent claude |"), "{recs:?}");
    assert!(recs[1].contains("| exit 0 | agent codex |"), "{recs:?}");
    assert_eq!(env.commits().len(), 3, "{:?}", env.commits());
    assert!(env.read("RALPH_TASK.md").contains("- [x] second box"));
    assert!(
        stderr(&out).contains("Usage limit of claude"),
        "{}",
        stderr(&out)
    );
    let started = &events_named(&out, "run_started")[0];
    assert_eq!(started["fallback_agents"], serde_json::json!(["codex"]));

    // Cost: claude's worked attempt ($0.50) and its limited one ($0.25), per agent and in all.
    let v = status_json(&env);
    assert_eq!(v["agent"], "codex", "{v}");
    assert_eq!(v["agents"]["claude"]["iterations"], 1, "{v}");
    assert_eq!(v["agents"]["codex"]["iterations"], 1, "{v}");
    let claude_cost = v["agents"]["claude"]["cost_usd"].as_f64().unwrap();
    assert!((claude_cost - 0.75).abs() < 1e-9, "{v}");
    assert!((v["cost_usd"].as_f64().unwrap() - 0.75).abs() < 1e-9, "{v}");
    assert_eq!(v["input_tokens"], 1100, "{v}");
    let human = stdout(&env.ralph(&["status"]));
    assert!(human.contains("Agent: codex (latest iteration)"), "{human}");
    assert!(human.contains("  claude: 1 iteration, $0.7500"), "{human}");
    assert!(human.contains("agent codex |"), "{human}");
}

/// Promise: with every agent of the chain limited, ralph waits for the earliest reset (codex's,
/// three seconds away), not the first agent's (ten minutes), and does not count an iteration.
#[test]
fn with_every_agent_limited_ralph_waits_for_the_earliest_reset() {
    let env = setup(&["only box"]);
    stand_in(&env, "claude", CLAUDE_LIMITED, "*) limited 600 ;;");
    stand_in(
        &env,
        "codex",
        CODEX_LIMITED,
        "1) limited 2 ;;\n*) worked ;;",
    );
    let t0 = Instant::now();
    let out = run(
        &env,
        &["--fallback-agent", "codex"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert!(t0.elapsed() < Duration::from_secs(30));
    let waiting = events_named(&out, "waiting");
    assert_eq!(waiting.len(), 1, "{}", stdout(&out));
    assert_eq!(waiting[0]["agent"], "codex", "{}", waiting[0]);
    let wait = waiting[0]["wait_s"].as_f64().unwrap();
    assert!((1.0..10.0).contains(&wait), "waited {wait}s");
    assert_eq!((calls(&env, "claude"), calls(&env, "codex")), (1, 2));
    let recs = env.iter_records();
    assert_eq!(
        recs.len(),
        1,
        "one iteration, however many attempts: {recs:?}"
    );
    assert!(recs[0].contains("agent codex"), "{recs:?}");
}

/// Promise: the first agent is used again once its reset has passed. claude is limited for two
/// seconds; codex takes iteration 1 (and takes three seconds over it); iteration 2 is claude's.
#[test]
fn the_first_agent_comes_back_once_its_reset_has_passed() {
    let env = setup(&["first box", "second box"]);
    stand_in(
        &env,
        "claude",
        CLAUDE_LIMITED,
        "1) limited 1 ;;\n*) worked ;;",
    );
    stand_in(&env, "codex", CODEX_LIMITED, "*) sleep 3; worked ;;");
    let out = run(
        &env,
        &["--fallback-agent", "codex"],
        Duration::from_secs(40),
    );
    assert_exit(&out, 0);
    assert_eq!(agents_of(&out), ["codex", "claude"]);
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    assert_eq!((calls(&env, "claude"), calls(&env, "codex")), (2, 1));
}

/// A fallback is a preset, found before anything starts: an unknown name, or one not
/// installed, is an error naming it (exit 1), with no iteration run.
#[test]
fn a_fallback_that_cannot_run_is_an_error_before_the_run() {
    let env = setup(&["only box"]);
    stand_in(&env, "claude", CLAUDE_LIMITED, "*) worked ;;");
    let out = run(
        &env,
        &["--fallback-agent", "cursor"],
        Duration::from_secs(20),
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("unknown fallback agent `cursor`"),
        "{}",
        stderr(&out)
    );
    let out = run(
        &env,
        &["--fallback-agent", "gemini"],
        Duration::from_secs(20),
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("agent `gemini` not found on PATH"),
        "{}",
        stderr(&out)
    );
    assert_eq!(calls(&env, "claude"), 0);
    assert!(env.iter_records().is_empty());
}

/// Promise: a resume continues the run with its chain — the fallbacks it was started with, not
/// what the repository's `.ralph/config.toml` says now (the agent can write that file; here it
/// names `gemini`, which is not installed). Control: the first run stopped after iteration 1;
/// the resume meets claude limited for ten minutes and codex takes over at once.
#[test]
fn a_resume_keeps_the_runs_fallback_agents() {
    let env = setup(&["first box", "second box"]);
    stand_in(
        &env,
        "claude",
        CLAUDE_LIMITED,
        "1) worked ;;\n*) limited 600 ;;",
    );
    stand_in(&env, "codex", CODEX_LIMITED, "*) worked ;;");
    let out = run(
        &env,
        &["--fallback-agent", "codex", "--max-iterations", "1"],
        Duration::from_secs(30),
    );
    assert_exit(&out, 3);
    env.write(".ralph/config.toml", "fallback_agents = [\"gemini\"]\n");
    let path = path_of(&env);
    let out = env.ralph_with_limit(
        &[
            "resume",
            "--yes",
            "--json",
            "--max-iterations",
            "3",
            "--max-wait",
            "1m",
        ],
        &[("PATH", &path)],
        Duration::from_secs(30),
    );
    assert_exit(&out, 0);
    assert_eq!(agents_of(&out), ["codex"]);
    assert!(events_named(&out, "waiting").is_empty(), "{}", stdout(&out));
    assert_eq!((calls(&env, "claude"), calls(&env, "codex")), (2, 1));
    let recs = env.iter_records();
    assert!(recs[1].contains("agent codex"), "{recs:?}");
}

/// Promise: under `--sandbox` each agent of the chain keeps its own CLI state writable (a
/// fallback would otherwise start in a read-only home and fail); a CLI outside the chain does
/// not. Seen in the dry run's bwrap argv.
#[test]
fn under_the_sandbox_every_agent_of_the_chain_keeps_its_state() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write_task(&["only box"], "");
    env.commit_all("initial");
    stand_in(&env, "claude", CLAUDE_LIMITED, "*) worked ;;");
    stand_in(&env, "codex", CODEX_LIMITED, "*) worked ;;");
    let argv = |extra: &[&str]| {
        let path = path_of(&env);
        let args = [
            &["run", "--agent", "claude", "--sandbox", "--dry-run"],
            extra,
        ]
        .concat();
        let out = env.ralph_with_limit(&args, &[("PATH", &path)], Duration::from_secs(30));
        assert_exit(&out, 0);
        let text = stdout(&out);
        text.lines()
            .find_map(|l| l.strip_prefix("argv: "))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned()
    };
    let bind = |dir: &str| {
        let p = env.home.join(dir);
        format!("--bind {} {} ", p.display(), p.display())
    };
    // Control: the agent alone — claude's state, not codex's.
    let alone = argv(&[]);
    assert!(alone.contains(&bind(".claude")), "{alone}");
    assert!(!alone.contains(&bind(".codex")), "{alone}");
    let chained = argv(&["--fallback-agent", "codex"]);
    assert!(chained.contains(&bind(".claude")), "{chained}");
    assert!(chained.contains(&bind(".codex")), "{chained}");
}
