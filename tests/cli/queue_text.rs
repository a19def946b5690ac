//! An item's text (SPEC §14): each criterion once as a box (the body quoted with its boxes as
//! plain bullets), criteria read by the one Markdown reader as a task file counts them (every
//! list form; none in a comment or code), bounded before any claim; `--pr` refused at start by a
//! tracker without pull requests; `--worktree` without a NAME takes prd.json's `branchName`.

use serde_json::{Value, json};

use crate::common::*;
use crate::queue::Beads;
use crate::queue_github::{Api, TOKEN, fresh, issue};

/// `ralph run --from github:o/r` against the stand-in, the fake agent following `script`.
fn run_github(env: &TestEnv, api: &Api, script: &str, extra: &[&str]) -> std::process::Output {
    let agent = format!("'{}'", fake_agent().display());
    let mut args = vec![
        "run",
        "--from",
        "github:o/r",
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[
            ("FAKE_AGENT_SCRIPT", script),
            ("GITHUB_API_URL", &api.url()),
            ("GITHUB_TOKEN", TOKEN),
        ],
        std::time::Duration::from_secs(120),
    )
}

/// How many times the agent ran (one item's loop: one prompt file per iteration).
fn agent_runs(env: &TestEnv) -> usize {
    (1..).take_while(|n| env.agent_ran(*n)).count()
}

/// The `- [ ]`/`- [x]` lines of a task file's Success Criteria, and whether its quote shows
/// any box (a quoted line whose list item starts with `[ ]`, `[x]` or `[X]`).
fn boxes(task: &str) -> (Vec<&str>, bool) {
    let criteria = task
        .split_once("## Success Criteria")
        .map_or("", |(_, c)| c)
        .lines()
        .filter(|l| l.starts_with("- ["))
        .collect();
    let quoted = task.lines().filter_map(|l| l.strip_prefix('>')).any(|l| {
        let l = l.trim_start_matches([' ', '>']);
        let l = l.trim_start_matches(|c: char| c.is_ascii_digit());
        let l = l.trim_start_matches(['-', '*', '+', '.', ')']).trim_start();
        l.starts_with("[ ]") || l.starts_with("[x]") || l.starts_with("[X]")
    });
    (criteria, quoted)
}

/// Nobody holds issue `i`, and ralph never asked to: no assignee, no label, no comment, and
/// no request that would claim it.
fn untouched(api: &Api, n: u64) {
    let i = api.issue(n);
    assert_eq!(i["state"], "open", "{i}");
    assert_eq!(i["assignees"], json!([]), "{i}");
    assert_eq!(i["labels"], json!(["ralph"]), "{i}");
    assert!(i["comments"].as_array().is_none_or(Vec::is_empty), "{i}");
    let claims: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET") && r.contains(&format!("/issues/{n}")))
        .collect();
    assert!(claims.is_empty(), "{claims:#?}");
}

/// Five criteria as an issue body holds them, and the task file the queue wrote for it before
/// its quote showed boxes as bullets (each criterion twice as a box).
const FIVE: [&str; 5] = ["one", "two", "three", "four", "five"];

fn five_boxes() -> String {
    FIVE.iter().map(|c| format!("- [ ] {c}\n")).collect()
}

#[test]
fn an_agent_that_ticks_the_first_box_it_finds_runs_once_per_criterion() {
    // Control: the task file as the queue wrote it before, the body's boxes quoted as boxes.
    // The agent ticks the quoted ones first: more runs than criteria.
    let old = TestEnv::new();
    let quoted: String = five_boxes().lines().map(|l| format!("> {l}\n")).collect();
    old.write(
        "RALPH_TASK.md",
        &format!(
            "---\ntask: \"Five things\"\n---\n\n# Task: Five things\n\nFrom github item `1`.\n\n> Do these.\n>\n{quoted}\n## Success Criteria\n\n{}",
            five_boxes()
        ),
    );
    old.commit_all("task");
    let out = old.run_fake("tick-first", &[]);
    assert_exit(&out, 0);
    assert_eq!(agent_runs(&old), 10, "{}", stdout(&out));

    // The queue's task file now: each criterion once as a box, one run each.
    let env = fresh();
    let body = format!("Do these.\n\n{}", five_boxes());
    let api = Api::start(
        &env,
        json!([issue(1, "Five things", &["ralph"], json!({ "body": body }))]),
        100,
    );
    let out = run_github(&env, &api, "tick-first", &[]);
    assert_exit(&out, 0);
    assert_eq!(api.issue(1)["state"], "closed");
    assert_eq!(agent_runs(&env), 5, "{}", stdout(&out));
    let task = env.read(".ralph/tasks/github-1.md");
    let (criteria, quoted) = boxes(&task);
    let done: Vec<String> = FIVE.iter().map(|c| format!("- [x] {c}")).collect();
    assert_eq!(criteria, done, "{task}");
    assert!(!quoted, "{task}");
    assert!(task.contains("> - one\n"), "{task}");
}

