//! `RALPH_TASK.md` loading: byte validation, YAML frontmatter, task name and checklist.
//!
//! The file is an optional `---`-fenced YAML frontmatter block followed by markdown whose
//! success criteria are GFM task-list items (see [`super::checklist`]). Every failure is a
//! [`TaskError`] naming the file and, where known, the 1-based file line.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::MessageFormatter;

use super::checklist::{self, Checklist, Scope};

/// The YAML frontmatter of a task file. Unknown keys are rejected.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frontmatter {
    /// Short task name; required when frontmatter exists.
    pub task: Option<String>,
    /// Command whose success gates completion.
    pub test_command: Option<String>,
    /// Iteration cap.
    pub max_iterations: Option<u32>,
    /// Agent preset name.
    pub agent: Option<String>,
    /// Custom agent command line.
    pub agent_cmd: Option<String>,
    /// Per-iteration timeout (humantime, e.g. "90s"); validated elsewhere.
    pub timeout: Option<String>,
    /// Idle-output timeout (humantime); validated elsewhere.
    pub idle_timeout: Option<String>,
    /// Grace period before a hard kill (humantime); validated elsewhere.
    pub grace: Option<String>,
    /// Iterations without progress before the loop counts as stuck.
    pub stuck_threshold: Option<u32>,
    /// Text the agent prints to claim completion.
    pub completion_promise: Option<String>,
    /// Command that judges completion.
    pub verdict_command: Option<String>,
}

/// A parsed task file.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDocument {
    /// `None` when the file has no frontmatter.
    pub frontmatter: Option<Frontmatter>,
    /// 0 when there is no frontmatter; else the file line of the closing fence.
    pub frontmatter_end_line: usize,
    /// Frontmatter `task`, else the title heading, else the file stem.
    pub name: String,
    /// The success criteria.
    pub checklist: Checklist,
    /// Non-fatal problems, as lowercase fragments.
    pub warnings: Vec<String>,
}

/// Why a task file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The file does not exist.
    #[error("{}: task file not found", .path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read.
    #[error("{}: cannot read task file: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The path holds a FIFO, a device, a directory…: never read (or waited on).
    #[error("{}: is {kind}, not a regular file", .path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: crate::files::Kind,
    },
    /// The file is larger than ralph reads.
    #[error("{}: larger than {} KiB ({size} bytes)", .path.display(), crate::files::MAX_TEXT / 1024)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The file contains a NUL byte.
    #[error("{}:{line}: file contains binary data (a NUL byte)", .path.display())]
    Binary {
        /// The file.
        path: PathBuf,
        /// Line of the first NUL byte.
        line: usize,
    },
    /// The file is not valid UTF-8.
    #[error("{}:{line}: file is not valid UTF-8", .path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Line of the first invalid byte.
        line: usize,
    },
    /// The frontmatter's opening fence has no closing fence.
    #[error("{}:{line}: frontmatter opened at line {line} is never closed", .path.display())]
    UnclosedFrontmatter {
        /// The file.
        path: PathBuf,
        /// Line of the opening fence.
        line: usize,
    },
    /// The frontmatter YAML does not parse into [`Frontmatter`].
    #[error("{}:{line}: invalid frontmatter: {message}", .path.display())]
    InvalidFrontmatter {
        /// The file.
        path: PathBuf,
        /// File line of the YAML error.
        line: usize,
        /// Short description of the YAML error.
        message: String,
    },
    /// The frontmatter has no (non-blank) `task`.
    #[error("{}:{line}: frontmatter has no `task`", .path.display())]
    MissingTaskName {
        /// The file.
        path: PathBuf,
        /// Line of the opening fence.
        line: usize,
    },
    /// No task-list items were found where criteria are expected.
    #[error(
        "{}: no criteria: needs `- [ ]` checkboxes under ## Success Criteria",
        Located(.path, *.line)
    )]
    NoCriteria {
        /// The file.
        path: PathBuf,
        /// Line of the criteria heading, when one exists.
        line: Option<usize>,
    },
}

