//! Every halt that suggests a command suggests one that works from where the user stands
//! (issue 30): each test drives ralph to the halt, takes the command from ralph's output (the
//! backquoted command of a `next:` or `hint:` line), runs it as printed — only `ralph` replaced
//! by the binary under test — and checks it does what the message said. The fake agent is the
//! user's agent through `RALPH_AGENT_CMD`, as a user sets their agent once, so a suggested
//! command needs no flag the message did not print.

use std::process::Output;
use std::time::Duration;

use crate::common::*;

/// ralph with `args`, the fake agent following `script` as the user's agent.
fn ralph(env: &TestEnv, args: &[&str], script: &str) -> Output {
    let agent = format!("'{}'", fake_agent().display());
    let vars = [
        ("RALPH_AGENT_CMD", agent.as_str()),
        ("FAKE_AGENT_SCRIPT", script),
    ];
    env.ralph_with_limit(args, &vars, Duration::from_secs(60))
}

/// The commands `text` suggests: the backquoted `ralph …` commands of its `next:` and `hint:`
/// lines, in order.
fn suggested_in(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("next:") || l.starts_with("hint:"))
        .flat_map(|l| l.split('`').skip(1).step_by(2).map(str::to_string))
        .filter(|c| c.starts_with("ralph "))
        .collect()
}

/// The one suggested command of `o` that starts with `prefix` (a test failure listing what was
/// suggested when none does).
#[track_caller]
fn suggestion(o: &Output, prefix: &str) -> String {
    suggestion_in(&format!("{}\n{}", stdout(o), stderr(o)), prefix)
}

#[track_caller]
fn suggestion_in(text: &str, prefix: &str) -> String {
    let all = suggested_in(text);
    all.iter()
        .find(|c| *c == prefix || c.starts_with(&format!("{prefix} ")))
        .cloned()
        .unwrap_or_else(|| panic!("no suggestion `{prefix}…` among {all:?} in:\n{text}"))
}

/// Run `command` as printed, `ralph` replaced by the binary under test.
fn run_as_printed(env: &TestEnv, command: &str, script: &str) -> Output {
    let words = shell_words::split(command).expect("a command a shell reads");
    assert_eq!(words[0], "ralph", "{command}");
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    ralph(env, &args, script)
}

fn state(env: &TestEnv) -> serde_json::Value {
    serde_json::from_str(&env.read(".ralph/state.json")).expect("state.json")
}

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

fn unchecked(env: &TestEnv, file: &str) -> usize {
    env.read(file).matches("- [ ]").count()
}

/// Stuck: a resumed run is still stuck and `ralph run` refuses the unfinished run (the old
/// "adjust the task and run again" led nowhere); the suggested `ralph run --reset` runs the
/// adjusted task to completion. Failed before: no command was suggested.
#[test]
fn stuck_suggests_starting_over_and_that_completes_the_adjusted_task() {
    let env = setup(&["a", "b", "c"]);
    let out = ralph(&env, &["run", "--stuck-threshold", "1"], "churn");
    assert_exit(&out, 5);
    let next = suggestion(&out, "ralph run --reset");
    // Control: what the old text pointed at goes in circles.
    assert_exit(&ralph(&env, &["run"], "check"), 1);
    // The user adjusts the task: `c` split in two.
    let task = env
        .read("RALPH_TASK.md")
        .replace("- [ ] c\n", "- [ ] c1\n- [ ] c2\n");
    env.write("RALPH_TASK.md", &task);
    let first = state(&env)["run_id"].clone();
    let out = run_as_printed(&env, &next, "check");
    assert_exit(&out, 0);
    assert_eq!(
        unchecked(&env, "RALPH_TASK.md"),
        0,
        "{}",
        env.read("RALPH_TASK.md")
    );
    assert!(env.read("RALPH_TASK.md").contains("- [x] c2"));
    assert_ne!(state(&env)["run_id"], first, "a new run");
}

/// Stalled: the suggested `ralph resume` gives the same run another try, which completes.
/// Failed before: no command was suggested.
#[test]
fn stalled_suggests_resume_and_the_run_goes_on() {
    let env = setup(&["a", "b"]);
    let out = ralph(&env, &["run"], "idle");
    assert_exit(&out, 4);
    let run_id = state(&env)["run_id"].clone();
    let out = run_as_printed(&env, &suggestion(&out, "ralph resume"), "check");
    assert_exit(&out, 0);
    assert_eq!(state(&env)["run_id"], run_id, "the same run");
    assert_eq!(unchecked(&env, "RALPH_TASK.md"), 0);
}

