//! The task sources the loop can work (SPEC §3): what each one puts in the prompt, how it is
//! judged after the agent ran, and which verdict command (if any) decides.

use std::path::{Path, PathBuf};

use super::decide::Halt;
use super::prompt;
use super::{newly_checked, regressions, tampered};
use crate::agent::Invocation;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::task::checklist::Checklist;
use crate::task::cpm::{self, Phase, Targets};
use crate::task::document::load_task_file;
use crate::task::table;
use crate::task::verdict::{Verdict, VerdictClass};

/// The task source of a run.
pub enum Source {
    Checklist(ChecklistSource),
    Cpm(CpmSource),
    Table(TableSource),
}

/// The task table: `PRD.md` + `PROGRESS.md`, one task per iteration.
pub struct TableSource {
    pub prd_path: PathBuf,
    pub prd_rel: String,
    pub progress_path: PathBuf,
    pub progress_rel: String,
    pub prd: table::Prd,
    /// The table as of the end of the previous iteration.
    pub progress: table::Progress,
    /// The task and attempt this iteration works.
    pub current: Option<(u32, u32)>,
    /// `--review`: a second fresh agent run reviews every task marked DONE.
    pub review: bool,
    /// The table read after the agent, waiting for the reviewer's verdict.
    pub pending: Option<(table::Progress, String)>,
}

pub struct ChecklistSource {
    /// Absolute path of the task file.
    pub path: PathBuf,
    /// The same, relative to the repository root (as the prompt names it).
    pub rel: String,
    /// The checklist as of the end of the previous iteration.
    pub previous: Checklist,
    /// Unchecked criteria at the start of the run (normalised): their removal is tampering.
    pub baseline: Vec<String>,
}

pub struct CpmSource {
    pub root: PathBuf,
    pub targets: Targets,
    /// The coverage roll-up script; without one, only the generic verdict command decides.
    pub rollup: Option<PathBuf>,
    pub phase: Phase,
    /// The planning iteration (`/cpm:epics`) already ran in this run.
    pub planned: bool,
    pub story_filter: Option<String>,
    pub test_runner: Option<String>,
    pub resuming: bool,
    /// The last roll-up SUMMARY.
    pub last_summary: Option<String>,
    /// The iteration log: `docs/plans/.cpm-ralph-log-{run_id}.md`.
    pub log: PathBuf,
}

/// What the source says after the agent ran.
pub struct Judged {
    pub done: usize,
    pub total: usize,
    pub source_complete: bool,
    pub tampered: Vec<String>,
    pub regressions: Vec<String>,
    /// The first newly finished item, for the commit subject.
    pub what: Option<String>,
    /// The ITER figures, when the source has its own (else `{done}/{total} {unit}`).
    pub figures: Option<String>,
    /// The task a reviewer must look at before the judgement is final (table `--review`).
    pub review_task: Option<u32>,
    /// A halt the source itself calls for (a table that ended PARTIAL).
    pub halt: Option<Halt>,
}

impl Judged {
    /// A judgement with counts only: nothing finished, tampered or regressed.
    fn counts(done: usize, total: usize) -> Judged {
        Judged {
            done,
            total,
            source_complete: false,
            tampered: Vec::new(),
            regressions: Vec::new(),
            what: None,
            figures: None,
            review_task: None,
            halt: None,
        }
    }
}

/// Everything the prompt of one iteration depends on besides the source.
pub struct PromptCtx<'a> {
    pub iteration: u32,
    pub max_iterations: u32,
    pub test_command: Option<&'a str>,
    pub stuck_alert: bool,
    pub stuck_streak: u32,
    pub completion_promise: Option<&'a str>,
}

