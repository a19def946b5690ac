//! `ralph status`: the current or last run, read without the lock and in O(1) of the log length;
//! a live run told by its lock, the run by ralph's own record of it (SPEC §2.4, §11).

use super::Context;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::iter_record::{IterExit, parse_iter_record};
use crate::loops::{self, Status};
use crate::state::{HaltReason, RunState};
use crate::ui::Ui;

pub(crate) fn run(ctx: &Context, json_out: bool, all: bool) -> Result<i32> {
    let repo = Repo::discover(&ctx.cwd)?;
    if all {
        let entries = loops::all(&repo)?;
        for e in &entries {
            if let Some(w) = &e.status.warning {
                ctx.ui.warn(&format!("loop {}: {w}", e.name));
            }
        }
        let retired = crate::worktree::retired(&repo);
        if json_out {
            ctx.ui
                .plain(&loops::all_to_json(&entries, &retired).to_string());
        } else {
            print_all(ctx.ui, &entries);
            print_retired(ctx.ui, &retired);
        }
        return Ok(exit_code(entries.iter().map(|e| &e.status)));
    }
    let s = loops::report(&repo)?;
    if let Some(w) = &s.warning {
        ctx.ui.warn(w);
    }
    if json_out {
        ctx.ui.plain(&loops::to_json(&s).to_string());
    } else {
        print_text(ctx.ui, &s);
    }
    Ok(exit_code([&s]))
}

/// 1 when a task file is refused (the JSON still printed, with `refused`); 0 otherwise.
fn exit_code<'a>(statuses: impl IntoIterator<Item = &'a Status>) -> i32 {
    if statuses.into_iter().any(|s| s.refused.is_some()) {
        exit::ERROR
    } else {
        exit::COMPLETE
    }
}

/// `error: path:line: …` and its hint, as `ralph run` would print them.
fn print_refusal(ui: Ui, s: &Status) {
    if let Some(r) = &s.refused {
        let mut e = Error::user(r.error.clone());
        if let Some(h) = &r.hint {
            e = e.with_hint(h.clone());
        }
        ui.error(&e);
    }
}

fn print_text(ui: Ui, s: &Status) {
    for w in &s.task_warnings {
        ui.warn(w);
    }
    let Some(st) = &s.st else {
        return print_no_run(ui, s);
    };
    print_run(ui, s, st);
    print_records(ui, s);
    print_left(ui, s, st);
    print_refusal(ui, s);
}

/// No run recorded: one running without its record yet, a refused task file, or none at all.
fn print_no_run(ui: Ui, s: &Status) {
    let (done, total) = (s.done, s.total);
    if s.running {
        ui.plain(&format!(
            "State: running (pid {}), no run recorded yet",
            pid_text(s)
        ));
        return;
    }
    if s.refused.is_some() {
        ui.plain(&format!(
            "Task file {} is refused: `ralph run` stops at once (exit 1).",
            s.task_file.display()
        ));
        print_refusal(ui, s);
        return;
    }
    // A new task over an unfinished run: `ralph run` would meet that run; `--reset` sets it aside.
    let start = match &s.other_task {
        Some(o) => {
            ui.plain(&format!(
                "No run yet for this task. The run recorded in .ralph/state.json ({}, \"{}\", halted: {}) was another task's: {} no longer has its criteria.",
                o.run_id,
                o.task,
                o.halt_reason.map_or("unknown", HaltReason::as_str),
                s.task_file.display()
            ));
            if o.halt_reason == Some(HaltReason::Complete) {
                "ralph run"
            } else {
                "ralph run --reset"
            }
        }
        None => {
            ui.plain("No run yet in this repository.");
            "ralph run"
        }
    };
    if s.doc.is_some() {
        ui.plain(&format!(
            "Task file: {} ({done}/{total} criteria checked). Start with: {start}",
            s.task_file.display()
        ));
    } else {
        ui.plain("Start with: ralph init \"describe the task\" --criterion \"...\"");
    }
}

/// The recorded run: task, mode, state, iteration, progress, times and cost.
fn print_run(ui: Ui, s: &Status, st: &RunState) {
    ui.plain(&format!("Task: {} ({})", st.task, st.task_file));
    ui.plain(&format!("Mode: {}   Run: {}", st.mode, st.run_id));
    if s.waiting() {
        ui.plain(&format!(
            "State: waiting for a person (pid {})",
            pid_text(s)
        ));
    } else if s.running {
        ui.plain(&format!("State: running (pid {})", pid_text(s)));
    } else {
        let reason = s.halt_reason.map_or("unknown", HaltReason::as_str);
        let code = st
            .exit_code
            .map_or(String::new(), |c| format!(", exit {c}"));
        ui.plain(&format!("State: halted — {reason}{code}"));
    }
    if let Some(q) = &s.question {
        ui.plain(&format!("Question (iteration {}): {}", q.iteration, q.text));
    }
    ui.plain(&format!(
        "Iteration: {}/{}",
        st.iteration, st.max_iterations
    ));
    ui.plain(&format!(
        "Progress: {}/{} {}",
        s.done,
        s.total,
        st.mode.unit()
    ));
    ui.plain(&format!(
        "Started: {}   Updated: {}",
        st.started_at, st.updated_at
    ));
    if let Some(e) = s.elapsed_s {
        ui.plain(&format!(
            "Elapsed: {}",
            crate::ui::human_duration(std::time::Duration::from_secs_f64(e))
        ));
    }
    if st.cost_usd > 0.0 || st.input_tokens > 0 {
        ui.plain(&format!(
            "Cost: ${:.4}, tokens: {} in / {} out",
            st.cost_usd, st.input_tokens, st.output_tokens
        ));
    }
    print_agents(ui, st);
}

