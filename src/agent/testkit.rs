//! Test helpers shared by the observer's and the CLIs' tests: a fixed clock and zone, attempts
//! that exited 0 or failed.

use chrono::{DateTime, FixedOffset, Utc};

use super::cli::{Cli, Format};
use super::stream::Observer;

pub(crate) fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

pub(crate) fn utc_now() -> DateTime<Utc> {
    at("2026-03-10T09:00:00Z")
}

/// An observer in a known zone (UTC, named `Etc/UTC`) so no test depends on the machine.
pub(crate) fn observer(format: Format) -> Observer {
    observer_at(format, utc_now())
}

pub(crate) fn observer_at(format: Format, now: DateTime<Utc>) -> Observer {
    Observer::new(format, now).with_local_zone(FixedOffset::east_opt(0).unwrap(), Some("Etc/UTC"))
}

/// An attempt that printed `stdout` and exited 0.
pub(crate) fn observe(format: Format, stdout: &str) -> Observer {
    let mut o = observer(format);
    o.feed(stdout.as_bytes(), false);
    o.finish(Some(0));
    o
}

/// An attempt of `cli` (as its preset runs it) whose last lines were `stdout` and `stderr`, and
/// that exited 1.
pub(crate) fn failed(cli: &'static dyn Cli, stdout: &str, stderr: &str) -> Observer {
    failed_at(cli, utc_now(), stdout, stderr)
}

pub(crate) fn failed_at(
    cli: &'static dyn Cli,
    now: DateTime<Utc>,
    stdout: &str,
    stderr: &str,
) -> Observer {
    let mut o = observer_at(Format::of(cli), now);
    o.feed(stdout.as_bytes(), false);
    o.feed(stderr.as_bytes(), true);
    o.finish(Some(1));
    o
}

/// What an agent at work may well print: prose, code and logs about rate limiters, quotas and
/// login pages, and every real CLI message quoted as text.
pub(crate) const TALK: &[&str] = &[
    "clients that hit the rate limit now get a 429",
    "Not logged in users are redirected to /login",
    "You've hit your limit · resets 3pm (UTC)",
    "You've hit your session limit · resets 12:43pm (UTC)",
    "You've hit the rate limit for this model.",
    "API Error: Request rejected (429) · this may be a temporary rate limit",
    "API Error: 529 Overloaded",
    "No remaining quota for premium requests",
    "You've hit your usage limit. Try again at 3:28 PM.",
    "usage_limit_reached",
    "exceeded retry limit, last status: 429 Too Many Requests",
    "Attempt 2 failed with status 429. Retrying with backoff...",
    "Reconnecting... 2/5 (unexpected status 429 Too Many Requests)",
    "Invalid API key · Please run /login",
    "Not logged in · Please run /login",
    "Error: No authentication information found.",
    "API key not valid. Please pass a valid API key.",
    "ERROR: unexpected status 401 Unauthorized",
];

/// No limit, retry or login failure was seen.
pub(crate) fn assert_no_signal(o: &Observer, what: &str) {
    assert!(o.limit().is_none(), "{what}: {:?}", o.limit());
    assert!(o.retrying().is_none(), "{what}: {:?}", o.retrying());
    assert!(o.auth_error().is_none(), "{what}: {:?}", o.auth_error());
}

/// A Claude `--output-format stream-json --verbose` session, as AGENT-CLIS.md describes it.
pub(crate) fn claude_session() -> String {
    [
        r#"{"type":"system","subtype":"init","cwd":"/work/repo","session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","tools":["Task","Bash","Glob","Grep","Read","Edit","Write","TodoWrite"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.197","uuid":"0e3c"}"#,
        r#"{"type":"assistant","message":{"id":"msg_01A","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll start by running the test suite.\nThen fix what fails."}],"stop_reason":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":3120,"cache_read_input_tokens":11890,"output_tokens":8}},"parent_tool_use_id":null,"session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","uuid":"1a"}"#,
        r#"{"type":"assistant","message":{"id":"msg_01A","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_01X","name":"Bash","input":{"command":"cargo test --quiet","description":"Run the tests"}}],"stop_reason":null,"usage":{"input_tokens":4,"output_tokens":8}},"parent_tool_use_id":null,"session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","uuid":"1b"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01X","type":"tool_result","content":"running 3 tests\n...\ntest result: FAILED. 2 passed; 1 failed","is_error":true}]},"parent_tool_use_id":null,"session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","uuid":"2a"}"#,
        r#"{"type":"assistant","message":{"id":"msg_01B","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_01Y","name":"Edit","input":{"file_path":"/work/repo/src/main.rs","old_string":"a","new_string":"b"}}],"stop_reason":null,"usage":{"input_tokens":4,"output_tokens":8}},"parent_tool_use_id":null,"session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","uuid":"3a"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01Y","type":"tool_result","content":"Claude requested permissions to write to /work/repo/src/main.rs, but you haven't granted it yet.","is_error":true}]},"session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","uuid":"3b"}"#,
        r#"{"type":"assistant","message":{"id":"msg_01C","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Fixed the failing test.\n<promise>COMPLETE</promise>"}],"stop_reason":"end_turn","usage":{"input_tokens":4,"output_tokens":30}},"parent_tool_use_id":null,"session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","uuid":"4a"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":18234,"duration_api_ms":15012,"num_turns":4,"result":"Fixed the failing test.\n<promise>COMPLETE</promise>","session_id":"4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01","total_cost_usd":0.08421,"usage":{"input_tokens":1287,"cache_creation_input_tokens":5120,"cache_read_input_tokens":48211,"output_tokens":913,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{"claude-sonnet-4-5-20250929":{"inputTokens":1287,"outputTokens":913,"costUSD":0.08421}},"permission_denials":[{"tool_name":"Edit","tool_use_id":"toolu_01Y","tool_input":{"file_path":"/work/repo/src/main.rs"}}],"terminal_reason":"completed","uuid":"5a"}"#,
    ]
    .join("\n")
        + "\n"
}

/// A Claude attempt that ended on its session limit.
pub(crate) fn limit_session() -> String {
    [
        r#"{"type":"system","subtype":"init","session_id":"s-3","model":"claude-opus-4-1"}"#,
        r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"error_status":429,"error":"rate_limit"}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"five_hour"}}"#,
        r#"{"type":"result","subtype":"success","is_error":true,"result":"You've hit your session limit · resets 1:03pm (UTC)","usage":{},"permission_denials":[]}"#,
    ]
    .join("\n")
}
