//! An item's text (SPEC §14): read by the one Markdown reader with the rule of a task file
//! (GFM task items of every list form; nothing in a quote, a comment or code), bounded in size
//! before any claim, and written into the item's task file with each criterion once as a box —
//! the tracker's own text quoted, its boxes shown as plain bullets.

use std::path::Path;

use super::Item;
use crate::markdown::{self, Markdown};
use crate::task::checklist;

/// An item's text as its tracker holds it — what its task file is written from (SPEC §14):
/// pinned when a queue first reads it, and put back when it changes while the queue runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Text {
    pub(crate) title: String,
    /// The body (GitHub) or description (beads).
    pub(crate) body: String,
    /// Acceptance criteria of their own, as written (beads'); `None`: the body's task items are
    /// the criteria (GitHub).
    pub(crate) criteria: Option<String>,
}

impl Text {
    /// Item `id` as this text makes it: its criteria read by the one Markdown reader.
    pub(crate) fn item(&self, id: &str) -> Item {
        let criteria = match &self.criteria {
            Some(c) => criteria_of(c),
            None => task_items(&self.body),
        };
        Item {
            id: id.to_string(),
            title: self.title.clone(),
            body: self.body.clone(),
            criteria,
        }
    }
}

/// The most bytes an item's title may hold: a GitHub title holds 256 characters at most.
const TITLE_LIMIT: usize = 2 * 1024;
/// The most bytes an item's body, and its criteria, may each hold: every GitHub body fits
/// (65,536 characters at most, 4 bytes each at most).
const TEXT_LIMIT: usize = 256 * 1024;

/// The hash of what `item` asks — its title, body and criteria — as a lease names it (SPEC §15:
/// a worker taking an item over works on the text its holder took it with): a git blob hash
/// of them as one JSON array.
pub(crate) fn text_hash(item: &Item) -> String {
    let doc = serde_json::json!([item.title, item.body, item.criteria]).to_string();
    git2::Oid::hash_object(git2::ObjectType::Blob, doc.as_bytes())
        .map_or_else(|_| String::new(), |o| o.to_string())
}

/// Why the item must not be taken, checked before any claim; `None` when it may be. Its title
/// or text past the bounds; a task file past the bound of every Markdown file ralph reads; a
/// quote that would still show a box; a text that would add, hide or change a criterion.
pub(crate) fn refusal(source: &str, item: &Item) -> Option<String> {
    if item.title.len() > TITLE_LIMIT {
        return Some(format!(
            "its title holds {} bytes, more than the {} KiB an item's title may",
            item.title.len(),
            TITLE_LIMIT / 1024
        ));
    }
    let criteria = item.criteria.iter().map(String::len).sum::<usize>();
    for (what, held) in [
        ("its body holds", item.body.len()),
        ("its criteria hold", criteria),
    ] {
        if held > TEXT_LIMIT {
            return Some(format!(
                "{what} {held} bytes, more than the {} KiB an item's text may",
                TEXT_LIMIT / 1024
            ));
        }
    }
    let file = task_file(source, item);
    if file.len() as u64 > crate::files::MAX_TEXT {
        return Some(format!(
            "its task file would hold {} bytes, more than the 1 MiB a task file may",
            file.len()
        ));
    }
    if markdown::parse_document(&file)
        .items
        .iter()
        .any(|i| i.quoted && i.task.is_some())
    {
        return Some("its quoted text would still show a box".into());
    }
    if !asks_only_its_criteria(source, item, &file) {
        return Some("its text would change the criteria of its task file".into());
    }
    None
}

/// The item's task file (SPEC §3.1): the title as the task and heading, the body as the
/// description (quoted, its boxes shown as plain bullets), its criteria (else the title) as
/// the Success Criteria — each criterion once as a box.
pub(crate) fn task_file(source: &str, item: &Item) -> String {
    let title = one_line(&item.title);
    let mut text = format!(
        "---\ntask: {}\n---\n\n# Task: {title}\n\nFrom {source} item `{}`.\n\n",
        yaml_string(&title),
        item.id
    );
    // The tracker's text as a quote: its headings and task items are the item's words, never
    // sections or criteria of the task file.
    text.push_str(&quoted(&item.body));
    text.push_str("## Success Criteria\n\n");
    for c in expected_criteria(item) {
        text.push_str(&format!("- [ ] {c}\n"));
    }
    text
}

