//! One layer of configuration as written — a TOML file (errors naming the file, the line and
//! the key), the task file's frontmatter, the flags and `RALPH_*` variables — and the files
//! below the flags, highest first.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::Source;
use crate::cli::RunOptions;
use crate::error::{Error, Result};
use crate::task::document::Frontmatter;

/// One layer as written in a config file; every key optional, unknown keys rejected.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Layer {
    pub(crate) agent: Option<String>,
    pub(crate) agent_cmd: Option<String>,
    /// Presets that take over while the agent is usage-limited, in order (SPEC §4).
    pub(crate) fallback_agents: Option<Vec<String>>,
    pub(crate) max_iterations: Option<u32>,
    pub(crate) timeout: Option<String>,
    pub(crate) idle_timeout: Option<String>,
    pub(crate) grace: Option<String>,
    pub(crate) test_command: Option<String>,
    pub(crate) completion_promise: Option<String>,
    pub(crate) stuck_threshold: Option<u32>,
    pub(crate) no_commit: Option<bool>,
    pub(crate) verdict_command: Option<String>,
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_wait: Option<String>,
    pub(crate) limit_backoff: Option<String>,
    pub(crate) check_timeout: Option<String>,
    pub(crate) no_verify: Option<bool>,
    pub(crate) max_file_size: Option<String>,
    /// `[hooks]`: commands run on the loop's events (config files only).
    pub(crate) hooks: Option<HookLayer>,
    /// A worktree loop merges back when it completed (`--merge`).
    pub(crate) merge: Option<bool>,
    /// Every agent attempt under bubblewrap (`--sandbox`); a repository layer can turn it on,
    /// never off.
    pub(crate) sandbox: Option<bool>,
    /// `host` (default) or `none` (`--sandbox-net`); `none` from any layer wins.
    pub(crate) sandbox_net: Option<crate::sandbox::Net>,
    /// Paths the sandbox leaves writable (the user's own layers only).
    pub(crate) sandbox_writable: Option<Vec<String>>,
    /// Paths the sandbox hides, besides `~/.ssh`, `~/.aws`, …
    pub(crate) sandbox_hidden: Option<Vec<String>>,
    /// Variables the sandboxed agent keeps although the sandbox drops them (`SSH_AUTH_SOCK`,
    /// …; the user's own layers only).
    pub(crate) sandbox_env_keep: Option<Vec<String>>,
    /// A queue item's lease on origin (SPEC §15; `--lease`).
    pub(crate) lease: Option<String>,
    /// Variables the commands ralph supervises get although ralph withholds them (the
    /// tracker's token; the user's own layers only).
    pub(crate) pass_env: Option<Vec<String>>,
}

/// `[hooks]` of a config file (SPEC §10): a shell command per event, run with the event's JSON
/// on stdin.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HookLayer {
    pub(crate) on_iteration: Option<String>,
    pub(crate) on_stuck: Option<String>,
    pub(crate) on_waiting: Option<String>,
    pub(crate) on_question: Option<String>,
    pub(crate) on_halt: Option<String>,
    /// How long each may run (default 30s).
    pub(crate) hook_timeout: Option<String>,
}

impl Layer {
    /// The layer given on the command line or through `RALPH_*` variables (clap merges those two).
    pub(crate) fn from_options(o: &RunOptions) -> Layer {
        let dur = |d: &Option<humantime::Duration>| d.map(|d| d.to_string());
        Layer {
            agent: o.agent.clone(),
            agent_cmd: o.agent_cmd.clone(),
            fallback_agents: (!o.fallback_agents.is_empty()).then(|| o.fallback_agents.clone()),
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
            lease: None,
            pass_env: None,
        }
    }

    /// The task file's keys (`document::TASK_KEYS`) at the frontmatter's precedence.
    pub(crate) fn from_frontmatter(f: &Frontmatter) -> Layer {
        Layer {
            agent: f.agent.clone(),
            agent_cmd: f.agent_cmd.clone(),
            // A config-file key (`document::CONFIG_FILE_ONLY`), like those below.
            fallback_agents: None,
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
            lease: None,
            pass_env: None,
        }
    }

