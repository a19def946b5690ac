//! Tests of what a queue reads and writes: loop names, an item's criteria read from a tracker's
//! text by the one Markdown reader, and task files — each criterion once as a box — read back
//! by the task reader.

use std::path::Path;

use proptest::prelude::*;

use super::text::asks_only_its_criteria;
use super::*;
use crate::markdown;
use crate::task::document::parse_task_bytes;

fn item(title: &str, body: &str, criteria: &[&str]) -> Item {
    Item {
        id: "bd-12".into(),
        title: title.into(),
        body: body.into(),
        criteria: criteria.iter().map(|c| c.to_string()).collect(),
    }
}

/// The criteria the task file asks for, as `ralph run` reads them.
fn asked(text: &str) -> Vec<String> {
    let doc = parse_task_bytes(Path::new(".ralph/tasks/beads-bd-12.md"), text.as_bytes()).unwrap();
    doc.checklist.remaining().map(|c| c.text.clone()).collect()
}

/// The quoted lines of a task file, without their `> `.
fn quote(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("> ").or_else(|| l.strip_prefix('>')))
        .collect()
}

/// The task items (boxes) of a task file inside its quote.
fn quoted_boxes(text: &str) -> usize {
    markdown::parse_document(text)
        .items
        .iter()
        .filter(|i| i.quoted && i.task.is_some())
        .count()
}

#[test]
fn loop_names_are_branch_and_path_safe() {
    assert_eq!(loop_name("beads", "bd-12"), "beads-bd-12");
    assert_eq!(loop_name("github", "42"), "github-42");
    assert_eq!(loop_name("beads", "../x y/z"), "beads-_2e_2e_2fx_20y_2fz");
    // One-to-one: ids that one dash stood for before stay apart (issue 29).
    let ids = ["x/1", "x-1", "x_1", "x_2f1", "-x", "x", "x.", "x y", "é"];
    let names: std::collections::BTreeSet<String> =
        ids.iter().map(|i| loop_name("beads", i)).collect();
    assert_eq!(names.len(), ids.len(), "{names:?}");
    for n in &names {
        crate::worktree::check_name(n).unwrap_or_else(|e| panic!("{n}: {e}"));
    }
    let long = "a".repeat(100);
    let (l1, l2) = (
        loop_name("github", &long),
        loop_name("github", &format!("{long}b")),
    );
    assert!(l1.len() <= 64 && l1 != l2, "{l1} {l2}");
    crate::worktree::check_name(&l1).unwrap();
}

#[test]
fn an_items_task_file_holds_its_criteria_and_its_text_only_as_a_quote() {
    // The body's own headings and boxes are the tracker's words, never criteria.
    let body = "Users need it.\n\n## Success Criteria\n\n- [ ] a box in the body\n";
    let text = task_file(
        "beads",
        &item("Add login: \"now\"", body, &["Form posts", "Tests pass"]),
    );
    let doc = parse_task_bytes(Path::new(".ralph/tasks/beads-bd-12.md"), text.as_bytes()).unwrap();
    assert_eq!(doc.name, "Add login: \"now\"");
    assert_eq!(asked(&text), ["Form posts", "Tests pass"], "{text}");
    assert_eq!(
        quote(&text),
        [
            "Users need it.",
            "",
            "## Success Criteria",
            "",
            "- a box in the body"
        ],
        "{text}"
    );
    // No criteria: the title is the one.
    let text = task_file("beads", &item("Fix the\nbuild", "", &[]));
    assert_eq!(asked(&text), ["Fix the build"]);
}

