//! The loop (SPEC §5): one fresh agent process per iteration, judged from the repository,
//! committed, logged, and decided by the pure `decide` function.
//!
//! One iteration is a sequence of phases, each in its own file with a typed result:
//! `prepare` (task, prompt, invocation) → `attempt` (the agent; usage-limit waits inside) →
//! `judge` (the task source; the reviewer) → `verify` (tests, verdict, promise) → `record`
//! (commit, fingerprint, logs, state — the one close every ending goes through) → `conclude`
//! (decide, report, halt). An ending found early (interrupt, login failure, the waiting budget,
//! an unreadable source) skips to `record` as a [`decide::Halt`], so no path leaves work
//! uncommitted or an iteration number without its record.

mod attempt;
pub mod checks;
mod commit;
mod conclude;
pub mod decide;
mod events;
mod final_walk;
mod judge;
pub mod preflight;
mod prepare;
pub mod prompt;
mod record;
pub mod source;
mod summary;
mod verify;

use std::io::IsTerminal;
use std::time::Instant;

pub use commit::{FALLBACK_IDENTITY_WARNING, commit_message, guarded_commit};
pub use verify::promise_in_final_message;

use crate::agent::Agent;
use crate::agent::process::Limits;
use crate::config::Settings;
use crate::error::Result;
use crate::git::Repo;
use crate::signals::Interrupts;
use crate::state::{self, RalphDir, RunState};
use crate::ui::Ui;
use decide::{Counters, Halt};
use source::Source;

/// Everything the loop needs, resolved by `ralph run`.
pub struct Loop {
    pub repo: Repo,
    pub rd: RalphDir,
    pub source: Source,
    pub task_name: String,
    pub settings: Settings,
    pub agent: Agent,
    pub ui: Ui,
    pub state: RunState,
    pub counters: Counters,
    pub interrupts: Interrupts,
    pub started: Instant,
    pub stream: bool,
    /// Never ask (`--yes`, or stdin is not a terminal).
    pub unattended: bool,
    /// The file watcher that makes git's status and staging cost what changed (Linux).
    pub watch: Option<std::sync::Arc<crate::git::watch::Watch>>,
    /// Events whose hooks have yet to run.
    pub pending_events: Vec<serde_json::Value>,
}

/// Watch the work tree for the rest of the run and make the watcher git's file-system monitor
/// (SPEC §12), before ralph's first git status, so that status already leaves git the monitor's
/// token and its untracked cache; without inotify (or with `RALPH_NO_WATCH` set) git walks the
/// tree.
pub fn start_watching(
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

/// What `git status --porcelain | cksum` prints for a clean tree.
pub const CLEAN_FINGERPRINT: &str = "4294967295 0";

impl Loop {
    /// The pre-flight checks, then iterations until a halt rule fires; returns the exit code.
    pub async fn run(mut self) -> Result<i32> {
        let result = self.iterate().await;
        self.run_hooks().await;
        result
    }

    async fn iterate(&mut self) -> Result<i32> {
        if let Some(code) = self.preflight_verdict().await? {
            return Ok(code);
        }
        loop {
            if self.interrupts.count() > 0 {
                // Interrupted between iterations: the last one is fully recorded.
                self.check_the_tree_between()?;
                return self.halt(&Halt::Interrupted);
            }
            let n = self.counters.iteration + 1;
            let prev = Counters {
                iteration: n,
                ..self.counters.clone()
            };
            let halted = self.iteration(&prev).await?;
            self.run_hooks().await;
            if let Some(code) = halted {
                return Ok(code);
            }
        }
    }

    /// One iteration through its phases; `Some(exit code)` when the run halts.
    async fn iteration(&mut self, prev: &Counters) -> Result<Option<i32>> {
        let mut prep = self.prepare(prev)?;
        let attempted = self.attempt(&mut prep).await?;
        let ending = match attempted.stop.clone() {
            Some(halt) => Err(halt),
            None => match self.judge(&mut prep).await? {
                Ok(judged) => self.verify(&mut prep, judged, &attempted).await?,
                Err(halt) => Err(halt),
            },
        };
        let recorded = self.record(&prep, &attempted, &ending)?;
        self.conclude(prev, &prep, &attempted, ending, recorded)
    }

    fn log(&self, line: &str) -> Result<()> {
        state::append_line(
            &self.rd.activity_log(),
            &format!("[{}] {line}", state::now_rfc3339()),
        )
    }

    /// The environment every process of an iteration gets.
    fn ralph_env(&self, n: u32) -> Vec<(String, String)> {
        vec![
            ("RALPH_ITERATION".to_string(), n.to_string()),
            (
                "RALPH_MAX_ITERATIONS".to_string(),
                self.settings.max_iterations.to_string(),
            ),
            ("RALPH_RUN_ID".to_string(), self.state.run_id.clone()),
            ("RALPH_TASK_FILE".to_string(), self.source.task_file()),
        ]
    }

    /// The limits of one agent attempt.
    fn agent_limits(&self) -> Limits {
        Limits {
            timeout: self.settings.timeout,
            idle_timeout: self.settings.idle_timeout,
            grace: self.settings.grace,
        }
    }

    /// The limits of a test or verdict command: `--check-timeout`, no idle timeout (a quiet
    /// test suite is fine).
    fn check_limits(&self) -> Limits {
        Limits {
            timeout: Some(self.settings.check_timeout),
            idle_timeout: None,
            grace: self.settings.grace,
        }
    }
}

/// Whether questions may be asked (stdin and stderr are terminals and `--yes` was not given).
pub fn is_interactive(yes: bool) -> bool {
    !yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}
