//! The roll-up: resolving `coverage-rollup.sh` to an absolute path, its argv (absolute paths
//! too), and the completion lines. Its records are read in [`super::records`].

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
pub(crate) fn resolve_rollup(
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
/// `{rollup} --spec {spec} --verdict` (spec mode), every path absolute under `root`: the
/// script resolves relative paths against `$CLAUDE_PROJECT_DIR` first, which inside Claude
/// Code may name another project.
pub(crate) fn rollup_argv(rollup: &Path, root: &Path, targets: &Targets) -> Vec<String> {
    let root = absolute(root);
    let path = |p: &Path| root.join(p).to_string_lossy().into_owned();
    let mut argv = vec![rollup.to_string_lossy().into_owned()];
    match targets {
        Targets::Epics(paths) => {
            argv.push("--epic".to_string());
            argv.extend(paths.iter().map(|p| path(p)));
        }
        Targets::Spec(spec) => {
            argv.push("--spec".to_string());
            argv.push(path(spec));
        }
    }
    argv.push("--verdict".to_string());
    argv
}

/// The completion lines ralph prints: the promise word alone (`ALL_EPICS_COMPLETE` in epic
/// mode, `SPEC_DELIVERED` in spec mode) and, beside it, a `COVERAGE:` line with the figures
/// ralph counted from the roll-up's records ([`super::Coverage::figures`]) and the skill's
/// caveat that the marks are aggregation, not verification. Counts never go inside the
/// promise.
pub(crate) fn completion_lines(spec_mode: bool, figures: Option<&str>) -> (String, String) {
    let promise = if spec_mode {
        SPEC_PROMISE
    } else {
        EPIC_PROMISE
    };
    let figures = figures
        .map(one_line)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "the roll-up printed no records".to_string());
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
        let root = Path::new("/work/repo");
        let epics = Targets::Epics(vec![
            PathBuf::from("docs/epics/23-epic-a.md"),
            PathBuf::from("docs/epics/24-epic-b.md"),
        ]);
        assert_eq!(
            rollup_argv(rollup, root, &epics),
            [
                "/p/hooks/lib/coverage-rollup.sh",
                "--epic",
                "/work/repo/docs/epics/23-epic-a.md",
                "/work/repo/docs/epics/24-epic-b.md",
                "--verdict"
            ]
        );
        let spec = Targets::Spec(PathBuf::from("docs/specifications/45-spec-x.md"));
        assert_eq!(
            rollup_argv(rollup, root, &spec),
            [
                "/p/hooks/lib/coverage-rollup.sh",
                "--spec",
                "/work/repo/docs/specifications/45-spec-x.md",
                "--verdict"
            ]
        );
        // A relative root comes out absolute.
        let rel = rollup_argv(rollup, Path::new("repo"), &spec);
        assert!(Path::new(&rel[2]).is_absolute(), "{rel:?}");
    }

    #[test]
    fn completion_lines_keep_counts_out_of_the_promise() {
        let figures = "5 of 5 rows marked verified across 1 matrix, 2 of 2 requirements traced";
        let (promise, coverage) = completion_lines(true, Some(figures));
        assert_eq!(promise, "SPEC_DELIVERED");
        assert_eq!(
            coverage,
            format!(
                "COVERAGE: {figures} -- aggregation of the marks cpm:do placed on its own work, \
                 not independent verification"
            )
        );
        let (promise, coverage) = completion_lines(false, Some("8 of 8 rows\nmarked verified"));
        assert_eq!(promise, "ALL_EPICS_COMPLETE");
        assert!(
            coverage.starts_with(
                "COVERAGE: 8 of 8 rows marked verified -- aggregation, not verification"
            ),
            "{coverage}"
        );
        assert!(coverage.contains("cannot say a spec is delivered"));
        let (promise, coverage) = completion_lines(false, None);
        assert!(!promise.chars().any(|c| c.is_ascii_digit()));
        assert!(coverage.starts_with("COVERAGE: the roll-up printed no records"));
    }
}
