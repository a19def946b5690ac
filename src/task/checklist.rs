//! Success-criteria checklist extraction from the markdown body of a `RALPH_TASK.md`.
//!
//! A criterion is a GFM task-list item (`- [ ]`, `* [x]`, `1. [X]`, nested items included) with
//! text after its box, under **every** criteria heading (see [`parse_checklist`]): real task
//! files hold one criteria section per phase, and the task is complete only when all are.
//! Everything is read with the one Markdown reader ([`crate::markdown`]), so items inside code
//! blocks, HTML blocks/comments and block quotes never count. Parsing never fails and never
//! panics; the caller decides what an empty checklist means.

use std::ops::Range;

use crate::markdown;

/// One success criterion: a task-list item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Criterion {
    /// The item's own inline text, markup flattened, whitespace collapsed, trimmed.
    pub(crate) text: String,
    /// `[x]` / `[X]`.
    pub(crate) checked: bool,
    /// 1-based line in the task file (frontmatter lines included).
    pub(crate) line: usize,
}

/// A criteria heading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Section {
    /// The heading's text (flattened, whitespace collapsed).
    pub(crate) heading: String,
    /// 1-based file line of the heading.
    pub(crate) line: usize,
}

/// Where the criteria were taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The sections under these criteria headings (e.g. `## Success Criteria` of each phase), in
    /// document order.
    Sections(Vec<Section>),
    /// No criteria heading exists, or none holds a criterion: every task-list item in the
    /// document counts.
    WholeDocument,
}

/// The criteria of a task document, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checklist {
    /// All criteria, checked or not, in document order.
    pub(crate) criteria: Vec<Criterion>,
    /// Which part of the document they came from.
    pub(crate) scope: Scope,
    /// The unchecked task items outside the criteria sections (none for
    /// [`Scope::WholeDocument`]), normalised: a criterion moved out of the sections (its heading
    /// renamed, a new criteria heading with checked copies) is still there, unchecked.
    pub(crate) unchecked_outside: Vec<String>,
}

impl Checklist {
    /// Number of checked criteria.
    pub(crate) fn done(&self) -> usize {
        self.criteria.iter().filter(|c| c.checked).count()
    }

    /// Number of criteria.
    pub(crate) fn total(&self) -> usize {
        self.criteria.len()
    }

    /// Unchecked criteria, in document order.
    pub(crate) fn remaining(&self) -> impl Iterator<Item = &Criterion> {
        self.criteria.iter().filter(|c| !c.checked)
    }
}

/// The phrase that marks a criteria heading first; only when no heading holds it do the
/// [`FALLBACK_PHRASES`] count.
const SUCCESS_PHRASE: &str = "success criteria";
/// Criteria headings when no heading says "success criteria".
const FALLBACK_PHRASES: [&str; 3] = ["acceptance criteria", "criteria", "definition of done"];

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

/// Everything one pass over the body yields; `document` uses the headings for the title and
/// the criteria headings for its messages.
#[derive(Debug)]
pub(super) struct Scan {
    pub(super) checklist: Checklist,
    pub(super) headings: Vec<HeadingInfo>,
    /// The criteria headings looked under, whether they hold a criterion or not.
    pub(super) looked_under: Vec<Section>,
}

/// Parses the checklist of a task body.
///
/// `body` is the markdown after the frontmatter; `first_line` is the file line number of
/// body's first line. The criteria are the task-list items with text under every heading whose
/// text contains "Success Criteria" (case-insensitive), or, when there is none, under every
/// heading containing "Acceptance Criteria", "Criteria" or "Definition of Done"; a section ends
/// at the next heading of the same or a higher level. When there is no such heading, or the
/// sections hold no criterion, every task-list item counts ([`Scope::WholeDocument`]).
#[cfg(test)]
pub(crate) fn parse_checklist(body: &str, first_line: usize) -> Checklist {
    scan(body, first_line).checklist
}

/// Normalised criterion text used for integrity comparisons: Unicode NFC (so `café` typed as
/// `e` + U+0301 is the same criterion), whitespace collapsed, trimmed.
pub(crate) fn normalize(text: &str) -> String {
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
    select(&md, body.len()).0
}

/// The task items `ralph run` would count as criteria in the document `md` (read from a text
/// of `len` bytes), checked or not, as indices into `md.items` in document order: a tracker's
/// text is read by the same rule as a task file (SPEC §14).
pub(crate) fn criteria_items(md: &markdown::Markdown, len: usize) -> Vec<usize> {
    select(md, len).1
}

