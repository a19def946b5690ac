//! How a run begins (SPEC §2.3, §8): fresh, resumed or reset; the user's uncommitted work (or an
//! interrupted iteration's) committed first; `state.json` written; the activity log told.

use super::plan::Plan;
use crate::agent::Chain;
use crate::cli::RunOptions;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::iter_record;
use crate::state::{self, HaltReason, RalphDir, RunState};
use crate::supervisor;
use crate::task::integrity::Baseline;
use crate::ui::Ui;

/// What to do with the run recorded in `.ralph/state.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Continuation {
    /// `ralph run`: start fresh, asking first (or refusing) when an unfinished run exists.
    Fresh,
    /// `ralph resume` / `ralph run --resume`.
    Resume,
    /// `ralph run --reset`: start fresh whatever is recorded.
    Reset,
}

/// `ralph resume` needs a recorded run that is not complete, on the same task file.
pub(super) fn check_resumable(
    prior: Option<&RunState>,
    rd: &RalphDir,
    repo: &Repo,
    same_target: impl Fn(&RunState) -> bool,
) -> Result<()> {
    let flag = crate::worktree::loop_flag(repo);
    match prior {
        None => Err(Error::user(format!(
            "nothing to resume: no run is recorded in `{}`",
            rd.state_file().display()
        ))
        .with_hint(format!("start one with `ralph run{flag}`"))),
        Some(p) if p.halt_reason == Some(HaltReason::Complete) => Err(Error::user(format!(
            "nothing to resume: the last run ({}) is complete",
            p.run_id
        ))
        .with_hint(format!("start a new one with `ralph run{flag}`"))),
        Some(p) if !same_target(p) => Err(Error::usage(format!(
            "the run to resume works on `{}`",
            p.task_file
        ))),
        Some(_) => Ok(()),
    }
}

/// `ralph run` found an unfinished run: ask in a terminal, else refuse naming both ways on.
pub(super) fn ask_resume_or_reset(p: &RunState, yes: bool) -> Result<Continuation> {
    let what = format!(
        "an unfinished run ({}, iteration {}/{}, {}) is recorded in .ralph/state.json",
        p.run_id,
        p.iteration,
        p.max_iterations,
        p.halt_reason
            .map_or("killed while running", HaltReason::as_str)
    );
    if supervisor::is_interactive(yes) {
        use std::io::Write;
        eprint!("{what}.\nResume it, or reset and start a new run? [r]esume / re[s]et / [q]uit: ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        return match answer.trim().to_ascii_lowercase().as_str() {
            "r" | "resume" => Ok(Continuation::Resume),
            "s" | "reset" => Ok(Continuation::Reset),
            _ => Err(Error::user("stopped: nothing was run")),
        };
    }
    Err(Error::user(what).with_hint(
        "continue it with `ralph resume` (or `ralph run --resume`), or start over with `ralph run --reset`",
    ))
}

/// The iteration cap of a resumed run: a limit given now (flag or `RALPH_MAX_ITERATIONS`) wins;
/// else a limit written in the user's own config file counts when it is higher than the
/// recorded one (the task file and `.ralph/config.toml` are the agent's to write: a limit there
/// never raises the cap of the run it continues).
pub(super) fn resumed_max_iterations(
    p: &RunState,
    options: &RunOptions,
    written: Option<u32>,
) -> u32 {
    match (options.max_iterations, written) {
        (Some(m), _) => m,
        (None, Some(w)) => w.max(p.max_iterations),
        (None, None) => p.max_iterations,
    }
}

/// Everything a beginning needs.
pub(super) struct Begin<'a> {
    pub(crate) ui: Ui,
    pub(crate) rd: &'a RalphDir,
    pub(crate) repo: &'a mut Repo,
    pub(crate) settings: &'a Settings,
    pub(crate) agents: &'a Chain,
    pub(crate) plan: &'a Plan,
    pub(crate) unit: &'static str,
}

