//! The YAML frontmatter of a task file (SPEC §3.1, §10): ralph's keys typed and checked, each
//! error naming the file line; keys of other Ralph-loop tools (`completion_criteria`,
//! `browser_validation`, …) only named, for a warning.
//!
//! Which of ralph's configuration keys a task may set: those that describe the task or bound
//! its run ([`TASK_KEYS`]). The repository's commit policy (`no_commit`, `no_verify`,
//! `max_file_size`), `merge`, the hooks and the sandbox are read from configuration files
//! only ([`CONFIG_FILE_ONLY`]): written in frontmatter they are an error, never silently
//! dropped (a `sandbox: true` ignored would run the agent unconfined).

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_saphyr::{MessageFormatter, Spanned};

use super::{TaskError, Warning};

/// The keys a task file's frontmatter takes.
pub(crate) const TASK_KEYS: [&str; 15] = [
    "task",
    "test_command",
    "max_iterations",
    "agent",
    "agent_cmd",
    "timeout",
    "idle_timeout",
    "grace",
    "stuck_threshold",
    "completion_promise",
    "verdict_command",
    "max_cost",
    "max_wait",
    "limit_backoff",
    "check_timeout",
];

/// ralph's configuration keys that only configuration files set.
pub(crate) const CONFIG_FILE_ONLY: [&str; 12] = [
    "fallback_agents",
    "no_commit",
    "no_verify",
    "max_file_size",
    "merge",
    "hooks",
    "sandbox",
    "sandbox_net",
    "sandbox_writable",
    "sandbox_hidden",
    "lease",
    "pass_env",
];

/// The duration keys (humantime strings such as `90s`), checked when the file is read.
const DURATION_KEYS: [&str; 6] = [
    "timeout",
    "idle_timeout",
    "grace",
    "max_wait",
    "limit_backoff",
    "check_timeout",
];

/// The YAML frontmatter of a task file: ralph's keys, and every key as written.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Frontmatter {
    /// Short task name; required when frontmatter exists.
    pub(crate) task: Option<String>,
    /// Command whose success gates completion.
    pub(crate) test_command: Option<String>,
    /// Iteration cap.
    pub(crate) max_iterations: Option<u32>,
    /// Agent preset name.
    pub(crate) agent: Option<String>,
    /// Custom agent command line.
    pub(crate) agent_cmd: Option<String>,
    /// Per-iteration timeout (humantime, e.g. "90s").
    pub(crate) timeout: Option<String>,
    /// Idle-output timeout (humantime).
    pub(crate) idle_timeout: Option<String>,
    /// Grace period before a hard kill (humantime).
    pub(crate) grace: Option<String>,
    /// Iterations without progress before the loop counts as stuck.
    pub(crate) stuck_threshold: Option<u32>,
    /// Text the agent prints to claim completion.
    pub(crate) completion_promise: Option<String>,
    /// Command that judges completion.
    pub(crate) verdict_command: Option<String>,
    /// Budget in USD (`--max-cost`).
    pub(crate) max_cost: Option<f64>,
    /// The most time spent waiting for usage limits (humantime).
    pub(crate) max_wait: Option<String>,
    /// The first wait after a usage limit without a reset time (humantime).
    pub(crate) limit_backoff: Option<String>,
    /// The limit of each test and verdict command run (humantime).
    pub(crate) check_timeout: Option<String>,
    /// Every key as written, in order, with its 1-based file line.
    pub(crate) keys: Vec<Key>,
}

/// A key of the frontmatter and its file line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) name: String,
    pub(crate) line: usize,
}

impl Frontmatter {
    /// The file line where `key` is set (the opening fence when unknown).
    fn line_of(&self, key: &str) -> usize {
        self.keys
            .iter()
            .find(|k| k.name == key)
            .map_or(1, |k| k.line)
    }

    /// The value of a duration key.
    fn duration(&self, key: &str) -> Option<&str> {
        match key {
            "timeout" => self.timeout.as_deref(),
            "idle_timeout" => self.idle_timeout.as_deref(),
            "grace" => self.grace.as_deref(),
            "max_wait" => self.max_wait.as_deref(),
            "limit_backoff" => self.limit_backoff.as_deref(),
            "check_timeout" => self.check_timeout.as_deref(),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Frontmatter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FrontmatterVisitor)
    }
}

