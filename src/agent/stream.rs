//! An incremental observer of an agent's output (SPEC §6, §9): the live activity, the final result,
//! token usage and cost, usage/rate limits and authentication errors, from arbitrary chunks.
//!
//! ralph relays the agent's stdout and stderr in whatever chunks the pipes deliver; [`Observer`]
//! splits them into lines itself (a line is capped at [`MAX_LINE`] bytes, the excess dropped), so
//! memory stays bounded whatever the volume. Claude's `stream-json`, Codex's `exec --json` and
//! Copilot's `--output-format json` events are read leniently (as `serde_json::Value`, following
//! the shapes in `AGENT-CLIS.md`); anything else is plain text. Nothing here panics, whatever the
//! input.
//!
//! Limits and login failures come only from real signals (SPEC §6): the structured events and
//! error fields of the JSON formats, and, when the attempt exited non-zero (or a signal ended
//! it), the last plain lines it printed: the last [`FAILED_TAIL_LINES`] non-empty lines of
//! stdout and of stderr, each cut to [`FAILED_TAIL_LINE_BYTES`]. Plain output is never scanned
//! while it streams, and nothing an attempt that exited 0 printed as plain text counts: an agent
//! writing about rate limiters or login pages is doing its work.

use std::time::Duration;

use chrono::{DateTime, Datelike, FixedOffset, Local, NaiveDate, NaiveTime, Offset, TimeZone, Utc};
use serde_json::Value;

/// The longest line kept; the rest of a longer line is dropped.
pub const MAX_LINE: usize = 1024 * 1024;
/// How many characters of a line the activity shows.
const ACTIVITY_CHARS: usize = 120;
/// Enough bytes of a line for [`ACTIVITY_CHARS`] characters of any width, and one more.
const ACTIVITY_BYTES: usize = 4 * ACTIVITY_CHARS + 4;
/// How much plain stdout is kept for [`Observer::final_message`].
const TAIL_BYTES: usize = 64 * 1024;
/// How much of a message a [`Limit`] or an authentication error carries.
const MESSAGE_CHARS: usize = 400;
/// A plain-text signal must start within this many bytes of its line.
const SIGNAL_WINDOW: usize = 200;
/// How many of the last non-empty plain lines of each stream (stdout, stderr) a failed attempt
/// is judged by.
pub const FAILED_TAIL_LINES: usize = 20;
/// How much of each of those lines is kept (the rest is dropped): with both streams, at most
/// 2 × 20 × 2 KiB = 80 KiB whatever the volume.
pub const FAILED_TAIL_LINE_BYTES: usize = 2048;

/// What an agent writes on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `claude --output-format stream-json --verbose`.
    ClaudeStreamJson,
    /// `codex exec --json`.
    CodexJson,
    /// `copilot --output-format json`.
    CopilotJson,
    /// Anything else: plain text.
    Text,
}

/// The format each preset produces: claude → ClaudeStreamJson; others → Text (the presets do not
/// ask copilot/codex for JSON yet); custom → Text.
pub fn format_for(preset: &str) -> Format {
    match preset {
        "claude" => Format::ClaudeStreamJson,
        _ => Format::Text,
    }
}

/// The shortest backoff, whatever `--limit-backoff` says (SPEC §6): a zero base must never make
/// ralph re-run a limited agent in a tight loop.
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);

/// Backoff when a limit gives no reset time: attempt 1 → `base` (at least [`MIN_BACKOFF`]),
/// doubling, capped at 30 min.
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    const CAP: Duration = Duration::from_secs(30 * 60);
    let doublings = attempt.saturating_sub(1).min(16);
    base.max(MIN_BACKOFF)
        .saturating_mul(1 << doublings)
        .min(CAP)
}

/// Tokens and cost; zero when unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Input tokens not read from the cache (Codex's figure has its cached tokens taken out).
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cost_usd: f64,
    pub turns: u64,
}

impl Usage {
    /// Adds another usage to this one (for totals across iterations).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
        self.cost_usd += other.cost_usd;
        self.turns = self.turns.saturating_add(other.turns);
    }

    /// All tokens, cached or not.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }
}

/// The agent's own account of how the run ended (Claude's `result` event, Copilot's `result`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentResult {
    /// Test this, not `subtype`: an API error still says `subtype: "success"`.
    pub is_error: bool,
    pub subtype: String,
    pub api_error_status: Option<u16>,
    pub session_id: Option<String>,
    /// The final text (Claude's `result`; Copilot: its last assistant message).
    pub text: String,
    pub permission_denials: usize,
    pub duration_ms: Option<u64>,
    pub usage: Usage,
}

/// A usage or rate limit reported by the agent: the attempt is not an iteration; ralph waits until
/// `reset_at` (or [`backoff`]) and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// When the limit lifts, when the agent said so in a form that could be read.
    pub reset_at: Option<DateTime<Utc>>,
    /// `rate_limit`, `usage_limit`, `session_limit`, `weekly_limit`, `opus_limit`,
    /// `premium_quota`, `overloaded`, or Claude's `rateLimitType` (`five_hour`, `seven_day`, …).
    pub kind: String,
    /// What the agent said, one line, shortened.
    pub message: String,
}

/// Splits one stream into lines, keeping at most [`MAX_LINE`] bytes of a line.
#[derive(Debug, Default)]
struct LineBuf {
    buf: Vec<u8>,
}

impl LineBuf {
    fn append(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// The last non-empty plain lines of one stream, each with its arrival number, so the two
/// streams can be read back in the order they were printed.
#[derive(Debug, Default)]
struct LastLines {
    lines: std::collections::VecDeque<(u64, Vec<u8>)>,
}

impl LastLines {
    fn push(&mut self, seq: u64, line: &[u8]) {
        let line = &line[..line.len().min(FAILED_TAIL_LINE_BYTES)];
        let mut kept = if self.lines.len() >= FAILED_TAIL_LINES {
            self.lines
                .pop_front()
                .map(|(_, buf)| buf)
                .unwrap_or_default()
        } else {
            Vec::with_capacity(line.len())
        };
        kept.clear();
        kept.extend_from_slice(line);
        self.lines.push_back((seq, kept));
    }
}

/// Where a text to be scanned for limit and login messages came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// A field the agent uses for errors: a signal anywhere in it counts.
    Error,
    /// A plain output line (or a text that is not an error): a signal must open the line.
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Limit,
    /// A rate limit the agent is retrying by itself: informational until it proves final.
    Retry,
    Auth,
}

#[derive(Debug)]
struct Signal {
    class: Class,
    kind: String,
    /// Byte offset of the signal in the scanned text.
    at: usize,
}

/// Watches one attempt's output. Feed it every chunk, call [`Observer::finish`] at the end.
#[derive(Debug)]
pub struct Observer {
    format: Format,
    now: DateTime<Utc>,
    /// The local time zone (offset, IANA name), for times printed without a zone; detected on
    /// first use unless set by [`Observer::with_local_zone`].
    zone: Option<(FixedOffset, Option<String>)>,
    out: LineBuf,
    err: LineBuf,
    scratch: Vec<u8>,
    activity: Option<String>,
    activity_changed: bool,
    /// The start of the last plain line, whose activity is set at the end of the chunk.
    activity_line: Vec<u8>,
    activity_pending: bool,
    result: Option<AgentResult>,
    /// Usage summed from streaming events (Codex turns, Copilot usage events).
    usage: Usage,
    /// Copilot: output tokens counted from `assistant.message`, used when no usage events come.
    message_output_tokens: u64,
    premium_requests: Option<f64>,
    limit: Option<Limit>,
    retrying: Option<Limit>,
    auth_error: Option<String>,
    session_id: Option<String>,
    /// The latest assistant message (JSON formats).
    last_text: Option<String>,
    /// The tail of plain stdout, control codes stripped.
    tail: Vec<u8>,
    /// The last plain lines of stdout and stderr, read for signals when the attempt failed.
    last_out: LastLines,
    last_err: LastLines,
    /// How many plain lines were kept so far (their order across the two streams).
    plain_lines: u64,
}

impl Observer {
    pub fn new(format: Format, now: DateTime<Utc>) -> Observer {
        Observer {
            format,
            now,
            zone: None,
            out: LineBuf::default(),
            err: LineBuf::default(),
            scratch: Vec::new(),
            activity: None,
            activity_changed: false,
            activity_line: Vec::new(),
            activity_pending: false,
            result: None,
            usage: Usage::default(),
            message_output_tokens: 0,
            premium_requests: None,
            limit: None,
            retrying: None,
            auth_error: None,
            session_id: None,
            last_text: None,
            tail: Vec::new(),
            last_out: LastLines::default(),
            last_err: LastLines::default(),
            plain_lines: 0,
        }
    }

    /// Sets the local time zone used for reset times printed without a zone (or in the named
    /// zone). By default it is the machine's: `Local`'s offset and the name from `TZ`,
    /// `/etc/timezone` or `/etc/localtime`.
    pub fn with_local_zone(mut self, offset: FixedOffset, name: Option<&str>) -> Observer {
        self.zone = Some((offset, name.map(str::to_owned)));
        self
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Feed a chunk of stdout (is_stderr=false) or stderr. Cheap when nothing is recognised.
    pub fn feed(&mut self, chunk: &[u8], is_stderr: bool) {
        let mut rest = chunk;
        while let Some(nl) = find_newline(rest) {
            let (line, after) = (&rest[..nl], &rest[nl + 1..]);
            rest = after;
            let pending = if is_stderr {
                &mut self.err
            } else {
                &mut self.out
            };
            if pending.buf.is_empty() {
                self.line(&line[..line.len().min(MAX_LINE)], is_stderr);
            } else {
                pending.append(line);
                let mut buf = std::mem::take(&mut pending.buf);
                self.line(&buf, is_stderr);
                buf.clear();
                if buf.capacity() > 64 * 1024 {
                    buf.shrink_to(64 * 1024);
                }
                let pending = if is_stderr {
                    &mut self.err
                } else {
                    &mut self.out
                };
                pending.buf = buf;
            }
        }
        if !rest.is_empty() {
            let pending = if is_stderr {
                &mut self.err
            } else {
                &mut self.out
            };
            pending.append(rest);
        }
        self.flush_activity();
    }

    /// Call when the attempt ended, with its exit code (`None` when a signal ended it): flushes
    /// a last partial line and, unless it exited 0, reads its last plain lines for a limit or a
    /// login failure.
    pub fn finish(&mut self, exit: Option<i32>) {
        for is_stderr in [false, true] {
            let pending = if is_stderr {
                &mut self.err
            } else {
                &mut self.out
            };
            let buf = std::mem::take(&mut pending.buf);
            if !buf.is_empty() {
                self.line(&buf, is_stderr);
            }
        }
        self.flush_activity();
        if exit != Some(0) {
            self.read_failed_tail();
        }
        // A rate limit the agent was still retrying when its output ended is what ended it.
        if self.limit.is_none()
            && let Some(notice) = self.retrying.take()
        {
            self.limit = Some(notice);
        }
    }

    pub fn activity(&self) -> Option<&str> {
        self.activity.as_deref()
    }

    /// Whether activity changed since the last call (for redraws).
    pub fn take_activity_changed(&mut self) -> bool {
        std::mem::take(&mut self.activity_changed)
    }

    pub fn result(&self) -> Option<&AgentResult> {
        self.result.as_ref()
    }

    /// Tokens + cost, zero when unknown.
    pub fn usage(&self) -> Usage {
        if self.format == Format::ClaudeStreamJson
            && let Some(r) = &self.result
        {
            return r.usage.clone();
        }
        let mut u = self.usage.clone();
        if u.output_tokens == 0 {
            u.output_tokens = self.message_output_tokens;
        }
        u
    }

    /// The usage/rate limit that ended this attempt, if any.
    pub fn limit(&self) -> Option<&Limit> {
        self.limit.as_ref()
    }

    /// A rate limit the agent is retrying by itself right now (Claude `api_retry`, Gemini
    /// `Attempt N failed with status 429`); becomes [`Observer::limit`] at [`Observer::finish`]
    /// when nothing else followed it.
    pub fn retrying(&self) -> Option<&Limit> {
        self.retrying.as_ref()
    }

    /// An authentication failure (`Invalid API key`, `Not logged in · Please run /login`, 401):
    /// the caller reports it and halts.
    pub fn auth_error(&self) -> Option<&str> {
        self.auth_error.as_deref()
    }

    /// The agent's session or thread id, once it said it.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Copilot's `usage.premiumRequests`, when its JSON result gave it.
    pub fn premium_requests(&self) -> Option<f64> {
        self.premium_requests
    }

    /// The agent's final message (Claude: result.result; else the tail of plain output) for
    /// promise detection.
    pub fn final_message(&self) -> Option<String> {
        if let Some(r) = &self.result
            && !r.text.trim().is_empty()
        {
            return Some(r.text.clone());
        }
        if let Some(t) = &self.last_text
            && !t.trim().is_empty()
        {
            return Some(t.clone());
        }
        let start = self.tail.len().saturating_sub(TAIL_BYTES);
        let text = String::from_utf8_lossy(&self.tail[start..]);
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }

    // ----- lines -----

    fn line(&mut self, line: &[u8], is_stderr: bool) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(first) = line.iter().position(|b| !b.is_ascii_whitespace()) else {
            return;
        };
        let body = &line[first..];
        if self.format != Format::Text && body[0] == b'{' {
            // Claude's tool results can be huge and never matter here.
            if self.format == Format::ClaudeStreamJson && body.starts_with(br#"{"type":"user""#) {
                self.progress();
                return;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(body) {
                if v.is_object() {
                    self.json(&v, body);
                    return;
                }
            } else if body.starts_with(b"{\"") {
                // A JSON event cut short (by the line cap): nothing to show.
                return;
            }
        }
        self.plain(line, is_stderr);
    }

    fn plain(&mut self, line: &[u8], is_stderr: bool) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        strip_controls(line, &mut scratch);
        let trimmed = scratch.trim_ascii();
        if !trimmed.is_empty() {
            if !is_stderr {
                self.push_tail(trimmed);
                self.progress();
            }
            // Only the last line of a chunk can show, so its activity is worked out once.
            self.activity_line.clear();
            self.activity_line
                .extend_from_slice(&trimmed[..trimmed.len().min(ACTIVITY_BYTES)]);
            self.activity_pending = true;
            let last = if is_stderr {
                &mut self.last_err
            } else {
                &mut self.last_out
            };
            last.push(self.plain_lines, trimmed);
            self.plain_lines += 1;
        }
        if scratch.capacity() > 64 * 1024 {
            scratch = Vec::new();
        }
        self.scratch = scratch;
    }

