//! Unix process plumbing, ralph's side: a supervised command runs under its guard (`ralph
//! __guard`, see [`super::reaper`]), and ralph stops it, and everything it started, through the
//! guard's control pipe.
//!
//! Why a guard: ralph could signal the command's process group itself, but a daemon that left
//! the group (`setsid`, a double fork) would outlive it, and nothing would be left to act if
//! ralph died by SIGKILL. The guard is the command's parent and (on Linux) a child subreaper:
//! it adopts every orphan of the command's tree, so it can end all of them; it lives in a
//! process group of its own (neither the terminal's Ctrl-C nor a signal to the command's group
//! reaches it), and the end of file of its control pipe — ralph closing it, or the kernel
//! closing it for a dead ralph — makes it finish the tree and exit.

use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal};
use tokio::sync::mpsc;

use super::reaper::{GUARD_COMMAND, KILL, SPARE_LEADER, TERMINATE};

/// What the guard reports.
#[derive(Debug)]
enum Report {
    /// The command runs, with this pid (its process group's id too).
    Pid(i32),
    /// The command could not be started.
    Spawn(std::io::Error),
    /// The command ended (the guard has not reaped it yet).
    Exit(ExitStatus),
    /// The guard is done: this many processes besides the command were left running at the end.
    Swept(usize),
}

fn parse_report(line: &str) -> Option<Report> {
    let (word, n) = line.trim_end().split_once(' ')?;
    let n: i32 = n.parse().ok()?;
    Some(match word {
        "pid" => Report::Pid(n),
        "spawn" => Report::Spawn(std::io::Error::from_raw_os_error(n)),
        "exit" => Report::Exit(ExitStatus::from_raw((n & 0xff) << 8)),
        "signal" => Report::Exit(ExitStatus::from_raw(n & 0x7f)),
        "swept" => Report::Swept(usize::try_from(n).ok()?),
        _ => return None,
    })
}

/// How long after SIGKILL was ordered ralph waits for the guard to carry it out before it kills
/// the guard itself.
pub(crate) const LAST_RESORT: Duration = Duration::from_secs(2);

/// How ralph stops a guarded command: orders to its guard.
#[derive(Debug)]
pub(crate) struct Orders {
    control: Option<std::fs::File>,
    /// The command's process group: signalled directly if the guard is gone.
    group: Option<Pid>,
    /// The guard itself (ralph's child, so its pid cannot be reused before ralph reaps it): a
    /// command can stop it (`kill -STOP $PPID`); every order continues it first.
    guard: Option<Pid>,
    /// SIGKILL was ordered.
    pub(crate) kill_sent: bool,
}

impl Orders {
    /// SIGTERM to the command's group and everything it started.
    pub(crate) fn terminate(&mut self) {
        self.send(TERMINATE, Signal::TERM);
    }

    /// SIGKILL to all of it.
    pub(crate) fn kill(&mut self) {
        self.kill_sent = true;
        self.send(KILL, Signal::KILL);
    }

    /// The last resort when the guard does not carry out SIGKILL (stopped again and again by
    /// what it guards): SIGKILL to the guard itself. The command dies with it (its parent-death
    /// signal); what the guard had adopted is left to init — better than a supervisor that
    /// never stops.
    pub(crate) fn kill_guard(&mut self) {
        if let Some(guard) = self.guard {
            let _ = rustix::process::kill_process(guard, Signal::KILL);
        }
    }

    /// Continue a guard the command stopped.
    pub(crate) fn wake(&self) {
        if let Some(guard) = self.guard {
            let _ = rustix::process::kill_process(guard, Signal::CONT);
        }
    }

    fn send(&mut self, order: u8, sig: Signal) {
        self.wake();
        let sent = self
            .control
            .as_mut()
            .is_some_and(|c| c.write_all(&[order]).is_ok());
        if !sent && let Some(group) = self.group {
            // The guard is gone (killed from inside the command's tree): its group is what is
            // left to reach.
            let _ = rustix::process::kill_process_group(group, sig);
        }
    }
}

/// A command running under its guard.
pub(crate) struct Guarded {
    /// The guard process; its stdout and stderr are the command's.
    pub(crate) guard: tokio::process::Child,
    pub(crate) orders: Orders,
    pub(crate) reports: Reports,
    /// The grace the guard gives between SIGTERM and SIGKILL when it finishes.
    grace: Duration,
}

/// What the guard says, as it says it.
#[derive(Debug)]
pub(crate) struct Reports {
    rx: mpsc::UnboundedReceiver<Report>,
    swept: usize,
}

impl Reports {
    /// Wait for the command to end. If the guard died without saying (killed from inside the
    /// tree), its own status stands in.
    pub(crate) async fn ended(
        &mut self,
        guard: &mut tokio::process::Child,
    ) -> std::io::Result<ExitStatus> {
        while let Some(r) = self.rx.recv().await {
            match r {
                Report::Exit(status) => return Ok(status),
                Report::Swept(n) => self.swept = n,
                Report::Pid(_) | Report::Spawn(_) => {}
            }
        }
        guard.wait().await
    }
}

