//! A question on a GitHub queue (issue 31, SPEC §16): the item's agent runs `ralph ask`, ralph
//! says the question once as a comment on the issue, and a reply comment by someone other than
//! the token's user answers it — the loop goes on with the reply in its next prompt; a reply by
//! the token's own user (or a comment older than the question) never does; `ralph answer
//! github-N` from the main work tree answers too. Real `ralph run --from github:o/r`
//! processes against the GitHub stand-in, real agents (shell scripts), real repositories.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;
use crate::queue_github::{Api, TOKEN, fresh, issue};

const QUESTION: &str = "Which database should I use?";
const ANSWER: &str = "postgres, please";
/// A person's token on the stand-in (user `alice`).
const ALICE: &str = "ghp_alice";

/// An agent that keeps each prompt (`prompt-N.md` beside the repository) and asks
/// [`QUESTION`] unless its prompt carries [`ANSWER`]; then it checks every box.
fn asking_agent(env: &TestEnv) -> String {
    let ralph = env!("CARGO_BIN_EXE_ralph");
    let kept = env.dir().display().to_string();
    let file = env.dir().join("asking.sh");
    std::fs::write(
        &file,
        format!(
            "prompt=$(cat)\n\
             printf '%s' \"$prompt\" > '{kept}/prompt-'$RALPH_ITERATION.md\n\
             if printf '%s' \"$prompt\" | grep -q '{ANSWER}'; then\n\
               sed -i 's/- \\[ \\]/- [x]/g' \"$RALPH_TASK_FILE\"; echo db > db.txt\n\
             else\n\
               '{ralph}' ask '{QUESTION}'\n\
             fi\n"
        ),
    )
    .unwrap();
    format!("sh '{}'", file.display())
}

/// The stand-in with issue #1, whose users are `ralph-bot` (the queue's token) and `alice`;
/// `comments` already on the issue.
fn api_with(env: &TestEnv, comments: Value) -> Api {
    Api::start_with(
        env,
        json!([issue(
            1,
            "Schema",
            &["ralph"],
            json!({ "comments": comments })
        )]),
        30,
        json!({ "tokens": { TOKEN: "ralph-bot", ALICE: "alice" } }),
    )
}

/// `ralph run --from github:o/r` with the asking agent, in the background; replies looked for
/// every 100 ms.
fn spawn_queue(env: &TestEnv, api: &Api, extra: &[&str]) -> Background {
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--from", "github:o/r", "--agent-cmd"])
        .arg(asking_agent(env))
        .args(["--yes", "--grace", "1s"])
        .args(extra)
        .env("GITHUB_API_URL", api.url())
        .env("GITHUB_TOKEN", TOKEN)
        .env("RALPH_GITHUB_ANSWER_POLL", "100ms");
    env.spawn(cmd)
}

/// Wait until issue #1 holds the question's comment; the comments then.
fn wait_for_question(api: &Api, bg: &mut Background) -> Vec<String> {
    let mut comments = Vec::new();
    let asked = wait_until(Duration::from_secs(90), || {
        comments = api.comments(1);
        comments.iter().any(|c| c.contains(QUESTION)) || bg.child.try_wait().unwrap().is_some()
    });
    assert!(
        asked && comments.iter().any(|c| c.contains(QUESTION)),
        "the question never reached the issue: {comments:#?}\n{}\n{}",
        std::fs::read_to_string(&bg.out).unwrap_or_default(),
        std::fs::read_to_string(&bg.err).unwrap_or_default()
    );
    comments
}

/// The requests that looked for a reply on issue #1 (`since=` on its comments).
fn looks(api: &Api) -> Vec<usize> {
    api.requests()
        .iter()
        .enumerate()
        .filter(|(_, r)| r.starts_with("GET /repos/o/r/issues/1/comments?since="))
        .map(|(i, _)| i)
        .collect()
}

fn prompt(env: &TestEnv, n: u32) -> String {
    std::fs::read_to_string(env.dir().join(format!("prompt-{n}.md"))).unwrap_or_default()
}

fn question_comments(api: &Api) -> Vec<(String, String)> {
    api.comments(1)
        .into_iter()
        .zip(api.comment_authors(1))
        .filter(|(body, _)| body.contains(QUESTION))
        .collect()
}

/// The question reaches the issue exactly once, whatever the looks; alice's reply sends the
/// loop on with her words in its next prompt (not in the one before), and the item completes
/// and closes.
#[test]
fn a_reply_on_the_issue_answers_the_question_and_the_item_completes() {
    let env = fresh();
    let api = api_with(&env, json!([]));
    let mut bg = spawn_queue(&env, &api, &[]);
    wait_for_question(&api, &mut bg);
    // Several looks for a reply come and go; the question is still said once.
    assert!(
        wait_until(Duration::from_secs(30), || looks(&api).len() >= 3),
        "ralph never looked for a reply: {:#?}",
        api.requests()
    );
    let asked = question_comments(&api);
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0].1, "ralph-bot");
    assert_eq!(
        asked[0].0,
        format!(
            "**ralph** (loop `github-1`, iteration 1) asks:\n\n> {QUESTION}\n\nReply to this issue to answer; the loop waits."
        )
    );
    let (status, _) = api.as_user(
        ALICE,
        "POST",
        "/repos/o/r/issues/1/comments",
        Some(json!({ "body": format!("  {ANSWER}\n") })),
    );
    assert_eq!(status, 201);
    let (code, out, err) = bg.wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!prompt(&env, 1).contains(ANSWER), "{}", prompt(&env, 1));
    assert!(
        prompt(&env, 2).contains(&format!("A person answered your question: {ANSWER}")),
        "{}",
        prompt(&env, 2)
    );
    let i = api.issue(1);
    assert_eq!(
        (i["state"].as_str(), i["state_reason"].as_str()),
        (Some("closed"), Some("completed"))
    );
    assert_eq!(question_comments(&api).len(), 1, "asked once only");
    assert!(
        env.read("db.txt").contains("db"),
        "the answered work was merged"
    );
}

