//! Interrupts: SIGINT, SIGTERM and SIGHUP counted in one place, so the loop decides what each means.
//!
//! The agent runs in its own process group, so the terminal's Ctrl-C reaches only ralph; the
//! supervisor then stops the agent itself (first signal: gracefully; second: at once). A loop
//! its caller runs (a queue's item) also counts its [`Cancel`]: one loop stopped as a Ctrl-C
//! would stop it, the others going on.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// A counter of the interrupt signals received since the run started.
#[derive(Clone)]
pub(crate) struct Interrupts {
    rx: watch::Receiver<u32>,
    stop: Stop,
}

impl Interrupts {
    /// Start listening.
    pub(crate) fn install() -> std::io::Result<Interrupts> {
        Interrupts::install_with(None)
    }

    /// Start listening to the signals and to `cancel` (each of its stops counts as one
    /// signal). They are counted on a thread of their own, so the count moves — and the
    /// [`Stop`] blocking code listens to is raised — while the loop's thread is blocked in a
    /// git command or a git hook; the thread ends once every [`Interrupts`] is gone.
    pub(crate) fn install_with(cancel: Option<&Cancel>) -> std::io::Result<Interrupts> {
        let (tx, rx) = watch::channel(0u32);
        let stop = Stop::new()?;
        // Stops made before the loop listened count too.
        let mut cancel = cancel.map(|c| {
            let mut rx = c.0.subscribe();
            let early = *rx.borrow_and_update();
            (rx, early)
        });
        let early = cancel.as_ref().map_or(0, |c| c.1);
        tx.send_modify(|n| *n += early);
        stop.raise(early);
        let raised = stop.clone();
        let (ready, installed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("ralph-interrupts".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready.send(Err(e))),
                };
                runtime.block_on(async move {
                    let handlers = (|| {
                        Ok::<_, std::io::Error>((
                            signal(SignalKind::interrupt())?,
                            signal(SignalKind::terminate())?,
                            signal(SignalKind::hangup())?,
                        ))
                    })();
                    let (mut int, mut term, mut hup) = match handlers {
                        Ok(h) => h,
                        Err(e) => return drop(ready.send(Err(e))),
                    };
                    let _ = ready.send(Ok(()));
                    loop {
                        let added = tokio::select! {
                            _ = int.recv() => 1,
                            _ = term.recv() => 1,
                            _ = hup.recv() => 1,
                            more = cancelled(&mut cancel) => more,
                            () = tx.closed() => return,
                        };
                        tx.send_modify(|n| *n += added);
                        raised.raise(*tx.borrow());
                    }
                });
            })?;
        installed
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the signal thread ended")))?;
        Ok(Interrupts { rx, stop })
    }

    /// The interrupts as blocking code hears them.
    pub(crate) fn stop(&self) -> Stop {
        self.stop.clone()
    }

    /// How many interrupts have arrived so far.
    pub(crate) fn count(&self) -> u32 {
        *self.rx.borrow()
    }

    /// Wait until the count moves past `seen`, and return the new count.
    pub(crate) async fn after(&mut self, seen: u32) -> u32 {
        loop {
            let now = *self.rx.borrow_and_update();
            if now > seen {
                return now;
            }
            if self.rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The stops a [`Cancel`] made since it was last looked at; pending for ever without one (or
/// once its every handle is gone).
async fn cancelled(cancel: &mut Option<(watch::Receiver<u32>, u32)>) -> u32 {
    let Some((rx, seen)) = cancel.as_mut() else {
        return std::future::pending().await;
    };
    if rx.changed().await.is_err() {
        *cancel = None;
        return std::future::pending().await;
    }
    let now = *rx.borrow_and_update();
    let added = now.saturating_sub(*seen);
    *seen = now;
    added
}

/// The interrupts as blocking code hears them — ralph's git commands and git hooks run on the
/// loop's thread while its runtime waits: how many came, and an eventfd that is readable from
/// the first one on, so a thread polling a child's pidfd beside it wakes at once.
#[derive(Clone, Debug)]
pub(crate) struct Stop(std::sync::Arc<Raised>);

#[derive(Debug)]
struct Raised {
    count: std::sync::atomic::AtomicU32,
    fd: rustix::fd::OwnedFd,
    /// A git command had to be killed for an interrupt: git hangs here, later ones are not
    /// started.
    given_up: std::sync::atomic::AtomicBool,
}

impl Stop {
    pub(crate) fn new() -> std::io::Result<Stop> {
        use rustix::event::{EventfdFlags, eventfd};
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Stop(std::sync::Arc::new(Raised {
            count: std::sync::atomic::AtomicU32::new(0),
            fd,
            given_up: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    /// How many interrupts have come.
    pub(crate) fn count(&self) -> u32 {
        self.0.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The count is `count` now (none: nothing changes).
    pub(crate) fn raise(&self, count: u32) {
        if count == 0 {
            return;
        }
        self.0
            .count
            .fetch_max(count, std::sync::atomic::Ordering::SeqCst);
        // Never read back: readable for good once the first interrupt came.
        let _ = rustix::io::write(&self.0.fd, &1u64.to_ne_bytes());
    }

    /// A git command was killed for an interrupt: git hangs in this repository (a FIFO, a
    /// filter that never ends), so no later command is started.
    pub(crate) fn give_up(&self) {
        self.0
            .given_up
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether [`Self::give_up`] was called.
    pub(crate) fn given_up(&self) -> bool {
        self.0.given_up.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Readable from the first interrupt on.
    pub(crate) fn fd(&self) -> rustix::fd::BorrowedFd<'_> {
        use rustix::fd::AsFd;
        self.0.fd.as_fd()
    }
}

/// A way to stop one loop from another thread, as its first (then second) Ctrl-C would: the
/// queue holds one per item it runs.
#[derive(Clone)]
pub(crate) struct Cancel(std::sync::Arc<watch::Sender<u32>>);

impl Cancel {
    pub(crate) fn new() -> Cancel {
        Cancel(std::sync::Arc::new(watch::channel(0u32).0))
    }

    /// Stop the loop: the first call gracefully (its agent stopped within the grace, the
    /// iteration recorded), a second at once.
    pub(crate) fn stop(&self) {
        self.0.send_modify(|n| *n += 1);
    }
}

/// Interrupts counted on a thread of their own, for code outside any runtime (the queue between
/// its items). Each loop's own [`Interrupts`] sees the same signals.
#[derive(Clone)]
pub(crate) struct Background(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl Background {
    /// Start counting; the handlers are in place when this returns.
    pub(crate) fn install() -> std::io::Result<Background> {
        use std::sync::atomic::{AtomicU32, Ordering};
        let count = std::sync::Arc::new(AtomicU32::new(0));
        let counted = count.clone();
        let (ready, installed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("ralph-signals".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready.send(Err(e))),
                };
                runtime.block_on(async move {
                    let mut interrupts = match Interrupts::install() {
                        Ok(i) => i,
                        Err(e) => return drop(ready.send(Err(e))),
                    };
                    let _ = ready.send(Ok(()));
                    let mut seen = 0;
                    loop {
                        seen = interrupts.after(seen).await;
                        counted.store(seen, Ordering::SeqCst);
                    }
                });
            })?;
        installed
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the signal thread ended")))?;
        Ok(Background(count))
    }

    pub(crate) fn count(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
