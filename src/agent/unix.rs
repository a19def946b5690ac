//! Unix process plumbing: signals to a whole process group, the parent-death signal, and the
//! guard process that kills the agent's group when ralph dies — even by SIGKILL.
//!
//! Why a guard: `PR_SET_PDEATHSIG` reaches only the agent itself (and exists only on Linux); its
//! children would survive a killed ralph. The guard is ralph's own binary (`ralph __guard PGID`)
//! in a process group of its own (so neither the terminal's Ctrl-C nor a kill of the agent's group
//! reaches it), ignoring SIGINT/SIGTERM/SIGHUP, blocked reading a pipe whose only write end ralph
//! holds. When ralph closes it — at the end of every agent run, or implicitly when the kernel
//! reaps a dead ralph — the read returns EOF and the guard SIGKILLs the whole group, then exits.

use std::io::Read;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{SigHandler, Signal, killpg, signal};
use nix::unistd::Pid;

/// A process group led by a process ralph spawned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group(Pid);

impl Group {
    pub fn from_leader(pid: u32) -> Group {
        Group(Pid::from_raw(pid as i32))
    }

    pub fn id(&self) -> i32 {
        self.0.as_raw()
    }

    /// SIGTERM to every process of the group.
    pub fn terminate(&self) {
        let _ = killpg(self.0, Signal::SIGTERM);
    }

    /// SIGKILL to every process of the group.
    pub fn kill(&self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }

    /// Whether any process (zombies included) is still in the group.
    pub fn alive(&self) -> bool {
        killpg(self.0, None).is_ok()
    }
}

/// On Linux, the agent gets SIGKILL when ralph dies, even by SIGKILL.
#[cfg(target_os = "linux")]
pub fn set_parent_death_signal(cmd: &mut tokio::process::Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would send the signal.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub fn set_parent_death_signal(_cmd: &mut tokio::process::Command) {}

/// The guard of one agent run; `release` ends it.
#[derive(Debug)]
pub struct Guard {
    child: Child,
}

/// The hidden subcommand the guard runs as.
pub const GUARD_COMMAND: &str = "__guard";

impl Guard {
    /// Start a guard for `group`. Fails only if ralph's own binary cannot be started.
    pub fn spawn(group: Group) -> std::io::Result<Guard> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .arg(GUARD_COMMAND)
            .arg(group.id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Guard { child })
    }

    /// Close the pipe (the guard kills what is left of the group) and reap the guard.
    pub fn release(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The guard's body: wait for EOF on stdin, then SIGKILL the group. Returns the exit code.
pub fn run_guard(pgid: &str) -> i32 {
    let Ok(pgid) = pgid.parse::<i32>() else {
        return 2;
    };
    if pgid <= 1 {
        return 2;
    }
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe {
            let _ = signal(sig, SigHandler::SigIgn);
        }
    }
    let mut stdin = std::io::stdin();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    Group(Pid::from_raw(pgid)).kill();
    0
}
