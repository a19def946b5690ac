//! GitHub Copilot CLI: `copilot -p {prompt} --yolo` (falling back to `--allow-all`, then
//! `--allow-all-tools`, when its `--help` does not list `--yolo`), plain text as the preset runs
//! it; its `--output-format json` events (messages, tool calls, usage, `session.error`, the
//! `result`) are read too, and its quota and rate-limit texts (`AGENT-CLIS.md`).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::cli::{Cli, Launch, Output, Part, literal};
use super::findings::Findings;
use super::output::{AgentResult, LimitKind, Usage};
use super::signal::Patterns;
use super::text::{as_f64, as_u64};

/// The messages Copilot prints for limits and login failures.
const PATTERNS: Patterns = Patterns {
    // `You've hit your session rate limit.`
    hit_your_limit: true,
    limit_reached_resets: false,
    limits: &[
        // `You've hit the rate limit for this model.`
        ("hit the rate limit", LimitKind::RateLimit),
        ("no remaining quota", LimitKind::PremiumQuota),
        // Text mode after its own retries: `Failed to get response from the AI model; retried 5
        // times (…) Last error: 429 …`.
        ("last error: 429", LimitKind::RateLimit),
    ],
    auth: &[
        "no authentication information found",
        "failed to authenticate",
        "invalid api key",
    ],
    retries: &[],
};

/// GitHub Copilot CLI.
#[derive(Debug)]
pub(crate) struct Copilot;

impl Cli for Copilot {
    fn name(&self) -> &'static str {
        "copilot"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g @github/copilot")
    }

    fn launch(&self) -> Launch {
        Launch {
            args: vec![
                Part::Literal("-p".into()),
                Part::Template("{prompt}".into()),
                Part::Literal("--yolo".into()),
            ],
            stdin_args: Some(literal(&["--yolo"])),
            ..Launch::default()
        }
    }

    fn probe(&self, program: &Path, launch: &mut Launch) {
        let help = crate::proc::brief::run(
            std::process::Command::new(program).arg("--help"),
            Duration::from_secs(10),
        )
        .map(|b| b.output)
        .unwrap_or_default();
        let flag = pick_permission_flag(&help);
        if flag == "--yolo" {
            return;
        }
        launch
            .notes
            .push(format!("this copilot rejects --yolo; using {flag}"));
        let yolo = Part::Literal("--yolo".into());
        for p in launch
            .args
            .iter_mut()
            .chain(launch.stdin_args.iter_mut().flatten())
        {
            if *p == yolo {
                *p = Part::Literal(flag.to_owned());
            }
        }
    }

    fn output(&self) -> Output {
        Output::Text
    }

    fn event(&self, v: &Value, raw: &[u8], seen: &mut Findings) {
        let data = if v["data"].is_object() { &v["data"] } else { v };
        match v["type"].as_str().unwrap_or("") {
            "session.start" => {
                if let Some(id) = data["sessionId"].as_str() {
                    seen.session_id = Some(id.to_owned());
                }
            }
            "assistant.message" => {
                seen.progress();
                if let Some(tokens) = as_u64(&data["outputTokens"]) {
                    seen.message_output_tokens = seen.message_output_tokens.saturating_add(tokens);
                }
                seen.assistant_text(data["content"].as_str().unwrap_or(""));
            }
            "tool.execution_start" => tool_start(data, seen),
            "assistant.usage" => {
                let pick = |keys: &[&str]| keys.iter().find_map(|k| as_u64(&data[*k])).unwrap_or(0);
                seen.usage.add(&Usage {
                    input_tokens: pick(&["inputTokens", "input_tokens"]),
                    output_tokens: pick(&["outputTokens", "output_tokens"]),
                    cache_creation_input_tokens: pick(&["cacheWriteTokens", "cache_write_tokens"]),
                    cache_read_input_tokens: pick(&["cacheReadTokens", "cache_read_tokens"]),
                    cost_usd: 0.0,
                    turns: 0,
                });
            }
            "assistant.turn_end" => {
                seen.progress();
                seen.usage.turns = seen.usage.turns.saturating_add(1);
            }
            "session.error" => session_error(data, raw, seen),
            "result" => result(v, seen),
            _ => {}
        }
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }
}

