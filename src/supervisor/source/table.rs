//! The task-table source (SPEC §3.2): one task per iteration; the agent owns only that task's
//! row, ralph records the attempt and writes the Status and Notes cells.

use std::path::{Path, PathBuf};

use super::{Judged, PromptCtx, stuck_paragraph};
use crate::error::{Error, Result};
use crate::supervisor::decide::Halt;
use crate::task::table;

/// The task table: `PRD.md` + `PROGRESS.md`, one task per iteration.
pub(crate) struct TableSource {
    pub(crate) prd_path: PathBuf,
    pub(crate) prd_rel: String,
    pub(crate) progress_path: PathBuf,
    pub(crate) progress_rel: String,
    pub(crate) prd: table::Prd,
    /// The table as of the end of the previous iteration.
    pub(crate) progress: table::Progress,
    /// The task and attempt this iteration works.
    pub(crate) current: Option<(u32, u32)>,
    /// `--review`: a second fresh agent run reviews every task marked DONE.
    pub(crate) review: bool,
    /// The table read after the agent, waiting for the reviewer's verdict.
    pub(crate) pending: Option<(table::Progress, String)>,
}

impl TableSource {
    pub(crate) fn prompt(&self, p: &PromptCtx<'_>) -> Result<String> {
        let Some((k, attempt)) = self.current else {
            return Ok(self.checks_prompt(p));
        };
        let turn = table::Turn {
            iteration: p.iteration,
            max_iterations: p.max_iterations,
            test_command: p.test_command,
        };
        let files = table::Files {
            prd: &self.prd_rel,
            progress: &self.progress_rel,
        };
        let mut text = table::task_prompt(&self.prd, k, attempt, &turn, &files);
        if p.stuck_alert {
            text.push('\n');
            text.push_str(&stuck_paragraph(p.stuck_streak, "finished no task"));
        }
        Ok(text)
    }

    /// Every task is DONE but the checks fail (SPEC §5.3: the tests are the task): the prompt
    /// asks for them to pass, and leaves the table as it is.
    fn checks_prompt(&self, p: &PromptCtx<'_>) -> String {
        let (prd, progress) = (&self.prd_rel, &self.progress_rel);
        let run = match p.test_command {
            Some(cmd) if !cmd.trim().is_empty() => format!("run `{}` and make it pass", cmd.trim()),
            _ => "make the project's checks pass".to_string(),
        };
        let mut text = format!(
            "# Ralph iteration {}/{}: every task is DONE, the checks fail\n\n\
             You are a Ralph executor with fresh context: you remember nothing of earlier \
             iterations. All state is in the files (the PRD, the progress table, the code, git \
             history).\n\n## Goal\n\n{}\n\n## Your task\n\n\
             Every task in {progress} is marked DONE, but the supervisor's checks fail (what they \
             said is below). The work is not complete until they pass.\n\n## Instructions\n\n\
             1. Read {prd} and {progress} for context, and `git log` for what was done.\n\
             2. Find why the checks fail and fix the work; {run}.\n\
             3. Do not change {progress} or {prd}.\n\
             4. Do not commit: ralph commits your work after this iteration.\n",
            p.iteration,
            p.max_iterations,
            self.prd.goal.trim()
        );
        if p.stuck_alert {
            text.push('\n');
            text.push_str(&stuck_paragraph(
                p.stuck_streak,
                "did not make the checks pass",
            ));
        }
        text
    }

    pub(crate) fn select_next(&mut self) {
        self.current =
            table::next_task(&self.progress).map(|k| (k, table::attempt_number(&self.progress, k)));
    }

