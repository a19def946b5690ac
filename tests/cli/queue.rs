//! Work from a queue (SPEC §14) with the real beads CLI (`br`, beads_rust): items taken in
//! dependency order, each in its own worktree, merged and closed on ralph's own exit 0; a
//! stalled item released with a note; a tracker that answers garbage → exit 1, nothing claimed.

use std::path::{Path, PathBuf};

use crate::common::*;

/// `br`: on PATH, else where `scripts/install-beads.sh` puts it.
fn br() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("br"))
            .find(|p| p.is_file())
    });
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")));
    let cached = [
        cache.map(|c| c.join("ralph/br-0.7.6/bin/br")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/br/bin/br")),
    ];
    let found = on_path.or_else(|| cached.into_iter().flatten().find(|p| p.is_file()));
    if found.is_none() {
        skip_or_fail("beads_rust's `br` is not installed; run `bash scripts/install-beads.sh`");
    }
    found
}

/// A repository with a beads workspace, and `br` run in it.
pub(crate) struct Beads {
    pub(crate) env: TestEnv,
    pub(crate) br: PathBuf,
}

impl Beads {
    pub(crate) fn new() -> Option<Beads> {
        let br = br()?;
        let env = TestEnv::new();
        env.write("README.md", "queue\n");
        let b = Beads { env, br };
        b.ok(&["init"]);
        b.env.commit_all("initial");
        Some(b)
    }

    pub(crate) fn run(&self, args: &[&str]) -> std::process::Output {
        self.env
            .command(&self.br.display().to_string())
            .args(args)
            .current_dir(&self.env.repo)
            .output()
            .expect("br runs")
    }

    #[track_caller]
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "br {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A new item; its id.
    pub(crate) fn create(&self, title: &str, criteria: &str, priority: u32) -> String {
        self.create_with(title, &format!("{title}, please."), criteria, priority)
    }