#[test]
fn criteria_are_task_items_of_every_list_form_as_a_task_file_counts_them() {
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "every marker",
            "Intro\n- [ ] dash\n* [ ] star\n+ [ ] plus\n1. [ ] one\n2) [ ] two\n",
            vec!["dash", "star", "plus", "one", "two"],
        ),
        (
            "nested, under plain and numbered items",
            "- [ ] parent\n  - [ ] child\n    1. [ ] grandchild\n- group\n  + [ ] inner\n",
            vec!["parent", "child", "grandchild", "inner"],
        ),
        (
            "checked ones are done, empty boxes are none",
            "- [x] done\n- [X] Done\n- [ ] open\n- [ ]\n- [ ]   \n",
            vec!["open"],
        ),
        (
            "nothing in a comment, code or a quote",
            "<!--\n- [ ] commented\n-->\n```\n- [ ] fenced\n```\n~~~\n+ [ ] tilde\n~~~\n\n    - [ ] indented\n\n> - [ ] quoted\n\n<div>\n- [ ] html\n</div>\n\n- [ ] real\n",
            vec!["real"],
        ),
        (
            "a lone carriage return ends a line",
            "Intro\r- [ ] one\r+ [ ] two\r\n1. [ ] three",
            vec!["one", "two", "three"],
        ),
        (
            "a criteria heading: only its section, as in a task file",
            "## Steps\n- [ ] a step\n## Acceptance Criteria\n- [ ] first\n- [ ] second\n",
            vec!["first", "second"],
        ),
        (
            "each as written, on one line",
            "- [ ] `GET /health` returns **200**\n  within [1 s](http://x)\n",
            vec!["`GET /health` returns **200** within [1 s](http://x)"],
        ),
        ("no box", "Just words.\n\n- a bullet\n", vec![]),
    ];
    for (name, text, expected) in cases {
        assert_eq!(task_items(text), expected, "case: {name}");
    }
}

#[test]
fn acceptance_criteria_are_task_items_else_lines() {
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "task items win",
            "Intro\n- [ ] one\n- [x] done already\n+ [ ] two\n",
            vec!["one", "two"],
        ),
        (
            "every item checked: none left, not its lines",
            "- [x] done already\n",
            vec![],
        ),
        (
            "lines, list markers taken off",
            "1. Form posts\n2) Tests pass\n\n- Docs updated\n+ plus\n* star\nplain line\n",
            vec![
                "Form posts",
                "Tests pass",
                "Docs updated",
                "plus",
                "star",
                "plain line",
            ],
        ),
        (
            "no heading, comment, code or quote is a line",
            "## Criteria\n<!-- a note -->\n```\ncode\n```\n> quoted\n\nreal\n",
            vec!["real"],
        ),
        ("lone carriage returns", "one\rtwo\r", vec!["one", "two"]),
        ("blank", "  \n\n", vec![]),
    ];
    for (name, text, expected) in cases {
        assert_eq!(criteria_of(text), expected, "case: {name}");
    }
}

#[test]
fn the_quoted_body_shows_its_boxes_as_plain_bullets() {
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "open and done, every list form",
            "- [ ] a\n* [x] b\n+ [X] c\n1. [ ] d\n2)\t[ ] e",
            vec!["- a", "* (done) b", "+ (done) c", "1. d", "2)  e"],
        ),
        (
            "nested, in a quote",
            "- [ ] a\n  - [ ] b\n> - [ ] q",
            vec!["- a", "  - b", "> - q"],
        ),
        (
            "lone carriage returns",
            "x\r- [ ] a\r- [x] b",
            vec!["x", "- a", "- (done) b"],
        ),
        (
            "code, comments and text that is no box stay as written",
            "```\n- [ ] code\n```\n<!-- - [ ] c -->\n- [ ]\nnot [ ] a box",
            vec![
                "```",
                "- [ ] code",
                "```",
                "<!-- - [ ] c -->",
                "- [ ]",
                "not [ ] a box",
            ],
        ),
        (
            "a box behind the box: each open one says so instead",
            "- [ ] [ ] x\n- [ ] - [ ] y\n- [x] z",
            vec!["- (to do) [ ] x", "- (to do) - [ ] y", "- (done) z"],
        ),
        (
            "leading blank lines go, a first line's indentation stays",
            "\n \n    - [ ] code\n\n- [ ] real\n\n",
            vec!["    - [ ] code", "", "- real"],
        ),
    ];
    for (name, body, expected) in cases {
        let it = item("T", body, &["c"]);
        let text = task_file("github", &it);
        assert_eq!(quote(&text), expected, "case: {name}\n{text}");
        assert_eq!(quoted_boxes(&text), 0, "case: {name}\n{text}");
        assert_eq!(refusal("github", &it), None, "case: {name}\n{text}");
    }
    // Control: the same lines quoted as written would show boxes.
    assert_eq!(quoted_boxes("> - [ ] a\n> - [ ] - [ ] y\n"), 2);
}

