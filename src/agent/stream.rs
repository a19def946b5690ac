//! An incremental observer of an agent's output (SPEC §6, §9): the live activity, the final result,
//! token usage and cost, usage/rate limits and authentication errors, from arbitrary chunks.
//!
//! ralph relays the agent's stdout and stderr in whatever chunks the pipes deliver; [`Observer`]
//! splits them into lines itself (a line is capped at [`MAX_LINE`] bytes, the excess dropped), so
//! memory stays bounded whatever the volume. For a CLI that prints JSON events, each event line
//! goes to that CLI's reader ([`Cli::event`], leniently, as `serde_json::Value`); anything else
//! is plain text. Nothing here panics, whatever the input.
//!
//! It keeps up with a relay of gigabytes (SPEC §12) by reading only what can still matter, with
//! results the same as reading every line in order (a property test holds it to that): lines
//! are found with `memchr`; of plain text only the last non-empty lines of a chunk are read (the
//! activity, the failed-attempt ring) and the tail is kept as printed, stripped only when the
//! final message is asked for; JSON events whose effects a later one replaces (Claude's
//! messages, [`Cli::supersedable`]) wait unread in a bounded stash, and are read newest first,
//! only as far as needed, when something else comes, when asked, or at the end.
//!
//! Limits and login failures come only from real signals (SPEC §6): the structured events and
//! error fields the CLIs read, and, when the attempt did not exit 0 (or a signal ended it), the
//! last plain lines it printed — the last [`FAILED_TAIL_LINES`] non-empty lines of stdout and of
//! stderr, each cut to [`FAILED_TAIL_LINE_BYTES`] — read by [`Cli::failed_tail`]. Plain output
//! is never scanned while it streams (only kept in that bounded ring), and nothing an attempt
//! that exited 0 printed as plain text counts: an agent writing about rate limiters or login
//! pages is doing its work.
//!
//! [`Cli::event`]: crate::agent::Cli::event
//! [`Cli::failed_tail`]: crate::agent::Cli::failed_tail
//! [`Cli::supersedable`]: crate::agent::Cli::supersedable

use std::cell::OnceCell;
use std::collections::VecDeque;

use chrono::{DateTime, FixedOffset, Utc};
use serde_json::Value;

use super::cli::Output;
use super::findings::{ACTIVITY_BYTES, Findings, TailLine};
use super::reset::Clock;
use super::text::{TAIL_BYTES, find_last_newline, find_newline, strip_controls};
use crate::proc::observe::{Observation, Watcher};
use crate::proc::relay::keep_tail;

pub use super::cli::Format;
pub use super::format_for;
pub use super::output::{AgentResult, Limit, LimitKind, MIN_BACKOFF, Usage, backoff};

/// The longest line kept; the rest of a longer line is dropped.
pub const MAX_LINE: usize = 1024 * 1024;
/// How many of the last non-empty plain lines of each stream (stdout, stderr) a failed attempt
/// is judged by.
pub const FAILED_TAIL_LINES: usize = 20;
/// How much of each of those lines is kept (the rest is dropped): with both streams, at most
/// 2 × 20 × 2 KiB = 80 KiB whatever the volume.
pub const FAILED_TAIL_LINE_BYTES: usize = 2048;

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
    lines: VecDeque<(u64, Vec<u8>)>,
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

/// Watches one attempt's output. Feed it every chunk, call [`Observer::finish`] at the end.
#[derive(Debug)]
pub struct Observer {
    format: Format,
    seen: Findings,
    out: LineBuf,
    err: LineBuf,
    scratch: Vec<u8>,
    /// The end of plain stdout as printed — text output: the stream itself; JSON lines: the
    /// plain lines among the events — at least [`TAIL_BYTES`] of it and at most twice that. Its
    /// control codes are stripped only when the final message is asked for.
    tail: Vec<u8>,
    /// Whether the tail lost its beginning (its first line may be cut).
    tail_cut: bool,
    /// The last plain lines of stdout and stderr, read for signals when the attempt failed.
    last_out: LastLines,
    last_err: LastLines,
    /// How many plain lines were kept so far (their order across the two streams).
    plain_lines: u64,
    /// The last non-empty lines of a chunk of text, newest first, as ranges of `kept`.
    newest: Vec<std::ops::Range<usize>>,
    kept: Vec<u8>,
    /// Supersedable JSON events not read yet (see `Cli::supersedable`), as printed, oldest first,
    /// each ending in a newline: read when another event or a plain line comes, when the
    /// activity changes are asked for, at the end, or when they grow past [`STASH`].
    stash: Vec<u8>,
    /// The activity the stash would show, worked out when asked.
    stash_activity: OnceCell<Option<String>>,
    /// The line read now was never finished with a newline: it cannot settle.
    unfinished: bool,
    /// The relay keeps the end of stdout and hands it over at the end (text output): no copy
    /// of it from every chunk.
    relay_keeps_tail: bool,
    finished: bool,
}

