//! `ralph run`: resolve the target, the settings and the agent; dry-run or supervise the loop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Context;
use crate::agent::Agent;
use crate::cli::{ResumeArgs, RunArgs, RunOptions};
use crate::config::{self, AgentChoice, Layer, Settings, Source as ConfigSource};
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::signals::Interrupts;
use crate::state::{self, Lock, RalphDir, RunState};
use crate::supervisor::decide::Counters;
use crate::supervisor::source::{
    ChecklistSource, CpmSource, PromptCtx, Source, TableSource, cpm_error, table_error,
};
use crate::supervisor::{self, Loop};
use crate::task::TASK_FILE;
use crate::task::checklist::normalize;
use crate::task::cpm::{self, Phase, Targets};
use crate::task::document::{TaskDocument, load_task_file};
use crate::task::table;
use crate::ui::human_duration;

/// How long to wait for someone else's `index.lock` before giving up.
const INDEX_LOCK_WAIT: Duration = Duration::from_secs(2);

/// What to do with the run recorded in `.ralph/state.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Continuation {
    /// `ralph run`: start fresh, asking first (or refusing) when an unfinished run exists.
    Fresh,
    /// `ralph resume` / `ralph run --resume`.
    Resume,
    /// `ralph run --reset`: start fresh whatever is recorded.
    Reset,
}

pub fn run(ctx: &Context, args: &RunArgs) -> Result<i32> {
    let how = if args.resume {
        Continuation::Resume
    } else if args.reset {
        Continuation::Reset
    } else {
        Continuation::Fresh
    };
    start(ctx, &args.targets, &args.options, args.dry_run, how)
}

pub fn resume(ctx: &Context, args: &ResumeArgs) -> Result<i32> {
    start(ctx, &[], &args.options, false, Continuation::Resume)
}

/// What a run works on, resolved from the targets (SPEC §2.2).
enum Plan {
    Checklist {
        doc: Box<TaskDocument>,
        path: PathBuf,
        rel: String,
    },
    Cpm {
        targets: Targets,
    },
    Table {
        prd_path: PathBuf,
        progress_path: PathBuf,
        prd: Box<table::Prd>,
        progress: table::Progress,
    },
    /// `ralph run "a description"`: plan first (a matching plan, else one planning run).
    Describe(String),
}

impl Plan {
    fn name(&self) -> String {
        match self {
            Plan::Checklist { doc, .. } => doc.name.clone(),
            Plan::Cpm {
                targets: Targets::Spec(s),
            } => format!("spec {}", s.display()),
            Plan::Cpm {
                targets: Targets::Epics(e),
            } => format!("epics {}", cpm::epic_range(e)),
            Plan::Table { prd, .. } => prd.title.clone(),
            Plan::Describe(d) => d.clone(),
        }
    }

    fn counts(&self) -> (usize, usize) {
        match self {
            Plan::Checklist { doc, .. } => (doc.checklist.done(), doc.checklist.total()),
            Plan::Cpm { .. } | Plan::Describe(_) => (0, 0),
            Plan::Table { progress, .. } => (table::done_count(progress), progress.rows.len()),
        }
    }

    fn mode(&self) -> &'static str {
        match self {
            Plan::Checklist { .. } => "checklist",
            Plan::Cpm { targets } if targets.is_spec() => "cpm-spec",
            Plan::Cpm { .. } => "cpm-epic",
            Plan::Table { .. } | Plan::Describe(_) => "table",
        }
    }

    /// What `state.json` records so a resume finds the same work.
    fn recorded_targets(&self) -> (String, Vec<String>) {
        match self {
            Plan::Checklist { rel, .. } => (rel.clone(), Vec::new()),
            Plan::Table {
                prd_path,
                progress_path,
                ..
            } => (
                prd_path.to_string_lossy().into_owned(),
                vec![
                    prd_path.to_string_lossy().into_owned(),
                    progress_path.to_string_lossy().into_owned(),
                ],
            ),
            Plan::Describe(_) => (String::new(), Vec::new()),
            Plan::Cpm { targets } => {
                let paths: Vec<String> = match targets {
                    Targets::Spec(s) => vec![s.to_string_lossy().into_owned()],
                    Targets::Epics(e) => {
                        e.iter().map(|p| p.to_string_lossy().into_owned()).collect()
                    }
                };
                (paths.first().cloned().unwrap_or_default(), paths)
            }
        }
    }
}

