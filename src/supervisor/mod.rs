//! The loop (SPEC §5): one fresh agent process per iteration, judged from the repository,
//! committed, logged, and decided by the pure `decide` function.
//!
//! One iteration is a sequence of phases, each in its own file with a typed result:
//! `prepare` (task, prompt, invocation) → `attempt` (the agent; usage-limit waits inside) →
//! `judge` (the task source; the reviewer) → `verify` (tests, verdict, promise) → `record`
//! (commit, fingerprint, logs, state — the one close every ending goes through) → `conclude`
//! (decide, report, halt). An ending found early (interrupt, login failure, the waiting budget,
//! an unreadable source) skips to `record` as a [`decide::Halt`], and so does a phase that fails
//! (`faults`: git refuses, a write fails), so no path leaves work uncommitted or an iteration
//! number without its record.

mod attempt;
pub(crate) mod checks;
pub(crate) mod close;
mod commit;
mod conclude;
pub(crate) mod decide;
mod events;
mod faults;
mod final_walk;
mod judge;
mod person;
pub(crate) mod preflight;
mod prepare;
pub(crate) mod prompt;
mod record;
pub(crate) mod source;
mod summary;
mod verify;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use tracing::{Instrument, info_span};

pub(crate) use commit::{commit_message, guarded_commit};

use crate::agent::Chain;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::proc::relay::Limits;
use crate::signals::Interrupts;
use crate::state::{self, RalphDir, RunState};
use crate::ui::Ui;
use attempt::Attempted;
use decide::{Counters, Halt};
use faults::failed;
pub(crate) use person::Questions;
use prepare::Prepared;
use record::Ending;
use source::Source;

/// Everything the loop needs, resolved by `ralph run`.
pub(crate) struct Loop {
    /// What the run is and how it runs: fixed from its start to its halt.
    pub(crate) setup: Setup,
    /// The work tree the loop commits in.
    pub(crate) tree: Tree,
    pub(crate) source: Source,
    /// The run's agent and its fallbacks, and which of them is usage-limited.
    pub(crate) agents: Chain,
    /// The run's record, saved as `state.json`.
    pub(crate) state: RunState,
    /// What the decision carries from one iteration to the next.
    pub(crate) counters: Counters,
    pub(crate) interrupts: Interrupts,
    /// The caller's word of each iteration recorded (the queue pushes the item's branch).
    pub(crate) recorded: Option<std::sync::mpsc::Sender<u32>>,
    /// Where else a person sees the question and answers it (a queue item's tracker: the
    /// issue's comments), besides the desk.
    pub(crate) elsewhere: Option<std::sync::Arc<dyn crate::person::Elsewhere>>,
    /// Events whose hooks have yet to run.
    pub(crate) pending_events: Vec<events::Pending>,
    /// The latest iteration's work went into a commit (ralph's, or the agent's own).
    pub(crate) last_committed: bool,
}

/// What a run is and how it runs, as `ralph run` resolved it; no phase changes it.
pub(crate) struct Setup {
    pub(crate) settings: Settings,
    pub(crate) task_name: String,
    pub(crate) ui: Ui,
    pub(crate) started: Instant,
    /// `--stream`: the agent's output echoed as it comes.
    pub(crate) stream: bool,
    /// Never ask (`--yes`, or stdin is not a terminal).
    pub(crate) unattended: bool,
    /// The agent's questions to a person: allowed or not, how long an answer is waited for.
    pub(crate) questions: person::Questions,
}

/// The work tree a run commits in: the repository, its `.ralph/`, and the watcher of its files.
pub(crate) struct Tree {
    pub(crate) repo: Repo,
    pub(crate) rd: RalphDir,
    /// The file watcher that makes git's status and staging cost what changed (Linux).
    pub(crate) watch: Option<std::sync::Arc<crate::git::watch::Watch>>,
}

/// Watch the work tree for the rest of the run and make the watcher git's file-system monitor
/// (SPEC §12), before ralph's first git status, so that status already leaves git the monitor's
/// token and its untracked cache; without inotify (or with `RALPH_NO_WATCH` set) git walks the
/// tree.
pub(crate) fn start_watching(
    ui: Ui,
    repo: &mut Repo,
    rd: &RalphDir,
    settings: &Settings,
) -> Result<Option<std::sync::Arc<crate::git::watch::Watch>>> {
    if settings.no_commit || std::env::var_os("RALPH_NO_WATCH").is_some() {
        return Ok(None);
    }
    let git_dir = repo.git2().path().to_path_buf();
    let Some(watch) = crate::git::watch::Watch::start(repo.root(), &git_dir, &rd.path) else {
        return Ok(None);
    };
    if watch.is_broken() {
        ui.note(
            "the file watcher could not watch every directory (inotify's watch limit?): git walks the whole tree each iteration",
        );
    }
    watch.set_always(repo.gitlinks()?);
    repo.set_monitor(watch.monitor());
    Ok(Some(watch))
}

/// Append a stamped line to `.ralph/activity.log`. The log is for people: a failed append never
/// stops an iteration or a run — the first failure is shown as a warning, later ones are not.
pub(crate) fn log_activity(ui: Ui, rd: &RalphDir, line: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let line = crate::proc::withheld::redact(line);
    let stamped = format!("[{}] {line}", state::now_rfc3339());
    if let Err(e) = state::append_line(&rd.activity_log(), &stamped)
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        ui.warn(&format!(
            "{}: the run goes on without the activity lines it cannot write",
            faults::chain(&e)
        ));
    }
}

