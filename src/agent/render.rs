//! `--stream` for a CLI that prints JSON events (Claude's `stream-json`, droid's, Qwen's,
//! opencode's): each event rendered as text — the assistant's messages as they are, a tool call
//! as one line (`→ Bash: cargo test`), what the tool gave back cut to a line (`  ← …`), the
//! final result with its cost; any other activity (a session starting, an API retry) as `· …`.
//! Each event is read by its CLI's own reader ([`Cli::event`]) into findings that keep what it
//! said ([`Said`]): there is no second parser of any format. An event that says nothing is
//! dropped (shown raw by `-v`, as a `tracing` event); a line that is not an event is copied as
//! it is. Stderr, and a CLI that prints text, are copied as they come ([`Echo`]). The transcript
//! is not touched: the relay writes it, byte for byte, before any watcher sees a chunk.
//!
//! [`Cli::event`]: crate::agent::Cli::event

use std::io::Write;

use serde_json::Value;

use super::cli::{Format, Output};
use super::findings::{Findings, Said};
use super::output::AgentResult;
use super::reset::Clock;
use super::stream::MAX_LINE;
use super::text::{cut_chars, find_newline};
use crate::proc::observe::{Echo, Observation, Watcher};

/// How many characters of a tool's output are shown.
const RESULT_CHARS: usize = 160;

/// `--stream`'s copy of the agent's output: rendered when its CLI prints JSON events, else as
/// it comes.
pub(crate) struct Stream {
    echo: Echo,
    /// `None`: the output is copied as it comes.
    render: Option<Render>,
    /// Copied output: whether stdout's and stderr's next byte opens a line (for this thread's
    /// line prefix, `ui::set_line_prefix`).
    line_start: [bool; 2],
}

struct Render {
    format: Format,
    seen: Findings,
    /// The start of a stdout line not finished yet (at most [`MAX_LINE`] bytes of it).
    pending: Vec<u8>,
    /// The last message shown, so that a result repeating it is not shown twice.
    last_text: Option<String>,
    result_shown: bool,
}

impl Stream {
    /// `--stream` as `echo` says (`Echo::None`: nothing) for an agent whose output is `format`.
    pub(crate) fn new(echo: Echo, format: Format) -> Stream {
        let render = (echo != Echo::None && format.output == Output::JsonLines).then(|| Render {
            format,
            seen: Findings::new(Clock::new(chrono::Utc::now())).transcribing(),
            pending: Vec::new(),
            last_text: None,
            result_shown: false,
        });
        Stream {
            echo,
            render,
            line_start: [true; 2],
        }
    }

    /// Copies a chunk as it comes, each line opening with this thread's line prefix if it has
    /// one (loops running at once).
    fn copy(&mut self, what: &Observation<'_>) {
        let Observation::Output { bytes, stderr } = *what else {
            return;
        };
        let prefix = crate::ui::prefixed("");
        if prefix.is_empty() || self.echo == Echo::None {
            self.echo.observe(what);
            return;
        }
        let bytes = prefix_lines(
            prefix.as_bytes(),
            &mut self.line_start[usize::from(stderr)],
            bytes,
        );
        self.echo.observe(&Observation::Output {
            bytes: &bytes,
            stderr,
        });
    }

    /// Writes rendered lines where `--stream` goes: stdout, or stderr under `--json`.
    fn write(&self, lines: &[String]) {
        if lines.is_empty() {
            return;
        }
        let mut text = String::new();
        for line in lines {
            text.push_str(&crate::ui::prefixed(&crate::ui::shown(line)));
            text.push('\n');
        }
        if self.echo == Echo::Stderr {
            let _ = std::io::stderr().write_all(text.as_bytes());
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }
}

impl Watcher for Stream {
    fn observe(&mut self, what: &Observation<'_>) {
        let Some(render) = &mut self.render else {
            self.copy(what);
            return;
        };
        let lines = match *what {
            Observation::Output {
                bytes,
                stderr: false,
            } => render.chunk(bytes),
            Observation::Ended { .. } => render.end(),
            _ => {
                self.copy(what);
                return;
            }
        };
        self.write(&lines);
    }
}

impl Render {
    /// The complete lines of a chunk, rendered.
    fn chunk(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut shown = Vec::new();
        while let Some(nl) = find_newline(bytes) {
            if self.pending.is_empty() {
                self.line(&bytes[..nl.min(MAX_LINE)], &mut shown);
            } else {
                self.keep(&bytes[..nl]);
                let line = std::mem::take(&mut self.pending);
                self.line(&line, &mut shown);
            }
            bytes = &bytes[nl + 1..];
        }
        self.keep(bytes);
        shown
    }

