//! `--sandbox` at the kernel's edges (SPEC §4, "no back doors"): what a process inside gets from
//! the kernel whatever the file system says — the kernel's settings in `/proc/sys` (as root,
//! `kernel.core_pattern` names a program the kernel runs as root outside every namespace), the
//! user's kernel keyrings, and FIFOs (a FIFO at `.git/index` hangs ralph's own `git status`
//! outside the sandbox, deaf to Ctrl-C). Every test shows the door open without the sandbox (or
//! with bubblewrap alone) first.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::sandbox::{run_script, write_script};

fn is_root() -> bool {
    // SAFETY: geteuid has no failure mode.
    unsafe { libc::geteuid() == 0 }
}

/// `sh -c 'exec 3>>FILE'`: whether FILE opens for writing (nothing is written).
const OPENS_FOR_WRITING: &str = "exec 3>>";

#[test]
fn the_kernels_settings_are_read_only_in_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    let file = "/proc/sys/kernel/core_pattern";
    let probe = format!(
        "if (sh -c '{OPENS_FOR_WRITING}{file}') 2>/dev/null; then echo writable; else echo read-only; fi"
    );
    if is_root() {
        // The door: a process whose uid is root opens the kernel's settings for writing with no
        // capability at all, and bubblewrap's own cover does not reach them.
        let bare = std::process::Command::new("bwrap")
            .args(["--die-with-parent", "--unshare-pid", "--cap-drop", "ALL"])
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
            .args(["sh", "-c", &probe])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&bare.stdout).trim(), "writable");
    } else {
        eprintln!("note: not root, so {file} is read-only here with or without the sandbox");
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["probe"], "");
        env.commit_all("initial");
        let script = env.dir().join("probe.sh");
        write_script(
            &script,
            &format!(
                "{probe} > sysctl.txt\nsed -i 's/- \\[ \\] probe/- [x] probe/' RALPH_TASK.md\n"
            ),
        );
        let args: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run_script(&env, &script, args, &[]);
        assert_exit(&out, 0);
        let want = if !sandboxed && is_root() {
            "writable"
        } else {
            "read-only"
        };
        assert_eq!(
            env.read("sysctl.txt").trim(),
            want,
            "sandboxed: {sandboxed}"
        );
    }
}

/// python3 for the keyring calls; else the test says why it cannot run.
fn python() -> Option<&'static str> {
    let p = "/usr/bin/python3";
    if Path::new(p).exists() {
        Some(p)
    } else {
        skip_or_fail("python3 (/usr/bin/python3) is not installed");
        None
    }
}

/// `keyctl` through python's ctypes: `add SESSION_KEY USER_KEY -- PROGRAM ARGS` joins a new
/// session keyring linking the user's (as a login's does), adds one key to it and one to the
/// user's keyring, and becomes PROGRAM;
/// `find NAME` (the process's keyrings, then the user's) prints `found` or `missing` (found
/// means read); `drop NAME` invalidates the key of that name.
const KEYS_PY: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, REQUEST_KEY, KEYCTL = 248, 249, 250
SESSION, USER = -3, -4
JOIN, LINK, SEARCH, READ, INVALIDATE = 1, 8, 10, 11, 21
def find(name):
    key = libc.syscall(REQUEST_KEY, b"user", name.encode(), None, 0)
    if key < 0:
        key = libc.syscall(KEYCTL, SEARCH, USER, b"user", name.encode(), 0)
    return key
cmd = sys.argv[1]
if cmd == "add":
    libc.syscall(KEYCTL, JOIN, None)
    # As a login's session keyring does, it links the user's keyring.
    libc.syscall(KEYCTL, LINK, USER, SESSION)
    for name, ring in ((sys.argv[2], SESSION), (sys.argv[3], USER)):
        if libc.syscall(ADD_KEY, b"user", name.encode(), b"secret", 6, ring) < 0:
            sys.exit("add_key failed: %d" % ctypes.get_errno())
    os.execv(sys.argv[5], sys.argv[5:])
elif cmd == "find":
    key = find(sys.argv[2])
    buf = ctypes.create_string_buffer(16)
    n = libc.syscall(KEYCTL, READ, key, buf, 16) if key > 0 else -1
    print("found" if n == 6 and buf.raw[:6] == b"secret" else "missing")
elif cmd == "drop":
    key = find(sys.argv[2])
    if key > 0:
        libc.syscall(KEYCTL, INVALIDATE, key)
"#;

