//! HEAD and refs under `--sandbox` (issue 29): a sandboxed agent commits in a git directory of
//! its own, so whatever it does to `HEAD` and refs there — `HEAD` pointed at `main` or at
//! another loop's branch, `main` or `ralph/other` moved to a commit of its own, `HEAD` detached
//! at a commit not descending from ralph's tip, `refs/ralph/…` or `refs/remotes/origin/main`
//! written — no branch or ref of the user's repository moves but the loop's own, by ralph's
//! commit; `ralph merge` merges only the recorded tip; and the agent's work that descends from
//! the loop's tip reaches the loop's branch. Each attack runs in every git directory the agent
//! can name (`git_boundary::agent`), against a sandboxed worktree loop and a sandboxed main-tree
//! loop (on branch `feature`, with `main` beside it), after another loop (`ralph/other`)
//! finished. Each has its control: the same commands in a plain repository move the branch.

use std::process::Output;

use super::git_boundary::{Loop, agent, plain_git, planted_repo, ralph};
use crate::common::*;

/// Run before every attack, in the git directory `$g`: `G`, the agent's git there; `$c`, an
/// orphan commit of the agent's (`planted.txt`), its id kept in `planted-ids.txt` (empty, and
/// not kept, where the git directory is read-only).
const PRELUDE: &str = "G() { git --git-dir=\"$g\" --work-tree=\"$PWD\" -c user.name=a -c user.email=a@e \"$@\"; }\n\
     t=$(printf '100644 blob %s\\tplanted.txt\\n' \"$(echo planted | G hash-object -w --stdin)\" | G mktree)\n\
     c=$(G commit-tree -m planted \"$t\") && echo \"$c\" >> planted-ids.txt\n";

/// Run after every attack: what the agent's git says its refs and `HEAD` are now
/// (`seen.txt`), so a test knows the attack took effect where the agent ran it.
const EPILOGUE: &str = "\nG for-each-ref --format='%(objectname) %(refname)' >> seen.txt\n\
     echo \"HEAD $(G symbolic-ref -q HEAD || echo detached) $(G rev-parse HEAD)\" >> seen.txt\n";

/// (a) `HEAD` pointed at `refs/heads/BRANCH`, and a commit made through it.
fn through_head(branch: &str) -> String {
    format!(
        "G symbolic-ref HEAD refs/heads/{branch} && echo x >> through-head.txt && G add through-head.txt && G commit -qm 'agent: through HEAD'"
    )
}

/// (b) `main` and another loop's branch moved to the agent's orphan commit.
const MOVE_BRANCHES: &str = "[ -n \"$c\" ] && G update-ref refs/heads/main \"$c\" && G update-ref refs/heads/ralph/other \"$c\"";

/// (c) `HEAD` detached at the orphan commit, which descends from nothing of ralph's.
const DETACH_ELSEWHERE: &str = "[ -n \"$c\" ] && G update-ref --no-deref HEAD \"$c\"";

/// (c') The agent's own work committed, then `HEAD` detached at it: a descendant of the tip.
const DETACH_AT_OWN_WORK: &str = "echo d >> detached.txt && G add detached.txt && G commit -qm 'agent: detached work' && G checkout -q --detach";

/// (d) Refs of ralph's own kind and a remote-tracking branch, written at the orphan commit.
const OTHER_REFS: &[&str] = &[
    "refs/ralph/leases/hostile",
    "refs/ralph/origin/leases/hostile",
    "refs/remotes/origin/main",
    "refs/tags/planted",
];

fn other_refs() -> String {
    format!(
        "[ -n \"$c\" ] && for r in {}; do G update-ref \"$r\" \"$c\"; done",
        OTHER_REFS.join(" ")
    )
}

fn plant(attack: &str) -> String {
    format!("{PRELUDE}{attack}{EPILOGUE}")
}

/// Every ref of the user's repository but `own`, with what it points at, and `HEAD`.
fn refs_but(env: &TestEnv, own: &str) -> String {
    let all = env.git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    let mut kept: String = all
        .lines()
        .filter(|l| l.split(' ').next() != Some(own))
        .map(|l| format!("{l}\n"))
        .collect();
    kept.push_str(&env.git(&["symbolic-ref", "HEAD"]));
    kept
}

/// What an attacked loop left: its output, its own branch, and the recorded tip of `other`.
struct Attacked {
    out: Output,
    own: String,
    other_tip: String,
    /// The agent's orphan commits (at least one).
    planted: Vec<String>,
    /// What the agent's git said its refs were, in the sandbox.
    seen: String,
}