    /// Re-read PROGRESS.md: only the current task's row may change (other rows' Status and
    /// Notes are put back, and rows removed, added or renumbered are tampering).
    pub(crate) fn judge(&mut self) -> Result<Judged> {
        let (k, _) = self.current.unwrap_or((0, 1));
        let original = match super::read_after_agent(&self.progress_path, &self.progress_rel) {
            Ok(t) => t,
            Err(Ok(gone)) => {
                return Ok(Judged {
                    tampered: vec![gone],
                    ..self.counts_now()
                });
            }
            Err(Err(e)) => return Err(Error::user(e.to_string())),
        };
        let after = table::parse_progress(Path::new(&self.progress_rel), &original)
            .map_err(super::table_error)?;
        let guard = table::guard_rows(&self.progress, after, k);
        if !guard.tampered.is_empty() {
            return Ok(Judged {
                tampered: guard.tampered,
                ..self.counts_now()
            });
        }
        let mut after = guard.kept;
        table::carry_attempts(&self.progress, &mut after);
        let done_now = row_done(&after, k);
        if done_now && self.review {
            self.pending = Some((after, original));
            return Ok(Judged {
                review_task: Some(k),
                restored: guard.restored,
                ..self.counts_now()
            });
        }
        if !done_now {
            table::record_attempt(&mut after, k, "the iteration ended without marking it DONE");
        }
        let mut judged = self.finalize(after, &original)?;
        judged.restored = guard.restored;
        Ok(judged)
    }

    /// The reviewer's verdict on the task it reviewed (`None`: it gave no REVIEW line).
    pub(crate) fn review_done(
        &mut self,
        verdict: Option<std::result::Result<(), String>>,
    ) -> Result<Judged> {
        let Some((mut after, original)) = self.pending.take() else {
            return Err(Error::user("no review is pending"));
        };
        let (k, _) = self.current.unwrap_or((0, 1));
        match verdict {
            Some(Ok(())) => {}
            Some(Err(reason)) => {
                table::review_failed(&mut after, k, &format!("review: {reason}"));
            }
            None => {
                table::review_failed(
                    &mut after,
                    k,
                    "review: the reviewer gave no REVIEW: PASS/FAIL line",
                );
            }
        }
        self.finalize(after, &original)
    }

    fn counts_now(&self) -> Judged {
        Judged::counts(table::done_count(&self.progress), self.progress.rows.len())
    }

    /// Close the iteration's judgement: finish the table when no task is left, write the cells
    /// ralph owns, and report.
    fn finalize(&mut self, mut after: table::Progress, original: &str) -> Result<Judged> {
        let (k, attempt) = self.current.unwrap_or((0, 1));
        let done_now = row_done(&after, k);
        let overall = table::next_task(&after)
            .is_none()
            .then(|| table::finish(&mut after));
        let text = table::render_progress(original, &after);
        if text != original {
            crate::state::write_atomic(&self.progress_path, text.as_bytes())?;
        }
        let figures = match self.current {
            Some(_) => table::figures(&after, k, attempt),
            None => format!(
                "{}/{} tasks done, checks",
                table::done_count(&after),
                after.rows.len()
            ),
        };
        let title = self
            .prd
            .tasks
            .iter()
            .find(|t| t.number == k)
            .map(|t| t.title.clone())
            .unwrap_or_default();
        self.progress = after;
        let halt = (overall == Some(table::OverallStatus::Partial)).then(|| {
            // No promise: it says the work is done, and a PARTIAL run's is not.
            let mut lines = table::summary(&self.progress);
            lines.insert(0, "## Status: PARTIAL — some tasks are BLOCKED".to_string());
            Halt::Partial(lines)
        });
        Ok(Judged {
            source_complete: overall == Some(table::OverallStatus::Complete),
            what: done_now.then(|| format!("task {k}: {title}")),
            figures: Some(figures),
            halt,
            ..self.counts_now()
        })
    }

    /// The promise on its own line, then the summary: a completed table's.
    pub(crate) fn closing_lines(&self) -> Vec<String> {
        let mut lines = vec![format!("<promise>{}</promise>", self.prd.promise)];
        lines.extend(table::summary(&self.progress));
        lines
    }

    pub(crate) fn remaining(&self) -> Vec<String> {
        self.progress
            .rows
            .iter()
            .filter(|r| r.status != table::RowStatus::Done)
            .map(|r| format!("task {}: {} ({:?})", r.number, r.task, r.status))
            .collect()
    }
}