/// The guard's command for `program args` in `cwd`, and the pipes it talks over (ralph's ends:
/// control's write end, report's read end).
fn guard_command(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    cwd: &Path,
    grace: Duration,
) -> std::io::Result<(std::process::Command, Pipes)> {
    crate::files::writer_started();
    let (control_r, control_w) = std::io::pipe()?;
    let (report_r, report_w) = std::io::pipe()?;
    let (cr, rw) = (control_r.as_raw_fd(), report_w.as_raw_fd());
    let mut cmd = std::process::Command::new(own_exe());
    cmd.arg(GUARD_COMMAND)
        .arg(cr.to_string())
        .arg(rw.to_string())
        .arg(grace.as_millis().to_string());
    if forwards_no_sigterm(program) {
        cmd.arg(SPARE_LEADER);
    }
    cmd.arg("--")
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .process_group(0);
    // The tracker's token is not the command's (`withheld.rs`): the guard starts without it,
    // and so does everything under it.
    for name in super::withheld::names() {
        cmd.env_remove(name);
    }
    // SAFETY: the closure runs between fork and exec and makes two `fcntl` calls, nothing else
    // (async-signal-safe), on two descriptors open there (ralph holds them until the guard
    // runs). std offers no safe way to hand a child a descriptor beyond stdio; the
    // command-fds crate does, by this same pre_exec, with a dup2 to fixed numbers in place of
    // one fcntl on each.
    unsafe {
        cmd.pre_exec(move || {
            for fd in [cr, rw] {
                // Close-on-exec cleared: the guard, and only it, inherits them.
                rustix::io::fcntl_setfd(BorrowedFd::borrow_raw(fd), rustix::io::FdFlags::empty())?;
            }
            Ok(())
        });
    }
    Ok((
        cmd,
        Pipes {
            control_r,
            control_w,
            report_r,
            report_w,
        },
    ))
}

struct Pipes {
    control_r: std::io::PipeReader,
    control_w: std::io::PipeWriter,
    report_r: std::io::PipeReader,
    report_w: std::io::PipeWriter,
}

impl Pipes {
    /// The guard runs: only it holds its ends now. Returns ralph's orders and the report pipe.
    fn spawned(self, guard: Option<u32>) -> (Orders, std::io::PipeReader) {
        drop((self.control_r, self.report_w));
        let orders = Orders {
            control: Some(std::fs::File::from(std::os::fd::OwnedFd::from(
                self.control_w,
            ))),
            group: None,
            guard: guard.and_then(|p| pid(i32::try_from(p).ok()?)),
            kill_sent: false,
        };
        (orders, self.report_r)
    }
}

/// The first report: the command's pid, or why it could not start.
fn started(first: Option<Report>, orders: &mut Orders) -> std::io::Result<()> {
    match first {
        Some(Report::Pid(n)) => {
            orders.group = pid(n);
            Ok(())
        }
        Some(Report::Spawn(e)) => Err(e),
        _ => Err(std::io::Error::other(
            "the guard process ended before starting the command",
        )),
    }
}

impl Guarded {
    /// Start `program args` in `cwd` under a guard that gives it `grace` between SIGTERM and
    /// SIGKILL when it finishes. `configure` sets up the guard's command (stdio, environment),
    /// which the command inherits.
    pub(crate) async fn spawn(
        program: &std::ffi::OsStr,
        args: &[std::ffi::OsString],
        cwd: &Path,
        grace: Duration,
        configure: impl FnOnce(&mut tokio::process::Command),
    ) -> std::io::Result<Guarded> {
        let (cmd, pipes) = guard_command(program, args, cwd, grace)?;
        let mut cmd = tokio::process::Command::from(cmd);
        configure(&mut cmd);
        let guard = cmd.spawn()?;
        let (mut orders, report_r) = pipes.spawned(guard.id());
        let (tx, mut reports) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(report_r).lines() {
                let Ok(line) = line else { break };
                if let Some(r) = parse_report(&line)
                    && tx.send(r).is_err()
                {
                    break;
                }
            }
        });
        started(reports.recv().await, &mut orders)?;
        Ok(Guarded {
            guard,
            orders,
            reports: Reports {
                rx: reports,
                swept: 0,
            },
            grace,
        })
    }

    /// Let the guard finish: everything the command left running gets SIGTERM, and SIGKILL
    /// after the grace; returns how many processes besides the command were still running.
    pub(crate) async fn finish(mut self) -> usize {
        // What ralph learnt of the tree while the command ran is stale (`files::writer_started`).
        crate::files::writer_started();
        self.orders.wake();
        drop(self.orders.control.take());
        // The sweep takes the grace at most; a guard stopped again by what it guards gets
        // continued, then killed, so the end of an iteration never waits forever.
        let sweep = async {
            while let Some(r) = self.reports.rx.recv().await {
                if let Report::Swept(n) = r {
                    self.reports.swept = n;
                }
            }
        };
        if tokio::time::timeout(self.grace + LAST_RESORT, sweep)
            .await
            .is_err()
        {
            self.orders.kill_guard();
        }
        let _ = self.guard.wait().await;
        self.reports.swept
    }
}

