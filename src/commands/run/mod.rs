//! `ralph run` and `ralph resume`: resolve the target, the settings and the agent; end at once
//! when there is nothing to do; dry-run; or begin (or continue) a run and supervise its loop.
//!
//! A run starts in named steps (`start`, then `supervise`): resolve → end at once → the agent
//! and the sandbox → dry-run; then under the lock: lock → watch → plan the description → meet
//! the recorded run → the source → settle the recorded run → evidence → begin → the loop. Every
//! ending on the way goes through the run's close (`close`).
//!
//! The rooms: `resolve` (the repository, the recorded run, the plan, the settings, the
//! sandbox), `plan` (targets → what the run works on), `at_once` (endings before the loop),
//! `close` (their close), `begin` (fresh / resumed state, the commits that come first),
//! `planning` (a description planned into a table), `cpm` (CPM's pre-flight), `dry_run`,
//! `worktree` (`--worktree`).

mod at_once;
mod begin;
mod close;
mod cpm;
mod dry_run;
mod plan;
mod planning;
mod queue;
mod resolve;
mod worktree;

use std::ops::ControlFlow::{self, Break, Continue};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{Instrument, info_span};

use super::Context;
use crate::agent::Chain;
use crate::cli::{ResumeArgs, RunArgs, RunOptions};
use crate::error::{Error, Result};
use crate::event::{Event, RunStarted};
use crate::git::OwnHead;
use crate::signals::Interrupts;
use crate::state::{self, HaltReason, Lock, RunState};
use crate::supervisor::decide::Counters;
use crate::supervisor::preflight::Evidence;
use crate::supervisor::source::Source;
use crate::supervisor::{self, Loop, Setup, Tree};
use crate::task::table;
use crate::ui::Ui;
use begin::{Begin, Continuation};
use close::Before;
use plan::Plan;
use resolve::Resolved;

/// How long to wait for someone else's `index.lock` before giving up.
const INDEX_LOCK_WAIT: Duration = Duration::from_secs(2);

/// `ralph run` in `dir` (`-C`): closed whatever way it ends ([`launch`]).
pub(crate) fn run(ui: Ui, dir: Option<&Path>, args: &RunArgs) -> Result<i32> {
    if let Some(spec) = &args.from {
        let limits = queue::Limits {
            parallel: usize::from(args.parallel),
            max_tasks: args.max_tasks,
            pr: args.pr,
            worker: args.worker_id.clone(),
            lease: args.lease.map(Into::into),
        };
        let ran = queue::from_queue(ui, dir, spec, limits, &args.options);
        return Ok(ran.unwrap_or_else(|e| Before::error(ui, e).close()));
    }
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
pub(crate) fn resume(ui: Ui, dir: Option<&Path>, args: &ResumeArgs) -> Result<i32> {
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
    // The run's span: `-v` prints how long each step took (`trace`). Entered in sync code: the
    // runtime below polls on this thread, inside it.
    let _run = info_span!("run").entered();
    let ran = Context::new(dir, ui).and_then(|ctx| {
        let ran = worktree::in_worktree(&ctx, targets, options, dry_run, how)?;
        Ok((ran, ctx))
    });
    match ran {
        Ok(((code, Some(loop_)), ctx)) => worktree::merge_back(&ctx, options, code, loop_),
        Ok(((code, None), _)) => Ok(code),
        Err(e) => Ok(Before::error(ui, e).close()),
    }
}

/// How supervising a run ended.
enum Supervised {
    /// Closed.
    Ended(Ended),
    /// The user chose, at the prompt, to resume the recorded run instead.
    ResumeInstead,
}

/// How a run ended, as its caller receives it (the queue reads this value, never a file read
/// back): its exit code and the halt its record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ended {
    pub(crate) code: i32,
    /// `None` when it ended before its loop (nothing to do, already complete, an error on
    /// the way): the code says what happened.
    pub(crate) halt: Option<HaltReason>,
}

