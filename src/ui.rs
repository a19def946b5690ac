//! What the user sees: `error:`/`warning:`/`hint:` lines, the report block between iterations
//! and the final summaries. Colour goes through anstream, which strips it when the stream is not
//! a terminal, under `NO_COLOR`, or with `--color never`.

use std::io::Write;
use std::time::Duration;

use anstyle::{AnsiColor, Style};

use crate::cli::ColorWhen;
use crate::error::Error;

const RED: Style = AnsiColor::Red.on_default().bold();
const YELLOW: Style = AnsiColor::Yellow.on_default().bold();
const CYAN: Style = AnsiColor::Cyan.on_default().bold();
const GREEN: Style = AnsiColor::Green.on_default().bold();

pub(crate) const RULE: &str = "─────────────────────────────────────";

thread_local! {
    /// What every line this thread prints opens with (`[beads-bd-3] `): a queue's loop sets it
    /// on its thread when more than one loop can run at once, so their lines tell apart.
    static PREFIX: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Every line this thread prints from now on opens with `prefix` (`None`: nothing).
pub(crate) fn set_line_prefix(prefix: Option<String>) {
    PREFIX.with(|p| *p.borrow_mut() = prefix);
}

/// This thread's line prefix ([`set_line_prefix`]), for a thread it starts to carry on.
pub(crate) fn line_prefix() -> Option<String> {
    PREFIX.with(|p| p.borrow().clone())
}

/// `text` with this thread's line prefix before each of its lines ([`set_line_prefix`]).
pub(crate) fn prefixed(text: &str) -> std::borrow::Cow<'_, str> {
    PREFIX.with(|p| match p.borrow().as_deref() {
        None | Some("") => std::borrow::Cow::Borrowed(text),
        Some(prefix) => {
            let mut out = String::with_capacity(text.len() + prefix.len());
            for line in text.split_inclusive('\n') {
                out.push_str(prefix);
                out.push_str(line);
            }
            if text.is_empty() {
                out.push_str(prefix);
            }
            std::borrow::Cow::Owned(out)
        }
    })
}

/// Writes `text` and a newline to `out`, each of its lines opening with this thread's prefix —
/// or, while `ralph watch` owns the terminal, holds it ([`hold_terminal`]).
fn write_line(out: &mut impl Write, text: &str) {
    if !held(text) {
        let _ = writeln!(out, "{}", prefixed(text));
    }
}

/// The most lines held while the terminal is someone else's: the latest.
const HELD_LINES: usize = 20;

/// While `ralph watch` owns the terminal (alternate screen, raw mode), the lines ralph would
/// write on it — its warnings, notes, errors, the `tracing` events (a crate's `log` warning
/// among them) — held here instead of written over the dashboard; `None`: not held.
static HELD: std::sync::Mutex<Option<Held>> = std::sync::Mutex::new(None);

struct Held {
    lines: std::collections::VecDeque<String>,
    /// Told each time a line is held (the dashboard wakes to show it).
    wake: Box<dyn Fn() + Send>,
}

/// Holds what ralph prints ([`HELD`]) until the value is dropped.
#[must_use]
pub(crate) struct TerminalHeld(());

/// From now until the value is dropped, nothing ralph prints reaches the terminal: each line
/// is held, the latest [`HELD_LINES`], for [`take_held`], and `wake` is called.
pub(crate) fn hold_terminal(wake: Box<dyn Fn() + Send>) -> TerminalHeld {
    if let Ok(mut h) = HELD.lock() {
        *h = Some(Held {
            lines: std::collections::VecDeque::new(),
            wake,
        });
    }
    TerminalHeld(())
}

impl Drop for TerminalHeld {
    fn drop(&mut self) {
        if let Ok(mut h) = HELD.lock() {
            *h = None;
        }
    }
}

/// The lines held since the last call, oldest first, without colour.
pub(crate) fn take_held() -> Vec<String> {
    HELD.lock()
        .ok()
        .and_then(|mut h| h.as_mut().map(|held| held.lines.drain(..).collect()))
        .unwrap_or_default()
}

/// Holds `text`'s lines when the terminal is held; whether it was.
fn held(text: &str) -> bool {
    let Ok(mut h) = HELD.lock() else {
        return false;
    };
    let Some(held) = h.as_mut() else {
        return false;
    };
    let plain = anstream::adapter::strip_str(text).to_string();
    for line in plain.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if held.lines.len() == HELD_LINES {
            held.lines.pop_front();
        }
        held.lines.push_back(line.to_owned());
    }
    (held.wake)();
    true
}

/// Where a diagnostic goes (the `tracing` events, `-v`'s timings): stderr, or held while the
/// terminal is ([`hold_terminal`]). What is written is held line by line when dropped.
pub(crate) struct Diagnostics(Vec<u8>);

