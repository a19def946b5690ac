//! The one Markdown reader: pulldown-cmark events turned into a plain structure with 1-based
//! line numbers and byte ranges. Everything in ralph that reads Markdown (the checklist, PRD.md,
//! PROGRESS.md, plans, CPM epics and specs) stands on it; nothing else scans Markdown by hand.
//!
//! API:
//! - [`parse`] reads a document; [`parse_at`] reads a body whose first line is file line
//!   `first_line` (a caller that split off frontmatter itself); [`parse_document`] also skips a
//!   leading YAML frontmatter block (`---` … `---`/`...`), keeping file line numbers. All three
//!   skip a UTF-8 BOM; byte ranges are offsets into the text passed in (BOM included).
//! - [`Markdown::headings`]: [`Heading`] — level, flattened text, inline source, line, ranges,
//!   ATX or setext, inside a block quote / a list item.
//! - [`Markdown::items`]: [`Item`] — list items in document order: nesting depth, parent, list
//!   id, ordered number (as rendered: the list's start plus the item's index), task-marker state,
//!   the item's own inline text (its first paragraph only, nested blocks excluded), line, ranges.
//! - [`Markdown::lines`]: [`TextLine`] — every line of paragraph text (paragraphs in list items
//!   and block quotes included), with the item it belongs to; [`TextLine::field`] and
//!   [`Heading::field`] read `Name: value` lines (`**Status**: Done`, `**Goal:** …`,
//!   `Completion Promise: …`) into a [`Field`] with the value's byte range.
//! - [`Markdown::tables`]: [`Table`] — GFM tables: header and body [`Row`]s of [`Cell`]s, each
//!   cell with its flattened text and the byte span between its pipes (padding included), so a
//!   writer can replace one cell and keep every other byte.
//! - [`split_row`]: the cells of a pipe-delimited line that is not a table (a header without its
//!   `|---|` row), for diagnostics.
//! - [`Markdown::line_range`] and [`Markdown::line_of`]: physical lines ↔ byte offsets.
//!
//! "Flattened" text is what a reader sees: text and code-span contents, link and image text,
//! no markup or inline HTML, whitespace collapsed to single spaces. "Markup" is the source of
//! the same inline content, verbatim.
//!
//! Content of fenced and indented code blocks, HTML blocks (comments included) and the
//! frontmatter never appears as a heading, item, line or table. Block-quote membership is kept
//! (`quoted`) so callers can leave quoted content out. CRLF, a BOM and trailing spaces are
//! fine. Parsing never fails, never panics, and costs time linear in the input (pulldown-cmark
//! plus one pass over its events).

use std::ops::Range;

use lines::LineIndex;
use walk::read;

/// A parsed document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Markdown {
    /// Headings, in document order.
    pub(crate) headings: Vec<Heading>,
    /// List items, in document order (a parent before its children).
    pub(crate) items: Vec<Item>,
    /// Lines of paragraph text, in document order.
    pub(crate) lines: Vec<TextLine>,
    /// GFM tables, in document order.
    pub(crate) tables: Vec<Table>,
    index: LineIndex,
}

/// One heading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heading {
    /// 1 to 6.
    pub(crate) level: u8,
    /// Flattened text.
    pub(crate) text: String,
    /// The inline source (ATX: without the `#`s and a closing sequence), trimmed.
    pub(crate) markup: String,
    /// Byte range of `markup` (`markup` is exactly this part of the text).
    pub(crate) markup_range: Range<usize>,
    /// Code-span contents, strong-emphasis texts and link targets in the heading.
    pub(crate) spans: Spans,
    /// 1-based line of the heading (of its text, for a setext heading).
    pub(crate) line: usize,
    /// Byte range of the whole heading block (ATX: its line and line ending).
    pub(crate) range: Range<usize>,
    /// `## Title` rather than `Title` underlined with `===`/`---`.
    pub(crate) atx: bool,
    /// Inside a block quote.
    pub(crate) quoted: bool,
    /// Inside a list item.
    pub(crate) in_item: bool,
}

/// One list item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    /// Enclosing list items (0 for an item of a top-level list).
    pub(crate) depth: usize,
    /// The enclosing item (index into [`Markdown::items`]).
    pub(crate) parent: Option<usize>,
    /// The list it belongs to (lists are numbered in document order).
    pub(crate) list: usize,
    /// Its number when the list is ordered: the list's start plus the item's index.
    pub(crate) number: Option<u64>,
    /// `Some(checked)` for a task item (`[ ]` / `[x]` / `[X]` followed by a space or a tab, as
    /// GFM renders a box; its text may still be empty).
    pub(crate) task: Option<bool>,
    /// Its own inline text (first paragraph, after any task marker), flattened.
    pub(crate) text: String,
    /// The same as source: each line trimmed, lines joined by one space.
    pub(crate) markup: String,
    /// Its own text's lines (indices into [`Markdown::lines`]).
    pub(crate) lines: Range<usize>,
    /// Byte offset of its content: the task marker, else its first text, else its start.
    pub(crate) at: usize,
    /// 1-based line of `at`.
    pub(crate) line: usize,
    /// Byte range of the whole item, nested blocks included.
    pub(crate) range: Range<usize>,
    /// Inside a block quote.
    pub(crate) quoted: bool,
}

/// One line of paragraph text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextLine {
    /// Flattened text.
    pub(crate) text: String,
    /// The line's inline source, verbatim (no list marker, quote marker or indentation).
    pub(crate) markup: String,
    /// Byte range of `markup`.
    pub(crate) range: Range<usize>,
    /// Code-span contents, strong-emphasis texts and link targets on the line.
    pub(crate) spans: Spans,
    /// 1-based line.
    pub(crate) line: usize,
    /// Inside a block quote.
    pub(crate) quoted: bool,
    /// The innermost list item it is in (index into [`Markdown::items`]).
    pub(crate) item: Option<usize>,
    /// Lines of one paragraph share this number (paragraphs are numbered in document order).
    pub(crate) paragraph: usize,
}

