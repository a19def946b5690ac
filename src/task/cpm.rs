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
//! - the roll-up's records: `SUMMARY` (spec scope only, tab-separated
//!   `SUMMARY scope requirements untraced delivered in-progress`) and the unverified `ROW` /
//!   `CRITERION` records whose tags make them target-only;
//! - the iteration prompt: the skill's template minus what the supervisor now does itself.
//!
//! Nothing here panics on any input; file problems are [`CpmError`]s naming the file.

use crate::state::{IterRecord, last_three_repeat, parse_iter_record};
use std::cmp::Ordering;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

/// Where epic docs live, relative to the repository root.
pub const EPICS_DIR: &str = "docs/epics";
/// Where specs live, relative to the repository root.
pub const SPECS_DIR: &str = "docs/specifications";
/// Where CPM's plans, progress files and the iteration logs live.
pub const PLANS_DIR: &str = "docs/plans";
/// The stop-hook loop's state file; its presence means a stop-hook loop is armed.
pub const STOP_HOOK_STATE: &str = ".claude/ralph-loop.local.md";
/// The roll-up script, relative to a CPM plugin root.
pub const ROLLUP_REL: &str = "hooks/lib/coverage-rollup.sh";
/// The completion word in epic mode.
pub const EPIC_PROMISE: &str = "ALL_EPICS_COMPLETE";
/// The completion word in spec mode.
pub const SPEC_PROMISE: &str = "SPEC_DELIVERED";
/// The `.gitignore` lines the session-state ignore check wants present (skill step 1g).
pub const IGNORE_LINES: [&str; 2] = ["/.claude/ralph-loop.local.md", "/docs/plans/.cpm-*"];
/// The comment written above [`IGNORE_LINES`] when they are appended.
pub const IGNORE_HEADER: &str = "# Session-scoped agent state, not part of the project's history";

/// Statuses that make an epic not runnable: finished (`Complete`, its synonym `Done`) or
/// retired (`Superseded`, `Withdrawn`).
const TERMINAL_STATUSES: [&str; 4] = ["complete", "done", "superseded", "withdrawn"];
/// Config files larger than this are not read for test-runner discovery.
const CONFIG_READ_LIMIT: u64 = 4 * 1024 * 1024;

/// Why a CPM target or document could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CpmError {
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
    pub fn hint(&self) -> Option<String> {
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
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CpmError::NotCpmTarget { .. }
                | CpmError::InvalidRange { .. }
                | CpmError::TwoSpecs { .. }
                | CpmError::SpecWithEpics { .. }
        )
    }

    /// The 1-based file line the error points at, where known.
    pub fn line(&self) -> Option<usize> {
        match self {
            CpmError::NotUtf8 { line, .. } | CpmError::EmptyStatus { line, .. } => Some(*line),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Epic docs
// ---------------------------------------------------------------------------------------

/// One epic doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epic {
    /// Path relative to the repository root, e.g. `docs/epics/23-epic-login.md`.
    pub path: PathBuf,
    /// The leading number of the file name (`23` for `23-epic-*`, `45` for `45-03-epic-*`).
    pub number: Option<u32>,
    /// The `# ` title, else the file stem.
    pub title: String,
    /// The header's `**Status**:` value, markup removed (e.g. `Complete`, `In Progress`).
    pub status: String,
    /// The header's `**Source spec**:` path, when present.
    pub source_spec: Option<String>,
}

impl Epic {
    /// Not Complete, Done, Superseded or Withdrawn (case-insensitive, first word of the status).
    pub fn is_incomplete(&self) -> bool {
        !status_is_terminal(&self.status)
    }
}

/// Whether a status value finishes or retires an epic: its first word is Complete, Done,
/// Superseded or Withdrawn, case-insensitive (`Complete (2026-02-12)` counts; `Not complete`
/// does not).
pub fn status_is_terminal(status: &str) -> bool {
    let word: String = strip_markup(status)
        .chars()
        .take_while(|c| c.is_alphabetic())
        .collect();
    let word = word.to_lowercase();
    TERMINAL_STATUSES.contains(&word.as_str())
}

/// Read and parse one epic doc. `rel` is relative to `root` (an absolute path inside `root`
/// is accepted and stored relative).
pub fn read_epic(root: &Path, rel: &Path) -> Result<Epic, CpmError> {
    let rel = if rel.is_absolute() {
        relative_to_root(root, rel).unwrap_or_else(|| rel.to_path_buf())
    } else {
        rel.to_path_buf()
    };
    let full = root.join(&rel);
    let text = read_text(&full, &rel)?;
    parse_epic(&rel, &text)
}

/// Parse an epic doc's text; `rel` names it in errors and becomes [`Epic::path`].
pub fn parse_epic(rel: &Path, text: &str) -> Result<Epic, CpmError> {
    let file_name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = rel
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut title = None;
    let mut status: Option<(usize, String)> = None;
    let mut source_spec = None;
    let mut fence = Fence::default();
    for (idx, raw) in text.lines().enumerate() {
        let line = if idx == 0 {
            raw.trim_start_matches('\u{feff}')
        } else {
            raw
        };
        if fence.update(line) {
            continue;
        }
        match atx_level(line) {
            Some(1) if title.is_none() => {
                let t = heading_text(line).trim();
                if !t.is_empty() {
                    title = Some(t.to_string());
                }
                continue;
            }
            // The header ends at the first story heading: later Status fields are stories'.
            Some(level) if level >= 2 => break,
            _ => {}
        }
        if status.is_none()
            && let Some(v) = field_value(line, "status")
        {
            status = Some((idx + 1, strip_markup(v)));
        } else if source_spec.is_none()
            && let Some(v) = field_value(line, "source spec")
        {
            source_spec = spec_reference(v);
        }
    }
    let (line, status) = status.ok_or_else(|| CpmError::MissingStatus {
        path: rel.to_path_buf(),
    })?;
    if status.is_empty() {
        return Err(CpmError::EmptyStatus {
            path: rel.to_path_buf(),
            line,
        });
    }
    Ok(Epic {
        path: rel.to_path_buf(),
        number: leading_number(&file_name),
        title: title.unwrap_or(stem),
        status,
        source_spec,
    })
}

/// Every epic doc directly under `docs/epics/`, sorted by file name. A missing directory is
/// an empty list.
pub fn list_epics(root: &Path) -> Result<Vec<Epic>, CpmError> {
    epic_files(root)?
        .iter()
        .map(|rel| read_epic(root, rel))
        .collect()
}

/// The epic docs that are not finished or retired, in file-name order.
pub fn incomplete_epics(root: &Path) -> Result<Vec<Epic>, CpmError> {
    Ok(list_epics(root)?
        .into_iter()
        .filter(Epic::is_incomplete)
        .collect())
}

/// Spec mode: the epics whose `**Source spec**` names `spec`, comparing basenames (as the
/// roll-up does), in file-name order.
pub fn epics_for_spec(root: &Path, spec: &Path) -> Result<Vec<Epic>, CpmError> {
    let Some(want) = spec.file_name() else {
        return Ok(Vec::new());
    };
    Ok(list_epics(root)?
        .into_iter()
        .filter(|e| {
            e.source_spec
                .as_deref()
                .and_then(|s| Path::new(s).file_name())
                .is_some_and(|n| n == want)
        })
        .collect())
}

/// `docs/epics/*-epic-*.md` file paths (relative), sorted by file name.
fn epic_files(root: &Path) -> Result<Vec<PathBuf>, CpmError> {
    let mut names: Vec<String> = list_dir(root, Path::new(EPICS_DIR))?
        .into_iter()
        .filter(|n| is_epic_file_name(n))
        .filter(|n| root.join(EPICS_DIR).join(n).is_file())
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|n| Path::new(EPICS_DIR).join(n))
        .collect())
}

/// `*-epic-*.md`, the skill's glob.
fn is_epic_file_name(name: &str) -> bool {
    name.ends_with(".md")
        && name
            .find("-epic-")
            .is_some_and(|i| i > 0 && i + "-epic-".len() <= name.len() - ".md".len())
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
    let bytes = fs::read(full).map_err(|source| CpmError::Read {
        path: shown.to_path_buf(),
        source,
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

/// Whether `line` opens or closes a fenced code block, tracking state; true while inside one
/// (the fence lines included).
#[derive(Default)]
struct Fence {
    open: Option<(char, usize)>,
}

impl Fence {
    fn update(&mut self, line: &str) -> bool {
        let t = strip_indent(line);
        let Some(c) = t.chars().next().filter(|c| *c == '`' || *c == '~') else {
            return self.open.is_some();
        };
        let run = t.chars().take_while(|x| *x == c).count();
        match self.open {
            None if run >= 3 => {
                self.open = Some((c, run));
                true
            }
            Some((oc, orun)) if oc == c && run >= orun && t[run..].trim().is_empty() => {
                self.open = None;
                true
            }
            _ => self.open.is_some(),
        }
    }
}

/// Up to three leading spaces removed (the CommonMark indent a block may carry).
fn strip_indent(line: &str) -> &str {
    let spaces = line.bytes().take_while(|b| *b == b' ').count();
    if spaces <= 3 { &line[spaces..] } else { line }
}

/// The level of an ATX heading line (`## x` → 2), if it is one.
fn atx_level(line: &str) -> Option<usize> {
    let t = strip_indent(line);
    let hashes = t.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    match t.as_bytes().get(hashes) {
        None | Some(b' ') | Some(b'\t') => Some(hashes),
        _ => None,
    }
}

/// The text of an ATX heading line after its `#`s.
fn heading_text(line: &str) -> &str {
    let t = strip_indent(line);
    t.trim_start_matches('#')
}

/// The value of a `**Name**: value` field (also `**Name:** value`, `__Name__: value`,
/// `Name: value`, behind list markers or `>`), name compared case-insensitively.
fn field_value<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let mut t = line.trim_start();
    loop {
        let before = t;
        for marker in ["- ", "* ", "+ ", "> ", ">"] {
            if let Some(rest) = t.strip_prefix(marker) {
                t = rest.trim_start();
            }
        }
        if before == t {
            break;
        }
    }
    for emph in ["**", "__", ""] {
        let Some(rest) = t.strip_prefix(emph) else {
            continue;
        };
        let Some(head) = rest.get(..name.len()) else {
            continue;
        };
        if !head.eq_ignore_ascii_case(name) {
            continue;
        }
        let rest = &rest[name.len()..];
        // `**Name**:` or `**Name:**`
        let value = if let Some(v) = rest.strip_prefix(emph).and_then(|r| r.strip_prefix(':')) {
            v
        } else if let Some(v) = rest.strip_prefix(':').and_then(|r| r.strip_prefix(emph)) {
            v
        } else {
            continue;
        };
        return Some(value.trim());
    }
    None
}

/// Emphasis and code markers removed from both ends, trimmed.
fn strip_markup(value: &str) -> String {
    let mut v = value.trim();
    loop {
        let before = v;
        for m in ["**", "__", "*", "_", "`"] {
            if let Some(inner) = v.strip_prefix(m).and_then(|x| x.strip_suffix(m)) {
                v = inner.trim();
            }
        }
        if let Some(inner) = v.strip_prefix("**") {
            v = inner.trim();
        }
        if let Some(inner) = v.strip_suffix("**") {
            v = inner.trim();
        }
        if before == v {
            break;
        }
    }
    v.to_string()
}

/// The path a `**Source spec**:` value names: a Markdown link's target, else the first
/// `.md` token, else the first token; code and angle-bracket markup removed.
fn spec_reference(value: &str) -> Option<String> {
    let value = value.trim();
    if let Some(open) = value.find("](")
        && let Some(close) = value[open + 2..].find(')')
    {
        let target = value[open + 2..open + 2 + close].trim();
        let target = target.split_whitespace().next().unwrap_or("");
        let target = target.trim_matches(|c| c == '<' || c == '>');
        if !target.is_empty() {
            return Some(target.to_string());
        }
    }
    let clean = |t: &str| {
        t.trim_matches(|c: char| matches!(c, '`' | '<' | '>' | '*' | '_' | '(' | ')' | ',' | ';'))
            .to_string()
    };
    let tokens: Vec<String> = value.split_whitespace().map(clean).collect();
    tokens
        .iter()
        .find(|t| t.ends_with(".md"))
        .or_else(|| tokens.iter().find(|t| !t.is_empty()))
        .cloned()
}

// ---------------------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------------------

/// What a CPM-mode `ralph run` works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// Epic mode: epic doc paths (relative to the root), in file-name order. Maybe empty
    /// (auto-discovery found nothing runnable).
    Epics(Vec<PathBuf>),
    /// Spec mode: the spec path, relative to the root.
    Spec(PathBuf),
}

impl Targets {
    /// True in spec mode.
    pub fn is_spec(&self) -> bool {
        matches!(self, Targets::Spec(_))
    }
}

/// One classified argument.
enum Arg<'a> {
    Range(&'a str, u32, u32),
    Epic(&'a str, PathBuf),
    Spec(&'a str, PathBuf),
}

/// Resolve `ralph run` targets in CPM form.
///
/// Arguments are epic paths (globs in the file name are expanded), ranges `NN..MM` (the
/// existing epic files whose leading number is in range, inclusive), or exactly one spec path
/// under `docs/specifications/`. Relative paths are taken against `root`; absolute ones must
/// lie inside it. Usage errors (a non-target, a malformed or reversed range, two specs, a
/// spec mixed with epics) are reported before anything is read, naming the arguments as
/// typed. Epic lists are deduplicated and sorted by file name; an explicitly named epic is
/// kept whatever its status. No arguments: auto-discovery, the incomplete epics (maybe none).
pub fn resolve_targets(root: &Path, args: &[String]) -> Result<Targets, CpmError> {
    if args.is_empty() {
        return Ok(Targets::Epics(
            incomplete_epics(root)?
                .into_iter()
                .map(|e| e.path)
                .collect(),
        ));
    }
    let mut classified = Vec::with_capacity(args.len());
    for arg in args {
        classified.push(classify(root, arg)?);
    }
    let specs: Vec<&Arg> = classified
        .iter()
        .filter(|a| matches!(a, Arg::Spec(..)))
        .collect();
    if let [Arg::Spec(first, _), Arg::Spec(second, _), ..] = specs.as_slice() {
        return Err(CpmError::TwoSpecs {
            first: (*first).to_string(),
            second: (*second).to_string(),
        });
    }
    if let Some(Arg::Spec(spec, path)) = specs.first() {
        let epics: Vec<String> = classified
            .iter()
            .filter_map(|a| match a {
                Arg::Range(s, ..) | Arg::Epic(s, _) => Some((*s).to_string()),
                Arg::Spec(..) => None,
            })
            .collect();
        if !epics.is_empty() {
            return Err(CpmError::SpecWithEpics {
                spec: (*spec).to_string(),
                epics,
            });
        }
        let full = root.join(path);
        if full.is_dir() {
            return Err(CpmError::TargetIsDirectory { path: path.clone() });
        }
        if !full.is_file() {
            return Err(CpmError::SpecNotFound { path: path.clone() });
        }
        return Ok(Targets::Spec(path.clone()));
    }

    let mut out: Vec<PathBuf> = Vec::new();
    for arg in &classified {
        match arg {
            Arg::Range(text, lo, hi) => {
                let matched: Vec<PathBuf> = epic_files(root)?
                    .into_iter()
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .and_then(leading_number)
                            .is_some_and(|n| (*lo..=*hi).contains(&n))
                    })
                    .collect();
                if matched.is_empty() {
                    return Err(CpmError::EmptyRange {
                        arg: (*text).to_string(),
                    });
                }
                out.extend(matched);
            }
            Arg::Epic(text, path) => out.extend(resolve_epic_path(root, text, path)?),
            Arg::Spec(..) => {}
        }
    }
    sort_by_file_name(&mut out);
    out.dedup();
    Ok(Targets::Epics(out))
}

fn sort_by_file_name(paths: &mut [PathBuf]) {
    paths.sort_by(|a, b| {
        a.file_name()
            .cmp(&b.file_name())
            .then_with(|| a.as_os_str().cmp(b.as_os_str()))
    });
}

fn classify<'a>(root: &Path, arg: &'a str) -> Result<Arg<'a>, CpmError> {
    if let Some(range) = parse_range(arg)? {
        return Ok(Arg::Range(arg, range.0, range.1));
    }
    let not_target = || CpmError::NotCpmTarget {
        arg: arg.to_string(),
    };
    if !is_cpm_target(arg) {
        return Err(not_target());
    }
    let rel = relative_to_root(root, Path::new(arg)).ok_or_else(not_target)?;
    if rel.starts_with(SPECS_DIR) {
        Ok(Arg::Spec(arg, rel))
    } else if rel.starts_with(EPICS_DIR) {
        Ok(Arg::Epic(arg, rel))
    } else {
        Err(not_target())
    }
}

