//! Phase 6 of an iteration (SPEC §5.1 steps 7–8, §6): the pure decision, then the activity line,
//! the ITER record and `state.json` (in that order, after the commit), the report block, and the
//! halt with its summary.

use serde_json::json;

use super::Loop;
use super::attempt::Attempted;
use super::decide::{Counters, Decision, Halt, Outcome, decide};
use super::prepare::Prepared;
use super::record::{Ending, Recorded};
use crate::agent::process::StopCause;
use crate::error::Result;
use crate::state;
use crate::ui::{CostLine, Report, human_duration};

impl Loop {
    pub(super) fn conclude(
        &mut self,
        prev: &Counters,
        prep: &Prepared,
        attempted: &Attempted,
        ending: Ending,
        recorded: Recorded,
    ) -> Result<Option<i32>> {
        let outcome = self.outcome(&ending, &recorded);
        let (counters, decision) = decide(prev, &outcome);
        self.counters = counters;
        let mut notes = prep.notes.clone();
        self.state.feedback = feedback(&ending, &recorded);
        if let Some(refused) = &recorded.commit.refused {
            notes.push(format!("Commit refused: {refused}"));
        }
        self.write_logs(prep, attempted, &recorded, &decision, &mut notes)?;
        let decision = self.resolve_stuck(decision)?;
        self.state.done = recorded.done;
        self.state.total = recorded.total;
        self.counters.save_into(&mut self.state);
        self.report(prep, attempted, &recorded, &decision, &notes);
        match decision {
            Decision::Continue { .. } | Decision::AskStuck => {
                self.state.save(&self.rd.state_file())?;
                Ok(None)
            }
            Decision::Halt(halt) => self.halt(&halt).map(Some),
        }
    }

    /// The outcome `decide` reads.
    fn outcome(&self, ending: &Ending, recorded: &Recorded) -> Outcome {
        let key = recorded.key.clone();
        let v = match ending {
            Ok(v) => v,
            Err(halt) => {
                return Outcome::forced(halt.clone(), recorded.done, recorded.total, key);
            }
        };
        let j = &v.judged;
        Outcome {
            done: j.done,
            total: j.total,
            progress: j.progress,
            source_complete: j.source_complete,
            tests_ok: v.tests_ok,
            promise_ok: v.promise_ok,
            commit_refused: recorded.commit.refused.is_some(),
            tampered: j.tampered.clone(),
            over_budget: self
                .settings
                .max_cost
                .is_some_and(|max| self.state.cost_usd >= max),
            verdict: v.verdict.as_ref().map(|v| v.class.clone()),
            source_halt: j.halt.clone().or(v.verdict_halt.clone()),
            forced: None,
            key,
        }
    }

    /// The `iteration_finished` event, the activity line, the ITER record, the stuck notice.
    fn write_logs(
        &mut self,
        prep: &Prepared,
        attempted: &Attempted,
        recorded: &Recorded,
        decision: &Decision,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let n = prep.n;
        let duration = prep.t0.elapsed();
        let usage = &attempted.usage;
        let fin = &attempted.finished;
        let key = &recorded.key;
        self.emit(
            "iteration_finished",
            json!({
                "run_id": self.state.run_id,
                "iteration": n,
                "done": recorded.done,
                "total": recorded.total,
                "figures": key.figures,
                "exit_code": fin.exit_code,
                "verdict_exit_code": (recorded.exit != fin.exit_code).then_some(recorded.exit),
                "timed_out": matches!(fin.stopped, Some(StopCause::Timeout | StopCause::IdleTimeout)),
                "commit": key.commit,
                "committed": recorded.commit.subject.is_some(),
                "commit_refused": recorded.commit.refused.is_some(),
                "fingerprint": key.fingerprint,
                "duration_s": duration.as_secs_f64(),
                "cost_usd": usage.cost_usd,
                "total_cost_usd": self.state.cost_usd,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "turns": usage.turns,
            }),
        );
        self.log(&format!(
            "Iteration {n}: {}/{} {} complete (started: {}, ended: {}, duration: {})",
            recorded.done,
            recorded.total,
            self.source.unit(),
            prep.started_at,
            attempted.ended_at,
            human_duration(duration)
        ))?;
        let iter_log = self.source.iter_log(&self.rd.iterations_log());
        if let Some(dir) = iter_log.parent() {
            crate::files::create_dir_all(dir)
                .map_err(|e| crate::error::Error::file("create directory", dir, e))?;
        }
        state::append_line(
            &iter_log,
            &key.record(n, state::IterExit::Code(recorded.exit)),
        )?;
        if let Decision::Continue {
            newly_stuck: true, ..
        } = decision
        {
            let t = self.settings.stuck_threshold;
            self.log(&format!(
                "⚠️ Stuck detected — {t} iterations with no progress"
            ))?;
            self.emit(
                "stuck",
                json!({"iteration": n, "no_progress_iterations": t}),
            );
            notes.push(format!(
                "Stuck detected — {t} iterations with no progress; the next prompt carries the STUCK ALERT"
            ));
        }
        Ok(())
    }

