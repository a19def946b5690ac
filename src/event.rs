//! The run's events (SPEC §9, §10): one typed [`Event`] per thing that happens, serialised in
//! one place ([`Event::line`]) as the JSON object `--json` prints and a `[hooks]` command
//! receives on stdin — its name (`event`), the schema version and the time first, then its
//! fields.

use serde::Serialize;

use crate::agent::output::LimitKind;
use crate::state::{HaltReason, Mode};

/// The version of the event schema (`schema_version` in every event).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// One event of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum Event {
    RunStarted(RunStarted),
    IterationStarted(IterationStarted),
    IterationFinished(IterationFinished),
    Stuck(Stuck),
    Waiting(Waiting),
    Question(Question),
    Halted(Halted),
    QueueItem(QueueItem),
    QueueFinished(QueueFinished),
}

/// The run began (or was resumed), before its first iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunStarted {
    pub(crate) run_id: String,
    pub(crate) task: String,
    pub(crate) task_file: String,
    pub(crate) mode: Mode,
    pub(crate) agent: String,
    /// The presets that take over while the agent is usage-limited, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) fallback_agents: Vec<String>,
    pub(crate) max_iterations: u32,
    /// The iteration the run has done (0 on a fresh run).
    pub(crate) iteration: u32,
    pub(crate) done: usize,
    pub(crate) total: usize,
    pub(crate) resumed: bool,
}

/// An iteration's agent is about to start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct IterationStarted {
    pub(crate) run_id: String,
    pub(crate) iteration: u32,
    /// The agent the iteration starts with.
    pub(crate) agent: String,
    pub(crate) max_iterations: u32,
    pub(crate) done: usize,
    pub(crate) total: usize,
    /// The prompt carries the STUCK ALERT.
    pub(crate) stuck_alert: bool,
}

/// An iteration is recorded (SPEC §9: counts, exit, commit, fingerprint, duration, cost).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct IterationFinished {
    pub(crate) run_id: String,
    pub(crate) iteration: u32,
    /// The agent whose attempt ended the iteration (after a usage limit, a fallback's).
    pub(crate) agent: String,
    pub(crate) done: usize,
    pub(crate) total: usize,
    /// The ITER record's figures (`2/3 criteria`).
    pub(crate) figures: String,
    /// The agent's exit code; `null` when the record says `exit error`.
    pub(crate) exit_code: Option<i32>,
    /// The iteration ended in an error of ralph's (its record says `exit error`).
    pub(crate) error: bool,
    /// The verdict command's exit code, when the record carries it instead of the agent's.
    pub(crate) verdict_exit_code: Option<i32>,
    /// The agent was stopped at `--timeout` or `--idle-timeout`.
    pub(crate) timed_out: bool,
    pub(crate) commit: String,
    pub(crate) committed: bool,
    pub(crate) commit_refused: bool,
    pub(crate) fingerprint: String,
    pub(crate) duration_s: f64,
    pub(crate) cost_usd: f64,
    pub(crate) total_cost_usd: f64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) turns: u64,
}

/// No progress for the stuck threshold: the next prompt carries the STUCK ALERT.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Stuck {
    pub(crate) iteration: u32,
    pub(crate) no_progress_iterations: u32,
}

/// The agent asked a person (`ralph ask`): the loop waits for an answer before its next
/// iteration (SPEC §16).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Question {
    pub(crate) iteration: u32,
    /// The loop's name: `main`, or its worktree's (`ralph answer NAME`).
    #[serde(rename = "loop")]
    pub(crate) loop_name: String,
    pub(crate) question: String,
}

/// A usage limit: ralph waits, then runs the same iteration again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Waiting {
    pub(crate) iteration: u32,
    /// The agent that will run when the wait is over.
    pub(crate) agent: String,
    pub(crate) kind: LimitKind,
    pub(crate) message: String,
    /// When the limit lifts, as the agent said (RFC 3339), if it did.
    pub(crate) reset_at: Option<String>,
    pub(crate) wait_s: f64,
}

/// The run ended (SPEC §6): exactly one per run, from its close.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Halted {
    /// The run it ends; absent when the run ended before it had an id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<String>,
    /// The task it worked on and its file (as `run_started` named them): absent with `run_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task_file: Option<String>,
    pub(crate) reason: HaltReason,
    pub(crate) exit_code: i32,
    /// Where the run stood; absent when it ended before its task was read (an error).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) at: Option<At>,
    /// What went wrong, for `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

