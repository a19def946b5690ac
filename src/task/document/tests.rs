//! Tests of task-file loading: frontmatter, names, criteria, errors with lines.

use super::frontmatter::{Key, TASK_KEYS};
use super::*;
use crate::task::checklist::Section;
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
        Scope::Sections(vec![Section {
            heading: "Success Criteria".into(),
            line: 10
        }])
    );
    assert_eq!((doc.checklist.done(), doc.checklist.total()), (1, 2));
}

#[test]
fn all_frontmatter_keys() {
    let doc = ok(
        "---\ntask: t\ntest_command: make\nmax_iterations: 3\nagent: codex\nagent_cmd: my-agent --x\ntimeout: 90s\nidle_timeout: 5m\ngrace: 10s\nstuck_threshold: 4\ncompletion_promise: DONE\nverdict_command: ./judge\nmax_cost: 2.5\nmax_wait: 1h\nlimit_backoff: 30s\ncheck_timeout: 10m\n---\n- [ ] a\n",
    );
    let fm = doc.frontmatter.clone().unwrap_or_default();
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
        max_cost: Some(2.5),
        max_wait: Some("1h".into()),
        limit_backoff: Some("30s".into()),
        check_timeout: Some("10m".into()),
        keys: TASK_KEYS
            .iter()
            .enumerate()
            .map(|(i, k)| Key {
                name: k.to_string(),
                line: i + 2,
            })
            .collect(),
    };
    assert_eq!(fm, expected);
    assert_eq!(doc.frontmatter_end_line, 17);
    assert_eq!(doc.checklist.criteria[0].line, 18);
    assert!(
        doc.warnings.iter().all(|w| !w.message.contains("key")),
        "{:?}",
        doc.warnings
    );
    // A whole number of USD is a number too.
    let doc = ok("---\ntask: t\nmax_cost: 5\n---\n- [ ] a\n");
    assert_eq!(doc.frontmatter.and_then(|f| f.max_cost), Some(5.0));
}

