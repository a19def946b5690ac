//! `ralph run` targets in CPM form: epic paths and globs, `NN..MM` ranges, one spec, or
//! auto-discovery, resolved to a fixed, filename-ordered path list at launch.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use super::epics::{epic_files, incomplete_epics, is_epic_file_name};
use super::{CpmError, EPICS_DIR, SPECS_DIR, leading_number, list_dir};

/// What a CPM-mode `ralph run` works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Targets {
    /// Epic mode: epic doc paths (relative to the root), in file-name order. Maybe empty
    /// (auto-discovery found nothing runnable).
    Epics(Vec<PathBuf>),
    /// Spec mode: the spec path, relative to the root.
    Spec(PathBuf),
}

impl Targets {
    /// True in spec mode.
    pub(crate) fn is_spec(&self) -> bool {
        matches!(self, Targets::Spec(_))
    }
}

/// One classified argument.
enum Arg<'a> {
    Range(&'a str, u32, u32),
    Epic(&'a str, PathBuf),
    Spec(&'a str, PathBuf),
}

/// Resolve `ralph run` targets in CPM form.
///
/// Arguments are epic paths (globs in the file name are expanded), ranges `NN..MM` (the
/// existing epic files whose leading number is in range, inclusive), or exactly one spec path
/// under `docs/specifications/`. Relative paths are taken against `root`; absolute ones must
/// lie inside it. Usage errors (a non-target, a malformed or reversed range, two specs, a
/// spec mixed with epics) are reported before anything is read, naming the arguments as
/// typed. Epic lists are deduplicated and sorted by file name; an explicitly named epic is
/// kept whatever its status. No arguments: auto-discovery, the incomplete epics (maybe none).
pub(crate) fn resolve_targets(root: &Path, args: &[String]) -> Result<Targets, CpmError> {
    if args.is_empty() {
        return Ok(Targets::Epics(
            incomplete_epics(root)?
                .into_iter()
                .map(|e| e.path)
                .collect(),
        ));
    }
    let mut classified = Vec::with_capacity(args.len());
    for arg in args {
        classified.push(classify(root, arg)?);
    }
    let specs: Vec<&Arg> = classified
        .iter()
        .filter(|a| matches!(a, Arg::Spec(..)))
        .collect();
    if let [Arg::Spec(first, _), Arg::Spec(second, _), ..] = specs.as_slice() {
        return Err(CpmError::TwoSpecs {
            first: (*first).to_string(),
            second: (*second).to_string(),
        });
    }
    if let Some(Arg::Spec(spec, path)) = specs.first() {
        let epics: Vec<String> = classified
            .iter()
            .filter_map(|a| match a {
                Arg::Range(s, ..) | Arg::Epic(s, _) => Some((*s).to_string()),
                Arg::Spec(..) => None,
            })
            .collect();
        if !epics.is_empty() {
            return Err(CpmError::SpecWithEpics {
                spec: (*spec).to_string(),
                epics,
            });
        }
        let full = root.join(path);
        if full.is_dir() {
            return Err(CpmError::TargetIsDirectory { path: path.clone() });
        }
        if !full.is_file() {
            return Err(CpmError::SpecNotFound { path: path.clone() });
        }
        return Ok(Targets::Spec(path.clone()));
    }

    let mut out: Vec<PathBuf> = Vec::new();
    for arg in &classified {
        match arg {
            Arg::Range(text, lo, hi) => {
                let matched: Vec<PathBuf> = epic_files(root)?
                    .into_iter()
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .and_then(leading_number)
                            .is_some_and(|n| (*lo..=*hi).contains(&n))
                    })
                    .collect();
                if matched.is_empty() {
                    return Err(CpmError::EmptyRange {
                        arg: (*text).to_string(),
                    });
                }
                out.extend(matched);
            }
            Arg::Epic(text, path) => out.extend(resolve_epic_path(root, text, path)?),
            Arg::Spec(..) => {}
        }
    }
    sort_by_file_name(&mut out);
    out.dedup();
    Ok(Targets::Epics(out))
}

