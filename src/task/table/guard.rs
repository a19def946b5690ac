//! Row integrity (SPEC §3.2): during an iteration the agent owns only the current task's row.
//!
//! [`guard_rows`] compares the table as it was before the iteration with the table the agent
//! left. Every other row's Status (with its attempts) and Notes are put back as they were, and
//! each change put back is described, so one iteration can complete at most its own task. Rows
//! the agent removed, added or renumbered cannot be put back: they are named as tampering, and
//! the caller halts (exit 8). The `## Status:` line is ralph's too and is put back the same way.
//!
//! Use: parse the agent's `PROGRESS.md`, `guard_rows(&before, after, k)`, log `restored`, halt
//! on `tampered`, then continue with `kept` ([`super::carry_attempts`], [`super::record_attempt`]
//! …) and write it with [`super::render_progress`], which rewrites the restored cells in place.

use std::collections::{HashMap, HashSet};

use super::progress::status_text;
use super::{Progress, Row, one_line};

/// What [`guard_rows`] made of the table the agent left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowGuard {
    /// The agent's table with every row but the current one holding its Status, attempts and
    /// Notes from before the iteration, and the `## Status:` value from before.
    pub(crate) kept: Progress,
    /// One line per change put back, e.g.
    /// `task 3: Status PENDING → DONE (only task 1 was being worked)`.
    pub(crate) restored: Vec<String>,
    /// Rows removed, added or renumbered, named (e.g. `row 3 (Docs) removed`): tampering.
    pub(crate) tampered: Vec<String>,
}

impl RowGuard {
    /// The agent removed, added or renumbered rows.
    #[cfg(test)]
    pub(crate) fn is_tampered(&self) -> bool {
        !self.tampered.is_empty()
    }
}

/// Keep every row but task `current`'s as it was in `before` (see the module docs).
///
/// Rows are matched by number. A row of `before` missing from `after` whose task text reappears
/// under a new number is "renumbered"; otherwise missing rows are "removed" and new numbers
/// "added". The current row is left as the agent wrote it (attempts are carried separately by
/// [`super::carry_attempts`]).
pub(crate) fn guard_rows(before: &Progress, after: Progress, current: u32) -> RowGuard {
    let mut kept = after;
    let mut restored = Vec::new();
    let old: HashMap<u32, &Row> = before.rows.iter().map(|r| (r.number, r)).collect();
    let why = format!("(only task {current} was being worked)");
    for row in &mut kept.rows {
        if row.number == current {
            continue;
        }
        let Some(was) = old.get(&row.number) else {
            continue;
        };
        let (was_status, now_status) = (
            status_text(was.status, was.attempts),
            status_text(row.status, row.attempts),
        );
        if was_status != now_status {
            restored.push(format!(
                "task {}: Status {was_status} → {now_status} {why}",
                row.number
            ));
            row.status = was.status;
            row.attempts = was.attempts;
        }
        if one_line(&was.notes) != one_line(&row.notes) {
            restored.push(format!(
                "task {}: Notes {:?} → {:?} {why}",
                row.number,
                shown(&was.notes),
                shown(&row.notes)
            ));
        }
        // A change of spacing alone is not worth a line, but the notes are put back all the same.
        row.notes.clone_from(&was.notes);
    }
    if kept.status != before.status {
        restored.push(format!(
            "## Status: {:?} → {:?} (ralph writes the status line)",
            before.status, kept.status
        ));
        kept.status = before.status;
    }
    let tampered = tampering(before, &kept);
    RowGuard {
        kept,
        restored,
        tampered,
    }
}

/// The rows removed, added or renumbered between `before` and `after`.
fn tampering(before: &Progress, after: &Progress) -> Vec<String> {
    let numbers = |p: &Progress| p.rows.iter().map(|r| r.number).collect::<HashSet<u32>>();
    let (had, has) = (numbers(before), numbers(after));
    let removed: Vec<&Row> = before
        .rows
        .iter()
        .filter(|r| !has.contains(&r.number))
        .collect();
    let mut added: Vec<&Row> = after
        .rows
        .iter()
        .filter(|r| !had.contains(&r.number))
        .collect();
    let same_task = |a: &Row, b: &Row| {
        let key = |r: &Row| one_line(&r.task).to_lowercase();
        !key(a).is_empty() && key(a) == key(b)
    };
    let mut out = Vec::new();
    for row in removed {
        match added.iter().position(|a| same_task(row, a)) {
            Some(i) => {
                let to = added.remove(i);
                out.push(format!(
                    "row {} ({}) renumbered to {}",
                    row.number,
                    shown(&row.task),
                    to.number
                ));
            }
            None => out.push(format!("row {} ({}) removed", row.number, shown(&row.task))),
        }
    }
    for row in added {
        out.push(format!("row {} ({}) added", row.number, shown(&row.task)));
    }
    out
}

