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
        ["init", "run", "resume", "status", "merge", "watch"],
        "the subcommands as `ralph --help` lists them:\n{top}"
    );
    for c in &commands {
        insta::assert_snapshot!(format!("ralph_{c}"), help(&env, &[c, "--help"]));
    }
}
