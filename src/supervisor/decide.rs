//! The decision after an iteration (SPEC §5.2, §6): a pure function of the loop's counters and
//! the iteration's outcome, unit-tested without processes or files.

use crate::iter_record::IterKey;
use crate::state::{HaltReason, RunState};
use crate::task::verdict::VerdictClass;

/// How many verdict figures a run remembers for its progress rule (a cycle longer than this
/// would count as progress once per lap).
const SEEN_FIGURES_KEPT: usize = 1000;

/// The counters the decision depends on, carried from iteration to iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counters {
    /// The iteration that just finished (1-based).
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) stuck_threshold: u32,
    /// Iterations in a row without progress, this one included.
    pub(crate) no_progress_streak: u32,
    /// The highest done count seen in this run: progress means passing it.
    pub(crate) best_done: usize,
    /// The last (up to three) ITER records, this one last.
    pub(crate) last_keys: Vec<IterKey>,
    /// Verdict runs in a row that could not run (exit other than 0/3/4/5).
    pub(crate) verdict_failures: u32,
    /// Fingerprints of the verdict figures seen in this run ([`figures_fingerprint`]).
    pub(crate) seen_figures: Vec<String>,
}

impl Counters {
    /// The counters a run resumes with: what `state.json` recorded, under today's limits.
    pub(crate) fn restore(state: &RunState, max_iterations: u32, stuck_threshold: u32) -> Counters {
        Counters {
            iteration: state.iteration,
            max_iterations,
            stuck_threshold,
            no_progress_streak: state.no_progress_streak,
            best_done: state.best_done,
            last_keys: state.last_keys.clone(),
            verdict_failures: state.verdict_failures,
            seen_figures: state.seen_figures.clone(),
        }
    }

    /// Write the counters `state.json` keeps (the inverse of `restore`).
    pub(crate) fn save_into(&self, state: &mut RunState) {
        state.best_done = self.best_done;
        state.verdict_failures = self.verdict_failures;
        state.no_progress_streak = self.no_progress_streak;
        state.last_keys = self.last_keys.clone();
        state.seen_figures = self.seen_figures.clone();
    }
}

/// A stable fingerprint of verdict figures (FNV-1a, 64 bits, hex): the same across versions, so
/// a resumed run knows what it saw.
pub(crate) fn figures_fingerprint(figures: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in figures.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What completion rests on (SPEC §5.3): the one rule, for an iteration's outcome, the status
/// block its close writes, and CPM's roll-up before the first iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Evidence {
    /// All criteria checked, every task DONE (the task source's own verdict).
    pub(crate) source_complete: bool,
    /// The verdict command's judgement, when there is one: it then decides, not the source.
    pub(crate) verdict: Option<VerdictClass>,
    /// The test command passed, or there is none.
    pub(crate) tests_ok: bool,
    /// `--completion-promise` is satisfied, or not required.
    pub(crate) promise_ok: bool,
}

impl Evidence {
    /// The evidence checked now, before any agent ran ("already complete", SPEC §5.3): no
    /// final message holds a promise yet, so none is asked for.
    pub(crate) fn now(
        source_complete: bool,
        verdict: Option<VerdictClass>,
        tests_ok: bool,
    ) -> Evidence {
        Evidence {
            source_complete,
            verdict,
            tests_ok,
            promise_ok: true,
        }
    }

    /// The work is done: the verdict verifies every row (or, without a verdict command, the
    /// source says so), the tests pass and the promise is kept.
    pub(crate) fn complete(&self) -> bool {
        let done = match &self.verdict {
            Some(v) => *v == VerdictClass::Verified,
            None => self.source_complete,
        };
        done && self.tests_ok && self.promise_ok
    }
}

/// What an iteration produced, as the task source and the commands judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) done: usize,
    pub(crate) total: usize,
    /// The source's own progress measure when it counts the verdict's records itself (CPM:
    /// verified rows plus traced requirements): progress is then this passing `best_done`,
    /// and unseen verdict figures are not progress by themselves.
    pub(crate) progress: Option<usize>,
    /// What completion rests on.
    pub(crate) evidence: Evidence,
    /// A hook refused the iteration's commit: its work is not done (SPEC §5.3).
    pub(crate) commit_refused: bool,
    /// Baseline criteria that disappeared while unchecked.
    pub(crate) tampered: Vec<String>,
    /// The run's total cost reached `--max-cost`.
    pub(crate) over_budget: bool,
    /// A halt the task source itself calls for (e.g. a table that ended PARTIAL).
    pub(crate) source_halt: Option<Halt>,
    /// An ending decided before any judging (interrupted, a login failure, the waiting budget,
    /// an unreadable source): the iteration is recorded, then the run halts with it.
    pub(crate) forced: Option<Halt>,
    pub(crate) key: IterKey,
}

