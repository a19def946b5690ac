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
    // Idle: three iterations alike stall (4), fewer reach --max-iterations (3).
    let idle_code = if iterations >= 3 { 4 } else { 3 };
    assert_exit(&out, if working { 0 } else { idle_code });
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

/// A steady iteration in which only ralph's bookkeeping changed (the third of an idle run,
/// which then stalls) stages nothing and writes no index (issue 32): its status (which leaves
/// the index alone, `--no-optional-locks`, once the run's first two settled it) and the
/// fingerprint's only read it, and ralph's own status block stays in the work tree, to ride
/// along with the next commit. Control: the second idle iteration still writes once — the
/// status after the run's first one, which answered "everything", settles what git marked
/// unknown to the monitor (`Repo::status`) — and an iteration with work writes (the steady
/// test above).
#[test]
fn an_iteration_that_changed_only_ralphs_bookkeeping_writes_no_index() {
    let second = between(1, 2, false);
    assert_eq!(second.writes, 1, "the control settles once: {second:?}");
    let one = between(2, 3, false);
    assert!(one.reads >= 1 && one.hooks >= 1, "{one:?}");
    assert!(one.reads <= 3, "index reads in an idle iteration: {one:?}");
    assert_eq!(one.writes, 0, "index writes in an idle iteration: {one:?}");
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

/// Attack on the bookkeeping-only shortcut: an agent whose only change is a file of its own in
/// `.ralph/` — which git lists as one untracked `.ralph/` while the directory was never
/// committed — or a line of its own in `.ralph/progress.md` beside ralph's status block. Promise:
/// each is the agent's work and is committed in that iteration, as `git add -A` would. Control:
/// an idle iteration in the same setting commits nothing.
#[test]
fn an_agents_own_file_under_ralphs_directory_is_never_taken_for_bookkeeping() {
    for (name, body) in [
        ("idle", ":"),
        ("notes", "echo mine > .ralph/notes.md"),
        (
            "memory",
            "echo '- learned: run make first' >> .ralph/progress.md",
        ),
    ] {
        let env = TestEnv::new();
        env.write_task(&["only"], "");
        env.commit_all("initial");
        let work = agent_sh(&env, name, body);
        let out = env.run_fake(&work, &["--max-iterations", "1"]);
        assert_exit(&out, 3);
        let files = env.git(&["ls-files", ".ralph"]);
        match name {
            "idle" => assert_eq!(env.commits().len(), 1, "{:?}", env.commits()),
            "notes" => assert!(files.contains(".ralph/notes.md"), "{files}"),
            _ => assert!(
                env.git(&["show", "HEAD:.ralph/progress.md"])
                    .contains("learned: run make first"),
                "{:?}",
                env.commits()
            ),
        }
    }
}
