//! The one small trait an agent CLI implements: its name and install hint, its argv for a prompt
//! given as an argument and on stdin, what it prints, and how to read its JSON events and the
//! last lines of a failed attempt for limits and login failures. A CLI is a unit struct in a
//! file of its own (`claude.rs`, `copilot.rs`, …) listed once in [`super::PRESETS`].

use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::findings::{Findings, TailLine};
use super::signal::Patterns;

/// One piece of an argv template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(String),
    /// An argument containing `{prompt}` and/or `{prompt_file}`, substituted at spawn time.
    Template(String),
}

/// Literal words.
pub(crate) fn literal(words: &[&str]) -> Vec<Part> {
    words
        .iter()
        .map(|w| Part::Literal((*w).to_owned()))
        .collect()
}

/// How to start a CLI: the argv after the program, the environment it needs, what to tell the
/// user once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Launch {
    /// With the prompt as an argument (`{prompt}`), in a file (`{prompt_file}`), or, with
    /// neither placeholder, on stdin.
    pub(crate) args: Vec<Part>,
    /// For a prompt too long for one argument: the argv when it goes to stdin instead (`None`:
    /// the CLI cannot take it there, or a template decides for itself).
    pub(crate) stdin_args: Option<Vec<Part>>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) notes: Vec<String>,
}

/// What a CLI writes on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Plain text.
    Text,
    /// One JSON event per line (Claude's `stream-json`, Codex's `exec --json`, Copilot's
    /// `--output-format json`); any other line is plain text.
    JsonLines,
}

/// An agent CLI, as data and a few readers.
pub(crate) trait Cli: fmt::Debug + Sync {
    /// The preset's name, which is also its program (`claude`).
    fn name(&self) -> &'static str;

    /// How to install it, for the error when it is not on PATH.
    fn install_hint(&self) -> Option<&'static str>;

    /// Its argv, environment and notes.
    fn launch(&self) -> Launch;

    /// Fits the launch to the installed program (copilot asks its `--help` which permission
    /// flag it knows). Nothing by default.
    fn probe(&self, _program: &Path, _launch: &mut Launch) {}

    /// What it prints, as the preset runs it.
    fn output(&self) -> Output;

    /// Whether a JSON line is never worth parsing (Claude's tool results can be huge). Such a
    /// line still shows the agent moved on.
    fn skips(&self, _line: &[u8]) -> bool {
        false
    }

    /// Whether a JSON line is an event whose only effects — the activity, the latest message,
    /// that the agent moved on — are replaced by those of a later such event, so that of a run
    /// of them only the newest few need reading (`Findings::newest_first`): Claude's
    /// `assistant` messages that are not API errors. Must be cheap: every line asks. None by
    /// default.
    fn supersedable(&self, _line: &[u8]) -> bool {
        false
    }

    /// Whether a supersedable line surely sets both the activity and the latest message, as far
    /// as its bytes tell without reading it: then no older supersedable line matters. Must be
    /// cheap, and never say yes wrongly (no is always safe). No by default.
    fn settles(&self, _line: &[u8]) -> bool {
        false
    }

    /// Reads one JSON event (`raw` is its line). Nothing by default.
    fn event(&self, _event: &Value, _raw: &[u8], _seen: &mut Findings) {}

    /// The limit, retry and login messages it prints as text.
    fn signals(&self) -> &'static Patterns;

    /// Whether, having printed a retry message of its [`Cli::signals`] as its last line, it
    /// sleeps out the wait printing nothing (opencode sleeps a 429's `retry-after` however long
    /// it is): that silence is then no hang for the idle timeout. No by default.
    fn retries_quietly(&self) -> bool {
        false
    }

    /// Reads the last plain lines of an attempt that did not exit 0 for a limit or a login
    /// failure (SPEC §6: never the lines of an attempt that exited 0). By default, with its
    /// [`Cli::signals`].
    fn failed_tail(&self, tail: &[TailLine], seen: &mut Findings) {
        seen.read_tail(tail, &[self.signals()]);
    }
}

/// How the observer reads one attempt: which CLI, and what it prints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Format {
    pub(crate) cli: &'static dyn Cli,
    pub(crate) output: Output,
}

impl Format {
    /// The CLI as its preset runs it.
    pub(crate) fn of(cli: &'static dyn Cli) -> Format {
        Format {
            cli,
            output: cli.output(),
        }
    }

    /// The CLI asked for its JSON events (`codex exec --json`, `copilot --output-format json`).
    #[cfg(test)]
    pub(crate) fn json(cli: &'static dyn Cli) -> Format {
        Format {
            cli,
            output: Output::JsonLines,
        }
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        self.cli.name() == other.cli.name() && self.output == other.output
    }
}