impl Source {
    /// The mode as `status` reports it.
    pub fn mode(&self) -> &'static str {
        match self {
            Source::Checklist(_) => "checklist",
            Source::Cpm(c) if c.targets.is_spec() => "cpm-spec",
            Source::Cpm(_) => "cpm-epic",
            Source::Table(_) => "table",
        }
    }

    /// What the figures count, for display.
    pub fn unit(&self) -> &'static str {
        match self {
            Source::Checklist(_) => "criteria",
            Source::Cpm(_) => "requirements",
            Source::Table(_) => "tasks",
        }
    }

    /// Done and total as of the last judgement, for display.
    pub fn counts(&self) -> (usize, usize) {
        match self {
            Source::Checklist(c) => (c.previous.done(), c.previous.total()),
            Source::Cpm(c) => cpm_counts(c.last_summary.as_deref()),
            Source::Table(t) => (table::done_count(&t.progress), t.progress.rows.len()),
        }
    }

    /// `RALPH_TASK_FILE` for the agent.
    pub fn task_file(&self) -> String {
        match self {
            Source::Checklist(c) => c.path.to_string_lossy().into_owned(),
            Source::Cpm(c) => match &c.targets {
                Targets::Spec(s) => c.root.join(s).to_string_lossy().into_owned(),
                Targets::Epics(e) => e
                    .first()
                    .map(|p| c.root.join(p).to_string_lossy().into_owned())
                    .unwrap_or_default(),
            },
            Source::Table(t) => t.prd_path.to_string_lossy().into_owned(),
        }
    }

    /// Where the ITER records go.
    pub fn iter_log(&self, default: &Path) -> PathBuf {
        match self {
            Source::Checklist(_) | Source::Table(_) => default.to_path_buf(),
            Source::Cpm(c) => c.root.join(&c.log),
        }
    }

    pub fn prompt(&self, p: &PromptCtx<'_>) -> Result<String> {
        match self {
            Source::Checklist(c) => {
                let next = c.previous.remaining().next().map(|x| x.text.clone());
                Ok(prompt::checklist_prompt(&prompt::PromptInput {
                    iteration: p.iteration,
                    max_iterations: p.max_iterations,
                    task_file: &c.rel,
                    next_criterion: next.as_deref(),
                    done: c.previous.done(),
                    total: c.previous.total(),
                    test_command: p.test_command,
                    stuck_alert: p.stuck_alert,
                    stuck_streak: p.stuck_streak,
                    completion_promise: p.completion_promise,
                }))
            }
            Source::Cpm(c) => {
                let epics = c.epics()?;
                let budget = cpm::task_budget(&c.root, &epics).ok();
                let spec = match &c.targets {
                    Targets::Spec(s) => Some(s.as_path()),
                    Targets::Epics(_) => None,
                };
                let mut text = cpm::prompt(&cpm::PromptParams {
                    mode_spec: spec,
                    epics: &epics,
                    phase: c.phase,
                    iteration: p.iteration,
                    max_iterations: p.max_iterations,
                    story_filter: c.story_filter.as_deref(),
                    test_runner: c.test_runner.as_deref(),
                    resuming: c.resuming || p.iteration > 1,
                    task_budget: budget,
                });
                if p.stuck_alert {
                    text.push_str(&format!(
                        "\n\n⚠️ {}: the last {} iterations did not move the roll-up's figures. \
                         Try a COMPLETELY DIFFERENT approach to the unverified rows.",
                        prompt::STUCK_ALERT,
                        p.stuck_streak
                    ));
                }
                Ok(text)
            }
            Source::Table(t) => {
                let Some((k, attempt)) = t.current else {
                    return Err(Error::user("no task is left to work in the table"));
                };
                let mut text = table::task_prompt(
                    &t.prd,
                    k,
                    attempt,
                    p.iteration,
                    p.max_iterations,
                    p.test_command,
                    &t.prd_rel,
                    &t.progress_rel,
                );
                if p.stuck_alert {
                    text.push_str(&format!(
                        "\n⚠️ {}: the last {} iterations finished no task. Try a COMPLETELY \
                         DIFFERENT approach.\n",
                        prompt::STUCK_ALERT,
                        p.stuck_streak
                    ));
                }
                Ok(text)
            }
        }
    }

    /// Pick what the next iteration works (table mode: the next task and its attempt).
    pub fn select_next(&mut self) {
        if let Source::Table(t) = self {
            t.current =
                table::next_task(&t.progress).map(|k| (k, table::attempt_number(&t.progress, k)));
        }
    }

    /// Read the source after the agent ran.
    pub fn judge(&mut self) -> Result<Judged> {
        match self {
            Source::Checklist(c) => {
                let current = load_task_file(&c.path)?.checklist;
                let judged = Judged {
                    done: current.done(),
                    total: current.total(),
                    source_complete: current.total() > 0 && current.done() == current.total(),
                    tampered: tampered(&c.baseline, &current),
                    regressions: regressions(&c.previous, &current),
                    what: newly_checked(&c.previous, &current).into_iter().next(),
                    figures: None,
                    review_task: None,
                    halt: None,
                };
                c.previous = current;
                Ok(judged)
            }
            Source::Cpm(c) => {
                // Only the roll-up's exit code completes a CPM run.
                let (done, total) = cpm_counts(c.last_summary.as_deref());
                Ok(Judged::counts(done, total))
            }
            Source::Table(t) => {
                let (k, _) = t.current.unwrap_or((0, 1));
                let original = std::fs::read_to_string(&t.progress_path)
                    .map_err(|e| Error::file("read", &t.progress_path, e))?;
                let mut after = table::parse_progress(Path::new(&t.progress_rel), &original)
                    .map_err(table_error)?;
                table::carry_attempts(&t.progress, &mut after);
                let done_now = after
                    .rows
                    .iter()
                    .any(|r| r.number == k && r.status == table::RowStatus::Done);
                if done_now && t.review {
                    t.pending = Some((after, original));
                    return Ok(Judged {
                        review_task: Some(k),
                        ..Judged::counts(table::done_count(&t.progress), t.progress.rows.len())
                    });
                }
                if !done_now {
                    table::record_attempt(
                        &mut after,
                        k,
                        "the iteration ended without marking it DONE",
                    );
                }
                t.finalize(after, &original)
            }
        }
    }

    /// The reviewer's verdict on the task it reviewed (`None`: it gave no REVIEW line).
    pub fn review_done(
        &mut self,
        verdict: Option<std::result::Result<(), String>>,
    ) -> Result<Judged> {
        let Source::Table(t) = self else {
            return Err(Error::user("only a task table is reviewed"));
        };
        let Some((mut after, original)) = t.pending.take() else {
            return Err(Error::user("no review is pending"));
        };
        let (k, _) = t.current.unwrap_or((0, 1));
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
        t.finalize(after, &original)
    }

    /// The reviewer's prompt for a task (table `--review`).
    pub fn review_prompt(&self, k: u32, test_command: Option<&str>) -> Option<String> {
        match self {
            Source::Table(t) => Some(table::review_prompt(&t.prd, k, test_command)),
            _ => None,
        }
    }

    /// The command whose exit code decides: the CPM roll-up, else the configured one.
    pub fn verdict_invocation(&self, settings: &Settings) -> Option<(String, Invocation)> {
        let shell = |cmd: &str| Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), cmd.into()],
            stdin: None,
            env: Vec::new(),
        };
        match self {
            Source::Cpm(CpmSource {
                rollup: Some(r),
                targets,
                ..
            }) => {
                // `bash script …`: plugin caches do not always keep the executable bit.
                let argv = cpm::rollup_argv(r, targets);
                let display = format!("bash {}", argv.join(" "));
                Some((
                    display,
                    Invocation {
                        program: "bash".into(),
                        args: argv.into_iter().map(Into::into).collect(),
                        stdin: None,
                        env: Vec::new(),
                    },
                ))
            }
            _ => settings
                .verdict_command
                .as_ref()
                .map(|c| (c.clone(), shell(c))),
        }
    }

    /// Classify a verdict run; CPM reads its records the roll-up's way.
    pub fn verdict(&self, exit_code: i32, stdout: &str) -> Verdict {
        match self {
            Source::Cpm(c) if c.rollup.is_some() => {
                let mut v = Verdict::from_output(exit_code, stdout);
                if exit_code == 5 {
                    v.class = VerdictClass::TargetOnly(cpm::target_only_rows(stdout));
                }
                v
            }
            _ => Verdict::from_output(exit_code, stdout),
        }
    }

    /// Apply the spec-mode phase predicate after a roll-up; `Some(halt)` ends the run.
    pub fn after_verdict(&mut self, v: &Verdict) -> Option<Halt> {
        let Source::Cpm(c) = self else {
            return None;
        };
        c.last_summary = v.summary.clone().or(c.last_summary.take());
        if !c.targets.is_spec() {
            return None;
        }
        let untraced = v.summary.as_deref().and_then(cpm::untraced);
        match (v.exit_code, untraced) {
            (4, _) if c.planned => Some(Halt::Partial(vec![
                "/cpm:epics already ran in this run, and the roll-up still finds no matrix for the spec."
                    .into(),
                "Running it twice would write a second set of epics; check the epics it wrote."
                    .into(),
            ])),
            (4, _) => {
                c.phase = Phase::Planning;
                None
            }
            (3, Some(0)) => {
                c.phase = Phase::Delivery;
                None
            }
            // Epics exist but do not cover the spec: a second /cpm:epics cannot fix that.
            (3, Some(u)) => Some(partial_spec(u, v)),
            _ => None,
        }
    }

    /// A planning iteration just ran: never again in this run (the roll-up decides what next).
    pub fn mark_planning_ran(&mut self) {
        if let Source::Cpm(c) = self
            && c.phase == Phase::Planning
        {
            c.planned = true;
            c.phase = Phase::Delivery;
        }
    }

    pub fn remaining(&self) -> Vec<String> {
        match self {
            Source::Checklist(c) => c.previous.remaining().map(|x| x.text.clone()).collect(),
            Source::Cpm(_) => Vec::new(),
            Source::Table(t) => t
                .progress
                .rows
                .iter()
                .filter(|r| r.status != table::RowStatus::Done)
                .map(|r| format!("task {}: {} ({:?})", r.number, r.task, r.status))
                .collect(),
        }
    }

    /// Lines printed beside a completion (CPM: the promise word and the COVERAGE line).
    pub fn completion_lines(&self) -> Vec<String> {
        match self {
            Source::Checklist(_) => Vec::new(),
            Source::Cpm(c) => {
                let (word, coverage) =
                    cpm::completion_lines(c.targets.is_spec(), c.last_summary.as_deref());
                vec![coverage, word]
            }
            Source::Table(t) => t.closing_lines(),
        }
    }
}

