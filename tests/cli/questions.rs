//! A person in the loop (issue 31, SPEC §16): `ralph ask` from the agent returns at once and the
//! loop waits for a person — no iteration spent — until `ralph answer` from another terminal,
//! whose words reach the next prompt; no answer within `--answer-timeout` ends with exit 12
//! naming the question; `ralph hint` reaches exactly one prompt; `--no-questions` tells the agent
//! nobody answers. Real `ralph` processes, real agents (shell scripts reading the prompt on
//! stdin), real files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

const QUESTION: &str = "Which database should I use?";
const ANSWER: &str = "postgres, please";

/// An agent that asks [`QUESTION`] (and notes that `ralph ask` returned, with its exit code)
/// unless its prompt carries [`ANSWER`]; then it checks every box.
fn asking_agent(env: &TestEnv) -> String {
    let file = env.dir().join("asking.sh");
    let ralph = env!("CARGO_BIN_EXE_ralph");
    let returned = env.dir().join("ask-returned");
    std::fs::write(
        &file,
        format!(
            "prompt=$(cat)\n\
             if printf '%s' \"$prompt\" | grep -q '{ANSWER}'; then\n\
               sed -i 's/- \\[ \\]/- [x]/g' \"$RALPH_TASK_FILE\"; echo db > db.txt\n\
             else\n\
               '{ralph}' ask '{QUESTION}' 2>'{returned}.err'; echo $? > '{returned}'\n\
             fi\n",
            returned = returned.display()
        ),
    )
    .unwrap();
    format!("sh '{}'", file.display())
}

fn setup(env: &TestEnv) {
    env.write(
        "RALPH_TASK.md",
        &task(&["choose the database", "write it down"]),
    );
    env.commit_all("task");
}

/// The prompts the run saved, in order (`.ralph/runs/RUN/iter-NNN.prompt.md`).
fn prompts(root: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(".ralph/runs"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|run| {
            std::fs::read_dir(run.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".prompt.md"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

fn spawn_run(env: &TestEnv, agent: &str, extra: &[&str]) -> Background {
    let mut cmd = env.ralph_cmd();
    cmd.args(["run", "--agent-cmd", agent, "--yes", "--grace", "1s"])
        .args(extra);
    env.spawn(cmd)
}

/// Wait until `status --json` says the loop waits for a person; the status then.
fn wait_for_waiting(env: &TestEnv, bg: &mut Background) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let waiting = wait_until(Duration::from_secs(30), || {
        if bg.child.try_wait().unwrap().is_some() {
            return true;
        }
        last = status_json(env);
        last["waiting"] == true
    });
    assert!(
        waiting && last["waiting"] == true,
        "the loop never waited for a person: {last:#}\n{}",
        std::fs::read_to_string(&bg.out).unwrap_or_default()
    );
    last
}

/// `ralph ask` returns at once inside the agent; the loop waits without spending an iteration;
/// `ralph answer` from another terminal sends the loop on with the answer in its next prompt
/// (not in the one before); the `question` event and the `on_question` hook carry the question.
#[test]
fn an_answer_from_another_terminal_sends_the_waiting_loop_on() {
    let env = TestEnv::new();
    setup(&env);
    let hook_out = env.dir().join("hook.json");
    env.write(
        ".ralph/config.toml",
        &format!(
            "[hooks]\non_question = \"cat > '{}'\"\n",
            hook_out.display()
        ),
    );
    env.commit_all("hook");
    let mut bg = spawn_run(&env, &asking_agent(&env), &["--json"]);
    let st = wait_for_waiting(&env, &mut bg);
    // `ralph ask` had returned (exit 0) while the loop still waits: it never waited itself.
    assert_eq!(
        std::fs::read_to_string(env.dir().join("ask-returned"))
            .unwrap()
            .trim(),
        "0"
    );
    assert_eq!(st["question"]["text"], QUESTION, "{st:#}");
    assert_eq!(st["iteration"], 1, "waiting spends no iteration: {st:#}");
    let mut hook = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let text = std::fs::read_to_string(&hook_out).unwrap_or_default();
            hook = serde_json::from_str(&text).unwrap_or_default();
            !hook.is_null()
        }),
        "the on_question hook never got its event"
    );
    assert_eq!(
        (hook["event"].as_str(), hook["question"].as_str()),
        (Some("question"), Some(QUESTION))
    );
    assert_eq!(hook["loop"], "main");
    let answered = env.ralph(&["answer", "main", ANSWER]);
    assert_exit(&answered, 0);
    let (code, out, err) = bg.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let p = prompts(&env.repo);
    assert_eq!(p.len(), 2, "one asking iteration, one answered");
    assert!(
        !p[0].contains(ANSWER) && p[0].contains(" ask \"YOUR QUESTION\""),
        "{}",
        p[0]
    );
    assert!(
        p[1].contains(&format!("A person answered your question: {ANSWER}")),
        "{}",
        p[1]
    );
    assert!(p[1].contains(QUESTION));
    let questions = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "question")
        .count();
    assert_eq!(questions, 1, "one `question` event: {out}");
    // Answered and taken: nothing is left open.
    assert_eq!(status_json(&env)["question"], serde_json::Value::Null);
}