impl Begin<'_> {
    /// What the last iteration of a recorded run left is settled before anything else — also
    /// when the run then turns out to be complete: its work committed, and its record written
    /// when ralph was killed before writing it.
    pub(super) fn settle(&mut self, p: &RunState) -> Result<()> {
        let crashed = p.running;
        if !self.settings.no_commit && self.repo.is_dirty()? {
            let subject = if crashed || p.halt_reason == Some(HaltReason::Interrupted) {
                format!("ralph: iteration {} (interrupted)", p.iteration)
            } else if p.halt_reason == Some(HaltReason::Error) {
                // What an iteration that ended in an error could not commit (SPEC §11).
                format!("ralph: iteration {} (halted: error)", p.iteration)
            } else {
                format!("ralph: state before resuming run {}", p.run_id)
            };
            self.commit_first(&subject, p.iteration, &p.run_id)?;
        }
        // An iteration that ended in an error may have lost its record with it (a full disk).
        if p.iteration > 0 && (crashed || p.halt_reason == Some(HaltReason::Error)) {
            self.record_unrecorded_iteration(p)?;
        }
        Ok(())
    }

    /// Continue a recorded run (settled already, [`Begin::settle`]).
    pub(super) fn resumed(self, mut p: RunState) -> Result<RunState> {
        p.running = true;
        // What this resume runs with (its own flags may have changed a check) is what the next
        // resume keeps.
        p.pinned = Some(self.settings.pinned());
        p.pid = std::process::id();
        p.halt_reason = None;
        p.exit_code = None;
        p.max_iterations = self.settings.max_iterations;
        p.task = self.plan.name();
        // An older ralph's run recorded no branch: the one it goes on with from now on.
        p.branch = p
            .branch
            .or_else(|| self.repo.own_branch().map(str::to_string));
        p.save(&self.rd.state_file())?;
        let (done, total) = self.plan.counts();
        self.log(&format!(
            "Run {} resumed at iteration {}: agent {}, max iterations {}",
            p.run_id,
            p.iteration + 1,
            self.agents.describe(),
            self.settings.max_iterations
        ));
        self.ui.line(&format!(
            "ralph: resuming run {} at iteration {}/{} — {done}/{total} {}, agent {}",
            p.run_id,
            p.iteration + 1,
            self.settings.max_iterations,
            self.unit,
            self.agents.describe()
        ));
        Ok(p)
    }

    /// Commit what the tree holds before the run goes on, as `subject`.
    fn commit_first(&mut self, subject: &str, n: u32, run_id: &str) -> Result<()> {
        let message = supervisor::commit_message(subject, n, run_id);
        let g = supervisor::guarded_commit(self.repo, self.settings, self.ui, self.rd, &message)?;
        if let Some(out) = g.outcome {
            self.ui.note(&format!(
                "committed the uncommitted work first as {} ({subject})",
                out.commit.short
            ));
        }
        Ok(())
    }

    /// ralph was killed during iteration `p.iteration`, or the run ended in an error there: the
    /// last ITER record may not be that iteration's. Write it now (the tree as it is; exit 137
    /// for a ralph killed, `exit error` for an iteration whose record was lost with its error —
    /// a full disk), so no iteration number goes unrecorded.
    fn record_unrecorded_iteration(&self, p: &RunState) -> Result<()> {
        let root = self.repo.root();
        let log = p
            .iterations_log
            .as_ref()
            .map_or_else(|| self.rd.iterations_log(), |l| root.join(l));
        let last = state::tail_lines(&log, 1)?;
        let recorded = last
            .first()
            .and_then(|l| iter_record::parse_iter_record(l))
            .and_then(|r| r.iteration);
        if recorded == Some(p.iteration) {
            return Ok(());
        }
        let key = iter_record::IterKey {
            figures: format!("{}/{} {}", p.done, p.total, self.unit),
            commit: self
                .repo
                .head()?
                .map_or_else(|| "no-commit".to_string(), |h| h.short),
            fingerprint: self.repo.fingerprint()?,
        };
        if let Some(dir) = log.parent() {
            crate::files::create_dir_all(dir)
                .map_err(|e| Error::file("create directory", dir, e))?;
        }
        let (exit, why) = if p.running {
            (
                iter_record::IterExit::Code(137),
                "ralph was killed while it ran",
            )
        } else {
            (
                iter_record::IterExit::Error,
                "its record was lost with the error the run ended in",
            )
        };
        state::append_line(&log, &key.record(p.iteration, exit))?;
        self.log(&format!(
            "Iteration {}: {why}; recorded on resume",
            p.iteration
        ));
        Ok(())
    }

    /// Start a new run: the user's own uncommitted work is committed first (`was_dirty`).
    pub(super) fn fresh(mut self, run_id: &str, was_dirty: bool) -> Result<RunState> {
        if was_dirty {
            self.commit_first(&format!("ralph: state before run {run_id}"), 0, run_id)?;
        }
        let (done, total) = self.plan.counts();
        self.ui.line(&format!(
            "ralph: {} — {done}/{total} {}, agent {}, up to {} iterations (run {run_id})",
            self.plan.name(),
            self.unit,
            self.agents.describe(),
            self.settings.max_iterations
        ));
        let mut st = self.fresh_state(run_id);
        st.save(&self.rd.state_file())?;
        // A question an earlier run's agent left open is that run's: a new run does not wait on
        // it (a person's hints, left for the next prompt, stay).
        if let Some(q) = crate::person::Desk::find(self.repo).and_then(|d| d.drop_question()) {
            self.log(&format!(
                "An earlier run's open question is closed: {}",
                q.text
            ));
        }
        self.log(&format!(
            "Run {run_id} started: {} \"{}\", agent {}, max iterations {}",
            self.plan.mode(),
            self.plan.name(),
            self.agents.describe(),
            self.settings.max_iterations
        ));
        Ok(st)
    }

    fn fresh_state(&self, run_id: &str) -> RunState {
        let plan = self.plan;
        let (done, total) = plan.counts();
        let (task_file, targets) = plan.recorded_targets();
        let now = state::now_rfc3339();
        let baseline = match plan {
            Plan::Checklist { doc, .. } => Baseline::of(&doc.checklist),
            _ => Baseline::default(),
        };
        RunState {
            schema_version: state::SCHEMA_VERSION,
            run_id: run_id.to_string(),
            task: plan.name(),
            task_file,
            mode: plan.mode(),
            targets,
            pid: std::process::id(),
            running: true,
            started_at: now.clone(),
            updated_at: now,
            iteration: 0,
            max_iterations: self.settings.max_iterations,
            done,
            total,
            best_done: done,
            no_progress_streak: 0,
            baseline: baseline.unchecked,
            baseline_checked: baseline.checked,
            baseline_outside: baseline.unchecked_outside,
            last_keys: Vec::new(),
            verdict_failures: 0,
            seen_figures: Vec::new(),
            halt_reason: None,
            exit_code: None,
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
            waited_s: 0.0,
            iterations_log: match plan {
                Plan::Cpm { .. } => Some(
                    crate::task::cpm::log_path(run_id)
                        .to_string_lossy()
                        .into_owned(),
                ),
                _ => None,
            },
            feedback: None,
            annotations: Vec::new(),
            story_attempts: Default::default(),
            agent: None,
            agents: Default::default(),
            pinned: Some(self.settings.pinned()),
            branch: self.repo.own_branch().map(str::to_string),
            tip: self.repo.own_tip(),
        }
    }

    fn log(&self, line: &str) {
        supervisor::log_activity(self.ui, self.rd, line);
    }
}

/// `YYYYmmdd-HHMMSS-xxxx`: sortable, and unique enough for one repository.
pub(super) fn new_run_id() -> String {
    let now = chrono::Local::now();
    let salt = (std::process::id() ^ now.timestamp_subsec_nanos()) & 0xffff;
    format!("{}-{salt:04x}", now.format("%Y%m%d-%H%M%S"))
}
