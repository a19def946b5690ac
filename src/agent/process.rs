//! Spawning a supervised process: its own process group, output relayed to the transcript with
//! bounded memory, stopped with SIGTERM → grace → SIGKILL to the whole group, never hung by a
//! grandchild holding the pipes.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
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
}

impl Watchers<'_> {
    fn chunk(&mut self, chunk: &[u8], is_stderr: bool) {
        if let Some(o) = self.observer.as_deref_mut() {
            o.feed(chunk, is_stderr);
            if o.take_activity_changed()
                && let (Some(v), Some(a)) = (self.view, o.activity())
            {
                v.set_activity(a);
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

/// Run `inv` in `cwd` as the leader of a new process group, relaying its output into
/// `transcript`, until it exits or a limit or an interrupt stops it.
pub async fn run(
    inv: &Invocation,
    cwd: &Path,
    transcript: &mut std::fs::File,
    limits: &Limits,
    interrupts: &mut Interrupts,
    echo: Echo,
    mut watchers: Watchers<'_>,
) -> std::io::Result<Finished> {
    let started = Instant::now();
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
    let mut child = cmd.spawn()?;
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
    let mut out = child.stdout().take();
    let mut err = child.stderr().take();

    let seen_interrupts = interrupts.count();
    let mut interrupts_now = seen_interrupts;
    let mut stopped: Option<StopCause> = None;
    let mut killed = false;
    let mut leaked = false;
    let mut status = None;
    let mut tail: Vec<u8> = Vec::new();
    let mut output_bytes = 0u64;
    let mut buf_out = vec![0u8; 16 * 1024];
    let mut buf_err = vec![0u8; 16 * 1024];

    let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
    let deadline = limits
        .timeout
        .map_or(far, |t| tokio::time::Instant::now() + t);
    let mut idle_deadline = limits
        .idle_timeout
        .map_or(far, |t| tokio::time::Instant::now() + t);
    let mut kill_at = far;
    let mut drain_until = far;
    let mut stdout = std::io::stdout();

    loop {
        if status.is_some() && out.is_none() && err.is_none() {
            break;
        }
        tokio::select! {
            n = interrupts.after(interrupts_now) => {
                interrupts_now = n;
                if status.is_none() {
                    if stopped.is_some() || limits.grace.is_zero() {
                        // A second interrupt (or no grace) kills at once.
                        stopped.get_or_insert(StopCause::Interrupt);
                        killed = true;
                        group.kill();
                    } else {
                        stopped = Some(StopCause::Interrupt);
                        group.terminate();
                        kill_at = tokio::time::Instant::now() + limits.grace;
                    }
                }
            }
            r = read_some(&mut out, &mut buf_out) => {
                match r {
                    Some(n) => {
                        let chunk = &buf_out[..n];
                        transcript.write_all(chunk)?;
                        watchers.chunk(chunk, false);
                        match echo {
                            Echo::Stdout => {
                                let _ = stdout.write_all(chunk);
                                let _ = stdout.flush();
                            }
                            Echo::Stderr => {
                                let _ = std::io::stderr().write_all(chunk);
                            }
                            Echo::None => {}
                        }
                        output_bytes += n as u64;
                        tail.extend_from_slice(chunk);
                        if tail.len() > 2 * TAIL {
                            tail.drain(..tail.len() - TAIL);
                        }
                        if let Some(t) = limits.idle_timeout {
                            idle_deadline = tokio::time::Instant::now() + t;
                        }
                    }
                    None => out = None,
                }
            }
            r = read_some(&mut err, &mut buf_err) => {
                match r {
                    Some(n) => {
                        let chunk = &buf_err[..n];
                        transcript.write_all(chunk)?;
                        watchers.chunk(chunk, true);
                        if echo != Echo::None {
                            let _ = std::io::stderr().write_all(chunk);
                        }
                        output_bytes += n as u64;
                        if let Some(t) = limits.idle_timeout {
                            idle_deadline = tokio::time::Instant::now() + t;
                        }
                    }
                    None => err = None,
                }
            }
            s = child.wait(), if status.is_none() => {
                status = Some(s?);
                drain_until = tokio::time::Instant::now() + DRAIN;
            }
            _ = sleep_until(deadline), if status.is_none() && stopped.is_none() => {
                stopped = Some(StopCause::Timeout);
                killed |= begin_stop(group, limits.grace, &mut kill_at);
            }
            _ = sleep_until(idle_deadline), if status.is_none() && stopped.is_none() => {
                stopped = Some(StopCause::IdleTimeout);
                killed |= begin_stop(group, limits.grace, &mut kill_at);
            }
            _ = sleep_until(kill_at), if status.is_none() => {
                killed = true;
                kill_at = far;
                group.kill();
            }
            _ = sleep_until(drain_until), if status.is_some() => {
                // The process is gone but something it started still holds the pipes.
                leaked = true;
                group.kill();
                break;
            }
        }
    }
    // Nothing of the group outlives the iteration: whatever it left running goes now.
    group.kill();
    if let Some(g) = guard {
        g.release();
    }
    transcript.flush()?;
    if let Some(o) = watchers.observer {
        o.finish();
    }
    let status = status.unwrap_or_else(|| std::process::ExitStatus::from_raw(9));
    let exit_code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Finished {
        exit_code,
        stopped,
        killed,
        leaked_pipes: leaked,
        interrupts: interrupts_now - seen_interrupts,
        duration: started.elapsed(),
        stdout_tail: tail,
        output_bytes,
    })
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
