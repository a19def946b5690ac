//! The task sources the loop can work (SPEC §3), one file each: what each puts in the prompt,
//! how it is judged after the agent ran, and which verdict command (if any) decides.

mod checklist;
mod cpm;
mod stories;
mod table;

use std::path::{Path, PathBuf};

pub(crate) use checklist::ChecklistSource;
pub(crate) use cpm::CpmSource;
pub(crate) use stories::StoriesSource;
pub(crate) use table::TableSource;

use super::decide::Halt;
use super::prompt::STUCK_ALERT;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::proc::Invocation;
use crate::state::Mode;
use crate::task::cpm::Targets;
use crate::task::verdict::{Verdict, VerdictClass};

/// The task source of a run.
pub(crate) enum Source {
    Checklist(ChecklistSource),
    Cpm(CpmSource),
    Table(TableSource),
    Stories(StoriesSource),
}

/// What the source says after the agent ran.
#[derive(Debug, Clone, Default)]
pub(crate) struct Judged {
    pub(crate) done: usize,
    pub(crate) total: usize,
    pub(crate) source_complete: bool,
    /// What the agent changed that the run is judged by (criteria gone, rows removed…), one
    /// line each: non-empty halts the run (exit 8).
    pub(crate) tampered: Vec<String>,
    pub(crate) regressions: Vec<String>,
    /// The first newly finished item, for the commit subject.
    pub(crate) what: Option<String>,
    /// The ITER figures, when the source has its own (else `{done}/{total} {unit}`).
    pub(crate) figures: Option<String>,
    /// The source's own progress measure, when it counts a verdict's records itself (CPM:
    /// verified rows plus traced requirements); progress is then this passing its best, and
    /// verdict figures are not progress by themselves.
    pub(crate) progress: Option<usize>,
    /// The task a reviewer must look at before the judgement is final (table `--review`).
    pub(crate) review_task: Option<u32>,
    /// A halt the source itself calls for (a table that ended PARTIAL).
    pub(crate) halt: Option<Halt>,
    /// Criteria kept with an annotation after their text (`"baseline" → "as written"`).
    pub(crate) annotations: Vec<String>,
    /// Changes the agent made outside its own table row, put back.
    pub(crate) restored: Vec<String>,
}

impl Judged {
    /// A judgement with counts only: nothing finished, tampered or regressed.
    pub(crate) fn counts(done: usize, total: usize) -> Judged {
        Judged {
            done,
            total,
            ..Judged::default()
        }
    }
}

/// Everything the prompt of one iteration depends on besides the source.
pub(crate) struct PromptCtx<'a> {
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) test_command: Option<&'a str>,
    pub(crate) stuck_alert: bool,
    pub(crate) stuck_streak: u32,
    pub(crate) completion_promise: Option<&'a str>,
    /// What the last iteration's checks said (failing tests, a refused commit).
    pub(crate) feedback: Option<&'a str>,
}

/// The STUCK ALERT paragraph of the table and CPM prompts.
fn stuck_paragraph(streak: u32, what: &str) -> String {
    format!(
        "⚠️ {STUCK_ALERT}: the last {streak} iterations {what}. Try a COMPLETELY DIFFERENT approach.\n"
    )
}

/// The section that hands the last iteration's failed checks to the next agent.
pub(crate) fn feedback_section(feedback: &str) -> String {
    format!(
        "\n== WHAT THE LAST ITERATION'S CHECKS SAID ==\n\nThe supervisor's checks failed after the last iteration; fix this first:\n\n{}\n",
        feedback.trim_end()
    )
}

impl Source {
    /// The mode as `status` reports it.
    pub(crate) fn mode(&self) -> Mode {
        match self {
            Source::Checklist(_) => Mode::Checklist,
            Source::Cpm(c) if c.targets.is_spec() => Mode::CpmSpec,
            Source::Cpm(_) => Mode::CpmEpic,
            Source::Table(_) => Mode::Table,
            Source::Stories(_) => Mode::Stories,
        }
    }

