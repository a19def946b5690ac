//! Layered configuration (SPEC §10): flags, `RALPH_*` variables, the task's frontmatter,
//! `.ralph/config.toml`, `~/.config/ralph/config.toml`, built-in defaults — highest first.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::task::document::Frontmatter;

pub const DEFAULT_MAX_ITERATIONS: u32 = 50;
pub const DEFAULT_STUCK_THRESHOLD: u32 = 3;
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
pub const DEFAULT_AGENT: &str = "copilot";
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(6 * 3600);
pub const DEFAULT_LIMIT_BACKOFF: Duration = Duration::from_secs(60);
/// The shortest backoff after a usage limit (SPEC §6): a `0s` never spins the agent.
pub const MIN_LIMIT_BACKOFF: Duration = Duration::from_secs(1);
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// One layer as written in a config file; every key optional, unknown keys rejected.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    pub agent: Option<String>,
    pub agent_cmd: Option<String>,
    pub max_iterations: Option<u32>,
    pub timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub grace: Option<String>,
    pub test_command: Option<String>,
    pub completion_promise: Option<String>,
    pub stuck_threshold: Option<u32>,
    pub no_commit: Option<bool>,
    pub verdict_command: Option<String>,
    pub max_cost: Option<f64>,
    pub max_wait: Option<String>,
    pub limit_backoff: Option<String>,
    pub check_timeout: Option<String>,
    pub no_verify: Option<bool>,
    pub max_file_size: Option<String>,
    /// `[hooks]`: commands run on the loop's events (config files only).
    pub hooks: Option<HookLayer>,
    /// A worktree loop merges back when it completed (`--merge`).
    pub merge: Option<bool>,
    /// Every agent attempt under bubblewrap (`--sandbox`); a repository layer can turn it on,
    /// never off.
    pub sandbox: Option<bool>,
    /// `host` (default) or `none` (`--sandbox-net`); `none` from any layer wins.
    pub sandbox_net: Option<crate::sandbox::Net>,
    /// Paths the sandbox leaves writable (the user's own layers only).
    pub sandbox_writable: Option<Vec<String>>,
    /// Paths the sandbox hides, besides `~/.ssh`, `~/.aws`, …
    pub sandbox_hidden: Option<Vec<String>>,
    /// Variables the sandboxed agent keeps although the sandbox drops them (`SSH_AUTH_SOCK`,
    /// …; the user's own layers only).
    pub sandbox_env_keep: Option<Vec<String>>,
}

/// `[hooks]` of a config file (SPEC §10): a shell command per event, run with the event's JSON
/// on stdin.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookLayer {
    pub on_iteration: Option<String>,
    pub on_stuck: Option<String>,
    pub on_waiting: Option<String>,
    pub on_halt: Option<String>,
    /// How long each may run (default 30s).
    pub hook_timeout: Option<String>,
}

/// A command and whether the repository (which the agent can write) gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub cmd: String,
    /// From the task file's frontmatter or `.ralph/config.toml`: under `--sandbox` it runs in
    /// the sandbox (SPEC §4).
    pub from_repo: bool,
}

/// The event hooks of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    pub on_iteration: Option<Command>,
    pub on_stuck: Option<Command>,
    pub on_waiting: Option<Command>,
    pub on_halt: Option<Command>,
}

impl Hooks {
    /// The hook of an event (`iteration_finished`, `stuck`, `waiting`, `halted`).
    pub fn for_event(&self, event: &crate::event::Event) -> Option<&Command> {
        use crate::event::Event;
        match event {
            Event::IterationFinished(_) => self.on_iteration.as_ref(),
            Event::Stuck(_) => self.on_stuck.as_ref(),
            Event::Waiting(_) => self.on_waiting.as_ref(),
            Event::Halted(_) => self.on_halt.as_ref(),
            Event::RunStarted(_) | Event::IterationStarted(_) => None,
        }
    }
}

/// Where a layer came from, for messages.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub layer: Layer,
    /// The layer comes from the repository (frontmatter, `.ralph/config.toml`): the agent can
    /// have written it.
    pub from_repo: bool,
}

/// How the agent is chosen: a preset name or a custom command template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentChoice {
    Preset(String),
    Template(String),
}

