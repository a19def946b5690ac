//! `ralph init`: scaffold RALPH_TASK.md and the `.ralph/` state directory.

use std::io::{IsTerminal, Write};

use super::Context;
use crate::cli::InitArgs;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::state::RalphDir;
use crate::task::TASK_FILE;
use crate::task::document::parse_task_bytes;

/// The examples written without `--criterion`, each starting with the placeholder mark a run
/// refuses (`crate::task::placeholder::MARK`).
const EXAMPLE_CRITERIA: &[&str] = &[
    "a specific, verifiable outcome (e.g. `GET /health` returns 200)",
    "another outcome one iteration can finish (e.g. `cargo test` passes)",
];

pub(crate) fn run(ctx: &Context, args: &InitArgs) -> Result<i32> {
    let ui = ctx.ui;
    // A box with no text is no criterion (SPEC §3.1): refused here, never silently lost.
    if let Some(i) = args.criteria.iter().position(|c| c.trim().is_empty()) {
        return Err(Error::usage(format!(
            "--criterion number {} is empty: a criterion needs text",
            i + 1
        )));
    }
    let repo = Repo::discover(&ctx.cwd)?;
    // The planning agent is found before anything is written: a missing one leaves the
    // repository as it was, never a task file without criteria.
    let planner = args.plan.then(|| planning_agent(&repo, args)).transpose()?;
    if args.table {
        let code = init_table(ctx, &repo, args)?;
        if let Some(planner) = planner {
            return plan_with_agent(ctx, &repo, args, planner, true);
        }
        return Ok(code);
    }
    let path = ctx.cwd.join(TASK_FILE);
    if path.exists() && !args.force {
        return Err(Error::user(format!("`{}` already exists", path.display()))
            .with_hint("edit it, or pass --force to overwrite it"));
    }
    if let Some(agent) = &args.agent
        && crate::agent::preset(agent).is_none()
    {
        let names: Vec<&str> = crate::agent::PRESETS.iter().map(|c| c.name()).collect();
        return Err(Error::user(crate::agent::unknown(agent))
            .with_hint(format!("use one of {}", names.join(", "))));
    }
    let description = match &args.description {
        Some(d) if !d.trim().is_empty() => d.trim().to_string(),
        Some(_) => return Err(Error::user("the task description is empty")),
        None if std::io::stdin().is_terminal() => ask("Describe the task: ")?,
        None => "Describe the task here".to_string(),
    };
    let text = if args.plan {
        render_for_planning(&description, args)
    } else {
        render(&description, args)
    };
    // What we write must be what `ralph run` accepts (a plan gets its criteria from the agent).
    if !args.plan {
        parse_task_bytes(&path, text.as_bytes())?;
    }
    crate::state::write_atomic(&path, text.as_bytes())?;

    let rd = RalphDir::new(repo.root());
    let total = args.criteria.len().max(EXAMPLE_CRITERIA.len());
    let created = rd.scaffold(&task_name(&description), total, args.max_iterations)?;

    ui.plain(&format!("wrote {}", path.display()));
    for c in created {
        ui.plain(&format!("wrote {}", c.display()));
    }
    if let Some(planner) = planner {
        return plan_with_agent(ctx, &repo, args, planner, false);
    }
    if args.criteria.is_empty() {
        ui.note(
            "the criteria are examples: replace them before running (`ralph run` refuses them)",
        );
    }
    ui.plain(&format!(
        "\nNext: review {TASK_FILE}, then run:\n  ralph run"
    ));
    Ok(exit::COMPLETE)
}

/// `ralph init --table`: PRD.md and PROGRESS.md, one task per `--criterion`.
fn init_table(ctx: &Context, repo: &Repo, args: &InitArgs) -> Result<i32> {
    use crate::task::table;
    let ui = ctx.ui;
    let prd_path = ctx.cwd.join(table::PRD_FILE);
    let progress_path = ctx.cwd.join(table::PROGRESS_FILE);
    for p in [&prd_path, &progress_path] {
        if p.exists() && !args.force {
            return Err(Error::user(format!("`{}` already exists", p.display()))
                .with_hint("edit it, or pass --force to overwrite it"));
        }
    }
    let description = match &args.description {
        Some(d) if !d.trim().is_empty() => d.trim().to_string(),
        Some(_) => return Err(Error::user("the task description is empty")),
        None if std::io::stdin().is_terminal() => ask("Describe the goal: ")?,
        None => "Describe the goal here".to_string(),
    };
    let rd = RalphDir::new(repo.root());
    // Checked before anything is written: a conflicting setting leaves the repository as it was.
    let config = match &args.test_command {
        Some(cmd) => with_test_command(&rd, cmd)?,
        None => None,
    };
    let (prd, progress) = table::scaffold(&description, &args.criteria, table::DEFAULT_PROMISE);
    crate::state::write_atomic(&prd_path, prd.as_bytes())?;
    crate::state::write_atomic(&progress_path, progress.as_bytes())?;
    let mut created = rd.scaffold(
        &task_name(&description),
        args.criteria.len().max(1),
        args.max_iterations,
    )?;
    if let Some((path, text)) = config {
        crate::state::write_atomic(&path, text.as_bytes())?;
        created.push(path);
    }
    ui.plain(&format!("wrote {}", prd_path.display()));
    ui.plain(&format!("wrote {}", progress_path.display()));
    for c in created {
        ui.plain(&format!("wrote {}", c.display()));
    }
    if args.criteria.is_empty() {
        ui.note("the task's acceptance criterion is an example: replace it before running (`ralph run` refuses it)");
    } else {
        ui.note("each task has a generic acceptance criterion: make them specific before running");
    }
    ui.plain("\nNext: review PRD.md, then run:\n  ralph run");
    Ok(exit::COMPLETE)
}