/// An unknown key's value is still YAML read under serde-saphyr's budget: aliases nested as in
/// "billion laughs" are an error at their line, never a hang or unbounded memory.
#[test]
fn alias_bombs_in_unknown_keys_stay_bounded() {
    let mut yaml = String::from("task: t\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = format!("*l{}", i - 1);
        yaml.push_str(&format!(
            "l{i}: &l{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    let text = format!("---\n{yaml}---\n- [ ] a\n");
    let e = err(&text).to_string();
    assert!(
        e.starts_with("RALPH_TASK.md:8: invalid frontmatter: l5: budget breached"),
        "{e}"
    );
}

/// Keys other Ralph-loop tools write are read past with a warning naming file and line,
/// whatever they hold; ralph's own keys still take effect.
#[test]
fn keys_of_other_tools_are_warnings_with_their_lines() {
    let doc = ok(
        "---\ntask: t\ncompletion_criteria:\n  - all tests pass\n  - nested: {deep: [1, 2]}\nbrowser_validation: true\nmax_iterations: 4\n\"quoted key\": &a x\nalias: *a\n---\n## Success Criteria\n- [ ] a\n",
    );
    let got: Vec<String> = doc.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        vec![
            "RALPH_TASK.md:3: frontmatter key `completion_criteria` is not ralph's: ignored",
            "RALPH_TASK.md:6: frontmatter key `browser_validation` is not ralph's: ignored",
            "RALPH_TASK.md:8: frontmatter key `quoted key` is not ralph's: ignored",
            "RALPH_TASK.md:9: frontmatter key `alias` is not ralph's: ignored",
        ]
    );
    assert_eq!(doc.frontmatter.and_then(|f| f.max_iterations), Some(4));
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
            "a quote left open, its value running on over an indented line",
            "---\ntask: \"first\n  second\nagent: x\n---\n- [ ] a\n",
            2,
            "RALPH_TASK.md:2: invalid frontmatter: task: the quote opened on this line is never closed",
        ),
        (
            "a quote left open in a list item",
            "---\ntask: x\nextra:\n  - 'it''s\nagent: x\n---\n- [ ] a\n",
            4,
            "RALPH_TASK.md:4: invalid frontmatter: extra: the quote opened on this line is never closed",
        ),
        (
            "a configuration file's key",
            "---\ntask: x\ntest_command: t\nsandbox: true\n---\n- [ ] a\n",
            4,
            "RALPH_TASK.md:4: `sandbox` is set in configuration files only, not in a task file's frontmatter",
        ),
        (
            "hooks in frontmatter",
            "---\ntask: x\nhooks:\n  on_halt: notify-send\n---\n- [ ] a\n",
            3,
            "RALPH_TASK.md:3: `hooks` is set in configuration files only",
        ),
        (
            "max_cost not a number",
            "---\ntask: x\n\nmax_cost: lots\n---\n- [ ] a\n",
            4,
            "RALPH_TASK.md:4: invalid frontmatter: max_cost: ",
        ),
        (
            "max_cost not positive",
            "---\ntask: x\nmax_cost: -1\n---\n- [ ] a\n",
            3,
            "RALPH_TASK.md:3: invalid frontmatter: max_cost: must be a positive number of USD, not -1",
        ),
        (
            "a duration that is none",
            "---\ntask: x\nagent: a\ncheck_timeout: soon\n---\n- [ ] a\n",
            4,
            "RALPH_TASK.md:4: invalid frontmatter: check_timeout: `soon` is not a duration",
        ),
        (
            "a list where a command goes",
            "---\ntask: x\ntest_command:\n  - cargo test\n---\n- [ ] a\n",
            4,
            "RALPH_TASK.md:4: invalid frontmatter: test_command: ",
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
    match err("---\ntask: x\nmax_iterations: many\n---\n- [ ] a\n") {
        e @ TaskError::InvalidFrontmatter { .. } => {
            assert!(e.hint().is_some_and(|h| h.contains("check_timeout")));
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
                .iter()
                .any(|w| w.to_string() == "RALPH_TASK.md: no frontmatter: defaults apply"),
            "case {name}: {:?}",
            doc.warnings
        );
    }
}

#[test]
fn whole_document_fallback_warns() {
    type Case = (&'static str, &'static str, usize, &'static str);
    let cases: Vec<Case> = vec![
        (
            "no criteria heading",
            "---\ntask: t\n---\n# T\n- [ ] a\n## Notes\n- [x] b\n> - [ ] quoted\n",
            2,
            "RALPH_TASK.md: no \"## Success Criteria\" heading: every checkbox in the document counts",
        ),
        (
            "an empty criteria heading",
            "---\ntask: t\n---\n# T\n## Success Criteria\nAll phases below.\n## Phase 1\n- [ ] a\n- [x] b\n1. [ ] c\n",
            3,
            "RALPH_TASK.md:5: no criterion under \"Success Criteria\": every checkbox in the document counts",
        ),
        (
            "several empty criteria headings",
            "---\ntask: t\n---\n## Phase 1\n### Acceptance Criteria\n- [ ]\n## Phase 2\n### Acceptance Criteria\n### Tasks\n- [ ] a\n",
            1,
            "RALPH_TASK.md:5: no criterion under any of the 2 criteria headings (lines 5, 8): every checkbox in the document counts",
        ),
    ];
    for (name, input, total, warning) in cases {
        let doc = ok(input);
        assert_eq!(doc.checklist.scope, Scope::WholeDocument, "case {name}");
        assert_eq!(doc.checklist.total(), total, "case {name}");
        let got: Vec<String> = doc.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(got, vec![warning.to_string()], "case {name}");
    }
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
            "---\ntask: t\n---\n# T\n\n## Success Criteria\n- plain\n- [ ]\n## Other\n- outside\n",
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
        Just("### Success Criteria\n".to_string()),
        Just("## Phase 2\n".to_string()),
        Just("- [ ]\n".to_string()),
        Just("completion_criteria:\n  - x\n".to_string()),
        Just("max_cost: 1.5\n".to_string()),
        Just("timeout: 9s\n".to_string()),
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

    /// Phases as people write them: `## Phase k`, then a criteria heading of any level below
    /// it (`### Success Criteria`, `#### success criteria:`), criteria with any list marker,
    /// some nested under a plain bullet, and a notes section with task items that are not
    /// criteria. Every phase's criteria count, in order; the notes' unchecked ones are outside.
    #[test]
    fn every_phase_counts(
        phases in proptest::collection::vec(
            (
                3u8..7,
                proptest::collection::vec(
                    ("[A-Za-z0-9][A-Za-z0-9 ]{0,20}", any::<bool>(), 0usize..4, any::<bool>()),
                    1..6,
                ),
                proptest::collection::vec(("[a-z][a-z ]{0,10}", any::<bool>()), 0..3),
            ),
            1..5,
        ),
    ) {
        let mut s = String::from("---\ntask: gen\n---\n# Task: gen\n\n");
        let mut expected = Vec::new();
        let mut outside = Vec::new();
        for (k, (level, criteria, notes)) in phases.iter().enumerate() {
            let hashes = "#".repeat(usize::from(*level));
            s.push_str(&format!("## Phase {k}\n\n{hashes} Success Criteria\n\n"));
            for (j, (text, checked, marker, nested)) in criteria.iter().enumerate() {
                let mark = if *checked { "x" } else { " " };
                let bullet = ["-", "*", "+", "1."][*marker];
                if *nested {
                    s.push_str(&format!("\n- group {k}.{j}\n  - [{mark}] {text}\n\n"));
                } else {
                    s.push_str(&format!("\n{bullet} [{mark}] {text}\n\n"));
                }
                expected.push((checklist::normalize(text), *checked));
            }
            s.push_str(&format!("\n{hashes} Notes\n\n"));
            for (text, checked) in notes {
                let mark = if *checked { "x" } else { " " };
                s.push_str(&format!("- [{mark}] note {text}\n"));
                if !checked {
                    outside.push(checklist::normalize(&format!("note {text}")));
                }
            }
            s.push('\n');
        }
        let doc = parse(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got: Vec<(String, bool)> = doc
            .checklist
            .criteria
            .iter()
            .map(|c| (c.text.clone(), c.checked))
            .collect();
        prop_assert_eq!(got, expected);
        prop_assert_eq!(&doc.checklist.unchecked_outside, &outside);
        prop_assert!(doc.warnings.is_empty(), "{:?}", doc.warnings);
        match &doc.checklist.scope {
            Scope::Sections(sections) => prop_assert_eq!(sections.len(), phases.len()),
            Scope::WholeDocument => prop_assert!(false, "whole document"),
        }
    }
}