/// Max iterations: plain `ralph resume` is refused (the run used its iterations); the
/// suggested `ralph resume --max-iterations N` continues the same run to completion. Failed
/// before: the command was prose, not a `next:` line.
#[test]
fn max_iterations_suggests_a_higher_limit_and_the_run_completes() {
    let env = setup(&["a", "b", "c", "d", "e"]);
    let out = ralph(&env, &["run", "--max-iterations", "2"], "check");
    assert_exit(&out, 3);
    let next = suggestion(&out, "ralph resume");
    assert!(next.contains("--max-iterations"), "{next}");
    let run_id = state(&env)["run_id"].clone();
    // Control: resuming without the flag is refused.
    assert_exit(&ralph(&env, &["resume"], "check"), 1);
    let out = run_as_printed(&env, &next, "check");
    assert_exit(&out, 0);
    let st = state(&env);
    assert_eq!(st["run_id"], run_id, "the same run");
    assert_eq!(st["iteration"], 5);
}

/// Tampered: resuming with the criterion still gone halts tampered again; once it is back,
/// the suggested `ralph resume` goes on; and the suggested `ralph run --reset` starts a new run
/// on the task as it is. Failed before: "restore them and run again", and `ralph run` halts
/// tampered again.
#[test]
fn tampered_suggests_resume_once_restored_or_starting_over() {
    for restore in [true, false] {
        let env = setup(&["a", "b", "c"]);
        let out = ralph(&env, &["run"], "check,delete");
        assert_exit(&out, 8);
        assert!(!env.read("RALPH_TASK.md").contains("- [ ] b"));
        // Control: "run again" halts tampered again, unattended.
        assert_exit(&ralph(&env, &["run"], "check"), 8);
        if restore {
            let next = suggestion(&out, "ralph resume");
            // Control: still gone, the resume halts as tampered, and says so the same way.
            let again = ralph(&env, &["resume"], "check");
            assert_exit(&again, 8);
            assert_eq!(suggestion(&again, "ralph resume"), next);
            let task = env
                .read("RALPH_TASK.md")
                .replace("- [ ] c", "- [ ] b\n- [ ] c");
            env.write("RALPH_TASK.md", &task);
            let out = run_as_printed(&env, &next, "check");
            assert_exit(&out, 0);
        } else {
            let out = run_as_printed(&env, &suggestion(&out, "ralph run --reset"), "check");
            assert_exit(&out, 0);
        }
        assert_eq!(unchecked(&env, "RALPH_TASK.md"), 0);
    }
}

/// Interrupted (Ctrl-C): the suggested `ralph resume` continues the same run to completion.
/// Failed before: the command was prose ("Continue with: ralph resume").
#[test]
fn interrupted_suggests_resume_and_the_run_goes_on() {
    let env = setup(&["a", "b"]);
    let bg = env.spawn_fake("churn+hang,check", &["--grace", "1s"]);
    env.wait_for_pids(1, 1);
    assert!(wait_until(Duration::from_secs(10), || env
        .repo
        .join("churn.txt")
        .exists()));
    bg.signal(libc::SIGINT);
    let (code, out, err) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130), "{out}\n{err}");
    let run_id = state(&env)["run_id"].clone();
    let next = suggestion_in(&format!("{out}\n{err}"), "ralph resume");
    let out = run_as_printed(&env, &next, "check");
    assert_exit(&out, 0);
    assert_eq!(state(&env)["run_id"], run_id, "the same run");
    assert_eq!(unchecked(&env, "RALPH_TASK.md"), 0);
}

/// A worktree loop that completed: the main work tree has none of its work (what `git log`
/// there showed); the suggested `ralph merge NAME` brings it in. Failed before: "git log
/// --oneline -N", and no `ralph merge`.
#[test]
fn a_completed_worktree_loop_suggests_its_merge_and_the_merge_brings_the_work() {
    let env = setup(&["a", "b"]);
    let out = ralph(&env, &["run", "--worktree", "w"], "check");
    assert_exit(&out, 0);
    let next = suggestion(&out, "ralph merge");
    // Control: the main work tree has none of the loop's work yet.
    assert_eq!(unchecked(&env, "RALPH_TASK.md"), 2);
    let out = run_as_printed(&env, &next, "check");
    assert_exit(&out, 0);
    assert_eq!(unchecked(&env, "RALPH_TASK.md"), 0, "{}", stderr(&out));
}

