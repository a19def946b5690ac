//! Malformed input (SPEC §3.1): exit 1, an `error:` line naming the file (and line), no panic,
//! nothing spawned.

use crate::common::*;

/// Run with the fake agent and check the failure shape.
#[track_caller]
fn refuses(env: &TestEnv, needles: &[&str]) -> String {
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} missing from\n{err}");
    }
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(!env.agent_ran(1), "the agent was spawned");
    err
}

#[test]
fn missing_task_file() {
    let env = TestEnv::new();
    let err = refuses(&env, &["RALPH_TASK.md"]);
    assert!(
        err.contains("hint: ") && err.contains("ralph init"),
        "{err}"
    );
}

#[test]
fn missing_explicit_task_file() {
    let env = TestEnv::new();
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph(&["run", "tasks/nope.md", "--agent-cmd", &agent]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("nope.md"), "{}", stderr(&out));
}

#[test]
fn bad_frontmatter_names_the_line() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\nmax_iterations: [1, 2\n---\n## Success Criteria\n- [ ] a\n",
    );
    refuses(&env, &["RALPH_TASK.md:"]);
}

#[test]
fn unterminated_frontmatter() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n## Success Criteria\n- [ ] a\n",
    );
    refuses(&env, &["RALPH_TASK.md:1:"]);
}

#[test]
fn frontmatter_without_task() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\nmax_iterations: 3\n---\n## Success Criteria\n- [ ] a\n",
    );
    refuses(&env, &["RALPH_TASK.md:1:", "task"]);
}

#[test]
fn non_numeric_max_iterations() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\nmax_iterations: fifty\n---\n## Success Criteria\n- [ ] a\n",
    );
    refuses(&env, &["RALPH_TASK.md:3:", "max_iterations"]);
}

#[test]
fn no_criteria() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n---\n## Success Criteria\nnothing here\n",
    );
    let err = refuses(&env, &["RALPH_TASK.md", "- [ ]"]);
    assert!(err.contains("hint: "), "{err}");
}

#[test]
fn criteria_only_inside_code() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\n---\n## Success Criteria\n```\n- [ ] not a criterion\n```\n\n    - [ ] nor this\n",
    );
    refuses(&env, &["RALPH_TASK.md", "no criteria"]);
}

#[test]
fn binary_content() {
    let env = TestEnv::new();
    std::fs::write(
        env.repo.join("RALPH_TASK.md"),
        b"---\ntask: t\n---\n- [ ] a\n\x00\xff\xfe\n",
    )
    .unwrap();
    refuses(&env, &["RALPH_TASK.md:5:"]);
}

#[test]
fn not_a_git_repository() {
    let env = TestEnv::new();
    let dir = env.plain_dir();
    std::fs::write(
        dir.join("RALPH_TASK.md"),
        "---\ntask: t\n---\n## Success Criteria\n- [ ] a\n",
    )
    .unwrap();
    let agent = format!("'{}'", fake_agent().display());
    let out = env.ralph(&["-C", dir.to_str().unwrap(), "run", "--agent-cmd", &agent]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("Git required. Run git init first."),
        "{}",
        stderr(&out)
    );
    assert!(!env.agent_ran(1));
}

#[test]
fn agent_not_found_has_install_hint() {
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    // A PATH without any claude the developer may have installed (git is in /usr/bin).
    let out = env.ralph_with_limit(
        &["run", "--agent", "claude"],
        &[("PATH", "/usr/bin:/bin")],
        std::time::Duration::from_secs(30),
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("error: agent `claude` not found on PATH"),
        "{err}"
    );
    assert!(
        err.contains("hint: install it with `npm install -g @anthropic-ai/claude-code`"),
        "{err}"
    );
    let out = env.ralph(&["run", "--agent-cmd", "/nonexistent/agent {prompt}"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("/nonexistent/agent"));
}

#[test]
fn unknown_config_key_names_file_and_key() {
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    env.write(
        ".ralph/config.toml",
        "max_iterations = 3\nmax_iteratons = 4\n",
    );
    let err = refuses(&env, &["config.toml:2:", "max_iteratons"]);
    assert!(err.contains("error: "), "{err}");
}

#[test]
fn usage_errors_exit_two() {
    let env = TestEnv::new();
    let out = env.ralph(&["run", "--max-iterations", "zero"]);
    assert_exit(&out, 2);
    let out = env.ralph(&["run", "a.md", "b.md"]);
    assert_exit(&out, 2);
}

#[test]
fn huge_task_file_with_crlf_and_bom_works() {
    let env = TestEnv::new();
    let mut text = String::from(
        "\u{feff}---\r\ntask: big\r\n---\r\n# Task: big\r\n\r\n## Success Criteria\r\n",
    );
    // Just under the 1 MiB a task file may hold.
    for i in 0..33_000 {
        text.push_str(&format!("- [ ] criterion number {i}  \r\n"));
    }
    assert!(
        text.len() < 1024 * 1024 && text.len() > 1000 * 1000,
        "{}",
        text.len()
    );
    env.write("RALPH_TASK.md", &text);
    env.commit_all("big task");
    let out = env.run_fake("check", &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    assert!(
        stdout(&out).contains("1/33000 criteria"),
        "{}",
        stdout(&out)
    );
    assert!(env.iter_records()[0].starts_with("ITER 1 | 1/33000 criteria | exit 0 |"));
}

/// A task file over 1 MiB is refused at once with an error naming it (SPEC §3.1), never read
/// whole.
#[test]
fn a_task_file_over_one_mib_is_refused_naming_it() {
    let env = TestEnv::new();
    let mut text = String::from("---\ntask: big\n---\n## Success Criteria\n");
    while text.len() <= 1024 * 1024 {
        text.push_str("- [ ] one more criterion that makes the file larger\n");
    }
    env.write("RALPH_TASK.md", &text);
    env.commit_all("too big");
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("RALPH_TASK.md") && stderr(&out).contains("larger than 1024 KiB"),
        "{}",
        stderr(&out)
    );
    assert!(!env.agent_ran(1));
}

#[test]
fn garbled_task_file_after_an_iteration_keeps_the_work() {
    let env = TestEnv::new();
    env.write_task(&["a", "b"], "");
    env.commit_all("initial");
    let out = env.run_fake("check+garble", &[]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("RALPH_TASK.md:"), "{}", stderr(&out));
    assert!(
        env.commits()[0].starts_with("ralph: iteration 1"),
        "{:?}",
        env.commits()
    );
}
