//! Before any agent runs: the fresh evidence a source that claims to be done must show (SPEC
//! §5.3 — the test command passing now, the verdict command answering 0), and CPM's
//! pre-flight roll-up, which may end the run before anything is spawned (every row verified
//! and the tests passing now, too) and sets spec mode's phase (SPEC §3.4).

use std::path::Path;

use super::Loop;
use super::checks::{Check, feedback, run_check, shell};
use super::close::{Ends, close};
use super::decide::Halt;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::event::{At, Event};
use crate::proc::observe::{Echo, Watchers};
use crate::proc::relay::Limits;
use crate::signals::Interrupts;
use crate::state::{self, Mode};
use crate::task::verdict::{Verdict, VerdictClass};
use crate::ui::Ui;

/// What the checks say now about a task whose source claims it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Evidence {
    /// Every configured check passed.
    pub(crate) complete: bool,
    /// What the failed check said, for the first prompt.
    pub(crate) feedback: Option<String>,
}

/// Run the test command, then the verdict command, as an iteration would; their output goes to
/// `transcript_path`. `None` when an interrupt stopped them.
pub(crate) async fn fresh_evidence(
    root: &Path,
    settings: &Settings,
    transcript_path: &Path,
    interrupts: &mut Interrupts,
) -> Result<Option<Evidence>> {
    checks_now(root, settings, true, transcript_path, interrupts).await
}

/// The test command and, with `verdict`, the verdict command, run now.
async fn checks_now(
    root: &Path,
    settings: &Settings,
    verdict: bool,
    transcript_path: &Path,
    interrupts: &mut Interrupts,
) -> Result<Option<Evidence>> {
    let mut transcript = crate::files::open_own(transcript_path, true)
        .map_err(|e| Error::file("create", transcript_path, e))?;
    let limits = Limits {
        timeout: Some(settings.check_timeout),
        idle_timeout: None,
        grace: settings.grace,
        quiet_retry: None,
    };
    let checks = [
        (
            "test command",
            &settings.test_command,
            settings.test_command_from_repo,
        ),
        (
            "verdict command",
            if verdict {
                &settings.verdict_command
            } else {
                &None
            },
            settings.verdict_command_from_repo,
        ),
    ];
    for (what, cmd, from_repo) in checks {
        let Some(cmd) = cmd else { continue };
        let check = Check {
            what: format!("{what}: {cmd}"),
            inv: settings.confine(shell(cmd), from_repo),
            echo: Echo::None,
            limits,
        };
        let Some(fin) = run_check(
            root,
            check,
            &mut transcript,
            &[],
            interrupts,
            Watchers::default(),
        )
        .await?
        else {
            return Ok(None);
        };
        if !fin.success() {
            let why = match fin.stopped {
                Some(_) => "timed out".to_string(),
                None => format!("exit {}", fin.exit_code),
            };
            let line = format!("The {what} fails now ({why}): {cmd}");
            return Ok(Some(Evidence {
                complete: false,
                feedback: Some(feedback(&line, transcript_path)),
            }));
        }
    }
    Ok(Some(Evidence {
        complete: true,
        feedback: None,
    }))
}

impl Loop {
    /// CPM mode: run the roll-up once before any agent, on a fresh start and on a resume, and
    /// decide as the loop would (SPEC §3.4): 0 → complete; 5 → target-only (exit 6); a roll-up
    /// that could not run → exit 7, its stderr shown, nothing spawned; in spec mode 4 → the
    /// planning iteration first, untraced > 0 → PARTIAL (exit 9). `Some(exit code)` when that
    /// already ends the run.
    pub(super) async fn preflight_verdict(&mut self) -> Result<Option<i32>> {
        if !matches!(self.source.mode(), Mode::CpmSpec | Mode::CpmEpic) {
            return Ok(None);
        }
        let Some((display, inv)) = self.source.verdict_invocation(&self.setup.settings) else {
            return Ok(None);
        };
        let run_dir = self.tree.rd.run_dir(&self.state.run_id);
        state::create_private_dir(&run_dir)?;
        let path = run_dir.join(format!("preflight-{:03}.log", self.counters.iteration + 1));
        let mut transcript =
            crate::files::open_own(&path, false).map_err(|e| Error::file("create", &path, e))?;
        let env = self.ralph_env(self.counters.iteration);
        let check = Check {
            what: format!("roll-up: {display}"),
            inv,
            echo: Echo::None,
            limits: self.check_limits(),
        };
        let Some(fin) = self
            .run_in(check, &mut transcript, &env, Watchers::default())
            .await?
        else {
            return Ok(Some(self.halt(&Halt::Interrupted)));
        };
        let v = self
            .source
            .verdict(fin.exit_code, &String::from_utf8_lossy(&fin.stdout_tail));
        // SPEC §5.3: every row verified is "already complete" only when the tests pass now.
        let failing = match v.class {
            VerdictClass::Verified => match self.tests_fail_now().await? {
                Some(failing) => failing,
                None => return Ok(Some(self.halt(&Halt::Interrupted))),
            },
            _ => None,
        };
        self.after_preflight(&v, failing)
    }