    /// No progress for twice the threshold: ask in a terminal, halt when unattended.
    fn resolve_stuck(&mut self, decision: Decision) -> Result<Decision> {
        if decision != Decision::AskStuck {
            return Ok(decision);
        }
        if !self.ask_continue_when_stuck() {
            return Ok(Decision::Halt(Halt::Stuck));
        }
        self.log("Stuck: the user chose to continue")?;
        self.counters.no_progress_streak = 0;
        Ok(if self.counters.iteration >= self.settings.max_iterations {
            Decision::Halt(Halt::MaxIterations)
        } else {
            Decision::Continue {
                stuck_alert: false,
                newly_stuck: false,
            }
        })
    }

    /// The between-iterations report block (SPEC §9).
    fn report(
        &self,
        prep: &Prepared,
        attempted: &Attempted,
        recorded: &Recorded,
        decision: &Decision,
        notes: &[String],
    ) {
        let usage = &attempted.usage;
        let next = matches!(decision, Decision::Continue { .. }).then_some(prep.n + 1);
        let report = Report {
            iteration: prep.n,
            max_iterations: self.settings.max_iterations,
            done: recorded.done,
            total: recorded.total,
            unit: self.source.unit(),
            last_commit: recorded.commit.subject.as_deref(),
            started: &prep.started_at,
            ended: &attempted.ended_at,
            duration: prep.t0.elapsed(),
            elapsed: self.started.elapsed(),
            next,
            notes,
            cost: (usage.cost_usd > 0.0 || usage.input_tokens > 0).then_some(CostLine {
                iteration_usd: usage.cost_usd,
                total_usd: self.state.cost_usd,
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
            }),
        };
        self.ui.line(&report.render());
    }

    /// Halt: log it, record it in `state.json`, announce it, print the summary.
    pub(super) fn halt(&mut self, halt: &Halt) -> Result<i32> {
        let code = self.halt_quietly(halt)?;
        self.summary(halt);
        Ok(code)
    }

    /// [`Loop::halt`] without the summary.
    pub(super) fn halt_quietly(&mut self, halt: &Halt) -> Result<i32> {
        let code = halt.exit_code();
        self.log(&format!("Halt: {} (exit {code})", halt.reason()))?;
        self.finish_state(halt)?;
        Ok(code)
    }

    /// Record the halt in `state.json` and announce it.
    fn finish_state(&mut self, halt: &Halt) -> Result<()> {
        let reason = halt.reason();
        let code = halt.exit_code();
        self.state.running = false;
        self.state.halt_reason = Some(reason);
        self.state.exit_code = Some(code);
        self.state.save(&self.rd.state_file())?;
        let mut event = json!({
            "run_id": self.state.run_id,
            "reason": reason,
            "exit_code": code,
            "iteration": self.state.iteration,
            "done": self.state.done,
            "total": self.state.total,
        });
        if let Halt::Error { message, .. } = halt {
            event["message"] = message.clone().into();
        }
        self.emit("halted", event);
        Ok(())
    }
}

/// What the next prompt is told: the failed checks, and a commit a hook refused.
fn feedback(ending: &Ending, recorded: &Recorded) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Ok(v) = ending
        && let Some(f) = &v.feedback
    {
        parts.push(f.clone());
    }
    if let Some(r) = &recorded.commit.refused {
        parts.push(format!(
            "The iteration's commit was refused, so its work is not done: {r}"
        ));
    }
    (!parts.is_empty()).then(|| super::checks::bounded(parts.join("\n\n")))
}
