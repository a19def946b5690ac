//! Factory droid: `droid exec --auto high -o stream-json {prompt}` (the prompt on stdin for a
//! huge one), and its stream: `system`/`init` (the session), `message`s, `tool_call`s, the final
//! `completion` (`finalText`, `numTurns`, `usage`; no USD cost for a custom model) and `error`
//! events — a provider's `429 …`/`401 …`, droid's own `Authentication failed. Please log in…`,
//! and `Exec ended early: insufficient permission to proceed…` when a shell call is rated above
//! its `--auto` level (`AGENT-CLIS.md`). Errors are read for limits and login failures only when
//! the attempt failed (SPEC §6): an attempt that exited 0 is never limited by its words.

use serde_json::Value;

use super::cli::{Cli, Launch, Output, Part, literal};
use super::findings::{Findings, TailLine};
use super::output::{AgentResult, LimitKind, Usage};
use super::signal::{Patterns, Scope};
use super::text::{as_u64, bounded};

/// The messages droid's `error` events carry for limits and login failures. droid gives up at
/// once on a provider's quota message (`quota exhausted`, `weekly limit exhausted`, with `limit
/// will reset at <time>`); a plain 429 it retries for about 80 s, then reports as `429 …`.
const PATTERNS: Patterns = Patterns {
    hit_your_limit: false,
    limit_reached_resets: false,
    limits: &[
        ("quota exhausted", LimitKind::UsageLimit),
        ("usage quota is exhausted", LimitKind::UsageLimit),
        ("limit exhausted", LimitKind::UsageLimit),
        ("limit will reset at", LimitKind::UsageLimit),
    ],
    auth: &[
        "authentication failed. please log in",
        "set a valid factory_api_key",
        "configure a byok custom model",
    ],
    retries: &[],
};

/// The argv after `droid`, but for the prompt: shell calls the model rates up to "high" run;
/// above the level the exec ends early.
const ARGS: [&str; 5] = ["exec", "--auto", "high", "-o", "stream-json"];

/// Factory droid.
#[derive(Debug)]
pub(crate) struct Droid;

impl Cli for Droid {
    fn name(&self) -> &'static str {
        "droid"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g droid")
    }

    fn launch(&self) -> Launch {
        let mut args = literal(&ARGS);
        args.push(Part::Template("{prompt}".into()));
        Launch {
            args,
            // `droid exec` reads the prompt from stdin when no prompt argument is given.
            stdin_args: Some(literal(&ARGS)),
            ..Launch::default()
        }
    }

    fn output(&self) -> Output {
        Output::JsonLines
    }

    fn skips(&self, line: &[u8]) -> bool {
        // Tool results: command output, possibly huge, never a signal (an `Exec ended early`
        // result is followed by its own `error` event).
        line.starts_with(br#"{"type":"tool_result""#)
    }

    fn event(&self, v: &Value, _raw: &[u8], seen: &mut Findings) {
        match v["type"].as_str().unwrap_or("") {
            // Its `model` is the built-in default even when settings pick a custom one.
            "system" if v["subtype"].as_str() == Some("init") => {
                seen.session_started(v["session_id"].as_str(), None);
            }
            "message" => {
                seen.progress();
                // The user's message is the prompt: never shown, never read.
                if v["role"].as_str() == Some("assistant") {
                    seen.assistant_text(v["text"].as_str().unwrap_or(""));
                }
            }
            "tool_call" => {
                seen.progress();
                let name = v["toolName"].as_str().unwrap_or("tool");
                seen.tool_call(name, &v["parameters"]);
            }
            // Read only when rendering (`skips` keeps them from the observer).
            "tool_result" => {
                let error = v["isError"].as_bool() == Some(true);
                let said = match &v["value"] {
                    Value::String(s) => s.clone(),
                    Value::Null => v["error"]["message"].as_str().unwrap_or("").to_owned(),
                    other => other.to_string(),
                };
                seen.tool_result(&said, error);
            }
            "completion" => completion(v, seen),
            "error" => {
                let message = v["message"].as_str().unwrap_or("").trim();
                seen.set_activity_clean(message);
                // `Exec failed` only closes what an earlier error said.
                if message != "Exec failed" || seen.failure().is_none() {
                    seen.failed_with(message);
                }
            }
            _ => {}
        }
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }

    fn failed_tail(&self, tail: &[TailLine], seen: &mut Findings) {
        if let Some(said) = seen.failure().map(str::to_owned) {
            failed_on(&said, seen);
        }
        seen.read_tail(tail, &[&PATTERNS]);
    }
}

