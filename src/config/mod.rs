//! Layered configuration (SPEC §10): flags, `RALPH_*` variables, the task's frontmatter,
//! `.ralph/config.toml`, `~/.config/ralph/config.toml`, built-in defaults — highest first.
//!
//! The rooms: `layer` (one layer as written: a config file, the frontmatter, the flags; the
//! files found), `merge` (the layers into a run's [`Settings`]), `sandbox` (the sandbox's
//! settings, merged by their own rule), `pinned` (what a resume keeps of its run).

mod layer;
mod merge;
mod pinned;
mod sandbox;

use std::time::Duration;

use crate::agent::AgentChoice;

pub(crate) use layer::{HookLayer, Layer, file_layers, user_config_out_of, user_config_path};
pub(crate) use merge::merge;

pub(crate) const DEFAULT_MAX_ITERATIONS: u32 = 50;
pub(crate) const DEFAULT_STUCK_THRESHOLD: u32 = 3;
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(10);
pub(crate) const DEFAULT_AGENT: &str = "copilot";
pub(crate) const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(6 * 3600);
pub(crate) const DEFAULT_LIMIT_BACKOFF: Duration = Duration::from_secs(60);
/// The shortest backoff after a usage limit (SPEC §6): a `0s` never spins the agent.
pub(crate) const MIN_LIMIT_BACKOFF: Duration = Duration::from_secs(1);
pub(crate) const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub(crate) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// A command and whether the repository (which the agent can write) gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    pub(crate) cmd: String,
    /// From the task file's frontmatter or `.ralph/config.toml`: under `--sandbox` it runs in
    /// the sandbox (SPEC §4).
    pub(crate) from_repo: bool,
}

/// The event hooks of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hooks {
    pub(crate) on_iteration: Option<Command>,
    pub(crate) on_stuck: Option<Command>,
    pub(crate) on_waiting: Option<Command>,
    pub(crate) on_question: Option<Command>,
    pub(crate) on_halt: Option<Command>,
}

impl Hooks {
    /// The hook of an event (`iteration_finished`, `stuck`, `waiting`, `question`, `halted`).
    pub(crate) fn for_event(&self, event: &crate::event::Event) -> Option<&Command> {
        use crate::event::Event;
        match event {
            Event::IterationFinished(_) => self.on_iteration.as_ref(),
            Event::Stuck(_) => self.on_stuck.as_ref(),
            Event::Waiting(_) => self.on_waiting.as_ref(),
            Event::Question(_) => self.on_question.as_ref(),
            Event::Halted(_) => self.on_halt.as_ref(),
            Event::RunStarted(_)
            | Event::IterationStarted(_)
            | Event::QueueItem(_)
            | Event::QueueFinished(_) => None,
        }
    }
}

/// Where a layer came from, for messages.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) name: String,
    pub(crate) layer: Layer,
    /// The layer comes from the repository (frontmatter, `.ralph/config.toml`): the agent can
    /// have written it.
    pub(crate) from_repo: bool,
}

/// The settings of one run after merging every layer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub(crate) agent: AgentChoice,
    /// Presets run while the agent is usage-limited, in order (`--fallback-agent`).
    pub(crate) fallback_agents: Vec<String>,
    pub(crate) max_iterations: u32,
    pub(crate) timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) grace: Duration,
    pub(crate) test_command: Option<String>,
    pub(crate) completion_promise: Option<String>,
    pub(crate) stuck_threshold: u32,
    pub(crate) no_commit: bool,
    /// Runs after every iteration (after the tests); its exit code decides (SPEC §3.3).
    pub(crate) verdict_command: Option<String>,
    /// Halt (exit 10) once the agents' reported cost reaches this many USD.
    pub(crate) max_cost: Option<f64>,
    /// The most time the run may spend waiting for usage limits to lift (exit 10 past it).
    pub(crate) max_wait: Duration,
    /// The first wait after a usage limit that names no reset time (doubling, up to 30 min;
    /// never under [`MIN_LIMIT_BACKOFF`]).
    pub(crate) limit_backoff: Duration,
    /// The wall-clock limit of each test and verdict command run.
    pub(crate) check_timeout: Duration,
    /// The test command came from the repository (frontmatter or `.ralph/config.toml`).
    pub(crate) test_command_from_repo: bool,
    /// The verdict command came from the repository.
    pub(crate) verdict_command_from_repo: bool,
    /// `[hooks]`: commands run on the loop's events.
    pub(crate) hooks: Hooks,
    /// The most each hook may run.
    pub(crate) hook_timeout: Duration,
    /// Skip the repository's pre-commit and commit-msg hooks.
    pub(crate) no_verify: bool,
    /// Untracked files over this size stay out of ralph's commits.
    pub(crate) max_file_size: u64,
    /// `--sandbox`: how the sandbox is configured (`None`: off).
    pub(crate) sandbox: Option<crate::sandbox::Config>,
    /// The sandbox resolved for the run's repository and agent (set once the repository is
    /// known; `commands/run`).
    pub(crate) sandboxed: Option<std::sync::Arc<crate::sandbox::Sandbox>>,
}

impl Settings {
    /// `inv` as ralph runs it: inside the run's sandbox when there is one and `inv` is an agent
    /// or runs on the repository's say (`on_repos_say`); otherwise as it is (SPEC §4).
    pub(crate) fn confine(
        &self,
        inv: crate::proc::Invocation,
        on_repos_say: bool,
    ) -> crate::proc::Invocation {
        match &self.sandboxed {
            Some(s) if on_repos_say => s.wrap(inv),
            _ => inv,
        }
    }
}

#[cfg(test)]
mod tests;
