//! git-lfs across the sandbox's boundary (issue 29): a sandboxed agent's `git add` of an
//! LFS-tracked file stores the object in its own git directory, which ralph remakes before
//! each attempt and never opens with git. The object reaches the user's repository only
//! through ralph's narrow door: named by a pointer in the commits ralph fetched, opened beneath
//! the agent's git directory following no link, a regular file of the pointer's size whose
//! sha256 is the pointer's oid. ralph's git outside checks out with the smudge skipped and fills
//! the pointers from the local store only.
//!
//! The user has `git lfs install`'s filter in their global configuration (as
//! `hostile_boundary::lfs_global` writes it), which the agent's git sees too.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

use super::git_boundary::Loop;
use super::hostile_boundary::{attacked_with, git_lfs_works, lfs_global};

/// The asset's size: 1 MiB.
const SIZE: usize = 1 << 20;

/// The line the asset repeats (the agent writes it with `yes`).
const LINE: &str = "lfs-asset";

/// The asset the agent writes: `line` repeated, [`SIZE`] bytes.
fn asset(line: &str) -> Vec<u8> {
    format!("{line}\n")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(SIZE)
        .collect()
}

/// The LFS oid of the asset of `line` (its sha256, hex).
fn oid(line: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(asset(line))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The agent tracks `*.bin` with git-lfs and writes the asset of `line` to `big.bin`.
fn write_asset(line: &str) -> String {
    format!("git lfs track '*.bin' >/dev/null\nyes {line} | head -c {SIZE} > big.bin\n")
}

/// The agent commits (its git-lfs stores the object in the agent's own git directory).
const COMMIT: &str = "git add -A && git -c user.name=a -c user.email=a@e commit -qm 'the agent'\n";

/// The agent commits an early version of the asset, then the asset ([`LINE`]) itself: the
/// early version's object is in no work tree, only in the agent's store.
fn commit_assets() -> String {
    format!(
        "{}{COMMIT}{}{COMMIT}",
        write_asset(EARLY),
        write_asset(LINE)
    )
}

/// The early version's line.
const EARLY: &str = "lfs-early";

/// Where the object `oid` lies in the agent's git-lfs store (a shell expression, in the work
/// tree inside the sandbox).
fn agents_object(oid: &str) -> String {
    format!(
        "\"$(git rev-parse --path-format=absolute --git-common-dir)/lfs/objects/{}/{}/{oid}\"",
        &oid[..2],
        &oid[2..4]
    )
}

/// The object `oid` in the user's repository's LFS store.
fn users_object(env: &TestEnv, oid: &str) -> PathBuf {
    env.repo
        .join(".git/lfs/objects")
        .join(&oid[..2])
        .join(&oid[2..4])
        .join(oid)
}

/// A sandboxed loop of `kind` whose agent runs `plant`, the user's global configuration
/// `git lfs install`'s.
fn run(env: &TestEnv, kind: Loop, plant: &str) -> Output {
    let global = lfs_global(env);
    let vars = [("GIT_CONFIG_GLOBAL", global.to_str().unwrap())];
    attacked_with(env, kind, &format!("{plant}\nexit 0"), &vars, &[])
}

/// `git ARGS` in `dir` with the user's `git lfs install` configuration.
fn lfs_git(env: &TestEnv, dir: &Path, args: &[&str]) -> Output {
    env.command("git")
        .env("GIT_CONFIG_GLOBAL", lfs_global(env))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The main tree holds the asset itself, `main` a pointer to it, and `git lfs fsck` finds
/// every LFS object of the commits the loop made (from the task's commit, the root, to `main`)
/// in the user's store, whole.
fn assert_asset_merged(env: &TestEnv, kind: Loop, out: &Output) {
    assert_exit(out, 0);
    let pointer = env.git(&["cat-file", "-p", "main:big.bin"]);
    assert!(
        pointer.starts_with("version https://git-lfs.github.com/spec/v1")
            && pointer.contains(&oid(LINE)),
        "{kind:?}: main holds no pointer to the asset: {pointer:.200}\n{}",
        stderr(out)
    );
    let held = std::fs::read(env.repo.join("big.bin")).unwrap();
    assert!(
        held == asset(LINE),
        "{kind:?}: the main tree's big.bin is {} bytes: {:.200}\n{}",
        held.len(),
        String::from_utf8_lossy(&held),
        stderr(out)
    );
    let root = env.git(&["rev-list", "--max-parents=0", "main"]);
    let range = format!("{}..main", root.trim());
    let fsck = lfs_git(env, &env.repo, &["lfs", "fsck", &range]);
    assert!(
        fsck.status.success(),
        "{kind:?}: git lfs fsck {range}: {}{}\n{}",
        String::from_utf8_lossy(&fsck.stdout),
        stderr(&fsck),
        stderr(out)
    );
}

/// The agent commits LFS-tracked 1 MiB files itself, twice: the objects it stored in its own
/// git directory reach the user's repository — the one no work tree holds any more too — and
/// the merged main tree holds the file itself.
///
/// It failed before: ralph fetched only the pack; the last version's object reached the user's
/// store only because ralph's own `git add` outside cleaned the file again, and the early
/// version's was lost with the agent's git directory (`git lfs fsck`: missing object).
#[test]
fn the_lfs_objects_the_agent_committed_reach_the_users_repository() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() || !git_lfs_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let out = run(&env, kind, &commit_assets());
        assert_asset_merged(&env, kind, &out);
        let log = env.git(&["log", "--format=%s", "main"]);
        assert_eq!(log.matches("the agent").count(), 2, "{kind:?}: {log}");
    }
}

