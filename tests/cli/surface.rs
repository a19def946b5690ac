//! What a newcomer meets around the commands: shell completions loaded into a real bash, the
//! checked-in man pages (equal to what the code generates, rendered by `man`), `--version`
//! naming the commit, and what `cargo package` would publish.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The checkout these tests were built from.
fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `bash --norc -c SCRIPT`: its exit code and stdout (stderr on failure in the message).
fn bash(env: &TestEnv, script: &str) -> (i32, String) {
    let out = env
        .command("bash")
        .args(["--norc", "--noprofile", "-c", script])
        .output()
        .expect("run bash");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The words bash's completion function for ralph offers after `line` (its last word being
/// completed), once the script `ralph completions bash` printed is sourced.
const COMPLETE: &str = r#"
source "$1" || exit 90
spec=$(complete -p ralph) || exit 91
echo "spec: $spec"
fn=$(sed -n 's/.*-F \([^ ]*\).*/\1/p' <<<"$spec")
read -r -a COMP_WORDS <<<"$2"
[[ "$2" == *' ' ]] && COMP_WORDS+=('')
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}
"$fn" ralph "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf 'reply: %s\n' "${COMPREPLY[@]}"
"#;

fn completions(env: &TestEnv, script: &Path, line: &str) -> String {
    let (code, out) = bash(
        env,
        &format!(
            "set -- {} {}\n{COMPLETE}",
            shell_words::quote(&script.to_string_lossy()),
            shell_words::quote(line)
        ),
    );
    assert_eq!(code, 0, "{out}");
    out
}

/// The control first: a bash that has not sourced the script knows no completion for ralph.
/// Then the script `ralph completions bash` prints registers ralph's function, which completes
/// `ralph ru` to `run` and `ralph run --max-it` to `--max-iterations`.
#[test]
fn bash_completion_loads_and_completes_subcommands_and_flags() {
    let env = TestEnv::new();
    let (code, out) = bash(&env, "complete -p ralph");
    assert_ne!(code, 0, "no completion before sourcing: {out}");

    let out = env.ralph(&["completions", "bash"]);
    assert_exit(&out, 0);
    let script = env.dir().join("ralph.bash");
    std::fs::write(&script, stdout(&out)).unwrap();

    let ru = completions(&env, &script, "ralph ru");
    assert!(ru.contains("-F _ralph ralph"), "{ru}");
    let replies: Vec<&str> = ru
        .lines()
        .filter_map(|l| l.strip_prefix("reply: "))
        .collect();
    assert_eq!(replies, ["run"], "{ru}");

    let flag = completions(&env, &script, "ralph run --max-it");
    let replies: Vec<&str> = flag
        .lines()
        .filter_map(|l| l.strip_prefix("reply: "))
        .collect();
    assert_eq!(replies, ["--max-iterations"], "{flag}");
}

/// Every shell clap_complete knows gets a script that names ralph; an unknown shell is a
/// usage error naming the ones there are.
#[test]
fn completions_for_every_shell_and_none_for_an_unknown_one() {
    let env = TestEnv::new();
    for (shell, mark) in [
        ("bash", "complete -F _ralph"),
        ("zsh", "#compdef ralph"),
        ("fish", "complete -c ralph"),
        ("elvish", "edit:completion:arg-completer[ralph]"),
        (
            "powershell",
            "Register-ArgumentCompleter -Native -CommandName 'ralph'",
        ),
    ] {
        let out = env.ralph(&["completions", shell]);
        assert_exit(&out, 0);
        assert!(stdout(&out).contains(mark), "{shell}: {}", stdout(&out));
        assert!(stdout(&out).contains("max-iterations"), "{shell}");
    }
    let out = env.ralph(&["completions", "tcsh"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("possible values: bash"),
        "{}",
        stderr(&out)
    );
}

/// The files of a directory, by name, with their text.
fn pages(dir: &Path) -> Vec<(String, String)> {
    let mut pages: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    pages.sort();
    pages
}

/// The man pages in docs/man/ are what `ralph __man DIR` writes from the code as it is now: a
/// flag added without regenerating them fails here (CI runs this). The regeneration command is
/// in the message.
#[test]
fn the_checked_in_man_pages_are_what_the_code_generates() {
    let env = TestEnv::new();
    let fresh = env.dir().join("man");
    std::fs::create_dir(&fresh).unwrap();
    let out = env.ralph(&["__man", fresh.to_str().unwrap()]);
    assert_exit(&out, 0);
    let generated = pages(&fresh);
    let names: Vec<&str> = generated.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.contains(&"ralph.1") && names.contains(&"ralph-run.1"),
        "{names:?}"
    );
    assert!(
        generated == pages(&checkout().join("docs/man")),
        "docs/man/ is stale: regenerate it with `cargo run -- __man docs/man`"
    );
}

