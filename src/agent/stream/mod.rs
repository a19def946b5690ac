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

mod events;
mod plain;

use std::cell::OnceCell;

use chrono::{DateTime, Utc};

use super::cli::Output;
use super::findings::Findings;
use super::reset::Clock;
use super::text::{TAIL_BYTES, find_last_newline, find_newline};
use crate::proc::observe::{Observation, Watcher};
use crate::proc::relay::keep_tail;
use plain::{LastLines, LineBuf};

pub(crate) use super::cli::Format;
pub(crate) use super::format_for;
pub(crate) use super::output::{Limit, Usage, backoff};
#[cfg(test)]
use {
    super::output::AgentResult,
    chrono::FixedOffset,
    events::{json_body, lines_newest_first},
    serde_json::Value,
};

/// The longest line kept; the rest of a longer line is dropped.
pub(crate) const MAX_LINE: usize = 1024 * 1024;
/// How many of the last non-empty plain lines of each stream (stdout, stderr) a failed attempt
/// is judged by.
pub(crate) const FAILED_TAIL_LINES: usize = 20;
/// How much of each of those lines is kept (the rest is dropped): with both streams, at most
/// 2 × 20 × 2 KiB = 80 KiB whatever the volume.
pub(crate) const FAILED_TAIL_LINE_BYTES: usize = 2048;

/// Watches one attempt's output. Feed it every chunk, call [`Observer::finish`] at the end.
#[derive(Debug)]
pub(crate) struct Observer {
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
    /// A JSON event came after the last plain line kept.
    event_since_plain: bool,
    /// The last non-empty lines of a chunk of text, newest first, as ranges of `kept`.
    newest: Vec<std::ops::Range<usize>>,
    kept: Vec<u8>,
    /// Supersedable JSON events not read yet (see `Cli::supersedable`), as printed, oldest first,
    /// each ending in a newline: read when another event or a plain line comes, when the
    /// activity changes are asked for, at the end, or when they grow past `events::STASH`.
    stash: Vec<u8>,
    /// The activity the stash would show, worked out when asked.
    stash_activity: OnceCell<Option<String>>,
    /// The line read now was never finished with a newline: it cannot settle.
    unfinished: bool,
    /// The relay keeps the end of stdout and hands it over at the end (text output): no copy
    /// of it from every chunk.
    relay_keeps_tail: bool,
    finished: bool,
    /// Lines the agent was given (its prompt: the tests' and the verdict's output, a person's
    /// hint): printed back, they are not its own words, and never a signal of its CLI.
    quoted: std::collections::HashSet<String>,
}

