//! Task-table mode (SPEC §3.2): `PRD.md` (goal, numbered tasks with acceptance criteria, a
//! completion promise) and `PROGRESS.md` (a `## Status:` line and a `| # | Task | Status | Notes |`
//! table), the pure bookkeeping ralph does between iterations, and the prompts for this mode.
//!
//! Both files are read line by line (headings and tables are line-oriented; fenced code blocks are
//! skipped; CRLF and a UTF-8 BOM are tolerated). Every parse failure is a [`TableError`] naming the
//! file and, where known, the 1-based line. Nothing here panics, whatever the input.
//!
//! Attempts live in the Status cell: `FAILED (attempt 2/3)`, `BLOCKED (3/3 attempts)`; a plain
//! `FAILED` counts as one attempt, a plain `BLOCKED` as [`MAX_ATTEMPTS`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Attempts a task gets (1 initial + 2 retries) before it is `BLOCKED`.
pub const MAX_ATTEMPTS: u32 = 3;
/// The completion promise when `PRD.md` names none.
pub const DEFAULT_PROMISE: &str = "DONE";
/// The requirements file name.
pub const PRD_FILE: &str = "PRD.md";
/// The progress file name.
pub const PROGRESS_FILE: &str = "PROGRESS.md";

/// One task of `PRD.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrdTask {
    /// The task number from its heading.
    pub number: u32,
    /// The heading title.
    pub title: String,
    /// The task's text without its acceptance-criteria block, trimmed.
    pub body: String,
    /// The acceptance criteria, list markers and checkboxes removed.
    pub criteria: Vec<String>,
    /// 1-based line of the task heading.
    pub line: usize,
}

/// A parsed `PRD.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prd {
    /// The `# ` title (the file stem when there is none).
    pub title: String,
    /// The `## Goal` text.
    pub goal: String,
    /// The tasks, in file order.
    pub tasks: Vec<PrdTask>,
    /// The completion promise keyword ([`DEFAULT_PROMISE`] when absent).
    pub promise: String,
}

/// A row's Status cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStatus {
    /// Not attempted yet.
    Pending,
    /// Finished.
    Done,
    /// Attempted and not finished; retried while attempts are left.
    Failed,
    /// Out of attempts; the loop moves on.
    Blocked,
}

/// One row of the `PROGRESS.md` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The `#` cell.
    pub number: u32,
    /// The Task cell (unescaped).
    pub task: String,
    /// The Status cell's keyword.
    pub status: RowStatus,
    /// Failed attempts so far (0 for `PENDING`; from the Status cell otherwise).
    pub attempts: u32,
    /// The Notes cell (unescaped: `\|` is `|`, `<br>` is a newline).
    pub notes: String,
    /// 1-based line of the row.
    pub line: usize,
}

/// The `## Status:` line of `PROGRESS.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverallStatus {
    /// Tasks remain.
    InProgress,
    /// Every task is `DONE`.
    Complete,
    /// The loop ended with tasks not `DONE`.
    Partial,
}

/// A parsed `PROGRESS.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The `## Status:` value.
    pub status: OverallStatus,
    /// The table rows, in file order.
    pub rows: Vec<Row>,
    /// 1-based line of the `## Status:` line (0 when built in memory).
    pub status_line: usize,
    /// 1-based line of the table header (0 when built in memory).
    pub table_line: usize,
}

/// What one attempt at a task came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// The row is `DONE`.
    Done,
    /// The row is now `FAILED (attempt {attempt}/3)` and will be retried.
    Failed {
        /// Attempts used so far.
        attempt: u32,
    },
    /// The row is `BLOCKED` (or does not exist): nothing more to try.
    Blocked,
}

/// Why `PRD.md` or `PROGRESS.md` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// No `## Goal` heading.
    #[error("{}: no `## Goal` section", .path.display())]
    MissingGoal {
        /// The file.
        path: PathBuf,
    },
    /// The goal section is empty.
    #[error("{}:{line}: the goal is empty", .path.display())]
    EmptyGoal {
        /// The file.
        path: PathBuf,
        /// The heading line.
        line: usize,
    },
    /// No task headings.
    #[error("{}: no tasks (expected `### Task 1: title` headings)", .path.display())]
    NoTasks {
        /// The file.
        path: PathBuf,
    },
    /// A task number does not fit.
    #[error("{}:{line}: task number `{text}` is out of range", .path.display())]
    BadTaskNumber {
        /// The file.
        path: PathBuf,
        /// The heading line.
        line: usize,
        /// The digits.
        text: String,
    },
    /// A task heading has a number and no title.
    #[error("{}:{line}: task {number} has no title", .path.display())]
    EmptyTaskTitle {
        /// The file.
        path: PathBuf,
        /// The heading line.
        line: usize,
        /// The task number.
        number: u32,
    },
    /// Two tasks share a number.
    #[error("{}:{line}: task {number} appears twice (first at line {first})", .path.display())]
    DuplicateTask {
        /// The file.
        path: PathBuf,
        /// The second heading's line.
        line: usize,
        /// The task number.
        number: u32,
        /// The first heading's line.
        first: usize,
    },
    /// A task has no acceptance criteria.
    #[error("{}:{line}: task {number} has no acceptance criteria", .path.display())]
    NoCriteria {
        /// The file.
        path: PathBuf,
        /// The heading line.
        line: usize,
        /// The task number.
        number: u32,
    },
    /// No `## Status:` line.
    #[error("{}: no `## Status:` line", .path.display())]
    MissingStatus {
        /// The file.
        path: PathBuf,
    },
    /// The `## Status:` value is not one of the three.
    #[error("{}:{line}: unknown status `{value}`", .path.display())]
    UnknownOverallStatus {
        /// The file.
        path: PathBuf,
        /// The status line.
        line: usize,
        /// The value found.
        value: String,
    },
    /// No table at all.
    #[error("{}: no task table (expected a `| # | Task | Status | Notes |` header)", .path.display())]
    NoTable {
        /// The file.
        path: PathBuf,
    },
    /// A table without the required columns.
    #[error("{}:{line}: the table has no {missing} column", .path.display())]
    MissingColumns {
        /// The file.
        path: PathBuf,
        /// The header line.
        line: usize,
        /// The missing column names, quoted and joined.
        missing: String,
    },
    /// The header row is not followed by a delimiter row.
    #[error("{}:{line}: the table header is not followed by a `|---|` row", .path.display())]
    MissingDelimiter {
        /// The file.
        path: PathBuf,
        /// The header line.
        line: usize,
    },
    /// A table with a header and no rows.
    #[error("{}:{line}: the task table has no rows", .path.display())]
    NoRows {
        /// The file.
        path: PathBuf,
        /// The header line.
        line: usize,
    },
    /// A row whose `#` cell is not a number.
    #[error("{}:{line}: row number `{value}` is not a number", .path.display())]
    BadRowNumber {
        /// The file.
        path: PathBuf,
        /// The row line.
        line: usize,
        /// The cell text.
        value: String,
    },
    /// A row whose Status cell is not a known status.
    #[error("{}:{line}: row {number} has unknown status `{value}`", .path.display())]
    UnknownStatus {
        /// The file.
        path: PathBuf,
        /// The row line.
        line: usize,
        /// The row number.
        number: u32,
        /// The cell text.
        value: String,
    },
    /// A row too short to have a Status cell.
    #[error("{}:{line}: row {number} has no status cell", .path.display())]
    MissingCell {
        /// The file.
        path: PathBuf,
        /// The row line.
        line: usize,
        /// The row number.
        number: u32,
    },
    /// Two rows share a number.
    #[error("{}:{line}: row {number} appears twice (first at line {first})", .path.display())]
    DuplicateRow {
        /// The file.
        path: PathBuf,
        /// The second row's line.
        line: usize,
        /// The row number.
        number: u32,
        /// The first row's line.
        first: usize,
    },
    /// A PRD task without a progress row.
    #[error(
        "{}:{line}: task {number} ({}:{prd_line}) has no row in the table",
        .path.display(), .prd_path.display()
    )]
    MissingRow {
        /// The progress file.
        path: PathBuf,
        /// The table header line.
        line: usize,
        /// The task number.
        number: u32,
        /// The PRD file.
        prd_path: PathBuf,
        /// The task heading line.
        prd_line: usize,
    },
    /// A progress row without a PRD task.
    #[error("{}:{line}: row {number} matches no task in {}", .path.display(), .prd_path.display())]
    UnknownRow {
        /// The progress file.
        path: PathBuf,
        /// The row line.
        line: usize,
        /// The row number.
        number: u32,
        /// The PRD file.
        prd_path: PathBuf,
    },
}

impl TableError {
    /// A suggestion for fixing the problem, when there is an obvious one.
    pub fn hint(&self) -> Option<String> {
        let hint = match self {
            TableError::MissingGoal { .. } => {
                "add a `## Goal` section with a one-sentence summary of success"
            }
            TableError::EmptyGoal { .. } => "write a one-sentence goal under `## Goal`",
            TableError::NoTasks { .. } => {
                "add tasks as `### Task 1: title` headings, each with an acceptance-criteria list"
            }
            TableError::BadTaskNumber { .. } => "number the tasks 1, 2, 3, …",
            TableError::EmptyTaskTitle { .. } => {
                "write the title after the number: `### Task 1: title`"
            }
            TableError::DuplicateTask { .. } => "give every task its own number",
            TableError::NoCriteria { .. } => {
                "add `**Acceptance Criteria:**` followed by `- [ ] criterion` items under the task"
            }
            TableError::MissingStatus { .. } => {
                "add a `## Status: IN_PROGRESS` line above the table"
            }
            TableError::UnknownOverallStatus { .. } => "use IN_PROGRESS, COMPLETE or PARTIAL",
            TableError::NoTable { .. } | TableError::MissingColumns { .. } => {
                "the table header must be `| # | Task | Status | Notes |`"
            }
            TableError::MissingDelimiter { .. } => {
                "put `|---|------|--------|-------|` on the line after the header"
            }
            TableError::NoRows { .. } => "add one `| N | title | PENDING | |` row per PRD task",
            TableError::BadRowNumber { .. } => "the `#` cell holds the task number from the PRD",
            TableError::UnknownStatus { .. } | TableError::MissingCell { .. } => {
                "use PENDING, DONE, FAILED or BLOCKED in the Status cell"
            }
            TableError::DuplicateRow { .. } => "keep one row per task",
            TableError::MissingRow { .. } | TableError::UnknownRow { .. } => {
                "the table needs exactly one row per PRD task, with the same numbers"
            }
        };
        Some(hint.to_string())
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            TableError::MissingGoal { path }
            | TableError::EmptyGoal { path, .. }
            | TableError::NoTasks { path }
            | TableError::BadTaskNumber { path, .. }
            | TableError::EmptyTaskTitle { path, .. }
            | TableError::DuplicateTask { path, .. }
            | TableError::NoCriteria { path, .. }
            | TableError::MissingStatus { path }
            | TableError::UnknownOverallStatus { path, .. }
            | TableError::NoTable { path }
            | TableError::MissingColumns { path, .. }
            | TableError::MissingDelimiter { path, .. }
            | TableError::NoRows { path, .. }
            | TableError::BadRowNumber { path, .. }
            | TableError::UnknownStatus { path, .. }
            | TableError::MissingCell { path, .. }
            | TableError::DuplicateRow { path, .. }
            | TableError::MissingRow { path, .. }
            | TableError::UnknownRow { path, .. } => path,
        }
    }

    /// The 1-based line the error refers to, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            TableError::MissingGoal { .. }
            | TableError::NoTasks { .. }
            | TableError::MissingStatus { .. }
            | TableError::NoTable { .. } => None,
            TableError::EmptyGoal { line, .. }
            | TableError::BadTaskNumber { line, .. }
            | TableError::EmptyTaskTitle { line, .. }
            | TableError::DuplicateTask { line, .. }
            | TableError::NoCriteria { line, .. }
            | TableError::UnknownOverallStatus { line, .. }
            | TableError::MissingColumns { line, .. }
            | TableError::MissingDelimiter { line, .. }
            | TableError::NoRows { line, .. }
            | TableError::BadRowNumber { line, .. }
            | TableError::UnknownStatus { line, .. }
            | TableError::MissingCell { line, .. }
            | TableError::DuplicateRow { line, .. }
            | TableError::MissingRow { line, .. }
            | TableError::UnknownRow { line, .. } => Some(*line),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Line-level Markdown helpers