/// The settings of one run after merging every layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub agent: AgentChoice,
    pub max_iterations: u32,
    pub timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub grace: Duration,
    pub test_command: Option<String>,
    pub completion_promise: Option<String>,
    pub stuck_threshold: u32,
    pub no_commit: bool,
    /// Runs after every iteration (after the tests); its exit code decides (SPEC §3.3).
    pub verdict_command: Option<String>,
    /// Halt (exit 10) once the agents' reported cost reaches this many USD.
    pub max_cost: Option<f64>,
    /// The most time the run may spend waiting for usage limits to lift (exit 10 past it).
    pub max_wait: Duration,
    /// The first wait after a usage limit that names no reset time (doubling, up to 30 min;
    /// never under [`MIN_LIMIT_BACKOFF`]).
    pub limit_backoff: Duration,
    /// The wall-clock limit of each test and verdict command run.
    pub check_timeout: Duration,
    /// The test command came from the repository (frontmatter or `.ralph/config.toml`).
    pub test_command_from_repo: bool,
    /// The verdict command came from the repository.
    pub verdict_command_from_repo: bool,
    /// `[hooks]`: commands run on the loop's events.
    pub hooks: Hooks,
    /// The most each hook may run.
    pub hook_timeout: Duration,
    /// Skip the repository's pre-commit and commit-msg hooks.
    pub no_verify: bool,
    /// Untracked files over this size stay out of ralph's commits.
    pub max_file_size: u64,
    /// `--sandbox`: how the sandbox is configured (`None`: off).
    pub sandbox: Option<crate::sandbox::Config>,
    /// The sandbox resolved for the run's repository and agent (set once the repository is
    /// known; `commands/run`).
    pub sandboxed: Option<std::sync::Arc<crate::sandbox::Sandbox>>,
}

impl Settings {
    /// The agent and checks to record for a resume ([`crate::state::Pinned`]).
    pub fn pinned(&self) -> crate::state::Pinned {
        let (agent, agent_cmd) = match &self.agent {
            AgentChoice::Preset(p) => (Some(p.clone()), None),
            AgentChoice::Template(t) => (None, Some(t.clone())),
        };
        crate::state::Pinned {
            agent,
            agent_cmd,
            test_command: self.test_command.clone(),
            verdict_command: self.verdict_command.clone(),
            sandbox: self
                .sandbox
                .as_ref()
                .map(|c| crate::sandbox::Pinned { net: c.net }),
            limits: Some(self.limits()),
        }
    }

    fn limits(&self) -> crate::state::Limits {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        crate::state::Limits {
            max_cost: self.max_cost,
            max_wait_ms: ms(self.max_wait),
            timeout_ms: self.timeout.map(ms),
            idle_timeout_ms: self.idle_timeout.map(ms),
            check_timeout_ms: ms(self.check_timeout),
            stuck_threshold: self.stuck_threshold,
            completion_promise: self.completion_promise.clone(),
            no_verify: self.no_verify,
            no_commit: self.no_commit,
            max_file_size: Some(self.max_file_size),
        }
    }

    /// Resuming: the recorded limits, but those the resume's own flags (`now`) give.
    fn keep_limits(&mut self, was: &crate::state::Limits, now: &Layer) {
        let ms = Duration::from_millis;
        if now.max_cost.is_none() {
            self.max_cost = was.max_cost;
        }
        if now.max_wait.is_none() {
            self.max_wait = ms(was.max_wait_ms);
        }
        if now.timeout.is_none() {
            self.timeout = was.timeout_ms.map(ms);
        }
        if now.idle_timeout.is_none() {
            self.idle_timeout = was.idle_timeout_ms.map(ms);
        }
        if now.check_timeout.is_none() {
            self.check_timeout = ms(was.check_timeout_ms);
        }
        if now.stuck_threshold.is_none() {
            self.stuck_threshold = was.stuck_threshold;
        }
        if now.completion_promise.is_none() {
            self.completion_promise.clone_from(&was.completion_promise);
        }
        if now.no_verify.is_none() {
            self.no_verify = was.no_verify;
        }
        if now.no_commit.is_none() {
            self.no_commit = was.no_commit;
        }
        if let Some(size) = was.max_file_size {
            self.max_file_size = size;
        }
    }

