//! Tests of the Markdown reader.

use super::*;
use proptest::prelude::*;

fn heads(md: &Markdown) -> Vec<(u8, &str, usize)> {
    md.headings
        .iter()
        .map(|h| (h.level, h.text.as_str(), h.line))
        .collect()
}

#[test]
fn headings_atx_setext_and_markup() {
    let text = "\u{feff}# Title ##\r\n\r\n## **Bold** `code` [link](http://x)  \r\nSetext *one*\r\n===\r\n\r\n    ## indented code\r\n> ## Quoted\r\n- ## In item\r\n";
    let md = parse(text);
    assert_eq!(
        heads(&md),
        [
            (1, "Title", 1),
            (2, "Bold code link", 3),
            (1, "Setext one", 4),
            (2, "Quoted", 8),
            (2, "In item", 9)
        ]
    );
    let h = &md.headings;
    assert_eq!(h[0].markup, "Title");
    assert_eq!(&text[h[0].markup_range.clone()], "Title");
    assert_eq!(h[1].markup, "**Bold** `code` [link](http://x)");
    assert_eq!(h[1].spans.code, ["code"]);
    assert_eq!(h[1].spans.strong, ["Bold"]);
    assert_eq!(h[1].spans.links, ["http://x"]);
    assert_eq!(
        (h[0].atx, h[2].atx, h[2].markup.as_str()),
        (true, false, "Setext *one*")
    );
    assert_eq!((h[3].quoted, h[3].in_item), (true, false));
    assert_eq!((h[4].quoted, h[4].in_item), (false, true));
    assert_eq!(
        &text[h[1].range.clone()],
        "## **Bold** `code` [link](http://x)  \r\n"
    );
    let top: Vec<usize> = md.top_headings().map(|(i, _)| i).collect();
    assert_eq!(top, [0, 1, 2]);
}

#[test]
fn items_depth_numbers_tasks_and_own_text() {
    let text = "- [ ] parent **bold**\n  more\n  - [x] child\n    1. [X] grand\n- plain\n\n  second para\n\n3. three\n7. four\n> - [ ] quoted\n";
    let md = parse(text);
    type Row<'a> = (
        usize,
        Option<usize>,
        Option<u64>,
        Option<bool>,
        &'a str,
        usize,
        bool,
    );
    let got: Vec<Row> = md
        .items
        .iter()
        .map(|i| {
            (
                i.depth,
                i.parent,
                i.number,
                i.task,
                i.text.as_str(),
                i.line,
                i.quoted,
            )
        })
        .collect();
    let want: Vec<Row> = vec![
        (0, None, None, Some(false), "parent bold more", 1, false),
        (1, Some(0), None, Some(true), "child", 3, false),
        (2, Some(1), Some(1), Some(true), "grand", 4, false),
        (0, None, None, None, "plain", 5, false),
        (0, None, Some(3), None, "three", 9, false),
        (0, None, Some(4), None, "four", 10, false),
        (0, None, None, Some(false), "quoted", 11, true),
    ];
    assert_eq!(got, want);
    assert_eq!(md.items[0].markup, "parent **bold** more");
    assert_eq!(md.items[0].lines, 0..2);
    assert_eq!(&text[md.items[0].at..md.items[0].at + 3], "[ ]");
    assert_eq!(md.items[0].list, md.items[3].list);
    assert_ne!(md.items[3].list, md.items[4].list);
    assert_eq!(md.items[4].list, md.items[5].list);
    // The plain item's second paragraph is its line, not its own text.
    let para: Vec<(&str, Option<usize>)> =
        md.lines.iter().map(|l| (l.text.as_str(), l.item)).collect();
    assert!(para.contains(&("second para", Some(3))), "{para:?}");
    assert_eq!(md.items[3].markup, "plain");
}

