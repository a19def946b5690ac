//! Qwen Code: `qwen {prompt} --yolo -o stream-json` (`-p` is deprecated; `qwen --yolo -o
//! stream-json` reads the prompt on stdin), and its Claude-like stream: `system`/`init` (session,
//! model), `assistant` messages (text, `tool_use`, per-message `usage`), `system`/`retry`, and a
//! final `result` (`is_error`, `usage`, no cost) whose `error.message` carries an API error —
//! `[API Error: 401 …]`, or `Quota exhausted: … will reset at <time>` (`AGENT-CLIS.md`). Older
//! versions (0.15.10) report an API error as a *successful* result whose text is
//! `[API Error: …]`, exit 0: that text is read as the error it is when the model did not write it.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::Value;

use super::cli::{Cli, Launch, Output, Part, literal};
use super::findings::{Findings, tool_results};
use super::output::{AgentResult, LimitKind, Usage};
use super::signal::{Patterns, Scope};
use super::text::{as_u64, bounded};

/// The messages Qwen Code prints for limits and login failures.
const PATTERNS: Patterns = Patterns {
    hit_your_limit: false,
    limit_reached_resets: false,
    limits: &[
        // 0.24.4 on a provider quota with a reset: `Quota exhausted: <provider message>`.
        ("quota exhausted", LimitKind::UsageLimit),
        ("insufficient_quota", LimitKind::UsageLimit),
        ("api error: 429", LimitKind::RateLimit),
    ],
    auth: &[
        "api error: 401",
        "incorrect api key",
        "invalid api key",
        "no auth type is selected",
        "missing api key",
        "api key not found",
    ],
    retries: &[retrying_429],
};

/// The prefix Qwen Code gives an API error's text.
const API_ERROR: &str = "[API Error:";

/// `Retrying in 60s (attempt 1/10): [API Error: 429 …]` (stderr): Qwen retrying a 429.
fn retrying_429(lower: &str) -> Option<usize> {
    let p = lower.find("retrying in ")?;
    let rest = &lower[p..];
    let end = rest.find('\n').unwrap_or(rest.len());
    rest[..end].contains("api error: 429").then_some(p)
}

/// Qwen Code.
#[derive(Debug)]
pub(crate) struct Qwen;

impl Cli for Qwen {
    fn name(&self) -> &'static str {
        "qwen"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g @qwen-code/qwen-code")
    }

    fn launch(&self) -> Launch {
        let tail = ["--yolo", "-o", "stream-json"];
        let mut args = vec![Part::Template("{prompt}".into())];
        args.extend(literal(&tail));
        Launch {
            args,
            stdin_args: Some(literal(&tail)),
            ..Launch::default()
        }
    }

    fn output(&self) -> Output {
        Output::JsonLines
    }

    fn skips(&self, line: &[u8]) -> bool {
        // Tool results: possibly huge, and never a signal.
        line.starts_with(br#"{"type":"user""#)
    }

    fn event(&self, v: &Value, _raw: &[u8], seen: &mut Findings) {
        match v["type"].as_str().unwrap_or("") {
            "system" => system(v, seen),
            "assistant" => assistant(v, seen),
            // Tool results: read only when rendering (`skips` keeps them from the observer).
            "user" => tool_results(v, seen),
            "result" => result(v, seen),
            _ => {}
        }
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }
}

/// `system` events: `init` (session, model) and `retry` (Qwen waiting to retry a failed
/// request, a 429 as its stderr says; informational until it ends the attempt).
fn system(v: &Value, seen: &mut Findings) {
    match v["subtype"].as_str().unwrap_or("") {
        "init" => seen.session_started(v["session_id"].as_str(), v["model"].as_str()),
        "retry" => {
            let d = &v["data"];
            let mut message = format!("API retry {}", as_u64(&d["attempt"]).unwrap_or(0));
            if let Some(max) = as_u64(&d["maxRetries"]) {
                message.push_str(&format!("/{max}"));
            }
            if let Some(ms) = as_u64(&d["delayMs"]) {
                message.push_str(&format!(" in {}s", ms.div_ceil(1000)));
            }
            seen.set_activity_clean(&format!("Retrying ({message})"));
            seen.retry(LimitKind::RateLimit, &message);
        }
        _ => {}
    }
}