/// `main` with the tasks; a finished worktree loop `other`; for a main-tree loop, the main tree
/// then on `feature` (at `main`). Then the sandboxed loop of `kind` whose agent runs `attack` in
/// every git directory it can name. Checked: it completes; no ref but its own branch moved;
/// its own branch has the agent's work and none of its orphan commits.
fn attacked(env: &TestEnv, kind: Loop, attack: &str) -> Attacked {
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.commit_all("tasks");
    let out = run_loop(env, "other", "B.md", &agent(env, "other", ""), &[]);
    assert_exit(&out, 0);
    let other_tip = env.git(&["rev-parse", "ralph/other"]).trim().to_string();
    let hostile = agent(env, "hostile", &plant(attack));
    let mut args = vec!["run"];
    let own = match kind {
        Loop::Worktree => {
            args.extend(["--worktree", "hostile"]);
            "refs/heads/ralph/hostile"
        }
        Loop::MainTree => {
            env.git(&["checkout", "-q", "-b", "feature"]);
            "refs/heads/feature"
        }
    };
    args.extend(["A.md", "--agent-cmd", &hostile, "--yes", "--grace", "1s"]);
    args.push("--sandbox");
    let before = refs_but(env, own);
    let base = env.git(&["rev-parse", "HEAD"]);
    let out = ralph(env, &args);
    assert_exit(&out, 0);
    assert_eq!(refs_but(env, own), before, "{kind:?}: {}", stderr(&out));
    let work = env.git(&["show", &format!("{own}:work-hostile.txt")]);
    assert_eq!(work, "hostile\n", "{kind:?}");
    let ancestor = ["merge-base", "--is-ancestor", base.trim(), own];
    git_in(env, &env.repo, &ancestor);
    let planted: Vec<String> = env
        .git(&["show", &format!("{own}:planted-ids.txt")])
        .lines()
        .map(str::to_string)
        .collect();
    assert!(!planted.is_empty(), "{kind:?}: the agent made no commit");
    for c in &planted {
        assert_in_no_ref(env, c, kind);
    }
    let seen = env.git(&["show", &format!("{own}:seen.txt")]);
    Attacked {
        out,
        own: own.to_string(),
        other_tip,
        planted,
        seen,
    }
}

/// No ref of the user's repository reaches commit `c` (if the object is there at all).
fn assert_in_no_ref(env: &TestEnv, c: &str, kind: Loop) {
    let there = git_output_in(env, &env.repo, &["cat-file", "-e", c]);
    if there.status.success() {
        let refs = env.git(&["for-each-ref", "--contains", c]);
        assert_eq!(refs, "", "{kind:?}: {c} reached");
    }
}

fn subjects(env: &TestEnv, rev: &str) -> String {
    env.git(&["log", "--format=%s", rev])
}

/// (a) The agent points its `HEAD` at `main`, or at another loop's branch, and commits: that
/// branch never moves in the user's repository; the agent's commit, a descendant of the
/// loop's tip, is on the loop's own branch.
#[test]
fn a_sandboxed_agents_head_pointed_at_another_branch_moves_only_its_own() {
    for branch in ["main", "ralph/other"] {
        for kind in [Loop::Worktree, Loop::MainTree] {
            if !bwrap_works() {
                return;
            }
            let env = TestEnv::outside_tmp();
            let a = attacked(&env, kind, &through_head(branch));
            let head = format!("HEAD refs/heads/{branch} ");
            assert!(a.seen.contains(&head), "{kind:?}: {}", a.seen);
            let log = subjects(&env, &a.own);
            assert!(log.contains("agent: through HEAD"), "{kind:?}: {log}");
            for other in ["main", "ralph/other"] {
                let log = subjects(&env, other);
                assert!(!log.contains("agent: through HEAD"), "{kind:?}: {other}");
            }
        }
    }
}

#[test]
fn control_a_plain_commit_through_a_moved_head_moves_that_branch() {
    for branch in ["main", "ralph/other"] {
        let env = TestEnv::outside_tmp();
        let setup = "git checkout -q -b feature && git branch ralph/other\n";
        let dir = planted_repo(&env, &format!("{setup}{}", plant(&through_head(branch))));
        let out = plain_git(&env, &dir, &format!("git log --format=%s {branch}"));
        assert!(stdout(&out).contains("agent: through HEAD"), "{branch}");
        let out = plain_git(&env, &dir, "git log --format=%s feature");
        assert!(!stdout(&out).contains("agent: through HEAD"));
    }
}

