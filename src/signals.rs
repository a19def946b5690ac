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
}

impl Interrupts {
    /// Start listening. Must be called inside the tokio runtime.
    pub(crate) fn install() -> std::io::Result<Interrupts> {
        Interrupts::install_with(None)
    }

    /// Start listening to the signals and to `cancel` (each of its stops counts as one
    /// signal). Must be called inside the tokio runtime.
    pub(crate) fn install_with(cancel: Option<&Cancel>) -> std::io::Result<Interrupts> {
        let (tx, rx) = watch::channel(0u32);
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        // Stops made before the loop listened count too.
        let mut cancel = cancel.map(|c| {
            let mut rx = c.0.subscribe();
            let early = *rx.borrow_and_update();
            (rx, early)
        });
        tx.send_modify(|n| *n += cancel.as_ref().map_or(0, |c| c.1));
        tokio::spawn(async move {
            loop {
                let added = tokio::select! {
                    _ = int.recv() => 1,
                    _ = term.recv() => 1,
                    _ = hup.recv() => 1,
                    more = cancelled(&mut cancel) => more,
                };
                tx.send_modify(|n| *n += added);
            }
        });
        Ok(Interrupts { rx })
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