/// `Some((lo, hi))` for `NN..MM`; `None` when the argument is not range-shaped (it does not
/// start with a digit or has no `..`); an error for a range-shaped argument that is malformed
/// or reversed.
fn parse_range(arg: &str) -> Result<Option<(u32, u32)>, CpmError> {
    let a = arg.trim();
    if !a.starts_with(|c: char| c.is_ascii_digit()) || !a.contains("..") {
        return Ok(None);
    }
    let invalid = |reason: &str| CpmError::InvalidRange {
        arg: arg.to_string(),
        reason: reason.to_string(),
    };
    let Some((lo, hi)) = a.split_once("..") else {
        return Ok(None);
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(lo) || !digits(hi) {
        return Err(invalid("both ends must be epic numbers"));
    }
    let (Ok(lo), Ok(hi)) = (lo.parse::<u32>(), hi.parse::<u32>()) else {
        return Err(invalid("number too large"));
    };
    if lo > hi {
        return Err(invalid(&format!("reversed; did you mean {hi}..{lo}?")));
    }
    Ok(Some((lo, hi)))
}

fn resolve_epic_path(root: &Path, arg: &str, rel: &Path) -> Result<Vec<PathBuf>, CpmError> {
    let name = rel
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    if name.contains(['*', '?']) {
        let parent = rel.parent().unwrap_or(Path::new(EPICS_DIR));
        let mut found: Vec<PathBuf> = list_dir(root, parent)?
            .into_iter()
            .filter(|n| is_epic_file_name(n) && wildcard_match(&name, n))
            .map(|n| parent.join(n))
            .filter(|p| root.join(p).is_file())
            .collect();
        if found.is_empty() {
            return Err(CpmError::GlobNoMatch {
                arg: arg.to_string(),
            });
        }
        sort_by_file_name(&mut found);
        return Ok(found);
    }
    let full = root.join(rel);
    if full.is_dir() {
        return Err(CpmError::TargetIsDirectory {
            path: rel.to_path_buf(),
        });
    }
    if !full.is_file() {
        return Err(CpmError::EpicNotFound {
            path: rel.to_path_buf(),
        });
    }
    if !is_epic_file_name(&name) {
        return Err(CpmError::NotAnEpic {
            path: rel.to_path_buf(),
        });
    }
    Ok(vec![rel.to_path_buf()])
}

/// `*` and `?` wildcards over a whole file name.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi.min(p.len())..].iter().all(|c| *c == '*')
}

/// True when an argument looks like a CPM target: a path under `docs/epics/` or
/// `docs/specifications/` (relative, `./`-prefixed or absolute), or a `NN..MM` range.
pub fn is_cpm_target(arg: &str) -> bool {
    let a = arg.trim();
    if let Some((lo, hi)) = a.split_once("..") {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(lo) && digits(hi) {
            return true;
        }
    }
    let Some(norm) = normalize(Path::new(a)) else {
        return false;
    };
    let parts: Vec<&str> = norm
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let under = |i: usize| {
        parts.get(i) == Some(&"docs")
            && matches!(parts.get(i + 1), Some(&"epics") | Some(&"specifications"))
    };
    if norm.is_absolute() {
        (0..parts.len()).any(under)
    } else {
        under(0)
    }
}

/// Lexical normalisation: `.` dropped, `..` applied; `None` when `..` climbs above the start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return None;
                }
                out.pop();
                depth -= 1;
            }
            Component::Normal(s) => {
                out.push(s);
                depth += 1;
            }
        }
    }
    Some(out)
}

/// `path` relative to `root`: relative paths are normalised; absolute paths must be inside
/// `root` (as given or canonicalised).
fn relative_to_root(root: &Path, path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return normalize(path);
    }
    let norm = normalize(path)?;
    let mut bases = vec![normalize(root)?];
    if let Ok(c) = root.canonicalize() {
        bases.push(c);
    }
    for base in &bases {
        if let Ok(r) = norm.strip_prefix(base) {
            return Some(r.to_path_buf());
        }
    }
    // The file may sit behind a symlinked root (e.g. /tmp → /private/tmp).
    let canon = path
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .zip(path.file_name())
        .map(|(p, n)| p.join(n))?;
    bases
        .iter()
        .find_map(|b| canon.strip_prefix(b).ok().map(Path::to_path_buf))
}

/// The auto-discovery message when nothing is runnable: the stop line, then one line per spec
/// under `docs/specifications/` (`[0-9]*-spec-*.md`, file-name order) with the command that
/// runs it. No trailing newline.
pub fn nothing_to_run_message(root: &Path) -> Result<String, CpmError> {
    let mut specs: Vec<String> = list_dir(root, Path::new(SPECS_DIR))?
        .into_iter()
        .filter(|n| {
            n.starts_with(|c: char| c.is_ascii_digit())
                && n.contains("-spec-")
                && n.ends_with(".md")
                && root.join(SPECS_DIR).join(n).is_file()
        })
        .collect();
    specs.sort();
    let mut msg = String::from("No incomplete epics found. Nothing to run.");
    if !specs.is_empty() {
        msg.push_str("\nSpec mode runs a spec from scratch; to run one:");
        for name in specs {
            let _ = write!(
                msg,
                "\n  ralph run {}",
                shell_quote(&format!("{SPECS_DIR}/{name}"))
            );
        }
    }
    Ok(msg)
}

/// Quote a word for a shell command line the user will type, only when it needs it.
fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ':' | ',')
        });
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

// ---------------------------------------------------------------------------------------
// [plan] stripping and task budget
// ---------------------------------------------------------------------------------------

const PLAN_TAG: &str = "[plan]";

struct HeadingInfo {
    level: usize,
    /// `Story N` from the heading text.
    own_number: Option<String>,
    /// `**Story**: N` from the lines of its section.
    field_number: Option<String>,
}

/// Strip `[plan]` from `##` and `###` headings (outside fenced code) so `/cpm:do` plans
/// inline instead of stopping at an interactive plan-mode gate.
///
/// Each tag is removed with the whitespace it leaves behind (`## Set up OAuth [plan]` →
/// `## Set up OAuth`); every other byte, line endings included, is unchanged. One log line
/// per changed heading: `Stripped [plan] from Story {N}: {heading}`, where `{heading}` is the
/// heading text after stripping (without a leading `Story N:` that `N` was read from) and
/// `N` is, in order: the `Story N` the heading text opens with; the `**Story**: N` field in
/// the heading's section; for a `###` heading, the number of the `##` story it sits in; else
/// `?`.
pub fn strip_plan_markers(text: &str) -> (String, Vec<String>) {
    if !text.contains(PLAN_TAG) {
        return (text.to_string(), Vec::new());
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // Pass 1: headings (outside fences) and their story numbers.
    let mut headings: Vec<Option<HeadingInfo>> = Vec::with_capacity(lines.len());
    let mut fence = Fence::default();
    let mut current: Option<usize> = None;
    for (idx, raw) in lines.iter().enumerate() {
        let (content, _) = split_eol(raw);
        let content = if idx == 0 {
            content.trim_start_matches('\u{feff}')
        } else {
            content
        };
        if fence.update(content) {
            headings.push(None);
            continue;
        }
        if let Some(level) = atx_level(content) {
            let own_number = story_prefix(heading_text(content).trim()).map(|(n, _)| n);
            headings.push(Some(HeadingInfo {
                level,
                own_number,
                field_number: None,
            }));
            current = Some(idx);
            continue;
        }
        headings.push(None);
        if let Some(h) = current
            && let Some(Some(info)) = headings.get_mut(h)
            && info.field_number.is_none()
            && let Some(v) = field_value(content, "story")
        {
            let v = strip_markup(v);
            if let Some(tok) = v.split_whitespace().next() {
                info.field_number = Some(tok.to_string());
            }
        }
    }
    // Pass 2: rewrite.
    let mut out = String::with_capacity(text.len());
    let mut logs = Vec::new();
    let mut parent_story: Option<String> = None;
    for (idx, raw) in lines.iter().enumerate() {
        let info = headings.get(idx).and_then(Option::as_ref);
        let Some(info) = info else {
            out.push_str(raw);
            continue;
        };
        let number = info
            .own_number
            .clone()
            .or_else(|| info.field_number.clone());
        if info.level <= 2 {
            parent_story = number.clone();
        }
        let (content, eol) = split_eol(raw);
        if !(2..=3).contains(&info.level) || !content.contains(PLAN_TAG) {
            out.push_str(raw);
            continue;
        }
        let (bom, body) = match content.strip_prefix('\u{feff}') {
            Some(rest) if idx == 0 => ("\u{feff}", rest),
            _ => ("", content),
        };
        let stripped = remove_plan_tag(body);
        out.push_str(bom);
        out.push_str(&stripped);
        out.push_str(eol);
        let n = number
            .or_else(|| {
                if info.level == 3 {
                    parent_story.clone()
                } else {
                    None
                }
            })
            .unwrap_or_else(|| "?".to_string());
        let text = heading_text(&stripped).trim();
        let shown = match (&info.own_number, story_prefix(text)) {
            (Some(_), Some((_, rest))) if !rest.is_empty() => rest,
            _ => text,
        };
        logs.push(format!("Stripped [plan] from Story {n}: {shown}"));
    }
    (out, logs)
}

/// A line's content and its line ending (`\r\n`, `\n` or nothing).
fn split_eol(line: &str) -> (&str, &str) {
    if let Some(c) = line.strip_suffix("\r\n") {
        (c, "\r\n")
    } else if let Some(c) = line.strip_suffix('\n') {
        (c, "\n")
    } else {
        (line, "")
    }
}

/// Every `[plan]` removed with the whitespace it would leave; trailing whitespace trimmed.
fn remove_plan_tag(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(pos) = rest.find(PLAN_TAG) {
        let before = &rest[..pos];
        let after = &rest[pos + PLAN_TAG.len()..];
        if after.is_empty() || after.starts_with([' ', '\t']) {
            out.push_str(before.trim_end_matches([' ', '\t']));
        } else {
            out.push_str(before);
        }
        rest = after;
    }
    out.push_str(rest);
    let kept = out.trim_end_matches([' ', '\t']).len();
    out.truncate(kept);
    out
}

/// `Story 12: Login` → `("12", "Login")`; the separator after the number (`:`, `-`, `–`,
/// `—`, `.`) is optional.
fn story_prefix(text: &str) -> Option<(String, &str)> {
    let head = text.get(..5)?;
    if !head.eq_ignore_ascii_case("story") {
        return None;
    }
    let rest = &text[5..];
    let after_ws = rest.trim_start();
    if after_ws.len() == rest.len() {
        return None;
    }
    let digits: String = after_ws.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return None;
    }
    let tail = &after_ws[digits.len()..];
    if tail.starts_with(|c: char| c.is_alphanumeric()) {
        return None;
    }
    let tail = tail.trim_start();
    let tail = tail
        .strip_prefix([':', '-', '–', '—', '.'])
        .unwrap_or(tail)
        .trim_start();
    Some((digits, tail))
}

/// The `###` (task) headings outside fenced code: the skill's task-budget count.
pub fn count_tasks(text: &str) -> u32 {
    let mut fence = Fence::default();
    let mut n = 0u32;
    for line in text.lines() {
        if fence.update(line) {
            continue;
        }
        if atx_level(line) == Some(3) {
            n = n.saturating_add(1);
        }
    }
    n
}

/// The task budget for a set of epic docs: their `###` task headings, summed.
pub fn task_budget(root: &Path, epics: &[PathBuf]) -> Result<u32, CpmError> {
    let mut total = 0u32;
    for rel in epics {
        total = total.saturating_add(count_tasks(&read_text(&root.join(rel), rel)?));
    }
    Ok(total)
}