impl TableSource {
    /// Close the iteration's judgement: finish the table when no task is left, write the cells
    /// ralph owns, and report.
    fn finalize(&mut self, mut after: table::Progress, original: &str) -> Result<Judged> {
        let (k, attempt) = self.current.unwrap_or((0, 1));
        let done_now = after
            .rows
            .iter()
            .any(|r| r.number == k && r.status == table::RowStatus::Done);
        let overall = if table::next_task(&after).is_none() {
            Some(table::finish(&mut after))
        } else {
            None
        };
        let text = table::render_progress(original, &after);
        if text != original {
            crate::state::write_atomic(&self.progress_path, text.as_bytes())?;
        }
        let figures = table::figures(&after, k, attempt);
        let title = self
            .prd
            .tasks
            .iter()
            .find(|t| t.number == k)
            .map(|t| t.title.clone())
            .unwrap_or_default();
        self.progress = after;
        let halt = (overall == Some(table::OverallStatus::Partial)).then(|| {
            let mut lines = self.closing_lines();
            lines.insert(0, "## Status: PARTIAL — some tasks are BLOCKED".to_string());
            Halt::Partial(lines)
        });
        Ok(Judged {
            source_complete: overall == Some(table::OverallStatus::Complete),
            what: done_now.then(|| format!("task {k}: {title}")),
            figures: Some(figures),
            halt,
            ..Judged::counts(table::done_count(&self.progress), self.progress.rows.len())
        })
    }

