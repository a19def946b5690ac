//! `ralph status`: the current or last run, read without the lock and in O(1) of the log length.

use serde_json::json;

use super::Context;
use crate::error::{Result, exit};
use crate::git::Repo;
use crate::state::{self, HaltReason, Lock, Mode, RalphDir, RunState};
use crate::task::document::{TaskDocument, load_task_file};
use crate::task::table;
use crate::ui::Ui;

/// Everything `status` reports, read once.
struct Status {
    st: Option<RunState>,
    /// A supervisor holds the lock now.
    running: bool,
    /// The last (up to three) ITER records, each bounded.
    records: Vec<String>,
    stalled: bool,
    task_file: std::path::PathBuf,
    doc: Option<TaskDocument>,
    done: usize,
    total: usize,
    remaining: Vec<String>,
    halt_reason: Option<HaltReason>,
    elapsed_s: Option<f64>,
}

pub fn run(ctx: &Context, json_out: bool) -> Result<i32> {
    let s = gather(ctx)?;
    if json_out {
        ctx.ui.plain(&to_json(&s).to_string());
    } else {
        print_text(ctx.ui, &s);
    }
    Ok(exit::COMPLETE)
}

fn gather(ctx: &Context) -> Result<Status> {
    let repo = Repo::discover(&ctx.cwd)?;
    let root = repo.root();
    let rd = RalphDir::new(root);
    let st = RunState::load(&rd.state_file())?;
    let log = st
        .as_ref()
        .and_then(|s| s.iterations_log.as_ref())
        .map_or_else(|| rd.iterations_log(), |l| root.join(l));
    let records = state::tail_lines(&log, 3)?;
    let parsed: Vec<state::IterRecord> = records
        .iter()
        .filter_map(|r| state::parse_iter_record(r))
        .collect();
    // A supervisor is running when someone holds the lock (the kernel drops it on any death).
    let running = st.as_ref().is_some_and(|s| s.running)
        && Lock::is_held(&state::lock_path(repo.git2().path()));
    let task_file = st.as_ref().map_or_else(
        || root.join(crate::task::TASK_FILE),
        |s| root.join(&s.task_file),
    );
    let mode = st.as_ref().map_or(Mode::Checklist, |s| s.mode);
    let doc = (mode == Mode::Checklist)
        .then(|| load_task_file(&task_file).ok())
        .flatten();
    let (done, total, remaining) = counts(root, st.as_ref(), doc.as_ref());
    let halt_reason = st.as_ref().and_then(|s| {
        if running {
            None
        } else if s.running {
            Some(HaltReason::Error)
        } else {
            s.halt_reason
        }
    });
    let elapsed_s = st.as_ref().and_then(|s| elapsed(s, running));
    Ok(Status {
        stalled: state::last_three_repeat(&parsed),
        st,
        running,
        records,
        task_file,
        doc,
        done,
        total,
        remaining,
        halt_reason,
        elapsed_s,
    })
}

/// Done, total and the remaining items: from the task file or table as they are now, else from
/// what the state recorded.
fn counts(
    root: &std::path::Path,
    st: Option<&RunState>,
    doc: Option<&TaskDocument>,
) -> (usize, usize, Vec<String>) {
    if let Some(d) = doc {
        let remaining = d.checklist.remaining().map(|c| c.text.clone()).collect();
        return (d.checklist.done(), d.checklist.total(), remaining);
    }
    if let Some(s) = st
        && s.mode == Mode::Table
        && let [_, progress] = s.targets.as_slice()
    {
        let path = root.join(progress);
        let parsed = crate::files::read_text(&path)
            .ok()
            .and_then(|t| table::parse_progress(&path, &t).ok());
        if let Some(p) = parsed {
            let remaining = p
                .rows
                .iter()
                .filter(|r| r.status != table::RowStatus::Done)
                .map(|r| format!("task {}: {}", r.number, r.task))
                .collect();
            return (table::done_count(&p), p.rows.len(), remaining);
        }
    }
    (
        st.map_or(0, |s| s.done),
        st.map_or(0, |s| s.total),
        Vec::new(),
    )
}

/// Seconds since the start: to now while running, else to the last state update.
fn elapsed(s: &RunState, running: bool) -> Option<f64> {
    let start = chrono::DateTime::parse_from_rfc3339(&s.started_at).ok()?;
    let end = if running {
        chrono::Local::now().fixed_offset()
    } else {
        chrono::DateTime::parse_from_rfc3339(&s.updated_at).ok()?
    };
    Some((end - start).num_milliseconds().max(0) as f64 / 1000.0)
}

fn to_json(s: &Status) -> serde_json::Value {
    let st = s.st.as_ref();
    json!({
        "schema_version": 1,
        "task": st.map(|s| s.task.clone()).or_else(|| s.doc.as_ref().map(|d| d.name.clone())),
        "mode": st.map_or(Mode::Checklist, |s| s.mode),
        "run_id": st.map(|s| s.run_id.clone()),
        "running": s.running,
        "pid": if s.running { st.map(|s| s.pid) } else { None },
        "iteration": st.map_or(0, |s| s.iteration),
        "max_iterations": st.map(|s| s.max_iterations),
        "done": s.done,
        "total": s.total,
        "halt_reason": s.halt_reason,
        "exit_code": if s.running { None } else { st.and_then(|s| s.exit_code) },
        "cost_usd": st.map_or(0.0, |s| s.cost_usd),
        "input_tokens": st.map_or(0, |s| s.input_tokens),
        "output_tokens": st.map_or(0, |s| s.output_tokens),
        "elapsed_s": s.elapsed_s,
        "started_at": st.map(|s| s.started_at.clone()),
        "updated_at": st.map(|s| s.updated_at.clone()),
        "last_records": s.records,
        "stalled": s.stalled,
        "remaining": s.remaining,
        "annotations": st.map_or(&[][..], |s| s.annotations.as_slice()),
    })
}

fn print_text(ui: Ui, s: &Status) {
    let (done, total) = (s.done, s.total);
    let Some(st) = &s.st else {
        ui.plain("No run yet in this repository.");
        if s.doc.is_some() {
            ui.plain(&format!(
                "Task file: {} ({done}/{total} criteria checked). Start with: ralph run",
                s.task_file.display()
            ));
        } else {
            ui.plain("Start with: ralph init \"describe the task\" --criterion \"...\"");
        }
        return;
    };
    ui.plain(&format!("Task: {} ({})", st.task, st.task_file));
    ui.plain(&format!("Mode: {}   Run: {}", st.mode, st.run_id));
    if s.running {
        ui.plain(&format!("State: running (pid {})", st.pid));
    } else {
        let reason = s.halt_reason.map_or("unknown", HaltReason::as_str);
        let code = st
            .exit_code
            .map_or(String::new(), |c| format!(", exit {c}"));
        ui.plain(&format!("State: halted — {reason}{code}"));
    }
    ui.plain(&format!(
        "Iteration: {}/{}",
        st.iteration, st.max_iterations
    ));
    ui.plain(&format!("Progress: {done}/{total} {}", st.mode.unit()));
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
    if !s.records.is_empty() {
        ui.plain("Last records:");
        for r in &s.records {
            ui.plain(&format!("  {r}"));
        }
        if s.stalled {
            ui.plain("  (the last three records are identical: stalled)");
        }
    }
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