/// `path` or `path:line`, for messages.
struct Located<'a>(&'a Path, Option<usize>);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(line) => write!(f, "{}:{line}", self.0.display()),
            None => write!(f, "{}", self.0.display()),
        }
    }
}

impl TaskError {
    /// A suggestion for fixing the problem, when there is an obvious one.
    pub fn hint(&self) -> Option<String> {
        let hint = match self {
            TaskError::Missing { .. } => "run `ralph init` to create one",
            TaskError::Io { .. } => return None,
            TaskError::NotRegular { .. } => {
                "the task file must be a regular file (a symlink to one is fine)"
            }
            TaskError::TooLarge { .. } => "a task file holds at most 1 MiB",
            TaskError::Binary { .. } | TaskError::NotUtf8 { .. } => {
                "the task file must be UTF-8 text"
            }
            TaskError::UnclosedFrontmatter { .. } => {
                "end the frontmatter with a `---` line, or remove the opening `---`"
            }
            TaskError::InvalidFrontmatter { .. } => {
                "allowed keys: task, test_command, max_iterations, agent, agent_cmd, timeout, \
                 idle_timeout, grace, stuck_threshold, completion_promise, verdict_command"
            }
            TaskError::MissingTaskName { .. } => "add `task: <short name>` to the frontmatter",
            TaskError::NoCriteria { .. } => "add `- [ ]` checkboxes under ## Success Criteria",
        };
        Some(hint.to_string())
    }

    /// The 1-based file line the error refers to, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            TaskError::Missing { .. }
            | TaskError::Io { .. }
            | TaskError::NotRegular { .. }
            | TaskError::TooLarge { .. } => None,
            TaskError::Binary { line, .. }
            | TaskError::NotUtf8 { line, .. }
            | TaskError::UnclosedFrontmatter { line, .. }
            | TaskError::InvalidFrontmatter { line, .. }
            | TaskError::MissingTaskName { line, .. } => Some(*line),
            TaskError::NoCriteria { line, .. } => *line,
        }
    }
}

/// Read and parse; a missing file is [`TaskError::Missing`] with hint
/// "run `ralph init` to create one".
pub fn load_task_file(path: &Path) -> Result<TaskDocument, TaskError> {
    use crate::files::{MAX_TEXT, ReadError, read_bytes};
    match read_bytes(path, MAX_TEXT) {
        Ok(bytes) => parse_task_bytes(path, &bytes),
        Err(ReadError::Missing(path)) => Err(TaskError::Missing { path }),
        Err(ReadError::NotRegular { path, kind }) => Err(TaskError::NotRegular { path, kind }),
        Err(ReadError::TooLarge { path, size, .. }) => Err(TaskError::TooLarge { path, size }),
        Err(ReadError::Io { path, source }) => Err(TaskError::Io { path, source }),
        Err(e @ ReadError::NotUtf8 { .. }) => Err(TaskError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

/// Parse bytes already read from `path` (path used only in messages and for the stem).
pub fn parse_task_bytes(path: &Path, bytes: &[u8]) -> Result<TaskDocument, TaskError> {
    let text = decode(path, bytes)?;
    let mut warnings = Vec::new();

    let (frontmatter, frontmatter_end_line, body, first_line) = match split_frontmatter(text) {
        Split::None => {
            warnings.push("no frontmatter: defaults apply".to_string());
            (None, 0, text, 1)
        }
        Split::Unclosed => {
            return Err(TaskError::UnclosedFrontmatter {
                path: path.to_path_buf(),
                line: 1,
            });
        }
        Split::Some {
            yaml,
            close_line,
            body,
        } => {
            let fm = parse_frontmatter(path, yaml, close_line)?;
            (Some(fm), close_line, body, close_line + 1)
        }
    };

    let scan = checklist::scan(body, first_line);
    if scan.checklist.criteria.is_empty() {
        let line = match &scan.checklist.scope {
            Scope::Section { line, .. } => Some(*line),
            Scope::WholeDocument => None,
        };
        return Err(TaskError::NoCriteria {
            path: path.to_path_buf(),
            line,
        });
    }
    if scan.checklist.scope == Scope::WholeDocument {
        warnings.push(
            "no \"## Success Criteria\" heading: every checkbox in the document counts".to_string(),
        );
    }

    let name = frontmatter
        .as_ref()
        .and_then(|fm| fm.task.as_deref())
        .map(checklist::normalize)
        .or_else(|| title_from_headings(&scan.headings))
        .or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "task".to_string());

    Ok(TaskDocument {
        frontmatter,
        frontmatter_end_line,
        name,
        checklist: scan.checklist,
        warnings,
    })
}

/// Validates the bytes (no NUL, valid UTF-8) and strips a UTF-8 BOM.
fn decode<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, TaskError> {
    let line_of = |pos: usize| {
        bytes
            .get(..pos)
            .unwrap_or(bytes)
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    };
    let nul = bytes.iter().position(|&b| b == 0);
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let bad = err.valid_up_to();
            return Err(match nul {
                Some(pos) if pos < bad => TaskError::Binary {
                    path: path.to_path_buf(),
                    line: line_of(pos),
                },
                _ => TaskError::NotUtf8 {
                    path: path.to_path_buf(),
                    line: line_of(bad),
                },
            });
        }
    };
    if let Some(pos) = nul {
        return Err(TaskError::Binary {
            path: path.to_path_buf(),
            line: line_of(pos),
        });
    }
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Result of looking for a frontmatter block.
enum Split<'a> {
    /// The file does not start with a `---` line.
    None,
    /// Opening fence without a closing fence.
    Unclosed,
    /// A complete block.
    Some {
        /// The text between the fences.
        yaml: &'a str,
        /// File line of the closing fence.
        close_line: usize,
        /// Everything after the closing fence line.
        body: &'a str,
    },
}