impl Loop {
    /// The pre-flight checks, then iterations until a halt rule fires; returns the exit code
    /// and the halt recorded. Every ending, the pre-flight's errors too, goes through the
    /// run's close.
    pub(crate) async fn run(mut self) -> (i32, Option<state::HaltReason>) {
        let code = self.iterate().await;
        self.run_hooks_then_walk().await;
        (code, self.state.halt_reason)
    }

    async fn iterate(&mut self) -> i32 {
        match self
            .preflight_verdict()
            .instrument(info_span!("preflight"))
            .await
        {
            Ok(Some(code)) => return code,
            Ok(None) => {}
            Err(e) => {
                let what = "the roll-up before the first iteration could not run";
                return self.halt(&failed(what, &e));
            }
        }
        loop {
            if self.interrupts.count() > 0 {
                // Interrupted between iterations: the last one is fully recorded.
                self.check_the_tree_between();
                return self.halt(&Halt::Interrupted);
            }
            // The agent's question waits for a person: no iteration is spent meanwhile.
            if let Some(code) = self.wait_for_person().await {
                return code;
            }
            let n = self.counters.iteration + 1;
            let prev = Counters {
                iteration: n,
                ..self.counters.clone()
            };
            let halted = self
                .iteration(&prev)
                .instrument(info_span!("iteration", n))
                .await;
            self.run_hooks_then_walk().await;
            if let Some(tell) = &self.recorded {
                // A caller that stopped listening changes nothing here.
                let _ = tell.send(n);
            }
            if let Some(code) = halted {
                return code;
            }
        }
    }

    /// One iteration through its phases; `Some(exit code)` when the run halts. A phase that
    /// fails ends the iteration as an error that still goes through the close.
    async fn iteration(&mut self, prev: &Counters) -> Option<i32> {
        // Each phase in a span of its own (`-v` prints how long it took: `trace`).
        let mut prep = match info_span!("prepare").in_scope(|| self.prepare(prev)) {
            Ok(prep) => prep,
            Err(e) => return Some(self.not_started(prev.iteration, &e)),
        };
        let attempted = match self
            .attempt(&mut prep)
            .instrument(info_span!("attempt"))
            .await
        {
            Ok(attempted) => {
                self.take_question(prep.n);
                attempted
            }
            Err(e) => Attempted::failed(
                Default::default(),
                failed(
                    format_args!("iteration {} failed running its agent", prep.n),
                    &e,
                ),
            ),
        };
        let ending = match attempted.stop.clone() {
            Some(halt) => Err(halt),
            None => self.evaluate(&mut prep, &attempted).await,
        };
        let recorded = info_span!("record").in_scope(|| self.record(&prep, &attempted, &ending));
        info_span!("conclude").in_scope(|| self.conclude(prev, &prep, &attempted, ending, recorded))
    }

    /// Judge and verify what the agent left; a failure of either is the iteration's error.
    async fn evaluate(&mut self, prep: &mut Prepared, attempted: &Attempted) -> Ending {
        let judged = match self.judge(prep).instrument(info_span!("judge")).await {
            Ok(judged) => judged?,
            Err(e) => {
                return Err(failed(
                    format_args!("iteration {} could not be judged", prep.n),
                    &e,
                ));
            }
        };
        let n = prep.n;
        self.verify(prep, judged, attempted)
            .instrument(info_span!("verify"))
            .await
            .unwrap_or_else(|e| {
                Err(failed(
                    format_args!("iteration {n} could not run its checks"),
                    &e,
                ))
            })
    }

    /// Iteration `n` could not start (its prompt, its transcript, its invocation): no agent
    /// ran, so its number is not spent — the run halts with the error, a resume runs `n`.
    fn not_started(&mut self, n: u32, e: &Error) -> i32 {
        self.halt(&failed(format_args!("iteration {n} could not start"), e))
    }

    fn log(&self, line: &str) {
        log_activity(self.setup.ui, &self.tree.rd, line);
    }

    /// The environment every process of an iteration gets.
    fn ralph_env(&self, n: u32) -> Vec<(String, String)> {
        let mut env = vec![
            ("RALPH_ITERATION".to_string(), n.to_string()),
            (
                "RALPH_MAX_ITERATIONS".to_string(),
                self.setup.settings.max_iterations.to_string(),
            ),
            ("RALPH_RUN_ID".to_string(), self.state.run_id.clone()),
            ("RALPH_TASK_FILE".to_string(), self.source.task_file()),
        ];
        env.extend(self.question_env());
        env
    }

    /// The limits of one agent attempt.
    fn agent_limits(&self) -> Limits {
        Limits {
            timeout: self.setup.settings.timeout,
            idle_timeout: self.setup.settings.idle_timeout,
            grace: self.setup.settings.grace,
            // A quiet retry is a wait for a usage limit: bounded by what is left of --max-wait.
            quiet_retry: Some(self.setup.settings.max_wait.saturating_sub(self.waited())),
        }
    }

    /// The time waited for usage limits so far in the run (`state.json` may say anything: a
    /// negative or absurd figure is none, or the most a duration holds).
    pub(super) fn waited(&self) -> Duration {
        Duration::try_from_secs_f64(self.state.waited_s.max(0.0)).unwrap_or(Duration::MAX)
    }

    /// The limits of a test or verdict command: `--check-timeout`, no idle timeout (a quiet
    /// test suite is fine).
    fn check_limits(&self) -> Limits {
        Limits {
            timeout: Some(self.setup.settings.check_timeout),
            idle_timeout: None,
            grace: self.setup.settings.grace,
            quiet_retry: None,
        }
    }
}

/// Whether questions may be asked (stdin and stderr are terminals and `--yes` was not given).
pub(crate) fn is_interactive(yes: bool) -> bool {
    !yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}
