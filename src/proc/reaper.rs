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
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use super::tree;

/// The hidden subcommand the guard runs as.
pub const GUARD_COMMAND: &str = "__guard";
/// Control byte: SIGTERM to the command's group and every descendant.
pub const TERMINATE: u8 = b'T';
/// Control byte: SIGKILL to all of them.
pub const KILL: u8 = b'K';
/// How long SIGKILLed processes may take to go before the guard stops waiting for them (a
/// process in uninterruptible sleep dies only when its I/O returns).
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often the guard repeats SIGKILL while processes remain (a process forked just before a
/// SIGKILL reached its parent is adopted a moment later).
const KILL_REPEAT: Duration = Duration::from_millis(10);

/// The option that spares the command itself from SIGTERM (see [`Args::spare_leader`]).
pub const SPARE_LEADER: &str = "spare-leader";

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
pub fn main(args: &[OsString]) -> i32 {
    let Some(a) = parse(args) else {
        eprintln!(
            "ralph {GUARD_COMMAND}: CONTROL_FD REPORT_FD GRACE_MS [{SPARE_LEADER}] -- PROGRAM [ARGS...]"
        );
        return 2;
    };
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    for fd in [a.control, a.report] {
        set_cloexec(fd);
    }
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with an integer argument.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    let Some(wake) = Wake::install() else {
        report(a.report, "spawn 24");
        return 127;
    };
    let agent = match spawn(&a) {
        Ok(pid) => pid,
        Err(e) => {
            report(
                a.report,
                &format!("spawn {}", e.raw_os_error().unwrap_or(0)),
            );
            return 127;
        }
    };
    report(a.report, &format!("pid {agent}"));
    // The command holds the pipes to ralph now; the guard lets go of its copies, so that their
    // end of file depends on the command's tree alone.
    detach_stdio();
    let mut g = Guard {
        me: std::process::id() as i32,
        agent,
        agent_ended: false,
        agent_reaped: false,
        report: a.report,
        grace: a.grace,
        spare_leader: a.spare_leader,
        control: Some(a.control),
        wake,
        end: None,
        kill_ordered: false,
        swept: 0,
    };
    g.run();
    0
}

/// The command, leading a process group of its own, with the signals the guard ignores back at
/// their defaults, dying by SIGKILL if the guard dies.
fn spawn(a: &Args) -> std::io::Result<i32> {
    let mut cmd = std::process::Command::new(&a.program);
    cmd.args(&a.args).process_group(0);
    #[cfg(target_os = "linux")]
    let guard = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            #[cfg(target_os = "linux")]
            {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != guard {
                    libc::_exit(1);
                }
            }
            Ok(())
        });
    }
    // The guard reaps by pid itself: the std handle is only a way to start it.
    let child = cmd.spawn()?;
    Ok(child.id() as i32)
}

/// The guard's stdin, stdout and stderr become /dev/null.
fn detach_stdio() {
    // SAFETY: open and dup2 on descriptors the guard owns.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl on a descriptor number; a bad one only returns an error.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

/// One report line to ralph; lost without harm when ralph is gone.
fn report(fd: RawFd, line: &str) {
    let line = format!("{line}\n");
    // SAFETY: write from a live buffer to a descriptor the guard owns.
    unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
}

/// The write end of the SIGCHLD self-pipe, for the handler.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    // SAFETY: write is async-signal-safe; a full pipe already holds a wake-up.
    unsafe { libc::write(fd, [0u8].as_ptr().cast(), 1) };
}

/// SIGCHLD as a readable descriptor (a self-pipe: portable, and a signal that arrives before
/// the guard polls is not lost).
struct Wake {
    read: RawFd,
}