/// Resolve the targets of a new run into a plan.
fn resolve_plan(ctx: &Context, root: &Path, targets: &[String]) -> Result<Plan> {
    let has_cpm_target = targets.iter().any(|t| cpm::is_cpm_target(t));
    let task_here = ctx.cwd.join(TASK_FILE).exists();
    let auto_cpm = targets.is_empty() && !task_here && root.join(cpm::EPICS_DIR).is_dir();
    if has_cpm_target || auto_cpm {
        let targets = cpm::resolve_targets(root, targets).map_err(cpm_error)?;
        return Ok(Plan::Cpm { targets });
    }
    match targets {
        [] if !task_here
            && ctx.cwd.join(table::PRD_FILE).is_file()
            && ctx.cwd.join(table::PROGRESS_FILE).is_file() =>
        {
            return load_table(
                root,
                &ctx.cwd.join(table::PRD_FILE),
                &ctx.cwd.join(table::PROGRESS_FILE),
            );
        }
        [one] => {
            let path = ctx.cwd.join(one);
            let rel = relative_to(&path, root);
            if path.is_file() && path.file_name().is_some_and(|n| n == table::PRD_FILE) {
                let progress = path.with_file_name(table::PROGRESS_FILE);
                return load_table(root, &path, &progress);
            }
            if path.is_file() && rel.starts_with(&format!("{}/", cpm::PLANS_DIR)) {
                return load_table(root, &path, &root.join(table::PROGRESS_FILE));
            }
            if !path.exists() && one.trim().contains(char::is_whitespace) && !one.ends_with(".md") {
                return Ok(Plan::Describe(one.trim().to_string()));
            }
        }
        _ => {}
    }
    let path = resolve_target(&ctx.cwd, targets)?;
    let doc = Box::new(load_task_file(&path)?);
    let rel = relative_to(&path, root);
    Ok(Plan::Checklist { doc, path, rel })
}

/// Read and validate a task table. A plan under docs/plans/ without a progress table gets one
/// (every task PENDING), written when the run starts.
fn load_table(root: &Path, prd_path: &Path, progress_path: &Path) -> Result<Plan> {
    let prd_rel = relative_to(prd_path, root);
    let prd_text =
        std::fs::read_to_string(prd_path).map_err(|e| Error::file("read", prd_path, e))?;
    let prd = table::parse_prd(Path::new(&prd_rel), &prd_text).map_err(table_error)?;
    let progress_rel = relative_to(progress_path, root);
    let progress_text = match std::fs::read_to_string(progress_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let titles: Vec<String> = prd.tasks.iter().map(|t| t.title.clone()).collect();
            table::scaffold(&prd.goal, &titles, &prd.promise).1
        }
        Err(e) => return Err(Error::file("read", progress_path, e)),
    };
    let progress =
        table::parse_progress(Path::new(&progress_rel), &progress_text).map_err(table_error)?;
    table::validate(
        &prd,
        Path::new(&prd_rel),
        &progress,
        Path::new(&progress_rel),
    )
    .map_err(table_error)?;
    Ok(Plan::Table {
        prd_path: PathBuf::from(prd_rel),
        progress_path: PathBuf::from(progress_rel),
        prd: Box::new(prd),
        progress,
    })
}

/// The plan of the run being resumed.
fn recorded_plan(root: &Path, p: &RunState) -> Result<Plan> {
    match p.mode.as_str() {
        "cpm-spec" => Ok(Plan::Cpm {
            targets: Targets::Spec(PathBuf::from(&p.task_file)),
        }),
        "cpm-epic" => Ok(Plan::Cpm {
            targets: Targets::Epics(p.targets.iter().map(PathBuf::from).collect()),
        }),
        "table" => match p.targets.as_slice() {
            [prd, progress] => load_table(root, &root.join(prd), &root.join(progress)),
            _ => Err(
                Error::user("state.json does not name the task table of the run")
                    .with_hint("start over with `ralph run --reset`"),
            ),
        },
        _ => {
            let path = root.join(&p.task_file);
            let doc = Box::new(load_task_file(&path)?);
            Ok(Plan::Checklist {
                doc,
                path,
                rel: p.task_file.clone(),
            })
        }
    }
}