/// A writer for one diagnostic.
pub(crate) fn diagnostics() -> Diagnostics {
    Diagnostics(Vec::new())
}

impl Write for Diagnostics {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Diagnostics {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        if !held(&text) {
            // A closed stderr is no reason to stop a run.
            let _ = std::io::stderr().lock().write_all(&self.0);
        }
    }
}

/// Set the colour choice for every stream once, at start-up.
pub(crate) fn init_color(when: ColorWhen) {
    let choice = match when {
        ColorWhen::Auto => anstream::ColorChoice::Auto,
        ColorWhen::Always => anstream::ColorChoice::Always,
        ColorWhen::Never => anstream::ColorChoice::Never,
    };
    choice.write_global();
}

/// The user-facing printer. Human output goes to stdout — or to stderr when stdout carries
/// JSON events (`--json`) — and diagnostics to stderr.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ui {
    pub(crate) quiet: bool,
    /// `--json`: stdout is reserved for JSON Lines events.
    pub(crate) json: bool,
}

/// `text` as it may reach a terminal: every control character but a newline and a tab written
/// out as an escape (`\u{1b}`, `\r`). Much of what ralph prints comes from files and programs
/// the agent wrote (criteria, ITER records, commit subjects, a check's output, git's messages);
/// a terminal would obey an escape sequence in them — set the clipboard (OSC 52), rewrite
/// what `ralph status` printed (`\r`, `ESC[2K`), set the title — outside any sandbox. ralph's
/// own colours are added after. No secret is shown either (`withheld::redact`: a URL's
/// credentials, the tracker's token).
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    let text = crate::proc::withheld::redact(text);
    if !text.contains(unsafe_char) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

impl Ui {
    /// Write a line that is safe for a terminal ([`shown`], and then ralph's own styles).
    fn human(&self, text: &str) {
        if self.json {
            write_line(&mut anstream::stderr(), text);
        } else {
            write_line(&mut anstream::stdout(), text);
        }
    }

    /// A normal line (suppressed by `-q`).
    pub(crate) fn line(&self, text: &str) {
        if !self.quiet {
            self.human(&shown(text));
        }
    }

    pub(crate) fn success(&self, text: &str) {
        let text = shown(text);
        self.human(&format!("{GREEN}{text}{GREEN:#}"));
    }

    /// A line that must be seen even with `-q` (e.g. `STALLED: …`).
    pub(crate) fn alert(&self, text: &str) {
        let text = shown(text);
        self.human(&format!("{YELLOW}{text}{YELLOW:#}"));
    }

    pub(crate) fn plain(&self, text: &str) {
        self.human(&shown(text));
    }

    /// A command the user can run next, from where they are: `next: `COMMAND` — what it does`.
    /// Every suggestion of a halt takes this one shape, so a person finds it and a test can run
    /// it as printed.
    pub(crate) fn next(&self, command: &str, what: &str) {
        let line = format!("`{command}` — {what}");
        let line = shown(&line);
        self.human(&format!("{CYAN}next:{CYAN:#} {line}"));
    }

    /// One event's JSON line ([`crate::event::Event::line`]) on stdout, only with `--json`.
    pub(crate) fn event(&self, line: &str) {
        if !self.json {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", crate::proc::withheld::redact(line));
        let _ = out.flush();
    }

    pub(crate) fn warn(&self, text: &str) {
        let text = format!("{YELLOW}warning:{YELLOW:#} {}", shown(text));
        write_line(&mut anstream::stderr(), &text);
    }

    pub(crate) fn note(&self, text: &str) {
        if !self.quiet {
            let text = format!("{CYAN}note:{CYAN:#} {}", shown(text));
            write_line(&mut anstream::stderr(), &text);
        }
    }

    /// `error: …`, each cause, then `hint: …`.
    pub(crate) fn error(&self, e: &Error) {
        let mut err = anstream::stderr();
        write_line(
            &mut err,
            &format!("{RED}error:{RED:#} {}", shown(&e.to_string())),
        );
        let mut source = std::error::Error::source(e);
        // Transparent variants repeat their inner message as the first source.
        while let Some(s) = source {
            let text = s.to_string();
            if text != e.to_string() {
                write_line(&mut err, &format!("  caused by: {}", shown(&text)));
            }
            source = s.source();
        }
        if let Some(h) = e.hint() {
            write_line(&mut err, &format!("{CYAN}hint:{CYAN:#} {}", shown(&h)));
        }
    }
}

/// `1h 02m 03s`, `4m 05s`, `6s`, `0.4s`.
pub(crate) fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{:.1}s", d.as_secs_f64());
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

/// The between-iterations report (the copilot skill's block).
pub(crate) struct Report<'a> {
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) done: usize,
    pub(crate) total: usize,
    /// What done/total count: criteria, tasks, requirements.
    pub(crate) unit: &'a str,
    pub(crate) last_commit: Option<&'a str>,
    pub(crate) started: &'a str,
    pub(crate) ended: &'a str,
    pub(crate) duration: Duration,
    pub(crate) elapsed: Duration,
    /// `Some(n)` when iteration n starts next.
    pub(crate) next: Option<u32>,
    /// Extra lines: timeouts, agent failures, regressions, test results.
    pub(crate) notes: &'a [String],
    /// Cost and tokens, when the agent reported them.
    pub(crate) cost: Option<CostLine>,
}

