//! `RALPH_TASK.md` loading: byte validation, YAML frontmatter, task name and checklist.
//!
//! The file is an optional `---`-fenced YAML frontmatter block followed by markdown whose
//! success criteria are GFM task-list items (see [`super::checklist`]). Every failure is a
//! [`TaskError`] naming the file and, where known, the 1-based file line; what ralph reads
//! but does not refuse (no frontmatter, keys of other tools, no criteria heading) is a
//! [`Warning`] naming the same.

mod error;
mod frontmatter;

use std::fmt;
use std::path::{Path, PathBuf};

use super::checklist::{self, Checklist, Scope};
use error::Located;
pub(crate) use error::TaskError;
pub(crate) use frontmatter::Frontmatter;

/// A parsed task file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskDocument {
    /// `None` when the file has no frontmatter.
    pub(crate) frontmatter: Option<Frontmatter>,
    /// 0 when there is no frontmatter; else the file line of the closing fence.
    pub(crate) frontmatter_end_line: usize,
    /// Frontmatter `task`, else the title heading, else the file stem.
    pub(crate) name: String,
    /// The success criteria.
    pub(crate) checklist: Checklist,
    /// What the file holds that ralph reads past, in file order.
    pub(crate) warnings: Vec<Warning>,
}

/// Something in a task file ralph reads past: shown once when a run starts, and by `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    /// The file.
    pub(crate) path: PathBuf,
    /// The 1-based file line, when there is one.
    pub(crate) line: Option<usize>,
    /// A lowercase fragment.
    pub(crate) message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", Located(&self.path, self.line), self.message)
    }
}

/// Read and parse; a missing file is [`TaskError::Missing`] with hint
/// "run `ralph init` to create one".
pub(crate) fn load_task_file(path: &Path) -> Result<TaskDocument, TaskError> {
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
pub(crate) fn parse_task_bytes(path: &Path, bytes: &[u8]) -> Result<TaskDocument, TaskError> {
    let text = decode(path, bytes)?;
    let warn = |line, message: &str| Warning {
        path: path.to_path_buf(),
        line,
        message: message.to_string(),
    };
    let mut warnings = Vec::new();
    let (frontmatter, frontmatter_end_line, body, first_line) = match split_frontmatter(text) {
        Split::None => {
            warnings.push(warn(None, "no frontmatter: defaults apply"));
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
            let (fm, unknown) = frontmatter::parse_frontmatter(path, yaml, close_line)?;
            warnings.extend(unknown);
            (Some(fm), close_line, body, close_line + 1)
        }
    };

    let scan = checklist::scan(body, first_line);
    let first_heading = scan.looked_under.first().map(|s| s.line);
    if scan.checklist.criteria.is_empty() {
        return Err(TaskError::NoCriteria {
            path: path.to_path_buf(),
            line: first_heading,
        });
    }
    if scan.checklist.scope == Scope::WholeDocument {
        warnings.push(warn(first_heading, &whole_document(&scan.looked_under)));
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

/// Why every checkbox counts: no criteria heading, or the ones there hold no criterion.
fn whole_document(looked_under: &[checklist::Section]) -> String {
    match looked_under {
        [] => "no \"## Success Criteria\" heading: every checkbox in the document counts".into(),
        [one] => format!(
            "no criterion under \"{}\": every checkbox in the document counts",
            one.heading
        ),
        many => format!(
            "no criterion under any of the {} criteria headings (lines {}): every checkbox in \
             the document counts",
            many.len(),
            many.iter()
                .map(|s| s.line.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
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
mod tests;
