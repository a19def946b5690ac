//! The hostile pass on issue 28's leases (SPEC §15): an agent that pushes to origin itself, a
//! worker cut off from origin while its lease runs out, a worker whose lease another took over.
//! Each test shows first that the attack reaches what it aims at (a control), then that ralph
//! keeps its promise. Real `ralph` processes in clones of a bare origin (`workers::Team`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::common::*;
use crate::workers::{Team, issue};

/// Attack: the agent pushes its own work to origin (`git push origin HEAD:ralph/github-1`, as
/// agents asked to "commit and push" do; it has the clone's remote). Origin's item branch then
/// moves under the worker, though its lease is untouched. Promise: a branch that moved to a
/// commit the worker's own branch has is not another worker's takeover — the item's loop goes
/// on, its pull request opens, nothing is left claimed. (Before: the renewal's refused branch
/// was taken for a lost lease, the loop stopped and the item left labelled and held.)
#[test]
fn an_agent_pushing_its_own_branch_is_not_a_takeover() {
    let team = Team::new(json!([issue(1, &["first", "second"])]));
    let a = team.machine();
    let push = agent_sh(
        &a,
        "push",
        "git add -A && git commit -qm 'agent: my work' && git push -q origin \"HEAD:refs/heads/$(git branch --show-current)\"",
    );
    let (code, out, err) = team
        .start(&a, "w1", &format!("check+{push}+churn"), &["--pr"])
        .wait(Duration::from_secs(120));
    let log = team.origin_git(&["log", "--format=%s", "ralph/github-1"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("agent: my work"),
        "control: the agent's push reached origin: {log}\n{err}"
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!err.contains("took its lease over"), "{err}");
    assert_eq!(team.runs().len(), 2, "{:#?}", team.runs());
    assert_eq!(team.pulls().len(), 1, "{:#?}", team.pulls());
    let i = team.api.issue(1);
    assert_eq!(i["labels"], json!(["ralph", "ralph:pr-open"]), "{i}");
    assert!(team.lease("github-1").contains("Stage: pr-open"));
}

/// The same agent without `--pr`: the item's work is merged and published on origin's main,
/// its issue closed. Then an agent that pushes to its item's branch a commit the worker's
/// branch does not have: not a takeover either, but nothing the worker may publish over — the
/// item is released (exit 9) saying so, never left claimed.
#[test]
fn an_agent_pushing_to_its_branch_is_caught_up_with_or_refused() {
    let team = Team::new(json!([
        issue(1, &["first", "second"]),
        issue(2, &["third"])
    ]));
    let a = team.machine();
    let push = agent_sh(
        &a,
        "push",
        "git add -A && git commit -qm 'agent: my work' && git push -q origin \"HEAD:refs/heads/$(git branch --show-current)\"",
    );
    let (code, out, err) = team
        .start(
            &a,
            "w1",
            &format!("check+{push}+churn"),
            &["--max-tasks", "1"],
        )
        .wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.api.issue(1)["state"], "closed");
    let on_main = team.origin_git(&["log", "--format=%s", "main"]);
    assert!(
        String::from_utf8_lossy(&on_main.stdout).contains("agent: my work"),
        "item 1's work is not on origin's main"
    );
    // A commit beside the branch (its parent the branch's tip), pushed as the branch.
    let aside = agent_sh(
        &a,
        "aside",
        "b=\"$(git branch --show-current)\"; c=\"$(git commit-tree -p HEAD -m 'agent: aside' 'HEAD^{tree}')\"; git push -q origin \"$c:refs/heads/$b\"",
    );
    let (code, out, err) = team
        .start(&a, "w1", &format!("{aside}+check"), &[])
        .wait(Duration::from_secs(120));
    let log = team.origin_git(&["log", "--format=%s", "ralph/github-2"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("agent: aside"), "control: {log}\n{err}");
    assert_eq!(code, Some(9), "{out}\n{err}");
    assert!(!err.contains("took its lease over"), "{err}");
    let i = team.api.issue(2);
    assert_eq!(i["state"], "open", "{i}");
    assert_eq!(i["labels"], json!(["ralph"]), "{i}");
    assert_eq!(i["assignees"], json!([]), "{i}");
    let said = team.api.comments(2).join("\n");
    assert!(said.contains("not holding the item's lease"), "{said}");
    assert!(team.lease("github-2").contains("Stage: released"));
    let on_main = team.origin_git(&["cat-file", "-e", "main:work/github-2-1.txt"]);
    assert!(!on_main.status.success(), "published over the branch");
}

/// When item `name`'s lease on origin runs out, as its message says (`None`: not held).
fn until(team: &Team, name: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let lease = team.lease(name);
    let at = lease.lines().find_map(|l| l.strip_prefix("Until: "))?;
    chrono::DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// Worker `w1` on `a` with a lease of `lease`, its agent waiting for the scenario's word (the
/// file `go`) before it does the work: the worker, its agent's pid, and `go`.
fn waiting_worker(team: &Team, a: &TestEnv, lease: &str) -> (Background, i32, PathBuf) {
    let go = a.dir().join("go");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let w1 = team.start(
        a,
        "w1",
        &format!("{}+check", agent_sh(a, "wait", &wait)),
        &["--pr", "--lease", lease],
    );
    assert!(
        wait_until(Duration::from_secs(60), || !a.agent_pids(1).is_empty()),
        "w1's agent never started"
    );
    let agent = a.agent_pids(1)[0];
    (w1, agent, go)
}

/// The partition: origin's URL leads nowhere from `a`'s clone.
fn cut_off(team: &Team, a: &TestEnv) {
    let key = format!("url.{}.insteadOf", team.origin.display());
    a.git(&["config", "--unset", &key]);
    a.git(&[
        "config",
        &format!("url.{}.insteadOf", a.dir().join("nowhere.git").display()),
        "https://github.com/o/r.git",
    ]);
}

/// Attack: origin goes out of a worker's reach while its agent works (a network partition:
/// here its clone's URL is pointed nowhere), so its lease runs out, and a second worker takes
/// the item over. Promise: two workers never work one item at once — the cut-off worker stops
/// its loop before its lease runs out — and it undoes nothing of the new holder's (no release
/// of the item the other worker claimed). Before: its agent went on working beside the second
/// worker's.
#[test]
fn a_worker_cut_off_from_origin_stops_before_its_lease_runs_out() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, b) = (team.machine(), team.machine());
    let (w1, agent, go) = waiting_worker(&team, &a, "3s");
    cut_off(&team, &a);
    // The worker that takes over waits for the same word.
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    // The scenario's own wait: w1's last renewal runs out.
    assert!(
        wait_until(Duration::from_secs(20), || until(&team, "github-1")
            .is_some_and(|u| u < chrono::Utc::now())),
        "{}",
        team.lease("github-1")
    );
    let w2 = team.start(
        &b,
        "w2",
        &format!("{}+check", agent_sh(&b, "wait", &wait)),
        &["--pr", "--lease", "3s"],
    );
    assert!(
        wait_until(Duration::from_secs(60), || !b.agent_pids(1).is_empty()),
        "control: w2 never took the item over"
    );
    assert!(
        team.lease("github-1").contains("Worker: w2"),
        "{}",
        team.lease("github-1")
    );
    let both = pid_alive(agent);
    std::fs::write(&go, "").unwrap();
    let (code1, out1, err1) = w1.wait(Duration::from_secs(60));
    let (code2, out2, err2) = w2.wait(Duration::from_secs(60));
    assert!(
        !both,
        "w1's agent still worked the item when w2's started:\n{out1}\n{err1}"
    );
    assert_eq!(code1, Some(9), "{out1}\n{err1}");
    assert_eq!(code2, Some(0), "{out2}\n{err2}");
    assert!(!err2.contains("put back"), "{err2}");
    assert_eq!(team.pulls().len(), 1, "{:#?}", team.pulls());
    let runs = team.runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let i = team.api.issue(1);
    assert_eq!(i["labels"], json!(["ralph", "ralph:pr-open"]), "{i}");
    assert!(team.lease("github-1").contains("Stage: pr-open"));
}

