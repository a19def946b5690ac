//! Reading `PRD.md` (and a plan under `docs/plans/`, read the same way) with the Markdown
//! reader: the title, the goal, the tasks with their acceptance criteria, the completion promise.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use super::{DEFAULT_PROMISE, Prd, PrdTask, TableError, clean, one_line, strip_prefix_ci};
use crate::markdown::{self, Markdown};

/// Parse `PRD.md`. `path` is only used in error messages.
///
/// Tasks are `### Task N: Title` or `## Task N: Title` headings (any of `:` `.` `-` `)` `—` after
/// the number); when there are none, `### N. Title` headings. A task runs to the next heading of
/// its level or higher, the next task, or the Goal / Completion Promise heading. Its criteria are
/// the list items under an "Acceptance Criteria" line or heading inside it (nested items join
/// their parent); without such a label, its `- [ ]` items.
pub fn parse_prd(path: &Path, text: &str) -> Result<Prd, TableError> {
    let doc = Doc::new(path, text);
    let goal = doc.goal()?;
    let tasks = doc.tasks()?;
    Ok(Prd {
        title: doc.title(),
        goal,
        tasks,
        promise: doc.promise(),
    })
}

/// What a top-level heading is to the PRD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Goal,
    Promise,
    Task,
    /// An "Acceptance Criteria" heading: part of the task above it.
    Criteria,
    Other,
}

/// A heading outside block quotes and list items.
struct Head {
    /// Index into the document's headings.
    idx: usize,
    level: usize,
    kind: Kind,
    /// A task heading's number (digits) and title.
    task: Option<(String, String)>,
}

/// A PRD being read.
struct Doc<'a> {
    path: &'a Path,
    text: &'a str,
    md: Markdown,
    heads: Vec<Head>,
}

