//! Pre-flight on the epic docs: `[plan]` stripped from story headings (so `/cpm:do` plans
//! inline instead of stopping at a plan-mode gate), and the task budget (`###` task headings).

use std::path::{Path, PathBuf};

use super::{CpmError, read_text};
use crate::markdown;

const PLAN_TAG: &str = "[plan]";

/// Strip `[plan]` from `##` and `###` headings (ATX headings outside code, block quotes and list
/// items, read with the Markdown reader) so `/cpm:do` plans inline instead of stopping at an
/// interactive plan-mode gate.
///
/// Each tag is removed with the whitespace it leaves behind (`## Set up OAuth [plan]` →
/// `## Set up OAuth`); every other byte, line endings included, is unchanged. One log line
/// per changed heading: `Stripped [plan] from Story {N}: {heading}`, where `{heading}` is the
/// heading text after stripping (without a leading `Story N:` that `N` was read from) and
/// `N` is, in order: the `Story N` the heading text opens with; the `**Story**: N` field in
/// the heading's section; for a `###` heading, the number of the `##` story it sits in; else
/// `?`.
pub(crate) fn strip_plan_markers(text: &str) -> (String, Vec<String>) {
    if !text.contains(PLAN_TAG) {
        return (text.to_string(), Vec::new());
    }
    let md = markdown::parse(text);
    let heads: Vec<&markdown::Heading> = md
        .top_headings()
        .map(|(_, h)| h)
        .filter(|h| h.atx)
        .collect();
    let mut out = String::with_capacity(text.len());
    let mut logs = Vec::new();
    let mut at = 0;
    let mut parent_story: Option<String> = None;
    for (n, h) in heads.iter().enumerate() {
        let own = story_prefix(&h.markup).map(|(num, _)| num);
        let end = heads.get(n + 1).map_or(text.len(), |next| next.range.start);
        let field = md
            .lines
            .iter()
            .filter(|l| l.range.start >= h.range.end && l.range.start < end)
            .find_map(|l| l.field("story"))
            .and_then(|f| f.value.split_whitespace().next().map(str::to_string));
        let number = own.clone().or(field);
        if h.level <= 2 {
            parent_story.clone_from(&number);
        }
        let line = md.line_range(h.line);
        let content = text.get(line.clone()).unwrap_or("");
        if !(2..=3).contains(&h.level) || !content.contains(PLAN_TAG) || line.start < at {
            continue;
        }
        out.push_str(text.get(at..line.start).unwrap_or(""));
        out.push_str(&remove_plan_tag(content));
        at = line.end;
        let n = number
            .or_else(|| (h.level == 3).then(|| parent_story.clone()).flatten())
            .unwrap_or_else(|| "?".to_string());
        let stripped = remove_plan_tag(&h.markup);
        let text = stripped.trim();
        let shown = match (&own, story_prefix(text)) {
            (Some(_), Some((_, rest))) if !rest.is_empty() => rest,
            _ => text,
        };
        logs.push(format!("Stripped [plan] from Story {n}: {shown}"));
    }
    out.push_str(text.get(at..).unwrap_or(""));
    (out, logs)
}

/// [`strip_plan_markers`] applied to an epic doc on disk (`rel` under `root`), written back
/// only when a tag was stripped; the log lines, each naming the file. The epic is read as an
/// agent-touchable file ([`crate::files::read_text`]).
pub(crate) fn strip_plan_file(root: &Path, rel: &Path) -> Result<Vec<String>, CpmError> {
    let path = root.join(rel);
    let text = crate::files::read_text(&path).map_err(|e| CpmError::Read {
        path: rel.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let (new, lines) = strip_plan_markers(&text);
    if lines.is_empty() {
        return Ok(lines);
    }
    crate::files::write_atomic(&path, new.as_bytes(), 0o644).map_err(|source| CpmError::Write {
        path: rel.to_path_buf(),
        source,
    })?;
    Ok(lines
        .into_iter()
        .map(|l| format!("{l} ({})", rel.display()))
        .collect())
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

/// The `###` (task) headings outside code, block quotes and list items: the skill's
/// task-budget count.
pub(crate) fn count_tasks(text: &str) -> u32 {
    let n = markdown::parse(text)
        .top_headings()
        .filter(|(_, h)| h.atx && h.level == 3)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The task budget for a set of epic docs: their `###` task headings, summed.
pub(crate) fn task_budget(root: &Path, epics: &[PathBuf]) -> Result<u32, CpmError> {
    let mut total = 0u32;
    for rel in epics {
        total = total.saturating_add(count_tasks(&read_text(&root.join(rel), rel)?));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use proptest::prelude::*;

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

    #[test]
    fn only_story_headings_lose_their_tag() {
        let cases = [
            "> ## Quoted [plan]\n",
            "- ## In a list [plan]\n",
            "<!--\n## Commented [plan]\n-->\n",
            "    ## Indented code [plan]\n",
            "~~~\n### Fenced [plan]\n~~~\n",
            "Setext [plan]\n---\n",
            "#### Deep [plan]\n",
        ];
        for text in cases {
            let (out, logs) = strip_plan_markers(text);
            assert_eq!((out.as_str(), logs.len()), (text, 0), "{text}");
        }
    }

    #[test]
    fn task_headings_outside_code_quotes_and_lists_count() {
        let text = "### a\n> ### quoted\n<!--\n### commented\n-->\n- ### in a list\n\n### b ###\n";
        assert_eq!(count_tasks(text), 2);
        assert_eq!(count_tasks(""), 0);
    }

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
        fn count_tasks_never_panics(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*") {
            let _ = count_tasks(&text);
        }
    }
}