/// The agent writes the LFS-tracked file and ralph commits it (its `git add`, outside, runs the
/// user's clean filter, which stores the object): the same end.
#[test]
fn an_lfs_file_ralph_committed_reaches_the_users_repository() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() || !git_lfs_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let out = run(&env, kind, &write_asset(LINE));
        assert_asset_merged(&env, kind, &out);
    }
}

/// What a hostile agent makes of the early version's object in its store, once committed.
const FORGERIES: [(&str, &str); 3] = [
    // Other bytes of the same size where the object was.
    (
        "wrong content",
        "rm -f \"$o\" && yes lfs-forged | head -c SIZE > \"$o\"",
    ),
    // The object a link to a file of the work tree holding its very bytes: a reader that
    // follows links would find it whole.
    (
        "a linked object",
        "mv \"$o\" early.dat && ln -s \"$PWD/early.dat\" \"$o\"",
    ),
    // The whole store a link to a directory of the work tree.
    (
        "a linked lfs directory",
        "l=\"$(git rev-parse --path-format=absolute --git-common-dir)/lfs\" && \
         mv \"$l\" lfs-moved && ln -s \"$PWD/lfs-moved\" \"$l\"",
    ),
];

/// An object in the agent's store that is not what its pointer names — other bytes, or
/// reached through a link — is refused with a warning and never copied; the loop's work is
/// taken all the same. The control, the honest case first: the same object left as git-lfs
/// stored it is copied, whole.
#[test]
fn a_forged_lfs_object_in_the_agents_store_is_refused() {
    if !bwrap_works() || !git_lfs_works() {
        return;
    }
    let early = oid(EARLY);
    for (what, forge) in [("nothing (control)", ":")].into_iter().chain(FORGERIES) {
        let env = TestEnv::outside_tmp();
        let forge = forge.replace("SIZE", &SIZE.to_string());
        let plant = format!("{}o={}\n{forge}\n", commit_assets(), agents_object(&early));
        let out = run(&env, Loop::MainTree, &plant);
        assert_exit(&out, 0);
        let copied = users_object(&env, &early);
        if what.ends_with("(control)") {
            assert!(
                std::fs::read(&copied).is_ok_and(|b| b == asset(EARLY)),
                "{what}: not copied\n{}",
                stderr(&out)
            );
            continue;
        }
        assert!(
            copied.symlink_metadata().is_err(),
            "{what}: copied\n{}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(&format!("LFS object {early}"))
                && stderr(&out).contains("refused"),
            "{what}: no warning\n{}",
            stderr(&out)
        );
        if what == "a linked object" {
            // Control: what the link leads to is the object, whole.
            assert!(std::fs::read(env.repo.join("early.dat")).is_ok_and(|b| b == asset(EARLY)));
        }
        assert_eq!(
            std::fs::read(env.repo.join("big.bin")).unwrap(),
            asset(LINE)
        );
    }
}

/// `RALPH_LFS_MAX` bounds the bytes ralph takes from the agent's store per fetch: at 1 MiB, one
/// of the agent's two 1 MiB objects (neither left in the work tree) is taken, the other refused
/// and said. The control, first: without it both are taken. A value that is not a size stops
/// ralph at its start, naming the variable.
#[test]
fn ralph_lfs_max_bounds_what_is_taken_from_the_agent() {
    if !bwrap_works() || !git_lfs_works() {
        return;
    }
    let plant = format!("{}git rm -q big.bin\n{COMMIT}", commit_assets());
    for max in [None, Some("1M")] {
        let env = TestEnv::outside_tmp();
        let global = lfs_global(&env);
        let mut vars = vec![("GIT_CONFIG_GLOBAL", global.to_str().unwrap())];
        vars.extend(max.map(|m| ("RALPH_LFS_MAX", m)));
        let out = attacked_with(
            &env,
            Loop::MainTree,
            &format!("{plant}\nexit 0"),
            &vars,
            &[],
        );
        assert_exit(&out, 0);
        let held = [EARLY, LINE]
            .into_iter()
            .filter(|l| std::fs::read(users_object(&env, &oid(l))).is_ok_and(|b| b == asset(l)))
            .count();
        let said = stderr(&out).contains("RALPH_LFS_MAX");
        match max {
            None => assert!(held == 2 && !said, "{held}\n{}", stderr(&out)),
            Some(_) => assert!(held == 1 && said, "{held}\n{}", stderr(&out)),
        }
    }
    let env = TestEnv::new();
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let out = ralph_with_memory_limit(
        &env,
        super::git_boundary::MEMORY_KIB,
        &["status"],
        &[("RALPH_LFS_MAX", "lots")],
        std::time::Duration::from_secs(30),
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("RALPH_LFS_MAX=`lots`"),
        "{}",
        stderr(&out)
    );
}
