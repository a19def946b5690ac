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
            Halt::Stalled { iterations, commit } => self.summary_stalled(*iterations, commit),
            Halt::Stuck => self.summary_stuck(),
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
                self.setup
                    .ui
                    .plain("\nContinue later (raise --max-cost or --max-wait if needed):");
                self.suggest(&self.command("resume"), "continue this run");
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
                    "Interrupted in iteration {n}: the agent was stopped{}.",
                    self.interrupted_work()
                ));
                self.suggest(
                    &self.command("resume"),
                    "continue this run where it stopped",
                );
            }
            Halt::WaitingForPerson(question) => self.summary_waiting(question),
            Halt::Error { message, hint } => {
                self.setup
                    .ui
                    .error(&Error::user(message.clone()).with_hint(hint.clone()));
            }
        }
        self.print_annotations();
    }

    fn summary_stalled(&self, iterations: u32, commit: &str) {
        let ui = self.setup.ui;
        ui.alert(&format!(
            "STALLED: {iterations} iterations with no change at {commit}"
        ));
        self.progress_line();
        self.print_remaining();
        ui.plain("\nThe agent changed nothing for three iterations: check its transcript in .ralph/runs/ and the task.");
        self.suggest(&self.command("resume"), "another try at this run");
        self.suggest(
            &self.start_over(),
            "a new run, once the task says better what to do",
        );
    }

    fn summary_waiting(&self, question: &str) {
        let ui = self.setup.ui;
        ui.alert("## ❓ RALPH Loop — Waiting for a person: no answer came in time");
        ui.plain(&format!("The agent asked: {question}"));
        self.progress_line();
        let name = crate::worktree::loop_name(&self.tree.repo).unwrap_or_else(|| "main".into());
        self.suggest(
            &format!("ralph answer {name} \"YOUR ANSWER\""),
            "answer the question (then resume)",
        );
        self.suggest(
            &self.command("resume"),
            "go on with the answer in the next prompt",
        );
    }

    fn summary_stuck(&self) {
        let ui = self.setup.ui;
        let t = 2 * self.setup.settings.stuck_threshold;
        ui.alert(&format!(
            "## 🤚 RALPH Loop — Stuck: no progress for {t} iterations"
        ));
        self.progress_line();
        self.print_remaining();
        ui.plain(
            "\nAdjust the task (split hard criteria, add guardrails), then start over: a resumed run is still stuck.",
        );
        self.suggest(&self.start_over(), "a new run on the task as it is now");
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
        // In a loop's worktree the changes are on the loop's branch, not in the main work tree
        // the user stands in: `ralph merge NAME` (said once the run is closed) brings them there.
        let branch = crate::worktree::own_branch_of(&self.tree.repo)
            .and_then(|b| b.strip_prefix("refs/heads/").map(|b| format!(" {b}")))
            .unwrap_or_default();
        ui.plain(&format!(
            "\nAll success criteria are met. Review the changes with:\n  git log --oneline -{n}{branch}"
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
        ui.plain("\nTo continue, raise the limit:");
        let more = max.max(self.counters.iteration) + 10;
        self.suggest(
            &self.command(&format!("resume --max-iterations {more}")),
            &format!("continue this run, up to {more} iterations in all"),
        );
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
        self.setup
            .ui
            .plain("\n\"All boxes checked\" must not be reachable by deleting boxes.");
        self.suggest(
            &self.command("resume"),
            &format!(
                "continue this run, once the criteria are back in {} (see git log -p)",
                self.state.task_file
            ),
        );
        self.suggest(&self.start_over(), "a new run on the task as it is now");
    }

    /// A `next:` line (`Ui::next`). A queue's item (its caller holds word of each iteration)
    /// gets none: the queue goes on to its next item, and says itself what to run.
    fn suggest(&self, command: &str, what: &str) {
        if self.recorded.is_none() {
            self.setup.ui.next(command, what);
        }
    }

    /// `ralph SUB` as the user types it where they stand: a loop's worktree named.
    fn command(&self, sub: &str) -> String {
        format!("ralph {sub}{}", crate::worktree::loop_flag(&self.tree.repo))
    }

    /// `ralph run --reset` on this run's task: a checklist's file named unless it is the one
    /// `ralph run` finds by itself.
    fn start_over(&self) -> String {
        let file = &self.state.task_file;
        let target = if self.source.mode() == Mode::Checklist && file != crate::task::TASK_FILE {
            format!(" {}", shell_words::quote(file))
        } else {
            String::new()
        };
        format!("{}{target}", self.command("run --reset"))
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