/// What the `error` events of a failed attempt said: a quota (with its reset time), a 429 droid
/// gave up retrying, a login failure (droid's own, or the provider's 401/403).
fn failed_on(said: &str, seen: &mut Findings) {
    if seen.scan(said, Scope::Error, &PATTERNS) {
        return;
    }
    for message in said.split("; ") {
        match message.split_whitespace().next() {
            Some("429") => {
                let reset = seen.parse_reset(message);
                seen.set_limit(LimitKind::RateLimit, message, reset);
                return;
            }
            Some("401" | "403") => {
                seen.auth(message);
                return;
            }
            _ => {}
        }
    }
}

/// The final `completion`: the final text, turns, duration, tokens (no USD cost: droid reports
/// Factory credits, and none for a custom model).
fn completion(v: &Value, seen: &mut Findings) {
    seen.progress();
    let u = &v["usage"];
    let usage = Usage {
        input_tokens: as_u64(&u["input_tokens"]).unwrap_or(0),
        output_tokens: as_u64(&u["output_tokens"]).unwrap_or(0),
        cache_creation_input_tokens: as_u64(&u["cache_creation_input_tokens"]).unwrap_or(0),
        cache_read_input_tokens: as_u64(&u["cache_read_input_tokens"]).unwrap_or(0),
        cost_usd: 0.0,
        turns: as_u64(&v["numTurns"]).unwrap_or(0),
    };
    let session_id = v["session_id"].as_str().map(str::to_owned);
    if session_id.is_some() {
        seen.session_id.clone_from(&session_id);
    }
    let text = v["finalText"].as_str().unwrap_or("");
    if !text.trim().is_empty() {
        seen.set_activity_clean(text);
    }
    seen.result = Some(AgentResult {
        is_error: false,
        subtype: "completion".into(),
        api_error_status: None,
        session_id,
        text: bounded(text),
        permission_denials: 0,
        duration_ms: as_u64(&v["durationMs"]),
        usage,
    });
}

#[cfg(test)]
mod tests {
    use chrono::FixedOffset;

    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::stream::Observer;
    use crate::agent::testkit::*;

    /// An attempt of the preset that printed `stdout` and exited `exit`.
    fn run(stdout: &str, exit: i32) -> Observer {
        let mut o = observer(Format::of(&Droid));
        o.feed(stdout.as_bytes(), false);
        o.finish(Some(exit));
        o
    }

    /// Captured from droid 0.215.0 against the stand-in (ids shortened).
    const SESSION: &str = r#"{"type":"system","subtype":"init","cwd":"/tmp/dr/repo","session_id":"a873aaec","tools":["Read","LS","Execute","Edit"],"model":"gpt-5.6-sol","reasoning_effort":"medium"}
{"type":"message","role":"user","id":"fe","text":"Check the first unchecked box; mind the rate limit: quota exhausted","timestamp":1796293803853,"session_id":"a873aaec"}
{"type":"tool_call","id":"call_j3","messageId":"2f","toolId":"Execute","toolName":"Execute","parameters":{"command":"sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md","summary":"Check the first unchecked criterion","riskLevel":"low","riskLevelReason":"stand-in: rated low"},"timestamp":1796293803982,"session_id":"a873aaec"}
{"type":"tool_result","id":"call_j3","messageId":"36","toolId":"Execute","isError":false,"value":"Command completed successfully\n\n[Process exited with code 0]","timestamp":1796293804076,"session_id":"a873aaec"}
{"type":"message","role":"assistant","id":"5a","text":"I checked the first unchecked criterion in RALPH_TASK.md.","timestamp":1796293804135,"session_id":"a873aaec"}
{"type":"completion","finalText":"I checked the first unchecked criterion in RALPH_TASK.md.","numTurns":2,"durationMs":381,"session_id":"a873aaec","timestamp":1796293804150,"usage":{"input_tokens":22187,"output_tokens":24,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"factory_credits":0,"ttft_ms":47}}
"#;

