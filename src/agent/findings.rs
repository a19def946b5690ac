//! What an attempt reported, as the CLIs read it: the live activity, the result, usage and cost,
//! the session, and the limit, retry or login failure that ended it. Each CLI's reader writes
//! here through a few methods; the observer reads it back.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::output::{AgentResult, Limit, LimitKind, Usage};
use super::reset::Clock;
use super::signal::{self, Class, Patterns, Scope};
use super::text::{
    bounded, clip, cut_chars, first_line, floor_char_boundary, one_line, strip_controls,
};
pub(crate) use super::tools::tool_activity;
pub(super) use super::tools::tool_results;

/// How many characters of a line the activity shows.
pub(crate) const ACTIVITY_CHARS: usize = 120;
/// Enough bytes of a line for [`ACTIVITY_CHARS`] characters of any width, and one more.
pub(super) const ACTIVITY_BYTES: usize = 4 * ACTIVITY_CHARS + 4;

/// One of the last plain lines of a failed attempt, control codes stripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TailLine {
    pub(crate) text: String,
    pub(crate) is_stderr: bool,
}

/// What an event said, kept only for `--stream`'s rendering (`agent::render`): the CLI's own
/// reader says it as it reads the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Said {
    /// An assistant message (bounded).
    Text(String),
    /// A tool call, as the activity shows it: `Bash: cargo test`.
    Tool(String),
    /// What a tool gave back (bounded), and whether it was an error.
    ToolResult { text: String, error: bool },
}

/// Everything an attempt reported so far.
#[derive(Debug)]
pub(crate) struct Findings {
    clock: Clock,
    activity: Option<String>,
    activity_changed: bool,
    /// The start of the last plain line, shown at the end of the chunk unless an event set the
    /// activity after it.
    pending: Vec<u8>,
    has_pending: bool,
    pub(super) result: Option<AgentResult>,
    /// Usage summed from streaming events (Codex turns, Copilot usage events).
    pub(super) usage: Usage,
    /// Copilot: output tokens counted from `assistant.message`, used when no usage events come.
    pub(super) message_output_tokens: u64,
    pub(super) premium_requests: Option<f64>,
    limit: Option<Limit>,
    retrying: Option<Limit>,
    auth_error: Option<String>,
    /// The shell's words when the agent never started (exit 126/127, nothing else printed).
    cannot_start: Option<String>,
    /// The sandbox never started: what bwrap (or ralph's step inside it) said.
    sandbox_refused: Option<String>,
    /// The CLI's own word on why its run failed (droid's `error` events: `Exec ended early:
    /// insufficient permission to proceed…`), shown with a non-zero exit.
    failure: Option<String>,
    pub(super) session_id: Option<String>,
    /// The latest assistant message (JSON formats).
    pub(super) last_text: Option<String>,
    /// The latest assistant text came from the CLI, not the model (Qwen's unwritten
    /// `[API Error: …]`): a result repeating it is the CLI's.
    pub(super) unwritten_latest: bool,
    /// While events are read newest first: what they set already (see [`Findings::newest_first`]).
    newest_first: Option<Settled>,
    /// What the events said, in order, when rendering them (`None`: not kept).
    said: Option<Vec<Said>>,
}

/// What the events read newest first have set: an older event no longer changes it (the one
/// being read may, several times: within an event, the last word counts).
#[derive(Debug, Default, Clone, Copy)]
struct Settled {
    activity: bool,
    text: bool,
    /// Set by the event being read.
    event_activity: bool,
    event_text: bool,
}

impl Settled {
    fn activity(&self) -> bool {
        self.activity || self.event_activity
    }

    fn text(&self) -> bool {
        self.text || self.event_text
    }
}

impl Findings {
    pub(super) fn new(clock: Clock) -> Findings {
        Findings {
            clock,
            activity: None,
            activity_changed: false,
            pending: Vec::new(),
            has_pending: false,
            result: None,
            usage: Usage::default(),
            message_output_tokens: 0,
            premium_requests: None,
            limit: None,
            retrying: None,
            auth_error: None,
            cannot_start: None,
            sandbox_refused: None,
            failure: None,
            session_id: None,
            last_text: None,
            unwritten_latest: false,
            newest_first: None,
            said: None,
        }
    }

    /// Findings that keep what the events say ([`Said`]), for [`Findings::take_said`].
    pub(super) fn transcribing(mut self) -> Findings {
        self.said = Some(Vec::new());
        self
    }

