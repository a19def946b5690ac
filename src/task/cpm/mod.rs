//! CPM epic and spec mode (SPEC §3.4): targets, epic docs, pre-flight, roll-up records, prompt.
//!
//! This is the pure and file-level half of the mode that replaces the `cpm:ralph` skill
//! (`reference/cpm-ralph-skill.txt`). The caller runs the agent, the roll-up and git; this
//! module decides what to run and reads what came back:
//!
//! - epic docs are `docs/epics/NN-epic-*.md` (CPM also writes `NN-MM-epic-*.md` in spec mode)
//!   whose header carries `**Status**:` and, for a spec's epics, `**Source spec**:`;
//! - `ralph run` targets resolve to a fixed, filename-ordered path list at launch
//!   ([`resolve_targets`]);
//! - pre-flight: `[plan]` stripping, test-runner discovery, earlier-run report, roll-up
//!   resolution, the session-state ignore check and the armed-stop-hook warning;
//! - the roll-up's records (cpm 3.11.0's `coverage-rollup.sh`): one parser into typed records
//!   (`MATRIX`, `REQ`, `STATE`, `EXCLUDED`, `SUMMARY`, `ROW`, `CRITERION`, `UNRESOLVED`) and
//!   the figures ralph counts from them (rows verified, requirements traced); the exit code
//!   decides, never the counts;
//! - the iteration prompt: the skill's template minus what the supervisor now does itself.
//!
//! A room per file: `targets` (target resolution and ranges), `epics` (epic docs),
//! `preflight` (`[plan]` stripping and the task budget), `runner` (test-runner discovery,
//! the spec's ENV entries), `runs` (earlier runs' logs), `ignore` (the session-state ignore
//! check and the stop-hook warning), `rollup` (roll-up resolution, its argv, the completion
//! lines), `records` (the roll-up's records and what ralph counts from them) and `prompt`
//! (the skill's prompt). Epics and specs are read with the one Markdown reader
//! ([`crate::markdown`]).
//!
//! Nothing here panics on any input; file problems are [`CpmError`]s naming the file.

mod epics;
mod ignore;
mod preflight;
mod prompt;
mod records;
mod rollup;
mod runner;
mod runs;
mod targets;

use std::fs;
use std::path::{Path, PathBuf};

pub(crate) use epics::epics_for_spec;
pub(crate) use ignore::{apply_ignore_lines, missing_ignore_lines, stop_hook_armed};
pub(crate) use preflight::{strip_plan_file, task_budget};
pub(crate) use prompt::{Phase, PromptParams, epic_range, prompt};
pub(crate) use records::{Coverage, parse_records};
pub(crate) use rollup::{completion_lines, resolve_rollup, rollup_argv};
pub(crate) use runner::discover_test_runner;
pub(crate) use runs::{earlier_runs, log_path};
pub(crate) use targets::{Targets, is_cpm_target, nothing_to_run_message, resolve_targets};

/// Where epic docs live, relative to the repository root.
pub(crate) const EPICS_DIR: &str = "docs/epics";
/// Where specs live, relative to the repository root.
pub(crate) const SPECS_DIR: &str = "docs/specifications";
/// Where CPM's plans, progress files and the iteration logs live.
pub(crate) const PLANS_DIR: &str = "docs/plans";
/// The stop-hook loop's state file; its presence means a stop-hook loop is armed.
pub(crate) const STOP_HOOK_STATE: &str = ".claude/ralph-loop.local.md";
/// The roll-up script, relative to a CPM plugin root.
pub(crate) const ROLLUP_REL: &str = "hooks/lib/coverage-rollup.sh";
/// The completion word in epic mode.
pub(crate) const EPIC_PROMISE: &str = "ALL_EPICS_COMPLETE";
/// The completion word in spec mode.
pub(crate) const SPEC_PROMISE: &str = "SPEC_DELIVERED";
/// The `.gitignore` lines the session-state ignore check wants present (skill step 1g).
#[cfg(test)]
pub(crate) const IGNORE_LINES: [&str; 2] = ["/.claude/ralph-loop.local.md", "/docs/plans/.cpm-*"];
/// The comment written above [`IGNORE_LINES`] when they are appended.
pub(crate) const IGNORE_HEADER: &str =
    "# Session-scoped agent state, not part of the project's history";