    /// Resuming: the recorded run's agent, checks and limits, except where the resume's own
    /// flags (`layers[0]`) name one. A command taken from `state.json` counts as the repository's: the
    /// agent can write that file, so under `--sandbox` it runs in the sandbox (SPEC §4). The
    /// sandbox is part of the run: a resume can turn it on or take its network away, never the
    /// reverse.
    pub fn keep_pinned(&mut self, pinned: &crate::state::Pinned, layers: &[Source]) -> Result<()> {
        if let Some(was) = &pinned.sandbox {
            let config = self.sandbox.get_or_insert(sandbox_config(layers)?);
            if was.net == crate::sandbox::Net::None {
                config.net = crate::sandbox::Net::None;
            }
        }
        let now = layers
            .first()
            .map(|s| &s.layer)
            .cloned()
            .unwrap_or_default();
        if now.agent.is_none() && now.agent_cmd.is_none() {
            match (&pinned.agent, &pinned.agent_cmd) {
                (_, Some(t)) => self.agent = AgentChoice::Template(t.clone()),
                (Some(p), None) => self.agent = AgentChoice::Preset(p.clone()),
                (None, None) => {}
            }
        }
        if now.test_command.is_none() {
            self.test_command.clone_from(&pinned.test_command);
            self.test_command_from_repo = pinned.test_command.is_some();
        }
        if now.verdict_command.is_none() {
            self.verdict_command.clone_from(&pinned.verdict_command);
            self.verdict_command_from_repo = pinned.verdict_command.is_some();
        }
        if let Some(was) = &pinned.limits {
            self.keep_limits(was, &now);
        }
        Ok(())
    }
}

impl Layer {
    /// The layer given on the command line or through `RALPH_*` variables (clap merges those two).
    pub fn from_options(o: &RunOptions) -> Layer {
        let dur = |d: &Option<humantime::Duration>| d.map(|d| d.to_string());
        Layer {
            agent: o.agent.clone(),
            agent_cmd: o.agent_cmd.clone(),
            max_iterations: o.max_iterations,
            timeout: dur(&o.timeout),
            idle_timeout: dur(&o.idle_timeout),
            grace: dur(&o.grace),
            test_command: o.test_command.clone(),
            completion_promise: o.completion_promise.clone(),
            stuck_threshold: o.stuck_threshold,
            no_commit: o.no_commit.then_some(true),
            verdict_command: o.verdict_cmd.clone(),
            max_cost: o.max_cost,
            max_wait: o.max_wait.map(|d| d.to_string()),
            limit_backoff: o.limit_backoff.map(|d| d.to_string()),
            check_timeout: o.check_timeout.map(|d| d.to_string()),
            no_verify: o.no_verify.then_some(true),
            max_file_size: None,
            hooks: None,
            merge: None,
            sandbox: o.sandbox.then_some(true),
            sandbox_net: o.sandbox_net,
            sandbox_writable: None,
            sandbox_hidden: None,
            sandbox_env_keep: None,
        }
    }

    /// The task file's keys (`document::TASK_KEYS`) at the frontmatter's precedence.
    pub fn from_frontmatter(f: &Frontmatter) -> Layer {
        Layer {
            agent: f.agent.clone(),
            agent_cmd: f.agent_cmd.clone(),
            max_iterations: f.max_iterations,
            timeout: f.timeout.clone(),
            idle_timeout: f.idle_timeout.clone(),
            grace: f.grace.clone(),
            test_command: f.test_command.clone(),
            completion_promise: f.completion_promise.clone(),
            stuck_threshold: f.stuck_threshold,
            no_commit: None,
            verdict_command: f.verdict_command.clone(),
            max_cost: f.max_cost,
            max_wait: f.max_wait.clone(),
            limit_backoff: f.limit_backoff.clone(),
            check_timeout: f.check_timeout.clone(),
            // Config-file keys (`document::CONFIG_FILE_ONLY`): a task file never sets them.
            no_verify: None,
            max_file_size: None,
            hooks: None,
            merge: None,
            sandbox: None,
            sandbox_net: None,
            sandbox_writable: None,
            sandbox_hidden: None,
            sandbox_env_keep: None,
        }
    }

    /// Parse a TOML config file; errors name the file, the line and the key.
    pub fn parse_toml(path: &Path, text: &str) -> Result<Layer> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let place = match line {
                Some(l) => format!("{}:{l}", path.display()),
                None => path.display().to_string(),
            };
            Error::user(format!(
                "{place}: invalid configuration: {}",
                e.message().trim_end()
            ))
        })
    }

    /// Read a config file if it exists.
    pub fn load(path: &Path) -> Result<Option<Layer>> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse_toml(path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::file("read", path, e)),
        }
    }
}

/// `~/.config/ralph/config.toml` (or under `$XDG_CONFIG_HOME`).
pub fn user_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("ralph").join("config.toml"))
}

/// Collect the file layers below flags and environment, highest first.
pub fn file_layers(ralph_dir: &Path, frontmatter: Option<&Frontmatter>) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    if let Some(f) = frontmatter {
        out.push(Source {
            name: "the task file's frontmatter".into(),
            layer: Layer::from_frontmatter(f),
            from_repo: true,
        });
    }
    let project = ralph_dir.join("config.toml");
    if let Some(layer) = Layer::load(&project)? {
        out.push(Source {
            name: project.display().to_string(),
            layer,
            from_repo: true,
        });
    }
    if let Some(user) = user_config_path()
        && let Some(layer) = Layer::load(&user)?
    {
        out.push(Source {
            name: user.display().to_string(),
            layer,
            from_repo: false,
        });
    }
    Ok(out)
}

