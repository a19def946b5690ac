//! `--sandbox` without false halts, within bounds, and with ralph's own state out of its reach
//! (issue 29): dotfiles and homes reached through links, bwrap's own errors (at the start and at
//! an attempt) as "cannot start", links the agent plants where ralph binds, renames across
//! directories, the sizes of the private mounts, a pids limit, and ralph's state directory.
//! Every test shows first what goes wrong without the fix or without the sandbox (the control),
//! then that ralph keeps its promise.

use std::path::{Path, PathBuf};

use crate::common::*;
use crate::sandbox::{run_script, write_script, write_user_config};

/// An environment outside `/tmp` with one criterion, committed.
fn setup() -> TestEnv {
    let env = TestEnv::outside_tmp();
    env.write_task(&["done"], "");
    env.commit_all("initial");
    env
}

/// The line of a script that ticks the criterion.
const TICK: &str = "sed -i 's/- \\[ \\] done/- [x] done/' RALPH_TASK.md\n";

/// `sh SCRIPT` under `--sandbox` (with `extra` flags), with `vars` in ralph's environment.
fn sandboxed(
    env: &TestEnv,
    script: &Path,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> std::process::Output {
    let mut args = vec!["--sandbox"];
    args.extend_from_slice(extra);
    run_script(env, script, &args, vars)
}

/// A script in the test's directory (outside the repository).
fn script(env: &TestEnv, name: &str, body: &str) -> PathBuf {
    let p = env.dir().join(name);
    write_script(&p, body);
    p
}

fn symlink(target: &Path, link: &Path) {
    if let Some(dir) = link.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[test]
fn linked_dotfiles_are_hidden_by_their_targets_and_a_linked_state_stays_writable() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    // A dotfile manager's home: every dotfile an absolute link into a directory elsewhere.
    let dot = env.dir().join("dotfiles");
    std::fs::create_dir_all(dot.join("ssh")).unwrap();
    std::fs::create_dir_all(dot.join("tool")).unwrap();
    std::fs::write(dot.join("netrc"), "machine example.com password hunter2\n").unwrap();
    std::fs::write(dot.join("ssh/id_test"), "PRIVATE KEY\n").unwrap();
    symlink(&dot.join("netrc"), &env.home.join(".netrc"));
    symlink(&dot.join("ssh"), &env.home.join(".ssh"));
    symlink(&dot.join("tool"), &env.home.join(".cache/tool"));
    write_user_config(&env, "sandbox_writable = [\"~/.cache/tool\"]\n");
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "{{ cat \"$HOME/.netrc\"; cat '{dot}/netrc'; ls \"$HOME/.ssh/\"; cat \"$HOME/.ssh/id_test\"; }} > seen.txt 2>&1\n\
             echo mine > \"$HOME/.cache/tool/out\"\n{TICK}",
            dot = dot.display()
        ),
    );
    // Control: without the sandbox the secrets are there to read, through the links too.
    let out = run_script(&env, &agent, &[], &[]);
    assert_exit(&out, 0);
    let seen = env.read("seen.txt");
    assert!(
        seen.contains("hunter2") && seen.contains("PRIVATE KEY"),
        "{seen}"
    );
    std::fs::remove_file(dot.join("tool/out")).unwrap();
    env.write_task(&["done"], "");
    env.commit_all("again");
    let out = sandboxed(&env, &agent, &[], &[]);
    assert_exit(&out, 0);
    let seen = env.read("seen.txt");
    assert!(
        !seen.contains("hunter2") && !seen.contains("PRIVATE KEY"),
        "{seen}"
    );
    // The linked state directory is the agent's to write, where it really lies.
    assert_eq!(
        std::fs::read_to_string(dot.join("tool/out")).unwrap(),
        "mine\n"
    );
}

#[test]
fn a_home_reached_through_a_link_is_sandboxed_as_itself() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    let real = env.dir().join("realhome");
    std::fs::create_dir_all(real.join(".ssh")).unwrap();
    std::fs::write(real.join(".ssh/id_test"), "PRIVATE KEY\n").unwrap();
    let linked = env.dir().join("linkedhome");
    symlink(&real, &linked);
    let home = linked.display().to_string();
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "cat \"$HOME/.ssh/id_test\" > seen.txt 2>&1\n\
             if (echo x > \"$HOME/planted\") 2>/dev/null; then echo home-writable; else echo home-read-only; fi >> seen.txt\n{TICK}"
        ),
    );
    // Control: without the sandbox the key is read and the home written.
    let out = run_script(&env, &agent, &[], &[("HOME", &home)]);
    assert_exit(&out, 0);
    assert!(env.read("seen.txt").contains("PRIVATE KEY"));
    assert!(env.read("seen.txt").contains("home-writable"));
    std::fs::remove_file(real.join("planted")).unwrap();
    env.write_task(&["done"], "");
    env.commit_all("again");
    let out = sandboxed(&env, &agent, &[], &[("HOME", &home)]);
    assert_exit(&out, 0);
    let seen = env.read("seen.txt");
    assert!(!seen.contains("PRIVATE KEY"), "{seen}");
    assert!(seen.contains("home-read-only"), "{seen}");
    assert!(!real.join("planted").exists());
}