fn start(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    mut how: Continuation,
) -> Result<i32> {
    let ui = ctx.ui;
    let repo = Repo::discover(&ctx.cwd)?;
    let root = repo.root().to_path_buf();
    let rd = RalphDir::new(&root);
    let prior = RunState::load(&rd.state_file())?;
    if how == Continuation::Resume {
        match &prior {
            None => {
                return Err(Error::user(format!(
                    "nothing to resume: no run is recorded in `{}`",
                    rd.state_file().display()
                ))
                .with_hint("start one with `ralph run`"));
            }
            Some(p) if p.halt_reason.as_deref() == Some("complete") => {
                return Err(Error::user(format!(
                    "nothing to resume: the last run ({}) is complete",
                    p.run_id
                ))
                .with_hint("start a new one with `ralph run`"));
            }
            Some(p)
                if !targets.is_empty()
                    && p.mode == "checklist"
                    && root.join(&p.task_file) != ctx.cwd.join(&targets[0]) =>
            {
                return Err(Error::usage(format!(
                    "the run to resume works on `{}`, not `{}`",
                    p.task_file, targets[0]
                )));
            }
            Some(_) => {}
        }
    }
    let mut plan = match (&prior, how) {
        (Some(p), Continuation::Resume) => recorded_plan(&root, p)?,
        _ => resolve_plan(ctx, &root, targets)?,
    };
    let frontmatter = match &plan {
        Plan::Checklist { doc, path, .. } => {
            for w in &doc.warnings {
                ui.warn(&format!("{}: {w}", path.display()));
            }
            doc.frontmatter.clone()
        }
        _ => None,
    };
    let mut layers = vec![ConfigSource {
        name: "the command line or RALPH_* variables".into(),
        layer: Layer::from_options(options),
    }];
    layers.extend(config::file_layers(&rd.path, frontmatter.as_ref())?);
    let mut settings = config::merge(&layers)?;
    let agent_chosen = layers
        .iter()
        .any(|l| l.layer.agent.is_some() || l.layer.agent_cmd.is_some());
    if matches!(plan, Plan::Cpm { .. }) && !agent_chosen {
        // CPM's skills are Claude Code slash commands.
        settings.agent = AgentChoice::Preset("claude".into());
    }

    if let Plan::Checklist { doc, rel, .. } = &plan
        && doc.checklist.done() == doc.checklist.total()
    {
        ui.success(&format!(
            "{}: already complete ({}/{} criteria checked). Nothing to run.",
            rel,
            doc.checklist.done(),
            doc.checklist.total()
        ));
        ui.event(
            "halted",
            serde_json::json!({"reason": "complete", "exit_code": exit::COMPLETE, "iteration": 0,
                "done": doc.checklist.done(), "total": doc.checklist.total()}),
        );
        return Ok(exit::COMPLETE);
    }
    if let Plan::Cpm {
        targets: Targets::Epics(e),
    } = &plan
        && e.is_empty()
    {
        ui.plain(&cpm::nothing_to_run_message(&root).map_err(cpm_error)?);
        ui.event(
            "halted",
            serde_json::json!({"reason": "complete", "exit_code": exit::COMPLETE, "iteration": 0}),
        );
        return Ok(exit::COMPLETE);
    }
    let agent = Agent::resolve(&settings.agent, !dry_run)?;
    let rollup = match &plan {
        Plan::Cpm { .. } => cpm::resolve_rollup(
            options.rollup.as_deref(),
            std::env::var_os("CLAUDE_PLUGIN_ROOT")
                .map(PathBuf::from)
                .as_deref(),
            std::env::var_os("HOME").map(PathBuf::from).as_deref(),
        ),
        _ => None,
    };
    if matches!(plan, Plan::Cpm { .. }) && rollup.is_none() {
        let err = match &options.rollup {
            Some(p) => Error::user(format!("the roll-up script `{}` does not exist", p.display())),
            None => Error::user("no coverage roll-up script found (coverage-rollup.sh)"),
        }
        .with_hint("pass --rollup PATH, or set CLAUDE_PLUGIN_ROOT to the CPM plugin (--yes runs without one)");
        if !options.yes || options.rollup.is_some() {
            return Err(err);
        }
        ui.warn("no coverage roll-up script found: without it only max iterations, stalls and stuck detection end the run");
    }
    if let Plan::Describe(description) = &plan
        && dry_run
    {
        ui.plain("ralph run --dry-run: nothing is spawned or written");
        ui.plain("mode: table, after a planning phase");
        match find_docs_plan(&root, description)? {
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
    let mut source = match &plan {
        Plan::Describe(_) => None,
        _ => Some(build_source(
            &plan,
            &root,
            options,
            rollup.clone(),
            &settings,
        )?),
    };
    if dry_run && let Some(source) = &mut source {
        return dry_run_report(ctx, &plan, source, &settings, &agent, &rd);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the async runtime", e))?;

    repo.check_ready(INDEX_LOCK_WAIT)?;
    // Only the user's own uncommitted work makes a "state before run" commit; ralph's new
    // .ralph/ files otherwise ride along with the first iteration that changes something.
    let was_dirty = !settings.no_commit && repo.is_dirty()?;
    state::create_private_dir(&rd.path)?;
    let lock = Lock::acquire(&rd.lock_file())?;
    let mut repo = repo;
    if let Plan::Describe(description) = &plan {
        plan = runtime.block_on(plan_table(
            ctx,
            &root,
            &rd,
            description,
            &agent,
            &settings,
            &mut repo,
        ))?;
        source = Some(build_source(&plan, &root, options, rollup, &settings)?);
    }
    let Some(source) = source else {
        return Err(Error::user("nothing to run"));
    };
    if let Source::Table(t) = &source
        && !t.progress_path.exists()
    {
        // A plan under docs/plans/ starts its progress table here (every task PENDING).
        let titles: Vec<String> = t.prd.tasks.iter().map(|x| x.title.clone()).collect();
        let text = table::scaffold(&t.prd.goal, &titles, &t.prd.promise).1;
        state::write_atomic(&t.progress_path, text.as_bytes())?;
        ui.note(&format!("wrote {} (every task PENDING)", t.progress_rel));
    }

    let unfinished = prior
        .as_ref()
        .filter(|p| p.halt_reason.as_deref() != Some("complete"));
    if how == Continuation::Fresh
        && let Some(p) = unfinished
    {
        how = ask_resume_or_reset(p, options.yes)?;
        if how == Continuation::Resume {
            // Resuming works on what the recorded run worked on (and takes the lock itself).
            drop(lock);
            return start(ctx, &[], options, false, Continuation::Resume);
        }
    }
    let resumed = match (how, prior) {
        (Continuation::Resume, Some(p)) => Some(p),
        _ => None,
    };
    if let Some(p) = &resumed {
        // A limit given now (flag or RALPH_MAX_ITERATIONS) wins; else a limit written in the
        // task file or a config file counts when it is higher than the recorded one.
        let written = layers.iter().skip(1).find_map(|s| s.layer.max_iterations);
        settings.max_iterations = match (options.max_iterations, written) {
            (Some(m), _) => m,
            (None, Some(w)) => w.max(p.max_iterations),
            (None, None) => p.max_iterations,
        };
        if p.iteration >= settings.max_iterations {
            return Err(Error::user(format!(
                "run {} already used its {} iterations",
                p.run_id, p.iteration
            ))
            .with_hint(format!(
                "raise the limit: ralph resume --max-iterations {}",
                p.iteration + 10
            )));
        }
    }
    for note in &agent.notes {
        ui.note(note);
    }
    let (done, total) = plan.counts();
    let name = plan.name();
    rd.scaffold(&name, total, settings.max_iterations)?;

    let run_state = match resumed {
        Some(mut p) => {
            if !settings.no_commit && repo.is_dirty()? {
                // Work an interrupted (or killed) iteration left behind is committed first.
                let subject = if p.running || p.halt_reason.as_deref() == Some("interrupted") {
                    format!("ralph: iteration {} (interrupted)", p.iteration)
                } else {
                    format!("ralph: state before resuming run {}", p.run_id)
                };
                let message = supervisor::commit_message(&subject, p.iteration, &p.run_id);
                if let Some(out) =
                    supervisor::guarded_commit(&mut repo, &settings, ui, &rd, &message, None)?
                {
                    ui.note(&format!(
                        "committed the uncommitted work first as {} ({subject})",
                        out.commit.short
                    ));
                }
            }
            p.running = true;
            p.pid = std::process::id();
            p.halt_reason = None;
            p.exit_code = None;
            p.max_iterations = settings.max_iterations;
            p.task = name.clone();
            p.save(&rd.state_file())?;
            state::append_line(
                &rd.activity_log(),
                &format!(
                    "[{}] Run {} resumed at iteration {}: agent {}, max iterations {}",
                    state::now_rfc3339(),
                    p.run_id,
                    p.iteration + 1,
                    agent.name,
                    settings.max_iterations
                ),
            )?;
            ui.line(&format!(
                "ralph: resuming run {} at iteration {}/{} — {done}/{total} {}, agent {}",
                p.run_id,
                p.iteration + 1,
                settings.max_iterations,
                source.unit(),
                agent.name
            ));
            p
        }
        None => {
            let run_id = new_run_id();
            if was_dirty {
                let message = supervisor::commit_message(
                    &format!("ralph: state before run {run_id}"),
                    0,
                    &run_id,
                );
                if let Some(out) =
                    supervisor::guarded_commit(&mut repo, &settings, ui, &rd, &message, None)?
                {
                    ui.note(&format!(
                        "committed the uncommitted changes first as {} (ralph: state before run)",
                        out.commit.short
                    ));
                }
            }
            ui.line(&format!(
                "ralph: {name} — {done}/{total} {}, agent {}, up to {} iterations (run {run_id})",
                source.unit(),
                agent.name,
                settings.max_iterations
            ));
            fresh_state(&rd, &run_id, &plan, &settings, &agent)?
        }
    };
    let mut source = source;
    if let Source::Cpm(c) = &mut source {
        c.log = cpm::log_path(&run_state.run_id);
        c.resuming = run_state.iteration > 0;
        cpm_preflight(ui, &root, &rd, c, options.yes)?;
    }
    ui.event(
        "run_started",
        serde_json::json!({
            "run_id": run_state.run_id,
            "task": run_state.task,
            "task_file": run_state.task_file,
            "mode": run_state.mode,
            "agent": agent.name,
            "max_iterations": settings.max_iterations,
            "iteration": run_state.iteration,
            "done": done,
            "total": total,
            "resumed": run_state.iteration > 0,
        }),
    );
    let counters = Counters::restore(
        &run_state,
        settings.max_iterations,
        settings.stuck_threshold,
    );

    runtime.block_on(async move {
        let interrupts =
            Interrupts::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
        let mut the_loop = Loop {
            repo,
            rd,
            source,
            task_name: name,
            unattended: !supervisor::is_interactive(options.yes),
            settings,
            agent,
            ui,
            state: run_state,
            counters,
            interrupts,
            started: Instant::now(),
            stream: options.stream,
            clean_at: None,
        };
        if let Some(code) = the_loop.preflight_verdict().await? {
            return Ok(code);
        }
        the_loop.run().await
    })
}

/// A plan under docs/plans/ that matches the description.
fn find_docs_plan(root: &Path, description: &str) -> Result<Option<PathBuf>> {
    let dir = root.join(cpm::PLANS_DIR);
    let mut plans = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_file()
                && !e.file_name().to_string_lossy().starts_with('.')
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                plans.push((PathBuf::from(relative_to(&path, root)), text));
            }
        }
    }
    Ok(table::find_plan(&plans, description))
}