/// Splits `text` (BOM already stripped) into frontmatter and body.
fn split_frontmatter(text: &str) -> Split<'_> {
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if fence_text(first) == "---" => {}
        _ => return Split::None,
    }
    let yaml_start = text.split_inclusive('\n').next().map_or(0, str::len);
    let mut offset = yaml_start;
    for (idx, line) in lines.enumerate() {
        let fence = fence_text(line);
        if fence == "---" || fence == "..." {
            return Split::Some {
                yaml: text.get(yaml_start..offset).unwrap_or(""),
                close_line: idx + 2,
                body: text.get(offset + line.len()..).unwrap_or(""),
            };
        }
        offset += line.len();
    }
    Split::Unclosed
}

/// A line with its line ending and trailing spaces/tabs removed.
fn fence_text(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r', ' ', '\t'])
}

/// Parses the YAML between the fences; `close_line` is the closing fence's file line.
fn parse_frontmatter(path: &Path, yaml: &str, close_line: usize) -> Result<Frontmatter, TaskError> {
    let fm: Frontmatter = serde_saphyr::from_str::<Option<Frontmatter>>(yaml)
        .map_err(|err| {
            // YAML line 1 is file line 2 (the opening fence is line 1).
            let loc = err.location();
            let yaml_line = loc
                .map(|l| usize::try_from(l.line()).unwrap_or(usize::MAX))
                .filter(|&l| l > 0);
            let line = yaml_line.map_or(1, |l| l.saturating_add(1).clamp(2, close_line.max(2)));
            let mut message =
                short_yaml_message(&serde_saphyr::UserMessageFormatter.format_message(&err));
            let column = loc.map_or(0, |l| usize::try_from(l.column()).unwrap_or(0));
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
        })?
        .unwrap_or_default();
    if fm.task.as_deref().is_none_or(|t| t.trim().is_empty()) {
        return Err(TaskError::MissingTaskName {
            path: path.to_path_buf(),
            line: 1,
        });
    }
    for (key, value) in [
        ("max_iterations", fm.max_iterations),
        ("stuck_threshold", fm.stuck_threshold),
    ] {
        if value == Some(0) {
            return Err(TaskError::InvalidFrontmatter {
                path: path.to_path_buf(),
                line: key_line(yaml, key).map_or(1, |l| l + 1),
                message: format!("{key}: must be at least 1"),
            });
        }
    }
    Ok(fm)
}

