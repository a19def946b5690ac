//! The git boundary under `--sandbox` (issue 29, SPEC §4): a sandboxed agent commits in a git
//! directory of its own, and what it wrote there reaches ralph's git, which runs outside the
//! sandbox, only as a pack fetched through the git protocol. Each attack plants its thing in
//! every git directory the agent can name — the one its git reports, the common one, and the
//! repository's real `.git` by its path — in a sandboxed worktree loop (then its `--merge` and
//! the user's next `--worktree` loop, whose `git worktree add` runs outside) and in a sandboxed
//! main-tree loop (then the next run there). Each has its control: the user's own git, on a
//! repository where the same thing was planted, runs or reads it.
//!
//! The environments live outside `/tmp` (`TestEnv::outside_tmp`); every run is under
//! `ulimit -v`, so a git that reads `/dev/zero` dies of it at once instead of eating the machine.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::*;

/// The address space every ralph run (and the git it starts) gets, in KiB.
pub(super) const MEMORY_KIB: u64 = 1_500_000;

/// The markers directory, outside the repository (read-only to a sandboxed agent): a marker
/// there was made by something that ran outside the sandbox.
pub(super) fn marks_dir(env: &TestEnv) -> PathBuf {
    let m = env.dir().join("marks");
    std::fs::create_dir_all(&m).unwrap();
    m
}

pub(super) fn marks(env: &TestEnv) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(marks_dir(env))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A `sh` agent that runs `plant` once for every git directory it can name (`$g`), failures
/// ignored, then does its work (`work-NAME.txt`) and checks the first box.
pub(super) fn agent(env: &TestEnv, name: &str, plant: &str) -> String {
    let real = env.repo.join(".git");
    let script = env.dir().join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!(
            "for g in \"$(git rev-parse --absolute-git-dir)\" \"$(git rev-parse --path-format=absolute --git-common-dir)\" '{}'; do\n:\n{plant}\ndone 2>/dev/null\necho {name} > work-{name}.txt\nsed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n",
            real.display()
        ),
    )
    .unwrap();
    format!("sh '{}'", script.display())
}

pub(super) fn ralph(env: &TestEnv, args: &[&str]) -> Output {
    ralph_with_memory_limit(env, MEMORY_KIB, args, &[], Duration::from_secs(90))
}

/// The two loops an attack is run against.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loop {
    Worktree,
    MainTree,
}

/// A sandboxed loop of `kind` whose agent runs `plant` in each git directory; then what ralph
/// runs outside after it: the worktree loop's `--merge` and the user's next `--worktree` loop, or
/// the main tree's next run. Both complete.
fn attacked(env: &TestEnv, kind: Loop, plant: &str) {
    env.write("A.md", &task(&["a1"]));
    env.write("B.md", &task(&["b1"]));
    env.commit_all("tasks");
    let planter = agent(env, "planter", plant);
    let next = agent(env, "next", "");
    let (first, second) = match kind {
        Loop::Worktree => (
            ralph(
                env,
                &[
                    "run",
                    "--worktree",
                    "planter",
                    "A.md",
                    "--agent-cmd",
                    &planter,
                    "--yes",
                    "--grace",
                    "1s",
                    "--sandbox",
                    "--merge",
                ],
            ),
            ralph(
                env,
                &[
                    "run",
                    "--worktree",
                    "next",
                    "B.md",
                    "--agent-cmd",
                    &next,
                    "--yes",
                    "--grace",
                    "1s",
                    "--sandbox",
                ],
            ),
        ),
        Loop::MainTree => (
            ralph(
                env,
                &[
                    "run",
                    "A.md",
                    "--agent-cmd",
                    &planter,
                    "--yes",
                    "--grace",
                    "1s",
                    "--sandbox",
                ],
            ),
            ralph(
                env,
                &[
                    "run",
                    "B.md",
                    "--agent-cmd",
                    &next,
                    "--yes",
                    "--grace",
                    "1s",
                    "--sandbox",
                ],
            ),
        ),
    };
    assert_exit(&first, 0);
    assert_eq!(
        env.read("work-planter.txt"),
        "planter\n",
        "{kind:?}: merged"
    );
    assert_exit(&second, 0);
    assert_eq!(
        marks(env),
        Vec::<String>::new(),
        "{kind:?}: {}\n{}",
        stderr(&first),
        stderr(&second)
    );
}

