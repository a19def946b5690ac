//! `ralph run` and `ralph resume`: resolve the target, the settings and the agent; end at once
//! when there is nothing to do; dry-run; or begin (or continue) a run and supervise its loop.
//!
//! The rooms: `plan` (targets → what the run works on), `begin` (fresh / resumed state, the
//! commits that come first), `planning` (a description planned into a table), `cpm` (CPM's
//! pre-flight), `dry_run`.

mod begin;
mod close;
mod cpm;
mod dry_run;
mod plan;
mod planning;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Context;
use crate::agent::Agent;
use crate::cli::{ResumeArgs, RunArgs, RunOptions};
use crate::config::{self, AgentChoice, Layer, Settings, Source as ConfigSource};
use crate::error::{Error, Result, exit};
use crate::event::{Event, RunStarted};
use crate::git::Repo;
use crate::signals::Interrupts;
use crate::state::{self, HaltReason, Lock, Mode, RalphDir, RunState};
use crate::supervisor::decide::{Counters, Halt};
use crate::supervisor::preflight::{Evidence, fresh_evidence};
use crate::supervisor::source::{Source, cpm_error};
use crate::supervisor::{self, Loop};
use crate::task::cpm::Targets;
use crate::task::integrity::Baseline;
use crate::task::table;
use crate::ui::Ui;
use begin::{Begin, Continuation};
use close::Before;
use plan::Plan;

/// How long to wait for someone else's `index.lock` before giving up.
const INDEX_LOCK_WAIT: Duration = Duration::from_secs(2);

/// `ralph run` in `dir` (`-C`): closed whatever way it ends ([`launch`]).
pub fn run(ui: Ui, dir: Option<&Path>, args: &RunArgs) -> Result<i32> {
    let how = if args.resume {
        Continuation::Resume
    } else if args.reset {
        Continuation::Reset
    } else {
        Continuation::Fresh
    };
    launch(ui, dir, &args.targets, &args.options, args.dry_run, how)
}

/// `ralph resume` in `dir` (`-C`).
pub fn resume(ui: Ui, dir: Option<&Path>, args: &ResumeArgs) -> Result<i32> {
    launch(ui, dir, &[], &args.options, false, Continuation::Resume)
}

/// The run, closed whatever way it ends (an error on the way too: `Before::error`), then —
/// for a worktree loop — merged back; the merge's own errors come after the close.
fn launch(
    ui: Ui,
    dir: Option<&Path>,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
) -> Result<i32> {
    let ran = Context::new(dir, ui)
        .and_then(|ctx| Ok((in_worktree(&ctx, targets, options, dry_run, how)?, ctx)));
    match ran {
        Ok(((code, Some(loop_)), ctx)) => merge_back(&ctx, options, code, loop_),
        Ok(((code, None), _)) => Ok(code),
        Err(e) => Ok(Before::error(ui, e).close()),
    }
}

/// A worktree loop that ran: its repository's, its name, its worktree.
struct LoopRan {
    repo: Repo,
    name: String,
    path: PathBuf,
}

/// `--merge` (or `merge = true` in the loop's config): a loop that completed merges back.
fn merge_back(ctx: &Context, options: &RunOptions, code: i32, ran: LoopRan) -> Result<i32> {
    let LoopRan { repo, name, path } = ran;
    let configured = config::file_layers(&RalphDir::new(&path).path, None)?
        .iter()
        .find_map(|s| s.layer.merge)
        .unwrap_or(false);
    if code == exit::COMPLETE && (options.merge || configured) {
        // A task already complete ends at once, before any state: the loop made nothing to merge.
        if RunState::load(&RalphDir::new(&path).state_file())?.is_none() {
            ctx.ui
                .note(&format!("loop `{name}` ran no iteration: nothing to merge"));
            return Ok(code);
        }
        return crate::worktree::merge(&repo, &name, ctx.ui);
    }
    Ok(code)
}