    /// A new item with this description; its id.
    pub(crate) fn create_with(
        &self,
        title: &str,
        description: &str,
        criteria: &str,
        priority: u32,
    ) -> String {
        let out = self.ok(&[
            "create",
            "--title",
            title,
            "--description",
            description,
            "--acceptance-criteria",
            criteria,
            "--priority",
            &priority.to_string(),
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("create --json");
        let v = if v.is_array() { v[0].clone() } else { v };
        v["id"].as_str().expect("an id").to_string()
    }

    pub(crate) fn show(&self, id: &str) -> serde_json::Value {
        let v: serde_json::Value =
            serde_json::from_str(&self.ok(&["show", id, "--json"])).expect("show --json");
        if v.is_array() { v[0].clone() } else { v }
    }

    pub(crate) fn status(&self, id: &str) -> String {
        self.show(id)["status"].as_str().unwrap_or("?").to_string()
    }

    /// `ralph run --from beads` with the fake agent following `script`.
    pub(crate) fn run_queue(&self, script: &str, extra: &[&str]) -> std::process::Output {
        self.run_queue_with(script, &self.br.display().to_string(), extra)
    }

    /// The same, with `cmd` as the beads CLI (a wrapper that fails on purpose).
    pub(crate) fn run_queue_with(
        &self,
        script: &str,
        cmd: &str,
        extra: &[&str],
    ) -> std::process::Output {
        let agent = format!("'{}'", fake_agent().display());
        let mut args = vec![
            "run",
            "--from",
            "beads",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
        ];
        args.extend_from_slice(extra);
        self.env.ralph_with_limit(
            &args,
            &[("FAKE_AGENT_SCRIPT", script), ("RALPH_BEADS_CMD", cmd)],
            std::time::Duration::from_secs(120),
        )
    }
}

/// The subjects of the base branch's commits, oldest first.
fn history(env: &TestEnv) -> Vec<String> {
    let mut h = env.commits();
    h.reverse();
    h
}

fn position(h: &[String], wanted: &str) -> usize {
    h.iter()
        .position(|s| s == wanted)
        .unwrap_or_else(|| panic!("no commit `{wanted}` in {h:#?}"))
}

#[test]
fn items_run_in_dependency_order_and_are_closed_with_their_work_merged() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Schema", "- [ ] the table exists", 1);
    let bb = b.create("API", "- [ ] the endpoint answers", 1);
    let c = b.create("Docs", "- [ ] the page is written", 2);
    b.ok(&["dep", "add", &bb, &a]);
    b.env.commit_all("items");
    // Control: B is not ready before A is closed.
    let ready = b.ok(&["ready", "--json"]);
    assert!(!ready.contains(&format!("\"{bb}\"")), "{ready}");

    let out = b.run_queue("check-unless:no such text", &[]);
    assert_exit(&out, 0);
    for id in [&a, &bb, &c] {
        assert_eq!(b.status(id), "closed", "{id}: {}", stdout(&out));
    }
    let h = history(&b.env);
    // A's close comes before B's claim: B was taken only once A's work was merged.
    assert!(
        position(&h, &format!("ralph: beads closed {a}"))
            < position(&h, &format!("ralph: beads claimed {bb}")),
        "{h:#?}"
    );
    // The work of each item is on the base branch, with its task file as the record.
    for id in [&a, &bb, &c] {
        let name = format!("beads-{id}");
        assert!(
            b.env.repo.join(format!(".ralph/tasks/{name}.md")).exists(),
            "{name} not merged: {h:#?}"
        );
        assert!(b.env.repo.join(format!("work/{name}-1.txt")).exists());
        // No item's own commits touch the tracker's files.
        let touched = b.env.git(&[
            "log",
            "--format=%s",
            &format!("ralph/{name}"),
            "--not",
            &format!(":/ralph: beads claimed {id}"),
            "--",
            ".beads",
        ]);
        assert_eq!(touched.trim(), "", "{name}'s branch carries beads' files");
    }
    assert_eq!(b.env.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_stalled_item_is_released_with_a_note_while_the_others_complete() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Easy", "- [ ] easy done", 1);
    let hard = b.create("Hard", "- [ ] never done", 2);
    let c = b.create("Other", "- [ ] other done", 3);
    b.env.commit_all("items");
    let out = b.run_queue("check-unless:never done", &[]);
    assert_exit(&out, 9);
    assert_eq!(b.status(&a), "closed");
    assert_eq!(b.status(&c), "closed");
    assert_eq!(b.status(&hard), "open", "released, open again");
    let shown = b.show(&hard).to_string();
    assert!(shown.contains("ralph: released"), "no note: {shown}");
    assert!(
        shown.contains("stalled"),
        "the note names the halt: {shown}"
    );
    // Its branch is kept.
    let branches = b.env.git(&["branch", "--list", "ralph/*"]);
    assert!(
        branches.contains(&format!("ralph/beads-{hard}")),
        "{branches}"
    );
    let so = stdout(&out);
    assert!(so.contains(&format!("{hard} Hard: released")), "{so}");
    // `status --all` shows each item's loop: its id in the name, its title, state and branch.
    let all = stdout(&b.env.ralph(&["status", "--all"]));
    let row = all
        .lines()
        .position(|l| {
            l.starts_with(&format!(
                "beads-{hard}  [ralph/beads-{hard}]  halted: stalled"
            ))
        })
        .unwrap_or_else(|| panic!("no row for {hard}:\n{all}"));
    assert_eq!(all.lines().nth(row + 1), Some("    task: Hard"), "{all}");
    assert!(
        all.contains(&format!("beads-{a}  [ralph/beads-{a}]  merged at")),
        "{all}"
    );
}

#[test]
fn a_tracker_that_answers_garbage_is_an_error_and_nothing_stays_claimed() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Only", "- [ ] done", 1);
    b.env.commit_all("items");
    // A `br` whose `ready` prints what is not JSON.
    let wrapper = b.env.home.join("br-garbage");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = ready ]; then echo 'Error: <html>503</html>'; exit 0; fi\nexec '{}' \"$@\"\n",
            b.br.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let agent = format!("'{}'", fake_agent().display());
    let out = b.env.ralph_with_limit(
        &["run", "--from", "beads", "--agent-cmd", &agent, "--yes"],
        &[("RALPH_BEADS_CMD", &wrapper.display().to_string())],
        std::time::Duration::from_secs(60),
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("ready --json` did not print a JSON array"),
        "{err}"
    );
    assert_eq!(b.status(&a), "open");
    assert!(!b.env.agent_ran(1));
}