/// docs/queues.md: "`git log refs/ralph/leases/github-N` on origin is the item's history across
/// workers". Promise: each lease commit has the one it replaced as its parent, so the log shows
/// who took the item, each renewal, and how it ended — across a takeover too. (Before, each
/// lease was a commit of its own: the log showed only the last.)
#[test]
fn an_items_lease_log_is_its_history_across_workers() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, b) = (team.machine(), team.machine());
    // w1 halts (one idle iteration): the item released; w2 takes it and opens its pull request.
    let (code, out, err) = team
        .start(&a, "w1", "idle", &["--pr", "--max-iterations", "1"])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(9), "{out}\n{err}");
    let (code, out, err) = team
        .start(&b, "w2", "check", &["--pr"])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(team.lease("github-1").contains("Stage: pr-open"), "control");
    let log = team.origin_git(&[
        "log",
        "--format=%(trailers:key=Worker,valueonly,separator=)/%(trailers:key=Stage,valueonly,separator=)",
        "refs/ralph/leases/github-1",
    ]);
    let log = String::from_utf8_lossy(&log.stdout);
    let steps: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(steps.first(), Some(&"w2/pr-open"), "{log}");
    assert_eq!(steps.last(), Some(&"w1/working"), "{log}");
    assert!(steps.contains(&"w1/released"), "{log}");
    assert!(steps.contains(&"w2/working"), "{log}");
}