impl Observer {
    pub(crate) fn new(format: Format, now: DateTime<Utc>) -> Observer {
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
            event_since_plain: false,
            newest: Vec::new(),
            kept: Vec::new(),
            stash: Vec::new(),
            stash_activity: OnceCell::new(),
            unfinished: false,
            relay_keeps_tail: false,
            finished: false,
            quoted: std::collections::HashSet::new(),
        }
    }

    /// The lines of `given` (the agent's prompt) are not the agent's own: a limit or login
    /// message a failing test printed and the agent echoed is no signal.
    pub(crate) fn given(mut self, given: &str) -> Observer {
        self.quoted = given
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        self
    }

    /// Sets the local time zone used for reset times printed without a zone (or in the named
    /// zone). By default it is the machine's: `Local`'s offset and the name from `TZ`,
    /// `/etc/timezone` or `/etc/localtime`.
    #[cfg(test)]
    pub(crate) fn with_local_zone(mut self, offset: FixedOffset, name: Option<&str>) -> Observer {
        let clock = self.seen.clock_mut();
        *clock = clock.clone().with_local_zone(offset, name);
        self
    }

    /// Feed a chunk of stdout (is_stderr=false) or stderr. Cheap whatever the volume: lines are
    /// found with `memchr`; of plain text only the last lines of the chunk are read — the only
    /// ones that can show or be kept — and of a run of JSON events that supersede one another
    /// only the newest (see `Cli::supersedable`). What is left unread could change nothing.
    pub(crate) fn feed(&mut self, chunk: &[u8], is_stderr: bool) {
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
    pub(crate) fn finish(&mut self, exit: Option<i32>) {
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
            // Everything it printed, and all of it the shell's refusal: it never started.
            if matches!(exit, Some(126 | 127)) && self.plain_lines == tail.len() as u64 {
                self.seen.not_started(&tail);
            }
            // bwrap exits 1 when it cannot set the sandbox up; ralph's step inside, 126.
            if matches!(exit, Some(1 | 126)) && self.plain_lines == tail.len() as u64 {
                self.seen.sandbox_failed(&tail);
            }
            let own: Vec<crate::agent::findings::TailLine> = tail
                .into_iter()
                .filter(|l| !self.quoted.contains(l.text.trim()))
                .collect();
            self.format.cli.failed_tail(&own, &mut self.seen);
        }
        self.seen.end();
    }

    pub(crate) fn activity(&self) -> Option<&str> {
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
    pub(crate) fn take_activity_changed(&mut self) -> bool {
        self.read_stash();
        self.seen.take_activity_changed()
    }

    #[cfg(test)]
    pub(crate) fn result(&self) -> Option<&AgentResult> {
        self.seen.result()
    }

    /// Tokens + cost the attempt reported, zero when unknown; also when it ended on a limit.
    pub(crate) fn usage(&self) -> Usage {
        self.seen.usage()
    }

    /// The usage/rate limit that ended this attempt, if any.
    pub(crate) fn limit(&self) -> Option<&Limit> {
        self.seen.limit()
    }

    /// A rate limit the agent is retrying by itself right now (Claude `api_retry`); becomes
    /// [`Observer::limit`] at [`Observer::finish`] when nothing else followed it.
    #[cfg(test)]
    pub(crate) fn retrying(&self) -> Option<&Limit> {
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

    /// What the CLI said its failed run ended on (droid's `Exec ended early: …`), if it said.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.seen.failure()
    }

    /// Whether the agent, quiet now, is sleeping out a rate limit it retries by itself: a CLI
    /// that does so silently ([`Cli::retries_quietly`]) printed a retry message of its own as
    /// the last thing (a plain line opening with it, no event after). Only asked when the idle
    /// timer fires.
    ///
    /// [`Cli::retries_quietly`]: crate::agent::Cli::retries_quietly
    pub(crate) fn waiting(&self) -> bool {
        let cli = self.format.cli;
        if !cli.retries_quietly() || self.event_since_plain || self.finished {
            return false;
        }
        let newest = [&self.last_out, &self.last_err]
            .into_iter()
            .filter_map(|last| last.lines.back())
            .max_by_key(|(n, _)| *n);
        let Some((_, line)) = newest else {
            return false;
        };
        let text = String::from_utf8_lossy(line);
        let lower = text.to_ascii_lowercase();
        super::signal::find(&text, &lower, super::signal::Scope::Plain, cli.signals())
            .is_some_and(|found| found.class == super::signal::Class::Retry)
    }

    /// The agent never started (exit 126/127 with only the shell's refusal): what it said.
    pub(crate) fn cannot_start(&self) -> Option<&str> {
        self.seen.cannot_start()
    }

    /// The sandbox never started (exit 1 or 126 with only bwrap's words on stderr): what it
    /// said. Only the caller knows whether the attempt ran in a sandbox.
    pub(crate) fn sandbox_refused(&self) -> Option<&str> {
        self.seen.sandbox_refused()
    }

    /// An authentication failure (`Invalid API key`, `Not logged in · Please run /login`, 401):
    /// the caller reports it and halts.
    pub(crate) fn auth_error(&self) -> Option<&str> {
        self.seen.auth_error()
    }

    /// The agent's session or thread id, once it said it.
    #[cfg(test)]
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.seen.session_id()
    }

    /// Copilot's `usage.premiumRequests`, when its JSON result gave it.
    #[cfg(test)]
    pub(crate) fn premium_requests(&self) -> Option<f64> {
        self.seen.premium_requests()
    }

    /// The agent's final message (the result's text; else its last message; else the tail of
    /// plain stdout) for promise detection.
    pub(crate) fn final_message(&self) -> Option<String> {
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

    fn pending(&mut self, is_stderr: bool) -> &mut LineBuf {
        if is_stderr {
            &mut self.err
        } else {
            &mut self.out
        }
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

    fn waiting(&self) -> bool {
        Observer::waiting(self)
    }
}

#[cfg(test)]
mod tests;