/// What an iteration cost, as the agent reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CostLine {
    pub(crate) iteration_usd: f64,
    pub(crate) total_usd: f64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

impl Report<'_> {
    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(RULE);
        s.push('\n');
        s.push_str(&format!(
            "## Iteration {}/{} complete\n",
            self.iteration, self.max_iterations
        ));
        s.push_str(&format!(
            "✅ Progress: {}/{} {}\n",
            self.done, self.total, self.unit
        ));
        if let Some(c) = self.last_commit {
            s.push_str(&format!("📝 Last: \"{c}\"\n"));
        }
        s.push_str(&format!("🕐 Started: {}\n", self.started));
        s.push_str(&format!("🕑 Ended: {}\n", self.ended));
        s.push_str(&format!(
            "⏱️  Iteration duration: {}\n",
            human_duration(self.duration)
        ));
        s.push_str(&format!(
            "⏱️  Total elapsed: {}\n",
            human_duration(self.elapsed)
        ));
        if let Some(c) = self.cost {
            s.push_str(&format!(
                "💰 Cost: ${:.4} (total ${:.4}), tokens: {} in / {} out\n",
                c.iteration_usd, c.total_usd, c.input_tokens, c.output_tokens
            ));
        }
        for n in self.notes {
            s.push_str(&format!("⚠️  {n}\n"));
        }
        if let Some(n) = self.next {
            s.push_str(&format!("🔄 Starting iteration {n}...\n"));
        }
        s.push_str(RULE);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_line_prefix_opens_each_of_its_lines_and_no_other_threads() {
        let other = std::thread::spawn(|| {
            set_line_prefix(Some("[beads-bd-3] ".into()));
            let mut out = Vec::new();
            write_line(&mut out, "## Iteration 1/5 complete\n✅ Progress: 1/2");
            String::from_utf8(out).unwrap()
        });
        assert_eq!(
            other.join().unwrap(),
            "[beads-bd-3] ## Iteration 1/5 complete\n[beads-bd-3] ✅ Progress: 1/2\n"
        );
        // Control: this thread set none.
        let mut out = Vec::new();
        write_line(&mut out, "a\nb");
        assert_eq!(out, b"a\nb\n");
    }

    #[test]
    fn control_characters_are_written_out_newlines_and_tabs_kept() {
        assert!(matches!(
            shown("plain — ü\tx\ny"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            shown("a\u{1b}]52;c;ZWNobw==\u{7}b\r\u{1b}[2Kc\u{9b}d\u{7f}"),
            "a\\u{1b}]52;c;ZWNobw==\\u{7}b\\r\\u{1b}[2Kc\\u{9b}d\\u{7f}"
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(Duration::from_millis(400)), "0.4s");
        assert_eq!(human_duration(Duration::from_secs(6)), "6s");
        assert_eq!(human_duration(Duration::from_secs(245)), "4m 05s");
        assert_eq!(human_duration(Duration::from_secs(3723)), "1h 02m 03s");
    }

    #[test]
    fn report_block_has_every_line() {
        let r = Report {
            iteration: 2,
            max_iterations: 5,
            done: 1,
            total: 3,
            unit: "tasks",
            last_commit: Some("ralph: iteration 2 — x"),
            started: "s",
            ended: "e",
            duration: Duration::from_secs(3),
            elapsed: Duration::from_secs(70),
            next: Some(3),
            notes: &["agent exited with code 1".into()],
            cost: Some(CostLine {
                iteration_usd: 0.19,
                total_usd: 0.38,
                input_tokens: 38498,
                output_tokens: 24,
            }),
        }
        .render();
        for needle in [
            "## Iteration 2/5 complete",
            "Progress: 1/3 tasks",
            "Last: \"ralph: iteration 2 — x\"",
            "Started: s",
            "Ended: e",
            "Iteration duration: 3s",
            "Total elapsed: 1m 10s",
            "agent exited with code 1",
            "Starting iteration 3...",
            "Cost: $0.1900 (total $0.3800), tokens: 38498 in / 24 out",
        ] {
            assert!(r.contains(needle), "{needle:?} missing from\n{r}");
        }
    }
}