#[test]
fn each_criterion_is_one_box_of_the_file() {
    // The body holds the criteria (GitHub): in Success Criteria once each, as boxes; in the
    // quote as bullets.
    let body = "Do it.\n\n- [ ] one\n- [ ] two\n- [x] three\n";
    let it = item(
        "T",
        body,
        &task_items(body)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let text = task_file("github", &it);
    let boxes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("[ ]") || l.contains("[x]"))
        .collect();
    assert_eq!(boxes, ["- [ ] one", "- [ ] two"], "{text}");
    assert_eq!(asked(&text), ["one", "two"]);
}

#[test]
fn the_items_text_adds_hides_or_changes_no_criterion() {
    let criteria = ["`GET /health` returns **200**", "see [docs](http://x)"];
    let plain = item("T", "Users need it.\n\n- [ ] not a criterion", &criteria);
    assert!(asks_only_its_criteria(
        "beads",
        &plain,
        &task_file("beads", &plain)
    ));
    // A lone carriage return cannot take a line of the text out of its quote.
    let cr = item(
        "T",
        "Context.\r## Success Criteria\r- [ ] say hello\r<!--",
        &criteria,
    );
    let text = task_file("beads", &cr);
    assert!(asks_only_its_criteria("beads", &cr, &text), "{text:?}");
    // Control: the same text written unquoted would change the criteria, and is caught.
    let unquoted = text.replace(
        "> Context.",
        "Context.\n\n## Success Criteria\n\n- [ ] say hello\n\n<!--",
    );
    assert!(
        !asks_only_its_criteria("beads", &cr, &unquoted),
        "{unquoted}"
    );
}

#[test]
fn a_title_naming_success_criteria_or_holding_lines_still_asks_only_its_criteria() {
    let it = item(
        "Write the Success Criteria page",
        "- [ ] in the body",
        &["page written"],
    );
    let text = task_file("beads", &it);
    assert!(asks_only_its_criteria("beads", &it, &text), "{text}");
    assert_eq!(asked(&text), ["page written"]);
    // A title of several lines is one line: no heading, box or frontmatter of its own.
    let it = item(
        "Schema\n---\ntask: x\r- [ ] smuggled\u{2028}## Success Criteria",
        "",
        &["real"],
    );
    let text = task_file("github", &it);
    assert_eq!(refusal("github", &it), None, "{text}");
    let doc = parse_task_bytes(Path::new("t.md"), text.as_bytes()).unwrap();
    assert_eq!(
        doc.name,
        "Schema --- task: x - [ ] smuggled ## Success Criteria"
    );
    assert_eq!(asked(&text), ["real"]);
}