/// A clean and a smudge filter in the git configuration, for every file: each writes a marker
/// (the clean one with a secret the sandbox hides) where only a filter run outside can.
fn filter_plant(env: &TestEnv) -> String {
    let m = marks_dir(env).display().to_string();
    std::fs::write(env.home.join(".netrc"), "machine x password hunter2\n").unwrap();
    let h = env.home.display();
    format!(
        "git config -f \"$g/config\" filter.ev.clean \"sh -c 'cat {h}/.netrc > {m}/clean; cat'\"\n\
         git config -f \"$g/config\" filter.ev.smudge \"sh -c 'touch {m}/smudge; cat'\"\n\
         git config -f \"$g/config\" filter.ev.required false\n\
         mkdir -p \"$g/info\"; echo '* filter=ev' >> \"$g/info/attributes\"\n"
    )
}

/// A git directory of the agent's own making (its objects those of the repository, its
/// configuration the filter), named by `commondir` in every git directory the agent can name.
fn commondir_plant(env: &TestEnv) -> String {
    let filter = filter_plant(env).replace("\"$g/", "\"$e/");
    format!(
        "e=\"$PWD/evil.git\"\n[ -d \"$e\" ] || {{ git init -q --bare \"$e\"\n{filter}\
         echo \"$(git rev-parse --path-format=absolute --git-common-dir)/objects\" > \"$e/objects/info/alternates\"\n\
         cp -r \"$(git rev-parse --path-format=absolute --git-common-dir)/refs/.\" \"$e/refs/\"; }}\n\
         echo \"$e\" > \"$g/commondir\"\n"
    )
}

#[test]
fn a_filter_in_the_config_never_runs_outside_the_sandbox() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        attacked(&env, kind, &filter_plant(&env));
    }
}

#[test]
fn a_planted_commondir_never_leads_ralphs_git_elsewhere() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        attacked(&env, kind, &commondir_plant(&env));
    }
}

#[test]
fn alternates_leading_to_dev_zero_are_never_read_outside() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        attacked(
            &env,
            kind,
            "mkdir -p \"$g/objects/info\"; ln -sf /dev/zero \"$g/objects/info/alternates\"",
        );
    }
}

#[test]
fn info_attributes_leading_to_dev_zero_are_never_read_outside() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        attacked(
            &env,
            kind,
            "mkdir -p \"$g/info\"; ln -sf /dev/zero \"$g/info/attributes\"",
        );
    }
}

#[test]
fn a_ref_leading_to_dev_zero_is_never_read_outside() {
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        attacked(&env, kind, "ln -sf /dev/zero \"$g/packed-refs\"");
    }
}

/// The agent commits `good.txt` (its own work, which ralph takes) and then replaces that blob
/// with another: the user's repository receives the commit, never the replacement — its own
/// git shows what the commit holds, the merge checks it out, and no `refs/replace` is there.
#[test]
fn an_agents_replace_refs_never_reach_the_users_repository() {
    let plant = "[ -f good.txt ] || { echo good > good.txt; git add good.txt; git commit -qm 'the agent: good'; }\n\
                 git replace -f \"$(git rev-parse HEAD:good.txt)\" \"$(echo evil | git hash-object -w --stdin)\"";
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        attacked(&env, kind, plant);
        assert_eq!(env.git(&["for-each-ref", "refs/replace"]), "", "{kind:?}");
        assert_eq!(env.git(&["cat-file", "-p", "HEAD:good.txt"]), "good\n");
        assert_eq!(env.read("good.txt"), "good\n", "{kind:?}");
        let log = env.git(&["log", "--format=%s"]);
        assert!(log.contains("the agent: good"), "{kind:?}: {log}");
    }
}

// --- Controls: the plain mechanism, run by the user's own git on a repository. ---

/// `git` in `dir`, isolated, under `ulimit -v` (the output whatever its status).
pub(super) fn plain_git(env: &TestEnv, dir: &Path, script: &str) -> Output {
    let mut cmd = env.command("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {MEMORY_KIB}; {script}"))
        .current_dir(dir);
    run_with_limit(cmd, Duration::from_secs(60))
}