/// Attack: with `--parallel 2`, one item's agent keeps writing the ref a look at origin fetches
/// another item's branch into (`refs/remotes/origin/ralph/github-1`), pointing it to a commit
/// of its own — the item's criterion checked and a file planted — while that item is taken
/// over from the branch a worker before left on origin. Promise: the item starts from the
/// commit origin has, never from what the ref says when its worktree is made: its own agent
/// works it, and nothing planted reaches origin's main.
#[test]
fn another_agent_cannot_plant_the_branch_an_item_is_taken_over_from() {
    let team = Team::new(json!([
        issue(1, &["victim"]),
        issue(2, &["planter"]),
        issue(3, &["quick"])
    ]));
    let (a, b, evil) = (team.machine(), team.machine(), team.machine());
    // A worker before left item 1 on origin (one idle iteration: released).
    let (code, out, err) = team
        .start(
            &b,
            "w0",
            "idle",
            &["--max-tasks", "1", "--max-iterations", "1"],
        )
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(9), "{out}\n{err}");
    // The planted commit: on top of that branch, the criterion checked, a file added.
    evil.git(&["fetch", "-q", "origin", "ralph/github-1"]);
    evil.git(&["checkout", "-q", "-b", "evil", "FETCH_HEAD"]);
    let task = evil.read(".ralph/tasks/github-1.md");
    assert!(task.contains("- [ ] victim"), "{task}");
    evil.write(
        ".ralph/tasks/github-1.md",
        &task.replace("- [ ] victim", "- [x] victim"),
    );
    evil.write("PLANTED.md", "planted\n");
    evil.commit_all("planted");
    evil.git(&[
        "push",
        "-q",
        &a.repo.display().to_string(),
        "evil:refs/evil/x",
    ]);
    // Item 1 waits for item 3, so it is taken while item 2's agent runs.
    team.api.set_issue(1, json!({ "blocked_by": [3] }));
    let plant = agent_sh(
        &a,
        "plant",
        "case \"$RALPH_TASK_FILE\" in *github-2.md) \
           while ! git rev-parse -q --verify refs/heads/ralph/github-1 >/dev/null; do \
             git update-ref refs/remotes/origin/ralph/github-1 refs/evil/x 2>/dev/null || true; \
           done;; \
         esac",
    );
    let (code, out, err) = team
        .start(
            &a,
            "w1",
            &format!("{plant}+check-unless:no such text"),
            &["--parallel", "2"],
        )
        .wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let runs = team.runs();
    assert!(
        runs.iter().any(|(w, t)| w == "w1" && t == "github-1.md"),
        "item 1 was closed without its agent: {runs:#?}"
    );
    let planted = team.origin_git(&["cat-file", "-e", "main:PLANTED.md"]);
    assert!(!planted.status.success(), "the planted file reached main");
    assert_eq!(team.api.issue(1)["state"], "closed");
}

/// libfaketime's preload library (Debian's `libfaketime`); `None` when it is missing (said on a
/// developer's machine, a failure in CI).
fn faketime() -> Option<String> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists());
    if found.is_none() {
        skip_or_fail("libfaketime is not installed (Debian's `libfaketime`)");
    }
    found.map(|p| p.display().to_string())
}