#[test]
fn the_users_kernel_keyrings_stay_out_of_the_sandbox() {
    let Some(py) = python() else { return };
    if !bwrap_works() {
        return;
    }
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["probe"], "");
        env.commit_all("initial");
        let keys = env.dir().join("keys.py");
        write_script(&keys, KEYS_PY);
        let tag = format!("ralph-test-{}-{sandboxed}", std::process::id());
        let (session_key, user_key) = (format!("{tag}-session"), format!("{tag}-user"));
        let script = env.dir().join("probe.sh");
        write_script(
            &script,
            &format!(
                "{py} {keys} find {session_key} > session.txt\n\
                 {py} {keys} find {user_key} > user.txt\n\
                 sed -i 's/- \\[ \\] probe/- [x] probe/' RALPH_TASK.md\n",
                keys = keys.display()
            ),
        );
        let agent = format!("sh '{}'", script.display());
        let mut cmd = env.command(py);
        cmd.current_dir(&env.repo)
            .args([keys.to_str().unwrap(), "add", &session_key, &user_key, "--"])
            .arg(env!("CARGO_BIN_EXE_ralph"))
            .args(["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"]);
        if sandboxed {
            cmd.arg("--sandbox");
        }
        let out = run_with_limit(cmd, Duration::from_secs(60));
        let _ = env
            .command(py)
            .args([keys.to_str().unwrap(), "drop", &user_key])
            .status();
        assert_exit(&out, 0);
        let want = if sandboxed { "missing" } else { "found" };
        for (ring, file) in [("session", "session.txt"), ("user", "user.txt")] {
            assert_eq!(
                env.read(file).trim(),
                want,
                "the {ring} keyring, sandboxed: {sandboxed}"
            );
        }
    }
}

/// Whether a child of `pid` waits in `open` for the other end of a FIFO.
fn child_waits_on_a_fifo(pid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let dir = e.path();
        let parent = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(1)?
                    .parse::<u32>()
                    .ok()
            });
        parent == Some(pid)
            && std::fs::read_to_string(dir.join("wchan")).is_ok_and(|w| w == "wait_for_partner")
    })
}

/// Open `fifo` for writing as long as a reader waits on it, so that reader goes on.
fn release(fifo: &PathBuf) {
    use std::os::unix::fs::OpenOptionsExt;
    for _ in 0..100 {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo);
        if opened.is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_agent_in_the_sandbox_cannot_hang_ralphs_git_with_a_fifo() {
    if !bwrap_works() {
        return;
    }
    let agent = "mv .git/index .git/index.kept\n\
                 if mkfifo .git/index 2>/dev/null; then echo made > fifo.txt; else echo refused > fifo.txt; mv .git/index.kept .git/index; fi\n\
                 if mkfifo /tmp/own.fifo; then echo made > tmp-fifo.txt; fi\n\
                 sed -i 's/- \\[ \\] probe/- [x] probe/' RALPH_TASK.md\n";
    for sandboxed in [false, true] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["probe"], "");
        env.commit_all("initial");
        let script = env.dir().join("fifo.sh");
        write_script(&script, agent);
        let mut cmd = env.ralph_cmd();
        cmd.args(["run", "--agent-cmd", &format!("sh '{}'", script.display())])
            .args(["--yes", "--grace", "1s"]);
        if sandboxed {
            cmd.arg("--sandbox");
        }
        let mut bg = env.spawn(cmd);
        let mut exited = None;
        let hung = wait_until(Duration::from_secs(30), || {
            exited = bg.child.try_wait().unwrap();
            exited.is_some() || child_waits_on_a_fifo(bg.child.id())
        }) && exited.is_none();
        if hung {
            let _ = bg.child.kill();
            let _ = bg.child.wait();
            release(&env.repo.join(".git/index"));
        }
        if !sandboxed {
            // The door: without the sandbox the FIFO is made, and ralph's `git status` waits on
            // it for ever (an interrupt is not even heard while it does).
            assert!(hung, "ralph's git never waited on the FIFO");
            assert_eq!(env.read("fifo.txt").trim(), "made");
            continue;
        }
        assert!(
            !hung,
            "ralph's git waits on a FIFO the sandboxed agent made"
        );
        assert_eq!(exited.and_then(|s| s.code()), Some(0));
        assert_eq!(env.read("fifo.txt").trim(), "refused");
        // FIFOs still work where nothing of ralph's reads: the sandbox's private /tmp.
        assert_eq!(env.read("tmp-fifo.txt").trim(), "made");
    }
}
