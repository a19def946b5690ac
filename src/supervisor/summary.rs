//! What the user reads when a run halts (SPEC §9): one summary per outcome, the criteria left,
//! the annotations to review; and the one question the loop asks (continue when stuck).

use std::io::IsTerminal;

use super::Loop;
use super::decide::Halt;
use crate::error::Error;
use crate::state::Mode;
use crate::ui::human_duration;

impl Loop {
    pub(super) fn ask_continue_when_stuck(&self) -> bool {
        let t = 2 * self.setup.settings.stuck_threshold;
        if self.setup.unattended || !std::io::stdin().is_terminal() {
            return false;
        }
        eprint!("The loop has made no progress for {t} iterations. Continue or stop? [c/S] ");
        let mut answer = String::new();
        if std::io::stdin().read_line(&mut answer).is_err() {
            return false;
        }
        matches!(
            answer.trim().to_ascii_lowercase().as_str(),
            "c" | "continue"
        )
    }

    pub(super) fn summary(&self, halt: &Halt) {
        match halt {
            Halt::Complete => self.summary_complete(),
            Halt::MaxIterations => self.summary_max_iterations(),
            Halt::Stalled { iterations, commit } => {
                self.setup.ui.alert(&format!(
                    "STALLED: {iterations} iterations with no change at {commit}"
                ));
                self.progress_line();
                self.print_remaining();
                self.setup.ui.plain("\nThe agent changed nothing for three iterations: check its transcript in .ralph/runs/ and the task.");
            }
            Halt::Stuck => {
                let t = 2 * self.setup.settings.stuck_threshold;
                self.setup.ui.alert(&format!(
                    "## 🤚 RALPH Loop — Stuck: no progress for {t} iterations"
                ));
                self.progress_line();
                self.print_remaining();
                self.setup.ui.plain(
                    "\nAdjust the task (split hard criteria, add guardrails) and run again.",
                );
            }
            Halt::TargetOnly(rows) => {
                self.setup.ui.alert(&format!(
                    "TARGET-ONLY: {} rows unverifiable in this environment",
                    rows.len()
                ));
                for r in rows {
                    self.setup.ui.plain(&format!("- {r}"));
                }
                self.setup
                    .ui
                    .plain("\nThese rows can only be verified against the real deployment target.");
            }
            Halt::VerdictUnavailable => {
                self.setup
                    .ui
                    .alert("## ⛔ RALPH Loop — the verdict command could not run");
                let (command, said) = self.source.verdict_failure(&self.setup.settings);
                if !said.is_empty() {
                    self.setup.ui.plain("It said:");
                    for l in said {
                        self.setup.ui.plain(&format!("  {l}"));
                    }
                }
                self.setup.ui.plain(&format!("Check it by hand: {command}"));
            }
            Halt::Budget(why) => {
                self.setup.ui.alert("## 💸 RALPH Loop — Budget reached");
                self.setup.ui.plain(&format!("{why}."));
                self.progress_line();
                self.setup
                    .ui
                    .plain(&format!("Total cost ${:.2}", self.state.cost_usd));
                self.setup.ui.plain("\nContinue later with: ralph resume (raise --max-cost or --max-wait if needed)");
            }
            Halt::Partial(lines) => {
                self.setup.ui.alert("## ⚠️ RALPH Loop — PARTIAL");
                for l in lines {
                    self.setup.ui.plain(l);
                }
            }
            Halt::Tampered(what) => self.summary_tampered(what),
            Halt::Interrupted => {
                let n = self.state.iteration;
                self.setup.ui.alert(&format!(
                    "Interrupted in iteration {n}: the agent was stopped{}. Continue with: ralph resume",
                    self.interrupted_work()
                ));
            }
            Halt::Error { message, hint } => {
                self.setup
                    .ui
                    .error(&Error::user(message.clone()).with_hint(hint.clone()));
            }
        }
        self.print_annotations();
    }

    /// What became of the interrupted iteration's work, as the commit left it.
    fn interrupted_work(&self) -> &'static str {
        if self.setup.settings.no_commit {
            " and its work left uncommitted in the tree (--no-commit)"
        } else if self.last_committed {
            " and its work committed"
        } else {
            " before it changed anything: there was nothing to commit"
        }
    }

    fn summary_complete(&self) {
        let ui = self.setup.ui;
        let n = self.counters.iteration;
        let (_, total) = self.source.counts();
        ui.success("## 🎉 RALPH Loop Complete!");
        ui.plain(&format!("**Task:** {}", self.setup.task_name));
        ui.plain(&format!(
            "**Iterations:** {n} of {}",
            self.setup.settings.max_iterations
        ));
        ui.plain(&format!(
            "**Duration:** {}",
            human_duration(self.setup.started.elapsed())
        ));
        if self.source.mode() == Mode::Checklist {
            ui.plain(&format!("**Criteria:** {total}/{total} ✅"));
        }
        for l in self.source.completion_lines() {
            ui.plain(&l);
        }
        ui.plain(&format!(
            "\nAll success criteria are met. Review the changes with:\n  git log --oneline -{n}"
        ));
    }

    fn summary_max_iterations(&self) {
        let ui = self.setup.ui;
        let (done, total) = self.source.counts();
        let max = self.setup.settings.max_iterations;
        ui.alert("## 🛑 RALPH Loop — Max Iterations Reached");
        ui.plain(&format!("**Task:** {}", self.setup.task_name));
        ui.plain(&format!(
            "**Iterations:** {} of {max}",
            self.counters.iteration
        ));
        ui.plain(&format!(
            "**Criteria:** {done}/{total} ({done} completed, {} remaining)",
            total.saturating_sub(done)
        ));
        self.print_remaining();
        ui.plain(&format!(
            "\nTo continue, raise the limit: ralph resume --max-iterations {}",
            max + 10
        ));
    }

    fn summary_tampered(&self, what: &[String]) {
        self.setup.ui.alert("## ⛔ RALPH Loop — Criteria tampered");
        self.setup.ui.plain(&format!(
            "Iteration {} changed what {} is judged by:",
            self.counters.iteration, self.setup.task_name
        ));
        for w in what {
            self.setup.ui.plain(&format!("  {w}"));
        }
        self.setup.ui.plain("\n\"All boxes checked\" must not be reachable by deleting boxes. Restore them (see git log -p) and run again.");
    }

    fn progress_line(&self) {
        let (done, total) = self.source.counts();
        self.setup.ui.plain(&format!(
            "**Progress:** {done}/{total} {} after {} iterations ({})",
            self.source.unit(),
            self.counters.iteration,
            human_duration(self.setup.started.elapsed())
        ));
    }

    fn print_remaining(&self) {
        let remaining = self.source.remaining();
        if !remaining.is_empty() {
            self.setup.ui.plain("\nRemaining criteria:");
            for c in remaining {
                self.setup.ui.plain(&format!("- [ ] {c}"));
            }
        }
    }

    /// Criteria the agent annotated while checking them: kept, but worth a person's look.
    fn print_annotations(&self) {
        if self.state.annotations.is_empty() {
            return;
        }
        self.setup
            .ui
            .plain("\nCriteria the agent annotated (kept as the same criteria; review them):");
        for a in &self.state.annotations {
            self.setup.ui.plain(&format!("- {a}"));
        }
    }
}
