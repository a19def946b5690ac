//! `-v` shows where a run's time goes: one `time:` line on stderr for every span as it closes —
//! the start-up steps, each phase of each iteration, each iteration, the run — with its
//! duration; without `-v`, none.

use crate::common::*;

/// The phases of one iteration, in the order they run (`supervisor::Loop::iteration`).
const PHASES: [&str; 6] = [
    "prepare", "attempt", "judge", "verify", "record", "conclude",
];

fn two_iterations(verbose: bool) -> (TestEnv, std::process::Output) {
    let env = TestEnv::new();
    env.write_task(&["s1", "s2"], "");
    env.commit_all("initial");
    let extra: &[&str] = if verbose { &["-v"] } else { &[] };
    let out = env.run_fake("check", extra);
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "the run had two iterations");
    (env, out)
}

/// Where `line` ends with a duration as `-v` writes one (`0.4ms`, `1.234s`, `4m 05s`).
fn has_duration(line: &str) -> bool {
    regex::Regex::new(r": (?:\d+\.\dms|\d+\.\d{3}s|\d+m \d{2}s|\d+h \d{2}m \d{2}s)$")
        .expect("a valid pattern")
        .is_match(line)
}

#[test]
fn every_phase_of_every_iteration_has_its_line() {
    let (env, out) = two_iterations(true);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("time: ")).collect();
    for line in &lines {
        assert!(
            has_duration(line),
            "a line without its duration: {line}\n{err}"
        );
    }
    // Every phase of each iteration, in order, then the iteration itself; the run's line last.
    let mut expected: Vec<String> = Vec::new();
    for n in 1..=2 {
        for phase in PHASES {
            expected.push(format!("time: run › iteration {n} › {phase}: "));
        }
        expected.push(format!("time: run › iteration {n}: "));
    }
    let iterations: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("time: run › iteration "))
        .collect();
    assert_eq!(iterations.len(), expected.len(), "{err}");
    for (line, start) in iterations.iter().zip(&expected) {
        assert!(
            line.starts_with(start.as_str()),
            "{line:?} is not {start:?}\n{err}"
        );
    }
    assert!(
        lines.last().is_some_and(|l| l.starts_with("time: run: ")),
        "{err}"
    );
    insta::assert_snapshot!("two_iterations", screen(&env, &out));
}

/// The control: the same run without `-v` prints no `time:` line, and nothing else on stderr.
#[test]
fn without_v_no_line() {
    let (_env, out) = two_iterations(false);
    let err = stderr(&out);
    assert!(!err.contains("time: "), "{err}");
    assert_eq!(err, "", "a quiet stderr without -v");
}