/// Attack: the workers' clocks disagree (machines without time sync): w1's an hour behind,
/// w2's an hour ahead. Promise: a lease held is held for every worker — w2 does not take the
/// item w1 works on, though by its own clock w1's lease ran out long ago. (Before, each worker
/// wrote and read `Until` by its own clock, and w2 took the item over at once.)
#[test]
fn workers_whose_clocks_disagree_by_hours_never_share_an_item() {
    let Some(lib) = faketime() else {
        return;
    };
    let skewed = |offset: &'static str| {
        [
            ("LD_PRELOAD", lib.clone()),
            ("FAKETIME", offset.to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ]
    };
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, b) = (team.machine(), team.machine());
    let go = a.dir().join("go");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let behind = skewed("-1h");
    let vars: Vec<(&str, &str)> = behind.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let w1 = team.start_with(
        &a,
        "w1",
        &format!("{}+check", agent_sh(&a, "wait", &wait)),
        &["--pr"],
        &vars,
    );
    assert!(
        wait_until(Duration::from_secs(60), || !a.agent_pids(1).is_empty()),
        "w1's agent never started"
    );
    // Control: w1's clock is an hour behind, as the date of its lease's commit says.
    let date = team.origin_git(&["log", "-1", "--format=%ct", "refs/ralph/leases/github-1"]);
    let date: i64 = String::from_utf8_lossy(&date.stdout)
        .trim()
        .parse()
        .unwrap();
    let now = chrono::Utc::now().timestamp();
    assert!(
        date < now - 1800,
        "w1's clock is not behind: {date} vs {now}"
    );
    let ahead = skewed("+1h");
    let vars: Vec<(&str, &str)> = ahead.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, out, err) = team
        .start_with(&b, "w2", "check", &["--pr"], &vars)
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("nothing is ready"),
        "w2 took the item w1 holds:\n{out}\n{err}\n{}",
        team.lease("github-1")
    );
    std::fs::write(&go, "").unwrap();
    let (code, out, err) = w1.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.pulls().len(), 1, "{:#?}", team.pulls());
    let runs = team.runs();
    assert!(runs.iter().all(|(w, _)| w == "w1"), "{runs:#?}");
}