impl Outcome {
    /// The outcome of an iteration that ended before it could be judged: the counts stay.
    pub(crate) fn forced(halt: Halt, done: usize, total: usize, key: IterKey) -> Outcome {
        Outcome {
            done,
            total,
            progress: None,
            evidence: Evidence::default(),
            commit_refused: false,
            tampered: Vec::new(),
            over_budget: false,
            source_halt: None,
            forced: Some(halt),
            key,
        }
    }
}

/// Why the run halts, with what the summary needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Halt {
    Complete,
    MaxIterations,
    Stalled {
        iterations: u32,
        commit: String,
    },
    Stuck,
    Tampered(Vec<String>),
    /// Verdict exit 5: these rows cannot be verified in this environment.
    TargetOnly(Vec<String>),
    /// The verdict command could not run twice in a row.
    VerdictUnavailable,
    /// Work ended with parts that cannot be done (BLOCKED tasks, an uncovered spec).
    Partial(Vec<String>),
    /// `--max-cost` or the waiting budget reached (why).
    Budget(String),
    /// Ctrl-C, SIGTERM or SIGHUP.
    Interrupted,
    /// The agent's question (its text) went unanswered for `--answer-timeout`.
    WaitingForPerson(String),
    /// The run cannot go on: the agent cannot log in, the task source is unreadable, a phase
    /// failed (git refused, a write failed). Its iteration is recorded as `exit error`.
    Error {
        message: String,
        hint: String,
    },
}

impl Halt {
    pub(crate) fn exit_code(&self) -> i32 {
        self.reason().exit_code()
    }

