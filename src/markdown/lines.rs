//! Physical lines of a document: byte offsets of line starts and content ends, and the
//! 1-based line of an offset (a body may start at any file line).

use std::ops::Range;

/// Byte offsets of line starts and content ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LineIndex {
    /// Start of each line.
    starts: Vec<usize>,
    /// End of each line's content (line ending excluded).
    ends: Vec<usize>,
    /// Length of a leading BOM (0 or 3).
    bom: usize,
    first_line: usize,
}

impl LineIndex {
    pub(super) fn new(text: &str, first_line: usize, bom: usize) -> Self {
        let mut starts = Vec::with_capacity(text.len() / 32 + 1);
        let mut ends = Vec::with_capacity(text.len() / 32 + 1);
        starts.push(0);
        let bytes = text.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' {
                let cr = i > 0 && bytes.get(i - 1) == Some(&b'\r');
                ends.push(if cr { i - 1 } else { i });
                starts.push(i + 1);
            }
        }
        ends.push(text.len());
        Self {
            starts,
            ends,
            bom,
            first_line: first_line.max(1),
        }
    }

    pub(super) fn line(&self, offset: usize) -> usize {
        // `starts[0] == 0`, so the partition point is at least 1.
        let idx = self.starts.partition_point(|&s| s <= offset);
        self.first_line.saturating_add(idx.saturating_sub(1))
    }

    pub(super) fn range(&self, line: usize) -> Range<usize> {
        let end_of_text = self.ends.last().copied().unwrap_or(0);
        let Some(idx) = line.checked_sub(self.first_line) else {
            return end_of_text..end_of_text;
        };
        match (self.starts.get(idx), self.ends.get(idx)) {
            (Some(&s), Some(&e)) if idx == 0 => (s + self.bom).min(e)..e,
            (Some(&s), Some(&e)) => s..e,
            _ => end_of_text..end_of_text,
        }
    }
}