/// A repository with one commit, where `plant` ran with `$g` its `.git`.
pub(super) fn planted_repo(env: &TestEnv, plant: &str) -> PathBuf {
    let dir = env.dir().join("control");
    std::fs::create_dir_all(&dir).unwrap();
    let out = plain_git(
        env,
        &dir,
        &format!(
            "git init -q -b main && git -c user.name=u -c user.email=u@e commit -q --allow-empty -m one && g=\"$PWD/.git\" && {{ {plant}\n}}"
        ),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    dir
}

#[test]
fn control_the_planted_filter_runs_for_a_plain_git_add() {
    let env = TestEnv::outside_tmp();
    let dir = planted_repo(&env, &filter_plant(&env));
    std::fs::write(dir.join("f.txt"), "x\n").unwrap();
    let out = plain_git(&env, &dir, "git add f.txt");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(marks(&env), vec!["clean"]);
    let secret = std::fs::read_to_string(marks_dir(&env).join("clean")).unwrap();
    assert!(secret.contains("hunter2"), "{secret}");
}

#[test]
fn control_a_planted_commondir_hands_git_the_agents_configuration() {
    let env = TestEnv::outside_tmp();
    let dir = planted_repo(&env, &commondir_plant(&env));
    let out = plain_git(
        &env,
        &dir,
        "git rev-parse --git-common-dir; git config filter.ev.clean",
    );
    let said = stdout(&out);
    assert!(
        said.contains("evil.git") && said.contains(".netrc"),
        "{said}"
    );
    std::fs::write(dir.join("f.txt"), "x\n").unwrap();
    plain_git(&env, &dir, "git add f.txt");
    assert_eq!(marks(&env), vec!["clean"]);
}

#[test]
fn control_dev_zero_in_the_git_dir_kills_a_plain_git() {
    for plant in [
        "mkdir -p \"$g/objects/info\"; ln -sf /dev/zero \"$g/objects/info/alternates\"",
        "mkdir -p \"$g/info\"; ln -sf /dev/zero \"$g/info/attributes\"",
    ] {
        let env = TestEnv::outside_tmp();
        let dir = planted_repo(&env, plant);
        std::fs::write(dir.join("f.txt"), "x\n").unwrap();
        let out = plain_git(
            &env,
            &dir,
            "git add f.txt && git status >/dev/null && git log --all -1 >/dev/null",
        );
        assert!(!out.status.success(), "{plant}: git survived");
    }
}

#[test]
fn control_a_replace_ref_changes_what_a_plain_git_shows() {
    let env = TestEnv::outside_tmp();
    let dir = planted_repo(
        &env,
        "echo good > good.txt; git add good.txt; git -c user.name=u -c user.email=u@e commit -qm good; git replace \"$(git rev-parse HEAD:good.txt)\" \"$(echo evil | git hash-object -w --stdin)\"",
    );
    let out = plain_git(&env, &dir, "git cat-file -p HEAD:good.txt");
    assert_eq!(stdout(&out), "evil\n");
}

/// The agent's own git directory is the repository's as far as its git reads it: the other
/// refs (a tag, `main` from a worktree loop) and `info/exclude` — a file the user excludes is
/// not in the agent's commit, which ralph takes.
#[test]
fn the_agents_own_git_directory_has_the_repositorys_refs_and_excludes() {
    let work = "echo s > secret.txt\necho w > work.txt\n\
                git rev-parse v1 main > seen.txt\n\
                git add -A && git commit -qm 'the agent: work'\n\
                sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n";
    for kind in [Loop::Worktree, Loop::MainTree] {
        if !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        env.write("A.md", &task(&["a1"]));
        env.commit_all("task");
        env.git(&["tag", "v1"]);
        let v1 = env.git(&["rev-parse", "v1"]);
        std::fs::write(env.repo.join(".git/info/exclude"), "secret.txt\n").unwrap();
        let script = env.dir().join("work.sh");
        std::fs::write(&script, work).unwrap();
        let agent = format!("sh '{}'", script.display());
        let mut args = vec!["run"];
        if let Loop::Worktree = kind {
            args.extend(["--worktree", "w", "--merge"]);
        }
        args.extend(["A.md", "--agent-cmd", &agent, "--yes", "--sandbox"]);
        let out = ralph(&env, &args);
        assert_exit(&out, 0);
        let seen = env.read("seen.txt");
        assert!(seen.starts_with(&v1), "{kind:?}: {seen}\n{}", stderr(&out));
        assert_eq!(seen.lines().count(), 2, "{kind:?}: {seen}");
        let theirs = env.git(&["log", "--format=%H", "--grep", "the agent: work", "main"]);
        assert_eq!(theirs.lines().count(), 1, "{kind:?}: {}", stderr(&out));
        let files = env.git(&["ls-tree", "-r", "--name-only", theirs.trim()]);
        assert!(files.contains("work.txt"), "{kind:?}: {files}");
        assert!(!files.contains("secret.txt"), "{kind:?}: {files}");
    }
}

/// ralph's own git runs under a data limit (`RALPH_GIT_MEMORY`, issue 29 "Bounds"): every git
/// it starts has it — a `git` first on PATH writes down its `ulimit -d` — and the one that
/// reads an `info/attributes` leading to `/dev/zero` (planted by an agent without the sandbox)
/// dies of it, the iteration ending in git's error, under the test's `ulimit -v` as a net. A
/// value that is no size stops ralph at the start, naming the variable.
#[test]
fn ralphs_git_runs_under_a_memory_limit() {
    let env = TestEnv::outside_tmp();
    env.write_task(&["a"], "");
    env.commit_all("initial");
    let real = env
        .command("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let bin = env.dir().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let limits = env.dir().join("limits.txt");
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nulimit -d >> '{}'\nexec '{real}' \"$@\"\n",
            limits.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = env.dir().join("zero.sh");
    std::fs::write(
        &script,
        "ln -sf /dev/zero .git/info/attributes\necho w > work.txt\n\
         sed -i 's/- \\[ \\] a/- [x] a/' RALPH_TASK.md\n",
    )
    .unwrap();
    let agent = format!("sh '{}'", script.display());
    let vars = [("PATH", path.as_str()), ("RALPH_GIT_MEMORY", "64M")];
    let args = ["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"];
    let out = ralph_with_memory_limit(&env, MEMORY_KIB, &args, &vars, Duration::from_secs(90));
    let seen = std::fs::read_to_string(&limits).unwrap_or_default();
    assert!(!seen.is_empty(), "{}", stderr(&out));
    for line in seen.lines() {
        assert_eq!(line, "65536", "every git of ralph's, in KiB: {seen}");
    }
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("Out of memory"), "{}", stderr(&out));
    // A bound that is none is refused before anything runs.
    let vars = [("PATH", path.as_str()), ("RALPH_GIT_MEMORY", "lots")];
    std::fs::remove_file(&limits).unwrap();
    let out = ralph_with_memory_limit(&env, MEMORY_KIB, &args, &vars, Duration::from_secs(90));
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("RALPH_GIT_MEMORY"),
        "{}",
        stderr(&out)
    );
    assert!(!limits.exists());
}

