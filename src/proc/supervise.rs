//! The timers and the stopping of one supervised run: the output read as it comes, the exit,
//! the timeout, the idle timeout, interrupts, SIGTERM → grace → SIGKILL through the guard, and
//! the bounded drain of pipes a leftover process may hold after the exit. What ralph does to
//! the process is published to its watchers as it does it.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::guarded::{Guarded, LAST_RESORT, Orders};
use super::observe::Observation;
use super::relay::{Limits, READ, Relay, Stdout, StopCause, read_some};
use crate::signals::Interrupts;

/// How long to keep reading the pipes after the process exited before calling them leaked.
const DRAIN: Duration = Duration::from_millis(200);

/// The timers and what happened to the process while it is supervised.
pub(super) struct Supervision {
    grace: Duration,
    idle_timeout: Option<Duration>,
    /// How long a quiet retry is believed (see [`Supervision::idle_due`]).
    quiet_retry: Option<Duration>,
    /// When the process last printed (or started).
    last_output: Instant,
    pub(super) interrupts_now: u32,
    pub(super) stopped: Option<StopCause>,
    pub(super) killed: bool,
    pub(super) leaked: bool,
    status: Option<ExitStatus>,
    deadline: Instant,
    idle_deadline: Instant,
    kill_at: Instant,
    drain_until: Instant,
}

/// A deadline that never comes.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

impl Supervision {
    pub(super) fn new(limits: &Limits, interrupts_now: u32) -> Supervision {
        let after = |d: Option<Duration>| d.map_or_else(far, |t| Instant::now() + t);
        Supervision {
            grace: limits.grace,
            idle_timeout: limits.idle_timeout,
            quiet_retry: limits.quiet_retry,
            last_output: Instant::now(),
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

    fn running(&self) -> bool {
        self.status.is_none()
    }

    /// Relays the output and waits for the exit, the timers and interrupts; returns the exit
    /// status (SIGKILL's when the pipes leaked before an exit was seen).
    ///
    /// The hot path is one `read`, one transcript `write` and the watchers per chunk of up to
    /// [`READ`] bytes: the timers are armed once and moved only when their deadline changes (the
    /// idle timer is not re-armed per chunk: it checks the time of the last output when it
    /// fires).
    pub(super) async fn supervise(
        &mut self,
        child: &mut Guarded,
        interrupts: &mut Interrupts,
        relay: &mut Relay<'_, '_>,
    ) -> std::io::Result<ExitStatus> {
        let (mut out, mut err) = (child.guard.stdout.take(), child.guard.stderr.take());
        let (mut buf_out, mut buf_err) = (Stdout::default(), vec![0u8; READ]);
        let Guarded {
            guard,
            orders,
            reports,
            ..
        } = child;
        let wait = reports.ended(guard);
        let timeout = sleep_until(self.deadline);
        let idle = sleep_until(self.idle_deadline);
        let kill = sleep_until(self.kill_at);
        let drain = sleep_until(self.drain_until);
        tokio::pin!(wait, timeout, idle, kill, drain);
        while self.running() || out.is_some() || err.is_some() {
            let (kill_at, before) = (self.kill_at, (self.stopped, self.killed));
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
                s = &mut wait, if self.running() => {
                    self.status = Some(s?);
                    self.drain_until = Instant::now() + DRAIN;
                    drain.as_mut().reset(self.drain_until);
                }
                () = &mut timeout, if self.running() && self.stopped.is_none() => {
                    self.stop(StopCause::Timeout, orders);
                }
                () = &mut idle, if self.running() && self.stopped.is_none() => {
                    if self.idle_due(Instant::now(), || relay.waiting(), orders) {
                        idle.as_mut().reset(self.idle_deadline);
                    }
                }
                () = &mut kill, if self.running() => self.kill_due(orders),
                () = &mut drain, if !self.running() => {
                    // The process is gone but something it started still holds the pipes.
                    self.leaked = true;
                    orders.kill();
                    relay.publish(&Observation::Killed);
                    break;
                }
            }
            self.published(before, relay);
            if self.kill_at != kill_at {
                kill.as_mut().reset(self.kill_at);
            }
        }
        relay.tail = buf_out.tail();
        Ok(self.status.unwrap_or_else(|| ExitStatus::from_raw(9)))
    }

    /// Tells the watchers what this turn of the loop did to the process (`before`: whether it
    /// was being stopped and killed before).
    fn published(&self, before: (Option<StopCause>, bool), relay: &mut Relay<'_, '_>) {
        if let (None, Some(cause)) = (before.0, self.stopped) {
            relay.publish(&Observation::Stopping(cause));
        }
        if !before.1 && self.killed {
            relay.publish(&Observation::Killed);
        }
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
            self.terminate(orders);
        }
    }

    /// The idle timer fired at `now`: stop the process if it printed nothing for the idle
    /// time — unless it said it is sleeping out a rate limit (`waiting`), quiet, not hung, for
    /// no longer than `quiet_retry` since its last output (then the idle timeout holds again;
    /// the `--timeout` always does). True when the timer is to be armed again.
    fn idle_due(
        &mut self,
        now: Instant,
        waiting: impl FnOnce() -> bool,
        orders: &mut Orders,
    ) -> bool {
        if now < self.idle_deadline {
            // Output came since it was armed: wait for the rest of the idle time.
            return true;
        }
        let quiet = now.saturating_duration_since(self.last_output);
        if self.quiet_retry.is_some_and(|cap| quiet < cap) && waiting() {
            self.idle_deadline = now + self.idle_timeout.unwrap_or_default();
            return true;
        }
        self.stop(StopCause::IdleTimeout, orders);
        false
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
            self.last_output = Instant::now();
            self.idle_deadline = self.last_output + t;
        }
    }

    fn stop(&mut self, cause: StopCause, orders: &mut Orders) {
        self.stopped = Some(cause);
        if self.grace.is_zero() {
            self.kill_now(orders);
        } else {
            self.terminate(orders);
        }
    }

    /// The SIGKILL timer fired: the grace is over, or the guard did not carry SIGKILL out.
    fn kill_due(&mut self, orders: &mut Orders) {
        if orders.kill_sent {
            // The guard did not carry SIGKILL out (stopped by what it guards).
            orders.kill_guard();
            self.kill_at = far();
        } else {
            self.kill_now(orders);
        }
    }

    /// SIGTERM the group and arm the SIGKILL timer.
    fn terminate(&mut self, orders: &mut Orders) {
        orders.terminate();
        self.kill_at = Instant::now() + self.grace;
    }

    /// SIGKILL now, and the guard itself if it has not carried that out [`LAST_RESORT`] later.
    fn kill_now(&mut self, orders: &mut Orders) {
        self.killed = true;
        orders.kill();
        self.kill_at = Instant::now() + LAST_RESORT;
    }
}
