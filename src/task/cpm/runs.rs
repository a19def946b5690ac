//! Earlier runs: the iteration logs `docs/plans/.cpm-ralph-log-*.md` of runs before this one,
//! and this run's log path.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{CpmError, PLANS_DIR, list_dir};
use crate::iter_record::{IterRecord, last_three_repeat, parse_iter_record};

/// What an earlier run's iteration log shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EarlierRun {
    /// The log, relative to the root (`docs/plans/.cpm-ralph-log-{id}.md`).
    pub(crate) path: PathBuf,
    /// How many `ITER` records it holds.
    pub(crate) iterations: usize,
    /// The last `ITER` line, verbatim (trimmed).
    pub(crate) last_record: Option<String>,
    /// The last record, parsed.
    pub(crate) last: Option<IterRecord>,
    /// The last three records repeat: the run stalled rather than finished.
    pub(crate) repeats: bool,
    /// The log's modification time, when known.
    pub(crate) modified: Option<SystemTime>,
}

impl EarlierRun {
    /// One human line: path, iterations, last record, and the stall when there is one.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "{}: {} iteration{}",
            self.path.display(),
            self.iterations,
            if self.iterations == 1 { "" } else { "s" }
        );
        if let Some(last) = &self.last {
            let _ = write!(
                s,
                "; last: {} (exit {}) at {}, tree {}",
                last.figures, last.exit, last.commit, last.fingerprint
            );
        }
        if self.repeats {
            s.push_str("; its last three records repeat -- it stalled rather than finished");
        }
        s
    }
}

/// The earlier runs' iteration logs, `docs/plans/.cpm-ralph-log-*.md`, newest first (by
/// modification time, then name). Lines are read one at a time, so a huge log costs no
/// memory; lines that are not `ITER` records are ignored.
pub(crate) fn earlier_runs(root: &Path) -> Result<Vec<EarlierRun>, CpmError> {
    let plans = Path::new(PLANS_DIR);
    let mut runs = Vec::new();
    for name in list_dir(root, plans)? {
        if !(name.starts_with(".cpm-ralph-log-") && name.ends_with(".md")) {
            continue;
        }
        let rel = plans.join(&name);
        let full = root.join(&rel);
        if !full.is_file() {
            continue;
        }
        let read_err = |source| CpmError::Read {
            path: rel.clone(),
            source,
        };
        let file = fs::File::open(&full).map_err(read_err)?;
        let modified = file.metadata().ok().and_then(|m| m.modified().ok());
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut iterations = 0usize;
        let mut tail: Vec<IterRecord> = Vec::with_capacity(4);
        let mut last_record = None;
        loop {
            buf.clear();
            let read = reader
                .read_until(b'\n', &mut buf)
                .map_err(|source| CpmError::Read {
                    path: rel.clone(),
                    source,
                })?;
            if read == 0 {
                break;
            }
            let line = String::from_utf8_lossy(&buf);
            if let Some(rec) = parse_iter_record(&line) {
                iterations += 1;
                last_record = Some(line.trim().to_string());
                if tail.len() == 3 {
                    tail.remove(0);
                }
                tail.push(rec);
            }
        }
        runs.push(EarlierRun {
            path: rel,
            iterations,
            last_record,
            repeats: last_three_repeat(&tail),
            last: tail.pop(),
            modified,
        });
    }
    runs.sort_by(|a, b| {
        b.modified
            .cmp(&a.modified)
            .then_with(|| b.path.cmp(&a.path))
    });
    Ok(runs)
}

/// The CPM iteration-log path for a run: `docs/plans/.cpm-ralph-log-{run_id}.md` (characters
/// other than letters, digits, `.`, `_` and `-` in the id become `_`, so it stays one file
/// name).
pub(crate) fn log_path(run_id: &str) -> PathBuf {
    let id: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    Path::new(PLANS_DIR).join(format!(".cpm-ralph-log-{id}.md"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use proptest::prelude::*;

    #[test]
    fn earlier_runs_newest_first_with_repeat_detection() -> TestResult {
        let root = repo();
        let r = root.path();
        assert!(earlier_runs(r)?.is_empty());
        write(
            r,
            "docs/plans/.cpm-ralph-log-old.md",
            "ITER 1 | SUMMARY\tspec\t3\t3\t0\t0 | exit 4 | no-commit | 4294967295 0\n\
             ITER 2 | SUMMARY\tspec\t3\t0\t0\t3 | exit 3 | abc1234 | 111 22\n\
             ITER 3 | SUMMARY\tspec\t3\t0\t0\t3 | exit 3 | abc1234 | 111 22\n\
             ITER 4 | SUMMARY\tspec\t3\t0\t0\t3 | exit 3 | abc1234 | 111 22\n",
        );
        write(
            r,
            "docs/plans/.cpm-ralph-log-new.md",
            "a stray line\n\
             ITER 1 | 1/3 rows | exit 3 | abc1234 | 111 22\n\
             ITER 2 | 1/3 rows | exit 3 | abc1234 | 111 22\n\
             ITER 3 | 1/3 rows | exit 3 | abc1234 | 999 22\n",
        );
        write(
            r,
            "docs/plans/.cpm-progress.md",
            "ITER 1 | x | exit 0 | a | b\n",
        );
        set_mtime(&r.join("docs/plans/.cpm-ralph-log-old.md"), 1_000)?;
        set_mtime(&r.join("docs/plans/.cpm-ralph-log-new.md"), 2_000)?;
        let runs = earlier_runs(r)?;
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0].path,
            PathBuf::from("docs/plans/.cpm-ralph-log-new.md")
        );
        assert_eq!(runs[0].iterations, 3);
        assert!(!runs[0].repeats, "the tree moved");
        assert_eq!(
            runs[0].last_record.as_deref(),
            Some("ITER 3 | 1/3 rows | exit 3 | abc1234 | 999 22")
        );
        assert_eq!(runs[1].iterations, 4);
        assert!(runs[1].repeats);
        let last = runs[1].last.clone().ok_or("no last record")?;
        assert_eq!(last.iteration, Some(4));
        assert_eq!(last.figures, "SUMMARY\tspec\t3\t0\t0\t3");
        assert_eq!((last.exit.as_str(), last.commit.as_str()), ("3", "abc1234"));
        assert_eq!(last.fingerprint, "111 22");
        assert!(
            runs[1].describe().contains("4 iterations") && runs[1].describe().contains("stalled")
        );
        Ok(())
    }

    #[test]
    fn iter_records_parse_from_both_ends() {
        let r = parse_iter_record("ITER 7 | a | b | exit 1 | no-commit | 1 0").expect("record");
        assert_eq!(r.figures, "a | b");
        assert_eq!(r.iteration, Some(7));
        assert_eq!(parse_iter_record("ITER 1 | only | three"), None);
        assert_eq!(parse_iter_record("nope"), None);
        assert!(!last_three_repeat(&[]));
    }

    #[test]
    fn log_path_is_one_dot_file_under_plans() {
        assert_eq!(
            log_path("20260101-120000-ab12"),
            PathBuf::from("docs/plans/.cpm-ralph-log-20260101-120000-ab12.md")
        );
        assert_eq!(
            log_path("../x y"),
            PathBuf::from("docs/plans/.cpm-ralph-log-.._x_y.md")
        );
    }

    proptest! {
        #[test]
        fn iter_records_never_panic(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*") {
            let _ = parse_iter_record(&text);
        }
    }
}
