//! Task-table mode (SPEC §3.2): `PRD.md` (goal, numbered tasks with acceptance criteria, a
//! completion promise) and `PROGRESS.md` (a `## Status:` line and a `| # | Task | Status | Notes |`
//! table), the pure bookkeeping ralph does between iterations, and the prompts for this mode.
//!
//! A room per file: `prd` reads `PRD.md` (and plans under `docs/plans/`), `progress` reads
//! `PROGRESS.md` and rewrites only the cells ralph owns, `attempts` is the bookkeeping
//! (next task, FAILED n/3 → BLOCKED, the summary), `guard` keeps the rows the agent must not
//! touch, `prompts` builds the task and review prompts and reads the reviewer's verdict,
//! `planning` scaffolds the files, writes the planning prompt and matches plans. Both files
//! are read with the one Markdown reader ([`crate::markdown`]). Every parse failure is a
//! [`TableError`] naming the file and, where known, the 1-based line. Nothing here panics,
//! whatever the input.
//!
//! Attempts live in the Status cell: `FAILED (attempt 2/3)`, `BLOCKED (3/3 attempts)`; a plain
//! `FAILED` counts as one attempt, a plain `BLOCKED` as [`MAX_ATTEMPTS`].

mod attempts;
mod error;
mod guard;
mod planning;
mod prd;
mod progress;
mod prompts;

pub(crate) use attempts::{
    attempt_number, carry_attempts, done_count, figures, finish, next_task, record_attempt,
    review_failed, summary, validate,
};
pub(crate) use error::TableError;
pub(crate) use guard::guard_rows;
pub(crate) use planning::{find_plan, planning_prompt, scaffold};
pub(crate) use prd::parse_prd;
pub(crate) use progress::{parse_progress, render_progress};
pub(crate) use prompts::{Files, Turn, parse_review, review_prompt, task_prompt};

/// Attempts a task gets (1 initial + 2 retries) before it is `BLOCKED`.
pub(crate) const MAX_ATTEMPTS: u32 = 3;
/// The completion promise when `PRD.md` names none.
pub(crate) const DEFAULT_PROMISE: &str = "DONE";
/// The requirements file name.
pub(crate) const PRD_FILE: &str = "PRD.md";
/// The progress file name.
pub(crate) const PROGRESS_FILE: &str = "PROGRESS.md";

/// One task of `PRD.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrdTask {
    /// The task number from its heading.
    pub(crate) number: u32,
    /// The heading title.
    pub(crate) title: String,
    /// The task's text without its acceptance-criteria block, trimmed.
    pub(crate) body: String,
    /// The acceptance criteria, list markers and checkboxes removed.
    pub(crate) criteria: Vec<String>,
    /// 1-based line of the task heading.
    pub(crate) line: usize,
}

/// A parsed `PRD.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prd {
    /// The `# ` title (the file stem when there is none).
    pub(crate) title: String,
    /// The `## Goal` text.
    pub(crate) goal: String,
    /// The tasks, in file order.
    pub(crate) tasks: Vec<PrdTask>,
    /// The completion promise keyword ([`DEFAULT_PROMISE`] when absent).
    pub(crate) promise: String,
}

/// A row's Status cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowStatus {
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
pub(crate) struct Row {
    /// The `#` cell.
    pub(crate) number: u32,
    /// The Task cell (unescaped).
    pub(crate) task: String,
    /// The Status cell's keyword.
    pub(crate) status: RowStatus,
    /// Failed attempts so far (0 for `PENDING`; from the Status cell otherwise).
    pub(crate) attempts: u32,
    /// The Notes cell (unescaped: `\|` is `|`, `<br>` is a newline).
    pub(crate) notes: String,
    /// 1-based line of the row.
    pub(crate) line: usize,
}

/// The `## Status:` line of `PROGRESS.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverallStatus {
    /// Tasks remain.
    InProgress,
    /// Every task is `DONE`.
    Complete,
    /// The loop ended with tasks not `DONE`.
    Partial,
}

/// A parsed `PROGRESS.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The `## Status:` value.
    pub(crate) status: OverallStatus,
    /// The table rows, in file order.
    pub(crate) rows: Vec<Row>,
    /// 1-based line of the `## Status:` line (0 when built in memory).
    pub(crate) status_line: usize,
    /// 1-based line of the table header (0 when built in memory).
    pub(crate) table_line: usize,
}

/// What one attempt at a task came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptResult {
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

#[cfg(test)]
pub(super) mod fixtures {
    //! Documents and helpers the rooms' tests share.
    use super::*;
    use std::path::PathBuf;

    pub(super) const PRD: &str = "# Add OAuth

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

    pub(super) const PROGRESS: &str = "# Progress

## Status: IN_PROGRESS

| # | Task | Status | Notes |
|---|------|--------|-------|
| 1 | OAuth flow | DONE | shipped \\| tested |
| 2 | Sessions | FAILED (attempt 2/3) | db down |
| 3 | Docs | PENDING | |

Trailing text.
";

    pub(super) fn p(name: &str) -> PathBuf {
        PathBuf::from(name)
    }

    pub(super) fn read_prd(text: &str) -> Result<Prd, TableError> {
        parse_prd(&p("PRD.md"), text)
    }

    pub(super) fn read_progress(text: &str) -> Result<Progress, TableError> {
        parse_progress(&p("PROGRESS.md"), text)
    }

    pub(super) fn err(r: Result<impl std::fmt::Debug, TableError>) -> String {
        let e = r.expect_err("expected an error");
        assert!(e.hint().is_some());
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

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
                let turn = Turn { iteration: 1, max_iterations: 1, test_command: None };
                let files = Files { prd: "PRD.md", progress: "PROGRESS.md" };
                let _ = task_prompt(&prd, 1, 2, &turn, &files);
                let _ = review_prompt(&prd, 1, Some(""));
            }
        }
    }
}
