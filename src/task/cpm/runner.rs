//! Test-runner discovery (skill step 1d): the spec's Non-Functional Requirements `ENVn` entries
//! first in spec mode, then the project's config files.

use std::path::Path;

use crate::markdown;

/// Config files larger than this are not read for test-runner discovery.
const CONFIG_READ_LIMIT: u64 = 4 * 1024 * 1024;

/// One `ENVn` entry of a spec's Non-Functional Requirements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvEntry {
    /// The label, e.g. `ENV2`.
    pub(crate) label: String,
    /// The text after the label and its separator.
    pub(crate) text: String,
}

/// The `ENVn` entries (not the `ENVXn` restrictions) of a spec's `## Non-Functional
/// Requirements` section: its top-level bullets `- **ENV1** — text` (or `- **ENV1 — Title.**
/// text`), continuation lines included, read with the Markdown reader (code never counts).
pub(crate) fn spec_env_entries(spec_text: &str) -> Vec<EnvEntry> {
    let md = markdown::parse(spec_text);
    let h2: Vec<&markdown::Heading> = md
        .top_headings()
        .map(|(_, h)| h)
        .filter(|h| h.level == 2)
        .collect();
    let sections: Vec<std::ops::Range<usize>> = h2
        .iter()
        .enumerate()
        .filter(|(_, h)| {
            h.text
                .trim()
                .to_lowercase()
                .starts_with("non-functional requirements")
        })
        .map(|(n, h)| h.range.end..h2.get(n + 1).map_or(spec_text.len(), |x| x.range.start))
        .collect();
    md.items
        .iter()
        .filter(|it| it.depth == 0 && !it.quoted && it.number.is_none())
        .filter(|it| sections.iter().any(|s| s.contains(&it.at)))
        .filter_map(|it| env_entry(&it.markup))
        .collect()
}