/// `--worktree NAME`: the loop runs in its own worktree (SPEC §13), then merges back with
/// `--merge` when it completed. A run on a finished loop's name starts a new branch; on an
/// unfinished loop it is asked about as any unfinished run (refused when nobody can answer,
/// naming `ralph resume --worktree NAME`). A dry run makes and changes nothing. The exit
/// code, and the loop to merge back when it ran in a worktree.
fn in_worktree(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
) -> Result<(i32, Option<LoopRan>)> {
    let Some(name) = &options.worktree else {
        return Ok((start(ctx, targets, options, dry_run, how)?, None));
    };
    let repo = Repo::discover(&ctx.cwd)?;
    if dry_run {
        return Ok((
            dry_run_in_worktree(ctx, &repo, name, targets, options, how)?,
            None,
        ));
    }
    let wt = if how == Continuation::Resume {
        crate::worktree::open_for_resume(&repo, name)?
    } else {
        crate::worktree::for_run(&repo, name, ctx.ui)?
    };
    if how == Continuation::Fresh
        && !supervisor::is_interactive(options.yes)
        && let Some(p) = crate::worktree::unfinished(&wt.path)?
    {
        return Err(Error::user(format!(
            "loop `{name}` has an unfinished run ({}, iteration {}/{}, {})",
            p.run_id,
            p.iteration,
            p.max_iterations,
            p.halt_reason.map_or("killed while running", HaltReason::as_str)
        ))
        .with_hint(format!(
            "continue it with `ralph resume --worktree {name}`, or start it over with `ralph run --worktree {name} --reset`"
        )));
    }
    crate::worktree::carry_targets(repo.root(), &ctx.cwd, &wt.path, targets)?;
    let sub = ctx.cwd.strip_prefix(repo.root()).unwrap_or(Path::new(""));
    let cwd = wt.path.join(sub);
    crate::files::create_dir_all(&cwd).map_err(|e| Error::file("create directory", &cwd, e))?;
    ctx.ui.note(&format!(
        "loop `{name}`: worktree {} on branch {}",
        wt.path.display(),
        wt.branch
    ));
    let inner = Context { cwd, ui: ctx.ui };
    let code = start(&inner, targets, options, false, how)?;
    let ran = LoopRan {
        repo,
        name: name.clone(),
        path: wt.path,
    };
    Ok((code, Some(ran)))
}

/// `--dry-run --worktree NAME`: the plan in the loop's worktree when a run would continue there,
/// else in this work tree (whose task files a new worktree would start with).
fn dry_run_in_worktree(
    ctx: &Context,
    repo: &Repo,
    name: &str,
    targets: &[String],
    options: &RunOptions,
    how: Continuation,
) -> Result<i32> {
    let reused = match crate::worktree::existing(repo, name)? {
        Some(path) if !crate::worktree::finished(&path)? => Some(path),
        _ => None,
    };
    let Some(path) = reused else {
        ctx.ui.note(&format!(
            "loop `{name}`: a run would start branch ralph/{name} afresh from HEAD, in a new worktree"
        ));
        return start(ctx, targets, options, true, how);
    };
    ctx.ui
        .note(&format!("loop `{name}`: worktree {}", path.display()));
    let sub = ctx.cwd.strip_prefix(repo.root()).unwrap_or(Path::new(""));
    let inner = Context {
        cwd: path.join(sub),
        ui: ctx.ui,
    };
    start(&inner, targets, options, true, how)
}

/// A run resolved up to its settings: nothing written yet.
struct Resolved {
    repo: Repo,
    root: PathBuf,
    rd: RalphDir,
    prior: Option<RunState>,
    plan: Plan,
    settings: Settings,
    /// A limit written in the user's own config file (for a resume's cap).
    written_max: Option<u32>,
}