fn tool_start(data: &Value, seen: &mut Findings) {
    seen.progress();
    let name = data["toolName"]
        .as_str()
        .or_else(|| data["name"].as_str())
        .unwrap_or("tool");
    let args = &data["arguments"];
    // The arguments may come as a JSON string.
    let parsed;
    let args = match args.as_str() {
        Some(s) => {
            parsed = serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
            &parsed
        }
        None => args,
    };
    seen.tool_call(name, args);
}

/// `session.error{errorType, statusCode, message}`: `authentication` or 401 is a login failure;
/// `rate_limit`, a quota or 429 is a limit (its message may name the kind and the reset).
fn session_error(data: &Value, raw: &[u8], seen: &mut Findings) {
    let error_type = data["errorType"]
        .as_str()
        .unwrap_or("")
        .to_ascii_lowercase();
    let status = as_u64(&data["statusCode"]);
    let message = data["message"].as_str().unwrap_or("");
    let shown = if message.is_empty() {
        format!("Copilot error: {error_type}")
    } else {
        message.to_owned()
    };
    seen.set_activity_clean(&shown);
    if error_type.contains("auth") || status == Some(401) {
        seen.auth(&shown);
    } else if error_type.contains("rate")
        || error_type.contains("quota")
        || error_type.contains("limit")
        || status == Some(429)
    {
        seen.set_limit(LimitKind::RateLimit, &shown, None);
    }
    seen.json_error(message, raw, &PATTERNS);
}

/// The final `result{sessionId, exitCode, usage}`.
fn result(v: &Value, seen: &mut Findings) {
    seen.progress();
    if let Some(id) = v["sessionId"].as_str() {
        seen.session_id = Some(id.to_owned());
    }
    let is_error = v["exitCode"].is_number() && as_u64(&v["exitCode"]) != Some(0);
    let u = &v["usage"];
    seen.premium_requests = as_f64(&u["premiumRequests"]).or(seen.premium_requests);
    seen.result = Some(AgentResult {
        is_error,
        subtype: if is_error { "error" } else { "success" }.to_owned(),
        api_error_status: None,
        session_id: seen.session_id.clone(),
        text: seen.last_text.clone().unwrap_or_default(),
        permission_denials: 0,
        duration_ms: as_u64(&u["sessionDurationMs"]),
        usage: seen.summed_usage(),
    });
}