/// An `ENVn` bullet's text as an entry.
fn env_entry(markup: &str) -> Option<EnvEntry> {
    // Remove the opening bold pair only, as the roll-up's parser does.
    let body = markup.trim_start();
    let body = match body.strip_prefix("**") {
        Some(rest) => match rest.find("**") {
            Some(close) => format!("{}{}", &rest[..close], &rest[close + 2..]),
            None => rest.to_string(),
        },
        None => body.to_string(),
    };
    let letters: String = body
        .chars()
        .take_while(|c| c.is_ascii_uppercase())
        .collect();
    let digits: String = body[letters.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if letters != "ENV" || digits.is_empty() {
        return None;
    }
    let label = format!("{letters}{digits}");
    let text = body[label.len()..].trim_start();
    let text = text
        .strip_prefix(['—', '–', '-', ':'])
        .unwrap_or(text)
        .trim();
    Some(EnvEntry {
        label,
        text: text.to_string(),
    })
}

const RUNNER_WORDS: [&str; 14] = [
    "runner",
    "pest",
    "phpunit",
    "pytest",
    "jest",
    "vitest",
    "mocha",
    "rspec",
    "junit",
    "cargo test",
    "go test",
    "nextest",
    "minitest",
    "unittest",
];

const COMMAND_WORDS: [&str; 33] = [
    "npm", "npx", "pnpm", "yarn", "bun", "deno", "node", "composer", "php", "make", "cargo", "go",
    "python", "python3", "pytest", "jest", "vitest", "mocha", "phpunit", "pest", "rspec", "bundle",
    "rake", "dotnet", "mvn", "gradle", "tox", "nox", "uv", "poetry", "artisan", "ctest", "just",
];

/// How strongly an ENV entry names test tooling: 2 for a runner, 1 for other test tooling
/// (a browser driver, a test database), 0 for none.
fn test_tooling_score(text: &str) -> u8 {
    let lower = text.to_lowercase();
    if RUNNER_WORDS.iter().any(|w| lower.contains(w)) {
        2
    } else if lower.contains("test") || lower.contains("playwright") || lower.contains("cypress") {
        1
    } else {
        0
    }
}

/// The first code span that reads as a runnable command (a known launcher or runner, or a
/// relative executable path).
fn command_in(text: &str) -> Option<String> {
    let md = markdown::parse(text);
    let spans = md
        .headings
        .iter()
        .map(|h| &h.spans)
        .chain(md.lines.iter().map(|l| &l.spans));
    spans
        .flat_map(|s| &s.code)
        .map(|span| span.trim())
        .find(|span| {
            let first = span.split_whitespace().next().unwrap_or("");
            let base = first.rsplit('/').next().unwrap_or(first);
            let path_like = ["./", "vendor/bin/", "bin/", "node_modules/.bin/"]
                .iter()
                .any(|p| first.starts_with(p));
            !span.is_empty()
                && (path_like || COMMAND_WORDS.contains(&first) || COMMAND_WORDS.contains(&base))
        })
        .map(str::to_string)
}

/// Test-runner discovery (skill step 1d): in spec mode the spec's `ENVn` entries first, then
/// the project's config files — `composer.json` `scripts.test` (`composer test`),
/// `package.json` `scripts.test` (`npm test`; npm's placeholder script skipped), a `Makefile`
/// `test:` target (`make test`), `pyproject.toml` mentioning pytest (`pytest`), `Cargo.toml`
/// (`cargo test`). Returns the command and where it came from.
///
/// A spec entry that names a command (a code span such as `` `vendor/bin/pest` ``) wins. One
/// that names only a tool ("Pest 3 or later") is not runnable: a config-file command then
/// completes it (the source says so), and without one the tool's text is returned with a
/// source saying it names a tool that must be installed first.
pub(crate) fn discover_test_runner(root: &Path, spec: Option<&Path>) -> Option<(String, String)> {
    let mut spec_tool: Option<(String, String)> = None;
    if let Some(spec) = spec {
        let full = if spec.is_absolute() {
            spec.to_path_buf()
        } else {
            root.join(spec)
        };
        if let Some(text) = read_limited(&full) {
            let shown = spec.display().to_string();
            let mut best: Option<(u8, EnvEntry)> = None;
            for entry in spec_env_entries(&text) {
                let score = test_tooling_score(&entry.text);
                if score == 0 {
                    continue;
                }
                if let Some(cmd) = command_in(&entry.text)
                    && score == 2
                {
                    return Some((cmd, format!("{shown} {}", entry.label)));
                }
                if best.as_ref().is_none_or(|(s, _)| score > *s) {
                    best = Some((score, entry));
                }
            }
            if let Some((_, entry)) = best {
                if let Some(cmd) = command_in(&entry.text) {
                    return Some((cmd, format!("{shown} {}", entry.label)));
                }
                spec_tool = Some((tool_text(&entry.text), format!("{shown} {}", entry.label)));
            }
        }
    }
    match (config_test_runner(root), spec_tool) {
        (Some((cmd, src)), Some((tool, spec_src))) => {
            Some((cmd, format!("{src} (completes {spec_src}: {tool})")))
        }
        (Some(found), None) => Some(found),
        (None, Some((tool, spec_src))) => Some((
            tool,
            format!("{spec_src} (names a tool, not a command: install it before tests can run)"),
        )),
        (None, None) => None,
    }
}

/// An ENV entry's text as a short tool description.
fn tool_text(text: &str) -> String {
    let t: String = text.replace("**", "").trim().chars().take(200).collect();
    t.trim_end_matches(['.', ' ']).to_string()
}

fn config_test_runner(root: &Path) -> Option<(String, String)> {
    let json_test_script = |name: &str| -> Option<String> {
        let text = read_limited(&root.join(name))?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        match value.get("scripts")?.get("test")? {
            serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
            serde_json::Value::Array(a) if !a.is_empty() => Some(
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(" && "),
            ),
            _ => None,
        }
    };
    if let Some(script) = json_test_script("composer.json") {
        return Some((
            "composer test".to_string(),
            format!("composer.json scripts.test ({script})"),
        ));
    }
    if let Some(script) = json_test_script("package.json")
        && !script.contains("no test specified")
    {
        return Some((
            "npm test".to_string(),
            format!("package.json scripts.test ({script})"),
        ));
    }
    for name in ["Makefile", "makefile", "GNUmakefile"] {
        if let Some(text) = read_limited(&root.join(name))
            && makefile_has_test_target(&text)
        {
            return Some(("make test".to_string(), format!("{name} test target")));
        }
    }
    if let Some(text) = read_limited(&root.join("pyproject.toml"))
        && text
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("pytest"))
    {
        return Some(("pytest".to_string(), "pyproject.toml (pytest)".to_string()));
    }
    if root.join("Cargo.toml").is_file() {
        return Some(("cargo test".to_string(), "Cargo.toml".to_string()));
    }
    None
}

fn makefile_has_test_target(text: &str) -> bool {
    text.lines().any(|line| {
        if line.starts_with([' ', '\t', '#', '.']) {
            return false;
        }
        let Some((targets, rest)) = line.split_once(':') else {
            return false;
        };
        if rest.starts_with('=') || targets.contains('=') {
            return false;
        }
        targets.split_whitespace().any(|t| t == "test")
    })
}