/// Inline spans of a heading or line, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Spans {
    /// Code-span contents.
    pub(crate) code: Vec<String>,
    /// Strong-emphasis (`**…**`) texts, flattened.
    pub(crate) strong: Vec<String>,
    /// Link targets.
    pub(crate) links: Vec<String>,
}

/// The value of a `Name: value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    /// Flattened, trimmed.
    pub(crate) value: String,
    /// The value's source, trimmed (emphasis closing the label, as in `**Name:** value`, left
    /// out).
    pub(crate) markup: String,
    /// Byte range of `markup` (empty, just after the colon, when the value is empty).
    pub(crate) range: Range<usize>,
}

/// A GFM table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    /// The header row.
    pub(crate) header: Row,
    /// The body rows.
    pub(crate) rows: Vec<Row>,
    /// 1-based line of the header.
    pub(crate) line: usize,
    /// 1-based line of the `|---|` delimiter row.
    pub(crate) delimiter_line: usize,
    /// Byte range of the whole table.
    pub(crate) range: Range<usize>,
    /// Inside a block quote.
    pub(crate) quoted: bool,
    /// Inside a list item.
    pub(crate) in_item: bool,
}

/// A table row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// The cells the row's source has (at most the header's count; missing ones are absent).
    pub(crate) cells: Vec<Cell>,
    /// 1-based line.
    pub(crate) line: usize,
    /// Byte range of the row's source, line ending excluded.
    pub(crate) range: Range<usize>,
    /// The row's source ends with a pipe after its last cell.
    pub(crate) closed: bool,
    /// A line without any pipe that GFM still reads as a row (a lazy continuation).
    pub(crate) bare: bool,
}

/// A table cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell {
    /// Flattened text (`\|` read as `|`).
    pub(crate) text: String,
    /// Byte range between the cell's pipes, padding included.
    pub(crate) range: Range<usize>,
}

/// Parses a document (no frontmatter handling); lines are numbered from 1.
pub(crate) fn parse(text: &str) -> Markdown {
    read(text, 1, false)
}

/// Parses a body whose first line is file line `first_line` (e.g. after frontmatter that the
/// caller split off).
pub(crate) fn parse_at(text: &str, first_line: usize) -> Markdown {
    read(text, first_line, false)
}

/// Parses a whole file, skipping a leading YAML frontmatter block; lines are numbered from 1.
pub(crate) fn parse_document(text: &str) -> Markdown {
    read(text, 1, true)
}

impl Markdown {
    /// The 1-based line of a byte offset.
    #[cfg(test)]
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        self.index.line(offset)
    }

    /// Byte range of a 1-based line's content: line ending (and, on the first line, a BOM)
    /// excluded. Empty at the end of the text for a line past it.
    pub(crate) fn line_range(&self, line: usize) -> Range<usize> {
        self.index.range(line)
    }

    /// The headings outside block quotes and list items, with their indices.
    pub(crate) fn top_headings(&self) -> impl Iterator<Item = (usize, &Heading)> {
        self.headings
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.quoted && !h.in_item)
    }
}

impl Heading {
    /// The heading read as a `Name: value` field (see [`TextLine::field`]).
    pub(crate) fn field(&self, name: &str) -> Option<Field> {
        field_of(&self.text, &self.markup, &self.markup_range, name)
    }
}

impl TextLine {
    /// The line read as a `Name: value` field: its flattened text starts with `name`
    /// (ASCII case-insensitive), then optional spaces and a colon. `**Status**: Done`,
    /// `**Status:** Done`, `__Status__: Done` and `Status: Done` all read as `Done`.
    pub(crate) fn field(&self, name: &str) -> Option<Field> {
        field_of(&self.text, &self.markup, &self.range, name)
    }
}

/// The cells of one pipe-delimited line that is not part of a table: split at pipes not
/// escaped as `\|`, an outer pipe on either side dropped, each cell trimmed.
pub(crate) fn split_row(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut cells: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'|' && (i == 0 || bytes.get(i - 1) != Some(&b'\\')) {
            cells.push(line.get(start..i).unwrap_or(""));
            start = i + 1;
        }
    }
    let piped = !cells.is_empty();
    cells.push(line.get(start..).unwrap_or(""));
    if piped {
        if cells.last().is_some_and(|c| c.trim().is_empty()) {
            cells.pop();
        }
        if cells.first().is_some_and(|c| c.trim().is_empty()) {
            cells.remove(0);
        }
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

fn field_of(text: &str, markup: &str, range: &Range<usize>, name: &str) -> Option<Field> {
    let t = text.trim_start();
    let head = t.get(..name.len())?;
    if !head.eq_ignore_ascii_case(name) {
        return None;
    }
    let value = t.get(name.len()..)?.trim_start().strip_prefix(':')?.trim();
    let colon = markup.find(':')?;
    let after = markup.get(colon + 1..)?;
    let unclosed = after.trim_start_matches(['*', '_']);
    let lead = unclosed.len() - unclosed.trim_start().len();
    let start = colon + 1 + (after.len() - unclosed.len()) + lead;
    let end = start + unclosed.trim().len();
    Some(Field {
        value: value.to_string(),
        markup: markup.get(start..end)?.to_string(),
        range: range.start + start..range.start + end,
    })
}

/// Whitespace runs collapsed to one space, trimmed.
fn collapse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

mod lines;
mod walk;

#[cfg(test)]
mod tests;