/// Which permission flag a `copilot --help` lists: `--yolo`, else `--allow-all`, else
/// `--allow-all-tools` (older versions); `--yolo` when it lists none.
fn pick_permission_flag(help: &str) -> &'static str {
    let has = |flag: &str| {
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']' || c == '=')
            .any(|w| w == flag)
    };
    if has("--yolo") {
        "--yolo"
    } else if has("--allow-all") {
        "--allow-all"
    } else if has("--allow-all-tools") {
        "--allow-all-tools"
    } else {
        "--yolo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::testkit::*;

    #[test]
    fn copilot_session_error_rate_limit() {
        let stream = [
            r#"{"type":"session.start","data":{"sessionId":"cp-1","copilotVersion":"1.0.102"},"id":"e1","timestamp":"2026-03-10T09:00:00.000Z"}"#,
            r#"{"type":"tool.execution_start","data":{"toolCallId":"t1","toolName":"bash","arguments":{"command":"npm test","description":"Run tests"}},"id":"e2"}"#,
            r#"{"type":"session.error","data":{"errorType":"rate_limit","statusCode":429,"message":"You've hit your session rate limit. Please try again in 2 hours 5 minutes."},"id":"e3"}"#,
            r#"{"type":"result","sessionId":"cp-1","exitCode":1,"usage":{"premiumRequests":1,"totalApiDurationMs":800,"sessionDurationMs":2100}}"#,
        ]
        .join("\n");
        let mut o = observer(Format::json(&Copilot));
        o.feed(stream.lines().nth(1).unwrap().as_bytes(), false);
        o.feed(b"\n", false);
        assert_eq!(o.activity(), Some("bash: npm test"));
        let o = observe(Format::json(&Copilot), &stream);
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "session_rate_limit");
        assert_eq!(limit.reset_at, Some(at("2026-03-10T11:05:00Z")));
        let r = o.result().unwrap();
        assert!(r.is_error);
        assert_eq!(r.session_id.as_deref(), Some("cp-1"));
        assert_eq!(r.duration_ms, Some(2100));
        assert_eq!(o.premium_requests(), Some(1.0));

        // Authentication.
        let o = observe(
            Format::json(&Copilot),
            r#"{"type":"session.error","data":{"errorType":"authentication","statusCode":401,"message":"Authentication failed"}}"#,
        );
        assert!(o.limit().is_none());
        assert_eq!(o.auth_error(), Some("Authentication failed"));
    }

    #[test]
    fn copilot_json_messages_and_usage() {
        let stream = [
            r#"{"type":"assistant.message","data":{"messageId":"m1","content":"Running the tests now.","toolRequests":[],"outputTokens":45}}"#,
            r#"{"type":"assistant.turn_end","data":{"turnId":"0"}}"#,
            r#"{"type":"assistant.message","data":{"messageId":"m2","content":"All green. <promise>DONE</promise>","toolRequests":[],"outputTokens":12}}"#,
            r#"{"type":"assistant.turn_end","data":{"turnId":"1"}}"#,
            r#"{"type":"result","sessionId":"cp-2","exitCode":0,"usage":{"premiumRequests":0.33,"sessionDurationMs":5000}}"#,
        ]
        .join("\n");
        let o = observe(Format::json(&Copilot), &stream);
        assert_eq!(o.usage().output_tokens, 57);
        assert_eq!(o.usage().turns, 2);
        let r = o.result().unwrap();
        assert!(!r.is_error);
        assert_eq!(r.text, "All green. <promise>DONE</promise>");
        assert_eq!(
            o.final_message().as_deref(),
            Some("All green. <promise>DONE</promise>")
        );
        assert_eq!(o.activity(), Some("All green. <promise>DONE</promise>"));
    }

    #[test]
    fn copilot_quota_texts_as_the_last_lines_of_a_failed_attempt() {
        let cases = [
            (
                "You've hit your session rate limit. Please wait and try again.",
                "session_rate_limit",
            ),
            (
                "Error: You've hit the rate limit for this model. Try another model.",
                "rate_limit",
            ),
            (
                "✗ No remaining quota for premium requests. Upgrade your plan.",
                "premium_quota",
            ),
        ];
        for (text, kind) in cases {
            for is_stderr in [false, true] {
                let mut o = observer(Format::of(&Copilot));
                o.feed(format!("Thinking...\n{text}\n").as_bytes(), is_stderr);
                // Copilot's text mode writes its stats footer after the error.
                o.feed(b"Total usage est: 1 Premium request\n", true);
                o.finish(Some(1));
                let limit = o.limit().unwrap_or_else(|| panic!("no limit in {text:?}"));
                assert_eq!(limit.kind, kind);
                assert_eq!(limit.reset_at, None);
            }
        }
    }

    #[test]
    fn copilot_text_mode_rate_limit_after_its_retries() {
        let mut o = observer(Format::of(&Copilot));
        o.feed(b"Failed to get response from the AI model; retried 5 times (total retry wait time: 5.00 seconds) Last error: 429 Rate limit exceeded. Please retry later.\n", false);
        o.finish(Some(1));
        let l = o.limit().expect("a limit");
        assert_eq!(l.kind, "rate_limit");
        assert_eq!(l.reset_at, None);
    }

    #[test]
    fn permission_flag_probe_reads_help_text() {
        assert_eq!(pick_permission_flag("  --yolo  Allow all"), "--yolo");
        assert_eq!(
            pick_permission_flag("  --allow-all-tools  x\n  --allow-all  y"),
            "--allow-all"
        );
        assert_eq!(
            pick_permission_flag("  --allow-all-tools  x"),
            "--allow-all-tools"
        );
        assert_eq!(pick_permission_flag(""), "--yolo");
    }

    #[test]
    fn a_limited_attempt_reports_its_usage() {
        let o = observe(
            Format::json(&Copilot),
            &[
                r#"{"type":"assistant.usage","data":{"inputTokens":900,"outputTokens":40}}"#,
                r#"{"type":"assistant.turn_end","data":{}}"#,
                r#"{"type":"session.error","data":{"errorType":"rate_limit","statusCode":429,"message":"You've hit the rate limit for this model."}}"#,
                r#"{"type":"result","sessionId":"cp","exitCode":1,"usage":{"premiumRequests":1}}"#,
            ]
            .join("\n"),
        );
        assert_eq!(o.limit().unwrap().kind, LimitKind::RateLimit);
        let u = o.usage();
        assert_eq!((u.input_tokens, u.output_tokens, u.turns), (900, 40, 1));
        assert_eq!(o.premium_requests(), Some(1.0));
    }
}