/// A worktree loop on a task already complete ran nothing and left its worktree. `run`,
/// `merge` and `resume` of that loop each suggest `ralph run --worktree NAME`, which — once a
/// new criterion is committed — runs it, and its merge brings the work in. Failed before: the
/// loop ran the stale copy ("already complete" again), `merge` said to resume and `resume` to
/// run without the loop's name.
#[test]
fn a_stale_worktree_loop_is_run_again_as_suggested() {
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    env.write(
        "RALPH_TASK.md",
        &env.read("RALPH_TASK.md").replace("[ ]", "[x]"),
    );
    env.commit_all("initial");
    let out = ralph(&env, &["run", "--worktree", "w"], "check");
    assert_exit(&out, 0);
    assert!(!env.agent_ran(1));
    let next = suggestion(&out, "ralph run");
    assert_eq!(next, "ralph run --worktree w");
    let merge = ralph(&env, &["merge", "w"], "check");
    assert_exit(&merge, 1);
    assert_eq!(suggestion(&merge, "ralph run"), next);
    let resume = ralph(&env, &["resume", "--worktree", "w"], "check");
    assert_exit(&resume, 1);
    assert_eq!(suggestion(&resume, "ralph run"), next);
    let task = env.read("RALPH_TASK.md");
    env.write("RALPH_TASK.md", &format!("{task}- [ ] b\n"));
    env.commit_all("one more criterion");
    let out = run_as_printed(&env, &next, "check");
    assert_exit(&out, 0);
    assert!(env.agent_ran(1), "{}", stdout(&out));
    let out = run_as_printed(&env, &suggestion(&out, "ralph merge"), "check");
    assert_exit(&out, 0);
    assert!(env.read("RALPH_TASK.md").contains("- [x] b"));
}

/// Already complete: the suggested `ralph run` runs the task once it has an unchecked
/// criterion. Failed before: no command was suggested.
#[test]
fn already_complete_suggests_a_run_and_it_works_the_new_criterion() {
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    env.write(
        "RALPH_TASK.md",
        &env.read("RALPH_TASK.md").replace("[ ]", "[x]"),
    );
    env.commit_all("initial");
    let out = ralph(&env, &["run"], "check");
    assert_exit(&out, 0);
    assert!(!env.agent_ran(1));
    let next = suggestion(&out, "ralph run");
    let task = env.read("RALPH_TASK.md");
    env.write("RALPH_TASK.md", &format!("{task}- [ ] b\n"));
    let out = run_as_printed(&env, &next, "check");
    assert_exit(&out, 0);
    assert!(env.agent_ran(1));
    assert!(env.read("RALPH_TASK.md").contains("- [x] b"));
}

/// A completed worktree loop that could not merge because the main work tree has uncommitted
/// changes: the suggested `ralph merge NAME` merges once they are committed (and, as a
/// control, not before). Failed before: no command was suggested.
#[test]
fn a_loop_not_merged_over_uncommitted_changes_suggests_the_merge_for_after() {
    let env = setup(&["a"]);
    env.write("notes.txt", "the user's notes\n");
    env.commit_all("notes");
    env.write("notes.txt", "the user is editing this\n");
    let out = ralph(&env, &["run", "--worktree", "w", "--merge"], "check");
    assert_exit(&out, 11);
    let next = suggestion(&out, "ralph merge");
    assert_exit(&run_as_printed(&env, &next, "check"), 11);
    env.commit_all("the user's edit");
    assert_exit(&run_as_printed(&env, &next, "check"), 0);
    assert_eq!(unchecked(&env, "RALPH_TASK.md"), 0);
}

/// A queue's item halts inside the queue, which goes on by itself: its loop's summary
/// suggests no `ralph resume --worktree …` of its own (the item's worktree is the queue's).
/// Control: the same halt outside a queue suggests `ralph resume` (above). Failed with the
/// queue's items not told apart: the item's summary suggested `ralph resume --worktree …`.
#[test]
fn a_queue_items_halt_suggests_no_command_of_its_own() {
    use crate::queue_github::{Api, TOKEN, fresh, issue};
    let env = fresh();
    let body = "Do it.\n\n- [ ] one\n- [ ] two\n";
    let api = Api::start(
        &env,
        serde_json::json!([issue(
            1,
            "Two things",
            &["ralph"],
            serde_json::json!({ "body": body })
        )]),
        100,
    );
    let agent = format!("'{}'", fake_agent().display());
    let url = api.url().to_string();
    let vars = [
        ("FAKE_AGENT_SCRIPT", "idle"),
        ("GITHUB_API_URL", url.as_str()),
        ("GITHUB_TOKEN", TOKEN),
        ("RALPH_AGENT_CMD", agent.as_str()),
    ];
    let out = env.ralph_with_limit(
        &["run", "--from", "github:o/r", "--yes"],
        &vars,
        Duration::from_secs(120),
    );
    let text = format!("{}\n{}", stdout(&out), stderr(&out));
    assert!(text.contains("STALLED"), "the item halted: {text}");
    assert!(
        suggested_in(&text)
            .iter()
            .all(|c| !c.contains("--worktree")),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.starts_with("next:")), "{text}");
}