/// The planning phase of `ralph run "description"` (SPEC §3.2): a matching plan under
/// docs/plans/, else one agent run that writes PRD.md and PROGRESS.md, validated and committed.
async fn plan_table(
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
    let dir = rd.run_dir("planning");
    state::create_private_dir(&dir)?;
    let prompt = table::planning_prompt(description);
    let prompt_file = dir.join("planning.prompt.md");
    std::fs::write(&prompt_file, &prompt).map_err(|e| Error::file("write", &prompt_file, e))?;
    let transcript_path = dir.join("planning.log");
    let mut transcript = std::fs::File::create(&transcript_path)
        .map_err(|e| Error::file("create", &transcript_path, e))?;
    let inv = agent.invocation(&prompt, &prompt_file)?;
    ui.line(&format!(
        "planning: one {} run writes {} and {} for \"{description}\"",
        agent.name,
        table::PRD_FILE,
        table::PROGRESS_FILE
    ));
    let mut interrupts =
        Interrupts::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
    let limits = crate::agent::process::Limits {
        timeout: settings.timeout,
        idle_timeout: settings.idle_timeout,
        grace: settings.grace,
    };
    let fin = crate::agent::process::run(
        &inv,
        root,
        &mut transcript,
        &limits,
        &mut interrupts,
        crate::agent::process::Echo::None,
        crate::agent::process::Watchers::default(),
    )
    .await
    .map_err(|e| e.into_error(format_args!("agent `{}`", inv.program)))?;
    if fin.stopped == Some(crate::agent::process::StopCause::Interrupt) {
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
        if let Some(out) = supervisor::guarded_commit(repo, settings, ui, rd, message, None)? {
            ui.note(&format!("committed the plan as {}", out.commit.short));
        }
    }
    Ok(plan)
}

