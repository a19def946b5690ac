//! The CPM source (SPEC §3.4): the skill's prompt over the epics, the coverage roll-up as the
//! verdict, and spec mode's phase rule.

use std::path::PathBuf;

use super::{PromptCtx, stuck_paragraph};
use crate::agent::Invocation;
use crate::error::Result;
use crate::supervisor::decide::Halt;
use crate::task::cpm::{self, Phase, Targets};
use crate::task::verdict::{Verdict, VerdictClass};

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

impl CpmSource {
    /// The epics this iteration works: the resolved targets, or the spec's epics now.
    pub fn epics(&self) -> Result<Vec<PathBuf>> {
        match &self.targets {
            Targets::Epics(e) => Ok(e.clone()),
            Targets::Spec(s) => Ok(cpm::epics_for_spec(&self.root, s)
                .map_err(super::cpm_error)?
                .into_iter()
                .map(|e| e.path)
                .collect()),
        }
    }

    pub fn prompt(&self, p: &PromptCtx<'_>) -> Result<String> {
        let epics = self.epics()?;
        let budget = cpm::task_budget(&self.root, &epics).ok();
        let spec = match &self.targets {
            Targets::Spec(s) => Some(s.as_path()),
            Targets::Epics(_) => None,
        };
        let mut text = cpm::prompt(&cpm::PromptParams {
            mode_spec: spec,
            epics: &epics,
            phase: self.phase,
            iteration: p.iteration,
            max_iterations: p.max_iterations,
            story_filter: self.story_filter.as_deref(),
            test_runner: self.test_runner.as_deref(),
            resuming: self.resuming || p.iteration > 1,
            task_budget: budget,
        });
        if p.stuck_alert {
            text.push_str("\n\n");
            text.push_str(&stuck_paragraph(
                p.stuck_streak,
                "did not move the roll-up's figures",
            ));
        }
        Ok(text)
    }

    /// Requirements delivered / counted, from the last SUMMARY record (0/0 when there is none).
    pub fn counts(&self) -> (usize, usize) {
        self.last_summary
            .as_deref()
            .and_then(cpm::summary_counts)
            .map_or((0, 0), |c| (c.delivered as usize, c.requirements as usize))
    }

    /// `bash {rollup} --epic … --verdict` (plugin caches do not always keep the executable bit).
    pub fn rollup_invocation(&self) -> Option<(String, Invocation)> {
        let r = self.rollup.as_ref()?;
        let argv = cpm::rollup_argv(r, &self.targets);
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

    /// Classify a roll-up run the roll-up's way.
    pub fn verdict(&self, exit_code: i32, stdout: &str) -> Verdict {
        let mut v = Verdict::from_output(exit_code, stdout);
        if exit_code == 5 {
            v.class = VerdictClass::TargetOnly(cpm::target_only_rows(stdout));
        }
        v
    }

    /// Apply the spec-mode phase predicate after a roll-up; `Some(halt)` ends the run.
    pub fn after_verdict(&mut self, v: &Verdict) -> Option<Halt> {
        self.last_summary = v.summary.clone().or(self.last_summary.take());
        if !self.targets.is_spec() {
            return None;
        }
        let untraced = v.summary.as_deref().and_then(cpm::untraced);
        match (v.exit_code, untraced) {
            (4, _) if self.planned => Some(Halt::Partial(vec![
                "/cpm:epics already ran in this run, and the roll-up still finds no matrix for the spec."
                    .into(),
                "Running it twice would write a second set of epics; check the epics it wrote."
                    .into(),
            ])),
            (4, _) => {
                self.phase = Phase::Planning;
                None
            }
            (3, Some(0)) => {
                self.phase = Phase::Delivery;
                None
            }
            // Epics exist but do not cover the spec: a second /cpm:epics cannot fix that.
            (3, Some(u)) => Some(partial_spec(u, v)),
            _ => None,
        }
    }

    /// A planning iteration just ran: never again in this run (the roll-up decides what next).
    pub fn mark_planning_ran(&mut self) {
        if self.phase == Phase::Planning {
            self.planned = true;
            self.phase = Phase::Delivery;
        }
    }

    pub fn completion_lines(&self) -> Vec<String> {
        let (word, coverage) =
            cpm::completion_lines(self.targets.is_spec(), self.last_summary.as_deref());
        vec![coverage, word]
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
