//! The bookkeeping between iterations: the PRD and the table agree, the next task, attempts
//! (FAILED n/3 → BLOCKED), the end of the loop, the ITER figures and the summary.

use std::collections::HashSet;
use std::path::Path;

use super::{
    AttemptResult, MAX_ATTEMPTS, OverallStatus, Prd, Progress, Row, RowStatus, TableError, one_line,
};

/// Check that `PRD.md` and `PROGRESS.md` have the same task numbers: every task has a row
/// (else an error at the table header naming the task's PRD line) and every row has a task
/// (else an error at the row).
pub(crate) fn validate(
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
pub(crate) fn next_task(progress: &Progress) -> Option<u32> {
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
pub(crate) fn attempt_number(progress: &Progress, k: u32) -> u32 {
    progress
        .rows
        .iter()
        .find(|r| r.number == k)
        .map_or(1, |r| r.attempts.saturating_add(1).min(MAX_ATTEMPTS))
}

/// Carry attempt counts from the table as it was before an iteration into the table the agent
/// left (the agent rewrites a Status cell to plain `DONE`, losing `(attempt 2/3)`). Call before
/// [`record_attempt`] so retries and review failures count correctly.
pub(crate) fn carry_attempts(before: &Progress, after: &mut Progress) {
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
pub(crate) fn record_attempt(progress: &mut Progress, k: u32, note: &str) -> AttemptResult {
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
pub(crate) fn review_failed(progress: &mut Progress, k: u32, reason: &str) -> AttemptResult {
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
pub(crate) fn finish(progress: &mut Progress) -> OverallStatus {
    let status = if progress.rows.iter().all(|r| r.status == RowStatus::Done) {
        OverallStatus::Complete
    } else {
        OverallStatus::Partial
    };
    progress.status = status;
    status
}

/// Rows that are `DONE`.
pub(crate) fn done_count(progress: &Progress) -> usize {
    progress
        .rows
        .iter()
        .filter(|r| r.status == RowStatus::Done)
        .count()
}

/// The ITER figures for this mode: `{done}/{total} tasks done, task {k} attempt {a}/3`.
pub(crate) fn figures(progress: &Progress, k: u32, attempt: u32) -> String {
    format!(
        "{}/{} tasks done, task {k} attempt {attempt}/{MAX_ATTEMPTS}",
        done_count(progress),
        progress.rows.len()
    )
}

/// The end-of-run summary: `Tasks: N total, X done, Y blocked` (plus failed/pending counts when
/// any), then the blocked tasks with their notes.
pub(crate) fn summary(progress: &Progress) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::table::fixtures::*;
    use crate::task::table::progress::status_text;

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
}