/// An assistant message: its text or tool call as the activity. A text the model did not write
/// — Qwen's own API-error message, with no tokens spent — is shown but never kept as the agent's
/// message, so a result repeating it is known for what it is.
fn assistant(v: &Value, seen: &mut Findings) {
    seen.progress();
    let message = &v["message"];
    let written = as_u64(&message["usage"]["output_tokens"]).is_some_and(|n| n > 0);
    let Some(blocks) = message["content"].as_array() else {
        return;
    };
    // The message's text is all its text blocks: the model's, kept whole, when it spent tokens.
    let mut text = String::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or("")),
            Some("tool_use") => {
                let name = block["name"].as_str().unwrap_or("tool");
                seen.tool_call(name, &block["input"]);
            }
            _ => {}
        }
    }
    if text.trim().is_empty() {
        return;
    }
    seen.unwritten_latest = !written;
    if written {
        seen.assistant_text(&text);
    } else {
        seen.set_activity_clean(&text);
    }
}

/// The final `result`: tokens, turns, and, when it is an error, the limit or login failure its
/// text gives. A successful result's text is the agent's work — unless it is Qwen's own
/// `[API Error: …]` that the model never wrote (0.15.10 reports errors so).
fn result(v: &Value, seen: &mut Findings) {
    seen.progress();
    let u = &v["usage"];
    let cached = as_u64(&u["cache_read_input_tokens"]).unwrap_or(0);
    let usage = Usage {
        // Qwen's input count is the prompt's, cached tokens included.
        input_tokens: as_u64(&u["input_tokens"])
            .unwrap_or(0)
            .saturating_sub(cached),
        output_tokens: as_u64(&u["output_tokens"]).unwrap_or(0),
        cache_read_input_tokens: cached,
        turns: as_u64(&v["num_turns"]).unwrap_or(0),
        ..Usage::default()
    };
    let subtype = v["subtype"].as_str().unwrap_or("").to_owned();
    let text = v["result"].as_str().unwrap_or("");
    let error = v["error"]["message"].as_str().unwrap_or("");
    let said = if error.trim().is_empty() { text } else { error };
    let is_error = v["is_error"].as_bool() == Some(true)
        || (!subtype.is_empty() && subtype != "success")
        || unwritten_api_error(text, seen);
    let session_id = v["session_id"].as_str().map(str::to_owned);
    if session_id.is_some() {
        seen.session_id.clone_from(&session_id);
    }
    let status = api_error_status(said);
    if is_error {
        read_error(said, status, seen);
    } else {
        // The run completed: whatever it retried on the way did not end it.
        seen.clear_limit();
    }
    seen.result = Some(AgentResult {
        is_error,
        subtype,
        api_error_status: status,
        session_id,
        text: bounded(text),
        permission_denials: v["permission_denials"].as_array().map_or(0, Vec::len),
        duration_ms: as_u64(&v["duration_ms"]),
        usage,
    });
}

/// Whether a successful result's text is Qwen's `[API Error: …]` rather than the model's: it
/// opens with that prefix, and the latest message is not one the model wrote that is the
/// result's text or opens with the prefix too (its text blocks, whatever Qwen joins them with).
fn unwritten_api_error(text: &str, seen: &Findings) -> bool {
    let model_wrote = !seen.unwritten_latest
        && seen
            .last_text
            .as_deref()
            .is_some_and(|t| t == bounded(text).as_str() || t.trim_start().starts_with(API_ERROR));
    text.trim_start().starts_with(API_ERROR) && !model_wrote
}