#[test]
fn task_items_of_every_list_form_count_and_none_in_a_comment_code_or_quote() {
    let env = fresh();
    let body = "Four things.\n\n- [ ] dash item\n+ [ ] plus item\n1. [ ] numbered item\n2) [ ] paren item\n  * [ ] nested item\n- [x] done already\n\n<!--\n- [ ] commented\n-->\n\n```\n- [ ] fenced\n```\n\n    - [ ] indented\n\n> - [ ] quoted\n";
    let api = Api::start(
        &env,
        json!([issue(1, "Many forms", &["ralph"], json!({ "body": body }))]),
        100,
    );
    let out = run_github(&env, &api, "check", &[]);
    assert_exit(&out, 0);
    assert_eq!(api.issue(1)["state"], "closed");
    let task = env.read(".ralph/tasks/github-1.md");
    let (criteria, _) = boxes(&task);
    assert_eq!(
        criteria,
        [
            "- [x] dash item",
            "- [x] plus item",
            "- [x] numbered item",
            "- [x] paren item",
            "- [x] nested item"
        ],
        "{task}"
    );
    // The body's boxes are bullets in the quote; what no reader sees as a box (a comment,
    // code) stays as written.
    for line in [
        "> - dash item",
        "> + plus item",
        "> 1. numbered item",
        "> 2) paren item",
        ">   * nested item",
        "> - (done) done already",
        "> - [ ] commented",
        "> - [ ] fenced",
        ">     - [ ] indented",
        "> > - quoted",
    ] {
        assert!(task.lines().any(|l| l == line), "no `{line}`:\n{task}");
    }
    assert_eq!(agent_runs(&env), 5, "{}", stdout(&out));
}

#[test]
fn a_body_of_lone_carriage_returns_and_a_title_of_many_lines() {
    let env = fresh();
    let api = Api::start(
        &env,
        json!([issue(
            1,
            "Schema\n---\ntask: x\r- [ ] smuggled\n## Success Criteria",
            &["ralph"],
            json!({ "body": "Context.\r+ [ ] one\r1. [ ] two\r" })
        )]),
        100,
    );
    let out = run_github(&env, &api, "check", &[]);
    assert_exit(&out, 0);
    let task = env.read(".ralph/tasks/github-1.md");
    assert!(
        task.contains("# Task: Schema --- task: x - [ ] smuggled ## Success Criteria\n"),
        "{task}"
    );
    let (criteria, quoted) = boxes(&task);
    assert_eq!(criteria, ["- [x] one", "- [x] two"], "{task}");
    assert!(!quoted, "{task}");
    assert_eq!(agent_runs(&env), 2);
}

/// A body past the bound (256 KiB), here 1.5 MiB: before, its task file was past the 1 MiB a
/// task file may hold, and the item was claimed, then its loop refused it and the queue stopped.
/// (A 10 MiB body is refused the same way, before it is read: `queue::tests`; the stand-in takes
/// some 9 s a listing of one, and the queue lists a dozen times.)
#[test]
fn a_body_past_the_bound_is_skipped_with_a_warning_and_never_claimed() {
    let env = fresh();
    let huge = format!("Big.\n\n{}", "- [ ] x\n".repeat(3 * 1024 * 1024 / 16));
    let api = Api::start(
        &env,
        json!([
            issue(1, "Huge", &["ralph"], json!({ "body": huge })),
            issue(2, "Small", &["ralph"], json!({})),
        ]),
        100,
    );
    let out = run_github(&env, &api, "check", &[]);
    assert_exit(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "github 1: its body holds {} bytes, more than the 256 KiB an item's text may; not taken",
            huge.len()
        )),
        "{err}"
    );
    untouched(&api, 1);
    assert!(!env.repo.join(".ralph/tasks/github-1.md").exists());
    // The queue went on.
    assert_eq!(api.issue(2)["state"], "closed", "{}", stdout(&out));
}

