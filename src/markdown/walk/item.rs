//! List items as the walk reads them: where each starts, its task marker (as GFM draws a box),
//! its own text and markup once it ends.

use std::ops::Range;

use super::super::{Item, collapse};
use super::{Builder, ItemFrame, Own};

impl Builder<'_> {
    /// A task marker is a task only as GFM renders one: cmark-gfm draws a box when a space or a
    /// tab follows the `]` on its line (`- [ ]` alone, or `- [ ]` ending its line before the
    /// text, is the text `[ ]`); pulldown-cmark also takes a line ending.
    pub(super) fn task_marker(&mut self, checked: bool, r: Range<usize>) {
        let follows = self.src.as_bytes().get(r.end).copied();
        if !matches!(follows, Some(b' ' | b'\t')) {
            let src = self.src;
            let acc = self.inline();
            acc.touch(r.start, r.end);
            acc.push_text(src.get(r.clone()).unwrap_or(""));
            if follows.is_some() {
                self.line_break();
            }
            return;
        }
        self.inline();
        if let Some(f) = self.frames.last_mut() {
            f.at = Some(r.start);
            if let Some(item) = self.md.items.get_mut(f.idx) {
                item.task = Some(checked);
            }
        }
    }

    pub(super) fn item_start(&mut self, r: Range<usize>) {
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

    pub(super) fn item_end(&mut self) {
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
}
