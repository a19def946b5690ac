//! The README's promises to a newcomer (issue 30): its quickstart, run as printed in a user's own
//! repository, completes a loop; it stays a product page; every link in it and in `docs/` leads
//! somewhere.

use crate::common::*;
use crate::real_agents::repo_root;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The first ```sh block under the README's `## Quickstart` heading, a command per line (a
/// line ending in `\` goes on).
fn quickstart_block() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let at = readme
        .find("\n## Quickstart\n")
        .expect("README has a Quickstart section");
    let rest = &readme[at..];
    let start = rest.find("```sh\n").expect("a sh block in the Quickstart") + 6;
    let len = rest[start..].find("```").unwrap();
    rest[start..start + len].to_string()
}

/// A user's repository (an app, a commit), the README's block run there by `sh` with `ralph` on
/// PATH as the binary under test and `RALPH_HOME` this clone, as the README says.
fn run_block(env: &TestEnv, block: &str) -> std::process::Output {
    env.write("app.py", "print('hello')\n");
    env.commit_all("my app");
    let bin = env.dir().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ralph"), bin.join("ralph")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = env.command("sh");
    cmd.current_dir(&env.repo)
        .env("PATH", path)
        .env("RALPH_HOME", repo_root())
        .args(["-e", "-c", block]);
    run_with_limit(cmd, Duration::from_secs(120))
}

#[test]
fn the_readme_quickstart_completes_a_loop_in_the_users_own_repository() {
    let env = TestEnv::new();
    let block = quickstart_block();
    let out = run_block(&env, &block);
    assert_exit(&out, 0);
    let log = env.git(&["log", "--format=%s"]);
    assert!(log.contains("ralph: iteration 1 —"), "{log}");
    assert!(log.contains("ralph: iteration 2 —"), "{log}");
    assert!(log.trim_end().ends_with("my app"), "{log}");
    let said = stdout(&out);
    assert!(said.contains("State: halted — complete, exit 0"), "{said}");
    assert!(said.contains("Progress: 2/2 criteria"), "{said}");
}

/// Control: the same block with an agent that does nothing does not complete — the test above
/// sees a loop finish, not a script that exits 0.
#[test]
fn control_the_quickstart_with_an_idle_agent_does_not_complete() {
    let env = TestEnv::new();
    let block = quickstart_block();
    let demo = "bash $RALPH_HOME/examples/demo-agent.sh";
    assert!(block.contains(demo), "{block}");
    let idle = block.replace(demo, "true\" --max-iterations \"2");
    let out = run_block(&env, &idle);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let log = env.git(&["log", "--format=%s"]);
    assert!(!log.contains("ralph: iteration 1 —"), "{log}");
}

#[test]
fn the_readme_stays_a_product_page() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md is {lines} lines; move detail to docs/"
    );
    let first_screen: String = readme.lines().take(60).collect::<Vec<_>>().join("\n");
    for needed in ["Why not a `while` loop", "cargo install", "## Quickstart"] {
        assert!(readme.contains(needed), "README lacks {needed:?}");
    }
    assert!(
        first_screen.contains("Why not a `while` loop"),
        "{first_screen}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown file's headings make (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The relative links of `file` that lead nowhere: a missing file, or an anchor no heading of
/// the target makes.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let re = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for cap in re.captures_iter(&text) {
        let link = &cap[1];
        if link.starts_with("http://") || link.starts_with("https://") {
            continue;
        }
        let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
        let target: PathBuf = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        let Ok(body) = std::fs::read_to_string(&target) else {
            broken.push(format!("{}: {link} (no such file)", file.display()));
            continue;
        };
        if !anchor.is_empty() && !anchors(&body).iter().any(|a| a == anchor) {
            broken.push(format!("{}: {link} (no such heading)", file.display()));
        }
    }
    broken
}

#[test]
fn every_link_in_the_readme_and_docs_leads_somewhere() {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    assert!(files.len() > 5, "{files:?}");
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(broken.is_empty(), "{broken:#?}");
}

/// Control: the checker finds a link to a missing page and one to a missing heading.
#[test]
fn control_the_link_check_finds_broken_links() {
    let env = TestEnv::new();
    env.write("docs/a.md", "# A page\n\n## Its part\n");
    env.write(
        "README.md",
        "[ok](docs/a.md#its-part) [gone](docs/nope.md) [no heading](docs/a.md#other)\n",
    );
    let broken = broken_links(&env.repo.join("README.md"));
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("nope.md"), "{broken:#?}");
    assert!(broken[1].contains("#other"), "{broken:#?}");
}

/// `bash examples/quickstart.sh` on a machine with a ralph but no Rust toolchain (the image, a
/// release binary): PATH holds the system's tools and `ralph`, no `cargo`. Before, the script
/// died on `cargo: command not found`.
#[test]
fn the_quickstart_runs_without_cargo_when_ralph_is_installed() {
    let env = TestEnv::new();
    let bin = env.dir().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ralph"), bin.join("ralph")).unwrap();
    let script = repo_root().join("examples/quickstart.sh");
    let run = |path: String| {
        let mut cmd = env.command("bash");
        cmd.arg(&script)
            .current_dir(&env.home)
            .env("PATH", path)
            .env("TMPDIR", env.dir());
        run_with_limit(cmd, Duration::from_secs(60))
    };
    // Control: without ralph either, it says what is missing (before: cargo's 127).
    let none = run("/usr/bin:/bin".into());
    assert_exit(&none, 1);
    assert!(stderr(&none).contains("neither cargo"), "{}", stderr(&none));
    let out = run(format!("{}:/usr/bin:/bin", bin.display()));
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("ralph: iteration 3"),
        "{}",
        stdout(&out)
    );
}