#[test]
fn nothing_ready_is_exit_zero_with_its_own_message() {
    let Some(b) = Beads::new() else { return };
    let out = b.run_queue("check", &[]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("beads: nothing is ready"),
        "{}",
        stdout(&out)
    );
    // `--json` says so too.
    let out = b.run_queue("check", &["--json"]);
    assert_exit(&out, 0);
    let end = events_named(&out, "queue_finished");
    assert_eq!(end.len(), 1, "{}", stdout(&out));
    assert_eq!(end[0]["nothing_ready"], true);
    assert_eq!(end[0]["taken"], 0);
}

#[test]
fn with_parallel_two_independent_items_overlap_and_a_dependent_one_waits_for_its_blocker() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Schema", "- [ ] the table exists", 1);
    let bb = b.create("API", "- [ ] the endpoint answers", 1);
    let c = b.create("Docs", "- [ ] the page is written", 2);
    b.ok(&["dep", "add", &bb, &a]);
    b.env.commit_all("items");
    // Each agent notes that it started, then waits (at most 20 s) until two have: run one at a
    // time, the first would wait in vain and say so.
    let marks = b.env.home.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let script = agent_sh(
        &b.env,
        "meet",
        &format!(
            "stem=$(basename \"$RALPH_TASK_FILE\" .md)\ntouch '{m}'/\"$stem\"\nn=0\nwhile [ $(ls '{m}' | wc -l) -lt 2 ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done\nmkdir -p work\nls '{m}' > \"work/$stem-met.txt\"",
            m = marks.display()
        ),
    );
    let out = b.run_queue(
        &format!("{script}+check-unless:no such text"),
        &["--parallel", "2"],
    );
    assert_exit(&out, 0);
    for id in [&a, &bb, &c] {
        assert_eq!(b.status(id), "closed", "{id}: {}", stdout(&out));
    }
    // A and C ran at once: each saw the other's mark when it went on.
    for id in [&a, &c] {
        let met = b.env.read(&format!("work/beads-{id}-met.txt"));
        assert!(
            met.contains(&format!("beads-{a}")) && met.contains(&format!("beads-{c}")),
            "{id} met only {met:?}"
        );
    }
    let h = history(&b.env);
    assert!(
        position(&h, &format!("ralph: beads closed {a}"))
            < position(&h, &format!("ralph: beads claimed {bb}")),
        "{h:#?}"
    );
    assert_eq!(b.env.git(&["status", "--porcelain"]), "");
}