fn row_done(p: &table::Progress, k: u32) -> bool {
    p.rows
        .iter()
        .any(|r| r.number == k && r.status == table::RowStatus::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What an agent can do to PROGRESS.md besides its own work.
    #[derive(Debug, Clone)]
    enum Act {
        /// Set row `i`'s status (0 PENDING, 1 DONE, 2 FAILED, 3 BLOCKED).
        Status(usize, u8),
        Delete(usize),
        Add,
        Renumber(usize),
    }

    fn act() -> impl Strategy<Value = Act> {
        prop_oneof![
            6 => (0..6usize, 0..4u8).prop_map(|(i, s)| Act::Status(i, s)),
            1 => (0..6usize).prop_map(Act::Delete),
            1 => Just(Act::Add),
            1 => (0..6usize).prop_map(Act::Renumber),
        ]
    }

    const STATUS: [&str; 4] = ["PENDING", "DONE", "FAILED (attempt 1/3)", "BLOCKED"];

    /// The table as the agent leaves it: (number, title, status text).
    fn render(rows: &[(u32, String, String)]) -> String {
        let mut s = String::from(
            "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|---|---|---|\n",
        );
        for (k, t, st) in rows {
            s.push_str(&format!("| {k} | {t} | {st} | |\n"));
        }
        s
    }

    fn source(dir: &std::path::Path, n: u32) -> TableSource {
        let titles: Vec<String> = (1..=n).map(|k| format!("Step {k}")).collect();
        let (prd_text, progress_text) = table::scaffold("Build it", &titles, "DONE");
        let prd_path = dir.join("PRD.md");
        let progress_path = dir.join("PROGRESS.md");
        std::fs::write(&prd_path, &prd_text).unwrap();
        std::fs::write(&progress_path, &progress_text).unwrap();
        TableSource {
            prd: table::parse_prd(Path::new("PRD.md"), &prd_text).unwrap(),
            progress: table::parse_progress(Path::new("PROGRESS.md"), &progress_text).unwrap(),
            prd_path,
            prd_rel: "PRD.md".into(),
            progress_path,
            progress_rel: "PROGRESS.md".into(),
            current: None,
            review: false,
            pending: None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// Whatever an agent writes into PROGRESS.md, one iteration completes at most its own
        /// task, and the table is judged complete only when every PRD task has its row, DONE,
        /// on disk.
        #[test]
        fn the_table_judge_completes_one_task_at_most_and_never_a_table_with_tasks_left(
            n in 2..5u32,
            iterations in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec(act(), 0..4)), 1..8),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut t = source(dir.path(), n);
            for (work, acts) in &iterations {
                t.select_next();
                let Some((k, _)) = t.current else { break };
                let before = table::done_count(&t.progress);
                let mut rows: Vec<(u32, String, String)> = t
                    .progress
                    .rows
                    .iter()
                    .map(|r| (r.number, r.task.clone(), format!("{:?}", r.status).to_uppercase()))
                    .collect();
                if *work && let Some(r) = rows.iter_mut().find(|r| r.0 == k) {
                    r.2 = "DONE".into();
                }
                for a in acts {
                    let len = rows.len();
                    match *a {
                        Act::Status(i, s) if len > 0 => rows[i % len].2 = STATUS[s as usize].into(),
                        Act::Delete(i) if len > 0 => {
                            rows.remove(i % len);
                        }
                        Act::Add => rows.push((99, "Extra".into(), "DONE".into())),
                        Act::Renumber(i) if len > 0 => rows[i % len].0 += 10,
                        _ => {}
                    }
                }
                std::fs::write(&t.progress_path, render(&rows)).unwrap();
                let j = match t.judge() {
                    Ok(j) => j,
                    // A table the agent left unreadable is an error, never a completion.
                    Err(_) => break,
                };
                if !j.tampered.is_empty() {
                    break;
                }
                prop_assert!(j.done <= before + 1, "{} -> {}: {rows:?}", before, j.done);
                if j.source_complete {
                    let text = std::fs::read_to_string(&t.progress_path).unwrap();
                    let on_disk = table::parse_progress(Path::new("PROGRESS.md"), &text).unwrap();
                    for task in &t.prd.tasks {
                        prop_assert!(
                            on_disk.rows.iter().any(|r| r.number == task.number
                                && r.status == table::RowStatus::Done),
                            "complete without task {}: {text}", task.number
                        );
                    }
                }
            }
        }
    }
}