/// A `sh` agent running `body`, in `env`'s directory.
fn sh_agent(env: &TestEnv, name: &str, body: &str) -> String {
    let script = env.dir().join(format!("{name}.sh"));
    std::fs::write(&script, body).unwrap();
    format!("sh '{}'", script.display())
}

/// The `pre-commit` hook ralph runs for its commit sees what ralph staged — under `--sandbox`
/// too, where it runs in the sandbox on the agent's own git directory: the agent's new file,
/// which the agent never staged, is in the hook's `git diff --cached`. (The hook refuses, to
/// have ralph show what it printed.) Control: the same without the sandbox.
#[test]
fn the_pre_commit_hook_sees_what_ralph_staged_in_the_sandbox_too() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["a"], "");
        env.commit_all("initial");
        let hook = env.repo.join(".git/hooks/pre-commit");
        std::fs::write(
            &hook,
            "#!/bin/sh\necho \"staged: $(git diff --cached --name-only | tr '\\n' ' ')\" >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let agent = sh_agent(&env, "new", "echo w > new-work.txt\n");
        let mut args = vec![
            "run",
            "--agent-cmd",
            &agent,
            "--yes",
            "--max-iterations",
            "1",
        ];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = ralph(&env, &args);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        let line = said
            .lines()
            .find(|l| l.contains("staged: "))
            .unwrap_or_default();
        assert!(
            line.contains("new-work.txt"),
            "sandboxed {sandboxed}: {said}"
        );
    }
}

/// An agent that leaves a merge with conflicts under way: ralph commits not its conflict
/// markers — under `--sandbox`, where the merge is in the agent's own git directory, as
/// without it (the control), where it is in the repository's.
#[test]
fn a_merge_the_agent_left_under_way_is_not_committed() {
    if !bwrap_works() {
        return;
    }
    let body = "c() { git -c user.name=a -c user.email=a@e commit -qm \"$1\"; }\n\
                git checkout -q -b side && echo side > f.txt && git add f.txt && c side\n\
                git checkout -q - && echo mine > f.txt && git add f.txt && c mine\n\
                git -c user.name=a -c user.email=a@e merge -q side >/dev/null 2>&1\n\
                sed -i 's/- \\[ \\] a/- [x] a/' RALPH_TASK.md\n";
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["a"], "");
        env.commit_all("initial");
        let agent = sh_agent(&env, "merge", body);
        let mut args = vec![
            "run",
            "--agent-cmd",
            &agent,
            "--yes",
            "--max-iterations",
            "1",
        ];
        if sandboxed {
            args.push("--sandbox");
        }
        let out = ralph(&env, &args);
        assert!(env.read("f.txt").contains("<<<<<<<"), "{}", stderr(&out));
        let committed = env.git(&["show", "HEAD:f.txt"]);
        assert!(
            !committed.contains("<<<<<<<"),
            "sandboxed {sandboxed}: {committed}"
        );
        assert!(
            stderr(&out).contains("merge") && stderr(&out).contains("in progress"),
            "sandboxed {sandboxed}: {}",
            stderr(&out)
        );
    }
}