/// A small text file, or `None` (missing, too large, unreadable, not UTF-8, a FIFO, a link out of
/// the repository: read as any file an agent can touch, `files::read_bytes`).
fn read_limited(path: &Path) -> Option<String> {
    String::from_utf8(crate::files::read_bytes(path, CONFIG_READ_LIMIT).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cpm::test_support::*;
    use proptest::prelude::*;

    const SPEC_WITH_ENV: &str = "# Spec\n\n## Functional Requirements\n\n### Must Have\n\
        - **FR1** — a test runner is mentioned here but is not an ENV entry\n\n\
        ## Non-Functional Requirements\n\n\
        - **NFR1** — fast\n\
        - **ENV1** — PHP 8.3 on the host\n\
        - **ENV2** — An isolated test database (SQLite in memory)\n\
        - **ENV3 — Test runner.** Pest 3 or later,\n  run as `vendor/bin/pest --parallel`\n\
        - **ENVX1** — must not require a test runner `npm test`\n\n## Scope\n";

    #[test]
    fn env_entries_are_read_from_the_nfr_section() {
        let entries = spec_env_entries(SPEC_WITH_ENV);
        let labels: Vec<&str> = entries.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(labels, ["ENV1", "ENV2", "ENV3"]);
        assert_eq!(
            entries[2].text,
            "Test runner. Pest 3 or later, run as `vendor/bin/pest --parallel`"
        );
    }

    #[test]
    fn a_config_file_that_is_a_fifo_is_passed_over_never_waited_on() {
        let d = tempfile::tempdir().unwrap();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
        nix::unistd::mkfifo(&d.path().join("Makefile"), mode).unwrap();
        std::fs::write(d.path().join("Cargo.toml"), "[package]\n").unwrap();
        assert_eq!(
            discover_test_runner(d.path(), None).map(|(cmd, _)| cmd),
            Some("cargo test".to_string())
        );
    }

    #[test]
    fn test_runner_sources_in_priority_order() {
        let root = repo();
        let r = root.path();
        assert_eq!(discover_test_runner(r, None), None);
        write(r, "Cargo.toml", "[package]\nname = \"x\"\n");
        let found = |spec: Option<&Path>| discover_test_runner(r, spec);
        assert_eq!(
            found(None),
            Some(("cargo test".into(), "Cargo.toml".into()))
        );
        write(r, "pyproject.toml", "[project]\nname = \"x\"\n");
        assert_eq!(
            found(None).map(|f| f.0),
            Some("cargo test".into()),
            "no pytest mention"
        );
        write(
            r,
            "pyproject.toml",
            "[tool.pytest.ini_options]\naddopts = \"-q\"\n",
        );
        assert_eq!(
            found(None),
            Some(("pytest".into(), "pyproject.toml (pytest)".into()))
        );
        write(r, "Makefile", ".PHONY: test\nCC := cc\ntests:\n\techo\n");
        assert_eq!(
            found(None).map(|f| f.0),
            Some("pytest".into()),
            "no test target"
        );
        write(r, "Makefile", ".PHONY: test\nbuild test: deps\n\t./run\n");
        assert_eq!(
            found(None),
            Some(("make test".into(), "Makefile test target".into()))
        );
        write(
            r,
            "package.json",
            r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#,
        );
        assert_eq!(
            found(None).map(|f| f.0),
            Some("make test".into()),
            "npm placeholder"
        );
        write(r, "package.json", r#"{"scripts":{"test":"vitest run"}}"#);
        assert_eq!(
            found(None),
            Some((
                "npm test".into(),
                "package.json scripts.test (vitest run)".into()
            ))
        );
        write(r, "composer.json", "{ not json");
        assert_eq!(
            found(None).map(|f| f.0),
            Some("npm test".into()),
            "bad json skipped"
        );
        write(
            r,
            "composer.json",
            r#"{"scripts":{"test":["@lint","pest"]}}"#,
        );
        assert_eq!(
            found(None),
            Some((
                "composer test".into(),
                "composer.json scripts.test (@lint && pest)".into()
            ))
        );
        // Spec mode: the spec's ENV entries come first.
        write(r, "docs/specifications/45-spec-x.md", SPEC_WITH_ENV);
        let spec = Path::new("docs/specifications/45-spec-x.md");
        assert_eq!(
            found(Some(spec)),
            Some((
                "vendor/bin/pest --parallel".into(),
                "docs/specifications/45-spec-x.md ENV3".into()
            ))
        );
        // Epic mode never reads the spec.
        assert_eq!(found(None).map(|f| f.0), Some("composer test".into()));
    }

    #[test]
    fn a_spec_tool_is_not_reported_as_a_command() {
        let root = repo();
        let r = root.path();
        write(
            r,
            "docs/specifications/45-spec-x.md",
            "## Non-Functional Requirements\n- **ENV1** — Test runner: Pest 3 or later.\n",
        );
        let spec = Path::new("docs/specifications/45-spec-x.md");
        assert_eq!(
            discover_test_runner(r, Some(spec)),
            Some((
                "Test runner: Pest 3 or later".into(),
                "docs/specifications/45-spec-x.md ENV1 (names a tool, not a command: install it \
                 before tests can run)"
                    .into()
            ))
        );
        write(r, "composer.json", r#"{"scripts":{"test":"pest"}}"#);
        assert_eq!(
            discover_test_runner(r, Some(spec)),
            Some((
                "composer test".into(),
                "composer.json scripts.test (pest) (completes docs/specifications/45-spec-x.md \
                 ENV1: Test runner: Pest 3 or later)"
                    .into()
            ))
        );
    }

    proptest! {
        #[test]
        fn readers_never_panic(text in "(\\PC|\n|\t|\\*\\*|Status|SUMMARY|ROW|ENV1|## |```)*") {
            let _ = spec_env_entries(&text);
            let _ = command_in(&text);
        }
    }
}