// ---------------------------------------------------------------------------------------------

/// One physical line: its text without the line ending, and the ending (`\r\n`, `\n` or none).
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    text: &'a str,
    eol: &'a str,
}

fn split_bom(text: &str) -> (&str, &str) {
    match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    }
}

fn lines(text: &str) -> Vec<Line<'_>> {
    text.split_inclusive('\n')
        .map(|raw| {
            if let Some(body) = raw.strip_suffix("\r\n") {
                Line {
                    text: body,
                    eol: "\r\n",
                }
            } else if let Some(body) = raw.strip_suffix('\n') {
                Line {
                    text: body,
                    eol: "\n",
                }
            } else {
                Line { text: raw, eol: "" }
            }
        })
        .collect()
}

/// Leading indentation width (a tab counts 4).
fn indent_of(line: &str) -> usize {
    let mut width = 0;
    for c in line.chars() {
        match c {
            ' ' => width += 1,
            '\t' => width += 4,
            _ => break,
        }
    }
    width
}

/// Tracks fenced code blocks (```` ``` ```` / `~~~`).
#[derive(Default)]
struct Fence {
    open: Option<(u8, usize)>,
}

impl Fence {
    /// Feed one line; true when the line is a fence line or inside a fenced block.
    fn step(&mut self, line: &str) -> bool {
        let spaces = line.len() - line.trim_start_matches(' ').len();
        if spaces > 3 {
            return self.open.is_some();
        }
        let t = line.trim_start_matches(' ');
        let first = t.bytes().next();
        if let Some((c, n)) = self.open {
            let run = t.bytes().take_while(|b| *b == c).count();
            if run >= n && t.get(run..).is_some_and(|r| r.trim().is_empty()) {
                self.open = None;
            }
            return true;
        }
        if let Some(c @ (b'`' | b'~')) = first {
            let run = t.bytes().take_while(|b| *b == c).count();
            let info = t.get(run..).unwrap_or("");
            if run >= 3 && !(c == b'`' && info.contains('`')) {
                self.open = Some((c, run));
                return true;
            }
        }
        false
    }
}

/// An ATX heading: its level and text (closing `#`s removed).
fn atx_heading(line: &str) -> Option<(usize, &str)> {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    if spaces > 3 {
        return None;
    }
    let rest = line.trim_start_matches(' ');
    let level = rest.bytes().take_while(|b| *b == b'#').count();
    if level == 0 || level > 6 {
        return None;
    }
    let after = rest.get(level..)?;
    if !after.is_empty() && !after.starts_with([' ', '\t']) {
        return None;
    }
    Some((level, strip_closing_hashes(after.trim())))
}

/// Remove an ATX closing sequence (`## Title ##` → `Title`).
fn strip_closing_hashes(text: &str) -> &str {
    let stripped = text.trim_end_matches('#');
    if stripped.len() < text.len() && (stripped.is_empty() || stripped.ends_with([' ', '\t'])) {
        stripped.trim_end()
    } else {
        text
    }
}

/// A list item: (indent, content after the marker and any checkbox, had a checkbox).
fn list_item(line: &str) -> Option<(usize, &str, bool)> {
    let indent = indent_of(line);
    let t = line.trim_start();
    let after = if let Some(r) = t.strip_prefix(['-', '*', '+']) {
        r
    } else {
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        t.get(digits..)?.strip_prefix(['.', ')'])?
    };
    if !after.is_empty() && !after.starts_with([' ', '\t']) {
        return None;
    }
    let content = after.trim();
    for box_ in ["[ ]", "[x]", "[X]"] {
        if let Some(r) = content.strip_prefix(box_)
            && (r.is_empty() || r.starts_with([' ', '\t']))
        {
            return Some((indent, r.trim(), true));
        }
    }
    Some((indent, content, false))
}

/// Case-insensitive ASCII prefix strip.
fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| text.get(prefix.len()..))
        .flatten()
}

/// Trim whitespace and emphasis/code markers around a heading or cell text.
fn clean(text: &str) -> &str {
    text.trim().trim_matches(['*', '`']).trim()
}

/// Collapse runs of whitespace (including newlines) into single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// PRD.md
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadKind {
    Goal,
    Promise,
    /// A task heading: index into the parsed task list.
    Task(usize),
    /// An "Acceptance Criteria" heading: part of the task above it.
    Criteria,
    Other,
}

struct Head<'a> {
    idx: usize,
    level: usize,
    text: &'a str,
    kind: HeadKind,
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

