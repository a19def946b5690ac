//! Spawning a supervised process: under its guard (see `unix.rs`), output relayed to the
//! transcript with bounded memory, stopped with SIGTERM → grace → SIGKILL to its whole tree
//! (its group and every process it started elsewhere), never hung by a
//! grandchild holding the pipes.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::sleep_until;

use super::Invocation;
use super::guarded::{Guarded, Orders};
use crate::signals::Interrupts;

/// How long to keep reading the pipes after the process exited before calling them leaked.
pub const DRAIN: Duration = Duration::from_millis(200);
/// How much of stdout to keep for the final message.
const TAIL: usize = 64 * 1024;
/// The most one read takes from a pipe: as much as the pipe holds by default (64 KiB on Linux),
/// and few enough bytes that the buffers stay in the CPU's cache. Larger reads, and pipes
/// widened for them (`F_SETPIPE_SZ`), measured slower: what the agent wrote ahead had left the
/// cache by the time ralph read it.
const READ: usize = 64 * 1024;

/// Limits of one supervised run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub grace: Duration,
}

/// Why ralph stopped the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    Timeout,
    IdleTimeout,
    Interrupt,
}

/// How a supervised process ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The exit code, or 128 + signal number when a signal ended it.
    pub exit_code: i32,
    pub stopped: Option<StopCause>,
    /// SIGKILL was needed (the grace ran out, a second interrupt, or leaked pipes).
    pub killed: bool,
    /// A descendant still held stdout/stderr after the process exited.
    pub leaked_pipes: bool,
    /// How many processes it started were still running when it ended (ended by the guard).
    pub left_running: usize,
    /// Interrupts received while it ran (including the one that stopped it).
    pub interrupts: u32,
    pub duration: Duration,
    /// The last bytes of stdout (bounded).
    pub stdout_tail: Vec<u8>,
    pub output_bytes: u64,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.exit_code == 0 && self.stopped.is_none()
    }
}

/// Who else watches the output as it arrives: the agent-output observer (activity, cost,
/// limits) and the live terminal view.
#[derive(Default)]
pub struct Watchers<'a> {
    pub observer: Option<&'a mut crate::agent::stream::Observer>,
    pub view: Option<&'a crate::live::LiveView>,
    /// `.ralph/activity.now`, for `ralph watch`.
    pub activity: Option<&'a crate::activity::Sink>,
    /// When the activity was last worked out for the file.
    pub activity_asked: Option<std::time::Instant>,
    /// Output arrived since the activity was last worked out for the file.
    pub pending_activity: bool,
}

impl Watchers<'_> {
    fn chunk(&mut self, chunk: &[u8], is_stderr: bool) {
        if let Some(o) = self.observer.as_deref_mut() {
            o.feed(chunk, is_stderr);
            // Working out the activity can cost a JSON parse: asked for by a live view at
            // every change, for the activity file at most every MIN_INTERVAL (and once more at
            // the end, in `finish`).
            let file_due = self.activity.is_some()
                && self
                    .activity_asked
                    .is_none_or(|t| t.elapsed() >= crate::activity::MIN_INTERVAL);
            if (self.view.is_some() || file_due) && o.take_activity_changed() {
                self.activity_asked = Some(std::time::Instant::now());
                self.pending_activity = false;
                if let Some(a) = o.activity() {
                    if let Some(v) = self.view {
                        v.set_activity(a);
                    }
                    if let Some(s) = self.activity {
                        s.set(a);
                    }
                }
            } else if self.activity.is_some() {
                self.pending_activity = true;
            }
        }
    }

    /// The last activity reaches the file even when the throttle skipped it.
    fn finish(&mut self) {
        if let (Some(o), Some(s), true) = (
            self.observer.as_deref_mut(),
            self.activity,
            self.pending_activity,
        ) && let Some(a) = o.activity()
        {
            s.set(a);
        }
    }
}

/// Where the output goes besides the transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    None,
    /// Copy the agent's stdout to ralph's stdout, its stderr to ralph's stderr (`--stream`).
    Stdout,
    /// Copy both to ralph's stderr (`--stream --json`: stdout carries only JSON events).
    Stderr,
}

/// Which step of a supervised run failed, so the caller can say so: a program that cannot be
/// started is not a full disk.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
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

impl RunError {
    /// The crate's error, naming what ran (`agent `claude``, `the test command: make`): "failed
    /// to spawn agent `claude`", "failed to write the transcript", "failed to wait for …", with
    /// the OS error as its cause.
    pub fn into_error(self, what: impl std::fmt::Display) -> crate::error::Error {
        use crate::error::Error;
        match self {
            RunError::Spawn(e) => Error::io(format!("failed to spawn {what}"), e),
            RunError::Transcript(e) => Error::io("failed to write the transcript", e),
            RunError::Wait(e) => Error::io(format!("failed to wait for {what}"), e),
        }
    }
}