/// The 1-based YAML line where a top-level `key:` is set.
fn key_line(yaml: &str, key: &str) -> Option<usize> {
    yaml.lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

/// Shortens a serde-saphyr message: drops the list of allowed keys (the hint has it) and
/// spells out integer range errors.
fn short_yaml_message(raw: &str) -> String {
    let first = raw.lines().next().unwrap_or("").trim();
    let first = first
        .split_once(", expected one of")
        .map_or(first, |(head, _)| head);
    match first {
        "invalid u32" => "expected a whole number from 0 to 4294967295".to_string(),
        "" => "cannot parse yaml".to_string(),
        other => other.to_string(),
    }
}

/// The mapping key on YAML line `line` (1-based) when the error `column` (1-based, in
/// characters) points past it, i.e. the error is about that key's value.
fn key_before_column(yaml: &str, line: usize, column: usize) -> Option<&str> {
    let text = yaml.lines().nth(line.checked_sub(1)?)?;
    let trimmed = text.trim_start();
    let indent = text.chars().count() - trimmed.chars().count();
    let (key, _) = trimmed.split_once(':')?;
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    (valid && column > indent + key.chars().count() + 1).then_some(key)
}

/// Task name from the first `# Task: X` heading, else the first heading's text.
fn title_from_headings(headings: &[checklist::HeadingInfo]) -> Option<String> {
    let task_title = headings.iter().filter(|h| h.level == 1).find_map(|h| {
        let prefix = h.text.get(..5)?;
        if !prefix.eq_ignore_ascii_case("task:") {
            return None;
        }
        let rest = h.text.get(5..)?.trim();
        (!rest.is_empty()).then(|| rest.to_string())
    });
    task_title.or_else(|| {
        headings
            .iter()
            .map(|h| h.text.clone())
            .find(|t| !t.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: &str = "RALPH_TASK.md";

    fn parse(s: &str) -> Result<TaskDocument, TaskError> {
        parse_task_bytes(Path::new(P), s.as_bytes())
    }

    fn err(s: &str) -> TaskError {
        match parse(s) {
            Ok(doc) => panic!("expected an error for {s:?}, got {doc:?}"),
            Err(e) => e,
        }
    }

    fn ok(s: &str) -> TaskDocument {
        match parse(s) {
            Ok(doc) => doc,
            Err(e) => panic!("expected success for {s:?}, got {e}"),
        }
    }

    const GOOD: &str = "---\ntask: Add OAuth login            # required\ntest_command: \"cargo test\"\nmax_iterations: 50\nagent: claude\n---\n# Task: Add OAuth login\nContext.\n\n## Success Criteria\n- [ ] GET /login redirects to the provider\n- [x] Token refresh is covered by a test\n";

    #[test]
    fn parses_the_spec_example() {
        let doc = ok(GOOD);
        let fm = doc.frontmatter.clone().unwrap_or_default();
        assert_eq!(fm.task.as_deref(), Some("Add OAuth login"));
        assert_eq!(fm.test_command.as_deref(), Some("cargo test"));
        assert_eq!(fm.max_iterations, Some(50));
        assert_eq!(fm.agent.as_deref(), Some("claude"));
        assert_eq!(doc.frontmatter_end_line, 6);
        assert_eq!(doc.name, "Add OAuth login");
        assert!(doc.warnings.is_empty(), "{:?}", doc.warnings);
        assert_eq!(
            doc.checklist.criteria,
            vec![
                checklist::Criterion {
                    text: "GET /login redirects to the provider".into(),
                    checked: false,
                    line: 11
                },
                checklist::Criterion {
                    text: "Token refresh is covered by a test".into(),
                    checked: true,
                    line: 12
                },
            ]
        );
        assert_eq!(
            doc.checklist.scope,
            Scope::Section {
                heading: "Success Criteria".into(),
                line: 10
            }
        );
        assert_eq!((doc.checklist.done(), doc.checklist.total()), (1, 2));
    }

    #[test]
    fn all_frontmatter_keys() {
        let doc = ok(
            "---\ntask: t\ntest_command: make\nmax_iterations: 3\nagent: codex\nagent_cmd: my-agent --x\ntimeout: 90s\nidle_timeout: 5m\ngrace: 10s\nstuck_threshold: 4\ncompletion_promise: DONE\nverdict_command: ./judge\n---\n- [ ] a\n",
        );
        let expected = Frontmatter {
            task: Some("t".into()),
            test_command: Some("make".into()),
            max_iterations: Some(3),
            agent: Some("codex".into()),
            agent_cmd: Some("my-agent --x".into()),
            timeout: Some("90s".into()),
            idle_timeout: Some("5m".into()),
            grace: Some("10s".into()),
            stuck_threshold: Some(4),
            completion_promise: Some("DONE".into()),
            verdict_command: Some("./judge".into()),
        };
        assert_eq!(doc.frontmatter, Some(expected));
        assert_eq!(doc.frontmatter_end_line, 13);
        assert_eq!(doc.checklist.criteria[0].line, 14);
    }

    #[test]
    fn crlf_bom_and_trailing_spaces() {
        let s = "\u{feff}---  \r\ntask: T  \r\nmax_iterations: 7\r\n---\t \r\n# Title  \r\n## Success Criteria  \r\n- [ ] a  \r\n- [X] b \r\n";
        let doc = ok(s);
        assert_eq!(doc.name, "T");
        assert_eq!(doc.frontmatter_end_line, 4);
        assert_eq!(
            doc.frontmatter.as_ref().and_then(|f| f.max_iterations),
            Some(7)
        );
        let got: Vec<_> = doc
            .checklist
            .criteria
            .iter()
            .map(|c| (c.text.as_str(), c.checked, c.line))
            .collect();
        assert_eq!(got, vec![("a", false, 7), ("b", true, 8)]);
        // `...` closes too.
        let doc = ok("---\r\ntask: T\r\n...  \r\n- [ ] a\r\n");
        assert_eq!(doc.frontmatter_end_line, 3);
        assert_eq!(doc.checklist.criteria[0].line, 4);
    }

    #[test]
    fn frontmatter_errors_with_lines() {
        type Case = (&'static str, &'static str, usize, &'static str);
        let cases: Vec<Case> = vec![
            (
                "unterminated",
                "---\ntask: x\n- [ ] a\n",
                1,
                "RALPH_TASK.md:1: frontmatter opened at line 1 is never closed",
            ),
            (
                "unterminated with crlf and bom",
                "\u{feff}---\r\ntask: x\r\n",
                1,
                "RALPH_TASK.md:1: frontmatter opened at line 1 is never closed",
            ),
            (
                "bad yaml at line 3",
                "---\ntask: x\nagent: [unclosed\n---\n- [ ] a\n",
                3,
                "RALPH_TASK.md:3: invalid frontmatter: ",
            ),
            (
                "unknown key",
                "---\ntask: x\ntest_command: t\nfoo: 1\n---\n- [ ] a\n",
                4,
                "RALPH_TASK.md:4: invalid frontmatter: unknown field `foo`",
            ),
            (
                "zero max_iterations",
                "---\ntask: x\nagent: a\nmax_iterations: 0\n---\n- [ ] a\n",
                4,
                "RALPH_TASK.md:4: invalid frontmatter: max_iterations: must be at least 1",
            ),
            (
                "non-numeric max_iterations",
                "---\ntask: x\nmax_iterations: fifty\n---\n- [ ] a\n",
                3,
                "RALPH_TASK.md:3: invalid frontmatter: max_iterations: expected a whole number from 0 to 4294967295",
            ),
            (
                "negative max_iterations",
                "---\ntask: x\n\nmax_iterations: -5\n---\n- [ ] a\n",
                4,
                "RALPH_TASK.md:4: invalid frontmatter: max_iterations: expected a whole number from 0 to 4294967295",
            ),
            (
                "crlf bad yaml line",
                "---\r\ntask: x\r\nstuck_threshold: many\r\n---\r\n- [ ] a\r\n",
                3,
                "RALPH_TASK.md:3: invalid frontmatter: stuck_threshold: ",
            ),
            (
                "not a mapping",
                "---\n- a\n---\n- [ ] a\n",
                2,
                "RALPH_TASK.md:2: invalid frontmatter: ",
            ),
            (
                "missing task",
                "---\nagent: claude\n---\n- [ ] a\n",
                1,
                "RALPH_TASK.md:1: frontmatter has no `task`",
            ),
            (
                "blank task",
                "---\ntask: '   '\n---\n- [ ] a\n",
                1,
                "RALPH_TASK.md:1: frontmatter has no `task`",
            ),
            (
                "null task",
                "---\ntask: ~\n---\n- [ ] a\n",
                1,
                "RALPH_TASK.md:1: frontmatter has no `task`",
            ),
            (
                "empty frontmatter",
                "---\n---\n- [ ] a\n",
                1,
                "RALPH_TASK.md:1: frontmatter has no `task`",
            ),
            (
                "comment-only frontmatter",
                "---\n# nothing\n\n---\n- [ ] a\n",
                1,
                "RALPH_TASK.md:1: frontmatter has no `task`",
            ),
        ];
        for (name, input, line, prefix) in cases {
            let e = err(input);
            assert_eq!(e.line(), Some(line), "case {name}: {e}");
            let msg = e.to_string();
            assert!(msg.starts_with(prefix), "case {name}: {msg:?}");
            assert!(!msg.contains('\n'), "case {name}: multi-line {msg:?}");
            assert!(e.hint().is_some(), "case {name}");
        }
        match err("---\ntask: x\nfoo: 1\n---\n- [ ] a\n") {
            e @ TaskError::InvalidFrontmatter { .. } => {
                assert_eq!(
                    e.to_string(),
                    "RALPH_TASK.md:3: invalid frontmatter: unknown field `foo`"
                );
                assert!(e.hint().is_some_and(|h| h.contains("verdict_command")));
            }
            other => panic!("unexpected {other:?}"),
        }
        match err("---\n---\n- [ ] a\n") {
            TaskError::MissingTaskName { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_frontmatter_and_names() {
        let cases: Vec<(&str, &str, &str)> = vec![
            (
                "task title",
                "Intro\n# Overview\n# Task: Fix the thing\n## Success Criteria\n- [ ] a\n",
                "Fix the thing",
            ),
            (
                "task title, any case",
                "# TASK:   spaced   out\n- [ ] a\n",
                "spaced out",
            ),
            (
                "first heading",
                "## Background\n# Other\n## Success Criteria\n- [ ] a\n",
                "Background",
            ),
            ("file stem", "- [ ] a\n", "RALPH_TASK"),
            (
                "a leading thematic break is not frontmatter when indented",
                " ---\n- [ ] a\n",
                "RALPH_TASK",
            ),
        ];
        for (name, input, expected) in cases {
            let doc = ok(input);
            assert_eq!(doc.name, expected, "case {name}");
            assert_eq!(doc.frontmatter, None, "case {name}");
            assert_eq!(doc.frontmatter_end_line, 0, "case {name}");
            assert!(
                doc.warnings
                    .contains(&"no frontmatter: defaults apply".to_string()),
                "case {name}: {:?}",
                doc.warnings
            );
        }
    }

    #[test]
    fn whole_document_fallback_warns() {
        let doc = ok("---\ntask: t\n---\n# T\n- [ ] a\n## Notes\n- [x] b\n> - [ ] quoted\n");
        assert_eq!(doc.checklist.scope, Scope::WholeDocument);
        assert_eq!(doc.checklist.total(), 2);
        assert_eq!(doc.warnings.len(), 1);
        assert!(
            doc.warnings[0].contains("every checkbox"),
            "{:?}",
            doc.warnings
        );
        // With a criteria heading there is no warning.
        let doc = ok("---\ntask: t\n---\n## Success Criteria\n- [ ] a\n");
        assert!(doc.warnings.is_empty());
    }

    #[test]
    fn all_checked_is_valid() {
        let doc = ok("---\ntask: t\n---\n## Success Criteria\n- [x] a\n- [X] b\n");
        assert_eq!(doc.checklist.done(), 2);
        assert_eq!(doc.checklist.remaining().count(), 0);
    }

    #[test]
    fn no_criteria_errors() {
        let cases: Vec<(&str, &str, Option<usize>)> = vec![
            (
                "no checkboxes at all",
                "---\ntask: t\n---\n# T\ntext\n",
                None,
            ),
            ("empty file", "", None),
            (
                "heading without checkboxes",
                "---\ntask: t\n---\n# T\n\n## Success Criteria\n- plain\n## Other\n- [ ] outside\n",
                Some(6),
            ),
            (
                "only in code blocks",
                "---\ntask: t\n---\n## Success Criteria\n```\n- [ ] a\n```\n~~~\n- [x] b\n~~~\n",
                Some(4),
            ),
            (
                "only in code, no heading",
                "# T\n\n    - [ ] indented\n<!-- - [ ] c -->\n",
                None,
            ),
        ];
        for (name, input, line) in cases {
            let e = err(input);
            assert!(
                matches!(e, TaskError::NoCriteria { .. }),
                "case {name}: {e:?}"
            );
            assert_eq!(e.line(), line, "case {name}");
            let expected = match line {
                Some(l) => format!(
                    "RALPH_TASK.md:{l}: no criteria: needs `- [ ]` checkboxes under ## Success Criteria"
                ),
                None => {
                    "RALPH_TASK.md: no criteria: needs `- [ ]` checkboxes under ## Success Criteria"
                        .to_string()
                }
            };
            assert_eq!(e.to_string(), expected, "case {name}");
            assert_eq!(
                e.hint().as_deref(),
                Some("add `- [ ]` checkboxes under ## Success Criteria")
            );
        }
    }

    #[test]
    fn binary_and_invalid_utf8() {
        let cases: Vec<(&str, &[u8], &str, usize)> = vec![
            ("nul on line 3", b"a\nb\nc\0d\n- [ ] x\n", "binary", 3),
            ("nul on line 1", b"\0", "binary", 1),
            ("invalid utf8 on line 2", b"---\n\xff\n---\n", "utf-8", 2),
            ("truncated sequence", b"ok\nok\nok\xe2\x82", "utf-8", 3),
            ("nul before bad utf8", b"\0\n\xff", "binary", 1),
            ("bad utf8 before nul", b"\xff\n\0", "utf-8", 1),
            (
                "nul in frontmatter",
                b"---\ntask: \0\n---\n- [ ] a\n",
                "binary",
                2,
            ),
        ];
        for (name, bytes, what, line) in cases {
            let e = match parse_task_bytes(Path::new(P), bytes) {
                Ok(doc) => panic!("case {name}: unexpected {doc:?}"),
                Err(e) => e,
            };
            assert_eq!(e.line(), Some(line), "case {name}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("{P}:{line}: ")),
                "case {name}: {msg}"
            );
            assert!(msg.to_lowercase().contains(what), "case {name}: {msg}");
        }
    }

    #[test]
    fn load_missing_file() {
        let path = Path::new("/nonexistent/dir/RALPH_TASK.md");
        let e = match load_task_file(path) {
            Ok(doc) => panic!("unexpected {doc:?}"),
            Err(e) => e,
        };
        assert!(matches!(e, TaskError::Missing { .. }));
        assert_eq!(e.line(), None);
        assert_eq!(e.hint().as_deref(), Some("run `ralph init` to create one"));
        assert!(
            e.to_string()
                .starts_with("/nonexistent/dir/RALPH_TASK.md: ")
        );
    }

    #[test]
    fn load_existing_file() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("MY_TASK.md");
        std::fs::write(&path, "## Success Criteria\n- [ ] a\n")?;
        let doc = load_task_file(&path)?;
        assert_eq!(doc.name, "Success Criteria");
        assert_eq!(doc.checklist.total(), 1);
        // A directory (or a FIFO, a device) is refused at once, not read.
        let e = load_task_file(dir.path()).err();
        assert!(matches!(e, Some(TaskError::NotRegular { .. })), "{e:?}");
        let e = load_task_file(std::path::Path::new("/dev/zero")).err();
        assert!(matches!(e, Some(TaskError::NotRegular { .. })), "{e:?}");
        Ok(())
    }

    #[test]
    fn two_hundred_thousand_criteria() {
        let n = 200_000;
        let mut s = String::with_capacity(n * 24 + 64);
        s.push_str("---\ntask: big\n---\n## Success Criteria\n");
        for i in 0..n {
            if i % 3 == 0 {
                s.push_str("- [x] criterion ");
            } else {
                s.push_str("- [ ] criterion ");
            }
            s.push_str(&i.to_string());
            s.push('\n');
        }
        let doc = ok(&s);
        assert_eq!(doc.checklist.total(), n);
        assert_eq!(doc.checklist.done(), n.div_ceil(3));
        let last = doc
            .checklist
            .criteria
            .last()
            .map(|c| (c.line, c.text.clone()));
        assert_eq!(last, Some((n + 4, format!("criterion {}", n - 1))));
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("---\n".to_string()),
            Just("...\n".to_string()),
            Just("task: x\n".to_string()),
            Just("max_iterations: 5\n".to_string()),
            Just("- [ ] ".to_string()),
            Just("* [x] ".to_string()),
            Just("1. [X] ".to_string()),
            Just("  ".to_string()),
            Just("\t".to_string()),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just("\u{feff}".to_string()),
            Just("## Success Criteria\n".to_string()),
            Just("Criteria\n---\n".to_string()),
            Just("# Task: ".to_string()),
            Just("```\n".to_string()),
            Just("~~~".to_string()),
            Just("> ".to_string()),
            Just("<!--".to_string()),
            Just("-->".to_string()),
            Just("<div>".to_string()),
            Just("`".to_string()),
            Just("*".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just(": ".to_string()),
            Just("&amp;".to_string()),
            Just("\0".to_string()),
            "[a-z ]{0,8}",
            any::<char>().prop_map(String::from),
        ]
    }

    proptest! {
        #[test]
        fn never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_task_bytes(Path::new(P), &bytes);
        }

        #[test]
        fn never_panics_on_markdownish(parts in proptest::collection::vec(fragment(), 0..60)) {
            let s = parts.concat();
            let _ = parse_task_bytes(Path::new(P), s.as_bytes());
            let _ = checklist::parse_checklist(&s, 1);
            let _ = checklist::parse_checklist(&s, 0);
        }

        #[test]
        fn rendered_criteria_round_trip(
            items in proptest::collection::vec(
                ("[A-Za-z0-9][A-Za-z0-9 ]{0,30}", any::<bool>(), 0usize..5),
                1..40,
            ),
        ) {
            let mut s = String::from("---\ntask: gen\n---\n# Task: gen\n\n## Success Criteria\n");
            for (text, checked, marker) in &items {
                let bullet = ["-", "*", "+", "1.", "7)"][*marker];
                let mark = if *checked { "x" } else { " " };
                // A blank line between items keeps differing markers from merging oddly.
                s.push_str(&format!("{bullet} [{mark}] {text}\n\n"));
            }
            s.push_str("## Notes\n- [ ] not a criterion\n");
            let doc = parse(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected: Vec<(String, bool)> = items
                .iter()
                .map(|(t, c, _)| (checklist::normalize(t), *c))
                .collect();
            let got: Vec<(String, bool)> = doc
                .checklist
                .criteria
                .iter()
                .map(|c| (c.text.clone(), c.checked))
                .collect();
            prop_assert_eq!(got, expected);
            prop_assert_eq!(doc.checklist.total(), items.len());
            prop_assert_eq!(doc.checklist.done(), items.iter().filter(|i| i.1).count());
            for (i, c) in doc.checklist.criteria.iter().enumerate() {
                prop_assert_eq!(c.line, 7 + 2 * i);
            }
        }
    }
}