    /// A provider's quota message: droid gives up at once.
    const QUOTA: &str = r#"{"type":"system","subtype":"init","cwd":"/tmp/dr/repo","session_id":"e4ed508a","tools":["Execute"],"model":"gpt-5.6-sol"}
{"type":"message","role":"user","id":"84","text":"Check the first unchecked box","timestamp":1796293898466,"session_id":"e4ed508a"}
{"type":"error","source":"agent_loop","message":"429 Usage quota exhausted for this key. Your limit will reset at 10:31:41 UTC.","timestamp":1796293898638,"session_id":"e4ed508a"}
{"type":"error","source":"cli","message":"Exec failed","timestamp":1796293898660,"session_id":"e4ed508a"}
"#;

    /// A shell call rated above `--auto`: the exec ends early, exit 1.
    const EARLY: &str = r#"{"type":"tool_call","id":"call_zn","messageId":"fd","toolId":"Execute","toolName":"Execute","parameters":{"command":"sed -i 's/a/b/' RALPH_TASK.md","summary":"Check","riskLevel":"high","riskLevelReason":"stand-in: rated high"},"timestamp":1796293808654,"session_id":"53d9dbc7"}
{"type":"tool_result","id":"call_zn","messageId":"db","toolId":"Execute","isError":true,"error":{"type":"tool_error","message":"Error: Exec ended early: insufficient permission to proceed. Re-run with --auto high. For destructive commands, use --skip-permissions-unsafe."},"timestamp":1796293808664,"session_id":"53d9dbc7"}
{"type":"message","role":"assistant","id":"65","text":"Exec ended early: insufficient permission to proceed. Re-run with --auto high. For destructive commands, use --skip-permissions-unsafe.","timestamp":1796293808667,"session_id":"53d9dbc7"}
{"type":"error","source":"cli","message":"Exec ended early: insufficient permission to proceed. Re-run with --auto high. For destructive commands, use --skip-permissions-unsafe.","timestamp":1796293808677,"session_id":"53d9dbc7"}
"#;

    #[test]
    fn argv_takes_the_prompt_as_an_argument_or_on_stdin() {
        let launch = Droid.launch();
        let mut want = literal(&ARGS);
        want.push(Part::Template("{prompt}".into()));
        assert_eq!(launch.args, want);
        assert_eq!(launch.stdin_args, Some(literal(&ARGS)));
        assert!(launch.env.is_empty());
    }