impl Ended {
    fn code(code: i32) -> Supervised {
        Supervised::Ended(Ended { code, halt: None })
    }
}

/// What the caller of a run holds while it runs: a way to stop it (as its Ctrl-C would), and
/// word of each iteration it recorded. The queue gives one to each item's loop.
#[derive(Clone, Default)]
struct Link {
    pub(crate) cancel: Option<crate::signals::Cancel>,
    /// Sent the number of each iteration once its record and commit are made.
    pub(crate) recorded: Option<std::sync::mpsc::Sender<u32>>,
    /// Where else a person answers the loop's question (a queue item's tracker).
    pub(crate) elsewhere: Option<std::sync::Arc<dyn crate::person::Elsewhere>>,
}

/// Resolve the run and supervise it. A run the user chose to resume instead starts over as
/// `ralph resume` does — the same steps once more, on what the recorded run worked on (a
/// resume never asks, so at most once).
fn start(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
) -> Result<i32> {
    start_linked(ctx, targets, options, dry_run, how, &Link::default()).map(|e| e.code)
}

/// [`start`], with its caller's [`Link`]; how it ended.
fn start_linked(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
    link: &Link,
) -> Result<Ended> {
    let (mut targets, mut how) = (targets, how);
    loop {
        match start_once(ctx, targets, options, dry_run, how, link)? {
            Supervised::Ended(ended) => return Ok(ended),
            Supervised::ResumeInstead => (targets, how) = (&[], Continuation::Resume),
        }
    }
}

/// Resolve → end at once → the agent and the sandbox → the roll-up → dry-run or supervise.
fn start_once(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    dry_run: bool,
    how: Continuation,
    link: &Link,
) -> Result<Supervised> {
    let ui = ctx.ui;
    let mut r = info_span!("resolve").in_scope(|| resolve::resolve(ctx, targets, options, how))?;
    if let Some(code) = at_once::end_at_once(ui, &r, how)? {
        return Ok(Ended::code(code));
    }
    if !dry_run {
        at_once::refuse_placeholders(&r)?;
    }
    // The probe runs the installed CLI outside, and under --sandbox the CLI may have been
    // changed in its own (writable) state: no probe then.
    let probe = !dry_run && r.settings.sandbox.is_none();
    let agents = info_span!("agent").in_scope(|| resolve::agents(&r.settings, probe))?;
    info_span!("sandbox").in_scope(|| resolve::sandbox(ui, &mut r, &agents, dry_run))?;
    let rollup = resolve::resolve_rollup(ui, &r.plan, options)?;
    if dry_run {
        let code = dry_run::report(ctx, &r, options, rollup, &agents)?;
        return Ok(Ended::code(code));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the async runtime", e))?;
    let run = Startup {
        ctx,
        options,
        r,
        agents,
        link,
    };
    runtime.block_on(supervise(run, how, rollup))
}

/// A run under way through its start-up steps.
struct Startup<'a> {
    ctx: &'a Context,
    options: &'a RunOptions,
    r: Resolved,
    /// The run's agent and its fallbacks.
    agents: Chain,
    link: &'a Link,
}

