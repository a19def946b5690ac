//! `ralph run`: resolve the target, the settings and the agent; dry-run or supervise the loop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Context;
use crate::agent::Agent;
use crate::cli::{ResumeArgs, RunArgs, RunOptions};
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

fn start(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    mut how: Continuation,
) -> Result<i32> {
    let ui = ctx.ui;
    let repo = Repo::discover(&ctx.cwd)?;
    let rd = RalphDir::new(repo.root());
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
                    && repo.root().join(&p.task_file) != ctx.cwd.join(&targets[0]) =>
            {
                return Err(Error::usage(format!(
                    "the run to resume works on `{}`, not `{}`",
                    p.task_file, targets[0]
                )));
            }
            Some(_) => {}
        }
    }
    let task_path = match (&prior, how) {
        (Some(p), Continuation::Resume) => repo.root().join(&p.task_file),
        _ => resolve_target(&ctx.cwd, targets)?,
    };
    let doc = load_task_file(&task_path)?;
    for w in &doc.warnings {
        ui.warn(&format!("{}: {w}", task_path.display()));
    }
    let mut layers = vec![Source {
        name: "the command line or RALPH_* variables".into(),
        layer: Layer::from_options(options),
    }];
    layers.extend(config::file_layers(&rd.path, doc.frontmatter.as_ref())?);
    let mut settings = config::merge(&layers)?;
    let agent = Agent::resolve(&settings.agent, !dry_run)?;
    let task_rel = relative_to(&task_path, repo.root());

    if doc.checklist.done() == doc.checklist.total() {
        ui.success(&format!(
            "{}: already complete ({}/{} criteria checked). Nothing to run.",
            task_rel,
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
    if dry_run {
        return dry_run_report(ctx, &doc, &task_rel, &task_path, &settings, &agent, &rd);
    }

    repo.check_ready(INDEX_LOCK_WAIT)?;
    // Only the user's own uncommitted work makes a "state before run" commit; ralph's new
    // .ralph/ files otherwise ride along with the first iteration that changes something.
    let was_dirty = !settings.no_commit && repo.is_dirty()?;
    state::create_private_dir(&rd.path)?;
    let _lock = Lock::acquire(&rd.lock_file())?;

    let unfinished = prior
        .as_ref()
        .filter(|p| p.halt_reason.as_deref() != Some("complete"));
    if how == Continuation::Fresh
        && let Some(p) = unfinished
    {
        how = ask_resume_or_reset(p, options.yes)?;
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
    rd.scaffold(&doc.name, doc.checklist.total(), settings.max_iterations)?;
    let mut repo = repo;

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
                if let Some(out) = repo.commit_all(&message)? {
                    ui.note(&format!(
                        "committed the uncommitted work first as {} ({subject})",
                        out.commit.short
                    ));
                    warn_fallback(ui, out.used_fallback_identity);
                }
            }
            p.running = true;
            p.pid = std::process::id();
            p.halt_reason = None;
            p.exit_code = None;
            p.max_iterations = settings.max_iterations;
            p.task = doc.name.clone();
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
                "ralph: resuming run {} at iteration {}/{} — {}/{} criteria, agent {}",
                p.run_id,
                p.iteration + 1,
                settings.max_iterations,
                doc.checklist.done(),
                doc.checklist.total(),
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
                if let Some(out) = repo.commit_all(&message)? {
                    ui.note(&format!(
                        "committed the uncommitted changes first as {} (ralph: state before run)",
                        out.commit.short
                    ));
                    warn_fallback(ui, out.used_fallback_identity);
                }
            }
            ui.line(&format!(
                "ralph: {} — {}/{} criteria, agent {}, up to {} iterations (run {run_id})",
                doc.name,
                doc.checklist.done(),
                doc.checklist.total(),
                agent.name,
                settings.max_iterations
            ));
            fresh_state(&rd, &run_id, &doc, &task_rel, &settings, &agent)?
        }
    };
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
            "done": doc.checklist.done(),
            "total": doc.checklist.total(),
            "resumed": run_state.iteration > 0,
        }),
    );
    let counters = Counters {
        iteration: run_state.iteration,
        max_iterations: settings.max_iterations,
        stuck_threshold: settings.stuck_threshold,
        no_progress_streak: run_state.no_progress_streak,
        best_done: run_state.best_done,
        last_keys: run_state.last_keys.clone(),
        verdict_failures: run_state.verdict_failures,
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the async runtime", e))?;
    runtime.block_on(async move {
        let interrupts =
            Interrupts::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
        let the_loop = Loop {
            repo,
            rd,
            task_path,
            task_rel,
            task_name: doc.name.clone(),
            unattended: !supervisor::is_interactive(options.yes),
            settings,
            agent,
            ui,
            state: run_state,
            counters,
            previous: doc.checklist,
            interrupts,
            started: Instant::now(),
            stream: options.stream,
        };
        the_loop.run().await
    })
}

fn warn_fallback(ui: crate::ui::Ui, used: bool) {
    if used {
        ui.warn(crate::supervisor::FALLBACK_IDENTITY_WARNING);
    }
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
    doc: &TaskDocument,
    task_rel: &str,
    settings: &Settings,
    agent: &Agent,
) -> Result<RunState> {
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
        run_id: run_id.to_string(),
        task: doc.name.clone(),
        task_file: task_rel.to_string(),
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
        verdict_failures: 0,
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
