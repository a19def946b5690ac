//! The version `ralph --version` prints: `0.1.0 (abc1234 2026-12-07)` when built from a git
//! checkout of ralph (its HEAD's short hash and commit date), just `0.1.0` otherwise (a tarball,
//! as `cargo package` and `cargo install` build, or no git at all). Never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let full = match commit(&dir) {
        Some((hash, date)) => format!("{version} ({hash} {date})"),
        None => {
            // A package's own file, absent from a checkout: `cargo package` verifies the
            // package in the checkout's target directory, and the checkout's next build must
            // not take this run's version for its own.
            println!("cargo:rerun-if-changed=.cargo_vcs_info.json");
            version
        }
    };
    println!("cargo:rustc-env=RALPH_VERSION={full}");
}

/// HEAD's short hash and commit date, if `dir` is the top of a git work tree; each file HEAD
/// resolves through is watched so that a new commit rebuilds the version.
fn commit(dir: &Path) -> Option<(String, String)> {
    // A package unpacked under a checkout's target/ is no checkout of its own.
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(dir).ok()? {
        return None;
    }
    // A linked worktree's `.git` file: absent from a package unpacked in its target directory,
    // so that a package's build never takes this run's version for its own.
    let mut watched = vec![".git".to_string()];
    watched.retain(|p| dir.join(p).is_file());
    watched.push(git(dir, &["rev-parse", "--git-path", "HEAD"])?);
    if let Some(name) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(dir, &["rev-parse", "--git-path", &name])?);
        watched.push(git(dir, &["rev-parse", "--git-path", "packed-refs"])?);
    }
    for path in watched {
        let path = dir.join(path);
        // A path that does not exist would rerun this script on every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let hash = git(dir, &["rev-parse", "--short", "HEAD"])?;
    let date = git(dir, &["log", "-1", "--format=%cs", "HEAD"])?;
    Some((hash, date))
}

/// `git ARGS` in `dir`, its trimmed stdout if it succeeded with some; the environment's own
/// repository (`GIT_DIR`, as in a hook) is not asked.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}
