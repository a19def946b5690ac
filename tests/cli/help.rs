//! `--help` of ralph and of every subcommand, whole, as snapshots: what a user reads before
//! anything else. The subcommands are the ones `ralph --help` lists, so a new one cannot be
//! left out. Help holds nothing a run decides, so it is not normalised (its defaults, `10s`,
//! are no durations to hide).

use crate::common::*;

/// The subcommands `ralph --help` lists under `Commands:` (but `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// `ralph ARGS`: its help, which it prints to stdout, exiting 0, with nothing on stderr.
fn help(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ralph(args);
    assert_exit(&out, 0);
    assert_eq!(stderr(&out), "", "{args:?}");
    stdout(&out)
}

#[test]
fn help_of_ralph_and_every_subcommand() {
    let env = TestEnv::new();
    let top = help(&env, &["--help"]);
    insta::assert_snapshot!("ralph", top);
    let commands = subcommands(&top);
    assert_eq!(
        commands,
        [
            "init",
            "run",
            "resume",
            "status",
            "merge",
            "watch",
            "serve",
            "completions",
            "ask",
            "answer",
            "hint"
        ],
        "the subcommands as `ralph --help` lists them:\n{top}"
    );
    for c in &commands {
        insta::assert_snapshot!(format!("ralph_{c}"), help(&env, &[c, "--help"]));
        insta::assert_snapshot!(format!("ralph_{c}_short"), help(&env, &[c, "-h"]));
    }
}

/// The headings of a help text, in order: its unindented lines ending in `:`.
fn headings(help: &str) -> Vec<&str> {
    help.lines()
        .filter(|l| l.ends_with(':') && !l.starts_with(' '))
        .collect()
}

/// The section of `help` under `heading`, up to the next heading.
fn section<'a>(help: &'a str, heading: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

/// `run -h` groups its options by what they are about, and its first section (what every run
/// may want) holds none of CPM's, the queue's or the sandbox's; `-h` is one line an option
/// where `--help` says more, so it is the shorter. The control: `--help` holds the long text
/// `-h` leaves out.
#[test]
fn run_help_is_grouped_and_h_is_short() {
    let env = TestEnv::new();
    let short = help(&env, &["run", "-h"]);
    let long = help(&env, &["run", "--help"]);
    for h in [&short, &long] {
        assert_eq!(
            headings(h),
            [
                "Arguments:",
                "Options:",
                "Agent:",
                "Limits:",
                "Judging and tests:",
                "Git:",
                "Sandbox:",
                "Questions:",
                "Output:",
                "CPM epics and specs:",
                "Queue and workers:",
                "Global Options:",
                "Examples:"
            ],
            "{h}"
        );
        let common = section(h, "Options:").join("\n");
        for flag in ["--dry-run", "--reset", "--yes"] {
            assert!(common.contains(flag), "{flag} is common:\n{common}");
        }
        for flag in [
            "--rollup",
            "--story-filter",
            "--from",
            "--sandbox",
            "--agent",
        ] {
            assert!(!common.contains(flag), "{flag} among the common:\n{common}");
        }
        let cpm = section(h, "CPM epics and specs:").join("\n");
        assert!(
            cpm.contains("--rollup") && cpm.contains("--story-filter"),
            "{cpm}"
        );
    }
    let detail = "Reused while its loop is unfinished";
    assert!(long.contains(detail), "--help has the long text:\n{long}");
    assert!(!short.contains(detail), "-h leaves it out:\n{short}");
    assert!(short.lines().count() * 2 < long.lines().count(), "{short}");
}