    /// Run the test command now, when there is one: `Some(None)` when it passes (or there is
    /// none), `Some(Some(what it said))` when it fails, `None` when interrupted.
    async fn tests_fail_now(&mut self) -> Result<Option<Option<String>>> {
        if self.setup.settings.test_command.is_none() {
            return Ok(Some(None));
        }
        let transcript = self
            .tree
            .rd
            .run_dir(&self.state.run_id)
            .join("evidence.log");
        let root = self.tree.repo.root().to_path_buf();
        let evidence = checks_now(
            &root,
            &self.setup.settings,
            false,
            &transcript,
            &mut self.interrupts,
        )
        .await?;
        Ok(evidence.map(|e| e.feedback))
    }

    /// What the pre-flight roll-up decides: the run's end, or the phase and the point progress
    /// is measured from. `failing`: what the test command said when it failed beside a roll-up
    /// that verifies every row — the loop goes on, with that as the first prompt's feedback.
    fn after_preflight(&mut self, v: &Verdict, failing: Option<String>) -> Result<Option<i32>> {
        let said = if v.details.is_empty() || v.class != VerdictClass::Unavailable {
            String::new()
        } else {
            format!("; it said: {}", v.details.join(" | "))
        };
        self.log(&format!(
            "Pre-flight roll-up: exit {}: {}{said}",
            v.exit_code,
            v.figures()
        ));
        self.setup.ui.line(&format!(
            "roll-up before the first iteration: exit {}: {}",
            v.exit_code,
            v.figures()
        ));
        // CPM's completion is the roll-up's to say: the source never claims it.
        if super::decide::Evidence::now(false, Some(v.class.clone()), failing.is_none()).complete()
        {
            self.setup
                .ui
                .success("The roll-up already verifies every row: nothing to do.");
            return Ok(Some(close(&mut AlreadyComplete(self), &Halt::Complete)));
        }
        let halt = match &v.class {
            VerdictClass::Verified => {
                let line = "the roll-up verifies every row, but the test command fails now: the loop goes on";
                self.setup.ui.note(line);
                self.log(&format!("Pre-flight: {line}"));
                self.state.feedback = failing;
                self.source.after_verdict(v)
            }
            VerdictClass::TargetOnly(rows) => Some(Halt::TargetOnly(rows.clone())),
            VerdictClass::Unavailable => Some(Halt::VerdictUnavailable),
            VerdictClass::Unverified | VerdictClass::NothingPlanned => self.source.after_verdict(v),
        };
        if let Some(halt) = halt {
            return Ok(Some(self.halt(&halt)));
        }
        // Progress is measured from where the roll-up stands now, not from zero.
        let judged = self
            .source
            .with_verdict_counts(super::source::Judged::default());
        if let Some(at) = judged.progress
            && self.counters.iteration == 0
        {
            self.counters.best_done = self.counters.best_done.max(at);
        }
        Ok(None)
    }
}

/// A run the pre-flight roll-up finds complete: closed as the loop closes, but summed up with
/// the source's lines, without the loop's summary (no iteration ran).
struct AlreadyComplete<'a>(&'a mut Loop);

impl Ends for AlreadyComplete<'_> {
    fn ui(&self) -> Ui {
        self.0.setup.ui
    }

    fn run(&mut self) -> Option<(&state::RalphDir, &mut state::RunState)> {
        self.0.run()
    }

    fn at(&self) -> Option<At> {
        self.0.at()
    }

    fn announce(&mut self, event: Event) {
        self.0.emit(event);
    }

    fn sum_up(&mut self, halt: &Halt) {
        if *halt != Halt::Complete {
            return self.0.summary(halt);
        }
        for l in self.0.source.completion_lines() {
            self.0.setup.ui.plain(&l);
        }
    }
}
