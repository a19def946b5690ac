//! `ralph run --dry-run`: everything resolved — mode, targets, agent argv, limits, the exact
//! prompt of iteration 1 — printed; nothing spawned, nothing written.

use std::time::Duration;

use std::path::PathBuf;

use super::Resolved;
use super::plan::{Plan, build_source};
use super::planning::find_docs_plan;
use crate::agent::{AgentChoice, Chain};
use crate::cli::RunOptions;
use crate::commands::Context;
use crate::config::Settings;
use crate::error::{Result, exit};
use crate::state::RalphDir;
use crate::supervisor::source::{PromptCtx, Source};
use crate::task::cpm::{Phase, Targets};
use crate::task::table;
use crate::ui::{Ui, human_duration};

/// Print what `ralph run` would do; a description to plan shows its plan or planning prompt.
pub(super) fn report(
    ctx: &Context,
    r: &Resolved,
    options: &RunOptions,
    rollup: Option<PathBuf>,
    agents: &Chain,
) -> Result<i32> {
    let ui = ctx.ui;
    if let Plan::Describe(description) = &r.plan {
        ui.plain("ralph run --dry-run: nothing is spawned or written");
        ui.plain("mode: table, after a planning phase");
        match find_docs_plan(&r.root, description)? {
            Some(p) => ui.plain(&format!("plan: {} matches the description", p.display())),
            None => {
                ui.plain("plan: none under docs/plans/ matches; one planning run writes PRD.md and PROGRESS.md");
                ui.plain("--- planning prompt ---");
                ui.plain(table::planning_prompt(description).trim_end());
                ui.plain("--- end of prompt ---");
            }
        }
        return Ok(exit::COMPLETE);
    }
    let mut source = build_source(&r.plan, &r.root, options, rollup, &r.settings)?;
    dry_run_report(ctx, &r.plan, &mut source, &r.settings, agents, &r.rd)
}

fn dry_run_report(
    ctx: &Context,
    plan: &Plan,
    source: &mut Source,
    settings: &Settings,
    agents: &Chain,
    rd: &RalphDir,
) -> Result<i32> {
    let agent = agents.primary();
    let ui = ctx.ui;
    source.select_next();
    let first = source.prompt(&PromptCtx {
        iteration: 1,
        max_iterations: settings.max_iterations,
        test_command: settings.test_command.as_deref(),
        stuck_alert: false,
        stuck_streak: 0,
        completion_promise: settings.completion_promise.as_deref(),
        feedback: None,
    })?;
    let prompt_file = rd.run_dir("RUN_ID").join("iter-001.prompt.md");
    let inv = settings.confine(agent.invocation(&first, &prompt_file)?, true);
    ui.plain("ralph run --dry-run: nothing is spawned or written");
    ui.plain(&format!("mode: {}", plan.mode()));
    describe_target(ui, plan, source);
    let agent_source = match &settings.agent {
        AgentChoice::Preset(p) => format!("preset `{p}`"),
        AgentChoice::Template(t) => format!("--agent-cmd `{t}`"),
    };
    ui.plain(&format!("agent: {agent_source}"));
    if agents.has_fallbacks() {
        ui.plain(&format!(
            "fallback agents (while it is usage-limited, in order): {}",
            agents.fallback_names().join(", ")
        ));
    }
    ui.plain(&format!("argv: {}", inv.display()));
    for note in &agent.notes {
        ui.plain(&format!("note: {note}"));
    }
    describe_settings(ui, source, settings);
    ui.plain("--- prompt of iteration 1 ---");
    ui.plain(first.trim_end());
    ui.plain("--- end of prompt ---");
    Ok(exit::COMPLETE)
}

/// What the run works on: the task file, the table, or CPM's targets, roll-up and phase.
fn describe_target(ui: Ui, plan: &Plan, source: &Source) {
    let (done, total) = plan.counts();
    match plan {
        Plan::Checklist { doc, path, .. } => ui.plain(&format!(
            "task: {} ({}; {done}/{total} criteria checked)",
            doc.name,
            path.display()
        )),
        Plan::Table {
            prd_path,
            progress_path,
            prd,
            ..
        } => ui.plain(&format!(
            "table: {} ({} and {}; {done}/{total} tasks done; promise {})",
            prd.title,
            prd_path.display(),
            progress_path.display(),
            prd.promise
        )),
        Plan::Stories { rel, stories } => ui.plain(&format!(
            "stories: {} ({rel}; {done}/{total} stories pass)",
            stories.name()
        )),
        Plan::Describe(_) => {}
        Plan::Cpm { targets } => {
            match targets {
                Targets::Spec(s) => ui.plain(&format!("targets: spec {}", s.display())),
                Targets::Epics(e) => {
                    ui.plain("targets:");
                    for p in e {
                        ui.plain(&format!("  {}", p.display()));
                    }
                }
            }
            if let Source::Cpm(c) = source {
                let rollup = c
                    .rollup
                    .as_ref()
                    .map_or("none".to_string(), |r| r.display().to_string());
                ui.plain(&format!("roll-up: {rollup}"));
                ui.plain(&format!(
                    "test runner: {}",
                    c.test_runner.as_deref().unwrap_or("none found")
                ));
                ui.plain(&format!(
                    "phase: {}",
                    match c.phase {
                        Phase::Planning => "planning (/cpm:epics on the spec)",
                        Phase::Delivery => "delivery (/cpm:do on the epics)",
                    }
                ));
            }
        }
    }
}

/// The limits, the checks and the commit policy.
fn describe_settings(ui: Ui, source: &Source, settings: &Settings) {
    let opt = |d: Option<Duration>| d.map_or_else(|| "none".to_string(), human_duration);
    ui.plain(&format!(
        "limits: max iterations {}, timeout {}, idle timeout {}, grace {}, stuck threshold {} (halt after {})",
        settings.max_iterations,
        opt(settings.timeout),
        opt(settings.idle_timeout),
        human_duration(settings.grace),
        settings.stuck_threshold,
        2 * settings.stuck_threshold
    ));
    ui.plain(&format!(
        "test command: {}",
        settings.test_command.as_deref().unwrap_or("none")
    ));
    ui.plain(&format!(
        "check timeout: {} (each test and verdict run)",
        human_duration(settings.check_timeout)
    ));
    if let Some((display, _)) = source.verdict_invocation(settings) {
        ui.plain(&format!("verdict command: {display}"));
    }
    if let Some(s) = &settings.sandbox {
        ui.plain(&format!(
            "sandbox: bubblewrap, network {}; the agent, and the repository's own hooks and commands, run in it",
            match s.net {
                crate::sandbox::Net::Host => "kept",
                crate::sandbox::Net::None => "none",
            }
        ));
    }
    if let Some(p) = &settings.completion_promise {
        ui.plain(&format!("completion promise: <promise>{p}</promise>"));
    }
    ui.plain(&format!(
        "commits: {}",
        if settings.no_commit {
            "off (--no-commit)"
        } else {
            "one per iteration that changed something"
        }
    ));
}
