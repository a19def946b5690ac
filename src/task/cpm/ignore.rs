//! The session-state ignore check (skill step 1g) and the armed-stop-hook warning.

use std::fs;
use std::path::{Path, PathBuf};

use super::{CpmError, IGNORE_HEADER, STOP_HOOK_STATE};

/// The paths each of [`IGNORE_LINES`] must keep out of commits, checked against the root
/// `.gitignore` (the file the skill's step 1g reads and appends to).
const IGNORE_SAMPLES: [(&str, &[&str]); 2] = [
    (
        "/.claude/ralph-loop.local.md",
        &[".claude/ralph-loop.local.md"],
    ),
    (
        "/docs/plans/.cpm-*",
        &[
            "docs/plans/.cpm-ralph-log-0.md",
            "docs/plans/.cpm-progress.md",
        ],
    ),
];

/// The lines of [`IGNORE_LINES`] whose files the root `.gitignore` does not already ignore
/// (by the line itself or any pattern that covers the same files, e.g. `.claude/`). No
/// `.gitignore` ignores nothing. The caller offers them and applies them with
/// [`apply_ignore_lines`].
///
/// [`IGNORE_LINES`]: super::IGNORE_LINES
pub(crate) fn missing_ignore_lines(root: &Path) -> Vec<String> {
    let text = crate::files::read_bytes(&root.join(".gitignore"), crate::files::MAX_TEXT)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let patterns = parse_gitignore(&text);
    IGNORE_SAMPLES
        .iter()
        .filter(|(_, samples)| !samples.iter().all(|s| is_ignored(&patterns, s)))
        .map(|(line, _)| (*line).to_string())
        .collect()
}

/// Append `lines` to the root `.gitignore` (created if absent) under the skill's comment,
/// skipping lines already present; nothing to add writes nothing, so it is idempotent.
pub(crate) fn apply_ignore_lines(root: &Path, lines: &[String]) -> Result<(), CpmError> {
    let rel = PathBuf::from(".gitignore");
    let path = root.join(&rel);
    if let Some(bad) = lines.iter().find(|l| l.contains(['\n', '\r'])) {
        return Err(CpmError::InvalidIgnoreLine { line: bad.clone() });
    }
    // Read as any file an agent can touch: a FIFO is refused, never waited on.
    let existing = match crate::files::read_bytes(&path, crate::files::MAX_TEXT) {
        Ok(b) => b,
        Err(e) if e.is_missing() => Vec::new(),
        Err(e) => {
            return Err(CpmError::Read {
                path: rel,
                source: std::io::Error::other(e.to_string()),
            });
        }
    };
    let text = String::from_utf8_lossy(&existing);
    let present: Vec<&str> = text.lines().map(str::trim).collect();
    let mut todo: Vec<&str> = Vec::new();
    for line in lines.iter().map(|l| l.trim()) {
        if !line.is_empty() && !present.contains(&line) && !todo.contains(&line) {
            todo.push(line);
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    let mut add = String::new();
    if !existing.is_empty() {
        if !existing.ends_with(b"\n") {
            add.push('\n');
        }
        add.push('\n');
    }
    if !present.contains(&IGNORE_HEADER) {
        add.push_str(IGNORE_HEADER);
        add.push('\n');
    }
    for line in todo {
        add.push_str(line);
        add.push('\n');
    }
    // Never through a link out of the repository (SPEC §4).
    crate::files::append(&path, add.as_bytes())
        .map_err(|source| CpmError::Write { path: rel, source })
}

/// True when `.claude/ralph-loop.local.md` exists: an armed stop-hook loop would fight
/// ralph's fresh iterations.
pub(crate) fn stop_hook_armed(root: &Path) -> bool {
    fs::symlink_metadata(root.join(STOP_HOOK_STATE)).is_ok()
}

/// One parsed `.gitignore` pattern.
struct IgnorePattern {
    negated: bool,
    dir_only: bool,
    anchored: bool,
    glob: Vec<char>,
}

/// The subset of gitignore syntax the check needs: comments, `!`, leading and trailing `/`,
/// `*`, `?` and `**`. Character classes are matched literally.
fn parse_gitignore(text: &str) -> Vec<IgnorePattern> {
    let mut out = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_end_matches(['\r', ' ', '\t']);
        if line.is_empty() || line.starts_with('#') || line.len() > 4096 {
            continue;
        }
        let (negated, line) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line.strip_prefix('\\').unwrap_or(line)),
        };
        let (dir_only, line) = match line.strip_suffix('/') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let anchored = line.contains('/');
        let line = line.strip_prefix('/').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        out.push(IgnorePattern {
            negated,
            dir_only,
            anchored,
            glob: line.chars().collect(),
        });
    }
    out
}

/// Whether `path` (root-relative, `/`-separated, a file) is ignored: a parent directory that
/// is excluded excludes everything under it; otherwise the last matching pattern decides.
fn is_ignored(patterns: &[IgnorePattern], path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    for i in 1..=parts.len() {
        let sub = parts[..i].join("/");
        let is_dir = i < parts.len();
        let base: Vec<char> = parts[i - 1].chars().collect();
        let sub: Vec<char> = sub.chars().collect();
        let mut decision = false;
        for p in patterns {
            if p.dir_only && !is_dir {
                continue;
            }
            let target = if p.anchored { &sub } else { &base };
            if glob_match(&p.glob, target) {
                decision = !p.negated;
            }
        }
        if decision {
            return true;
        }
    }
    false
}

