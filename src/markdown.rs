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

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// A parsed document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Markdown {
    /// Headings, in document order.
    pub headings: Vec<Heading>,
    /// List items, in document order (a parent before its children).
    pub items: Vec<Item>,
    /// Lines of paragraph text, in document order.
    pub lines: Vec<TextLine>,
    /// GFM tables, in document order.
    pub tables: Vec<Table>,
    index: LineIndex,
}

/// One heading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 1 to 6.
    pub level: u8,
    /// Flattened text.
    pub text: String,
    /// The inline source (ATX: without the `#`s and a closing sequence), trimmed.
    pub markup: String,
    /// Byte range of `markup` (`markup` is exactly this part of the text).
    pub markup_range: Range<usize>,
    /// Code-span contents, strong-emphasis texts and link targets in the heading.
    pub spans: Spans,
    /// 1-based line of the heading (of its text, for a setext heading).
    pub line: usize,
    /// Byte range of the whole heading block (ATX: its line and line ending).
    pub range: Range<usize>,
    /// `## Title` rather than `Title` underlined with `===`/`---`.
    pub atx: bool,
    /// Inside a block quote.
    pub quoted: bool,
    /// Inside a list item.
    pub in_item: bool,
}

/// One list item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Enclosing list items (0 for an item of a top-level list).
    pub depth: usize,
    /// The enclosing item (index into [`Markdown::items`]).
    pub parent: Option<usize>,
    /// The list it belongs to (lists are numbered in document order).
    pub list: usize,
    /// Its number when the list is ordered: the list's start plus the item's index.
    pub number: Option<u64>,
    /// `Some(checked)` for a task item (`[ ]` / `[x]` / `[X]`).
    pub task: Option<bool>,
    /// Its own inline text (first paragraph, after any task marker), flattened.
    pub text: String,
    /// The same as source: each line trimmed, lines joined by one space.
    pub markup: String,
    /// Its own text's lines (indices into [`Markdown::lines`]).
    pub lines: Range<usize>,
    /// Byte offset of its content: the task marker, else its first text, else its start.
    pub at: usize,
    /// 1-based line of `at`.
    pub line: usize,
    /// Byte range of the whole item, nested blocks included.
    pub range: Range<usize>,
    /// Inside a block quote.
    pub quoted: bool,
}

/// One line of paragraph text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextLine {
    /// Flattened text.
    pub text: String,
    /// The line's inline source, verbatim (no list marker, quote marker or indentation).
    pub markup: String,
    /// Byte range of `markup`.
    pub range: Range<usize>,
    /// Code-span contents, strong-emphasis texts and link targets on the line.
    pub spans: Spans,
    /// 1-based line.
    pub line: usize,
    /// Inside a block quote.
    pub quoted: bool,
    /// The innermost list item it is in (index into [`Markdown::items`]).
    pub item: Option<usize>,
    /// Lines of one paragraph share this number (paragraphs are numbered in document order).
    pub paragraph: usize,
}

/// Inline spans of a heading or line, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spans {
    /// Code-span contents.
    pub code: Vec<String>,
    /// Strong-emphasis (`**…**`) texts, flattened.
    pub strong: Vec<String>,
    /// Link targets.
    pub links: Vec<String>,
}

/// The value of a `Name: value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Flattened, trimmed.
    pub value: String,
    /// The value's source, trimmed (emphasis closing the label, as in `**Name:** value`, left
    /// out).
    pub markup: String,
    /// Byte range of `markup` (empty, just after the colon, when the value is empty).
    pub range: Range<usize>,
}

/// A GFM table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The header row.
    pub header: Row,
    /// The body rows.
    pub rows: Vec<Row>,
    /// 1-based line of the header.
    pub line: usize,
    /// 1-based line of the `|---|` delimiter row.
    pub delimiter_line: usize,
    /// Byte range of the whole table.
    pub range: Range<usize>,
    /// Inside a block quote.
    pub quoted: bool,
    /// Inside a list item.
    pub in_item: bool,
}

/// A table row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The cells the row's source has (at most the header's count; missing ones are absent).
    pub cells: Vec<Cell>,
    /// 1-based line.
    pub line: usize,
    /// Byte range of the row's source, line ending excluded.
    pub range: Range<usize>,
    /// The row's source ends with a pipe after its last cell.
    pub closed: bool,
    /// A line without any pipe that GFM still reads as a row (a lazy continuation).
    pub bare: bool,
}

/// A table cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// Flattened text (`\|` read as `|`).
    pub text: String,
    /// Byte range between the cell's pipes, padding included.
    pub range: Range<usize>,
}