    /// The `halt_reason` of `ralph status --json`.
    pub(crate) fn reason(&self) -> HaltReason {
        match self {
            Halt::Complete => HaltReason::Complete,
            Halt::MaxIterations => HaltReason::MaxIterations,
            Halt::Stalled { .. } => HaltReason::Stalled,
            Halt::Stuck => HaltReason::Stuck,
            Halt::Tampered(_) => HaltReason::Tampered,
            Halt::TargetOnly(_) => HaltReason::TargetOnly,
            Halt::VerdictUnavailable => HaltReason::VerdictUnavailable,
            Halt::Partial(_) => HaltReason::Partial,
            Halt::Budget(_) => HaltReason::Budget,
            Halt::Interrupted => HaltReason::Interrupted,
            Halt::WaitingForPerson(_) => HaltReason::WaitingForPerson,
            Halt::Error { .. } => HaltReason::Error,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
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
pub(crate) fn decide(prev: &Counters, outcome: &Outcome) -> (Counters, Decision) {
    let next = fold(prev, outcome);
    let verdict = outcome.evidence.verdict.as_ref();
    let decision = if let Some(h) = &outcome.forced {
        Decision::Halt(h.clone())
    } else if !outcome.tampered.is_empty() {
        Decision::Halt(Halt::Tampered(outcome.tampered.clone()))
    } else if let Some(VerdictClass::TargetOnly(rows)) = verdict {
        Decision::Halt(Halt::TargetOnly(rows.clone()))
    } else if next.verdict_failures >= 2 {
        Decision::Halt(Halt::VerdictUnavailable)
    } else if let Some(h) = &outcome.source_halt {
        Decision::Halt(h.clone())
    } else if outcome.evidence.complete() && !outcome.commit_refused {
        Decision::Halt(Halt::Complete)
    } else if outcome.over_budget {
        Decision::Halt(Halt::Budget("the total cost reached --max-cost".into()))
    } else if next.last_keys.len() == 3
        && next.last_keys.iter().all(|k| k.same_as(&next.last_keys[0]))
    {
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

/// The counters after this outcome: progress (the done count — or the source's own measure —
/// past its best, or verdict figures this run has not seen when the source does not count
/// them itself), verdict failures in a row, the last three records.
fn fold(prev: &Counters, outcome: &Outcome) -> Counters {
    let mut next = prev.clone();
    let measure = outcome.progress.unwrap_or(outcome.done);
    let mut progress = measure > prev.best_done;
    let verdict = outcome.evidence.verdict.as_ref();
    if verdict.is_some() && outcome.forced.is_none() && outcome.progress.is_none() {
        let fp = figures_fingerprint(&outcome.key.figures);
        if !next.seen_figures.contains(&fp) {
            progress = true;
            next.seen_figures.push(fp);
            if next.seen_figures.len() > SEEN_FIGURES_KEPT {
                next.seen_figures.remove(0);
            }
        }
    }
    next.best_done = prev.best_done.max(measure);
    next.no_progress_streak = if progress {
        0
    } else {
        prev.no_progress_streak + 1
    };
    next.verdict_failures = match verdict {
        Some(VerdictClass::Unavailable) => prev.verdict_failures + 1,
        _ => 0,
    };
    next.last_keys.push(outcome.key.clone());
    if next.last_keys.len() > 3 {
        next.last_keys.remove(0);
    }
    next
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
            verdict_failures: 0,
            seen_figures: Vec::new(),
        }
    }

    fn outcome(done: usize, total: usize, commit: &str) -> Outcome {
        Outcome {
            done,
            total,
            progress: None,
            evidence: Evidence {
                source_complete: done == total,
                verdict: None,
                tests_ok: true,
                promise_ok: true,
            },
            commit_refused: false,
            tampered: Vec::new(),
            over_budget: false,
            source_halt: None,
            forced: None,
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
        o.evidence.tests_ok = false;
        assert!(matches!(
            decide(&counters(1), &o).1,
            Decision::Continue { .. }
        ));
        let mut o = outcome(3, 3, "x");
        o.evidence.promise_ok = false;
        assert!(matches!(
            decide(&counters(1), &o).1,
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn the_verdict_decides_over_the_source_and_the_checks_over_both() {
        let all = |source_complete, verdict| Evidence {
            source_complete,
            verdict,
            tests_ok: true,
            promise_ok: true,
        };
        assert!(all(true, None).complete());
        assert!(!all(false, None).complete());
        assert!(!all(true, Some(VerdictClass::Unverified)).complete());
        assert!(all(false, Some(VerdictClass::Verified)).complete());
        let failing = Evidence {
            tests_ok: false,
            ..all(true, Some(VerdictClass::Verified))
        };
        assert!(!failing.complete());
        // Checked now, before any agent: no promise to ask for, the tests still.
        assert!(Evidence::now(true, None, true).complete());
        assert!(!Evidence::now(true, None, false).complete());
    }

    #[test]
    fn a_promise_alone_never_completes() {
        let mut o = outcome(1, 3, "x");
        o.evidence.promise_ok = true;
        o.evidence.source_complete = false;
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

    fn verdict(class: VerdictClass, figures: &str, done: usize) -> Outcome {
        let mut o = Outcome {
            key: key(figures, "c"),
            ..outcome(done, 3, "c")
        };
        o.evidence.verdict = Some(class);
        o
    }

    #[test]
    fn verdict_three_then_zero_completes_on_zero_only() {
        let o = verdict(VerdictClass::Unverified, "SUMMARY 1 unverified", 3);
        let (n, d) = decide(&counters(1), &o);
        assert!(
            matches!(d, Decision::Continue { .. }),
            "all boxes checked but verdict 3"
        );
        let (_, d) = decide(
            &Counters { iteration: 2, ..n },
            &verdict(VerdictClass::Verified, "SUMMARY 0 unverified", 0),
        );
        assert_eq!(
            d,
            Decision::Halt(Halt::Complete),
            "verdict 0 completes, whatever the boxes"
        );
    }

    #[test]
    fn verdict_five_halts_target_only() {
        let (_, d) = decide(
            &counters(1),
            &verdict(VerdictClass::TargetOnly(vec!["R1".into()]), "s", 0),
        );
        assert_eq!(d, Decision::Halt(Halt::TargetOnly(vec!["R1".into()])));
        assert_eq!(Halt::TargetOnly(vec![]).exit_code(), 6);
    }

    #[test]
    fn verdict_unavailable_twice_in_a_row_halts() {
        let (n, d) = decide(&counters(1), &verdict(VerdictClass::Unavailable, "x", 0));
        assert!(matches!(d, Decision::Continue { .. }));
        let n = Counters { iteration: 2, ..n };
        // A good run in between resets the count.
        let (n2, _) = decide(&n, &verdict(VerdictClass::Unverified, "y", 0));
        let (_, d) = decide(
            &Counters { iteration: 3, ..n2 },
            &verdict(VerdictClass::Unavailable, "z", 0),
        );
        assert!(matches!(d, Decision::Continue { .. }));
        let (_, d) = decide(&n, &verdict(VerdictClass::Unavailable, "w", 0));
        assert_eq!(d, Decision::Halt(Halt::VerdictUnavailable));
        assert_eq!(Halt::VerdictUnavailable.exit_code(), 7);
    }

    #[test]
    fn only_unseen_verdict_figures_are_progress() {
        let mut c = counters(1);
        let mut streaks = Vec::new();
        // New, repeated, new, then alternating between the two known values.
        for f in [
            "SUMMARY 2",
            "SUMMARY 2",
            "SUMMARY 1",
            "SUMMARY 2",
            "SUMMARY 1",
            "SUMMARY 2",
        ] {
            let (n, _) = decide(&c, &verdict(VerdictClass::Unverified, f, 0));
            streaks.push(n.no_progress_streak);
            c = Counters {
                iteration: n.iteration + 1,
                ..n
            };
        }
        assert_eq!(streaks, vec![0, 1, 0, 1, 2, 3]);
        assert_eq!(c.seen_figures.len(), 2);
        assert_eq!(
            figures_fingerprint("SUMMARY 2"),
            figures_fingerprint("SUMMARY 2")
        );
        assert_ne!(
            figures_fingerprint("SUMMARY 2"),
            figures_fingerprint("SUMMARY 1")
        );
    }

    #[test]
    fn a_counted_measure_is_the_only_progress() {
        // CPM: the roll-up's records counted (verified rows + traced requirements). New figures
        // with the same measure (a row added, rows renumbered) are no progress; a row verified
        // is, one per iteration, however the figures read.
        let counted = |figures: &str, measure: usize| Outcome {
            progress: Some(measure),
            ..verdict(VerdictClass::Unverified, figures, measure)
        };
        let mut c = counters(1);
        let mut streaks = Vec::new();
        for (f, m) in [
            ("1 of 8 rows", 1),
            ("1 of 9 rows", 1),
            ("1 of 10 rows", 1),
            ("2 of 10 rows", 2),
            ("1 of 10 rows", 1),
            ("3 of 10 rows", 3),
        ] {
            let (n, _) = decide(&c, &counted(f, m));
            streaks.push(n.no_progress_streak);
            c = Counters {
                iteration: n.iteration + 1,
                ..n
            };
        }
        assert_eq!(streaks, vec![0, 1, 2, 0, 1, 0]);
        assert_eq!(c.best_done, 3);
        assert!(
            c.seen_figures.is_empty(),
            "counted figures are not remembered"
        );
    }

    #[test]
    fn alternating_figures_end_stuck() {
        let mut c = counters(1);
        let mut last = None;
        for i in 0..20 {
            let f = if i % 2 == 0 { "SUMMARY a" } else { "SUMMARY b" };
            let (n, d) = decide(&c, &verdict(VerdictClass::Unverified, f, 0));
            if d == Decision::AskStuck {
                last = Some(i + 1);
                break;
            }
            c = Counters {
                iteration: n.iteration + 1,
                ..n
            };
        }
        assert_eq!(
            last,
            Some(8),
            "two new figures, then 2 x 3 iterations without progress"
        );
    }

    #[test]
    fn a_refused_commit_is_not_completion_and_forced_endings_win() {
        let mut o = outcome(3, 3, "x");
        o.commit_refused = true;
        assert!(matches!(
            decide(&counters(1), &o).1,
            Decision::Continue { .. }
        ));
        let mut o = outcome(3, 3, "x");
        o.forced = Some(Halt::Interrupted);
        assert_eq!(
            decide(&counters(1), &o).1,
            Decision::Halt(Halt::Interrupted)
        );
        let o = Outcome::forced(Halt::Budget("w".into()), 1, 3, key("1/3 criteria", "x"));
        let (n, d) = decide(&counters(1), &o);
        assert_eq!(d, Decision::Halt(Halt::Budget("w".into())));
        assert_eq!(n.last_keys.len(), 1, "a forced ending still has its record");
        assert_eq!(Halt::Interrupted.exit_code(), 130);
    }

    fn error(message: &str) -> Halt {
        Halt::Error {
            message: message.into(),
            hint: "h".into(),
        }
    }

    #[test]
    fn an_iteration_that_ended_in_an_error_halts_with_it_whatever_it_did() {
        // Complete by its source, over budget, the third identical record: the error wins, as
        // its work may not even be committed.
        let mut o = outcome(3, 3, "a");
        o.over_budget = true;
        o.forced = Some(error("iteration 3's work is not committed: index.lock"));
        let mut c = counters(3);
        c.last_keys = vec![o.key.clone(), o.key.clone()];
        let (n, d) = decide(&c, &o);
        assert_eq!(
            d,
            Decision::Halt(error("iteration 3's work is not committed: index.lock"))
        );
        assert_eq!(n.last_keys.len(), 3, "the error still has its record");
        assert_eq!(n.best_done, 3, "what it did still counts for a resume");
        assert_eq!(error("x").exit_code(), 1);
        assert_eq!(error("x").reason(), HaltReason::Error);
    }

    #[test]
    fn records_whose_tree_could_not_be_read_never_stall() {
        let mut os = vec![outcome(0, 3, "a"), outcome(0, 3, "a"), outcome(0, 3, "a")];
        let ds = simulate(counters(1), &os);
        assert!(matches!(ds[2], Decision::Halt(Halt::Stalled { .. })));
        for o in &mut os {
            o.key.fingerprint = crate::iter_record::UNKNOWN.into();
        }
        let ds = simulate(counters(1), &os);
        assert!(matches!(ds[2], Decision::Continue { .. }), "{:?}", ds[2]);
        // An error after two identical records on resume: the third record repeats them, but
        // the error is the halt; the next identical iteration after it stalls.
        let mut os = vec![outcome(0, 3, "a"), outcome(0, 3, "a"), outcome(0, 3, "a")];
        os[1].forced = Some(error("e"));
        let ds = simulate(counters(1), &os);
        assert_eq!(ds[1], Decision::Halt(error("e")));
        assert!(matches!(ds[2], Decision::Halt(Halt::Stalled { .. })));
    }

    #[test]
    fn source_halt_is_taken() {
        let mut o = outcome(1, 3, "c");
        o.source_halt = Some(Halt::Partial(vec!["task 2 blocked".into()]));
        let (_, d) = decide(&counters(1), &o);
        assert_eq!(
            d,
            Decision::Halt(Halt::Partial(vec!["task 2 blocked".into()]))
        );
        assert_eq!(Halt::Partial(vec![]).exit_code(), 9);
    }

    #[test]
    fn budget_halts_unless_the_iteration_completed() {
        let mut o = outcome(1, 3, "c");
        o.over_budget = true;
        let (_, d) = decide(&counters(1), &o);
        assert!(matches!(d, Decision::Halt(Halt::Budget(_))));
        assert_eq!(Halt::Budget(String::new()).exit_code(), 10);
        let mut o = outcome(3, 3, "c");
        o.over_budget = true;
        assert_eq!(decide(&counters(1), &o).1, Decision::Halt(Halt::Complete));
    }

    #[test]
    fn counters_round_trip_through_the_state() {
        let mut st: crate::state::RunState = serde_json::from_str(
            r#"{"schema_version":1,"run_id":"r","task":"t","task_file":"T.md","mode":"checklist",
                "pid":1,"running":false,"started_at":"s","updated_at":"u","iteration":4,
                "max_iterations":9,"done":1,"total":3,"best_done":1,"no_progress_streak":2,
                "baseline":[],"last_keys":[],"halt_reason":null,"exit_code":null,"cost_usd":0.0}"#,
        )
        .unwrap();
        let mut c = Counters::restore(&st, 20, 3);
        assert_eq!(
            (
                c.iteration,
                c.max_iterations,
                c.no_progress_streak,
                c.best_done
            ),
            (4, 20, 2, 1)
        );
        c.no_progress_streak = 0;
        c.best_done = 2;
        c.verdict_failures = 1;
        c.seen_figures.push(figures_fingerprint("x"));
        c.last_keys.push(key("2/3 criteria", "abc"));
        c.save_into(&mut st);
        assert_eq!(Counters::restore(&st, 20, 3), c);
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
        assert_eq!(Halt::Stuck.reason(), HaltReason::Stuck);
    }
}