/// A run with fallback agents: the agent of the latest iteration, and what each one did.
fn print_agents(ui: Ui, st: &RunState) {
    let fallbacks = st.pinned.as_ref().map_or(0, |p| p.fallback_agents.len());
    if fallbacks == 0 && st.agents.len() < 2 {
        return;
    }
    if let Some(agent) = &st.agent {
        ui.plain(&format!("Agent: {agent} (latest iteration)"));
    }
    for (name, used) in &st.agents {
        let s = if used.iterations == 1 { "" } else { "s" };
        ui.plain(&format!(
            "  {name}: {} iteration{s}, ${:.4}, tokens: {} in / {} out",
            used.iterations, used.cost_usd, used.input_tokens, used.output_tokens
        ));
    }
}

/// The last `ITER` records, and what they say together (stalled, an error).
fn print_records(ui: Ui, s: &Status) {
    if s.records.is_empty() {
        return;
    }
    ui.plain("Last records:");
    for r in &s.records {
        ui.plain(&format!("  {r}"));
    }
    if s.stalled {
        ui.plain("  (the last three records are identical: stalled)");
    }
    let last = s.records.last().and_then(|r| parse_iter_record(r));
    if let Some(r) = last.filter(|r| r.ended() == Some(IterExit::Error)) {
        let n = r.iteration.map_or(String::new(), |n| format!(" {n}"));
        ui.plain(&format!(
            "  (iteration{n} ended in an error: the reason is in .ralph/activity.log)"
        ));
    }
}

/// What is left: the criteria still unchecked, and the annotated ones to review.
fn print_left(ui: Ui, s: &Status, st: &RunState) {
    if !s.remaining.is_empty() {
        ui.plain("Remaining:");
        for r in &s.remaining {
            ui.plain(&format!("- [ ] {r}"));
        }
    }
    if !st.annotations.is_empty() {
        ui.plain("Annotated criteria (review them):");
        for a in &st.annotations {
            ui.plain(&format!("- {a}"));
        }
    }
}

/// One line per loop: name, branch, state, iteration, progress, cost.
fn print_all(ui: Ui, entries: &[loops::Entry]) {
    for e in entries {
        let s = &e.status;
        let state = match (&s.st, s.running) {
            (None, true) => format!("running (pid {}), no run recorded yet", pid_text(s)),
            (None, _) if s.refused.is_some() => "task file refused".to_string(),
            (None, false) => "no run".to_string(),
            (Some(_), true) if s.waiting() => {
                format!("waiting for a person (pid {})", pid_text(s))
            }
            (Some(_), true) => format!("running (pid {})", pid_text(s)),
            (Some(_), false) => halted(s),
        };
        let branch = e.branch.as_deref().unwrap_or("detached");
        ui.plain(&loop_line(&e.name, branch, &state, s));
        print_task(ui, s);
        ui.plain(&format!("    {}", e.path.display()));
        if let Some(r) = &s.refused {
            ui.plain(&format!("    task file refused: {}", r.error));
        }
        if let Some(q) = &s.question {
            ui.plain(&format!("    question: {}", q.text));
        }
    }
}

/// A loop's task, as its run recorded it (a queue item's title).
fn print_task(ui: Ui, s: &Status) {
    if let Some(st) = s.st.as_ref().filter(|st| !st.task.is_empty()) {
        ui.plain(&format!("    task: {}", st.task));
    }
}

/// The live supervisor's pid, or `?` when it did not say.
fn pid_text(s: &Status) -> String {
    s.pid.map_or_else(|| "?".to_string(), |p| p.to_string())
}

/// The loops ralph retired: merged (at which commit), or not, and where their logs are.
fn print_retired(ui: Ui, retired: &[loops::Retired]) {
    for r in retired {
        let how = match &r.merged_at {
            Some(at) => format!("merged at {}", at.chars().take(7).collect::<String>()),
            None => "not merged".to_string(),
        };
        let state = format!("{how}, worktree removed; {}", halted(&r.status));
        ui.plain(&loop_line(&r.name, &r.branch, &state, &r.status));
        print_task(ui, &r.status);
        ui.plain(&format!("    logs: {}", r.logs.display()));
    }
}

/// `halted: REASON, exit N`: the exit code as `--json` has it (11: complete, not merged).
fn halted(s: &Status) -> String {
    let mut out = match s.halt_reason {
        Some(r) => format!("halted: {r}"),
        None => "halted".to_string(),
    };
    if let Some(code) = s.st.as_ref().and_then(|st| st.exit_code) {
        out.push_str(&format!(", exit {code}"));
    }
    out
}

fn loop_line(name: &str, branch: &str, state: &str, s: &Status) -> String {
    let (iteration, unit, cost) = s.st.as_ref().map_or((String::new(), "", 0.0), |st| {
        (
            format!("iteration {}/{}", st.iteration, st.max_iterations),
            st.mode.unit(),
            st.cost_usd,
        )
    });
    // No counts for a refused task file without a run: they are not known.
    let counts = match (&s.st, &s.refused) {
        (None, Some(_)) => String::new(),
        _ => format!("{}/{} {unit}", s.done, s.total),
    };
    let mut line = format!("{name}  [{branch}]  {state}  {iteration}  {counts}");
    if cost > 0.0 {
        line.push_str(&format!("  ${cost:.2}"));
    }
    line.trim_end().to_string()
}