    fn push_tail(&mut self, line: &[u8]) {
        let line = &line[line.len().saturating_sub(TAIL_BYTES)..];
        self.tail.extend_from_slice(line);
        self.tail.push(b'\n');
        if self.tail.len() > 2 * TAIL_BYTES {
            let cut = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..cut);
        }
    }

    /// Output that shows the agent moved on: a retry it was waiting on succeeded.
    fn progress(&mut self) {
        self.retrying = None;
    }

    /// Sets the activity from the last plain line seen, if it is the latest thing seen.
    fn flush_activity(&mut self) {
        if std::mem::take(&mut self.activity_pending) {
            let line = std::mem::take(&mut self.activity_line);
            self.set_activity(&String::from_utf8_lossy(&line));
            self.activity_line = line;
        }
    }

    fn set_activity(&mut self, text: &str) {
        self.activity_pending = false;
        let text = first_line(text);
        if text.is_empty() {
            return;
        }
        let (head, cut) = cut_chars(text, ACTIVITY_CHARS);
        let same = match &self.activity {
            Some(a) if cut => {
                a.len() == head.len() + '…'.len_utf8() && a.starts_with(head) && a.ends_with('…')
            }
            Some(a) => a == head,
            None => false,
        };
        if same {
            return;
        }
        let a = self.activity.get_or_insert_with(String::new);
        a.clear();
        a.push_str(head);
        if cut {
            a.push('…');
        }
        self.activity_changed = true;
    }

    /// Sets the activity from a text that may hold newlines and control codes.
    fn set_activity_clean(&mut self, text: &str) {
        let line = first_line(text);
        let mut bytes = Vec::with_capacity(line.len().min(4 * ACTIVITY_CHARS));
        strip_controls(
            &line.as_bytes()[..line.len().min(8 * ACTIVITY_CHARS)],
            &mut bytes,
        );
        let clean = String::from_utf8_lossy(&bytes).into_owned();
        self.set_activity(clean.trim());
    }

    // ----- JSON events -----

    fn json(&mut self, v: &Value, raw: &[u8]) {
        match self.format {
            Format::ClaudeStreamJson => self.claude(v),
            Format::CodexJson => self.codex(v, raw),
            Format::CopilotJson => self.copilot(v, raw),
            Format::Text => {}
        }
    }

    fn claude(&mut self, v: &Value) {
        let ty = v["type"].as_str().unwrap_or("");
        match ty {
            "system" => match v["subtype"].as_str().unwrap_or("") {
                "init" => {
                    if let Some(id) = v["session_id"].as_str() {
                        self.session_id = Some(id.to_owned());
                    }
                    match v["model"].as_str() {
                        Some(model) => self.set_activity_clean(&format!("Starting: {model}")),
                        None => self.set_activity("Starting"),
                    }
                }
                "api_retry" => {
                    let status = as_u64(&v["error_status"]);
                    let error = v["error"].as_str().unwrap_or("");
                    let rate = matches!(status, Some(429 | 529))
                        || error.contains("rate_limit")
                        || error.contains("overloaded");
                    if rate {
                        let kind = if status == Some(529) || error.contains("overloaded") {
                            "overloaded"
                        } else {
                            "rate_limit"
                        };
                        let attempt = as_u64(&v["attempt"]).unwrap_or(0);
                        let mut message = format!("API retry {attempt}");
                        if let Some(max) = as_u64(&v["max_retries"]) {
                            message.push_str(&format!("/{max}"));
                        }
                        message.push_str(&format!(
                            ": {} ({})",
                            if error.is_empty() { kind } else { error },
                            status.map_or_else(|| "?".to_owned(), |s| s.to_string())
                        ));
                        self.set_activity_clean(&format!("Rate limited, retrying ({message})"));
                        self.retrying = Some(Limit {
                            reset_at: None,
                            kind: kind.to_owned(),
                            message: clip(&message),
                        });
                    }
                }
                _ => {}
            },
            "assistant" => {
                self.progress();
                let message = &v["message"];
                let synthetic = message["model"].as_str() == Some("<synthetic>")
                    || v["isApiErrorMessage"].as_bool() == Some(true)
                    || v["error"].is_string();
                if let Some(blocks) = message["content"].as_array() {
                    for block in blocks {
                        match block["type"].as_str() {
                            Some("text") => {
                                let text = block["text"].as_str().unwrap_or("");
                                if text.trim().is_empty() {
                                    continue;
                                }
                                self.set_activity_clean(text);
                                self.last_text = Some(bounded(text));
                                if synthetic {
                                    self.scan(text, Scope::Error);
                                }
                            }
                            Some("tool_use") => {
                                let name = block["name"].as_str().unwrap_or("tool");
                                let activity = tool_activity(name, &block["input"]);
                                self.set_activity_clean(&activity);
                            }
                            _ => {}
                        }
                    }
                } else if let Some(text) = message["content"].as_str() {
                    self.set_activity_clean(text);
                    self.last_text = Some(bounded(text));
                    if synthetic {
                        self.scan(text, Scope::Error);
                    }
                }
                // Claude Code marks a synthetic API-error message with the error's kind.
                match v["error"].as_str() {
                    Some("rate_limit") if self.limit.is_none() => {
                        let text = self.last_text.clone().unwrap_or_default();
                        self.set_limit("rate_limit", &text, None);
                    }
                    Some("authentication_failed") if self.auth_error.is_none() => {
                        let text = self.last_text.clone().unwrap_or_default();
                        self.auth_error = Some(clip(if text.is_empty() {
                            "authentication failed"
                        } else {
                            &text
                        }));
                    }
                    _ => {}
                }
            }
            "rate_limit_event" => {
                let info = &v["rate_limit_info"];
                if info["status"].as_str() == Some("rejected") {
                    let kind = info["rateLimitType"].as_str().unwrap_or("rate_limit");
                    let reset_at = epoch(&info["resetsAt"]);
                    let message = format!("Claude usage limit reached ({kind})");
                    self.set_activity(&message);
                    self.set_limit(kind, &message, reset_at);
                }
            }
            "result" => self.claude_result(v),
            _ => {}
        }
    }

