//! `prd.json` as a target (SPEC §14): one story per iteration by priority, the agent owning only
//! its story's `passes` and `notes`, a story passing only with the tests, three failed attempts
//! skipping it, and the file's unknown keys kept.

use crate::common::*;

/// Three stories, in the file out of priority order, with keys ralph does not know.
const PRD: &str = r#"{
  "project": "TaskApp",
  "branchName": "ralph/task-priority",
  "description": "Task Priority System",
  "sprint": 7,
  "userStories": [
    {
      "id": "US-002",
      "title": "Display priority",
      "description": "As a user, I see each task's priority.",
      "acceptanceCriteria": ["Badge shows priority"],
      "priority": 2,
      "passes": false,
      "notes": "",
      "estimate": 3
    },
    {
      "id": "US-001",
      "title": "Add priority field",
      "acceptanceCriteria": ["Migration runs"],
      "priority": 1,
      "passes": false
    },
    {
      "id": "US-003",
      "title": "Filter by priority",
      "priority": 3,
      "passes": false,
      "notes": ""
    }
  ]
}
"#;

/// A repository whose one commit holds `prd` as `prd.json`.
pub(crate) fn setup(prd: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write("prd.json", prd);
    env.commit_all("initial");
    env
}

fn stories(env: &TestEnv) -> serde_json::Value {
    serde_json::from_str(&env.read("prd.json")).expect("prd.json is JSON")
}

/// `id → passes` as the file on disk says.
fn passing(env: &TestEnv) -> Vec<(String, bool)> {
    stories(env)["userStories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["passes"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn stories_run_one_per_iteration_by_priority_and_complete() {
    let env = setup(PRD);
    let out = env.run_fake("story-pass", &["--test-command", "true"]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(3) && !env.agent_ran(4));
    // By priority, not by the file's order (US-002 comes first in the file).
    for (n, id) in [(1, "US-001"), (2, "US-002"), (3, "US-003")] {
        let p = env.agent_prompt(n);
        assert!(
            p.starts_with(&format!(
                "# Ralph iteration {n}/50: story {id} (attempt 1/3)"
            )),
            "{p}"
        );
        for other in ["US-001", "US-002", "US-003"].iter().filter(|o| **o != id) {
            assert!(!p.contains(other), "prompt {n} names {other}: {p}");
        }
    }
    assert!(passing(&env).iter().all(|(_, p)| *p));
    // The keys ralph does not know are still there.
    let doc = stories(&env);
    assert_eq!(doc["sprint"], 7);
    assert_eq!(doc["userStories"][0]["estimate"], 3);
    // The agent's learnings, and ralph's line per iteration, in progress.txt.
    let progress = env.read("progress.txt");
    assert!(
        progress.contains("learned: story US-001 needs a file"),
        "{progress}"
    );
    let ralphs: Vec<&str> = progress
        .lines()
        // ralph's lines start with their time; the agent's are its own.
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| l.split_once(' ').map(|(_, rest)| rest))
        .collect();
    assert_eq!(
        ralphs,
        [
            "story US-001: passed",
            "story US-002: passed",
            "story US-003: passed"
        ]
    );
    let recs = env.iter_records();
    assert!(
        recs[0].contains("| 1/3 stories, story US-001 attempt 1/3 |"),
        "{recs:?}"
    );
    assert_eq!(env.commits().len(), 4, "{:?}", env.commits());
    let state = status_json(&env);
    assert_eq!(state["mode"], "stories", "{state}");
}

#[test]
fn an_agent_marking_every_story_passing_gets_them_put_back_and_does_not_complete() {
    let env = setup(PRD);
    // Control: the agent on its own marks all three passing.
    env.write("copy/prd.json", PRD);
    let alone = env
        .command(&fake_agent().display().to_string())
        .arg("# Ralph iteration 1/1: story US-001 (attempt 1/3)")
        .env("FAKE_AGENT_SCRIPT", "story-pass-all")
        .env("RALPH_TASK_FILE", "copy/prd.json")
        .current_dir(&env.repo)
        .output()
        .unwrap();
    assert!(alone.status.success());
    let copy: serde_json::Value = serde_json::from_str(&env.read("copy/prd.json")).unwrap();
    assert!(
        copy["userStories"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["passes"] == true)
    );
    std::fs::remove_dir_all(env.repo.join("copy")).unwrap();
    // Under ralph, only its story's flag stays.
    let out = env.run_fake(
        "story-pass-all",
        &["--test-command", "true", "--max-iterations", "1"],
    );
    assert_exit(&out, 3);
    assert_eq!(
        passing(&env),
        [
            ("US-002".to_string(), false),
            ("US-001".to_string(), true),
            ("US-003".to_string(), false)
        ]
    );
    let doc = stories(&env);
    assert_eq!(doc["userStories"][0]["title"], "Display priority");
    let said = format!("{}{}", stdout(&out), env.activity());
    for line in [
        "story US-002: `title` put back",
        "story US-002: `passes` put back",
        "story US-003: `passes` put back",
    ] {
        assert!(said.contains(line), "{line} not said:\n{said}");
    }
}