/// Turn a plan into the loop's task source.
fn build_source(
    plan: &Plan,
    root: &Path,
    options: &RunOptions,
    rollup: Option<PathBuf>,
    settings: &Settings,
) -> Result<Source> {
    Ok(match plan {
        Plan::Checklist { doc, path, rel } => Source::Checklist(ChecklistSource {
            path: path.clone(),
            rel: rel.clone(),
            previous: doc.checklist.clone(),
            baseline: baseline(doc),
        }),
        Plan::Cpm { targets } => {
            let spec = match targets {
                Targets::Spec(s) => Some(root.join(s)),
                Targets::Epics(_) => None,
            };
            let phase = match targets {
                Targets::Spec(s) if cpm::epics_for_spec(root, s).map_err(cpm_error)?.is_empty() => {
                    Phase::Planning
                }
                _ => Phase::Delivery,
            };
            let test_runner = settings
                .test_command
                .clone()
                .or_else(|| cpm::discover_test_runner(root, spec.as_deref()).map(|(cmd, _)| cmd));
            Source::Cpm(CpmSource {
                root: root.to_path_buf(),
                targets: match targets {
                    Targets::Spec(s) => Targets::Spec(s.clone()),
                    Targets::Epics(e) => Targets::Epics(e.clone()),
                },
                rollup,
                phase,
                planned: false,
                story_filter: options.story_filter.clone(),
                test_runner,
                resuming: false,
                last_summary: None,
                log: cpm::log_path("RUN_ID"),
            })
        }
        Plan::Table {
            prd_path,
            progress_path,
            prd,
            progress,
        } => Source::Table(TableSource {
            prd_path: root.join(prd_path),
            prd_rel: prd_path.to_string_lossy().into_owned(),
            progress_path: root.join(progress_path),
            progress_rel: progress_path.to_string_lossy().into_owned(),
            prd: (**prd).clone(),
            progress: progress.clone(),
            current: None,
            review: options.review,
            pending: None,
        }),
        Plan::Describe(_) => {
            return Err(Error::user("a description must be planned before it runs"));
        }
    })
}