/// Run `inv` in `cwd` under its guard (the leader of a new process group, every descendant
/// adopted by the guard), relaying its output into `transcript`, until it exits or a limit or
/// an interrupt stops it; then whatever it left running is ended.
pub async fn run(
    inv: &Invocation,
    cwd: &Path,
    transcript: &mut std::fs::File,
    limits: &Limits,
    interrupts: &mut Interrupts,
    echo: Echo,
    watchers: Watchers<'_>,
) -> Result<Finished, RunError> {
    let started = Instant::now();
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
    let mut watchers = watchers;
    if let Some(o) = watchers.observer.as_deref_mut() {
        o.relay_keeps_tail();
    }
    let mut relay = Relay {
        transcript,
        echo,
        watchers,
        write_error: None,
        tail: Vec::new(),
        stdout_bytes: 0,
        output_bytes: 0,
    };
    let mut state = State::new(limits, seen_interrupts);
    let waited = state.supervise(&mut child, interrupts, &mut relay).await;
    // Nothing it started outlives the run: the guard ends whatever is left.
    let left_running = child.finish().await;
    let status = waited.map_err(RunError::Wait)?;
    if relay.write_error.is_none()
        && let Err(e) = relay.transcript.flush()
    {
        relay.write_error = Some(e);
    }
    relay.watchers.finish();
    if let Some(o) = relay.watchers.observer {
        o.relayed_tail(&relay.tail, relay.stdout_bytes > relay.tail.len() as u64);
        o.finish(status.code());
    }
    if let Some(e) = relay.write_error {
        return Err(RunError::Transcript(e));
    }
    let exit_code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Finished {
        exit_code,
        stopped: state.stopped,
        killed: state.killed,
        leaked_pipes: state.leaked,
        left_running,
        interrupts: state.interrupts_now - seen_interrupts,
        duration: started.elapsed(),
        stdout_tail: relay.tail,
        output_bytes: relay.output_bytes,
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

/// Where each chunk of output goes: the transcript, the watchers, the echo.
struct Relay<'t, 'w> {
    transcript: &'t mut std::fs::File,
    echo: Echo,
    watchers: Watchers<'w>,
    /// The first failed transcript write; nothing more is written after it.
    write_error: Option<std::io::Error>,
    /// The last bytes of stdout, once it is over.
    tail: Vec<u8>,
    stdout_bytes: u64,
    output_bytes: u64,
}

/// Stdout is read into two buffers in turn, so that its tail costs no copy per chunk: a chunk
/// is copied (into `older`) only when the chunk after it is too short to hold the tail alone.
struct Stdout {
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
    fn next(&mut self) -> &mut [u8] {
        &mut self.bufs[self.next]
    }

    /// `n` bytes were read into [`Stdout::next`]: they are the last chunk now.
    fn read(&mut self, n: usize) -> &[u8] {
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
    fn tail(self) -> Vec<u8> {
        let mut tail = self.older;
        keep_tail(&mut tail, &self.bufs[1 - self.next][..self.last], TAIL);
        tail
    }
}

impl Relay<'_, '_> {
    /// Relays one chunk; false when it could not be written to the transcript (the first time).
    fn chunk(&mut self, chunk: &[u8], is_stderr: bool) -> bool {
        let mut written = true;
        if self.write_error.is_none()
            && let Err(e) = self.transcript.write_all(chunk)
        {
            self.write_error = Some(e);
            written = false;
        }
        self.watchers.chunk(chunk, is_stderr);
        match (self.echo, is_stderr) {
            (Echo::None, _) => {}
            (Echo::Stdout, false) => {
                let mut stdout = std::io::stdout();
                let _ = stdout.write_all(chunk);
                let _ = stdout.flush();
            }
            (Echo::Stdout | Echo::Stderr, _) => {
                let _ = std::io::stderr().write_all(chunk);
            }
        }
        self.output_bytes += chunk.len() as u64;
        if !is_stderr {
            self.stdout_bytes += chunk.len() as u64;
        }
        written
    }
}

/// The timers and what happened to the process while it is supervised.
struct State {
    grace: Duration,
    idle_timeout: Option<Duration>,
    interrupts_now: u32,
    stopped: Option<StopCause>,
    killed: bool,
    leaked: bool,
    status: Option<std::process::ExitStatus>,
    deadline: tokio::time::Instant,
    idle_deadline: tokio::time::Instant,
    kill_at: tokio::time::Instant,
    drain_until: tokio::time::Instant,
}

/// A deadline that never comes.
fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86400 * 365)
}

impl State {
    fn new(limits: &Limits, interrupts_now: u32) -> State {
        let after = |d: Option<Duration>| d.map_or_else(far, |t| tokio::time::Instant::now() + t);
        State {
            grace: limits.grace,
            idle_timeout: limits.idle_timeout,
            interrupts_now,
            stopped: None,
            killed: false,
            leaked: false,
            status: None,
            deadline: after(limits.timeout),
            idle_deadline: after(limits.idle_timeout),
            kill_at: far(),
            drain_until: far(),
        }
    }

    /// Relays the output and waits for the exit, the timers and interrupts; returns the exit
    /// status (SIGKILL's when the pipes leaked before an exit was seen).
    ///
    /// The hot path is one `read` and one transcript `write` per chunk of up to [`READ`] bytes:
    /// the timers are armed once and moved only when their deadline changes (the idle timer is
    /// not re-armed per chunk: it checks the time of the last output when it fires).
    async fn supervise(
        &mut self,
        child: &mut Guarded,
        interrupts: &mut Interrupts,
        relay: &mut Relay<'_, '_>,
    ) -> std::io::Result<std::process::ExitStatus> {
        let mut out = child.guard.stdout.take();
        let mut err = child.guard.stderr.take();
        let mut buf_out = Stdout::default();
        let mut buf_err = vec![0u8; READ];
        let Guarded {
            guard,
            orders,
            reports,
            ..
        } = child;
        let wait = reports.ended(guard);
        tokio::pin!(wait);
        let timeout = sleep_until(self.deadline);
        let idle = sleep_until(self.idle_deadline);
        let kill = sleep_until(self.kill_at);
        let drain = sleep_until(self.drain_until);
        tokio::pin!(timeout, idle, kill, drain);
        let running = |s: &State| s.status.is_none();
        while running(self) || out.is_some() || err.is_some() {
            let kill_at = self.kill_at;
            tokio::select! {
                n = interrupts.after(self.interrupts_now) => self.interrupted(n, orders),
                r = read_some(&mut out, buf_out.next()) => match r {
                    Some(n) => self.output(relay, buf_out.read(n), false, orders),
                    None => out = None,
                },
                r = read_some(&mut err, &mut buf_err) => match r {
                    Some(n) => self.output(relay, &buf_err[..n], true, orders),
                    None => err = None,
                },
                s = &mut wait, if running(self) => {
                    self.status = Some(s?);
                    self.drain_until = tokio::time::Instant::now() + DRAIN;
                    drain.as_mut().reset(self.drain_until);
                }
                () = &mut timeout, if running(self) && self.stopped.is_none() => {
                    self.stop(StopCause::Timeout, orders);
                }
                () = &mut idle, if running(self) && self.stopped.is_none() => {
                    if tokio::time::Instant::now() >= self.idle_deadline {
                        self.stop(StopCause::IdleTimeout, orders);
                    } else {
                        // Output came since it was armed: wait for the rest of the idle time.
                        idle.as_mut().reset(self.idle_deadline);
                    }
                }
                () = &mut kill, if running(self) => {
                    if orders.kill_sent {
                        // The guard did not carry SIGKILL out (stopped by what it guards).
                        orders.kill_guard();
                        self.kill_at = far();
                    } else {
                        self.kill_now(orders);
                    }
                }
                () = &mut drain, if !running(self) => {
                    // The process is gone but something it started still holds the pipes.
                    self.leaked = true;
                    orders.kill();
                    break;
                }
            }
            if self.kill_at != kill_at {
                kill.as_mut().reset(self.kill_at);
            }
        }
        relay.tail = buf_out.tail();
        Ok(self
            .status
            .unwrap_or_else(|| std::process::ExitStatus::from_raw(9)))
    }

    fn interrupted(&mut self, count: u32, orders: &mut Orders) {
        self.interrupts_now = count;
        if self.status.is_some() {
            return;
        }
        if self.stopped.is_some() || self.grace.is_zero() {
            // A second interrupt (or no grace) kills at once.
            self.stopped.get_or_insert(StopCause::Interrupt);
            self.kill_now(orders);
        } else {
            self.stopped = Some(StopCause::Interrupt);
            begin_stop(orders, self.grace, &mut self.kill_at);
        }
    }

    fn output(
        &mut self,
        relay: &mut Relay<'_, '_>,
        chunk: &[u8],
        is_stderr: bool,
        orders: &mut Orders,
    ) {
        if !relay.chunk(chunk, is_stderr) && self.status.is_none() {
            // What the process does can no longer be recorded: stop it now.
            self.kill_now(orders);
        }
        if let Some(t) = self.idle_timeout {
            // Only noted: the idle timer reads it when it fires (it is not re-armed per chunk).
            self.idle_deadline = tokio::time::Instant::now() + t;
        }
    }

    fn stop(&mut self, cause: StopCause, orders: &mut Orders) {
        self.stopped = Some(cause);
        if self.grace.is_zero() {
            self.kill_now(orders);
        } else {
            begin_stop(orders, self.grace, &mut self.kill_at);
        }
    }

    /// SIGKILL now, and the guard itself if it has not carried that out [`LAST_RESORT`] later.
    fn kill_now(&mut self, orders: &mut Orders) {
        self.killed = true;
        orders.kill();
        self.kill_at = tokio::time::Instant::now() + super::guarded::LAST_RESORT;
    }
}

/// SIGTERM the group and arm the SIGKILL timer.
fn begin_stop(orders: &mut Orders, grace: Duration, kill_at: &mut tokio::time::Instant) {
    orders.terminate();
    *kill_at = tokio::time::Instant::now() + grace;
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
async fn read_some<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
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