impl<'a> Doc<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let md = markdown::parse_document(text);
        let top: Vec<(usize, usize, &str)> = md
            .top_headings()
            .map(|(i, h)| (i, usize::from(h.level), h.markup.as_str()))
            .collect();
        // Tasks use the `Task N` style if any heading does.
        let named = top.iter().any(|&(_, l, m)| named_task(l, m).is_some());
        let heads = top
            .iter()
            .map(|&(idx, level, markup)| {
                let task = if named {
                    named_task(level, markup)
                } else {
                    numbered_task(level, markup)
                };
                let kind = if is_goal_heading(level, markup).is_some() {
                    Kind::Goal
                } else if is_promise_heading(level, markup).is_some() {
                    Kind::Promise
                } else if task.is_some() {
                    Kind::Task
                } else if is_criteria_heading(markup) {
                    Kind::Criteria
                } else {
                    Kind::Other
                };
                let task = task
                    .filter(|_| kind == Kind::Task)
                    .map(|(n, t)| (n.to_string(), t.to_string()));
                Head {
                    idx,
                    level,
                    kind,
                    task,
                }
            })
            .collect();
        Self {
            path,
            text,
            md,
            heads,
        }
    }

    fn heading(&self, head: &Head) -> &markdown::Heading {
        &self.md.headings[head.idx]
    }

    /// Where the section of `heads[n]` ends: the start of the first later heading `ends`
    /// accepts, else the end of the text.
    fn section_end(&self, n: usize, ends: impl Fn(&Head) -> bool) -> usize {
        self.heads
            .get(n + 1..)
            .unwrap_or(&[])
            .iter()
            .find(|h| ends(h))
            .map_or(self.text.len(), |h| self.heading(h).range.start)
    }

    /// The first `# ` heading, else the file stem.
    fn title(&self) -> String {
        self.heads
            .iter()
            .map(|h| self.heading(h))
            .find(|h| h.level == 1)
            .map(|h| clean_title(&h.markup))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| {
                self.path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
    }

    /// The goal: a `Goal` heading's inline text and section.
    fn goal(&self) -> Result<String, TableError> {
        let Some(n) = self.heads.iter().position(|h| h.kind == Kind::Goal) else {
            return Err(TableError::MissingGoal {
                path: self.path.to_path_buf(),
            });
        };
        let head = &self.heads[n];
        let h = self.heading(head);
        let inline = is_goal_heading(head.level, &h.markup).unwrap_or("");
        let body = self.slice(h.range.end..self.section_end(n, |_| true));
        let goal = format!("{inline}\n{body}").trim().to_string();
        if goal.is_empty() {
            return Err(TableError::EmptyGoal {
                path: self.path.to_path_buf(),
                line: h.line,
            });
        }
        Ok(goal)
    }

    /// The completion promise: a `Completion Promise` heading's inline text, else the first line
    /// of its section; [`DEFAULT_PROMISE`] without one.
    fn promise(&self) -> String {
        let found = self
            .heads
            .iter()
            .position(|h| h.kind == Kind::Promise)
            .and_then(|n| {
                let head = &self.heads[n];
                let h = self.heading(head);
                let inline = is_promise_heading(head.level, &h.markup).unwrap_or("");
                if !inline.trim().is_empty() {
                    return promise_keyword(inline);
                }
                let end = self.section_end(n, |_| true);
                self.md
                    .lines
                    .iter()
                    .find(|l| !l.quoted && l.range.start >= h.range.end && l.range.start < end)
                    .and_then(|l| promise_keyword(&l.markup))
            });
        found.unwrap_or_else(|| DEFAULT_PROMISE.to_string())
    }

    fn tasks(&self) -> Result<Vec<PrdTask>, TableError> {
        let tasks = self.heading_tasks()?;
        if tasks.is_empty() {
            return Err(TableError::NoTasks {
                path: self.path.to_path_buf(),
            });
        }
        Ok(tasks)
    }

    /// Tasks written as headings (`### Task 1: Title`, `### 1. Title`).
    fn heading_tasks(&self) -> Result<Vec<PrdTask>, TableError> {
        let mut numbers = Numbers::default();
        let mut tasks = Vec::new();
        for (n, head) in self.heads.iter().enumerate() {
            let Some((digits, title)) = &head.task else {
                continue;
            };
            let h = self.heading(head);
            let (number, title) = numbers.check(self.path, h.line, digits, &clean_title(title))?;
            let level = head.level;
            let end = self.section_end(n, |x| {
                x.kind != Kind::Criteria && (x.level <= level || x.kind != Kind::Other)
            });
            let (criteria, body) = self.section_criteria(h.range.end..end);
            tasks.push(self.task(number, title, h.line, criteria, body)?);
        }
        Ok(tasks)
    }

    /// A task, or the error when it has no criteria.
    fn task(
        &self,
        number: u32,
        title: String,
        line: usize,
        criteria: Vec<String>,
        body: String,
    ) -> Result<PrdTask, TableError> {
        if criteria.is_empty() {
            return Err(TableError::NoCriteria {
                path: self.path.to_path_buf(),
                line,
                number,
            });
        }
        Ok(PrdTask {
            number,
            title,
            body,
            criteria,
            line,
        })
    }

    /// A heading task's criteria and the rest of its section as its body. The criteria are what
    /// follows each "Acceptance Criteria" label (a heading, a line or a list item) — its inline
    /// text and the list after it — or, without any label, the section's task items.
    fn section_criteria(&self, section: Range<usize>) -> (Vec<String>, String) {
        let within = |r: &Range<usize>| r.start >= section.start && r.start < section.end;
        let mut labels: Vec<(usize, Label)> = Vec::new();
        for head in &self.heads {
            let h = self.heading(head);
            if head.kind == Kind::Criteria && within(&h.range) {
                let inline = h
                    .field("acceptance criteria")
                    .map(|f| f.markup)
                    .unwrap_or_default();
                labels.push((h.range.start, Label::Heading(h.range.clone(), inline)));
            }
        }
        for (li, line) in self.md.lines.iter().enumerate() {
            if line.quoted || !within(&line.range) {
                continue;
            }
            let Some(inline) = criteria_label(line) else {
                continue;
            };
            let label = match line.item {
                Some(i) if self.md.items.get(i).is_some_and(|it| it.lines.start == li) => {
                    Label::Item(i, inline)
                }
                _ => Label::Line(line.range.clone(), inline),
            };
            labels.push((line.range.start, label));
        }
        labels.sort_by_key(|(at, _)| *at);
        let mut picked = Picked::default();
        for (_, label) in &labels {
            self.take_label(label, section.end, &mut picked);
        }
        if labels.is_empty() {
            // No label anywhere in the task: its task items are the criteria.
            for (i, item) in self.md.items.iter().enumerate() {
                if !item.quoted && item.task.is_some() && within(&(item.at..item.at)) {
                    picked.consumed.push(self.own_span(i));
                    if !item.markup.is_empty() {
                        picked.criteria.push(item.markup.clone());
                    }
                }
            }
        }
        let body = self.body(section, picked.consumed);
        (picked.criteria, body)
    }

    /// One label's criteria: its inline text, then the items it introduces.
    fn take_label(&self, label: &Label, end: usize, picked: &mut Picked) {
        let (inline, items) = match label {
            Label::Heading(range, inline) | Label::Line(range, inline) => {
                picked.consumed.push(range.clone());
                (inline, self.list_after(range.end, end))
            }
            Label::Item(i, inline) => {
                let Some(item) = self.md.items.get(*i) else {
                    return;
                };
                picked.consumed.push(item.range.clone());
                let children = self.children(*i);
                let items = if children.is_empty() {
                    self.siblings_after(*i, end)
                } else {
                    children
                };
                (inline, items)
            }
        };
        if !inline.is_empty() {
            picked.criteria.push(one_line(inline));
        }
        for k in items {
            if picked.items.insert(k)
                && let Some(text) = self.criterion(k)
            {
                picked.consumed.push(self.md.items[k].range.clone());
                picked.criteria.push(text);
            }
        }
    }

    /// The items of the first list that starts after `offset` (and before `end`).
    fn list_after(&self, offset: usize, end: usize) -> Vec<usize> {
        let first = self
            .md
            .items
            .iter()
            .position(|it| !it.quoted && it.range.start >= offset && it.at < end);
        match first {
            Some(j) => std::iter::once(j)
                .chain(self.siblings_after(j, end))
                .collect(),
            None => Vec::new(),
        }
    }

    /// The items after item `i` in its list (before `end`).
    fn siblings_after(&self, i: usize, end: usize) -> Vec<usize> {
        let Some(item) = self.md.items.get(i) else {
            return Vec::new();
        };
        self.md
            .items
            .iter()
            .enumerate()
            .skip(i + 1)
            .filter(|(_, it)| it.list == item.list && it.parent == item.parent && it.at < end)
            .map(|(k, _)| k)
            .collect()
    }

    /// The items directly inside item `i`.
    fn children(&self, i: usize) -> Vec<usize> {
        self.descendants(i)
            .filter(|&k| self.md.items[k].parent == Some(i))
            .collect()
    }

    /// The items inside item `i`, at any depth, in document order.
    fn descendants(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let end = self.md.items.get(i).map_or(0, |it| it.range.end);
        (i + 1..self.md.items.len()).take_while(move |&k| self.md.items[k].range.start < end)
    }

    /// An item as a criterion: its own text, its nested items' texts joined with `; `.
    fn criterion(&self, i: usize) -> Option<String> {
        let parts: Vec<&str> = std::iter::once(i)
            .chain(self.descendants(i))
            .map(|k| self.md.items[k].markup.as_str())
            .filter(|m| !m.is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Item `i` without its nested items.
    fn own_span(&self, i: usize) -> Range<usize> {
        let item = &self.md.items[i];
        let end = self
            .descendants(i)
            .next()
            .map_or(item.range.end, |k| self.md.items[k].range.start);
        item.range.start..end
    }

    /// The section's text with the `consumed` ranges cut out: lines kept as written, runs of
    /// blank lines collapsed, trimmed.
    fn body(&self, section: Range<usize>, mut consumed: Vec<Range<usize>>) -> String {
        consumed.sort_by_key(|r| r.start);
        let mut kept = String::new();
        let mut at = section.start;
        for r in consumed {
            let start = r.start.clamp(at, section.end);
            kept.push_str(&self.slice(at..start));
            at = r.end.clamp(at, section.end);
        }
        kept.push_str(&self.slice(at..section.end));
        let mut out: Vec<&str> = Vec::new();
        for line in kept.lines().map(str::trim_end) {
            if !(line.is_empty() && out.last().is_some_and(|l| l.is_empty())) {
                out.push(line);
            }
        }
        out.join("\n").trim().to_string()
    }

    /// A part of the text, CRLF read as LF.
    fn slice(&self, range: Range<usize>) -> String {
        self.text.get(range).unwrap_or("").replace("\r\n", "\n")
    }
}

/// A label that introduces acceptance criteria, with the criterion written on it (maybe empty).
enum Label {
    /// `### Acceptance Criteria`: its range.
    Heading(Range<usize>, String),
    /// `**Acceptance Criteria:**` as a line of a paragraph: its range.
    Line(Range<usize>, String),
    /// `- Acceptance Criteria:` as a list item: its index.
    Item(usize, String),
}

/// Criteria picked from a section so far.
#[derive(Default)]
struct Picked {
    criteria: Vec<String>,
    /// Item indices already taken.
    items: std::collections::HashSet<usize>,
    /// Byte ranges that are not the task's body.
    consumed: Vec<Range<usize>>,
}

/// Task numbers seen so far, for the duplicate check.
#[derive(Default)]
struct Numbers {
    first_line: HashMap<u32, usize>,
}

impl Numbers {
    /// The task's number and title, or the error naming what is wrong with them.
    fn check(
        &mut self,
        path: &Path,
        line: usize,
        digits: &str,
        title: &str,
    ) -> Result<(u32, String), TableError> {
        let number: u32 = digits.parse().map_err(|_| TableError::BadTaskNumber {
            path: path.to_path_buf(),
            line,
            text: digits.to_string(),
        })?;
        if title.is_empty() {
            return Err(TableError::EmptyTaskTitle {
                path: path.to_path_buf(),
                line,
                number,
            });
        }
        if let Some(&first) = self.first_line.get(&number) {
            return Err(TableError::DuplicateTask {
                path: path.to_path_buf(),
                line,
                number,
                first,
            });
        }
        self.first_line.insert(number, line);
        Ok((number, title.to_string()))
    }
}

/// `Task N: Title` (levels 2–4) → (digits, rest).
fn named_task(level: usize, text: &str) -> Option<(&str, &str)> {
    if !(2..=4).contains(&level) {
        return None;
    }
    let t = text.trim().trim_matches('*').trim();
    let rest = strip_prefix_ci(t, "task")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (num, tail) = rest.split_at(digits);
    let tail = tail.trim_start();
    let tail = tail
        .strip_prefix([':', '.', '-', ')', '—', '–'])
        .unwrap_or(tail);
    Some((num, tail))
}

/// `N. Title` (level 3) → (digits, rest).
fn numbered_task(level: usize, text: &str) -> Option<(&str, &str)> {
    if level != 3 {
        return None;
    }
    let t = text.trim().trim_matches('*').trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (num, tail) = t.split_at(digits);
    let tail = tail.strip_prefix(['.', ')'])?;
    if !tail.is_empty() && !tail.starts_with([' ', '\t']) {
        return None;
    }
    Some((num, tail))
}

/// A title as the PRD keeps it: edge `*` removed, whitespace collapsed.
pub(super) fn clean_title(text: &str) -> String {
    one_line(text.trim().trim_matches('*'))
}

fn is_goal_heading(level: usize, text: &str) -> Option<&str> {
    if !(2..=3).contains(&level) {
        return None;
    }
    let t = clean(text);
    let rest = strip_prefix_ci(t, "goals").or_else(|| strip_prefix_ci(t, "goal"))?;
    let rest = rest.trim_start_matches(['*', '`']);
    if rest.trim().is_empty() {
        Some("")
    } else {
        rest.strip_prefix(':')
            .map(|r| r.trim_matches(['*', ' ', '\t']))
    }
}

fn is_promise_heading(level: usize, text: &str) -> Option<&str> {
    if !(2..=4).contains(&level) {
        return None;
    }
    let rest = strip_prefix_ci(clean(text), "completion promise")?;
    let rest = rest.trim_start_matches(['*', '`']);
    if rest.trim().is_empty() {
        Some("")
    } else {
        rest.strip_prefix(':').map(str::trim)
    }
}

fn is_criteria_heading(text: &str) -> bool {
    text.to_ascii_lowercase().contains("acceptance criteria")
}

/// An "Acceptance Criteria" label line (`**Acceptance Criteria:**`, `Acceptance criteria: a`,
/// `Acceptance: a`): the criterion written on it, maybe empty.
fn criteria_label(line: &markdown::TextLine) -> Option<String> {
    if let Some(f) = line
        .field("acceptance criteria")
        .or_else(|| line.field("acceptance"))
    {
        return Some(f.markup);
    }
    line.text
        .eq_ignore_ascii_case("acceptance criteria")
        .then(String::new)
}

/// The promise keyword in a line's source: a `<promise>` tag, else the first code span, else the
/// first bold span, else (for a sentence) its first ALL-CAPS word, else the whole line.
fn promise_keyword(markup: &str) -> Option<String> {
    let t = markup.trim();
    if let Some(start) = t.find("<promise>") {
        let inner = &t[start + "<promise>".len()..];
        let inner = inner.split("</promise>").next().unwrap_or("");
        let k = one_line(inner);
        return (!k.is_empty()).then_some(k);
    }
    let md = markdown::parse(t);
    let (text, spans) = match (md.lines.first(), md.headings.first()) {
        (Some(l), _) => (l.text.clone(), l.spans.clone()),
        (None, Some(h)) => (h.text.clone(), h.spans.clone()),
        (None, None) => (t.to_string(), markdown::Spans::default()),
    };
    let span = spans
        .code
        .iter()
        .chain(&spans.strong)
        .map(|s| one_line(s))
        .find(|s| !s.is_empty());
    if span.is_some() {
        return span;
    }
    let t = one_line(text.trim_matches(['"', '\'', '*', '_']));
    if t.contains(' ') {
        let caps = t
            .split(' ')
            .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
            .find(|w| {
                w.chars().count() >= 2
                    && w.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && w.chars().any(|c| c.is_ascii_uppercase())
            });
        if let Some(w) = caps {
            return Some(w.to_string());
        }
    }
    (!t.is_empty()).then_some(t)
}

#[cfg(test)]
mod tests {
    use crate::task::table::DEFAULT_PROMISE;
    use crate::task::table::fixtures::*;

    #[test]
    fn parses_prd_with_task_headings() {
        let prd = read_prd(PRD).unwrap();
        assert_eq!(prd.title, "Add OAuth");
        assert_eq!(prd.goal, "Users sign in with GitHub.");
        assert_eq!(prd.promise, "SHIPPED");
        let nums: Vec<u32> = prd.tasks.iter().map(|t| t.number).collect();
        assert_eq!(nums, [1, 2, 3]);
        let t1 = &prd.tasks[0];
        assert_eq!(
            (t1.title.as_str(), t1.line, t1.body.as_str()),
            ("OAuth flow", 9, "Add the endpoints.")
        );
        assert_eq!(
            t1.criteria,
            [
                "redirect works",
                "callback creates a session; including on retry"
            ]
        );
        assert_eq!(prd.tasks[1].criteria, ["sessions persist"]);
        assert_eq!(prd.tasks[2].criteria, ["README explains setup"]);
        assert_eq!(prd.tasks[2].body, "Some docs.");
    }

    #[test]
    fn parses_other_heading_styles_and_crlf() {
        let numbered = "# T\r\n\r\n## Goal\r\nShip it.\r\n\r\n### 1. First\r\nAcceptance criteria:\r\n- a\r\n- b\r\n\r\n### 2) Second\r\n### Acceptance Criteria\r\n- c\r\n\r\n## Completion Promise\r\n<promise>FIN</promise>\r\n";
        let prd = read_prd(numbered).unwrap();
        assert_eq!(prd.goal, "Ship it.");
        assert_eq!(prd.tasks.len(), 2);
        assert_eq!(prd.tasks[0].criteria, ["a", "b"]);
        assert_eq!(prd.tasks[1].title, "Second");
        assert_eq!(prd.tasks[1].criteria, ["c"]);
        assert_eq!(prd.promise, "FIN");

        let level2 = "# T\n## Goal: one line\n## Task 7 — Seven\n- **Acceptance Criteria:**\n  - x\n```\n## Task 8: in code\n```\n";
        let prd = read_prd(level2).unwrap();
        assert_eq!(prd.goal, "one line");
        assert_eq!(prd.promise, DEFAULT_PROMISE);
        assert_eq!(prd.tasks.len(), 1);
        assert_eq!(
            (prd.tasks[0].number, prd.tasks[0].title.as_str()),
            (7, "Seven")
        );
        assert_eq!(prd.tasks[0].criteria, ["x"]);
    }

    #[test]
    fn prd_errors_name_file_and_line() {
        assert_eq!(
            err(read_prd("# T\n### Task 1: a\n- [ ] x\n")),
            "PRD.md: no `## Goal` section"
        );
        assert_eq!(
            err(read_prd("# T\n## Goal\n\n## Tasks\n")),
            "PRD.md:2: the goal is empty"
        );
        assert!(err(read_prd("# T\n## Goal\ng\n## Tasks\n")).starts_with("PRD.md: no tasks"));
        let dup = "## Goal\ng\n### Task 1: a\n- [ ] x\n### Task 1: b\n- [ ] y\n";
        assert_eq!(
            err(read_prd(dup)),
            "PRD.md:5: task 1 appears twice (first at line 3)"
        );
        let nocrit = "## Goal\ng\n### Task 1: a\njust text\n";
        assert_eq!(
            err(read_prd(nocrit)),
            "PRD.md:3: task 1 has no acceptance criteria"
        );
        assert_eq!(
            err(read_prd("## Goal\ng\n### Task 2:\n- [ ] x\n")),
            "PRD.md:3: task 2 has no title"
        );
        let big = "## Goal\ng\n### Task 99999999999: a\n- [ ] x\n";
        assert_eq!(
            err(read_prd(big)),
            "PRD.md:3: task number `99999999999` is out of range"
        );
    }
}
