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
fn every_help_has_examples() {
    let env = TestEnv::new();
    for args in [
        vec!["--help"],
        vec!["init", "--help"],
        vec!["run", "--help"],
        vec!["status", "--help"],
    ] {
        let out = env.ralph(&args);
        assert_exit(&out, 0);
        assert!(
            stdout(&out).contains("Examples:"),
            "{args:?}: {}",
            stdout(&out)
        );
    }
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