pub(super) fn sort_by_file_name(paths: &mut [PathBuf]) {
    paths.sort_by(|a, b| {
        a.file_name()
            .cmp(&b.file_name())
            .then_with(|| a.as_os_str().cmp(b.as_os_str()))
    });
}

fn classify<'a>(root: &Path, arg: &'a str) -> Result<Arg<'a>, CpmError> {
    if let Some(range) = parse_range(arg)? {
        return Ok(Arg::Range(arg, range.0, range.1));
    }
    let not_target = || CpmError::NotCpmTarget {
        arg: arg.to_string(),
    };
    if !is_cpm_target(arg) {
        return Err(not_target());
    }
    let rel = relative_to_root(root, Path::new(arg)).ok_or_else(not_target)?;
    if rel.starts_with(SPECS_DIR) {
        Ok(Arg::Spec(arg, rel))
    } else if rel.starts_with(EPICS_DIR) {
        Ok(Arg::Epic(arg, rel))
    } else {
        Err(not_target())
    }
}

/// `Some((lo, hi))` for `NN..MM`; `None` when the argument is not range-shaped (it does not
/// start with a digit or has no `..`); an error for a range-shaped argument that is malformed
/// or reversed.
fn parse_range(arg: &str) -> Result<Option<(u32, u32)>, CpmError> {
    let a = arg.trim();
    if !a.starts_with(|c: char| c.is_ascii_digit()) || !a.contains("..") {
        return Ok(None);
    }
    let invalid = |reason: &str| CpmError::InvalidRange {
        arg: arg.to_string(),
        reason: reason.to_string(),
    };
    let Some((lo, hi)) = a.split_once("..") else {
        return Ok(None);
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(lo) || !digits(hi) {
        return Err(invalid("both ends must be epic numbers"));
    }
    let (Ok(lo), Ok(hi)) = (lo.parse::<u32>(), hi.parse::<u32>()) else {
        return Err(invalid("number too large"));
    };
    if lo > hi {
        return Err(invalid(&format!("reversed; did you mean {hi}..{lo}?")));
    }
    Ok(Some((lo, hi)))
}

fn resolve_epic_path(root: &Path, arg: &str, rel: &Path) -> Result<Vec<PathBuf>, CpmError> {
    let name = rel
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    if name.contains(['*', '?']) {
        let parent = rel.parent().unwrap_or(Path::new(EPICS_DIR));
        let mut found: Vec<PathBuf> = list_dir(root, parent)?
            .into_iter()
            .filter(|n| is_epic_file_name(n) && wildcard_match(&name, n))
            .map(|n| parent.join(n))
            .filter(|p| root.join(p).is_file())
            .collect();
        if found.is_empty() {
            return Err(CpmError::GlobNoMatch {
                arg: arg.to_string(),
            });
        }
        sort_by_file_name(&mut found);
        return Ok(found);
    }
    let full = root.join(rel);
    if full.is_dir() {
        return Err(CpmError::TargetIsDirectory {
            path: rel.to_path_buf(),
        });
    }
    if !full.is_file() {
        return Err(CpmError::EpicNotFound {
            path: rel.to_path_buf(),
        });
    }
    if !is_epic_file_name(&name) {
        return Err(CpmError::NotAnEpic {
            path: rel.to_path_buf(),
        });
    }
    Ok(vec![rel.to_path_buf()])
}

/// `*` and `?` wildcards over a whole file name.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi.min(p.len())..].iter().all(|c| *c == '*')
}

/// True when an argument looks like a CPM target: a path under `docs/epics/` or
/// `docs/specifications/` (relative, `./`-prefixed or absolute), or a `NN..MM` range.
pub(crate) fn is_cpm_target(arg: &str) -> bool {
    let a = arg.trim();
    if let Some((lo, hi)) = a.split_once("..") {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(lo) && digits(hi) {
            return true;
        }
    }
    let Some(norm) = normalize(Path::new(a)) else {
        return false;
    };
    let parts: Vec<&str> = norm
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let under = |i: usize| {
        parts.get(i) == Some(&"docs")
            && matches!(parts.get(i + 1), Some(&"epics") | Some(&"specifications"))
    };
    if norm.is_absolute() {
        (0..parts.len()).any(under)
    } else {
        under(0)
    }
}

