//! Inline content as the walk collects it: the text with its whitespace collapsed, its byte
//! range, and its spans (code, links, strong).

use super::super::Spans;

/// Inline content being collected: one line of a paragraph, a heading, or a table cell.
#[derive(Default)]
pub(super) struct Acc {
    /// Flattened text, whitespace already collapsed (a pending space is added before the next
    /// word).
    pub(super) text: String,
    space: bool,
    pub(super) start: Option<usize>,
    pub(super) end: usize,
    pub(super) spans: Spans,
    pub(super) strong_depth: usize,
    pub(super) strong: String,
}

impl Acc {
    pub(super) fn touch(&mut self, start: usize, end: usize) {
        self.start.get_or_insert(start);
        self.end = self.end.max(end);
    }

    pub(super) fn push_text(&mut self, s: &str) {
        for word in s.split_inclusive(char::is_whitespace) {
            let trimmed = word.trim_end_matches(char::is_whitespace);
            if !trimmed.is_empty() {
                if self.space && !self.text.is_empty() {
                    self.text.push(' ');
                }
                self.text.push_str(trimmed);
                self.space = false;
            }
            if trimmed.len() < word.len() {
                self.space = true;
            }
        }
        if self.strong_depth > 0 {
            self.strong.push_str(s);
        }
    }
}
