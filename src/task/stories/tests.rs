//! Tests of the story file: the shapes real files take, errors with lines, the order stories are
//! worked in, and what the agent may change.

use std::path::Path;

use super::*;

/// A file as the snarktank tools write it, with keys ralph does not know.
const FILE_TEXT: &str = r#"{
  "project": "TaskApp",
  "branchName": "ralph/task-priority",
  "description": "Task Priority System",
  "owner": {
    "team": "core"
  },
  "userStories": [
    {
      "id": "US-002",
      "title": "Display priority",
      "description": "As a user, I see each task's priority.",
      "acceptanceCriteria": [
        "Badge shows priority",
        "Typecheck passes"
      ],
      "priority": 2,
      "passes": false,
      "notes": "",
      "estimate": 3
    },
    {
      "id": "US-001",
      "title": "Add priority field",
      "description": "As a developer, I store a priority.",
      "acceptanceCriteria": [
        "Migration runs"
      ],
      "priority": 1,
      "passes": false,
      "notes": ""
    },
    {
      "id": "US-003",
      "title": "Filter by priority",
      "acceptanceCriteria": [],
      "priority": 3,
      "passes": false
    }
  ]
}
"#;

fn parsed(text: &str) -> Stories {
    parse(Path::new("prd.json"), text).unwrap()
}

fn err(text: &str) -> String {
    parse(Path::new("prd.json"), text).unwrap_err()
}