#[test]
fn ctrl_c_stops_the_queue_releases_the_item_and_takes_no_other() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("First", "- [ ] one", 1);
    let c = b.create("Second", "- [ ] two", 2);
    b.env.commit_all("items");
    let agent = format!("'{}'", fake_agent().display());
    let mut cmd = b.env.ralph_cmd();
    cmd.args([
        "run",
        "--from",
        "beads",
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ])
    .env("FAKE_AGENT_SCRIPT", "churn+grandchild+hang")
    .env("RALPH_BEADS_CMD", &b.br);
    let bg = b.env.spawn(cmd);
    // Its second pid (the grandchild's) is written once the churn is: the stop comes after the
    // work it must keep (under load, a stop at the agent's first pid came before any work).
    let pids = b.env.wait_for_pids(1, 2);
    bg.signal(libc::SIGINT);
    let (code, out, err) = bg.wait(std::time::Duration::from_secs(30));
    assert_eq!(code, Some(130), "{out}{err}");
    assert_all_dead(&pids, std::time::Duration::from_millis(500));
    // The item is open again, its work kept on its branch; the other was never taken.
    assert_eq!(b.status(&a), "open");
    assert_eq!(b.status(&c), "open");
    assert!(
        b.show(&a).to_string().contains("interrupted"),
        "{}",
        b.show(&a)
    );
    assert!(!b.env.agent_ran(2));
    let branch = b
        .env
        .git(&["log", "--format=%s", &format!("ralph/beads-{a}")]);
    assert!(branch.contains("(interrupted)"), "{branch}");
}

#[test]
fn an_item_whose_branch_changed_the_trackers_files_is_not_merged() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Hostile", "- [ ] done", 1);
    let other = b.create("Other", "- [ ] other done", 2);
    b.env.commit_all("items");
    // The agent does its work, and closes every item by editing beads' JSONL in its worktree.
    let script = agent_sh(
        &b.env,
        "close-all",
        "sed -i 's/\"status\":\"open\"/\"status\":\"closed\"/g; s/\"status\":\"in_progress\"/\"status\":\"closed\"/g' .beads/issues.jsonl",
    );
    let out = b.run_queue(
        &format!("{script}+check-unless:no such text"),
        &["--max-tasks", "1"],
    );
    assert_exit(&out, 9);
    // Control: its branch does carry the edit.
    let carried = b.env.git(&[
        "diff",
        "--name-only",
        &format!("HEAD...ralph/beads-{a}"),
        "--",
        ".beads",
    ]);
    assert_eq!(carried.trim(), ".beads/issues.jsonl");
    // Nothing of it reached the base branch or the tracker.
    assert_eq!(b.status(&other), "open");
    assert_eq!(b.status(&a), "open");
    assert!(!b.env.repo.join("work").exists(), "merged anyway");
    assert!(
        b.show(&a)
            .to_string()
            .contains("changed the tracker's own files"),
        "{}",
        b.show(&a)
    );
}

#[test]
fn json_lists_each_items_outcome() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("Easy", "- [ ] easy done", 1);
    let hard = b.create("Hard", "- [ ] never done", 2);
    b.env.commit_all("items");
    let out = b.run_queue("check-unless:never done", &["--json"]);
    assert_exit(&out, 9);
    let items = events_named(&out, "queue_item");
    let seen: Vec<(String, String, String)> = items
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_string(),
                e["outcome"].as_str().unwrap().to_string(),
                e["branch"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (a.clone(), "completed".into(), format!("ralph/beads-{a}")),
            (
                hard.clone(),
                "released".into(),
                format!("ralph/beads-{hard}")
            ),
        ]
    );
    assert!(
        items[1]["why"].as_str().unwrap().contains("stalled"),
        "{}",
        items[1]
    );
    let end = &events_named(&out, "queue_finished")[0];
    let counts = [
        &end["taken"],
        &end["completed"],
        &end["released"],
        &end["exit_code"],
    ];
    assert_eq!(counts, [2, 1, 1, 9], "{end}");
    // stdout is JSON lines only.
    assert_eq!(json_events(&out).len(), stdout(&out).lines().count());
}