/// Why a CPM target or document could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CpmError {
    /// A file or directory could not be read.
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("{}: cannot write: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid UTF-8.
    #[error("{}:{line}: file is not valid UTF-8", .path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
    },
    /// An epic doc has no `**Status**:` field in its header.
    #[error("{}: epic has no `**Status**:` field before its first story", .path.display())]
    MissingStatus {
        /// The epic doc.
        path: PathBuf,
    },
    /// An epic doc's `**Status**:` field is empty.
    #[error("{}:{line}: epic `**Status**:` is empty", .path.display())]
    EmptyStatus {
        /// The epic doc.
        path: PathBuf,
        /// 1-based line of the field.
        line: usize,
    },
    /// An argument is neither an epic path, a spec path nor a range.
    #[error(
        "`{arg}` is not a CPM target: expected a path under docs/epics/ or docs/specifications/, or a range like 23..26"
    )]
    NotCpmTarget {
        /// The argument as typed.
        arg: String,
    },
    /// A range argument is malformed or reversed.
    #[error("invalid epic range `{arg}`: {reason}")]
    InvalidRange {
        /// The argument as typed.
        arg: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A range matched no epic file.
    #[error("epic range `{arg}` matches no epic in docs/epics/")]
    EmptyRange {
        /// The argument as typed.
        arg: String,
    },
    /// Two spec paths were given.
    #[error("two spec paths given (`{first}` and `{second}`): spec mode runs exactly one spec")]
    TwoSpecs {
        /// The first spec argument.
        first: String,
        /// The second spec argument.
        second: String,
    },
    /// A spec path was mixed with epic paths or ranges.
    #[error("spec path `{spec}` mixed with epic targets ({}): a run is either spec mode or epic mode", .epics.join(", "))]
    SpecWithEpics {
        /// The spec argument.
        spec: String,
        /// The epic arguments, as typed.
        epics: Vec<String>,
    },
    /// An epic path does not exist.
    #[error("{}: epic not found", .path.display())]
    EpicNotFound {
        /// The path, relative to the repository root.
        path: PathBuf,
    },
    /// A path under docs/epics/ is not an epic doc (`*-epic-*.md`).
    #[error("{}: not an epic doc (expected docs/epics/NN-epic-*.md)", .path.display())]
    NotAnEpic {
        /// The path, relative to the repository root.
        path: PathBuf,
    },
    /// A glob under docs/epics/ matched no epic doc.
    #[error("`{arg}` matches no epic doc")]
    GlobNoMatch {
        /// The argument as typed.
        arg: String,
    },
    /// A spec path does not exist.
    #[error("{}: spec not found", .path.display())]
    SpecNotFound {
        /// The path, relative to the repository root.
        path: PathBuf,
    },
    /// A target names a directory.
    #[error("{}: is a directory, not an epic or spec file", .path.display())]
    TargetIsDirectory {
        /// The path, relative to the repository root.
        path: PathBuf,
    },
    /// A `.gitignore` line to append contains a line break.
    #[error(".gitignore line {line:?} contains a line break")]
    InvalidIgnoreLine {
        /// The offending line.
        line: String,
    },
}

impl CpmError {
    /// A one-line suggestion for the user, where one helps.
    pub(crate) fn hint(&self) -> Option<String> {
        let hint = match self {
            CpmError::Read { .. } | CpmError::Write { .. } => return None,
            CpmError::NotUtf8 { .. } => "save the file as UTF-8".to_string(),
            CpmError::MissingStatus { .. } => {
                "add a `**Status**: Pending` line under the epic's title".to_string()
            }
            CpmError::EmptyStatus { .. } => {
                "give the epic a status, e.g. `**Status**: Pending` or `**Status**: Complete`"
                    .to_string()
            }
            CpmError::NotCpmTarget { .. } => {
                "name epic docs (docs/epics/NN-epic-*.md), a range like 23..26, or one spec (docs/specifications/NN-spec-*.md)".to_string()
            }
            CpmError::InvalidRange { .. } => {
                "write a range as LOW..HIGH with LOW <= HIGH, e.g. 23..26".to_string()
            }
            CpmError::EmptyRange { .. } | CpmError::EpicNotFound { .. } => {
                "the epic docs are the files docs/epics/NN-epic-*.md; `ls docs/epics` lists them"
                    .to_string()
            }
            CpmError::GlobNoMatch { .. } | CpmError::NotAnEpic { .. } => {
                "epic docs are named NN-epic-*.md (coverage matrices, NN-coverage-*.md, are not targets)".to_string()
            }
            CpmError::TwoSpecs { .. } => "run one spec at a time".to_string(),
            CpmError::SpecWithEpics { spec, .. } => {
                format!("run the spec on its own (`ralph run {spec}`), or name only epics")
            }
            CpmError::SpecNotFound { .. } => {
                "specs are the files under docs/specifications/; `ls docs/specifications` lists them"
                    .to_string()
            }
            CpmError::TargetIsDirectory { .. } => {
                "name the files (or run `ralph run` with no target to discover incomplete epics)"
                    .to_string()
            }
            CpmError::InvalidIgnoreLine { .. } => return None,
        };
        Some(hint)
    }

