//! Plain text in the agent's output: lines split from chunks, the last non-empty lines of a
//! chunk read newest first (the activity, the failed-attempt ring), the tail of stdout as
//! printed, and the ring a failed attempt is judged by.

use std::collections::VecDeque;

use super::events::lines_newest_first;
use super::{FAILED_TAIL_LINE_BYTES, FAILED_TAIL_LINES, MAX_LINE, Observer};
use crate::agent::cli::Output;
use crate::agent::findings::{ACTIVITY_BYTES, TailLine};
use crate::agent::text::{TAIL_BYTES, find_last_newline, find_newline, strip_controls};
use crate::proc::relay::keep_tail;

/// Splits one stream into lines, keeping at most [`MAX_LINE`] bytes of a line.
#[derive(Debug, Default)]
pub(super) struct LineBuf {
    pub(super) buf: Vec<u8>,
}

impl LineBuf {
    pub(super) fn append(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// The last non-empty plain lines of one stream, each with its arrival number, so the two
/// streams can be read back in the order they were printed.
#[derive(Debug, Default)]
pub(super) struct LastLines {
    pub(super) lines: VecDeque<(u64, Vec<u8>)>,
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

impl Observer {
    /// Plain text: the complete lines of a chunk (`older`, then `lines`). Only the last
    /// [`FAILED_TAIL_LINES`] non-empty ones can matter — the activity, the failed-attempt ring,
    /// that stdout moved on; the tail is kept as printed — so they are read newest first, and
    /// the lines before them are left alone.
    pub(super) fn text_lines(&mut self, older: Option<&[u8]>, lines: &[u8], is_stderr: bool) {
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
        self.event_since_plain = false;
    }

    /// A plain line among JSON events: the activity, the tail (stdout), the failed-attempt
    /// ring. Never scanned for signals here.
    pub(super) fn plain(&mut self, line: &[u8], is_stderr: bool) {
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
            self.event_since_plain = false;
        }
        if scratch.capacity() > 64 * 1024 {
            scratch = Vec::new();
        }
        self.scratch = scratch;
    }

    /// The end of plain stdout, control codes stripped, blank lines dropped: its last
    /// [`TAIL_BYTES`] as printed, from the first line that begins in them.
    pub(super) fn plain_tail(&self) -> String {
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
    pub(super) fn failed_tail(&mut self) -> Vec<TailLine> {
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