    fn claude_result(&mut self, v: &Value) {
        self.progress();
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
            self.session_id.clone_from(&session_id);
        }
        let status = as_u64(&v["api_error_status"]).and_then(|s| u16::try_from(s).ok());
        let text = v["result"].as_str().unwrap_or("").to_owned();
        let result = AgentResult {
            is_error,
            subtype,
            api_error_status: status,
            session_id,
            text: bounded(&text),
            permission_denials: v["permission_denials"].as_array().map_or(0, Vec::len),
            duration_ms: as_u64(&v["duration_ms"]),
            usage,
        };
        if is_error {
            match status {
                Some(429) => self.set_limit("rate_limit", &text, None),
                Some(529) => self.set_limit("overloaded", &text, None),
                Some(401) if self.auth_error.is_none() => {
                    self.auth_error = Some(clip(if text.is_empty() {
                        "API error 401 (authentication)"
                    } else {
                        &text
                    }));
                }
                _ => {}
            }
            self.scan(&text, Scope::Error);
        } else {
            // The run completed: whatever limit it met on the way did not end it, and what its
            // final text says is its work, not a signal.
            self.limit = None;
        }
        self.result = Some(result);
    }

    fn codex(&mut self, v: &Value, raw: &[u8]) {
        let ty = v["type"].as_str().unwrap_or("");
        match ty {
            "thread.started" => {
                if let Some(id) = v["thread_id"].as_str() {
                    self.session_id = Some(id.to_owned());
                }
            }
            "turn.completed" => {
                self.progress();
                let u = &v["usage"];
                let input = as_u64(&u["input_tokens"]).unwrap_or(0);
                let cached = as_u64(&u["cached_input_tokens"]).unwrap_or(0);
                let output = as_u64(&u["output_tokens"]).unwrap_or(0);
                self.usage.input_tokens = self
                    .usage
                    .input_tokens
                    .saturating_add(input.saturating_sub(cached));
                self.usage.cache_read_input_tokens =
                    self.usage.cache_read_input_tokens.saturating_add(cached);
                self.usage.output_tokens = self.usage.output_tokens.saturating_add(output);
                self.usage.turns = self.usage.turns.saturating_add(1);
            }
            "turn.failed" => {
                let message = v["error"]["message"].as_str().unwrap_or("");
                self.json_error(message, raw);
            }
            "error" => {
                let message = v["message"].as_str().unwrap_or("");
                self.json_error(message, raw);
            }
            "item.started" | "item.updated" | "item.completed" => {
                let item = &v["item"];
                let item_type = item["type"]
                    .as_str()
                    .or_else(|| item["item_type"].as_str())
                    .unwrap_or("");
                let started = ty == "item.started";
                match item_type {
                    "command_execution" if started => {
                        self.progress();
                        let command = codex_command(&item["command"]);
                        if !command.is_empty() {
                            self.set_activity_clean(&format!("$ {command}"));
                        }
                    }
                    "agent_message" => {
                        self.progress();
                        if let Some(text) = item["text"].as_str()
                            && !text.trim().is_empty()
                        {
                            self.set_activity_clean(text);
                            self.last_text = Some(bounded(text));
                        }
                    }
                    "file_change" => {
                        self.progress();
                        if let Some(changes) = item["changes"].as_array()
                            && let Some(path) = changes.first().and_then(|c| c["path"].as_str())
                        {
                            let more = changes.len() - 1;
                            let activity = if more > 0 {
                                format!("Edit: {path} (+{more})")
                            } else {
                                format!("Edit: {path}")
                            };
                            self.set_activity_clean(&activity);
                        }
                    }
                    "mcp_tool_call" if started => {
                        self.progress();
                        let server = item["server"].as_str().unwrap_or("mcp");
                        let tool = item["tool"].as_str().unwrap_or("tool");
                        self.set_activity_clean(&format!("{server}.{tool}"));
                    }
                    "web_search" if started => {
                        self.progress();
                        let query = item["query"].as_str().unwrap_or("");
                        self.set_activity_clean(&format!("Search: {query}"));
                    }
                    "error" => {
                        let message = item["message"].as_str().unwrap_or("");
                        self.json_error(message, raw);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn copilot(&mut self, v: &Value, raw: &[u8]) {
        let ty = v["type"].as_str().unwrap_or("");
        let data = if v["data"].is_object() { &v["data"] } else { v };
        match ty {
            "session.start" => {
                if let Some(id) = data["sessionId"].as_str() {
                    self.session_id = Some(id.to_owned());
                }
            }
            "assistant.message" => {
                self.progress();
                if let Some(tokens) = as_u64(&data["outputTokens"]) {
                    self.message_output_tokens = self.message_output_tokens.saturating_add(tokens);
                }
                if let Some(text) = data["content"].as_str()
                    && !text.trim().is_empty()
                {
                    self.set_activity_clean(text);
                    self.last_text = Some(bounded(text));
                }
            }
            "tool.execution_start" => {
                self.progress();
                let name = data["toolName"]
                    .as_str()
                    .or_else(|| data["name"].as_str())
                    .unwrap_or("tool");
                let args = &data["arguments"];
                let parsed;
                let args = match args.as_str() {
                    Some(s) => {
                        parsed = serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
                        &parsed
                    }
                    None => args,
                };
                let activity = tool_activity(name, args);
                self.set_activity_clean(&activity);
            }
            "assistant.usage" => {
                let pick = |keys: &[&str]| keys.iter().find_map(|k| as_u64(&data[*k])).unwrap_or(0);
                let u = Usage {
                    input_tokens: pick(&["inputTokens", "input_tokens"]),
                    output_tokens: pick(&["outputTokens", "output_tokens"]),
                    cache_creation_input_tokens: pick(&["cacheWriteTokens", "cache_write_tokens"]),
                    cache_read_input_tokens: pick(&["cacheReadTokens", "cache_read_tokens"]),
                    cost_usd: 0.0,
                    turns: 0,
                };
                self.usage.add(&u);
            }
            "assistant.turn_end" => {
                self.progress();
                self.usage.turns = self.usage.turns.saturating_add(1);
            }
            "session.error" => {
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
                self.set_activity_clean(&shown);
                if error_type.contains("auth") || status == Some(401) {
                    if self.auth_error.is_none() {
                        self.auth_error = Some(clip(&shown));
                    }
                } else if error_type.contains("rate")
                    || error_type.contains("quota")
                    || error_type.contains("limit")
                    || status == Some(429)
                {
                    self.set_limit("rate_limit", &shown, None);
                }
                self.json_error(message, raw);
            }
            "result" => {
                self.progress();
                if let Some(id) = v["sessionId"].as_str() {
                    self.session_id = Some(id.to_owned());
                }
                let exit = as_u64(&v["exitCode"]);
                let is_error = v["exitCode"].is_number() && exit != Some(0);
                let u = &v["usage"];
                self.premium_requests = as_f64(&u["premiumRequests"]).or(self.premium_requests);
                let result = AgentResult {
                    is_error,
                    subtype: if is_error { "error" } else { "success" }.to_owned(),
                    api_error_status: None,
                    session_id: self.session_id.clone(),
                    text: self.last_text.clone().unwrap_or_default(),
                    permission_denials: 0,
                    duration_ms: as_u64(&u["sessionDurationMs"]),
                    usage: self.usage(),
                };
                self.result = Some(result);
            }
            _ => {}
        }
    }

    /// An error message from a JSON event; the raw line may carry `usage_limit_reached` or a
    /// `resets_at` the message does not.
    fn json_error(&mut self, message: &str, raw: &[u8]) {
        if !message.trim().is_empty() {
            self.set_activity_clean(message);
        }
        self.scan(message, Scope::Error);
        let raw = String::from_utf8_lossy(&raw[..raw.len().min(16 * 1024)]);
        let lower = raw.to_ascii_lowercase();
        if lower.contains("usage_limit_reached") {
            let reset = self.parse_reset(&raw, &lower);
            let text = if message.trim().is_empty() {
                "usage_limit_reached"
            } else {
                message
            };
            self.set_limit("usage_limit", text, reset);
        } else if self.limit.as_ref().is_some_and(|l| l.reset_at.is_none())
            && let Some(reset) = self.parse_reset(&raw, &lower)
            && let Some(limit) = &mut self.limit
        {
            limit.reset_at = Some(reset);
        }
    }

    // ----- limit, retry and login signals -----

    /// The attempt failed: its last plain lines, in the order printed, may say why. A rate limit
    /// it was retrying counts unless stdout went on after it.
    fn read_failed_tail(&mut self) {
        let out = std::mem::take(&mut self.last_out);
        let err = std::mem::take(&mut self.last_err);
        let mut lines: Vec<(u64, bool, &[u8])> = out
            .lines
            .iter()
            .map(|(n, l)| (*n, false, l.as_slice()))
            .chain(err.lines.iter().map(|(n, l)| (*n, true, l.as_slice())))
            .collect();
        lines.sort_unstable_by_key(|(n, _, _)| *n);
        let earlier = self.retrying.take();
        for (_, is_stderr, line) in lines {
            let text = String::from_utf8_lossy(line);
            if !self.scan(&text, Scope::Plain) && !is_stderr {
                self.retrying = None;
            }
        }
        if self.retrying.is_none() {
            self.retrying = earlier;
        }
    }

    /// Looks for a limit, retry or login message in `text`; whether it found one.
    fn scan(&mut self, text: &str, scope: Scope) -> bool {
        if text.trim().is_empty() {
            return false;
        }
        let text = &text[..floor_char_boundary(text, 16 * 1024)];
        let lower = text.to_ascii_lowercase();
        let Some(signal) = find_signal(text, &lower, scope) else {
            return false;
        };
        let message = one_line(&text[line_start(text, signal.at)..]);
        match signal.class {
            Class::Limit => {
                let reset = self.parse_reset(&text[signal.at..], &lower[signal.at..]);
                self.set_limit(&signal.kind, &message, reset);
            }
            Class::Retry => {
                if self.limit.is_none() {
                    self.retrying = Some(Limit {
                        reset_at: None,
                        kind: signal.kind,
                        message: clip(&message),
                    });
                }
            }
            Class::Auth => {
                if self.auth_error.is_none() {
                    self.auth_error = Some(clip(&message));
                }
            }
        }
        true
    }

    /// Records a limit; a later one replaces an earlier one, keeping its reset time when the
    /// later one has none.
    fn set_limit(&mut self, kind: &str, message: &str, reset_at: Option<DateTime<Utc>>) {
        let earlier = self.limit.as_ref().and_then(|l| l.reset_at);
        let reset_at = match (reset_at, earlier) {
            // The same reset said twice (an exact event, then a text rounded to the minute):
            // keep the later, so the retry never lands before it.
            (Some(new), Some(old)) if (new - old).abs() < chrono::TimeDelta::minutes(2) => {
                Some(new.max(old))
            }
            (new, old) => new.or(old),
        };
        let message = one_line(message);
        let message = if message.is_empty() {
            kind.replace('_', " ")
        } else {
            message
        };
        self.retrying = None;
        self.limit = Some(Limit {
            reset_at,
            kind: kind.to_owned(),
            message: clip(&message),
        });
    }

    // ----- reset times -----

    /// Reads when a limit lifts from the text after the signal (`lower` is its ASCII-lowercase
    /// copy, same length).
    fn parse_reset(&mut self, text: &str, lower: &str) -> Option<DateTime<Utc>> {
        let now = self.now;
        // A JSON field, perhaps inside an escaped JSON string: `"resets_at":1773158400`.
        for key in ["resets_at", "resetsat", "reset_at", "resets_in_seconds"] {
            let mut from = 0;
            while let Some(p) = lower[from..].find(key) {
                let end = from + p + key.len();
                from = end;
                let value = text[end..].trim_start_matches(['\\', '"', ':', ' ']);
                let skipped = &text[end..text.len() - value.len()];
                if !skipped.contains(':') {
                    continue; // a word, not a field
                }
                let Some(n) = leading_u64(value) else {
                    continue;
                };
                if key == "resets_in_seconds" {
                    let secs = n.min(60 * 86_400) as i64;
                    return now.checked_add_signed(chrono::TimeDelta::try_seconds(secs)?);
                }
                if let Some(t) = epoch(&Value::from(n)) {
                    return Some(t);
                }
            }
        }
        // Claude's old `Claude AI usage limit reached|<epoch>`.
        if let Some(p) = lower.find("limit reached|")
            && let Some(t) = epoch_prefix(&text[p + 14..])
        {
            return Some(t);
        }
        for key in [
            "resets at ",
            "reset at ",
            "resets on ",
            "resets ",
            "try again at ",
            "try again in ",
            "try again on ",
            "try again ",
            "retry after ",
            "retry in ",
            "reset in ",
            "available again at ",
            "available again in ",
        ] {
            let mut from = 0;
            while let Some(p) = lower[from..].find(key) {
                let start = from + p + key.len();
                let mut when = &text[start..];
                if key.ends_with(" in ") {
                    when = &text[start - 3..];
                }
                if let Some(t) = self.parse_when(when) {
                    return Some(t);
                }
                from = start;
            }
        }
        None
    }

    /// `in 3 days 6 hours`, `12:43pm (UTC)`, `Sep 24, 5pm (UTC)`, `Aug 8th, 2026 12:30 PM`,
    /// `3:28 PM.`: the next such instant after `now`.
    fn parse_when(&mut self, s: &str) -> Option<DateTime<Utc>> {
        let s = s.trim_start();
        if let Some(rest) = strip_prefix_ci(s, "in ") {
            let secs = parse_duration(rest)?;
            return self
                .now
                .checked_add_signed(chrono::TimeDelta::try_seconds(secs)?);
        }
        let s = strip_prefix_ci(s, "at ")
            .or_else(|| strip_prefix_ci(s, "on "))
            .unwrap_or(s);
        let (date, rest) = match parse_month_day(s) {
            Some((date, rest)) => (Some(date), rest),
            None => (None, s),
        };
        let rest = rest.trim_start_matches([' ', ',']);
        let rest = strip_prefix_ci(rest, "at ").unwrap_or(rest);
        let (time, rest) = match parse_clock(rest) {
            Some((t, rest)) => (Some(t), rest),
            None => (None, rest),
        };
        if date.is_none() && time.is_none() {
            return None;
        }
        let offset = self.resolve_zone(zone_name(rest))?;
        instant(date, time, offset, self.now)
    }

    fn local_zone(&mut self) -> &(FixedOffset, Option<String>) {
        let now = self.now;
        self.zone.get_or_insert_with(|| {
            let offset = Local.offset_from_utc_datetime(&now.naive_utc()).fix();
            (offset, detect_zone_name())
        })
    }

    /// The offset of a zone named in a message: none named → local; UTC/GMT(+n); the local zone's
    /// own name. Another named zone cannot be resolved without a time zone database: `None`.
    fn resolve_zone(&mut self, name: Option<&str>) -> Option<FixedOffset> {
        let Some(name) = name else {
            return Some(self.local_zone().0);
        };
        if let Some(offset) = utc_offset(name) {
            return Some(offset);
        }
        let (offset, local) = self.local_zone();
        match local {
            Some(local) if local.eq_ignore_ascii_case(name) => Some(*offset),
            _ => None,
        }
    }
}

// ----- signal patterns -----

/// Limit messages, found anywhere in an error field or at the start of a plain line.
const LIMIT_PATTERNS: &[(&str, &str)] = &[
    ("hit the rate limit", "rate_limit"),
    ("no remaining quota", "premium_quota"),
    ("usage_limit_reached", "usage_limit"),
    ("usage limit reached", "usage_limit"),
    ("request rejected (429)", "rate_limit"),
    ("api error: 429", "rate_limit"),
    ("exceeded retry limit, last status: 429", "rate_limit"),
    // Copilot's text mode after its own retries: `Failed to get response from the AI model;
    // retried 5 times (…) Last error: 429 …`.
    ("last error: 429", "rate_limit"),
    ("api error: 529", "overloaded"),
    ("529 overloaded", "overloaded"),
    ("overloaded_error", "overloaded"),
];

/// Login failures.
const AUTH_PATTERNS: &[&str] = &[
    "invalid api key",
    "not logged in",
    "please run /login",
    "oauth token has expired",
    "no authentication information found",
    "api key not valid",
    "api error: 401",
    "unexpected status 401",
    "failed to authenticate",
    "authentication_error",
];

/// Words allowed before a login failure on a plain line (`Error:`, a log prefix, a timestamp).
const AUTH_PREFIX_WORDS: &[&str] = &[
    "error", "err", "fatal", "warn", "warning", "info", "api", "failed", "failure", "codex",
    "core", "exec", "copilot", "claude", "gemini", "cli",
];

fn find_signal(text: &str, lower: &str, scope: Scope) -> Option<Signal> {
    let plain = scope == Scope::Plain;
    let limit_ok = |at: usize| !plain || plain_limit_ok(text, at);
    // `You've hit your session limit`, `… weekly limit`, `… usage limit`, `… session rate limit`.
    let mut from = 0;
    while let Some(p) = lower[from..].find("hit your ") {
        let p = from + p;
        let after = p + "hit your ".len();
        let span = &lower[after..floor_char_boundary(lower, after + 40).max(after)];
        if let Some(q) = span.find("limit") {
            let words: Vec<&str> = span[..q]
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            if words.len() <= 3 {
                let at = opener_start(lower, p);
                if limit_ok(at) {
                    let kind = if words.is_empty() {
                        "usage_limit".to_owned()
                    } else {
                        format!("{}_limit", words.join("_"))
                    };
                    return Some(Signal {
                        class: Class::Limit,
                        kind,
                        at,
                    });
                }
            }
        }
        from = after;
    }
    for (pattern, kind) in LIMIT_PATTERNS {
        if let Some(p) = lower.find(pattern) {
            let at = opener_start(lower, p);
            if limit_ok(at) {
                return Some(Signal {
                    class: Class::Limit,
                    kind: (*kind).to_owned(),
                    at,
                });
            }
        }
    }
    // Claude's older `5-hour limit reached ∙ resets 3pm`.
    if let Some(p) = lower.find("limit reached")
        && lower[p..]
            .get(..40)
            .unwrap_or(&lower[p..])
            .contains("resets")
    {
        let at = p;
        if limit_ok(at) {
            return Some(Signal {
                class: Class::Limit,
                kind: "usage_limit".to_owned(),
                at,
            });
        }
    }
    for pattern in AUTH_PATTERNS {
        if let Some(p) = lower.find(pattern)
            && (!plain || plain_auth_ok(text, p))
        {
            return Some(Signal {
                class: Class::Auth,
                kind: "auth".to_owned(),
                at: p,
            });
        }
    }
    // Gemini: `Attempt 2 failed with status 429. Retrying with backoff...`.
    if let Some(p) = lower.find("failed with status 429")
        && let Some(a) = lower[..p].rfind("attempt ")
        && p - a < 24
        && limit_ok(a)
    {
        return Some(Signal {
            class: Class::Retry,
            kind: "rate_limit".to_owned(),
            at: a,
        });
    }
    // Codex: `Reconnecting... 2/5 (unexpected status 429 Too Many Requests …)`.
    if let Some(p) = lower.find("reconnecting")
        && lower[p..].contains("429")
        && limit_ok(p)
    {
        return Some(Signal {
            class: Class::Retry,
            kind: "rate_limit".to_owned(),
            at: p,
        });
    }
    None
}

/// Moves a match back over an opening `You've ` / `You’ve ` / `You have `.
fn opener_start(lower: &str, p: usize) -> usize {
    for opener in ["you've ", "you\u{2019}ve ", "you have ", "youve "] {
        if lower[..p].ends_with(opener) {
            return p - opener.len();
        }
    }
    p
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |n| n + 1)
}

/// A limit message on a plain line must open it (give or take a prefix such as `Error: ` or a
/// log header), and not be quoted (as in source code or docs an agent is reading).
fn plain_limit_ok(text: &str, at: usize) -> bool {
    let start = line_start(text, at);
    at - start <= SIGNAL_WINDOW && !text[start..at].contains(['"', '\'', '`', '\\'])
}

/// A login failure on a plain line halts the run, so only an error prefix may come before it.
fn plain_auth_ok(text: &str, at: usize) -> bool {
    if !plain_limit_ok(text, at) {
        return false;
    }
    let start = line_start(text, at);
    text[start..at]
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .all(|w| {
            w.chars().any(|c| c.is_ascii_digit())
                || AUTH_PREFIX_WORDS
                    .iter()
                    .any(|allowed| allowed.eq_ignore_ascii_case(w))
        })
}

// ----- time parsing -----

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// A calendar day without a time: (month, day, year if given).
type MonthDay = (u32, u32, Option<i32>);

/// `Sep 24`, `Aug 8th, 2026`, `September 24`: the day, rest.
fn parse_month_day(s: &str) -> Option<(MonthDay, &str)> {
    let word_len = s.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
    if word_len < 3 {
        return None;
    }
    let word = s[..word_len].to_ascii_lowercase();
    let month = MONTHS.iter().position(|m| word.starts_with(m))? as u32 + 1;
    let mut rest = s[word_len..].strip_prefix('.').unwrap_or(&s[word_len..]);
    rest = rest.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 2 {
        return None;
    }
    let day: u32 = rest[..digits].parse().ok()?;
    rest = &rest[digits..];
    for suffix in ["st", "nd", "rd", "th"] {
        if let Some(r) = strip_prefix_ci(rest, suffix) {
            rest = r;
            break;
        }
    }
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return None;
    }
    let after = rest.trim_start_matches([',', ' ']);
    let year_digits = after.bytes().take_while(u8::is_ascii_digit).count();
    let mut year = None;
    if year_digits == 4 && !after[4..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == ':')
    {
        year = after[..4].parse().ok();
        rest = &after[4..];
    }
    Some(((month, day, year), rest))
}

/// `12:43pm`, `5pm`, `3:28 PM`, `17:00`: the time of day, rest.
fn parse_clock(s: &str) -> Option<(NaiveTime, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 2 {
        return None;
    }
    let hour: u32 = s[..digits].parse().ok()?;
    let mut rest = &s[digits..];
    let mut minute = None;
    if let Some(r) = rest.strip_prefix(':') {
        let m = r.bytes().take_while(u8::is_ascii_digit).count();
        if m != 2 {
            return None;
        }
        minute = Some(r[..2].parse::<u32>().ok()?);
        rest = &r[2..];
        // Seconds, if any.
        if let Some(r) = rest.strip_prefix(':')
            && r.bytes().take_while(u8::is_ascii_digit).count() == 2
        {
            rest = &r[2..];
        }
    }
    let spaced = rest.trim_start();
    let mut meridiem = None;
    for (token, pm) in [("a.m.", false), ("p.m.", true), ("am", false), ("pm", true)] {
        if let Some(r) = strip_prefix_ci(spaced, token)
            && !r.starts_with(|c: char| c.is_ascii_alphanumeric())
        {
            meridiem = Some(pm);
            rest = r;
            break;
        }
    }
    let hour = match meridiem {
        Some(pm) => {
            if !(1..=12).contains(&hour) {
                return None;
            }
            (hour % 12) + if pm { 12 } else { 0 }
        }
        None => {
            minute?;
            hour
        }
    };
    if rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((NaiveTime::from_hms_opt(hour, minute.unwrap_or(0), 0)?, rest))
}

/// `3 days 6 hours 57 minutes`, `47 minutes`, `1h 30m`: seconds (at most 60 days).
fn parse_duration(s: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = s;
    let mut parts = 0;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(r) = strip_prefix_ci(rest, "and ") {
            rest = r.trim_start();
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 6 {
            break;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        let after = rest[digits..].trim_start();
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = after[..unit_len].to_ascii_lowercase();
        let scale = match unit.as_str() {
            "d" | "day" | "days" => 86_400,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            _ => break,
        };
        total = total.saturating_add(n.saturating_mul(scale));
        parts += 1;
        rest = &after[unit_len..];
    }
    (parts > 0 && total > 0).then_some(total.min(60 * 86_400))
}

/// A zone after a time: `(UTC)`, `(Europe/Berlin)`, or a bare `UTC`/`GMT+2`.
fn zone_name(rest: &str) -> Option<&str> {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('(') {
        let end = inner.find(')')?;
        let name = inner[..end].trim();
        return (!name.is_empty()).then_some(name);
    }
    let len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b':' | b'/' | b'_'))
        .count();
    let word = &rest[..len];
    utc_offset(word).map(|_| word)
}

/// `UTC`, `GMT`, `Z`, `Etc/UTC`, `UTC+2`, `GMT-05:00`.
fn utc_offset(name: &str) -> Option<FixedOffset> {
    let upper = name.trim().to_ascii_uppercase();
    let upper = upper.strip_prefix("ETC/").unwrap_or(&upper);
    if matches!(upper, "UTC" | "GMT" | "Z" | "ZULU" | "UNIVERSAL" | "UCT") {
        return FixedOffset::east_opt(0);
    }
    let rest = upper
        .strip_prefix("UTC")
        .or_else(|| upper.strip_prefix("GMT"))?;
    let (sign, rest) = match rest.as_bytes().first()? {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => return None,
    };
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h.parse::<i32>().ok()?, m.parse::<i32>().ok()?),
        None if rest.len() == 4 => (rest.get(..2)?.parse().ok()?, rest.get(2..)?.parse().ok()?),
        None => (rest.parse().ok()?, 0),
    };
    if h > 14 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

