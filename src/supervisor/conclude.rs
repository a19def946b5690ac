//! Phase 6 of an iteration (SPEC §5.1 steps 7–8, §6, §11): the pure decision, then the activity
//! line, the ITER record and `state.json` (in that order, after the commit), the report block,
//! and the halt with its summary. A record or a state that cannot be written still lets the
//! steps after it run, and ends the run with the error: it never goes on past an iteration it
//! could not record.

use super::Loop;
use super::attempt::Attempted;
use super::decide::{Counters, Decision, Halt, Outcome, decide};
use super::faults::{Faults, failed};
use super::prepare::Prepared;
use super::record::{Ending, Recorded};
use crate::error::{Error, Result};
use crate::event::{Event, IterationFinished, Stuck};
use crate::iter_record::IterExit;
use crate::proc::relay::StopCause;
use crate::state;
use crate::ui::{CostLine, Report, human_duration};

impl Loop {
    pub(super) fn conclude(
        &mut self,
        prev: &Counters,
        prep: &Prepared,
        attempted: &Attempted,
        ending: Ending,
        mut recorded: Recorded,
    ) -> Option<i32> {
        let first = decide(prev, &self.outcome(&ending, &recorded));
        let (counters, decision) = self.check_the_tree(prev, prep, &ending, &mut recorded, first);
        self.counters = counters;
        let mut notes = prep.notes.clone();
        self.state.feedback = feedback(&ending, &recorded);
        self.last_committed = recorded.commit.subject.is_some();
        if let Some(refused) = &recorded.commit.refused {
            notes.push(format!("Commit refused: {refused}"));
        }
        let decision = match self.write_logs(prep, attempted, &recorded, &decision, &mut notes) {
            Ok(()) => decision,
            Err(e) => Decision::Halt(unrecorded(prep.n, &e, decision)),
        };
        // The iteration's report first, then (stuck, in a terminal) the question it leads to.
        self.report(prep, attempted, &recorded, &decision, &notes);
        let decision = self.resolve_stuck(decision);
        self.state.done = recorded.done;
        self.state.total = recorded.total;
        self.source.save_into(&mut self.state);
        self.counters.save_into(&mut self.state);
        match decision {
            Decision::Continue { .. } | Decision::AskStuck => {
                self.take_tip();
                match self.state.save(&self.tree.rd.state_file()) {
                    Ok(()) => None,
                    Err(e) => Some(self.halt(&failed("the state is not saved", &e))),
                }
            }
            Decision::Halt(halt) => Some(self.halt(&halt)),
        }
    }

    /// The outcome `decide` reads. A close that failed forces its error, over what the
    /// iteration did; an interrupt that came once the agent was judged (during the checks'
    /// aftermath or the close: a git hook or git command it stopped) forces the interrupt.
    pub(super) fn outcome(&self, ending: &Ending, recorded: &Recorded) -> Outcome {
        let mut outcome = self.judged_outcome(ending, recorded);
        if let Some(failure) = &recorded.failure {
            outcome.forced = Some(failure.clone());
        } else if outcome.forced.is_none() && self.interrupts.count() > 0 {
            outcome.forced = Some(Halt::Interrupted);
        }
        outcome
    }

