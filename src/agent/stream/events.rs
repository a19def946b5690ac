//! JSON events in the agent's output: each event line read by its CLI's reader, in order,
//! except that a run of events a later one supersedes (Claude's messages) waits unread in a
//! bounded stash and is read newest first, only as far as needed.

use std::cell::OnceCell;

use serde_json::Value;

use super::{MAX_LINE, Observer};
use crate::agent::cli::Output;
use crate::agent::findings::Findings;
use crate::agent::text::{find_last_newline, find_newline};

/// How much of supersedable events is kept unread at most (plus one line).
pub(super) const STASH: usize = 256 * 1024;

/// A run of supersedable JSON events of a chunk (see [`Observer::defer_run`]): whether it
/// begins with the line the chunk completed, and where its lines lie in the chunk.
#[derive(Debug, Default)]
struct Run {
    older: bool,
    lines: Option<std::ops::Range<usize>>,
}

impl Observer {
    /// JSON lines: the complete lines of a chunk (`older`, then `lines`), each read in order,
    /// except that a run of supersedable events is read only when something else comes (or the
    /// chunk ends), and then from its newest end.
    pub(super) fn json_lines(&mut self, older: Option<&[u8]>, lines: &[u8], is_stderr: bool) {
        let cli = self.format.cli;
        let mut run = Run::default();
        if let Some(line) = older {
            match json_body(line) {
                Some(body) if cli.skips(body) => self.skipped(),
                Some(body) if cli.supersedable(body) => {
                    run.older = true;
                    self.event_since_plain = true;
                }
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
                Some(body) if cli.skips(body) => self.skipped(),
                Some(body) if cli.supersedable(body) => {
                    self.event_since_plain = true;
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
    pub(super) fn read_stash(&mut self) {
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
    pub(super) fn read_stash_aside(&self, activity: bool, message: bool) -> Findings {
        let mut aside = Findings::new(self.seen.clock().clone());
        aside.newest_first(activity, message);
        read_newest_first(self.format.cli, &self.stash, &mut aside);
        aside
    }

    /// An event not worth parsing: still, the agent moved on.
    fn skipped(&mut self) {
        self.event_since_plain = true;
        self.seen.progress();
    }

    pub(super) fn line(&mut self, line: &[u8], is_stderr: bool) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(first) = line.iter().position(|b| !b.is_ascii_whitespace()) else {
            return;
        };
        let body = &line[first..];
        if self.format.output == Output::JsonLines && body[0] == b'{' {
            if self.format.cli.skips(body) {
                self.skipped();
                return;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(body) {
                if v.is_object() {
                    self.event_since_plain = true;
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
}

/// Reads supersedable events (lines, oldest first) newest first until older ones could change
/// nothing (`seen` is reading newest first).
fn read_newest_first(cli: &dyn crate::agent::Cli, lines: &[u8], seen: &mut Findings) {
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
pub(super) fn lines_newest_first(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
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

/// A line that may be a JSON event: from its first `{` (after leading whitespace).
pub(super) fn json_body(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let first = line.iter().position(|b| !b.is_ascii_whitespace())?;
    (line[first] == b'{').then(|| &line[first..])
}
