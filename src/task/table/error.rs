//! Why `PRD.md` or `PROGRESS.md` could not be used: [`TableError`], with file, line and hint.

use std::path::PathBuf;

/// Why `PRD.md` or `PROGRESS.md` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TableError {
    /// No goal: neither a `Goal` heading nor a `Goal:` line.
    #[error("{}: no `## Goal` section", .path.display())]
    MissingGoal {
        /// The file.
        path: PathBuf,
    },
    /// The goal section (or `Goal:` line) is empty.
    #[error("{}:{line}: the goal is empty", .path.display())]
    EmptyGoal {
        /// The file.
        path: PathBuf,
        /// The heading (or line) of the goal.
        line: usize,
    },
    /// No tasks in any accepted form.
    #[error(
        "{}: no tasks{}: expected a numbered list (`1. Title`) under a `## Tasks` heading or a \
         `**Tasks:**` line, or task headings (`### Task 1: Title`, `### 1. Title`)",
        .path.display(),
        .line.map(|l| format!(" in the Tasks section at line {l}")).unwrap_or_default()
    )]
    NoTasks {
        /// The file.
        path: PathBuf,
        /// The `Tasks` heading or line, when there is one.
        line: Option<usize>,
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
    pub(crate) fn hint(&self) -> Option<String> {
        let hint = match self {
            TableError::MissingGoal { .. } => {
                "write the goal as a `## Goal` heading with a sentence under it, or a line \
                 `Goal: …` / `**Goal:** …`"
            }
            TableError::EmptyGoal { .. } => {
                "write a one-sentence goal under `## Goal` (or after `**Goal:**`)"
            }
            TableError::NoTasks { .. } => {
                "write each task as `1. Title` with its criteria nested under it (`- [ ] …` items \
                 or `Acceptance: …` lines), or as a `### Task 1: Title` heading followed by \
                 `**Acceptance Criteria:**` and `- [ ] …` items"
            }
            TableError::BadTaskNumber { .. } => "number the tasks 1, 2, 3, …",
            TableError::EmptyTaskTitle { .. } => {
                "write the title after the number: `### Task 1: title`"
            }
            TableError::DuplicateTask { .. } => "give every task its own number",
            TableError::NoCriteria { .. } => {
                "give the task criteria: `- [ ] …` items or `Acceptance: …` lines nested under \
                 `1. Title`, or `**Acceptance Criteria:**` followed by `- [ ] …` items under a \
                 task heading"
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

    /// The 1-based line the error refers to, when known.
    #[cfg(test)]
    pub(crate) fn line(&self) -> Option<usize> {
        match self {
            TableError::MissingGoal { .. }
            | TableError::MissingStatus { .. }
            | TableError::NoTable { .. } => None,
            TableError::NoTasks { line, .. } => *line,
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