// ---------------------------------------------------------------------------------------
// Test-runner discovery
// ---------------------------------------------------------------------------------------

/// One `ENVn` entry of a spec's Non-Functional Requirements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvEntry {
    /// The label, e.g. `ENV2`.
    pub label: String,
    /// The text after the label and its separator.
    pub text: String,
}

/// The `ENVn` entries (not the `ENVXn` restrictions) of a spec's `## Non-Functional
/// Requirements` section: bullets `- **ENV1** — text` (or `- **ENV1 — Title.** text`),
/// continuation lines included, fenced code skipped.
pub fn spec_env_entries(spec_text: &str) -> Vec<EnvEntry> {
    let mut out: Vec<EnvEntry> = Vec::new();
    let mut in_nfr = false;
    let mut fence = Fence::default();
    let mut open = false;
    for line in spec_text.lines() {
        if fence.update(line) {
            open = false;
            continue;
        }
        if atx_level(line) == Some(2) {
            in_nfr = heading_text(line)
                .trim()
                .to_ascii_lowercase()
                .starts_with("non-functional requirements");
            open = false;
            continue;
        }
        if !in_nfr {
            continue;
        }
        if atx_level(line).is_some() || line.trim().is_empty() {
            open = false;
            continue;
        }
        let trimmed = line.trim_start();
        let bullet = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
            .or_else(|| trimmed.strip_prefix("+ "));
        match bullet {
            Some(body) if line.len() - trimmed.len() < 2 => {
                open = false;
                // Remove the opening bold pair only, as the roll-up's parser does.
                let body = body.trim_start();
                let body = match body.strip_prefix("**") {
                    Some(rest) => match rest.find("**") {
                        Some(close) => format!("{}{}", &rest[..close], &rest[close + 2..]),
                        None => rest.to_string(),
                    },
                    None => body.to_string(),
                };
                let letters: String = body
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase())
                    .collect();
                let digits: String = body[letters.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if letters != "ENV" || digits.is_empty() {
                    continue;
                }
                let label = format!("{letters}{digits}");
                let text = body[label.len()..].trim_start();
                let text = text
                    .strip_prefix(['—', '–', '-', ':'])
                    .unwrap_or(text)
                    .trim();
                out.push(EnvEntry {
                    label,
                    text: text.to_string(),
                });
                open = true;
            }
            _ if open => {
                if let Some(last) = out.last_mut() {
                    last.text.push(' ');
                    last.text.push_str(line.trim());
                }
            }
            _ => {}
        }
    }
    out
}

const RUNNER_WORDS: [&str; 14] = [
    "runner",
    "pest",
    "phpunit",
    "pytest",
    "jest",
    "vitest",
    "mocha",
    "rspec",
    "junit",
    "cargo test",
    "go test",
    "nextest",
    "minitest",
    "unittest",
];

const COMMAND_WORDS: [&str; 33] = [
    "npm", "npx", "pnpm", "yarn", "bun", "deno", "node", "composer", "php", "make", "cargo", "go",
    "python", "python3", "pytest", "jest", "vitest", "mocha", "phpunit", "pest", "rspec", "bundle",
    "rake", "dotnet", "mvn", "gradle", "tox", "nox", "uv", "poetry", "artisan", "ctest", "just",
];

/// How strongly an ENV entry names test tooling: 2 for a runner, 1 for other test tooling
/// (a browser driver, a test database), 0 for none.
fn test_tooling_score(text: &str) -> u8 {
    let lower = text.to_lowercase();
    if RUNNER_WORDS.iter().any(|w| lower.contains(w)) {
        2
    } else if lower.contains("test") || lower.contains("playwright") || lower.contains("cypress") {
        1
    } else {
        0
    }
}

/// The first code span that reads as a runnable command (a known launcher or runner, or a
/// relative executable path).
fn command_in(text: &str) -> Option<String> {
    let mut parts = text.split('`');
    parts.next();
    while let Some(span) = parts.next() {
        // Every other piece is inside backticks; an unclosed span is ignored.
        let closed = parts.next().is_some();
        let span = span.trim();
        if !closed || span.is_empty() {
            if !closed {
                break;
            }
            continue;
        }
        let first = span.split_whitespace().next().unwrap_or("");
        let base = first.rsplit('/').next().unwrap_or(first);
        let path_like = ["./", "vendor/bin/", "bin/", "node_modules/.bin/"]
            .iter()
            .any(|p| first.starts_with(p));
        if path_like || COMMAND_WORDS.contains(&first) || COMMAND_WORDS.contains(&base) {
            return Some(span.to_string());
        }
    }
    None
}

/// Test-runner discovery (skill step 1d): in spec mode the spec's `ENVn` entries first, then
/// the project's config files — `composer.json` `scripts.test` (`composer test`),
/// `package.json` `scripts.test` (`npm test`; npm's placeholder script skipped), a `Makefile`
/// `test:` target (`make test`), `pyproject.toml` mentioning pytest (`pytest`), `Cargo.toml`
/// (`cargo test`). Returns the command and where it came from.
///
/// A spec entry that names a command (a code span such as `` `vendor/bin/pest` ``) wins. One
/// that names only a tool ("Pest 3 or later") is not runnable: a config-file command then
/// completes it (the source says so), and without one the tool's text is returned with a
/// source saying it names a tool that must be installed first.
pub fn discover_test_runner(root: &Path, spec: Option<&Path>) -> Option<(String, String)> {
    let mut spec_tool: Option<(String, String)> = None;
    if let Some(spec) = spec {
        let full = if spec.is_absolute() {
            spec.to_path_buf()
        } else {
            root.join(spec)
        };
        if let Some(text) = read_limited(&full) {
            let shown = spec.display().to_string();
            let mut best: Option<(u8, EnvEntry)> = None;
            for entry in spec_env_entries(&text) {
                let score = test_tooling_score(&entry.text);
                if score == 0 {
                    continue;
                }
                if let Some(cmd) = command_in(&entry.text)
                    && score == 2
                {
                    return Some((cmd, format!("{shown} {}", entry.label)));
                }
                if best.as_ref().is_none_or(|(s, _)| score > *s) {
                    best = Some((score, entry));
                }
            }
            if let Some((_, entry)) = best {
                if let Some(cmd) = command_in(&entry.text) {
                    return Some((cmd, format!("{shown} {}", entry.label)));
                }
                spec_tool = Some((tool_text(&entry.text), format!("{shown} {}", entry.label)));
            }
        }
    }
    match (config_test_runner(root), spec_tool) {
        (Some((cmd, src)), Some((tool, spec_src))) => {
            Some((cmd, format!("{src} (completes {spec_src}: {tool})")))
        }
        (Some(found), None) => Some(found),
        (None, Some((tool, spec_src))) => Some((
            tool,
            format!("{spec_src} (names a tool, not a command: install it before tests can run)"),
        )),
        (None, None) => None,
    }
}

/// An ENV entry's text as a short tool description.
fn tool_text(text: &str) -> String {
    let t: String = text.replace("**", "").trim().chars().take(200).collect();
    t.trim_end_matches(['.', ' ']).to_string()
}

fn config_test_runner(root: &Path) -> Option<(String, String)> {
    let json_test_script = |name: &str| -> Option<String> {
        let text = read_limited(&root.join(name))?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        match value.get("scripts")?.get("test")? {
            serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
            serde_json::Value::Array(a) if !a.is_empty() => Some(
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(" && "),
            ),
            _ => None,
        }
    };
    if let Some(script) = json_test_script("composer.json") {
        return Some((
            "composer test".to_string(),
            format!("composer.json scripts.test ({script})"),
        ));
    }
    if let Some(script) = json_test_script("package.json")
        && !script.contains("no test specified")
    {
        return Some((
            "npm test".to_string(),
            format!("package.json scripts.test ({script})"),
        ));
    }
    for name in ["Makefile", "makefile", "GNUmakefile"] {
        if let Some(text) = read_limited(&root.join(name))
            && makefile_has_test_target(&text)
        {
            return Some(("make test".to_string(), format!("{name} test target")));
        }
    }
    if let Some(text) = read_limited(&root.join("pyproject.toml"))
        && text
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("pytest"))
    {
        return Some(("pytest".to_string(), "pyproject.toml (pytest)".to_string()));
    }
    if root.join("Cargo.toml").is_file() {
        return Some(("cargo test".to_string(), "Cargo.toml".to_string()));
    }
    None
}

fn makefile_has_test_target(text: &str) -> bool {
    text.lines().any(|line| {
        if line.starts_with([' ', '\t', '#', '.']) {
            return false;
        }
        let Some((targets, rest)) = line.split_once(':') else {
            return false;
        };
        if rest.starts_with('=') || targets.contains('=') {
            return false;
        }
        targets.split_whitespace().any(|t| t == "test")
    })
}

/// A small text file, or `None` (missing, too large, unreadable, not UTF-8).
fn read_limited(path: &Path) -> Option<String> {
    let file = fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(CONFIG_READ_LIMIT + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > CONFIG_READ_LIMIT {
        return None;
    }
    String::from_utf8(bytes).ok()
}

// ---------------------------------------------------------------------------------------
// Earlier runs (ITER logs)
// ---------------------------------------------------------------------------------------

/// What an earlier run's iteration log shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlierRun {
    /// The log, relative to the root (`docs/plans/.cpm-ralph-log-{id}.md`).
    pub path: PathBuf,
    /// How many `ITER` records it holds.
    pub iterations: usize,
    /// The last `ITER` line, verbatim (trimmed).
    pub last_record: Option<String>,
    /// The last record, parsed.
    pub last: Option<IterRecord>,
    /// The last three records repeat: the run stalled rather than finished.
    pub repeats: bool,
    /// The log's modification time, when known.
    pub modified: Option<SystemTime>,
}

impl EarlierRun {
    /// One human line: path, iterations, last record, and the stall when there is one.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}: {} iteration{}",
            self.path.display(),
            self.iterations,
            if self.iterations == 1 { "" } else { "s" }
        );
        if let Some(last) = &self.last {
            let _ = write!(
                s,
                "; last: {} (exit {}) at {}, tree {}",
                last.figures, last.exit, last.commit, last.fingerprint
            );
        }
        if self.repeats {
            s.push_str("; its last three records repeat -- it stalled rather than finished");
        }
        s
    }
}

/// The earlier runs' iteration logs, `docs/plans/.cpm-ralph-log-*.md`, newest first (by
/// modification time, then name). Lines are read one at a time, so a huge log costs no
/// memory; lines that are not `ITER` records are ignored.
pub fn earlier_runs(root: &Path) -> Result<Vec<EarlierRun>, CpmError> {
    let plans = Path::new(PLANS_DIR);
    let mut runs = Vec::new();
    for name in list_dir(root, plans)? {
        if !(name.starts_with(".cpm-ralph-log-") && name.ends_with(".md")) {
            continue;
        }
        let rel = plans.join(&name);
        let full = root.join(&rel);
        if !full.is_file() {
            continue;
        }
        let read_err = |source| CpmError::Read {
            path: rel.clone(),
            source,
        };
        let file = fs::File::open(&full).map_err(read_err)?;
        let modified = file.metadata().ok().and_then(|m| m.modified().ok());
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut iterations = 0usize;
        let mut tail: Vec<IterRecord> = Vec::with_capacity(4);
        let mut last_record = None;
        loop {
            buf.clear();
            let read = reader
                .read_until(b'\n', &mut buf)
                .map_err(|source| CpmError::Read {
                    path: rel.clone(),
                    source,
                })?;
            if read == 0 {
                break;
            }
            let line = String::from_utf8_lossy(&buf);
            if let Some(rec) = parse_iter_record(&line) {
                iterations += 1;
                last_record = Some(line.trim().to_string());
                if tail.len() == 3 {
                    tail.remove(0);
                }
                tail.push(rec);
            }
        }
        runs.push(EarlierRun {
            path: rel,
            iterations,
            last_record,
            repeats: last_three_repeat(&tail),
            last: tail.pop(),
            modified,
        });
    }
    runs.sort_by(|a, b| {
        b.modified
            .cmp(&a.modified)
            .then_with(|| b.path.cmp(&a.path))
    });
    Ok(runs)
}

/// The CPM iteration-log path for a run: `docs/plans/.cpm-ralph-log-{run_id}.md` (characters
/// other than letters, digits, `.`, `_` and `-` in the id become `_`, so it stays one file
/// name).
pub fn log_path(run_id: &str) -> PathBuf {
    let id: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    Path::new(PLANS_DIR).join(format!(".cpm-ralph-log-{id}.md"))
}

// ---------------------------------------------------------------------------------------
// The roll-up
// ---------------------------------------------------------------------------------------

/// Resolve the roll-up script to an absolute path: `explicit` (`--rollup`) when given — and
/// nothing else then, since falling back would run a script the user did not name; else
/// `{plugin_root}/hooks/lib/coverage-rollup.sh` (`$CLAUDE_PLUGIN_ROOT`; empty means unset);
/// else the Claude plugin cache, `{home}/.claude/plugins/cache/{marketplace}/{plugin}/{version}/`,
/// taking the newest version that has the script. `None` when no candidate is a file.
pub fn resolve_rollup(
    explicit: Option<&Path>,
    plugin_root: Option<&Path>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| absolute(p));
    }
    if let Some(r) = plugin_root.filter(|r| !r.as_os_str().is_empty()) {
        let p = r.join(ROLLUP_REL);
        if p.is_file() {
            return Some(absolute(&p));
        }
    }
    let home = home.filter(|h| !h.as_os_str().is_empty())?;
    newest_cached_rollup(&home.join(".claude/plugins/cache")).map(|p| absolute(&p))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

/// Candidates `cache/{marketplace}/{plugin}/{version}/hooks/lib/coverage-rollup.sh` (and the
/// unversioned `cache/{marketplace}/{plugin}/hooks/lib/...`), best version first.
fn newest_cached_rollup(cache: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<(VersionKey, PathBuf)> = Vec::new();
    for market in subdirs(cache) {
        for plugin in subdirs(&market) {
            let direct = plugin.join(ROLLUP_REL);
            if direct.is_file() {
                candidates.push((VersionKey::of(None, &plugin), direct));
            }
            for version in subdirs(&plugin) {
                let script = version.join(ROLLUP_REL);
                if script.is_file() {
                    let name = version
                        .file_name()
                        .and_then(|n| n.to_str())
                        .map(str::to_string);
                    candidates.push((VersionKey::of(name.as_deref(), &version), script));
                }
            }
        }
    }
    candidates
        .into_iter()
        .max_by(|(ka, pa), (kb, pb)| ka.compare(kb).then_with(|| pb.cmp(pa)))
        .map(|(_, p)| p)
}