/// Gitignore-style glob over whole strings: `*` and `?` stop at `/`, `**` crosses it, and
/// `**/` may match nothing. Dynamic programming, so no pattern can make it exponential.
fn glob_match(p: &[char], t: &[char]) -> bool {
    // dp[j] = pattern prefix (up to the current i) matches t[..j]
    let mut dp = vec![false; t.len() + 1];
    dp[0] = true;
    let mut i = 0;
    while i < p.len() {
        let mut next = vec![false; t.len() + 1];
        let double = p[i] == '*' && p.get(i + 1) == Some(&'*');
        if double {
            // `**/` matches nothing or any run ending in `/`; `**` any run, slashes included.
            let slash = p.get(i + 2) == Some(&'/');
            let mut any_before = false;
            for j in 0..=t.len() {
                next[j] = if slash {
                    dp[j] || (j > 0 && t[j - 1] == '/' && any_before)
                } else {
                    dp[j] || any_before
                };
                any_before |= dp[j];
            }
            i += if slash { 3 } else { 2 };
        } else if p[i] == '*' {
            let mut reach = false;
            for j in 0..=t.len() {
                if j > 0 && t[j - 1] == '/' {
                    reach = false;
                }
                reach |= dp[j];
                next[j] = reach;
            }
            i += 1;
        } else {
            for j in 1..=t.len() {
                let ok = if p[i] == '?' {
                    t[j - 1] != '/'
                } else {
                    t[j - 1] == p[i]
                };
                next[j] = dp[j - 1] && ok;
            }
            i += 1;
        }
        dp = next;
    }
    dp[t.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use proptest::prelude::*;

    #[test]
    fn a_gitignore_that_is_a_fifo_is_refused_never_waited_on() -> TestResult {
        let root = repo();
        let r = root.path();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
        nix::unistd::mkfifo(&r.join(".gitignore"), mode)?;
        assert_eq!(missing_ignore_lines(r), IGNORE_LINES);
        let e = apply_ignore_lines(r, &missing_ignore_lines(r)).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        Ok(())
    }

    #[test]
    fn ignore_lines_detect_and_apply_idempotently() -> TestResult {
        let root = repo();
        let r = root.path();
        assert_eq!(missing_ignore_lines(r), IGNORE_LINES);
        apply_ignore_lines(r, &missing_ignore_lines(r))?;
        let first = fs::read_to_string(r.join(".gitignore"))?;
        assert_eq!(
            first,
            format!("{IGNORE_HEADER}\n/.claude/ralph-loop.local.md\n/docs/plans/.cpm-*\n")
        );
        assert!(missing_ignore_lines(r).is_empty());
        apply_ignore_lines(r, &IGNORE_LINES.map(String::from))?;
        assert_eq!(
            fs::read_to_string(r.join(".gitignore"))?,
            first,
            "second apply is a no-op"
        );
        apply_ignore_lines(r, &[])?;
        assert_eq!(fs::read_to_string(r.join(".gitignore"))?, first);
        assert!(apply_ignore_lines(r, &["a\nb".to_string()]).is_err());
        Ok(())
    }

    #[test]
    fn equivalent_patterns_count_as_ignored() -> TestResult {
        let root = repo();
        let r = root.path();
        let check = |gitignore: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
            fs::write(r.join(".gitignore"), gitignore)?;
            Ok(missing_ignore_lines(r))
        };
        assert_eq!(check(".claude/\ntarget\n")?, ["/docs/plans/.cpm-*"]);
        assert_eq!(check("/.claude\r\n.cpm-*\r\n")?, Vec::<String>::new());
        assert_eq!(check("docs/\n.claude/**\n")?, Vec::<String>::new());
        assert_eq!(
            check("**/ralph-loop.local.md\ndocs/**/.cpm-*\n")?,
            Vec::<String>::new()
        );
        assert_eq!(
            check("docs/plans/.cpm-ralph-log-*\n")?,
            IGNORE_LINES.map(String::from),
            "a narrower pattern misses CPM's progress files"
        );
        assert_eq!(
            check(
                "/docs/plans/.cpm-*\n!/docs/plans/.cpm-progress.md\n# /.claude/ralph-loop.local.md\n"
            )?,
            IGNORE_LINES.map(String::from)
        );
        assert_eq!(
            check("/docs/plans/\n!/docs/plans/.cpm-progress.md\n/.claude/ralph-loop.local.md\n")?,
            Vec::<String>::new(),
            "an excluded directory cannot be re-included"
        );
        // Appending to a file without a final newline keeps the last line intact.
        fs::write(r.join(".gitignore"), "target")?;
        apply_ignore_lines(r, &missing_ignore_lines(r))?;
        assert!(fs::read_to_string(r.join(".gitignore"))?.starts_with("target\n\n# Session"));
        Ok(())
    }

    #[test]
    fn stop_hook_state_file_is_detected() {
        let root = repo();
        assert!(!stop_hook_armed(root.path()));
        write(root.path(), STOP_HOOK_STATE, "---\nactive: true\n---\n");
        assert!(stop_hook_armed(root.path()));
    }

    proptest! {
        #[test]
        fn gitignore_never_panics(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*", p in "[a*?/.]{0,12}", t in "[a/.]{0,12}") {
            let patterns = parse_gitignore(&text);
            let _ = is_ignored(&patterns, ".claude/ralph-loop.local.md");
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            let _ = glob_match(&pc, &tc);
        }
    }
}