fn clean_title(text: &str) -> String {
    one_line(strip_closing_hashes(text.trim()).trim().trim_matches('*'))
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

/// The promise keyword on a line: a `<promise>` tag, else the first code span, else the first
/// bold span, else (for a sentence) its first ALL-CAPS word, else the whole line.
fn promise_keyword(line: &str) -> Option<String> {
    let t = line.trim();
    let t = list_item(t).map_or(t, |(_, c, _)| c);
    if let Some(start) = t.find("<promise>") {
        let inner = &t[start + "<promise>".len()..];
        let inner = inner.split("</promise>").next().unwrap_or("");
        let k = one_line(inner);
        return (!k.is_empty()).then_some(k);
    }
    for delim in ["`", "**"] {
        let mut parts = t.split(delim);
        if let (Some(_), Some(inner), Some(_)) = (parts.next(), parts.next(), parts.next()) {
            let k = one_line(inner.trim_matches('`'));
            if !k.is_empty() {
                return Some(k);
            }
        }
    }
    let t = one_line(t.trim_matches(['"', '\'', '*', '_']));
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

fn is_criteria_label(text: &str) -> Option<&str> {
    let t = text.trim().trim_start_matches(['*', '_']);
    let rest = strip_prefix_ci(t, "acceptance criteria")?;
    Some(
        rest.trim_start_matches([':', '*', '_', ' ', '\t'])
            .trim_end_matches(['*', '_', ' ']),
    )
}

/// Split a task's section into criteria and the remaining body text.
fn task_criteria(section: &[(&str, bool)]) -> (Vec<String>, String) {
    struct Block {
        label_indent: Option<usize>,
        base: Option<usize>,
    }
    let mut criteria: Vec<String> = Vec::new();
    let mut consumed = vec![false; section.len()];
    let mut block: Option<Block> = None;
    let mut in_block_items = 0usize;
    let mut labelled = false;
    for (j, &(line, code)) in section.iter().enumerate() {
        if code {
            block = None;
            continue;
        }
        if let Some((_, text)) = atx_heading(line) {
            block = None;
            if let Some(inline) = text
                .to_ascii_lowercase()
                .contains("acceptance criteria")
                .then(|| is_criteria_label(text).unwrap_or(""))
            {
                labelled = true;
                consumed[j] = true;
                if !inline.is_empty() {
                    criteria.push(one_line(inline));
                }
                block = Some(Block {
                    label_indent: None,
                    base: None,
                });
                in_block_items = 0;
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let item = list_item(line);
        if let Some(b) = block.as_mut() {
            match item {
                Some((ind, content, _)) if b.label_indent.is_none_or(|li| ind > li) => {
                    let base = *b.base.get_or_insert(ind);
                    consumed[j] = true;
                    if ind > base && in_block_items > 0 {
                        if let Some(last) = criteria.last_mut()
                            && !content.is_empty()
                        {
                            last.push_str("; ");
                            last.push_str(&one_line(content));
                        }
                    } else if !content.is_empty() {
                        criteria.push(one_line(content));
                        in_block_items += 1;
                    }
                    continue;
                }
                Some(_) => block = None,
                None => {
                    if indent_of(line) > 0 && in_block_items > 0 {
                        if let Some(last) = criteria.last_mut() {
                            last.push(' ');
                            last.push_str(&one_line(line));
                        }
                        consumed[j] = true;
                        continue;
                    }
                    block = None;
                }
            }
        }
        let label_text = item.map_or(line, |(_, c, _)| c);
        if let Some(inline) = is_criteria_label(label_text) {
            labelled = true;
            consumed[j] = true;
            if !inline.is_empty() {
                criteria.push(one_line(inline));
            }
            block = Some(Block {
                label_indent: item.map(|(i, _, _)| i),
                base: None,
            });
            in_block_items = 0;
        }
    }
    if !labelled {
        // No label anywhere in the task: its checkbox items are the criteria.
        for (j, &(line, code)) in section.iter().enumerate() {
            if code {
                continue;
            }
            if let Some((_, content, true)) = list_item(line) {
                consumed[j] = true;
                if !content.is_empty() {
                    criteria.push(one_line(content));
                }
            }
        }
    }
    let kept: Vec<&str> = section
        .iter()
        .zip(&consumed)
        .filter(|(_, c)| !**c)
        .map(|((l, _), _)| *l)
        .collect();
    (criteria, kept.join("\n").trim().to_string())
}

/// Parse `PRD.md`. `path` is only used in error messages.
///
/// Tasks are `### Task N: Title` or `## Task N: Title` headings (any of `:` `.` `-` `)` `—` after
/// the number); when there are none, `### N. Title` headings. A task runs to the next heading of
/// its level or higher, the next task, or the Goal / Completion Promise heading. Its criteria are
/// the list items under an "Acceptance Criteria" line or heading inside it (nested items join
/// their parent); without such a label, its `- [ ]` items.
pub fn parse_prd(path: &Path, text: &str) -> Result<Prd, TableError> {
    let (_, text) = split_bom(text);
    let all = lines(text);
    let mut fence = Fence::default();
    let mut code = Vec::with_capacity(all.len());
    let mut heads: Vec<Head<'_>> = Vec::new();
    for (idx, line) in all.iter().enumerate() {
        let in_code = fence.step(line.text);
        code.push(in_code);
        if in_code {
            continue;
        }
        if let Some((level, text)) = atx_heading(line.text) {
            heads.push(Head {
                idx,
                level,
                text,
                kind: HeadKind::Other,
            });
        }
    }
    let err_path = || path.to_path_buf();

    // Classify headings; tasks use the `Task N` style if any heading does.
    let use_named = heads.iter().any(|h| named_task(h.level, h.text).is_some());
    let mut tasks: Vec<PrdTask> = Vec::new();
    let mut first_line: HashMap<u32, usize> = HashMap::new();
    for head in &mut heads {
        if is_goal_heading(head.level, head.text).is_some() {
            head.kind = HeadKind::Goal;
            continue;
        }
        if is_promise_heading(head.level, head.text).is_some() {
            head.kind = HeadKind::Promise;
            continue;
        }
        let found = if use_named {
            named_task(head.level, head.text)
        } else {
            numbered_task(head.level, head.text)
        };
        let Some((digits, title)) = found else {
            if head
                .text
                .to_ascii_lowercase()
                .contains("acceptance criteria")
            {
                head.kind = HeadKind::Criteria;
            }
            continue;
        };
        let line = head.idx + 1;
        let number: u32 = digits.parse().map_err(|_| TableError::BadTaskNumber {
            path: err_path(),
            line,
            text: digits.to_string(),
        })?;
        let title = clean_title(title);
        if title.is_empty() {
            return Err(TableError::EmptyTaskTitle {
                path: err_path(),
                line,
                number,
            });
        }
        if let Some(&first) = first_line.get(&number) {
            return Err(TableError::DuplicateTask {
                path: err_path(),
                line,
                number,
                first,
            });
        }
        first_line.insert(number, line);
        head.kind = HeadKind::Task(tasks.len());
        tasks.push(PrdTask {
            number,
            title,
            body: String::new(),
            criteria: Vec::new(),
            line,
        });
    }

    // The text of a section: from after heading `h` to the next heading that ends it.
    let section_end = |h: usize, ends: &dyn Fn(&Head<'_>) -> bool| -> usize {
        heads
            .get(h + 1..)
            .unwrap_or(&[])
            .iter()
            .find(|n| ends(n))
            .map_or(all.len(), |n| n.idx)
    };

    let title = heads
        .iter()
        .find(|h| h.level == 1)
        .map(|h| clean_title(h.text))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });

    let goal_pos = heads.iter().position(|h| h.kind == HeadKind::Goal);
    let Some(gp) = goal_pos else {
        return Err(TableError::MissingGoal { path: err_path() });
    };
    let goal_head = &heads[gp];
    let inline = is_goal_heading(goal_head.level, goal_head.text).unwrap_or("");
    let end = section_end(gp, &|_| true);
    let mut goal_lines = vec![inline];
    goal_lines.extend(
        all.get(goal_head.idx + 1..end)
            .unwrap_or(&[])
            .iter()
            .map(|l| l.text),
    );
    let goal = goal_lines.join("\n").trim().to_string();
    if goal.is_empty() {
        return Err(TableError::EmptyGoal {
            path: err_path(),
            line: goal_head.idx + 1,
        });
    }

    let mut promise = None;
    if let Some(pp) = heads.iter().position(|h| h.kind == HeadKind::Promise) {
        let head = &heads[pp];
        let inline = is_promise_heading(head.level, head.text).unwrap_or("");
        let end = section_end(pp, &|_| true);
        promise = std::iter::once(inline)
            .chain(
                all.get(head.idx + 1..end)
                    .unwrap_or(&[])
                    .iter()
                    .map(|l| l.text),
            )
            .find(|l| !l.trim().is_empty())
            .and_then(promise_keyword);
    }
    let promise = promise.unwrap_or_else(|| DEFAULT_PROMISE.to_string());

    if tasks.is_empty() {
        return Err(TableError::NoTasks { path: err_path() });
    }
    for (h, head) in heads.iter().enumerate() {
        let HeadKind::Task(t) = head.kind else {
            continue;
        };
        let level = head.level;
        let end = section_end(h, &|n| {
            n.kind != HeadKind::Criteria && (n.level <= level || n.kind != HeadKind::Other)
        });
        let section: Vec<(&str, bool)> = (head.idx + 1..end)
            .filter_map(|i| Some((all.get(i)?.text, *code.get(i)?)))
            .collect();
        let (criteria, body) = task_criteria(&section);
        let Some(task) = tasks.get_mut(t) else {
            continue;
        };
        if criteria.is_empty() {
            return Err(TableError::NoCriteria {
                path: err_path(),
                line: task.line,
                number: task.number,
            });
        }
        task.criteria = criteria;
        task.body = body;
    }
    Ok(Prd {
        title,
        goal,
        tasks,
        promise,
    })
}

// ---------------------------------------------------------------------------------------------
// PROGRESS.md
// ---------------------------------------------------------------------------------------------

/// Byte spans of a table line's cells (outer pipes excluded; `\|` does not split).
fn cell_spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let pipes: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|&(i, b)| *b == b'|' && (i == 0 || bytes.get(i - 1) != Some(&b'\\')))
        .map(|(i, _)| i)
        .collect();
    let mut spans = Vec::with_capacity(pipes.len() + 1);
    let mut start = 0;
    for &p in &pipes {
        spans.push((start, p));
        start = p + 1;
    }
    spans.push((start, text.len()));
    if pipes.is_empty() {
        return spans;
    }
    let blank = |(s, e): (usize, usize)| text.get(s..e).is_none_or(|c| c.trim().is_empty());
    if spans.last().is_some_and(|&sp| blank(sp)) {
        spans.pop();
    }
    if spans.first().is_some_and(|&sp| blank(sp)) {
        spans.remove(0);
    }
    spans
}

fn cells(text: &str) -> Vec<&str> {
    cell_spans(text)
        .into_iter()
        .map(|(s, e)| text.get(s..e).unwrap_or(""))
        .collect()
}

fn is_delimiter_row(text: &str) -> bool {
    if !text.contains('|') {
        return false;
    }
    let cs = cells(text);
    !cs.is_empty()
        && cs.iter().all(|c| {
            let c = c.trim();
            let inner = c.strip_prefix(':').unwrap_or(c);
            let inner = inner.strip_suffix(':').unwrap_or(inner);
            !inner.is_empty() && inner.bytes().all(|b| b == b'-')
        })
}

/// Unescape a cell: trim, `\|` → `|`, `<br>` → newline.
fn unescape_cell(cell: &str) -> String {
    cell.trim()
        .replace("\\|", "|")
        .replace("<br />", "\n")
        .replace("<br/>", "\n")
        .replace("<br>", "\n")
}

/// Escape text for a cell: `|` → `\|`, newlines → `<br>`.
fn escape_cell(text: &str) -> String {
    text.trim()
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('|', "\\|")
        .replace('\n', "<br>")
}

#[derive(Debug, Clone, Copy)]
struct Columns {
    number: usize,
    task: usize,
    status: usize,
    notes: usize,
}

/// Match header cells to the four columns; the names of those missing otherwise.
fn columns(header: &[&str]) -> Result<Columns, Vec<&'static str>> {
    let find = |names: &[&str]| {
        header.iter().position(|c| {
            let c = clean(c).to_ascii_lowercase();
            names.contains(&c.as_str())
        })
    };
    let number = find(&["#", "no", "no.", "num", "number"]);
    let task = find(&["task", "tasks", "title"]);
    let status = find(&["status", "state"]);
    let notes = find(&["notes", "note"]);
    match (number, task, status, notes) {
        (Some(number), Some(task), Some(status), Some(notes)) => Ok(Columns {
            number,
            task,
            status,
            notes,
        }),
        _ => Err([
            (number, "`#`"),
            (task, "`Task`"),
            (status, "`Status`"),
            (notes, "`Notes`"),
        ]
        .into_iter()
        .filter(|(c, _)| c.is_none())
        .map(|(_, n)| n)
        .collect()),
    }
}

enum TableFind {
    None,
    MissingColumns {
        idx: usize,
        missing: Vec<&'static str>,
    },
    NoDelimiter {
        idx: usize,
    },
    Found {
        header: usize,
        cols: Columns,
        rows: Vec<usize>,
    },
}

/// What a lenient pass over `PROGRESS.md` finds (used by both parsing and rendering).
struct Scan<'a> {
    lines: Vec<Line<'a>>,
    /// Line index and the text after `Status:`.
    status: Option<(usize, &'a str)>,
    table: TableFind,
}

fn status_heading(text: &str) -> Option<&str> {
    let (_, heading) = atx_heading(text)?;
    let t = heading.trim_start_matches(['*', '_']);
    let rest = strip_prefix_ci(t, "status")?.trim_start_matches(['*', '_', ' ', '\t']);
    let rest = rest.strip_prefix(':')?;
    Some(rest)
}

fn scan_progress(text: &str) -> Scan<'_> {
    let lines = lines(text);
    let mut fence = Fence::default();
    let code: Vec<bool> = lines.iter().map(|l| fence.step(l.text)).collect();
    let mut status = None;
    let mut table = TableFind::None;
    for (idx, line) in lines.iter().enumerate() {
        if code.get(idx).copied().unwrap_or(true) {
            continue;
        }
        if status.is_none()
            && let Some(value) = status_heading(line.text)
        {
            status = Some((idx, value));
        }
        if matches!(table, TableFind::Found { .. }) || !line.text.contains('|') {
            continue;
        }
        let delimited = lines.get(idx + 1).is_some_and(|n| is_delimiter_row(n.text));
        if is_delimiter_row(line.text) {
            continue;
        }
        match columns(&cells(line.text)) {
            Ok(cols) if delimited => {
                let rows = (idx + 2..lines.len())
                    .take_while(|&i| {
                        lines
                            .get(i)
                            .is_some_and(|l| l.text.contains('|') && !l.text.trim().is_empty())
                    })
                    .collect();
                table = TableFind::Found {
                    header: idx,
                    cols,
                    rows,
                };
            }
            Ok(_) => {
                if matches!(table, TableFind::None | TableFind::MissingColumns { .. }) {
                    table = TableFind::NoDelimiter { idx };
                }
            }
            Err(missing) if delimited => {
                if matches!(table, TableFind::None) {
                    table = TableFind::MissingColumns { idx, missing };
                }
            }
            Err(_) => {}
        }
    }
    Scan {
        lines,
        status,
        table,
    }
}