/// Reads the mapping key by key: ralph's keys into their typed fields (a wrong type is an error
/// at the value), any other key skipped whatever it holds. Duplicate keys are serde-saphyr's
/// error already.
struct FrontmatterVisitor;

impl<'de> Visitor<'de> for FrontmatterVisitor {
    type Value = Frontmatter;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of keys such as `task: …`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Frontmatter, A::Error> {
        let mut f = Frontmatter::default();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            // YAML line 1 is file line 2 (the opening fence is line 1).
            let line = usize::try_from(key.referenced.line())
                .unwrap_or(0)
                .saturating_add(1)
                .max(2);
            match key.value.as_str() {
                "task" => f.task = map.next_value()?,
                "test_command" => f.test_command = map.next_value()?,
                "max_iterations" => f.max_iterations = map.next_value()?,
                "agent" => f.agent = map.next_value()?,
                "agent_cmd" => f.agent_cmd = map.next_value()?,
                "timeout" => f.timeout = map.next_value()?,
                "idle_timeout" => f.idle_timeout = map.next_value()?,
                "grace" => f.grace = map.next_value()?,
                "stuck_threshold" => f.stuck_threshold = map.next_value()?,
                "completion_promise" => f.completion_promise = map.next_value()?,
                "verdict_command" => f.verdict_command = map.next_value()?,
                "max_cost" => f.max_cost = map.next_value()?,
                "max_wait" => f.max_wait = map.next_value()?,
                "limit_backoff" => f.limit_backoff = map.next_value()?,
                "check_timeout" => f.check_timeout = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            f.keys.push(Key {
                name: key.value,
                line,
            });
        }
        Ok(f)
    }
}

/// Parses the YAML between the fences; `close_line` is the closing fence's file line. Keys
/// that are not ralph's come back as warnings.
pub(super) fn parse_frontmatter(
    path: &Path,
    yaml: &str,
    close_line: usize,
) -> Result<(Frontmatter, Vec<Warning>), TaskError> {
    let fm: Frontmatter = serde_saphyr::from_str::<Option<Frontmatter>>(yaml)
        .map_err(|err| yaml_error(path, yaml, close_line, &err))?
        .unwrap_or_default();
    if fm.task.as_deref().is_none_or(|t| t.trim().is_empty()) {
        return Err(TaskError::MissingTaskName {
            path: path.to_path_buf(),
            line: 1,
        });
    }
    check_values(path, &fm)?;
    let warnings = fm
        .keys
        .iter()
        .filter(|k| !TASK_KEYS.contains(&k.name.as_str()))
        .map(|k| Warning {
            path: path.to_path_buf(),
            line: Some(k.line),
            message: format!(
                "frontmatter key `{}` is not ralph's: ignored{}",
                k.name,
                crate::suggest::did_you_mean(
                    &k.name,
                    TASK_KEYS.into_iter().chain(CONFIG_FILE_ONLY)
                )
            ),
        })
        .collect();
    Ok((fm, warnings))
}

/// ralph's keys hold what they must: no config-file key, counts of at least 1, durations that
/// parse, a positive budget; each error at its key's line.
fn check_values(path: &Path, fm: &Frontmatter) -> Result<(), TaskError> {
    let invalid = |key: &str, message: String| TaskError::InvalidFrontmatter {
        path: path.to_path_buf(),
        line: fm.line_of(key),
        message: format!("{key}: {message}"),
    };
    if let Some(k) = fm
        .keys
        .iter()
        .find(|k| CONFIG_FILE_ONLY.contains(&k.name.as_str()))
    {
        return Err(TaskError::ConfigFileOnly {
            path: path.to_path_buf(),
            line: k.line,
            key: k.name.clone(),
        });
    }
    for (key, value) in [
        ("max_iterations", fm.max_iterations),
        ("stuck_threshold", fm.stuck_threshold),
    ] {
        if value == Some(0) {
            return Err(invalid(key, "must be at least 1".into()));
        }
    }
    for key in DURATION_KEYS {
        if let Some(v) = fm.duration(key)
            && let Err(e) = humantime::parse_duration(v.trim())
        {
            return Err(invalid(
                key,
                format!("`{v}` is not a duration ({e}); write `90s`, `30m` or `1h 30m`"),
            ));
        }
    }
    if let Some(v) = fm.max_cost
        && !(v.is_finite() && v > 0.0)
    {
        return Err(invalid(
            "max_cost",
            format!("must be a positive number of USD, not {v}"),
        ));
    }
    Ok(())
}

