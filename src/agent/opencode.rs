//! opencode (`opencode-ai`): `opencode run --format json --auto --print-logs --log-level WARN`,
//! the prompt always on stdin (as an argument `opencode run` wraps a prompt holding a space in
//! double quotes, escaping the quotes inside). Without `--auto` (or `OPENCODE_PERMISSION=
//! {"*":"allow"}`, for a version whose `--help` lacks it) it refuses everything it would ask
//! for and still exits 0. Its JSON lines: `step_start`, `tool_use`, `text` (the last is the final
//! message), `step_finish` (tokens, and `cost` in USD per model call: summed), and on failure
//! one `error` event (`statusCode`, `responseHeaders`) and exit 1. It retries a 429, a 5xx or a
//! lost connection 5 times, sleeping a `retry-after` however long in silence: with
//! `--print-logs` each failed call puts a `message="stream error"` log line on stderr first,
//! which ralph reads as "retrying", so the quiet sleep after it is no hang (`AGENT-CLIS.md`).

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use super::cli::{Cli, Launch, Output, literal};
use super::findings::{Findings, TailLine, tool_activity};
use super::output::{AgentResult, LimitKind, Usage};
use super::signal::{Patterns, Scope};
use super::text::{as_f64, as_u64};

/// The argv after `opencode`: JSON events, permissions granted, its log's warnings and errors
/// (the retries) on stderr. No `{prompt}`: the prompt goes to stdin.
const ARGS: &[&str] = &[
    "run",
    "--format",
    "json",
    "--auto",
    "--print-logs",
    "--log-level",
    "WARN",
];

/// What grants every permission when `run --help` does not list `--auto`.
const PERMISSION_ENV: (&str, &str) = ("OPENCODE_PERMISSION", r#"{"*":"allow"}"#);

/// The messages opencode prints for limits and login failures: its own Zen service's texts
/// (`Free usage exceeded, subscribe to Go`, `<name> usage limit reached. It will reset in 3
/// hours 5 minutes.`), a provider's key refused, and its log line for a failed model call.
const PATTERNS: Patterns = Patterns {
    hit_your_limit: false,
    limit_reached_resets: false,
    limits: &[
        ("free usage exceeded", LimitKind::UsageLimit),
        ("usage limit reached", LimitKind::UsageLimit),
    ],
    auth: &["invalid api key", "incorrect api key", "api key is missing"],
    retries: &[stream_error],
};

/// `timestamp=… level=ERROR run=… message="stream error" … error.error="AI_APICallError: …"`:
/// a model call failed; opencode retries it (a 429, 5xx or lost connection) after a silent
/// sleep, or ends at once with an `error` event.
fn stream_error(lower: &str) -> Option<usize> {
    let p = lower.find("message=\"stream error\"")?;
    lower[..p].find("level=error")
}

/// The longest wait a `retry-after` is believed for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30 * 86_400);

/// opencode.
#[derive(Debug)]
pub(crate) struct Opencode;

impl Cli for Opencode {
    fn name(&self) -> &'static str {
        "opencode"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g opencode-ai")
    }

    fn launch(&self) -> Launch {
        Launch {
            args: literal(ARGS),
            stdin_args: Some(literal(ARGS)),
            ..Launch::default()
        }
    }

    fn probe(&self, program: &Path, launch: &mut Launch) {
        let help = crate::proc::brief::run(
            std::process::Command::new(program).args(["run", "--help"]),
            Duration::from_secs(10),
        )
        .map(|b| b.output)
        .unwrap_or_default();
        fit_to_help(&help, launch);
    }

    fn output(&self) -> Output {
        Output::JsonLines
    }

    fn event(&self, v: &Value, _raw: &[u8], seen: &mut Findings) {
        if seen.session_id.is_none()
            && let Some(id) = v["sessionID"].as_str()
        {
            seen.session_id = Some(id.to_owned());
        }
        let part = &v["part"];
        match v["type"].as_str().unwrap_or("") {
            "step_start" | "reasoning" => seen.progress(),
            "tool_use" => {
                seen.progress();
                let tool = part["tool"].as_str().unwrap_or("tool");
                let state = &part["state"];
                seen.tool_call(tool, &state["input"]);
                match state["error"].as_str() {
                    Some(error) if state["status"].as_str() == Some("error") => {
                        let activity = tool_activity(tool, &state["input"]);
                        seen.set_activity_clean(&format!("{activity} (refused: {error})"));
                        seen.tool_result(error, true);
                    }
                    _ => {
                        if let Some(output) = state["output"].as_str() {
                            seen.tool_result(output, false);
                        }
                    }
                }
            }
            "text" => {
                seen.progress();
                seen.assistant_text(part["text"].as_str().unwrap_or(""));
            }
            "step_finish" => {
                seen.progress();
                step_usage(part, seen);
            }
            "error" => error(v, seen),
            _ => {}
        }
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }

    fn retries_quietly(&self) -> bool {
        true
    }

    fn failed_tail(&self, tail: &[TailLine], seen: &mut Findings) {
        // Its `error` event said how it ended; the log lines before it are its retries.
        if seen.result().is_none() {
            seen.read_tail(tail, &[&PATTERNS]);
        }
    }
}

