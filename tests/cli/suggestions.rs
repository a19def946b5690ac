//! Typos a newcomer makes, answered with the word they meant: an unknown frontmatter key, an
//! unknown key in `.ralph/config.toml` or the user's config, `--agent claud`, a subcommand; and
//! a YAML error told at the line it is on. Each with a control: a word that is no typo of
//! ralph's gets no suggestion.

use crate::common::*;

/// `run --dry-run` with the fake agent: resolves the task and the configuration, spawns nothing.
fn dry_run(env: &TestEnv, extra: &[&str]) -> std::process::Output {
    let agent = fake_agent_cmd();
    let mut args = vec!["run", "--dry-run", "--agent-cmd", &agent];
    args.extend_from_slice(extra);
    env.ralph(&args)
}

/// `max_iteratons: 2` is warned about at its line with "did you mean `max_iterations`?";
/// another tool's key (`completion_criteria`) is warned about without a suggestion.
#[test]
fn a_misspelt_frontmatter_key_gets_did_you_mean() {
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: t\nmax_iteratons: 2\ncompletion_criteria: [a]\n---\n## Success Criteria\n- [ ] a\n",
    );
    env.commit_all("initial");
    let out = dry_run(&env, &[]);
    assert_exit(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains(
            "RALPH_TASK.md:3: frontmatter key `max_iteratons` is not ralph's: ignored; did you mean `max_iterations`?"
        ),
        "{err}"
    );
    let other = err
        .lines()
        .find(|l| l.contains("RALPH_TASK.md:4: frontmatter key `completion_criteria`"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(!other.contains("did you mean"), "{other}");
}

/// An unknown key in the repository's `.ralph/config.toml` (and in `[hooks]`) and in the
/// user's `~/.config/ralph/config.toml` is refused at its file and line, with the key meant;
/// a key near none of ralph's keeps serde's list of the keys there are.
#[test]
fn a_misspelt_config_key_gets_did_you_mean() {
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    env.commit_all("initial");
    let cases = [
        (
            "max_iteratons = 5\n",
            1,
            "unknown field `max_iteratons`; did you mean `max_iterations`?",
        ),
        (
            "[hooks]\non_hlat = \"x\"\n",
            2,
            "unknown field `on_hlat`; did you mean `on_halt`?",
        ),
    ];
    for (text, line, said) in cases {
        env.write(".ralph/config.toml", text);
        let out = dry_run(&env, &[]);
        assert_exit(&out, 1);
        let want = format!(".ralph/config.toml:{line}: invalid configuration: {said}");
        assert!(stderr(&out).contains(&want), "{want}\n{}", stderr(&out));
    }
    std::fs::remove_file(env.repo.join(".ralph/config.toml")).unwrap();

    let user = env.home.join(".config/ralph/config.toml");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    std::fs::write(&user, "agent = \"claude\"\ntest_comand = \"true\"\n").unwrap();
    let out = dry_run(&env, &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(".config/ralph/config.toml:2: invalid configuration: unknown field `test_comand`; did you mean `test_command`?"),
        "{err}"
    );

    std::fs::write(&user, "bogus = 1\n").unwrap();
    let out = dry_run(&env, &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("unknown field `bogus`, expected one of `agent`")
            && !err.contains("did you mean"),
        "{err}"
    );
}

/// `--agent claud` (run and init) names `claude`; `--agent cursor`, no preset's typo, only
/// lists the presets.
#[test]
fn a_misspelt_agent_gets_did_you_mean() {
    let env = TestEnv::new();
    env.write_task(&["a"], "");
    env.commit_all("initial");
    let out = env.ralph(&["run", "--dry-run", "--agent", "claud"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("error: unknown agent `claud`; did you mean `claude`?"),
        "{}",
        stderr(&out)
    );
    let out = env.ralph(&["run", "--dry-run", "--agent", "cursor"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("unknown agent `cursor`") && !err.contains("did you mean"),
        "{err}"
    );
    assert!(err.contains("hint: use one of copilot, claude"), "{err}");

    let fresh = TestEnv::new();
    let out = fresh.ralph(&["init", "t", "--criterion", "c", "--agent", "gemnii"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("unknown agent `gemnii`; did you mean `gemini`?"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.repo.join("RALPH_TASK.md").exists());
}

/// clap's own suggestions are on: `ralph rum` names `run`, `run --max-iteratons` names
/// `--max-iterations`; `ralph zzz` gets no tip.
#[test]
fn a_misspelt_subcommand_or_flag_gets_clap_s_tip() {
    let env = TestEnv::new();
    let out = env.ralph(&["rum"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("tip: some similar subcommands exist: 'run'"),
        "{}",
        stderr(&out)
    );
    let out = env.ralph(&["run", "--max-iteratons", "3"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("tip: a similar argument exists: '--max-iterations'"),
        "{}",
        stderr(&out)
    );
    let out = env.ralph(&["zzz"]);
    assert_exit(&out, 2);
    assert!(!stderr(&out).contains("tip:"), "{}", stderr(&out));
}

/// A quote left open is reported at the line where it opens (file line 2 here, the value of
/// `task`), not where the parser noticed (line 3, the next key, or the closing fence); a quote
/// closed on its line and one escaped inside it are no such error.
#[test]
fn an_unclosed_quote_is_reported_where_it_opens() {
    let cases = [
        (
            "task: \"unclosed\nmax_iterations: 5\n",
            "RALPH_TASK.md:2: invalid frontmatter: task: the quote opened on this line is never closed",
        ),
        (
            "task: \"unclosed\n",
            "RALPH_TASK.md:2: invalid frontmatter: task: the quote opened on this line is never closed",
        ),
        (
            "task: t\nagent: 'it''s\ntimeout: 5m\n",
            "RALPH_TASK.md:3: invalid frontmatter: agent: the quote opened on this line is never closed",
        ),
        (
            "task: \"t\"\ntest_command: \"a \\\" b\nagent: claude\n",
            "RALPH_TASK.md:3: invalid frontmatter: test_command: the quote opened on this line is never closed",
        ),
    ];
    for (yaml, want) in cases {
        let env = TestEnv::new();
        env.write(
            "RALPH_TASK.md",
            &format!("---\n{yaml}---\n## Success Criteria\n- [ ] a\n"),
        );
        env.commit_all("initial");
        let out = dry_run(&env, &[]);
        assert_exit(&out, 1);
        assert!(
            stderr(&out).contains(want),
            "{yaml}\n{want}\n{}",
            stderr(&out)
        );
    }
    // Control: closed quotes, an escaped quote and a doubled single quote inside them.
    let env = TestEnv::new();
    env.write(
        "RALPH_TASK.md",
        "---\ntask: \"say \\\"hi\\\"\"\ntest_command: 'it''s true'\n---\n## Success Criteria\n- [ ] a\n",
    );
    env.commit_all("initial");
    let out = dry_run(&env, &[]);
    assert_exit(&out, 0);
    let said = stdout(&out);
    assert!(
        said.contains("it's true") && said.contains(r#"say "hi""#),
        "{said}"
    );
}