/// `man -l docs/man/ralph.1` renders the page with its NAME and SYNOPSIS sections, and the
/// run page has its option groups; a page that is not roff renders no such section (control).
#[test]
fn the_man_page_renders_with_man() {
    if which::which("man").is_err() {
        skip_or_fail("man (man-db) is not installed");
        return;
    }
    let env = TestEnv::new();
    let render = |page: &Path| {
        let out = env
            .command("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .expect("run man");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = env.dir().join("plain.1");
    std::fs::write(&plain, "ralph\nSupervise loops\n").unwrap();
    assert!(!render(&plain).contains("NAME"), "control");

    let man = checkout().join("docs/man");
    let top = render(&man.join("ralph.1"));
    for section in [
        r"(?m)^NAME\n +ralph +- +Supervise +autonomous",
        r"(?m)^SYNOPSIS\n +ralph \[-C",
        r"(?m)^SUBCOMMANDS\n +ralph-init\(1\)",
    ] {
        let re = regex::Regex::new(section).unwrap();
        assert!(re.is_match(&top), "{section}:\n{top}");
    }
    let run = render(&man.join("ralph-run.1"));
    for needle in ["SYNOPSIS", "--max-iterations", "LIMITS", "--sandbox"] {
        assert!(run.contains(needle), "{needle}:\n{run}");
    }
}

/// `ralph --version` (and a subcommand's) names the commit the binary was built from:
/// `ralph 0.1.0 (abc1234 2026-12-07)`, the hash being `git rev-parse --short HEAD` of the
/// checkout and the date its commit date.
#[test]
fn version_names_the_commit() {
    let env = TestEnv::new();
    let git = |args: &[&str]| {
        let out = env
            .command("git")
            .current_dir(checkout())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let hash = git(&["rev-parse", "--short", "HEAD"]);
    let date = git(&["log", "-1", "--format=%cs", "HEAD"]);
    let version = format!("{} ({hash} {date})\n", env!("CARGO_PKG_VERSION"));
    let want = format!("ralph {version}");
    for (args, name) in [
        (&["--version"][..], "ralph"),
        (&["-V"], "ralph"),
        (&["run", "-V"], "ralph-run"),
    ] {
        let out = env.ralph(args);
        assert_exit(&out, 0);
        assert_eq!(stdout(&out), format!("{name} {version}"), "{args:?}");
    }
    let shape = regex::Regex::new(r"^ralph \d+\.\d+\.\d+ \([0-9a-f]{7,40} \d{4}-\d\d-\d\d\)\n$");
    assert!(shape.unwrap().is_match(&want), "{want}");
}

/// What `cargo package` would publish: the sources, the README, the licences and the man
/// pages, none of the tests' fixtures, stand-ins or benchmarks.
#[test]
fn the_package_holds_the_sources_and_no_test_fixtures() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Cargo's own environment (its home, its registry), not the test's isolated one.
    let out = std::process::Command::new(cargo)
        .current_dir(checkout())
        .args([
            "package",
            "--locked",
            "--no-verify",
            "--list",
            "--allow-dirty",
        ])
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .expect("run cargo package");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<&str> = list.lines().collect();
    for want in [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "src/main.rs",
        "src/lib.rs",
        "src/cli.rs",
        "docs/man/ralph.1",
    ] {
        assert!(files.contains(&want), "{want} missing:\n{list}");
    }
    for file in &files {
        assert!(
            ![
                "tests/", "testing/", "benches/", "deploy/", ".ci/", "target/"
            ]
            .iter()
            .any(|p| file.starts_with(p)),
            "{file} would be published:\n{list}"
        );
    }
}