#[test]
fn beads_acceptance_criteria_are_task_items_of_every_form_else_lines() {
    let Some(b) = Beads::new() else { return };
    let forms = b.create_with(
        "Forms",
        "Context.\r- [ ] not a criterion\r",
        "+ [ ] plus done\r1. [ ] numbered done\r<!-- - [ ] commented -->",
        1,
    );
    let lines = b.create_with(
        "Lines",
        "Context.",
        "First line\r1) Second line\r- Third line\r",
        2,
    );
    b.env.commit_all("items");
    let out = b.run_queue("check-unless:no such text", &[]);
    assert_exit(&out, 0);
    for (id, want) in [
        (&forms, &["plus done", "numbered done"][..]),
        (&lines, &["First line", "Second line", "Third line"]),
    ] {
        assert_eq!(b.status(id), "closed", "{}", stdout(&out));
        let task = b.env.read(&format!(".ralph/tasks/beads-{id}.md"));
        let (criteria, quoted) = boxes(&task);
        let want: Vec<String> = want.iter().map(|c| format!("- [x] {c}")).collect();
        assert_eq!(criteria, want, "{task}");
        assert!(!quoted, "{task}");
    }
}

#[test]
fn pr_with_a_tracker_without_pull_requests_is_refused_before_any_claim() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Only", "- [ ] done", 1);
    b.env.commit_all("items");
    let before = b.env.commits();
    let out = b.run_queue("check", &["--pr"]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("--pr") && err.contains("beads"), "{err}");
    assert_eq!(b.status(&a), "open");
    assert!(b.show(&a)["assignee"].is_null(), "{}", b.show(&a));
    assert!(!b.env.agent_ran(1));
    assert_eq!(b.env.commits(), before);
    // Control: the item was ready, and without --pr it is taken and done.
    let out = b.run_queue("check", &[]);
    assert_exit(&out, 0);
    assert_eq!(b.status(&a), "closed");
    assert!(b.env.agent_ran(1));
}

/// One story; its file's `branchName` (on line 3) as given.
fn prd(branch: Option<&str>) -> String {
    let branch = branch.map_or(String::new(), |b| {
        format!("  \"branchName\": {},\n", Value::from(b))
    });
    format!(
        "{{\n  \"project\": \"P\",\n{branch}  \"userStories\": [{{ \"id\": \"US-1\", \"title\": \"One\", \"acceptanceCriteria\": [\"works\"], \"priority\": 1, \"passes\": false }}]\n}}\n"
    )
}