/// Lexical normalisation: `.` dropped, `..` applied; `None` when `..` climbs above the start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return None;
                }
                out.pop();
                depth -= 1;
            }
            Component::Normal(s) => {
                out.push(s);
                depth += 1;
            }
        }
    }
    Some(out)
}

/// `path` relative to `root`: relative paths are normalised; absolute paths must be inside
/// `root` (as given or canonicalised).
pub(super) fn relative_to_root(root: &Path, path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return normalize(path);
    }
    let norm = normalize(path)?;
    let mut bases = vec![normalize(root)?];
    if let Ok(c) = root.canonicalize() {
        bases.push(c);
    }
    for base in &bases {
        if let Ok(r) = norm.strip_prefix(base) {
            return Some(r.to_path_buf());
        }
    }
    // The file may sit behind a symlinked root (e.g. /tmp → /private/tmp).
    let canon = path
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .zip(path.file_name())
        .map(|(p, n)| p.join(n))?;
    bases
        .iter()
        .find_map(|b| canon.strip_prefix(b).ok().map(Path::to_path_buf))
}

/// The auto-discovery message when nothing is runnable: the stop line, then one line per spec
/// under `docs/specifications/` (`[0-9]*-spec-*.md`, file-name order) with the command that
/// runs it. No trailing newline.
pub(crate) fn nothing_to_run_message(root: &Path) -> Result<String, CpmError> {
    let mut specs: Vec<String> = list_dir(root, Path::new(SPECS_DIR))?
        .into_iter()
        .filter(|n| {
            n.starts_with(|c: char| c.is_ascii_digit())
                && n.contains("-spec-")
                && n.ends_with(".md")
                && root.join(SPECS_DIR).join(n).is_file()
        })
        .collect();
    specs.sort();
    let mut msg = String::from("No incomplete epics found. Nothing to run.");
    if !specs.is_empty() {
        msg.push_str("\nSpec mode runs a spec from scratch; to run one:");
        for name in specs {
            let _ = write!(
                msg,
                "\n  ralph run {}",
                shell_quote(&format!("{SPECS_DIR}/{name}"))
            );
        }
    }
    Ok(msg)
}