    /// Keeps the start of an unfinished line, at most [`MAX_LINE`] bytes of it.
    fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.pending.len());
        self.pending
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The last line, unfinished, and the usage when no result said it.
    fn end(&mut self) -> Vec<String> {
        let mut shown = Vec::new();
        let line = std::mem::take(&mut self.pending);
        if !line.is_empty() {
            self.line(&line, &mut shown);
        }
        let usage = self.seen.summed_usage();
        if !self.result_shown && (usage.cost_usd > 0.0 || usage.output_tokens > 0) {
            shown.push(format!("= done: {}", usage_words(&usage, None)));
        }
        shown
    }

    fn line(&mut self, line: &[u8], shown: &mut Vec<String>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let body = line.trim_ascii_start();
        if body.is_empty() {
            return;
        }
        let event = (body[0] == b'{')
            .then(|| serde_json::from_slice::<Value>(body).ok())
            .flatten()
            .filter(Value::is_object);
        let Some(event) = event else {
            if body.starts_with(b"{\"") {
                // An event cut short (by the line cap): nothing to show.
                return;
            }
            shown.push(String::from_utf8_lossy(line).into_owned());
            return;
        };
        let before = shown.len();
        self.format.cli.event(&event, body, &mut self.seen);
        let said = self.seen.take_said();
        let activity = self.seen.take_activity_changed();
        for s in said {
            self.said(s, shown);
        }
        if let Some(result) = self.seen.result.take() {
            self.result(&result, shown);
        }
        if shown.len() == before
            && activity
            && let Some(a) = self.seen.activity()
        {
            shown.push(format!("· {a}"));
        }
        if shown.len() == before {
            tracing::info!(target: "ralph::stream", "{}", String::from_utf8_lossy(body));
        }
    }

    fn said(&mut self, said: Said, shown: &mut Vec<String>) {
        match said {
            Said::Text(text) => {
                let text = text.trim_end();
                shown.extend(text.lines().map(str::to_owned));
                self.last_text = Some(text.to_owned());
            }
            Said::Tool(call) => shown.push(format!("→ {call}")),
            Said::ToolResult { text, error } => {
                let mut lines = text.lines().filter(|l| !l.trim().is_empty());
                let first = lines.next().unwrap_or("").trim();
                let (head, cut) = cut_chars(first, RESULT_CHARS);
                let more = lines.count();
                let mut line = format!("  ← {}{head}", if error { "error: " } else { "" });
                if cut {
                    line.push('…');
                }
                if more > 0 {
                    line.push_str(&format!(" (+{more} lines)"));
                }
                shown.push(line);
            }
        }
    }

    fn result(&mut self, r: &AgentResult, shown: &mut Vec<String>) {
        self.result_shown = true;
        let text = r.text.trim();
        if !text.is_empty() && self.last_text.as_deref() != Some(text) {
            shown.extend(text.lines().map(str::to_owned));
        }
        let how = if r.is_error { "error" } else { "done" };
        shown.push(format!("= {how}: {}", usage_words(&r.usage, r.duration_ms)));
    }
}

/// `bytes` with `prefix` before each line; `line_start`: whether they open a line (updated).
fn prefix_lines(prefix: &[u8], line_start: &mut bool, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + prefix.len());
    for piece in bytes.split_inclusive(|&b| b == b'\n') {
        if *line_start {
            out.extend_from_slice(prefix);
        }
        out.extend_from_slice(piece);
        *line_start = piece.ends_with(b"\n");
    }
    out
}