#[test]
fn worktree_without_a_name_runs_on_the_branch_prd_json_names() {
    let env = crate::stories::setup(&prd(Some("ralph/task-priority")));
    let out = env.run_fake("story-pass", &["prd.json", "--worktree"]);
    assert_exit(&out, 0);
    // The loop's branch is the file's `branchName`, exactly; the main tree did not move.
    let log = env.git(&["log", "--format=%s", "ralph/task-priority"]);
    assert!(log.lines().count() > 1, "{log}");
    assert_eq!(
        env.git(&["branch", "--list", "ralph/*", "--format=%(refname:short)"])
            .trim(),
        "ralph/task-priority"
    );
    assert_eq!(
        env.git(&["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "main"
    );
    let all = stdout(&env.ralph(&["status", "--all"]));
    assert!(
        all.contains("task-priority  [ralph/task-priority]"),
        "{all}"
    );
    // Given a NAME, the NAME wins.
    let out = env.run_fake("story-pass", &["prd.json", "--worktree", "other"]);
    assert_exit(&out, 0);
    assert!(
        env.git(&["branch", "--list", "ralph/other"])
            .contains("ralph/other")
    );
}

#[test]
fn worktree_without_a_name_and_no_branch_to_take_is_a_clear_error() {
    let cases: Vec<(Option<&str>, &str)> = vec![
        (
            None,
            "prd.json: no `branchName`, and `--worktree` was given no NAME",
        ),
        (
            Some("feature/x"),
            "prd.json:3: `branchName` \"feature/x\" is not a loop's branch",
        ),
        (
            Some("ralph/../x"),
            "prd.json:3: `branchName` \"ralph/../x\" is not a loop's branch",
        ),
        (
            Some("ralph/a\nb"),
            "prd.json:3: `branchName` \"ralph/a\\nb\" is not a loop's branch",
        ),
    ];
    for (branch, says) in cases {
        let env = crate::stories::setup(&prd(branch));
        let out = env.run_fake("story-pass", &["prd.json", "--worktree"]);
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(err.contains(says), "{branch:?}: {err}");
        assert!(err.contains("hint:"), "{err}");
        assert!(!env.agent_ran(1));
        assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
    }
    // `--worktree prd.json` would take the file for the NAME: said, nothing made.
    let env = crate::stories::setup(&prd(Some("ralph/x")));
    let out = env.run_fake("story-pass", &["--worktree", "prd.json"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("`prd.json` is a file here, taken as the loop's NAME"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
    // A target that is no story file names no loop: a NAME is needed.
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    env.commit_all("task");
    let out = env.run_fake("check", &["--worktree"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("`--worktree` needs a NAME"),
        "{}",
        stderr(&out)
    );
    assert!(!env.agent_ran(1));
}

/// A person's token, not ralph's (nor the agent's: ralph withholds its own): any credential an
/// agent finds, or a person who edits an item meanwhile.
const MALLORY: &str = "ghp_mallory";

/// The criteria lines of item `rel`'s task file.
fn criteria_of_file(env: &TestEnv, rel: &str) -> Vec<String> {
    let task = env.read(rel);
    boxes(&task).0.into_iter().map(str::to_string).collect()
}

#[test]
fn an_issue_rewritten_before_its_claim_is_put_back_and_worked_on_its_first_text() {
    let env = fresh();
    let three = "Three things.\n\n- [ ] alpha\n- [ ] beta\n- [ ] gamma\n";
    let api = Api::start_with(
        &env,
        json!([
            issue(1, "Schema", &["ralph"], json!({})),
            issue(2, "Docs", &["ralph"], json!({ "body": three })),
        ]),
        100,
        json!({ "tokens": { TOKEN: "ralph-bot", MALLORY: "mallory" } }),
    );
    // Item 1's agent rewrites still-queued #2 down to one trivial box, with a token of its own.
    let edit = agent_sh(
        &env,
        "rewrite-two",
        &format!(
            "if grep -q 'Task: Schema' \"$RALPH_TASK_FILE\"; then curl -sf -o /dev/null -X PATCH -H 'Authorization: Bearer {MALLORY}' -d '{{\"title\":\"Docs (easy)\",\"body\":\"- [ ] trivial\"}}' '{}/repos/o/r/issues/2'; fi",
            api.url()
        ),
    );
    let out = run_github(&env, &api, &format!("{edit}+check"), &[]);
    // Control: the rewrite reached the API and was made.
    let made = api.calls().into_iter().any(|c| {
        c["user"] == "mallory"
            && c["method"] == "PATCH"
            && c["target"] == "/repos/o/r/issues/2"
            && c["status"] == 200
    });
    assert!(made, "{:#?}\n{}", api.calls(), stderr(&out));
    assert_exit(&out, 0);
    // #2 was worked on the text the queue first read, and that text is #2's again.
    assert_eq!(
        criteria_of_file(&env, ".ralph/tasks/github-2.md"),
        ["- [x] alpha", "- [x] beta", "- [x] gamma"],
        "{}",
        stdout(&out)
    );
    assert!(
        env.read(".ralph/tasks/github-2.md")
            .contains("# Task: Docs\n")
    );
    let two = api.issue(2);
    assert_eq!(
        (&two["title"], &two["body"]),
        (&json!("Docs"), &json!(three))
    );
    assert_eq!(two["state"], "closed");
    assert!(
        api.comments(2)
            .iter()
            .any(|c| c.starts_with("ralph: put back its text as the queue first read it")),
        "{:?}",
        api.comments(2)
    );
    assert!(
        stderr(&out).contains("github 2: put back its text as the queue first read it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn beads_criteria_rewritten_before_their_claim_are_put_back_and_worked_as_first_read() {
    let Some(b) = Beads::new() else { return };
    b.create_with("First", "first", "- [ ] first done", 1);
    let criteria = "- [ ] alpha\n- [ ] beta\n- [ ] gamma";
    let second = b.create_with("Second", "Three things.", criteria, 2);
    b.env.commit_all("items");
    // Item 1's agent rewrites still-queued item 2's criteria down to one trivial box, as br
    // lets anyone on the machine (`--force`: br guards a text from being shortened).
    let rewrote = b.env.home.join("rewrote");
    let step = agent_sh(
        &b.env,
        "rewrite-second",
        &format!(
            "if grep -q 'Task: First' \"$RALPH_TASK_FILE\"; then '{}' update {second} --title 'Second (easy)' --acceptance-criteria '- [ ] trivial' --force >/dev/null 2>&1 && touch '{}'; fi",
            b.br.display(),
            rewrote.display()
        ),
    );
    let out = b.run_queue(&format!("{step}+check"), &[]);
    // Control: the rewrite was made.
    assert!(rewrote.exists(), "{}", stderr(&out));
    assert_exit(&out, 0);
    let rel = format!(".ralph/tasks/beads-{second}.md");
    assert_eq!(
        criteria_of_file(&b.env, &rel),
        ["- [x] alpha", "- [x] beta", "- [x] gamma"],
        "{}",
        stdout(&out)
    );
    assert!(b.env.read(&rel).contains("# Task: Second\n"));
    let now = b.show(&second);
    assert_eq!(
        (&now["title"], &now["acceptance_criteria"]),
        (&json!("Second"), &json!(criteria)),
        "{now}"
    );
    assert_eq!(now["status"], "closed");
    assert!(
        stderr(&out).contains(&format!(
            "beads {second}: put back its text as the queue first read it"
        )),
        "{}",
        stderr(&out)
    );
}