/// Attack: two trackers' queues publish to one origin (`--from github:o/tracker` in a clone of
/// o/r, beside `--from github:o/r`), and both have an issue #1: the same lease
/// (`refs/ralph/leases/github-1`) and branch names. The first queue's close of its #1 fails
/// after its work was published (its lease says `merged`). Promise: the other queue's #1 is
/// not closed "complete" at the first one's commit, nor worked on its branch — a lease of
/// another tracker's item is not this queue's to finish or take. (Before, the second queue
/// closed its #1 at once, without running its agent.)
#[test]
fn a_lease_of_another_trackers_item_is_not_this_queues() {
    let team = Team::new(json!([issue(1, &["ours"])]));
    let elsewhere = TestEnv::new();
    let tracker = crate::queue_github::Api::start(&elsewhere, json!([issue(1, &["theirs"])]), 100);
    tracker.add_fault(json!({ "route": "PATCH /repos/o/tracker/issues/1", "status": 502 }));
    let (a, b) = (team.machine(), team.machine());
    let mut cmd = a.ralph_cmd();
    cmd.args([
        "run",
        "--from",
        "github:o/tracker",
        "--yes",
        "--worker-id",
        "w0",
    ])
    .args(["--agent-cmd", &format!("'{}'", fake_agent().display())])
    .env("FAKE_AGENT_SCRIPT", "check")
    .env("GITHUB_API_URL", tracker.url())
    .env("GITHUB_TOKEN", crate::queue_github::TOKEN)
    .env("RALPH_TRACKER_RETRY", "0s");
    let out = run_with_limit(cmd, Duration::from_secs(60));
    assert_exit(&out, 1);
    assert!(
        team.lease("github-1").contains("Stage: merged"),
        "control: o/tracker's #1 published, its close left: {}",
        team.lease("github-1")
    );
    let (code, out, err) = team
        .start(&b, "w1", "check", &[])
        .wait(Duration::from_secs(60));
    let said = team.api.comments(1).join("\n");
    assert!(
        !said.contains("complete at") || team.runs().iter().any(|(w, _)| w == "w1"),
        "o/r's #1 closed at o/tracker's commit, never worked: {said}\n{out}\n{err}"
    );
    assert!(
        !team.runs().iter().any(|(w, _)| w == "w1"),
        "o/r's #1 worked on o/tracker's branch: {out}\n{err}"
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(err.contains("o/tracker"), "{err}");
    assert_eq!(team.api.issue(1)["state"], "open");
}

/// Two workers of `--parallel 3` each, without `--pr`, on six issues: six loops at once, each
/// worker's merges and publishes one at a time while the other's move origin's main. Every
/// issue worked once and closed at a commit origin's main has; no worker puts back the other's
/// change. (Held: a guard for the leases' compare-and-swap under parallel loops.)
#[test]
fn two_workers_of_parallel_three_work_each_issue_once() {
    let team = Team::new(json!(
        (1..=6)
            .map(|n| issue(n, &[&format!("item {n}")]))
            .collect::<Vec<_>>()
    ));
    let (a, b) = (team.machine(), team.machine());
    let check = "check-unless:no such text";
    let workers = [
        team.start(&a, "w1", check, &["--parallel", "3"]),
        team.start(&b, "w2", check, &["--parallel", "3"]),
    ];
    for (i, w) in workers.into_iter().enumerate() {
        let (code, out, err) = w.wait(Duration::from_secs(240));
        assert_eq!(code, Some(0), "worker {i}:\n{out}\n{err}");
        assert!(!err.contains("put back"), "worker {i}:\n{err}");
    }
    let runs = team.runs();
    assert_eq!(runs.len(), 6, "{runs:#?}");
    for n in 1..=6 {
        let file = format!("github-{n}.md");
        assert_eq!(
            runs.iter().filter(|(_, t)| *t == file).count(),
            1,
            "#{n}: {runs:#?}"
        );
        let i = team.api.issue(n);
        assert_eq!(i["state"], "closed", "#{n}: {i}");
        let on_main = team.origin_git(&["cat-file", "-e", &format!("main:work/github-{n}-1.txt")]);
        assert!(
            on_main.status.success(),
            "#{n}'s work is not on origin's main"
        );
    }
}

/// Attack: SIGTERM (a pod deleted) while the worker closes an item whose work it published,
/// and the tracker answers 502 again and again (its retries would last two minutes). Promise:
/// the worker stops within 15 s with exit 130, the lease left `merged`, and the next worker
/// closes the item without running its agent again. (Before, the stop waited out the retry
/// budget and ended with exit 1.)
#[test]
fn sigterm_while_a_close_is_retried_stops_within_its_time() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, b) = (team.machine(), team.machine());
    team.api
        .add_fault(json!({ "route": "PATCH /repos/o/r/issues/1", "status": 502 }));
    let w1 = team.start(&a, "w1", "check", &[]);
    assert!(
        wait_until(Duration::from_secs(60), || team
            .api
            .requests()
            .iter()
            .any(|r| r.starts_with("PATCH /repos/o/r/issues/1"))),
        "control: the close was never tried"
    );
    w1.signal(libc::SIGTERM);
    let stopped = std::time::Instant::now();
    let (code, out, err) = w1.wait(Duration::from_secs(180));
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}:\n{out}\n{err}"
    );
    assert_eq!(code, Some(130), "{out}\n{err}");
    assert!(
        team.lease("github-1").contains("Stage: merged"),
        "{}",
        team.lease("github-1")
    );
    team.api.clear_faults();
    let (code, out, err) = team
        .start(&b, "w2", "check", &[])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.api.issue(1)["state"], "closed");
    assert_eq!(team.runs().len(), 1, "{:#?}", team.runs());
}

/// Attack: a person forces an item's lease ref on origin by hand to a commit that is no lease
/// (here: main's). Promise: the worker says so, naming the ref and how to free the item, and
/// takes nothing blindly; once the ref is deleted, the item is taken. (Before, the item was
/// skipped in every run as "claimed by someone else", for ever.)
#[test]
fn a_lease_ref_forced_by_hand_is_named_never_blindly_taken() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let a = team.machine();
    let forced = team.origin_git(&["update-ref", "refs/ralph/leases/github-1", "main"]);
    assert!(forced.status.success());
    let (code, out, err) = team
        .start(&a, "w1", "check", &[])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        err.contains("refs/ralph/leases/github-1") && err.contains("no lease"),
        "{out}\n{err}"
    );
    assert!(team.runs().is_empty(), "{:#?}", team.runs());
    assert_eq!(team.api.issue(1)["state"], "open");
    let deleted = team.origin_git(&["update-ref", "-d", "refs/ralph/leases/github-1"]);
    assert!(deleted.status.success());
    let (code, out, err) = team
        .start(&a, "w1", "check", &[])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.api.issue(1)["state"], "closed");
}

