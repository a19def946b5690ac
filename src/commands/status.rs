//! `ralph status`: the current or last run, read without the lock and in O(1) of the log length.

use serde_json::json;

use super::Context;
use crate::error::{Result, exit};
use crate::git::Repo;
use crate::state::{self, Lock, RalphDir, RunState};
use crate::task::document::load_task_file;

pub fn run(ctx: &Context, json_out: bool) -> Result<i32> {
    let repo = Repo::discover(&ctx.cwd)?;
    let rd = RalphDir::new(repo.root());
    let st = RunState::load(&rd.state_file())?;
    let log = st
        .as_ref()
        .and_then(|s| s.iterations_log.as_ref())
        .map_or_else(|| rd.iterations_log(), |l| repo.root().join(l));
    let records = state::tail_lines(&log, 3)?;
    let parsed: Vec<state::IterRecord> = records
        .iter()
        .filter_map(|r| state::parse_iter_record(r))
        .collect();
    let stalled = state::last_three_repeat(&parsed);
    // A supervisor is running when someone holds the lock (the kernel drops it on any death).
    let running = st.as_ref().is_some_and(|s| s.running) && Lock::is_held(&rd.lock_file());
    let task_file = st
        .as_ref()
        .map(|s| repo.root().join(&s.task_file))
        .unwrap_or_else(|| ctx.cwd.join(crate::task::TASK_FILE));
    let mode = st.as_ref().map_or("checklist", |s| s.mode.as_str());
    let doc = (mode == "checklist")
        .then(|| load_task_file(&task_file).ok())
        .flatten();
    let table_rows = match (mode, st.as_ref().map(|s| s.targets.as_slice())) {
        ("table", Some([_, progress])) => {
            let path = repo.root().join(progress);
            std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| crate::task::table::parse_progress(&path, &t).ok())
        }
        _ => None,
    };
    let (done, total, remaining) = match (&doc, &table_rows) {
        (None, Some(p)) => (
            crate::task::table::done_count(p),
            p.rows.len(),
            p.rows
                .iter()
                .filter(|r| r.status != crate::task::table::RowStatus::Done)
                .map(|r| format!("task {}: {}", r.number, r.task))
                .collect(),
        ),
        _ => match &doc {
            Some(d) => (
                d.checklist.done(),
                d.checklist.total(),
                d.checklist
                    .remaining()
                    .map(|c| c.text.clone())
                    .collect::<Vec<_>>(),
            ),
            None => (
                st.as_ref().map_or(0, |s| s.done),
                st.as_ref().map_or(0, |s| s.total),
                Vec::new(),
            ),
        },
    };
    let halt_reason = st.as_ref().and_then(|s| {
        if running {
            None
        } else if s.running {
            Some("error".to_string())
        } else {
            s.halt_reason.clone()
        }
    });
    // Elapsed: to now while running, else to the last state update.
    let elapsed_s = st.as_ref().and_then(|s| {
        let start = chrono::DateTime::parse_from_rfc3339(&s.started_at).ok()?;
        let end = if running {
            chrono::Local::now().fixed_offset()
        } else {
            chrono::DateTime::parse_from_rfc3339(&s.updated_at).ok()?
        };
        Some((end - start).num_milliseconds().max(0) as f64 / 1000.0)
    });
    if json_out {
        let v = json!({
            "schema_version": state::SCHEMA_VERSION,
            "task": st.as_ref().map(|s| s.task.clone()).or_else(|| doc.as_ref().map(|d| d.name.clone())),
            "mode": st.as_ref().map_or("checklist".to_string(), |s| s.mode.clone()),
            "run_id": st.as_ref().map(|s| s.run_id.clone()),
            "running": running,
            "pid": if running { st.as_ref().map(|s| s.pid) } else { None },
            "iteration": st.as_ref().map_or(0, |s| s.iteration),
            "max_iterations": st.as_ref().map(|s| s.max_iterations),
            "done": done,
            "total": total,
            "halt_reason": halt_reason,
            "exit_code": if running { None } else { st.as_ref().and_then(|s| s.exit_code) },
            "cost_usd": st.as_ref().map_or(0.0, |s| s.cost_usd),
            "input_tokens": st.as_ref().map_or(0, |s| s.input_tokens),
            "output_tokens": st.as_ref().map_or(0, |s| s.output_tokens),
            "elapsed_s": elapsed_s,
            "started_at": st.as_ref().map(|s| s.started_at.clone()),
            "updated_at": st.as_ref().map(|s| s.updated_at.clone()),
            "last_records": records,
            "stalled": stalled,
            "remaining": remaining,
        });
        ctx.ui.plain(&v.to_string());
        return Ok(exit::COMPLETE);
    }
    let ui = ctx.ui;
    let Some(s) = st else {
        ui.plain("No run yet in this repository.");
        if doc.is_some() {
            ui.plain(&format!(
                "Task file: {} ({done}/{total} criteria checked). Start with: ralph run",
                task_file.display()
            ));
        } else {
            ui.plain("Start with: ralph init \"describe the task\" --criterion \"...\"");
        }
        return Ok(exit::COMPLETE);
    };
    ui.plain(&format!("Task: {} ({})", s.task, s.task_file));
    ui.plain(&format!("Mode: {}   Run: {}", s.mode, s.run_id));
    if running {
        ui.plain(&format!("State: running (pid {})", s.pid));
    } else {
        let reason = halt_reason.as_deref().unwrap_or("unknown");
        let code = s.exit_code.map_or(String::new(), |c| format!(", exit {c}"));
        ui.plain(&format!("State: halted — {reason}{code}"));
    }
    ui.plain(&format!("Iteration: {}/{}", s.iteration, s.max_iterations));
    let unit = match s.mode.as_str() {
        "table" => "tasks",
        "cpm-epic" | "cpm-spec" => "requirements",
        _ => "criteria",
    };
    ui.plain(&format!("Progress: {done}/{total} {unit}"));
    ui.plain(&format!(
        "Started: {}   Updated: {}",
        s.started_at, s.updated_at
    ));
    if let Some(e) = elapsed_s {
        ui.plain(&format!(
            "Elapsed: {}",
            crate::ui::human_duration(std::time::Duration::from_secs_f64(e))
        ));
    }
    if s.cost_usd > 0.0 || s.input_tokens > 0 {
        ui.plain(&format!(
            "Cost: ${:.4}, tokens: {} in / {} out",
            s.cost_usd, s.input_tokens, s.output_tokens
        ));
    }
    if !records.is_empty() {
        ui.plain("Last records:");
        for r in &records {
            ui.plain(&format!("  {r}"));
        }
        if stalled {
            ui.plain("  (the last three records are identical: stalled)");
        }
    }
    if !remaining.is_empty() {
        ui.plain("Remaining:");
        for r in &remaining {
            ui.plain(&format!("- [ ] {r}"));
        }
    }
    Ok(exit::COMPLETE)
}
