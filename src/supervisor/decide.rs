//! The decision after an iteration (SPEC §5.2, §6): a pure function of the loop's counters and
//! the iteration's outcome, unit-tested without processes or files.

use crate::state::IterKey;

/// The counters the decision depends on, carried from iteration to iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    /// The iteration that just finished (1-based).
    pub iteration: u32,
    pub max_iterations: u32,
    pub stuck_threshold: u32,
    /// Iterations in a row without progress, this one included.
    pub no_progress_streak: u32,
    /// The highest done count seen in this run: progress means passing it.
    pub best_done: usize,
    /// The last (up to three) ITER records, this one last.
    pub last_keys: Vec<IterKey>,
}

/// What an iteration produced, as the task source and the commands judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub done: usize,
    pub total: usize,
    /// All criteria checked (the task source's own verdict).
    pub source_complete: bool,
    /// The test command passed, or there is none.
    pub tests_ok: bool,
    /// `--completion-promise` is satisfied, or not required.
    pub promise_ok: bool,
    /// Baseline criteria that disappeared while unchecked.
    pub tampered: Vec<String>,
    pub key: IterKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    Complete,
    MaxIterations,
    Stalled { iterations: u32, commit: String },
    Stuck,
    Tampered(Vec<String>),
}

impl Halt {
    pub fn exit_code(&self) -> i32 {
        use crate::error::exit;
        match self {
            Halt::Complete => exit::COMPLETE,
            Halt::MaxIterations => exit::MAX_ITERATIONS,
            Halt::Stalled { .. } => exit::STALLED,
            Halt::Stuck => exit::STUCK,
            Halt::Tampered(_) => exit::TAMPERED,
        }
    }