/// No answer within `--answer-timeout`: exit 12, the summary naming the question, the state
/// `waiting_for_person`; then `ralph answer` and `ralph resume` go on with the answer.
#[test]
fn an_unanswered_question_ends_with_exit_12_and_resume_goes_on_after_an_answer() {
    let env = TestEnv::new();
    setup(&env);
    let agent = asking_agent(&env);
    let out = env.ralph(&[
        "run",
        "--agent-cmd",
        &agent,
        "--yes",
        "--answer-timeout",
        "2s",
    ]);
    assert_exit(&out, 12);
    let text = stdout(&out);
    assert!(
        text.contains("Waiting for a person") && text.contains(QUESTION),
        "{text}"
    );
    let st = status_json(&env);
    assert_eq!(
        (
            st["halt_reason"].as_str(),
            st["exit_code"].as_i64(),
            st["iteration"].as_i64()
        ),
        (Some("waiting_for_person"), Some(12), Some(1)),
        "{st:#}"
    );
    assert_eq!(st["question"]["text"], QUESTION);
    // A resume with no answer yet waits again (and times out again): the question stays.
    let again = env.ralph(&[
        "resume",
        "--agent-cmd",
        &agent,
        "--yes",
        "--answer-timeout",
        "1s",
    ]);
    assert_exit(&again, 12);
    assert_eq!(
        prompts(&env.repo).len(),
        1,
        "no iteration ran without an answer"
    );
    assert_exit(&env.ralph(&["answer", ANSWER]), 0);
    let resumed = env.ralph(&["resume", "--agent-cmd", &agent, "--yes"]);
    assert_exit(&resumed, 0);
    let p = prompts(&env.repo);
    assert_eq!(p.len(), 2);
    assert!(p[1].contains(ANSWER), "{}", p[1]);
}

/// A hint reaches exactly one prompt: one left before the run goes into prompt 1 only, one left
/// while iteration 1 runs goes into prompt 2 only, and prompt 3 carries neither.
#[test]
fn a_hint_reaches_exactly_one_prompt() {
    let env = TestEnv::new();
    env.write("RALPH_TASK.md", &task(&["one", "two", "three"]));
    env.commit_all("task");
    let go = env.dir().join("go");
    let agent = checking_agent(
        &env,
        "waiting",
        &format!(
            "cat > /dev/null; [ \"$RALPH_ITERATION\" = 1 ] && while [ ! -e '{}' ]; do sleep 0.02; done",
            go.display()
        ),
    );
    assert_exit(
        &env.ralph(&["hint", "main", "FIRST-HINT use the helpers"]),
        0,
    );
    let bg = spawn_run(&env, &agent, &[]);
    assert!(
        wait_until(Duration::from_secs(20), || prompts(&env.repo).len() == 1),
        "iteration 1 did not start"
    );
    assert_exit(&env.ralph(&["hint", "SECOND-HINT mind the tests"]), 0);
    std::fs::write(&go, "").unwrap();
    let (code, out, err) = bg.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let p = prompts(&env.repo);
    assert_eq!(p.len(), 3);
    let has = |i: usize, h: &str| p[i].contains(h);
    assert!(has(0, "FIRST-HINT") && !has(0, "SECOND-HINT"), "{}", p[0]);
    assert!(has(1, "SECOND-HINT") && !has(1, "FIRST-HINT"), "{}", p[1]);
    assert!(!has(2, "FIRST-HINT") && !has(2, "SECOND-HINT"), "{}", p[2]);
    let log = env.activity();
    assert_eq!(log.matches("FIRST-HINT").count(), 1, "{log}");
    assert_eq!(log.matches("SECOND-HINT").count(), 1, "{log}");
}