fn parse_duration(source: &str, key: &str, value: &str) -> Result<Duration> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        Error::user(format!(
            "{source}: `{key}` is not a duration: `{value}` ({e})"
        ))
        .with_hint("write durations like `90s`, `30m` or `1h 30m`")
    })
}

/// Merge layers, highest first, into the settings of a run.
pub fn merge(layers: &[Source]) -> Result<Settings> {
    macro_rules! first {
        ($field:ident) => {
            layers
                .iter()
                .find_map(|s| s.layer.$field.clone().map(|v| (s.name.as_str(), v)))
        };
    }
    // `agent` and `agent_cmd` are one setting: the highest layer naming either wins.
    let mut agent = AgentChoice::Preset(DEFAULT_AGENT.to_string());
    for s in layers {
        match (&s.layer.agent, &s.layer.agent_cmd) {
            (Some(_), Some(_)) => {
                return Err(Error::user(format!(
                    "{}: sets both `agent` and `agent_cmd`; keep one",
                    s.name
                )));
            }
            (Some(a), None) => {
                agent = AgentChoice::Preset(a.trim().to_string());
                break;
            }
            (None, Some(c)) => {
                agent = AgentChoice::Template(c.clone());
                break;
            }
            (None, None) => {}
        }
    }
    let duration = |found: Option<(&str, String)>, key: &str| -> Result<Option<Duration>> {
        found
            .map(|(src, v)| parse_duration(src, key, &v))
            .transpose()
    };
    let max_iterations = first!(max_iterations).map_or(DEFAULT_MAX_ITERATIONS, |(_, v)| v);
    if max_iterations == 0 {
        return Err(Error::user("`max_iterations` must be at least 1"));
    }
    let stuck_threshold = first!(stuck_threshold).map_or(DEFAULT_STUCK_THRESHOLD, |(_, v)| v);
    if stuck_threshold == 0 {
        return Err(Error::user("`stuck_threshold` must be at least 1"));
    }
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    Ok(Settings {
        agent,
        max_iterations,
        timeout: nonzero(duration(first!(timeout), "timeout")?),
        idle_timeout: nonzero(duration(first!(idle_timeout), "idle_timeout")?),
        grace: duration(first!(grace), "grace")?.unwrap_or(DEFAULT_GRACE),
        test_command: first!(test_command)
            .map(|(_, v)| v)
            .filter(|c| !c.trim().is_empty()),
        completion_promise: first!(completion_promise)
            .map(|(_, v)| v)
            .filter(|c| !c.trim().is_empty()),
        stuck_threshold,
        no_commit: first!(no_commit).is_some_and(|(_, v)| v),
        verdict_command: first!(verdict_command)
            .map(|(_, v)| v)
            .filter(|c| !c.trim().is_empty()),
        max_cost: match first!(max_cost) {
            Some((src, v)) if !(v.is_finite() && v > 0.0) => {
                return Err(Error::user(format!(
                    "{src}: `max_cost` must be a positive number of USD, not {v}"
                )));
            }
            other => other.map(|(_, v)| v),
        },
        max_wait: duration(first!(max_wait), "max_wait")?.unwrap_or(DEFAULT_MAX_WAIT),
        limit_backoff: duration(first!(limit_backoff), "limit_backoff")?
            .unwrap_or(DEFAULT_LIMIT_BACKOFF)
            .max(MIN_LIMIT_BACKOFF),
        check_timeout: nonzero(duration(first!(check_timeout), "check_timeout")?)
            .unwrap_or(DEFAULT_CHECK_TIMEOUT),
        test_command_from_repo: from_repo(layers, |l| l.test_command.is_some()),
        verdict_command_from_repo: from_repo(layers, |l| l.verdict_command.is_some()),
        hooks: merge_hooks(layers),
        hook_timeout: hook_timeout(layers)?,
        no_verify: first!(no_verify).is_some_and(|(_, v)| v),
        max_file_size: match first!(max_file_size) {
            None => crate::guard::DEFAULT_MAX_FILE_SIZE,
            Some((src, v)) => crate::guard::parse_size(&v).ok_or_else(|| {
                Error::user(format!("{src}: `max_file_size` is not a size: `{v}`"))
                    .with_hint("write sizes like `50MiB`, `200MB` or `1GiB`")
            })?,
        },
        sandbox: merge_sandbox(layers)?,
        sandboxed: None,
    })
}