    /// The promise on its own line, then the summary.
    fn closing_lines(&self) -> Vec<String> {
        let mut lines = vec![format!("<promise>{}</promise>", self.prd.promise)];
        lines.extend(table::summary(&self.progress));
        lines
    }
}

impl CpmSource {
    /// The epics this iteration works: the resolved targets, or the spec's epics now.
    pub fn epics(&self) -> Result<Vec<PathBuf>> {
        match &self.targets {
            Targets::Epics(e) => Ok(e.clone()),
            Targets::Spec(s) => Ok(cpm::epics_for_spec(&self.root, s)
                .map_err(cpm_error)?
                .into_iter()
                .map(|e| e.path)
                .collect()),
        }
    }
}

fn partial_spec(untraced: u64, v: &Verdict) -> Halt {
    let mut lines = vec![format!(
        "/cpm:epics ran, but {untraced} requirement(s) of the spec are still untraced: the epics on disk cover part of it."
    )];
    if let Some(s) = &v.summary {
        lines.push(s.clone());
    }
    lines.push(
        "The epic docs are left as they are; plan the missing requirements, then run again.".into(),
    );
    Halt::Partial(lines)
}

/// Requirements delivered / counted, from a SUMMARY record (0/0 when there is none).
fn cpm_counts(summary: Option<&str>) -> (usize, usize) {
    summary
        .and_then(cpm::summary_counts)
        .map_or((0, 0), |c| (c.delivered as usize, c.requirements as usize))
}

pub fn table_error(e: table::TableError) -> Error {
    let hint = e.hint();
    let err = Error::user(e.to_string());
    match hint {
        Some(h) => err.with_hint(h),
        None => err,
    }
}

pub fn cpm_error(e: cpm::CpmError) -> Error {
    let usage = e.is_usage();
    let hint = e.hint();
    let err = if usage {
        Error::usage(e.to_string())
    } else {
        Error::user(e.to_string())
    };
    match hint {
        Some(h) => err.with_hint(h),
        None => err,
    }
}