/// The real bwrap on PATH.
fn real_bwrap() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .expect("bwrap_works found one")
}

/// A `bwrap` first on PATH that fails as bwrap does (its message, exit 1) when its arguments
/// hold `when`, and is the real one otherwise.
fn failing_bwrap(env: &TestEnv, when: &str, says: &str) -> String {
    let bin = env.dir().join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("bwrap");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \" $* \" in *'{when}'*) echo \"{says}\" >&2; exit 1;; esac\nexec '{}' \"$@\"\n",
            real_bwrap().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", bin.display())
}

#[test]
fn bwraps_own_error_at_the_start_is_cannot_start_at_once() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    // A container that lets bwrap make namespaces but not mount a `/proc`.
    let says = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted";
    let path = failing_bwrap(&env, " --proc ", says);
    let agent = script(&env, "agent.sh", &format!("echo ran > ran.txt\n{TICK}"));
    let out = sandboxed(&env, &agent, &[], &[("PATH", &path)]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("the sandbox cannot start") && err.contains(says),
        "{err}"
    );
    assert!(!env.repo.join("ran.txt").exists());
    assert!(env.iter_records().is_empty(), "{:?}", env.iter_records());
}

#[test]
fn bwraps_own_error_at_an_attempt_halts_at_once_and_an_agent_saying_it_among_its_words_does_not() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    // Fine at the start, refused when the agent's attempt comes (the host changed meanwhile).
    let says = "bwrap: Can't create file at /newroot/x: No space left on device";
    let path = failing_bwrap(&env, "agent.sh", says);
    let agent = script(&env, "agent.sh", &format!("echo ran > ran.txt\n{TICK}"));
    let out = sandboxed(&env, &agent, &[], &[("PATH", &path)]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("the sandbox could not start (exit 1)") && err.contains(says),
        "{err}"
    );
    assert!(env.iter_records().len() <= 1, "{:?}", env.iter_records());
    // Control: an agent that printed its own words, then bwrap's, failed at its work.
    let env = setup();
    let own = script(
        &env,
        "own.sh",
        &format!("echo working on it\necho '{says}' >&2\nexit 1\n"),
    );
    let out = sandboxed(&env, &own, &["--max-iterations", "1"], &[]);
    assert_exit(&out, 3);
    assert!(
        !stderr(&out).contains("could not start"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn links_the_agent_plants_where_ralph_binds_are_refused_by_name_at_the_next_start() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    // What a relative link would bind writable at the next start: a directory of the user's.
    let mine = env.home.join(".config/mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::create_dir_all(env.home.join(".cache")).unwrap();
    write_user_config(
        &env,
        "sandbox_writable = [\"~/.cache\", \"~/.cache/tool\"]\n",
    );
    // Run 1: `~/.cache/tool` does not exist yet (not bound), `.ralph/config.toml` neither; the
    // agent plants both as links.
    let repo = env.repo.display();
    let plant = script(
        &env,
        "plant.sh",
        &format!(
            "ln -s ../.config/mine \"$HOME/.cache/tool\"\n: > notes.toml\nln -s '{repo}/notes.toml' .ralph/config.toml\n"
        ),
    );
    let out = sandboxed(&env, &plant, &["--max-iterations", "1"], &[]);
    assert_exit(&out, 3);
    assert!(std::fs::symlink_metadata(env.home.join(".cache/tool")).is_ok());
    let write = script(
        &env,
        "write.sh",
        &format!("echo pwned > \"$HOME/.cache/tool/x\"\n{TICK}"),
    );
    // The next start (over again: the first run's record is ralph's, and stays).
    let out = sandboxed(&env, &write, &["--reset"], &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("symbolic link"), "{err}");
    assert!(
        err.contains(".cache/tool") || err.contains(".ralph/config.toml"),
        "{err}"
    );
    assert!(!mine.join("x").exists());
    // With the config link gone, the other is still refused by name, and nothing is written.
    std::fs::remove_file(env.repo.join(".ralph/config.toml")).unwrap();
    let out = sandboxed(&env, &write, &["--reset"], &[]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains(".cache/tool"), "{}", stderr(&out));
    assert!(!mine.join("x").exists());
}

#[test]
fn git_moves_across_directories_in_the_sandbox_and_nothing_moves_outside() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    env.write("a/f", "f\n");
    env.write("a/sub/h", "h\n");
    env.commit_all("files");
    let outside = env.home.join("x");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(env.home.join("y")).unwrap();
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "mkdir -p b c\n\
             try() {{ if sh -c \"$2\" 2>>moves.err; then echo \"$1 moved\"; else echo \"$1 refused\"; fi >> moves.txt; }}\n\
             try file 'git mv a/f b/f'\n\
             try dir 'git mv a/sub c/sub'\n\
             try outside 'mv \"$HOME/x/f\" \"$HOME/y/f\"'\n\
             rm -f moves.err\n{TICK}"
        ),
    );
    std::fs::write(outside.join("f"), "outside\n").unwrap();
    // Control: without the sandbox all three move.
    let out = run_script(&env, &agent, &[], &[]);
    assert_exit(&out, 0);
    assert_eq!(
        env.read("moves.txt"),
        "file moved\ndir moved\noutside moved\n"
    );
    // Back as they were.
    std::fs::rename(env.home.join("y/f"), outside.join("f")).unwrap();
    env.git(&["mv", "b/f", "a/f"]);
    env.git(&["mv", "c/sub", "a/sub"]);
    std::fs::remove_file(env.repo.join("moves.txt")).unwrap();
    env.write_task(&["done"], "");
    env.commit_all("again");
    let out = sandboxed(&env, &agent, &[], &[]);
    assert_exit(&out, 0);
    assert_eq!(
        env.read("moves.txt"),
        "file moved\ndir moved\noutside refused\n"
    );
    let tree = env.git(&["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(
        tree.contains("b/f\n") && tree.contains("c/sub/h\n") && !tree.contains("a/f"),
        "{tree}"
    );
    assert!(outside.join("f").exists());
}

