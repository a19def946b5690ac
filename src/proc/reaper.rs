//! The guard (`ralph __guard`): the parent of every command ralph supervises and, on Linux, a
//! child subreaper, so whatever the command leaves running — a daemon that moved to a session
//! or group of its own with `setsid` or a double fork — is adopted by the guard and dies with
//! the command's run: at its end, when ralph stops it, and when ralph dies, even by SIGKILL.
//!
//! The protocol, over two pipes ralph made (their numbers are the guard's first arguments):
//! - control, ralph → guard: one byte per order, [`TERMINATE`] (SIGTERM to the command's group
//!   and every descendant) or [`KILL`] (SIGKILL to all of them); its end of file — ralph closed
//!   it, or ralph died and the kernel closed it — means "finish": SIGTERM to everything left,
//!   SIGKILL to what outlives the grace, then exit.
//! - report, guard → ralph: text lines, `pid N` once the command runs, `exit N` or `signal N`
//!   when it ends, `spawn ERRNO` if it could not start, `swept N` (the processes it left running
//!   that the guard ended) before the guard exits.
//!
//! The command leads a process group of its own and is not reaped until its group has been
//! signalled for the last time (`waitid` with `WNOWAIT` sees its end), so its group id cannot be
//! reused by then. Other descendants are signalled through [`super::tree`], by pid and start
//! time. Without `/proc` (macOS) only the command's group is signalled.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal as NixSignal};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::FdFlags;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitOptions, waitid};

use super::tree;

