//! The real agent CLIs (Claude Code, Copilot CLI, Codex) against the stand-in model server in
//! `testing/standin/`, inside a loopback-only network namespace when root. Each test skips, with
//! a message, when its CLI is not installed: `bash scripts/install-agent-clis.sh` installs them.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where `scripts/install-agent-clis.sh` puts the CLIs' programs: `AGENT_CLIS_BIN`, else, as
/// root, `/var/cache/ralph/agent-clis/bin` (every user reads it: a test runs a CLI as a normal
/// user), else `$XDG_CACHE_HOME/ralph/agent-clis/bin` (`~/.cache/…`) — outside the clone, once
/// per machine, and where the sandbox sees it wherever the clone lies (`/tmp` included).
pub(crate) fn agent_clis_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("AGENT_CLIS_BIN") {
        return PathBuf::from(bin);
    }
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/cache/ralph/agent-clis/bin");
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        });
    cache.join("ralph/agent-clis/bin")
}

/// The CLI's path when installed, else `None` after saying the test is skipped.
pub(crate) fn installed(cli: &str) -> Option<PathBuf> {
    let bin = agent_clis_bin();
    let p = bin.join(cli);
    if p.exists() {
        Some(p)
    } else {
        skip_or_fail(&format!(
            "the real `{cli}` CLI is not installed ({}); run `bash scripts/install-agent-clis.sh`",
            p.display()
        ));
        None
    }
}

/// Run `ralph ARGS` in the test repository with the stand-in server up for `cli`.
pub(crate) fn with_standin(
    env: &TestEnv,
    cli: &str,
    scenario: Option<&str>,
    extra: &[&str],
    ralph_args: &[&str],
) -> std::process::Output {
    with_standin_as(env, None, cli, scenario, extra, ralph_args)
}

/// [`with_standin`], as the user `uid` when given (the environment must be theirs).
pub(crate) fn with_standin_as(
    env: &TestEnv,
    uid: Option<u32>,
    cli: &str,
    scenario: Option<&str>,
    extra: &[&str],
    ralph_args: &[&str],
) -> std::process::Output {
    let work = env.home.join(format!("standin-{cli}"));
    std::fs::create_dir_all(&work).unwrap();
    if let Some(uid) = uid {
        std::os::unix::fs::chown(&work, Some(uid), Some(uid)).unwrap();
    }
    let script = repo_root().join("testing/standin/with-standin.sh");
    let mut cmd = match uid {
        None => env.command("bash"),
        Some(uid) => {
            let mut cmd = env.command("setpriv");
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(["--clear-groups", "bash"]);
            cmd
        }
    };
    // The CLIs where this test process finds them, not where the isolated HOME would put them.
    cmd.env("AGENT_CLIS_BIN", agent_clis_bin())
        .arg(&script)
        .args(["--cli", cli, "--work"])
        .arg(&work);
    if let Some(s) = scenario {
        let path = work.join("scenario.json");
        std::fs::write(&path, s).unwrap();
        cmd.arg("--scenario").arg(path);
    }
    cmd.args(extra)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_ralph"))
        .args(ralph_args)
        .current_dir(&env.repo);
    run_with_limit(cmd, Duration::from_secs(240))
}

/// The prompts of the main requests the stand-in received (length, first characters).
pub(crate) fn requests(env: &TestEnv, cli: &str) -> Vec<serde_json::Value> {
    let log = env
        .home
        .join(format!("standin-{cli}/standin.requests.jsonl"));
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `ralph run --agent CLI --yes --timeout 120s EXTRA...`: the preset, unattended, bounded.
pub(crate) fn run_args<'a>(cli: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--agent", cli, "--yes", "--timeout", "120s"];
    args.extend_from_slice(extra);
    args
}

pub(crate) fn two_criteria(env: &TestEnv) {
    env.write_task(&["first box", "second box"], "");
    env.commit_all("initial");
}

