//! The hostile pass on a queue of many workers (issue 28): each failure it found left an item
//! in a state no later run repaired; each test here failed before ralph repaired it. Real
//! `ralph` processes against the GitHub stand-in and a bare `origin` (`workers::Team`).

use std::time::Duration;

use serde_json::json;

use crate::common::*;
use crate::queue_github::TOKEN;
use crate::workers::{Team, issue};

const CHECK: &str = "check-unless:no such text";

/// `ralph run --from github:o/r EXTRA` on `env`, waited for.
fn run(
    team: &Team,
    env: &TestEnv,
    script: &str,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--from", "github:o/r", "--yes", "--grace", "1s"])
        .args(["--agent-cmd", &format!("'{}'", fake_agent().display())])
        .args(extra)
        .env("FAKE_AGENT_SCRIPT", script)
        .env("GITHUB_API_URL", team.api.url())
        .env("GITHUB_TOKEN", TOKEN);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = run_with_limit(cmd, Duration::from_secs(120));
    (out.status.code(), stdout(&out), stderr(&out))
}

/// Attack: the agent moves the main work tree's HEAD to a branch of its own. Promise: the pull
/// request goes to the branch the queue started from, and so does the merge without `--pr`.
#[test]
fn the_agent_moving_the_main_trees_head_changes_no_items_base() {
    let team = Team::new(json!([issue(1, &["one"]), issue(2, &["two"])]));
    let a = team.machine();
    let hijack = agent_sh(
        &a,
        "hijack",
        "main=\"$(git rev-parse --path-format=absolute --git-common-dir)/..\"; git -C \"$main\" checkout -q -B hijack",
    );
    let (code, out, err) = run(
        &team,
        &a,
        &format!("{hijack}+{CHECK}"),
        &["--pr", "--max-tasks", "1"],
        &[],
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(
        a.git(&["branch", "--show-current"]).trim(),
        "hijack",
        "control: the agent moved HEAD"
    );
    let pulls = team.pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(pulls[0]["base"], "main", "{:#?}", pulls[0]);
    // Without --pr: item 2 merges into main (on origin too), not into the agent's branch.
    a.git(&["checkout", "-q", "main"]);
    let (code, out, err) = run(&team, &a, &format!("{hijack}+{CHECK}"), &[], &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let on_main = team.origin_git(&["cat-file", "-e", "main:work/github-2-1.txt"]);
    assert!(
        on_main.status.success(),
        "item 2's work is not on origin's main\n{out}\n{err}"
    );
    let on_hijack = a.git(&["log", "--format=%s", "hijack"]);
    assert!(
        !on_hijack.contains("github-2"),
        "merged into the agent's branch: {on_hijack}"
    );
}

/// Attack: a person closes the item as not planned while its loop runs. Promise: that stands —
/// the item is neither merged nor closed as completed, and no ledger reopens it.
#[test]
fn a_persons_not_planned_stands() {
    // A second user of the repository, with a token of their own.
    let alice = "ghp_alice";
    let team = Team::new_with(
        json!([issue(1, &["one"])]),
        json!({ "tokens": { TOKEN: "ralph-bot", alice: "alice" } }),
    );
    let a = team.machine();
    let decide = agent_sh(
        &a,
        "not-planned",
        &format!(
            "curl -s -o /dev/null -X PATCH -H 'Authorization: Bearer {alice}' -d '{{\"state\":\"closed\",\"state_reason\":\"not_planned\"}}' '{}/repos/o/r/issues/1'",
            team.api.url()
        ),
    );
    let (code, out, err) = run(&team, &a, &format!("{decide}+{CHECK}"), &[], &[]);
    assert_eq!(code, Some(9), "{out}\n{err}");
    let i = team.api.issue(1);
    assert_eq!(i["state"], "closed", "{i}");
    assert_eq!(i["state_reason"], "not_planned", "{i}");
    let said = team.api.comments(1).join("\n");
    assert!(!said.contains("complete at"), "{said}");
    assert!(said.contains("not planned"), "{said}");
    assert!(!err.contains("put back"), "{err}");
    let merged = team.origin_git(&["cat-file", "-e", "main:work/github-1-1.txt"]);
    assert!(
        !merged.status.success(),
        "merged though a person decided against it"
    );
}

/// Attack: the tracker fails (502) while an item is released. Promise: the item is not held
/// for ever — its lease is released on origin whatever the tracker said, and the next run
/// takes it (before, its `ralph:in-progress` label made every later run skip it).
#[test]
fn a_release_the_tracker_failed_leaves_the_item_for_the_next_run() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let a = team.machine();
    let unlabel = "DELETE /repos/o/r/issues/1/labels/ralph%3Ain-progress";
    team.api
        .add_fault(json!({ "route": unlabel, "status": 502 }));
    let (code, out, err) = run(
        &team,
        &a,
        "idle",
        &["--max-iterations", "1"],
        &[("RALPH_TRACKER_RETRY", "0s")],
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    let i = team.api.issue(1);
    assert!(
        i["labels"].to_string().contains("ralph:in-progress"),
        "control: the release failed: {i}"
    );
    assert!(
        team.lease("github-1").contains("Stage: released"),
        "{}",
        team.lease("github-1")
    );
    team.api.clear_faults();
    let (code, out, err) = run(&team, &a, CHECK, &[], &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.api.issue(1)["state"], "closed");
}

/// A worker finishes an item's loop but cannot publish it (origin refuses its push of main):
/// the item is released, its finished branch on origin. The next worker goes on from that
/// branch — already complete by its checks, so no agent runs — merges, publishes and closes it.
#[test]
fn a_finished_branch_left_unpublished_is_published_by_the_next_worker() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, b) = (team.machine(), team.machine());
    let hook = team.origin.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do [ \"$ref\" = refs/heads/main ] && { echo 'main is frozen'; exit 1; }; done\nexit 0\n",
    )
    .unwrap();
    let mut perms = std::fs::metadata(&hook).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&hook, perms).unwrap();
    let (code, out, err) = run(&team, &a, CHECK, &[], &[]);
    assert_ne!(code, Some(0), "control: origin refused main\n{out}\n{err}");
    assert!(err.contains("pre-receive hook declined"), "{out}\n{err}");
    let local = a.git(&["log", "--format=%s", "main"]);
    assert!(
        !local.contains("github-1"),
        "the local main kept what origin refused: {local}"
    );
    let task = team.origin_git(&["show", "ralph/github-1:.ralph/tasks/github-1.md"]);
    assert!(
        String::from_utf8_lossy(&task.stdout).contains("- [x] one"),
        "the finished branch is on origin"
    );
    assert_eq!(team.api.issue(1)["state"], "open");
    std::fs::remove_file(&hook).unwrap();
    std::fs::remove_dir_all(&b.log).ok();
    let (code, out, err) = run(&team, &b, CHECK, &[], &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        !b.agent_ran(1),
        "the agent ran again on a finished branch:\n{out}"
    );
    assert_eq!(team.api.issue(1)["state"], "closed");
    let on_main = team.origin_git(&["cat-file", "-e", "main:work/github-1-1.txt"]);
    assert!(on_main.status.success(), "not published:\n{out}\n{err}");
}

/// A token written into `remote.origin.url` (as CI checkouts do) is never printed: the error
/// naming the URL shows `***` in its place.
#[test]
fn a_token_in_the_remotes_url_is_never_printed() {
    let env = TestEnv::new();
    env.write("README.md", "x\n");
    env.commit_all("initial");
    let secret = "ghs_SeCrEt0123456789";
    env.git(&[
        "remote",
        "add",
        "origin",
        &format!("https://x-access-token:{secret}@example.com/o/r.git"),
    ]);
    let out = env.ralph_with_limit(
        &["run", "--from", "github", "--yes", "--agent-cmd", "true"],
        &[("GITHUB_TOKEN", TOKEN)],
        Duration::from_secs(30),
    );
    assert_exit(&out, 1);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains("remote.origin.url"),
        "control: the URL is named: {said}"
    );
    assert!(!said.contains(secret), "the token was printed: {said}");
    assert!(said.contains("https://***@example.com/o/r.git"), "{said}");
}