/// The machine's IANA zone name, for matching `resets 5pm (Europe/Berlin)`.
fn detect_zone_name() -> Option<String> {
    if let Ok(tz) = std::env::var("TZ") {
        let tz = tz.trim().trim_start_matches(':');
        if !tz.is_empty() {
            let tz = tz.rsplit_once("zoneinfo/").map_or(tz, |(_, z)| z);
            return Some(tz.to_owned());
        }
    }
    if let Ok(name) = std::fs::read_to_string("/etc/timezone") {
        let name = name.trim();
        if !name.is_empty() && name.len() < 64 {
            return Some(name.to_owned());
        }
    }
    let link = std::fs::read_link("/etc/localtime").ok()?;
    let link = link.to_string_lossy();
    link.rsplit_once("zoneinfo/").map(|(_, z)| z.to_owned())
}

/// The next instant after `now` matching the date and/or time in `offset`.
fn instant(
    date: Option<MonthDay>,
    time: Option<NaiveTime>,
    offset: FixedOffset,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let local_now = now.with_timezone(&offset);
    let time = time.unwrap_or(NaiveTime::MIN);
    let at = |d: NaiveDate| {
        offset
            .from_local_datetime(&d.and_time(time))
            .single()
            .map(|t| t.with_timezone(&Utc))
    };
    match date {
        None => {
            let today = at(local_now.date_naive())?;
            if today > now {
                Some(today)
            } else if now - today < chrono::TimeDelta::minutes(2) {
                // Times of day are printed to the minute: one just past means "about now",
                // not tomorrow.
                Some(now)
            } else {
                at(local_now.date_naive().succ_opt()?)
            }
        }
        Some((month, day, Some(year))) => {
            at(NaiveDate::from_ymd_opt(year, month, day)?).filter(|t| *t > now)
        }
        Some((month, day, None)) => {
            let year = local_now.year();
            (year..=year + 1)
                .filter_map(|y| NaiveDate::from_ymd_opt(y, month, day).and_then(at))
                .find(|t| *t > now)
        }
    }
}