#[test]
fn max_tasks_takes_that_many_items_and_leaves_the_rest_untouched() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("First", "- [ ] one", 1);
    let c = b.create("Second", "- [ ] two", 2);
    b.env.commit_all("items");
    let out = b.run_queue("check-unless:no such text", &["--max-tasks", "1"]);
    assert_exit(&out, 0);
    assert_eq!(b.status(&a), "closed");
    assert_eq!(b.status(&c), "open");
    let h = history(&b.env);
    assert!(!h.iter().any(|s| s.contains(&c)), "{h:#?}");
    // The item's branch starts with its task file, as the record of what was asked.
    let first = b.env.git(&[
        "log",
        "--reverse",
        "--format=%s",
        &format!("ralph/beads-{a}"),
        "--not",
        &format!(":/ralph: beads claimed {a}"),
    ]);
    assert_eq!(
        first.lines().next(),
        Some(format!("ralph: beads {a} task").as_str()),
        "{first}"
    );
}

#[test]
fn ctrl_c_with_two_loops_running_stops_both_and_releases_both() {
    let Some(b) = Beads::new() else { return };
    let a = b.create("First", "- [ ] one", 1);
    let c = b.create("Second", "- [ ] two", 2);
    b.env.commit_all("items");
    let agent = format!("'{}'", fake_agent().display());
    let mut cmd = b.env.ralph_cmd();
    cmd.args([
        "run",
        "--from",
        "beads",
        "--parallel",
        "2",
        "--agent-cmd",
        &agent,
        "--yes",
        "--grace",
        "1s",
    ])
    .env("FAKE_AGENT_SCRIPT", "churn+hang")
    .env("RALPH_BEADS_CMD", &b.br);
    let bg = b.env.spawn(cmd);
    // Both loops' agents are running (each records its pid for its iteration 1).
    let pids = b.env.wait_for_pids(1, 2);
    bg.signal(libc::SIGINT);
    let (code, out, err) = bg.wait(std::time::Duration::from_secs(30));
    assert_eq!(code, Some(130), "{out}{err}");
    assert_all_dead(&pids, std::time::Duration::from_millis(500));
    for id in [&a, &c] {
        assert_eq!(b.status(id), "open", "{id}: {out}");
        assert!(
            b.show(id).to_string().contains("interrupted"),
            "{}",
            b.show(id)
        );
    }
}

/// Issue 32: a queue keeps nothing of an item once it is done. Each item's loop had its work
/// tree's file watcher (its thread, inotify watches, journal) kept in a process-wide registry
/// until ralph exited — about 3 MiB more per item at 20,000 files. `RALPH_REPORT_MEMORY` has
/// ralph say, after the last item, how many watchers still run and how many threads it has:
/// neither grows with the items.
#[test]
fn a_queue_keeps_no_watcher_or_thread_of_an_item_it_finished() {
    let Some(b) = Beads::new() else { return };
    let report = |out: &std::process::Output, n: usize| -> (usize, usize) {
        let err = stderr(out);
        let prefix = format!("ralph: memory after {n} items: watchers ");
        let line = err
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no memory line for {n} items in {err}"));
        let mut nums = line
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<usize>().expect("a number"));
        (
            nums.next().expect("watchers"),
            nums.next().expect("threads"),
        )
    };
    let run = |count: usize| {
        for i in 0..count {
            b.create(&format!("Item {i}"), &format!("- [ ] item {i} is done"), 2);
        }
        b.env.commit_all("items");
        let out = b.env.ralph_with_limit(
            &[
                "run",
                "--from",
                "beads",
                "--agent-cmd",
                &format!("'{}'", fake_agent().display()),
                "--yes",
            ],
            &[
                ("FAKE_AGENT_SCRIPT", "check-unless:no such text"),
                ("RALPH_BEADS_CMD", &b.br.display().to_string()),
                ("RALPH_REPORT_MEMORY", "1"),
            ],
            std::time::Duration::from_secs(120),
        );
        assert_exit(&out, 0);
        report(&out, count)
    };
    let (w1, t1) = run(1);
    let (w4, t4) = run(4);
    // Each item's loop watched its worktree: a watcher kept per item shows as 1, then 4.
    assert_eq!(
        (w1, w4),
        (0, 0),
        "watchers still running after the queue's items"
    );
    assert_eq!(t4, t1, "threads after 4 items against after 1");
}
