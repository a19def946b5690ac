//! Running a supervised process: under its guard (see `guarded.rs`), its output relayed to
//! the transcript with bounded memory and published, as it comes, to whoever watches it
//! (`observe.rs`); stopped (`supervise.rs`) with SIGTERM → grace → SIGKILL to its whole tree (its
//! group and every process it started elsewhere), never hung by a grandchild holding the pipes.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::Invocation;
use super::guarded::Guarded;
use super::observe::{Observation, Watchers};
use super::supervise::Supervision;
use crate::signals::Interrupts;

/// How much of stdout to keep for the final message.
const TAIL: usize = 64 * 1024;
/// The most one read takes from a pipe: as much as the pipe holds by default (64 KiB on Linux),
/// and few enough bytes that the buffers stay in the CPU's cache. Larger reads, and pipes
/// widened for them (`F_SETPIPE_SZ`), measured slower: what the agent wrote ahead had left the
/// cache by the time ralph read it.
pub(super) const READ: usize = 64 * 1024;

/// Limits of one supervised run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    pub(crate) timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) grace: Duration,
    /// How long after its last output an agent that said it is sleeping out a rate limit (a
    /// quiet retry) is not taken for a hang by the idle timeout; `None`: never.
    pub(crate) quiet_retry: Option<Duration>,
}

/// Why ralph stopped the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopCause {
    Timeout,
    IdleTimeout,
    Interrupt,
}

/// How a supervised process ended.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    /// The exit code, or 128 + signal number when a signal ended it.
    pub(crate) exit_code: i32,
    pub(crate) stopped: Option<StopCause>,
    /// SIGKILL was needed (the grace ran out, a second interrupt, or leaked pipes).
    pub(crate) killed: bool,
    /// A descendant still held stdout/stderr after the process exited.
    pub(crate) leaked_pipes: bool,
    /// How many processes it started were still running when it ended (ended by the guard).
    pub(crate) left_running: usize,
    /// The last bytes of stdout (bounded).
    pub(crate) stdout_tail: Vec<u8>,
}

impl Finished {
    pub(crate) fn success(&self) -> bool {
        self.exit_code == 0 && self.stopped.is_none()
    }
}

