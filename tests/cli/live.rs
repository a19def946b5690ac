//! The live view of `ralph run` on a terminal (SPEC §9), in tmux: the spinner line with the
//! iteration, the elapsed time, the live count from the task file and the agent's latest line,
//! cleared for the report block when the iteration ends. Snapshots of the screen.

use std::path::PathBuf;

use crate::common::*;
use crate::tmux::Tmux;

/// `ralph run --max-iterations 1` in tmux, the agent following `script` and then working on
/// until the test creates the file `go` in its home (`PATH` as given); the tmux server and the
/// file. The run's exit status is printed after it, and the pane stays.
fn live_run(env: &TestEnv, script: &str, path: &str, agent: &str) -> Option<(Tmux, PathBuf)> {
    let go = env.home.join("go");
    let wait = agent_sh(
        env,
        "wait",
        &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
    );
    let run = env.home.join("run.sh");
    let ralph = env!("CARGO_BIN_EXE_ralph");
    let script = format!(
        "PATH='{path}' FAKE_AGENT_SCRIPT='{script}+{wait}' '{ralph}' run {agent} --yes --max-iterations 1\n\
         echo \"[exit status: $?]\"\n\
         read _\n",
    );
    std::fs::write(&run, script).unwrap();
    let tmux = Tmux::start(env, &format!("sh '{}'", run.display()))?;
    Some((tmux, go))
}

/// The agent checks its first box and prints a line: the count on the spinner line moves while
/// it still runs (the task file is watched), and its latest line shows.
#[test]
fn the_spinner_line_shows_the_live_count_and_the_agents_latest_line() {
    let env = TestEnv::new();
    env.write_task(&["l1", "l2"], "");
    env.commit_all("initial");
    let path = std::env::var("PATH").unwrap_or_default();
    let agent = format!("--agent-cmd \"{}\"", fake_agent_cmd());
    let Some((tmux, go)) = live_run(&env, "check+print:Bash: cargo test", &path, &agent) else {
        return;
    };
    let pane = tmux.wait_for(&env, "the count moved to 1/2 with the agent's line", |p| {
        p.contains(" · 1/2 criteria · Bash: cargo test")
    });
    insta::assert_snapshot!("during_the_iteration", normalize(&env, pane.trim_end()));
    std::fs::write(&go, "").unwrap();
    let pane = tmux.wait_for(&env, "the run's end", |p| p.contains("[exit status: "));
    insta::assert_snapshot!("after_the_run", normalize(&env, pane.trim_end()));
}

/// The stuck question, asked on a terminal without `--yes`, comes after the report block of
/// the iteration that made the loop stuck, never before it (issue 30); answering "s" stops the
/// run as stuck (exit 5). The agent rewrites a file each iteration and checks nothing: with
/// `--stuck-threshold 1` the question comes after iteration 2.
#[test]
fn the_stuck_question_follows_the_report_of_its_iteration() {
    let env = TestEnv::new();
    env.write_task(&["l1", "l2"], "");
    env.commit_all("initial");
    let run = env.home.join("run.sh");
    let ralph = env!("CARGO_BIN_EXE_ralph");
    let script = format!(
        "FAKE_AGENT_SCRIPT=churn '{ralph}' run --agent-cmd \"{}\" --stuck-threshold 1\n\
         echo \"[exit status: $?]\"\n\
         read _\n",
        fake_agent_cmd()
    );
    std::fs::write(&run, script).unwrap();
    let Some(tmux) = Tmux::start(&env, &format!("sh '{}'", run.display())) else {
        return;
    };
    let question = "Continue or stop? [c/S]";
    let pane = tmux.wait_for(&env, "the stuck question", |p| p.contains(question));
    let report = pane.find("## Iteration 2/50 complete");
    let asked = pane.find(question);
    assert!(
        matches!((report, asked), (Some(r), Some(q)) if r < q),
        "the report of iteration 2 comes before the question:\n{pane}"
    );
    assert!(
        pane[report.unwrap()..asked.unwrap()].contains("Total elapsed"),
        "the whole report block before the question:\n{pane}"
    );
    tmux.type_line(&env, "s");
    let pane = tmux.wait_for(&env, "the run's end", |p| p.contains("[exit status: "));
    assert!(pane.contains("[exit status: 5]"), "{pane}");
    assert!(
        pane.contains("Stuck: no progress for 2 iterations"),
        "{pane}"
    );
    let after = &pane[pane.find(question).map_or(0, |q| q + question.len())..];
    assert!(
        !after.contains("## Iteration 2/50 complete"),
        "the report is not printed again after the answer:\n{pane}"
    );
}

/// Claude's stream-json: the spinner line shows the tool the agent uses.
#[test]
fn with_claude_the_spinner_line_shows_the_tool_in_use() {
    let env = TestEnv::new();
    env.write_task(&["l1", "l2"], "");
    env.commit_all("initial");
    let path = claude_stand_in_path(&env);
    let Some((tmux, go)) = live_run(&env, "check+claude-result:0.25", &path, "--agent claude")
    else {
        return;
    };
    let pane = tmux.wait_for(&env, "the count moved to 1/2 with the tool", |p| {
        p.contains(" · 1/2 criteria · Bash: sed -i s/x/y/ RALPH_TASK.md")
    });
    let pane = without_root_note(&pane);
    insta::assert_snapshot!(
        "claude_during_the_iteration",
        normalize(&env, pane.trim_end())
    );
    std::fs::write(&go, "").unwrap();
    let pane = tmux.wait_for(&env, "the run's end", |p| p.contains("[exit status: "));
    let pane = without_root_note(&pane);
    insta::assert_snapshot!("claude_after_the_run", normalize(&env, pane.trim_end()));
}
