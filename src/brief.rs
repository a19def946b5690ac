//! Short helper commands ralph runs itself (the copilot `--help` probe, git hooks): a deadline,
//! the output collected, and never hung by a descendant that keeps the pipes open.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a brief command ended.
#[derive(Debug)]
pub struct Brief {
    /// `None` when it ran past the deadline and was killed.
    pub status: Option<ExitStatus>,
    /// stdout, then stderr.
    pub output: String,
}

/// Run `cmd` with stdin closed, collecting its output, killing it after `deadline`.
pub fn run(cmd: &mut Command, deadline: Duration) -> std::io::Result<Brief> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // One reader per pipe, so a full stderr never blocks a stdout read.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut s);
            }
            let _ = tx.send(s);
        });
        rx
    };
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
    // A background process may keep the pipes open: take what came, never wait long.
    let collect = |rx: mpsc::Receiver<String>| {
        rx.recv_timeout(Duration::from_millis(500))
            .unwrap_or_default()
    };
    let mut output = collect(out);
    output.push_str(&collect(err));
    Ok(Brief { status, output })
}

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