/// Which step of a supervised run failed, so the caller can say so: a program that cannot be
/// started is not a full disk.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// The program could not be started (not found, not executable, out of processes).
    #[error("failed to spawn the process")]
    Spawn(#[source] std::io::Error),
    /// Its output could not be written to the transcript (`ENOSPC` on a full disk). The process
    /// was killed: what it did could not be recorded.
    #[error("failed to write the transcript")]
    Transcript(#[source] std::io::Error),
    /// Waiting for the process failed.
    #[error("failed to wait for the process")]
    Wait(#[source] std::io::Error),
}

/// Run `inv` in `cwd` under its guard (the leader of a new process group, every descendant
/// adopted by the guard), relaying its output into `transcript` and to `watchers`, until it
/// exits or a limit or an interrupt stops it; then whatever it left running is ended.
pub(crate) async fn run(
    inv: &Invocation,
    cwd: &Path,
    transcript: &mut std::fs::File,
    limits: &Limits,
    interrupts: &mut Interrupts,
    watchers: Watchers<'_>,
) -> Result<Finished, RunError> {
    // Before the first await: a signal that arrives while the command is being started is one
    // this run must act on, not one it has seen.
    let seen_interrupts = interrupts.count();
    let mut child = spawn(inv, cwd, limits.grace)
        .await
        .map_err(RunError::Spawn)?;
    if let (Some(input), Some(mut stdin)) = (inv.stdin.clone(), child.guard.stdin.take()) {
        tokio::spawn(async move {
            // An agent that exits without reading its prompt is not an error of ours.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let mut relay = Relay {
        transcript,
        watchers,
        write_error: None,
        tail: Vec::new(),
        stdout_bytes: 0,
    };
    relay.watchers.publish(&Observation::Started);
    let mut run = Supervision::new(limits, seen_interrupts);
    let waited = run.supervise(&mut child, interrupts, &mut relay).await;
    // Nothing it started outlives the run: the guard ends whatever is left.
    let left_running = child.finish().await;
    let status = waited.map_err(RunError::Wait)?;
    relay.end(status.code());
    if let Some(e) = relay.write_error {
        return Err(RunError::Transcript(e));
    }
    let exit_code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Finished {
        exit_code,
        stopped: run.stopped,
        killed: run.killed,
        leaked_pipes: run.leaked,
        left_running,
        stdout_tail: relay.tail,
    })
}

/// The program under its guard, stdin closed unless it carries the prompt.
async fn spawn(inv: &Invocation, cwd: &Path, grace: Duration) -> std::io::Result<Guarded> {
    Guarded::spawn(inv.program.as_ref(), &inv.args, cwd, grace, |c| {
        c.stdin(if inv.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (k, v) in &inv.env {
            c.env(k, v);
        }
    })
    .await
}

/// Where each chunk of output goes: the transcript, then the watchers.
pub(super) struct Relay<'t, 'w> {
    transcript: &'t mut std::fs::File,
    watchers: Watchers<'w>,
    /// The first failed transcript write; nothing more is written after it.
    write_error: Option<std::io::Error>,
    /// The last bytes of stdout, once it is over.
    pub(super) tail: Vec<u8>,
    stdout_bytes: u64,
}

impl Relay<'_, '_> {
    /// Relays one chunk; false when it could not be written to the transcript (the first time).
    pub(super) fn chunk(&mut self, chunk: &[u8], is_stderr: bool) -> bool {
        let mut written = true;
        if self.write_error.is_none()
            && let Err(e) = self.transcript.write_all(chunk)
        {
            self.write_error = Some(e);
            written = false;
        }
        self.watchers.publish(&Observation::Output {
            bytes: chunk,
            stderr: is_stderr,
        });
        if !is_stderr {
            self.stdout_bytes += chunk.len() as u64;
        }
        written
    }

    /// Tells the watchers what ralph did to the process.
    pub(super) fn publish(&mut self, what: &Observation<'_>) {
        self.watchers.publish(what);
    }

    /// Whether a watcher says the quiet process is waiting, not hung.
    pub(super) fn waiting(&self) -> bool {
        self.watchers.waiting()
    }

    /// The process is over and all its output relayed.
    fn end(&mut self, exit: Option<i32>) {
        if self.write_error.is_none()
            && let Err(e) = self.transcript.flush()
        {
            self.write_error = Some(e);
        }
        self.watchers.publish(&Observation::Ended {
            exit,
            stdout_tail: &self.tail,
            cut: self.stdout_bytes > self.tail.len() as u64,
        });
    }
}

/// Stdout is read into two buffers in turn, so that its tail costs no copy per chunk: a chunk
/// is copied (into `older`) only when the chunk after it is too short to hold the tail alone.
pub(super) struct Stdout {
    bufs: [Vec<u8>; 2],
    /// The buffer the next read goes into; the other holds the last chunk.
    next: usize,
    last: usize,
    /// What came before the last chunk (its end, at most 2 × [`TAIL`]).
    older: Vec<u8>,
}

impl Default for Stdout {
    fn default() -> Stdout {
        Stdout {
            bufs: [vec![0; READ], vec![0; READ]],
            next: 0,
            last: 0,
            older: Vec::new(),
        }
    }
}

impl Stdout {
    pub(super) fn next(&mut self) -> &mut [u8] {
        &mut self.bufs[self.next]
    }

    /// `n` bytes were read into [`Stdout::next`]: they are the last chunk now.
    pub(super) fn read(&mut self, n: usize) -> &[u8] {
        let prev = 1 - self.next;
        // The next read overwrites the previous chunk: keep what the tail still needs of it.
        if n >= TAIL {
            self.older.clear();
        } else {
            keep_tail(&mut self.older, &self.bufs[prev][..self.last], TAIL);
        }
        self.last = n;
        self.next = prev;
        &self.bufs[1 - prev][..n]
    }

    /// The last bytes of stdout, at least [`TAIL`] of them (when there were that many).
    pub(super) fn tail(self) -> Vec<u8> {
        let mut tail = self.older;
        keep_tail(&mut tail, &self.bufs[1 - self.next][..self.last], TAIL);
        tail
    }
}

/// Appends `bytes` to `tail`, keeping at least its last `keep` bytes (at most twice that): a
/// piece longer than `keep` replaces the tail with its own end, so a byte is copied at most
/// once. Whether bytes were dropped.
pub(crate) fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8], keep: usize) -> bool {
    if bytes.len() >= keep {
        let dropped = !tail.is_empty() || bytes.len() > keep;
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - keep..]);
        return dropped;
    }
    let over = (tail.len() + bytes.len()).saturating_sub(2 * keep);
    if over > 0 {
        tail.drain(..tail.len() + bytes.len() - keep);
    }
    tail.extend_from_slice(bytes);
    over > 0
}

/// Read from an optional pipe; pending forever once it is closed, `None` at end of file.
pub(super) async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> Option<usize> {
    match pipe {
        Some(p) => match p.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stdout_tail_survives_reads_of_any_size() {
        let data: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
        let patterns: [&[usize]; 5] = [
            &[READ],
            &[1],
            &[TAIL - 1, 3, READ],
            &[7, READ, 100, 100, 100],
            &[READ / 2, READ / 3, 5000],
        ];
        for sizes in patterns {
            let mut stdout = Stdout::default();
            let (mut at, mut k) = (0, 0);
            while at < data.len() {
                let n = sizes[k % sizes.len()].min(data.len() - at);
                stdout.next()[..n].copy_from_slice(&data[at..at + n]);
                assert_eq!(stdout.read(n), &data[at..at + n]);
                at += n;
                k += 1;
            }
            let tail = stdout.tail();
            assert!(tail.len() >= TAIL && tail.len() <= 2 * TAIL, "{sizes:?}");
            assert!(data.ends_with(&tail), "{sizes:?}");
        }
        let mut stdout = Stdout::default();
        stdout.next()[..3].copy_from_slice(b"abc");
        stdout.read(3);
        assert_eq!(stdout.tail(), b"abc");
        assert!(Stdout::default().tail().is_empty());
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_whatever_the_chunks() {
        let data: Vec<u8> = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
        for size in [1, 7, 100, 999, 1000, 1001, 4096, 40_000] {
            let mut tail = Vec::new();
            for chunk in data.chunks(size) {
                keep_tail(&mut tail, chunk, 1000);
                assert!(tail.len() <= 2000, "{size}");
            }
            assert!(tail.len() >= 1000);
            assert!(data.ends_with(&tail), "{size}");
        }
        let mut tail = Vec::new();
        assert!(!keep_tail(&mut tail, b"abc", 1000));
        assert_eq!(tail, b"abc");
    }
}
