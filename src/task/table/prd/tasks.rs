//! The PRD's tasks in their accepted forms: the seed's numbered list under `Tasks` (tried
//! first) and task headings, each with its acceptance criteria and body.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;

use super::{Doc, Kind, clean_title, named_task};
use crate::markdown;
use crate::task::table::{PrdTask, TableError, one_line};

impl Doc<'_> {
    /// The tasks: the numbered list of the Tasks section when it reads as tasks (the seed's
    /// form, tried first), else the task headings.
    pub(super) fn tasks(&self) -> Result<Vec<PrdTask>, TableError> {
        let section = self.tasks_section();
        let listed = section
            .as_ref()
            .map(|(_, range)| self.numbered_items(range.clone()))
            .filter(|items| !items.is_empty());
        let from_list = listed.map(|items| self.list_tasks(&items));
        if let Some(Ok(tasks)) = from_list {
            return Ok(tasks);
        }
        match (from_list, self.heading_tasks()) {
            (_, Ok(tasks)) if !tasks.is_empty() => Ok(tasks),
            (Some(Err(e)), _) | (None, Err(e)) => Err(e),
            _ => Err(TableError::NoTasks {
                path: self.path.to_path_buf(),
                line: section.map(|(line, _)| line),
            }),
        }
    }

    /// The Tasks section: after a `Tasks` heading or a `Tasks:` / `**Tasks:**` line, up to the
    /// next heading. Its line and byte range.
    fn tasks_section(&self) -> Option<(usize, Range<usize>)> {
        let heading = self.heads.iter().enumerate().find_map(|(n, head)| {
            let h = self.heading(head);
            is_tasks_heading(&h.text).then(|| (h.line, h.range.end..self.section_end(n, |_| true)))
        });
        let line = self.md.lines.iter().find_map(|l| {
            let label = l.text.trim_end_matches(':').trim();
            let is_label = !l.quoted
                && l.item.is_none()
                && (label.eq_ignore_ascii_case("tasks") || label.eq_ignore_ascii_case("task list"));
            is_label.then(|| {
                let end = self
                    .heads
                    .iter()
                    .map(|h| self.heading(h).range.start)
                    .find(|&s| s > l.range.start)
                    .unwrap_or(self.text.len());
                (l.line, l.range.end..end)
            })
        });
        match (heading, line) {
            (Some(h), Some(l)) => Some(if l.1.start < h.1.start { l } else { h }),
            (h, l) => h.or(l),
        }
    }

    /// The top-level numbered items in `range` (outside block quotes).
    fn numbered_items(&self, range: Range<usize>) -> Vec<usize> {
        self.md
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| {
                it.depth == 0 && !it.quoted && it.number.is_some() && range.contains(&it.at)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Tasks written as a numbered list (`1. Title`): the title is the item's first line, the
    /// criteria its `Acceptance:` lines and labelled sub-items, else its nested task items, else
    /// all its nested items.
    fn list_tasks(&self, items: &[usize]) -> Result<Vec<PrdTask>, TableError> {
        let mut numbers = Numbers::default();
        let mut tasks = Vec::with_capacity(items.len());
        for &i in items {
            let item = &self.md.items[i];
            let own = self.md.lines.get(item.lines.clone()).unwrap_or(&[]);
            let digits = item.number.unwrap_or(0).to_string();
            let first = own.first().map_or("", |l| l.text.as_str());
            let title = match named_task(2, first) {
                Some((n, tail)) if n.parse::<u64>().ok() == item.number => tail,
                _ => first,
            };
            let (number, title) =
                numbers.check(self.path, item.line, &digits, &clean_title(title))?;
            let (criteria, body) = self.item_criteria(i);
            tasks.push(self.task(number, title, item.line, criteria, body)?);
        }
        Ok(tasks)
    }

    /// A numbered task item's criteria and body (see [`Doc::list_tasks`]).
    fn item_criteria(&self, i: usize) -> (Vec<String>, String) {
        let own_first = self.md.items[i].lines.start;
        let mut labelled: Vec<String> = Vec::new();
        let mut has_label = false;
        let mut body: Vec<String> = Vec::new();
        for (li, line) in self.md.lines.iter().enumerate() {
            if line.item != Some(i) || li == own_first {
                continue;
            }
            match criteria_label(line) {
                Some(inline) => {
                    has_label = true;
                    if !inline.is_empty() {
                        labelled.push(one_line(&inline));
                    }
                }
                None => body.push(line.markup.trim().to_string()),
            }
        }
        let (mut tasks, mut plain) = (Vec::new(), Vec::new());
        let mut after_label = false;
        for c in self.children(i) {
            let child = &self.md.items[c];
            let label = self
                .md
                .lines
                .get(child.lines.start)
                .filter(|l| l.item == Some(c))
                .and_then(criteria_label);
            if let Some(inline) = label {
                has_label = true;
                if !inline.is_empty() {
                    labelled.push(one_line(&inline));
                }
                let grand = self.children(c);
                after_label = grand.is_empty();
                labelled.extend(grand.into_iter().filter_map(|g| self.criterion(g)));
                continue;
            }
            let Some(text) = self.criterion(c) else {
                continue;
            };
            if after_label {
                labelled.push(text);
            } else if child.task.is_some() {
                tasks.push(text);
            } else {
                plain.push(text);
            }
        }
        let criteria = if has_label {
            body.extend(tasks.into_iter().chain(plain).map(|t| format!("- {t}")));
            labelled
        } else if !tasks.is_empty() {
            body.extend(plain.into_iter().map(|t| format!("- {t}")));
            tasks
        } else {
            plain
        };
        (criteria, body.join("\n").trim().to_string())
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
    items: HashSet<usize>,
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

/// `Tasks`, `Tasks (in order)`, `Implementation Tasks`, `Task list`.
fn is_tasks_heading(text: &str) -> bool {
    let t = text.trim().trim_end_matches(':').trim().to_lowercase();
    let words: Vec<&str> = t.split_whitespace().collect();
    words.first() == Some(&"tasks") || words.last() == Some(&"tasks") || t == "task list"
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

#[cfg(test)]
mod tests {
    use crate::task::table::Prd;
    use crate::task::table::fixtures::*;

    /// (number, title, criteria, body) of each task.
    type Shape = Vec<(u32, String, Vec<String>, String)>;

    fn shape(prd: &Prd) -> Shape {
        prd.tasks
            .iter()
            .map(|t| {
                (
                    t.number,
                    t.title.clone(),
                    t.criteria.clone(),
                    t.body.clone(),
                )
            })
            .collect()
    }

    fn task(
        n: u32,
        title: &str,
        criteria: &[&str],
        body: &str,
    ) -> (u32, String, Vec<String>, String) {
        (
            n,
            title.to_string(),
            criteria.iter().map(|c| c.to_string()).collect(),
            body.to_string(),
        )
    }

    const SEED: &str = "# PRD: Auth module

**Goal:** Users can log in with OAuth.

## Tasks
1. Add the login route
   - Acceptance: GET /login redirects to the provider
2. Token refresh
   - [ ] a refresh before expiry keeps the session

**Completion Promise:** SHIPPED
";

    #[test]
    fn reads_the_seed_form() {
        for text in [
            SEED.to_string(),
            SEED.replace('\n', "\r\n"),
            format!("\u{feff}{SEED}"),
        ] {
            let prd = read_prd(&text).unwrap();
            assert_eq!(prd.title, "PRD: Auth module");
            assert_eq!(prd.goal, "Users can log in with OAuth.");
            assert_eq!(prd.promise, "SHIPPED");
            assert_eq!(
                shape(&prd),
                [
                    task(
                        1,
                        "Add the login route",
                        &["GET /login redirects to the provider"],
                        ""
                    ),
                    task(
                        2,
                        "Token refresh",
                        &["a refresh before expiry keeps the session"],
                        ""
                    ),
                ]
            );
            let lines: Vec<usize> = prd.tasks.iter().map(|t| t.line).collect();
            assert_eq!(lines, [6, 8]);
        }
    }

    #[test]
    fn reads_numbered_list_variants() {
        let cases: Vec<(&str, &str, Shape)> = vec![
            (
                "a bold Tasks line, nested task items and Acceptance continuation lines",
                "**Goal:** Ship.\n\n**Tasks:**\n1. First\n   - [ ] crit one\n   - [x] crit two\n2. Second\n   Acceptance: crit three\n",
                vec![
                    task(1, "First", &["crit one", "crit two"], ""),
                    task(2, "Second", &["crit three"], ""),
                ],
            ),
            (
                "Acceptance Criteria sub-bullets, nested items joined, other items are the body",
                "## Goal\ng\n## Tasks\n1. Add the login route\n   - Acceptance Criteria:\n     - GET /login redirects\n     - callback works\n       - even on retry\n   - Note: uses the router\n",
                vec![task(
                    1,
                    "Add the login route",
                    &["GET /login redirects", "callback works; even on retry"],
                    "- Note: uses the router",
                )],
            ),
            (
                "plain nested items are criteria when there is nothing else",
                "Goal: g\n\n## Tasks\n3. **Bold** title\n   - a\n   - b\n4. Task 4: Prefixed\n   1. c\n",
                vec![
                    task(3, "Bold title", &["a", "b"], ""),
                    task(4, "Prefixed", &["c"], ""),
                ],
            ),
            (
                "task items win over plain notes",
                "## Goal\ng\n## Task list\n1. T\n   - note\n   - [ ] real\n",
                vec![task(1, "T", &["real"], "- note")],
            ),
            (
                "an empty label item takes the items after it",
                "## Goal\ng\n## Tasks\n1. T\n   - Acceptance criteria:\n   - a\n   - b\n",
                vec![task(1, "T", &["a", "b"], "")],
            ),
            (
                "a loose list with a second paragraph",
                "## Goal\ng\n## Implementation Tasks\n\n1. T\n\n   Some context.\n\n   Acceptance: works\n\n2. U\n\n   - [ ] done\n",
                vec![
                    task(1, "T", &["works"], "Some context."),
                    task(2, "U", &["done"], ""),
                ],
            ),
            (
                "a list that is not tasks falls back to task headings",
                "## Goal\ng\n## Tasks\n1. overview, no criteria\n### Task 1: Real\n- [ ] x\n",
                vec![task(1, "Real", &["x"], "")],
            ),
            (
                "frontmatter of a plan is skipped",
                "---\ntitle: Plan\ngoal: not this\n---\n# Plan\n**Goal:** g\n## Tasks\n1. a\n   - [ ] b\n",
                vec![task(1, "a", &["b"], "")],
            ),
        ];
        for (name, text, want) in cases {
            let prd = read_prd(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(shape(&prd), want, "{name}");
        }
    }

    #[test]
    fn unreadable_forms_name_the_line_and_the_forms() {
        let cases: Vec<(&str, &str, Option<usize>)> = vec![
            (
                "> **Goal:** quoted\n## Tasks\n1. a\n   - [ ] b\n",
                "PRD.md: no `## Goal` section",
                None,
            ),
            (
                "**Goal:**\n\n## Tasks\n1. a\n   - [ ] b\n",
                "PRD.md:1: the goal is empty",
                Some(1),
            ),
            (
                "**Goal:** g\n\n## Tasks\n1. Only a title\n",
                "PRD.md:4: task 1 has no acceptance criteria",
                Some(4),
            ),
            (
                "**Goal:** g\n## Tasks\n1. a\n   - [ ] x\n\ntext\n\n1. b\n   - [ ] y\n",
                "PRD.md:8: task 1 appears twice (first at line 3)",
                Some(8),
            ),
            (
                "**Goal:** g\n## Tasks\n1. **\n   - [ ] x\n",
                "PRD.md:3: task 1 has no title",
                Some(3),
            ),
        ];
        for (text, message, line) in cases {
            let e = read_prd(text).expect_err(text);
            assert_eq!(
                (e.to_string().as_str(), e.line()),
                (message, line),
                "{text}"
            );
            assert!(e.hint().is_some());
        }
        let e = read_prd("**Goal:** g\n\n## Tasks\n- unordered\n").expect_err("no tasks");
        assert_eq!(e.line(), Some(3));
        assert!(
            e.to_string().starts_with(
                "PRD.md: no tasks in the Tasks section at line 3: expected a numbered list"
            ),
            "{e}"
        );
        let hint = e.hint().unwrap_or_default();
        assert!(
            hint.contains("1. Title") && hint.contains("### Task 1: Title"),
            "{hint}"
        );
        let hint = read_prd("# T\n")
            .expect_err("no goal")
            .hint()
            .unwrap_or_default();
        assert!(
            hint.contains("## Goal") && hint.contains("**Goal:**"),
            "{hint}"
        );
    }
}
