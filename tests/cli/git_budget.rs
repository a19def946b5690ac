//! What a steady iteration costs in git, counted (issue 22, SPEC §12): every git command that
//! reads the index reads all of it, every write writes all of it, and every run of ralph's
//! file-system monitor's hook is a barrier and a process. Counted from git's own trace2 events
//! (`GIT_TRACE2_EVENT`, which ralph's git commands inherit) over two runs of the same loop, two
//! and four iterations long: the difference is what two steady iterations cost, start-up and the
//! final check cancelling out. Counts, not times: the budget holds on any machine.

use crate::common::*;

/// What git's trace2 event log at `path` shows: whole-index reads, whole-index writes and
/// runs of ralph's monitor hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spent {
    reads: usize,
    writes: usize,
    hooks: usize,
}

fn spent(path: &std::path::Path) -> Spent {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let mut s = Spent {
        reads: 0,
        writes: 0,
        hooks: 0,
    };
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("trace2 events are JSON");
        // Regions are logged as they are entered and left: each counted once, as it is left.
        match (v["event"].as_str(), v["label"].as_str()) {
            (Some("region_leave"), Some("do_read_index")) => s.reads += 1,
            (Some("region_leave"), Some("do_write_index")) => s.writes += 1,
            (Some("child_start"), _) if v["argv"].to_string().contains("__fsmonitor") => {
                s.hooks += 1
            }
            _ => {}
        }
    }
    s
}

/// What the iterations after the `short` first ones of a `long` run spent: that run less one
/// of `short` iterations.
fn between(short: usize, long: usize, working: bool) -> Spent {
    let (short, long) = (run_spending(short, working), run_spending(long, working));
    Spent {
        reads: long.reads - short.reads,
        writes: long.writes - short.writes,
        hooks: long.hooks - short.hooks,
    }
}

/// One run of `iterations` iterations, each of which changes a tracked file and adds a file
/// in a new directory (a new directory is listed apart, `git ls-files --others`) — or, when
/// not `working`, changes nothing — in a repository of its own; what its git spent.
fn run_spending(iterations: usize, working: bool) -> Spent {
    let env = TestEnv::new();
    let criteria: Vec<String> = (1..=iterations).map(|i| format!("step {i}")).collect();
    let criteria: Vec<&str> = criteria.iter().map(String::as_str).collect();
    env.write_task(&criteria, "");
    for d in 0..20 {
        env.write(&format!("src/m{d}/lib.rs"), "pub fn a() {}\n");
    }
    env.commit_all("initial");
    let work = agent_sh(
        &env,
        "work",
        "mkdir -p new$RALPH_ITERATION && echo n > new$RALPH_ITERATION/n.rs\n\
         echo \"// $RALPH_ITERATION\" >> src/m$RALPH_ITERATION/lib.rs",
    );
    let step = if working {
        format!("check+{work}")
    } else {
        "idle".to_string()
    };
    let steps = vec![step; iterations].join(",");
    let trace = env.home.join("trace2.json");
    let max = iterations.to_string();
    let out = env.run_fake_with(
        &steps,
        &["--max-iterations", &max],
        &[("GIT_TRACE2_EVENT", trace.to_str().unwrap())],
    );
    assert_exit(&out, if working { 0 } else { 3 });
    assert_eq!(env.iter_records().len(), iterations);
    let left = env.git(&["status", "--porcelain"]);
    if working {
        assert_eq!(left, "", "all committed");
    } else {
        // ralph's bookkeeping rides along with the next commit, never alone.
        assert!(left.lines().all(|l| l.contains(".ralph/")), "{left}");
    }
    spent(&trace)
}

/// Two steady iterations, each with a change in a tracked file and a new directory, cost at most
/// 10 whole-index reads, 2 writes (the staging) and 6 runs of the monitor's hook: per iteration
/// the status that names the changes and the update-index that stages them run with the
/// monitor, as does the status of the fingerprint; the new directory's listing and the
/// diff-index of the staged tree read only the index (the monitor cannot change their output).
/// Before, each of those two ran the hook as well: 10 runs for two iterations.
#[test]
fn a_steady_iteration_reads_the_index_five_times_and_runs_the_hook_three() {
    let two = between(2, 4, true);
    // The log is git's own: every iteration reads the index and runs the hook.
    assert!(two.reads >= 2 && two.hooks >= 2, "{two:?}");
    assert!(two.reads <= 10, "index reads in two iterations: {two:?}");
    assert!(two.writes <= 2, "index writes in two iterations: {two:?}");
    assert!(
        two.hooks <= 6,
        "monitor hook runs in two iterations: {two:?}"
    );
}

/// An iteration in which the agent changed nothing (the second of an idle run: three alike
/// would stall) still spends: the status (which here also writes back the refresh the first
/// iteration left unsettled), the update-index of ralph's own status block (it rides along with
/// the next commit, so it is staged, never committed alone), the diff-index of the staged tree
/// and the fingerprint's status — four reads, two writes, three hook runs; never more than an
/// iteration with work. Issue 22's "none when nothing changed" is not reached: the status block
/// changes every iteration.
#[test]
fn an_iteration_that_changed_nothing_spends_no_more_than_one_with_work() {
    let one = between(1, 2, false);
    assert!(one.reads >= 1 && one.hooks >= 1, "{one:?}");
    assert!(one.reads <= 4, "index reads in an idle iteration: {one:?}");
    assert!(
        one.writes <= 2,
        "index writes in an idle iteration: {one:?}"
    );
    assert!(
        one.hooks <= 3,
        "monitor hook runs in an idle iteration: {one:?}"
    );
}

/// Attack: an agent that adds 40 new directories in one iteration. Promise: ralph lists what
/// they hold in one `git ls-files --others`, one read of the index, not one per directory —
/// what git reads grows with the repository, and the agent decides how many directories there
/// are. Control: the same run with one new directory reads the index as often.
#[test]
fn many_new_directories_are_listed_in_one_read_of_the_index() {
    let run = |dirs: usize| {
        let env = TestEnv::new();
        env.write_task(&["only"], "");
        env.commit_all("initial");
        let work = agent_sh(
            &env,
            "work",
            &format!("for i in $(seq {dirs}); do mkdir d$i && echo x > d$i/f; done"),
        );
        let trace = env.home.join("trace2.json");
        let out = env.run_fake_with(
            &format!("check+{work}"),
            &[],
            &[("GIT_TRACE2_EVENT", trace.to_str().unwrap())],
        );
        assert_exit(&out, 0);
        assert_eq!(env.git(&["status", "--porcelain"]), "", "all committed");
        let files = env.git(&["ls-files"]);
        assert_eq!(files.lines().filter(|l| l.starts_with('d')).count(), dirs);
        spent(&trace)
    };
    let (one, forty) = (run(1), run(40));
    assert_eq!(forty.reads, one.reads, "one: {one:?}, forty: {forty:?}");
}