/// `df`'s size of each mount, in bytes.
const SIZES: &str =
    "for d in /tmp /dev/shm /run; do df -B1 --output=size \"$d\" | tail -1 | tr -d ' '; done";

#[test]
fn the_private_mounts_have_a_size_and_dev_and_the_hidden_directories_are_read_only() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    std::fs::create_dir_all(env.home.join(".ssh")).unwrap();
    let mib64 = (64u64 << 20).to_string();
    // Control: bubblewrap's own tmpfs and `/dev` are unsized (half the memory) and writable.
    let bare = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/tmp"])
        .args([
            "sh",
            "-c",
            "df -B1 --output=size /tmp | tail -1; echo x > /dev/planted && echo dev-writable",
        ])
        .output()
        .unwrap();
    let bare = String::from_utf8_lossy(&bare.stdout).into_owned();
    let mut lines = bare.lines();
    let size: u64 = lines.next().unwrap().trim().parse().unwrap();
    assert!(size > 64 << 20, "{bare}");
    assert_eq!(lines.next(), Some("dev-writable"), "{bare}");
    let agent = script(
        &env,
        "agent.sh",
        &format!(
            "{{ {SIZES}\n\
             if head -c 70000000 /dev/zero > /tmp/big 2>/dev/null; then echo tmp-fits; else echo tmp-full; fi\n\
             rm -f /tmp/big\n\
             if (echo x > /dev/planted) 2>/dev/null; then echo dev-writable; else echo dev-read-only; fi\n\
             if (echo x > /dev/shm/x) 2>/dev/null; then echo shm-writable; else echo shm-read-only; fi\n\
             if (echo x > \"$HOME/.ssh/planted\") 2>/dev/null; then echo hidden-writable; else echo hidden-read-only; fi\n\
             }} > bounds.txt\n{TICK}"
        ),
    );
    // A size that is none is refused at the start, naming the variable.
    for (var, value) in [("RALPH_SANDBOX_TMPFS", "lots"), ("RALPH_SANDBOX_PIDS", "0")] {
        let out = sandboxed(&env, &agent, &[], &[(var, value)]);
        assert_exit(&out, 1);
        assert!(stderr(&out).contains(var), "{}", stderr(&out));
    }
    let out = sandboxed(&env, &agent, &[], &[("RALPH_SANDBOX_TMPFS", "64M")]);
    assert_exit(&out, 0);
    if stderr(&out).contains("cannot size a tmpfs") {
        skip_or_fail("this bwrap cannot size a tmpfs (bubblewrap 0.8 can)");
        return;
    }
    let want = format!(
        "{mib64}\n{mib64}\n{mib64}\ntmp-full\ndev-read-only\nshm-writable\nhidden-read-only\n"
    );
    assert_eq!(env.read("bounds.txt"), want);
}

