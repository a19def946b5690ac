//! Success-criteria checklist extraction from the markdown body of a `RALPH_TASK.md`.
//!
//! A criterion is a GFM task-list item (`- [ ]`, `* [x]`, `1. [X]`, nested items included)
//! under the first "criteria" heading (see [`parse_checklist`]). Everything is read with the
//! one Markdown reader ([`crate::markdown`]), so items inside code blocks, HTML blocks/comments
//! and block quotes never count. Parsing never fails and never panics; the caller decides what an
//! empty checklist means.

use crate::markdown;

/// One success criterion: a task-list item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criterion {
    /// The item's own inline text, markup flattened, whitespace collapsed, trimmed.
    pub text: String,
    /// `[x]` / `[X]`.
    pub checked: bool,
    /// 1-based line in the task file (frontmatter lines included).
    pub line: usize,
}

/// Where the criteria were taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The section under a criteria heading (e.g. `## Success Criteria`).
    Section {
        /// The heading's text (flattened, whitespace collapsed).
        heading: String,
        /// 1-based file line of the heading.
        line: usize,
    },
    /// No criteria heading exists: every task-list item in the document counts.
    WholeDocument,
}

/// The criteria of a task document, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checklist {
    /// All criteria, checked or not, in document order.
    pub criteria: Vec<Criterion>,
    /// Which part of the document they came from.
    pub scope: Scope,
    /// The unchecked task items outside that section (none for [`Scope::WholeDocument`]),
    /// normalised: a criterion moved out of the section (a second criteria heading above it
    /// with checked copies) is still there, unchecked.
    pub unchecked_outside: Vec<String>,
}

impl Checklist {
    /// Number of checked criteria.
    pub fn done(&self) -> usize {
        self.criteria.iter().filter(|c| c.checked).count()
    }

    /// Number of criteria.
    pub fn total(&self) -> usize {
        self.criteria.len()
    }

    /// Unchecked criteria, in document order.
    pub fn remaining(&self) -> impl Iterator<Item = &Criterion> {
        self.criteria.iter().filter(|c| !c.checked)
    }
}

/// Heading phrases that mark the criteria section, in priority order. Each phrase is tried
/// over all headings before the next phrase is considered.
const SECTION_PHRASES: [&str; 4] = [
    "success criteria",
    "acceptance criteria",
    "criteria",
    "definition of done",
];

/// A heading found in the body (outside block quotes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeadingInfo {
    /// 1..=6.
    pub(super) level: u8,
    /// Flattened, whitespace-collapsed text.
    pub(super) text: String,
    /// 1-based file line.
    pub(super) line: usize,
    /// Byte offset of the heading's start in the body.
    start: usize,
    /// Byte offset just past the heading in the body.
    end: usize,
}

/// Everything one pass over the body yields; `document` uses the headings for the title.
#[derive(Debug)]
pub(super) struct Scan {
    pub(super) checklist: Checklist,
    pub(super) headings: Vec<HeadingInfo>,
}

/// Parses the checklist of a task body.
///
/// `body` is the markdown after the frontmatter; `first_line` is the file line number of
/// body's first line. The criteria are the task-list items under the first heading whose
/// text contains "Success Criteria" (case-insensitive), else "Acceptance Criteria", else
/// "Criteria", else "Definition of Done"; the section ends at the next heading of the same
/// or a higher level. Without such a heading every task-list item counts
/// ([`Scope::WholeDocument`]).
pub fn parse_checklist(body: &str, first_line: usize) -> Checklist {
    scan(body, first_line).checklist
}