/// The body as a block quote (each line `> `, then a blank line; nothing for an empty body)
/// showing every task item's box as a plain bullet (`- [ ] x` → `- x`, `- [x] x` →
/// `- (done) x`). Where taking a box away would make another one (`- [ ] - [ ] x` →
/// `- - [ ] x`), each open box is written `(to do)` instead; where that too would (text in
/// place of a box can make the next line a heading's underline, and so change the blocks
/// after it), the boxes it shows are written so again, a few times at most: each time takes
/// a `[` away. What is left is refused ([`refusal`]).
fn quoted(body: &str) -> String {
    let body = normalised(body);
    let plain = unbox(&body, None);
    if !shows_a_box(&plain) {
        return quote(&plain);
    }
    let mut text = body.into_owned();
    for _ in 0..MAX_PASSES {
        text = unbox(&text, Some("(to do)"));
        if !shows_a_box(&text) {
            break;
        }
    }
    quote(&text)
}

/// Times the boxes of a text are written as words at most.
const MAX_PASSES: usize = 4;

fn shows_a_box(text: &str) -> bool {
    markdown::parse(text).items.iter().any(|i| i.task.is_some())
}

/// `text` (its lines ended by `\n` alone) as a block quote whose blocks are the text's own:
/// tabs are spaces to the same tab stops, which the `> ` would move (a tab that made a code
/// block would no longer); leading blank lines go, a first line's indentation stays (it may
/// make a code block). Blank is spaces and tabs only, as Markdown has it: a line of another
/// white space (a vertical tab) is text, and kept, else what follows it would change blocks.
fn quote(text: &str) -> String {
    let text = text.trim_end_matches([' ', '\t', '\n']);
    let start = text
        .char_indices()
        .take_while(|(_, c)| matches!(c, ' ' | '\t' | '\n'))
        .filter(|(_, c)| *c == '\n')
        .last()
        .map_or(0, |(i, _)| i + 1);
    let text = text.get(start..).unwrap_or("");
    if text.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(text.len() + text.len() / 4 + 2);
    for line in text.lines() {
        out.push_str(format!("> {}", expand_tabs(line)).trim_end_matches([' ', '\t']));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Tabs as spaces to the next multiple of 4 columns, as CommonMark reads them.
fn expand_tabs(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\t') {
        return line.into();
    }
    let mut out = String::with_capacity(line.len() + 8);
    let mut column = 0;
    for c in line.chars() {
        if c == '\t' {
            let to = (column / 4 + 1) * 4;
            out.extend(std::iter::repeat_n(' ', to - column));
            column = to;
        } else {
            out.push(c);
            column += 1;
        }
    }
    out.into()
}

/// `body` with each task item's box replaced: `[ ]` by `open` (none: the box and the spaces
/// after it taken away), `[x]` by `(done)`.
fn unbox(body: &str, open: Option<&str>) -> String {
    let md = markdown::parse(body);
    let mut out = String::with_capacity(body.len() + body.len() / 8);
    let mut from = 0;
    for item in md.items.iter().filter(|i| i.task.is_some()) {
        let at = item.at;
        let (Some(mark), Some(before)) = (body.get(at..at + 3), body.get(from..at)) else {
            continue;
        };
        if !matches!(mark, "[ ]" | "[x]" | "[X]") {
            continue;
        }
        out.push_str(before);
        if mark != "[ ]" {
            out.push_str("(done)");
            from = at + 3;
            continue;
        }
        match open {
            Some(word) => {
                out.push_str(word);
                from = at + 3;
            }
            None => {
                let rest = body.get(at + 3..).unwrap_or("");
                from = body.len() - rest.trim_start_matches([' ', '\t']).len();
            }
        }
    }
    out.push_str(body.get(from..).unwrap_or(""));
    out
}

/// The item's criteria, else its title, each on one line.
fn expected_criteria(item: &Item) -> Vec<String> {
    let criteria: Vec<String> = if item.criteria.is_empty() {
        vec![one_line(&item.title)]
    } else {
        item.criteria.iter().map(|c| one_line(c)).collect()
    };
    criteria.into_iter().filter(|c| !c.is_empty()).collect()
}

/// Whether the task file `text` written for `item` asks for exactly what the same file without
/// the item's text would, one box per criterion: the text (quoted) adds, hides or changes no
/// criterion. Read with the reader every run uses.
pub(super) fn asks_only_its_criteria(source: &str, item: &Item, text: &str) -> bool {
    let criteria = |t: &str| {
        crate::task::document::parse_task_bytes(Path::new("task.md"), t.as_bytes())
            .ok()
            .map(|d| {
                d.checklist
                    .remaining()
                    .map(|c| c.text.clone())
                    .collect::<Vec<_>>()
            })
    };
    let bare = Item {
        body: String::new(),
        ..item.clone()
    };
    let wanted = criteria(&task_file(source, &bare));
    let count = expected_criteria(item).len();
    wanted
        .as_ref()
        .is_some_and(|w| w.len() == count && count > 0)
        && criteria(text) == wanted
}

/// The criteria of a tracker's text (a GitHub issue's body): the unchecked ones among the task
/// items `ralph run` would count in a task file holding it, each as written (its own text's
/// source, on one line). Empty when it has none; a text past the bound is not read.
pub(crate) fn task_items(text: &str) -> Vec<String> {
    if text.len() > TEXT_LIMIT {
        return unread(text);
    }
    let text = &normalised(text);
    let md = markdown::parse(text);
    let items = checklist::criteria_items(&md, text.len());
    unchecked(&md, &items)
}

/// A tracker's acceptance criteria (beads' `acceptance_criteria`): its task items as
/// [`task_items`] reads them; when it has none at all, checked or not, each line of its text
/// (list markers taken off; nothing quoted, in a comment or in code; no heading). A text past
/// the bound is not read.
pub(crate) fn criteria_of(text: &str) -> Vec<String> {
    if text.len() > TEXT_LIMIT {
        return unread(text);
    }
    let text = &normalised(text);
    let md = markdown::parse(text);
    let items = checklist::criteria_items(&md, text.len());
    if !items.is_empty() {
        return unchecked(&md, &items);
    }
    md.lines
        .iter()
        .filter(|l| !l.quoted && !l.text.trim().is_empty())
        .map(|l| l.markup.trim().to_string())
        .collect()
}

/// A text past the bound, not read (a body of `- [ ] x` lines makes an item of some hundred
/// bytes per eight): whole, as one criterion, so that [`refusal`] refuses its item.
fn unread(text: &str) -> Vec<String> {
    vec![text.to_string()]
}

/// The unchecked ones of `items` (indices into `md.items`), each its own text's source.
fn unchecked(md: &Markdown, items: &[usize]) -> Vec<String> {
    items
        .iter()
        .filter_map(|&i| md.items.get(i))
        .filter(|i| i.task == Some(false))
        .map(|i| i.markup.clone())
        .filter(|m| !m.trim().is_empty())
        .collect()
}

/// The text as GitHub renders it and as it is quoted: a leading BOM taken off (inside a quote
/// it would be text), every line ending Markdown knows (`\r\n`, a lone `\r`) made `\n`
/// (pulldown-cmark lets an indented code line run on past a lone `\r`; a quote must not), a
/// NUL byte U+FFFD (as CommonMark reads it; no task file may hold one).
fn normalised(text: &str) -> std::borrow::Cow<'_, str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.contains(['\r', '\0']) {
        text.replace("\r\n", "\n")
            .replace('\r', "\n")
            .replace('\0', "\u{fffd}")
            .into()
    } else {
        text.into()
    }
}

/// Text on one line: a tracker's title or criterion cannot open a new Markdown block (nor
/// hold a NUL byte).
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('\0', "\u{fffd}")
}

/// A YAML double-quoted string.
fn yaml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}