fn start(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
) -> Result<i32> {
    let ui = ctx.ui;
    let mut r = resolve(ctx, targets, options, how)?;
    if let Some(code) = end_at_once(ui, &r, how)? {
        return Ok(code);
    }
    // The probe runs the installed CLI outside, and under --sandbox the CLI may have been
    // changed in its own (writable) state: no probe then.
    let probe = !dry_run && r.settings.sandbox.is_none();
    let agent = Agent::resolve(&r.settings.agent, probe)?;
    sandbox(ui, &mut r, &agent, dry_run)?;
    let rollup = resolve_rollup(ui, &r.plan, options)?;
    if dry_run {
        return dry_run::report(ctx, &r, options, rollup, &agent);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the async runtime", e))?;
    runtime.block_on(supervise(ctx, r, options, how, agent, rollup))
}

/// `--sandbox`: resolve the sandbox for this repository and agent (refusing without a usable
/// bwrap), and pin ralph's own git commands (SPEC §4).
fn sandbox(ui: Ui, r: &mut Resolved, agent: &Agent, dry_run: bool) -> Result<()> {
    let Some(config) = &r.settings.sandbox else {
        return Ok(());
    };
    if !dry_run {
        // `.ralph/` exists before the sandbox, so that it is pinned there.
        state::create_private_dir(&r.rd.path)?;
    }
    let plain = |p: &Path| p.components().collect::<PathBuf>();
    let paths = crate::sandbox::RepoPaths {
        work_tree: r.root.clone(),
        git_dir: plain(r.repo.git2().path()),
        common_dir: plain(r.repo.git2().commondir()),
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let home = home.filter(|h| h.is_absolute());
    let make = if dry_run {
        crate::sandbox::Make::DryRun
    } else {
        crate::sandbox::Make::Create
    };
    let sandbox = crate::sandbox::Sandbox::new(config, paths, &agent.name, home.as_deref(), make)?;
    if let Some(open) = sandbox.open_here() {
        ui.warn(&open);
    }
    if !r
        .repo
        .sandbox_git(&sandbox.repo.common_dir, sandbox.own_binary())
    {
        ui.warn("--sandbox: this kernel's Landlock cannot keep ralph's own git writes inside the repository (Linux 5.19 or later can): a link the agent plants in the git directory can lead them elsewhere");
    }
    r.settings.sandboxed = Some(std::sync::Arc::new(sandbox));
    Ok(())
}

/// Find the repository, the recorded run, the plan and the settings.
fn resolve(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    how: Continuation,
) -> Result<Resolved> {
    let repo = Repo::discover(&ctx.cwd)?;
    let root = repo.root().to_path_buf();
    let rd = RalphDir::new(&root);
    // ralph's own record of the run, not a state.json the agent may have written (SPEC §11).
    let recorded = RunState::recorded(&rd.state_file())?;
    if let Some(w) = &recorded.warning {
        ctx.ui.warn(w);
    }
    let prior = recorded.state;
    if how == Continuation::Resume {
        begin::check_resumable(prior.as_ref(), &rd, |p| {
            targets.is_empty()
                || p.mode != Mode::Checklist
                || root.join(&p.task_file) == ctx.cwd.join(&targets[0])
        })?;
    }
    let plan = match (&prior, how) {
        (Some(p), Continuation::Resume) => plan::recorded_plan(&root, p)?,
        _ => plan::resolve_plan(ctx, &root, targets)?,
    };
    let frontmatter = match &plan {
        Plan::Checklist { doc, .. } => {
            for w in &doc.warnings {
                ctx.ui.warn(&w.to_string());
            }
            doc.frontmatter.clone()
        }
        _ => None,
    };
    let mut layers = vec![ConfigSource {
        name: "the command line or RALPH_* variables".into(),
        layer: Layer::from_options(options),
        from_repo: false,
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
    // A resume continues the same run: its agent and checks, not today's files' (SPEC §2.3).
    if how == Continuation::Resume
        && let Some(pinned) = prior.as_ref().and_then(|p| p.pinned.as_ref())
    {
        settings.keep_pinned(pinned, &layers)?;
    }
    // Only the user's own configuration: the task file and `.ralph/config.toml` are the
    // agent's to write, and an agent must not raise its own cap for the resumed run.
    let written_max = layers
        .iter()
        .skip(1)
        .filter(|s| !s.from_repo)
        .find_map(|s| s.layer.max_iterations);
    Ok(Resolved {
        repo,
        root,
        rd,
        prior,
        plan,
        settings,
        written_max,
    })
}

/// Plans that end before anything starts: nothing to run in CPM auto-discovery, a table with
/// only BLOCKED tasks left (SPEC §3.2: PARTIAL, spawning nothing), a table all DONE or a
/// checklist all checked when no check could say otherwise. Where a test or verdict command is
/// set, "already complete" is the evidence's to say, checked now (SPEC §5.3: `evidence_now`).
/// An unfinished run's last iteration may have left work uncommitted or unrecorded: a resume of
/// it (and a new run on a tree it left dirty) never ends here, before that is settled under the
/// lock (`Begin::settle`).
fn end_at_once(ui: Ui, r: &Resolved, how: Continuation) -> Result<Option<i32>> {
    let unfinished = r
        .prior
        .as_ref()
        .is_some_and(|p| p.halt_reason != Some(HaltReason::Complete));
    if unfinished
        && (how == Continuation::Resume || (!r.settings.no_commit && r.repo.is_dirty()?))
    {
        return Ok(None);
    }
    let checked = r.settings.test_command.is_some() || r.settings.verdict_command.is_some();
    match &r.plan {
        Plan::Cpm {
            targets: Targets::Epics(e),
        } if e.is_empty() => {
            let said = crate::task::cpm::nothing_to_run_message(&r.root).map_err(cpm_error)?;
            let end = Before::new(ui, Halt::Complete, move |ui| ui.plain(&said));
            Ok(Some(end.at(0, (0, 0)).close()))
        }
        Plan::Table { progress, prd, .. } if table::next_task(progress).is_none() => {
            let mut finished = progress.clone();
            let overall = table::finish(&mut finished);
            let (done, total) = (table::done_count(&finished), finished.rows.len());
            let complete = match overall {
                table::OverallStatus::Complete if checked => return Ok(None),
                table::OverallStatus::Complete => true,
                _ => false,
            };
            let lines = table::summary(&finished);
            let halt = if complete {
                Halt::Complete
            } else {
                Halt::Partial(lines.clone())
            };
            let end = Before::new(ui, halt, move |ui| {
                if complete {
                    ui.success(&format!(
                        "The task table is already COMPLETE ({done}/{total} tasks done). Nothing to run."
                    ));
                } else {
                    ui.alert("## ⚠️ RALPH Loop — PARTIAL: no task is left to work");
                }
                ui.plain(&format!("<promise>{}</promise>", prd.promise));
                for l in lines {
                    ui.plain(&l);
                }
            });
            Ok(Some(end.at(0, (done, total)).close()))
        }
        Plan::Checklist { doc, rel, .. }
            if doc.checklist.remaining().next().is_none()
                && !checked
                && gone_from_baseline(r.prior.as_ref(), &doc.checklist).is_empty() =>
        {
            let (done, total) = (doc.checklist.done(), doc.checklist.total());
            let end = Before::new(ui, Halt::Complete, |ui| {
                ui.success(&format!(
                    "{rel}: already complete ({done}/{total} criteria checked). Nothing to run."
                ));
            });
            Ok(Some(end.at(0, (done, total)).close()))
        }
        _ => Ok(None),
    }
}

/// CPM needs its roll-up script (or `--yes` to run without one).
fn resolve_rollup(ui: Ui, plan: &Plan, options: &RunOptions) -> Result<Option<PathBuf>> {
    if !matches!(plan, Plan::Cpm { .. }) {
        return Ok(None);
    }
    let found = crate::task::cpm::resolve_rollup(
        options.rollup.as_deref(),
        std::env::var_os("CLAUDE_PLUGIN_ROOT")
            .map(PathBuf::from)
            .as_deref(),
        std::env::var_os("HOME").map(PathBuf::from).as_deref(),
    );
    if found.is_some() {
        return Ok(found);
    }
    let err = match &options.rollup {
        Some(p) => Error::user(format!(
            "the roll-up script `{}` does not exist",
            p.display()
        )),
        None => Error::user("no coverage roll-up script found (coverage-rollup.sh)"),
    }
    .with_hint(
        "pass --rollup PATH, or set CLAUDE_PLUGIN_ROOT to the CPM plugin (--yes runs without one)",
    );
    if !options.yes || options.rollup.is_some() {
        return Err(err);
    }
    ui.warn("no coverage roll-up script found: without it only max iterations, stalls and stuck detection end the run");
    Ok(None)
}

/// Take the lock, settle what to do with a recorded run, check fresh evidence, begin, and run
/// the loop.
async fn supervise(
    ctx: &Context,
    mut r: Resolved,
    options: &RunOptions,
    mut how: Continuation,
    agent: Agent,
    rollup: Option<PathBuf>,
) -> Result<i32> {
    let ui = ctx.ui;
    r.repo.check_ready(INDEX_LOCK_WAIT)?;
    // An empty .ralph/ is nothing to git; the watcher's barriers come and go there.
    state::create_private_dir(&r.rd.path)?;
    let lock = lock_tree(ui, &r)?;
    let watch = supervisor::start_watching(ui, &mut r.repo, &r.rd, &r.settings)?;
    // Only the user's own uncommitted work makes a "state before run" commit; ralph's new
    // .ralph/ files otherwise ride along with the first iteration that changes something.
    let was_dirty = !r.settings.no_commit && r.repo.is_dirty()?;
    if let Plan::Describe(description) = &r.plan {
        let description = description.clone();
        r.plan = planning::plan_table(
            ctx,
            &r.root,
            &r.rd,
            &description,
            &agent,
            &r.settings,
            &mut r.repo,
        )
        .await?;
    }
    let unfinished = r
        .prior
        .as_ref()
        .filter(|p| p.halt_reason != Some(HaltReason::Complete));
    if how == Continuation::Fresh
        && let Some(p) = unfinished
    {
        if let Some(code) = halt_if_left_tampered(ui, &r, p, options.yes)? {
            return Ok(code);
        }
        how = begin::ask_resume_or_reset(p, options.yes)?;
        if how == Continuation::Resume {
            // Resuming works on what the recorded run worked on (and takes the lock itself).
            drop(lock);
            return Box::pin(resume_after_asking(ctx, options)).await;
        }
    }
    let resumed = match how {
        Continuation::Resume => r.prior.take(),
        _ => None,
    };
    let mut source = plan::build_source(&r.plan, &r.root, options, rollup, &r.settings)?;
    if let (Some(p), Source::Checklist(c)) = (&resumed, &mut source) {
        // The criteria the run started with, not today's file: deleting criteria while ralph
        // was down is still tampering.
        c.baseline = recorded_baseline(p);
    }
    if let Some(code) = halt_if_tampered(ui, &r, resumed.as_ref(), &source)? {
        return Ok(code);
    }
    if let Some(p) = &resumed {
        r.settings.max_iterations = begin::resumed_max_iterations(p, options, r.written_max);
    }
    if let Some(p) = &resumed {
        // What its last iteration left, settled before anything can end the run.
        settle(ui, &mut r, &agent, &source, p)?;
    }
    let mut interrupts =
        Interrupts::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
    let run_id = resumed
        .as_ref()
        .map_or_else(begin::new_run_id, |p| p.run_id.clone());
    let evidence =
        match evidence_now(ui, &r, &source, &run_id, &mut interrupts, resumed.as_ref()).await? {
            Ok(e) => e,
            Err(code) => return Ok(code),
        };
    if let Some(p) = &resumed {
        has_iterations_left(p, r.settings.max_iterations)?;
    }
    let run_state = begin_run(ui, &mut r, &agent, &source, resumed, &run_id, was_dirty)?;
    if let Err(e) = cpm_preflight(ui, &r, &mut source, &run_state, options.yes) {
        // The run has begun: its state records the error.
        let at = (run_state.iteration, (run_state.done, run_state.total));
        let end = Before::error(ui, e).of_run(&r.rd, run_state);
        return Ok(end.at(at.0, at.1).close());
    }
    let mut the_loop = make_loop(ui, r, source, agent, run_state, interrupts, options);
    the_loop.watch = watch;
    the_loop.state.feedback = evidence.and_then(|e| e.feedback);
    Ok(the_loop.run().await)
}

/// A resumed run needs an iteration left under its limit.
fn has_iterations_left(p: &RunState, max_iterations: u32) -> Result<()> {
    if p.iteration < max_iterations {
        return Ok(());
    }
    Err(Error::user(format!(
        "run {} already used its {} iterations",
        p.run_id, p.iteration
    ))
    .with_hint(format!(
        "raise the limit: ralph resume --max-iterations {}",
        p.iteration + 10
    )))
}

/// The criteria an unfinished earlier run started with that the task file no longer has: such
/// a file is not "already complete" (SPEC §5.3), whether the run is resumed or asked about.
fn gone_from_baseline(
    prior: Option<&RunState>,
    now: &crate::task::checklist::Checklist,
) -> Vec<String> {
    let Some(p) = prior.filter(|p| p.halt_reason != Some(HaltReason::Complete)) else {
        return Vec::new();
    };
    crate::task::integrity::review(&recorded_baseline(p), now).tampered
}

/// The criteria a recorded run started with.
fn recorded_baseline(p: &RunState) -> Baseline {
    Baseline {
        unchecked: p.baseline.clone(),
        checked: p.baseline_checked.clone(),
        unchecked_outside: p.baseline_outside.clone(),
    }
}

/// Take the work tree's locks (SPEC §11), and refuse beside a supervisor the recorded run
/// names that still lives.
fn lock_tree(ui: Ui, r: &Resolved) -> Result<Lock> {
    let (lock, unguarded) = Lock::acquire_tree(&r.root, r.repo.git2().path())?;
    if let Some(w) = unguarded {
        ui.warn(&w);
    }
    refuse_a_live_supervisor(r.prior.as_ref(), &r.root)?;
    Ok(lock)
}

/// A resumed checklist run whose task file lost criteria of its baseline (while ralph was down,
/// or in the iteration that halted it as tampered) halts as tampered again at once (exit 8),
/// spawning nothing, and says which.
fn halt_if_tampered(
    ui: Ui,
    r: &Resolved,
    resumed: Option<&RunState>,
    source: &Source,
) -> Result<Option<i32>> {
    let (Some(p), Source::Checklist(c)) = (resumed, source) else {
        return Ok(None);
    };
    let gone = crate::task::integrity::review(&c.baseline, &c.previous).tampered;
    let counts = (c.previous.done(), c.previous.total());
    halt_tampered(ui, &r.rd, p, &source.task_file(), &gone, counts)
}

/// `ralph run` unattended, meeting an unfinished checklist run whose task file lost criteria
/// of its baseline: that run halts as tampered (exit 8), as its resume would, rather than
/// leaving a choice nobody is there to make. In a terminal the user chooses.
fn halt_if_left_tampered(ui: Ui, r: &Resolved, p: &RunState, yes: bool) -> Result<Option<i32>> {
    let Plan::Checklist { doc, rel, .. } = &r.plan else {
        return Ok(None);
    };
    if supervisor::is_interactive(yes) || p.mode != Mode::Checklist || *rel != p.task_file {
        return Ok(None);
    }
    let gone = gone_from_baseline(Some(p), &doc.checklist);
    let counts = (doc.checklist.done(), doc.checklist.total());
    halt_tampered(ui, &r.rd, p, rel, &gone, counts)
}

/// Halt the recorded run `p` as tampered when criteria of its baseline are `gone` from
/// `task_file` (whose criteria now count `done`/`total`), saying which.
fn halt_tampered(
    ui: Ui,
    rd: &RalphDir,
    p: &RunState,
    task_file: &str,
    gone: &[String],
    counts: (usize, usize),
) -> Result<Option<i32>> {
    if gone.is_empty() {
        return Ok(None);
    }
    let said = |ui: Ui| {
        ui.alert("## ⛔ RALPH Loop — Criteria tampered");
        ui.plain(&format!(
            "{task_file} no longer has {} of the criteria run {} started with:",
            gone.len(),
            p.run_id
        ));
        for g in gone {
            ui.plain(&format!("  - [ ] {g}"));
        }
        ui.plain("\n\"All boxes checked\" must not be reachable by deleting boxes. Restore them (see git log -p) and resume, or start over with ralph run --reset.");
    };
    let end = Before::new(ui, Halt::Tampered(gone.to_vec()), said);
    Ok(Some(
        end.of_run(rd, p.clone()).at(p.iteration, counts).close(),
    ))
}

/// A second line behind the locks (for a run without a state home, whose only lock is in the
/// git directory the agent can write): the recorded run names its supervisor; while that
/// process lives — a ralph, working in this work tree — a second one is refused.
fn refuse_a_live_supervisor(prior: Option<&RunState>, root: &Path) -> Result<()> {
    let Some(p) = prior.filter(|p| p.running && p.pid != std::process::id()) else {
        return Ok(());
    };
    let proc_dir = PathBuf::from(format!("/proc/{}", p.pid));
    let is_ralph = std::fs::read(proc_dir.join("cmdline")).is_ok_and(|c| {
        c.split(|&b| b == 0).next().is_some_and(|argv0| {
            Path::new(std::ffi::OsStr::from_bytes(argv0))
                .file_name()
                .is_some_and(|n| n == "ralph")
        })
    });
    let here = std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(root));
    if is_ralph && here {
        return Err(Error::user(format!(
            "ralph (pid {}) is already supervising this repository (run {}), though its lock file was removed",
            p.pid, p.run_id
        ))
        .with_hint("wait for it, or stop it; `ralph status` shows what it is doing"));
    }
    Ok(())
}

/// `ralph run` was told "resume" at the prompt: start over as `ralph resume`.
async fn resume_after_asking(ctx: &Context, options: &RunOptions) -> Result<i32> {
    let r = resolve(ctx, &[], options, Continuation::Resume)?;
    if let Some(code) = end_at_once(ctx.ui, &r, Continuation::Resume)? {
        return Ok(code);
    }
    let agent = Agent::resolve(&r.settings.agent, true)?;
    let rollup = resolve_rollup(ctx.ui, &r.plan, options)?;
    supervise(ctx, r, options, Continuation::Resume, agent, rollup).await
}

/// SPEC §5.3: a source that says it is done is complete only when its checks pass now (a
/// `resumed` run is then recorded as complete). `Err(exit code)` when the run ends here;
/// `Ok(Some(evidence))` carries a failed check's output to the first prompt.
async fn evidence_now(
    ui: Ui,
    r: &Resolved,
    source: &Source,
    run_id: &str,
    interrupts: &mut Interrupts,
    resumed: Option<&RunState>,
) -> Result<std::result::Result<Option<Evidence>, i32>> {
    if !source.claims_complete() {
        return Ok(Ok(None));
    }
    r.rd.ensure_runtime()?;
    let dir = r.rd.run_dir(run_id);
    state::create_private_dir(&dir)?;
    let transcript = dir.join("evidence.log");
    let counts = source.counts();
    let Some(evidence) = fresh_evidence(&r.root, &r.settings, &transcript, interrupts).await?
    else {
        let end = Before::new(ui, Halt::Interrupted, |ui| {
            ui.alert("Interrupted while checking: nothing was run");
        });
        return Ok(Err(end.at(0, counts).close()));
    };
    if evidence.complete {
        let (done, total) = counts;
        let end = Before::new(ui, Halt::Complete, |ui| {
            ui.success(&format!(
                "{}: already complete ({done}/{total} {} done, and its checks pass now). Nothing to run.",
                source.task_file(),
                source.unit()
            ));
            for l in source.completion_lines() {
                ui.plain(&l);
            }
        });
        let end = match resumed {
            Some(p) => end.of_run(&r.rd, p.clone()).at(p.iteration, counts),
            None => end.at(0, counts),
        };
        return Ok(Err(end.close()));
    }
    ui.note(&format!(
        "every {} is marked done, but the checks fail now: the loop goes on (see {})",
        source.unit(),
        transcript.display()
    ));
    Ok(Ok(Some(evidence)))
}

/// Scaffold `.ralph/`, write the table's progress file when a plan starts one, and begin the
/// run (fresh or resumed).
fn begin_run(
    ui: Ui,
    r: &mut Resolved,
    agent: &Agent,
    source: &Source,
    resumed: Option<RunState>,
    run_id: &str,
    was_dirty: bool,
) -> Result<RunState> {
    if let Source::Table(t) = source
        && !t.progress_path.exists()
    {
        // A plan under docs/plans/ starts its progress table here (every task PENDING).
        let titles: Vec<String> = t.prd.tasks.iter().map(|x| x.title.clone()).collect();
        let text = table::scaffold(&t.prd.goal, &titles, &t.prd.promise).1;
        state::write_atomic(&t.progress_path, text.as_bytes())?;
        ui.note(&format!("wrote {} (every task PENDING)", t.progress_rel));
    }
    for note in &agent.notes {
        ui.note(note);
    }
    let (_, total) = r.plan.counts();
    r.rd.scaffold(&r.plan.name(), total, r.settings.max_iterations)?;
    let begin = Begin {
        ui,
        rd: &r.rd,
        repo: &mut r.repo,
        settings: &r.settings,
        agent,
        plan: &r.plan,
        unit: source.unit(),
    };
    match resumed {
        Some(p) => begin.resumed(p),
        None => begin.fresh(run_id, was_dirty),
    }
}

/// A resumed run's last iteration: its work committed, its record written if ralph was killed
/// in it (SPEC §2.3, §11).
fn settle(ui: Ui, r: &mut Resolved, agent: &Agent, source: &Source, p: &RunState) -> Result<()> {
    let mut begin = Begin {
        ui,
        rd: &r.rd,
        repo: &mut r.repo,
        settings: &r.settings,
        agent,
        plan: &r.plan,
        unit: source.unit(),
    };
    begin.settle(p)
}

/// The loop, and its `run_started` event.
fn make_loop(
    ui: Ui,
    r: Resolved,
    source: Source,
    agent: Agent,
    run_state: RunState,
    interrupts: Interrupts,
    options: &RunOptions,
) -> Loop {
    let (done, total) = r.plan.counts();
    let event = Event::RunStarted(RunStarted {
        run_id: run_state.run_id.clone(),
        task: run_state.task.clone(),
        task_file: run_state.task_file.clone(),
        mode: run_state.mode,
        agent: agent.name.clone(),
        max_iterations: r.settings.max_iterations,
        iteration: run_state.iteration,
        done,
        total,
        resumed: run_state.iteration > 0,
    });
    ui.event(&event.line_now());
    let counters = Counters::restore(
        &run_state,
        r.settings.max_iterations,
        r.settings.stuck_threshold,
    );
    Loop {
        repo: r.repo,
        rd: r.rd,
        source,
        task_name: r.plan.name(),
        unattended: !supervisor::is_interactive(options.yes),
        settings: r.settings,
        agent,
        ui,
        state: run_state,
        counters,
        interrupts,
        started: Instant::now(),
        stream: options.stream,
        watch: None,
        pending_events: Vec::new(),
    }
}

/// CPM's pre-flight, once the run began (its log is named by the run).
fn cpm_preflight(
    ui: Ui,
    r: &Resolved,
    source: &mut Source,
    run_state: &RunState,
    yes: bool,
) -> Result<()> {
    let Source::Cpm(c) = source else {
        return Ok(());
    };
    c.log = crate::task::cpm::log_path(&run_state.run_id);
    c.resuming = run_state.iteration > 0;
    cpm::cpm_preflight(ui, &r.root, &r.rd, c, yes)
}