/// How much of supersedable events is kept unread at most (plus one line).
const STASH: usize = 256 * 1024;

/// A run of supersedable JSON events of a chunk (see [`Observer::defer_run`]): whether it
/// begins with the line the chunk completed, and where its lines lie in the chunk.
#[derive(Debug, Default)]
struct Run {
    older: bool,
    lines: Option<std::ops::Range<usize>>,
}

impl Observer {
    pub fn new(format: Format, now: DateTime<Utc>) -> Observer {
        Observer {
            format,
            seen: Findings::new(Clock::new(now)),
            out: LineBuf::default(),
            err: LineBuf::default(),
            scratch: Vec::new(),
            tail: Vec::new(),
            tail_cut: false,
            last_out: LastLines::default(),
            last_err: LastLines::default(),
            plain_lines: 0,
            newest: Vec::new(),
            kept: Vec::new(),
            stash: Vec::new(),
            stash_activity: OnceCell::new(),
            unfinished: false,
            relay_keeps_tail: false,
            finished: false,
        }
    }

    /// Sets the local time zone used for reset times printed without a zone (or in the named
    /// zone). By default it is the machine's: `Local`'s offset and the name from `TZ`,
    /// `/etc/timezone` or `/etc/localtime`.
    pub fn with_local_zone(mut self, offset: FixedOffset, name: Option<&str>) -> Observer {
        let clock = self.seen.clock_mut();
        *clock = clock.clone().with_local_zone(offset, name);
        self
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Feed a chunk of stdout (is_stderr=false) or stderr. Cheap whatever the volume: lines are
    /// found with `memchr`; of plain text only the last lines of the chunk are read — the only
    /// ones that can show or be kept — and of a run of JSON events that supersede one another
    /// only the newest (see `Cli::supersedable`). What is left unread could change nothing.
    pub fn feed(&mut self, chunk: &[u8], is_stderr: bool) {
        let text = self.format.output == Output::Text;
        if text && !is_stderr && !self.relay_keeps_tail {
            self.tail_cut |= keep_tail(&mut self.tail, chunk, TAIL_BYTES);
        }
        let Some(last) = find_last_newline(chunk) else {
            self.pending(is_stderr).append(chunk);
            return;
        };
        let (lines, rest) = (&chunk[..last], &chunk[last + 1..]);
        // The first line ends the one the previous chunks left unfinished, if any.
        let mut older = LineBuf {
            buf: std::mem::take(&mut self.pending(is_stderr).buf),
        };
        let lines = if older.buf.is_empty() {
            lines
        } else {
            let end = find_newline(lines).unwrap_or(lines.len());
            older.append(&lines[..end]);
            &lines[(end + 1).min(lines.len())..]
        };
        let first = (!older.buf.is_empty()).then_some(&older.buf[..]);
        if text {
            self.text_lines(first, lines, is_stderr);
        } else {
            self.json_lines(first, lines, is_stderr);
        }
        let mut buf = older.buf;
        buf.clear();
        if buf.capacity() > 64 * 1024 {
            buf.shrink_to(64 * 1024);
        }
        let pending = self.pending(is_stderr);
        pending.buf = buf;
        pending.append(rest);
        self.seen.flush_activity();
    }

    /// The end of stdout the relay kept (at least its last [`TAIL_BYTES`]), and whether stdout
    /// was longer.
    fn relayed_tail(&mut self, tail: &[u8], cut: bool) {
        if self.relay_keeps_tail && self.format.output == Output::Text {
            self.tail.clear();
            self.tail_cut = keep_tail(&mut self.tail, tail, TAIL_BYTES) || cut;
        }
    }

    /// Call when the attempt ended, with its exit code (`None` when a signal ended it): flushes
    /// a last partial line and, unless it exited 0, lets the CLI read its last plain lines for a
    /// limit or a login failure.
    pub fn finish(&mut self, exit: Option<i32>) {
        for is_stderr in [false, true] {
            let buf = std::mem::take(&mut self.pending(is_stderr).buf);
            if !buf.is_empty() {
                if self.format.output == Output::Text {
                    self.text_lines(Some(&buf), b"", is_stderr);
                } else {
                    // A line the attempt did not finish (it may be cut short).
                    self.unfinished = true;
                    self.json_lines(Some(&buf), b"", is_stderr);
                    self.unfinished = false;
                }
            }
        }
        self.read_stash();
        self.finished = true;
        self.seen.flush_activity();
        if exit != Some(0) {
            let tail = self.failed_tail();
            self.format.cli.failed_tail(&tail, &mut self.seen);
        }
        self.seen.end();
    }

    pub fn activity(&self) -> Option<&str> {
        if !self.stash.is_empty()
            && let Some(activity) = self.stash_activity.get_or_init(|| {
                self.read_stash_aside(true, false)
                    .activity()
                    .map(str::to_owned)
            })
        {
            return Some(activity);
        }
        self.seen.activity()
    }

    /// Whether activity changed since the last call (for redraws).
    pub fn take_activity_changed(&mut self) -> bool {
        self.read_stash();
        self.seen.take_activity_changed()
    }

    pub fn result(&self) -> Option<&AgentResult> {
        self.seen.result()
    }

    /// Tokens + cost the attempt reported, zero when unknown; also when it ended on a limit.
    pub fn usage(&self) -> Usage {
        self.seen.usage()
    }

    /// The usage/rate limit that ended this attempt, if any.
    pub fn limit(&self) -> Option<&Limit> {
        self.seen.limit()
    }

    /// A rate limit the agent is retrying by itself right now (Claude `api_retry`); becomes
    /// [`Observer::limit`] at [`Observer::finish`] when nothing else followed it.
    pub fn retrying(&self) -> Option<&Limit> {
        // An event not read yet says the agent moved on, if it reads.
        self.seen.retrying().filter(|_| {
            let cli = self.format.cli;
            !lines_newest_first(&self.stash).any(|line| {
                json_body(&line[..line.len().min(MAX_LINE)])
                    .filter(|body| !cli.skips(body))
                    .is_some_and(|body| {
                        serde_json::from_slice::<Value>(body).is_ok_and(|v| v.is_object())
                    })
            })
        })
    }

    /// An authentication failure (`Invalid API key`, `Not logged in · Please run /login`, 401):
    /// the caller reports it and halts.
    pub fn auth_error(&self) -> Option<&str> {
        self.seen.auth_error()
    }

    /// The agent's session or thread id, once it said it.
    pub fn session_id(&self) -> Option<&str> {
        self.seen.session_id()
    }

    /// Copilot's `usage.premiumRequests`, when its JSON result gave it.
    pub fn premium_requests(&self) -> Option<f64> {
        self.seen.premium_requests()
    }

    /// The agent's final message (the result's text; else its last message; else the tail of
    /// plain stdout) for promise detection.
    pub fn final_message(&self) -> Option<String> {
        if let Some(r) = self.seen.result()
            && !r.text.trim().is_empty()
        {
            return Some(r.text.clone());
        }
        let stashed = (!self.stash.is_empty())
            .then(|| {
                self.read_stash_aside(false, true)
                    .last_text()
                    .map(str::to_owned)
            })
            .flatten();
        if let Some(t) = stashed.as_deref().or(self.seen.last_text())
            && !t.trim().is_empty()
        {
            return Some(t.to_owned());
        }
        let text = self.plain_tail();
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }

    // ----- lines -----

    fn pending(&mut self, is_stderr: bool) -> &mut LineBuf {
        if is_stderr {
            &mut self.err
        } else {
            &mut self.out
        }
    }

    /// Plain text: the complete lines of a chunk (`older`, then `lines`). Only the last
    /// [`FAILED_TAIL_LINES`] non-empty ones can matter — the activity, the failed-attempt ring,
    /// that stdout moved on; the tail is kept as printed — so they are read newest first, and
    /// the lines before them are left alone.
    fn text_lines(&mut self, older: Option<&[u8]>, lines: &[u8], is_stderr: bool) {
        self.newest.clear();
        self.kept.clear();
        for line in lines_newest_first(lines).chain(older) {
            if self.newest.len() == FAILED_TAIL_LINES {
                break;
            }
            if let Some(clean) = clean(&line[..line.len().min(MAX_LINE)], &mut self.scratch) {
                let at = self.kept.len();
                self.kept
                    .extend_from_slice(&clean[..clean.len().min(FAILED_TAIL_LINE_BYTES)]);
                self.newest.push(at..self.kept.len());
            }
        }
        if self.scratch.capacity() > 64 * 1024 {
            self.scratch = Vec::new();
        }
        let Some(newest) = self.newest.first() else {
            return;
        };
        if !is_stderr {
            self.seen.progress();
        }
        let newest = &self.kept[newest.clone()];
        self.seen
            .pend_activity(&newest[..newest.len().min(ACTIVITY_BYTES)]);
        let last = if is_stderr {
            &mut self.last_err
        } else {
            &mut self.last_out
        };
        for range in self.newest.iter().rev() {
            last.push(self.plain_lines, &self.kept[range.clone()]);
            self.plain_lines += 1;
        }
    }

    /// JSON lines: the complete lines of a chunk (`older`, then `lines`), each read in order,
    /// except that a run of supersedable events is read only when something else comes (or the
    /// chunk ends), and then from its newest end.
    fn json_lines(&mut self, older: Option<&[u8]>, lines: &[u8], is_stderr: bool) {
        let cli = self.format.cli;
        let mut run = Run::default();
        if let Some(line) = older {
            match json_body(line) {
                Some(body) if cli.skips(body) => self.seen.progress(),
                Some(body) if cli.supersedable(body) => run.older = true,
                _ => {
                    self.read_stash();
                    self.line(line, is_stderr);
                }
            }
        }
        let mut at = 0;
        while at < lines.len() {
            let end = find_newline(&lines[at..]).map_or(lines.len(), |nl| at + nl);
            let line = &lines[at..end.min(at + MAX_LINE)];
            match json_body(line) {
                Some(body) if cli.skips(body) => self.seen.progress(),
                Some(body) if cli.supersedable(body) => {
                    let start = run.lines.as_ref().map_or(at, |r| r.start);
                    run.lines = Some(start..end);
                }
                _ => {
                    // Anything else is read in order: what came before it first.
                    self.defer_run(&mut run, older, lines);
                    self.read_stash();
                    self.line(line, is_stderr);
                }
            }
            at = end + 1;
        }
        self.defer_run(&mut run, older, lines);
    }

    /// Keeps a run of supersedable events unread, in the stash: of its lines, newest first,
    /// those up to the first that settles (`Cli::settles`: what is older, the stash included,
    /// could change nothing), else all of them.
    fn defer_run(&mut self, run: &mut Run, older: Option<&[u8]>, lines: &[u8]) {
        let run = std::mem::take(run);
        if !run.older && run.lines.is_none() {
            return;
        }
        let cli = self.format.cli;
        let settles = |line: &[u8]| {
            line.len() < MAX_LINE
                && json_body(line).is_some_and(|body| !cli.skips(body) && cli.settles(body))
        };
        let newer = run.lines.clone().map_or(&b""[..], |r| &lines[r]);
        let older = older.filter(|_| run.older);
        let mut end = newer.len();
        let mut from = None;
        while run.lines.is_some() {
            let start = find_last_newline(&newer[..end]).map_or(0, |nl| nl + 1);
            if settles(&newer[start..end]) {
                from = Some(start);
                break;
            }
            if start == 0 {
                break;
            }
            end = start - 1;
        }
        if from.is_some() || older.is_some_and(|line| !self.unfinished && settles(line)) {
            self.stash.clear();
        }
        if let (None, Some(line)) = (from, older) {
            self.stash.extend_from_slice(line);
            self.stash.push(b'\n');
        }
        if run.lines.is_some() {
            self.stash.extend_from_slice(&newer[from.unwrap_or(0)..]);
            self.stash.push(b'\n');
        }
        self.stash_activity = OnceCell::new();
        if self.stash.len() > STASH {
            self.read_stash();
        }
    }

    /// Reads the stash into what was seen.
    fn read_stash(&mut self) {
        if self.stash.is_empty() {
            return;
        }
        self.seen.newest_first(true, true);
        read_newest_first(self.format.cli, &self.stash, &mut self.seen);
        self.seen.in_order();
        self.stash.clear();
        if self.stash.capacity() > STASH {
            self.stash.shrink_to(STASH);
        }
        self.stash_activity = OnceCell::new();
    }

    /// What the stash would set (the activity, the message, or both, as asked), read into
    /// findings of its own.
    fn read_stash_aside(&self, activity: bool, message: bool) -> Findings {
        let mut aside = Findings::new(self.seen.clock().clone());
        aside.newest_first(activity, message);
        read_newest_first(self.format.cli, &self.stash, &mut aside);
        aside
    }

    fn line(&mut self, line: &[u8], is_stderr: bool) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(first) = line.iter().position(|b| !b.is_ascii_whitespace()) else {
            return;
        };
        let body = &line[first..];
        if self.format.output == Output::JsonLines && body[0] == b'{' {
            if self.format.cli.skips(body) {
                self.seen.progress();
                return;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(body) {
                if v.is_object() {
                    self.format.cli.event(&v, body, &mut self.seen);
                    return;
                }
            } else if body.starts_with(b"{\"") {
                // A JSON event cut short (by the line cap): nothing to show.
                return;
            }
        }
        self.plain(line, is_stderr);
    }

    /// A plain line among JSON events: the activity, the tail (stdout), the failed-attempt
    /// ring. Never scanned for signals here.
    fn plain(&mut self, line: &[u8], is_stderr: bool) {
        let mut scratch = std::mem::take(&mut self.scratch);
        if let Some(trimmed) = clean(line, &mut scratch) {
            if !is_stderr {
                if self.format.output == Output::JsonLines {
                    // (Text output keeps the whole stream as its tail.)
                    self.tail_cut |= keep_tail(&mut self.tail, line, TAIL_BYTES);
                    self.tail_cut |= keep_tail(&mut self.tail, b"\n", TAIL_BYTES);
                }
                self.seen.progress();
            }
            // Only the last line of a chunk can show, so its activity is worked out once.
            self.seen
                .pend_activity(&trimmed[..trimmed.len().min(ACTIVITY_BYTES)]);
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

    /// The end of plain stdout, control codes stripped, blank lines dropped: its last
    /// [`TAIL_BYTES`] as printed, from the first line that begins in them.
    fn plain_tail(&self) -> String {
        let mut tail = &self.tail[..];
        if self.format.output == Output::Text && !self.finished {
            // The line still being printed is not a line yet.
            tail = &tail[..find_last_newline(tail).map_or(0, |nl| nl + 1)];
        }
        let start = tail.len().saturating_sub(TAIL_BYTES);
        let mut window = &tail[start..];
        if (start > 0 || self.tail_cut)
            && let Some(nl) = find_newline(window)
            && nl + 1 < window.len()
        {
            window = &window[nl + 1..];
        }
        let mut text = Vec::with_capacity(window.len());
        let mut scratch = Vec::new();
        for line in window.split(|&b| b == b'\n') {
            if let Some(clean) = clean(line, &mut scratch) {
                text.extend_from_slice(clean);
                text.push(b'\n');
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    /// The last plain lines of both streams, in the order printed (the ring is emptied).
    fn failed_tail(&mut self) -> Vec<TailLine> {
        let out = std::mem::take(&mut self.last_out);
        let err = std::mem::take(&mut self.last_err);
        let mut lines: Vec<(u64, TailLine)> = [(out, false), (err, true)]
            .into_iter()
            .flat_map(|(last, is_stderr)| {
                last.lines.into_iter().map(move |(n, bytes)| {
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    (n, TailLine { text, is_stderr })
                })
            })
            .collect();
        lines.sort_unstable_by_key(|(n, _)| *n);
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

/// The observer watching a supervised run: fed every chunk the relay publishes, finished when
/// the run ends. The relay keeps the end of stdout (a text output's tail) and hands it over at
/// the end, so the observer does not copy it from every chunk.
impl Watcher for Observer {
    fn observe(&mut self, what: &Observation<'_>) {
        match *what {
            Observation::Started => self.relay_keeps_tail = true,
            Observation::Output { bytes, stderr } => self.feed(bytes, stderr),
            Observation::Ended {
                exit,
                stdout_tail,
                cut,
            } => {
                self.relayed_tail(stdout_tail, cut);
                self.finish(exit);
            }
            Observation::Stopping(_) | Observation::Killed => {}
        }
    }
}

/// Reads supersedable events (lines, oldest first) newest first until older ones could change
/// nothing (`seen` is reading newest first).
fn read_newest_first(cli: &dyn super::Cli, lines: &[u8], seen: &mut Findings) {
    for line in lines_newest_first(lines) {
        if seen.settled() {
            break;
        }
        let line = &line[..line.len().min(MAX_LINE)];
        let Some(body) = json_body(line).filter(|body| !cli.skips(body)) else {
            continue;
        };
        if let Ok(v) = serde_json::from_slice::<Value>(body)
            && v.is_object()
        {
            seen.older_event();
            cli.event(&v, body, seen);
        }
    }
}

/// The lines of `bytes` (newline-separated), newest first.
fn lines_newest_first(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let r = rest?;
        match find_last_newline(r) {
            Some(nl) => {
                rest = Some(&r[..nl]);
                Some(&r[nl + 1..])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// A plain line as shown: without its final carriage return and control codes, trimmed (in
/// `scratch`); `None` when nothing is left.
fn clean<'s>(line: &[u8], scratch: &'s mut Vec<u8>) -> Option<&'s [u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    scratch.clear();
    strip_controls(line, scratch);
    let trimmed = scratch.trim_ascii();
    (!trimmed.is_empty()).then_some(trimmed)
}

/// A line that may be a JSON event: from its first `{` (after leading whitespace).
fn json_body(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let first = line.iter().position(|b| !b.is_ascii_whitespace())?;
    (line[first] == b'{').then(|| &line[first..])
}

#[cfg(test)]
mod tests {
    use chrono::FixedOffset;
    use proptest::prelude::*;

    use super::*;
    use crate::agent::claude::Claude;
    use crate::agent::codex::Codex;
    use crate::agent::copilot::Copilot;
    use crate::agent::custom::Custom;
    use crate::agent::findings::ACTIVITY_CHARS;
    use crate::agent::testkit::*;
    use crate::agent::text::MESSAGE_CHARS;

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

    #[test]
    fn plain_text_activity_is_the_last_line() {
        let mut o = observer(Format::of(&Custom));
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
        let mut o = observer(Format::of(&Custom));
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
            Format::of(&Custom),
            Format::of(&Claude),
            Format::json(&Codex),
            Format::json(&Copilot),
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
            if format != Format::of(&Custom) {
                assert_eq!(o.activity(), None);
            }
        }
        // One 5 MiB chunk.
        let mut o = observer(Format::of(&Custom));
        let mut big = vec![b'b'; 5 * 1024 * 1024];
        big.push(b'\n');
        o.feed(&big, false);
        assert!(o.activity().unwrap().starts_with("bbbb"));
        assert!(o.tail.len() <= 2 * TAIL_BYTES);
    }

    #[test]
    fn invalid_utf8_and_control_codes() {
        let mut o = observer(Format::of(&Custom));
        o.feed(
            b"\xff\xfe hello \xc3\x28 world\x07\x1b]0;title\x07\n",
            false,
        );
        let a = o.activity().unwrap();
        assert!(a.contains("hello"), "{a}");
        assert!(a.contains("world"));
        assert!(!a.contains('\x07') && !a.contains("title"));
        let mut o = observer(Format::of(&Claude));
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
            Format::of(&Claude),
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
            Format::json(&Codex),
            r#"{"type":"item.started","item":{"type":"command_execution","command":["/bin/bash","-lc","ls -la"]}}"#,
        );
        assert_eq!(o.activity(), Some("$ ls -la"));
    }

    #[test]
    fn talk_about_limits_and_logins_in_plain_text_that_exited_0_is_work() {
        let talk = TALK.join("\n") + "\n";
        let mut o = observer(Format::of(&Custom));
        o.feed(talk.as_bytes(), false);
        o.feed(talk.as_bytes(), true);
        o.finish(Some(0));
        assert_no_signal(&o, "plain text, exit 0");
        // Each alone, as the very last line of either stream.
        for text in TALK {
            for is_stderr in [false, true] {
                let mut o = observer(Format::of(&Custom));
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
            (Format::of(&Claude), &claude[..]),
            (Format::json(&Codex), &codex[..]),
            (Format::json(&Copilot), &copilot[..]),
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
    fn the_failed_tail_is_bounded() {
        let mut o = observer(Format::of(&Custom));
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
                let o = failed(&Custom, &stdout, &stderr);
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
            let o = failed(&Custom, "", &format!("{text}\n"));
            assert_eq!(o.auth_error(), Some(text));
        }
    }

    /// Lines an attempt may print, for comparing the observer with reading every line in order:
    /// Claude's events of every kind (messages that settle and that do not, API errors), other
    /// CLIs' events, plain text with control codes, blank and broken lines.
    const LINES: &[&str] = &[
        r#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}"#,
        r#"{"type":"assistant","message":{"id":"m1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Running the tests first."}]},"session_id":"s-1"}"#,
        r#"{"type":"assistant","message":{"id":"m2","model":"claude-sonnet-4-5","content":[{"type":"text","text":"\nA message that begins with a newline"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m3","model":"claude-sonnet-4-5","content":[{"type":"text","text":"   "}]}}"#,
        r#"{"type":"assistant","message":{"id":"m4","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"hmm"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m5","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]}}"#,
        r#"{"type":"assistant","message":{"id":"m6","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"a.json","content":[{"type":"text","text":"nested"}]}}]}}"#,
        r#"{"type":"assistant","message":{"id":"m7","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Both: a text"},{"type":"tool_use","id":"t3","name":"Read","input":{"file_path":"src/lib.rs"}}]}}"#,
        r#"{"type":"assistant","message":{"id":"m8","content":"A message as a plain string"}}"#,
        r#"{"type":"assistant","message":{"id":"m9","model":"claude-sonnet-4-5","content":[{"type":"text","text":"cut short"#,
        r#"{"type": "assistant", "message": {"content": [{"type": "text", "text": "Spaced JSON"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m10","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"You've hit your session limit · resets 1:03pm (UTC)"}]},"session_id":"s-1","error":"rate_limit"}"#,
        r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"OAuth token has expired · Please run /login"}]},"error":"authentication_failed"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"test result: ok"}]}}"#,
        r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"error_status":429,"error":"rate_limit"}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"five_hour"}}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"Done. <promise>DONE</promise>","session_id":"s-1","total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":5}}"#,
        r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited","usage":{}}"#,
        r#"{"type":"thread.started","thread_id":"th-1"}"#,
        r#"{"type":"item.completed","item":{"type":"agent_message","text":"Codex says hi"}}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":5}}"#,
        r#"{"type":"assistant.message","data":{"content":"Copilot says hi","outputTokens":5}}"#,
        r#"{"type":"result","sessionId":"c-1","exitCode":0,"usage":{"premiumRequests":1}}"#,
        "   Compiling ralph v0.1.0",
        "\x1b[1m\x1b[32m    Finished\x1b[0m `dev` profile",
        "\x1b[0m",
        "Downloading 10%\rDownloading 100%\r",
        "You've hit your session limit · resets 12:43pm (UTC)",
        "Not logged in · Please run /login",
        "{not json at all",
        "[1,2,3]",
        "   ",
        "",
    ];

    /// The observer as it was: every line read, in order, one at a time.
    fn read_line_by_line(format: Format, stdout: &[u8], stderr: &[u8]) -> Observer {
        let mut o = observer(format);
        if format.output == Output::Text {
            o.tail_cut = keep_tail(&mut o.tail, stdout, TAIL_BYTES);
        }
        for (data, is_stderr) in [(stdout, false), (stderr, true)] {
            let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
            // What follows the last newline is not a line yet.
            let unfinished = lines.pop().unwrap_or_default();
            for line in lines {
                o.line(&line[..line.len().min(MAX_LINE)], is_stderr);
            }
            o.pending(is_stderr).append(unfinished);
        }
        o.seen.flush_activity();
        o
    }

    /// The observer fed the two streams in chunks cut at `cuts`.
    fn read_in_chunks(format: Format, stdout: &[u8], stderr: &[u8], cuts: &[usize]) -> Observer {
        let mut o = observer(format);
        for (data, is_stderr) in [(stdout, false), (stderr, true)] {
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
            points.sort_unstable();
            let mut last = 0;
            for p in points {
                o.feed(&data[last..p], is_stderr);
                last = p;
            }
            o.feed(&data[last..], is_stderr);
        }
        o
    }

    proptest! {
        #[test]
        fn reading_only_what_can_matter_changes_nothing(
            picks in proptest::collection::vec((0..LINES.len(), any::<bool>()), 0..50),
            cuts in proptest::collection::vec(any::<usize>(), 0..30),
            failed in any::<bool>(),
            format in prop_oneof![
                Just(Format::of(&Claude)),
                Just(Format::of(&Custom)),
                Just(Format::json(&Codex)),
                Just(Format::json(&Copilot)),
            ],
        ) {
            let (mut stdout, mut stderr) = (String::new(), String::new());
            for (i, (pick, is_stderr)) in picks.iter().enumerate() {
                let out = if *is_stderr { &mut stderr } else { &mut stdout };
                out.push_str(LINES[*pick]);
                // The last line of a stream may lack its newline.
                if i + 1 < picks.len() || pick % 2 == 0 {
                    out.push('\n');
                }
            }
            let (stdout, stderr) = (stdout.as_bytes(), stderr.as_bytes());
            let exit = if failed { Some(1) } else { Some(0) };
            let mut lines = read_line_by_line(format, stdout, stderr);
            let mut chunks = read_in_chunks(format, stdout, stderr, &cuts);
            prop_assert_eq!(lines.activity(), chunks.activity());
            prop_assert_eq!(lines.final_message(), chunks.final_message());
            prop_assert_eq!(lines.retrying(), chunks.retrying());
            prop_assert_eq!(lines.failed_tail(), chunks.failed_tail());
            let mut lines = read_line_by_line(format, stdout, stderr);
            let mut chunks = read_in_chunks(format, stdout, stderr, &cuts);
            lines.finish(exit);
            chunks.finish(exit);
            prop_assert_eq!(snapshot(&lines), snapshot(&chunks));
        }
    }

    #[test]
    fn a_long_text_output_keeps_its_last_lines_whatever_the_chunks() {
        let mut text = String::new();
        for i in 0..30_000 {
            match i % 7 {
                0 => text.push_str(&format!("\x1b[32m   Compiling\x1b[0m crate-{i}\n")),
                1 => text.push_str("\n   \n"),
                2 => text.push_str(&format!("{}\n", "long line ".repeat(i % 500))),
                3 => text.push_str(&format!("progress {i}%\rprogress done\r\n")),
                _ => text.push_str(&format!("line {i} of the agent's answer\n")),
            }
        }
        text.push_str("Not logged in · Please run /login");
        let lines = read_line_by_line(Format::of(&Custom), text.as_bytes(), b"");
        let mut lines_tail = read_line_by_line(Format::of(&Custom), text.as_bytes(), b"");
        for size in [1, 100, 4096, 65536, 1 << 20, text.len()] {
            let cuts: Vec<usize> = (1..=text.len() / size).map(|k| k * size).collect();
            let mut chunks = read_in_chunks(Format::of(&Custom), text.as_bytes(), b"", &cuts);
            assert_eq!(lines.activity(), chunks.activity(), "{size}");
            assert!(
                chunks.tail.len() <= 2 * TAIL_BYTES + size.min(TAIL_BYTES),
                "{size}"
            );
            assert_eq!(lines_tail.failed_tail(), chunks.failed_tail(), "{size}");
            lines_tail = read_line_by_line(Format::of(&Custom), text.as_bytes(), b"");
            chunks.finish(Some(1));
            assert_eq!(
                chunks.auth_error(),
                Some("Not logged in · Please run /login")
            );
            let message = chunks.final_message().unwrap();
            assert!(message.len() <= TAIL_BYTES, "{size}");
            assert!(
                message.ends_with(
                    "line 29999 of the agent's answer\nNot logged in · Please run /login"
                ),
                "{size}"
            );
            assert!(!message.contains('\x1b'), "{size}");
        }
    }

    #[test]
    fn claude_messages_are_read_only_as_far_as_they_matter() {
        // Many messages between two results: the observer reads only the newest, yet knows the
        // activity and the final message as if it had read them all.
        let text = |i: usize| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"m{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"Step {i} done."}}]}},"session_id":"s"}}"#
            )
        };
        let tool = |i: usize| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"t{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"tool_use","id":"u{i}","name":"Bash","input":{{"command":"make step-{i}"}}}}]}},"session_id":"s"}}"#
            )
        };
        let mut stream = String::new();
        for i in 0..5_000 {
            stream.push_str(&text(i));
            stream.push('\n');
            stream.push_str(&tool(i));
            stream.push('\n');
        }
        let mut o = observer(Format::of(&Claude));
        for chunk in stream.as_bytes().chunks(64 * 1024) {
            o.feed(chunk, false);
            assert!(o.stash.len() <= STASH + 64 * 1024);
        }
        assert_eq!(o.activity(), Some("Bash: make step-4999"));
        assert_eq!(o.final_message().as_deref(), Some("Step 4999 done."));
        assert!(o.take_activity_changed());
        assert!(o.stash.is_empty());
        // Tool calls only, no message: still bounded, still right.
        let mut o = observer(Format::of(&Claude));
        o.feed(format!("{}\n", text(1)).as_bytes(), false);
        for i in 0..20_000 {
            o.feed(format!("{}\n", tool(i)).as_bytes(), false);
            assert!(o.stash.len() <= STASH + 64 * 1024);
        }
        o.finish(Some(0));
        assert_eq!(o.activity(), Some("Bash: make step-19999"));
        assert_eq!(o.final_message().as_deref(), Some("Step 1 done."));
    }

    proptest! {
        #[test]
        fn any_split_gives_identical_results(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
            for (format, data) in [
                (Format::of(&Claude), claude_session()),
                (Format::of(&Claude), limit_session()),
                (Format::of(&Custom), "one\r\ntwo\n\x1b[32mthree\x1b[0m\nYou've hit your session limit · resets 12:43pm (UTC)\nlast".to_owned()),
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
                Just(Format::of(&Claude)),
                Just(Format::json(&Codex)),
                Just(Format::json(&Copilot)),
                Just(Format::of(&Custom)),
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
            format in prop_oneof![Just(Format::of(&Custom)), Just(Format::json(&Codex)), Just(Format::json(&Copilot))],
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
    }

    #[test]
    fn only_the_last_lines_of_each_stream_count() {
        // A message buried under more output is history.
        let mut buried = String::from("You've hit your session limit · resets 12:43pm (UTC)\n");
        for i in 0..FAILED_TAIL_LINES {
            buried.push_str(&format!("later line {i}\n"));
        }
        let o = failed(&Custom, &buried, "");
        assert_no_signal(&o, "buried");
        // Each stream keeps its own last lines: chatty stdout does not push out stderr's error.
        let o = failed(&Custom, &buried, "Not logged in · Please run /login\n");
        assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
        // A JSON-format attempt's plain lines (the CLI's own stderr) count the same way.
        let mut o = observer(Format::of(&Claude));
        o.feed(b"Invalid API key \xc2\xb7 Please run /login\n", true);
        o.finish(Some(1));
        assert_eq!(o.auth_error(), Some("Invalid API key · Please run /login"));
        // A signal ending the attempt (no exit code) is a failure too.
        let mut o = observer(Format::of(&Custom));
        o.feed(b"Not logged in \xc2\xb7 Please run /login\n", true);
        o.finish(None);
        assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
    }

    #[test]
    fn format_for_presets() {
        assert_eq!(format_for("claude"), Format::of(&Claude));
        assert_eq!(format_for("claude").output, Output::JsonLines);
        for preset in ["copilot", "codex", "gemini", "custom", ""] {
            assert_eq!(format_for(preset).output, Output::Text, "{preset}");
        }
        assert_eq!(format_for("nonsense"), Format::of(&Custom));
    }

    proptest! {
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
            preset in proptest::sample::select(vec!["copilot", "codex", "gemini", "custom", "claude"]),
        ) {
            let mut o = observer(format_for(preset));
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
    }
}