/// A queue's item ended (SPEC §14): merged and closed, or released with why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct QueueItem {
    pub(crate) source: &'static str,
    pub(crate) id: String,
    pub(crate) title: String,
    /// `completed` (merged, closed), `pr-open` (its pull request opened) or `released`
    /// (open again).
    pub(crate) outcome: &'static str,
    /// The branch its work is on.
    pub(crate) branch: String,
    /// Why it was released.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<String>,
}

/// A queue run ended (SPEC §14): what it took and how it ends; `nothing_ready` when it took
/// nothing because nothing was ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct QueueFinished {
    pub(crate) source: &'static str,
    pub(crate) taken: usize,
    pub(crate) completed: usize,
    pub(crate) released: usize,
    pub(crate) nothing_ready: bool,
    pub(crate) exit_code: i32,
}

/// Where a run stood when it halted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct At {
    pub(crate) iteration: u32,
    pub(crate) done: usize,
    pub(crate) total: usize,
}

/// An event as one JSON line: `event`, `schema_version`, `ts`, then the event's fields.
#[derive(Serialize)]
struct Line<'a> {
    event: &'static str,
    schema_version: u32,
    ts: &'a str,
    #[serde(flatten)]
    fields: &'a Event,
}

impl Event {
    /// Its name: `event` in the JSON, `RALPH_EVENT` for its hook (SPEC §9, §10).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Event::RunStarted(_) => "run_started",
            Event::IterationStarted(_) => "iteration_started",
            Event::IterationFinished(_) => "iteration_finished",
            Event::Stuck(_) => "stuck",
            Event::Waiting(_) => "waiting",
            Event::Question(_) => "question",
            Event::Halted(_) => "halted",
            Event::QueueItem(_) => "queue_item",
            Event::QueueFinished(_) => "queue_finished",
        }
    }

    /// The event as one line of JSON (no newline), stamped with the schema version and `ts`.
    pub(crate) fn line(&self, ts: &str) -> String {
        let line = Line {
            event: self.name(),
            schema_version: SCHEMA_VERSION,
            ts,
            fields: self,
        };
        // Plain structs of numbers, strings and enums of words: nothing here can fail to
        // serialise, but a line is never worth a panic.
        serde_json::to_string(&line).unwrap_or_else(|e| {
            format!(
                "{{\"event\":\"{}\",\"schema_version\":{SCHEMA_VERSION},\"ts\":\"{ts}\",\"error\":\"{e}\"}}",
                self.name()
            )
        })
    }

    /// [`Event::line`] stamped now.
    pub(crate) fn line_now(&self) -> String {
        self.line(&crate::state::now_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each event, with fixed values.
    fn one_of_each() -> Vec<Event> {
        let run_id = "20250101-120000-abcd".to_string();
        vec![
            Event::RunStarted(RunStarted {
                run_id: run_id.clone(),
                task: "Build the thing".into(),
                task_file: "RALPH_TASK.md".into(),
                mode: Mode::Checklist,
                agent: "claude".into(),
                fallback_agents: vec!["qwen".into()],
                max_iterations: 5,
                iteration: 0,
                done: 1,
                total: 3,
                resumed: false,
            }),
            Event::IterationStarted(IterationStarted {
                run_id: run_id.clone(),
                iteration: 1,
                agent: "claude".into(),
                max_iterations: 5,
                done: 1,
                total: 3,
                stuck_alert: false,
            }),
            Event::IterationFinished(IterationFinished {
                run_id: run_id.clone(),
                iteration: 1,
                agent: "qwen".into(),
                done: 2,
                total: 3,
                figures: "2/3 criteria".into(),
                exit_code: Some(0),
                error: false,
                verdict_exit_code: None,
                timed_out: false,
                commit: "abc1234".into(),
                committed: true,
                commit_refused: false,
                fingerprint: "4294967295 0".into(),
                duration_s: 1.5,
                cost_usd: 0.25,
                total_cost_usd: 0.5,
                input_tokens: 1000,
                output_tokens: 50,
                turns: 3,
            }),
            Event::Stuck(Stuck {
                iteration: 3,
                no_progress_iterations: 3,
            }),
            Event::Waiting(Waiting {
                iteration: 2,
                agent: "claude".into(),
                kind: LimitKind::FiveHour,
                message: "You've hit your limit".into(),
                reset_at: Some("2025-01-01T17:00:00+00:00".into()),
                wait_s: 60.0,
            }),
            Event::Question(Question {
                iteration: 2,
                loop_name: "main".into(),
                question: "Which database should I use?".into(),
            }),
            Event::Halted(Halted {
                run_id: Some(run_id),
                task: Some("Add OAuth login".into()),
                task_file: Some("RALPH_TASK.md".into()),
                reason: HaltReason::Complete,
                exit_code: 0,
                at: Some(At {
                    iteration: 2,
                    done: 3,
                    total: 3,
                }),
                message: None,
            }),
            // An error before the task was read: no run id, no figures.
            Event::Halted(Halted {
                run_id: None,
                task: None,
                task_file: None,
                reason: HaltReason::Error,
                exit_code: 1,
                at: None,
                message: Some("Git required. Run git init first.".into()),
            }),
            Event::QueueItem(QueueItem {
                source: "beads",
                id: "bd-12".into(),
                title: "Add login".into(),
                outcome: "released",
                branch: "ralph/beads-bd-12".into(),
                why: Some("halted: stalled (exit 4)".into()),
            }),
            Event::QueueFinished(QueueFinished {
                source: "github",
                taken: 0,
                completed: 0,
                released: 0,
                nothing_ready: true,
                exit_code: 0,
            }),
        ]
    }

    #[test]
    fn each_event_serialises_to_its_schema() {
        let lines: Vec<String> = one_of_each()
            .iter()
            .map(|e| e.line("2025-01-01T12:00:00+00:00"))
            .collect();
        insta::assert_snapshot!(lines.join("\n"), @r#"
        {"event":"run_started","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","run_id":"20250101-120000-abcd","task":"Build the thing","task_file":"RALPH_TASK.md","mode":"checklist","agent":"claude","fallback_agents":["qwen"],"max_iterations":5,"iteration":0,"done":1,"total":3,"resumed":false}
        {"event":"iteration_started","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","run_id":"20250101-120000-abcd","iteration":1,"agent":"claude","max_iterations":5,"done":1,"total":3,"stuck_alert":false}
        {"event":"iteration_finished","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","run_id":"20250101-120000-abcd","iteration":1,"agent":"qwen","done":2,"total":3,"figures":"2/3 criteria","exit_code":0,"error":false,"verdict_exit_code":null,"timed_out":false,"commit":"abc1234","committed":true,"commit_refused":false,"fingerprint":"4294967295 0","duration_s":1.5,"cost_usd":0.25,"total_cost_usd":0.5,"input_tokens":1000,"output_tokens":50,"turns":3}
        {"event":"stuck","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","iteration":3,"no_progress_iterations":3}
        {"event":"waiting","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","iteration":2,"agent":"claude","kind":"five_hour","message":"You've hit your limit","reset_at":"2025-01-01T17:00:00+00:00","wait_s":60.0}
        {"event":"question","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","iteration":2,"loop":"main","question":"Which database should I use?"}
        {"event":"halted","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","run_id":"20250101-120000-abcd","task":"Add OAuth login","task_file":"RALPH_TASK.md","reason":"complete","exit_code":0,"iteration":2,"done":3,"total":3}
        {"event":"halted","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","reason":"error","exit_code":1,"message":"Git required. Run git init first."}
        {"event":"queue_item","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","source":"beads","id":"bd-12","title":"Add login","outcome":"released","branch":"ralph/beads-bd-12","why":"halted: stalled (exit 4)"}
        {"event":"queue_finished","schema_version":1,"ts":"2025-01-01T12:00:00+00:00","source":"github","taken":0,"completed":0,"released":0,"nothing_ready":true,"exit_code":0}
        "#);
    }

    /// Every variant has one of the names SPEC §9 and §10 give, each its own, and the line
    /// carries it as `event` beside the schema version.
    #[test]
    fn every_variant_is_named_as_the_spec_names_it() {
        let spec = [
            "run_started",
            "iteration_started",
            "iteration_finished",
            "stuck",
            "waiting",
            "question",
            "halted",
            "queue_item",
            "queue_finished",
        ];
        let events = one_of_each();
        for e in &events {
            // A variant added without a name here fails to compile: the match is exhaustive.
            match e {
                Event::RunStarted(_)
                | Event::IterationStarted(_)
                | Event::IterationFinished(_)
                | Event::Stuck(_)
                | Event::Waiting(_)
                | Event::Question(_)
                | Event::Halted(_)
                | Event::QueueItem(_)
                | Event::QueueFinished(_) => {}
            }
            assert!(spec.contains(&e.name()), "{}", e.name());
            let v: serde_json::Value = serde_json::from_str(&e.line("t")).unwrap();
            assert_eq!(v["event"], e.name());
            assert_eq!(v["schema_version"], SCHEMA_VERSION);
            assert_eq!(v["ts"], "t");
        }
        let mut named: Vec<&str> = events.iter().map(Event::name).collect();
        named.dedup();
        assert_eq!(named, spec);
    }
}