/// The real `cli` through a two-criterion loop: exit 0, two ITER records (1/2, then 2/2), both
/// boxes checked, two new commits. The environment and ralph's `--json` output, for what a
/// test checks next (cost, tokens); `None` when the CLI is not installed.
pub(crate) fn two_criteria_loop(cli: &str) -> Option<(TestEnv, std::process::Output)> {
    installed(cli)?;
    let env = TestEnv::new();
    two_criteria(&env);
    let out = with_standin(
        &env,
        cli,
        None,
        &[],
        &run_args(cli, &["--max-iterations", "4", "--json"]),
    );
    assert_exit(&out, 0);
    let recs = env.iter_records();
    assert_eq!(recs.len(), 2, "{recs:?}\n{}", stderr(&out));
    assert!(
        recs[0].starts_with("ITER 1 | 1/2 criteria | exit 0 |"),
        "{recs:?}"
    );
    assert!(
        recs[1].starts_with("ITER 2 | 2/2 criteria | exit 0 |"),
        "{recs:?}"
    );
    let task = env.read("RALPH_TASK.md");
    assert!(task.contains("- [x] first box") && task.contains("- [x] second box"));
    assert_eq!(env.commits().len(), 3, "{:?}", env.commits());
    Some((env, out))
}

fn completes_two_criteria_in_two_iterations(cli: &str) {
    two_criteria_loop(cli);
}

#[test]
fn claude_completes_two_criteria_in_two_iterations() {
    completes_two_criteria_in_two_iterations("claude");
}

#[test]
fn copilot_completes_two_criteria_in_two_iterations() {
    completes_two_criteria_in_two_iterations("copilot");
}

#[test]
fn codex_completes_two_criteria_in_two_iterations() {
    completes_two_criteria_in_two_iterations("codex");
}

/// Every CLI the stand-in drives (Gemini CLI has no offline recipe: README, "Agents").
pub(crate) const STANDIN_CLIS: [&str; 6] =
    ["claude", "copilot", "codex", "droid", "opencode", "qwen"];

/// A prompt over 100 KiB goes to each preset on stdin and reaches the model whole.
#[test]
fn a_300_kib_prompt_reaches_every_preset_intact() {
    for cli in STANDIN_CLIS {
        if installed(cli).is_none() {
            continue;
        }
        let env = TestEnv::new();
        let long = format!("BEGIN{}END", "x".repeat(300 * 1024));
        env.write_task(&[&long, "short"], "");
        env.commit_all("initial");
        let out = with_standin(
            &env,
            cli,
            None,
            &[],
            &run_args(cli, &["--max-iterations", "1"]),
        );
        assert_exit(&out, 3);
        let reqs = requests(&env, cli);
        let biggest = reqs
            .iter()
            .filter_map(|r| r["prompt_bytes"].as_u64())
            .max()
            .unwrap_or(0);
        assert!(
            biggest > 300 * 1024,
            "{cli}: the largest prompt the server saw was {biggest} bytes"
        );
        assert!(
            env.read("RALPH_TASK.md").contains("- [x] BEGIN"),
            "{cli} checked the box"
        );
    }
}

