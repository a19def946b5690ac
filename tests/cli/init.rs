//! `ralph init`: the scaffold `ralph run` accepts, refusal to overwrite, help with examples.

use crate::common::*;

#[test]
fn init_writes_a_task_that_run_accepts() {
    let env = TestEnv::new();
    let out = env.ralph(&[
        "init",
        "Add a greeting",
        "--criterion",
        "hello.txt exists",
        "--criterion",
        "it says \"hello\"",
        "--test-command",
        "test -f hello.txt",
    ]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(
        so.contains("RALPH_TASK.md") && so.contains("ralph run"),
        "{so}"
    );
    let task = env.read("RALPH_TASK.md");
    assert!(task.starts_with("---\ntask: \"Add a greeting\"\ntest_command: \"test -f hello.txt\"\nmax_iterations: 50\n---\n"), "{task}");
    assert!(task.contains("# Task: Add a greeting"));
    assert!(
        task.contains("## Success Criteria\n\n- [ ] hello.txt exists\n- [ ] it says \"hello\"\n"),
        "{task}"
    );
    for f in ["progress.md", "guardrails.md", "activity.log", ".gitignore"] {
        assert!(env.repo.join(".ralph").join(f).exists(), "{f} missing");
    }
    let out = env.ralph(&["run", "--dry-run", "--agent-cmd", "true"]);
    assert_exit(&out, 0);
    let so = stdout(&out);
    assert!(
        so.contains("0/2 criteria") && so.contains("test command: test -f hello.txt"),
        "{so}"
    );
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let env = TestEnv::new();
    assert_exit(&env.ralph(&["init", "one", "--criterion", "a"]), 0);
    let out = env.ralph(&["init", "two", "--criterion", "b"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("already exists") && stderr(&out).contains("--force"));
    assert!(env.read("RALPH_TASK.md").contains("one"));
    assert_exit(
        &env.ralph(&["init", "two", "--criterion", "b", "--force"]),
        0,
    );
    assert!(env.read("RALPH_TASK.md").contains("# Task: two"));
}

#[test]
fn init_without_description_never_blocks() {
    let env = TestEnv::new();
    let out = env.ralph(&["init"]);
    assert_exit(&out, 0);
    assert!(env.read("RALPH_TASK.md").contains("EXAMPLE"));
}

#[test]
fn init_needs_a_repository() {
    let env = TestEnv::new();
    let dir = env.plain_dir();
    let out = env.ralph(&["-C", dir.to_str().unwrap(), "init", "x"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("Git required. Run git init first."));
}

#[test]
fn no_colour_codes_when_not_a_terminal_or_with_no_color() {
    let env = TestEnv::new();
    let out = env.ralph(&["run"]);
    assert_exit(&out, 1);
    assert!(!stderr(&out).contains('\x1b'), "{:?}", stderr(&out));
    // Forced colour works, and NO_COLOR does not break anything.
    let out = env.ralph(&["--color", "always", "run"]);
    assert!(stderr(&out).contains('\x1b'));
    let out = env.ralph_with_limit(
        &["--color", "auto", "run"],
        &[("NO_COLOR", "1")],
        std::time::Duration::from_secs(20),
    );
    assert!(!stderr(&out).contains('\x1b'));
}

fn init_plan(env: &TestEnv, script: &str, extra: &[&str]) -> std::process::Output {
    let agent = format!("'{}'", fake_agent().display());
    let mut args = vec!["init", "Add rate limiting", "--plan", "--agent-cmd", &agent];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[("FAKE_AGENT_SCRIPT", script)],
        std::time::Duration::from_secs(60),
    )
}

#[test]
fn init_plan_lets_the_agent_write_the_criteria_then_validates_them() {
    let env = TestEnv::new();
    let out = init_plan(&env, "plan-criteria:3", &[]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("planned 3 criteria"),
        "{}",
        stdout(&out)
    );
    let task = env.read("RALPH_TASK.md");
    assert!(
        task.contains("# Task: Add rate limiting") && task.contains("- [ ] planned criterion 3"),
        "{task}"
    );
    assert!(!task.contains("EXAMPLE"));
    assert!(env.agent_prompt(1).contains("Add rate limiting"));
}

#[test]
fn init_plan_reports_an_agent_that_wrote_no_criteria() {
    let env = TestEnv::new();
    let out = init_plan(&env, "idle", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("RALPH_TASK.md") && err.contains("no criteria"),
        "{err}"
    );
    assert!(err.contains("hint: the planning transcript is"), "{err}");
}

/// `init --plan` with an agent that is not installed (issue 30): exit 1 naming the agent, how
/// to install it and `--agent-cmd`, and nothing written — no task file without criteria, no
/// `.ralph/`, no PRD — in checklist and table mode alike. The control: the same command with an
/// agent that is there writes the files (`init_plan_lets_the_agent_write_the_criteria…`,
/// `init_plan_with_table_writes_a_valid_prd`).
#[test]
fn init_plan_with_a_missing_agent_writes_nothing() {
    for extra in [&[][..], &["--table"][..]] {
        let env = TestEnv::new();
        let before = env.git(&["status", "--porcelain", "--ignored"]);
        let mut args = vec!["init", "Add rate limiting", "--plan", "--agent", "claude"];
        args.extend_from_slice(extra);
        let out = env.ralph_with_limit(
            &args,
            &[("PATH", "/usr/bin:/bin")],
            std::time::Duration::from_secs(30),
        );
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(err.contains("agent `claude` not found on PATH"), "{err}");
        assert!(
            err.contains("install it with `npm install -g @anthropic-ai/claude-code`")
                && err.contains("--agent-cmd"),
            "{err}"
        );
        assert!(!stdout(&out).contains("wrote"), "{}", stdout(&out));
        assert_eq!(
            env.git(&["status", "--porcelain", "--ignored"]),
            before,
            "{extra:?}: nothing left in the repository"
        );
        for f in ["RALPH_TASK.md", ".ralph", "PRD.md", "PROGRESS.md"] {
            assert!(!env.repo.join(f).exists(), "{extra:?}: {f} was written");
        }
    }
}

#[test]
fn init_plan_with_table_writes_a_valid_prd() {
    let env = TestEnv::new();
    let out = init_plan(&env, "write-table:2", &["--table", "--force"]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("planned 2 tasks"), "{}", stdout(&out));
    assert!(env.read("PRD.md").contains("### Task 2: Step 2"));
}

#[test]
fn an_empty_criterion_is_refused_never_lost() {
    let env = TestEnv::new();
    let out = env.ralph(&[
        "init",
        "Add a thing",
        "--criterion",
        "real",
        "--criterion",
        "  ",
    ]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("--criterion number 2 is empty"),
        "{}",
        stderr(&out)
    );
    assert!(!env.repo.join("RALPH_TASK.md").exists());
    // The control: with text, both are criteria.
    let out = env.ralph(&[
        "init",
        "Add a thing",
        "--criterion",
        "real",
        "--criterion",
        "two",
    ]);
    assert_exit(&out, 0);
    assert_eq!(env.read("RALPH_TASK.md").matches("- [ ] ").count(), 2);
}

/// The `file:line` an error starts with, and the hint's backquoted `ralph …` command.
fn refusal(o: &std::process::Output) -> (String, String) {
    let err = stderr(o);
    let first = err.lines().next().unwrap_or_default();
    let at = first
        .strip_prefix("error: ")
        .and_then(|l| l.split(": ").next())
        .unwrap_or_default()
        .to_string();
    let hint = err
        .lines()
        .find(|l| l.starts_with("hint:"))
        .and_then(|l| {
            l.split('`')
                .skip(1)
                .step_by(2)
                .find(|c| c.starts_with("ralph "))
        })
        .unwrap_or_else(|| panic!("no command in the hint: {err}"))
        .to_string();
    (at, hint)
}

/// The line `at` (`file:line`) names, in the repository.
fn line_at(env: &TestEnv, at: &str) -> String {
    let (file, line) = at.rsplit_once(':').expect("file:line");
    let n: usize = line.parse().expect("a line number");
    env.read(file)
        .lines()
        .nth(n - 1)
        .unwrap_or_default()
        .to_string()
}

/// Run a hint's command as printed, `ralph` replaced by the binary under test.
fn as_printed(env: &TestEnv, command: &str) -> std::process::Output {
    let words = shell_words::split(command).unwrap();
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    env.ralph(&args)
}

/// `ralph init` without `--criterion` writes example criteria; `ralph run` refuses them before
/// iteration 1 (exit 1, no agent run, no commit), naming the first one's `file:line`; the
/// hint's `ralph init --force --criterion …`, run as printed, writes a task the run completes.
/// Failed before: the agent worked on "EXAMPLE — replace me" and the run completed.
#[test]
fn a_run_refuses_inits_example_criteria_before_iteration_1() {
    let env = TestEnv::new();
    assert_exit(&env.ralph(&["init"]), 0);
    env.commit_all("initial");
    let commits = env.commits().len();
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    assert!(!env.agent_ran(1), "no agent worked on an example");
    assert_eq!(env.commits().len(), commits);
    let (at, hint) = refusal(&out);
    assert!(at.starts_with("RALPH_TASK.md:"), "{}", stderr(&out));
    assert!(
        line_at(&env, &at).starts_with("- [ ] EXAMPLE — replace me"),
        "{at}"
    );
    assert!(hint.starts_with("ralph init --force --criterion"), "{hint}");
    assert_exit(&as_printed(&env, &hint), 0);
    assert_exit(&env.run_fake("check", &[]), 0);
    assert!(env.agent_ran(1));
}

/// The same for `ralph init --table` without tasks: its one criterion is an example, refused
/// naming `PRD.md:line`; the hint's `ralph init --table --force … --criterion …`, as printed,
/// scaffolds a table the run completes. Control: a table scaffolded with its tasks runs.
/// Failed before: the agent worked on the example.
#[test]
fn a_table_run_refuses_inits_example_criterion_before_iteration_1() {
    let env = TestEnv::new();
    assert_exit(&env.ralph(&["init", "--table"]), 0);
    env.commit_all("initial");
    let out = env.run_fake("done-task", &[]);
    assert_exit(&out, 1);
    assert!(!env.agent_ran(1), "no agent worked on an example");
    let (at, hint) = refusal(&out);
    assert!(at.starts_with("PRD.md:"), "{}", stderr(&out));
    assert!(
        line_at(&env, &at).starts_with("- [ ] EXAMPLE — replace me"),
        "{at}"
    );
    assert!(hint.starts_with("ralph init --table --force"), "{hint}");
    assert_exit(&as_printed(&env, &hint), 0);
    env.commit_all("the table with its tasks");
    assert_exit(&env.run_fake("done-task", &[]), 0);
    assert!(env.agent_ran(1));
}