/// Orders plugin versions: any parseable dotted version beats an unparseable one (`unknown`,
/// a commit hash); releases beat pre-releases of the same numbers; ties go to the newer
/// directory.
#[derive(Debug)]
struct VersionKey {
    numbers: Option<(Vec<u64>, bool)>,
    modified: Option<SystemTime>,
}

impl VersionKey {
    fn of(name: Option<&str>, dir: &Path) -> VersionKey {
        VersionKey {
            numbers: name.and_then(parse_version),
            modified: fs::metadata(dir).and_then(|m| m.modified()).ok(),
        }
    }
}

impl VersionKey {
    fn compare(&self, other: &Self) -> Ordering {
        let nums = match (&self.numbers, &other.numbers) {
            (Some((a, ra)), Some((b, rb))) => {
                let len = a.len().max(b.len());
                let pad = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
                (0..len)
                    .map(|i| pad(a, i).cmp(&pad(b, i)))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
                    .then(ra.cmp(rb))
            }
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (None, None) => Ordering::Equal,
        };
        nums.then_with(|| self.modified.cmp(&other.modified))
    }
}

/// `1.2.10` → `([1, 2, 10], true)`; `v2.0.0-beta.1` → `([2, 0, 0], false)` (a pre-release).
fn parse_version(name: &str) -> Option<(Vec<u64>, bool)> {
    let name = name.strip_prefix(['v', 'V']).unwrap_or(name);
    // `-` starts a pre-release, `+` only build metadata.
    let (core, release) = match name.find(['-', '+']) {
        Some(i) => (&name[..i], name.as_bytes().get(i) == Some(&b'+')),
        None => (name, true),
    };
    let numbers: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
    numbers.filter(|n| !n.is_empty()).map(|n| (n, release))
}

/// The roll-up argv after an iteration: `{rollup} --epic {paths...} --verdict` (epic mode) or
/// `{rollup} --spec {spec} --verdict` (spec mode). Paths stay relative to the repository
/// root, which the script resolves them against; the caller runs it there.
pub fn rollup_argv(rollup: &Path, targets: &Targets) -> Vec<String> {
    let mut argv = vec![rollup.to_string_lossy().into_owned()];
    match targets {
        Targets::Epics(paths) => {
            argv.push("--epic".to_string());
            argv.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
        }
        Targets::Spec(spec) => {
            argv.push("--spec".to_string());
            argv.push(spec.to_string_lossy().into_owned());
        }
    }
    argv.push("--verdict".to_string());
    argv
}

/// The four counts of a roll-up `SUMMARY` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryCounts {
    /// Requirements counted (excluded ones left out).
    pub requirements: u64,
    /// Requirements no matrix row traces.
    pub untraced: u64,
    /// Requirements whose rows are all verified.
    pub delivered: u64,
    /// Requirements with some rows unverified.
    pub in_progress: u64,
}

/// Parse a `SUMMARY` record: `SUMMARY<TAB>scope<TAB>requirements<TAB>untraced<TAB>delivered<TAB>in-progress`
/// (the scope field may be absent; whitespace separation is accepted too).
pub fn summary_counts(summary: &str) -> Option<SummaryCounts> {
    let mut fields = summary.split_whitespace();
    let first = fields.next()?;
    if first.trim_end_matches(':') != "SUMMARY" {
        return None;
    }
    let rest: Vec<&str> = fields.collect();
    let skip = usize::from(rest.first().is_some_and(|f| f.parse::<u64>().is_err()));
    let nums: Vec<u64> = rest
        .get(skip..)?
        .iter()
        .map_while(|f| f.parse().ok())
        .collect();
    match nums.as_slice() {
        [requirements, untraced, delivered, in_progress, ..] => Some(SummaryCounts {
            requirements: *requirements,
            untraced: *untraced,
            delivered: *delivered,
            in_progress: *in_progress,
        }),
        _ => None,
    }
}

/// The skill's relay of a `SUMMARY` record: `R requirements, U untraced, D delivered, P in
/// progress` (the figures of its `COUNTS:` line), or `None` for anything else.
pub fn counts_text(summary: &str) -> Option<String> {
    summary_counts(summary).map(|c| {
        format!(
            "{} requirements, {} untraced, {} delivered, {} in progress",
            c.requirements, c.untraced, c.delivered, c.in_progress
        )
    })
}

/// The `untraced` count in a summary: the `SUMMARY` record's fourth field, else a named
/// figure (`untraced=N`, `untraced: N`, `N untraced`).
pub fn untraced(summary: &str) -> Option<u64> {
    if let Some(c) = summary_counts(summary) {
        return Some(c.untraced);
    }
    let words: Vec<String> = summary
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '|' | '(' | ')'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    for (i, w) in words.iter().enumerate() {
        if let Some(v) = w
            .strip_prefix("untraced=")
            .or_else(|| w.strip_prefix("untraced:"))
            && let Ok(n) = v.parse()
        {
            return Some(n);
        }
        let next = || words.get(i + 1).and_then(|n| n.parse().ok());
        let prev = || {
            i.checked_sub(1)
                .and_then(|p| words.get(p))
                .and_then(|n| n.parse().ok())
        };
        // `untraced: N` reads forwards; a bare `untraced` prefers `N untraced`.
        let found = match w.as_str() {
            "untraced:" | "untraced=" => next(),
            "untraced" => prev().or_else(next),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The labels of the rows a verdict exit 5 is about: the roll-up's unverified `ROW` and
/// `CRITERION` records whose tags withhold them from this environment (`[target]` and no
/// `[unit]`/`[integration]`/`[feature]`; with a criterion tag present both tags must say so,
/// as the roll-up decides). A verdict command that prints no such records may print
/// `TARGET-ONLY: label` (or `TARGET-ONLY<TAB>label`) lines instead; those are returned,
/// except a `TARGET-ONLY: N rows ...` header.
pub fn target_only_rows(stdout: &str) -> Vec<String> {
    fn target_only(tag: &str) -> bool {
        tag.contains("[target]")
            && !["[unit]", "[integration]", "[feature]"]
                .iter()
                .any(|t| tag.contains(t))
    }
    fn withheld(spec_tag: &str, crit_tag: &str) -> bool {
        if crit_tag.is_empty() {
            target_only(spec_tag)
        } else {
            target_only(spec_tag) && target_only(crit_tag)
        }
    }
    let mut rows = Vec::new();
    let mut saw_records = false;
    for line in stdout.lines() {
        let line = line.trim_end_matches('\r');
        let f: Vec<&str> = line.split('\t').collect();
        let field = |i: usize| f.get(i).copied().unwrap_or("");
        let (label, matrix, verified, tag, crit) = match field(0) {
            "ROW" => (field(3), field(1), field(5), field(6), field(7)),
            "CRITERION" => (field(2), field(1), field(4), field(5), field(6)),
            _ => continue,
        };
        saw_records = true;
        if verified != "verified" && withheld(tag, crit) {
            rows.push(if label.trim().is_empty() {
                format!("(unlabelled row in {matrix})")
            } else {
                label.trim().to_string()
            });
        }
    }
    if saw_records {
        return rows;
    }
    for line in stdout.lines() {
        let Some(rest) = line.trim().strip_prefix("TARGET-ONLY") else {
            continue;
        };
        let rest = rest.trim_start_matches([':', '\t', ' ']).trim();
        let header = rest.split_whitespace().nth(1) == Some("rows")
            && rest
                .split_whitespace()
                .next()
                .is_some_and(|n| n.parse::<u64>().is_ok());
        if !rest.is_empty() && !header {
            rows.push(rest.to_string());
        }
    }
    rows
}

/// The completion lines ralph prints: the promise word alone (`ALL_EPICS_COMPLETE` in epic
/// mode, `SPEC_DELIVERED` in spec mode) and, beside it, a `COVERAGE:` line relaying the
/// summary (a `SUMMARY` record as its four counts; anything else verbatim) with the skill's
/// caveat that the marks are aggregation, not verification. Counts never go inside the
/// promise.
pub fn completion_lines(spec_mode: bool, summary: Option<&str>) -> (String, String) {
    let promise = if spec_mode {
        SPEC_PROMISE
    } else {
        EPIC_PROMISE
    };
    let figures = match summary.map(one_line).filter(|s| !s.is_empty()) {
        Some(s) => counts_text(&s).unwrap_or(s),
        None => "the roll-up printed no summary".to_string(),
    };
    let caveat = if spec_mode {
        "aggregation of the marks cpm:do placed on its own work, not independent verification"
    } else {
        "aggregation, not verification, since every mark was placed by cpm:do on its own work, \
         and it counts rows in these epics, not requirements in a spec, so it cannot say a spec \
         is delivered"
    };
    (
        promise.to_string(),
        format!("COVERAGE: {figures} -- {caveat}"),
    )
}

/// Control characters (line breaks included) replaced by spaces, trimmed.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// Session-state ignore check and the stop-hook warning
// ---------------------------------------------------------------------------------------

/// The paths each of [`IGNORE_LINES`] must keep out of commits, checked against the root
/// `.gitignore` (the file the skill's step 1g reads and appends to).
const IGNORE_SAMPLES: [(&str, &[&str]); 2] = [
    (
        "/.claude/ralph-loop.local.md",
        &[".claude/ralph-loop.local.md"],
    ),
    (
        "/docs/plans/.cpm-*",
        &[
            "docs/plans/.cpm-ralph-log-0.md",
            "docs/plans/.cpm-progress.md",
        ],
    ),
];

/// The lines of [`IGNORE_LINES`] whose files the root `.gitignore` does not already ignore
/// (by the line itself or any pattern that covers the same files, e.g. `.claude/`). No
/// `.gitignore` ignores nothing. The caller offers them and applies them with
/// [`apply_ignore_lines`].
pub fn missing_ignore_lines(root: &Path) -> Vec<String> {
    let text = fs::read(root.join(".gitignore"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let patterns = parse_gitignore(&text);
    IGNORE_SAMPLES
        .iter()
        .filter(|(_, samples)| !samples.iter().all(|s| is_ignored(&patterns, s)))
        .map(|(line, _)| (*line).to_string())
        .collect()
}

/// Append `lines` to the root `.gitignore` (created if absent) under the skill's comment,
/// skipping lines already present; nothing to add writes nothing, so it is idempotent.
pub fn apply_ignore_lines(root: &Path, lines: &[String]) -> Result<(), CpmError> {
    let rel = PathBuf::from(".gitignore");
    let path = root.join(&rel);
    if let Some(bad) = lines.iter().find(|l| l.contains(['\n', '\r'])) {
        return Err(CpmError::InvalidIgnoreLine { line: bad.clone() });
    }
    let existing = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => return Err(CpmError::Read { path: rel, source }),
    };
    let text = String::from_utf8_lossy(&existing);
    let present: Vec<&str> = text.lines().map(str::trim).collect();
    let mut todo: Vec<&str> = Vec::new();
    for line in lines.iter().map(|l| l.trim()) {
        if !line.is_empty() && !present.contains(&line) && !todo.contains(&line) {
            todo.push(line);
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    let mut add = String::new();
    if !existing.is_empty() {
        if !existing.ends_with(b"\n") {
            add.push('\n');
        }
        add.push('\n');
    }
    if !present.contains(&IGNORE_HEADER) {
        add.push_str(IGNORE_HEADER);
        add.push('\n');
    }
    for line in todo {
        add.push_str(line);
        add.push('\n');
    }
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|source| CpmError::Write {
            path: rel.clone(),
            source,
        })?;
    file.write_all(add.as_bytes())
        .map_err(|source| CpmError::Write { path: rel, source })
}

/// True when `.claude/ralph-loop.local.md` exists: an armed stop-hook loop would fight
/// ralph's fresh iterations.
pub fn stop_hook_armed(root: &Path) -> bool {
    fs::symlink_metadata(root.join(STOP_HOOK_STATE)).is_ok()
}

/// One parsed `.gitignore` pattern.
struct IgnorePattern {
    negated: bool,
    dir_only: bool,
    anchored: bool,
    glob: Vec<char>,
}

/// The subset of gitignore syntax the check needs: comments, `!`, leading and trailing `/`,
/// `*`, `?` and `**`. Character classes are matched literally.
fn parse_gitignore(text: &str) -> Vec<IgnorePattern> {
    let mut out = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_end_matches(['\r', ' ', '\t']);
        if line.is_empty() || line.starts_with('#') || line.len() > 4096 {
            continue;
        }
        let (negated, line) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line.strip_prefix('\\').unwrap_or(line)),
        };
        let (dir_only, line) = match line.strip_suffix('/') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let anchored = line.contains('/');
        let line = line.strip_prefix('/').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        out.push(IgnorePattern {
            negated,
            dir_only,
            anchored,
            glob: line.chars().collect(),
        });
    }
    out
}

/// Whether `path` (root-relative, `/`-separated, a file) is ignored: a parent directory that
/// is excluded excludes everything under it; otherwise the last matching pattern decides.
fn is_ignored(patterns: &[IgnorePattern], path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    for i in 1..=parts.len() {
        let sub = parts[..i].join("/");
        let is_dir = i < parts.len();
        let base: Vec<char> = parts[i - 1].chars().collect();
        let sub: Vec<char> = sub.chars().collect();
        let mut decision = false;
        for p in patterns {
            if p.dir_only && !is_dir {
                continue;
            }
            let target = if p.anchored { &sub } else { &base };
            if glob_match(&p.glob, target) {
                decision = !p.negated;
            }
        }
        if decision {
            return true;
        }
    }
    false
}

/// Gitignore-style glob over whole strings: `*` and `?` stop at `/`, `**` crosses it, and
/// `**/` may match nothing. Dynamic programming, so no pattern can make it exponential.
fn glob_match(p: &[char], t: &[char]) -> bool {
    // dp[j] = pattern prefix (up to the current i) matches t[..j]
    let mut dp = vec![false; t.len() + 1];
    dp[0] = true;
    let mut i = 0;
    while i < p.len() {
        let mut next = vec![false; t.len() + 1];
        let double = p[i] == '*' && p.get(i + 1) == Some(&'*');
        if double {
            // `**/` matches nothing or any run ending in `/`; `**` any run, slashes included.
            let slash = p.get(i + 2) == Some(&'/');
            let mut any_before = false;
            for j in 0..=t.len() {
                next[j] = if slash {
                    dp[j] || (j > 0 && t[j - 1] == '/' && any_before)
                } else {
                    dp[j] || any_before
                };
                any_before |= dp[j];
            }
            i += if slash { 3 } else { 2 };
        } else if p[i] == '*' {
            let mut reach = false;
            for j in 0..=t.len() {
                if j > 0 && t[j - 1] == '/' {
                    reach = false;
                }
                reach |= dp[j];
                next[j] = reach;
            }
            i += 1;
        } else {
            for j in 1..=t.len() {
                let ok = if p[i] == '?' {
                    t[j - 1] != '/'
                } else {
                    t[j - 1] == p[i]
                };
                next[j] = dp[j - 1] && ok;
            }
            i += 1;
        }
        dp = next;
    }
    dp[t.len()]
}

// ---------------------------------------------------------------------------------------
// The prompt
// ---------------------------------------------------------------------------------------

/// Which step of a run the iteration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Spec mode before any epic exists (verdict exit 4): run `/cpm:epics` on the spec once.
    Planning,
    /// `/cpm:do` on the epics, in file-name order.
    Delivery,
}

/// What the prompt is built from.
#[derive(Debug, Clone)]
pub struct PromptParams<'a> {
    /// The spec in spec mode; `None` in epic mode.
    pub mode_spec: Option<&'a Path>,
    /// The epics to work (epic mode: the resolved targets; spec mode: the spec's epics so far).
    pub epics: &'a [PathBuf],
    /// Planning or delivery. Planning needs a spec: without one the Delivery prompt is built.
    pub phase: Phase,
    /// This iteration's number (1-based).
    pub iteration: u32,
    /// The iteration cap.
    pub max_iterations: u32,
    /// `--story-filter` (e.g. `1-3`, `!4`).
    pub story_filter: Option<&'a str>,
    /// The discovered test runner.
    pub test_runner: Option<&'a str>,
    /// Continuing an earlier run.
    pub resuming: bool,
    /// The task budget (`###` task headings in the target epics).
    pub task_budget: Option<u32>,
}