#[test]
fn a_real_file_reads_with_unknown_keys_kept_and_missing_ones_tolerated() {
    let s = parsed(FILE_TEXT);
    assert_eq!(s.name(), "TaskApp");
    assert_eq!(s.branch.as_deref(), Some("ralph/task-priority"));
    assert_eq!(s.stories.len(), 3);
    let third = s.story("US-003").unwrap();
    assert_eq!((third.description.as_str(), third.notes.as_str()), ("", ""));
    // Written back untouched, the document is what was read: unknown keys, in their order.
    assert_eq!(s.render(), FILE_TEXT);
    // `productName` stands for `project`; numeric ids are ids.
    let s = parsed(r#"{"productName": "Shop", "userStories": [{"id": 7, "title": "T"}]}"#);
    assert_eq!((s.name().as_str(), s.stories[0].id.as_str()), ("Shop", "7"));
    assert!(!s.stories[0].passes);
}

#[test]
fn bad_files_are_errors_naming_the_file_and_line() {
    let e = err(
        "{\n  \"userStories\": [\n    {\"id\": \"A\", \"title\": \"T\", \"passes\": \"yes\"}\n  ]\n}\n",
    );
    assert!(
        e.starts_with("prd.json:3: not a story file: invalid type"),
        "{e}"
    );
    let e = err("{\n  \"userStories\": [\n    {\"title\": \"T\"}\n  ]\n}\n");
    assert!(
        e.starts_with("prd.json:3: not a story file: missing field `id`"),
        "{e}"
    );
    let e = err(
        "{\n  \"userStories\": [\n    {\"id\": \"A\", \"title\": \"T\"},\n    {\"id\": \"A\", \"title\": \"U\"}\n  ]\n}\n",
    );
    assert!(
        e.starts_with("prd.json:4: two stories have the id `A`"),
        "{e}"
    );
    let e = err("{\n  \"project\": \"x\",\n  \"userStories\": []\n}\n");
    assert!(e.starts_with("prd.json:3: `userStories` is empty"), "{e}");
    let e = err("{\"project\": \"x\"}");
    assert!(e.contains("missing field `userStories`"), "{e}");
    let e = err("{\"userStories\": [");
    assert!(e.starts_with("prd.json:1: not a story file: EOF"), "{e}");
}

#[test]
fn stories_are_worked_by_priority_then_file_order_and_skipped_ones_left() {
    let mut s = parsed(FILE_TEXT);
    assert_eq!(s.next(&[]).unwrap().id, "US-001");
    s.set_passes("US-001", true);
    assert_eq!(s.next(&[]).unwrap().id, "US-002");
    assert_eq!(s.next(&["US-002".into()]).unwrap().id, "US-003");
    assert!(s.next(&["US-002".into(), "US-003".into()]).is_none());
    // Without priorities, the file's order; a story without one comes after those with one.
    let s = parsed(
        r#"{"userStories": [{"id": "a", "title": "A"}, {"id": "b", "title": "B", "priority": 9}, {"id": "c", "title": "C"}]}"#,
    );
    assert_eq!(s.next(&[]).unwrap().id, "b");
    assert_eq!(s.next(&["b".into()]).unwrap().id, "a");
}

/// The agent's edit of the file: `f` changes the document as JSON.
fn edited(before: &Stories, f: impl FnOnce(&mut Value)) -> Stories {
    let mut doc = before.doc.clone();
    f(&mut doc);
    parsed(&serde_json::to_string_pretty(&doc).unwrap())
}

fn story_mut(doc: &mut Value, i: usize) -> &mut serde_json::Map<String, Value> {
    doc["userStories"][i].as_object_mut().unwrap()
}

#[test]
fn the_agent_keeps_its_storys_passes_and_notes_and_nothing_else() {
    let before = parsed(FILE_TEXT);
    // Its own story: kept as it left it, nothing put back.
    let after = edited(&before, |d| {
        story_mut(d, 1).insert("passes".into(), Value::Bool(true));
        story_mut(d, 1).insert("notes".into(), "added the column".into());
    });
    let g = guard(&before, &after, "US-001");
    assert!(g.restored.is_empty() && g.tampered.is_empty(), "{g:?}");
    assert_eq!(g.kept.doc, after.doc);
    assert!(g.kept.story("US-001").unwrap().passes);
    assert_eq!(g.kept.passing(), 1);

    // Every story marked passing, a title and a top-level key changed, a key added: only its
    // own story's `passes` stays.
    let after = edited(&before, |d| {
        for i in 0..3 {
            story_mut(d, i).insert("passes".into(), Value::Bool(true));
        }
        story_mut(d, 0).insert("title".into(), "Easier".into());
        story_mut(d, 2).insert("done".into(), Value::Bool(true));
        d["description"] = "changed".into();
    });
    let g = guard(&before, &after, "US-001");
    assert!(g.tampered.is_empty());
    assert_eq!(g.kept.passing(), 1, "{:?}", g.kept.stories);
    assert!(g.kept.story("US-001").unwrap().passes);
    assert_eq!(
        g.restored,
        [
            "`description` put back",
            "story US-002: `title` put back",
            "story US-002: `passes` put back",
            "story US-003: `passes` put back",
            "story US-003: `done` put back",
        ]
    );
    let mut expected = before.clone();
    expected.set_passes("US-001", true);
    assert_eq!(g.kept.doc, expected.doc);

    // Reordered stories are put back in their order.
    let after = edited(&before, |d| {
        d["userStories"].as_array_mut().unwrap().swap(0, 2);
    });
    let g = guard(&before, &after, "US-001");
    assert_eq!(g.restored, ["the stories' order put back"]);
    assert_eq!(g.kept.doc, before.doc);
}

#[test]
fn stories_removed_added_or_re_identified_are_tampering() {
    let before = parsed(FILE_TEXT);
    let removed = edited(&before, |d| {
        d["userStories"].as_array_mut().unwrap().remove(0);
    });
    assert_eq!(
        guard(&before, &removed, "US-001").tampered,
        ["story US-002 was removed or re-identified"]
    );
    let renamed = edited(&before, |d| {
        story_mut(d, 2).insert("id".into(), "US-009".into());
    });
    assert_eq!(
        guard(&before, &renamed, "US-001").tampered,
        [
            "story US-003 was removed or re-identified",
            "story US-009 was added"
        ]
    );
}