fn parse_overall(value: &str) -> Option<OverallStatus> {
    let v = clean(value).to_ascii_uppercase().replace([' ', '-'], "_");
    match v.as_str() {
        "IN_PROGRESS" | "INPROGRESS" => Some(OverallStatus::InProgress),
        "COMPLETE" | "COMPLETED" => Some(OverallStatus::Complete),
        "PARTIAL" => Some(OverallStatus::Partial),
        _ => None,
    }
}

fn overall_text(status: OverallStatus) -> &'static str {
    match status {
        OverallStatus::InProgress => "IN_PROGRESS",
        OverallStatus::Complete => "COMPLETE",
        OverallStatus::Partial => "PARTIAL",
    }
}

/// Parse a Status cell: keyword (case-insensitive, emphasis/emoji tolerated) and attempts (the
/// first `a/b` in the rest of the cell).
fn parse_status_cell(cell: &str) -> Option<(RowStatus, u32)> {
    let t = cell.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let word_len = t.bytes().take_while(u8::is_ascii_alphabetic).count();
    let (word, rest) = t.split_at(word_len);
    if rest
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return None;
    }
    let status = match word.to_ascii_uppercase().as_str() {
        "PENDING" => RowStatus::Pending,
        "DONE" => RowStatus::Done,
        "FAILED" => RowStatus::Failed,
        "BLOCKED" => RowStatus::Blocked,
        _ => return None,
    };
    let counted = attempts_in(rest);
    let attempts = match status {
        RowStatus::Pending => 0,
        RowStatus::Done => counted.unwrap_or(0).min(MAX_ATTEMPTS),
        RowStatus::Failed => counted.unwrap_or(1).clamp(1, MAX_ATTEMPTS),
        RowStatus::Blocked => counted.unwrap_or(MAX_ATTEMPTS).clamp(1, MAX_ATTEMPTS),
    };
    Some((status, attempts))
}

/// The `a` of the first `a/b` in `text`.
fn attempts_in(text: &str) -> Option<u32> {
    let bytes = text.as_bytes();
    let slash = (0..bytes.len()).find(|&i| {
        bytes.get(i) == Some(&b'/')
            && i > 0
            && bytes.get(i - 1).is_some_and(u8::is_ascii_digit)
            && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
    })?;
    let start = text
        .get(..slash)?
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .len();
    Some(text.get(start..slash)?.parse().unwrap_or(u32::MAX))
}

/// The canonical Status cell text.
fn status_text(status: RowStatus, attempts: u32) -> String {
    let a = attempts.min(MAX_ATTEMPTS);
    match status {
        RowStatus::Pending => "PENDING".to_string(),
        RowStatus::Done => "DONE".to_string(),
        RowStatus::Failed => format!("FAILED (attempt {}/{MAX_ATTEMPTS})", a.max(1)),
        RowStatus::Blocked => format!("BLOCKED ({}/{MAX_ATTEMPTS} attempts)", a.max(1)),
    }
}

fn row_number(cell: &str) -> Option<u32> {
    clean(cell).trim_start_matches('#').trim().parse().ok()
}

/// Parse `PROGRESS.md`. `path` is only used in error messages.
///
/// The first table whose header has `#`, `Task`, `Status` and `Notes` columns (any order, extra
/// columns allowed) followed by a `|---|` row is the task table; it ends at the first line
/// without a `|`. The `## Status:` line may be anywhere.
pub fn parse_progress(path: &Path, text: &str) -> Result<Progress, TableError> {
    let (_, text) = split_bom(text);
    let scan = scan_progress(text);
    let err_path = || path.to_path_buf();
    let Some((status_idx, value)) = scan.status else {
        return Err(TableError::MissingStatus { path: err_path() });
    };
    let status = parse_overall(value).ok_or_else(|| TableError::UnknownOverallStatus {
        path: err_path(),
        line: status_idx + 1,
        value: one_line(value),
    })?;
    let (header, cols, row_idx) = match scan.table {
        TableFind::None => return Err(TableError::NoTable { path: err_path() }),
        TableFind::MissingColumns { idx, missing } => {
            return Err(TableError::MissingColumns {
                path: err_path(),
                line: idx + 1,
                missing: missing.join(", "),
            });
        }
        TableFind::NoDelimiter { idx } => {
            return Err(TableError::MissingDelimiter {
                path: err_path(),
                line: idx + 1,
            });
        }
        TableFind::Found { header, cols, rows } => (header, cols, rows),
    };
    let mut rows: Vec<Row> = Vec::with_capacity(row_idx.len());
    let mut first: HashMap<u32, usize> = HashMap::new();
    for i in row_idx {
        let Some(line) = scan.lines.get(i) else {
            continue;
        };
        let line_no = i + 1;
        let cs = cells(line.text);
        let num_cell = cs.get(cols.number).copied().unwrap_or("");
        let number = row_number(num_cell).ok_or_else(|| TableError::BadRowNumber {
            path: err_path(),
            line: line_no,
            value: one_line(num_cell),
        })?;
        let Some(status_cell) = cs.get(cols.status) else {
            return Err(TableError::MissingCell {
                path: err_path(),
                line: line_no,
                number,
            });
        };
        let (status, attempts) =
            parse_status_cell(status_cell).ok_or_else(|| TableError::UnknownStatus {
                path: err_path(),
                line: line_no,
                number,
                value: one_line(status_cell),
            })?;
        if let Some(&f) = first.get(&number) {
            return Err(TableError::DuplicateRow {
                path: err_path(),
                line: line_no,
                number,
                first: f,
            });
        }
        first.insert(number, line_no);
        rows.push(Row {
            number,
            task: one_line(&unescape_cell(cs.get(cols.task).copied().unwrap_or(""))),
            status,
            attempts,
            notes: unescape_cell(cs.get(cols.notes).copied().unwrap_or("")),
            line: line_no,
        });
    }
    if rows.is_empty() {
        return Err(TableError::NoRows {
            path: err_path(),
            line: header + 1,
        });
    }
    Ok(Progress {
        status,
        rows,
        status_line: status_idx + 1,
        table_line: header + 1,
    })
}

// ---------------------------------------------------------------------------------------------
// Validation and bookkeeping
// ---------------------------------------------------------------------------------------------

/// Check that `PRD.md` and `PROGRESS.md` have the same task numbers: every task has a row
/// (else an error at the table header naming the task's PRD line) and every row has a task
/// (else an error at the row).
pub fn validate(
    prd: &Prd,
    prd_path: &Path,
    progress: &Progress,
    progress_path: &Path,
) -> Result<(), TableError> {
    let rows: HashSet<u32> = progress.rows.iter().map(|r| r.number).collect();
    let tasks: HashSet<u32> = prd.tasks.iter().map(|t| t.number).collect();
    if let Some(task) = prd.tasks.iter().find(|t| !rows.contains(&t.number)) {
        return Err(TableError::MissingRow {
            path: progress_path.to_path_buf(),
            line: progress.table_line,
            number: task.number,
            prd_path: prd_path.to_path_buf(),
            prd_line: task.line,
        });
    }
    if let Some(row) = progress.rows.iter().find(|r| !tasks.contains(&r.number)) {
        return Err(TableError::UnknownRow {
            path: progress_path.to_path_buf(),
            line: row.line,
            number: row.number,
            prd_path: prd_path.to_path_buf(),
        });
    }
    Ok(())
}

/// The task to work next: the first `PENDING` row, else the first `FAILED` row with attempts
/// left. `None` when the loop is over.
pub fn next_task(progress: &Progress) -> Option<u32> {
    let rows = &progress.rows;
    rows.iter()
        .find(|r| r.status == RowStatus::Pending)
        .or_else(|| {
            rows.iter()
                .find(|r| r.status == RowStatus::Failed && r.attempts < MAX_ATTEMPTS)
        })
        .map(|r| r.number)
}

/// The attempt number the next run of task `k` would be (1-based, at most [`MAX_ATTEMPTS`]).
pub fn attempt_number(progress: &Progress, k: u32) -> u32 {
    progress
        .rows
        .iter()
        .find(|r| r.number == k)
        .map_or(1, |r| r.attempts.saturating_add(1).min(MAX_ATTEMPTS))
}

/// Carry attempt counts from the table as it was before an iteration into the table the agent
/// left (the agent rewrites a Status cell to plain `DONE`, losing `(attempt 2/3)`). Call before
/// [`record_attempt`] so retries and review failures count correctly.
pub fn carry_attempts(before: &Progress, after: &mut Progress) {
    for row in &mut after.rows {
        if let Some(old) = before.rows.iter().find(|r| r.number == row.number) {
            row.attempts = row.attempts.max(old.attempts).min(MAX_ATTEMPTS);
        }
    }
}

/// Count one failed attempt on `row` with `notes`; `BLOCKED` once [`MAX_ATTEMPTS`] are used.
fn fail(row: &mut Row, notes: String) -> AttemptResult {
    row.attempts = row.attempts.saturating_add(1).min(MAX_ATTEMPTS);
    row.notes = notes;
    if row.attempts >= MAX_ATTEMPTS {
        row.status = RowStatus::Blocked;
        AttemptResult::Blocked
    } else {
        row.status = RowStatus::Failed;
        AttemptResult::Failed {
            attempt: row.attempts,
        }
    }
}

/// Record the outcome of an iteration that worked task `k`, after re-reading `PROGRESS.md`.
///
/// A `DONE` row stays as it is ([`AttemptResult::Done`]). Otherwise the attempt counts: the row
/// becomes `FAILED (attempt a/3)`, or `BLOCKED` at the third attempt, and its Notes become
/// `note`, followed by what the agent wrote there (`note: agent notes`) when both are non-empty.
/// A `BLOCKED` row, or a row that does not exist, is [`AttemptResult::Blocked`] and unchanged.
pub fn record_attempt(progress: &mut Progress, k: u32, note: &str) -> AttemptResult {
    let Some(row) = progress.rows.iter_mut().find(|r| r.number == k) else {
        return AttemptResult::Blocked;
    };
    match row.status {
        RowStatus::Done => AttemptResult::Done,
        RowStatus::Blocked => AttemptResult::Blocked,
        RowStatus::Pending | RowStatus::Failed => {
            let note = one_line(note);
            let agent = row.notes.trim();
            let notes = if note.is_empty() {
                agent.to_string()
            } else if agent.is_empty() || agent.starts_with(&note) {
                if agent.is_empty() {
                    note
                } else {
                    agent.to_string()
                }
            } else {
                format!("{note}: {agent}")
            };
            fail(row, notes)
        }
    }
}

