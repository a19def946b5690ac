//! The roll-up: resolving `coverage-rollup.sh`, its argv, and reading its `SUMMARY`, `ROW` /
//! `CRITERION` and `TARGET-ONLY` records; the completion lines.

use std::cmp::Ordering;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{EPIC_PROMISE, ROLLUP_REL, SPEC_PROMISE, Targets, one_line};

/// Resolve the roll-up script to an absolute path: `explicit` (`--rollup`) when given — and
/// nothing else then, since falling back would run a script the user did not name; else
/// `{plugin_root}/hooks/lib/coverage-rollup.sh` (`$CLAUDE_PLUGIN_ROOT`; empty means unset);
/// else the Claude plugin cache, `{home}/.claude/plugins/cache/{marketplace}/{plugin}/{version}/`,
/// taking the newest version that has the script. `None` when no candidate is a file.
pub fn resolve_rollup(
    explicit: Option<&Path>,
    plugin_root: Option<&Path>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| absolute(p));
    }
    if let Some(r) = plugin_root.filter(|r| !r.as_os_str().is_empty()) {
        let p = r.join(ROLLUP_REL);
        if p.is_file() {
            return Some(absolute(&p));
        }
    }
    let home = home.filter(|h| !h.as_os_str().is_empty())?;
    newest_cached_rollup(&home.join(".claude/plugins/cache")).map(|p| absolute(&p))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

/// Candidates `cache/{marketplace}/{plugin}/{version}/hooks/lib/coverage-rollup.sh` (and the
/// unversioned `cache/{marketplace}/{plugin}/hooks/lib/...`), best version first.
fn newest_cached_rollup(cache: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<(VersionKey, PathBuf)> = Vec::new();
    for market in subdirs(cache) {
        for plugin in subdirs(&market) {
            let direct = plugin.join(ROLLUP_REL);
            if direct.is_file() {
                candidates.push((VersionKey::of(None, &plugin), direct));
            }
            for version in subdirs(&plugin) {
                let script = version.join(ROLLUP_REL);
                if script.is_file() {
                    let name = version
                        .file_name()
                        .and_then(|n| n.to_str())
                        .map(str::to_string);
                    candidates.push((VersionKey::of(name.as_deref(), &version), script));
                }
            }
        }
    }
    candidates
        .into_iter()
        .max_by(|(ka, pa), (kb, pb)| ka.compare(kb).then_with(|| pb.cmp(pa)))
        .map(|(_, p)| p)
}

/// Orders plugin versions: any parseable dotted version beats an unparseable one (`unknown`,
/// a commit hash); releases beat pre-releases of the same numbers; ties go to the newer
/// directory.
#[derive(Debug)]
struct VersionKey {
    numbers: Option<(Vec<u64>, bool)>,
    modified: Option<SystemTime>,
}

impl VersionKey {
    fn of(name: Option<&str>, dir: &Path) -> VersionKey {
        VersionKey {
            numbers: name.and_then(parse_version),
            modified: fs::metadata(dir).and_then(|m| m.modified()).ok(),
        }
    }
}

impl VersionKey {
    fn compare(&self, other: &Self) -> Ordering {
        let nums = match (&self.numbers, &other.numbers) {
            (Some((a, ra)), Some((b, rb))) => {
                let len = a.len().max(b.len());
                let pad = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
                (0..len)
                    .map(|i| pad(a, i).cmp(&pad(b, i)))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
                    .then(ra.cmp(rb))
            }
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (None, None) => Ordering::Equal,
        };
        nums.then_with(|| self.modified.cmp(&other.modified))
    }
}

/// `1.2.10` → `([1, 2, 10], true)`; `v2.0.0-beta.1` → `([2, 0, 0], false)` (a pre-release).
fn parse_version(name: &str) -> Option<(Vec<u64>, bool)> {
    let name = name.strip_prefix(['v', 'V']).unwrap_or(name);
    // `-` starts a pre-release, `+` only build metadata.
    let (core, release) = match name.find(['-', '+']) {
        Some(i) => (&name[..i], name.as_bytes().get(i) == Some(&b'+')),
        None => (name, true),
    };
    let numbers: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
    numbers.filter(|n| !n.is_empty()).map(|n| (n, release))
}