/// `2 turns, $0.1000, 1000 in / 50 out tokens, 12.3s`: what is known of it.
fn usage_words(u: &super::output::Usage, duration_ms: Option<u64>) -> String {
    let mut words = Vec::new();
    if u.turns > 0 {
        words.push(format!(
            "{} turn{}",
            u.turns,
            if u.turns == 1 { "" } else { "s" }
        ));
    }
    if u.cost_usd > 0.0 {
        words.push(format!("${:.4}", u.cost_usd));
    }
    if u.input_tokens > 0 || u.output_tokens > 0 {
        words.push(format!(
            "{} in / {} out tokens",
            u.input_tokens, u.output_tokens
        ));
    }
    if let Some(ms) = duration_ms {
        words.push(format!("{:.1}s", ms as f64 / 1000.0));
    }
    if words.is_empty() {
        "no usage reported".into()
    } else {
        words.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::format_for;

    fn rendered(cli: &str, lines: &[&str]) -> Vec<String> {
        let mut s = Stream::new(Echo::Stdout, format_for(cli));
        let r = s.render.as_mut().expect("a JSON agent is rendered");
        let mut all = lines.join("\n");
        all.push('\n');
        // Cut anywhere: lines are put together again.
        let (a, b) = all.as_bytes().split_at(all.len() / 2 + 3);
        let mut shown = r.chunk(a);
        shown.extend(r.chunk(b));
        shown.extend(r.end());
        shown
    }

    #[test]
    fn droids_and_opencodes_events_are_read_by_their_own_readers() {
        let droid = rendered(
            "droid",
            &[
                r#"{"type":"message","role":"assistant","text":"On it."}"#,
                r#"{"type":"tool_call","toolName":"Execute","parameters":{"command":"ls -la"}}"#,
                r#"{"type":"tool_result","isError":true,"value":"ls: no such file\nmore"}"#,
                r#"{"type":"something_new","x":1}"#,
                r#"{"type":"completion","finalText":"Done.","numTurns":2,"usage":{"input_tokens":7,"output_tokens":3}}"#,
            ],
        );
        assert_eq!(
            droid,
            [
                "On it.",
                "→ Execute: ls -la",
                "  ← error: ls: no such file (+1 lines)",
                "Done.",
                "= done: 2 turns, 7 in / 3 out tokens"
            ]
        );
        let opencode = rendered(
            "opencode",
            &[
                r#"{"type":"tool_use","part":{"tool":"bash","state":{"status":"completed","input":{"command":"make"},"output":"ok"}}}"#,
                r#"{"type":"text","part":{"text":"All green."}}"#,
                r#"{"type":"step_finish","part":{"reason":"stop","cost":0.5,"tokens":{"input":10,"output":4}}}"#,
                "plain words",
            ],
        );
        assert_eq!(
            opencode,
            [
                "→ bash: make",
                "  ← ok",
                "All green.",
                "plain words",
                "= done: 1 turn, $0.5000, 10 in / 4 out tokens"
            ]
        );
    }

    #[test]
    fn a_loops_lines_open_with_its_prefix_wherever_the_chunks_cut_them() {
        let mut start = true;
        let mut out = prefix_lines(b"[a] ", &mut start, b"one\ntw");
        out.extend(prefix_lines(b"[a] ", &mut start, b"o\n\nthree"));
        assert!(!start);
        out.extend(prefix_lines(b"[a] ", &mut start, b"\n"));
        assert_eq!(out, b"[a] one\n[a] two\n[a] \n[a] three\n");
        assert!(start);
    }

    #[test]
    fn a_text_agent_is_not_rendered() {
        assert!(
            Stream::new(Echo::Stdout, format_for("custom"))
                .render
                .is_none()
        );
        assert!(
            Stream::new(Echo::None, format_for("claude"))
                .render
                .is_none()
        );
    }
}