/// Section selection over a read document: the scan, and the index in `md.items` of each of
/// its criteria.
fn select(md: &markdown::Markdown, len: usize) -> (Scan, Vec<usize>) {
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
    let chosen = criteria_headings(&headings);
    let sections = section_ranges(&headings, &chosen, len);
    // A task item with no text after its box is no criterion (GFM draws an empty box).
    let tasks: Vec<(Criterion, usize, usize)> = md
        .items
        .iter()
        .enumerate()
        .filter(|(_, item)| !item.quoted)
        .filter_map(|(i, item)| {
            let text = normalize(&item.text);
            let checked = item.task?;
            (!text.is_empty()).then_some((
                Criterion {
                    text,
                    checked,
                    line: item.line,
                },
                item.at,
                i,
            ))
        })
        .collect();
    let (inside, outside): (Vec<_>, Vec<_>) = tasks
        .into_iter()
        .partition(|(_, at, _)| within(&sections, *at));
    let looked_under: Vec<Section> = chosen
        .iter()
        .map(|&i| Section {
            heading: headings[i].text.clone(),
            line: headings[i].line,
        })
        .collect();
    let (checklist, items) = if inside.is_empty() {
        let items = outside.iter().map(|(_, _, i)| *i).collect();
        let checklist = Checklist {
            criteria: outside.into_iter().map(|(c, _, _)| c).collect(),
            scope: Scope::WholeDocument,
            unchecked_outside: Vec::new(),
        };
        (checklist, items)
    } else {
        let items = inside.iter().map(|(_, _, i)| *i).collect();
        let checklist = Checklist {
            criteria: inside.into_iter().map(|(c, _, _)| c).collect(),
            scope: Scope::Sections(looked_under.clone()),
            unchecked_outside: outside
                .into_iter()
                .filter(|(c, _, _)| !c.checked)
                .map(|(c, _, _)| c.text)
                .collect(),
        };
        (checklist, items)
    };
    let scan = Scan {
        checklist,
        headings,
        looked_under,
    };
    (scan, items)
}

/// The criteria headings: every one saying "success criteria", else every fallback one.
fn criteria_headings(headings: &[HeadingInfo]) -> Vec<usize> {
    let says = |phrases: &[&str]| -> Vec<usize> {
        headings
            .iter()
            .enumerate()
            .filter(|(_, h)| {
                let text = h.text.to_lowercase();
                phrases.iter().any(|p| text.contains(p))
            })
            .map(|(i, _)| i)
            .collect()
    };
    let success = says(&[SUCCESS_PHRASE]);
    if success.is_empty() {
        says(&FALLBACK_PHRASES)
    } else {
        success
    }
}

/// The byte ranges of the chosen headings' sections (each to the next heading of the same or a
/// higher level), sorted and merged: a criteria section nested in another is already in it.
fn section_ranges(headings: &[HeadingInfo], chosen: &[usize], len: usize) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::with_capacity(chosen.len());
    for &i in chosen {
        let h = &headings[i];
        let end = headings[i + 1..]
            .iter()
            .find(|next| next.level <= h.level)
            .map_or(len, |next| next.start);
        match out.last_mut() {
            Some(last) if h.end <= last.end => last.end = last.end.max(end),
            _ => out.push(h.end..end),
        }
    }
    out
}