/// Parses a document (no frontmatter handling); lines are numbered from 1.
pub fn parse(text: &str) -> Markdown {
    read(text, 1, false)
}

/// Parses a body whose first line is file line `first_line` (e.g. after frontmatter that the
/// caller split off).
pub fn parse_at(text: &str, first_line: usize) -> Markdown {
    read(text, first_line, false)
}

/// Parses a whole file, skipping a leading YAML frontmatter block; lines are numbered from 1.
pub fn parse_document(text: &str) -> Markdown {
    read(text, 1, true)
}

impl Markdown {
    /// The 1-based line of a byte offset.
    pub fn line_of(&self, offset: usize) -> usize {
        self.index.line(offset)
    }

    /// Byte range of a 1-based line's content: line ending (and, on the first line, a BOM)
    /// excluded. Empty at the end of the text for a line past it.
    pub fn line_range(&self, line: usize) -> Range<usize> {
        self.index.range(line)
    }

    /// The headings outside block quotes and list items, with their indices.
    pub fn top_headings(&self) -> impl Iterator<Item = (usize, &Heading)> {
        self.headings
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.quoted && !h.in_item)
    }
}

impl Heading {
    /// The heading read as a `Name: value` field (see [`TextLine::field`]).
    pub fn field(&self, name: &str) -> Option<Field> {
        field_of(&self.text, &self.markup, &self.markup_range, name)
    }
}

impl TextLine {
    /// The line read as a `Name: value` field: its flattened text starts with `name`
    /// (ASCII case-insensitive), then optional spaces and a colon. `**Status**: Done`,
    /// `**Status:** Done`, `__Status__: Done` and `Status: Done` all read as `Done`.
    pub fn field(&self, name: &str) -> Option<Field> {
        field_of(&self.text, &self.markup, &self.range, name)
    }
}

/// The cells of one pipe-delimited line that is not part of a table: split at pipes not
/// escaped as `\|`, an outer pipe on either side dropped, each cell trimmed.
pub fn split_row(line: &str) -> Vec<String> {
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

// ---------------------------------------------------------------------------------------------
// Lines
// ---------------------------------------------------------------------------------------------

/// Byte offsets of line starts and content ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LineIndex {
    /// Start of each line.
    starts: Vec<usize>,
    /// End of each line's content (line ending excluded).
    ends: Vec<usize>,
    /// Length of a leading BOM (0 or 3).
    bom: usize,
    first_line: usize,
}

