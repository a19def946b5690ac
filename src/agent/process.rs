//! Spawning a supervised process: its own process group, output relayed to the transcript with
//! bounded memory, stopped with SIGTERM → grace → SIGKILL to the whole group, never hung by a
//! grandchild holding the pipes.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::sleep_until;

use super::Invocation;
use super::unix::{Group, Guard, set_parent_death_signal};
use crate::signals::Interrupts;

/// How long to keep reading the pipes after the process exited before calling them leaked.
pub const DRAIN: Duration = Duration::from_millis(200);
/// How much of stdout to keep for the final message.
const TAIL: usize = 64 * 1024;

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
    pub observer: Option<&'a mut super::stream::Observer>,
    pub view: Option<&'a crate::live::LiveView>,
    /// `.ralph/activity.now`, for `ralph watch`.
    pub activity: Option<&'a crate::activity::Sink>,
}

impl Watchers<'_> {
    fn chunk(&mut self, chunk: &[u8], is_stderr: bool) {
        if let Some(o) = self.observer.as_deref_mut() {
            o.feed(chunk, is_stderr);
            if o.take_activity_changed()
                && let Some(a) = o.activity()
            {
                if let Some(v) = self.view {
                    v.set_activity(a);
                }
                if let Some(s) = self.activity {
                    s.set(a);
                }
            }
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

/// Run `inv` in `cwd` as the leader of a new process group, relaying its output into
/// `transcript`, until it exits or a limit or an interrupt stops it.
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
    let mut child = spawn(inv, cwd).map_err(RunError::Spawn)?;
    let group = Group::from_leader(child.id().unwrap_or(0));
    // If ralph dies, even by SIGKILL, the guard kills the group (see `unix.rs`).
    let guard = match Guard::spawn(group) {
        Ok(g) => Some(g),
        Err(e) => {
            tracing::warn!("could not start the guard process: {e}");
            None
        }
    };
    if let (Some(input), Some(mut stdin)) = (inv.stdin.clone(), child.stdin().take()) {
        tokio::spawn(async move {
            // An agent that exits without reading its prompt is not an error of ours.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let mut relay = Relay {
        transcript,
        echo,
        watchers,
        write_error: None,
        tail: Vec::new(),
        output_bytes: 0,
    };
    let seen_interrupts = interrupts.count();
    let mut state = State::new(group, limits, seen_interrupts);
    let waited = state.supervise(&mut child, interrupts, &mut relay).await;
    // Nothing of the group outlives the iteration: whatever it left running goes now.
    group.kill();
    if let Some(g) = guard {
        g.release();
    }
    let status = waited.map_err(RunError::Wait)?;
    if relay.write_error.is_none()
        && let Err(e) = relay.transcript.flush()
    {
        relay.write_error = Some(e);
    }
    if let Some(o) = relay.watchers.observer {
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
        interrupts: state.interrupts_now - seen_interrupts,
        duration: started.elapsed(),
        stdout_tail: relay.tail,
        output_bytes: relay.output_bytes,
    })
}

/// The program, in its own process group, stdin closed unless it carries the prompt.
fn spawn(inv: &Invocation, cwd: &Path) -> std::io::Result<Box<dyn ChildWrapper>> {
    let mut cmd = CommandWrap::with_new(&inv.program, |c| {
        c.args(&inv.args)
            .current_dir(cwd)
            .stdin(if inv.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &inv.env {
            c.env(k, v);
        }
        set_parent_death_signal(c);
    });
    cmd.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    cmd.spawn()
}

/// Where each chunk of output goes: the transcript, the watchers, the echo, the stdout tail.
struct Relay<'t, 'w> {
    transcript: &'t mut std::fs::File,
    echo: Echo,
    watchers: Watchers<'w>,
    /// The first failed transcript write; nothing more is written after it.
    write_error: Option<std::io::Error>,
    tail: Vec<u8>,
    output_bytes: u64,
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
            self.tail.extend_from_slice(chunk);
            if self.tail.len() > 2 * TAIL {
                self.tail.drain(..self.tail.len() - TAIL);
            }
        }
        written
    }
}

/// The timers and what happened to the process while it is supervised.
struct State {
    group: Group,
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
    fn new(group: Group, limits: &Limits, interrupts_now: u32) -> State {
        let after = |d: Option<Duration>| d.map_or_else(far, |t| tokio::time::Instant::now() + t);
        State {
            group,
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
    async fn supervise(
        &mut self,
        child: &mut Box<dyn ChildWrapper>,
        interrupts: &mut Interrupts,
        relay: &mut Relay<'_, '_>,
    ) -> std::io::Result<std::process::ExitStatus> {
        let mut out = child.stdout().take();
        let mut err = child.stderr().take();
        let mut buf_out = vec![0u8; 16 * 1024];
        let mut buf_err = vec![0u8; 16 * 1024];
        let running = |s: &State| s.status.is_none();
        while running(self) || out.is_some() || err.is_some() {
            tokio::select! {
                n = interrupts.after(self.interrupts_now) => self.interrupted(n),
                r = read_some(&mut out, &mut buf_out) => match r {
                    Some(n) => self.output(relay, &buf_out[..n], false),
                    None => out = None,
                },
                r = read_some(&mut err, &mut buf_err) => match r {
                    Some(n) => self.output(relay, &buf_err[..n], true),
                    None => err = None,
                },
                s = child.wait(), if running(self) => {
                    self.status = Some(s?);
                    self.drain_until = tokio::time::Instant::now() + DRAIN;
                }
                _ = sleep_until(self.deadline), if running(self) && self.stopped.is_none() => {
                    self.stop(StopCause::Timeout);
                }
                _ = sleep_until(self.idle_deadline), if running(self) && self.stopped.is_none() => {
                    self.stop(StopCause::IdleTimeout);
                }
                _ = sleep_until(self.kill_at), if running(self) => {
                    self.killed = true;
                    self.kill_at = far();
                    self.group.kill();
                }
                _ = sleep_until(self.drain_until), if !running(self) => {
                    // The process is gone but something it started still holds the pipes.
                    self.leaked = true;
                    self.group.kill();
                    break;
                }
            }
        }
        Ok(self
            .status
            .unwrap_or_else(|| std::process::ExitStatus::from_raw(9)))
    }

    fn interrupted(&mut self, count: u32) {
        self.interrupts_now = count;
        if self.status.is_some() {
            return;
        }
        if self.stopped.is_some() || self.grace.is_zero() {
            // A second interrupt (or no grace) kills at once.
            self.stopped.get_or_insert(StopCause::Interrupt);
            self.killed = true;
            self.group.kill();
        } else {
            self.stopped = Some(StopCause::Interrupt);
            self.group.terminate();
            self.kill_at = tokio::time::Instant::now() + self.grace;
        }
    }

    fn output(&mut self, relay: &mut Relay<'_, '_>, chunk: &[u8], is_stderr: bool) {
        if !relay.chunk(chunk, is_stderr) && self.status.is_none() {
            // What the process does can no longer be recorded: stop it now.
            self.killed = true;
            self.group.kill();
        }
        if let Some(t) = self.idle_timeout {
            self.idle_deadline = tokio::time::Instant::now() + t;
        }
    }

    fn stop(&mut self, cause: StopCause) {
        self.stopped = Some(cause);
        self.killed |= begin_stop(self.group, self.grace, &mut self.kill_at);
    }
}

/// SIGTERM the group and arm the SIGKILL timer; with no grace, SIGKILL at once. Returns whether
/// it killed.
fn begin_stop(group: Group, grace: Duration, kill_at: &mut tokio::time::Instant) -> bool {
    if grace.is_zero() {
        group.kill();
        true
    } else {
        group.terminate();
        *kill_at = tokio::time::Instant::now() + grace;
        false
    }
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