/// Quote a word for a shell command line the user will type, only when it needs it.
fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ':' | ',')
        });
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use proptest::prelude::*;

    fn range_repo() -> TempDir {
        let root = repo();
        let r = root.path();
        for (name, status) in [
            ("22-epic-a.md", "Pending"),
            ("23-epic-b.md", "Complete"),
            ("24-epic-c.md", "Pending"),
            ("24-01-epic-c2.md", "Pending"),
            ("26-epic-d.md", "Pending"),
            ("27-epic-e.md", "Pending"),
        ] {
            write(
                r,
                &format!("docs/epics/{name}"),
                &epic_doc(name, status, None),
            );
        }
        write(r, "docs/epics/24-coverage-c.md", "# matrix\n");
        write(
            r,
            "docs/epics/26-coverage-epic-d.md",
            "# matrix of an epic about epics\n",
        );
        write(r, "docs/specifications/45-spec-login.md", "# Spec\n");
        write(r, "docs/specifications/46-spec-other.md", "# Spec\n");
        root
    }

    #[test]
    fn ranges_expand_inclusively_to_existing_files() -> TestResult {
        let root = range_repo();
        let r = root.path();
        assert_eq!(
            epics_of(resolve_targets(r, &args(&["23..26"]))?),
            [
                "docs/epics/23-epic-b.md",
                "docs/epics/24-01-epic-c2.md",
                "docs/epics/24-epic-c.md",
                "docs/epics/26-epic-d.md"
            ]
        );
        assert_eq!(
            epics_of(resolve_targets(r, &args(&["26..26"]))?),
            ["docs/epics/26-epic-d.md"]
        );
        // Overlaps and explicit paths are deduplicated and sorted by file name.
        assert_eq!(
            epics_of(resolve_targets(
                r,
                &args(&["27..27", "docs/epics/22-epic-a.md", "26..27"])
            )?),
            [
                "docs/epics/22-epic-a.md",
                "docs/epics/26-epic-d.md",
                "docs/epics/27-epic-e.md"
            ]
        );
        Ok(())
    }

    #[test]
    fn bad_ranges() {
        let root = range_repo();
        let r = root.path();
        let e = err_of(resolve_targets(r, &args(&["26..23"])));
        assert!(e.is_usage(), "{e}");
        assert_eq!(
            e.to_string(),
            "invalid epic range `26..23`: reversed; did you mean 23..26?"
        );
        for bad in ["23..x", "23..", "23...26", "1..99999999999"] {
            let e = err_of(resolve_targets(r, &args(&[bad])));
            assert!(matches!(e, CpmError::InvalidRange { .. }), "{bad}: {e}");
            assert!(e.is_usage() && e.to_string().contains(bad), "{bad}: {e}");
        }
        let e = err_of(resolve_targets(r, &args(&["90..99"])));
        assert_eq!(
            e.to_string(),
            "epic range `90..99` matches no epic in docs/epics/"
        );
        assert!(!e.is_usage() && e.hint().is_some());
        // With no docs/epics at all, a range matches nothing too.
        let empty = repo();
        let e = err_of(resolve_targets(empty.path(), &args(&["1..2"])));
        assert!(matches!(e, CpmError::EmptyRange { .. }), "{e}");
    }

    #[test]
    fn contradictory_targets_are_usage_errors_naming_the_arguments() {
        let root = range_repo();
        let r = root.path();
        let e = err_of(resolve_targets(
            r,
            &args(&[
                "docs/specifications/45-spec-login.md",
                "docs/specifications/46-spec-other.md",
            ]),
        ));
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "two spec paths given (`docs/specifications/45-spec-login.md` and \
             `docs/specifications/46-spec-other.md`): spec mode runs exactly one spec"
        );
        let e = err_of(resolve_targets(
            r,
            &args(&[
                "docs/epics/22-epic-a.md",
                "docs/specifications/45-spec-login.md",
                "23..24",
            ]),
        ));
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "spec path `docs/specifications/45-spec-login.md` mixed with epic targets \
             (docs/epics/22-epic-a.md, 23..24): a run is either spec mode or epic mode"
        );
        // Usage errors come before existence checks.
        let e = err_of(resolve_targets(
            r,
            &args(&["docs/specifications/nope.md", "docs/epics/nope-epic-x.md"]),
        ));
        assert!(matches!(e, CpmError::SpecWithEpics { .. }), "{e}");
        let e = err_of(resolve_targets(r, &args(&["src/main.rs"])));
        assert!(
            e.is_usage() && e.to_string().contains("`src/main.rs`"),
            "{e}"
        );
    }

    #[test]
    fn spec_and_epic_paths_resolve() -> TestResult {
        let root = range_repo();
        let r = root.path();
        assert_eq!(
            resolve_targets(r, &args(&["./docs/specifications/45-spec-login.md"]))?,
            Targets::Spec(PathBuf::from("docs/specifications/45-spec-login.md"))
        );
        let abs = r.join("docs/epics/24-epic-c.md").display().to_string();
        assert_eq!(
            epics_of(resolve_targets(r, &[abs])?),
            ["docs/epics/24-epic-c.md"]
        );
        assert_eq!(
            epics_of(resolve_targets(r, &args(&["docs/epics/24*-epic-*.md"]))?),
            ["docs/epics/24-01-epic-c2.md", "docs/epics/24-epic-c.md"]
        );
        type Check = fn(&CpmError) -> bool;
        let cases: [(&str, Check); 5] = [
            ("docs/epics/99-epic-*.md", |e| {
                matches!(e, CpmError::GlobNoMatch { .. })
            }),
            ("docs/epics/99-epic-x.md", |e| {
                matches!(e, CpmError::EpicNotFound { .. })
            }),
            ("docs/epics/24-coverage-c.md", |e| {
                matches!(e, CpmError::NotAnEpic { .. })
            }),
            ("docs/epics", |e| {
                matches!(e, CpmError::TargetIsDirectory { .. })
            }),
            ("docs/specifications/99-spec-x.md", |e| {
                matches!(e, CpmError::SpecNotFound { .. })
            }),
        ];
        for (arg, is) in cases {
            let e = err_of(resolve_targets(r, &args(&[arg])));
            assert!(is(&e) && !e.is_usage(), "{arg}: {e:?}");
            assert!(e.hint().is_some(), "{arg}");
        }
        Ok(())
    }

    #[test]
    fn cpm_target_shapes() {
        for yes in [
            "docs/epics/23-epic-x.md",
            "./docs/epics/23-epic-x.md",
            "docs/specifications/45-spec-x.md",
            "/home/u/repo/docs/epics/23-epic-x.md",
            "23..26",
            "docs/epics/2*-epic-*.md",
        ] {
            assert!(is_cpm_target(yes), "{yes}");
        }
        for no in [
            "RALPH_TASK.md",
            "PRD.md",
            "docs/plans/x.md",
            "Add OAuth login",
            "23..x",
            "..",
            "../docs/epics/x.md",
            "",
        ] {
            assert!(!is_cpm_target(no), "{no}");
        }
    }

    #[test]
    fn auto_discovery_with_everything_complete() -> TestResult {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/epics/01-epic-a.md",
            &epic_doc("A", "Complete", None),
        );
        write(
            r,
            "docs/epics/02-epic-b.md",
            &epic_doc("B", "Withdrawn", None),
        );
        write(r, "docs/specifications/46-spec-b.md", "# B\n");
        write(r, "docs/specifications/45-spec-a.md", "# A\n");
        write(r, "docs/specifications/README.md", "# not a spec\n");
        assert_eq!(resolve_targets(r, &[])?, Targets::Epics(Vec::new()));
        assert_eq!(
            nothing_to_run_message(r)?,
            "No incomplete epics found. Nothing to run.\n\
             Spec mode runs a spec from scratch; to run one:\n  \
             ralph run docs/specifications/45-spec-a.md\n  \
             ralph run docs/specifications/46-spec-b.md"
        );
        let bare = repo();
        assert_eq!(
            nothing_to_run_message(bare.path())?,
            "No incomplete epics found. Nothing to run."
        );
        write(bare.path(), "docs/specifications/1-spec-it's.md", "# x\n");
        assert!(
            nothing_to_run_message(bare.path())?
                .ends_with(r"ralph run 'docs/specifications/1-spec-it'\''s.md'")
        );
        Ok(())
    }

    #[test]
    fn spec_mode_keeps_the_epics_naming_the_spec_by_basename() -> TestResult {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/epics/45-02-epic-b.md",
            &epic_doc(
                "B",
                "Pending",
                Some("[spec 45](../specifications/45-spec-login.md)"),
            ),
        );
        write(
            r,
            "docs/epics/45-01-epic-a.md",
            &epic_doc(
                "A",
                "Complete",
                Some("docs/specifications/45-spec-login.md"),
            ),
        );
        write(
            r,
            "docs/epics/46-01-epic-c.md",
            &epic_doc("C", "Pending", Some("docs/specifications/46-spec-other.md")),
        );
        write(
            r,
            "docs/epics/47-epic-d.md",
            &epic_doc("D", "Pending", None),
        );
        let spec = r.join("docs/specifications/45-spec-login.md");
        let got: Vec<String> = epics_for_spec(r, &spec)?
            .into_iter()
            .map(|e| e.title)
            .collect();
        assert_eq!(got, ["A", "B"]);
        assert!(epics_for_spec(r, Path::new("docs/specifications/48-spec-new.md"))?.is_empty());
        Ok(())
    }

    proptest! {
        #[test]
        fn target_shapes_never_panic(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*", p in "[a*?/.]{0,12}", t in "[a/.]{0,12}") {
            let _ = is_cpm_target(&text);
            let _ = wildcard_match(&p, &t);
        }
    }
}
