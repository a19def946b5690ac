//! Tests of what a queue writes: loop names and task files, read back by the task reader.

use std::path::Path;

use super::*;
use crate::task::document::parse_task_bytes;

fn item(title: &str, body: &str, criteria: &[&str]) -> Item {
    Item {
        id: "bd-12".into(),
        title: title.into(),
        body: body.into(),
        criteria: criteria.iter().map(|c| c.to_string()).collect(),
    }
}

#[test]
fn loop_names_are_branch_and_path_safe() {
    assert_eq!(loop_name("beads", "bd-12"), "beads-bd-12");
    assert_eq!(loop_name("github", "42"), "github-42");
    assert_eq!(loop_name("beads", "../x y/z"), "beads-x-y-z");
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
    let criteria: Vec<&str> = doc.checklist.remaining().map(|c| c.text.as_str()).collect();
    assert_eq!(criteria, ["Form posts", "Tests pass"], "{text}");
    assert!(text.contains("> Users need it."), "{text}");
    // No criteria: the title is the one.
    let text = task_file("beads", &item("Fix the\nbuild", "", &[]));
    let doc = parse_task_bytes(Path::new("t.md"), text.as_bytes()).unwrap();
    let criteria: Vec<&str> = doc.checklist.remaining().map(|c| c.text.as_str()).collect();
    assert_eq!(criteria, ["Fix the build"]);
}

#[test]
fn criteria_come_from_task_items_else_lines() {
    assert_eq!(
        criteria_of("Intro\n- [ ] one\n- [x] done already\n* [ ] two\n"),
        ["one", "two"]
    );
    assert_eq!(
        criteria_of("1. Form posts\n2. Tests pass\n\n- Docs updated\n"),
        ["Form posts", "Tests pass", "Docs updated"]
    );
    assert!(criteria_of("  \n").is_empty());
}