/// Under the run's lock, its start-up steps in order, then its loop.
async fn supervise(
    mut run: Startup<'_>,
    how: Continuation,
    rollup: Option<PathBuf>,
) -> Result<Supervised> {
    let ended = |code| Ok(Ended::code(code));
    let _lock = info_span!("lock").in_scope(|| run.lock())?;
    let watch = info_span!("watch").in_scope(|| run.watch())?;
    // Only the user's own uncommitted work makes a "state before run" commit; ralph's new
    // .ralph/ files otherwise ride along with the first iteration that changes something.
    let was_dirty =
        !run.r.settings.no_commit && info_span!("dirty").in_scope(|| run.r.repo.is_dirty())?;
    run.plan_the_description().await?;
    let resumed = match run.meet_the_recorded_run(how)? {
        Continue(Continuation::Resume) => run.r.prior.take(),
        Continue(_) => None,
        Break(supervised) => return Ok(supervised),
    };
    let source = match info_span!("source").in_scope(|| run.source(rollup, resumed.as_ref()))? {
        Continue(source) => source,
        Break(code) => return ended(code),
    };
    run.own_head(resumed.as_ref())?;
    if let Some(p) = &resumed {
        info_span!("settle").in_scope(|| run.settle_the_recorded_run(&source, p))?;
    }
    let mut interrupts = Interrupts::install_with(run.link.cancel.as_ref())
        .map_err(|e| Error::io("failed to install signal handlers", e))?;
    // From here on, an interrupt kills the git command or git hook running at once.
    run.r.repo.set_stop(interrupts.stop());
    let run_id = resumed
        .as_ref()
        .map_or_else(begin::new_run_id, |p| p.run_id.clone());
    let evidence = match run
        .evidence(&source, &run_id, &mut interrupts, resumed.as_ref())
        .instrument(info_span!("evidence"))
        .await?
    {
        Continue(evidence) => evidence,
        Break(code) => return ended(code),
    };
    let begun = info_span!("begin").in_scope(|| run.begin(source, resumed, &run_id, was_dirty));
    let (run_state, source) = match begun? {
        Continue(begun) => begun,
        Break(code) => return ended(code),
    };
    let mut the_loop = run.into_loop(source, run_state, interrupts);
    the_loop.tree.watch = watch;
    the_loop.state.feedback = evidence.and_then(|e| e.feedback);
    let (code, halt) = the_loop.run().await;
    Ok(Supervised::Ended(Ended { code, halt }))
}