    fn judged_outcome(&self, ending: &Ending, recorded: &Recorded) -> Outcome {
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
            evidence: v.evidence(),
            commit_refused: recorded.commit.refused.is_some(),
            tampered: j.tampered.clone(),
            over_budget: self
                .setup
                .settings
                .max_cost
                .is_some_and(|max| self.state.cost_usd >= max),
            source_halt: j.halt.clone().or(v.verdict_halt.clone()),
            forced: None,
            key,
        }
    }

    /// The `iteration_finished` event, the activity line, the ITER record, the stuck notice;
    /// `Err` when the ITER record could not be written.
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
        let agent = self.agents.current().name.clone();
        let mine = self.state.agents.entry(agent.clone()).or_default();
        mine.iterations = mine.iterations.saturating_add(1);
        self.emit(Event::IterationFinished(IterationFinished {
            run_id: self.state.run_id.clone(),
            iteration: n,
            agent,
            done: recorded.done,
            total: recorded.total,
            figures: key.figures.clone(),
            // `null` (and `error`) when the record says `exit error`.
            exit_code: (recorded.exit != IterExit::Error).then_some(fin.exit_code),
            error: recorded.exit == IterExit::Error,
            verdict_exit_code: match recorded.exit {
                IterExit::Code(c) if c != fin.exit_code => Some(c),
                _ => None,
            },
            timed_out: matches!(
                fin.stopped,
                Some(StopCause::Timeout | StopCause::IdleTimeout)
            ),
            commit: key.commit.clone(),
            committed: recorded.commit.subject.is_some(),
            commit_refused: recorded.commit.refused.is_some(),
            fingerprint: key.fingerprint.clone(),
            duration_s: duration.as_secs_f64(),
            cost_usd: usage.cost_usd,
            total_cost_usd: self.state.cost_usd,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            turns: usage.turns,
        }));
        self.log(&format!(
            "Iteration {n}: {}/{} {} complete (started: {}, ended: {}, duration: {})",
            recorded.done,
            recorded.total,
            self.source.unit(),
            prep.started_at,
            attempted.ended_at,
            human_duration(duration)
        ));
        let written = self.write_record(n, recorded);
        if let Decision::Continue {
            newly_stuck: true, ..
        } = decision
        {
            let t = self.setup.settings.stuck_threshold;
            self.log(&format!(
                "⚠️ Stuck detected — {t} iterations with no progress"
            ));
            self.emit(Event::Stuck(Stuck {
                iteration: n,
                no_progress_iterations: t,
            }));
            notes.push(format!(
                "Stuck detected — {t} iterations with no progress; the next prompt carries the STUCK ALERT"
            ));
        }
        written
    }

    /// The ITER record of iteration `n`, in the source's iteration log.
    fn write_record(&self, n: u32, recorded: &Recorded) -> Result<()> {
        let iter_log = self.source.iter_log(&self.tree.rd.iterations_log());
        if let Some(dir) = iter_log.parent() {
            crate::files::create_dir_all(dir)
                .map_err(|e| Error::file("create directory", dir, e))?;
        }
        // A run with fallback agents names the agent of each iteration.
        let agent = self
            .agents
            .has_fallbacks()
            .then(|| self.agents.current().name.as_str());
        state::append_line(&iter_log, &recorded.key.record_by(n, recorded.exit, agent))
    }

    /// No progress for twice the threshold: ask in a terminal, halt when unattended.
    fn resolve_stuck(&mut self, decision: Decision) -> Decision {
        if decision != Decision::AskStuck {
            return decision;
        }
        if !self.ask_continue_when_stuck() {
            return Decision::Halt(Halt::Stuck);
        }
        self.log("Stuck: the user chose to continue");
        self.counters.no_progress_streak = 0;
        if self.counters.iteration >= self.setup.settings.max_iterations {
            Decision::Halt(Halt::MaxIterations)
        } else {
            Decision::Continue {
                stuck_alert: false,
                newly_stuck: false,
            }
        }
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
            max_iterations: self.setup.settings.max_iterations,
            done: recorded.done,
            total: recorded.total,
            unit: self.source.unit(),
            last_commit: recorded.commit.subject.as_deref(),
            started: &prep.started_at,
            ended: &attempted.ended_at,
            duration: prep.t0.elapsed(),
            elapsed: self.setup.started.elapsed(),
            next,
            notes,
            cost: (usage.cost_usd > 0.0 || usage.input_tokens > 0).then_some(CostLine {
                iteration_usd: usage.cost_usd,
                total_usd: self.state.cost_usd,
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
            }),
        };
        self.setup.ui.line(&report.render());
    }
}

/// The ITER record of iteration `n` is not written: whatever was decided, the run ends with
/// that error rather than go on past an iteration without its record.
fn unrecorded(n: u32, e: &Error, decision: Decision) -> Halt {
    let mut faults = Faults::default();
    faults.note(format_args!("iteration {n}'s record is not written"), e);
    match decision {
        Decision::Halt(halt) => faults.halt_with(Some(&halt)),
        _ => faults.halt_with(None),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::close::tests::{full_disk, message};

    #[test]
    fn a_lost_record_ends_the_run_whatever_was_decided() {
        let e = full_disk(".ralph/iterations.log");
        let go_on = Decision::Continue {
            stuck_alert: false,
            newly_stuck: false,
        };
        for decision in [go_on, Decision::Halt(Halt::Complete)] {
            let h = unrecorded(4, &e, decision);
            assert!(
                message(&h).starts_with("iteration 4's record is not written: failed to write"),
                "{h:?}"
            );
            assert_eq!(h.exit_code(), 1);
        }
        let before = failed("iteration 4 could not be judged", &full_disk("T.md"));
        let h = unrecorded(4, &e, Decision::Halt(before));
        assert!(
            message(&h).starts_with("iteration 4 could not be judged: ")
                && message(&h).contains("; and iteration 4's record is not written: "),
            "{h:?}"
        );
    }
}