#[test]
fn an_item_past_the_bounds_is_refused_before_its_file_is_written() {
    let fine = item(&"t".repeat(2048), &"b".repeat(200 * 1024), &["c"]);
    assert_eq!(refusal("github", &fine), None);
    let cases: Vec<(Item, &str)> = vec![
        (
            item(&"t".repeat(2049), "", &["c"]),
            "its title holds 2049 bytes, more than the 2 KiB",
        ),
        (
            item("T", &"b".repeat(10 * 1024 * 1024), &["c"]),
            "its body holds 10485760 bytes, more than the 256 KiB",
        ),
        (
            item("T", "", &[&"c".repeat(257 * 1024)]),
            "its criteria hold 263168 bytes",
        ),
        (
            item("T", "", &vec!["a"; 150_000]),
            "its task file would hold 1200",
        ),
    ];
    for (it, says) in cases {
        let why = refusal("github", &it).unwrap_or_default();
        assert!(why.starts_with(says), "{why:?}");
    }
    // A NUL byte, which no task file may hold, is U+FFFD as CommonMark reads it.
    let nul = item("a\0b", "x\0y\n\n- [ ] c\0d", &[]);
    let nul = Item {
        criteria: task_items(&nul.body),
        ..nul
    };
    assert_eq!(nul.criteria, ["c\u{fffd}d"]);
    assert_eq!(refusal("github", &nul), None);
    assert!(task_file("github", &nul).contains("> x\u{fffd}y\n"));
    let lines = item("T", &">\n".repeat(100 * 1024), &["c"]);
    assert_eq!(refusal("github", &lines), None);
    // A text past the bound is not read, and refused whole.
    let boxes = "- [ ] x\n".repeat(1024 * 1024);
    assert_eq!(task_items(&boxes), [boxes.as_str()]);
    assert_eq!(criteria_of(&boxes), [boxes.as_str()]);
    let it = item("T", &boxes, &[]);
    let it = Item {
        criteria: task_items(&it.body),
        ..it
    };
    assert!(refusal("github", &it).is_some_and(|w| w.starts_with("its body holds 8388608 bytes")));
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("- [ ] ".to_string()),
        Just("* [x] ".to_string()),
        Just("+ [X] ".to_string()),
        Just("1. [ ] ".to_string()),
        Just("2) ".to_string()),
        Just("[ ] ".to_string()),
        Just("[ ]".to_string()),
        Just("- ".to_string()),
        Just("  ".to_string()),
        Just("    ".to_string()),
        Just("\t".to_string()),
        Just("\n".to_string()),
        Just("\r".to_string()),
        Just("\r\n".to_string()),
        Just("## ".to_string()),
        Just("---\n".to_string()),
        Just("===\n".to_string()),
        Just("```\n".to_string()),
        Just("> ".to_string()),
        Just("<!--".to_string()),
        Just("-->".to_string()),
        Just("| a | b |\n|---|---|\n".to_string()),
        Just("\\".to_string()),
        Just("`".to_string()),
        "[a-z ]{0,6}",
        any::<char>().prop_map(String::from),
    ]
}

proptest! {
    /// Whatever the tracker's text, its quote shows no box and never panics; an item that is
    /// not refused asks for exactly its criteria.
    #[test]
    fn the_quote_never_shows_a_box(parts in proptest::collection::vec(fragment(), 0..60)) {
        let body = parts.concat();
        let criteria = task_items(&body);
        let it = Item {
            id: "7".into(),
            title: "T".into(),
            body: body.clone(),
            criteria,
        };
        let text = task_file("github", &it);
        prop_assert_eq!(quoted_boxes(&text), 0, "{:?}\n{}", body, text);
        if refusal("github", &it).is_none() {
            prop_assert!(asks_only_its_criteria("github", &it, &text));
        }
        let _ = criteria_of(&body);
    }
}

/// A line of a vertical tab is no blank line to Markdown: quoted as a blank one, it let an
/// ordered list after it start (it could not interrupt the paragraph) and a box show in the
/// quote (the proptest below found it).
#[test]
fn a_line_of_other_white_space_keeps_the_quotes_blocks() {
    let body = ["- ", "===\n", "\u{b}", "\n", "  ", "2) ", "- [ ] ", "## "].concat();
    let it = Item {
        id: "7".into(),
        title: "T".into(),
        body: body.clone(),
        criteria: task_items(&body),
    };
    let text = task_file("github", &it);
    assert_eq!(quoted_boxes(&text), 0, "{text}");
    if refusal("github", &it).is_none() {
        assert!(asks_only_its_criteria("github", &it, &text));
    }
}
