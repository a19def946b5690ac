//! Transient faults of GitHub's API (SPEC §15) against the stand-in's own fault injection
//! (`testing/github_standin.rs`, `faults`): a 5xx, a connection reset, a 429 are tried again
//! and the run completes; a fault that lasts past the retry budget (`RALPH_TRACKER_RETRY`) is
//! exit 1 naming the request, its status and its tries; a rate limit resetting beyond
//! `--max-wait` is exit 10; a 4xx is never tried again. Each first shows the fault breaks a run
//! that does not retry.

use serde_json::{Value, json};

use crate::common::*;
use crate::queue_github::{Api, TOKEN, fresh, issue, with_origin};

/// `ralph run --from github:o/r` (or `--from github` with `origin`) against the stand-in, the
/// fake agent completing at once; `vars` added to ralph's environment.
fn run(
    env: &TestEnv,
    api: &Api,
    from: &str,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> std::process::Output {
    let agent = format!("'{}'", fake_agent().display());
    let mut args = vec![
        "run",
        "--from",
        from,
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ];
    args.extend_from_slice(extra);
    let url = api.url();
    let mut all = vec![
        ("FAKE_AGENT_SCRIPT", "check-unless:no such text"),
        ("GITHUB_API_URL", url.as_str()),
        ("GITHUB_TOKEN", TOKEN),
    ];
    all.extend_from_slice(vars);
    env.ralph_with_limit(&args, &all, std::time::Duration::from_secs(120))
}

/// Issue #1 ("Schema", labelled `ralph`) with `faults` in the stand-in's state.
fn schema_with(env: &TestEnv, faults: Value) -> Api {
    Api::start_with(
        env,
        json!([issue(1, "Schema", &["ralph"], json!({}))]),
        100,
        json!({ "faults": faults }),
    )
}

/// The statuses the stand-in answered `route` (`METHOD /path`) with, in order (0: a reset).
fn answered(api: &Api, route: &str) -> Vec<u64> {
    api.calls()
        .iter()
        .filter(|c| {
            format!("{} {}", str(&c["method"]), str(&c["target"]))
                .split('?')
                .next()
                == Some(route)
        })
        .map(|c| c["status"].as_u64().unwrap())
        .collect()
}

fn str(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn claimed(i: &Value) -> bool {
    i["assignees"].as_array().is_some_and(|a| !a.is_empty())
        || i["labels"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == "ralph:in-progress"))
}

const CLOSE: &str = "PATCH /repos/o/r/issues/1";
const LISTING: &str = "GET /repos/o/r/issues";

fn close_and_listing_faults() -> Value {
    json!([
        { "route": CLOSE, "status": 502, "times": 2 },
        { "route": LISTING, "status": 503, "times": 1 },
    ])
}

#[test]
fn a_close_and_a_listing_failing_for_a_moment_are_tried_again_and_the_run_completes() {
    // Control: not tried again, the first fault ends the run.
    let env = fresh();
    let api = schema_with(&env, close_and_listing_faults());
    let out = run(
        &env,
        &api,
        "github:o/r",
        &[],
        &[("RALPH_TRACKER_RETRY", "0s")],
    );
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("HTTP 503"), "{}", stderr(&out));
    // Control: the close alone failing once is what issue 28 saw — the work merged, the issue
    // left open.
    let env = fresh();
    let api = schema_with(&env, json!([{ "route": CLOSE, "status": 502, "times": 1 }]));
    let out = run(
        &env,
        &api,
        "github:o/r",
        &[],
        &[("RALPH_TRACKER_RETRY", "0s")],
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("PATCH") && err.contains("/repos/o/r/issues/1: HTTP 502"),
        "{err}"
    );
    assert!(env.repo.join("work/github-1-1.txt").exists());
    assert_eq!(api.issue(1)["state"], "open");

    // Tried again (the default budget): both faults passed, the run completes.
    let env = fresh();
    let api = schema_with(&env, close_and_listing_faults());
    let out = run(&env, &api, "github:o/r", &[], &[]);
    assert_exit(&out, 0);
    let i = api.issue(1);
    assert_eq!(i["state"], "closed", "{}", stderr(&out));
    assert_eq!(i["state_reason"], "completed");
    assert_eq!(i["labels"], json!(["ralph"]));
    assert_eq!(answered(&api, CLOSE), [502, 502, 200]);
    assert_eq!(answered(&api, LISTING)[..2], [503, 200]);
    // One warning per request tried again, not one per try.
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("trying again")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings.iter().any(|w| w.contains("PATCH")
            && w.contains("/repos/o/r/issues/1: HTTP 502; trying again in ")),
        "{err}"
    );
    assert!(warnings.iter().any(|w| w.contains("HTTP 503")), "{err}");
}

