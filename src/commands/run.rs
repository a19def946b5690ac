//! `ralph run`: resolve the target, the settings and the agent; dry-run or supervise the loop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Context;
use crate::agent::Agent;
use crate::cli::RunArgs;
use crate::config::{self, AgentChoice, Layer, Settings, Source};
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::signals::Interrupts;
use crate::state::{self, Lock, RalphDir, RunState};
use crate::supervisor::decide::Counters;
use crate::supervisor::{self, Loop, prompt};
use crate::task::TASK_FILE;
use crate::task::checklist::normalize;
use crate::task::document::{TaskDocument, load_task_file};
use crate::ui::human_duration;

/// How long to wait for someone else's `index.lock` before giving up.
const INDEX_LOCK_WAIT: Duration = Duration::from_secs(2);

pub fn run(ctx: &Context, args: &RunArgs) -> Result<i32> {
    let ui = ctx.ui;
    let repo = Repo::discover(&ctx.cwd)?;
    let task_path = resolve_target(&ctx.cwd, &args.targets)?;
    let doc = load_task_file(&task_path)?;
    for w in &doc.warnings {
        ui.warn(&format!("{}: {w}", task_path.display()));
    }
    let rd = RalphDir::new(repo.root());
    let mut layers = vec![Source {
        name: "the command line or RALPH_* variables".into(),
        layer: Layer::from_options(&args.options),
    }];
    layers.extend(config::file_layers(&rd.path, doc.frontmatter.as_ref())?);
    let settings = config::merge(&layers)?;
    let agent = Agent::resolve(&settings.agent, !args.dry_run)?;
    let task_rel = relative_to(&task_path, repo.root());

    if doc.checklist.done() == doc.checklist.total() {
        ui.success(&format!(
            "{}: already complete ({}/{} criteria checked). Nothing to run.",
            task_rel,
            doc.checklist.done(),
            doc.checklist.total()
        ));
        return Ok(exit::COMPLETE);
    }
    if args.dry_run {
        return dry_run(ctx, &doc, &task_rel, &task_path, &settings, &agent, &rd);
    }

    repo.check_ready(INDEX_LOCK_WAIT)?;
    for note in &agent.notes {
        ui.note(note);
    }
    // Only the user's own uncommitted work makes a "state before run" commit; ralph's new
    // .ralph/ files otherwise ride along with the first iteration that changes something.
    let was_dirty = !settings.no_commit && repo.is_dirty()?;
    state::create_private_dir(&rd.path)?;
    let _lock = Lock::acquire(&rd.lock_file())?;
    rd.scaffold(&doc.name, doc.checklist.total(), settings.max_iterations)?;
    let run_id = new_run_id();
    let mut repo = repo;
    if was_dirty {
        let message =
            supervisor::commit_message(&format!("ralph: state before run {run_id}"), 0, &run_id);
        if let Some(out) = repo.commit_all(&message)? {
            ui.note(&format!(
                "committed the uncommitted changes first as {} (ralph: state before run)",
                out.commit.short
            ));
            if out.used_fallback_identity {
                ui.warn(crate::supervisor::FALLBACK_IDENTITY_WARNING);
            }
        }
    }

    let baseline: Vec<String> = doc
        .checklist
        .criteria
        .iter()
        .filter(|c| !c.checked)
        .map(|c| normalize(&c.text))
        .collect();
    let now = state::now_rfc3339();
    let mut run_state = RunState {
        schema_version: state::SCHEMA_VERSION,
        run_id: run_id.clone(),
        task: doc.name.clone(),
        task_file: task_rel.clone(),
        mode: "checklist".into(),
        pid: std::process::id(),
        running: true,
        started_at: now.clone(),
        updated_at: now,
        iteration: 0,
        max_iterations: settings.max_iterations,
        done: doc.checklist.done(),
        total: doc.checklist.total(),
        best_done: doc.checklist.done(),
        no_progress_streak: 0,
        baseline,
        last_keys: Vec::new(),
        halt_reason: None,
        exit_code: None,
        cost_usd: 0.0,
    };
    run_state.save(&rd.state_file())?;
    state::append_line(
        &rd.activity_log(),
        &format!(
            "[{}] Run {run_id} started: task \"{}\", agent {}, max iterations {}",
            state::now_rfc3339(),
            doc.name,
            agent.name,
            settings.max_iterations
        ),
    )?;
    ui.line(&format!(
        "ralph: {} — {}/{} criteria, agent {}, up to {} iterations (run {run_id})",
        doc.name,
        doc.checklist.done(),
        doc.checklist.total(),
        agent.name,
        settings.max_iterations
    ));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the async runtime", e))?;
    runtime.block_on(async move {
        let interrupts =
            Interrupts::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
        let counters = Counters {
            iteration: 0,
            max_iterations: settings.max_iterations,
            stuck_threshold: settings.stuck_threshold,
            no_progress_streak: 0,
            best_done: doc.checklist.done(),
            last_keys: Vec::new(),
        };
        let the_loop = Loop {
            repo,
            rd,
            task_path,
            task_rel,
            task_name: doc.name.clone(),
            unattended: !supervisor::is_interactive(args.options.yes),
            settings,
            agent,
            ui,
            state: run_state,
            counters,
            previous: doc.checklist,
            interrupts,
            started: Instant::now(),
            stream: args.options.stream,
        };
        the_loop.run().await
    })
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

fn dry_run(
    ctx: &Context,
    doc: &TaskDocument,
    task_rel: &str,
    task_path: &Path,
    settings: &Settings,
    agent: &Agent,
    rd: &RalphDir,
) -> Result<i32> {
    let ui = ctx.ui;
    let first = prompt::checklist_prompt(&prompt::PromptInput {
        iteration: 1,
        max_iterations: settings.max_iterations,
        task_file: task_rel,
        next_criterion: doc.checklist.remaining().next().map(|c| c.text.as_str()),
        done: doc.checklist.done(),
        total: doc.checklist.total(),
        test_command: settings.test_command.as_deref(),
        stuck_alert: false,
        stuck_streak: 0,
        completion_promise: settings.completion_promise.as_deref(),
    });
    let prompt_file = rd.run_dir("RUN_ID").join("iter-001.prompt.md");
    let inv = agent.invocation(&first, &prompt_file)?;
    let opt = |d: Option<Duration>| d.map_or_else(|| "none".to_string(), human_duration);
    ui.plain("ralph run --dry-run: nothing is spawned or written");
    ui.plain("mode: checklist");
    ui.plain(&format!(
        "task: {} ({}; {}/{} criteria checked)",
        doc.name,
        task_path.display(),
        doc.checklist.done(),
        doc.checklist.total()
    ));
    let source = match &settings.agent {
        AgentChoice::Preset(p) => format!("preset `{p}`"),
        AgentChoice::Template(t) => format!("--agent-cmd `{t}`"),
    };
    ui.plain(&format!("agent: {source}"));
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
