//! The planning phase of `ralph run "a description"` (SPEC §3.2): a matching plan under
//! `docs/plans/`, else one agent run that writes PRD.md and PROGRESS.md, validated and committed.

use std::path::{Path, PathBuf};

use super::plan::{Plan, load_table, relative_to};
use crate::agent::Agent;
use crate::commands::Context;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::state::RalphDir;
use crate::supervisor;
use crate::task::{cpm, table};

/// A plan under docs/plans/ that matches the description.
pub(super) fn find_docs_plan(root: &Path, description: &str) -> Result<Option<PathBuf>> {
    let dir = root.join(cpm::PLANS_DIR);
    let mut plans = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_file()
                && !e.file_name().to_string_lossy().starts_with('.')
                && let Ok(text) = crate::files::read_text(&path)
            {
                plans.push((PathBuf::from(relative_to(&path, root)), text));
            }
        }
    }
    Ok(table::find_plan(&plans, description))
}

/// The planning phase of `ralph run "description"` (SPEC §3.2): a matching plan under
/// docs/plans/, else one agent run that writes PRD.md and PROGRESS.md, validated and committed.
pub(super) async fn plan_table(
    ctx: &Context,
    root: &Path,
    rd: &RalphDir,
    description: &str,
    agent: &Agent,
    settings: &Settings,
    repo: &mut Repo,
) -> Result<Plan> {
    let ui = ctx.ui;
    if let Some(plan) = find_docs_plan(root, description)? {
        ui.line(&format!(
            "planning: using {} (it matches the description)",
            plan.display()
        ));
        return load_table(root, &root.join(&plan), &root.join(table::PROGRESS_FILE));
    }
    let prd = root.join(table::PRD_FILE);
    let progress = root.join(table::PROGRESS_FILE);
    if prd.exists() || progress.exists() {
        return Err(Error::user(format!(
            "{} or {} already exists: ralph will not plan over them",
            table::PRD_FILE,
            table::PROGRESS_FILE
        ))
        .with_hint("run the table as it is with `ralph run PRD.md`, or move the files away"));
    }
    ui.line(&format!(
        "planning: one {} run writes {} and {} for \"{description}\"",
        agent.name,
        table::PRD_FILE,
        table::PROGRESS_FILE
    ));
    let prompt = table::planning_prompt(description);
    let (fin, transcript_path) = supervisor::checks::run_agent_once(
        root,
        &rd.run_dir("planning"),
        "planning",
        &prompt,
        agent,
        settings,
    )
    .await?;
    if fin.is_none() {
        return Err(Error::user(
            "interrupted during planning; nothing was committed",
        ));
    }
    let plan = load_table(root, &prd, &progress).map_err(|e| match e {
        Error::User { message, hint } => Error::User {
            message: format!("the planning run did not write a valid task table: {message}"),
            hint: hint.or_else(|| Some(format!("its transcript is {}", transcript_path.display()))),
        },
        other => other,
    })?;
    if !settings.no_commit {
        let message = "ralph: initialize PRD and progress tracking\n";
        if let Some(out) = supervisor::guarded_commit(repo, settings, ui, rd, message)?.outcome {
            ui.note(&format!("committed the plan as {}", out.commit.short));
        }
    }
    Ok(plan)
}