    /// The `halt_reason` of `ralph status --json`.
    pub fn reason(&self) -> &'static str {
        match self {
            Halt::Complete => "complete",
            Halt::MaxIterations => "max_iterations",
            Halt::Stalled { .. } => "stalled",
            Halt::Stuck => "stuck",
            Halt::Tampered(_) => "tampered",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go on; `stuck_alert` puts the STUCK ALERT into the next prompt, `newly_stuck` logs it.
    Continue {
        stuck_alert: bool,
        newly_stuck: bool,
    },
    /// No progress for twice the threshold: ask in a terminal, halt when unattended.
    AskStuck,
    Halt(Halt),
}

/// Fold one outcome into the counters and decide. `prev` holds the counters before this
/// iteration with `iteration` already set to this iteration's number.
pub fn decide(prev: &Counters, outcome: &Outcome) -> (Counters, Decision) {
    let mut next = prev.clone();
    let progress = outcome.done > prev.best_done;
    if progress {
        next.best_done = outcome.done;
        next.no_progress_streak = 0;
    } else {
        next.no_progress_streak = prev.no_progress_streak + 1;
    }
    next.last_keys.push(outcome.key.clone());
    if next.last_keys.len() > 3 {
        next.last_keys.remove(0);
    }

    let decision = if !outcome.tampered.is_empty() {
        Decision::Halt(Halt::Tampered(outcome.tampered.clone()))
    } else if outcome.source_complete && outcome.tests_ok && outcome.promise_ok {
        Decision::Halt(Halt::Complete)
    } else if next.last_keys.len() == 3 && next.last_keys.iter().all(|k| *k == next.last_keys[0]) {
        Decision::Halt(Halt::Stalled {
            iterations: 3,
            commit: outcome.key.commit.clone(),
        })
    } else if next.no_progress_streak >= 2 * prev.stuck_threshold {
        Decision::AskStuck
    } else if prev.iteration >= prev.max_iterations {
        Decision::Halt(Halt::MaxIterations)
    } else {
        Decision::Continue {
            stuck_alert: next.no_progress_streak >= prev.stuck_threshold,
            newly_stuck: next.no_progress_streak == prev.stuck_threshold,
        }
    };
    (next, decision)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(figures: &str, commit: &str) -> IterKey {
        IterKey {
            figures: figures.into(),
            commit: commit.into(),
            fingerprint: "4294967295 0".into(),
        }
    }

    fn counters(iteration: u32) -> Counters {
        Counters {
            iteration,
            max_iterations: 50,
            stuck_threshold: 3,
            no_progress_streak: 0,
            best_done: 0,
            last_keys: Vec::new(),
        }
    }

    fn outcome(done: usize, total: usize, commit: &str) -> Outcome {
        Outcome {
            done,
            total,
            source_complete: done == total,
            tests_ok: true,
            promise_ok: true,
            tampered: Vec::new(),
            key: key(&format!("{done}/{total} criteria"), commit),
        }
    }

    /// Run a sequence of outcomes through `decide`, returning every decision.
    fn simulate(start: Counters, outcomes: &[Outcome]) -> Vec<Decision> {
        let mut c = start;
        let mut out = Vec::new();
        for o in outcomes {
            let (next, d) = decide(&c, o);
            out.push(d);
            c = Counters {
                iteration: next.iteration + 1,
                ..next
            };
        }
        out
    }

    #[test]
    fn one_box_per_iteration_completes_on_the_third() {
        let ds = simulate(
            counters(1),
            &[outcome(1, 3, "a"), outcome(2, 3, "b"), outcome(3, 3, "c")],
        );
        assert!(matches!(
            ds[0],
            Decision::Continue {
                stuck_alert: false,
                ..
            }
        ));
        assert!(matches!(
            ds[1],
            Decision::Continue {
                stuck_alert: false,
                ..
            }
        ));
        assert_eq!(ds[2], Decision::Halt(Halt::Complete));
    }

    #[test]
    fn idle_agent_stalls_at_the_third_identical_record() {
        let ds = simulate(
            counters(1),
            &[outcome(0, 3, "a"), outcome(0, 3, "a"), outcome(0, 3, "a")],
        );
        assert!(matches!(ds[1], Decision::Continue { .. }));
        assert_eq!(
            ds[2],
            Decision::Halt(Halt::Stalled {
                iterations: 3,
                commit: "a".into()
            })
        );
    }

    #[test]
    fn churn_gets_the_alert_from_the_fourth_prompt_and_stuck_after_six() {
        let os: Vec<Outcome> = (0..6).map(|i| outcome(0, 3, &format!("c{i}"))).collect();
        let ds = simulate(counters(1), &os);
        // Decisions after iterations 1 and 2: no alert. After 3: alert for prompt 4, logged once.
        assert_eq!(
            ds[0],
            Decision::Continue {
                stuck_alert: false,
                newly_stuck: false
            }
        );
        assert_eq!(
            ds[1],
            Decision::Continue {
                stuck_alert: false,
                newly_stuck: false
            }
        );
        assert_eq!(
            ds[2],
            Decision::Continue {
                stuck_alert: true,
                newly_stuck: true
            }
        );
        assert_eq!(
            ds[3],
            Decision::Continue {
                stuck_alert: true,
                newly_stuck: false
            }
        );
        assert_eq!(
            ds[4],
            Decision::Continue {
                stuck_alert: true,
                newly_stuck: false
            }
        );
        assert_eq!(ds[5], Decision::AskStuck);
    }

    #[test]
    fn max_iterations_halts_but_completion_on_the_last_wins() {
        let mut c = counters(2);
        c.max_iterations = 2;
        c.best_done = 1;
        let (_, d) = decide(&c, &outcome(2, 5, "x"));
        assert_eq!(d, Decision::Halt(Halt::MaxIterations));
        let (_, d) = decide(&c, &outcome(5, 5, "x"));
        assert_eq!(d, Decision::Halt(Halt::Complete));
    }

    #[test]
    fn tampering_beats_everything() {
        let mut o = outcome(2, 2, "x");
        o.tampered = vec!["gone".into()];
        let (_, d) = decide(&counters(1), &o);
        assert_eq!(d, Decision::Halt(Halt::Tampered(vec!["gone".into()])));
    }

    #[test]
    fn all_checked_needs_tests_and_promise() {
        let mut o = outcome(3, 3, "x");
        o.tests_ok = false;
        assert!(matches!(
            decide(&counters(1), &o).1,
            Decision::Continue { .. }
        ));
        let mut o = outcome(3, 3, "x");
        o.promise_ok = false;
        assert!(matches!(
            decide(&counters(1), &o).1,
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn a_promise_alone_never_completes() {
        let mut o = outcome(1, 3, "x");
        o.promise_ok = true;
        o.source_complete = false;
        assert!(matches!(
            decide(&counters(1), &o).1,
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn unchecking_then_rechecking_is_not_progress() {
        let mut c = counters(1);
        let (n, _) = decide(&c, &outcome(2, 3, "a"));
        assert_eq!(n.no_progress_streak, 0);
        c = Counters { iteration: 2, ..n };
        let (n, _) = decide(&c, &outcome(1, 3, "b"));
        assert_eq!(n.no_progress_streak, 1);
        c = Counters { iteration: 3, ..n };
        let (n, _) = decide(&c, &outcome(2, 3, "c"));
        assert_eq!(n.no_progress_streak, 2, "re-checking a box is not progress");
        assert_eq!(n.best_done, 2);
    }

    #[test]
    fn different_fingerprints_are_not_a_stall() {
        let mut os = vec![outcome(0, 3, "a"), outcome(0, 3, "a"), outcome(0, 3, "a")];
        os[2].key.fingerprint = "1 2".into();
        let ds = simulate(counters(1), &os);
        assert!(matches!(ds[2], Decision::Continue { .. }));
    }

    #[test]
    fn exit_codes_and_reasons() {
        assert_eq!(Halt::Complete.exit_code(), 0);
        assert_eq!(Halt::MaxIterations.exit_code(), 3);
        assert_eq!(
            Halt::Stalled {
                iterations: 3,
                commit: String::new()
            }
            .exit_code(),
            4
        );
        assert_eq!(Halt::Stuck.exit_code(), 5);
        assert_eq!(Halt::Tampered(vec![]).exit_code(), 8);
        assert_eq!(Halt::Stuck.reason(), "stuck");
    }
}