impl Startup<'_> {
    fn ui(&self) -> Ui {
        self.ctx.ui
    }

    /// Lock: the index ready, `.ralph/` there, the work tree's locks taken (SPEC §11), and no
    /// supervisor the recorded run names still living.
    fn lock(&self) -> Result<Lock> {
        let r = &self.r;
        r.repo.check_ready(INDEX_LOCK_WAIT)?;
        // An empty .ralph/ is nothing to git; the watcher's barriers come and go there.
        state::create_private_dir(&r.rd.path)?;
        let (lock, unguarded) = Lock::acquire_tree(&r.root, r.repo.git2().path())?;
        if let Some(w) = unguarded {
            self.ui().warn(&w);
        }
        refuse_a_live_supervisor(r.prior.as_ref(), &r.root)?;
        Ok(lock)
    }

    /// Watch: the work tree watched for the rest of the run (SPEC §12).
    fn watch(&mut self) -> Result<Option<std::sync::Arc<crate::git::watch::Watch>>> {
        let r = &mut self.r;
        supervisor::start_watching(self.ctx.ui, &mut r.repo, &r.rd, &r.settings)
    }

    /// Plan the description: `ralph run "a description"` becomes a table first.
    async fn plan_the_description(&mut self) -> Result<()> {
        let Plan::Describe(description) = &self.r.plan else {
            return Ok(());
        };
        let description = description.clone();
        let r = &mut self.r;
        let planned = planning::plan_table(
            self.ctx,
            &r.root,
            &r.rd,
            &description,
            self.agents.primary(),
            &r.settings,
            &mut r.repo,
        );
        r.plan = planned.instrument(info_span!("plan")).await?;
        Ok(())
    }

    /// Meet the recorded run: `ralph run` on an unfinished one halts it as tampered (when its
    /// task file lost criteria, unattended), asks in a terminal, or refuses; how the run goes
    /// on (a resume takes the recorded run).
    fn meet_the_recorded_run(
        &self,
        how: Continuation,
    ) -> Result<ControlFlow<Supervised, Continuation>> {
        let (ui, yes) = (self.ui(), self.options.yes);
        let unfinished = self
            .r
            .prior
            .as_ref()
            .filter(|p| p.halt_reason != Some(HaltReason::Complete));
        let mut how = how;
        if how == Continuation::Fresh
            && let Some(p) = unfinished
        {
            if let Some(code) = at_once::halt_if_left_tampered(ui, &self.r, p, yes)? {
                return Ok(Break(Ended::code(code)));
            }
            how = begin::ask_resume_or_reset(p, yes)?;
            if how == Continuation::Resume {
                // Resuming works on what the recorded run worked on.
                return Ok(Break(Supervised::ResumeInstead));
            }
        }
        Ok(Continue(how))
    }

    /// The task source; a resumed checklist held to the criteria its run started with (not
    /// today's file: deleting criteria while ralph was down is still tampering).
    fn source(
        &self,
        rollup: Option<PathBuf>,
        resumed: Option<&RunState>,
    ) -> Result<ControlFlow<i32, Source>> {
        let r = &self.r;
        let mut source = plan::build_source(&r.plan, &r.root, self.options, rollup, &r.settings)?;
        match (resumed, &mut source) {
            (Some(p), Source::Checklist(c)) => c.baseline = at_once::recorded_baseline(p),
            (Some(p), Source::Stories(s)) => s.attempts = p.story_attempts.clone(),
            _ => {}
        }
        match at_once::halt_if_tampered(self.ui(), r, resumed, &source)? {
            Some(code) => Ok(Break(code)),
            None => Ok(Continue(source)),
        }
    }

    /// The loop's own branch, where every commit of the run goes (issue 29): a `--worktree`
    /// loop's `ralph/NAME`, else the branch the recorded run started on, else the one HEAD is
    /// on now (or a detached HEAD).
    fn own_head(&mut self, resumed: Option<&RunState>) -> Result<()> {
        let repo = &mut self.r.repo;
        let recorded = resumed.and_then(|p| p.branch.clone());
        let own = match crate::worktree::own_branch_of(repo).or(recorded) {
            Some(branch) => OwnHead::Branch(branch),
            None => repo.head_now()?,
        };
        repo.set_own_head(own);
        Ok(())
    }

    /// Settle the recorded run: its iteration cap, and what its last iteration left (its work
    /// committed, its record written if ralph was killed in it: SPEC §2.3, §11) — before
    /// anything can end the run.
    fn settle_the_recorded_run(&mut self, source: &Source, p: &RunState) -> Result<()> {
        let r = &mut self.r;
        r.settings.max_iterations = begin::resumed_max_iterations(p, self.options, r.written_max);
        self.beginning(source.unit()).settle(p)
    }

    /// Evidence: a source that says it is done is complete only when its checks pass now
    /// (SPEC §5.3); a failed check's output goes to the first prompt.
    async fn evidence(
        &self,
        source: &Source,
        run_id: &str,
        interrupts: &mut Interrupts,
        resumed: Option<&RunState>,
    ) -> Result<ControlFlow<i32, Option<Evidence>>> {
        let ui = self.ui();
        let evidence = at_once::evidence_now(ui, &self.r, source, run_id, interrupts, resumed);
        Ok(match evidence.await? {
            Ok(evidence) => Continue(evidence),
            Err(code) => Break(code),
        })
    }

    /// Begin: `.ralph/` scaffolded, a plan's progress table written, the run begun (fresh or
    /// resumed: SPEC §2.3), and CPM's pre-flight — an error there closes the begun run.
    fn begin(
        &mut self,
        mut source: Source,
        resumed: Option<RunState>,
        run_id: &str,
        was_dirty: bool,
    ) -> Result<ControlFlow<i32, (RunState, Source)>> {
        let ui = self.ui();
        if let Some(p) = &resumed {
            has_iterations_left(p, self.r.settings.max_iterations)?;
        }
        write_progress_table(ui, &source)?;
        if matches!(source, Source::Stories(_)) && self.r.settings.test_command.is_none() {
            ui.warn("no test command: nothing but the agent's own `passes` flag gates a story (give one with --test-command or `test_command` in .ralph/config.toml)");
        }
        for note in self.agents.agents().flat_map(|a| &a.notes) {
            ui.note(note);
        }
        let r = &self.r;
        let (_, total) = r.plan.counts();
        r.rd.scaffold(&r.plan.name(), total, r.settings.max_iterations)?;
        let begin = self.beginning(source.unit());
        let run_state = match resumed {
            Some(p) => begin.resumed(p)?,
            None => begin.fresh(run_id, was_dirty)?,
        };
        if let Err(e) = self.cpm_preflight(&mut source, &run_state) {
            // The run has begun: its state records the error.
            let at = (run_state.iteration, (run_state.done, run_state.total));
            let end = Before::error(ui, e).of_run(&self.r.rd, run_state);
            return Ok(Break(end.at(at.0, at.1).close()));
        }
        Ok(Continue((run_state, source)))
    }

    /// What a beginning needs.
    fn beginning(&mut self, unit: &'static str) -> Begin<'_> {
        let r = &mut self.r;
        Begin {
            ui: self.ctx.ui,
            rd: &r.rd,
            repo: &mut r.repo,
            settings: &r.settings,
            agents: &self.agents,
            plan: &r.plan,
            unit,
        }
    }

    /// CPM's pre-flight, once the run began (its log is named by the run).
    fn cpm_preflight(&self, source: &mut Source, run_state: &RunState) -> Result<()> {
        let Source::Cpm(c) = source else {
            return Ok(());
        };
        c.log = crate::task::cpm::log_path(&run_state.run_id);
        c.resuming = run_state.iteration > 0;
        cpm::cpm_preflight(self.ui(), &self.r.root, &self.r.rd, c, self.options.yes)
    }

    /// The loop, and its `run_started` event.
    fn into_loop(self, source: Source, run_state: RunState, interrupts: Interrupts) -> Loop {
        let (ui, r, agents, link) = (self.ctx.ui, self.r, self.agents, self.link);
        let (done, total) = r.plan.counts();
        let event = Event::RunStarted(RunStarted {
            run_id: run_state.run_id.clone(),
            task: run_state.task.clone(),
            task_file: run_state.task_file.clone(),
            mode: run_state.mode,
            agent: agents.primary().name.clone(),
            fallback_agents: agents
                .fallback_names()
                .iter()
                .map(|n| n.to_string())
                .collect(),
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
            setup: Setup {
                task_name: r.plan.name(),
                unattended: !supervisor::is_interactive(self.options.yes),
                questions: supervisor::Questions::resolve(
                    self.options.no_questions,
                    self.options.answer_timeout.map(Into::into),
                    supervisor::is_interactive(self.options.yes),
                    &r.repo,
                ),
                settings: r.settings,
                ui,
                started: Instant::now(),
                stream: self.options.stream,
            },
            tree: Tree {
                repo: r.repo,
                rd: r.rd,
                watch: None,
            },
            source,
            agents,
            state: run_state,
            counters,
            interrupts,
            recorded: link.recorded.clone(),
            elsewhere: link.elsewhere.clone(),
            pending_events: Vec::new(),
            last_committed: false,
        }
    }
}

/// A plan under docs/plans/ starts its progress table (every task PENDING).
fn write_progress_table(ui: Ui, source: &Source) -> Result<()> {
    if let Source::Table(t) = source
        && !t.progress_path.exists()
    {
        let titles: Vec<String> = t.prd.tasks.iter().map(|x| x.title.clone()).collect();
        let text = table::scaffold(&t.prd.goal, &titles, &t.prd.promise).1;
        state::write_atomic(&t.progress_path, text.as_bytes())?;
        ui.note(&format!("wrote {} (every task PENDING)", t.progress_rel));
    }
    Ok(())
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