/// python3 for the fork loop; else the test says why it cannot run.
fn python() -> Option<&'static str> {
    let p = "/usr/bin/python3";
    if Path::new(p).exists() {
        Some(p)
    } else {
        skip_or_fail("python3 (/usr/bin/python3) is not installed");
        None
    }
}

/// Forks up to 80 sleepers (their output closed) and writes how many it could to `forked.txt`.
const FORK_PY: &str = r#"
import os, time
n = 0
for i in range(80):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(1); os.close(2)
        time.sleep(60)
        os._exit(0)
    n += 1
open("forked.txt", "w").write(str(n))
"#;

#[test]
fn the_agents_tree_has_a_pids_limit() {
    if !bwrap_works() {
        return;
    }
    let Some(py) = python() else { return };
    let env = setup();
    let fork = env.dir().join("fork.py");
    std::fs::write(&fork, FORK_PY).unwrap();
    let agent = script(
        &env,
        "agent.sh",
        &format!("{py} '{}'\n{TICK}", fork.display()),
    );
    let forked = |limit: &str| {
        env.write_task(&["done"], "");
        env.git(&["commit", "-qam", &format!("limit {limit}"), "--allow-empty"]);
        let out = sandboxed(&env, &agent, &[], &[("RALPH_SANDBOX_PIDS", limit)]);
        assert_exit(&out, 0);
        let n: usize = env.read("forked.txt").trim().parse().unwrap();
        (n, stderr(&out))
    };
    // Control: under a limit above what it asks for, the agent forks all 80.
    let (n, err) = forked("1000");
    if err.contains("nothing bounds the number of its processes") {
        skip_or_fail("no pids limit can be set here (root without a cgroup ralph can make)");
        return;
    }
    assert_eq!(n, 80, "{err}");
    let (n, err) = forked("40");
    assert!(n < 40, "{n} processes under a limit of 40: {err}");
}

#[test]
fn a_writable_place_holding_ralphs_state_is_refused_at_the_start() {
    if !bwrap_works() {
        return;
    }
    let env = setup();
    // ralph's state directory from earlier runs, and a sibling of it.
    let state = env.home.join(".local/state/ralph");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(env.home.join(".local/share")).unwrap();
    let agent = script(
        &env,
        "agent.sh",
        &format!("echo forged > \"$HOME/.local/$PLACE/forged\"\n{TICK}"),
    );
    // Control: a writable entry is the agent's to write.
    write_user_config(&env, "sandbox_writable = [\"~/.local/share\"]\n");
    let out = sandboxed(&env, &agent, &[], &[("PLACE", "share")]);
    assert_exit(&out, 0);
    assert!(env.home.join(".local/share/forged").exists());
    env.write_task(&["done"], "");
    env.commit_all("again");
    for entry in ["~/.local/state", "~/.local", "~/.local/state/ralph/trees"] {
        if entry.ends_with("trees") {
            std::fs::create_dir_all(state.join("trees")).unwrap();
        }
        write_user_config(&env, &format!("sandbox_writable = [\"{entry}\"]\n"));
        let out = sandboxed(&env, &agent, &[], &[("PLACE", "state/ralph")]);
        assert_exit(&out, 1);
        let err = stderr(&out);
        let named = env.home.join(entry.trim_start_matches("~/"));
        assert!(
            err.contains("sandbox_writable")
                && err.contains(&named.display().to_string())
                && err.contains("ralph's state directory"),
            "{entry}: {err}"
        );
        assert!(!state.join("forged").exists(), "{entry}");
    }
    // ralph's state in the repository, which the agent writes: refused the same.
    std::fs::remove_file(env.home.join(".config/ralph/config.toml")).unwrap();
    let in_repo = env.repo.join(".state");
    let out = sandboxed(
        &env,
        &agent,
        &[],
        &[
            ("PLACE", "share"),
            ("XDG_STATE_HOME", &in_repo.display().to_string()),
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("ralph's state directory"),
        "{}",
        stderr(&out)
    );
}