/// Fits the argv to what `opencode run --help` lists: without `--auto`, the permissions come
/// from `OPENCODE_PERMISSION`; without `--print-logs`, no log options. An empty help (the probe
/// failed) changes nothing.
fn fit_to_help(help: &str, launch: &mut Launch) {
    let has = |flag: &str| help.split_whitespace().any(|w| w == flag);
    if help.trim().is_empty() {
        return;
    }
    let mut drop: Vec<&str> = Vec::new();
    if !has("--auto") {
        drop.push("--auto");
        let (k, v) = PERMISSION_ENV;
        launch.env.push((k.to_owned(), v.to_owned()));
        launch
            .notes
            .push(format!("this opencode has no --auto; using {k}='{v}'"));
    }
    if !has("--print-logs") {
        drop.extend(["--print-logs", "--log-level", "WARN"]);
    }
    let kept: Vec<&str> = ARGS.iter().copied().filter(|a| !drop.contains(a)).collect();
    launch.args = literal(&kept);
    launch.stdin_args = Some(literal(&kept));
}

/// A `step_finish`: one model call's tokens and cost.
fn step_usage(part: &Value, seen: &mut Findings) {
    let tokens = &part["tokens"];
    let n = |v: &Value| as_u64(v).unwrap_or(0);
    seen.usage.add(&Usage {
        input_tokens: n(&tokens["input"]),
        output_tokens: n(&tokens["output"]).saturating_add(n(&tokens["reasoning"])),
        cache_creation_input_tokens: n(&tokens["cache"]["write"]),
        cache_read_input_tokens: n(&tokens["cache"]["read"]),
        cost_usd: as_f64(&part["cost"])
            .filter(|c| c.is_finite() && *c > 0.0)
            .unwrap_or(0.0),
        turns: 1,
    });
}

/// The `error` event that ends a failed run: a 401/403 or an auth error is a login failure; a
/// 429 (or a Zen limit text) a limit, lifting at its `retry-after`.
fn error(v: &Value, seen: &mut Findings) {
    let err = &v["error"];
    let data = &err["data"];
    let name = err["name"].as_str().unwrap_or("");
    let message = data["message"]
        .as_str()
        .or_else(|| err["message"].as_str())
        .unwrap_or("");
    let status = as_u64(&data["statusCode"]);
    seen.result = Some(AgentResult {
        is_error: true,
        subtype: "error".to_owned(),
        api_error_status: status.and_then(|s| u16::try_from(s).ok()),
        session_id: seen.session_id.clone(),
        text: seen.last_text.clone().unwrap_or_default(),
        permission_denials: 0,
        duration_ms: None,
        usage: seen.summed_usage(),
    });
    let shown = if message.trim().is_empty() {
        format!("opencode error: {name}")
    } else {
        message.to_owned()
    };
    seen.set_activity_clean(&shown);
    if matches!(status, Some(401 | 403)) || name.contains("Auth") {
        seen.auth(&shown);
        return;
    }
    seen.scan(message, Scope::Error, &PATTERNS);
    if status == Some(429) || seen.limit().is_some() {
        let now = v["timestamp"]
            .as_i64()
            .and_then(DateTime::from_timestamp_millis)
            .unwrap_or_else(|| seen.clock().now());
        let reset =
            retry_after(&data["responseHeaders"], now).or_else(|| seen.parse_reset(message));
        let kind = seen
            .limit()
            .map_or(LimitKind::RateLimit, |l| l.kind.clone());
        seen.set_limit(kind, &shown, reset);
    }
}

