//! Claude Code: `claude -p {prompt} --dangerously-skip-permissions --output-format stream-json
//! --verbose` (as root it needs `IS_SANDBOX=1`), and its stream: the session, tool calls, the
//! final `result` (cost, tokens, turns, `is_error`), `rate_limit_event`s, `api_retry`s and the
//! synthetic API-error messages that report limits and login failures (`AGENT-CLIS.md`).

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::Value;

use super::cli::{Cli, Launch, Output, Part, literal};
use super::findings::{Findings, tool_results};
use super::output::{AgentResult, LimitKind, Usage};
use super::reset::epoch;
use super::signal::{Patterns, Scope};
use super::text::{as_f64, as_u64, bounded};

/// The messages Claude prints for limits and login failures.
const PATTERNS: Patterns = Patterns {
    // `You've hit your session limit · resets 12:43pm (UTC)`, `… weekly limit`, `… Opus limit`.
    hit_your_limit: true,
    // The older `5-hour limit reached ∙ resets 3pm`.
    limit_reached_resets: true,
    limits: &[
        // The old `Claude AI usage limit reached|<epoch>`.
        ("usage limit reached", LimitKind::UsageLimit),
        ("request rejected (429)", LimitKind::RateLimit),
        ("api error: 429", LimitKind::RateLimit),
        ("api error: 529", LimitKind::Overloaded),
        ("529 overloaded", LimitKind::Overloaded),
        ("overloaded_error", LimitKind::Overloaded),
    ],
    auth: &[
        "invalid api key",
        "not logged in",
        "please run /login",
        "oauth token has expired",
        "api error: 401",
        "failed to authenticate",
        "authentication_error",
    ],
    retries: &[],
};

/// Claude Code.
#[derive(Debug)]
pub(crate) struct Claude;