    #[test]
    fn a_session_gives_its_activity_result_and_tokens() {
        let mut o = observer(Format::of(&Droid));
        let mut shown = Vec::new();
        for line in SESSION.lines() {
            o.feed(line.as_bytes(), false);
            o.feed(b"\n", false);
            if o.take_activity_changed() {
                shown.push(o.activity().unwrap().to_owned());
            }
        }
        o.finish(Some(0));
        assert_eq!(
            shown,
            [
                "Starting",
                r"Execute: sed -i '0,/- \[ \]/s//- [x]/' RALPH_TASK.md",
                "I checked the first unchecked criterion in RALPH_TASK.md.",
            ]
        );
        assert_eq!(o.session_id(), Some("a873aaec"));
        assert_eq!(
            o.final_message().as_deref(),
            Some("I checked the first unchecked criterion in RALPH_TASK.md.")
        );
        let u = o.usage();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.turns, u.cost_usd),
            (22187, 24, 2, 0.0)
        );
        assert_eq!(o.result().unwrap().duration_ms, Some(381));
        // The prompt's words are the user's, not a signal.
        assert_no_signal(&o, "session");
        assert_eq!(o.failure(), None);
    }

    #[test]
    fn a_quota_is_a_usage_limit_with_its_reset_time() {
        let o = run(QUOTA, 1);
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, LimitKind::UsageLimit);
        assert_eq!(limit.reset_at, Some(at("2026-03-10T10:31:41Z")));
        assert!(limit.message.contains("quota exhausted"), "{limit:?}");
        assert!(o.auth_error().is_none());
        // In a zone of its own, and in droid's other words for it.
        let mut o = Observer::new(Format::of(&Droid), at("2026-03-10T09:00:00Z"))
            .with_local_zone(FixedOffset::east_opt(3600).unwrap(), None);
        o.feed(
            br#"{"type":"error","source":"agent_loop","message":"429 Weekly limit exhausted. Your limit will reset at 11:45 PM."}"#,
            false,
        );
        o.finish(Some(1));
        assert_eq!(o.limit().unwrap().kind, "usage_limit");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-10T22:45:00Z"))
        );
    }

    #[test]
    fn a_429_droid_gave_up_on_is_a_rate_limit() {
        let o = run(
            concat!(
                r#"{"type":"error","source":"agent_loop","message":"429 Rate limit exceeded (stand-in). Please retry later.","timestamp":1796293993453,"session_id":"24"}"#,
                "\n",
                r#"{"type":"error","source":"cli","message":"Exec failed","timestamp":1796293993485,"session_id":"24"}"#,
                "\n"
            ),
            1,
        );
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, LimitKind::RateLimit);
        assert_eq!(limit.reset_at, None);
        assert_eq!(
            limit.message,
            "429 Rate limit exceeded (stand-in). Please retry later."
        );
    }

    #[test]
    fn login_failures_are_auth_errors() {
        for message in [
            "Error: Authentication failed. Please log in using /login or set a valid FACTORY_API_KEY environment variable.",
            "401 Incorrect API key provided",
            "Airgap Mode is enabled. Model \"gpt-5.6-sol\" routes through Factory's LLM proxy and cannot be used. Configure a BYOK custom model in settings.json to continue.",
        ] {
            let line = serde_json::json!({"type": "error", "source": "cli", "message": message});
            let o = run(&format!("{line}\n"), 1);
            assert!(o.auth_error().is_some(), "{message}");
            assert!(o.limit().is_none(), "{message}");
        }
    }

    #[test]
    fn an_early_end_is_a_failure_said_never_a_limit() {
        let o = run(EARLY, 1);
        assert_no_signal(&o, "early end");
        assert_eq!(
            o.failure(),
            Some(
                "Exec ended early: insufficient permission to proceed. Re-run with --auto high. For destructive commands, use --skip-permissions-unsafe."
            )
        );
        assert!(o.activity().unwrap().starts_with("Exec ended early"));
        // `Exec failed` after a telling error adds nothing.
        assert_eq!(
            run(QUOTA, 1).failure(),
            Some("429 Usage quota exhausted for this key. Your limit will reset at 10:31:41 UTC.")
        );
    }

    #[test]
    fn an_attempt_that_exited_0_is_never_limited_by_its_words() {
        // The same error events, and an exit 0: nothing counts.
        let o = run(QUOTA, 0);
        assert_no_signal(&o, "exit 0");
        let line = serde_json::json!({"type": "error", "source": "cli", "message": "Error: Authentication failed. Please log in using /login"});
        assert_no_signal(&run(&format!("{line}\n"), 0), "exit 0, login");
    }

    #[test]
    fn the_agents_words_are_never_a_signal() {
        // Messages, tool calls and tool results that quote every limit and login text, in a
        // failed attempt too.
        for talk in TALK.iter().chain(&[
            "429 Usage quota exhausted for this key. Your limit will reset at 10:31:41 UTC.",
            "Error: Authentication failed. Please log in using /login",
            "401 Incorrect API key provided",
        ]) {
            let lines = [
                serde_json::json!({"type": "message", "role": "assistant", "text": talk}),
                serde_json::json!({"type": "message", "role": "user", "text": talk}),
                serde_json::json!({"type": "tool_call", "toolName": "Execute", "parameters": {"command": format!("echo '{talk}'")}}),
                serde_json::json!({"type": "tool_result", "isError": true, "error": {"message": talk}}),
                serde_json::json!({"type": "completion", "finalText": talk, "usage": {}}),
            ];
            let stdout: String = lines.iter().map(|l| format!("{l}\n")).collect();
            for exit in [0, 1] {
                let o = run(&stdout, exit);
                assert_no_signal(&o, talk);
                assert_eq!(o.failure(), None, "{talk}");
            }
        }
    }

    #[test]
    fn bad_input_never_panics() {
        for junk in [
            r#"{"type":"error"}"#,
            r#"{"type":"error","message":7}"#,
            r#"{"type":"completion","usage":"none","numTurns":-1}"#,
            r#"{"type":"tool_call","parameters":null}"#,
            r#"{"type":"message","role":"assistant","text":{"a":1}}"#,
            r#"{"type":"system","subtype":"init","session_id":[]}"#,
            r#"{"type":"error","message":"429"}"#,
            "{\"type\":\"error\",\"message\":\"\u{fffd}\u{1b}[2J 429 \"}",
            r#"{"type":"comp"#,
        ] {
            let o = run(&format!("{junk}\n"), 1);
            let _ = (o.limit(), o.usage(), o.final_message(), o.activity());
        }
        let o = run(r#"{"type":"error","message":"429"}"#, 1);
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
    }
}