/// A cell's text for a log line: one line, at most 80 characters.
fn shown(text: &str) -> String {
    let t = one_line(text);
    if t.chars().count() <= 80 {
        return t;
    }
    let cut: String = t.chars().take(79).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::table::fixtures::*;
    use crate::task::table::{OverallStatus, RowStatus, parse_progress, render_progress};
    use proptest::prelude::*;
    use std::path::Path;

    #[test]
    fn other_rows_are_put_back_and_logged() {
        let before = read_progress(PROGRESS).unwrap();
        let mut after = before.clone();
        // Working task 3: the agent finishes it, and also "finishes" task 2 and edits task 1.
        after.rows[2].status = RowStatus::Done;
        after.rows[2].notes = "docs written".into();
        after.rows[1].status = RowStatus::Done;
        after.rows[1].attempts = 0;
        after.rows[0].notes = "rewritten".into();
        after.status = OverallStatus::Complete;
        let g = guard_rows(&before, after, 3);
        assert!(!g.is_tampered());
        assert_eq!(
            g.restored,
            [
                "task 1: Notes \"shipped | tested\" → \"rewritten\" (only task 3 was being worked)",
                "task 2: Status FAILED (attempt 2/3) → DONE (only task 3 was being worked)",
                "## Status: InProgress → Complete (ralph writes the status line)",
            ]
        );
        let rows: Vec<(RowStatus, u32, &str)> = g
            .kept
            .rows
            .iter()
            .map(|r| (r.status, r.attempts, r.notes.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                (RowStatus::Done, 0, "shipped | tested"),
                (RowStatus::Failed, 2, "db down"),
                (RowStatus::Done, 0, "docs written"),
            ]
        );
        assert_eq!(g.kept.status, OverallStatus::InProgress);
    }

    #[test]
    fn rows_removed_added_or_renumbered_are_tampering() {
        let before = read_progress(PROGRESS).unwrap();
        let cases: Vec<(&str, Vec<&str>)> = vec![
            (
                "## Status: IN_PROGRESS\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | OAuth flow | DONE | |\n| 2 | Sessions | DONE | |\n",
                vec!["row 3 (Docs) removed"],
            ),
            (
                "## Status: IN_PROGRESS\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | OAuth flow | DONE | |\n| 2 | Sessions | FAILED (attempt 2/3) | |\n| 3 | Docs | PENDING | |\n| 4 | Extra | DONE | |\n",
                vec!["row 4 (Extra) added"],
            ),
            (
                "## Status: IN_PROGRESS\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | OAuth flow | DONE | |\n| 5 | Sessions | DONE | |\n| 3 | Docs | PENDING | |\n",
                vec!["row 2 (Sessions) renumbered to 5"],
            ),
            (
                "## Status: IN_PROGRESS\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 7 | Other | DONE | |\n",
                vec![
                    "row 1 (OAuth flow) removed",
                    "row 2 (Sessions) removed",
                    "row 3 (Docs) removed",
                    "row 7 (Other) added",
                ],
            ),
        ];
        for (text, want) in cases {
            let after = parse_progress(Path::new("PROGRESS.md"), text).unwrap();
            let g = guard_rows(&before, after, 3);
            assert_eq!(g.tampered, want, "{text}");
            assert!(g.is_tampered());
        }
    }

    #[test]
    fn render_writes_the_restored_cells_back() {
        let before = read_progress(PROGRESS).unwrap();
        let agent = PROGRESS
            .replace(
                "| 2 | Sessions | FAILED (attempt 2/3) | db down |",
                "| 2 | Sessions | DONE | fixed it |",
            )
            .replace("| 3 | Docs | PENDING | |", "| 3 | Docs | DONE | written |");
        let after = read_progress(&agent).unwrap();
        let g = guard_rows(&before, after, 3);
        assert_eq!(g.restored.len(), 2, "{:?}", g.restored);
        let out = render_progress(&agent, &g.kept);
        assert_eq!(
            out,
            PROGRESS.replace("| 3 | Docs | PENDING | |", "| 3 | Docs | DONE | written |")
        );
    }

    fn status() -> impl Strategy<Value = (RowStatus, u32)> {
        prop_oneof![
            Just((RowStatus::Pending, 0)),
            Just((RowStatus::Done, 0)),
            (1u32..3).prop_map(|a| (RowStatus::Failed, a)),
            Just((RowStatus::Blocked, 3)),
        ]
    }

    fn table(rows: &[(u32, String, (RowStatus, u32), String)]) -> Progress {
        Progress {
            status: OverallStatus::InProgress,
            rows: rows
                .iter()
                .map(|(n, task, (status, attempts), notes)| Row {
                    number: *n,
                    task: task.clone(),
                    status: *status,
                    attempts: *attempts,
                    notes: notes.clone(),
                    line: 0,
                })
                .collect(),
            status_line: 0,
            table_line: 0,
        }
    }

    proptest! {
        #[test]
        fn other_rows_never_change_and_missing_rows_are_named(
            rows in proptest::collection::vec((status(), "[a-z ]{0,6}"), 1..8),
            current in 1u32..9,
            edits in proptest::collection::vec((0usize..8, status(), "[a-z|]{0,6}"), 0..10),
            remove in proptest::collection::vec(0usize..8, 0..3),
            add in proptest::collection::vec(9u32..20, 0..3),
            renumber in proptest::option::of((0usize..8, 30u32..40)),
        ) {
            let rows: Vec<(u32, String, (RowStatus, u32), String)> = rows
                .into_iter()
                .enumerate()
                .map(|(i, (s, notes))| (i as u32 + 1, format!("task {i}"), s, notes))
                .collect();
            let before = table(&rows);
            let mut after_rows = rows.clone();
            for (i, s, notes) in &edits {
                if let Some(r) = after_rows.get_mut(*i) {
                    r.2 = *s;
                    r.3 = notes.clone();
                }
            }
            let mut gone = Vec::new();
            for i in &remove {
                if *i < after_rows.len() {
                    gone.push(after_rows.remove(*i).0);
                }
            }
            let removed_any = !gone.is_empty();
            let mut moved = None;
            if let Some((i, to)) = renumber && let Some(r) = after_rows.get_mut(i) {
                moved = Some((r.0, to));
                r.0 = to;
            }
            for n in &add {
                if !after_rows.iter().any(|r| r.0 == *n) {
                    after_rows.push((*n, format!("new {n}"), (RowStatus::Done, 0), String::new()));
                }
            }
            let g = guard_rows(&before, table(&after_rows), current);
            for row in &g.kept.rows {
                if row.number == current {
                    continue;
                }
                if let Some(was) = before.rows.iter().find(|r| r.number == row.number) {
                    prop_assert_eq!((row.status, row.attempts, &row.notes), (was.status, was.attempts, &was.notes));
                }
            }
            prop_assert_eq!(g.kept.status, before.status);
            for n in gone {
                prop_assert!(g.tampered.iter().any(|t| t.starts_with(&format!("row {n} ("))), "{} not in {:?}", n, g.tampered);
            }
            if let Some((from, to)) = moved {
                prop_assert!(g.tampered.iter().any(|t| t == &format!("row {from} (task {}) renumbered to {to}", from - 1)), "{:?}", g.tampered);
            }
            for n in &add {
                prop_assert!(g.tampered.iter().any(|t| t.starts_with(&format!("row {n} ("))), "{:?}", g.tampered);
            }
            prop_assert_eq!(g.is_tampered(), removed_any || moved.is_some() || !add.is_empty());
        }

        #[test]
        fn the_file_written_back_holds_the_other_rows_as_before(
            rows in proptest::collection::vec((status(), "[a-z|<> ]{0,8}"), 1..6),
            current in 1u32..7,
            edits in proptest::collection::vec((0usize..6, status(), "[a-z|\\\\ ]{0,8}"), 0..8),
        ) {
            let mut text = String::from("# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|---|---|---|\n");
            for (i, ((s, a), notes)) in rows.iter().enumerate() {
                let notes = crate::task::table::progress::escape_cell(notes);
                text.push_str(&format!("| {} | task {i} | {} | {notes} |\n", i + 1, status_text(*s, *a)));
            }
            let before = parse_progress(Path::new("PROGRESS.md"), &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut agent = before.clone();
            for (i, (s, a), notes) in &edits {
                if let Some(r) = agent.rows.get_mut(*i) {
                    r.status = *s;
                    r.attempts = *a;
                    r.notes = notes.clone();
                }
            }
            let agent_text = render_progress(&text, &agent);
            let after = parse_progress(Path::new("PROGRESS.md"), &agent_text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let g = guard_rows(&before, after, current);
            prop_assert!(!g.is_tampered());
            let out = render_progress(&agent_text, &g.kept);
            let back = parse_progress(Path::new("PROGRESS.md"), &out).map_err(|e| TestCaseError::fail(e.to_string()))?;
            for (r, was) in back.rows.iter().zip(&before.rows) {
                if r.number != current {
                    prop_assert_eq!(status_text(r.status, r.attempts), status_text(was.status, was.attempts));
                    prop_assert_eq!(one_line(&r.notes), one_line(&was.notes));
                }
            }
            if current as usize > rows.len() {
                prop_assert_eq!(out, text);
            }
        }
    }
}