    /// Parse a TOML config file; errors name the file, the line and the key.
    pub(crate) fn parse_toml(path: &Path, text: &str) -> Result<Layer> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let place = match line {
                Some(l) => format!("{}:{l}", path.display()),
                None => path.display().to_string(),
            };
            let message = e.message().trim_end();
            let message = with_suggestion(message).unwrap_or_else(|| message.to_string());
            Error::user(format!("{place}: invalid configuration: {message}"))
        })
    }

    /// Read a config file if it exists: a regular file of bounded size, never a FIFO or a
    /// device. One in the repository (`beneath`: its root) is the agent's to write: it is opened
    /// beneath the root following no link (SPEC §4), whenever it appears — a link is refused,
    /// named, never read through.
    pub(crate) fn load(path: &Path, beneath: Option<&Path>) -> Result<Option<Layer>> {
        let read = match beneath {
            Some(root) => crate::files::read_text_unlinked(root, path),
            None => crate::files::read_text(path),
        };
        match read {
            Ok(text) => Self::parse_toml(path, &text).map(Some),
            Err(e) if e.is_missing() => Ok(None),
            Err(e) => Err(Error::user(e.to_string())
                .with_hint(match beneath {
                    Some(_) => "ralph reads a repository's configuration only as a regular file: replace it by one, or remove it",
                    None => "a configuration file must be a regular file (or a link to one)",
                })),
        }
    }
}

/// `~/.config/ralph/config.toml` (or under `$XDG_CONFIG_HOME`).
pub(crate) fn user_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("ralph").join("config.toml"))
}

/// Collect the file layers below flags and environment, highest first.
pub(crate) fn file_layers(
    ralph_dir: &Path,
    frontmatter: Option<&Frontmatter>,
) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    if let Some(f) = frontmatter {
        out.push(Source {
            name: "the task file's frontmatter".into(),
            layer: Layer::from_frontmatter(f),
            from_repo: true,
        });
    }
    let project = ralph_dir.join("config.toml");
    let root = ralph_dir.parent().unwrap_or(ralph_dir);
    if let Some(layer) = Layer::load(&project, Some(root))? {
        out.push(Source {
            name: project.display().to_string(),
            layer,
            from_repo: true,
        });
    }
    if let Some(user) = user_config_path() {
        user_config_out_of(&user, |p| p.starts_with(real(root)), "the repository")?;
    }
    if let Some(user) = user_config_path()
        && let Some(layer) = Layer::load(&user, None)?
    {
        out.push(Source {
            name: user.display().to_string(),
            layer,
            from_repo: false,
        });
    }
    Ok(out)
}

/// Where `p` really lies: its links resolved as far as it exists.
fn real(p: &Path) -> PathBuf {
    let mut tail = Vec::new();
    let mut base = p;
    loop {
        if let Ok(mut found) = base.canonicalize() {
            found.extend(tail.iter().rev());
            return found;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name);
                base = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// The user's own configuration (`user`) is the user's, obeyed outside any sandbox: one that
/// resolves — through a link of the file or of a directory on its way — into a place the agent
/// can write (`reaches`, named `place`) is refused at the start, naming both (issue 29: the
/// agent added a hook to it that ran outside).
pub(crate) fn user_config_out_of(
    user: &Path,
    reaches: impl Fn(&Path) -> bool,
    place: &str,
) -> Result<()> {
    if std::fs::symlink_metadata(user).is_err() {
        return Ok(());
    }
    let found = real(user);
    if !reaches(&found) {
        return Ok(());
    }
    Err(Error::user(format!(
        "your configuration `{}` lies in {place} (`{}`), which the agent can write: ralph does not obey it",
        user.display(),
        found.display()
    ))
    .with_hint("keep ~/.config/ralph/config.toml outside the repository and outside what the agent may write (a link to a dotfiles directory elsewhere is fine)"))
}

/// `value` of `key` (in `source`) as a duration.
pub(super) fn parse_duration(source: &str, key: &str, value: &str) -> Result<Duration> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        Error::user(format!(
            "{source}: `{key}` is not a duration: `{value}` ({e})"
        ))
        .with_hint("write durations like `90s`, `30m` or `1h 30m`")
    })
}

/// serde's "unknown field `KEY`, expected one of `A`, `B`, …" (a section's own keys: the top
/// level's or `[hooks]`'s) as "unknown field `KEY`; did you mean `A`?" when one is near `KEY`.
fn with_suggestion(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    let known = expected.split('`').skip(1).step_by(2);
    let near = crate::suggest::nearest(key, known)?;
    Some(format!("unknown field `{key}`; did you mean `{near}`?"))
}