/// A command under its guard, for blocking code (git hooks): the same guard, read without a
/// runtime.
pub(crate) struct BlockingGuarded {
    pub(crate) guard: std::process::Child,
    pub(crate) orders: Orders,
    reports: std::io::BufReader<std::io::PipeReader>,
}

impl BlockingGuarded {
    /// As [`Guarded::spawn`]: `configure` sets up stdio and the environment.
    pub(crate) fn spawn(
        program: &std::ffi::OsStr,
        args: &[std::ffi::OsString],
        cwd: &Path,
        grace: Duration,
        configure: impl FnOnce(&mut std::process::Command),
    ) -> std::io::Result<BlockingGuarded> {
        let (mut cmd, pipes) = guard_command(program, args, cwd, grace)?;
        configure(&mut cmd);
        let guard = cmd.spawn()?;
        let (mut orders, report_r) = pipes.spawned(Some(guard.id()));
        let mut reports = std::io::BufReader::new(report_r);
        started(next_report(&mut reports, None), &mut orders)?;
        Ok(BlockingGuarded {
            guard,
            orders,
            reports,
        })
    }

    /// Wait until the command ends or `deadline` passes (`None`: it still runs).
    pub(crate) fn ended_by(&mut self, deadline: std::time::Instant) -> Option<ExitStatus> {
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            // A millisecond more: the wait may end up to a millisecond early (whole
            // milliseconds), which is no end of file.
            match next_report(&mut self.reports, Some(left + Duration::from_millis(1))) {
                Some(Report::Exit(status)) => return Some(status),
                Some(_) => {}
                None if std::time::Instant::now() >= deadline => return None,
                // The guard is gone without saying: its own status stands in.
                None => return self.guard.wait().ok(),
            }
        }
    }

    /// As [`Guarded::finish`].
    pub(crate) fn finish(mut self) -> usize {
        crate::files::writer_started();
        self.orders.wake();
        drop(self.orders.control.take());
        let mut swept = 0;
        while let Some(r) = next_report(&mut self.reports, None) {
            if let Report::Swept(n) = r {
                swept = n;
            }
        }
        let _ = self.guard.wait();
        swept
    }
}

/// The next report line, waiting at most `timeout` for it (`None` on end of file or timeout).
fn next_report(
    reports: &mut std::io::BufReader<std::io::PipeReader>,
    timeout: Option<Duration>,
) -> Option<Report> {
    loop {
        if reports.buffer().is_empty()
            && let Some(t) = timeout
        {
            let mut fds = [PollFd::new(reports.get_ref(), PollFlags::IN)];
            // At least a millisecond, as a deadline just reached is not waited on in a loop.
            let t = Timespec::try_from(t.max(Duration::from_millis(1))).ok()?;
            match rustix::event::poll(&mut fds, Some(&t)) {
                // A signal ralph counts came to this thread: no end of file (waited again).
                Err(rustix::io::Errno::INTR) => continue,
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
        let mut line = String::new();
        match reports.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {
                if let Some(r) = parse_report(&line) {
                    return Some(r);
                }
            }
        }
    }
}

/// bubblewrap dies of SIGTERM without passing it on, and its PID namespace — everything it runs
/// — dies with it: stopping gracefully means SIGTERM to what it runs, not to it.
fn forwards_no_sigterm(program: &std::ffi::OsStr) -> bool {
    Path::new(program).file_name() == Some(std::ffi::OsStr::new("bwrap"))
}

/// A process ralph may signal: never 0 or 1 (its group, init), whatever a report said.
fn pid(n: i32) -> Option<Pid> {
    Pid::from_raw(n).filter(|p| p.as_raw_pid() > 1)
}

/// ralph's own binary, runnable even when a new build has replaced it on disk.
fn own_exe() -> std::path::PathBuf {
    if cfg!(target_os = "linux") && Path::new("/proc/self/exe").exists() {
        return "/proc/self/exe".into();
    }
    std::env::current_exe().unwrap_or_else(|_| "ralph".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        assert!(matches!(parse_report("pid 42\n"), Some(Report::Pid(42))));
        match parse_report("exit 3") {
            Some(Report::Exit(s)) => assert_eq!(s.code(), Some(3)),
            other => panic!("{other:?}"),
        }
        match parse_report("signal 9") {
            Some(Report::Exit(s)) => assert_eq!(s.signal(), Some(9)),
            other => panic!("{other:?}"),
        }
        match parse_report("spawn 2") {
            Some(Report::Spawn(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_report("swept 2"), Some(Report::Swept(2))));
        for bad in ["", "pid", "pid x", "what 1", "swept -1"] {
            assert!(parse_report(bad).is_none(), "{bad}");
        }
    }
}
