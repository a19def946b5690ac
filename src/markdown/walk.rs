//! The event walk: pulldown-cmark events (with offsets) folded into a [`Markdown`] in one pass.
//! The blocks, paragraph lines and headings here; `inline` (the text being collected), `item`
//! (list items and their task markers), `table` (rows and cells).

mod inline;
mod item;
mod table;

use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::lines::LineIndex;
use super::{Heading, Markdown, TextLine, collapse};
use inline::Acc;
use table::TableBuild;

pub(super) fn read(text: &str, first_line: usize, frontmatter: bool) -> Markdown {
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
            Tag::Table(_) => self.table_start(r),
            Tag::TableHead | Tag::TableRow => self.row_start(r),
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
}