/// An error result's text: a limit (with its reset time) or a login failure.
fn read_error(said: &str, status: Option<u16>, seen: &mut Findings) {
    match status {
        Some(401) => seen.auth(said),
        Some(429) if seen.limit().is_none() => seen.set_limit(LimitKind::RateLimit, said, None),
        _ => {}
    }
    seen.scan(said, Scope::Error, &PATTERNS);
    if let Some(limit) = seen.limit().cloned()
        && limit.reset_at.is_none()
        && let Some(reset) = exact_reset(said)
    {
        seen.set_limit(limit.kind, &limit.message, Some(reset));
    }
}

/// `[API Error: 429 …]`: the status.
fn api_error_status(text: &str) -> Option<u16> {
    let rest = text.trim_start().strip_prefix(API_ERROR)?.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    (digits == 3).then(|| rest[..3].parse().ok()).flatten()
}

/// `reset at 2026-12-03T10:30:52Z` (or `2026-12-03 10:30:52 UTC`): an exact reset time a
/// provider's quota message may give, which the general reader does not take. A time without a
/// zone is not read.
fn exact_reset(text: &str) -> Option<DateTime<Utc>> {
    let lower = text.to_ascii_lowercase();
    lower.match_indices("reset at ").find_map(|(p, key)| {
        let mut words = text[p + key.len()..]
            .split_whitespace()
            .map(|w| w.trim_end_matches(['.', ',', ';', ')', ']']));
        let date = words.next()?;
        if let Ok(t) = DateTime::parse_from_rfc3339(date) {
            return Some(t.with_timezone(&Utc));
        }
        let time = words.next()?;
        let time = match time.strip_suffix('Z') {
            Some(time) => time,
            None if words.next().is_some_and(|z| z.eq_ignore_ascii_case("utc")) => time,
            None => return None,
        };
        NaiveDateTime::parse_from_str(&format!("{date} {time}"), "%Y-%m-%d %H:%M:%S")
            .ok()
            .map(|t| t.and_utc())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::testkit::*;

    const SESSION_ID: &str = "28f3ee26-ec2a-442f-9982-dd04fd0d1859";

    /// Qwen Code 0.24.4 against the stand-in: one shell call, one final text (the `init` line's
    /// lists shortened, its slash commands and agents left out).
    const SESSION: &[&str] = &[
        r#"{"type":"system","subtype":"init","uuid":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","session_id":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","cwd":"/tmp/qw/repo","tools":["web_fetch","get_goal","update_goal","tool_call"],"mcp_servers":[],"model":"standin-model","permission_mode":"yolo","qwen_code_version":"0.24.4"}"#,
        r#"{"type":"stream_event","uuid":"c78dffdd-73b2-42f7-b442-6f88423b554e","session_id":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","parent_tool_use_id":null,"event":{"type":"goal_state","goal_state":{"v":2,"goal":null,"activity":"idle"}}}"#,
        r#"{"type":"assistant","uuid":"610302f6-0c66-4491-8be4-5ff820c3fe1e","session_id":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","parent_tool_use_id":null,"message":{"id":"610302f6-0c66-4491-8be4-5ff820c3fe1e","type":"message","role":"assistant","model":"standin-model","content":[{"type":"tool_use","id":"call_Wiku21n5OcpspquteUjhb0Gm","name":"run_shell_command","input":{"command":"sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md","description":"Check the first unchecked criterion","is_background":false}}],"stop_reason":"tool_use","usage":{"input_tokens":19570,"output_tokens":12,"cache_read_input_tokens":0,"total_tokens":19582}}}"#,
        r#"{"type":"user","uuid":"d304947b-1c9a-4fc2-8ad3-a69965f5e73e","session_id":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_Wiku21n5OcpspquteUjhb0Gm","is_error":false,"content":"Command: sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md\nDirectory: (root)\nOutput: (empty)\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)"}]}}"#,
        r#"{"type":"assistant","uuid":"3273c147-72a7-49e6-a91c-34c77e5ffbf2","session_id":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","parent_tool_use_id":null,"message":{"id":"3273c147-72a7-49e6-a91c-34c77e5ffbf2","type":"message","role":"assistant","model":"standin-model","content":[{"type":"text","text":"I checked the first unchecked criterion in RALPH_TASK.md."}],"stop_reason":null,"usage":{"input_tokens":19714,"output_tokens":12,"cache_read_input_tokens":0,"total_tokens":19726}}}"#,
        r#"{"type":"result","subtype":"success","uuid":"cd64dc0c-84ce-4ca9-b78c-c324eb8e320d","session_id":"28f3ee26-ec2a-442f-9982-dd04fd0d1859","is_error":false,"duration_ms":524,"duration_api_ms":341,"num_turns":2,"result":"I checked the first unchecked criterion in RALPH_TASK.md.","usage":{"input_tokens":39284,"output_tokens":24,"cache_read_input_tokens":0,"total_tokens":39308},"permission_denials":[]}"#,
    ];

    /// 0.24.4 on a 429 `Your free quota is exhausted; it will reset at …` (after 4 requests),
    /// exit 1.
    const QUOTA: &[&str] = &[
        r#"{"type":"assistant","uuid":"4709818f-2563-4bc6-8284-66bc850eb9d5","session_id":"6c65ac10-2da2-4b40-bd79-69d79d34bce8","parent_tool_use_id":null,"message":{"id":"4709818f-2563-4bc6-8284-66bc850eb9d5","type":"message","role":"assistant","model":"standin-model","content":[{"type":"text","text":"Quota exhausted: Your free quota is exhausted; it will reset at 2026-12-03T10:30:52Z.\n\nPlease retry after the reset time, or switch to another API key / auth method. (cause: insufficient_quota: 429 Your free quota is exhausted; it will reset at 2026-12-03T10:30:52Z.)"}],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
        r#"{"type":"result","subtype":"error_during_execution","uuid":"4e55a3df-fa9b-432b-8210-22501cc35025","session_id":"6c65ac10-2da2-4b40-bd79-69d79d34bce8","is_error":true,"duration_ms":4001,"duration_api_ms":0,"num_turns":1,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0},"permission_denials":[],"error":{"message":"Quota exhausted: Your free quota is exhausted; it will reset at 2026-12-03T10:30:52Z.\n\nPlease retry after the reset time, or switch to another API key / auth method. (cause: insufficient_quota: 429 Your free quota is exhausted; it will reset at 2026-12-03T10:30:52Z.)"}}"#,
    ];

    /// 0.15.10 on the same quota 429 (after 7 requests, `maxRetries: 0`): a *successful* result,
    /// exit 0.
    const OLD_QUOTA: &[&str] = &[
        r#"{"type":"assistant","uuid":"07c50bcb-6159-43d5-a75f-cd9bd52b4e49","session_id":"2e82ce8f-9d41-4d65-8bdc-1508ab4c3264","parent_tool_use_id":null,"message":{"id":"07c50bcb-6159-43d5-a75f-cd9bd52b4e49","type":"message","role":"assistant","model":"standin-model","content":[{"type":"text","text":"[API Error: 429 Your free quota is exhausted; it will reset at 2026-12-03T10:45:47Z.]\nPossible quota limitations in place or slow response times detected. Please wait and try again later."}],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
        r#"{"type":"result","subtype":"success","uuid":"35fd11a2-021e-4b22-8557-32d1c5133935","session_id":"2e82ce8f-9d41-4d65-8bdc-1508ab4c3264","is_error":false,"duration_ms":72616,"duration_api_ms":72489,"num_turns":1,"result":"[API Error: 429 Your free quota is exhausted; it will reset at 2026-12-03T10:45:47Z.]\nPossible quota limitations in place or slow response times detected. Please wait and try again later.","usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0},"permission_denials":[]}"#,
    ];

    /// A 401: 0.24.4 (an error result, exit 1), 0.15.10 (a successful one, exit 0).
    const AUTH_NEW: &str = r#"{"type":"result","subtype":"error_during_execution","uuid":"086d1dfa-5a23-4c51-b987-70af347afb20","session_id":"3434b073-9244-44d5-ae9f-c7100c2f6673","is_error":true,"duration_ms":338,"duration_api_ms":0,"num_turns":1,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0},"permission_denials":[],"error":{"message":"[API Error: 401 Incorrect API key provided.]"}}"#;
    const AUTH_OLD: &[&str] = &[
        r#"{"type":"assistant","uuid":"99c60a4d-b97b-4254-94a6-d5e8a07047bd","session_id":"d30f02c0-fa93-4463-b126-a11cd7cfba3d","parent_tool_use_id":null,"message":{"id":"99c60a4d-b97b-4254-94a6-d5e8a07047bd","type":"message","role":"assistant","model":"standin-model","content":[{"type":"text","text":"[API Error: 401 Incorrect API key provided.]"}],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
        r#"{"type":"result","subtype":"success","uuid":"8023cb67-ab3f-40d0-827c-0d6c537f896e","session_id":"d30f02c0-fa93-4463-b126-a11cd7cfba3d","is_error":false,"duration_ms":92,"duration_api_ms":41,"num_turns":1,"result":"[API Error: 401 Incorrect API key provided.]","usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0},"permission_denials":[]}"#,
    ];

    /// 0.24.4 waiting 60 s to retry a plain 429 (stderr: `Retrying in 60s (attempt 1/10): [API
    /// Error: 429 …]`).
    const RETRY: &str = r#"{"type":"system","subtype":"retry","uuid":"f10126e6-2c6b-41bc-bf4f-10a8a2404e28","session_id":"9c391392-1ba4-4430-908a-642f4c5c9ea7","parent_tool_use_id":null,"data":{"reason":"retry","attempt":1,"maxRetries":10,"delayMs":60000,"discardedToolCalls":0,"preserveText":false}}"#;

    fn lines(lines: &[&str]) -> String {
        lines.join("\n") + "\n"
    }

    /// A message the model wrote (it spent tokens), then a successful result with its text.
    fn written(text: &str) -> String {
        let message = serde_json::json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}], "usage": {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940}}});
        let result = serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, "result": text, "usage": {"input_tokens": 900, "output_tokens": 40}, "permission_denials": []});
        format!("{message}\n{result}\n")
    }

    #[test]
    fn launch_takes_the_prompt_as_an_argument_or_on_stdin() {
        let launch = Qwen.launch();
        assert_eq!(launch.args[0], Part::Template("{prompt}".into()));
        assert_eq!(&launch.args[1..], literal(&["--yolo", "-o", "stream-json"]));
        assert_eq!(
            launch.stdin_args,
            Some(literal(&["--yolo", "-o", "stream-json"]))
        );
        assert!(launch.env.is_empty());
        assert_eq!(Qwen.output(), Output::JsonLines);
    }

    #[test]
    fn a_session_gives_tokens_turns_activity_and_its_final_message() {
        let mut o = observer(Format::of(&Qwen));
        let mut shown = Vec::new();
        for line in SESSION {
            o.feed(format!("{line}\n").as_bytes(), false);
            if o.take_activity_changed() {
                shown.push(o.activity().unwrap_or("").to_owned());
            }
        }
        o.finish(Some(0));
        assert_eq!(
            shown,
            [
                "Starting: standin-model",
                "run_shell_command: sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md",
                "I checked the first unchecked criterion in RALPH_TASK.md.",
            ]
        );
        let r = o.result().expect("result");
        assert!(!r.is_error);
        assert_eq!(r.session_id.as_deref(), Some(SESSION_ID));
        assert_eq!(r.duration_ms, Some(524));
        let u = o.usage();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.turns, u.cost_usd),
            (39284, 24, 2, 0.0)
        );
        assert_eq!(o.session_id(), Some(SESSION_ID));
        assert_eq!(
            o.final_message().as_deref(),
            Some("I checked the first unchecked criterion in RALPH_TASK.md.")
        );
        assert_no_signal(&o, "a session");
    }

    #[test]
    fn cached_tokens_are_not_counted_twice() {
        let o = observe(
            Format::of(&Qwen),
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"ok","usage":{"input_tokens":1000,"output_tokens":50,"cache_read_input_tokens":800,"total_tokens":1050}}"#,
        );
        let u = o.usage();
        assert_eq!(
            (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
            (200, 800, 50)
        );
    }

    #[test]
    fn a_quota_is_a_usage_limit_with_its_exact_reset() {
        let o = failed(&Qwen, &lines(QUOTA), "");
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "usage_limit");
        assert_eq!(limit.reset_at, Some(at("2026-12-03T10:30:52Z")));
        assert!(
            limit.message.starts_with(
                "Quota exhausted: Your free quota is exhausted; it will reset at 2026-12-03T10:30:52Z."
            ),
            "{}",
            limit.message
        );
        assert!(o.result().unwrap().is_error);
        assert!(o.auth_error().is_none());
    }

    #[test]
    fn an_old_versions_successful_api_error_is_the_error_it_is() {
        // 0.15.10: `subtype:"success"`, `is_error:false`, exit 0 — yet a 429 with its reset.
        let o = observe(Format::of(&Qwen), &lines(OLD_QUOTA));
        let limit = o.limit().expect("a limit, though the result said success");
        assert_eq!(limit.kind, "rate_limit");
        assert_eq!(limit.reset_at, Some(at("2026-12-03T10:45:47Z")));
        assert!(limit.message.starts_with("[API Error: 429 Your free quota"));
        let r = o.result().unwrap();
        assert!(r.is_error);
        assert_eq!(r.subtype, "success");
        assert_eq!(r.api_error_status, Some(429));
        // Its 401: a login failure.
        let o = observe(Format::of(&Qwen), &lines(AUTH_OLD));
        assert_eq!(
            o.auth_error(),
            Some("[API Error: 401 Incorrect API key provided.]")
        );
        assert!(o.limit().is_none());
        assert!(o.result().unwrap().is_error);
    }

    #[test]
    fn login_failures() {
        let o = failed(&Qwen, &format!("{AUTH_NEW}\n"), "");
        assert_eq!(
            o.auth_error(),
            Some("[API Error: 401 Incorrect API key provided.]")
        );
        assert_eq!(o.result().unwrap().api_error_status, Some(401));
        assert!(o.limit().is_none());
        // No key in the environment: no auth type.
        let o = failed(
            &Qwen,
            r#"{"type":"result","subtype":"error_during_execution","uuid":"1e6becbe-0265-4200-a8e9-a4dc4e9dfa7f","session_id":"a2799989-6c29-4987-8171-6f3640ea3583","is_error":true,"duration_ms":0,"duration_api_ms":0,"num_turns":0,"usage":{"input_tokens":0,"output_tokens":0},"permission_denials":[],"error":{"message":"No auth type is selected. Please configure an auth type (e.g. via settings or `--auth-type`) before running in non-interactive mode."}}"#,
            "",
        );
        assert!(
            o.auth_error()
                .unwrap()
                .starts_with("No auth type is selected.")
        );
    }

    #[test]
    fn an_api_error_the_model_merely_mentions_is_its_work() {
        // The model wrote it (it spent tokens): its message, and the result repeating it.
        for text in [
            "[API Error: 429 Your free quota is exhausted; it will reset at 2026-12-03T10:45:47Z.]",
            "[API Error: 401 Incorrect API key provided.]",
            "The log shows [API Error: 429 Rate limit exceeded] twice; I added a backoff.",
            "Quota exhausted: handled in src/quota.rs",
        ] {
            let o = observe(Format::of(&Qwen), &written(text));
            assert_no_signal(&o, text);
            assert!(!o.result().unwrap().is_error, "{text}");
            assert_eq!(o.final_message().as_deref(), Some(text));
            // Nor when the attempt then failed.
            let o = failed(&Qwen, &written(text), "");
            assert_no_signal(&o, text);
        }
        // Qwen's own error message is shown, but the model's last message stays the agent's.
        let mut stream = written("Checked the first box.");
        stream.push_str(QUOTA[0]);
        stream.push('\n');
        let o = observe(Format::of(&Qwen), &stream);
        assert!(o.activity().unwrap().starts_with("Quota exhausted: "));
        assert_eq!(o.final_message().as_deref(), Some("Checked the first box."));
    }

    /// The model's final message in two text blocks, the first opening with Qwen's error
    /// prefix: the result (the blocks joined) is its work, never a limit; Qwen's own unwritten
    /// error after a message the model wrote so is still the error.
    #[test]
    fn a_model_message_in_blocks_opening_with_an_api_error_is_its_work() {
        let api = "[API Error: 429 quota exhausted; it will reset at 2099-01-01T00:00:00Z.]";
        let tail = " That is what the log said; I added a backoff.";
        for joined in [format!("{api}{tail}"), format!("{api}\n{tail}")] {
            let message = serde_json::json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": api}, {"type": "text", "text": tail}], "usage": {"input_tokens": 900, "output_tokens": 40}}});
            let result = serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, "result": joined, "usage": {"input_tokens": 900, "output_tokens": 40}});
            let stream = format!("{message}\n{result}\n");
            let o = observe(Format::of(&Qwen), &stream);
            assert_no_signal(&o, &joined);
            assert!(!o.result().unwrap().is_error, "{joined}");
            // Then Qwen's own error, reported as a success: the limit.
            let mut stream = format!("{message}\n");
            stream.push_str(&lines(OLD_QUOTA));
            let o = observe(Format::of(&Qwen), &stream);
            assert!(o.limit().is_some(), "{stream}");
        }
    }

    #[test]
    fn an_exit_0_attempt_is_never_a_limit_from_its_text() {
        for text in TALK {
            let o = observe(Format::of(&Qwen), &written(text));
            assert_no_signal(&o, text);
        }
        // Its stderr said it was retrying, then it answered and exited 0.
        let mut o = observer(Format::of(&Qwen));
        o.feed(
            b"Retrying in 60s (attempt 1/10): [API Error: 429 Rate limit exceeded (stand-in). Please retry later.]\n",
            true,
        );
        o.feed(SESSION[5].as_bytes(), false);
        o.feed(b"\n", false);
        o.finish(Some(0));
        assert_no_signal(&o, "exit 0");
    }

    #[test]
    fn a_retry_it_never_got_past_is_a_limit() {
        // Stopped (by ralph's timeout) while waiting to retry: a rate limit.
        let mut o = observer(Format::of(&Qwen));
        o.feed(format!("{}\n{RETRY}\n", SESSION[0]).as_bytes(), false);
        assert_eq!(o.retrying().unwrap().message, "API retry 1/10 in 60s");
        assert!(o.limit().is_none());
        o.finish(None);
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
        // Got past it: not a limit.
        let o = observe(Format::of(&Qwen), &format!("{RETRY}\n{}", lines(SESSION)));
        assert_no_signal(&o, "retried, then done");
        // Its stderr line, when the attempt failed.
        let o = failed(
            &Qwen,
            "",
            "Retrying in 60s (attempt 1/10): [API Error: 429 Rate limit exceeded (stand-in). Please retry later.]\nOperation cancelled.\n",
        );
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
    }

    #[test]
    fn exact_reset_times() {
        for (text, want) in [
            (
                "it will reset at 2026-12-03T10:30:52Z.",
                Some("2026-12-03T10:30:52Z"),
            ),
            (
                "will reset at 2026-12-03T12:30:52+02:00",
                Some("2026-12-03T10:30:52Z"),
            ),
            (
                "quota reset at 2026-12-03 10:30:52 UTC.",
                Some("2026-12-03T10:30:52Z"),
            ),
            (
                "Reset at 2026-12-03 10:30:52Z",
                Some("2026-12-03T10:30:52Z"),
            ),
            ("will reset at 2026-12-03 10:30:52", None),
            ("will reset at noon", None),
            ("reset at", None),
        ] {
            assert_eq!(exact_reset(text), want.map(at), "{text}");
        }
        assert_eq!(api_error_status("[API Error: 429 x]"), Some(429));
        assert_eq!(api_error_status(" [API Error: 4291]"), None);
        assert_eq!(api_error_status("API Error: 429"), None);
    }
}