/// (b) The agent moves `main` and `ralph/other` to a commit of its own: neither moves in the
/// user's repository, and `ralph merge other` merges the tip `other` recorded.
#[test]
fn a_sandboxed_agent_moving_other_branches_moves_nothing_and_merge_takes_the_recorded_tip() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let a = attacked(&env, kind, MOVE_BRANCHES);
        for r in ["refs/heads/main", "refs/heads/ralph/other"] {
            let moved = format!("{} {r}\n", a.planted[0]);
            assert!(a.seen.contains(&moved), "{kind:?}: {}", a.seen);
        }
        let out = env.ralph(&["merge", "other"]);
        assert_exit(&out, 0);
        let said = format!("{kind:?}: {}{}", stdout(&out), stderr(&out));
        let merged = ["merge-base", "--is-ancestor", &a.other_tip, "main"];
        assert!(
            git_output_in(&env, &env.repo, &merged).status.success(),
            "{said}"
        );
        let files = env.git(&["ls-tree", "-r", "--name-only", "main"]);
        assert!(files.contains("work-other.txt"), "{said}: {files}");
        assert!(!files.contains("planted.txt"), "{said}: {files}");
        for c in &a.planted {
            assert_in_no_ref(&env, c, kind);
        }
    }
}

#[test]
fn control_a_plain_update_ref_moves_the_branches() {
    let env = TestEnv::outside_tmp();
    let setup = "git checkout -q -b feature && git branch ralph/other\n";
    let dir = planted_repo(&env, &format!("{setup}{}", plant(MOVE_BRANCHES)));
    let c = std::fs::read_to_string(dir.join("planted-ids.txt")).unwrap();
    let out = plain_git(&env, &dir, "git rev-parse main ralph/other");
    assert_eq!(stdout(&out), format!("{c}{c}"));
}

/// (c) The agent detaches `HEAD` at a commit descending from nothing of ralph's: the commit is
/// not taken (said), the loop's branch gets the work tree by ralph's commit. (c') Detached at
/// its own work, which descends from the tip: that work is on the loop's branch.
#[test]
fn a_sandboxed_agents_detached_head_is_taken_only_when_it_descends() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let a = attacked(&env, kind, DETACH_ELSEWHERE);
        let head = format!("HEAD detached {}", a.planted[0]);
        assert!(a.seen.contains(&head), "{kind:?}: {}", a.seen);
        assert!(
            stderr(&a.out).contains("does not descend"),
            "{kind:?}: {}",
            stderr(&a.out)
        );

        let env = TestEnv::outside_tmp();
        let a = attacked(&env, kind, DETACH_AT_OWN_WORK);
        assert!(a.seen.contains("HEAD detached "), "{kind:?}: {}", a.seen);
        let log = subjects(&env, &a.own);
        assert!(log.contains("agent: detached work"), "{kind:?}: {log}");
    }
}

#[test]
fn control_a_plain_detached_head_is_where_the_next_commit_goes() {
    let env = TestEnv::outside_tmp();
    let dir = planted_repo(&env, &plant(DETACH_ELSEWHERE));
    let c = std::fs::read_to_string(dir.join("planted-ids.txt")).unwrap();
    let out = plain_git(
        &env,
        &dir,
        "git -c user.name=u -c user.email=u@e commit -q --allow-empty -m next && git rev-parse HEAD~1",
    );
    assert_eq!(stdout(&out), c, "{}", stderr(&out));
}

/// (d) The agent writes `refs/ralph/…`, `refs/remotes/origin/main` and a tag at its own
/// commit: none of them appears in the user's repository.
#[test]
fn a_sandboxed_agents_other_refs_never_reach_the_users_repository() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let a = attacked(&env, kind, &other_refs());
        for r in OTHER_REFS {
            let written = format!("{} {r}\n", a.planted[0]);
            assert!(a.seen.contains(&written), "{kind:?}: {}", a.seen);
        }
    }
}

#[test]
fn control_plain_refs_written_are_the_repositorys() {
    let env = TestEnv::outside_tmp();
    let dir = planted_repo(&env, &plant(&other_refs()));
    let c = std::fs::read_to_string(dir.join("planted-ids.txt")).unwrap();
    let out = plain_git(
        &env,
        &dir,
        &format!("git for-each-ref --contains {}", c.trim()),
    );
    let listed = stdout(&out);
    for r in OTHER_REFS {
        assert!(listed.contains(r), "{r}: {listed}");
    }
}