/// The unchecked criteria at the start of a run (normalised).
fn baseline(doc: &TaskDocument) -> Vec<String> {
    doc.checklist
        .criteria
        .iter()
        .filter(|c| !c.checked)
        .map(|c| normalize(&c.text))
        .collect()
}

/// CPM pre-flight (SPEC §3.4): strip `[plan]`, report earlier runs, the session-state ignore
/// check and the stop-hook warning.
fn cpm_preflight(
    ui: crate::ui::Ui,
    root: &Path,
    rd: &RalphDir,
    c: &CpmSource,
    yes: bool,
) -> Result<()> {
    let log = |line: &str| {
        state::append_line(
            &rd.activity_log(),
            &format!("[{}] {line}", state::now_rfc3339()),
        )
    };
    for epic in c.epics()? {
        let path = root.join(&epic);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let (new, lines) = cpm::strip_plan_markers(&text);
        if !lines.is_empty() {
            std::fs::write(&path, new).map_err(|e| Error::file("write", &path, e))?;
            for l in lines {
                ui.line(&l);
                log(&format!("{l} ({})", epic.display()))?;
            }
        }
    }
    for run in cpm::earlier_runs(root).map_err(cpm_error)? {
        ui.line(&format!("earlier run: {}", run.describe()));
    }
    if let Some(r) = &c.rollup {
        ui.line(&format!("roll-up: {}", r.display()));
    }
    if let Some(t) = &c.test_runner {
        ui.line(&format!("test runner: {t}"));
    }
    let missing = cpm::missing_ignore_lines(root);
    if !missing.is_empty() {
        let apply = if yes {
            true
        } else if supervisor::is_interactive(false) {
            use std::io::Write;
            eprint!(
                "Add {} to .gitignore (session state, not project history)? [Y/n] ",
                missing.join(", ")
            );
            let _ = std::io::stderr().flush();
            let mut answer = String::new();
            let _ = std::io::stdin().read_line(&mut answer);
            !answer.trim().eq_ignore_ascii_case("n")
        } else {
            false
        };
        if apply {
            cpm::apply_ignore_lines(root, &missing).map_err(cpm_error)?;
            ui.note(&format!("added to .gitignore: {}", missing.join(", ")));
            log(&format!("Added to .gitignore: {}", missing.join(", ")))?;
        } else {
            ui.warn(&format!(
                ".gitignore does not cover session state ({}): pass --yes to add it",
                missing.join(", ")
            ));
        }
    }
    if cpm::stop_hook_armed(root) {
        ui.warn(&format!(
            "{} exists: an armed stop-hook loop would fight ralph's fresh iterations; delete it",
            cpm::STOP_HOOK_STATE
        ));
    }
    Ok(())
}