/// The roll-up argv after an iteration: `{rollup} --epic {paths...} --verdict` (epic mode) or
/// `{rollup} --spec {spec} --verdict` (spec mode). Paths stay relative to the repository
/// root, which the script resolves them against; the caller runs it there.
pub fn rollup_argv(rollup: &Path, targets: &Targets) -> Vec<String> {
    let mut argv = vec![rollup.to_string_lossy().into_owned()];
    match targets {
        Targets::Epics(paths) => {
            argv.push("--epic".to_string());
            argv.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
        }
        Targets::Spec(spec) => {
            argv.push("--spec".to_string());
            argv.push(spec.to_string_lossy().into_owned());
        }
    }
    argv.push("--verdict".to_string());
    argv
}

/// The four counts of a roll-up `SUMMARY` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryCounts {
    /// Requirements counted (excluded ones left out).
    pub requirements: u64,
    /// Requirements no matrix row traces.
    pub untraced: u64,
    /// Requirements whose rows are all verified.
    pub delivered: u64,
    /// Requirements with some rows unverified.
    pub in_progress: u64,
}

/// Parse a `SUMMARY` record: `SUMMARY<TAB>scope<TAB>requirements<TAB>untraced<TAB>delivered<TAB>in-progress`
/// (the scope field may be absent; whitespace separation is accepted too).
pub fn summary_counts(summary: &str) -> Option<SummaryCounts> {
    let mut fields = summary.split_whitespace();
    let first = fields.next()?;
    if first.trim_end_matches(':') != "SUMMARY" {
        return None;
    }
    let rest: Vec<&str> = fields.collect();
    let skip = usize::from(rest.first().is_some_and(|f| f.parse::<u64>().is_err()));
    let nums: Vec<u64> = rest
        .get(skip..)?
        .iter()
        .map_while(|f| f.parse().ok())
        .collect();
    match nums.as_slice() {
        [requirements, untraced, delivered, in_progress, ..] => Some(SummaryCounts {
            requirements: *requirements,
            untraced: *untraced,
            delivered: *delivered,
            in_progress: *in_progress,
        }),
        _ => None,
    }
}

/// The skill's relay of a `SUMMARY` record: `R requirements, U untraced, D delivered, P in
/// progress` (the figures of its `COUNTS:` line), or `None` for anything else.
pub fn counts_text(summary: &str) -> Option<String> {
    summary_counts(summary).map(|c| {
        format!(
            "{} requirements, {} untraced, {} delivered, {} in progress",
            c.requirements, c.untraced, c.delivered, c.in_progress
        )
    })
}