    /// What the events said since the last call.
    pub(super) fn take_said(&mut self) -> Vec<Said> {
        self.said.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Whether what the events say is kept ([`Findings::transcribing`]).
    pub(super) fn rendering(&self) -> bool {
        self.said.is_some()
    }

    fn say(&mut self, said: impl FnOnce() -> Said) {
        if let Some(all) = &mut self.said {
            all.push(said());
        }
    }

    pub(super) fn clock(&self) -> &Clock {
        &self.clock
    }

    #[cfg(test)]
    pub(super) fn clock_mut(&mut self) -> &mut Clock {
        &mut self.clock
    }

    // ----- read back -----

    pub(crate) fn activity(&self) -> Option<&str> {
        self.activity.as_deref()
    }

    /// Whether activity changed since the last call (for redraws).
    pub(crate) fn take_activity_changed(&mut self) -> bool {
        std::mem::take(&mut self.activity_changed)
    }

    pub(crate) fn result(&self) -> Option<&AgentResult> {
        self.result.as_ref()
    }

    /// Tokens and cost the attempt reported, also when it ended on a limit: the result's when
    /// there is one, else what the events added up to.
    pub(crate) fn usage(&self) -> Usage {
        if let Some(r) = &self.result {
            return r.usage.clone();
        }
        self.summed_usage()
    }

    /// What the streaming events added up to (Copilot's output tokens from its messages when no
    /// usage event came).
    pub(super) fn summed_usage(&self) -> Usage {
        let mut u = self.usage.clone();
        if u.output_tokens == 0 {
            u.output_tokens = self.message_output_tokens;
        }
        u
    }

    pub(crate) fn limit(&self) -> Option<&Limit> {
        self.limit.as_ref()
    }

    #[cfg(test)]
    pub(crate) fn retrying(&self) -> Option<&Limit> {
        self.retrying.as_ref()
    }

    pub(crate) fn auth_error(&self) -> Option<&str> {
        self.auth_error.as_deref()
    }

    /// The agent never started: what the shell said.
    pub(crate) fn cannot_start(&self) -> Option<&str> {
        self.cannot_start.as_deref()
    }

    /// The sandbox never started: what bwrap said.
    pub(crate) fn sandbox_refused(&self) -> Option<&str> {
        self.sandbox_refused.as_deref()
    }

    /// The attempt ended having printed only `lines`, each on stderr and each bwrap's own
    /// (`bwrap: …`, printed when it cannot set the sandbox up, before anything runs in it) or
    /// ralph's step inside it failing (`ralph __confine: cannot …`): the sandbox never started.
    pub(super) fn sandbox_failed(&mut self, lines: &[TailLine]) {
        let ours = |l: &TailLine| {
            l.is_stderr
                && (l.text.starts_with("bwrap: ") || l.text.starts_with("ralph __confine: cannot "))
        };
        if !lines.is_empty() && lines.iter().all(ours) {
            let said: Vec<&str> = lines.iter().map(|l| l.text.trim()).collect();
            self.sandbox_refused = Some(clip(&said.join("; ")));
        }
    }

    /// What the CLI said its run failed on, if it said.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Adds a message to what the CLI said its run failed on (`; ` between them, bounded).
    pub(super) fn failed_with(&mut self, message: &str) {
        let message = one_line(message);
        if message.is_empty() {
            return;
        }
        self.failure = Some(match self.failure.take() {
            Some(said) => clip(&format!("{said}; {message}")),
            None => clip(&message),
        });
    }

    /// The agent exited 126/127 having printed only `lines`, each the shell's word that a
    /// program cannot run (not found, no such file, permission denied…): it never started.
    pub(super) fn not_started(&mut self, lines: &[TailLine]) {
        const REFUSALS: [&str; 6] = [
            ": No such file or directory",
            ": command not found",
            ": not found",
            ": Permission denied",
            ": Is a directory",
            "cannot execute",
        ];
        let refused = |l: &TailLine| REFUSALS.iter().any(|r| l.text.contains(r));
        if !lines.is_empty() && lines.iter().all(refused) {
            let said: Vec<&str> = lines.iter().map(|l| l.text.trim()).collect();
            self.cannot_start = Some(clip(&said.join("; ")));
        }
    }

    #[cfg(test)]
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    #[cfg(test)]
    pub(crate) fn premium_requests(&self) -> Option<f64> {
        self.premium_requests
    }

    pub(crate) fn last_text(&self) -> Option<&str> {
        self.last_text.as_deref()
    }

    // ----- events read newest first -----

    /// Until [`Findings::in_order`], events are read newest first: the first activity and the
    /// first message they set are the ones kept, as if they had all been read in order. For
    /// events whose only effects are those and [`Findings::progress`] (Claude's messages), so
    /// that of many only the newest few need reading. `activity` and `message` say which of the
    /// two are looked for (the others are left as they are).
    pub(super) fn newest_first(&mut self, activity: bool, message: bool) {
        self.newest_first = Some(Settled {
            activity: !activity,
            text: !message,
            ..Settled::default()
        });
    }

    /// The next (older) event is read: what the last one set is settled.
    pub(super) fn older_event(&mut self) {
        if let Some(s) = &mut self.newest_first {
            s.activity = s.activity();
            s.text = s.text();
        }
    }

    /// Whether the events read newest first set both the activity and the message: older ones
    /// would change nothing.
    pub(super) fn settled(&self) -> bool {
        self.newest_first.is_some_and(|s| s.activity() && s.text())
    }

    /// Back to reading events in order.
    pub(super) fn in_order(&mut self) {
        self.newest_first = None;
    }

    // ----- activity -----

    /// Remembers a plain line as the activity to show at the end of the chunk.
    pub(super) fn pend_activity(&mut self, line: &[u8]) {
        self.pending.clear();
        self.pending
            .extend_from_slice(&line[..line.len().min(ACTIVITY_BYTES)]);
        self.has_pending = true;
    }

    /// Shows the last plain line seen, if it is the latest thing seen.
    pub(super) fn flush_activity(&mut self) {
        if std::mem::take(&mut self.has_pending) {
            let line = std::mem::take(&mut self.pending);
            self.set_activity(&String::from_utf8_lossy(&line));
            self.pending = line;
        }
    }

    pub(super) fn set_activity(&mut self, text: &str) {
        self.has_pending = false;
        let text = first_line(text);
        if text.is_empty() {
            return;
        }
        if let Some(settled) = &mut self.newest_first {
            if settled.activity {
                return;
            }
            settled.event_activity = true;
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

    /// A session began (a `system`/`init` event): its id, and `Starting: MODEL` (or `Starting`
    /// when the model is not given or not worth showing).
    pub(super) fn session_started(&mut self, session_id: Option<&str>, model: Option<&str>) {
        if let Some(id) = session_id {
            self.session_id = Some(id.to_owned());
        }
        match model {
            Some(model) => self.set_activity_clean(&format!("Starting: {model}")),
            None => self.set_activity("Starting"),
        }
    }

    /// Sets the activity from a text that may hold newlines and control codes.
    pub(super) fn set_activity_clean(&mut self, text: &str) {
        let line = first_line(text);
        let mut bytes = Vec::with_capacity(line.len().min(4 * ACTIVITY_CHARS));
        strip_controls(
            &line.as_bytes()[..line.len().min(8 * ACTIVITY_CHARS)],
            &mut bytes,
        );
        let clean = String::from_utf8_lossy(&bytes).into_owned();
        self.set_activity(clean.trim());
    }

    /// Keeps an assistant message (bounded) as the latest, and shows it.
    pub(super) fn assistant_text(&mut self, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        self.say(|| Said::Text(bounded(text)));
        self.set_activity_clean(text);
        if let Some(settled) = &mut self.newest_first {
            if settled.text {
                return;
            }
            settled.event_text = true;
        }
        self.last_text = Some(bounded(text));
    }

    /// A tool call: shown as the activity (`Bash: cargo test`).
    pub(super) fn tool_call(&mut self, name: &str, input: &Value) {
        let activity = tool_activity(name, input);
        self.set_activity_clean(&activity);
        self.say(|| Said::Tool(activity));
    }

    /// What a tool gave back: never a signal, only said when rendering.
    pub(super) fn tool_result(&mut self, text: &str, error: bool) {
        // Its first lines are all that is shown.
        self.say(|| Said::ToolResult {
            text: text[..floor_char_boundary(text, 4096)].to_owned(),
            error,
        });
    }

    // ----- limits, retries, logins -----

    /// Output that shows the agent moved on: a retry it was waiting on succeeded.
    pub(super) fn progress(&mut self) {
        self.retrying = None;
    }

    /// Records a limit; a later one replaces an earlier one, keeping its reset time when the
    /// later one has none.
    pub(super) fn set_limit(
        &mut self,
        kind: LimitKind,
        message: &str,
        reset_at: Option<DateTime<Utc>>,
    ) {
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
            kind.as_str().replace('_', " ")
        } else {
            message
        };
        self.retrying = None;
        self.limit = Some(Limit {
            reset_at,
            kind,
            message: clip(&message),
        });
    }

    /// The run completed: whatever limit it met on the way did not end it.
    pub(super) fn clear_limit(&mut self) {
        self.limit = None;
    }

    /// A rate limit the agent is retrying by itself (ignored once a limit is known).
    pub(super) fn retry(&mut self, kind: LimitKind, message: &str) {
        if self.limit.is_none() {
            self.retrying = Some(Limit {
                reset_at: None,
                kind,
                message: clip(message),
            });
        }
    }

    /// A login failure; the first one said is kept.
    pub(super) fn auth(&mut self, message: &str) {
        if self.auth_error.is_none() {
            self.auth_error = Some(clip(message));
        }
    }

    /// When a limit lifts, from a text that says so.
    pub(super) fn parse_reset(&mut self, text: &str) -> Option<DateTime<Utc>> {
        self.clock.parse_reset(text, &text.to_ascii_lowercase())
    }

    /// Looks for one of `patterns` in `text`; whether it found one.
    pub(super) fn scan(&mut self, text: &str, scope: Scope, patterns: &Patterns) -> bool {
        if text.trim().is_empty() {
            return false;
        }
        let text = &text[..floor_char_boundary(text, 16 * 1024)];
        let lower = text.to_ascii_lowercase();
        let Some(found) = signal::find(text, &lower, scope, patterns) else {
            return false;
        };
        let message = one_line(&text[signal::line_start(text, found.at)..]);
        match found.class {
            Class::Limit => {
                let reset = self
                    .clock
                    .parse_reset(&text[found.at..], &lower[found.at..]);
                self.set_limit(found.kind, &message, reset);
            }
            Class::Retry => self.retry(found.kind, &message),
            Class::Auth => self.auth(&message),
        }
        true
    }

    /// An error message from a JSON event: its signal, and a reset time the raw line may carry
    /// when the message does not (`"resets_at": 1773158400` inside escaped JSON).
    pub(super) fn json_error(&mut self, message: &str, raw: &[u8], patterns: &Patterns) {
        if !message.trim().is_empty() {
            self.set_activity_clean(message);
        }
        self.scan(message, Scope::Error, patterns);
        if self.limit.as_ref().is_some_and(|l| l.reset_at.is_none())
            && let Some(reset) = self.parse_reset(&raw_text(raw))
            && let Some(limit) = &mut self.limit
        {
            limit.reset_at = Some(reset);
        }
    }

    /// The last plain lines of a failed attempt, in the order printed, read with the messages
    /// of one CLI (or several, for a custom agent that may wrap any): the first login failure
    /// and the last limit count; a rate limit it was retrying counts unless stdout went on after.
    pub(super) fn read_tail(&mut self, lines: &[TailLine], sets: &[&Patterns]) {
        let earlier = self.retrying.take();
        for line in lines {
            let found = sets
                .iter()
                .any(|patterns| self.scan(&line.text, Scope::Plain, patterns));
            if !found && !line.is_stderr {
                self.retrying = None;
            }
        }
        if self.retrying.is_none() {
            self.retrying = earlier;
        }
    }

    /// The attempt ended: a rate limit it was still retrying is what ended it.
    pub(super) fn end(&mut self) {
        if self.limit.is_none()
            && let Some(notice) = self.retrying.take()
        {
            self.limit = Some(notice);
        }
    }
}

/// The start of a raw event line as text (16 KiB is plenty for any error event).
pub(super) fn raw_text(raw: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&raw[..raw.len().min(16 * 1024)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_limit_keeps_an_earlier_reset_time() {
        let now = DateTime::parse_from_rfc3339("2026-03-10T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut f = Findings::new(Clock::new(now));
        let reset = now + chrono::TimeDelta::hours(1);
        f.set_limit(LimitKind::FiveHour, "", Some(reset));
        assert_eq!(f.limit().unwrap().message, "five hour");
        f.set_limit(
            LimitKind::SessionLimit,
            "You've hit your session limit",
            None,
        );
        let l = f.limit().unwrap();
        assert_eq!(
            (l.kind.clone(), l.reset_at),
            (LimitKind::SessionLimit, Some(reset))
        );
        f.retry(LimitKind::RateLimit, "retrying");
        assert!(f.retrying().is_none(), "a known limit is not a retry");
    }
}