/// The autonomy overrides, verbatim from the skill's template (which uses `--` for dashes).
const AUTONOMY: &str = "Make all decisions autonomously -- choose the most reasonable option for every AskUserQuestion. Use inline planning for all stories. Task complete means: all tagged criteria ([unit]/[integration]/[feature]) have passing test results, and all [manual] criteria have self-assessment lines in the progress file. A [target] criterion is checkable only against the real deployment target, so never self-assess one and never count it as met -- record it as target-only -- unverified in this environment, name it in the run summary, and let the other criteria decide completion. An unrecognised tag is reported the same way, never self-assessed. A failure (for the 3-strike skip rule) is a test command exit code != 0 after a code change attempt -- tool errors and permission denials are retries, not failures. If acceptance criteria are ambiguous and completion cannot be determined, mark the story Blocked -- criteria ambiguous and continue to the next story. At the do retro consumption gate, do not block -- branch by category: auto-apply safe categories (codebase discoveries, patterns worth reusing), recording Retro applied: {nn} {category} applied (autonomous, safe-category) -- {what it did} and carrying each as context; defer the rest (scope surprises, criteria gaps, complexity underestimates, testing gaps) as Retro applied: {nn} {category} deferred (autonomous run, unreviewed); smooth deliveries informational; never auto-retire. List both applied and deferred observations in the run summary. At the do Change Type Decision gate, do not block and do not pick one of its options -- take do's autonomous branch: inline edit, retro observation, or amend the open epic doc so later stories inherit the fix; never /cpm:pivot. Amend only on a citable contradiction, and record a Pivot deferred breadcrumb for each artefact left behind. Report amendments separately from the deferred observations.";

/// The skill's cpm:epics gate override: only a Planning iteration runs cpm:epics, so only
/// its prompt carries it (a Delivery prompt never names cpm:epics at all).
const EPICS_GATE: &str = " If a cpm:epics gate is reached, do not block -- take cpm:epics' Autonomous Mode branch, and never restate its rules here.";

/// Kept from the template: the agent's own per-story commits give the history its subjects
/// (ralph commits whatever is left after the iteration) and nothing is ever pushed.
const COMMITS: &str = " Commit after each completed story. Keep all commits local.";