/// Control: a comment by someone else older than the question, and a reply by the token's own
/// user after it, answer nothing — the loop waits until `--answer-timeout`, ends waiting for a
/// person, the item is released, and the queue ends as that halt (exit 12).
#[test]
fn the_tokens_own_reply_and_an_older_comment_never_answer() {
    let env = fresh();
    let old = json!([{
        "id": 1, "user": { "login": "alice" }, "body": ANSWER,
        "created_at": "2020-01-01T00:00:00Z", "updated_at": "2020-01-01T00:00:00Z",
    }]);
    let api = api_with(&env, old);
    let mut bg = spawn_queue(&env, &api, &["--answer-timeout", "4s"]);
    wait_for_question(&api, &mut bg);
    let before = api.requests().len();
    let (status, _) = api.as_user(
        TOKEN,
        "POST",
        "/repos/o/r/issues/1/comments",
        Some(json!({ "body": ANSWER })),
    );
    assert_eq!(status, 201);
    // The reply's place among the requests (ralph posts nothing while it waits).
    let replied = (api.requests().iter().enumerate().skip(before))
        .find(|(_, r)| *r == "POST /repos/o/r/issues/1/comments")
        .expect("the reply is logged")
        .0;
    let (code, out, err) = bg.wait(Duration::from_secs(120));
    assert_eq!(code, Some(12), "{out}\n{err}");
    // ralph looked after the reply was there, and did not take it.
    assert!(
        looks(&api).iter().any(|&at| at > replied),
        "no look after the reply: {:#?}",
        api.requests()
    );
    assert!(
        prompt(&env, 2).is_empty(),
        "a second iteration ran: {}",
        prompt(&env, 2)
    );
    let i = api.issue(1);
    assert_eq!(i["state"], "open");
    assert_eq!(i["assignees"], json!([]));
    let labels: Vec<&str> = i["labels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(labels, ["ralph"], "released: {i:#}");
    let last = api.comments(1).pop().unwrap_or_default();
    assert!(
        last.starts_with("ralph: released — halted: waiting_for_person (exit 12)"),
        "{last}"
    );
    assert!(!Path::new(&env.repo.join("db.txt")).exists());
}

/// `ralph answer github-1` in the main work tree answers the item's loop too (it wins, coming
/// first): no reply on the issue is needed, the item completes and closes.
#[test]
fn ralph_answer_in_the_main_tree_answers_a_queue_items_question() {
    let env = fresh();
    let api = api_with(&env, json!([]));
    let mut bg = spawn_queue(&env, &api, &[]);
    wait_for_question(&api, &mut bg);
    let answered = env.ralph(&["answer", "github-1", ANSWER]);
    assert_exit(&answered, 0);
    let (code, out, err) = bg.wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(prompt(&env, 2).contains(&format!("A person answered your question: {ANSWER}")));
    assert_eq!(api.issue(1)["state"], "closed");
    let authors = api.comment_authors(1);
    assert!(authors.iter().all(|a| a == "ralph-bot"), "{authors:?}");
    assert_eq!(question_comments(&api).len(), 1);
}

/// The issue refusing the question's comment is one warning, never the end of the run: the
/// loop waits on, and `ralph answer` answers it.
#[test]
fn a_question_the_issue_refuses_is_a_warning_and_the_loop_still_waits() {
    let env = fresh();
    let api = api_with(&env, json!([]));
    api.add_fault(json!({
        "route": "POST /repos/o/r/issues/1/comments", "status": 422, "times": 1,
        "body": { "message": "Validation Failed" },
    }));
    let mut bg = spawn_queue(&env, &api, &[]);
    let mut err = String::new();
    let warned = wait_until(Duration::from_secs(90), || {
        err = std::fs::read_to_string(&bg.err).unwrap_or_default();
        err.contains("the question is not shown on issue o/r#1")
            || bg.child.try_wait().unwrap().is_some()
    });
    assert!(warned, "{err}");
    assert!(err.contains("HTTP 422: Validation Failed"), "{err}");
    assert!(
        err.contains("answer it with `ralph answer github-1`"),
        "{err}"
    );
    assert_exit(&env.ralph(&["answer", "github-1", ANSWER]), 0);
    let (code, out, err) = bg.wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(question_comments(&api).is_empty());
    assert_eq!(api.issue(1)["state"], "closed");
}

/// A poll interval that is no duration, or too short, is refused before anything is claimed.
#[test]
fn a_bad_answer_poll_is_refused_before_any_claim() {
    let env = fresh();
    let api = api_with(&env, json!([]));
    for (bad, says) in [("soon", "is not a duration"), ("1ms", "is too short")] {
        let out = env.ralph_with_limit(
            &[
                "run",
                "--from",
                "github:o/r",
                "--agent-cmd",
                "true",
                "--yes",
            ],
            &[
                ("GITHUB_API_URL", &api.url()),
                ("GITHUB_TOKEN", TOKEN),
                ("RALPH_GITHUB_ANSWER_POLL", bad),
            ],
            Duration::from_secs(60),
        );
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("RALPH_GITHUB_ANSWER_POLL: `{bad}` {says}")),
            "{err}"
        );
    }
    assert!(api.requests().is_empty(), "{:#?}", api.requests());
    assert_eq!(api.issue(1)["assignees"], json!([]));
}