/// Where `--test-command` goes in table mode, whose PRD.md has no frontmatter (SPEC §5.3):
/// `.ralph/config.toml`, the repository's settings (SPEC §10; its commands run in the sandbox
/// under `--sandbox`), with the line added above any table and the rest kept as written.
/// `None` when it already says so; an error naming the file when it sets another command.
fn with_test_command(rd: &RalphDir, cmd: &str) -> Result<Option<(std::path::PathBuf, String)>> {
    let path = rd.path.join("config.toml");
    let text = crate::files::read_text_if_exists(&path)
        .map_err(|e| Error::user(e.to_string()))?
        .unwrap_or_default();
    match crate::config::Layer::parse_toml(&path, &text)?.test_command {
        Some(set) if set == cmd => return Ok(None),
        Some(set) => {
            return Err(Error::user(format!(
                "{}: already sets test_command = `{set}`",
                path.display()
            ))
            .with_hint("edit it there, or run init without --test-command"));
        }
        None => {}
    }
    let line = format!("test_command = {}\n", toml::Value::String(cmd.to_string()));
    let head = if text.is_empty() {
        "# ralph's settings for this repository (`ralph init --table` wrote the test command).\n"
    } else {
        ""
    };
    Ok(Some((path, format!("{head}{line}{text}"))))
}

/// The task file a planning run fills in: everything but the criteria.
fn render_for_planning(description: &str, args: &InitArgs) -> String {
    let full = render(description, args);
    let cut = full.find("## Success Criteria").unwrap_or(full.len());
    format!("{}## Success Criteria\n\n", &full[..cut])
}

/// The agent `--plan` runs and the settings it runs with: the command line's `--agent` or
/// `--agent-cmd` over the config files. An agent that is not installed is an error naming it,
/// how to install it and `--agent-cmd`.
fn planning_agent(
    repo: &Repo,
    args: &InitArgs,
) -> Result<(crate::agent::Agent, crate::config::Settings)> {
    use crate::agent::Agent;
    use crate::config::{self, Layer, Source};
    let rd = RalphDir::new(repo.root());
    let mut layers = vec![Source {
        name: "the command line".into(),
        layer: Layer {
            agent: args.agent.clone(),
            agent_cmd: args.agent_cmd.clone(),
            ..Layer::default()
        },
        from_repo: false,
    }];
    layers.extend(config::file_layers(&rd.path, None)?);
    let settings = config::merge(&layers)?;
    let agent = Agent::resolve(&settings.agent, true)?;
    Ok((agent, settings))
}

