//! Reading `PRD.md` (and a plan under `docs/plans/`, read the same way) with the Markdown
//! reader: the title, the goal, the tasks with their acceptance criteria, the completion promise.

use std::ops::Range;
use std::path::Path;

mod tasks;

use super::{DEFAULT_PROMISE, Prd, TableError, clean, one_line, strip_prefix_ci};
use crate::markdown::{self, Markdown};

/// Parse `PRD.md` (or a plan). `path` is only used in error messages. The file is Markdown
/// written by people and agents, so the forms are lenient (SPEC §3.2):
///
/// - Goal: a `## Goal` (or `### Goal`, `## Goals`, `## Goal: text`) heading and its section, or
///   a `Goal: text` / `**Goal:** text` line (an empty value takes the next lines).
/// - Tasks, tried in this order:
///   1. a numbered list (`1. Title`, the compound-engineering seed's form) under a `Tasks`
///      heading or a `Tasks:` / `**Tasks:**` line, up to the next heading; each item's criteria
///      are its `Acceptance: …` / `Acceptance Criteria: …` lines and sub-items (with their
///      nested items), else its nested task items (`- [ ] …`), else all its nested items;
///   2. headings `### Task N: Title` or `## Task N: Title` (levels 2–4, any of `:` `.` `-` `)`
///      `—` after the number), or, when there are none, `### N. Title`, anywhere. A task runs to
///      the next heading of its level or higher, the next task, or the Goal / Completion Promise
///      heading. Its criteria are the list items after each "Acceptance Criteria" heading, line or
///      item inside it (nested items join their parent with `; `), plus what is written on the
///      label itself; without any label, its `- [ ]` items.
/// - Completion promise: a `## Completion Promise` heading (its inline text, else the first line
///   under it) or a `Completion Promise: …` / `**Completion Promise:** …` line; the keyword is a
///   `<promise>` tag, a code span, a bold span, a sentence's ALL-CAPS word, or the whole value.
///   [`DEFAULT_PROMISE`] when there is none.
///
/// Frontmatter is skipped; headings and lines in block quotes do not count.
pub(crate) fn parse_prd(path: &Path, text: &str) -> Result<Prd, TableError> {
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

    /// The goal: a `Goal` heading's inline text and section, else a `Goal:` line.
    fn goal(&self) -> Result<String, TableError> {
        let Some(n) = self.heads.iter().position(|h| h.kind == Kind::Goal) else {
            return match self.field_line(&["goal", "goals"]) {
                Some((line, value)) if value.is_empty() => Err(TableError::EmptyGoal {
                    path: self.path.to_path_buf(),
                    line,
                }),
                Some((_, value)) => Ok(value),
                None => Err(TableError::MissingGoal {
                    path: self.path.to_path_buf(),
                }),
            };
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

    /// The first line (outside block quotes) that is a `Name: value` field for one of `names`:
    /// its line and value. An empty value is taken from the rest of its paragraph, else from the
    /// next paragraph when no heading comes first.
    fn field_line(&self, names: &[&str]) -> Option<(usize, String)> {
        let lines = &self.md.lines;
        let (li, field) = lines.iter().enumerate().find_map(|(i, l)| {
            if l.quoted {
                return None;
            }
            names.iter().find_map(|n| l.field(n)).map(|f| (i, f))
        })?;
        let line = &lines[li];
        if !field.markup.is_empty() {
            return Some((line.line, field.markup));
        }
        let next_heading = self
            .heads
            .iter()
            .map(|h| self.heading(h).range.start)
            .find(|&start| start > line.range.start)
            .unwrap_or(self.text.len());
        let rest = lines.get(li + 1..).unwrap_or(&[]);
        let paragraph = rest
            .first()
            .filter(|l| l.range.start < next_heading && l.item == line.item)
            .map(|l| l.paragraph);
        let value: Vec<&str> = rest
            .iter()
            .take_while(|l| Some(l.paragraph) == paragraph)
            .map(|l| l.markup.trim())
            .collect();
        Some((line.line, value.join("\n").trim().to_string()))
    }

    /// The completion promise: a `Completion Promise` heading's inline text, else the first line
    /// of its section; else a `Completion Promise:` line; [`DEFAULT_PROMISE`] without one.
    fn promise(&self) -> String {
        let from_heading = || {
            let n = self.heads.iter().position(|h| h.kind == Kind::Promise)?;
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
        };
        let from_line = || {
            let (_, value) = self.field_line(&["completion promise"])?;
            promise_keyword(value.lines().next().unwrap_or(""))
        };
        from_heading()
            .or_else(from_line)
            .unwrap_or_else(|| DEFAULT_PROMISE.to_string())
    }

    /// A part of the text, CRLF read as LF.
    fn slice(&self, range: Range<usize>) -> String {
        self.text.get(range).unwrap_or("").replace("\r\n", "\n")
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

    #[test]
    fn goal_and_promise_lines() {
        let tasks = "## Tasks\n1. a\n   - [ ] b\n";
        let cases: Vec<(String, &str, &str)> = vec![
            (
                format!("**Goal:**\nUsers log in.\n{tasks}"),
                "Users log in.",
                DEFAULT_PROMISE,
            ),
            (
                format!("**Goal:**\n\nUsers log in.\n\n{tasks}"),
                "Users log in.",
                DEFAULT_PROMISE,
            ),
            (
                format!("- **Goals:** many\n\n{tasks}\nCompletion Promise: `SHIPPED`\n"),
                "many",
                "SHIPPED",
            ),
            (
                format!("Goal: `g` ok\n{tasks}\n**Completion Promise:** <promise>FIN</promise>\n"),
                "`g` ok",
                "FIN",
            ),
            (
                format!(
                    "## Goal\nfrom heading\nGoal: from line\n{tasks}\n## Completion Promise\nSay **WON** then stop\n\nCompletion Promise: LOST\n"
                ),
                "from heading\nGoal: from line",
                "WON",
            ),
            (
                format!("Goal: g\n{tasks}\n**Completion Promise:**\nOutput SHIP_IT when done.\n"),
                "g",
                "SHIP_IT",
            ),
        ];
        for (text, goal, promise) in cases {
            let prd = read_prd(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (prd.goal.as_str(), prd.promise.as_str()),
                (goal, promise),
                "{text}"
            );
        }
    }
}