/// When a `retry-after-ms` or `retry-after` header (seconds or an HTTP date) says to try again.
fn retry_after(headers: &Value, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let map = headers.as_object()?;
    let header = |name: &str| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_str().map(|s| s.trim().to_owned()))
    };
    let after = |secs: f64| {
        (secs.is_finite() && secs >= 0.0 && secs <= MAX_RETRY_AFTER.as_secs_f64())
            .then(|| {
                now.checked_add_signed(TimeDelta::milliseconds((secs * 1000.0).round() as i64))
            })
            .flatten()
    };
    if let Some(ms) = header("retry-after-ms").and_then(|s| s.parse::<f64>().ok()) {
        return after(ms / 1000.0);
    }
    let value = header("retry-after")?;
    match value.parse::<f64>() {
        Ok(secs) => after(secs),
        Err(_) => DateTime::parse_from_rfc2822(&value)
            .ok()
            .map(|t| t.with_timezone(&Utc))
            .filter(|t| *t - now <= TimeDelta::from_std(MAX_RETRY_AFTER).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::testkit::*;

    // Captured from opencode 1.18.33 against the stand-in (ids and long fields shortened).
    const SESSION: &[&str] = &[
        r#"{"type":"step_start","timestamp":1796293779812,"sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","part":{"id":"prt_1","messageID":"msg_1","sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","snapshot":"a09bcdd6","type":"step-start"}}"#,
        r#"{"type":"tool_use","timestamp":1796293779913,"sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","part":{"type":"tool","tool":"bash","callID":"call_1","state":{"status":"completed","input":{"command":"sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md","description":"Check the first unchecked criterion"},"output":"(no output)","metadata":{"output":"(no output)","exit":0,"truncated":false},"title":"sed","time":{"start":1796293779804,"end":1796293779908}},"id":"prt_2","sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","messageID":"msg_1"}}"#,
        r#"{"type":"step_finish","timestamp":1796293779982,"sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","part":{"id":"prt_3","reason":"tool-calls","snapshot":"1a848ce0","messageID":"msg_1","sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","type":"step-finish","tokens":{"total":7695,"input":7683,"output":12,"reasoning":0,"cache":{"write":0,"read":0}},"cost":7.743}}"#,
        r#"{"type":"step_start","timestamp":1796293780189,"sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","part":{"id":"prt_4","messageID":"msg_2","sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","snapshot":"1a848ce0","type":"step-start"}}"#,
        r#"{"type":"text","timestamp":1796293780189,"sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","part":{"id":"prt_5","messageID":"msg_2","sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","type":"text","text":"I checked the first unchecked criterion in RALPH_TASK.md.","time":{"start":1796293780179,"end":1796293780182}}}"#,
        r#"{"type":"step_finish","timestamp":1796293780253,"sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","part":{"id":"prt_6","reason":"stop","snapshot":"1a848ce0","messageID":"msg_2","sessionID":"ses_dc48c25b8ffeiOfONXj6D1nmeg","type":"step-finish","tokens":{"total":7785,"input":7773,"output":12,"reasoning":0,"cache":{"write":0,"read":0}},"cost":7.833}}"#,
    ];

    /// After its 5 retries of a 429 with `retry-after: 2`.
    const RATE_LIMITED: &str = r#"{"type":"error","timestamp":1796293831848,"sessionID":"ses_dc48b83d0ffeP0ACPv3hvFJhEs","error":{"name":"APIError","data":{"message":"Rate limit exceeded (stand-in). Please retry later.","statusCode":429,"isRetryable":true,"responseHeaders":{"content-length":"154","content-type":"application/json","date":"Thu, 03 Dec 2026 10:30:31 GMT","retry-after":"2","server":"ralph-standin/1 Python/3.11.7"},"responseBody":"{\"error\": {\"message\": \"Rate limit exceeded (stand-in). Please retry later.\", \"type\": \"rate_limit_exceeded\", \"param\": null, \"code\": \"rate_limit_exceeded\"}}","metadata":{"url":"http://127.0.0.1:39825/v1/chat/completions"}}}}"#;

    const UNAUTHORIZED: &str = r#"{"type":"error","timestamp":1796293922640,"sessionID":"ses_dc489fab2ffe0ymfR63RfR4kmk","error":{"name":"APIError","data":{"message":"Incorrect API key provided","statusCode":401,"isRetryable":false,"responseHeaders":{"content-length":"133","content-type":"application/json","date":"Thu, 03 Dec 2026 10:32:02 GMT","server":"ralph-standin/1 Python/3.11.7"},"responseBody":"{\"error\": {\"message\": \"Incorrect API key provided\", \"type\": \"invalid_request_error\", \"param\": null, \"code\": \"invalid_request_error\"}}","metadata":{"url":"http://127.0.0.1:34707/v1/chat/completions"}}}}"#;

    /// Its log line (`--print-logs --log-level WARN`) for each failed model call.
    const STREAM_ERROR: &str = r#"timestamp=2026-12-03T10:31:55.152Z level=ERROR run=a7513966 message="stream error" providerID=standin modelID=standin-model session.id=ses_dc48a1b87ffezfubnEOYG88UbS small=false agent=build mode=primary error.error="AI_APICallError: Rate limit exceeded (stand-in). Please retry later.""#;

    fn lines(lines: &[&str]) -> String {
        lines.join("\n") + "\n"
    }

    #[test]
    fn a_session_gives_tokens_cost_turns_and_the_final_message() {
        let mut o = observer(Format::of(&Opencode));
        o.feed(lines(&SESSION[..2]).as_bytes(), false);
        assert!(o.take_activity_changed());
        assert_eq!(
            o.activity(),
            Some("bash: sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md")
        );
        let o = observe(Format::of(&Opencode), &lines(SESSION));
        let u = o.usage();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.turns),
            (7683 + 7773, 24, 2)
        );
        assert!(
            (u.cost_usd - (7.743 + 7.833)).abs() < 1e-9,
            "{}",
            u.cost_usd
        );
        assert_eq!(o.session_id(), Some("ses_dc48c25b8ffeiOfONXj6D1nmeg"));
        assert_eq!(
            o.final_message().as_deref(),
            Some("I checked the first unchecked criterion in RALPH_TASK.md.")
        );
        assert_no_signal(&o, "a session");
        assert!(o.result().is_none());
    }

    #[test]
    fn a_refused_tool_call_shows_as_refused() {
        let refused = r#"{"type":"tool_use","timestamp":1796293804504,"sessionID":"ses_x","part":{"type":"tool","tool":"bash","callID":"call_J","state":{"status":"error","input":{"command":"mkdir -p /var/tmp/ralph-oc-probe","description":"Check"},"error":"The user rejected permission to use this specific tool call.","time":{"start":1,"end":2}},"id":"prt_2","sessionID":"ses_x","messageID":"msg_1"}}"#;
        let o = observe(Format::of(&Opencode), &lines(&[refused]));
        assert_eq!(
            o.activity(),
            Some(
                "bash: mkdir -p /var/tmp/ralph-oc-probe (refused: The user rejected permission to use this specific tool call.)"
            )
        );
        assert_no_signal(&o, "a refused tool call");
    }

    /// An error event timed at the end of what a date holds: its retry-after has no reset
    /// time (never a panic), and the limit is still the limit.
    #[test]
    fn a_retry_after_past_the_end_of_time_is_no_reset() {
        let at_end = RATE_LIMITED.replace("1796293831848", "8210266876799999");
        let o = failed(&Opencode, &format!("{at_end}\n"), "");
        let limit = o.limit().expect("a 429 is a limit");
        assert_eq!(limit.reset_at, None);
        let headers = serde_json::json!({"retry-after": "2592000"});
        assert_eq!(retry_after(&headers, DateTime::<Utc>::MAX_UTC), None);
    }

    #[test]
    fn a_429_after_its_retries_is_a_rate_limit_until_its_retry_after() {
        let mut o = observer(Format::of(&Opencode));
        o.feed(format!("{STREAM_ERROR}\n{STREAM_ERROR}\n").as_bytes(), true);
        o.feed(format!("{RATE_LIMITED}\n").as_bytes(), false);
        o.finish(Some(1));
        let limit = o.limit().expect("a limit");
        assert_eq!(limit.kind, LimitKind::RateLimit);
        assert_eq!(
            limit.message,
            "Rate limit exceeded (stand-in). Please retry later."
        );
        // The event's timestamp (10:30:31.848) plus `retry-after: 2`, not the `date` header.
        assert_eq!(limit.reset_at, Some(at("2026-12-03T10:30:33.848Z")));
        assert!(o.auth_error().is_none());
        assert_eq!(o.result().and_then(|r| r.api_error_status), Some(429));
        // `retry-after-ms` wins; an HTTP date is read as one.
        let now = at("2026-03-10T09:00:00Z");
        let headers = serde_json::json!({"Retry-After": "7", "retry-after-ms": "1500"});
        assert_eq!(
            retry_after(&headers, now),
            Some(at("2026-03-10T09:00:01.500Z"))
        );
        let headers = serde_json::json!({"retry-after": "Tue, 10 Mar 2026 09:05:00 GMT"});
        assert_eq!(retry_after(&headers, now), Some(at("2026-03-10T09:05:00Z")));
        for bad in ["-1", "soon", "1e12", "NaN"] {
            let headers = serde_json::json!({ "retry-after": bad });
            assert_eq!(retry_after(&headers, now), None, "{bad}");
        }
    }

    #[test]
    fn a_zen_usage_limit_gives_its_reset() {
        let event = serde_json::json!({"type": "error", "timestamp": 1773133200000_i64,
            "error": {"name": "APIError", "data": {"message":
            "Big Pickle usage limit reached. It will reset in 3 hours 5 minutes. Subscribe to Go.",
            "statusCode": 429, "isRetryable": false, "responseHeaders": {}}}});
        let mut o = observer(Format::of(&Opencode));
        o.feed(format!("{event}\n").as_bytes(), false);
        o.finish(Some(1));
        let limit = o.limit().expect("a limit");
        assert_eq!(limit.kind, LimitKind::UsageLimit);
        assert_eq!(limit.reset_at, Some(at("2026-03-10T12:05:00Z")));
    }

    #[test]
    fn a_401_is_a_login_failure_not_a_limit() {
        let mut o = observer(Format::of(&Opencode));
        // Its log line for the failed call comes first: a retry line, yet no limit.
        o.feed(
            format!(
                "{}\n",
                STREAM_ERROR.replace(
                    "Rate limit exceeded (stand-in). Please retry later.",
                    "Incorrect API key provided"
                )
            )
            .as_bytes(),
            true,
        );
        o.feed(format!("{UNAUTHORIZED}\n").as_bytes(), false);
        o.finish(Some(1));
        assert_eq!(o.auth_error(), Some("Incorrect API key provided"));
        assert!(o.limit().is_none(), "{:?}", o.limit());
    }

    #[test]
    fn words_in_its_messages_and_exit_0_are_never_a_limit() {
        for talk in TALK.iter().chain([
            &"Free usage exceeded, subscribe to Go",
            &"Big Pickle usage limit reached. It will reset in 3 hours 5 minutes.",
            &STREAM_ERROR,
        ]) {
            let text = serde_json::json!({"type": "text", "sessionID": "s",
                "part": {"type": "text", "text": talk}});
            let tool = serde_json::json!({"type": "tool_use", "sessionID": "s",
                "part": {"type": "tool", "tool": "bash", "state": {"status": "completed",
                "input": {"command": "cat log"}, "output": talk}}});
            for exit in [Some(0), Some(1)] {
                let mut o = observer(Format::of(&Opencode));
                o.feed(format!("{text}\n{tool}\n").as_bytes(), false);
                o.finish(exit);
                assert_no_signal(&o, talk);
            }
            // Its log lines on stderr count only when it failed, never after an exit 0.
            let mut o = observer(Format::of(&Opencode));
            o.feed(format!("{talk}\n").as_bytes(), true);
            o.finish(Some(0));
            assert_no_signal(&o, talk);
        }
    }

    #[test]
    fn stopped_while_retrying_is_a_rate_limit() {
        let mut o = observer(Format::of(&Opencode));
        o.feed(lines(&SESSION[..1]).as_bytes(), false);
        o.feed(format!("{STREAM_ERROR}\n").as_bytes(), true);
        o.finish(None);
        let limit = o.limit().expect("a limit");
        assert_eq!(limit.kind, LimitKind::RateLimit);
        assert_eq!(limit.reset_at, None);
    }

    #[test]
    fn quiet_after_a_retry_line_is_waiting_until_it_moves_on() {
        let mut o = observer(Format::of(&Opencode));
        o.feed(lines(&SESSION[..1]).as_bytes(), false);
        assert!(!o.waiting());
        o.feed(format!("{STREAM_ERROR}\n").as_bytes(), true);
        assert!(o.waiting(), "sleeping out a retry-after");
        // The retried call answered: an event after the log line.
        o.feed(lines(&SESSION[1..2]).as_bytes(), false);
        assert!(!o.waiting());
        // Retrying again, then another log line that is not a retry.
        o.feed(format!("{STREAM_ERROR}\n").as_bytes(), true);
        assert!(o.waiting());
        o.feed(
            b"timestamp=2026-12-03T10:31:56Z level=WARN run=a message=other\n",
            true,
        );
        assert!(!o.waiting());
        // The same line from a CLI that does not retry quietly, or quoted: not waiting.
        let mut o = observer(Format::of(
            crate::agent::preset("codex").unwrap_or(&Opencode),
        ));
        o.feed(format!("{STREAM_ERROR}\n").as_bytes(), true);
        assert!(!o.waiting());
        let mut o = observer(Format::of(&Opencode));
        o.feed(format!("echo '{STREAM_ERROR}'\n").as_bytes(), true);
        assert!(!o.waiting());
    }

    #[test]
    fn the_prompt_goes_on_stdin_and_help_fits_the_permissions() {
        let launch = Opencode.launch();
        assert_eq!(launch.args, literal(ARGS));
        assert_eq!(launch.stdin_args, Some(literal(ARGS)));
        assert!(launch.env.is_empty());
        let help = "opencode run [message..]\n      --print-logs   print logs to stderr [boolean]\n      --auto         auto-approve permissions that are not explicitly denied (dangerous!)\n";
        let mut fitted = Opencode.launch();
        fit_to_help(help, &mut fitted);
        assert_eq!(fitted, Opencode.launch());
        // An older opencode: no --auto, no --print-logs.
        let mut fitted = Opencode.launch();
        fit_to_help(
            "opencode run [message..]\n  --format  format\n",
            &mut fitted,
        );
        assert_eq!(fitted.args, literal(&["run", "--format", "json"]));
        assert_eq!(
            fitted.stdin_args,
            Some(literal(&["run", "--format", "json"]))
        );
        assert_eq!(
            fitted.env,
            vec![(
                "OPENCODE_PERMISSION".to_owned(),
                r#"{"*":"allow"}"#.to_owned()
            )]
        );
        assert_eq!(fitted.notes.len(), 1);
        // The probe failed: nothing changes.
        let mut fitted = Opencode.launch();
        fit_to_help("", &mut fitted);
        assert_eq!(fitted, Opencode.launch());
    }
}