#[test]
fn a_close_that_keeps_failing_ends_the_run_with_exit_1_naming_its_tries() {
    let env = fresh();
    let api = schema_with(&env, json!([{ "route": CLOSE, "status": 502 }]));
    let out = run(
        &env,
        &api,
        "github:o/r",
        &[],
        &[("RALPH_TRACKER_RETRY", "2s")],
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    let tries = answered(&api, CLOSE).len();
    assert!(tries >= 2, "never tried again: {tries}\n{err}");
    assert!(
        err.contains("/repos/o/r/issues/1: HTTP 502")
            && err.contains(&format!("({tries} tries in ")),
        "{err}"
    );
    // Not closed; its work is on origin's main, and its lease says so.
    let i = api.issue(1);
    assert_eq!(i["state"], "open");
    let on_main = git_output_in(
        &env,
        &env.home.join("origin.git"),
        &["cat-file", "-e", "main:work/github-1-1.txt"],
    );
    assert!(on_main.status.success(), "the work is not on origin's main");
    // The next run closes it without running its agent again.
    api.clear_faults();
    std::fs::remove_dir_all(&env.log).unwrap();
    let out = run(&env, &api, "github:o/r", &[], &[]);
    assert_exit(&out, 0);
    assert!(!env.agent_ran(1), "the agent ran again:\n{}", stdout(&out));
    let i = api.issue(1);
    assert_eq!(i["state"], "closed", "{i}");
    assert!(!i.to_string().contains("ralph:in-progress"), "{i}");
    let said = api.comments(1);
    let complete: Vec<&String> = said
        .iter()
        .filter(|c| c.starts_with("ralph: complete at "))
        .collect();
    assert_eq!(
        complete.len(),
        1,
        "said once, though the first run said it before failing: {said:#?}"
    );
}

#[test]
fn a_connection_reset_is_tried_again() {
    let reset = || json!([{ "route": "GET /user", "reset": true, "times": 1 }]);
    // Control: the reset reaches ralph as an error.
    let env = fresh();
    let api = schema_with(&env, reset());
    let out = run(
        &env,
        &api,
        "github:o/r",
        &[],
        &[("RALPH_TRACKER_RETRY", "0s")],
    );
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("/user"), "{}", stderr(&out));
    assert!(!env.agent_ran(1));

    let env = fresh();
    let api = schema_with(&env, reset());
    let out = run(&env, &api, "github:o/r", &[], &[]);
    assert_exit(&out, 0);
    assert_eq!(answered(&api, "GET /user"), [0, 200]);
    assert_eq!(api.issue(1)["state"], "closed");
}

#[test]
fn a_429_is_waited_out_for_its_retry_after() {
    let env = fresh();
    let claim = "POST /repos/o/r/issues/1/assignees";
    let api = schema_with(
        &env,
        json!([{ "route": claim, "status": 429, "headers": { "retry-after": "1" }, "times": 1 }]),
    );
    let out = run(
        &env,
        &api,
        "github:o/r",
        &[],
        &[("RALPH_TRACKER_RETRY", "0s")],
    );
    // A rate limit is waited out whatever the retry budget: the waiting budget bounds it.
    assert_exit(&out, 0);
    assert_eq!(answered(&api, claim), [429, 201]);
    let err = stderr(&out);
    assert!(
        err.contains("HTTP 429 (rate limited); trying again in 1.0 s"),
        "{err}"
    );
    assert_eq!(api.issue(1)["state"], "closed");
}

#[test]
fn a_rate_limit_resetting_beyond_max_wait_ends_the_queue_with_exit_10() {
    let reset = chrono::Utc::now().timestamp() + 7200;
    let limited = |remaining: &str| {
        json!([{ "route": LISTING, "status": 403, "times": 1,
            "body": { "message": "API rate limit exceeded for user ID 1." },
            "headers": { "x-ratelimit-remaining": remaining, "x-ratelimit-reset": reset.to_string() } }])
    };
    // Control: a 403 with requests remaining is a refusal — exit 1, never tried again.
    let env = fresh();
    let api = schema_with(&env, limited("12"));
    let out = run(&env, &api, "github:o/r", &["--max-wait", "1m"], &[]);
    assert_exit(&out, 1);
    assert_eq!(answered(&api, LISTING), [403]);

    let env = fresh();
    let api = schema_with(&env, limited("0"));
    let out = run(&env, &api, "github:o/r", &["--max-wait", "1m"], &[]);
    assert_exit(&out, 10);
    let err = stderr(&out);
    let at = chrono::DateTime::from_timestamp(reset, 0)
        .unwrap()
        .format("%Y-%m-%d %H:%M")
        .to_string();
    assert!(
        err.contains("HTTP 403 (rate limited): the rate limit resets at ")
            && err.contains(&at)
            && err.contains("--max-wait 1m"),
        "{err}"
    );
    assert_eq!(answered(&api, LISTING), [403]);
    assert!(!env.agent_ran(1));
    assert!(!claimed(&api.issue(1)));
}