/// A YAML or type error at its file line, the key it is about named.
fn yaml_error(path: &Path, yaml: &str, close_line: usize, err: &serde_saphyr::Error) -> TaskError {
    // YAML line 1 is file line 2 (the opening fence is line 1).
    let loc = err.location();
    let mut yaml_line = loc
        .map(|l| usize::try_from(l.line()).unwrap_or(usize::MAX))
        .filter(|&l| l > 0);
    let mut message = short_yaml_message(&serde_saphyr::UserMessageFormatter.format_message(err));
    let mut column = loc.map_or(0, |l| usize::try_from(l.column()).unwrap_or(0));
    // A quote left open is found where the value runs into the next key (the parser's place):
    // the error is told where the quote opens.
    if message.contains("quoted scalar")
        && let Some((opens, at)) = yaml_line.and_then(|l| open_quote(yaml, l))
    {
        (yaml_line, column) = (Some(opens), at);
        message = "the quote opened on this line is never closed".into();
    }
    let line = yaml_line.map_or(1, |l| l.saturating_add(1).clamp(2, close_line.max(2)));
    if let Some(key) = yaml_line.and_then(|l| key_before_column(yaml, l, column))
        && !message.contains(key)
    {
        message = format!("{key}: {message}");
    }
    TaskError::InvalidFrontmatter {
        path: path.to_path_buf(),
        line,
        message,
    }
}

/// Shortens a serde-saphyr message to its first line and spells out integer range errors.
fn short_yaml_message(raw: &str) -> String {
    let first = raw.lines().next().unwrap_or("").trim();
    match first {
        "invalid u32" => "expected a whole number from 0 to 4294967295".to_string(),
        "" => "cannot parse yaml".to_string(),
        other => other.to_string(),
    }
}

/// The top-level key an error at YAML `line` (1-based) and `column` (1-based, in characters) is
/// about: the key on that line when the column points past it (its value), else, on a line of a
/// nested value, the nearest key above.
fn key_before_column(yaml: &str, line: usize, column: usize) -> Option<&str> {
    let lines: Vec<&str> = yaml.lines().take(line).collect();
    let here = lines.get(line.checked_sub(1)?)?;
    match top_level_key(here) {
        Some(key) => (column > key.chars().count() + 1).then_some(key),
        None => lines.iter().rev().skip(1).find_map(|l| top_level_key(l)),
    }
}

/// `key` of a `key: …` line at the mapping's own indentation (none).
fn top_level_key(line: &str) -> Option<&str> {
    let (key, _) = line.split_once(':')?;
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    valid.then_some(key)
}

/// The nearest line at or above YAML `line` (1-based) whose value opens a quote it does not
/// close, and the quote's column (1-based): where a quote left open begins.
fn open_quote(yaml: &str, line: usize) -> Option<(usize, usize)> {
    let lines: Vec<&str> = yaml.lines().take(line).collect();
    lines.iter().enumerate().rev().find_map(|(i, text)| {
        let value = match text.trim_start().strip_prefix("- ") {
            Some(item) => item,
            None => text.split_once(": ").map(|(_, v)| v)?,
        };
        let value = value.trim_start();
        let at = text.len() - value.len();
        let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        (!closes(&value[1..], quote)).then(|| (i + 1, text[..at].chars().count() + 1))
    })
}

/// Whether `rest` (what follows an opening quote) closes it: `\"` escapes in double quotes,
/// `''` in single ones.
fn closes(rest: &str, quote: char) -> bool {
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            ('"', '\\') => {
                chars.next();
            }
            ('\'', '\'') if chars.peek() == Some(&'\'') => {
                chars.next();
            }
            (q, c) if q == c => return true,
            _ => {}
        }
    }
    false
}