/// Build the iteration prompt: the skill's template, assembled for ralph.
///
/// Kept: the opening (`/cpm:do` on the epics in order, or the spec's phase), every autonomy
/// override, the commit rule, and the story-filter, test-runner, task-budget and resume
/// clauses (each only when set). Added: one sentence naming the iteration and that each
/// iteration starts from a fresh context (there is no continuing session any more).
///
/// Removed, because the supervisor now does it itself:
/// - the iteration-log clause (`{log_clause}`: append an `ITER` line, compare the last three,
///   print STALLED and stop) — ralph writes the `ITER` record to [`log_path`] after every
///   iteration from facts it measured (SPEC §5.4) and applies the STALLED rule (§6, exit 4);
///   an agent-written copy would be a second, untrusted writer of the same file;
/// - the completion clause (run `coverage-rollup.sh --epic/--spec ... --verdict`, branch on
///   0/3/5/other, print `COVERAGE:` and the promise) — ralph runs the roll-up after every
///   iteration ([`rollup_argv`]), applies the exit-code contract (§3.3), prints the
///   `COVERAGE:` line and the completion word itself ([`completion_lines`]) and halts on
///   exit 5 with the TARGET-ONLY rows ([`target_only_rows`]); the prompt therefore names
///   neither the roll-up path nor a promise word the agent could echo;
/// - "stop the loop -- delete .claude/ralph-loop.local.md" — there is no stop hook or state
///   file; ralph ends the run;
/// - spec mode's phase predicate (run the roll-up at the start of every iteration, print
///   `COUNTS:`, branch on exit 1/2/4 and the untraced count) — ralph reads the verdict and
///   picks the phase, so a Planning prompt only runs `/cpm:epics` and a Delivery prompt only
///   runs `/cpm:do`; the partial-set report on `untraced > 0` is ralph's halt (exit 9);
/// - spec mode's "strip [plan] tags from the epic docs this run generated" — the caller
///   applies [`strip_plan_markers`] to the spec's epics before the first Delivery iteration,
///   the same pre-flight rule as for epic mode;
/// - the cpm:epics gate override in Delivery prompts — only a Planning iteration runs
///   cpm:epics, and a Delivery prompt must never name it.
pub fn prompt(p: &PromptParams) -> String {
    let phase = match (p.phase, p.mode_spec) {
        (Phase::Planning, Some(_)) => Phase::Planning,
        _ => Phase::Delivery,
    };
    let mut epics: Vec<&PathBuf> = p.epics.iter().collect();
    epics.sort_by(|a, b| {
        a.file_name()
            .cmp(&b.file_name())
            .then_with(|| a.as_os_str().cmp(b.as_os_str()))
    });
    let list = one_line(
        &epics
            .iter()
            .map(|e| e.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    );
    let mut out = format!(
        "This is iteration {} of {} of a run supervised by ralph; every iteration starts with a fresh context, so take where the work stands from the epic docs, their progress files and git, never from memory.\n\n",
        p.iteration, p.max_iterations
    );
    match (phase, p.mode_spec) {
        (Phase::Planning, Some(spec)) => {
            let spec = one_line(&spec.to_string_lossy());
            let _ = write!(
                out,
                "Work spec {spec} to completion. This iteration is the planning phase: no epics exist for this spec yet, so run /cpm:epics on {spec}, taking cpm:epics' Autonomous Mode branch, and end the iteration there. Run it once: never run /cpm:epics twice in one run, since a second run writes a fresh set of epics instead of completing the set already there, and leave every epic doc already on disk exactly as it is."
            );
        }
        (_, Some(spec)) => {
            let spec = one_line(&spec.to_string_lossy());
            let _ = write!(
                out,
                "Work spec {spec} to completion: run /cpm:do on every epic doc naming {spec} as its source spec, in filename order"
            );
            if !list.is_empty() {
                let _ = write!(out, " ({list})");
            }
            out.push_str(", continuing to each next epic automatically.");
        }
        (_, None) => {
            let _ = write!(
                out,
                "Run /cpm:do on epics {} sequentially ({list}). Continue to each next epic automatically.",
                epic_range(p.epics)
            );
        }
    }
    out.push_str("\n\n");
    out.push_str(AUTONOMY);
    if phase == Phase::Planning {
        out.push_str(EPICS_GATE);
    }
    out.push_str(COMMITS);

    let mut clauses: Vec<String> = Vec::new();
    if let Some(f) = p.story_filter.map(one_line).filter(|f| !f.is_empty()) {
        clauses.push(format!(
            "Story filter: {f} -- work only the stories it selects (1-3 is a range, !4 excludes story 4) and leave the others untouched."
        ));
    }
    if let Some(t) = p.test_runner.map(one_line).filter(|t| !t.is_empty()) {
        clauses.push(format!(
            "Test runner: {t} -- use it for the tagged criteria's test results."
        ));
    }
    if let Some(n) = p.task_budget {
        clauses.push(format!(
            "Task budget: {n} tasks, estimate ~2000 tokens per task."
        ));
    }
    if p.resuming {
        clauses.push(if phase == Phase::Planning {
            "Resuming an earlier run: if a cpm:epics progress file for this spec is under docs/plans, continue the generation it records instead of starting over.".to_string()
        } else {
            "Resuming an earlier run: leave finished stories alone and continue from the first story whose Status is not Complete.".to_string()
        });
    }
    if !clauses.is_empty() {
        out.push_str("\n\n");
        out.push_str(&clauses.join("\n"));
    }
    out.push_str("\n\n");
    out.push_str(if phase == Phase::Planning {
        "The supervisor reads the coverage roll-up after this iteration to decide the next phase, so do not run it and do not start /cpm:do in this iteration."
    } else {
        "The supervisor runs the coverage roll-up after every iteration and decides completion from its exit code, so never run it to decide whether you are done and never announce completion yourself; when no further progress is possible, say why and stop."
    });
    out
}

/// The `{epic_range}` label: the epics' numbers, runs collapsed (`23-26`, `23-24, 26`); file
/// stems for epics without a number.
pub fn epic_range(epics: &[PathBuf]) -> String {
    let mut numbers: Vec<u32> = Vec::new();
    let mut others: Vec<String> = Vec::new();
    for e in epics {
        let name = e.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match leading_number(name) {
            Some(n) => numbers.push(n),
            None => others.push(
                e.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
        }
    }
    numbers.sort_unstable();
    numbers.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        let mut end = start;
        while i + 1 < numbers.len() && numbers[i + 1] == end.saturating_add(1) {
            i += 1;
            end = numbers[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.extend(others);
    one_line(&parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::verdict::summary_line;
    use proptest::prelude::*;
    use tempfile::TempDir;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create dirs");
        }
        fs::write(path, text).expect("write fixture");
    }

    /// An epic doc the way cpm:epics writes one.
    fn epic_doc(title: &str, status: &str, spec: Option<&str>) -> String {
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

    fn repo() -> TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn epics_of(t: Targets) -> Vec<String> {
        match t {
            Targets::Epics(v) => v.iter().map(|p| p.display().to_string()).collect(),
            Targets::Spec(s) => panic!("expected epics, got spec {}", s.display()),
        }
    }

    fn err_of(r: Result<Targets, CpmError>) -> CpmError {
        match r {
            Ok(t) => panic!("expected an error, got {t:?}"),
            Err(e) => e,
        }
    }

    // --- epic docs ---------------------------------------------------------------------

    #[test]
    fn status_parsing_variants() -> TestResult {
        let cases = [
            ("**Status**: Complete", "Complete", false),
            ("**Status:** Done", "Done", false),
            ("- **Status**: Superseded", "Superseded", false),
            ("> **status**: withdrawn", "withdrawn", false),
            (
                "Status: Complete (2026-02-12)",
                "Complete (2026-02-12)",
                false,
            ),
            ("**Status**: **Done**", "Done", false),
            ("__Status__: COMPLETE", "COMPLETE", false),
            ("**Status**: In Progress", "In Progress", true),
            ("**Status**: Pending", "Pending", true),
            ("**Status**: Not complete", "Not complete", true),
            ("**Status**: Completed-ish", "Completed-ish", true),
            ("**Status**: Blocked", "Blocked", true),
        ];
        for (line, status, incomplete) in cases {
            let text = format!("# Epic\n\n{line}\n\n## Story\n**Status**: Complete\n");
            let epic = parse_epic(Path::new("docs/epics/01-epic-x.md"), &text)?;
            assert_eq!(epic.status, status, "{line}");
            assert_eq!(epic.is_incomplete(), incomplete, "{line}");
        }
        Ok(())
    }

    #[test]
    fn epic_fields_title_number_and_source_spec() -> TestResult {
        let root = repo();
        write(
            root.path(),
            "docs/epics/45-03-epic-login.md",
            &epic_doc(
                "Login",
                "Pending",
                Some("`docs/specifications/45-spec-login.md`"),
            ),
        );
        let e = read_epic(root.path(), Path::new("docs/epics/45-03-epic-login.md"))?;
        assert_eq!(e.path, PathBuf::from("docs/epics/45-03-epic-login.md"));
        assert_eq!(e.number, Some(45));
        assert_eq!(e.title, "Login");
        assert_eq!(e.status, "Pending");
        assert_eq!(
            e.source_spec.as_deref(),
            Some("docs/specifications/45-spec-login.md")
        );
        // An absolute path inside the root is stored relative.
        let abs = root.path().join("docs/epics/45-03-epic-login.md");
        assert_eq!(read_epic(root.path(), &abs)?.path, e.path);
        // No title: the file stem.
        let e = parse_epic(Path::new("docs/epics/7-epic-x.md"), "**Status**: Pending\n")?;
        assert_eq!((e.title.as_str(), e.number), ("7-epic-x", Some(7)));
        Ok(())
    }

    #[test]
    fn a_story_status_is_not_the_epic_status() {
        let text = "# Epic\n\n## Story one\n**Status**: Complete\n";
        let e = parse_epic(Path::new("docs/epics/01-epic-x.md"), text);
        assert!(matches!(e, Err(CpmError::MissingStatus { .. })), "{e:?}");
        let text = "# Epic\n```\n**Status**: Complete\n```\n## Story\n";
        let e = parse_epic(Path::new("docs/epics/01-epic-x.md"), text);
        assert!(
            matches!(e, Err(CpmError::MissingStatus { .. })),
            "fenced: {e:?}"
        );
    }

    #[test]
    fn bad_epic_docs_name_file_and_line() -> TestResult {
        let root = repo();
        write(
            root.path(),
            "docs/epics/01-epic-a.md",
            "# A\n\n**Status**:   \n",
        );
        let e = read_epic(root.path(), Path::new("docs/epics/01-epic-a.md"))
            .err()
            .ok_or("expected an error")?;
        assert_eq!(
            e.to_string(),
            "docs/epics/01-epic-a.md:3: epic `**Status**:` is empty"
        );
        assert_eq!(e.line(), Some(3));
        assert!(e.hint().is_some() && !e.is_usage());

        let path = root.path().join("docs/epics/02-epic-b.md");
        fs::write(&path, b"# B\n**Status**: Pending\n\xff\xfe\n")?;
        let e = read_epic(root.path(), Path::new("docs/epics/02-epic-b.md"))
            .err()
            .ok_or("expected an error")?;
        assert_eq!(
            e.to_string(),
            "docs/epics/02-epic-b.md:3: file is not valid UTF-8"
        );

        let e = read_epic(root.path(), Path::new("docs/epics/03-epic-missing.md"))
            .err()
            .ok_or("expected an error")?;
        assert!(
            e.to_string()
                .starts_with("docs/epics/03-epic-missing.md: cannot read"),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn list_and_filter_incomplete_epics() -> TestResult {
        let root = repo();
        let r = root.path();
        assert!(list_epics(r)?.is_empty(), "no docs/epics is an empty list");
        write(
            r,
            "docs/epics/02-epic-b.md",
            &epic_doc("B", "Complete", None),
        );
        write(
            r,
            "docs/epics/01-epic-a.md",
            &epic_doc("A", "In Progress", None),
        );
        write(r, "docs/epics/03-epic-c.md", &epic_doc("C", "done", None));
        write(
            r,
            "docs/epics/04-epic-d.md",
            &epic_doc("D", "Withdrawn", None),
        );
        write(
            r,
            "docs/epics/05-epic-e.md",
            &epic_doc("E", "Superseded", None),
        );
        write(
            r,
            "docs/epics/06-epic-f.md",
            &epic_doc("F", "Pending", None),
        );
        write(r, "docs/epics/01-coverage-a.md", "# matrix\n");
        write(r, "docs/epics/notes.md", "# notes\n");
        let all: Vec<String> = list_epics(r)?.into_iter().map(|e| e.title).collect();
        assert_eq!(all, ["A", "B", "C", "D", "E", "F"]);
        let open: Vec<String> = incomplete_epics(r)?.into_iter().map(|e| e.title).collect();
        assert_eq!(open, ["A", "F"]);
        assert_eq!(
            epics_of(resolve_targets(r, &[])?),
            ["docs/epics/01-epic-a.md", "docs/epics/06-epic-f.md"]
        );
        Ok(())
    }

    // --- targets -------------------------------------------------------------------------

    fn range_repo() -> TempDir {
        let root = repo();
        let r = root.path();
        for (name, status) in [
            ("22-epic-a.md", "Pending"),
            ("23-epic-b.md", "Complete"),
            ("24-epic-c.md", "Pending"),
            ("24-01-epic-c2.md", "Pending"),
            ("26-epic-d.md", "Pending"),
            ("27-epic-e.md", "Pending"),
        ] {
            write(
                r,
                &format!("docs/epics/{name}"),
                &epic_doc(name, status, None),
            );
        }
        write(r, "docs/epics/24-coverage-c.md", "# matrix\n");
        write(r, "docs/specifications/45-spec-login.md", "# Spec\n");
        write(r, "docs/specifications/46-spec-other.md", "# Spec\n");
        root
    }

    #[test]
    fn ranges_expand_inclusively_to_existing_files() -> TestResult {
        let root = range_repo();
        let r = root.path();
        assert_eq!(
            epics_of(resolve_targets(r, &args(&["23..26"]))?),
            [
                "docs/epics/23-epic-b.md",
                "docs/epics/24-01-epic-c2.md",
                "docs/epics/24-epic-c.md",
                "docs/epics/26-epic-d.md"
            ]
        );
        assert_eq!(
            epics_of(resolve_targets(r, &args(&["26..26"]))?),
            ["docs/epics/26-epic-d.md"]
        );
        // Overlaps and explicit paths are deduplicated and sorted by file name.
        assert_eq!(
            epics_of(resolve_targets(
                r,
                &args(&["27..27", "docs/epics/22-epic-a.md", "26..27"])
            )?),
            [
                "docs/epics/22-epic-a.md",
                "docs/epics/26-epic-d.md",
                "docs/epics/27-epic-e.md"
            ]
        );
        Ok(())
    }

    #[test]
    fn bad_ranges() {
        let root = range_repo();
        let r = root.path();
        let e = err_of(resolve_targets(r, &args(&["26..23"])));
        assert!(e.is_usage(), "{e}");
        assert_eq!(
            e.to_string(),
            "invalid epic range `26..23`: reversed; did you mean 23..26?"
        );
        for bad in ["23..x", "23..", "23...26", "1..99999999999"] {
            let e = err_of(resolve_targets(r, &args(&[bad])));
            assert!(matches!(e, CpmError::InvalidRange { .. }), "{bad}: {e}");
            assert!(e.is_usage() && e.to_string().contains(bad), "{bad}: {e}");
        }
        let e = err_of(resolve_targets(r, &args(&["90..99"])));
        assert_eq!(
            e.to_string(),
            "epic range `90..99` matches no epic in docs/epics/"
        );
        assert!(!e.is_usage() && e.hint().is_some());
        // With no docs/epics at all, a range matches nothing too.
        let empty = repo();
        let e = err_of(resolve_targets(empty.path(), &args(&["1..2"])));
        assert!(matches!(e, CpmError::EmptyRange { .. }), "{e}");
    }

    #[test]
    fn contradictory_targets_are_usage_errors_naming_the_arguments() {
        let root = range_repo();
        let r = root.path();
        let e = err_of(resolve_targets(
            r,
            &args(&[
                "docs/specifications/45-spec-login.md",
                "docs/specifications/46-spec-other.md",
            ]),
        ));
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "two spec paths given (`docs/specifications/45-spec-login.md` and \
             `docs/specifications/46-spec-other.md`): spec mode runs exactly one spec"
        );
        let e = err_of(resolve_targets(
            r,
            &args(&[
                "docs/epics/22-epic-a.md",
                "docs/specifications/45-spec-login.md",
                "23..24",
            ]),
        ));
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "spec path `docs/specifications/45-spec-login.md` mixed with epic targets \
             (docs/epics/22-epic-a.md, 23..24): a run is either spec mode or epic mode"
        );
        // Usage errors come before existence checks.
        let e = err_of(resolve_targets(
            r,
            &args(&["docs/specifications/nope.md", "docs/epics/nope-epic-x.md"]),
        ));
        assert!(matches!(e, CpmError::SpecWithEpics { .. }), "{e}");
        let e = err_of(resolve_targets(r, &args(&["src/main.rs"])));
        assert!(
            e.is_usage() && e.to_string().contains("`src/main.rs`"),
            "{e}"
        );
    }

    #[test]
    fn spec_and_epic_paths_resolve() -> TestResult {
        let root = range_repo();
        let r = root.path();
        assert_eq!(
            resolve_targets(r, &args(&["./docs/specifications/45-spec-login.md"]))?,
            Targets::Spec(PathBuf::from("docs/specifications/45-spec-login.md"))
        );
        let abs = r.join("docs/epics/24-epic-c.md").display().to_string();
        assert_eq!(
            epics_of(resolve_targets(r, &[abs])?),
            ["docs/epics/24-epic-c.md"]
        );
        assert_eq!(
            epics_of(resolve_targets(r, &args(&["docs/epics/24*-epic-*.md"]))?),
            ["docs/epics/24-01-epic-c2.md", "docs/epics/24-epic-c.md"]
        );
        type Check = fn(&CpmError) -> bool;
        let cases: [(&str, Check); 5] = [
            ("docs/epics/99-epic-*.md", |e| {
                matches!(e, CpmError::GlobNoMatch { .. })
            }),
            ("docs/epics/99-epic-x.md", |e| {
                matches!(e, CpmError::EpicNotFound { .. })
            }),
            ("docs/epics/24-coverage-c.md", |e| {
                matches!(e, CpmError::NotAnEpic { .. })
            }),
            ("docs/epics", |e| {
                matches!(e, CpmError::TargetIsDirectory { .. })
            }),
            ("docs/specifications/99-spec-x.md", |e| {
                matches!(e, CpmError::SpecNotFound { .. })
            }),
        ];
        for (arg, is) in cases {
            let e = err_of(resolve_targets(r, &args(&[arg])));
            assert!(is(&e) && !e.is_usage(), "{arg}: {e:?}");
            assert!(e.hint().is_some(), "{arg}");
        }
        Ok(())
    }

    #[test]
    fn cpm_target_shapes() {
        for yes in [
            "docs/epics/23-epic-x.md",
            "./docs/epics/23-epic-x.md",
            "docs/specifications/45-spec-x.md",
            "/home/u/repo/docs/epics/23-epic-x.md",
            "23..26",
            "docs/epics/2*-epic-*.md",
        ] {
            assert!(is_cpm_target(yes), "{yes}");
        }
        for no in [
            "RALPH_TASK.md",
            "PRD.md",
            "docs/plans/x.md",
            "Add OAuth login",
            "23..x",
            "..",
            "../docs/epics/x.md",
            "",
        ] {
            assert!(!is_cpm_target(no), "{no}");
        }
    }

    #[test]
    fn auto_discovery_with_everything_complete() -> TestResult {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/epics/01-epic-a.md",
            &epic_doc("A", "Complete", None),
        );
        write(
            r,
            "docs/epics/02-epic-b.md",
            &epic_doc("B", "Withdrawn", None),
        );
        write(r, "docs/specifications/46-spec-b.md", "# B\n");
        write(r, "docs/specifications/45-spec-a.md", "# A\n");
        write(r, "docs/specifications/README.md", "# not a spec\n");
        assert_eq!(resolve_targets(r, &[])?, Targets::Epics(Vec::new()));
        assert_eq!(
            nothing_to_run_message(r)?,
            "No incomplete epics found. Nothing to run.\n\
             Spec mode runs a spec from scratch; to run one:\n  \
             ralph run docs/specifications/45-spec-a.md\n  \
             ralph run docs/specifications/46-spec-b.md"
        );
        let bare = repo();
        assert_eq!(
            nothing_to_run_message(bare.path())?,
            "No incomplete epics found. Nothing to run."
        );
        write(bare.path(), "docs/specifications/1-spec-it's.md", "# x\n");
        assert!(
            nothing_to_run_message(bare.path())?
                .ends_with(r"ralph run 'docs/specifications/1-spec-it'\''s.md'")
        );
        Ok(())
    }

    #[test]
    fn spec_mode_keeps_the_epics_naming_the_spec_by_basename() -> TestResult {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/epics/45-02-epic-b.md",
            &epic_doc(
                "B",
                "Pending",
                Some("[spec 45](../specifications/45-spec-login.md)"),
            ),
        );
        write(
            r,
            "docs/epics/45-01-epic-a.md",
            &epic_doc(
                "A",
                "Complete",
                Some("docs/specifications/45-spec-login.md"),
            ),
        );
        write(
            r,
            "docs/epics/46-01-epic-c.md",
            &epic_doc("C", "Pending", Some("docs/specifications/46-spec-other.md")),
        );
        write(
            r,
            "docs/epics/47-epic-d.md",
            &epic_doc("D", "Pending", None),
        );
        let spec = r.join("docs/specifications/45-spec-login.md");
        let got: Vec<String> = epics_for_spec(r, &spec)?
            .into_iter()
            .map(|e| e.title)
            .collect();
        assert_eq!(got, ["A", "B"]);
        assert!(epics_for_spec(r, Path::new("docs/specifications/48-spec-new.md"))?.is_empty());
        Ok(())
    }

    // --- [plan] stripping ------------------------------------------------------------------

    #[test]
    fn strip_plan_markers_exact_logs_and_bytes() {
        let text = "# Epic [plan]\n\n**Status**: Pending\n\n\
            ## Set up OAuth integration [plan]\n**Story**: 3\n**Status**: Pending\n\n\
            ### Wire the callback [plan]  \n**Task**: 3.1\n\n\
            ## Story 4: Login [plan]\r\n\
            ## [plan] Refresh   tokens\n\
            #### Deep [plan]\n\
            ```\n## In code [plan]\n```\n\
            Prose mentioning [plan] stays.\n\
            ## No story number[plan]";
        let (out, logs) = strip_plan_markers(text);
        let expected = "# Epic [plan]\n\n**Status**: Pending\n\n\
            ## Set up OAuth integration\n**Story**: 3\n**Status**: Pending\n\n\
            ### Wire the callback\n**Task**: 3.1\n\n\
            ## Story 4: Login\r\n\
            ## Refresh   tokens\n\
            #### Deep [plan]\n\
            ```\n## In code [plan]\n```\n\
            Prose mentioning [plan] stays.\n\
            ## No story number";
        assert_eq!(out, expected);
        assert_eq!(
            logs,
            [
                "Stripped [plan] from Story 3: Set up OAuth integration",
                "Stripped [plan] from Story 3: Wire the callback",
                "Stripped [plan] from Story 4: Login",
                "Stripped [plan] from Story ?: Refresh   tokens",
                "Stripped [plan] from Story ?: No story number",
            ]
        );
        // Idempotent.
        let (again, logs) = strip_plan_markers(&out);
        assert_eq!(again, out);
        assert!(logs.is_empty());
    }

    #[test]
    fn strip_plan_markers_keeps_a_bom_and_no_tag_text() {
        let (out, logs) = strip_plan_markers("\u{feff}## Story 1 [plan]\n");
        assert_eq!(out, "\u{feff}## Story 1\n");
        assert_eq!(logs, ["Stripped [plan] from Story 1: Story 1"]);
        let (out, logs) = strip_plan_markers("## Title\n");
        assert_eq!((out.as_str(), logs.len()), ("## Title\n", 0));
    }

    #[test]
    fn task_budget_counts_task_headings() -> TestResult {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/epics/01-epic-a.md",
            &epic_doc("A", "Pending", None),
        );
        write(
            r,
            "docs/epics/02-epic-b.md",
            "# B\n**Status**: Pending\n## S\n### T1\n### T2\n```\n### not a task\n```\n",
        );
        let epics = [
            PathBuf::from("docs/epics/01-epic-a.md"),
            PathBuf::from("docs/epics/02-epic-b.md"),
        ];
        assert_eq!(task_budget(r, &epics)?, 3);
        Ok(())
    }

    // --- test runner -----------------------------------------------------------------------

    const SPEC_WITH_ENV: &str = "# Spec\n\n## Functional Requirements\n\n### Must Have\n\
        - **FR1** — a test runner is mentioned here but is not an ENV entry\n\n\
        ## Non-Functional Requirements\n\n\
        - **NFR1** — fast\n\
        - **ENV1** — PHP 8.3 on the host\n\
        - **ENV2** — An isolated test database (SQLite in memory)\n\
        - **ENV3 — Test runner.** Pest 3 or later,\n  run as `vendor/bin/pest --parallel`\n\
        - **ENVX1** — must not require a test runner `npm test`\n\n## Scope\n";

    #[test]
    fn env_entries_are_read_from_the_nfr_section() {
        let entries = spec_env_entries(SPEC_WITH_ENV);
        let labels: Vec<&str> = entries.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(labels, ["ENV1", "ENV2", "ENV3"]);
        assert_eq!(
            entries[2].text,
            "Test runner. Pest 3 or later, run as `vendor/bin/pest --parallel`"
        );
    }

    #[test]
    fn test_runner_sources_in_priority_order() {
        let root = repo();
        let r = root.path();
        assert_eq!(discover_test_runner(r, None), None);
        write(r, "Cargo.toml", "[package]\nname = \"x\"\n");
        let found = |spec: Option<&Path>| discover_test_runner(r, spec);
        assert_eq!(
            found(None),
            Some(("cargo test".into(), "Cargo.toml".into()))
        );
        write(r, "pyproject.toml", "[project]\nname = \"x\"\n");
        assert_eq!(
            found(None).map(|f| f.0),
            Some("cargo test".into()),
            "no pytest mention"
        );
        write(
            r,
            "pyproject.toml",
            "[tool.pytest.ini_options]\naddopts = \"-q\"\n",
        );
        assert_eq!(
            found(None),
            Some(("pytest".into(), "pyproject.toml (pytest)".into()))
        );
        write(r, "Makefile", ".PHONY: test\nCC := cc\ntests:\n\techo\n");
        assert_eq!(
            found(None).map(|f| f.0),
            Some("pytest".into()),
            "no test target"
        );
        write(r, "Makefile", ".PHONY: test\nbuild test: deps\n\t./run\n");
        assert_eq!(
            found(None),
            Some(("make test".into(), "Makefile test target".into()))
        );
        write(
            r,
            "package.json",
            r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#,
        );
        assert_eq!(
            found(None).map(|f| f.0),
            Some("make test".into()),
            "npm placeholder"
        );
        write(r, "package.json", r#"{"scripts":{"test":"vitest run"}}"#);
        assert_eq!(
            found(None),
            Some((
                "npm test".into(),
                "package.json scripts.test (vitest run)".into()
            ))
        );
        write(r, "composer.json", "{ not json");
        assert_eq!(
            found(None).map(|f| f.0),
            Some("npm test".into()),
            "bad json skipped"
        );
        write(
            r,
            "composer.json",
            r#"{"scripts":{"test":["@lint","pest"]}}"#,
        );
        assert_eq!(
            found(None),
            Some((
                "composer test".into(),
                "composer.json scripts.test (@lint && pest)".into()
            ))
        );
        // Spec mode: the spec's ENV entries come first.
        write(r, "docs/specifications/45-spec-x.md", SPEC_WITH_ENV);
        let spec = Path::new("docs/specifications/45-spec-x.md");
        assert_eq!(
            found(Some(spec)),
            Some((
                "vendor/bin/pest --parallel".into(),
                "docs/specifications/45-spec-x.md ENV3".into()
            ))
        );
        // Epic mode never reads the spec.
        assert_eq!(found(None).map(|f| f.0), Some("composer test".into()));
    }

    #[test]
    fn a_spec_tool_is_not_reported_as_a_command() {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/specifications/45-spec-x.md",
            "## Non-Functional Requirements\n- **ENV1** — Test runner: Pest 3 or later.\n",
        );
        let spec = Path::new("docs/specifications/45-spec-x.md");
        assert_eq!(
            discover_test_runner(r, Some(spec)),
            Some((
                "Test runner: Pest 3 or later".into(),
                "docs/specifications/45-spec-x.md ENV1 (names a tool, not a command: install it \
                 before tests can run)"
                    .into()
            ))
        );
        write(r, "composer.json", r#"{"scripts":{"test":"pest"}}"#);
        assert_eq!(
            discover_test_runner(r, Some(spec)),
            Some((
                "composer test".into(),
                "composer.json scripts.test (pest) (completes docs/specifications/45-spec-x.md \
                 ENV1: Test runner: Pest 3 or later)"
                    .into()
            ))
        );
    }

    // --- earlier runs ------------------------------------------------------------------------

    fn set_mtime(path: &Path, secs: u64) -> TestResult {
        let f = fs::OpenOptions::new().write(true).open(path)?;
        f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))?;
        Ok(())
    }

    #[test]
    fn earlier_runs_newest_first_with_repeat_detection() -> TestResult {
        let root = repo();
        let r = root.path();
        assert!(earlier_runs(r)?.is_empty());
        write(
            r,
            "docs/plans/.cpm-ralph-log-old.md",
            "ITER 1 | SUMMARY\tspec\t3\t3\t0\t0 | exit 4 | no-commit | 4294967295 0\n\
             ITER 2 | SUMMARY\tspec\t3\t0\t0\t3 | exit 3 | abc1234 | 111 22\n\
             ITER 3 | SUMMARY\tspec\t3\t0\t0\t3 | exit 3 | abc1234 | 111 22\n\
             ITER 4 | SUMMARY\tspec\t3\t0\t0\t3 | exit 3 | abc1234 | 111 22\n",
        );
        write(
            r,
            "docs/plans/.cpm-ralph-log-new.md",
            "a stray line\n\
             ITER 1 | 1/3 rows | exit 3 | abc1234 | 111 22\n\
             ITER 2 | 1/3 rows | exit 3 | abc1234 | 111 22\n\
             ITER 3 | 1/3 rows | exit 3 | abc1234 | 999 22\n",
        );
        write(
            r,
            "docs/plans/.cpm-progress.md",
            "ITER 1 | x | exit 0 | a | b\n",
        );
        set_mtime(&r.join("docs/plans/.cpm-ralph-log-old.md"), 1_000)?;
        set_mtime(&r.join("docs/plans/.cpm-ralph-log-new.md"), 2_000)?;
        let runs = earlier_runs(r)?;
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0].path,
            PathBuf::from("docs/plans/.cpm-ralph-log-new.md")
        );
        assert_eq!(runs[0].iterations, 3);
        assert!(!runs[0].repeats, "the tree moved");
        assert_eq!(
            runs[0].last_record.as_deref(),
            Some("ITER 3 | 1/3 rows | exit 3 | abc1234 | 999 22")
        );
        assert_eq!(runs[1].iterations, 4);
        assert!(runs[1].repeats);
        let last = runs[1].last.clone().ok_or("no last record")?;
        assert_eq!(last.iteration, Some(4));
        assert_eq!(last.figures, "SUMMARY\tspec\t3\t0\t0\t3");
        assert_eq!((last.exit.as_str(), last.commit.as_str()), ("3", "abc1234"));
        assert_eq!(last.fingerprint, "111 22");
        assert!(
            runs[1].describe().contains("4 iterations") && runs[1].describe().contains("stalled")
        );
        Ok(())
    }

    #[test]
    fn iter_records_parse_from_both_ends() {
        let r = parse_iter_record("ITER 7 | a | b | exit 1 | no-commit | 1 0").expect("record");
        assert_eq!(r.figures, "a | b");
        assert_eq!(r.iteration, Some(7));
        assert_eq!(parse_iter_record("ITER 1 | only | three"), None);
        assert_eq!(parse_iter_record("nope"), None);
        assert!(!last_three_repeat(&[]));
    }

    #[test]
    fn log_path_is_one_dot_file_under_plans() {
        assert_eq!(
            log_path("20260101-120000-ab12"),
            PathBuf::from("docs/plans/.cpm-ralph-log-20260101-120000-ab12.md")
        );
        assert_eq!(
            log_path("../x y"),
            PathBuf::from("docs/plans/.cpm-ralph-log-.._x_y.md")
        );
    }

    // --- the roll-up ---------------------------------------------------------------------------

    fn make_rollup(dir: &Path) -> PathBuf {
        let p = dir.join(ROLLUP_REL);
        write(dir, ROLLUP_REL, "#!/bin/bash\n");
        p
    }

    #[test]
    fn rollup_resolution_order() -> TestResult {
        let t = repo();
        let base = t.path();
        let explicit = base.join("mine/rollup.sh");
        write(base, "mine/rollup.sh", "#!/bin/bash\n");
        let plugin = base.join("plugin");
        let plugin_script = make_rollup(&plugin);
        let home = base.join("home");
        let cache = home.join(".claude/plugins/cache");
        make_rollup(&cache.join("ninthspace/cpm/1.9.0"));
        let newest = make_rollup(&cache.join("ninthspace/cpm/1.10.0"));
        make_rollup(&cache.join("ninthspace/cpm/1.10.0-beta.1"));
        make_rollup(&cache.join("other/cpm/unknown"));
        fs::create_dir_all(cache.join("ninthspace/cpm/2.0.0"))?; // no script: skipped

        assert_eq!(
            resolve_rollup(Some(&explicit), Some(&plugin), Some(&home)),
            Some(explicit.clone())
        );
        assert_eq!(
            resolve_rollup(Some(&base.join("missing.sh")), Some(&plugin), Some(&home)),
            None,
            "an explicit path that is missing is not replaced by another script"
        );
        assert_eq!(
            resolve_rollup(None, Some(&plugin), Some(&home)),
            Some(plugin_script)
        );
        assert_eq!(
            resolve_rollup(None, Some(&base.join("nowhere")), Some(&home)),
            Some(newest.clone())
        );
        assert_eq!(
            resolve_rollup(None, Some(Path::new("")), Some(&home)),
            Some(newest)
        );
        assert_eq!(resolve_rollup(None, None, Some(&base.join("nohome"))), None);
        assert_eq!(resolve_rollup(None, None, None), None);
        // Unparseable versions only: the newer directory wins.
        let home2 = base.join("home2");
        let c2 = home2.join(".claude/plugins/cache/m/cpm");
        let a = make_rollup(&c2.join("abc123"));
        let b = make_rollup(&c2.join("def456"));
        set_mtime(&a, 1)?;
        fs::File::open(c2.join("abc123"))?.set_modified(SystemTime::UNIX_EPOCH)?;
        fs::File::open(c2.join("def456"))?
            .set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(10))?;
        assert_eq!(resolve_rollup(None, None, Some(&home2)), Some(b));
        // Relative explicit paths come back absolute.
        let rel = resolve_rollup(Some(Path::new("Cargo.toml")), None, None).ok_or("no path")?;
        assert!(rel.is_absolute());
        Ok(())
    }

    #[test]
    fn versions_order() {
        assert!(parse_version("1.10.0") > parse_version("1.9.9"));
        assert_eq!(parse_version("v1.2"), Some((vec![1, 2], true)));
        assert_eq!(parse_version("1.2.0-rc.1"), Some((vec![1, 2, 0], false)));
        assert_eq!(parse_version("1.2.0+build"), Some((vec![1, 2, 0], true)));
        assert_eq!(parse_version("unknown"), None);
    }

    #[test]
    fn rollup_argv_shapes() {
        let rollup = Path::new("/p/hooks/lib/coverage-rollup.sh");
        let epics = Targets::Epics(vec![
            PathBuf::from("docs/epics/23-epic-a.md"),
            PathBuf::from("docs/epics/24-epic-b.md"),
        ]);
        assert_eq!(
            rollup_argv(rollup, &epics),
            [
                "/p/hooks/lib/coverage-rollup.sh",
                "--epic",
                "docs/epics/23-epic-a.md",
                "docs/epics/24-epic-b.md",
                "--verdict"
            ]
        );
        let spec = Targets::Spec(PathBuf::from("docs/specifications/45-spec-x.md"));
        assert_eq!(
            rollup_argv(rollup, &spec),
            [
                "/p/hooks/lib/coverage-rollup.sh",
                "--spec",
                "docs/specifications/45-spec-x.md",
                "--verdict"
            ]
        );
    }

    const ROLLUP_SPEC_OUT: &str = "MATRIX\tdocs/epics/45-01-coverage-a.md\tdocs/specifications/45-spec-x.md\n\
        REQ\tFR1\tMust Have\tthe thing\n\
        STATE\tFR1\tMust Have\tin-progress\n\
        SUMMARY\tspec\t5\t2\t1\t2\n\
        ROW\tdocs/epics/45-01-coverage-a.md\tFR1\tFR1\tStory 1\tunverified\t[unit]\t\n";

    #[test]
    fn summary_line_prefers_the_summary_record() {
        assert_eq!(
            summary_line(ROLLUP_SPEC_OUT).as_deref(),
            Some("SUMMARY\tspec\t5\t2\t1\t2")
        );
        assert_eq!(
            summary_line("ROW\ta\n  12 of 14 rows verified  \n\n\n").as_deref(),
            Some("12 of 14 rows verified")
        );
        assert_eq!(summary_line("SUMMARYX 1\nlast\n").as_deref(), Some("last"));
        assert_eq!(
            summary_line("  SUMMARY: 3 untraced \r\n").as_deref(),
            Some("SUMMARY: 3 untraced")
        );
        assert_eq!(summary_line(""), None);
        assert_eq!(summary_line("\n \n"), None);
    }

    #[test]
    fn untraced_parsing() {
        assert_eq!(untraced("SUMMARY\tspec\t5\t2\t1\t2"), Some(2));
        assert_eq!(untraced("SUMMARY 5 0 5 0"), Some(0));
        assert_eq!(
            untraced("COUNTS: 5 requirements, 3 untraced, 1 delivered, 1 in progress"),
            Some(3)
        );
        assert_eq!(untraced("requirements=5 untraced=4"), Some(4));
        assert_eq!(untraced("Untraced: 7"), Some(7));
        assert_eq!(untraced("untraced 6"), Some(6));
        assert_eq!(untraced("12 of 14 rows verified"), None);
        assert_eq!(untraced("SUMMARY\tspec\tx"), None);
        assert_eq!(
            counts_text("SUMMARY\tspec\t5\t2\t1\t2").as_deref(),
            Some("5 requirements, 2 untraced, 1 delivered, 2 in progress")
        );
    }

    #[test]
    fn target_only_rows_follow_the_rollup_rule() {
        let out = "MATRIX\tm.md\ts.md\n\
            ROW\tm.md\tENV1\tENV1 — production host\tStory 2\tunverified\t[target]\t\n\
            ROW\tm.md\tENV2\tENV2\tStory 2\tunverified\t[target]\t[integration]\n\
            ROW\tm.md\tENV3\tENV3\tStory 3\tverified\t[target]\t\n\
            ROW\tm.md\tENV4\tENV4\tStory 3\tunverified\t[target]\t[target] [manual]\n\
            CRITERION\tm.md\tDeploys to the real host\tStory 4\tunverified\t\t[target]\n\
            CRITERION\tm.md\tUnit thing\tStory 4\tunverified\t[target] [unit]\t\n";
        // ENV2's criterion is checkable here; a criterion with no spec tag is not target-only.
        assert_eq!(target_only_rows(out), ["ENV1 — production host", "ENV4"]);
        assert_eq!(
            target_only_rows(
                "TARGET-ONLY: 2 rows unverifiable in this environment\nTARGET-ONLY: ENV1\nTARGET-ONLY\tENV2\n"
            ),
            ["ENV1", "ENV2"]
        );
        assert!(target_only_rows("").is_empty());
        assert!(target_only_rows("ROW\n\t\t\n").is_empty());
    }

    #[test]
    fn completion_lines_keep_counts_out_of_the_promise() {
        let (promise, coverage) = completion_lines(true, Some("SUMMARY\tspec\t5\t0\t5\t0"));
        assert_eq!(promise, "SPEC_DELIVERED");
        assert_eq!(
            coverage,
            "COVERAGE: 5 requirements, 0 untraced, 5 delivered, 0 in progress -- aggregation of \
             the marks cpm:do placed on its own work, not independent verification"
        );
        let (promise, coverage) = completion_lines(false, Some("14 of 14 rows\nverified"));
        assert_eq!(promise, "ALL_EPICS_COMPLETE");
        assert!(
            coverage
                .starts_with("COVERAGE: 14 of 14 rows verified -- aggregation, not verification")
        );
        assert!(coverage.contains("cannot say a spec is delivered"));
        let (promise, coverage) = completion_lines(false, None);
        assert!(!promise.chars().any(|c| c.is_ascii_digit()));
        assert!(coverage.starts_with("COVERAGE: the roll-up printed no summary"));
    }

    // --- ignore check and stop hook --------------------------------------------------------------

    #[test]
    fn ignore_lines_detect_and_apply_idempotently() -> TestResult {
        let root = repo();
        let r = root.path();
        assert_eq!(missing_ignore_lines(r), IGNORE_LINES);
        apply_ignore_lines(r, &missing_ignore_lines(r))?;
        let first = fs::read_to_string(r.join(".gitignore"))?;
        assert_eq!(
            first,
            format!("{IGNORE_HEADER}\n/.claude/ralph-loop.local.md\n/docs/plans/.cpm-*\n")
        );
        assert!(missing_ignore_lines(r).is_empty());
        apply_ignore_lines(r, &IGNORE_LINES.map(String::from))?;
        assert_eq!(
            fs::read_to_string(r.join(".gitignore"))?,
            first,
            "second apply is a no-op"
        );
        apply_ignore_lines(r, &[])?;
        assert_eq!(fs::read_to_string(r.join(".gitignore"))?, first);
        assert!(apply_ignore_lines(r, &["a\nb".to_string()]).is_err());
        Ok(())
    }

    #[test]
    fn equivalent_patterns_count_as_ignored() -> TestResult {
        let root = repo();
        let r = root.path();
        let check = |gitignore: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
            fs::write(r.join(".gitignore"), gitignore)?;
            Ok(missing_ignore_lines(r))
        };
        assert_eq!(check(".claude/\ntarget\n")?, ["/docs/plans/.cpm-*"]);
        assert_eq!(check("/.claude\r\n.cpm-*\r\n")?, Vec::<String>::new());
        assert_eq!(check("docs/\n.claude/**\n")?, Vec::<String>::new());
        assert_eq!(
            check("**/ralph-loop.local.md\ndocs/**/.cpm-*\n")?,
            Vec::<String>::new()
        );
        assert_eq!(
            check("docs/plans/.cpm-ralph-log-*\n")?,
            IGNORE_LINES.map(String::from),
            "a narrower pattern misses CPM's progress files"
        );
        assert_eq!(
            check(
                "/docs/plans/.cpm-*\n!/docs/plans/.cpm-progress.md\n# /.claude/ralph-loop.local.md\n"
            )?,
            IGNORE_LINES.map(String::from)
        );
        assert_eq!(
            check("/docs/plans/\n!/docs/plans/.cpm-progress.md\n/.claude/ralph-loop.local.md\n")?,
            Vec::<String>::new(),
            "an excluded directory cannot be re-included"
        );
        // Appending to a file without a final newline keeps the last line intact.
        fs::write(r.join(".gitignore"), "target")?;
        apply_ignore_lines(r, &missing_ignore_lines(r))?;
        assert!(fs::read_to_string(r.join(".gitignore"))?.starts_with("target\n\n# Session"));
        Ok(())
    }

    #[test]
    fn stop_hook_state_file_is_detected() {
        let root = repo();
        assert!(!stop_hook_armed(root.path()));
        write(root.path(), STOP_HOOK_STATE, "---\nactive: true\n---\n");
        assert!(stop_hook_armed(root.path()));
    }

    // --- prompts ---------------------------------------------------------------------------------

    fn params<'a>(spec: Option<&'a Path>, epics: &'a [PathBuf], phase: Phase) -> PromptParams<'a> {
        PromptParams {
            mode_spec: spec,
            epics,
            phase,
            iteration: 2,
            max_iterations: 50,
            story_filter: None,
            test_runner: None,
            resuming: false,
            task_budget: None,
        }
    }

    #[test]
    fn delivery_prompt_in_epic_mode() {
        let epics = [
            PathBuf::from("docs/epics/26-epic-d.md"),
            PathBuf::from("docs/epics/23-epic-a.md"),
            PathBuf::from("docs/epics/24-epic-b.md"),
        ];
        let p = prompt(&params(None, &epics, Phase::Delivery));
        assert!(
            p.starts_with("This is iteration 2 of 50 of a run supervised by ralph;"),
            "{p}"
        );
        assert!(
            p.contains(
                "Run /cpm:do on epics 23-24, 26 sequentially (docs/epics/23-epic-a.md \
                 docs/epics/24-epic-b.md docs/epics/26-epic-d.md). Continue to each next epic \
                 automatically."
            ),
            "{p}"
        );
        assert!(p.contains(AUTONOMY));
        assert!(p.contains("Commit after each completed story. Keep all commits local."));
        assert!(!p.contains("cpm:epics"), "{p}");
        for gone in [
            "coverage-rollup",
            "ALL_EPICS_COMPLETE",
            "SPEC_DELIVERED",
            "ralph-loop.local.md",
            "ITER",
            "STALLED",
            "Story filter:",
            "Test runner:",
            "Task budget:",
            "Resuming",
            "<promise>",
        ] {
            assert!(!p.contains(gone), "{gone} in {p}");
        }
        // Plain text, ASCII dashes for the template's own dashes.
        assert!(!p.contains('`') && !p.contains("```"));
        // Epic-mode Planning has no spec to plan: it is the Delivery prompt.
        assert_eq!(prompt(&params(None, &epics, Phase::Planning)), p);
    }

    #[test]
    fn planning_and_delivery_prompts_in_spec_mode() {
        let spec = Path::new("docs/specifications/45-spec-login.md");
        let planning = prompt(&params(Some(spec), &[], Phase::Planning));
        assert!(planning.contains(
            "run /cpm:epics on docs/specifications/45-spec-login.md, taking cpm:epics' \
             Autonomous Mode branch, and end the iteration there"
        ));
        assert!(planning.contains("never run /cpm:epics twice"));
        assert!(planning.contains(EPICS_GATE.trim()));
        assert!(!planning.contains("Run /cpm:do on"));
        assert!(!planning.contains("SPEC_DELIVERED"));

        let epics = [
            PathBuf::from("docs/epics/45-02-epic-b.md"),
            PathBuf::from("docs/epics/45-01-epic-a.md"),
        ];
        let delivery = prompt(&params(Some(spec), &epics, Phase::Delivery));
        assert!(delivery.contains(
            "Work spec docs/specifications/45-spec-login.md to completion: run /cpm:do on every \
             epic doc naming docs/specifications/45-spec-login.md as its source spec, in filename \
             order (docs/epics/45-01-epic-a.md docs/epics/45-02-epic-b.md), continuing to each \
             next epic automatically."
        ));
        assert!(!delivery.contains("cpm:epics"), "{delivery}");
        assert!(!delivery.contains("SPEC_DELIVERED") && !delivery.contains("coverage-rollup"));
        let none = prompt(&params(Some(spec), &[], Phase::Delivery));
        assert!(none.contains("in filename order, continuing"), "{none}");
    }

    #[test]
    fn optional_clauses_appear_only_when_set() {
        let epics = [PathBuf::from("docs/epics/23-epic-a.md")];
        let mut p = params(None, &epics, Phase::Delivery);
        p.story_filter = Some("1-3");
        p.test_runner = Some("cargo test\n--all");
        p.task_budget = Some(12);
        p.resuming = true;
        let text = prompt(&p);
        assert!(text.contains(
            "Story filter: 1-3 -- work only the stories it selects (1-3 is a range, !4 excludes \
             story 4) and leave the others untouched."
        ));
        assert!(
            text.contains("Test runner: cargo test --all -- use it"),
            "{text}"
        );
        assert!(text.contains("Task budget: 12 tasks, estimate ~2000 tokens per task."));
        assert!(text.contains("Resuming an earlier run: leave finished stories alone"));
        for (field, marker) in [
            ("story_filter", "Story filter:"),
            ("test_runner", "Test runner:"),
            ("task_budget", "Task budget:"),
            ("resuming", "Resuming"),
        ] {
            let mut q = p.clone();
            match field {
                "story_filter" => q.story_filter = None,
                "test_runner" => q.test_runner = Some("  "),
                "task_budget" => q.task_budget = None,
                _ => q.resuming = false,
            }
            let text = prompt(&q);
            assert!(!text.contains(marker), "{marker} present without {field}");
            assert!(text.len() < prompt(&p).len());
        }
        let spec = Path::new("docs/specifications/45-spec-x.md");
        let mut planning = params(Some(spec), &[], Phase::Planning);
        planning.resuming = true;
        assert!(prompt(&planning).contains("cpm:epics progress file"));
    }

    #[test]
    fn epic_range_labels() {
        let paths = |names: &[&str]| -> Vec<PathBuf> {
            names
                .iter()
                .map(|n| PathBuf::from(format!("docs/epics/{n}")))
                .collect()
        };
        assert_eq!(
            epic_range(&paths(&["23-epic-a.md", "24-epic-b.md", "25-epic-c.md"])),
            "23-25"
        );
        assert_eq!(epic_range(&paths(&["7-epic-a.md"])), "7");
        assert_eq!(
            epic_range(&paths(&["x-epic-a.md", "3-epic-b.md", "3-01-epic-c.md"])),
            "3, x-epic-a"
        );
        assert_eq!(epic_range(&[]), "");
    }

    // --- never panics ----------------------------------------------------------------------------

    proptest! {
        #[test]
        fn strip_plan_markers_never_panics(text in "(\\PC|\n|\r|#|\\[plan\\]| |`|\u{feff})*") {
            let (out, logs) = strip_plan_markers(&text);
            prop_assert!(out.len() <= text.len());
            prop_assert!(out.lines().count() <= text.lines().count() + 1);
            if !text.contains("[plan]") {
                prop_assert_eq!(&out, &text);
                prop_assert!(logs.is_empty());
            }
        }

        #[test]
        fn strip_plan_markers_is_identity_without_the_tag(text in "\\PC*") {
            prop_assume!(!text.contains("[plan]"));
            let (out, logs) = strip_plan_markers(&text);
            prop_assert_eq!(out, text);
            prop_assert!(logs.is_empty());
        }

        #[test]
        fn parsers_never_panic(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*") {
            let _ = parse_epic(Path::new("docs/epics/1-epic-x.md"), &text);
            let _ = summary_line(&text);
            let _ = untraced(&text);
            let _ = summary_counts(&text);
            let _ = target_only_rows(&text);
            let _ = spec_env_entries(&text);
            let _ = parse_iter_record(&text);
            let _ = count_tasks(&text);
            let _ = is_cpm_target(&text);
            let _ = command_in(&text);
            let _ = completion_lines(true, Some(&text));
            let patterns = parse_gitignore(&text);
            let _ = is_ignored(&patterns, ".claude/ralph-loop.local.md");
        }

        #[test]
        fn glob_and_wildcard_never_panic(p in "[a*?/.]{0,12}", t in "[a/.]{0,12}") {
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            let _ = glob_match(&pc, &tc);
            let _ = wildcard_match(&p, &t);
        }
    }
}