/// The sandbox's settings. Deliberately not by precedence: a repository layer (which the agent
/// can write) can turn the sandbox on, hide more and take the network away, never the reverse;
/// `sandbox_writable` and `sandbox_env_keep` are taken from the user's own layers only.
fn merge_sandbox(layers: &[Source]) -> Result<Option<crate::sandbox::Config>> {
    let config = sandbox_config(layers)?;
    let on = layers.iter().any(|s| s.layer.sandbox == Some(true))
        || config.net == crate::sandbox::Net::None;
    Ok(on.then_some(config))
}

/// The sandbox's configuration from every layer, whether it is on or not.
fn sandbox_config(layers: &[Source]) -> Result<crate::sandbox::Config> {
    use crate::sandbox::{Config, Net, parse_path};
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let home = home.as_deref().filter(|h| !h.as_os_str().is_empty());
    let mut config = Config::default();
    for s in layers {
        if s.layer.sandbox_net == Some(Net::None) {
            config.net = Net::None;
        }
        for entry in s.layer.sandbox_hidden.iter().flatten() {
            config
                .hidden
                .push(parse_path(&s.name, "sandbox_hidden", entry, home)?);
        }
        for (key, set) in [
            ("sandbox_writable", s.layer.sandbox_writable.is_some()),
            ("sandbox_env_keep", s.layer.sandbox_env_keep.is_some()),
        ] {
            if set && s.from_repo {
                return Err(Error::user(format!(
                    "{}: `{key}` is not taken from the repository (the agent can write it)",
                    s.name
                ))
                .with_hint("set it in ~/.config/ralph/config.toml"));
            }
        }
        for entry in s.layer.sandbox_writable.iter().flatten() {
            config
                .writable
                .push(parse_path(&s.name, "sandbox_writable", entry, home)?);
        }
        for name in s.layer.sandbox_env_keep.iter().flatten() {
            config.env_keep.push(env_name(&s.name, name)?);
        }
    }
    Ok(config)
}

/// A `sandbox_env_keep` entry: a variable's name.
fn env_name(source: &str, name: &str) -> Result<String> {
    let ok = !name.is_empty() && !name.contains(['=', '\0']) && !name.contains(char::is_whitespace);
    if ok {
        Ok(name.to_string())
    } else {
        Err(Error::user(format!(
            "{source}: `sandbox_env_keep` entry `{name}` is not a variable's name"
        ))
        .with_hint("write names like `SSH_AUTH_SOCK`"))
    }
}

impl Settings {
    /// `inv` as ralph runs it: inside the run's sandbox when there is one and `inv` is an agent
    /// or runs on the repository's say (`on_repos_say`); otherwise as it is (SPEC §4).
    pub fn confine(
        &self,
        inv: crate::agent::Invocation,
        on_repos_say: bool,
    ) -> crate::agent::Invocation {
        match &self.sandboxed {
            Some(s) if on_repos_say => s.wrap(inv),
            _ => inv,
        }
    }
}

/// Whether the highest layer setting a value (as `has` tells) is the repository's.
fn from_repo(layers: &[Source], has: impl Fn(&Layer) -> bool) -> bool {
    layers
        .iter()
        .find(|s| has(&s.layer))
        .is_some_and(|s| s.from_repo)
}

/// Each hook from the highest config file that sets it.
fn merge_hooks(layers: &[Source]) -> Hooks {
    let pick = |get: fn(&HookLayer) -> &Option<String>| {
        layers.iter().find_map(|s| {
            let cmd = s.layer.hooks.as_ref().and_then(|h| get(h).clone())?;
            (!cmd.trim().is_empty()).then_some(Command {
                cmd,
                from_repo: s.from_repo,
            })
        })
    };
    Hooks {
        on_iteration: pick(|h| &h.on_iteration),
        on_stuck: pick(|h| &h.on_stuck),
        on_waiting: pick(|h| &h.on_waiting),
        on_halt: pick(|h| &h.on_halt),
    }
}

