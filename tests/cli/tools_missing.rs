//! A CI run with a tool removed fails loudly: this test binary, run again on one test that needs
//! the tool, with that tool alone taken off `PATH`, fails under `CI=true` and names the tool;
//! on a developer's machine (no `CI`) the same test skips and says why. The control: with the
//! whole `PATH`, the same test passes under `CI=true`, so it is the missing tool, and nothing
//! else, that fails it.

use std::ffi::OsString;
use std::path::Path;
use std::process::Output;

use crate::common::*;

/// A directory of links to every program on this process's `PATH` but `tool`, as a `PATH`.
fn path_without(tool: &str, dir: &Path) -> OsString {
    std::fs::create_dir_all(dir).expect("create the PATH directory");
    let path = std::env::var_os("PATH").expect("PATH is set");
    for from in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&from) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let link = dir.join(&name);
            // The first one on PATH wins, as a shell would find it.
            if name != tool && !link.exists() {
                let _ = std::os::unix::fs::symlink(entry.path(), link);
            }
        }
    }
    dir.as_os_str().to_owned()
}

/// This test binary on the one test `name`, with `PATH` as given and `CI` set or not.
fn run_one(name: &str, path: &OsString, ci: bool) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("PATH", path);
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI");
    }
    cmd.output().expect("run the test binary")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The promise for one tool and one test that needs it.
/// `named` is how the test's message names the tool.
fn fails_loudly_without(tool: &str, named: &str, test: &str) {
    let env = TestEnv::new();
    let whole = std::env::var_os("PATH").expect("PATH is set");
    let control = run_one(test, &whole, true);
    if !control.status.success() {
        // The tool is missing here too: the control cannot run (in CI that is a failure).
        skip_or_fail(&format!(
            "{test} does not pass with the whole PATH (is `{tool}` installed?):\n{}",
            text(&control)
        ));
        return;
    }
    assert!(
        text(&control).contains("1 passed"),
        "the control ran its test: {}",
        text(&control)
    );

    let without = path_without(tool, &env.home.join("path"));
    let ci = run_one(test, &without, true);
    let said = text(&ci);
    assert!(
        !ci.status.success(),
        "without `{tool}`, CI=true must fail {test}:\n{said}"
    );
    assert!(
        said.contains("CI is set, and this test cannot run") && said.contains(named),
        "the failure names the missing tool:\n{said}"
    );

    let dev = run_one(test, &without, false);
    let said = text(&dev);
    assert!(
        dev.status.success(),
        "without `{tool}` and without CI, {test} skips:\n{said}"
    );
    assert!(said.contains("skipping:") && said.contains(named), "{said}");
}

#[test]
fn without_tmux_the_live_view_test_fails_in_ci() {
    fails_loudly_without(
        "tmux",
        "tmux",
        "live::the_spinner_line_shows_the_live_count_and_the_agents_latest_line",
    );
}

#[test]
fn without_bwrap_a_sandbox_test_fails_in_ci() {
    fails_loudly_without(
        "bwrap",
        "bwrap",
        "sandbox::an_agent_in_the_sandbox_cannot_write_outside_or_read_secrets",
    );
}

#[test]
fn without_git_lfs_the_lfs_test_fails_in_ci() {
    fails_loudly_without(
        "git-lfs",
        "git lfs",
        "git_exact::git_lfs_commits_a_pointer_not_the_file",
    );
}