/// Normalised criterion text used for integrity comparisons: Unicode NFC (so `café` typed as
/// `e` + U+0301 is the same criterion), whitespace collapsed, trimmed.
pub fn normalize(text: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let nfc: String = text.nfc().collect();
    let mut out = String::with_capacity(nfc.len());
    for word in nfc.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// One pass over the body (the Markdown reader's headings and task items), then section
/// selection.
pub(super) fn scan(body: &str, first_line: usize) -> Scan {
    let md = markdown::parse_at(body, first_line);
    let headings: Vec<HeadingInfo> = md
        .headings
        .iter()
        .filter(|h| !h.quoted)
        .map(|h| HeadingInfo {
            level: h.level,
            text: normalize(&h.text),
            line: h.line,
            start: h.range.start,
            end: h.range.end,
        })
        .collect();

    let section = SECTION_PHRASES.iter().find_map(|phrase| {
        headings
            .iter()
            .position(|h| h.text.to_lowercase().contains(phrase))
    });

    let (range, scope) = match section {
        Some(idx) => {
            let h = &headings[idx];
            let end = headings[idx + 1..]
                .iter()
                .find(|next| next.level <= h.level)
                .map_or(body.len(), |next| next.start);
            (
                h.end..end,
                Scope::Section {
                    heading: h.text.clone(),
                    line: h.line,
                },
            )
        }
        None => (0..body.len(), Scope::WholeDocument),
    };

    let (inside, outside): (Vec<_>, Vec<_>) = md
        .items
        .into_iter()
        .filter(|item| !item.quoted)
        .partition(|item| range.contains(&item.at));
    let criteria = inside
        .into_iter()
        .filter_map(|item| {
            Some(Criterion {
                checked: item.task?,
                text: normalize(&item.text),
                line: item.line,
            })
        })
        .collect();
    let unchecked_outside = outside
        .into_iter()
        .filter(|item| item.task == Some(false))
        .map(|item| normalize(&item.text))
        .collect();

    Scan {
        checklist: Checklist {
            criteria,
            scope,
            unchecked_outside,
        },
        headings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crit(text: &str, checked: bool, line: usize) -> Criterion {
        Criterion {
            text: text.to_string(),
            checked,
            line,
        }
    }

    fn texts(c: &Checklist) -> Vec<(&str, bool, usize)> {
        c.criteria
            .iter()
            .map(|c| (c.text.as_str(), c.checked, c.line))
            .collect()
    }

    #[test]
    fn markers_lists_nesting_and_text() {
        type Case = (&'static str, &'static str, Vec<(&'static str, bool, usize)>);
        let cases: Vec<Case> = vec![
            (
                "four bullet markers and ordered lists",
                "## Success Criteria\n- [ ] dash\n* [x] star\n+ [X] plus\n1. [ ] one\n2) [x] two\n",
                vec![
                    ("dash", false, 2),
                    ("star", true, 3),
                    ("plus", true, 4),
                    ("one", false, 5),
                    ("two", true, 6),
                ],
            ),
            (
                "nested items count, parent text excludes children",
                "## Success Criteria\n- [ ] parent\n  - [x] child\n    1. [ ] grandchild\n- [ ] next\n",
                vec![
                    ("parent", false, 2),
                    ("child", true, 3),
                    ("grandchild", false, 4),
                    ("next", false, 5),
                ],
            ),
            (
                "nested under a plain bullet",
                "## Success Criteria\n- group\n  - [ ] inner\n",
                vec![("inner", false, 3)],
            ),
            (
                "uppercase X is done",
                "## Success Criteria\n- [X] upper\n- [x] lower\n- [ ] open\n",
                vec![("upper", true, 2), ("lower", true, 3), ("open", false, 4)],
            ),
            (
                "inline markup flattened, code spans keep content, whitespace collapsed",
                "## Success Criteria\n- [ ]   **GET**  `/login`   _redirects_ to [the provider](http://x) <!-- note -->\n  and   ~~more~~\n",
                vec![(
                    "GET /login redirects to the provider and ~~more~~",
                    false,
                    2,
                )],
            ),
            (
                "loose item uses the marker's paragraph only",
                "## Success Criteria\n\n- [ ] title line\n\n  explanation paragraph\n\n- [x] second\n",
                vec![("title line", false, 3), ("second", true, 7)],
            ),
            (
                "plain items and non-checkbox brackets do not count",
                "## Success Criteria\n- plain\n- [y] not a box\n- [ ] real\n",
                vec![("real", false, 4)],
            ),
        ];
        for (name, body, expected) in cases {
            let c = parse_checklist(body, 1);
            assert_eq!(texts(&c), expected, "case: {name}");
        }
    }

    #[test]
    fn excluded_contexts() {
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            (
                "backtick fence",
                "## Success Criteria\n```\n- [ ] fenced\n```\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "tilde fence",
                "## Success Criteria\n~~~md\n- [ ] fenced\n~~~\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "indented code",
                "## Success Criteria\n\n    - [ ] indented\n\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "html comment",
                "## Success Criteria\n<!--\n- [ ] commented\n-->\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "html comment inside an item",
                "## Success Criteria\n- [ ] real\n  <!--\n  - [ ] commented\n  -->\n",
                vec!["real"],
            ),
            (
                "html block",
                "## Success Criteria\n<div>\n- [ ] in html\n</div>\n\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "block quote",
                "## Success Criteria\n> - [ ] quoted\n> > - [x] deeper\n\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "block quote inside an item",
                "## Success Criteria\n- [ ] real\n  > - [ ] quoted\n",
                vec!["real"],
            ),
            (
                "fence inside an item",
                "## Success Criteria\n- [ ] real\n  ```\n  - [ ] fenced\n  ```\n",
                vec!["real"],
            ),
        ];
        for (name, body, expected) in cases {
            let c = parse_checklist(body, 1);
            let got: Vec<&str> = c.criteria.iter().map(|c| c.text.as_str()).collect();
            assert_eq!(got, expected, "case: {name}");
        }
    }

    #[test]
    fn only_in_code_means_none() {
        let c = parse_checklist("## Success Criteria\n```\n- [ ] a\n```\n", 1);
        assert_eq!(c.total(), 0);
        assert_eq!(
            c.scope,
            Scope::Section {
                heading: "Success Criteria".into(),
                line: 1
            }
        );
    }

    #[test]
    fn heading_selection_and_section_end() {
        let cases: Vec<(&str, &str, Vec<&str>, Scope)> = vec![
            (
                "success criteria beats an earlier acceptance criteria",
                "# T\n## Acceptance Criteria\n- [ ] acc\n## Success Criteria\n- [ ] succ\n",
                vec!["succ"],
                Scope::Section {
                    heading: "Success Criteria".into(),
                    line: 4,
                },
            ),
            (
                "case-insensitive, any level, substring",
                "# T\n#### our SUCCESS criteria (v2)\n- [ ] a\n",
                vec!["a"],
                Scope::Section {
                    heading: "our SUCCESS criteria (v2)".into(),
                    line: 2,
                },
            ),
            (
                "first of several matching headings wins",
                "## Success Criteria\n- [ ] first\n## Success Criteria again\n- [ ] second\n",
                vec!["first"],
                Scope::Section {
                    heading: "Success Criteria".into(),
                    line: 1,
                },
            ),
            (
                "acceptance criteria fallback",
                "# T\n- [ ] outside\n## Acceptance Criteria\n- [ ] acc\n",
                vec!["acc"],
                Scope::Section {
                    heading: "Acceptance Criteria".into(),
                    line: 3,
                },
            ),
            (
                "criteria fallback",
                "## Definition of Done\n- [ ] dod\n## Criteria\n- [ ] crit\n",
                vec!["crit"],
                Scope::Section {
                    heading: "Criteria".into(),
                    line: 3,
                },
            ),
            (
                "definition of done fallback",
                "## Notes\n- [ ] note\n## definition of done\n- [ ] dod\n",
                vec!["dod"],
                Scope::Section {
                    heading: "definition of done".into(),
                    line: 3,
                },
            ),
            (
                "section ends at same level, includes deeper subsections",
                "## Success Criteria\n- [ ] a\n### Sub\n- [ ] b\n## Notes\n- [ ] c\n",
                vec!["a", "b"],
                Scope::Section {
                    heading: "Success Criteria".into(),
                    line: 1,
                },
            ),
            (
                "section ends at a higher level",
                "### Success Criteria\n- [ ] a\n# Appendix\n- [ ] c\n",
                vec!["a"],
                Scope::Section {
                    heading: "Success Criteria".into(),
                    line: 1,
                },
            ),
            (
                "setext headings",
                "Task\n====\n- [ ] before\n\nSuccess Criteria\n----------------\n- [ ] a\n\nOther\n-----\n- [ ] b\n",
                vec!["a"],
                Scope::Section {
                    heading: "Success Criteria".into(),
                    line: 5,
                },
            ),
            (
                "heading with inline markup",
                "## *Success* `Criteria`\n- [ ] a\n",
                vec!["a"],
                Scope::Section {
                    heading: "Success Criteria".into(),
                    line: 1,
                },
            ),
            (
                "heading inside a block quote is ignored",
                "> ## Success Criteria\n\n- [ ] a\n",
                vec!["a"],
                Scope::WholeDocument,
            ),
            (
                "whole-document fallback",
                "# Task\n- [ ] a\n## Notes\n- [x] b\n",
                vec!["a", "b"],
                Scope::WholeDocument,
            ),
            ("empty body", "", vec![], Scope::WholeDocument),
        ];
        for (name, body, expected, scope) in cases {
            let c = parse_checklist(body, 1);
            let got: Vec<&str> = c.criteria.iter().map(|c| c.text.as_str()).collect();
            assert_eq!(got, expected, "case: {name}");
            assert_eq!(c.scope, scope, "case: {name}");
        }
    }

    #[test]
    fn first_line_offsets_and_crlf() {
        let body = "\r\n## Success Criteria  \r\n- [ ] a  \r\n- [x] b\r\n";
        let c = parse_checklist(body, 5);
        assert_eq!(c.criteria, vec![crit("a", false, 7), crit("b", true, 8)],);
        assert_eq!(
            c.scope,
            Scope::Section {
                heading: "Success Criteria".into(),
                line: 6
            }
        );
        assert_eq!(c.done(), 1);
        assert_eq!(c.total(), 2);
        let remaining: Vec<&str> = c.remaining().map(|c| c.text.as_str()).collect();
        assert_eq!(remaining, vec!["a"]);
    }

    #[test]
    fn normalize_collapses_and_trims() {
        assert_eq!(normalize("  a \t b\n\r c  "), "a b c");
        assert_eq!(normalize(""), "");
        assert_eq!(normalize("\u{a0}x\u{2003}y"), "x y");
        assert_eq!(normalize("cafe\u{301} opens"), "caf\u{e9} opens");
    }
}