/// `--plan`: one agent run writes the criteria (or the PRD and progress table), then ralph
/// validates them by the rules `ralph run` applies.
fn plan_with_agent(
    ctx: &Context,
    repo: &Repo,
    args: &InitArgs,
    (agent, settings): (crate::agent::Agent, crate::config::Settings),
    table_mode: bool,
) -> Result<i32> {
    use crate::agent::AgentChoice;
    let ui = ctx.ui;
    let rd = RalphDir::new(repo.root());
    let description = args.description.clone().unwrap_or_default();
    let prompt = planning_prompt(table_mode, &description);
    for note in &agent.notes {
        ui.note(note);
    }
    if let AgentChoice::Preset(p) = &settings.agent {
        ui.line(&format!("planning with {p}…"));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the async runtime", e))?;
    let (fin, log) = runtime.block_on(crate::supervisor::checks::run_agent_once(
        repo.root(),
        &rd.run_dir("planning"),
        "init",
        &prompt,
        &agent,
        &settings,
    ))?;
    if fin.is_none() {
        return Err(Error::user("interrupted while planning"));
    }
    let hint = format!("the planning transcript is {}", log.display());
    if table_mode {
        report_planned_table(ctx, &hint)?;
    } else {
        report_planned_criteria(ctx, &hint)?;
    }
    ui.plain("\nNext: review them, then run:\n  ralph run");
    Ok(exit::COMPLETE)
}

/// What the planning run is asked to write: the PRD and progress table, or the criteria.
fn planning_prompt(table_mode: bool, description: &str) -> String {
    if table_mode {
        return crate::task::table::planning_prompt(description);
    }
    format!(
        "You are planning a RALPH loop: later iterations, each a fresh agent, will work the \
         criteria you write, one per iteration, and a supervisor will count the checkboxes.\n\n\
         The task: {description}\n\n\
         Read the repository to understand it. Then edit {TASK_FILE}: under its \
         `## Success Criteria` heading, write between 3 and 12 criteria as `- [ ] ...` lines. \
         Each must be specific and machine-verifiable (a command, a test, an endpoint, a file), \
         and small enough for one iteration. Do not implement anything and do not change \
         anything else.\n"
    )
}

/// Validate the PRD and progress table the planning run wrote (SPEC §3.2) and show them.
fn report_planned_table(ctx: &Context, hint: &str) -> Result<()> {
    use crate::task::table;
    let prd_path = ctx.cwd.join(table::PRD_FILE);
    let progress_path = ctx.cwd.join(table::PROGRESS_FILE);
    let read = |p: &std::path::Path| {
        crate::files::read_text(p).map_err(|e| Error::user(e.to_string()).with_hint(hint))
    };
    let invalid = |e: table::TableError| Error::user(e.to_string()).with_hint(hint);
    let prd = table::parse_prd(&prd_path, &read(&prd_path)?).map_err(invalid)?;
    let progress =
        table::parse_progress(&progress_path, &read(&progress_path)?).map_err(invalid)?;
    table::validate(&prd, &prd_path, &progress, &progress_path).map_err(invalid)?;
    ctx.ui.plain(&format!(
        "planned {} tasks in {} and {}",
        prd.tasks.len(),
        prd_path.display(),
        progress_path.display()
    ));
    Ok(())
}

/// Validate the criteria the planning run wrote (SPEC §3.1) and show them.
fn report_planned_criteria(ctx: &Context, hint: &str) -> Result<()> {
    let path = ctx.cwd.join(TASK_FILE);
    let doc = crate::task::document::load_task_file(&path)
        .map_err(|e| Error::user(e.to_string()).with_hint(hint))?;
    ctx.ui.plain(&format!(
        "planned {} criteria in {}:",
        doc.checklist.total(),
        path.display()
    ));
    for c in &doc.checklist.criteria {
        ctx.ui.plain(&format!("- [ ] {}", c.text));
    }
    Ok(())
}

fn ask(question: &str) -> Result<String> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| Error::io("failed to read the description", e))?;
    let line = line.trim().to_string();
    if line.is_empty() {
        return Err(Error::user("the task description is empty"));
    }
    Ok(line)
}

/// The frontmatter `task`: the description's first line, kept short.
fn task_name(description: &str) -> String {
    let first = description.lines().next().unwrap_or("").trim();
    if first.chars().count() > 72 {
        let cut: String = first.chars().take(69).collect();
        format!("{}...", cut.trim_end())
    } else {
        first.to_string()
    }
}

/// A YAML double-quoted scalar (JSON strings are valid YAML).
fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

fn render(description: &str, args: &InitArgs) -> String {
    let name = task_name(description);
    let mut s = String::from("---\n");
    s.push_str(&format!("task: {}\n", yaml_str(&name)));
    if let Some(cmd) = &args.test_command {
        s.push_str(&format!("test_command: {}\n", yaml_str(cmd)));
    }
    s.push_str(&format!("max_iterations: {}\n", args.max_iterations));
    if let Some(agent) = &args.agent {
        s.push_str(&format!("agent: {agent}\n"));
    }
    s.push_str("---\n\n");
    s.push_str(&format!("# Task: {name}\n\n{description}\n\n"));
    s.push_str("## Success Criteria\n\n");
    if args.criteria.is_empty() {
        s.push_str(
            "<!-- Each criterion: specific, verifiable, small enough for one iteration. -->\n",
        );
        for c in EXAMPLE_CRITERIA {
            let mark = crate::task::placeholder::MARK;
            s.push_str(&format!("- [ ] {mark}: {c}\n"));
        }
    } else {
        for c in &args.criteria {
            s.push_str(&format!(
                "- [ ] {}\n",
                c.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    s
}