/// The hidden subcommand the guard runs as.
pub(crate) const GUARD_COMMAND: &str = "__guard";
/// Control byte: SIGTERM to the command's group and every descendant.
pub(crate) const TERMINATE: u8 = b'T';
/// Control byte: SIGKILL to all of them.
pub(crate) const KILL: u8 = b'K';
/// How long SIGKILLed processes may take to go before the guard stops waiting for them (a
/// process in uninterruptible sleep dies only when its I/O returns).
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often the guard repeats SIGKILL while processes remain (a process forked just before a
/// SIGKILL reached its parent is adopted a moment later).
const KILL_REPEAT: Duration = Duration::from_millis(10);

/// The option that spares the command itself from SIGTERM (see [`Args::spare_leader`]).
pub(crate) const SPARE_LEADER: &str = "spare-leader";

/// The guard's arguments: `CONTROL_FD REPORT_FD GRACE_MS [spare-leader] -- PROGRAM ARGS…`.
struct Args {
    control: RawFd,
    report: RawFd,
    grace: Duration,
    /// The command is a wrapper that does not pass SIGTERM on and dies of it, taking what it
    /// runs down at once (bubblewrap: its PID namespace ends with it): SIGTERM goes to what it
    /// runs, so that gets its grace; SIGKILL still goes to all.
    spare_leader: bool,
    program: OsString,
    args: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Option<Args> {
    let num = |i: usize| args.get(i)?.to_str()?.parse::<u64>().ok();
    let fd = |i: usize| {
        num(i)
            .and_then(|n| RawFd::try_from(n).ok())
            .filter(|n| *n > 2)
    };
    let spare_leader = args.get(3).map(OsString::as_os_str) == Some(OsStr::new(SPARE_LEADER));
    let dashes = 3 + usize::from(spare_leader);
    if args.get(dashes).map(OsString::as_os_str) != Some(OsStr::new("--")) {
        return None;
    }
    Some(Args {
        control: fd(0)?,
        report: fd(1)?,
        grace: Duration::from_millis(num(2)?),
        spare_leader,
        program: args.get(dashes + 1)?.clone(),
        args: args[dashes + 2..].to_vec(),
    })
}

/// The guard's body; returns its exit code.
pub(crate) fn main(args: &[OsString]) -> i32 {
    let Some(a) = parse(args) else {
        eprintln!(
            "ralph {GUARD_COMMAND}: CONTROL_FD REPORT_FD GRACE_MS [{SPARE_LEADER}] -- PROGRAM [ARGS...]"
        );
        return 2;
    };
    // SAFETY: the two descriptors are the guard's by its protocol: ralph made them for it and
    // passed their numbers, and nothing else in the guard knows them. Taking ownership of a
    // descriptor that came by number is unsafe by I/O safety's own rule, whatever the crate.
    let (control, report) = unsafe {
        (
            OwnedFd::from_raw_fd(a.control),
            OwnedFd::from_raw_fd(a.report),
        )
    };
    for fd in [&control, &report] {
        let _ = rustix::io::fcntl_setfd(fd, FdFlags::CLOEXEC);
    }
    let report = Reporter(File::from(report));
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let Ok(wake) = Wake::install() else {
        report.say("spawn 24");
        return 127;
    };
    let agent = match spawn(&a) {
        Ok(pid) => pid,
        Err(e) => {
            report.say(&format!("spawn {}", e.raw_os_error().unwrap_or(0)));
            return 127;
        }
    };
    report.say(&format!("pid {agent}"));
    // The command holds the pipes to ralph now; the guard lets go of its copies, so that their
    // end of file depends on the command's tree alone.
    detach_stdio();
    let mut g = Guard {
        me: rustix::process::getpid().as_raw_pid(),
        agent,
        agent_ended: false,
        agent_reaped: false,
        report,
        grace: a.grace,
        spare_leader: a.spare_leader,
        control: Some(File::from(control)),
        wake,
        end: None,
        kill_ordered: false,
        swept: 0,
    };
    g.run();
    0
}

/// The variable that tells the guard the `cgroup.procs` to move the command into before it runs
/// (the sandbox's pids limit, `sandbox/cgroup.rs`); the guard removes it from the command's
/// environment.
pub(crate) const JOIN_ENV: &str = "RALPH_SANDBOX_CGROUP_PROCS";

/// The command, leading a process group of its own, dying by SIGKILL if the guard dies, with
/// no signal blocked: the guard blocks the ones it never acts on, a mask a child inherits through
/// fork and exec (std does not clear it on this path: the stop tests showed an agent deaf to
/// SIGTERM).
fn spawn(a: &Args) -> std::io::Result<i32> {
    let mut cmd = std::process::Command::new(&a.program);
    cmd.args(&a.args).process_group(0);
    let guard = rustix::process::getpid();
    // The sandbox's cgroup (`sandbox/cgroup.rs`): the command joins it before it runs, so that
    // all it starts counts; one that cannot be joined is not run unbounded. The variable is
    // ralph's word to the guard, not the command's.
    let join = match std::env::var_os(JOIN_ENV) {
        Some(procs) => Some(OpenOptions::new().write(true).open(procs)?),
        None => None,
    };
    cmd.env_remove(JOIN_ENV);
    let join_fd = join.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: the closure runs between fork and exec and makes only system calls (sigprocmask,
    // write, prctl, getppid): no allocation, no lock, async-signal-safe. std offers no safe hook
    // there. `join_fd` stays open until the spawn returns (`join` lives past it).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = join_fd {
                // "0": the writing process itself.
                rustix::io::write(std::os::fd::BorrowedFd::borrow_raw(fd), b"0")?;
            }
            SigSet::empty().thread_set_mask()?;
            #[cfg(target_os = "linux")]
            {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                if rustix::process::getppid() != Some(guard) {
                    // The guard died before that took effect: never run unguarded.
                    return Err(rustix::io::Errno::SRCH.into());
                }
            }
            Ok(())
        });
    }
    // The guard reaps by pid itself: the std handle is only a way to start it.
    let child = cmd.spawn()?;
    drop(join);
    Ok(Pid::from_child(&child).as_raw_pid())
}