/// Attack: origin's main moves at every try of a worker's publish (a busy repository: here a
/// person's machine pushes to main in a tight loop while the worker runs). Promise: a base
/// that kept moving is the item's halt — released, its work kept on its branch, exit 9 — never
/// exit 1, which tells an engine that retrying will not help (the Job fails for good).
#[test]
fn a_base_that_moves_at_every_try_is_the_items_halt_not_an_error() {
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, person) = (team.machine(), team.machine());
    let mut w1 = team.start(&a, "w1", "check", &[]);
    let mut pushes = 0;
    for n in 0..2000 {
        if w1.child.try_wait().unwrap().is_some() {
            break;
        }
        person.write("PERSON.md", &format!("{n}\n"));
        person.commit_all(&format!("a person, {n}"));
        let pushed = git_output_in(
            &person,
            &person.repo,
            &["push", "-q", "origin", "HEAD:main"],
        );
        if pushed.status.success() {
            pushes += 1;
        } else {
            person.git(&["pull", "-q", "--no-rebase", "origin", "main"]);
        }
    }
    let (code, out, err) = w1.wait(Duration::from_secs(120));
    assert!(pushes > 3, "control: the person pushed {pushes} times");
    assert_ne!(code, Some(1), "{out}\n{err}");
    if err.contains("moved on each of") || out.contains("moved on each of") {
        assert_eq!(code, Some(9), "{out}\n{err}");
        let i = team.api.issue(1);
        assert_eq!(i["labels"], json!(["ralph"]), "{i}");
        assert!(team.lease("github-1").contains("Stage: released"));
        // The next worker merges the work left on the branch, without its agent.
        let (code, out, err) = team
            .start(&person, "w2", "check", &[])
            .wait(Duration::from_secs(60));
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert_eq!(team.api.issue(1)["state"], "closed");
        assert_eq!(team.runs().len(), 1, "{:#?}", team.runs());
        let on_main = team.origin_git(&["cat-file", "-e", "main:work/iter-1.txt"]);
        assert!(
            on_main.status.success(),
            "item 1's work is not on origin's main"
        );
    } else {
        eprintln!("the worker won a race with the person this time: {out}");
    }
}