/// A review of task `k` failed: the row turns back to `FAILED` (the attempt counts) with
/// `reason` as its note, or `BLOCKED` at the third attempt. A `BLOCKED` or missing row is
/// [`AttemptResult::Blocked`] and unchanged.
pub fn review_failed(progress: &mut Progress, k: u32, reason: &str) -> AttemptResult {
    let Some(row) = progress.rows.iter_mut().find(|r| r.number == k) else {
        return AttemptResult::Blocked;
    };
    if row.status == RowStatus::Blocked {
        return AttemptResult::Blocked;
    }
    let reason = one_line(reason);
    let notes = if reason.is_empty() {
        "review failed".to_string()
    } else {
        reason
    };
    fail(row, notes)
}

/// The loop is over: `COMPLETE` when every row is `DONE`, else `PARTIAL`. Sets
/// `progress.status`.
pub fn finish(progress: &mut Progress) -> OverallStatus {
    let status = if progress.rows.iter().all(|r| r.status == RowStatus::Done) {
        OverallStatus::Complete
    } else {
        OverallStatus::Partial
    };
    progress.status = status;
    status
}

/// Rows that are `DONE`.
pub fn done_count(progress: &Progress) -> usize {
    progress
        .rows
        .iter()
        .filter(|r| r.status == RowStatus::Done)
        .count()
}