/// Epoch seconds (or milliseconds) from a JSON value.
fn epoch(v: &Value) -> Option<DateTime<Utc>> {
    let n = as_f64(v)?;
    let secs = if n > 1e11 { n / 1000.0 } else { n };
    if !(0.0..=1e11).contains(&secs) {
        return None;
    }
    DateTime::from_timestamp(secs as i64, 0)
}

/// Epoch seconds at the start of a text (`1790164200`, ` "1790164200"`).
fn epoch_prefix(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim_start().trim_start_matches('"');
    let n = leading_u64(s)?;
    epoch(&Value::from(n))
}

fn leading_u64(s: &str) -> Option<u64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    s[..digits].parse().ok()
}

// ----- small helpers -----

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.min(u64::MAX as f64) as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|f| f.is_finite())
}

/// What a tool call is doing, from its input's most telling field: `Bash: cargo test`.
fn tool_activity(name: &str, input: &Value) -> String {
    let detail = tool_detail(name, input);
    let detail = first_line(detail.trim());
    if detail.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {detail}")
    }
}

fn tool_detail(name: &str, input: &Value) -> String {
    let s = |key: &str| input[key].as_str().map(str::to_owned);
    let by_name = match name {
        "Bash" | "bash" | "shell" | "Shell" => s("command").or_else(|| s("cmd")),
        "Read" | "Edit" | "Write" | "MultiEdit" | "view" | "edit" | "create" => {
            s("file_path").or_else(|| s("path"))
        }
        "NotebookEdit" | "NotebookRead" => s("notebook_path"),
        "Grep" | "Glob" | "grep" | "glob" => s("pattern"),
        "WebFetch" | "web_fetch" => s("url"),
        "WebSearch" | "web_search" => s("query"),
        "Task" | "Agent" => s("description").or_else(|| s("prompt")),
        "TodoWrite" => input["todos"].as_array().map(|todos| {
            todos
                .iter()
                .find(|t| t["status"].as_str() == Some("in_progress"))
                .and_then(|t| t["activeForm"].as_str().or_else(|| t["content"].as_str()))
                .map_or_else(|| format!("{} items", todos.len()), str::to_owned)
        }),
        _ => None,
    };
    if let Some(d) = by_name {
        return d;
    }
    for key in [
        "command",
        "cmd",
        "file_path",
        "path",
        "pattern",
        "url",
        "query",
        "description",
        "prompt",
    ] {
        if let Some(d) = s(key) {
            return d;
        }
    }
    match input {
        Value::Object(map) => map
            .values()
            .find_map(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// Codex's command: a string, or an argv such as `["bash", "-lc", "cargo test"]`.
fn codex_command(v: &Value) -> String {
    let command = match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let parts: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
            if parts.len() == 3 && is_shell(parts[0]) && parts[1].starts_with('-') {
                return parts[2].to_owned();
            }
            parts.join(" ")
        }
        _ => return String::new(),
    };
    // `bash -lc 'cargo test'` → `cargo test`.
    let mut words = command.splitn(3, ' ');
    if let (Some(shell), Some(flag), Some(rest)) = (words.next(), words.next(), words.next())
        && is_shell(shell)
        && flag.starts_with('-')
        && flag.contains('c')
    {
        let rest = rest.trim();
        for q in ['\'', '"'] {
            if rest.len() >= 2
                && rest.starts_with(q)
                && rest.ends_with(q)
                && !rest[1..rest.len() - 1].contains(q)
            {
                return rest[1..rest.len() - 1].to_owned();
            }
        }
        return rest.to_owned();
    }
    command
}

fn is_shell(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    matches!(base, "bash" | "sh" | "zsh" | "dash")
}

/// Appends `line` without terminal control sequences; a carriage return followed by more text
/// starts the line over, as a terminal would show it.
fn strip_controls(line: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let mut cr = false;
    let mut i = 0;
    while i < line.len() {
        let run = find_control(&line[i..]).unwrap_or(line.len() - i);
        if run > 0 {
            if std::mem::take(&mut cr) {
                out.truncate(start);
            }
            out.extend_from_slice(&line[i..i + run]);
            i += run;
            continue;
        }
        let b = line[i];
        match b {
            0x1b => {
                i = skip_escape(line, i);
                continue;
            }
            b'\r' => cr = true,
            b'\t' => {
                if std::mem::take(&mut cr) {
                    out.truncate(start);
                }
                out.push(b' ');
            }
            0x00..=0x1f | 0x7f => {}
            // C1 controls, UTF-8 encoded.
            0xc2 if line.get(i + 1).is_some_and(|c| (0x80..=0x9f).contains(c)) => i += 1,
            _ => {
                if std::mem::take(&mut cr) {
                    out.truncate(start);
                }
                out.push(b);
            }
        }
        i += 1;
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any byte of the word is zero.
fn has_zero(word: u64) -> bool {
    word.wrapping_sub(ONES) & !word & HIGHS != 0
}

/// Finds the first byte matching `byte`, testing eight at a time with `word` (which may say yes
/// for a word with no match, never no for a word with one).
fn find_byte(bytes: &[u8], word: impl Fn(u64) -> bool, byte: impl Fn(u8) -> bool) -> Option<usize> {
    let mut i = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(array) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        if word(u64::from_le_bytes(array)) {
            break;
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| byte(b)).map(|p| i + p)
}

fn find_newline(bytes: &[u8]) -> Option<usize> {
    find_byte(
        bytes,
        |w| has_zero(w ^ (ONES * u64::from(b'\n'))),
        |b| b == b'\n',
    )
}

/// The first byte [`strip_controls`] must look at: a C0 control, DEL, or the lead byte of a C1.
fn find_control(bytes: &[u8]) -> Option<usize> {
    find_byte(
        bytes,
        |w| {
            // A byte below 0x20 (or with the high bit set, to be checked) …
            w.wrapping_sub(ONES * 0x20) & !w & HIGHS != 0
                || has_zero(w ^ (ONES * 0x7f))
                || has_zero(w ^ (ONES * 0xc2))
        },
        |b| b < 0x20 || b == 0x7f || b == 0xc2,
    )
}

/// The index after the escape sequence starting at `i` (an ESC).
fn skip_escape(line: &[u8], i: usize) -> usize {
    let len = line.len();
    match line.get(i + 1) {
        // CSI: parameters and intermediates, then a final byte.
        Some(b'[') => {
            let mut j = i + 2;
            while j < len && (0x20..=0x3f).contains(&line[j]) {
                j += 1;
            }
            if j < len && (0x40..=0x7e).contains(&line[j]) {
                j += 1;
            }
            j
        }
        // OSC, DCS, APC, PM, SOS: a string up to BEL or ST.
        Some(b']' | b'P' | b'_' | b'^' | b'X') => {
            let mut j = i + 2;
            while j < len {
                if line[j] == 0x07 {
                    return j + 1;
                }
                if line[j] == 0x1b && line.get(j + 1) == Some(&b'\\') {
                    return j + 2;
                }
                j += 1;
            }
            len
        }
        Some(c) if (0x20..=0x2f).contains(c) => {
            let mut j = i + 2;
            while j < len && (0x20..=0x2f).contains(&line[j]) {
                j += 1;
            }
            (j + 1).min(len)
        }
        Some(_) => i + 2,
        None => len,
    }
}

/// The first non-empty line, trimmed.
fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// The first `max` characters, and whether there were more.
fn cut_chars(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    match text.char_indices().nth(max) {
        Some((i, _)) => (&text[..i], true),
        None => (text, false),
    }
}

/// A message as one line with its whitespace collapsed.
fn one_line(text: &str) -> String {
    let text = &text[..floor_char_boundary(text, 4 * MESSAGE_CHARS)];
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Shortened to [`MESSAGE_CHARS`] with an ellipsis.
fn clip(text: &str) -> String {
    let one = one_line(text);
    let (head, cut) = cut_chars(&one, MESSAGE_CHARS);
    if cut {
        format!("{head}…")
    } else {
        head.to_owned()
    }
}

/// A message kept whole up to [`TAIL_BYTES`] (its end, where a promise would be).
fn bounded(text: &str) -> String {
    let start = text.len().saturating_sub(TAIL_BYTES);
    let mut start = start;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

fn floor_char_boundary(text: &str, max: usize) -> usize {
    if max >= text.len() {
        return text.len();
    }
    let mut i = max;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn utc_now() -> DateTime<Utc> {
        at("2026-03-10T09:00:00Z")
    }

    /// An observer in a known zone (UTC, named `Etc/UTC`) so no test depends on the machine.
    fn observer(format: Format) -> Observer {
        Observer::new(format, utc_now())
            .with_local_zone(FixedOffset::east_opt(0).unwrap(), Some("Etc/UTC"))
    }

    /// An attempt that printed `stdout` and exited 0.
    fn observe(format: Format, stdout: &str) -> Observer {
        let mut o = observer(format);
        o.feed(stdout.as_bytes(), false);
        o.finish(Some(0));
        o
    }

    /// A plain-text attempt whose last lines were `stdout` and `stderr` and that exited 1.
    fn failed(now: DateTime<Utc>, stdout: &str, stderr: &str) -> Observer {
        let mut o = Observer::new(Format::Text, now)
            .with_local_zone(FixedOffset::east_opt(0).unwrap(), Some("Etc/UTC"));
        o.feed(stdout.as_bytes(), false);
        o.feed(stderr.as_bytes(), true);
        o.finish(Some(1));
        o
    }

    /// Everything an observer reports, for comparing two runs.
    #[derive(Debug, PartialEq)]
    struct Snapshot {
        activity: Option<String>,
        result: Option<AgentResult>,
        usage: Usage,
        limit: Option<Limit>,
        retrying: Option<Limit>,
        auth: Option<String>,
        final_message: Option<String>,
        session_id: Option<String>,
    }

    fn snapshot(o: &Observer) -> Snapshot {
        Snapshot {
            activity: o.activity().map(str::to_owned),
            result: o.result().cloned(),
            usage: o.usage(),
            limit: o.limit().cloned(),
            retrying: o.retrying().cloned(),
            auth: o.auth_error().map(str::to_owned),
            final_message: o.final_message(),
            session_id: o.session_id().map(str::to_owned),
        }
    }

    const SESSION: &str = "4b1e9c2a-7d3f-4e6b-9a10-2f5c8d7e6a01";

    /// A Claude `--output-format stream-json --verbose` session, as AGENT-CLIS.md describes it.
    fn claude_session() -> String {
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

    #[test]
    fn claude_session_activity_follows_the_stream() {
        let session = claude_session();
        let lines: Vec<&str> = session.lines().collect();
        let mut o = observer(Format::ClaudeStreamJson);
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
        let o = observe(Format::ClaudeStreamJson, &claude_session());
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
        let o = observe(Format::ClaudeStreamJson, &(cut.join("\n") + "\n"));
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
        let o = observe(Format::ClaudeStreamJson, &format!("{line}\n"));
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
        let o = observe(Format::ClaudeStreamJson, &stream);
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "session_limit");
        assert_eq!(limit.reset_at, Some(at("2026-03-10T13:03:00Z")));
        assert_eq!(
            limit.message,
            "You've hit your session limit · resets 1:03pm (UTC)"
        );
        assert!(o.result().unwrap().is_error);

        // The event alone.
        let o = observe(Format::ClaudeStreamJson, stream.lines().nth(2).unwrap());
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "five_hour");
        assert_eq!(
            limit.reset_at,
            Some(Utc.timestamp_opt(1773147780, 0).unwrap())
        );
        assert!(o.activity().unwrap().contains("limit"));

        // A warning is not a limit.
        let o = observe(Format::ClaudeStreamJson, stream.lines().nth(1).unwrap());
        assert!(o.limit().is_none());
    }

    #[test]
    fn a_successful_result_clears_a_limit_met_on_the_way() {
        let stream = [
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"seven_day_opus"}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Done.","total_cost_usd":0.01,"usage":{"input_tokens":1,"output_tokens":2},"permission_denials":[]}"#,
        ]
        .join("\n");
        let o = observe(Format::ClaudeStreamJson, &stream);
        assert!(o.limit().is_none());
    }

    #[test]
    fn session_limit_time_of_day_rolls_over_to_the_next_day() {
        let text = "You've hit your session limit · resets 12:43pm (UTC)\n";
        let o = failed(at("2026-03-10T09:00:00Z"), text, "");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-10T12:43:00Z"))
        );
        assert_eq!(o.limit().unwrap().kind, "session_limit");

        let o = failed(at("2026-03-10T20:15:00Z"), text, "");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-11T12:43:00Z"))
        );

        // Across a month end, a few minutes past the time → the next day.
        let o = failed(at("2026-03-31T12:46:00Z"), text, "");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-04-01T12:43:00Z"))
        );
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
            let mut o = Observer::new(Format::ClaudeStreamJson, now)
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
        let o = observe(Format::ClaudeStreamJson, line);
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
        assert_eq!(o.limit().unwrap().message, "Something new");
    }

    #[test]
    fn reset_times_in_named_zones() {
        let berlin = FixedOffset::east_opt(3600).unwrap();
        let now = at("2026-03-10T09:00:00Z");
        let limit = |zone: (FixedOffset, Option<&str>), text: &str| {
            let mut o = Observer::new(Format::Text, now).with_local_zone(zone.0, zone.1);
            o.feed(text.as_bytes(), true);
            o.finish(Some(1));
            o.limit().cloned().expect("limit")
        };
        // The local zone, by name or without one.
        let l = limit(
            (berlin, Some("Europe/Berlin")),
            "You've hit your session limit · resets 3pm (Europe/Berlin)",
        );
        assert_eq!(l.reset_at, Some(at("2026-03-10T14:00:00Z")));
        let l = limit(
            (berlin, Some("Europe/Berlin")),
            "You've hit your session limit · resets 3pm",
        );
        assert_eq!(l.reset_at, Some(at("2026-03-10T14:00:00Z")));
        // An explicit offset.
        let l = limit(
            (berlin, None),
            "You've hit your session limit · resets 3pm (UTC+2)",
        );
        assert_eq!(l.reset_at, Some(at("2026-03-10T13:00:00Z")));
        // Another named zone cannot be resolved: still a limit, backoff decides.
        let l = limit(
            (berlin, Some("Europe/Berlin")),
            "You've hit your session limit · resets 2:50am (America/Sao_Paulo)",
        );
        assert_eq!(l.reset_at, None);
        assert_eq!(l.kind, "session_limit");
    }

    #[test]
    fn copilot_session_error_rate_limit() {
        let stream = [
            r#"{"type":"session.start","data":{"sessionId":"cp-1","copilotVersion":"1.0.102"},"id":"e1","timestamp":"2026-03-10T09:00:00.000Z"}"#,
            r#"{"type":"tool.execution_start","data":{"toolCallId":"t1","toolName":"bash","arguments":{"command":"npm test","description":"Run tests"}},"id":"e2"}"#,
            r#"{"type":"session.error","data":{"errorType":"rate_limit","statusCode":429,"message":"You've hit your session rate limit. Please try again in 2 hours 5 minutes."},"id":"e3"}"#,
            r#"{"type":"result","sessionId":"cp-1","exitCode":1,"usage":{"premiumRequests":1,"totalApiDurationMs":800,"sessionDurationMs":2100}}"#,
        ]
        .join("\n");
        let mut o = observer(Format::CopilotJson);
        o.feed(stream.lines().nth(1).unwrap().as_bytes(), false);
        o.feed(b"\n", false);
        assert_eq!(o.activity(), Some("bash: npm test"));
        let o = observe(Format::CopilotJson, &stream);
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
            Format::CopilotJson,
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
        let o = observe(Format::CopilotJson, &stream);
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
                let mut o = observer(Format::Text);
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
    fn codex_json_usage_summed_over_turns() {
        let stream = [
            r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"test result: ok","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Tests pass; next I'll add docs."}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"README.md","kind":"update"}],"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Docs added. <promise>DONE</promise>"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":200,"output_tokens":50}}"#,
        ]
        .join("\n");
        let mut o = observer(Format::CodexJson);
        let lines: Vec<&str> = stream.lines().collect();
        o.feed(
            format!("{}\n{}\n{}\n", lines[0], lines[1], lines[2]).as_bytes(),
            false,
        );
        assert_eq!(o.activity(), Some("$ cargo test"));
        let o = observe(Format::CodexJson, &stream);
        assert_eq!(
            o.usage(),
            Usage {
                input_tokens: 315 + 800,
                output_tokens: 172,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 24648,
                cost_usd: 0.0,
                turns: 2,
            }
        );
        assert_eq!(o.session_id(), Some("0199a213-81c0-7800-8aa1-bbab2a035a53"));
        assert_eq!(
            o.final_message().as_deref(),
            Some("Docs added. <promise>DONE</promise>")
        );
        assert!(o.limit().is_none());
    }

    #[test]
    fn codex_usage_limit_with_try_again_at() {
        let message = "You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/codex/settings/usage to purchase more credits or try again at 3:28 PM.";
        let stream = format!(
            "{}\n{}\n{}\n",
            r#"{"type":"thread.started","thread_id":"t"}"#,
            serde_json::json!({"type": "error", "message": message}),
            serde_json::json!({"type": "turn.failed", "error": {"message": message}}),
        );
        let eastern = FixedOffset::west_opt(5 * 3600).unwrap();
        let mut o = Observer::new(Format::CodexJson, at("2026-03-10T14:00:00Z"))
            .with_local_zone(eastern, None);
        o.feed(stream.as_bytes(), false);
        o.finish(Some(1));
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "usage_limit");
        assert_eq!(limit.reset_at, Some(at("2026-03-10T20:28:00Z")));
        assert_eq!(limit.message, message);

        // The same in text mode (stderr), with a date.
        let o = failed(
            utc_now(),
            "",
            "ERROR: You've hit your usage limit. To get more access now, send a request to your admin or try again at Aug 8th, 2026 12:30 PM.\n",
        );
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-08-08T12:30:00Z"))
        );
        // Relative.
        let o = failed(
            utc_now(),
            "You've hit your usage limit. To get more access now, send a request to your admin or try again in 3 days 6 hours 57 minutes.\n",
            "",
        );
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-13T15:57:00Z"))
        );
        // The code, with the reset epoch in the raw error.
        let o = observe(
            Format::CodexJson,
            r#"{"type":"error","message":"unexpected status 429 Too Many Requests: {\"error\":{\"type\":\"usage_limit_reached\",\"message\":\"The usage limit has been reached\",\"plan_type\":\"plus\",\"resets_at\":1773158400}}"}"#,
        );
        assert_eq!(o.limit().unwrap().kind, "usage_limit");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(Utc.timestamp_opt(1773158400, 0).unwrap())
        );
        // The reset only in the raw line, inside escaped JSON.
        let o = observe(
            Format::CodexJson,
            r#"{"type":"turn.failed","error":{"message":"You've hit your usage limit."},"detail":"{\"type\":\"usage_limit_reached\",\"resets_at\":1773158400}"}"#,
        );
        assert_eq!(o.limit().unwrap().message, "You've hit your usage limit.");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(Utc.timestamp_opt(1773158400, 0).unwrap())
        );
        // Unparseable time: a limit without a reset.
        let o = failed(
            utc_now(),
            "You've hit your usage limit. Try again later.\n",
            "",
        );
        assert_eq!(o.limit().unwrap().reset_at, None);
    }

    #[test]
    fn codex_retry_exhaustion_is_a_rate_limit() {
        let o = observe(
            Format::CodexJson,
            &[
                r#"{"type":"error","message":"Reconnecting... 1/5 (unexpected status 429 Too Many Requests)"}"#,
                r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#,
            ]
            .join("\n"),
        );
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
        let o = failed(
            utc_now(),
            "",
            "[2026-03-10T09:00:01] ERROR: exceeded retry limit, last status: 429 Too Many Requests\n",
        );
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
    }

    #[test]
    fn gemini_429_retries() {
        let retries = "Attempt 1 failed with status 429. Retrying with backoff... GaxiosError: [{\n  \"error\": {\"code\": 429}\n}]\nAttempt 2 failed with status 429. Retrying with backoff...\n";
        // Retried until the attempt failed: a limit. Plain text is only read at the end.
        let mut o = observer(Format::Text);
        o.feed(retries.as_bytes(), true);
        assert!(o.limit().is_none());
        assert!(o.retrying().is_none());
        o.finish(Some(1));
        let limit = o.limit().expect("limit at finish");
        assert!(
            limit
                .message
                .starts_with("Attempt 2 failed with status 429")
        );
        // Retried, then answered: not a limit, even when it failed afterwards.
        let o = failed(utc_now(), "I updated the README.\n", "");
        assert!(o.limit().is_none());
        let mut o = observer(Format::Text);
        o.feed(retries.as_bytes(), true);
        o.feed(b"I updated the README.\n", false);
        o.finish(Some(1));
        assert!(o.limit().is_none());
        assert!(o.retrying().is_none());
        // Retried, then exited 0: its work, not a limit.
        let mut o = observer(Format::Text);
        o.feed(retries.as_bytes(), true);
        o.finish(Some(0));
        assert!(o.limit().is_none());
        // Claude's api_retry is informational too.
        let o = observe(
            Format::ClaudeStreamJson,
            &[
                r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":1200,"error_status":429,"error":"rate_limit","session_id":"s"}"#,
                r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","usage":{},"permission_denials":[]}"#,
            ]
            .join("\n"),
        );
        assert!(o.limit().is_none());
        let mut o = observer(Format::ClaudeStreamJson);
        o.feed(br#"{"type":"system","subtype":"api_retry","attempt":3,"max_retries":10,"error_status":429,"error":"rate_limit"}"#, false);
        o.feed(b"\n", false);
        assert_eq!(
            o.retrying().unwrap().message,
            "API retry 3/10: rate_limit (429)"
        );
        assert!(o.limit().is_none());
    }

    #[test]
    fn auth_errors() {
        for text in [
            "Invalid API key · Please run /login",
            "Not logged in · Please run /login",
            "Error: No authentication information found.",
            "API key not valid. Please pass a valid API key.",
            "ERROR: unexpected status 401 Unauthorized: Missing bearer authentication in header",
        ] {
            let o = failed(utc_now(), "", &format!("{text}\n"));
            assert_eq!(o.auth_error(), Some(text), "{text}");
            assert!(o.limit().is_none());
        }
        // Claude's result.
        let o = observe(
            Format::ClaudeStreamJson,
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"Invalid API key · Please run /login","usage":{},"permission_denials":[]}"#,
        );
        assert_eq!(o.auth_error(), Some("Invalid API key · Please run /login"));
        let o = observe(
            Format::ClaudeStreamJson,
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","usage":{},"permission_denials":[]}"#,
        );
        assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
    }

    #[test]
    fn quoted_or_prose_mentions_are_not_signals() {
        for line in [
            r#"src/agent/stream.rs:512:    ("invalid api key", "auth"),"#,
            "I fixed the handling of an Invalid API key in the client.",
            r#"  let msg = "You've hit your session limit · resets 12:43pm (UTC)";"#,
            "- Quota texts include `You've hit your session rate limit.`",
            "You've used 93% of your session limit · resets 3:40pm",
            "Approaching usage limit · resets at 10pm",
            "test agent::stream::tests::gemini_429_retries ... ok",
        ] {
            // Not even as the last line of a failed attempt.
            let o = failed(utc_now(), &format!("{line}\n"), "");
            assert!(o.limit().is_none(), "{line}");
            assert!(o.auth_error().is_none(), "{line}");
        }
        // Tool results in Claude's stream are never read for signals.
        let o = observe(
            Format::ClaudeStreamJson,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"Not logged in · Please run /login\nYou've hit your session limit · resets 1pm (UTC)"}]}}"#,
        );
        assert!(o.limit().is_none());
        assert!(o.auth_error().is_none());
        // Nor an ordinary assistant text.
        let o = observe(
            Format::ClaudeStreamJson,
            r#"{"type":"assistant","message":{"model":"claude-sonnet-4-5","content":[{"type":"text","text":"You've hit your session limit · resets 1pm (UTC) is what Claude prints."}]}}"#,
        );
        assert!(o.limit().is_none());
    }

    /// What an agent at work may well print: prose, code and logs about rate limiters, quotas
    /// and login pages, and every real CLI message quoted as text.
    const TALK: &[&str] = &[
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
        "Invalid API key · Please run /login",
        "Not logged in · Please run /login",
        "Error: No authentication information found.",
        "ERROR: unexpected status 401 Unauthorized",
    ];

    fn assert_no_signal(o: &Observer, what: &str) {
        assert!(o.limit().is_none(), "{what}: {:?}", o.limit());
        assert!(o.retrying().is_none(), "{what}: {:?}", o.retrying());
        assert!(o.auth_error().is_none(), "{what}: {:?}", o.auth_error());
    }

    #[test]
    fn talk_about_limits_and_logins_in_plain_text_that_exited_0_is_work() {
        let talk = TALK.join("\n") + "\n";
        let mut o = observer(Format::Text);
        o.feed(talk.as_bytes(), false);
        o.feed(talk.as_bytes(), true);
        o.finish(Some(0));
        assert_no_signal(&o, "plain text, exit 0");
        // Each alone, as the very last line of either stream.
        for text in TALK {
            for is_stderr in [false, true] {
                let mut o = observer(Format::Text);
                o.feed(format!("{text}\n").as_bytes(), is_stderr);
                o.finish(Some(0));
                assert_no_signal(&o, text);
            }
        }
    }

    #[test]
    fn talk_about_limits_and_logins_in_json_formats_is_work() {
        let talk = TALK.join("\n");
        let claude = [
            serde_json::json!({"type": "system", "subtype": "init", "session_id": "s", "model": "claude-sonnet-4-5"}),
            serde_json::json!({"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [{"type": "text", "text": talk}]}}),
            serde_json::json!({"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "name": "Bash", "input": {"command": format!("echo '{talk}'")}}]}}),
            serde_json::json!({"type": "user", "message": {"content": [{"type": "tool_result", "content": talk}]}}),
            serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "result": talk, "total_cost_usd": 0.1, "usage": {"input_tokens": 10, "output_tokens": 5}, "permission_denials": []}),
        ];
        let codex = [
            serde_json::json!({"type": "thread.started", "thread_id": "t"}),
            serde_json::json!({"type": "item.started", "item": {"type": "command_execution", "command": format!("grep -r '{}' src", TALK[0])}}),
            serde_json::json!({"type": "item.completed", "item": {"type": "command_execution", "aggregated_output": talk, "exit_code": 0}}),
            serde_json::json!({"type": "item.completed", "item": {"type": "agent_message", "text": talk}}),
            serde_json::json!({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 5}}),
        ];
        let copilot = [
            serde_json::json!({"type": "session.start", "data": {"sessionId": "c"}}),
            serde_json::json!({"type": "assistant.message", "data": {"content": talk, "outputTokens": 5}}),
            serde_json::json!({"type": "tool.execution_start", "data": {"toolName": "bash", "arguments": {"command": format!("echo '{talk}'")}}}),
            serde_json::json!({"type": "result", "sessionId": "c", "exitCode": 0, "usage": {"premiumRequests": 1}}),
        ];
        let plain = TALK.join("\n") + "\n";
        for (format, events) in [
            (Format::ClaudeStreamJson, &claude[..]),
            (Format::CodexJson, &codex[..]),
            (Format::CopilotJson, &copilot[..]),
        ] {
            let mut stream: String = events.iter().map(|e| format!("{e}\n")).collect();
            // Plain lines among the events, and on stderr.
            stream.push_str(&plain);
            let mut o = observer(format);
            o.feed(stream.as_bytes(), false);
            o.feed(plain.as_bytes(), true);
            o.finish(Some(0));
            assert_no_signal(&o, &format!("{format:?}"));
            // Failed, the events and the assistant's words still say nothing.
            let mut o = observer(format);
            let events: String = events.iter().map(|e| format!("{e}\n")).collect();
            o.feed(events.as_bytes(), false);
            o.finish(Some(1));
            assert_no_signal(&o, &format!("{format:?}, exit 1"));
        }
    }

    #[test]
    fn real_messages_as_the_last_lines_of_a_failed_plain_attempt_are_signals() {
        let limits = [
            ("You've hit your limit · resets 3pm (UTC)", "usage_limit"),
            (
                "You've hit your session limit · resets 12:43pm (UTC)",
                "session_limit",
            ),
            ("You've hit the rate limit for this model.", "rate_limit"),
            (
                "API Error: Request rejected (429) · this may be a temporary rate limit",
                "rate_limit",
            ),
            ("API Error: 529 Overloaded", "overloaded"),
            ("No remaining quota for premium requests", "premium_quota"),
            (
                "You've hit your usage limit. Try again at 3:28 PM.",
                "usage_limit",
            ),
            (
                "exceeded retry limit, last status: 429 Too Many Requests",
                "rate_limit",
            ),
            (
                "Attempt 2 failed with status 429. Retrying with backoff...",
                "rate_limit",
            ),
        ];
        for (text, kind) in limits {
            for (stdout, stderr) in [
                (format!("working\n{text}\n"), String::new()),
                (String::new(), format!("{text}\n")),
            ] {
                let o = failed(utc_now(), &stdout, &stderr);
                let limit = o.limit().unwrap_or_else(|| panic!("no limit in {text:?}"));
                assert_eq!(limit.kind, kind, "{text}");
                assert!(o.auth_error().is_none(), "{text}");
            }
        }
        for text in [
            "Invalid API key · Please run /login",
            "Not logged in · Please run /login",
            "Error: No authentication information found.",
            "ERROR: unexpected status 401 Unauthorized",
        ] {
            let o = failed(utc_now(), "", &format!("{text}\n"));
            assert_eq!(o.auth_error(), Some(text));
            // A signal ended by a signal (no exit code) counts as well.
            let mut o = observer(Format::Text);
            o.feed(format!("{text}\n").as_bytes(), true);
            o.finish(None);
            assert_eq!(o.auth_error(), Some(text));
        }
        // Only the last lines count: a message buried under more output is history.
        let mut buried = String::from("You've hit your session limit · resets 12:43pm (UTC)\n");
        for i in 0..FAILED_TAIL_LINES {
            buried.push_str(&format!("later line {i}\n"));
        }
        let o = failed(utc_now(), &buried, "");
        assert!(o.limit().is_none());
        // Each stream keeps its own last lines: chatty stdout does not push out stderr's error.
        let o = failed(utc_now(), &buried, "Not logged in · Please run /login\n");
        assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
        // A JSON-format attempt's plain lines (the CLI's own stderr) count the same way.
        let mut o = observer(Format::ClaudeStreamJson);
        o.feed(b"Invalid API key \xc2\xb7 Please run /login\n", true);
        o.finish(Some(1));
        assert_eq!(o.auth_error(), Some("Invalid API key · Please run /login"));
    }

    #[test]
    fn the_failed_tail_is_bounded() {
        let mut o = observer(Format::Text);
        let long = "z".repeat(10 * FAILED_TAIL_LINE_BYTES);
        for _ in 0..3 * FAILED_TAIL_LINES {
            o.feed(format!("{long}\n").as_bytes(), false);
            o.feed(format!("{long}\n").as_bytes(), true);
        }
        for last in [&o.last_out, &o.last_err] {
            assert_eq!(last.lines.len(), FAILED_TAIL_LINES);
            assert!(
                last.lines
                    .iter()
                    .all(|(_, l)| l.len() <= FAILED_TAIL_LINE_BYTES)
            );
        }
        o.finish(Some(1));
        assert_no_signal(&o, "long lines");
    }

    #[test]
    fn plain_text_activity_is_the_last_line() {
        let mut o = observer(Format::Text);
        o.feed(
            b"   Compiling ralph v0.1.0\n\x1b[1m\x1b[32m    Finished\x1b[0m `dev` profile",
            false,
        );
        assert_eq!(o.activity(), Some("Compiling ralph v0.1.0"));
        assert!(o.take_activity_changed());
        assert!(!o.take_activity_changed());
        o.feed(b" in 2.1s\n\n   \n", false);
        assert_eq!(o.activity(), Some("Finished `dev` profile in 2.1s"));
        assert!(o.take_activity_changed());
        // A progress bar redrawn with carriage returns shows its last state.
        o.feed(
            b"Downloading 10%\rDownloading 55%\rDownloading 100%\r\n",
            true,
        );
        assert_eq!(o.activity(), Some("Downloading 100%"));
        // The same line again is no change.
        o.take_activity_changed();
        o.feed(b"Downloading 100%\n", true);
        assert!(!o.take_activity_changed());
        // Long lines are cut.
        let long = "x".repeat(500);
        o.feed(format!("{long}\n").as_bytes(), false);
        let a = o.activity().unwrap();
        assert_eq!(a.chars().count(), ACTIVITY_CHARS + 1);
        assert!(a.ends_with('…'));
        // A last line without a newline counts at finish.
        o.feed(b"<promise>DONE</promise>", false);
        o.finish(Some(0));
        assert_eq!(o.activity(), Some("<promise>DONE</promise>"));
        let last = o.final_message().unwrap();
        assert!(last.ends_with("<promise>DONE</promise>"));
        assert!(
            !last.contains("Downloading"),
            "stderr is not the agent's message"
        );
    }

    #[test]
    fn final_message_tail_is_bounded() {
        let mut o = observer(Format::Text);
        for i in 0..20_000 {
            o.feed(
                format!("line {i} of the agent's answer\n").as_bytes(),
                false,
            );
        }
        let tail = o.final_message().unwrap();
        assert!(tail.len() <= TAIL_BYTES);
        assert!(tail.ends_with("line 19999 of the agent's answer"));
        assert!(o.tail.len() <= 2 * TAIL_BYTES + MAX_LINE);
    }

    #[test]
    fn huge_single_line_is_bounded() {
        for format in [
            Format::Text,
            Format::ClaudeStreamJson,
            Format::CodexJson,
            Format::CopilotJson,
        ] {
            let mut o = observer(format);
            let chunk = vec![b'a'; 64 * 1024];
            for _ in 0..80 {
                o.feed(&chunk, false);
                assert!(o.out.buf.len() <= MAX_LINE);
                assert!(o.out.buf.capacity() <= 2 * MAX_LINE);
            }
            o.feed(b"\nafter\n", false);
            assert_eq!(o.activity(), Some("after"));
            // A huge JSON line is cut and then ignored, not shown as garbage.
            let mut o = observer(format);
            o.feed(
                br#"{"type":"assistant","message":{"content":[{"type":"text","text":""#,
                false,
            );
            for _ in 0..80 {
                o.feed(&chunk, false);
            }
            o.feed(b"\"}]}}\n", false);
            o.finish(Some(0));
            assert!(o.out.buf.is_empty());
            if format != Format::Text {
                assert_eq!(o.activity(), None);
            }
        }
        // One 5 MiB chunk.
        let mut o = observer(Format::Text);
        let mut big = vec![b'b'; 5 * 1024 * 1024];
        big.push(b'\n');
        o.feed(&big, false);
        assert!(o.activity().unwrap().starts_with("bbbb"));
        assert!(o.tail.len() <= 2 * TAIL_BYTES);
    }

    #[test]
    fn invalid_utf8_and_control_codes() {
        let mut o = observer(Format::Text);
        o.feed(
            b"\xff\xfe hello \xc3\x28 world\x07\x1b]0;title\x07\n",
            false,
        );
        let a = o.activity().unwrap();
        assert!(a.contains("hello"), "{a}");
        assert!(a.contains("world"));
        assert!(!a.contains('\x07') && !a.contains("title"));
        let mut o = observer(Format::ClaudeStreamJson);
        o.feed(b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}]}}\n", false);
        o.feed(b"{not json at all\n", false);
        o.feed(b"[1,2,3]\n", false);
        o.feed(b"null\n", false);
        o.finish(Some(0));
        assert!(o.result().is_none());
    }

    #[test]
    fn odd_json_values_are_tolerated() {
        let o = observe(
            Format::ClaudeStreamJson,
            r#"{"type":"result","subtype":7,"is_error":"yes","api_error_status":"429","num_turns":-3,"total_cost_usd":"0.5","usage":{"input_tokens":1e3,"output_tokens":null},"permission_denials":{},"duration_ms":1.5e30,"result":["x"]}"#,
        );
        let r = o.result().unwrap();
        assert_eq!(r.api_error_status, Some(429));
        assert_eq!(r.usage.input_tokens, 1000);
        assert_eq!(r.usage.cost_usd, 0.5);
        assert_eq!(r.usage.turns, 0);
        assert_eq!(r.permission_denials, 0);
        assert_eq!(r.text, "");
        let o = observe(
            Format::CodexJson,
            r#"{"type":"item.started","item":{"type":"command_execution","command":["/bin/bash","-lc","ls -la"]}}"#,
        );
        assert_eq!(o.activity(), Some("$ ls -la"));
    }

    #[test]
    fn claude_tool_activity_picks_the_telling_field() {
        let cases = [
            (
                r#"{"name":"Read","input":{"file_path":"src/lib.rs","limit":20}}"#,
                "Read: src/lib.rs",
            ),
            (
                r#"{"name":"Grep","input":{"pattern":"fn main","path":"src"}}"#,
                "Grep: fn main",
            ),
            (
                r#"{"name":"WebFetch","input":{"url":"https://docs.rs","prompt":"x"}}"#,
                "WebFetch: https://docs.rs",
            ),
            (
                r#"{"name":"TodoWrite","input":{"todos":[{"content":"a","status":"completed","activeForm":"Doing a"},{"content":"b","status":"in_progress","activeForm":"Doing b"}]}}"#,
                "TodoWrite: Doing b",
            ),
            (
                r#"{"name":"Bash","input":{"command":"cd x &&\n  make"}}"#,
                "Bash: cd x &&",
            ),
            (
                r#"{"name":"mcp__github__get_issue","input":{"owner":"o","issue_number":3}}"#,
                "mcp__github__get_issue: o",
            ),
            (r#"{"name":"Weird","input":{}}"#, "Weird"),
        ];
        for (block, expected) in cases {
            let block: Value = serde_json::from_str(block).unwrap();
            assert_eq!(
                tool_activity(block["name"].as_str().unwrap(), &block["input"]),
                expected
            );
        }
    }

    #[test]
    fn format_for_presets() {
        assert_eq!(format_for("claude"), Format::ClaudeStreamJson);
        for preset in ["copilot", "codex", "gemini", "custom", ""] {
            assert_eq!(format_for(preset), Format::Text);
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_secs(60);
        let secs: Vec<u64> = (0..=8).map(|a| backoff(base, a).as_secs()).collect();
        assert_eq!(secs, [60, 60, 120, 240, 480, 960, 1800, 1800, 1800]);
        assert_eq!(backoff(base, u32::MAX), Duration::from_secs(1800));
        assert_eq!(backoff(Duration::from_secs(1), 3), Duration::from_secs(4));
    }

    #[test]
    fn backoff_is_at_least_a_second_whatever_the_base() {
        for base in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(999),
        ] {
            for attempt in [0, 1, 2, 5, u32::MAX] {
                assert!(backoff(base, attempt) >= MIN_BACKOFF, "{base:?} {attempt}");
            }
            assert_eq!(backoff(base, 1), MIN_BACKOFF);
            assert_eq!(backoff(base, 3), Duration::from_secs(4));
        }
        assert_eq!(backoff(Duration::MAX, 9), Duration::from_secs(1800));
    }

    #[test]
    fn time_parsers() {
        let t = |h, m| NaiveTime::from_hms_opt(h, m, 0).unwrap();
        assert_eq!(parse_clock("12:43pm (UTC)").map(|x| x.0), Some(t(12, 43)));
        assert_eq!(parse_clock("12am").map(|x| x.0), Some(t(0, 0)));
        assert_eq!(parse_clock("3:28 PM.").map(|x| x.0), Some(t(15, 28)));
        assert_eq!(parse_clock("17:05").map(|x| x.0), Some(t(17, 5)));
        assert_eq!(parse_clock("5 apples"), None);
        assert_eq!(parse_clock("13pm"), None);
        assert_eq!(parse_clock("25:00"), None);
        assert_eq!(parse_duration("47 minutes"), Some(47 * 60));
        assert_eq!(parse_duration("1h 30m"), Some(5400));
        assert_eq!(parse_duration("2 hours and 5 minutes"), Some(7500));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(
            parse_month_day("Sep 24, 5pm").map(|x| x.0),
            Some((9, 24, None))
        );
        assert_eq!(
            parse_month_day("Aug 8th, 2026 12:30 PM").map(|x| x.0),
            Some((8, 8, Some(2026)))
        );
        assert_eq!(parse_month_day("Soon"), None);
        assert_eq!(utc_offset("GMT-05:00"), FixedOffset::west_opt(5 * 3600));
        assert_eq!(
            utc_offset("UTC+0530"),
            FixedOffset::east_opt(5 * 3600 + 30 * 60)
        );
        assert_eq!(utc_offset("Europe/Paris"), None);
        // Date without a year in the past → next year; with a past year → unknown.
        let o = FixedOffset::east_opt(0).unwrap();
        assert_eq!(
            instant(Some((1, 5, None)), None, o, utc_now()),
            Some(at("2027-01-05T00:00:00Z"))
        );
        assert_eq!(instant(Some((1, 5, Some(2020))), None, o, utc_now()), None);
        assert_eq!(instant(Some((2, 30, None)), None, o, utc_now()), None);
    }

    #[test]
    fn strip_controls_cases() {
        let strip = |b: &[u8]| {
            let mut out = Vec::new();
            strip_controls(b, &mut out);
            String::from_utf8_lossy(&out).into_owned()
        };
        assert_eq!(strip(b"\x1b[1;31merror\x1b[0m: x"), "error: x");
        assert_eq!(strip(b"a\tb"), "a b");
        assert_eq!(strip(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), "link");
        assert_eq!(strip(b"\x1b(Bplain\x1b"), "plain");
        assert_eq!(strip("\u{9b}x".as_bytes()), "x");
        assert_eq!(strip(b"old\rnew"), "new");
        assert_eq!(strip(b"keep\r"), "keep");
    }

    /// Feeds `data` split at `cuts` (positions taken modulo its length), stdout only.
    fn feed_split(format: Format, data: &[u8], cuts: &[usize]) -> Observer {
        let mut o = observer(format);
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        points.sort_unstable();
        let mut last = 0;
        for p in points {
            o.feed(&data[last..p], false);
            last = p;
        }
        o.feed(&data[last..], false);
        o.finish(Some(1));
        o
    }

    fn limit_session() -> String {
        [
            r#"{"type":"system","subtype":"init","session_id":"s-3","model":"claude-opus-4-1"}"#,
            r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"error_status":429,"error":"rate_limit"}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"five_hour"}}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"result":"You've hit your session limit · resets 1:03pm (UTC)","usage":{},"permission_denials":[]}"#,
        ]
        .join("\n")
    }

    proptest! {
        #[test]
        fn any_split_gives_identical_results(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
            for (format, data) in [
                (Format::ClaudeStreamJson, claude_session()),
                (Format::ClaudeStreamJson, limit_session()),
                (Format::Text, "one\r\ntwo\n\x1b[32mthree\x1b[0m\nYou've hit your session limit · resets 12:43pm (UTC)\nlast".to_owned()),
            ] {
                let whole = feed_split(format, data.as_bytes(), &[]);
                let split = feed_split(format, data.as_bytes(), &cuts);
                prop_assert_eq!(snapshot(&whole), snapshot(&split));
            }
        }

        #[test]
        fn feed_never_panics(
            chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..300), any::<bool>()), 0..20),
            exit in prop_oneof![Just(None), Just(Some(0)), Just(Some(1))],
            format in prop_oneof![
                Just(Format::ClaudeStreamJson),
                Just(Format::CodexJson),
                Just(Format::CopilotJson),
                Just(Format::Text),
            ],
        ) {
            let mut o = observer(format);
            for (chunk, is_stderr) in &chunks {
                o.feed(chunk, *is_stderr);
                let _ = o.take_activity_changed();
            }
            o.finish(exit);
            let _ = (o.activity(), o.result(), o.usage(), o.limit(), o.auth_error(), o.final_message());
        }

        #[test]
        fn signal_texts_never_panic(
            lead in "(Error: |■ |\\[2026-01-01\\] |)",
            opener in "(You've hit your (session |weekly |Opus |usage |)limit|Claude AI usage limit reached\\||You've hit your usage limit\\.|Attempt [0-9] failed with status 429|Invalid API key|usage_limit_reached)",
            middle in "( · resets | or try again at | try again in | try again |\"resets_at\":|\\.)",
            tail in "\\PC{0,40}",
            format in prop_oneof![Just(Format::Text), Just(Format::CodexJson), Just(Format::CopilotJson)],
            offset in -50_400i32..=50_400,
        ) {
            let line = format!("{lead}{opener}{middle}{tail}");
            let mut o = Observer::new(format, utc_now()).with_local_zone(FixedOffset::east_opt(offset).unwrap(), Some("Etc/Test"));
            o.feed(line.as_bytes(), true);
            o.feed(b"\n", true);
            let json = serde_json::json!({"type": "error", "message": line, "data": {"errorType": "rate_limit", "message": line}});
            o.feed(format!("{json}\n").as_bytes(), false);
            o.finish(Some(1));
            if let Some(limit) = o.limit() {
                prop_assert!(limit.message.chars().count() <= MESSAGE_CHARS + 1);
            }
        }

        #[test]
        fn nothing_a_plain_attempt_that_exited_0_printed_is_a_signal(
            lines in proptest::collection::vec(
                (prop_oneof![
                    proptest::sample::select(TALK).prop_map(str::to_owned),
                    "\\PC{0,80}",
                    (proptest::sample::select(TALK), "\\PC{0,20}").prop_map(|(t, s)| format!("{s}{t}")),
                ], any::<bool>()),
                0..40,
            ),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
        ) {
            let mut o = observer(Format::Text);
            for (line, is_stderr) in &lines {
                let bytes = format!("{line}\n").into_bytes();
                let mut last = 0;
                for c in &cuts {
                    let c = c % (bytes.len() + 1);
                    if c > last {
                        o.feed(&bytes[last..c], *is_stderr);
                        last = c;
                    }
                }
                o.feed(&bytes[last..], *is_stderr);
            }
            o.finish(Some(0));
            prop_assert!(o.limit().is_none());
            prop_assert!(o.auth_error().is_none());
            prop_assert!(o.retrying().is_none());
        }

        #[test]
        fn when_parser_never_panics(s in "\\PC{0,30}", digits in "[0-9: ,apmAPM()/a-zA-Z+\\-]{0,30}") {
            let mut o = observer(Format::Text);
            let _ = o.parse_when(&s);
            let _ = o.parse_when(&digits);
            let _ = parse_duration(&digits);
            let _ = utc_offset(&s);
            let lower = digits.to_ascii_lowercase();
            let _ = o.parse_reset(&digits, &lower);
        }
    }

    #[test]
    fn copilot_text_mode_rate_limit_after_its_retries() {
        let mut o = Observer::new(Format::Text, chrono::Utc::now());
        o.feed(b"Failed to get response from the AI model; retried 5 times (total retry wait time: 5.00 seconds) Last error: 429 Rate limit exceeded. Please retry later.\n", false);
        o.finish(Some(1));
        let l = o.limit().expect("a limit");
        assert_eq!(l.kind, "rate_limit");
        assert_eq!(l.reset_at, None);
    }

    #[test]
    fn a_time_of_day_just_past_means_now_and_an_exact_event_time_is_kept() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-03-10T13:41:56Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let mut o = Observer::new(Format::ClaudeStreamJson, now)
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
}