/// `ralph run` found an unfinished run: ask in a terminal, else refuse naming both ways on.
fn ask_resume_or_reset(p: &RunState, yes: bool) -> Result<Continuation> {
    let what = format!(
        "an unfinished run ({}, iteration {}/{}, {}) is recorded in .ralph/state.json",
        p.run_id,
        p.iteration,
        p.max_iterations,
        p.halt_reason.as_deref().unwrap_or("killed while running")
    );
    if supervisor::is_interactive(yes) {
        use std::io::Write;
        eprint!("{what}.\nResume it, or reset and start a new run? [r]esume / re[s]et / [q]uit: ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        return match answer.trim().to_ascii_lowercase().as_str() {
            "r" | "resume" => Ok(Continuation::Resume),
            "s" | "reset" => Ok(Continuation::Reset),
            _ => Err(Error::user("stopped: nothing was run")),
        };
    }
    Err(Error::user(what).with_hint(
        "continue it with `ralph resume` (or `ralph run --resume`), or start over with `ralph run --reset`",
    ))
}

fn fresh_state(
    rd: &RalphDir,
    run_id: &str,
    plan: &Plan,
    settings: &Settings,
    agent: &Agent,
) -> Result<RunState> {
    let (done, total) = plan.counts();
    let (task_file, targets) = plan.recorded_targets();
    let now = state::now_rfc3339();
    let mut run_state = RunState {
        schema_version: state::SCHEMA_VERSION,
        run_id: run_id.to_string(),
        task: plan.name(),
        task_file,
        mode: plan.mode().into(),
        targets,
        pid: std::process::id(),
        running: true,
        started_at: now.clone(),
        updated_at: now,
        iteration: 0,
        max_iterations: settings.max_iterations,
        done,
        total,
        best_done: done,
        no_progress_streak: 0,
        baseline: match plan {
            Plan::Checklist { doc, .. } => baseline(doc),
            _ => Vec::new(),
        },
        last_keys: Vec::new(),
        verdict_failures: 0,
        halt_reason: None,
        exit_code: None,
        cost_usd: 0.0,
        input_tokens: 0,
        output_tokens: 0,
        waited_s: 0.0,
        iterations_log: match plan {
            Plan::Cpm { .. } => Some(cpm::log_path(run_id).to_string_lossy().into_owned()),
            _ => None,
        },
    };
    run_state.save(&rd.state_file())?;
    state::append_line(
        &rd.activity_log(),
        &format!(
            "[{}] Run {run_id} started: {} \"{}\", agent {}, max iterations {}",
            state::now_rfc3339(),
            plan.mode(),
            plan.name(),
            agent.name,
            settings.max_iterations
        ),
    )?;
    Ok(run_state)
}

