//! Epic docs (`docs/epics/NN-epic-*.md`): the header's title, `**Status**:` and
//! `**Source spec**:` fields, read with the Markdown reader; listing and filtering them.

use std::path::{Path, PathBuf};

use super::targets::relative_to_root;
use super::{CpmError, EPICS_DIR, leading_number, list_dir, read_text};
use crate::markdown;

/// Statuses that make an epic not runnable: finished (`Complete`, its synonym `Done`) or
/// retired (`Superseded`, `Withdrawn`).
const TERMINAL_STATUSES: [&str; 4] = ["complete", "done", "superseded", "withdrawn"];

/// One epic doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Epic {
    /// Path relative to the repository root, e.g. `docs/epics/23-epic-login.md`.
    pub(crate) path: PathBuf,
    /// The leading number of the file name (`23` for `23-epic-*`, `45` for `45-03-epic-*`).
    pub(crate) number: Option<u32>,
    /// The `# ` title, else the file stem.
    pub(crate) title: String,
    /// The header's `**Status**:` value, markup removed (e.g. `Complete`, `In Progress`).
    pub(crate) status: String,
    /// The header's `**Source spec**:` path, when present.
    pub(crate) source_spec: Option<String>,
}

impl Epic {
    /// Not Complete, Done, Superseded or Withdrawn (case-insensitive, first word of the status).
    pub(crate) fn is_incomplete(&self) -> bool {
        !status_is_terminal(&self.status)
    }
}

/// Whether a status value finishes or retires an epic: its first word is Complete, Done,
/// Superseded or Withdrawn, case-insensitive (`Complete (2026-02-12)` counts; `Not complete`
/// does not).
pub(crate) fn status_is_terminal(status: &str) -> bool {
    let word: String = strip_markup(status)
        .chars()
        .take_while(|c| c.is_alphabetic())
        .collect();
    let word = word.to_lowercase();
    TERMINAL_STATUSES.contains(&word.as_str())
}

/// Read and parse one epic doc. `rel` is relative to `root` (an absolute path inside `root`
/// is accepted and stored relative).
pub(crate) fn read_epic(root: &Path, rel: &Path) -> Result<Epic, CpmError> {
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
///
/// The header is everything before the first `##` (or deeper) heading: the first `# ` heading
/// is the title, and the first `Status` and `Source spec` fields (`**Status**: x`,
/// `**Status:** x`, `Status: x`, also in a list item or a block quote) are the epic's. Later
/// fields belong to the stories. Code blocks never count.
pub(crate) fn parse_epic(rel: &Path, text: &str) -> Result<Epic, CpmError> {
    let file_name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = rel
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let md = markdown::parse(text);
    let mut title = None;
    let mut header_end = text.len();
    for (_, h) in md.top_headings() {
        if h.level >= 2 {
            header_end = h.range.start;
            break;
        }
        if title.is_none() && !h.markup.is_empty() {
            title = Some(h.markup.clone());
        }
    }
    let header = || md.lines.iter().filter(|l| l.range.start < header_end);
    let status = header().find_map(|l| l.field("status").map(|f| (l.line, f.value)));
    let source_spec = header().find_map(|l| {
        let f = l.field("source spec")?;
        spec_reference(&f.value, &l.spans.links)
    });
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
pub(crate) fn list_epics(root: &Path) -> Result<Vec<Epic>, CpmError> {
    epic_files(root)?
        .iter()
        .map(|rel| read_epic(root, rel))
        .collect()
}

/// The epic docs that are not finished or retired, in file-name order.
pub(crate) fn incomplete_epics(root: &Path) -> Result<Vec<Epic>, CpmError> {
    Ok(list_epics(root)?
        .into_iter()
        .filter(Epic::is_incomplete)
        .collect())
}

/// Spec mode: the epics whose `**Source spec**` names `spec`, comparing basenames (as the
/// roll-up does), in file-name order.
pub(crate) fn epics_for_spec(root: &Path, spec: &Path) -> Result<Vec<Epic>, CpmError> {
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
pub(super) fn epic_files(root: &Path) -> Result<Vec<PathBuf>, CpmError> {
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

/// `*-epic-*.md`, the skill's glob, less coverage matrices: a matrix whose slug holds `epic`
/// (`45-03-coverage-epic-scope.md`) matches the glob and is still no epic.
pub(super) fn is_epic_file_name(name: &str) -> bool {
    name.ends_with(".md")
        && name
            .find("-epic-")
            .is_some_and(|i| i > 0 && i + "-epic-".len() <= name.len() - ".md".len())
        && !is_matrix_file_name(name)
}

/// A coverage matrix's file name, as the roll-up tells one: `-coverage-` right after the
/// numeric prefix (`45-coverage-x.md`, `45-03-coverage-x.md`). `45-03-epic-coverage-x.md` is
/// an epic whose slug starts with `coverage`.
pub(crate) fn is_matrix_file_name(name: &str) -> bool {
    let Some((prefix, _)) = name.split_once("-coverage-") else {
        return false;
    };
    let parts: Vec<&str> = prefix.split('-').collect();
    (1..=2).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
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

/// The path a `**Source spec**:` value names: its link's target, else the first `.md` token of
/// its text, else the first token; angle brackets and punctuation around it removed.
fn spec_reference(value: &str, links: &[String]) -> Option<String> {
    if let Some(target) = links
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .map(|t| t.trim_matches(|c| c == '<' || c == '>'))
        .find(|t| !t.is_empty())
    {
        return Some(target.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use proptest::prelude::*;

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

    #[test]
    fn coverage_matrices_are_never_epics() -> TestResult {
        for matrix in [
            "45-03-coverage-epic-scope.md",
            "02-coverage-epic-billing.md",
            "7-coverage-x.md",
        ] {
            assert!(is_matrix_file_name(matrix), "{matrix}");
            assert!(!is_epic_file_name(matrix), "{matrix}");
        }
        for epic in [
            "44-01-epic-coverage-rollup-script.md",
            "02-epic-epic-scope.md",
            "1-2-3-coverage-epic-x.md",
            "x1-coverage-epic-y.md",
            "01--coverage-epic-y.md",
        ] {
            assert!(!is_matrix_file_name(epic), "{epic}");
            assert!(is_epic_file_name(epic), "{epic}");
        }
        // A matrix with no **Status** beside the spec's epics: spec mode still starts.
        let root = repo();
        let r = root.path();
        let spec = "docs/specifications/45-spec-x.md";
        write(
            r,
            "docs/epics/45-03-epic-scope.md",
            &epic_doc("E", "Pending", Some(spec)),
        );
        write(
            r,
            "docs/epics/45-03-coverage-epic-scope.md",
            &format!("# Coverage Matrix\n\n**Source spec**: {spec}\n"),
        );
        let found: Vec<String> = epics_for_spec(r, Path::new(spec))?
            .into_iter()
            .map(|e| e.path.display().to_string())
            .collect();
        assert_eq!(found, ["docs/epics/45-03-epic-scope.md"]);
        Ok(())
    }

    #[test]
    fn fields_in_comments_and_code_do_not_count() -> TestResult {
        let text =
            "# E\n<!-- **Status**: Complete -->\n\n    **Status**: Done\n\n**Status**: Pending\n";
        let e = parse_epic(Path::new("docs/epics/01-epic-x.md"), text)?;
        assert_eq!((e.status.as_str(), e.title.as_str()), ("Pending", "E"));
        Ok(())
    }

    proptest! {
        #[test]
        fn parse_epic_never_panics(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*") {
            let _ = parse_epic(Path::new("docs/epics/1-epic-x.md"), &text);
        }
    }
}
