//! `GET /api/events`: server-sent events. At connect, an event `loops` with what `/api/loops`
//! answers; then, whenever a file a loop is made of changes, the same again and an event
//! `loop` naming each loop whose files changed.
//!
//! The files are those `ralph watch` watches (`watch::events::interest`: each loop's `.ralph/`,
//! task files, locks, the git directory's `worktrees/`), and each work tree's records in
//! ralph's state directory (its run's record, its questions and hints). One thread waits for
//! notify's events, gathers them for [`DEBOUNCE`], reads the loops again and broadcasts one
//! update; a client that lags behind the small channel gets the next one. No timer: while
//! nothing changes every thread sleeps in the kernel, and no keep-alive is sent.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;
use tokio::sync::broadcast;

use super::App;
use crate::git::Repo;
use crate::loops::{self, Entry};
use crate::watch::events::{Interest, Names, Watches, interest};

/// How long file events are gathered before the loops are read again.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Updates kept for a slow client.
const CAPACITY: usize = 16;

/// One reading of the loops after a change.
pub(super) struct Update {
    /// The `/api/loops` JSON.
    loops: String,
    /// The loops whose files changed.
    changed: Vec<String>,
}

/// The updates, for every event stream.
pub(super) struct Hub {
    tx: broadcast::Sender<Arc<Update>>,
}

impl Hub {
    /// Watch the loops of the repository at `cwd` on a thread of its own.
    pub(super) fn start(cwd: PathBuf, read_only: bool) -> notify::Result<Hub> {
        let (tx, _) = broadcast::channel(CAPACITY);
        let (events, rx) = std::sync::mpsc::channel::<Vec<PathBuf>>();
        let mut watches = Watches::calling(move |_, paths| {
            let _ = events.send(paths.to_vec());
        })?;
        let out = tx.clone();
        // The first watches, before the server answers: nothing that changes after is missed.
        let _ = read(&cwd, read_only, &mut watches, &[]);
        std::thread::Builder::new()
            .name("ralph-serve-watch".into())
            .spawn(move || watch(&cwd, read_only, &mut watches, &rx, &out))
            .map_err(notify::Error::io)?;
        Ok(Hub { tx })
    }
}

/// Wait for file events, gather them, read the loops and broadcast; until the server ends.
fn watch(
    cwd: &Path,
    read_only: bool,
    watches: &mut Watches,
    rx: &Receiver<Vec<PathBuf>>,
    tx: &broadcast::Sender<Arc<Update>>,
) {
    while let Ok(mut paths) = rx.recv() {
        let until = Instant::now() + DEBOUNCE;
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(more) => paths.extend(more),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        if let Some(update) = read(cwd, read_only, watches, &paths) {
            let _ = tx.send(Arc::new(update));
        }
    }
}

/// Read every loop, bring the watches in step (reading again when a directory is newly
/// watched), and say which loops `paths` belong to.
fn read(cwd: &Path, read_only: bool, watches: &mut Watches, paths: &[PathBuf]) -> Option<Update> {
    let repo = Repo::discover(cwd).ok()?;
    let common = repo.git2().commondir().to_path_buf();
    let mut entries = loops::all(&repo).ok()?;
    if watches.update(wanted(&common, &entries)) {
        entries = loops::all(&repo).ok()?;
    }
    let retired = crate::worktree::retired(&repo);
    let loops = super::api::snapshot_of(&entries, &retired, read_only).to_string();
    let mut changed: Vec<String> = paths.iter().filter_map(|p| owner(&entries, p)).collect();
    changed.sort();
    changed.dedup();
    Some(Update { loops, changed })
}

/// What `ralph watch` watches, and each work tree's records in the state directory (where its
/// own lock is: its run's record, its questions and hints).
fn wanted(common: &Path, entries: &[Entry]) -> Interest {
    let mut map = interest(common, entries);
    let records = entries
        .iter()
        .filter_map(|e| Some(e.status.locks.own.as_ref()?.parent()?.to_path_buf()));
    for dir in records {
        map.insert(dir, Names::Any);
    }
    map
}

/// The loop whose files `path` is one of: the deepest of its work tree, its git directory and
/// its records holding it.
fn owner(entries: &[Entry], path: &Path) -> Option<String> {
    entries
        .iter()
        .flat_map(|e| {
            let locks = &e.status.locks;
            let places = [
                Some(e.path.clone()),
                locks.git.parent().map(Path::to_path_buf),
            ]
            .into_iter()
            .chain([locks
                .own
                .as_ref()
                .and_then(|o| o.parent().map(Path::to_path_buf))]);
            places
                .flatten()
                .filter(|p| !p.as_os_str().is_empty() && path.starts_with(p))
                .map(move |p| (p.components().count(), e))
        })
        .max_by_key(|(depth, _)| *depth)
        .map(|(_, e)| super::api::api_name(e).to_string())
}

/// The event stream of one client.
pub(super) async fn stream(
    State(app): State<App>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = app.hub.tx.subscribe();
    let (cwd, read_only) = (app.cwd.clone(), app.read_only);
    let first = tokio::task::spawn_blocking(move || super::api::snapshot(&cwd, read_only))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|v| v.to_string());
    let pending: VecDeque<Event> = first.map(loops_event).into_iter().collect();
    // No keep-alive: an idle stream costs nothing.
    Sse::new(futures_util::stream::unfold(
        (rx, pending),
        |(mut rx, mut pending)| async move {
            loop {
                if let Some(ev) = pending.pop_front() {
                    return Some((Ok(ev), (rx, pending)));
                }
                match rx.recv().await {
                    Ok(u) => {
                        pending.push_back(loops_event(u.loops.clone()));
                        let names = u.changed.iter();
                        pending.extend(names.map(|n| Event::default().event("loop").data(n)));
                    }
                    // The next update carries everything again.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    ))
}

fn loops_event(json: String) -> Event {
    Event::default().event("loops").data(json)
}