/// The `untraced` count in a summary: the `SUMMARY` record's fourth field, else a named
/// figure (`untraced=N`, `untraced: N`, `N untraced`).
pub fn untraced(summary: &str) -> Option<u64> {
    if let Some(c) = summary_counts(summary) {
        return Some(c.untraced);
    }
    let words: Vec<String> = summary
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '|' | '(' | ')'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    for (i, w) in words.iter().enumerate() {
        if let Some(v) = w
            .strip_prefix("untraced=")
            .or_else(|| w.strip_prefix("untraced:"))
            && let Ok(n) = v.parse()
        {
            return Some(n);
        }
        let next = || words.get(i + 1).and_then(|n| n.parse().ok());
        let prev = || {
            i.checked_sub(1)
                .and_then(|p| words.get(p))
                .and_then(|n| n.parse().ok())
        };
        // `untraced: N` reads forwards; a bare `untraced` prefers `N untraced`.
        let found = match w.as_str() {
            "untraced:" | "untraced=" => next(),
            "untraced" => prev().or_else(next),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The labels of the rows a verdict exit 5 is about: the roll-up's unverified `ROW` and
/// `CRITERION` records whose tags withhold them from this environment (`[target]` and no
/// `[unit]`/`[integration]`/`[feature]`; with a criterion tag present both tags must say so,
/// as the roll-up decides). A verdict command that prints no such records may print
/// `TARGET-ONLY: label` (or `TARGET-ONLY<TAB>label`) lines instead; those are returned,
/// except a `TARGET-ONLY: N rows ...` header.
pub fn target_only_rows(stdout: &str) -> Vec<String> {
    fn target_only(tag: &str) -> bool {
        tag.contains("[target]")
            && !["[unit]", "[integration]", "[feature]"]
                .iter()
                .any(|t| tag.contains(t))
    }
    fn withheld(spec_tag: &str, crit_tag: &str) -> bool {
        if crit_tag.is_empty() {
            target_only(spec_tag)
        } else {
            target_only(spec_tag) && target_only(crit_tag)
        }
    }
    let mut rows = Vec::new();
    let mut saw_records = false;
    for line in stdout.lines() {
        let line = line.trim_end_matches('\r');
        let f: Vec<&str> = line.split('\t').collect();
        let field = |i: usize| f.get(i).copied().unwrap_or("");
        let (label, matrix, verified, tag, crit) = match field(0) {
            "ROW" => (field(3), field(1), field(5), field(6), field(7)),
            "CRITERION" => (field(2), field(1), field(4), field(5), field(6)),
            _ => continue,
        };
        saw_records = true;
        if verified != "verified" && withheld(tag, crit) {
            rows.push(if label.trim().is_empty() {
                format!("(unlabelled row in {matrix})")
            } else {
                label.trim().to_string()
            });
        }
    }
    if saw_records {
        return rows;
    }
    for line in stdout.lines() {
        let Some(rest) = line.trim().strip_prefix("TARGET-ONLY") else {
            continue;
        };
        let rest = rest.trim_start_matches([':', '\t', ' ']).trim();
        let header = rest.split_whitespace().nth(1) == Some("rows")
            && rest
                .split_whitespace()
                .next()
                .is_some_and(|n| n.parse::<u64>().is_ok());
        if !rest.is_empty() && !header {
            rows.push(rest.to_string());
        }
    }
    rows
}

/// The completion lines ralph prints: the promise word alone (`ALL_EPICS_COMPLETE` in epic
/// mode, `SPEC_DELIVERED` in spec mode) and, beside it, a `COVERAGE:` line relaying the
/// summary (a `SUMMARY` record as its four counts; anything else verbatim) with the skill's
/// caveat that the marks are aggregation, not verification. Counts never go inside the
/// promise.
pub fn completion_lines(spec_mode: bool, summary: Option<&str>) -> (String, String) {
    let promise = if spec_mode {
        SPEC_PROMISE
    } else {
        EPIC_PROMISE
    };
    let figures = match summary.map(one_line).filter(|s| !s.is_empty()) {
        Some(s) => counts_text(&s).unwrap_or(s),
        None => "the roll-up printed no summary".to_string(),
    };
    let caveat = if spec_mode {
        "aggregation of the marks cpm:do placed on its own work, not independent verification"
    } else {
        "aggregation, not verification, since every mark was placed by cpm:do on its own work, \
         and it counts rows in these epics, not requirements in a spec, so it cannot say a spec \
         is delivered"
    };
    (
        promise.to_string(),
        format!("COVERAGE: {figures} -- {caveat}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use crate::task::verdict::summary_line;
    use proptest::prelude::*;

    fn make_rollup(dir: &Path) -> PathBuf {
        let p = dir.join(ROLLUP_REL);
        write(dir, ROLLUP_REL, "#!/bin/bash\n");
        p
    }

    #[test]
    fn rollup_resolution_order() -> TestResult {
        let t = repo();
        let base = t.path();
        let explicit = base.join("mine/rollup.sh");
        write(base, "mine/rollup.sh", "#!/bin/bash\n");
        let plugin = base.join("plugin");
        let plugin_script = make_rollup(&plugin);
        let home = base.join("home");
        let cache = home.join(".claude/plugins/cache");
        make_rollup(&cache.join("ninthspace/cpm/1.9.0"));
        let newest = make_rollup(&cache.join("ninthspace/cpm/1.10.0"));
        make_rollup(&cache.join("ninthspace/cpm/1.10.0-beta.1"));
        make_rollup(&cache.join("other/cpm/unknown"));
        fs::create_dir_all(cache.join("ninthspace/cpm/2.0.0"))?; // no script: skipped

        assert_eq!(
            resolve_rollup(Some(&explicit), Some(&plugin), Some(&home)),
            Some(explicit.clone())
        );
        assert_eq!(
            resolve_rollup(Some(&base.join("missing.sh")), Some(&plugin), Some(&home)),
            None,
            "an explicit path that is missing is not replaced by another script"
        );
        assert_eq!(
            resolve_rollup(None, Some(&plugin), Some(&home)),
            Some(plugin_script)
        );
        assert_eq!(
            resolve_rollup(None, Some(&base.join("nowhere")), Some(&home)),
            Some(newest.clone())
        );
        assert_eq!(
            resolve_rollup(None, Some(Path::new("")), Some(&home)),
            Some(newest)
        );
        assert_eq!(resolve_rollup(None, None, Some(&base.join("nohome"))), None);
        assert_eq!(resolve_rollup(None, None, None), None);
        // Unparseable versions only: the newer directory wins.
        let home2 = base.join("home2");
        let c2 = home2.join(".claude/plugins/cache/m/cpm");
        let a = make_rollup(&c2.join("abc123"));
        let b = make_rollup(&c2.join("def456"));
        set_mtime(&a, 1)?;
        fs::File::open(c2.join("abc123"))?.set_modified(SystemTime::UNIX_EPOCH)?;
        fs::File::open(c2.join("def456"))?
            .set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(10))?;
        assert_eq!(resolve_rollup(None, None, Some(&home2)), Some(b));
        // Relative explicit paths come back absolute.
        let rel = resolve_rollup(Some(Path::new("Cargo.toml")), None, None).ok_or("no path")?;
        assert!(rel.is_absolute());
        Ok(())
    }

    #[test]
    fn versions_order() {
        assert!(parse_version("1.10.0") > parse_version("1.9.9"));
        assert_eq!(parse_version("v1.2"), Some((vec![1, 2], true)));
        assert_eq!(parse_version("1.2.0-rc.1"), Some((vec![1, 2, 0], false)));
        assert_eq!(parse_version("1.2.0+build"), Some((vec![1, 2, 0], true)));
        assert_eq!(parse_version("unknown"), None);
    }

    #[test]
    fn rollup_argv_shapes() {
        let rollup = Path::new("/p/hooks/lib/coverage-rollup.sh");
        let epics = Targets::Epics(vec![
            PathBuf::from("docs/epics/23-epic-a.md"),
            PathBuf::from("docs/epics/24-epic-b.md"),
        ]);
        assert_eq!(
            rollup_argv(rollup, &epics),
            [
                "/p/hooks/lib/coverage-rollup.sh",
                "--epic",
                "docs/epics/23-epic-a.md",
                "docs/epics/24-epic-b.md",
                "--verdict"
            ]
        );
        let spec = Targets::Spec(PathBuf::from("docs/specifications/45-spec-x.md"));
        assert_eq!(
            rollup_argv(rollup, &spec),
            [
                "/p/hooks/lib/coverage-rollup.sh",
                "--spec",
                "docs/specifications/45-spec-x.md",
                "--verdict"
            ]
        );
    }

    const ROLLUP_SPEC_OUT: &str = "MATRIX\tdocs/epics/45-01-coverage-a.md\tdocs/specifications/45-spec-x.md\n\
        REQ\tFR1\tMust Have\tthe thing\n\
        STATE\tFR1\tMust Have\tin-progress\n\
        SUMMARY\tspec\t5\t2\t1\t2\n\
        ROW\tdocs/epics/45-01-coverage-a.md\tFR1\tFR1\tStory 1\tunverified\t[unit]\t\n";

    #[test]
    fn summary_line_prefers_the_summary_record() {
        assert_eq!(
            summary_line(ROLLUP_SPEC_OUT).as_deref(),
            Some("SUMMARY\tspec\t5\t2\t1\t2")
        );
        assert_eq!(
            summary_line("ROW\ta\n  12 of 14 rows verified  \n\n\n").as_deref(),
            Some("12 of 14 rows verified")
        );
        assert_eq!(summary_line("SUMMARYX 1\nlast\n").as_deref(), Some("last"));
        assert_eq!(
            summary_line("  SUMMARY: 3 untraced \r\n").as_deref(),
            Some("SUMMARY: 3 untraced")
        );
        assert_eq!(summary_line(""), None);
        assert_eq!(summary_line("\n \n"), None);
    }

    #[test]
    fn untraced_parsing() {
        assert_eq!(untraced("SUMMARY\tspec\t5\t2\t1\t2"), Some(2));
        assert_eq!(untraced("SUMMARY 5 0 5 0"), Some(0));
        assert_eq!(
            untraced("COUNTS: 5 requirements, 3 untraced, 1 delivered, 1 in progress"),
            Some(3)
        );
        assert_eq!(untraced("requirements=5 untraced=4"), Some(4));
        assert_eq!(untraced("Untraced: 7"), Some(7));
        assert_eq!(untraced("untraced 6"), Some(6));
        assert_eq!(untraced("12 of 14 rows verified"), None);
        assert_eq!(untraced("SUMMARY\tspec\tx"), None);
        assert_eq!(
            counts_text("SUMMARY\tspec\t5\t2\t1\t2").as_deref(),
            Some("5 requirements, 2 untraced, 1 delivered, 2 in progress")
        );
    }

    #[test]
    fn target_only_rows_follow_the_rollup_rule() {
        let out = "MATRIX\tm.md\ts.md\n\
            ROW\tm.md\tENV1\tENV1 — production host\tStory 2\tunverified\t[target]\t\n\
            ROW\tm.md\tENV2\tENV2\tStory 2\tunverified\t[target]\t[integration]\n\
            ROW\tm.md\tENV3\tENV3\tStory 3\tverified\t[target]\t\n\
            ROW\tm.md\tENV4\tENV4\tStory 3\tunverified\t[target]\t[target] [manual]\n\
            CRITERION\tm.md\tDeploys to the real host\tStory 4\tunverified\t\t[target]\n\
            CRITERION\tm.md\tUnit thing\tStory 4\tunverified\t[target] [unit]\t\n";
        // ENV2's criterion is checkable here; a criterion with no spec tag is not target-only.
        assert_eq!(target_only_rows(out), ["ENV1 — production host", "ENV4"]);
        assert_eq!(
            target_only_rows(
                "TARGET-ONLY: 2 rows unverifiable in this environment\nTARGET-ONLY: ENV1\nTARGET-ONLY\tENV2\n"
            ),
            ["ENV1", "ENV2"]
        );
        assert!(target_only_rows("").is_empty());
        assert!(target_only_rows("ROW\n\t\t\n").is_empty());
    }

    #[test]
    fn completion_lines_keep_counts_out_of_the_promise() {
        let (promise, coverage) = completion_lines(true, Some("SUMMARY\tspec\t5\t0\t5\t0"));
        assert_eq!(promise, "SPEC_DELIVERED");
        assert_eq!(
            coverage,
            "COVERAGE: 5 requirements, 0 untraced, 5 delivered, 0 in progress -- aggregation of \
             the marks cpm:do placed on its own work, not independent verification"
        );
        let (promise, coverage) = completion_lines(false, Some("14 of 14 rows\nverified"));
        assert_eq!(promise, "ALL_EPICS_COMPLETE");
        assert!(
            coverage
                .starts_with("COVERAGE: 14 of 14 rows verified -- aggregation, not verification")
        );
        assert!(coverage.contains("cannot say a spec is delivered"));
        let (promise, coverage) = completion_lines(false, None);
        assert!(!promise.chars().any(|c| c.is_ascii_digit()));
        assert!(coverage.starts_with("COVERAGE: the roll-up printed no summary"));
    }

    proptest! {
        #[test]
        fn record_readers_never_panic(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*") {
            let _ = summary_line(&text);
            let _ = untraced(&text);
            let _ = summary_counts(&text);
            let _ = target_only_rows(&text);
            let _ = completion_lines(true, Some(&text));
        }
    }
}