#[test]
fn claude_shows_tools_live_and_reports_cost_and_tokens() {
    if installed("claude").is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let out = with_standin(&env, "claude", None, &[], &run_args("claude", &["--json"]));
    assert_exit(&out, 0);
    let finished = events_named(&out, "iteration_finished");
    assert_eq!(finished.len(), 2);
    for f in &finished {
        assert!(f["cost_usd"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["input_tokens"].as_u64().unwrap() > 0, "{f}");
    }
    let total = finished[1]["total_cost_usd"].as_f64().unwrap();
    let sum = finished[0]["cost_usd"].as_f64().unwrap() + finished[1]["cost_usd"].as_f64().unwrap();
    assert!((total - sum).abs() < 1e-9);
    assert!(stderr(&out).contains("Cost: $"), "{}", stderr(&out));

    // Under a pseudo-terminal the spinner line shows the tool in use.
    let env = TestEnv::new();
    two_criteria(&env);
    let ralph = env!("CARGO_BIN_EXE_ralph");
    let inner = format!("{ralph} run --agent claude --yes --timeout 120s");
    let work = env.home.join("standin-claude-tty");
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = env.command("script");
    cmd.env("TERM", "xterm")
        .env("AGENT_CLIS_BIN", agent_clis_bin())
        .args(["-qfec"])
        .arg(format!(
            "bash {} --cli claude --work {} -- {inner}",
            repo_root()
                .join("testing/standin/with-standin.sh")
                .display(),
            work.display()
        ))
        .arg("/dev/null")
        .current_dir(&env.repo);
    let out = run_with_limit(cmd, Duration::from_secs(240));
    let screen = stdout(&out);
    assert!(
        screen.contains("Bash: "),
        "the tool in use is shown live:\n{screen}"
    );
    assert!(screen.contains("criteria"), "{screen}");
}

#[test]
fn claude_session_limit_is_waited_out_without_counting_an_iteration() {
    if installed("claude").is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario = r#"{"rate_limit": {"first": 1, "kind": "usage_limit", "resets_in": 3}}"#;
    let out = with_standin(
        &env,
        "claude",
        Some(scenario),
        &["--claude-oauth"],
        &run_args("claude", &["--json"]),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    assert_eq!(events_named(&out, "waiting").len(), 1, "{}", stdout(&out));
    assert!(stderr(&out).contains("Usage limit ("), "{}", stderr(&out));
}

/// A session limited halfway has already spent tokens: that cost counts (SPEC §6). The
/// iteration's transcript holds both attempts' `result` events; `status --json` reports their
/// sum.
#[test]
fn claude_limited_attempts_cost_counts() {
    if installed("claude").is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let scenario =
        r#"{"rate_limit": {"first": 1, "after": 1, "kind": "usage_limit", "resets_in": 3}}"#;
    let out = with_standin(
        &env,
        "claude",
        Some(scenario),
        &["--claude-oauth"],
        &run_args("claude", &["--json"]),
    );
    assert_exit(&out, 0);
    assert_eq!(events_named(&out, "waiting").len(), 1, "{}", stdout(&out));
    let run_id = events_named(&out, "run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let transcript = env.read(&format!(".ralph/runs/{run_id}/iter-001.log"));
    let costs: Vec<f64> = transcript
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"result""#))
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["total_cost_usd"]
                .as_f64()
                .unwrap_or(0.0)
        })
        .collect();
    assert_eq!(
        costs.len(),
        2,
        "the limited attempt and its retry: {costs:?}"
    );
    assert!(
        costs[0] > 0.0,
        "the limited attempt spent tokens: {costs:?}"
    );
    let st = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let total = v["cost_usd"].as_f64().unwrap();
    assert!(
        (total - costs.iter().sum::<f64>()).abs() < 1e-9,
        "{total} vs {costs:?}"
    );
}

/// A 429 the CLI gives up on is backed off and the same iteration retried: still 2 ITER records.
fn rate_limit_is_backed_off_and_retried(cli: &str, scenario: &str) {
    if installed(cli).is_none() {
        return;
    }
    let env = TestEnv::new();
    two_criteria(&env);
    let out = with_standin(
        &env,
        cli,
        Some(scenario),
        &[],
        &run_args(cli, &["--json", "--limit-backoff", "1s"]),
    );
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{:?}", env.iter_records());
    assert!(
        !events_named(&out, "waiting").is_empty(),
        "{}",
        stdout(&out)
    );
}

#[test]
fn copilot_rate_limit_is_backed_off_and_retried() {
    // Copilot retries a 429 five times by itself; the sixth makes it give up.
    rate_limit_is_backed_off_and_retried(
        "copilot",
        r#"{"rate_limit": {"first": 6, "kind": "429", "retry_after": 0}}"#,
    );
}

#[test]
fn codex_rate_limit_is_backed_off_and_retried() {
    rate_limit_is_backed_off_and_retried(
        "codex",
        r#"{"rate_limit": {"first": 8, "kind": "429", "retry_after": 0, "no_retry": true}}"#,
    );
}
