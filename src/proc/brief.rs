//! Short helper commands ralph runs itself (the copilot `--help` probe; git hooks, under the
//! guard): a deadline, the output collected, and never hung by a descendant that keeps the pipes
//! open.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a brief command ended.
#[derive(Debug)]
pub(crate) struct Brief {
    /// `None` when it ran past the deadline and was killed.
    pub(crate) status: Option<ExitStatus>,
    /// stdout, then stderr.
    pub(crate) output: String,
    /// An interrupt stopped it (`run_guarded`).
    pub(crate) stopped: bool,
}

/// Run `cmd` with stdin closed, collecting its output, killing it after `deadline`.
pub(crate) fn run(cmd: &mut Command, deadline: Duration) -> std::io::Result<Brief> {
    crate::files::writer_started();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = wait_until(&mut child, deadline)?;
    let mut output = collect(out);
    output.push_str(&collect(err));
    Ok(Brief {
        status,
        output,
        stopped: false,
    })
}

/// How a brief command ended, its streams apart (a tool that prints JSON on stdout).
#[derive(Debug)]
pub(crate) struct Split {
    /// `None` when it ran past the deadline and was killed.
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// As [`run`], stdout and stderr kept apart, each read up to `limit` bytes (the rest drained
/// unread).
pub(crate) fn run_split(
    cmd: &mut Command,
    deadline: Duration,
    limit: u64,
) -> std::io::Result<Split> {
    crate::files::writer_started();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = drain_up_to(child.stdout.take().map(|p| Box::new(p) as _), limit);
    let err = drain_up_to(child.stderr.take().map(|p| Box::new(p) as _), limit);
    let status = wait_until(&mut child, deadline)?;
    Ok(Split {
        status,
        stdout: collect(out),
        stderr: collect(err),
    })
}

/// The child's exit, or `None` once `deadline` passed (the child killed).
fn wait_until(
    child: &mut std::process::Child,
    deadline: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    let start = Instant::now();
    loop {
        match child.try_wait()? {
            Some(s) => return Ok(Some(s)),
            None if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(10)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
        }
    }
}

/// One reader per pipe, so a full stderr never blocks a stdout read.
fn drain(pipe: Option<Box<dyn Read + Send>>) -> mpsc::Receiver<String> {
    drain_up_to(pipe, u64::MAX)
}

/// As [`drain`], keeping at most `limit` bytes; the rest is read and dropped, so the writer
/// never blocks on a full pipe.
fn drain_up_to(pipe: Option<Box<dyn Read + Send>>, limit: u64) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = (&mut p).take(limit).read_to_end(&mut bytes);
            let _ = std::io::copy(&mut p, &mut std::io::sink());
        }
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

/// A background process may keep the pipes open: take what came, never wait long.
fn collect(rx: mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_millis(500))
        .unwrap_or_default()
}

/// As [`run`], for a command the repository gave (a git hook, which the agent could have
/// written): under ralph's guard, so nothing it starts outlives it (see `guarded.rs`); at
/// the deadline its whole tree is killed, and so it is at once when an interrupt comes while
/// it runs (`stop`: one that came before it started leaves it its time, a second one not).
pub(crate) fn run_guarded(
    cmd: &Command,
    deadline: Duration,
    stop: Option<&crate::signals::Stop>,
) -> std::io::Result<Brief> {
    use super::guarded::BlockingGuarded;
    let args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_os_string()).collect();
    let cwd = cmd
        .get_current_dir()
        .map_or_else(|| std::path::PathBuf::from("."), |d| d.to_path_buf());
    let mut guarded = BlockingGuarded::spawn(cmd.get_program(), &args, &cwd, GRACE, |c| {
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
    })?;
    let out = drain(guarded.guard.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(guarded.guard.stderr.take().map(|p| Box::new(p) as _));
    let end = Instant::now() + deadline;
    let seen = stop.map_or(0, crate::signals::Stop::count);
    let heard = || stop.is_some_and(|s| s.count() > seen);
    let (status, stopped) = loop {
        // In slices, to hear an interrupt: the guard's reports are what it waits on.
        let slice = (Instant::now() + STOP_SLICE).min(end);
        match guarded.ended_by(slice) {
            Some(status) => break (Some(status), false),
            None if heard() => break (None, true),
            None if Instant::now() >= end => break (None, false),
            None => {}
        }
    };
    if status.is_none() {
        // Past its deadline, or interrupted: its whole tree goes (the guard finishes without
        // a grace).
        guarded.orders.kill();
    }
    guarded.finish();
    let mut output = collect(out);
    output.push_str(&collect(err));
    Ok(Brief {
        status,
        output,
        stopped,
    })
}

/// How often a guarded command's wait looks at the interrupts.
const STOP_SLICE: Duration = Duration::from_millis(50);

/// What a guarded command's leftovers get between SIGTERM and SIGKILL when it ends.
const GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_status_are_collected() {
        let b = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(b.status.and_then(|s| s.code()), Some(3));
        assert_eq!(b.output, "out\nerr\n");
    }

    #[test]
    fn a_command_past_its_deadline_is_killed() {
        let start = Instant::now();
        let b = run(Command::new("sleep").arg("30"), Duration::from_millis(100)).unwrap();
        assert!(b.status.is_none());
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_leaked_pipe_does_not_hang() {
        let start = Instant::now();
        let b = run(
            Command::new("sh").args(["-c", "echo hi; sleep 30 &"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(b.status.and_then(|s| s.code()), Some(0));
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
