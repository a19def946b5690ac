//! Tables as the walk reads them: the rows and their cells' byte ranges, a table kept once its
//! header closed.

use std::ops::Range;

use super::super::{Cell, Row, Table};
use super::{Builder, Run, RunKind};

/// The table being read.
pub(super) struct TableBuild {
    range: Range<usize>,
    quoted: bool,
    in_item: bool,
    header: Option<Row>,
    rows: Vec<Row>,
    row: Option<(Range<usize>, Vec<Cell>)>,
}

impl Builder<'_> {
    pub(super) fn table_start(&mut self, r: Range<usize>) {
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

    pub(super) fn row_start(&mut self, r: Range<usize>) {
        if let Some(t) = self.table.as_mut() {
            t.row = Some((r, Vec::new()));
        }
    }

    pub(super) fn push_cell(&mut self) {
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

    pub(super) fn row_end(&mut self, header: bool) {
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

    pub(super) fn table_end(&mut self) {
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