/// The task file of a checklist run: the one target, else `RALPH_TASK.md` in the directory.
fn resolve_target(cwd: &Path, targets: &[String]) -> Result<PathBuf> {
    match targets {
        [] => {
            let p = cwd.join(TASK_FILE);
            if p.exists() {
                Ok(p)
            } else {
                Err(
                    Error::user(format!("no {TASK_FILE} in `{}`", cwd.display())).with_hint(
                        "create one with `ralph init \"describe the task\" --criterion \"...\"`",
                    ),
                )
            }
        }
        [one] => Ok(cwd.join(one)),
        many => Err(Error::usage(format!(
            "a checklist run takes one task file, got {}: {}",
            many.len(),
            many.join(", ")
        ))),
    }
}

fn relative_to(path: &Path, root: &Path) -> String {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (p, r) = (canon(path), canon(root));
    p.strip_prefix(&r)
        .map(|rel| rel.to_string_lossy().into_owned())
        .unwrap_or_else(|_| p.to_string_lossy().into_owned())
}

/// `YYYYmmdd-HHMMSS-xxxx`: sortable, and unique enough for one repository.
fn new_run_id() -> String {
    let now = chrono::Local::now();
    let salt = (std::process::id() ^ now.timestamp_subsec_nanos()) & 0xffff;
    format!("{}-{salt:04x}", now.format("%Y%m%d-%H%M%S"))
}

fn dry_run_report(
    ctx: &Context,
    plan: &Plan,
    source: &mut Source,
    settings: &Settings,
    agent: &Agent,
    rd: &RalphDir,
) -> Result<i32> {
    let ui = ctx.ui;
    source.select_next();
    let first = source.prompt(&PromptCtx {
        iteration: 1,
        max_iterations: settings.max_iterations,
        test_command: settings.test_command.as_deref(),
        stuck_alert: false,
        stuck_streak: 0,
        completion_promise: settings.completion_promise.as_deref(),
    })?;
    let prompt_file = rd.run_dir("RUN_ID").join("iter-001.prompt.md");
    let inv = agent.invocation(&first, &prompt_file)?;
    let opt = |d: Option<Duration>| d.map_or_else(|| "none".to_string(), human_duration);
    ui.plain("ralph run --dry-run: nothing is spawned or written");
    ui.plain(&format!("mode: {}", plan.mode()));
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
                ui.plain(&format!(
                    "roll-up: {}",
                    c.rollup
                        .as_ref()
                        .map_or("none".to_string(), |r| r.display().to_string())
                ));
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
    let agent_source = match &settings.agent {
        AgentChoice::Preset(p) => format!("preset `{p}`"),
        AgentChoice::Template(t) => format!("--agent-cmd `{t}`"),
    };
    ui.plain(&format!("agent: {agent_source}"));
    ui.plain(&format!("argv: {}", inv.display()));
    for note in &agent.notes {
        ui.plain(&format!("note: {note}"));
    }
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
    if let Some((display, _)) = source.verdict_invocation(settings) {
        ui.plain(&format!("verdict command: {display}"));
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
    ui.plain("--- prompt of iteration 1 ---");
    ui.plain(first.trim_end());
    ui.plain("--- end of prompt ---");
    Ok(exit::COMPLETE)
}
