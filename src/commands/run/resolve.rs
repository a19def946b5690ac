//! A run resolved before anything is written: the repository, the recorded run, the plan, the
//! settings (every layer, a resume's pinned ones), the sandbox, CPM's roll-up script.

use std::path::{Path, PathBuf};

use super::begin::{self, Continuation};
use super::plan::{self, Plan};
use crate::agent::{Agent, AgentChoice, Chain};
use crate::cli::RunOptions;
use crate::commands::Context;
use crate::config::{self, Layer, Settings, Source as ConfigSource};
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::state::{self, Mode, RalphDir, RunState};
use crate::ui::Ui;

/// A run resolved up to its settings: nothing written yet.
pub(super) struct Resolved {
    pub(crate) repo: Repo,
    pub(crate) root: PathBuf,
    pub(crate) rd: RalphDir,
    pub(crate) prior: Option<RunState>,
    pub(crate) plan: Plan,
    pub(crate) settings: Settings,
    /// A limit written in the user's own config file (for a resume's cap).
    pub(crate) written_max: Option<u32>,
}

/// `--sandbox`: resolve the sandbox for this repository and agent (refusing without a usable
/// bwrap), and pin ralph's own git commands (SPEC §4).
pub(super) fn sandbox(ui: Ui, r: &mut Resolved, agents: &Chain, dry_run: bool) -> Result<()> {
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
    let names: Vec<&str> = agents.agents().map(|a| a.name.as_str()).collect();
    let state = crate::state::StateHome::locate();
    let around = crate::sandbox::Around {
        home: home.as_deref(),
        state: state.as_ref().map(|s| s.path()),
    };
    let sandbox = crate::sandbox::Sandbox::new(config, paths, &names, around, make)?;
    if let Some(user) = config::user_config_path() {
        let writes = |p: &Path| sandbox.agent_writes(p);
        config::user_config_out_of(&user, writes, "what the sandbox lets the agent write")?;
    }
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

/// The run's agent and its fallbacks (`--fallback-agent`), each found on PATH. A fallback is
/// a preset; one that names the run's own agent again is left out.
pub(super) fn agents(settings: &Settings, probe: bool) -> Result<Chain> {
    let primary = Agent::resolve(&settings.agent, probe)?;
    let mut fallbacks = Vec::new();
    for name in &settings.fallback_agents {
        if *name == primary.name {
            continue;
        }
        if crate::agent::preset(name).is_none() {
            let names: Vec<&str> = crate::agent::PRESETS.iter().map(|c| c.name()).collect();
            return Err(
                Error::user(format!("unknown fallback agent `{name}`")).with_hint(format!(
                    "a fallback is a preset: one of {}",
                    names.join(", ")
                )),
            );
        }
        fallbacks.push(Agent::resolve(&AgentChoice::Preset(name.clone()), probe)?);
    }
    Ok(Chain::new(primary, fallbacks))
}

/// Find the repository, the recorded run, the plan and the settings.
pub(super) fn resolve(
    ctx: &Context,
    targets: &[String],
    options: &RunOptions,
    how: Continuation,
) -> Result<Resolved> {
    let mut repo = Repo::discover(&ctx.cwd)?;
    repo.keep_out(crate::state::runtime_paths());
    let root = repo.root().to_path_buf();
    let rd = RalphDir::new(&root);
    // ralph's own record of the run, not a state.json the agent may have written (SPEC §11).
    let recorded = match how {
        // Starting over: a record ralph cannot read is no reason to refuse.
        Continuation::Reset => RunState::recorded_for_reset(&rd.state_file())?,
        _ => RunState::recorded(&rd.state_file())?,
    };
    if let Some(w) = &recorded.warning {
        ctx.ui.warn(w);
    }
    let prior = recorded.state;
    if how == Continuation::Resume {
        begin::check_resumable(prior.as_ref(), &rd, &repo, |p| {
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

/// CPM needs its roll-up script (or `--yes` to run without one).
pub(super) fn resolve_rollup(ui: Ui, plan: &Plan, options: &RunOptions) -> Result<Option<PathBuf>> {
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