#[test]
fn a_404_or_a_422_is_never_tried_again() {
    let claim = "POST /repos/o/r/issues/1/assignees";
    // Control: a 502 there is tried again (the route is counted right).
    let env = fresh();
    let api = schema_with(&env, json!([{ "route": claim, "status": 502, "times": 1 }]));
    let out = run(&env, &api, "github:o/r", &[], &[]);
    assert_exit(&out, 0);
    assert_eq!(answered(&api, claim), [502, 201]);

    let env = fresh();
    let api = schema_with(&env, json!([{ "route": claim, "status": 404 }]));
    let out = run(&env, &api, "github:o/r", &[], &[]);
    assert_exit(&out, 1);
    assert_eq!(answered(&api, claim), [404]);
    assert!(stderr(&out).contains("HTTP 404"), "{}", stderr(&out));
    assert!(!claimed(&api.issue(1)));

    let env = fresh();
    let api = schema_with(
        &env,
        json!([{ "route": CLOSE, "status": 422, "body": { "message": "Validation Failed" } }]),
    );
    let out = run(&env, &api, "github:o/r", &[], &[]);
    assert_exit(&out, 1);
    assert_eq!(answered(&api, CLOSE), [422]);
    assert!(
        stderr(&out).contains("HTTP 422: Validation Failed"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_pull_request_opened_whose_answer_was_lost_is_found_not_opened_again() {
    let env = TestEnv::new();
    let _bare = with_origin(&env);
    let opened = "POST /repos/o/r/pulls";
    let api = schema_with(
        &env,
        json!([{ "route": opened, "reset": true, "apply": true, "times": 1 }]),
    );
    let out = run(&env, &api, "github", &["--pr"], &[]);
    assert_exit(&out, 0);
    // Control: the first POST opened it and its answer was lost; the try again was refused.
    assert_eq!(answered(&api, opened), [0, 422]);
    let pulls = api.doc()["pulls"].as_array().cloned().unwrap_or_default();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert_eq!(pulls[0]["head"], "ralph/github-1");
    let i = api.issue(1);
    assert_eq!(i["labels"], json!(["ralph", "ralph:pr-open"]));
    assert!(
        stderr(&out).contains("https://github.com/o/r/pull/100"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_issue_deleted_during_the_run_is_gone_from_the_standing_not_an_error() {
    let env = fresh();
    let api = Api::start(
        &env,
        json!([
            issue(1, "Schema", &["ralph"], json!({})),
            issue(2, "Old", &["ralph"], json!({ "state": "closed" })),
        ]),
        100,
    );
    // A person deletes #2 (only the web can) while #1's agent works.
    let script = agent_sh(
        &env,
        "delete-two",
        "curl -s -o /dev/null -X POST -d '{\"deleted\":true}' \"$GITHUB_API_URL/_standin/issues/2\"",
    );
    let agent = format!("'{}'", fake_agent().display());
    let url = api.url();
    let out = env.ralph_with_limit(
        &[
            "run",
            "--from",
            "github:o/r",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
        ],
        &[
            (
                "FAKE_AGENT_SCRIPT",
                &format!("{script}+check-unless:no such text"),
            ),
            ("GITHUB_API_URL", &url),
            ("GITHUB_TOKEN", TOKEN),
        ],
        std::time::Duration::from_secs(120),
    );
    // Control: #2 is gone, and ralph asked for it after.
    assert_eq!(
        api.as_user(TOKEN, "GET", "/repos/o/r/issues/2", None).0,
        410
    );
    assert!(answered(&api, "GET /repos/o/r/issues/2").contains(&410));
    assert_exit(&out, 0);
    assert_eq!(api.issue(1)["state"], "closed", "{}", stderr(&out));
    assert!(env.repo.join("work/github-1-1.txt").exists());
}

/// The stand-in itself, as the tests above and the lead's use it: each token its own user,
/// comments by id, `state_reason`, a deleted issue, pull requests — GitHub's shapes and codes.
#[test]
fn the_standin_answers_as_github_does() {
    let env = fresh();
    let api = Api::start_with(
        &env,
        json!([issue(1, "Schema", &["ralph"], json!({}))]),
        2,
        json!({ "tokens": { "ghp_alice": "alice" } }),
    );
    let (status, me) = api.as_user("ghp_alice", "GET", "/user", None);
    assert_eq!((status, str(&me["login"])), (200, "alice"));
    assert_eq!(api.as_user("nope", "GET", "/user", None).0, 401);
    let c = "/repos/o/r/issues/1/comments";
    for (token, body) in [(TOKEN, "one"), ("ghp_alice", "two"), (TOKEN, "three")] {
        let (status, made) = api.as_user(token, "POST", c, Some(json!({ "body": body })));
        assert_eq!((status, str(&made["body"])), (201, body));
    }
    assert_eq!(api.comments(1), ["one", "two", "three"]);
    assert_eq!(api.comment_authors(1), ["ralph-bot", "alice", "ralph-bot"]);
    // Paged like the issues (two a page), each comment with its id.
    let (_, page) = api.as_user(TOKEN, "GET", c, None);
    let ids: Vec<u64> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    let (_, since) = api.as_user(
        TOKEN,
        "GET",
        &format!("{c}?since=2999-01-01T00:00:00Z"),
        None,
    );
    assert_eq!(since, json!([]));
    let one = format!("/repos/o/r/issues/comments/{}", ids[0]);
    let (status, edited) = api.as_user(TOKEN, "PATCH", &one, Some(json!({ "body": "uno" })));
    assert_eq!((status, str(&edited["body"])), (200, "uno"));
    assert_eq!(api.as_user(TOKEN, "DELETE", &one, None), (204, Value::Null));
    assert_eq!(api.as_user(TOKEN, "DELETE", &one, None).0, 404);
    assert_eq!(api.comments(1), ["two", "three"]);
    // state_reason kept on close, `reopened` on reopen.
    let i = "/repos/o/r/issues/1";
    let closed = json!({ "state": "closed", "state_reason": "not_planned" });
    assert_eq!(
        api.as_user("ghp_alice", "PATCH", i, Some(closed)).1["state_reason"],
        "not_planned"
    );
    let (_, open) = api.as_user(TOKEN, "PATCH", i, Some(json!({ "state": "open" })));
    assert_eq!(
        (str(&open["state"]), str(&open["state_reason"])),
        ("open", "reopened")
    );
    // Pull requests: one open per head and base; listed by head; closed.
    let pr = json!({ "title": "T", "head": "ralph/github-1", "base": "main", "body": "b" });
    assert_eq!(
        api.as_user(TOKEN, "POST", "/repos/o/r/pulls", Some(pr.clone()))
            .0,
        201
    );
    let (status, again) = api.as_user(TOKEN, "POST", "/repos/o/r/pulls", Some(pr.clone()));
    assert_eq!(status, 422);
    assert_eq!(
        again["errors"][0]["message"],
        "A pull request already exists for o:ralph/github-1."
    );
    let list = "/repos/o/r/pulls?head=o:ralph/github-1&state=open";
    let (_, found) = api.as_user(TOKEN, "GET", list, None);
    assert_eq!(found[0]["html_url"], "https://github.com/o/r/pull/100");
    assert_eq!(found[0]["head"]["ref"], "ralph/github-1");
    let close = json!({ "state": "closed" });
    assert_eq!(
        api.as_user(TOKEN, "PATCH", "/repos/o/r/pulls/100", Some(close))
            .0,
        200
    );
    assert_eq!(api.as_user(TOKEN, "GET", list, None).1, json!([]));
    assert_eq!(
        api.as_user(TOKEN, "POST", "/repos/o/r/pulls", Some(pr)).0,
        201
    );
    // A deleted issue: 410, and in no list.
    api.set_issue(1, json!({ "deleted": true }));
    let (status, gone) = api.as_user(TOKEN, "GET", i, None);
    assert_eq!(
        (status, str(&gone["message"])),
        (410, "This issue was deleted")
    );
    assert_eq!(
        api.as_user(TOKEN, "GET", "/repos/o/r/issues?state=all", None)
            .1,
        json!([])
    );
    // A fault added while it serves: answered once, then gone.
    api.add_fault(json!({ "route": "GET /user", "status": 503, "times": 1 }));
    assert_eq!(api.as_user(TOKEN, "GET", "/user", None).0, 503);
    assert_eq!(api.as_user(TOKEN, "GET", "/user", None).0, 200);
    // Each request logged with its user; the control requests are not.
    let users: Vec<Value> = api.calls().iter().map(|c| c["user"].clone()).collect();
    assert!(users.contains(&json!("alice")) && users.contains(&json!("ralph-bot")));
    assert!(users.contains(&Value::Null), "the refused token");
    assert!(!api.requests().iter().any(|r| r.contains("_standin")));
}