fn hook_timeout(layers: &[Source]) -> Result<Duration> {
    let found = layers.iter().find_map(|s| {
        let t = s.layer.hooks.as_ref()?.hook_timeout.clone()?;
        Some((s.name.as_str(), t))
    });
    Ok(match found {
        Some((src, v)) => parse_duration(src, "hooks.hook_timeout", &v)?,
        None => DEFAULT_HOOK_TIMEOUT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(name: &str, layer: Layer) -> Source {
        Source {
            name: name.into(),
            layer,
            from_repo: false,
        }
    }

    #[test]
    fn a_resume_keeps_the_runs_limits_unless_its_flags_give_one() {
        let file = Layer {
            max_cost: Some(1.0),
            timeout: Some("5s".into()),
            stuck_threshold: Some(2),
            completion_promise: Some("DONE".into()),
            ..Layer::default()
        };
        let pinned = merge(&[src("task", file)]).unwrap().pinned();
        // The agent edited the file: more money and time, no promise.
        let edited = Layer {
            max_cost: Some(1000.0),
            timeout: Some("10h".into()),
            stuck_threshold: Some(99),
            ..Layer::default()
        };
        let flags = Layer {
            check_timeout: Some("1m".into()),
            ..Layer::default()
        };
        let layers = [src("flags", flags), src("task", edited)];
        let mut s = merge(&layers).unwrap();
        s.keep_pinned(&pinned, &layers).unwrap();
        assert_eq!(s.max_cost, Some(1.0));
        assert_eq!(s.timeout, Some(Duration::from_secs(5)));
        assert_eq!(s.stuck_threshold, 2);
        assert_eq!(s.completion_promise.as_deref(), Some("DONE"));
        assert_eq!(s.check_timeout, Duration::from_secs(60));
        // `.ralph/config.toml` created by the agent: the user's hooks skipped, bigger files.
        let planted = Layer {
            no_verify: Some(true),
            max_file_size: Some("1GiB".into()),
            ..Layer::default()
        };
        let layers = [src("flags", Layer::default()), src("repo", planted)];
        let mut s = merge(&layers).unwrap();
        s.keep_pinned(&pinned, &layers).unwrap();
        assert!(!s.no_verify);
        assert_eq!(s.max_file_size, merge(&[]).unwrap().max_file_size);
        // A flag given now replaces the recorded value.
        let flags = Layer {
            max_cost: Some(3.0),
            ..Layer::default()
        };
        let mut s = merge(&[src("flags", flags.clone())]).unwrap();
        s.keep_pinned(&pinned, &[src("flags", flags)]).unwrap();
        assert_eq!(s.max_cost, Some(3.0));
    }

    #[test]
    fn defaults_apply_without_layers() {
        let s = merge(&[]).unwrap();
        assert_eq!(s.agent, AgentChoice::Preset("copilot".into()));
        assert_eq!(s.max_iterations, 50);
        assert_eq!(s.stuck_threshold, 3);
        assert_eq!(s.grace, Duration::from_secs(10));
        assert_eq!(s.timeout, None);
        assert!(!s.no_commit);
        assert_eq!(s.check_timeout, Duration::from_secs(1800));
    }

    #[test]
    fn hooks_come_from_config_files_with_their_provenance() {
        let text = "[hooks]\non_halt = \"notify-send done\"\nhook_timeout = \"5s\"\n";
        let project = Layer::parse_toml(Path::new("p.toml"), text).unwrap();
        let user = Layer::parse_toml(
            Path::new("u.toml"),
            "[hooks]\non_halt = \"mine\"\non_stuck = \"curl hook\"\n",
        )
        .unwrap();
        let layers = [
            Source {
                name: "p".into(),
                layer: project,
                from_repo: true,
            },
            src("u", user),
        ];
        let s = merge(&layers).unwrap();
        assert_eq!(s.hooks.on_halt.as_ref().unwrap().cmd, "notify-send done");
        assert!(s.hooks.on_halt.as_ref().unwrap().from_repo);
        assert!(!s.hooks.on_stuck.as_ref().unwrap().from_repo);
        let stuck = crate::event::Event::Stuck(crate::event::Stuck {
            iteration: 3,
            no_progress_iterations: 3,
        });
        assert_eq!(s.hooks.for_event(&stuck).unwrap().cmd, "curl hook");
        assert!(s.hooks.on_iteration.is_none());
        assert_eq!(s.hook_timeout, Duration::from_secs(5));
        let e = Layer::parse_toml(Path::new("p.toml"), "[hooks]\non_merge = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml:2") && e.contains("on_merge"), "{e}");
    }

    #[test]
    fn a_repository_layer_turns_the_sandbox_on_and_tightens_it_never_the_reverse() {
        let repo = |text: &str| Source {
            name: ".ralph/config.toml".into(),
            layer: Layer::parse_toml(Path::new("c.toml"), text).unwrap(),
            from_repo: true,
        };
        let user = |text: &str| {
            src(
                "user.toml",
                Layer::parse_toml(Path::new("u"), text).unwrap(),
            )
        };
        assert_eq!(merge(&[]).unwrap().sandbox, None);
        let on = merge(&[repo("sandbox = true")]).unwrap().sandbox.unwrap();
        assert_eq!(on.net, crate::sandbox::Net::Host);
        let s = merge(&[repo("sandbox = false"), user("sandbox = true")]).unwrap();
        assert!(s.sandbox.is_some(), "a repository cannot turn it off");
        let s = merge(&[
            repo("sandbox_net = \"host\""),
            user("sandbox = true\nsandbox_net = \"none\""),
        ])
        .unwrap();
        assert_eq!(s.sandbox.unwrap().net, crate::sandbox::Net::None);
        let e = merge(&[repo("sandbox = true\nsandbox_writable = [\"/\"]")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(".ralph/config.toml") && e.contains("sandbox_writable"),
            "{e}"
        );
        let s = merge(&[user(
            "sandbox = true\nsandbox_writable = [\"/srv/cache\"]\nsandbox_hidden = [\"/srv/keys\"]",
        )])
        .unwrap();
        let c = s.sandbox.unwrap();
        assert_eq!(c.writable, vec![PathBuf::from("/srv/cache")]);
        assert_eq!(c.hidden, vec![PathBuf::from("/srv/keys")]);
        let e = merge(&[user("sandbox = true\nsandbox_hidden = [\"keys\"]")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("user.toml") && e.contains("`keys`"), "{e}");
        let e = Layer::parse_toml(Path::new("c.toml"), "sandbox_net = \"lan\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml:1"), "{e}");
    }

    #[test]
    fn limit_backoff_is_at_least_a_second() {
        let zero = Layer {
            limit_backoff: Some("0s".into()),
            ..Layer::default()
        };
        let s = merge(&[src("flags", zero)]).unwrap();
        assert_eq!(s.limit_backoff, Duration::from_secs(1));
    }

    #[test]
    fn higher_layers_win_field_by_field() {
        let flags = Layer {
            max_iterations: Some(7),
            ..Layer::default()
        };
        let front = Layer {
            max_iterations: Some(20),
            test_command: Some("make test".into()),
            agent: Some("claude".into()),
            ..Layer::default()
        };
        let project = Layer {
            test_command: Some("cargo test".into()),
            timeout: Some("30m".into()),
            agent_cmd: Some("x {prompt}".into()),
            ..Layer::default()
        };
        let s = merge(&[src("flags", flags), src("front", front), src("p", project)]).unwrap();
        assert_eq!(s.max_iterations, 7);
        assert_eq!(s.test_command.as_deref(), Some("make test"));
        assert_eq!(s.timeout, Some(Duration::from_secs(1800)));
        assert_eq!(s.agent, AgentChoice::Preset("claude".into()));
    }

    #[test]
    fn agent_cmd_in_a_higher_layer_beats_a_lower_preset() {
        let flags = Layer {
            agent_cmd: Some("./a.sh".into()),
            ..Layer::default()
        };
        let front = Layer {
            agent: Some("claude".into()),
            ..Layer::default()
        };
        let s = merge(&[src("flags", flags), src("front", front)]).unwrap();
        assert_eq!(s.agent, AgentChoice::Template("./a.sh".into()));
    }

    #[test]
    fn both_agent_keys_in_one_layer_is_an_error() {
        let l = Layer {
            agent: Some("claude".into()),
            agent_cmd: Some("x".into()),
            ..Layer::default()
        };
        let e = merge(&[src("cfg.toml", l)]).unwrap_err().to_string();
        assert!(e.contains("cfg.toml") && e.contains("agent_cmd"), "{e}");
    }

    #[test]
    fn bad_duration_names_source_and_key() {
        let l = Layer {
            grace: Some("soon".into()),
            ..Layer::default()
        };
        let e = merge(&[src("cfg.toml", l)]).unwrap_err().to_string();
        assert!(e.contains("cfg.toml") && e.contains("`grace`"), "{e}");
    }

    #[test]
    fn zero_grace_kills_at_once_and_zero_timeout_means_none() {
        let l = Layer {
            grace: Some("0s".into()),
            timeout: Some("0s".into()),
            ..Layer::default()
        };
        let s = merge(&[src("f", l)]).unwrap();
        assert_eq!(s.grace, Duration::ZERO);
        assert_eq!(s.timeout, None);
    }

    #[test]
    fn toml_unknown_key_names_file_line_and_key() {
        let e = Layer::parse_toml(Path::new("c.toml"), "agent = \"claude\"\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:2:"), "{e}");
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn toml_wrong_type_names_line() {
        let e = Layer::parse_toml(Path::new("c.toml"), "\nmax_iterations = \"many\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:2:"), "{e}");
    }

    #[test]
    fn options_layer_keeps_flags() {
        let o = RunOptions {
            max_iterations: Some(4),
            grace: Some("2s".parse().unwrap()),
            no_commit: true,
            ..RunOptions::default()
        };
        let l = Layer::from_options(&o);
        assert_eq!(l.max_iterations, Some(4));
        assert_eq!(l.grace.as_deref(), Some("2s"));
        assert_eq!(l.no_commit, Some(true));
    }

    #[test]
    fn commands_kept_from_state_json_count_as_the_repositorys() {
        // state.json is in the agent's reach: what a resume takes from it runs confined.
        let mut s = merge(&[]).unwrap();
        let pinned = crate::state::Pinned {
            agent_cmd: Some("my-agent {prompt}".into()),
            test_command: Some("make test".into()),
            verdict_command: Some("bin/verdict".into()),
            ..Default::default()
        };
        s.keep_pinned(&pinned, &[]).unwrap();
        assert_eq!(s.agent, AgentChoice::Template("my-agent {prompt}".into()));
        assert_eq!(s.test_command.as_deref(), Some("make test"));
        assert!(s.test_command_from_repo && s.verdict_command_from_repo);
        // A flag of the resume itself wins, and is the user's.
        let mut s = merge(&[]).unwrap();
        let now = Layer {
            test_command: Some("cargo test".into()),
            ..Layer::default()
        };
        s.test_command = Some("cargo test".into());
        s.keep_pinned(&pinned, &[src("flags", now)]).unwrap();
        assert_eq!(s.test_command.as_deref(), Some("cargo test"));
        assert!(!s.test_command_from_repo);
    }

    #[test]
    fn a_resume_keeps_the_runs_sandbox_and_can_only_tighten_it() {
        use crate::sandbox::Net;
        let pinned = |net| crate::state::Pinned {
            sandbox: Some(crate::sandbox::Pinned { net }),
            ..Default::default()
        };
        let user = |text: &str| src("u", Layer::parse_toml(Path::new("u"), text).unwrap());
        // Recorded with the sandbox, resumed without a word of it: still sandboxed, with the
        // user's hidden paths and its network.
        let layers = [user("sandbox_hidden = [\"/srv/keys\"]")];
        let mut s = merge(&layers).unwrap();
        assert!(s.sandbox.is_none());
        s.keep_pinned(&pinned(Net::None), &layers).unwrap();
        let c = s.sandbox.clone().unwrap();
        assert_eq!(c.net, Net::None);
        assert_eq!(c.hidden, vec![PathBuf::from("/srv/keys")]);
        assert_eq!(
            s.pinned().sandbox,
            Some(crate::sandbox::Pinned { net: Net::None })
        );
        // Taking the network away on resume is allowed; giving it back is not.
        let flags = [src(
            "flags",
            Layer {
                sandbox_net: Some(Net::None),
                ..Layer::default()
            },
        )];
        let mut s = merge(&flags).unwrap();
        s.keep_pinned(&pinned(Net::Host), &flags).unwrap();
        assert_eq!(s.sandbox.unwrap().net, Net::None);
        // A run recorded without the sandbox resumes as today's settings say.
        let mut s = merge(&[]).unwrap();
        s.keep_pinned(&crate::state::Pinned::default(), &[])
            .unwrap();
        assert!(s.sandbox.is_none());
    }

    #[test]
    fn sandbox_env_keep_is_the_users_and_holds_names() {
        let repo = Source {
            name: ".ralph/config.toml".into(),
            layer: Layer::parse_toml(Path::new("c"), "sandbox_env_keep = [\"SSH_AUTH_SOCK\"]")
                .unwrap(),
            from_repo: true,
        };
        let e = merge(&[repo]).unwrap_err().to_string();
        assert!(
            e.contains(".ralph/config.toml") && e.contains("sandbox_env_keep"),
            "{e}"
        );
        let user = |t: &str| src("u.toml", Layer::parse_toml(Path::new("u"), t).unwrap());
        let s = merge(&[user(
            "sandbox = true\nsandbox_env_keep = [\"SSH_AUTH_SOCK\"]",
        )])
        .unwrap();
        assert_eq!(
            s.sandbox.unwrap().env_keep,
            vec!["SSH_AUTH_SOCK".to_string()]
        );
        let e = merge(&[user("sandbox = true\nsandbox_env_keep = [\"A=B\"]")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("u.toml") && e.contains("`A=B`"), "{e}");
    }
}
