//! The layers merged, highest first, into the settings of a run: each value from the highest
//! layer that sets it (and whether the repository gave it), `agent` and `agent_cmd` as one
//! setting, the hooks from the config files.

use std::time::Duration;

use super::layer::parse_duration;
use super::sandbox::merge_sandbox;
use super::{
    Command, DEFAULT_AGENT, DEFAULT_CHECK_TIMEOUT, DEFAULT_GRACE, DEFAULT_HOOK_TIMEOUT,
    DEFAULT_LIMIT_BACKOFF, DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_WAIT, DEFAULT_STUCK_THRESHOLD,
    HookLayer, Hooks, Layer, MIN_LIMIT_BACKOFF, Settings, Source,
};
use crate::agent::AgentChoice;
use crate::error::{Error, Result};

/// Merge layers, highest first, into the settings of a run.
pub(crate) fn merge(layers: &[Source]) -> Result<Settings> {
    let l = Layers(layers);
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    Ok(Settings {
        agent: l.agent()?,
        fallback_agents: l.fallback_agents(),
        max_iterations: l
            .at_least_one("max_iterations", |l| &l.max_iterations)?
            .unwrap_or(DEFAULT_MAX_ITERATIONS),
        timeout: nonzero(l.duration("timeout", |l| &l.timeout)?),
        idle_timeout: nonzero(l.duration("idle_timeout", |l| &l.idle_timeout)?),
        grace: l.duration("grace", |l| &l.grace)?.unwrap_or(DEFAULT_GRACE),
        test_command: l.command(|l| &l.test_command),
        completion_promise: l.command(|l| &l.completion_promise),
        stuck_threshold: l
            .at_least_one("stuck_threshold", |l| &l.stuck_threshold)?
            .unwrap_or(DEFAULT_STUCK_THRESHOLD),
        no_commit: l.flag(|l| &l.no_commit),
        verdict_command: l.command(|l| &l.verdict_command),
        max_cost: l.max_cost()?,
        max_wait: l
            .duration("max_wait", |l| &l.max_wait)?
            .unwrap_or(DEFAULT_MAX_WAIT),
        limit_backoff: l
            .duration("limit_backoff", |l| &l.limit_backoff)?
            .unwrap_or(DEFAULT_LIMIT_BACKOFF)
            .max(MIN_LIMIT_BACKOFF),
        check_timeout: nonzero(l.duration("check_timeout", |l| &l.check_timeout)?)
            .unwrap_or(DEFAULT_CHECK_TIMEOUT),
        test_command_from_repo: from_repo(layers, |l| l.test_command.is_some()),
        verdict_command_from_repo: from_repo(layers, |l| l.verdict_command.is_some()),
        hooks: merge_hooks(layers),
        hook_timeout: hook_timeout(layers)?,
        no_verify: l.flag(|l| &l.no_verify),
        max_file_size: l.max_file_size()?,
        sandbox: merge_sandbox(layers)?,
        sandboxed: None,
    })
}

/// The layers, highest first, asked for one value at a time.
struct Layers<'a>(&'a [Source]);

impl Layers<'_> {
    /// The value of the highest layer that sets it, and that layer's name.
    fn first<T: Clone>(&self, get: impl Fn(&Layer) -> &Option<T>) -> Option<(&str, T)> {
        self.0
            .iter()
            .find_map(|s| get(&s.layer).clone().map(|v| (s.name.as_str(), v)))
    }

    /// `agent` and `agent_cmd` are one setting: the highest layer naming either wins.
    fn agent(&self) -> Result<AgentChoice> {
        for s in self.0 {
            match (&s.layer.agent, &s.layer.agent_cmd) {
                (Some(_), Some(_)) => {
                    return Err(Error::user(format!(
                        "{}: sets both `agent` and `agent_cmd`; keep one",
                        s.name
                    )));
                }
                (Some(a), None) => return Ok(AgentChoice::Preset(a.trim().to_string())),
                (None, Some(c)) => return Ok(AgentChoice::Template(c.clone())),
                (None, None) => {}
            }
        }
        Ok(AgentChoice::Preset(DEFAULT_AGENT.to_string()))
    }

    /// The highest layer's fallback presets, blank names and repeats left out.
    fn fallback_agents(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for name in self
            .first(|l| &l.fallback_agents)
            .map(|(_, v)| v)
            .unwrap_or_default()
        {
            let name = name.trim();
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        names
    }

    fn duration(
        &self,
        key: &str,
        get: impl Fn(&Layer) -> &Option<String>,
    ) -> Result<Option<Duration>> {
        self.first(get)
            .map(|(src, v)| parse_duration(src, key, &v))
            .transpose()
    }

    /// A count that must be at least 1.
    fn at_least_one(&self, key: &str, get: impl Fn(&Layer) -> &Option<u32>) -> Result<Option<u32>> {
        match self.first(get) {
            Some((_, 0)) => Err(Error::user(format!("`{key}` must be at least 1"))),
            found => Ok(found.map(|(_, v)| v)),
        }
    }

    /// A command (or word); blank is none.
    fn command(&self, get: impl Fn(&Layer) -> &Option<String>) -> Option<String> {
        self.first(get)
            .map(|(_, v)| v)
            .filter(|c| !c.trim().is_empty())
    }

    fn flag(&self, get: impl Fn(&Layer) -> &Option<bool>) -> bool {
        self.first(get).is_some_and(|(_, v)| v)
    }

    fn max_cost(&self) -> Result<Option<f64>> {
        match self.first(|l| &l.max_cost) {
            Some((src, v)) if !(v.is_finite() && v > 0.0) => Err(Error::user(format!(
                "{src}: `max_cost` must be a positive number of USD, not {v}"
            ))),
            other => Ok(other.map(|(_, v)| v)),
        }
    }

    fn max_file_size(&self) -> Result<u64> {
        let Some((src, v)) = self.first(|l| &l.max_file_size) else {
            return Ok(crate::guard::DEFAULT_MAX_FILE_SIZE);
        };
        crate::guard::parse_size(&v).ok_or_else(|| {
            Error::user(format!("{src}: `max_file_size` is not a size: `{v}`"))
                .with_hint("write sizes like `50MiB`, `200MB` or `1GiB`")
        })
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
        on_question: pick(|h| &h.on_question),
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