impl Wake {
    fn install() -> Option<Wake> {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return None;
        }
        for fd in fds {
            set_cloexec(fd);
            // SAFETY: fcntl on descriptors just made.
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
        }
        WAKE_FD.store(fds[1], Ordering::Relaxed);
        // SAFETY: the handler only writes one byte to a pipe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigchld as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut()) != 0 {
                return None;
            }
        }
        Some(Wake { read: fds[0] })
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        // SAFETY: read into a live buffer from a non-blocking descriptor the guard owns.
        while unsafe { libc::read(self.read, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

/// The guard's state while the command and what it started run.
struct Guard {
    me: i32,
    /// The command's pid, which is also its process group's id.
    agent: i32,
    agent_ended: bool,
    agent_reaped: bool,
    report: RawFd,
    grace: Duration,
    spare_leader: bool,
    /// `None` once ralph closed it (or died).
    control: Option<RawFd>,
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
                    let living = self.living();
                    if living.is_empty() {
                        break;
                    }
                    let now = Instant::now();
                    if now >= kill_at + KILL_WAIT {
                        break;
                    }
                    if now >= kill_at {
                        self.signal_all(libc::SIGKILL);
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
        let mut fds = vec![libc::pollfd {
            fd: self.wake.read,
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(c) = self.control {
            fds.push(libc::pollfd {
                fd: c,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
        // SAFETY: poll on a live array of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return;
        }
        if fds[0].revents != 0 {
            self.wake.drain();
        }
        if let Some(c) = fds.get(1).filter(|f| f.revents != 0).map(|f| f.fd) {
            self.order(c);
        }
    }

    /// Read ralph's orders; end of file (or an error) begins the finish.
    fn order(&mut self, control: RawFd) {
        let mut buf = [0u8; 16];
        // SAFETY: read into a live buffer from a descriptor the guard owns.
        let n = unsafe { libc::read(control, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            return;
        }
        if n <= 0 {
            // SAFETY: closing the guard's own descriptor.
            unsafe { libc::close(control) };
            self.control = None;
            self.swept = self.living().iter().filter(|p| p.pid != self.agent).count();
            let kill_at = if self.kill_ordered {
                Instant::now()
            } else {
                self.signal_all(libc::SIGTERM);
                Instant::now() + self.grace
            };
            self.end = Some(kill_at);
            return;
        }
        for b in &buf[..n as usize] {
            match *b {
                TERMINATE => self.signal_all(libc::SIGTERM),
                KILL => {
                    self.kill_ordered = true;
                    self.signal_all(libc::SIGKILL);
                }
                _ => {}
            }
        }
    }

    /// Note the command's end (without reaping it) and reap every other child that ended.
    fn collect(&mut self) {
        if !self.agent_ended {
            // SAFETY: waitid fills a zeroed siginfo_t.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            // SAFETY: as above; P_PID with the command's pid.
            let r =
                unsafe { libc::waitid(libc::P_PID, self.agent as libc::id_t, &mut info, flags) };
            // SAFETY: si_pid and si_status are valid for SIGCHLD's siginfo.
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if r == 0 && pid == self.agent {
                self.agent_ended = true;
                let line = if info.si_code == libc::CLD_EXITED {
                    format!("exit {status}")
                } else {
                    format!("signal {status}")
                };
                report(self.report, &line);
            }
        }
        self.reap_others();
    }

    /// Reap the children that ended, except the command (kept until its group is done).
    fn reap_others(&mut self) {
        for p in tree::descendants(self.me) {
            if p.ppid == self.me && p.zombie && p.pid != self.agent {
                // SAFETY: waitpid on a child of ours.
                unsafe { libc::waitpid(p.pid, std::ptr::null_mut(), libc::WNOHANG) };
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
    fn signal_all(&mut self, sig: i32) {
        let whole_group = !(self.spare_leader && sig == libc::SIGTERM);
        if !self.agent_reaped && whole_group {
            // The unreaped leader keeps the group id from being reused.
            // SAFETY: killpg takes a group id and a signal number.
            unsafe { libc::killpg(self.agent, sig) };
        }
        for p in self.living() {
            if p.pid == self.agent || (whole_group && p.pgid == self.agent) {
                continue;
            }
            if p.ppid == self.me {
                // A child of ours, not reaped: its pid cannot have been reused.
                // SAFETY: kill takes a pid and a signal number.
                unsafe { libc::kill(p.pid, sig) };
            } else {
                tree::signal(&p, sig);
            }
        }
    }

    /// The last SIGKILL to the command's group, then every child reaped.
    fn finish(&mut self) {
        if !self.agent_reaped {
            // SAFETY: as in signal_all; then waitpid on our own child.
            unsafe {
                libc::killpg(self.agent, libc::SIGKILL);
                libc::waitpid(self.agent, std::ptr::null_mut(), 0);
            }
            self.agent_reaped = true;
        }
        // SAFETY: reaping whatever children remain, without blocking.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        report(self.report, &format!("swept {}", self.swept));
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