impl LineIndex {
    fn new(text: &str, first_line: usize, bom: usize) -> Self {
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

    fn line(&self, offset: usize) -> usize {
        // `starts[0] == 0`, so the partition point is at least 1.
        let idx = self.starts.partition_point(|&s| s <= offset);
        self.first_line.saturating_add(idx.saturating_sub(1))
    }

    fn range(&self, line: usize) -> Range<usize> {
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

// ---------------------------------------------------------------------------------------------
// The event walk
// ---------------------------------------------------------------------------------------------

fn read(text: &str, first_line: usize, frontmatter: bool) -> Markdown {
    let bom = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let body = text.get(bom..).unwrap_or("");
    let mut options = Options::ENABLE_TASKLISTS | Options::ENABLE_TABLES;
    if frontmatter {
        options |= Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    }
    let mut b = Builder::new(text, LineIndex::new(text, first_line, bom));
    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        b.event(event, range.start + bom..range.end + bom);
    }
    b.finish()
}

/// Inline content being collected: one line of a paragraph, a heading, or a table cell.
#[derive(Default)]
struct Acc {
    /// Flattened text, whitespace already collapsed (a pending space is added before the next
    /// word).
    text: String,
    space: bool,
    start: Option<usize>,
    end: usize,
    spans: Spans,
    strong_depth: usize,
    strong: String,
}

impl Acc {
    fn touch(&mut self, start: usize, end: usize) {
        self.start.get_or_insert(start);
        self.end = self.end.max(end);
    }

    fn push_text(&mut self, s: &str) {
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

/// What the inline content being collected belongs to.
enum RunKind {
    /// Paragraph text (or a tight list item's text); `own` is the item whose own text it is.
    Lines {
        own: Option<usize>,
    },
    Heading {
        level: u8,
        range: Range<usize>,
    },
    Cell {
        range: Range<usize>,
    },
}

struct Run {
    kind: RunKind,
    acc: Acc,
    paragraph: usize,
}

/// Where an open item is with its own text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Own {
    /// Nothing of the item read yet.
    Pending,
    /// Reading its first paragraph.
    Open,
    /// Past it.
    Closed,
}

struct ItemFrame {
    idx: usize,
    own: Own,
    at: Option<usize>,
}

struct ListFrame {
    id: usize,
    next: Option<u64>,
}

struct TableBuild {
    range: Range<usize>,
    quoted: bool,
    in_item: bool,
    header: Option<Row>,
    rows: Vec<Row>,
    row: Option<(Range<usize>, Vec<Cell>)>,
}

struct Builder<'a> {
    src: &'a str,
    md: Markdown,
    quote: usize,
    skip: bool,
    lists: Vec<ListFrame>,
    list_count: usize,
    frames: Vec<ItemFrame>,
    run: Option<Run>,
    paragraphs: usize,
    table: Option<TableBuild>,
}

impl<'a> Builder<'a> {
    fn new(src: &'a str, index: LineIndex) -> Self {
        Self {
            src,
            md: Markdown {
                index,
                ..Markdown::default()
            },
            quote: 0,
            skip: false,
            lists: Vec::new(),
            list_count: 0,
            frames: Vec::new(),
            run: None,
            paragraphs: 0,
            table: None,
        }
    }

    fn finish(mut self) -> Markdown {
        self.end_run();
        self.md
    }

    fn event(&mut self, event: Event<'_>, r: Range<usize>) {
        if self.skip {
            if let Event::End(TagEnd::CodeBlock | TagEnd::HtmlBlock | TagEnd::MetadataBlock(_)) =
                event
            {
                self.skip = false;
            }
            return;
        }
        match event {
            Event::Start(tag) => self.start(tag, r),
            Event::End(end) => self.end(end, r),
            Event::Text(s) => {
                let acc = self.inline();
                acc.touch(r.start, r.end);
                acc.push_text(&s);
            }
            Event::Code(s) => {
                let acc = self.inline();
                acc.touch(r.start, r.end);
                acc.push_text(&s);
                acc.spans.code.push(s.to_string());
            }
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::TaskListMarker(checked) => self.task_marker(checked, r),
            Event::Rule => self.block_start(false),
            Event::Html(_) => {}
            Event::InlineHtml(_)
            | Event::InlineMath(_)
            | Event::DisplayMath(_)
            | Event::FootnoteReference(_) => self.inline().touch(r.start, r.end),
        }
    }

    fn start(&mut self, tag: Tag<'_>, r: Range<usize>) {
        match tag {
            Tag::Paragraph => self.block_start(true),
            Tag::Heading { level, .. } => {
                self.block_start(false);
                self.run = Some(Run {
                    kind: RunKind::Heading {
                        level: level as u8,
                        range: r,
                    },
                    acc: Acc::default(),
                    paragraph: self.paragraphs,
                });
            }
            Tag::BlockQuote(_) => {
                self.block_start(false);
                self.quote += 1;
            }
            Tag::CodeBlock(_) | Tag::HtmlBlock | Tag::MetadataBlock(_) => {
                self.block_start(false);
                self.skip = true;
            }
            Tag::List(first) => {
                self.block_start(false);
                self.lists.push(ListFrame {
                    id: self.list_count,
                    next: first,
                });
                self.list_count += 1;
            }
            Tag::Item => self.item_start(r),
            Tag::Table(_) => {
                self.block_start(false);
                self.table = Some(TableBuild {
                    range: r,
                    quoted: self.quote > 0,
                    in_item: !self.frames.is_empty(),
                    header: None,
                    rows: Vec::new(),
                    row: None,
                });
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(t) = self.table.as_mut() {
                    t.row = Some((r, Vec::new()));
                }
            }
            Tag::TableCell => {
                self.run = Some(Run {
                    kind: RunKind::Cell { range: r },
                    acc: Acc::default(),
                    paragraph: self.paragraphs,
                });
            }
            Tag::Strong => {
                let acc = self.inline();
                acc.touch(r.start, r.start);
                acc.strong_depth += 1;
            }
            Tag::Link { dest_url, .. } => {
                let acc = self.inline();
                acc.touch(r.start, r.start);
                acc.spans.links.push(dest_url.to_string());
            }
            Tag::Emphasis
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript
            | Tag::Image { .. } => self.inline().touch(r.start, r.start),
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition => self.block_start(false),
        }
    }

    fn end(&mut self, end: TagEnd, r: Range<usize>) {
        match end {
            TagEnd::Paragraph => {
                self.end_run();
                if let Some(f) = self.frames.last_mut()
                    && f.own == Own::Open
                {
                    f.own = Own::Closed;
                }
            }
            TagEnd::Heading(_) => self.end_run(),
            TagEnd::BlockQuote(_) => {
                self.end_run();
                self.quote = self.quote.saturating_sub(1);
            }
            TagEnd::List(_) => {
                self.end_run();
                self.lists.pop();
            }
            TagEnd::Item => self.item_end(),
            TagEnd::TableCell => self.end_run(),
            TagEnd::TableHead | TagEnd::TableRow => self.row_end(matches!(end, TagEnd::TableHead)),
            TagEnd::Table => self.table_end(),
            TagEnd::Strong => {
                let acc = self.inline();
                acc.touch(r.end, r.end);
                acc.strong_depth = acc.strong_depth.saturating_sub(1);
                if acc.strong_depth == 0 {
                    let strong = collapse(&std::mem::take(&mut acc.strong));
                    acc.spans.strong.push(strong);
                }
            }
            TagEnd::Emphasis
            | TagEnd::Strikethrough
            | TagEnd::Superscript
            | TagEnd::Subscript
            | TagEnd::Link
            | TagEnd::Image => self.inline().touch(r.end, r.end),
            TagEnd::CodeBlock
            | TagEnd::HtmlBlock
            | TagEnd::MetadataBlock(_)
            | TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition => self.end_run(),
        }
    }

    /// A block starts: the text being read ends, and the innermost item's own text is over
    /// unless this is its first paragraph.
    fn block_start(&mut self, paragraph: bool) {
        self.end_run();
        let own = match self.frames.last_mut() {
            Some(f) if f.own == Own::Pending && paragraph => {
                f.own = Own::Open;
                Some(f.idx)
            }
            Some(f) => {
                f.own = Own::Closed;
                None
            }
            None => None,
        };
        if paragraph {
            self.start_lines(own);
        }
    }

    fn start_lines(&mut self, own: Option<usize>) {
        self.paragraphs += 1;
        if let Some(idx) = own
            && let Some(item) = self.md.items.get_mut(idx)
        {
            item.lines = self.md.lines.len()..self.md.lines.len();
        }
        self.run = Some(Run {
            kind: RunKind::Lines { own },
            acc: Acc::default(),
            paragraph: self.paragraphs,
        });
    }

    /// The accumulator for inline content, opening a run for a tight item's text.
    fn inline(&mut self) -> &mut Acc {
        if self.run.is_none() {
            let own = match self.frames.last_mut() {
                Some(f) if f.own == Own::Pending => {
                    f.own = Own::Open;
                    Some(f.idx)
                }
                _ => None,
            };
            self.start_lines(own);
        }
        let run = self.run.get_or_insert_with(|| Run {
            kind: RunKind::Lines { own: None },
            acc: Acc::default(),
            paragraph: 0,
        });
        &mut run.acc
    }

    fn line_break(&mut self) {
        match self.run.as_mut() {
            Some(Run {
                kind: RunKind::Lines { .. },
                ..
            }) => self.push_line(),
            Some(run) => run.acc.push_text(" "),
            None => {}
        }
    }

    fn task_marker(&mut self, checked: bool, r: Range<usize>) {
        self.inline();
        if let Some(f) = self.frames.last_mut() {
            f.at = Some(r.start);
            if let Some(item) = self.md.items.get_mut(f.idx) {
                item.task = Some(checked);
            }
        }
    }

    fn item_start(&mut self, r: Range<usize>) {
        self.end_run();
        let idx = self.md.items.len();
        let (list, number) = match self.lists.last_mut() {
            Some(l) => {
                let n = l.next;
                l.next = n.map(|n| n.saturating_add(1));
                (l.id, n)
            }
            None => (0, None),
        };
        self.md.items.push(Item {
            depth: self.frames.len(),
            parent: self.frames.last().map(|f| f.idx),
            list,
            number,
            task: None,
            text: String::new(),
            markup: String::new(),
            lines: self.md.lines.len()..self.md.lines.len(),
            at: r.start,
            line: 0,
            range: r,
            quoted: self.quote > 0,
        });
        self.frames.push(ItemFrame {
            idx,
            own: Own::Pending,
            at: None,
        });
    }

    fn item_end(&mut self) {
        self.end_run();
        let Some(frame) = self.frames.pop() else {
            return;
        };
        let lines = &self.md.lines;
        let Some(item) = self.md.items.get_mut(frame.idx) else {
            return;
        };
        let own = lines.get(item.lines.clone()).unwrap_or(&[]);
        item.at = frame
            .at
            .or_else(|| own.first().map(|l| l.range.start))
            .unwrap_or(item.range.start);
        item.line = self.md.index.line(item.at);
        match own {
            [one] if !one.markup.contains('\n') => {
                item.text = one.text.clone();
                item.markup = one.markup.trim().to_string();
            }
            _ => {
                item.text = collapse(
                    &own.iter()
                        .map(|l| l.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                item.markup = own
                    .iter()
                    .flat_map(|l| l.markup.lines())
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
            }
        }
    }

    /// Ends the current run, storing what it read.
    fn end_run(&mut self) {
        match self.run.as_ref().map(|r| &r.kind) {
            Some(RunKind::Lines { .. }) => {
                self.push_line();
                self.run = None;
            }
            Some(RunKind::Heading { .. }) => self.push_heading(),
            Some(RunKind::Cell { .. }) => self.push_cell(),
            None => {}
        }
    }

    /// Stores the paragraph line being read and starts the next one of the same run.
    fn push_line(&mut self) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let RunKind::Lines { own } = run.kind else {
            return;
        };
        let acc = std::mem::take(&mut run.acc);
        let Some(start) = acc.start else {
            return;
        };
        let end = acc.end.max(start);
        self.md.lines.push(TextLine {
            text: acc.text,
            markup: self.src.get(start..end).unwrap_or("").to_string(),
            range: start..end,
            spans: acc.spans,
            line: self.md.index.line(start),
            quoted: self.quote > 0,
            item: self.frames.last().map(|f| f.idx),
            paragraph: run.paragraph,
        });
        if let Some(idx) = own
            && let Some(item) = self.md.items.get_mut(idx)
        {
            item.lines.end = self.md.lines.len();
        }
    }

    fn push_heading(&mut self) {
        let Some(Run {
            kind: RunKind::Heading { level, range },
            acc,
            ..
        }) = self.run.take()
        else {
            return;
        };
        let markup_range = match acc.start {
            Some(s) => {
                let raw = self.src.get(s..acc.end.max(s)).unwrap_or("");
                let start = s + (raw.len() - raw.trim_start().len());
                start..(start + raw.trim().len())
            }
            None => range.end..range.end,
        };
        let atx = self
            .src
            .get(range.clone())
            .is_some_and(|s| s.trim_start_matches([' ', '\t']).starts_with('#'));
        self.md.headings.push(Heading {
            level,
            text: acc.text,
            markup: self.src.get(markup_range.clone()).unwrap_or("").to_string(),
            markup_range,
            spans: acc.spans,
            line: self.md.index.line(range.start),
            range,
            atx,
            quoted: self.quote > 0,
            in_item: !self.frames.is_empty(),
        });
    }

    fn push_cell(&mut self) {
        let Some(Run {
            kind: RunKind::Cell { range },
            acc,
            ..
        }) = self.run.take()
        else {
            return;
        };
        if let Some((_, cells)) = self.table.as_mut().and_then(|t| t.row.as_mut()) {
            cells.push(Cell {
                text: acc.text,
                range,
            });
        }
    }

    fn row_end(&mut self, header: bool) {
        self.end_run();
        let src = self.src;
        let index = &self.md.index;
        let Some(t) = self.table.as_mut() else {
            return;
        };
        let Some((r, mut cells)) = t.row.take() else {
            return;
        };
        let raw = src.get(r.clone()).unwrap_or("");
        let content = raw.trim_end_matches(['\n', '\r']);
        let end = r.start + content.len();
        let trimmed_end = r.start + content.trim_end_matches([' ', '\t']).len();
        // Cells GFM adds to a short row are empty and sit past the row's text.
        cells.retain(|c| !(c.range.is_empty() && c.range.start >= trimmed_end));
        let row = Row {
            closed: cells.last().is_some_and(|c| c.range.end < trimmed_end),
            bare: !content.contains('|'),
            cells,
            line: index.line(r.start),
            range: r.start..end,
        };
        if header {
            t.header = Some(row);
        } else {
            t.rows.push(row);
        }
    }

    fn table_end(&mut self) {
        self.end_run();
        let Some(t) = self.table.take() else {
            return;
        };
        let Some(header) = t.header else {
            return;
        };
        self.md.tables.push(Table {
            line: header.line,
            delimiter_line: header.line + 1,
            header,
            rows: t.rows,
            range: t.range,
            quoted: t.quoted,
            in_item: t.in_item,
        });
    }
}

#[cfg(test)]
mod tests;