/// `at` lies in one of the sorted, disjoint `ranges`.
fn within(ranges: &[Range<usize>], at: usize) -> bool {
    let next = ranges.partition_point(|r| r.start <= at);
    next > 0 && ranges.get(next - 1).is_some_and(|r| r.contains(&at))
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

    fn sections(list: &[(&str, usize)]) -> Scope {
        Scope::Sections(
            list.iter()
                .map(|&(heading, line)| Section {
                    heading: heading.to_string(),
                    line,
                })
                .collect(),
        )
    }

    #[test]
    fn only_in_code_means_none() {
        let c = parse_checklist("## Success Criteria\n```\n- [ ] a\n```\n", 1);
        assert_eq!(c.total(), 0);
        assert_eq!(c.scope, Scope::WholeDocument);
        let s = scan("## Success Criteria\n```\n- [ ] a\n```\n", 1);
        assert_eq!(
            s.looked_under,
            vec![Section {
                heading: "Success Criteria".into(),
                line: 1
            }]
        );
    }

    #[test]
    fn heading_selection_and_section_end() {
        let cases: Vec<(&str, &str, Vec<&str>, Scope)> = vec![
            (
                "success criteria beats an earlier acceptance criteria",
                "# T\n## Acceptance Criteria\n- [ ] acc\n## Success Criteria\n- [ ] succ\n",
                vec!["succ"],
                sections(&[("Success Criteria", 4)]),
            ),
            (
                "case-insensitive, any level, substring",
                "# T\n#### our SUCCESS criteria (v2)\n- [ ] a\n",
                vec!["a"],
                sections(&[("our SUCCESS criteria (v2)", 2)]),
            ),
            (
                "every matching heading counts, not the first alone",
                "## Success Criteria\n- [ ] first\n## Notes\n- [ ] note\n## Success Criteria again\n- [ ] second\n",
                vec!["first", "second"],
                sections(&[("Success Criteria", 1), ("Success Criteria again", 5)]),
            ),
            (
                "acceptance criteria fallback",
                "# T\n- [ ] outside\n## Acceptance Criteria\n- [ ] acc\n",
                vec!["acc"],
                sections(&[("Acceptance Criteria", 3)]),
            ),
            (
                "every fallback heading counts",
                "## Definition of Done\n- [ ] dod\n## Notes\n- [ ] n\n## Criteria\n- [ ] crit\n## Acceptance criteria\n- [x] acc\n",
                vec!["dod", "crit", "acc"],
                sections(&[
                    ("Definition of Done", 1),
                    ("Criteria", 5),
                    ("Acceptance criteria", 7),
                ]),
            ),
            (
                "definition of done fallback",
                "## Notes\n- [ ] note\n## definition of done\n- [ ] dod\n",
                vec!["dod"],
                sections(&[("definition of done", 3)]),
            ),
            (
                "section ends at same level, includes deeper subsections",
                "## Success Criteria\n- [ ] a\n### Sub\n- [ ] b\n## Notes\n- [ ] c\n",
                vec!["a", "b"],
                sections(&[("Success Criteria", 1)]),
            ),
            (
                "a criteria heading nested in another counts its items once",
                "## Success Criteria\n- [ ] a\n### Success Criteria (API)\n- [ ] b\n## Notes\n",
                vec!["a", "b"],
                sections(&[("Success Criteria", 1), ("Success Criteria (API)", 3)]),
            ),
            (
                "section ends at a higher level",
                "### Success Criteria\n- [ ] a\n# Appendix\n- [ ] c\n",
                vec!["a"],
                sections(&[("Success Criteria", 1)]),
            ),
            (
                "setext headings",
                "Task\n====\n- [ ] before\n\nSuccess Criteria\n----------------\n- [ ] a\n\nOther\n-----\n- [ ] b\n",
                vec!["a"],
                sections(&[("Success Criteria", 5)]),
            ),
            (
                "heading with inline markup",
                "## *Success* `Criteria`\n- [ ] a\n",
                vec!["a"],
                sections(&[("Success Criteria", 1)]),
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
            (
                "an empty criteria heading does not hide the items elsewhere",
                "# Task\n## Success Criteria\nSee the phases.\n## Phase 1\n- [ ] a\n1. [x] b\n",
                vec!["a", "b"],
                Scope::WholeDocument,
            ),
            (
                "a criteria heading holding only empty boxes is empty",
                "## Success Criteria\n- [ ]   \n- [ ]\n## Tasks\n- [ ] t\n",
                vec!["t"],
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

    /// Real task files: one `### Success Criteria` per `## Phase N`, criteria nested under
    /// bullets and numbered, an `#### Acceptance criteria` inside a success section, open
    /// questions as numbered task items outside every section.
    #[test]
    fn phases_each_with_their_criteria() {
        let body = "# Task: Build it\n\n## Phase 1: Setup\nDo the setup.\n### Success Criteria\n- [x] repo builds\n- Backend\n  - [x] server starts\n### Notes\n- [ ] a note, not a criterion\n\n## Phase 2: API\n### Success Criteria\n1. [ ] GET /items lists items\n2. [ ] POST /items validates\n   - [ ] nested under a numbered item\n\n## Phase 3: UI\n### Success criteria\n#### Acceptance criteria\n* [ ] the page renders\n- [ ]\n- [ ]   \n\n## Open Questions\n1. [ ] which database?\n";
        let c = parse_checklist(body, 4);
        assert_eq!(
            texts(&c),
            vec![
                ("repo builds", true, 9),
                ("server starts", true, 11),
                ("GET /items lists items", false, 17),
                ("POST /items validates", false, 18),
                ("nested under a numbered item", false, 19),
                ("the page renders", false, 24),
            ]
        );
        assert_eq!(
            c.scope,
            sections(&[
                ("Success Criteria", 8),
                ("Success Criteria", 16),
                ("Success criteria", 22)
            ])
        );
        assert_eq!((c.done(), c.total()), (2, 6));
        assert_eq!(
            c.unchecked_outside,
            vec!["a note, not a criterion", "which database?"]
        );
    }

    #[test]
    fn a_box_without_text_is_no_criterion() {
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("- [ ]\n- [ ] real\n", vec!["real"]),
            ("- [ ]   \n- [x] real\n", vec!["real"]),
            (
                "- [x]\n- [X] \n- [ ] <!-- later -->\n- [ ] real\n",
                vec!["real"],
            ),
            ("- [ ] `x`\n", vec!["x"]),
            (
                "- [ ]\n  text on the next line is not a task in GFM\n",
                vec![],
            ),
            (
                "- [ ] \n  text on the next line after a space is\n",
                vec!["text on the next line after a space is"],
            ),
        ];
        for (items, expected) in cases {
            let c = parse_checklist(&format!("## Success Criteria\n{items}"), 1);
            let got: Vec<&str> = c.criteria.iter().map(|c| c.text.as_str()).collect();
            assert_eq!(got, expected, "{items:?}");
        }
    }

    #[test]
    fn first_line_offsets_and_crlf() {
        let body = "\r\n## Success Criteria  \r\n- [ ] a  \r\n- [x] b\r\n";
        let c = parse_checklist(body, 5);
        assert_eq!(c.criteria, vec![crit("a", false, 7), crit("b", true, 8)],);
        assert_eq!(c.scope, sections(&[("Success Criteria", 6)]));
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