/// The ITER figures for this mode: `{done}/{total} tasks done, task {k} attempt {a}/3`.
pub fn figures(progress: &Progress, k: u32, attempt: u32) -> String {
    format!(
        "{}/{} tasks done, task {k} attempt {attempt}/{MAX_ATTEMPTS}",
        done_count(progress),
        progress.rows.len()
    )
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// Byte offset of `inner` within `outer`, when `inner` is a subslice of it.
fn offset_in(outer: &str, inner: &str) -> Option<usize> {
    let at = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    (at + inner.len() <= outer.len() && outer.is_char_boundary(at)).then_some(at)
}

/// Replace cells of a table line; cells the line lacks are appended first.
fn set_cells(text: &str, edits: &mut [(usize, String)]) -> String {
    let mut out = text.to_string();
    let need = edits.iter().map(|(c, _)| c + 1).max().unwrap_or(0);
    let mut spans = cell_spans(&out);
    if spans.len() < need {
        out.truncate(out.trim_end().len());
        if !out.ends_with('|') || out.ends_with("\\|") {
            out.push_str(" |");
        }
        let have = cell_spans(&out).len();
        for _ in have..need {
            out.push_str("  |");
        }
        spans = cell_spans(&out);
    }
    edits.sort_by_key(|(c, _)| std::cmp::Reverse(*c));
    for (col, value) in edits.iter() {
        if let Some(&(s, e)) = spans.get(*col)
            && out.is_char_boundary(s)
            && out.is_char_boundary(e)
            && s <= e
        {
            out.replace_range(s..e, &format!(" {value} "));
        }
    }
    out
}

/// `original` with only the rows' Status and Notes cells and the `## Status:` value changed to
/// match `progress`; every other byte (line endings included) is kept. A cell is rewritten only
/// when its meaning differs (so `FAILED` stays `FAILED` while it means attempt 1). Rows are
/// matched by number; rows of `progress` missing from `original` are not added. When
/// `original` has no `## Status:` line, one is inserted before the table.
pub fn render_progress(original: &str, progress: &Progress) -> String {
    let (bom, text) = split_bom(original);
    let scan = scan_progress(text);
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut replaced: HashMap<usize, String> = HashMap::new();
    let mut insert_status_before = None;
    let wanted = overall_text(progress.status);

    match scan.status {
        Some((idx, value)) if parse_overall(value) != Some(progress.status) => {
            if let Some(line) = scan.lines.get(idx)
                && let Some(at) = offset_in(line.text, value)
            {
                let (head, tail) = (&line.text[..at], &line.text[at + value.len()..]);
                let token = clean(value);
                let new = match value.find(token).filter(|_| !token.is_empty()) {
                    Some(t) => format!(
                        "{head}{}{wanted}{}{tail}",
                        &value[..t],
                        &value[t + token.len()..]
                    ),
                    None => format!("{head} {wanted}{tail}"),
                };
                replaced.insert(idx, new);
            }
        }
        Some(_) => {}
        None => {
            insert_status_before = Some(match &scan.table {
                TableFind::Found { header, .. } => *header,
                _ => scan.lines.len(),
            });
        }
    }

    if let TableFind::Found { cols, rows, .. } = &scan.table {
        let by_number: HashMap<u32, &Row> =
            progress.rows.iter().rev().map(|r| (r.number, r)).collect();
        let mut seen = HashSet::new();
        for &i in rows {
            let Some(line) = scan.lines.get(i) else {
                continue;
            };
            let cs = cells(line.text);
            let Some(number) = cs.get(cols.number).and_then(|c| row_number(c)) else {
                continue;
            };
            if !seen.insert(number) {
                continue;
            }
            let Some(row) = by_number.get(&number) else {
                continue;
            };
            let mut edits = Vec::new();
            let want_status = status_text(row.status, row.attempts);
            let have_status = cs
                .get(cols.status)
                .and_then(|c| parse_status_cell(c))
                .map(|(s, a)| status_text(s, a));
            if have_status.as_deref() != Some(want_status.as_str()) {
                edits.push((cols.status, want_status));
            }
            let want_notes = escape_cell(&row.notes);
            let have_notes = cs.get(cols.notes).map(|c| escape_cell(&unescape_cell(c)));
            if have_notes.as_deref() != Some(want_notes.as_str())
                && !(have_notes.is_none() && want_notes.is_empty())
            {
                edits.push((cols.notes, want_notes));
            }
            if !edits.is_empty() {
                replaced.insert(i, set_cells(line.text, &mut edits));
            }
        }
    }

    let mut out = String::with_capacity(original.len() + 64);
    out.push_str(bom);
    for (idx, line) in scan.lines.iter().enumerate() {
        if insert_status_before == Some(idx) {
            out.push_str(&format!("## Status: {wanted}{eol}{eol}"));
        }
        out.push_str(replaced.get(&idx).map_or(line.text, String::as_str));
        out.push_str(line.eol);
    }
    if insert_status_before.is_some_and(|i| i >= scan.lines.len()) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(eol);
        }
        out.push_str(&format!("## Status: {wanted}{eol}"));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Prompts
// ---------------------------------------------------------------------------------------------

/// The task's heading, body and criteria as prompt text (or a note that it is missing).
fn task_block(prd: &Prd, k: u32) -> String {
    let Some(task) = prd.tasks.iter().find(|t| t.number == k) else {
        return format!("Task {k} is not in the PRD; read it from the plan file.\n");
    };
    let mut s = format!("### Task {k}: {}\n\n", task.title);
    if !task.body.is_empty() {
        s.push_str(&task.body);
        s.push_str("\n\n");
    }
    s.push_str("Acceptance criteria:\n");
    for c in &task.criteria {
        s.push_str(&format!("- {c}\n"));
    }
    s
}

/// The prompt for one iteration working task `k` (and no other). `attempt` is 1-based; on a retry
/// the prompt points the agent at the Notes left by the previous attempt.
#[allow(clippy::too_many_arguments)]
pub fn task_prompt(
    prd: &Prd,
    k: u32,
    attempt: u32,
    iteration: u32,
    max_iterations: u32,
    test_command: Option<&str>,
    prd_file: &str,
    progress_file: &str,
) -> String {
    let title = prd
        .tasks
        .iter()
        .find(|t| t.number == k)
        .map_or("", |t| t.title.as_str());
    let mut s = format!("# Ralph iteration {iteration}/{max_iterations}: task {k}");
    if !title.is_empty() {
        s.push_str(&format!(" — {title}"));
    }
    s.push_str("\n\n");
    s.push_str(
        "You are a Ralph executor working a single task with fresh context: you remember nothing \
         of earlier iterations. All state is in the files (the PRD, the progress table, the code, \
         git history).\n\n",
    );
    s.push_str(&format!("Attempt {attempt}/{MAX_ATTEMPTS} at this task."));
    if attempt > 1 {
        s.push_str(&format!(
            " Attempt {} did not finish it: read the Notes cell of row {k} in {progress_file} \
             for what went wrong, and `git log` for what was already done, before you start.",
            attempt - 1
        ));
    }
    s.push_str("\n\n## Goal\n\n");
    s.push_str(prd.goal.trim());
    s.push_str("\n\n## Your task\n\n");
    s.push_str(&task_block(prd, k));
    s.push_str("\n## Instructions\n\n");
    s.push_str(&format!(
        "1. Read {prd_file} and {progress_file} for context. Work on task {k} only.\n\
         2. Implement it: write the code and the tests it needs.\n"
    ));
    match test_command {
        Some(cmd) if !cmd.trim().is_empty() => s.push_str(&format!(
            "3. Verify every acceptance criterion above; run `{}` and make it pass.\n",
            cmd.trim()
        )),
        _ => {
            s.push_str("3. Verify every acceptance criterion above, and run the project's tests.\n")
        }
    }
    s.push_str(&format!(
        "4. When all its criteria are met and verified, set the Status cell of row {k} in \
         {progress_file} to `DONE` and put a short note in its Notes cell.\n\
         5. If you cannot finish, leave row {k}'s Status as it is and write what blocked you in \
         its Notes cell.\n\
         6. Do not change other rows, the `## Status:` line, or {prd_file}.\n\
         7. Do not commit: ralph commits your work after this iteration.\n"
    ));
    s
}

/// The prompt for the fresh agent run that reviews task `k` after it was marked `DONE`.
pub fn review_prompt(prd: &Prd, k: u32, test_command: Option<&str>) -> String {
    let mut s = format!("# Ralph review: task {k}\n\n");
    s.push_str(
        "You are a Ralph reviewer with fresh context. Another agent marked the task below done. \
         Check its work; do not change any files.\n\n## Goal\n\n",
    );
    s.push_str(prd.goal.trim());
    s.push_str("\n\n## Task under review\n\n");
    s.push_str(&task_block(prd, k));
    s.push_str("\n## Check\n\n1. The project builds (and lints clean, if it has a linter).\n");
    match test_command {
        Some(cmd) if !cmd.trim().is_empty() => {
            s.push_str(&format!("2. The tests pass: run `{}`.\n", cmd.trim()));
        }
        _ => s.push_str("2. The project's tests pass, and the task's work is tested.\n"),
    }
    s.push_str(
        "3. Each acceptance criterion above is met by the code as it is now (see `git log` and \
         `git show` for the task's changes).\n\n\
         The last line of your reply must be the verdict: the words `REVIEW: PASS` when all \
         checks hold, or else `REVIEW: FAIL` followed by a one-line reason.\n",
    );
    s
}

/// The verdict of a review run: the last line reading `REVIEW: PASS` (`Some(Ok(()))`) or
/// `REVIEW: FAIL reason` (`Some(Err(reason))`). Case-insensitive; surrounding `*`, `` ` ``, `>`
/// and whitespace are ignored. `None` when no such line exists.
pub fn parse_review(output: &str) -> Option<Result<(), String>> {
    output.lines().rev().find_map(|line| {
        let t = line
            .trim()
            .trim_start_matches(['*', '`', '>', '#', '_', ' ', '\t']);
        let rest = strip_prefix_ci(t, "review")?.trim_start_matches(['*', '_', ' ', '\t']);
        let rest = rest.strip_prefix(':')?;
        let rest = rest.trim().trim_matches(['*', '`', '_']).trim();
        let word_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (word, tail) = rest.split_at(word_len);
        match word.to_ascii_uppercase().as_str() {
            "PASS" | "PASSED" => Some(Ok(())),
            "FAIL" | "FAILED" => {
                let reason = one_line(tail.trim_start_matches([':', '-', '—', '–', ' ', '\t']));
                Some(Err(if reason.is_empty() {
                    "no reason given".to_string()
                } else {
                    reason
                }))
            }
            _ => None,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Scaffolding and planning
// ---------------------------------------------------------------------------------------------

/// A one-line title that survives being a heading (closing `#`s and edge `*` removed).
fn heading_safe(text: &str, fallback: &str) -> String {
    let mut t = one_line(text);
    loop {
        let next = clean_title(&t);
        if next == t {
            break;
        }
        t = next;
    }
    if t.is_empty() {
        fallback.to_string()
    } else {
        t
    }
}

/// Cut to `max` characters, adding `…` when cut.
fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// `PRD.md` and `PROGRESS.md` for `ralph init --table`: the description is the goal (and the
/// only task when `tasks` is empty); each task gets a placeholder criterion to edit. Both files
/// parse and validate whatever the input.
pub fn scaffold(description: &str, tasks: &[String], promise: &str) -> (String, String) {
    let goal_line = one_line(description);
    let title = heading_safe(&truncate_chars(&goal_line, 72), "Project");
    let mut goal = if goal_line.is_empty() {
        "Describe what success looks like, in one sentence.".to_string()
    } else {
        goal_line
    };
    if goal.starts_with(['#', '`', '~']) {
        goal.insert(0, '\\');
    }
    let titles: Vec<String> = if tasks.is_empty() {
        vec![title.clone()]
    } else {
        tasks
            .iter()
            .enumerate()
            .map(|(i, t)| heading_safe(t, &format!("Task {}", i + 1)))
            .collect()
    };
    let promise = one_line(&promise.replace('`', ""));
    let promise = if promise.is_empty() {
        DEFAULT_PROMISE.to_string()
    } else {
        promise
    };

    let mut prd = format!("# {title}\n\n## Goal\n\n{goal}\n\n## Tasks\n\n");
    for (i, t) in titles.iter().enumerate() {
        prd.push_str(&format!(
            "### Task {n}: {t}\n\n**Acceptance Criteria:**\n- [ ] {t}: implemented and covered \
             by passing tests\n\n",
            n = i + 1
        ));
    }
    prd.push_str(&format!("## Completion Promise\n\n`{promise}`\n"));

    let mut progress = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n\
         |---|------|--------|-------|\n",
    );
    for (i, t) in titles.iter().enumerate() {
        progress.push_str(&format!("| {} | {} | PENDING | |\n", i + 1, escape_cell(t)));
    }
    (prd, progress)
}

const EXAMPLE_PRD: &str = "# Add OAuth login

## Goal

Users can sign in with GitHub, and their session survives a restart.

## Tasks

### Task 1: GitHub OAuth flow

Add the redirect and callback endpoints using the existing HTTP router.

**Acceptance Criteria:**
- [ ] `/auth/github` redirects to GitHub with the configured client id
- [ ] `/auth/github/callback` exchanges the code and creates a session
- [ ] Tests cover both endpoints

### Task 2: Persistent sessions

**Acceptance Criteria:**
- [ ] Sessions are stored in the database and survive a server restart
- [ ] Tests cover session expiry

## Completion Promise

`DONE`
";

const EXAMPLE_PROGRESS: &str = "# Progress

## Status: IN_PROGRESS

| # | Task | Status | Notes |
|---|------|--------|-------|
| 1 | GitHub OAuth flow | PENDING | |
| 2 | Persistent sessions | PENDING | |
";

/// The prompt for the planning run: write `PRD.md` and `PROGRESS.md` for `description`, in
/// exactly the format [`parse_prd`] and [`parse_progress`] read, and nothing else.
pub fn planning_prompt(description: &str) -> String {
    format!(
        "# Ralph planning\n\n\
         You are planning work that fresh agents will then do one task at a time. Do not \
         implement anything yet and do not commit: write two files in the repository root, \
         {PRD_FILE} and {PROGRESS_FILE}, then stop.\n\n\
         ## The work\n\n{}\n\n\
         ## {PRD_FILE}\n\n\
         - A `# ` title, then `## Goal` with one sentence saying what success looks like.\n\
         - `## Tasks`, then one `### Task N: title` heading per task, numbered 1, 2, 3, … Each \
         task is atomic and independently doable in one session, in dependency order, with a \
         short description and a `**Acceptance Criteria:**` line followed by `- [ ]` items that \
         can be tested.\n\
         - `## Completion Promise` followed by the keyword in backticks (`DONE` unless the work \
         says otherwise).\n\n\
         ## {PROGRESS_FILE}\n\n\
         A `## Status: IN_PROGRESS` line and a table `| # | Task | Status | Notes |` with one \
         row per task, same numbers, every Status `PENDING`, Notes empty.\n\n\
         Read the code first so the tasks fit the project. Example of the exact format:\n\n\
         ```markdown\n{EXAMPLE_PRD}```\n\n```markdown\n{EXAMPLE_PROGRESS}```\n",
        description.trim()
    )
}

/// The end-of-run summary: `Tasks: N total, X done, Y blocked` (plus failed/pending counts when
/// any), then the blocked tasks with their notes.
pub fn summary(progress: &Progress) -> Vec<String> {
    let count = |s: RowStatus| progress.rows.iter().filter(|r| r.status == s).count();
    let mut head = format!(
        "Tasks: {} total, {} done, {} blocked",
        progress.rows.len(),
        count(RowStatus::Done),
        count(RowStatus::Blocked)
    );
    for (status, word) in [
        (RowStatus::Failed, "failed"),
        (RowStatus::Pending, "pending"),
    ] {
        let n = count(status);
        if n > 0 {
            head.push_str(&format!(", {n} {word}"));
        }
    }
    let mut out = vec![head];
    let blocked: Vec<&Row> = progress
        .rows
        .iter()
        .filter(|r| r.status == RowStatus::Blocked)
        .collect();
    if !blocked.is_empty() {
        out.push("Blocked tasks:".to_string());
        for row in blocked {
            let reason = one_line(&row.notes);
            let reason = if reason.is_empty() {
                "no reason recorded".to_string()
            } else {
                reason
            };
            let task = one_line(&row.task);
            if task.is_empty() {
                out.push(format!("- Task {}: {reason}", row.number));
            } else {
                out.push(format!("- Task {} ({task}): {reason}", row.number));
            }
        }
    }
    out
}

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "from", "into", "onto", "that", "this", "these", "those", "its",
    "our", "your", "their", "are", "was", "were", "been", "being", "has", "have", "had", "but",
    "not", "all", "any", "some", "via", "per", "then", "than", "when", "where", "which", "who",
    "what", "how", "can", "should", "would", "will", "must", "also", "out", "off", "about",
];

/// Lowercase alphanumeric words of `text`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn same_word(a: &str, b: &str) -> bool {
    let plural = |long: &str, short: &str| {
        long.strip_prefix(short)
            .is_some_and(|rest| rest == "s" || rest == "es")
    };
    a == b || plural(a, b) || plural(b, a)
}

/// A plan in `docs/plans/` that matches `description`, given `(path, contents)` pairs.
///
/// The rule is conservative: the description's significant words (3+ characters, not a common
/// stop word such as "the", "and", "for", "with") must *all* appear among the words of the plan's
/// file stem or its first heading (the first `# ` heading, else the first heading of any level),
/// compared case-insensitively with a trailing `s`/`es` ignored. Only `.md`/`.markdown` files
/// count. A description without significant words matches nothing. When several plans match,
/// the one with the greatest path wins (plans are date-prefixed, so that is the newest).
pub fn find_plan(plans: &[(PathBuf, String)], description: &str) -> Option<PathBuf> {
    let wanted: Vec<String> = words(description)
        .into_iter()
        .filter(|w| w.chars().count() >= 3 && !STOPWORDS.contains(&w.as_str()))
        .collect();
    if wanted.is_empty() {
        return None;
    }
    plans
        .iter()
        .filter(|(path, _)| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"))
        })
        .filter(|(path, text)| {
            let mut have = words(
                &path
                    .file_stem()
                    .map(|s| s.to_string_lossy())
                    .unwrap_or_default(),
            );
            have.extend(words(first_heading(text)));
            wanted.iter().all(|w| have.iter().any(|h| same_word(h, w)))
        })
        .map(|(path, _)| path)
        .max()
        .cloned()
}

/// The first `# ` heading of `text`, else its first heading, else "".
fn first_heading(text: &str) -> &str {
    let (_, text) = split_bom(text);
    let mut fence = Fence::default();
    let mut first_any = None;
    for line in lines(text) {
        if fence.step(line.text) {
            continue;
        }
        if let Some((level, t)) = atx_heading(line.text) {
            if level == 1 {
                return t;
            }
            first_any.get_or_insert(t);
        }
    }
    first_any.unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRD: &str = "# Add OAuth

## Goal

Users sign in with GitHub.

## Tasks

### Task 1: OAuth flow

Add the endpoints.

**Acceptance Criteria:**
- [ ] redirect works
- [x] callback creates a session
  - including on retry

### Task 2: Sessions

#### Acceptance Criteria
- sessions persist

### Task 3: Docs
Some docs.

- [ ] README explains setup

## Completion Promise

Output `SHIPPED` when done.
";

    const PROGRESS: &str = "# Progress

## Status: IN_PROGRESS

| # | Task | Status | Notes |
|---|------|--------|-------|
| 1 | OAuth flow | DONE | shipped \\| tested |
| 2 | Sessions | FAILED (attempt 2/3) | db down |
| 3 | Docs | PENDING | |

Trailing text.
";

    fn p(name: &str) -> PathBuf {
        PathBuf::from(name)
    }

    fn read_prd(text: &str) -> Result<Prd, TableError> {
        parse_prd(&p("PRD.md"), text)
    }

    fn read_progress(text: &str) -> Result<Progress, TableError> {
        parse_progress(&p("PROGRESS.md"), text)
    }

    fn err(r: Result<impl std::fmt::Debug, TableError>) -> String {
        let e = r.expect_err("expected an error");
        assert!(e.hint().is_some());
        e.to_string()
    }

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
    fn parses_progress() {
        let pr = read_progress(PROGRESS).unwrap();
        assert_eq!(
            (pr.status, pr.status_line, pr.table_line),
            (OverallStatus::InProgress, 3, 5)
        );
        let r = &pr.rows;
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].status, r[0].attempts, r[0].notes.as_str()),
            (RowStatus::Done, 0, "shipped | tested")
        );
        assert_eq!(
            (r[1].status, r[1].attempts, r[1].line),
            (RowStatus::Failed, 2, 8)
        );
        assert_eq!(
            (r[2].status, r[2].attempts, r[2].task.as_str()),
            (RowStatus::Pending, 0, "Docs")
        );
        let crlf = PROGRESS.replace('\n', "\r\n");
        assert_eq!(read_progress(&crlf).unwrap().rows, pr.rows);
    }

    #[test]
    fn parses_status_cells() {
        let cell = parse_status_cell;
        assert_eq!(cell("FAILED"), Some((RowStatus::Failed, 1)));
        assert_eq!(
            cell(" **failed** (attempt 2/3)"),
            Some((RowStatus::Failed, 2))
        );
        assert_eq!(cell("BLOCKED"), Some((RowStatus::Blocked, 3)));
        assert_eq!(
            cell("BLOCKED (3/3 attempts)"),
            Some((RowStatus::Blocked, 3))
        );
        assert_eq!(cell("✅ DONE"), Some((RowStatus::Done, 0)));
        assert_eq!(
            cell("FAILED (attempt 99999999999/3)"),
            Some((RowStatus::Failed, 3))
        );
        assert_eq!(cell("DONEISH"), None);
        assert_eq!(cell("IN_PROGRESS"), None);
    }

    #[test]
    fn progress_errors_name_file_and_line() {
        let table = "| # | Task | Status | Notes |\n|---|---|---|---|\n";
        assert_eq!(
            err(read_progress(&format!("{table}| 1 | a | DONE | |\n"))),
            "PROGRESS.md: no `## Status:` line"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: WORKING\n{table}| 1 | a | DONE | |\n"
            ))),
            "PROGRESS.md:1: unknown status `WORKING`"
        );
        assert!(
            err(read_progress("## Status: IN_PROGRESS\n"))
                .starts_with("PROGRESS.md: no task table")
        );
        assert_eq!(
            err(read_progress(
                "## Status: IN_PROGRESS\n\n| # | Task | State |\n|---|---|---|\n| 1 | a | DONE |\n"
            )),
            "PROGRESS.md:3: the table has no `Notes` column"
        );
        assert_eq!(
            err(read_progress(
                "## Status: IN_PROGRESS\n| # | Task | Status | Notes |\n| 1 | a | DONE | |\n"
            )),
            "PROGRESS.md:2: the table header is not followed by a `|---|` row"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| 1 | a | WORKING | |\n"
            ))),
            "PROGRESS.md:4: row 1 has unknown status `WORKING`"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| 1 | a | DONE | |\n| 1 | b | DONE | |\n"
            ))),
            "PROGRESS.md:5: row 1 appears twice (first at line 4)"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| x | a | DONE | |\n"
            ))),
            "PROGRESS.md:4: row number `x` is not a number"
        );
        assert_eq!(
            err(read_progress(&format!("## Status: IN_PROGRESS\n{table}\n"))),
            "PROGRESS.md:2: the task table has no rows"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| 1 | a |\n"
            ))),
            "PROGRESS.md:4: row 1 has no status cell"
        );
    }

    #[test]
    fn validate_matches_numbers_both_ways() {
        let prd_v = read_prd(PRD).unwrap();
        let mut pr = read_progress(PROGRESS).unwrap();
        validate(&prd_v, &p("PRD.md"), &pr, &p("PROGRESS.md")).unwrap();
        let extra = pr.rows[2].clone();
        pr.rows[2].number = 4;
        assert_eq!(
            err(validate(&prd_v, &p("PRD.md"), &pr, &p("PROGRESS.md"))),
            "PROGRESS.md:5: task 3 (PRD.md:23) has no row in the table"
        );
        pr.rows.push(extra);
        assert_eq!(
            err(validate(&prd_v, &p("PRD.md"), &pr, &p("PROGRESS.md"))),
            "PROGRESS.md:9: row 4 matches no task in PRD.md"
        );
    }

    /// Lines that differ between two texts, by index (both must have the same line count).
    fn changed_lines(a: &str, b: &str) -> Vec<usize> {
        let (la, lb): (Vec<_>, Vec<_>) = (
            a.split_inclusive('\n').collect(),
            b.split_inclusive('\n').collect(),
        );
        assert_eq!(la.len(), lb.len());
        (0..la.len()).filter(|&i| la[i] != lb[i]).collect()
    }

    #[test]
    fn render_round_trip_changes_only_cells() {
        for original in [PROGRESS.to_string(), PROGRESS.replace('\n', "\r\n")] {
            let mut pr = read_progress(&original).unwrap();
            assert_eq!(
                render_progress(&original, &pr),
                original,
                "no change, no edit"
            );
            assert_eq!(
                record_attempt(&mut pr, 3, "agent exited 1"),
                AttemptResult::Failed { attempt: 1 }
            );
            pr.rows[0].notes = "a|b\nc".to_string();
            pr.status = OverallStatus::Partial;
            let out = render_progress(&original, &pr);
            assert_eq!(changed_lines(&original, &out), [2, 6, 8]);
            assert!(out.contains("## Status: PARTIAL"));
            assert!(out.contains("| 1 | OAuth flow | DONE | a\\|b<br>c |"));
            assert!(out.contains("| 3 | Docs | FAILED (attempt 1/3) | agent exited 1 |"));
            assert_eq!(out.contains("\r\n"), original.contains("\r\n"));
            assert_eq!(out.matches('\n').count(), original.matches('\n').count());
            let again = read_progress(&out).unwrap();
            assert_eq!(again.rows, pr.rows);
            assert_eq!(again.status, OverallStatus::Partial);
            assert_eq!(render_progress(&out, &again), out);
        }
    }

    #[test]
    fn render_handles_short_rows_and_missing_status() {
        let original = "| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | a | PENDING\n";
        let pr = Progress {
            status: OverallStatus::Complete,
            rows: vec![Row {
                number: 1,
                task: "a".into(),
                status: RowStatus::Done,
                attempts: 0,
                notes: "ok".into(),
                line: 3,
            }],
            status_line: 0,
            table_line: 0,
        };
        let out = render_progress(original, &pr);
        assert_eq!(
            out,
            "## Status: COMPLETE\n\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | a | DONE | ok |\n"
        );
        assert_eq!(read_progress(&out).unwrap().rows[0].notes, "ok");
    }

    #[test]
    fn attempts_go_failed_then_blocked() {
        let mut pr = read_progress(PROGRESS).unwrap();
        assert_eq!(next_task(&pr), Some(3));
        assert_eq!(record_attempt(&mut pr, 1, "x"), AttemptResult::Done);
        assert_eq!(
            record_attempt(&mut pr, 3, "timed out"),
            AttemptResult::Failed { attempt: 1 }
        );
        assert_eq!(attempt_number(&pr, 3), 2);
        pr.rows[2].notes = "needs a key".into();
        assert_eq!(
            record_attempt(&mut pr, 3, "not marked DONE"),
            AttemptResult::Failed { attempt: 2 }
        );
        assert_eq!(pr.rows[2].notes, "not marked DONE: needs a key");
        assert_eq!(
            status_text(pr.rows[2].status, pr.rows[2].attempts),
            "FAILED (attempt 2/3)"
        );
        assert_eq!(record_attempt(&mut pr, 3, "again"), AttemptResult::Blocked);
        assert_eq!(
            status_text(pr.rows[2].status, pr.rows[2].attempts),
            "BLOCKED (3/3 attempts)"
        );
        assert_eq!(record_attempt(&mut pr, 3, "again"), AttemptResult::Blocked);
        assert_eq!(record_attempt(&mut pr, 42, "x"), AttemptResult::Blocked);
        assert_eq!(
            next_task(&pr),
            Some(2),
            "BLOCKED and DONE are skipped; FAILED with attempts left is next"
        );
        assert_eq!(figures(&pr, 2, 3), "1/3 tasks done, task 2 attempt 3/3");
        assert_eq!(record_attempt(&mut pr, 2, ""), AttemptResult::Blocked);
        assert_eq!(pr.rows[1].notes, "db down");
        assert_eq!(next_task(&pr), None);
        assert_eq!(finish(&mut pr), OverallStatus::Partial);
        assert_eq!(pr.status, OverallStatus::Partial);
        assert_eq!(
            summary(&pr),
            [
                "Tasks: 3 total, 1 done, 2 blocked",
                "Blocked tasks:",
                "- Task 2 (Sessions): db down",
                "- Task 3 (Docs): again: not marked DONE: needs a key"
            ]
        );
    }

    #[test]
    fn review_failure_counts_an_attempt_and_finish_completes() {
        let mut pr = read_progress(PROGRESS).unwrap();
        let before = pr.clone();
        pr.rows[1].status = RowStatus::Done; // the agent rewrote `FAILED (attempt 2/3)` as `DONE`
        pr.rows[1].attempts = 0;
        carry_attempts(&before, &mut pr);
        assert_eq!(
            review_failed(&mut pr, 1, "tests fail"),
            AttemptResult::Failed { attempt: 1 }
        );
        assert_eq!(
            (pr.rows[0].status, pr.rows[0].notes.as_str()),
            (RowStatus::Failed, "tests fail")
        );
        assert_eq!(review_failed(&mut pr, 2, ""), AttemptResult::Blocked);
        assert_eq!(pr.rows[1].notes, "review failed");
        for row in &mut pr.rows {
            row.status = RowStatus::Done;
        }
        assert_eq!(done_count(&pr), 3);
        assert_eq!(finish(&mut pr), OverallStatus::Complete);
        assert_eq!(summary(&pr), ["Tasks: 3 total, 3 done, 0 blocked"]);
    }

    #[test]
    fn parses_review_verdicts() {
        assert_eq!(parse_review("work...\nREVIEW: PASS\n"), Some(Ok(())));
        assert_eq!(
            parse_review("REVIEW: PASS\nREVIEW: FAIL tests fail\n"),
            Some(Err("tests fail".into()))
        );
        assert_eq!(
            parse_review("REVIEW: FAIL x\n**Review: pass**\n"),
            Some(Ok(()))
        );
        assert_eq!(
            parse_review("`REVIEW: FAIL — no tests`\r\n"),
            Some(Err("no tests".into()))
        );
        assert_eq!(
            parse_review("REVIEW: FAIL\n"),
            Some(Err("no reason given".into()))
        );
        assert_eq!(parse_review("REVIEW: maybe\nthe REVIEW: PASS line\n"), None);
        let prd = read_prd(PRD).unwrap();
        assert_eq!(
            parse_review(&review_prompt(&prd, 1, Some("cargo test"))),
            None,
            "the prompt holds no verdict line"
        );
    }

    #[test]
    fn prompts_name_only_their_task() {
        let prd = read_prd(PRD).unwrap();
        let s = task_prompt(
            &prd,
            2,
            2,
            5,
            50,
            Some("cargo test"),
            "PRD.md",
            "PROGRESS.md",
        );
        assert!(
            s.contains("Sessions") && s.contains("sessions persist") && s.contains("`cargo test`")
        );
        assert!(
            s.contains("iteration 5/50")
                && s.contains("Attempt 2/3")
                && s.contains("Attempt 1 did not finish")
        );
        assert!(s.contains("row 2") && s.contains("`DONE`") && s.contains("Do not commit"));
        for other in [
            "OAuth flow",
            "redirect works",
            "Docs",
            "README explains",
            "Task 1",
            "Task 3",
        ] {
            assert!(!s.contains(other), "prompt mentions {other}");
        }
        let first = task_prompt(&prd, 1, 1, 1, 50, None, "PRD.md", "PROGRESS.md");
        assert!(!first.contains("did not finish") && first.contains("redirect works"));
        let r = review_prompt(&prd, 3, None);
        assert!(
            r.contains("README explains setup")
                && !r.contains("OAuth flow")
                && r.contains("REVIEW: FAIL")
        );
    }

    #[test]
    fn scaffold_and_example_parse_and_validate() {
        let code = read_prd("## Goal\ng\n### Task 1: Add `--verbose`\n- [ ] x\n").unwrap();
        assert_eq!(code.tasks[0].title, "Add `--verbose`");
        let tasks = vec![
            "Fix C#".to_string(),
            "`".into(),
            "#*".into(),
            "pipes | here #".into(),
            "**".into(),
        ];
        let cases = [
            ("Build a thing", tasks.as_slice(), "SHIP"),
            ("", &[][..], ""),
            ("# `weird` goal\nline", &[][..], "`X`"),
        ];
        for (desc, tasks, promise) in cases {
            let (prd_text, progress_text) = scaffold(desc, tasks, promise);
            let prd = read_prd(&prd_text).unwrap();
            let pr = read_progress(&progress_text).unwrap();
            validate(&prd, &p("PRD.md"), &pr, &p("PROGRESS.md")).unwrap();
            assert_eq!(prd.tasks.len(), tasks.len().max(1));
            assert!(pr.rows.iter().all(|r| r.status == RowStatus::Pending));
        }
        let (prd_text, progress_text) = scaffold("Build a thing", &tasks, "SHIP");
        let prd = read_prd(&prd_text).unwrap();
        assert_eq!(prd.promise, "SHIP");
        assert_eq!(prd.tasks[0].title, "Fix C#");
        assert_eq!(prd.tasks[2].title, "Task 3");
        assert_eq!(
            read_progress(&progress_text).unwrap().rows[3].task,
            "pipes | here"
        );
        let ex = read_prd(EXAMPLE_PRD).unwrap();
        validate(
            &ex,
            &p("PRD.md"),
            &read_progress(EXAMPLE_PROGRESS).unwrap(),
            &p("PROGRESS.md"),
        )
        .unwrap();
        assert!(planning_prompt("add oauth").contains(EXAMPLE_PROGRESS));
    }

    #[test]
    fn finds_plans_conservatively() {
        let plans = vec![
            (
                p("docs/plans/2024-01-02-feat-oauth-login-plan.md"),
                "# feat: Add OAuth login\n".to_string(),
            ),
            (
                p("docs/plans/2024-03-01-feat-oauth-login-v2.md"),
                "# Add OAuth login, again\n".to_string(),
            ),
            (
                p("docs/plans/2024-02-01-billing.md"),
                "---\ntitle: x\n---\n## Stripe invoices\n".to_string(),
            ),
            (p("docs/plans/notes.txt"), "# stripe invoices".to_string()),
        ];
        assert_eq!(
            find_plan(&plans, "Add OAuth login"),
            Some(p("docs/plans/2024-03-01-feat-oauth-login-v2.md"))
        );
        assert_eq!(
            find_plan(&plans, "stripe invoice"),
            Some(p("docs/plans/2024-02-01-billing.md"))
        );
        assert_eq!(find_plan(&plans, "OAuth login with SAML"), None);
        assert_eq!(find_plan(&plans[2..], "Add OAuth login"), None);
        assert_eq!(
            find_plan(&plans[..1], "oauth logins"),
            Some(p("docs/plans/2024-01-02-feat-oauth-login-plan.md"))
        );
        assert_eq!(find_plan(&plans, "the a to"), None);
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(text in "(?s).{0,400}") {
            let _ = read_prd(&text);
            let _ = read_progress(&text);
            let pr = Progress { status: OverallStatus::Complete, rows: vec![], status_line: 0, table_line: 0 };
            let _ = render_progress(&text, &pr);
            let _ = parse_review(&text);
            let _ = find_plan(&[(p("a.md"), text.clone())], &text);
        }

        #[test]
        fn markdownish_input_never_panics(lines in proptest::collection::vec(
            "(#{1,4} ?(Task|Goal|Completion Promise|Status:|Acceptance Criteria)? ?[0-9]{0,11}[.:)]? ?[a-zA-Z|`*]{0,6}|\\|[ #a-zA-Z0-9|\\\\/()]{0,30}|\\|---\\|---\\|---\\|---\\||[-*] (\\[ \\] )?[a-z `]{0,8}|```|  - [a-z]{0,4}|)\r?",
            0..30,
        )) {
            let text = lines.join("\n");
            if let Ok(pr) = read_progress(&text) {
                let out = render_progress(&text, &pr);
                proptest::prop_assert_eq!(&out, &text);
                let mut pr2 = pr.clone();
                if let Some(k) = next_task(&pr2) {
                    let _ = record_attempt(&mut pr2, k, "n|o\nte");
                }
                finish(&mut pr2);
                let out = render_progress(&text, &pr2);
                let again = read_progress(&out);
                proptest::prop_assert!(again.is_ok(), "{:?}", again);
                if let Ok(again) = again {
                    proptest::prop_assert_eq!(again.rows.iter().map(|r| (r.number, r.status, r.attempts)).collect::<Vec<_>>(),
                        pr2.rows.iter().map(|r| (r.number, r.status, r.attempts)).collect::<Vec<_>>());
                }
            }
            if let Ok(prd) = read_prd(&text) {
                let _ = task_prompt(&prd, 1, 2, 1, 1, None, "PRD.md", "PROGRESS.md");
                let _ = review_prompt(&prd, 1, Some(""));
            }
        }

        #[test]
        fn render_changes_only_cells(
            rows in proptest::collection::vec((
                proptest::sample::select(vec!["PENDING", "DONE", "FAILED", "failed (attempt 2/3)", "**BLOCKED**", "✅ DONE"]),
                "[ a-z|\\\\<>/é]{0,12}",
                " {0,2}",
            ), 1..6),
            crlf in proptest::bool::ANY,
            ops in proptest::collection::vec((0u32..7, 0u8..3, "[ a-z|\\\\\n]{0,8}"), 0..8),
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut text = format!("# Progress{eol}{eol}## Status: IN_PROGRESS  {eol}{eol}| # | Task | Status | Notes |{eol}|---|:--|---|---|{eol}");
            for (i, (status, notes, pad)) in rows.iter().enumerate() {
                text.push_str(&format!("|{pad}{}{pad}| task {i} |{pad}{status}| {} |{eol}", i + 1, escape_cell(notes)));
            }
            text.push_str(&format!("{eol}tail | not a row{eol}"));
            let original = read_progress(&text);
            proptest::prop_assert!(original.is_ok(), "{:?}", original);
            let Ok(mut pr) = original else { return Ok(()) };
            proptest::prop_assert_eq!(render_progress(&text, &pr), text.clone());
            for (k, op, note) in &ops {
                match op {
                    0 => { let _ = record_attempt(&mut pr, *k, note); }
                    1 => { let _ = review_failed(&mut pr, *k, note); }
                    _ => { finish(&mut pr); }
                }
            }
            let out = render_progress(&text, &pr);
            let (a, b): (Vec<&str>, Vec<&str>) = (text.split_inclusive('\n').collect(), out.split_inclusive('\n').collect());
            proptest::prop_assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                if x != y {
                    proptest::prop_assert!(i == 2 || (6..6 + rows.len()).contains(&i), "line {} changed: {:?} -> {:?}", i, x, y);
                    proptest::prop_assert_eq!(x.ends_with("\r\n"), y.ends_with("\r\n"));
                }
            }
            let again = read_progress(&out);
            proptest::prop_assert!(again.is_ok(), "{:?}\n{}", again, out);
            if let Ok(again) = again {
                proptest::prop_assert_eq!(again.status, pr.status);
                for (r, m) in again.rows.iter().zip(&pr.rows) {
                    proptest::prop_assert_eq!(status_text(r.status, r.attempts), status_text(m.status, m.attempts));
                    proptest::prop_assert_eq!(escape_cell(&r.notes), escape_cell(&m.notes));
                }
                proptest::prop_assert_eq!(render_progress(&out, &again), out);
            }
        }

        #[test]
        fn scaffold_always_validates(desc in "(?s).{0,80}", tasks in proptest::collection::vec("(?s).{0,30}", 0..4), promise in ".{0,10}") {
            let (prd_text, progress_text) = scaffold(&desc, &tasks, &promise);
            let prd = read_prd(&prd_text);
            proptest::prop_assert!(prd.is_ok(), "{:?}\n{}", prd, prd_text);
            let pr = read_progress(&progress_text);
            proptest::prop_assert!(pr.is_ok(), "{:?}\n{}", pr, progress_text);
            if let (Ok(prd), Ok(pr)) = (prd, pr) {
                proptest::prop_assert!(validate(&prd, &p("PRD.md"), &pr, &p("PROGRESS.md")).is_ok());
            }
        }
    }
}