#[test]
fn a_story_whose_tests_fail_does_not_pass_and_three_failures_skip_it() {
    let one = r#"{"project": "P", "userStories": [
        {"id": "A", "title": "First", "priority": 1, "passes": false},
        {"id": "B", "title": "Second", "priority": 2, "passes": false}
    ]}"#;
    // Control: with tests that pass, the agent's flag stands and the run completes.
    let env = setup(one);
    assert_exit(&env.run_fake("story-pass", &["--test-command", "true"]), 0);
    // Story A's work fails the tests (B's makes them pass): A's `passes` is put back three
    // times, then A is skipped, B passes, and the run ends PARTIAL.
    let env = setup(one);
    let out = env.run_fake(
        "story-pass",
        &[
            "--test-command",
            "test ! -f work/story-A.txt || test -f work/story-B.txt",
        ],
    );
    assert_exit(&out, 9);
    assert_eq!(
        passing(&env),
        [("A".to_string(), false), ("B".to_string(), true)]
    );
    for (n, story, attempt) in [(1, "A", 1), (2, "A", 2), (3, "A", 3), (4, "B", 1)] {
        let p = env.agent_prompt(n);
        assert!(
            p.starts_with(&format!(
                "# Ralph iteration {n}/50: story {story} (attempt {attempt}/3)"
            )),
            "{p}"
        );
    }
    assert!(!env.agent_ran(5));
    let progress = env.read("progress.txt");
    assert!(
        progress.contains("story A: not yet (attempt 3/3): skipped"),
        "{progress}"
    );
    let so = stdout(&out);
    assert!(
        so.contains("story A: First (skipped after 3 attempts)"),
        "{so}"
    );
}

#[test]
fn stories_removed_or_renamed_halt_as_tampered() {
    let env = setup(PRD);
    let script = agent_sh(
        &env,
        "rename",
        "sed -i 's/\"US-003\"/\"US-009\"/' prd.json\n",
    );
    let out = env.run_fake(&script, &["--test-command", "true"]);
    assert_exit(&out, 8);
    let said = stdout(&out);
    assert!(
        said.contains("story US-003 was removed or re-identified"),
        "{said}"
    );
}

#[test]
fn a_bad_story_file_is_an_error_naming_its_line() {
    let env = setup(
        "{\n  \"userStories\": [\n    {\"id\": \"A\", \"title\": \"T\", \"passes\": \"yes\"}\n  ]\n}\n",
    );
    let out = env.run_fake("story-pass", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(
            "prd.json:3: not a story file: invalid type: string \"yes\", expected a boolean"
        ),
        "{err}"
    );
    assert!(!env.agent_ran(1));
}

#[test]
fn the_snarktank_layout_is_found_without_a_target_and_a_resume_keeps_the_attempts() {
    let env = TestEnv::new();
    env.write(
        "scripts/ralph/prd.json",
        r#"{"project": "P", "userStories": [{"id": "A", "title": "Only", "passes": false}]}"#,
    );
    env.commit_all("initial");
    let out = env.run_fake(
        "story-pass",
        &["--test-command", "false", "--max-iterations", "2"],
    );
    assert_exit(&out, 3);
    assert!(
        env.read("scripts/ralph/progress.txt")
            .contains("story A: not yet (attempt 2/3)")
    );
    // The attempts are the run's record's, not a file the agent writes: the resume's first
    // iteration is attempt 3, and the last.
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph_with_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--max-iterations",
            "5",
        ],
        &[("FAKE_AGENT_SCRIPT", "story-pass")],
        std::time::Duration::from_secs(60),
    );
    assert_exit(&out, 9);
    assert!(
        env.agent_prompt(3)
            .starts_with("# Ralph iteration 3/5: story A (attempt 3/3)"),
        "{}",
        env.agent_prompt(3)
    );
    assert!(!env.agent_ran(4));
}

#[test]
fn a_run_stopped_while_its_tests_run_never_resumes_with_the_story_passing() {
    let env = setup(r#"{"userStories": [{"id": "A", "title": "Only", "passes": false}]}"#);
    let mark = env.home.join("tests-started");
    let tests = format!("touch '{}'; sleep 30", mark.display());
    let bg = env.spawn_fake("story-pass", &["--test-command", &tests, "--grace", "1s"]);
    assert!(wait_until(std::time::Duration::from_secs(20), || mark.exists()));
    bg.signal(libc::SIGINT);
    let (code, _, err) = bg.wait(std::time::Duration::from_secs(20));
    assert_eq!(code, Some(130), "{err}");
    // The agent did its work and marked its story; the tests never said so, and neither does
    // the file the interrupted iteration committed.
    assert!(env.repo.join("work/story-A.txt").exists());
    assert_eq!(passing(&env), [("A".to_string(), false)]);
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}
