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
}

/// Run `cmd` with stdin closed, collecting its output, killing it after `deadline`.
pub(crate) fn run(cmd: &mut Command, deadline: Duration) -> std::io::Result<Brief> {
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
    let start = Instant::now();
    let status = loop {
        match child.try_wait()? {
            Some(s) => break Some(s),
            None if start.elapsed() < deadline => std::thread::sleep(Duration::from_millis(10)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut output = collect(out);
    output.push_str(&collect(err));
    Ok(Brief { status, output })
}

/// One reader per pipe, so a full stderr never blocks a stdout read.
fn drain(pipe: Option<Box<dyn Read + Send>>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        let _ = tx.send(s);
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
/// the deadline its whole tree is killed.
pub(crate) fn run_guarded(cmd: &Command, deadline: Duration) -> std::io::Result<Brief> {
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
    let status = guarded.ended_by(Instant::now() + deadline);
    if status.is_none() {
        // Past its deadline: its whole tree goes (the guard finishes without a grace).
        guarded.orders.kill();
    }
    guarded.finish();
    let mut output = collect(out);
    output.push_str(&collect(err));
    Ok(Brief { status, output })
}

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