/// The guard's stdin, stdout and stderr become /dev/null.
fn detach_stdio() {
    if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// The report pipe to ralph.
struct Reporter(File);

impl Reporter {
    /// One report line; lost without harm when ralph is gone.
    fn say(&self, line: &str) {
        let _ = (&self.0).write_all(format!("{line}\n").as_bytes());
    }
}

/// SIGCHLD as a readable descriptor, without a signal handler: the signals the guard never acts
/// on — SIGINT, SIGTERM, SIGHUP (it ends only by its control pipe), SIGPIPE (a report to a gone
/// ralph is lost, not fatal) — and SIGCHLD are blocked, and a thread of its own waits for
/// SIGCHLD (`sigwait`) and writes a byte to a pipe the guard polls. A SIGCHLD that comes before
/// the guard polls stays pending, so it is not lost.
struct Wake {
    read: std::io::PipeReader,
}

impl Wake {
    fn install() -> std::io::Result<Wake> {
        let mut blocked = SigSet::empty();
        for sig in [
            NixSignal::SIGINT,
            NixSignal::SIGTERM,
            NixSignal::SIGHUP,
            NixSignal::SIGPIPE,
            NixSignal::SIGCHLD,
        ] {
            blocked.add(sig);
        }
        // Before the thread starts, which inherits the mask: no thread of the guard takes them.
        blocked.thread_block()?;
        let (read, mut write) = std::io::pipe()?;
        let mut chld = SigSet::empty();
        chld.add(NixSignal::SIGCHLD);
        std::thread::Builder::new()
            .name("ralph-sigchld".into())
            .spawn(
                move || {
                    while chld.wait().is_ok() && write.write(&[0]).is_ok() {}
                },
            )?;
        Ok(Wake { read })
    }

    /// Takes the wake-ups that came (only called when the pipe is readable: never blocks).
    fn drain(&mut self) {
        let mut buf = [0u8; 64];
        let _ = self.read.read(&mut buf);
    }
}

/// The guard's state while the command and what it started run.
struct Guard {
    me: i32,
    /// The command's pid, which is also its process group's id.
    agent: i32,
    agent_ended: bool,
    agent_reaped: bool,
    report: Reporter,
    grace: Duration,
    spare_leader: bool,
    /// `None` once ralph closed it (or died).
    control: Option<File>,
    wake: Wake,
    /// Finishing: when SIGKILL replaces SIGTERM.
    end: Option<Instant>,
    /// ralph ordered SIGKILL: finishing needs no grace.
    kill_ordered: bool,
    /// How many processes besides the command were still running when the finish began.
    swept: usize,
}

impl Guard {
    fn run(&mut self) {
        loop {
            self.collect();
            let timeout = match self.end {
                None => None,
                Some(kill_at) => {
                    if self.living().is_empty() {
                        break;
                    }
                    let now = Instant::now();
                    if now >= kill_at + KILL_WAIT {
                        break;
                    }
                    if now >= kill_at {
                        self.signal_all(Signal::KILL);
                        Some(KILL_REPEAT)
                    } else {
                        Some(kill_at - now)
                    }
                }
            };
            self.wait(timeout);
        }
        self.finish();
    }

    /// Wait for an order, a child's end, or `timeout`.
    fn wait(&mut self, timeout: Option<Duration>) {
        // At least a millisecond: a timer that has just run out is not waited on in a loop.
        let timeout = timeout.map(|t| Timespec::try_from(t.max(Duration::from_millis(1))));
        let Ok(timeout) = timeout.transpose() else {
            return;
        };
        let mut fds = vec![PollFd::new(&self.wake.read, PollFlags::IN)];
        if let Some(c) = &self.control {
            fds.push(PollFd::new(c, PollFlags::IN));
        }
        if poll(&mut fds, timeout.as_ref()).unwrap_or(0) == 0 {
            return;
        }
        let woken = !fds[0].revents().is_empty();
        let ordered = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        drop(fds);
        if woken {
            self.wake.drain();
        }
        if ordered {
            self.order();
        }
    }

    /// Read ralph's orders; end of file (or an error) begins the finish.
    fn order(&mut self) {
        let Some(control) = &mut self.control else {
            return;
        };
        let mut buf = [0u8; 16];
        let n = match control.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            Ok(n) => n,
            Err(_) => 0,
        };
        if n == 0 {
            self.control = None;
            self.swept = self.living().iter().filter(|p| p.pid != self.agent).count();
            let kill_at = if self.kill_ordered {
                Instant::now()
            } else {
                self.signal_all(Signal::TERM);
                Instant::now() + self.grace
            };
            self.end = Some(kill_at);
            return;
        }
        for b in &buf[..n] {
            match *b {
                TERMINATE => self.signal_all(Signal::TERM),
                KILL => {
                    self.kill_ordered = true;
                    self.signal_all(Signal::KILL);
                }
                _ => {}
            }
        }
    }

    /// Note the command's end (without reaping it) and reap every other child that ended.
    fn collect(&mut self) {
        if !self.agent_ended
            && let Some(agent) = Pid::from_raw(self.agent)
            && let Ok(Some(status)) = waitid(
                WaitId::Pid(agent),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            )
        {
            self.agent_ended = true;
            let line = match (status.exit_status(), status.terminating_signal()) {
                (Some(code), _) if status.exited() => format!("exit {code}"),
                (_, Some(sig)) => format!("signal {sig}"),
                (code, _) => format!("exit {}", code.unwrap_or(0)),
            };
            self.report.say(&line);
        }
        self.reap_others();
    }

    /// Reap the children that ended, except the command (kept until its group is done).
    fn reap_others(&mut self) {
        for p in tree::descendants(self.me) {
            if p.ppid == self.me
                && p.zombie
                && p.pid != self.agent
                && let Some(pid) = Pid::from_raw(p.pid)
            {
                let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
            }
        }
    }

    /// The descendants still running (zombies excluded). Without `/proc`, the command's group
    /// while the command runs.
    fn living(&self) -> Vec<tree::Proc> {
        if !cfg!(target_os = "linux") {
            return if self.agent_ended {
                Vec::new()
            } else {
                vec![tree::Proc {
                    pid: self.agent,
                    ppid: self.me,
                    pgid: self.agent,
                    start: 0,
                    zombie: false,
                }]
            };
        }
        tree::descendants(self.me)
            .into_iter()
            .filter(|p| !p.zombie)
            .collect()
    }

    /// `sig` to the command's group and to every descendant.
    fn signal_all(&mut self, sig: Signal) {
        let whole_group = !(self.spare_leader && sig == Signal::TERM);
        if !self.agent_reaped
            && whole_group
            && let Some(group) = Pid::from_raw(self.agent)
        {
            // The unreaped leader keeps the group id from being reused.
            let _ = rustix::process::kill_process_group(group, sig);
        }
        for p in self.living() {
            if p.pid == self.agent || (whole_group && p.pgid == self.agent) {
                continue;
            }
            if p.ppid == self.me {
                // A child of ours, not reaped: its pid cannot have been reused.
                if let Some(pid) = Pid::from_raw(p.pid) {
                    let _ = rustix::process::kill_process(pid, sig);
                }
            } else {
                tree::signal(&p, sig);
            }
        }
    }

    /// The last SIGKILL to the command's group, then every child reaped.
    fn finish(&mut self) {
        if !self.agent_reaped
            && let Some(agent) = Pid::from_raw(self.agent)
        {
            let _ = rustix::process::kill_process_group(agent, Signal::KILL);
            let _ = rustix::process::waitpid(Some(agent), WaitOptions::empty());
            self.agent_reaped = true;
        }
        while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
        self.report.say(&format!("swept {}", self.swept));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_refused() {
        let a = parse(&os(&["5", "6", "1500", "--", "sh", "-c", "x"])).unwrap();
        assert!(!a.spare_leader);
        let b = parse(&os(&["5", "6", "0", SPARE_LEADER, "--", "bwrap", "x"])).unwrap();
        assert!(b.spare_leader);
        assert_eq!(
            (b.program.as_os_str(), &b.args[..]),
            (OsStr::new("bwrap"), &os(&["x"])[..])
        );
        assert_eq!((a.control, a.report), (5, 6));
        assert_eq!(a.grace, Duration::from_millis(1500));
        assert_eq!(a.program, "sh");
        assert_eq!(a.args, os(&["-c", "x"]));
        for bad in [
            &["5", "6", "1500", "sh"][..],
            &["5", "6", "x", "--", "sh"],
            &["1", "6", "0", "--", "sh"],
            &["5", "6", "0", "--"],
            &["5", "6", "0", "spare", "--", "sh"],
            &[],
        ] {
            assert!(parse(&os(bad)).is_none(), "{bad:?}");
        }
    }
}
