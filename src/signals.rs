//! Interrupts: SIGINT, SIGTERM and SIGHUP counted in one place, so the loop decides what each means.
//!
//! The agent runs in its own process group, so the terminal's Ctrl-C reaches only ralph; the
//! supervisor then stops the agent itself (first signal: gracefully; second: at once).

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
        let (tx, rx) = watch::channel(0u32);
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                    _ = hup.recv() => {}
                }
                tx.send_modify(|n| *n += 1);
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