    /// What the figures count, for display (CPM: matrix rows marked verified).
    pub(crate) fn unit(&self) -> &'static str {
        match self {
            Source::Cpm(_) => "rows",
            _ => self.mode().unit(),
        }
    }

    /// Done and total as of the last judgement, for display.
    pub(crate) fn counts(&self) -> (usize, usize) {
        match self {
            Source::Checklist(c) => (c.previous.done(), c.previous.total()),
            Source::Cpm(c) => c.counts(),
            Source::Table(t) => (
                crate::task::table::done_count(&t.progress),
                t.progress.rows.len(),
            ),
            Source::Stories(s) => s.counts(),
        }
    }

    /// `RALPH_TASK_FILE` for the agent.
    pub(crate) fn task_file(&self) -> String {
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
            Source::Stories(s) => s.path.to_string_lossy().into_owned(),
        }
    }

    /// The file a live view can watch for the criteria count.
    pub(crate) fn watched_file(&self) -> Option<&Path> {
        match self {
            Source::Checklist(c) => Some(&c.path),
            _ => None,
        }
    }

    /// Where the ITER records go.
    pub(crate) fn iter_log(&self, default: &Path) -> PathBuf {
        match self {
            Source::Checklist(_) | Source::Table(_) | Source::Stories(_) => default.to_path_buf(),
            Source::Cpm(c) => c.root.join(&c.log),
        }
    }

    pub(crate) fn prompt(&self, p: &PromptCtx<'_>) -> Result<String> {
        let mut text = match self {
            Source::Checklist(c) => return Ok(c.prompt(p)),
            Source::Cpm(c) => c.prompt(p)?,
            Source::Table(t) => t.prompt(p)?,
            Source::Stories(s) => s.prompt(p),
        };
        if let Some(f) = p.feedback {
            text.push_str(&feedback_section(f));
        }
        Ok(text)
    }

    /// Pick what the next iteration works (table mode: the next task and its attempt).
    pub(crate) fn select_next(&mut self) {
        match self {
            Source::Table(t) => t.select_next(),
            Source::Stories(s) => s.select_next(),
            Source::Checklist(_) | Source::Cpm(_) => {}
        }
    }

    /// Whether the source itself says the work is done (before any check runs).
    pub(crate) fn claims_complete(&self) -> bool {
        match self {
            Source::Checklist(c) => c.previous.total() > 0 && c.previous.remaining().count() == 0,
            Source::Table(t) => crate::task::table::next_task(&t.progress).is_none(),
            Source::Stories(s) => s.claims_complete(),
            Source::Cpm(_) => false,
        }
    }

    /// Read the source after the agent ran.
    pub(crate) fn judge(&mut self) -> Result<Judged> {
        match self {
            Source::Checklist(c) => c.judge(),
            // Only the roll-up's exit code completes a CPM run; its counts come after it ran.
            Source::Cpm(c) => Ok(c.judged()),
            Source::Table(t) => t.judge(),
            Source::Stories(s) => s.judge(),
        }
    }

    /// The tests have run (`tests_ok`: they passed, or there are none): a source whose items
    /// pass only with them (`prd.json`'s stories) settles the iteration's judgement now.
    pub(crate) fn after_tests(&mut self, judged: Judged, tests_ok: bool) -> Result<Judged> {
        match self {
            Source::Stories(s) => s.after_tests(judged, tests_ok),
            _ => Ok(judged),
        }
    }

    /// What the run's record keeps of the source between iterations (a story's attempts).
    pub(crate) fn save_into(&self, state: &mut crate::state::RunState) {
        if let Source::Stories(s) = self {
            state.story_attempts = s.attempts.clone();
        }
    }

    /// The reviewer's verdict on the task it reviewed (`None`: it gave no REVIEW line).
    pub(crate) fn review_done(
        &mut self,
        verdict: Option<std::result::Result<(), String>>,
    ) -> Result<Judged> {
        match self {
            Source::Table(t) => t.review_done(verdict),
            _ => Err(Error::user("only a task table is reviewed")),
        }
    }

    /// The reviewer's prompt for a task (table `--review`).
    pub(crate) fn review_prompt(&self, k: u32, test_command: Option<&str>) -> Option<String> {
        match self {
            Source::Table(t) => Some(crate::task::table::review_prompt(&t.prd, k, test_command)),
            _ => None,
        }
    }

    /// The command whose exit code decides: the CPM roll-up, else the configured one.
    pub(crate) fn verdict_invocation(&self, settings: &Settings) -> Option<(String, Invocation)> {
        // The roll-up script may sit in the agent's own state (`~/.claude/plugins`): it runs in
        // the sandbox, as the repository's own commands do.
        if let Source::Cpm(c) = self
            && let Some((display, inv)) = c.rollup_invocation()
        {
            return Some((display, settings.confine(inv, true)));
        }
        settings.verdict_command.as_ref().map(|c| {
            let inv = super::checks::shell(c);
            (
                c.clone(),
                settings.confine(inv, settings.verdict_command_from_repo),
            )
        })
    }

    /// Classify a verdict run; CPM reads its records the roll-up's way. Exit 4 ("nothing
    /// planned") means something only to spec mode's roll-up: from any other verdict command
    /// it is a command that could not run (SPEC §3.3).
    pub(crate) fn verdict(&mut self, exit_code: i32, stdout: &str) -> Verdict {
        match self {
            Source::Cpm(c) if c.rollup.is_some() => c.verdict(exit_code, stdout),
            _ => {
                let mut v = Verdict::from_output(exit_code, stdout);
                if v.class == VerdictClass::NothingPlanned {
                    v.class = VerdictClass::Unavailable;
                }
                v
            }
        }
    }

    /// Apply the spec-mode phase predicate after a roll-up; `Some(halt)` ends the run.
    pub(crate) fn after_verdict(&mut self, v: &Verdict) -> Option<Halt> {
        match self {
            Source::Cpm(c) => c.after_verdict(v),
            _ => None,
        }
    }

    /// The judgement with the counts of the verdict that just ran, where the source counts
    /// its records (CPM); else as it was.
    pub(crate) fn with_verdict_counts(&self, judged: Judged) -> Judged {
        match self {
            Source::Cpm(c) if c.rollup.is_some() => {
                let counted = c.judged();
                Judged {
                    done: counted.done,
                    total: counted.total,
                    progress: counted.progress,
                    ..judged
                }
            }
            _ => judged,
        }
    }

    /// Lines the source has for the activity log and the report since the last call (CPM:
    /// `[plan]` stripped from the epics `/cpm:epics` wrote).
    pub(crate) fn take_notes(&mut self) -> Vec<String> {
        match self {
            Source::Cpm(c) => c.take_notes(),
            _ => Vec::new(),
        }
    }

    /// When the verdict command could not run: the command to run by hand, and what it said
    /// on stderr (the CPM roll-up's; a generic command's stays in the transcript).
    pub(crate) fn verdict_failure(&self, settings: &Settings) -> (String, Vec<String>) {
        match self {
            Source::Cpm(c) if c.rollup.is_some() => c.verdict_failure(),
            _ => (
                settings.verdict_command.clone().unwrap_or_default(),
                Vec::new(),
            ),
        }
    }

    /// A planning iteration just ran: never again in this run (the roll-up decides what next).
    pub(crate) fn mark_planning_ran(&mut self) {
        if let Source::Cpm(c) = self {
            c.mark_planning_ran();
        }
    }

    pub(crate) fn remaining(&self) -> Vec<String> {
        match self {
            Source::Checklist(c) => c.previous.remaining().map(|x| x.text.clone()).collect(),
            Source::Cpm(_) => Vec::new(),
            Source::Table(t) => t.remaining(),
            Source::Stories(s) => s.remaining(),
        }
    }

    /// Lines printed beside a completion (CPM: the promise word and the COVERAGE line).
    pub(crate) fn completion_lines(&self) -> Vec<String> {
        match self {
            Source::Checklist(_) => Vec::new(),
            Source::Cpm(c) => c.completion_lines(),
            Source::Table(t) => t.closing_lines(),
            Source::Stories(s) => s.closing_lines(),
        }
    }
}

/// A file the source reads after the agent: its text; `Err(Ok(line))` when it is gone or no
/// longer a regular file (tampering, the line to say); `Err(Err(e))` when it cannot be read.
pub(super) fn read_after_agent(
    path: &Path,
    rel: &str,
) -> std::result::Result<String, std::result::Result<String, crate::files::ReadError>> {
    match crate::files::read_text(path) {
        Ok(text) => Ok(text),
        Err(e) if e.is_missing() => Err(Ok(format!("{rel} was deleted or renamed"))),
        Err(e) if matches!(e, crate::files::ReadError::NotRegular { .. }) => {
            Err(Ok(format!("{rel} {e}")))
        }
        Err(e) => Err(Err(e)),
    }
}

pub(crate) fn table_error(e: crate::task::table::TableError) -> Error {
    let hint = e.hint();
    let err = Error::user(e.to_string());
    match hint {
        Some(h) => err.with_hint(h),
        None => err,
    }
}

pub(crate) fn cpm_error(e: crate::task::cpm::CpmError) -> Error {
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