/// Attack: a worker's item completes but its publish fails (origin's hook refuses main for a
/// while), so the item is released with its finished work on its branch. Promise: the next
/// worker finishes it — its task file complete on the branch, the loop ends at once, and that
/// work is merged, published and the issue closed, without running the agent again. (Before,
/// the merge refused a loop that "never ran": the item was released by every worker, for ever.)
#[test]
fn a_completed_branch_left_unpublished_is_finished_by_the_next_worker() {
    use std::os::unix::fs::PermissionsExt;
    let team = Team::new(json!([issue(1, &["one"])]));
    let (a, b) = (team.machine(), team.machine());
    let hook = team.origin.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do [ \"$ref\" = refs/heads/main ] && { echo 'main is frozen' >&2; exit 1; }; done\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, err) = team
        .start(&a, "w1", "check", &[])
        .wait(Duration::from_secs(60));
    assert_eq!(
        code,
        Some(1),
        "control: the publish was refused\n{out}\n{err}"
    );
    assert!(err.contains("pre-receive hook declined"), "{err}");
    let task = team.origin_git(&["show", "ralph/github-1:.ralph/tasks/github-1.md"]);
    assert!(
        String::from_utf8_lossy(&task.stdout).contains("- [x] one"),
        "control: the finished work is on the branch"
    );
    std::fs::remove_file(&hook).unwrap();
    let (code, out, err) = team
        .start(&b, "w2", "check", &[])
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(team.api.issue(1)["state"], "closed");
    assert_eq!(team.runs().len(), 1, "{:#?}", team.runs());
    let on_main = team.origin_git(&["cat-file", "-e", "main:work/iter-1.txt"]);
    assert!(
        on_main.status.success(),
        "item 1's work is not on origin's main"
    );
}

/// Attack: an agent pushes, with the clone's remote, another item's branch to origin — on top
/// of where a worker before left it, the criterion checked and a file planted — so that the
/// worker that takes that item next starts from it, finds it complete, and merges it. Promise:
/// an item goes on from its branch only as its lease's holder left it (the lease names that
/// commit); a branch pushed outside the lease is said and not started from. (Before, the item
/// was merged and closed with the planted file, its agent never run.)
#[test]
fn a_branch_pushed_outside_its_lease_is_not_started_from() {
    let team = Team::new(json!([issue(1, &["planter"]), issue(2, &["victim"])]));
    let (a, b, evil) = (team.machine(), team.machine(), team.machine());
    // A worker before left item 2 released on origin (item 1 waits for it meanwhile).
    team.api.set_issue(1, json!({ "blocked_by": [2] }));
    let (code, out, err) = team
        .start(
            &b,
            "w0",
            "idle",
            &["--max-tasks", "1", "--max-iterations", "1"],
        )
        .wait(Duration::from_secs(60));
    assert_eq!(code, Some(9), "{out}\n{err}");
    team.api.set_issue(1, json!({ "blocked_by": [] }));
    evil.git(&["fetch", "-q", "origin", "ralph/github-2"]);
    evil.git(&["checkout", "-q", "-b", "evil", "FETCH_HEAD"]);
    let task = evil.read(".ralph/tasks/github-2.md");
    assert!(task.contains("- [ ] victim"), "{task}");
    evil.write(
        ".ralph/tasks/github-2.md",
        &task.replace("- [ ] victim", "- [x] victim"),
    );
    evil.write("PLANTED.md", "planted\n");
    evil.commit_all("planted");
    evil.git(&[
        "push",
        "-q",
        &a.repo.display().to_string(),
        "evil:refs/evil/x",
    ]);
    // Item 1's agent pushes it as item 2's branch.
    let plant = agent_sh(
        &a,
        "plant",
        "case \"$RALPH_TASK_FILE\" in *github-1.md) git push -q origin refs/evil/x:refs/heads/ralph/github-2;; esac",
    );
    let (code, out, err) = team
        .start(&a, "w1", &format!("{plant}+check-unless:no such text"), &[])
        .wait(Duration::from_secs(120));
    let log = team.origin_git(&["log", "--format=%s", "main"]);
    assert!(
        err.contains("pushed outside the lease")
            || String::from_utf8_lossy(&log.stdout).contains("planted"),
        "control: the planted branch was never met\n{out}\n{err}"
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    let planted = team.origin_git(&["cat-file", "-e", "main:PLANTED.md"]);
    assert!(
        !planted.status.success(),
        "the planted file reached main\n{out}\n{err}"
    );
    let runs = team.runs();
    assert!(
        runs.iter().any(|(w, t)| w == "w1" && t == "github-2.md"),
        "item 2 was closed without its agent: {runs:#?}"
    );
    assert_eq!(team.api.issue(2)["state"], "closed");
}

/// Attack: origin is slow to take an item's branch the first time (its hook takes 2.5 s over a
/// new `ralph/*` branch), and then out of the worker's reach. Promise: the worker's loop stops
/// before the lease origin has runs out — the lease is counted from when it was written, not
/// from when the slow push came back. (Before, the loop ran on for the push's time past the
/// lease, when another worker may already hold the item.)
#[test]
fn a_lease_is_counted_from_when_it_was_written() {
    use std::os::unix::fs::PermissionsExt;
    let team = Team::new(json!([issue(1, &["one"])]));
    let a = team.machine();
    let hook = team.origin.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do case \"$ref\" in refs/heads/ralph/*) [ \"$old\" = 0000000000000000000000000000000000000000 ] && sleep 2.5;; esac; done\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (w1, agent, go) = waiting_worker(&team, &a, "6s");
    cut_off(&team, &a);
    let lease = team.lease("github-1");
    assert!(
        lease.contains("Branch: "),
        "control: the slow push went in: {lease}"
    );
    assert!(
        wait_until(Duration::from_secs(20), || until(&team, "github-1")
            .is_some_and(|u| u < chrono::Utc::now())),
        "{}",
        team.lease("github-1")
    );
    let alive = pid_alive(agent);
    std::fs::write(&go, "").unwrap();
    let (code, out, err) = w1.wait(Duration::from_secs(60));
    assert!(
        !alive,
        "w1's agent still worked the item when its lease ran out:\n{out}\n{err}"
    );
    assert_eq!(code, Some(9), "{out}\n{err}");
}