/// Task items as cmark-gfm 0.29.0.gfm.6 (`cmark-gfm -e tasklist`) renders them: a box only
/// when a space or a tab follows `]` on its line; the box may hold no text. pulldown-cmark
/// alone also draws one for `- [ ]` ending its line (`- [ ]\n  next`, `- [ ]\n- [ ] b`).
#[test]
fn task_items_as_gfm_renders_them() {
    type Rendered = Vec<(Option<bool>, &'static str)>;
    let cases: Vec<(&str, Rendered)> = vec![
        ("- [ ]", vec![(None, "[ ]")]),
        ("- [ ]\n", vec![(None, "[ ]")]),
        ("- [x]\n", vec![(None, "[x]")]),
        ("1. [ ]\n", vec![(None, "[ ]")]),
        ("- [ ]   \n", vec![(Some(false), "")]),
        ("- [X] \t\n", vec![(Some(true), "")]),
        ("- [ ] <!-- c -->\n", vec![(Some(false), "")]),
        ("- [ ] a\n", vec![(Some(false), "a")]),
        ("- [ ]\ttab\n", vec![(Some(false), "tab")]),
        ("- [ ]\n  next line\n", vec![(None, "[ ] next line")]),
        ("- [ ]\r\n  next\r\n", vec![(None, "[ ] next")]),
        ("- [ ] \n  next line\n", vec![(Some(false), "next line")]),
        ("- [x]  \n  lazy\n", vec![(Some(true), "lazy")]),
        ("- [ ]\u{a0}\n", vec![(None, "[ ]")]),
        ("- [ ]x\n", vec![(None, "[ ]x")]),
        (
            "- [ ]\n  - [ ] child\n",
            vec![(None, "[ ]"), (Some(false), "child")],
        ),
        ("- [ ]\n- [ ] b\n", vec![(None, "[ ]"), (Some(false), "b")]),
    ];
    for (text, want) in cases {
        let md = parse(text);
        let got: Vec<(Option<bool>, &str)> =
            md.items.iter().map(|i| (i.task, i.text.as_str())).collect();
        assert_eq!(got, want, "{text:?}");
    }
}

#[test]
fn lines_split_at_breaks_with_markup_and_paragraphs() {
    let text = "**Status**: Done  \nGoal: *ship*\n\n> quoted `x`\n";
    let md = parse(text);
    let got: Vec<(&str, &str, usize, bool, usize)> = md
        .lines
        .iter()
        .map(|l| {
            (
                l.text.as_str(),
                l.markup.as_str(),
                l.line,
                l.quoted,
                l.paragraph,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("Status: Done", "**Status**: Done", 1, false, 1),
            ("Goal: ship", "Goal: *ship*", 2, false, 1),
            ("quoted x", "quoted `x`", 4, true, 2),
        ]
    );
    for l in &md.lines {
        assert_eq!(&text[l.range.clone()], l.markup);
    }
}

#[test]
fn fields() {
    type Case = (
        &'static str,
        &'static str,
        Option<(&'static str, &'static str)>,
    );
    let cases: Vec<Case> = vec![
        ("**Status**: Done", "status", Some(("Done", "Done"))),
        ("**Status:** Done", "status", Some(("Done", "Done"))),
        (
            "__Status__: COMPLETE",
            "status",
            Some(("COMPLETE", "COMPLETE")),
        ),
        (
            "Status: Complete (2026-02-12)",
            "status",
            Some(("Complete (2026-02-12)", "Complete (2026-02-12)")),
        ),
        ("**Status**: **Done**", "status", Some(("Done", "**Done**"))),
        ("status :  x  ", "status", Some(("x", "x"))),
        ("**Goal:**", "goal", Some(("", ""))),
        (
            "Completion Promise: `SHIPPED`",
            "completion promise",
            Some(("SHIPPED", "`SHIPPED`")),
        ),
        ("Statuses: x", "status", None),
        ("Status of things", "status", None),
        ("The status: x", "status", None),
    ];
    for (line, name, want) in cases {
        let md = parse(line);
        let got = md.lines.first().and_then(|l| l.field(name));
        assert_eq!(
            got.as_ref().map(|f| (f.value.as_str(), f.markup.as_str())),
            want,
            "{line}"
        );
        if let Some(f) = got {
            assert_eq!(&line[f.range.clone()], f.markup, "{line}");
        }
    }
    let md = parse("## Status: IN_PROGRESS\n");
    let f = md.headings[0].field("status").expect("field");
    assert_eq!((f.value.as_str(), f.range.clone()), ("IN_PROGRESS", 11..22));
    let f = parse("## Status:\n").headings[0]
        .field("status")
        .expect("field");
    assert_eq!((f.value.as_str(), f.range.clone()), ("", 10..10));
}

#[test]
fn excluded_contexts_never_appear() {
    let text = "```\n# h\n- [ ] a\n| a | b |\n|---|---|\n```\n~~~\nStatus: x\n~~~\n\n    # indented\n    - [ ] b\n\n<!--\n# c\n- [ ] d\n-->\n<div>\n# e\n\n</div>\n\nreal\n";
    let md = parse(text);
    assert!(md.headings.is_empty(), "{:?}", md.headings);
    assert!(md.items.is_empty(), "{:?}", md.items);
    assert!(md.tables.is_empty());
    let lines: Vec<&str> = md.lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(lines, ["real"]);
    // An item's text stops at a nested comment.
    let md = parse("- [ ] real <!-- x -->\n  <!--\n  - [ ] hidden\n  -->\n");
    assert_eq!(md.items.len(), 1);
    assert_eq!(md.items[0].text, "real");
}

#[test]
fn frontmatter_is_skipped_only_by_parse_document() {
    let text = "---\ntitle: x\n# comment\n---\n## Real\n";
    let md = parse_document(text);
    assert_eq!(heads(&md), [(2, "Real", 5)]);
    assert!(md.lines.is_empty());
    let md = parse(text);
    assert!(md.headings.iter().any(|h| h.text == "comment"));
    // A body after frontmatter split off by the caller keeps file lines.
    let md = parse_at("## Success Criteria\n- [ ] a\n", 4);
    assert_eq!((md.headings[0].line, md.items[0].line), (4, 5));
    assert_eq!(md.line_range(5), 20..27);
}

#[test]
fn tables_cells_spans_and_rows() {
    let text = "Intro\n| # | Task | Status | Notes |\n|---|:--|---|---|\n| 1 | **a** | DONE | x \\| y |\n|2|b|PENDING\n| 3 | c | FAILED | |\nlazy\n| 4 | d | e | f | extra |\n\nafter\n";
    let md = parse(text);
    assert_eq!(md.tables.len(), 1);
    let t = &md.tables[0];
    assert_eq!((t.line, t.delimiter_line), (2, 3));
    let header: Vec<&str> = t.header.cells.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(header, ["#", "Task", "Status", "Notes"]);
    let rows: Vec<(usize, Vec<&str>, bool, bool)> = t
        .rows
        .iter()
        .map(|r| {
            (
                r.line,
                r.cells.iter().map(|c| c.text.as_str()).collect(),
                r.closed,
                r.bare,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (4, vec!["1", "a", "DONE", "x | y"], true, false),
            (5, vec!["2", "b", "PENDING"], false, false),
            (6, vec!["3", "c", "FAILED", ""], true, false),
            (7, vec!["lazy"], false, true),
            (8, vec!["4", "d", "e", "f"], true, false),
        ]
    );
    let spans: Vec<&str> = t.rows[0]
        .cells
        .iter()
        .map(|c| &text[c.range.clone()])
        .collect();
    assert_eq!(spans, [" 1 ", " **a** ", " DONE ", " x \\| y "]);
    assert_eq!(&text[t.rows[1].range.clone()], "|2|b|PENDING");
    assert_eq!(&text[t.rows[2].cells[3].range.clone()], " ");
    assert_eq!(md.lines.last().map(|l| l.text.as_str()), Some("after"));
}

#[test]
fn crlf_bom_and_line_ranges() {
    let text = "\u{feff}a\r\n\r\nb  \r\nc";
    let md = parse(text);
    assert_eq!(md.line_range(1), 3..4);
    assert_eq!(md.line_range(2), 6..6);
    assert_eq!(md.line_range(3), 8..11);
    assert_eq!(md.line_range(4), 13..14);
    assert_eq!(md.line_range(9), 14..14);
    assert_eq!(md.line_range(0), 14..14);
    assert_eq!(
        (md.line_of(0), md.line_of(7), md.line_of(8), md.line_of(99)),
        (1, 2, 3, 4)
    );
    let texts: Vec<(&str, usize)> = md.lines.iter().map(|l| (l.text.as_str(), l.line)).collect();
    assert_eq!(texts, [("a", 1), ("b", 3), ("c", 4)]);
}

#[test]
fn line_lookup_from_a_first_line() {
    let md = parse_at("ab\ncd\n\nef", 10);
    let got: Vec<usize> = [0, 2, 3, 6, 7, 999]
        .iter()
        .map(|&o| md.line_of(o))
        .collect();
    assert_eq!(got, [10, 10, 11, 12, 13, 13]);
    assert_eq!(parse_at("", 0).line_of(0), 1);
}

#[test]
fn split_row_cells() {
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("| # | Task |", vec!["#", "Task"]),
        ("a | b", vec!["a", "b"]),
        ("|a\\|b|", vec!["a\\|b"]),
        ("no pipes", vec!["no pipes"]),
        ("|", vec![]),
        ("", vec![""]),
    ];
    for (line, want) in cases {
        assert_eq!(split_row(line), want, "{line}");
    }
}

#[test]
fn large_adversarial_inputs_stay_fast() {
    let n = 200_000;
    let inputs = [
        "> ".repeat(n),
        "- ".repeat(n),
        "*".repeat(n),
        "`".repeat(n),
        "[".repeat(n),
        "<!--".repeat(n / 4),
        "| a ".repeat(n / 4) + "\n" + &"|---".repeat(n / 4) + "\n",
        "- [ ] x\n".repeat(n / 8),
        "**a\n".repeat(n / 4),
    ];
    for input in &inputs {
        let start = std::time::Instant::now();
        let md = parse(input);
        let spent = start.elapsed();
        assert!(
            spent < std::time::Duration::from_secs(20),
            "{} bytes took {spent:?}",
            input.len()
        );
        drop(md);
    }
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("---\n".to_string()),
        Just("- [ ] ".to_string()),
        Just("* [x] ".to_string()),
        Just("- [ ]".to_string()),
        Just("[x]".to_string()),
        Just("1. ".to_string()),
        Just("  ".to_string()),
        Just("\t".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("\u{feff}".to_string()),
        Just("## ".to_string()),
        Just("===\n".to_string()),
        Just("```\n".to_string()),
        Just("~~~".to_string()),
        Just("> ".to_string()),
        Just("<!--".to_string()),
        Just("-->".to_string()),
        Just("<div>".to_string()),
        Just("| a | b |\n".to_string()),
        Just("|---|---|\n".to_string()),
        Just("\\|".to_string()),
        Just("`".to_string()),
        Just("**".to_string()),
        Just("[x](y)".to_string()),
        Just("Status: ".to_string()),
        "[a-z ]{0,8}",
        any::<char>().prop_map(String::from),
    ]
}

proptest! {
    #[test]
    fn never_panics_and_ranges_are_sound(parts in proptest::collection::vec(fragment(), 0..80), first in 0usize..5) {
        let text = parts.concat();
        for (md, first) in [(parse(&text), 1), (parse_at(&text, first), first.max(1)), (parse_document(&text), 1)] {
            let ok = |r: &Range<usize>| r.start <= r.end && r.end <= text.len()
                && text.is_char_boundary(r.start) && text.is_char_boundary(r.end);
            for h in &md.headings {
                prop_assert!(ok(&h.range) && ok(&h.markup_range));
                prop_assert_eq!(&text[h.markup_range.clone()], h.markup.as_str());
                prop_assert!(h.line >= first);
                let _ = h.field("status");
            }
            for (i, item) in md.items.iter().enumerate() {
                prop_assert!(ok(&item.range));
                prop_assert!(item.lines.end <= md.lines.len());
                prop_assert!(item.parent.is_none_or(|p| p < i));
                if item.task.is_some() {
                    // A box only where GFM draws one: `[ ]`, `[x]` or `[X]`, then a space or tab.
                    let marker = text.get(item.at..item.at + 4).unwrap_or("");
                    prop_assert!(
                        matches!(marker.as_bytes(), [b'[', b' ' | b'x' | b'X', b']', b' ' | b'\t']),
                        "{:?}", marker
                    );
                }
                for l in &md.lines[item.lines.clone()] {
                    prop_assert_eq!(l.item, Some(i));
                }
            }
            let mut last = 0;
            for l in &md.lines {
                prop_assert!(ok(&l.range));
                prop_assert_eq!(&text[l.range.clone()], l.markup.as_str());
                prop_assert!(l.line >= last);
                last = l.line;
                if let Some(f) = l.field("status") {
                    prop_assert!(ok(&f.range));
                }
            }
            for t in &md.tables {
                for row in std::iter::once(&t.header).chain(&t.rows) {
                    prop_assert!(ok(&row.range));
                    for c in &row.cells {
                        prop_assert!(ok(&c.range));
                    }
                }
            }
            let _ = md.line_range(text.len());
            let _ = split_row(&text);
        }
    }
}