/// `--no-questions`: the prompt says nobody answers, `ralph ask` refuses (exit 1, saying so),
/// and the run goes on without waiting. The control is the asking test above, where the same
/// agent's `ralph ask` returned 0 and the loop waited.
#[test]
fn no_questions_tells_the_agent_and_ask_refuses() {
    let env = TestEnv::new();
    setup(&env);
    let out = env.ralph(&[
        "run",
        "--agent-cmd",
        &asking_agent(&env),
        "--yes",
        "--no-questions",
        "--max-iterations",
        "2",
    ]);
    // The agent never gets an answer, so it never checks a box: max iterations, no wait.
    assert_exit(&out, 3);
    assert_eq!(
        std::fs::read_to_string(env.dir().join("ask-returned"))
            .unwrap()
            .trim(),
        "1"
    );
    let said = std::fs::read_to_string(env.dir().join("ask-returned.err")).unwrap();
    assert!(said.contains("takes no questions"), "{said}");
    let p = prompts(&env.repo);
    assert_eq!(p.len(), 2);
    assert!(
        p[0].contains("No person answers questions in this run"),
        "{}",
        p[0]
    );
    assert_eq!(status_json(&env)["question"], serde_json::Value::Null);
}

/// `ralph ask` outside a loop is refused, naming why; `ralph answer` with no question open too.
#[test]
fn ask_outside_a_loop_and_an_answer_without_a_question_are_refused() {
    let env = TestEnv::new();
    setup(&env);
    let out = env.ralph(&["ask", "anything?"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("RALPH_QUESTION_FILE"),
        "{}",
        stderr(&out)
    );
    let out = env.ralph(&["answer", "main", "yes"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no question is open"),
        "{}",
        stderr(&out)
    );
    let out = env.ralph(&["hint", "nosuchloop", "x"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no loop is named `nosuchloop`"),
        "{}",
        stderr(&out)
    );
}

/// Ctrl-C while the loop waits ends the run (130) with the question kept open; answered later,
/// `ralph resume` goes on with it.
#[test]
fn an_interrupt_while_waiting_keeps_the_question() {
    let env = TestEnv::new();
    setup(&env);
    let agent = asking_agent(&env);
    let mut bg = spawn_run(&env, &agent, &[]);
    wait_for_waiting(&env, &mut bg);
    bg.signal(libc::SIGINT);
    let (code, out, err) = bg.wait(Duration::from_secs(20));
    assert_eq!(code, Some(130), "{out}\n{err}");
    let st = status_json(&env);
    assert_eq!(st["halt_reason"], "interrupted");
    assert_eq!(st["question"]["text"], QUESTION);
    assert_exit(&env.ralph(&["answer", ANSWER]), 0);
    assert_exit(&env.ralph(&["resume", "--agent-cmd", &agent, "--yes"]), 0);
}

/// A new run (`run --reset`) does not inherit the question an earlier run left open: its first
/// iteration runs at once. Control: `resume` of the earlier run waits on it (the exit-12 test).
#[test]
fn a_new_run_does_not_wait_on_an_earlier_runs_question() {
    let env = TestEnv::new();
    setup(&env);
    let agent = asking_agent(&env);
    let first = env.ralph(&[
        "run",
        "--agent-cmd",
        &agent,
        "--yes",
        "--answer-timeout",
        "1s",
    ]);
    assert_exit(&first, 12);
    assert_eq!(prompts(&env.repo).len(), 1);
    let reset = env.ralph(&[
        "run",
        "--reset",
        "--agent-cmd",
        &agent,
        "--yes",
        "--answer-timeout",
        "1s",
    ]);
    // Its own agent ran and asked again (exit 12 once more), not a wait before iteration 1.
    assert_exit(&reset, 12);
    assert_eq!(prompts(&env.repo).len(), 2, "the new run's iteration 1 ran");
    assert!(
        env.activity()
            .contains("An earlier run's open question is closed")
    );
}