    /// True for contradictory or malformed targets: a usage error (exit 2).
    pub(crate) fn is_usage(&self) -> bool {
        matches!(
            self,
            CpmError::NotCpmTarget { .. }
                | CpmError::InvalidRange { .. }
                | CpmError::TwoSpecs { .. }
                | CpmError::SpecWithEpics { .. }
        )
    }

    /// The 1-based file line the error points at, where known.
    #[cfg(test)]
    pub(crate) fn line(&self) -> Option<usize> {
        match self {
            CpmError::NotUtf8 { line, .. } | CpmError::EmptyStatus { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// The file names in a directory (UTF-8 names only); a missing directory is empty.
fn list_dir(root: &Path, rel: &Path) -> Result<Vec<String>, CpmError> {
    let dir = root.join(rel);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Ok(Vec::new()),
        Err(source) => {
            return Err(CpmError::Read {
                path: rel.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| CpmError::Read {
            path: rel.to_path_buf(),
            source,
        })?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

fn leading_number(name: &str) -> Option<u32> {
    let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        None
    } else {
        digits.parse().ok()
    }
}

/// Read a UTF-8 document; `shown` is the path used in errors.
fn read_text(full: &Path, shown: &Path) -> Result<String, CpmError> {
    // As any file the agent can touch: bounded, never blocking, never through a link out of
    // the repository.
    let bytes =
        crate::files::read_bytes(full, crate::files::MAX_TEXT).map_err(|e| CpmError::Read {
            path: shown.to_path_buf(),
            source: match e {
                crate::files::ReadError::Io { source, .. } => source,
                crate::files::ReadError::Missing(_) => std::io::ErrorKind::NotFound.into(),
                e => std::io::Error::other(e.to_string()),
            },
        })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e
            .as_bytes()
            .get(..valid)
            .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
            + 1;
        CpmError::NotUtf8 {
            path: shown.to_path_buf(),
            line,
        }
    })
}

/// Control characters (line breaks included) replaced by spaces, trimmed.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
pub(super) mod test_support {
    //! Fixtures the rooms' tests share (and everything of `cpm` they call).
    pub(crate) use super::*;
    pub(crate) use std::fs;
    pub(crate) use tempfile::TempDir;

    pub(crate) type TestResult = Result<(), Box<dyn std::error::Error>>;

    pub(crate) fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create dirs");
        }
        fs::write(path, text).expect("write fixture");
    }

    /// An epic doc the way cpm:epics writes one.
    pub(crate) fn epic_doc(title: &str, status: &str, spec: Option<&str>) -> String {
        let mut s = format!("# {title}\n\n");
        if let Some(spec) = spec {
            s.push_str(&format!("**Source spec**: {spec}\n"));
        }
        s.push_str(&format!(
            "**Date**: 2026-02-12\n**Status**: {status}\n**Blocked by**: —\n\n\
             ## Build the thing\n**Story**: 1\n**Status**: Complete\n**Blocked by**: —\n\n\
             **Acceptance Criteria**:\n- it works [unit]\n\n\
             ### Write the code\n**Task**: 1.1\n**Description**: code\n**Status**: Complete\n\n---\n"
        ));
        s
    }

    pub(crate) fn repo() -> TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    pub(crate) fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    pub(crate) fn epics_of(t: Targets) -> Vec<String> {
        match t {
            Targets::Epics(v) => v.iter().map(|p| p.display().to_string()).collect(),
            Targets::Spec(s) => panic!("expected epics, got spec {}", s.display()),
        }
    }

    pub(crate) fn err_of(r: Result<Targets, CpmError>) -> CpmError {
        match r {
            Ok(t) => panic!("expected an error, got {t:?}"),
            Err(e) => e,
        }
    }

    pub(crate) fn set_mtime(path: &Path, secs: u64) -> TestResult {
        let f = fs::OpenOptions::new().write(true).open(path)?;
        f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))?;
        Ok(())
    }
}