impl Cli for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g @anthropic-ai/claude-code")
    }

    fn launch(&self) -> Launch {
        let tail = [
            "--dangerously-skip-permissions",
            "--output-format",
            "stream-json",
            "--verbose",
        ];
        let mut args = vec![
            Part::Literal("-p".into()),
            Part::Template("{prompt}".into()),
        ];
        args.extend(literal(&tail));
        let mut stdin_args = literal(&["-p"]);
        stdin_args.extend(literal(&tail));
        let mut launch = Launch {
            args,
            stdin_args: Some(stdin_args),
            ..Launch::default()
        };
        if nix::unistd::Uid::effective().is_root() {
            launch.env.push(("IS_SANDBOX".into(), "1".into()));
            launch.notes.push(
                "running as root: setting IS_SANDBOX=1 so claude accepts --dangerously-skip-permissions"
                    .into(),
            );
        }
        launch
    }

    fn output(&self) -> Output {
        Output::JsonLines
    }

    fn skips(&self, line: &[u8]) -> bool {
        // Tool results: huge, and never a signal.
        line.starts_with(br#"{"type":"user""#)
    }

    fn supersedable(&self, line: &[u8]) -> bool {
        // A message of the agent, not an API error: `assistant` (below) reads such a line for
        // its text or tool call only.
        line.starts_with(br#"{"type":"assistant""#) && !may_be_api_error(line)
    }

    fn settles(&self, line: &[u8]) -> bool {
        // The message's first content block is a text beginning with a visible character, as
        // Claude Code writes it (compact JSON whose first `content` is the message's, one
        // object a line): reading it sets the message and the activity. A line cut short does
        // not end its object.
        const TEXT: &[u8] = br#""content":[{"type":"text","text":""#;
        if !line.trim_ascii_end().ends_with(b"}") {
            return false;
        }
        static CONTENT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(br#""content":"#));
        let Some(at) = CONTENT.find(line) else {
            return false;
        };
        let rest = &line[at..];
        rest.starts_with(TEXT)
            && rest
                .get(TEXT.len())
                .is_some_and(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    }

    fn event(&self, v: &Value, _raw: &[u8], seen: &mut Findings) {
        match v["type"].as_str().unwrap_or("") {
            "system" => system(v, seen),
            "assistant" => assistant(v, seen),
            // Tool results: read only when rendering (`skips` keeps them from the observer).
            "user" => tool_results(v, seen),
            "rate_limit_event" => {
                let info = &v["rate_limit_info"];
                if info["status"].as_str() == Some("rejected") {
                    let kind = info["rateLimitType"].as_str().unwrap_or("rate_limit");
                    let message = format!("Claude usage limit reached ({kind})");
                    seen.set_activity(&message);
                    seen.set_limit(
                        LimitKind::from_word(kind),
                        &message,
                        epoch(&info["resetsAt"]),
                    );
                }
            }
            "result" => result(v, seen),
            _ => {}
        }
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }
}

/// `system` events: `init` (session, model) and `api_retry` (a request Claude retries: shown as
/// the activity whatever failed, a 401 as much as a 429; a rate limit is also the retry that ends
/// the attempt if nothing follows it).
fn system(v: &Value, seen: &mut Findings) {
    match v["subtype"].as_str().unwrap_or("") {
        "init" => seen.session_started(v["session_id"].as_str(), v["model"].as_str()),
        "api_retry" => {
            let status = as_u64(&v["error_status"]);
            let error = v["error"].as_str().unwrap_or("");
            let overloaded = status == Some(529) || error.contains("overloaded");
            let limited = overloaded || status == Some(429) || error.contains("rate_limit");
            let kind = if overloaded {
                LimitKind::Overloaded
            } else {
                LimitKind::RateLimit
            };
            let attempt = as_u64(&v["attempt"]).unwrap_or(0);
            let mut message = format!("API retry {attempt}");
            if let Some(max) = as_u64(&v["max_retries"]) {
                message.push_str(&format!("/{max}"));
            }
            let what = match (error.is_empty(), limited) {
                (false, _) => error,
                (true, true) => kind.as_str(),
                (true, false) => "API error",
            };
            let status = status.map_or_else(|| "?".to_owned(), |s| s.to_string());
            message.push_str(&format!(": {what} ({status})"));
            let next = as_u64(&v["retry_delay_ms"]).map_or_else(String::new, |ms| {
                format!(", next in {}s", ms.div_ceil(1000))
            });
            if limited {
                seen.set_activity_clean(&format!("Rate limited, retrying ({message}{next})"));
                seen.retry(kind, &message);
            } else {
                seen.set_activity_clean(&format!("Retrying ({message}{next})"));
            }
        }
        _ => {}
    }
}

/// An assistant message: its text or tool call as the activity. Only a synthetic API-error
/// message (`model: <synthetic>`, `isApiErrorMessage`, an `error` field) is read for signals.
fn assistant(v: &Value, seen: &mut Findings) {
    seen.progress();
    let message = &v["message"];
    let synthetic = message["model"].as_str() == Some("<synthetic>")
        || v["isApiErrorMessage"].as_bool() == Some(true)
        || v["error"].is_string();
    let read_text = |seen: &mut Findings, text: &str| {
        if text.trim().is_empty() {
            return;
        }
        seen.assistant_text(text);
        if synthetic {
            seen.scan(text, Scope::Error, &PATTERNS);
        }
    };
    if let Some(blocks) = message["content"].as_array() {
        for block in blocks {
            match block["type"].as_str() {
                Some("text") => read_text(seen, block["text"].as_str().unwrap_or("")),
                Some("tool_use") => {
                    let name = block["name"].as_str().unwrap_or("tool");
                    seen.tool_call(name, &block["input"]);
                }
                _ => {}
            }
        }
    } else if let Some(content) = message["content"].as_str() {
        read_text(seen, content);
    }
    // Claude Code marks a synthetic API-error message with the error's kind.
    let said = seen.last_text.clone().unwrap_or_default();
    match v["error"].as_str() {
        Some("rate_limit") if seen.limit().is_none() => {
            seen.set_limit(LimitKind::RateLimit, &said, None);
        }
        Some("authentication_failed") => {
            seen.auth(if said.is_empty() {
                "authentication failed"
            } else {
                &said
            });
        }
        _ => {}
    }
}

/// Whether an `assistant` line may be a synthetic API-error message: whether it holds one of
/// the markers `assistant` reads them by — `<synthetic>`, `isApiErrorMessage`, `"error"` — as
/// Claude Code writes them. Two vectorised passes, each looking closer only where it stops: at
/// a `<` (rare in JSON), and at `rror` (in both other markers). Measured faster than one
/// hand-written AVX2 pass for `<` and `rr`.
fn may_be_api_error(line: &[u8]) -> bool {
    static RROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"rror"));
    memchr::memchr_iter(b'<', line).any(|i| line[i..].starts_with(b"<synthetic>"))
        || RROR.find_iter(line).any(|i| {
            (i >= 2 && line[i - 2..].starts_with(br#""error""#))
                || (i >= 6 && line[i - 6..].starts_with(b"isApiErrorMessage"))
        })
}

/// The final `result`: cost, tokens, turns, and, when `is_error`, the limit or login failure
/// its status or text gives. A successful result's text is the agent's work, never a signal.
fn result(v: &Value, seen: &mut Findings) {
    seen.progress();
    let u = &v["usage"];
    let usage = Usage {
        input_tokens: as_u64(&u["input_tokens"]).unwrap_or(0),
        output_tokens: as_u64(&u["output_tokens"]).unwrap_or(0),
        cache_creation_input_tokens: as_u64(&u["cache_creation_input_tokens"]).unwrap_or(0),
        cache_read_input_tokens: as_u64(&u["cache_read_input_tokens"]).unwrap_or(0),
        cost_usd: as_f64(&v["total_cost_usd"]).unwrap_or(0.0),
        turns: as_u64(&v["num_turns"]).unwrap_or(0),
    };
    let subtype = v["subtype"].as_str().unwrap_or("").to_owned();
    let is_error = v["is_error"]
        .as_bool()
        .unwrap_or(!subtype.is_empty() && subtype != "success");
    let session_id = v["session_id"].as_str().map(str::to_owned);
    if session_id.is_some() {
        seen.session_id.clone_from(&session_id);
    }
    let status = as_u64(&v["api_error_status"]).and_then(|s| u16::try_from(s).ok());
    let text = v["result"].as_str().unwrap_or("");
    if is_error {
        match status {
            Some(429) => seen.set_limit(LimitKind::RateLimit, text, None),
            Some(529) => seen.set_limit(LimitKind::Overloaded, text, None),
            Some(401) => seen.auth(if text.is_empty() {
                "API error 401 (authentication)"
            } else {
                text
            }),
            _ => {}
        }
        seen.scan(text, Scope::Error, &PATTERNS);
    } else {
        // The run completed: whatever limit it met on the way did not end it.
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

#[cfg(test)]
mod tests {
    use chrono::{FixedOffset, TimeZone, Utc};

    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::stream::Observer;
    use crate::agent::testkit::*;

    const SESSION: &str = "4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01";

    #[test]
    fn api_errors_are_never_superseded() {
        let message = |tail: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"m","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"Working on it"}}]}}{tail}}}"#
            )
        };
        assert!(Claude.supersedable(message("").as_bytes()));
        for marker in [
            r#","error":"rate_limit""#,
            r#","isApiErrorMessage":true"#,
            r#","model":"<synthetic>""#,
        ] {
            assert!(!Claude.supersedable(message(marker).as_bytes()), "{marker}");
            // Wherever the marker falls in the line.
            for pad in 0..40 {
                let line = message(&format!(r#","pad":"{}"{marker}"#, "x".repeat(pad)));
                assert!(!Claude.supersedable(line.as_bytes()), "{marker} {pad}");
            }
        }
        // Words in the text are not markers; events of other kinds are not messages.
        assert!(
            Claude.supersedable(
                message(r#","text2":"an error, <b>API</b> errors: rror""#).as_bytes()
            )
        );
        assert!(!Claude.supersedable(br#"{"type":"result","result":"x"}"#));
        assert!(!Claude.supersedable(br#"{"type":"user","message":{}}"#));
    }

    proptest::proptest! {
        #[test]
        fn the_marker_scan_finds_what_a_plain_search_finds(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"<>\"erorsAEipyntchMga x".to_vec()),
                0..300,
            ),
            marker in proptest::sample::select(vec!["<synthetic>", "\"error\"", "isApiErrorMessage", ""]),
            at in proptest::prelude::any::<usize>(),
        ) {
            let mut line = bytes;
            let at = at % (line.len() + 1);
            line.splice(at..at, marker.bytes());
            let plain = [&b"<synthetic>"[..], b"\"error\"", b"isApiErrorMessage"]
                .iter()
                .any(|m| line.windows(m.len()).any(|w| w == *m));
            proptest::prop_assert_eq!(may_be_api_error(&line), plain);
        }
    }

    #[test]
    fn only_a_whole_message_with_a_visible_text_settles() {
        let line = |content: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"m","model":"claude-sonnet-4-5","content":[{content}]}},"session_id":"s"}}"#
            )
        };
        assert!(Claude.settles(line(r#"{"type":"text","text":"Done."}"#).as_bytes()));
        assert!(
            Claude.settles(
                line(
                    r#"{"type":"text","text":"Both"},{"type":"tool_use","name":"Bash","input":{}}"#
                )
                .as_bytes()
            )
        );
        for content in [
            r#"{"type":"text","text":" leading space"}"#,
            r#"{"type":"text","text":"\nleading newline"}"#,
            r#"{"type":"text","text":""}"#,
            r#"{"type":"thinking","thinking":"hmm"}"#,
            r#"{"type":"tool_use","name":"Write","input":{"content":[{"type":"text","text":"nested"}]}}"#,
        ] {
            assert!(!Claude.settles(line(content).as_bytes()), "{content}");
        }
        // Cut short.
        let whole = line(r#"{"type":"text","text":"Done."}"#);
        assert!(!Claude.settles(&whole.as_bytes()[..whole.len() - 1]));
        assert!(!Claude.settles(br#"{"type":"assistant","message":{"content":"a string"}}"#));
    }

    #[test]
    fn claude_session_activity_follows_the_stream() {
        let session = claude_session();
        let lines: Vec<&str> = session.lines().collect();
        let mut o = observer(Format::of(&Claude));
        let mut seen = Vec::new();
        for line in &lines {
            o.feed(line.as_bytes(), false);
            o.feed(b"\n", false);
            if o.take_activity_changed() {
                seen.push(o.activity().unwrap().to_owned());
            }
        }
        assert_eq!(
            seen,
            [
                "Starting: claude-sonnet-4-5-20250929",
                "I'll start by running the test suite.",
                "Bash: cargo test --quiet",
                "Edit: /work/repo/src/main.rs",
                "Fixed the failing test.",
            ]
        );
        assert!(!o.take_activity_changed());
    }

    #[test]
    fn claude_session_result() {
        let o = observe(Format::of(&Claude), &claude_session());
        let r = o.result().expect("result");
        assert!(!r.is_error);
        assert_eq!(r.subtype, "success");
        assert_eq!(r.api_error_status, None);
        assert_eq!(r.session_id.as_deref(), Some(SESSION));
        assert_eq!(
            r.text,
            "Fixed the failing test.\n<promise>COMPLETE</promise>"
        );
        assert_eq!(r.permission_denials, 1);
        assert_eq!(r.duration_ms, Some(18234));
        let expected = Usage {
            input_tokens: 1287,
            output_tokens: 913,
            cache_creation_input_tokens: 5120,
            cache_read_input_tokens: 48211,
            cost_usd: 0.08421,
            turns: 4,
        };
        assert_eq!(r.usage, expected);
        assert_eq!(o.usage(), expected);
        assert_eq!(o.session_id(), Some(SESSION));
        assert_eq!(
            o.final_message().as_deref(),
            Some("Fixed the failing test.\n<promise>COMPLETE</promise>")
        );
        assert!(o.limit().is_none());
        assert!(o.auth_error().is_none());
    }

    #[test]
    fn claude_without_a_result_falls_back_to_the_last_text() {
        let session = claude_session();
        let cut: Vec<&str> = session.lines().take(7).collect();
        let o = observe(Format::of(&Claude), &(cut.join("\n") + "\n"));
        assert!(o.result().is_none());
        assert_eq!(o.usage(), Usage::default());
        assert_eq!(
            o.final_message().as_deref(),
            Some("Fixed the failing test.\n<promise>COMPLETE</promise>")
        );
    }

    #[test]
    fn claude_error_result_with_success_subtype() {
        let line = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":500,"duration_ms":1204,"num_turns":1,"result":"API Error: 500 {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}","session_id":"s-1","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},"permission_denials":[],"terminal_reason":"error"}"#;
        let o = observe(Format::of(&Claude), &format!("{line}\n"));
        let r = o.result().unwrap();
        assert!(r.is_error);
        assert_eq!(r.subtype, "success");
        assert_eq!(r.api_error_status, Some(500));
        assert_eq!(r.permission_denials, 0);
        assert!(o.limit().is_none(), "a 500 is not a usage limit");
        assert!(o.auth_error().is_none());
    }

    #[test]
    fn claude_rate_limit_event_gives_the_reset_time() {
        let stream = [
            r#"{"type":"system","subtype":"init","session_id":"s-2","model":"claude-opus-4-1"}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1773140000,"rateLimitType":"five_hour"},"session_id":"s-2"}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"five_hour","overageStatus":"rejected"},"session_id":"s-2"}"#,
            r#"{"type":"assistant","message":{"id":"m","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"You've hit your session limit · resets 1:03pm (UTC)"}]},"session_id":"s-2","error":"rate_limit"}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"duration_ms":310,"num_turns":1,"result":"You've hit your session limit · resets 1:03pm (UTC)","session_id":"s-2","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"permission_denials":[]}"#,
        ]
        .join("\n");
        let o = observe(Format::of(&Claude), &stream);
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "session_limit");
        assert_eq!(limit.reset_at, Some(at("2026-03-10T13:03:00Z")));
        assert_eq!(
            limit.message,
            "You've hit your session limit · resets 1:03pm (UTC)"
        );
        assert!(o.result().unwrap().is_error);

        // The event alone.
        let o = observe(Format::of(&Claude), stream.lines().nth(2).unwrap());
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "five_hour");
        assert_eq!(
            limit.reset_at,
            Some(Utc.timestamp_opt(1773147780, 0).unwrap())
        );
        assert!(o.activity().unwrap().contains("limit"));

        // A warning is not a limit.
        let o = observe(Format::of(&Claude), stream.lines().nth(1).unwrap());
        assert!(o.limit().is_none());
    }

    #[test]
    fn a_successful_result_clears_a_limit_met_on_the_way() {
        let stream = [
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"seven_day_opus"}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Done.","total_cost_usd":0.01,"usage":{"input_tokens":1,"output_tokens":2},"permission_denials":[]}"#,
        ]
        .join("\n");
        let o = observe(Format::of(&Claude), &stream);
        assert!(o.limit().is_none());
    }

    #[test]
    fn claude_limit_texts_in_a_result() {
        let result = |text: &str| {
            format!(
                r#"{{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":{},"session_id":"s","total_cost_usd":0,"usage":{{}},"permission_denials":[]}}"#,
                serde_json::Value::from(text)
            )
        };
        let now = at("2026-09-20T18:00:00Z");
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "You've hit your weekly limit · resets Sep 24, 5pm (UTC)",
                "weekly_limit",
                Some("2026-09-24T17:00:00Z"),
            ),
            (
                "You've hit your Opus limit · resets 3:45pm",
                "opus_limit",
                Some("2026-09-21T15:45:00Z"),
            ),
            (
                "You've hit your limit · resets 6pm (UTC)",
                "usage_limit",
                // Exactly now (printed to the minute): lifting now, not tomorrow.
                Some("2026-09-20T18:00:00Z"),
            ),
            (
                "You've hit your session limit · resets in 47 minutes",
                "session_limit",
                Some("2026-09-20T18:47:00Z"),
            ),
            (
                "Claude AI usage limit reached|1790164200",
                "usage_limit",
                Some("2026-09-23T11:50:00Z"),
            ),
            (
                "API Error: Request rejected (429) · this may be a temporary rate limit",
                "rate_limit",
                None,
            ),
            ("API Error: 529 Overloaded", "overloaded", None),
            (
                "5-hour limit reached ∙ resets 9pm",
                "usage_limit",
                Some("2026-09-20T21:00:00Z"),
            ),
        ];
        for (text, kind, reset) in cases {
            let mut o = Observer::new(Format::of(&Claude), now)
                .with_local_zone(FixedOffset::east_opt(0).unwrap(), Some("UTC"));
            o.feed(result(text).as_bytes(), false);
            o.finish(Some(1));
            let limit = o.limit().unwrap_or_else(|| panic!("no limit in {text:?}"));
            assert_eq!(limit.kind, *kind, "{text}");
            assert_eq!(limit.reset_at, reset.map(at), "{text}");
            assert_eq!(limit.message, *text);
        }
    }

    #[test]
    fn claude_429_status_is_a_limit_even_without_a_known_text() {
        let line = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"Something new","usage":{},"permission_denials":[]}"#;
        let o = observe(Format::of(&Claude), line);
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
        assert_eq!(o.limit().unwrap().message, "Something new");
    }

    #[test]
    fn a_time_of_day_just_past_means_now_and_an_exact_event_time_is_kept() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-03-10T13:41:56Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let mut o = Observer::new(Format::of(&Claude), now)
            .with_local_zone(chrono::FixedOffset::east_opt(0).unwrap(), Some("UTC"));
        let exact = now.timestamp() + 3;
        o.feed(format!("{{\"type\":\"rate_limit_event\",\"rate_limit_info\":{{\"status\":\"rejected\",\"resetsAt\":{exact},\"rateLimitType\":\"five_hour\"}}}}\n").as_bytes(), false);
        o.feed(b"{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"result\":\"You've hit your session limit \xc2\xb7 resets 1:41pm (UTC)\",\"usage\":{},\"permission_denials\":[]}\n", false);
        o.finish(Some(1));
        let l = o.limit().expect("a limit");
        assert_eq!(
            l.reset_at.map(|t| t.timestamp()),
            Some(exact),
            "not tomorrow"
        );
    }

    #[test]
    fn api_retry_is_informational_until_it_ends_the_attempt() {
        let o = observe(
            Format::of(&Claude),
            &[
                r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":1200,"error_status":429,"error":"rate_limit","session_id":"s"}"#,
                r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","usage":{},"permission_denials":[]}"#,
            ]
            .join("\n"),
        );
        assert!(o.limit().is_none());
        let mut o = observer(Format::of(&Claude));
        o.feed(br#"{"type":"system","subtype":"api_retry","attempt":3,"max_retries":10,"error_status":529,"error":"overloaded_error"}"#, false);
        o.feed(b"\n", false);
        let retry = o.retrying().unwrap();
        assert_eq!(retry.message, "API retry 3/10: overloaded_error (529)");
        assert_eq!(retry.kind, LimitKind::Overloaded);
        assert!(o.limit().is_none());
        // Nothing followed it: it is what ended the attempt.
        o.finish(Some(1));
        assert_eq!(o.limit().unwrap().kind, LimitKind::Overloaded);
    }

    #[test]
    fn login_failures_in_an_error_result_or_a_synthetic_message() {
        let o = observe(
            Format::of(&Claude),
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"Invalid API key · Please run /login","usage":{},"permission_denials":[]}"#,
        );
        assert_eq!(o.auth_error(), Some("Invalid API key · Please run /login"));
        let o = observe(
            Format::of(&Claude),
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","usage":{},"permission_denials":[]}"#,
        );
        assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
        let o = observe(
            Format::of(&Claude),
            r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"OAuth token has expired · Please run /login"}]},"error":"authentication_failed"}"#,
        );
        assert_eq!(
            o.auth_error(),
            Some("OAuth token has expired · Please run /login")
        );
    }

    #[test]
    fn tool_results_and_ordinary_assistant_text_are_never_signals() {
        let o = observe(
            Format::of(&Claude),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"Not logged in · Please run /login\nYou've hit your session limit · resets 1pm (UTC)"}]}}"#,
        );
        assert_no_signal(&o, "tool result");
        let o = observe(
            Format::of(&Claude),
            r#"{"type":"assistant","message":{"model":"claude-sonnet-4-5","content":[{"type":"text","text":"You've hit your session limit · resets 1pm (UTC) is what Claude prints."}]}}"#,
        );
        assert_no_signal(&o, "assistant text");
        // Nor a successful result's text, short or long, even when the attempt then failed.
        for text in TALK {
            let line = serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "result": text, "usage": {}});
            let mut o = observer(Format::of(&Claude));
            o.feed(format!("{line}\n").as_bytes(), false);
            o.finish(Some(1));
            assert_no_signal(&o, text);
        }
    }

    #[test]
    fn a_limited_attempt_reports_its_cost_and_tokens() {
        let o = observe(
            Format::of(&Claude),
            &[
                r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"five_hour"}}"#,
                r#"{"type":"result","subtype":"success","is_error":true,"num_turns":3,"result":"You've hit your session limit · resets 1:03pm (UTC)","total_cost_usd":0.42,"usage":{"input_tokens":1200,"output_tokens":80,"cache_read_input_tokens":5000},"permission_denials":[]}"#,
            ]
            .join("\n"),
        );
        assert!(o.limit().is_some());
        let u = o.usage();
        assert_eq!(
            (
                u.cost_usd,
                u.input_tokens,
                u.output_tokens,
                u.cache_read_input_tokens,
                u.turns
            ),
            (0.42, 1200, 80, 5000, 3)
        );
    }
}
