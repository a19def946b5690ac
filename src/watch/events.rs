//! What wakes the dashboard: keys and resizes from the terminal (a thread blocked on
//! crossterm's `read`), and file events (notify, inotify on Linux) on the files a loop's row is
//! made of. Nothing polls: with no event, every thread sleeps in the kernel.
//!
//! Watches are non-recursive, on directories, and an event counts only for the names wanted
//! there ([`Interest`]): a loop's `.ralph/` (state, log, activity), its task files, its locks
//! (ralph's own in its state directory and the git directory's `ralph.lock`, as `status` found
//! them: each is closed when a supervisor dies, even by SIGKILL), the work tree's root
//! (`.ralph/` appearing) and the common git directory's `worktrees/` (worktrees coming and
//! going). Opening a file is no event, so the dashboard's own reads never wake it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::loops::Entry;
use crate::state::RunState;

/// A message to the dashboard's loop.
#[derive(Debug)]
pub(crate) enum Msg {
    /// A key, a resize, … from the terminal.
    Input(crossterm::event::Event),
    /// The terminal cannot be read.
    InputFailed(String),
    /// A file a row is made of changed.
    Changed(Change),
    /// SIGINT, SIGTERM or SIGHUP: quit, restoring the terminal.
    Signal,
    /// ralph would have printed a line (a warning): it is held, for the footer.
    Held,
}

/// What changed, the least first: what `Activity` asks is part of what `Loops` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Change {
    /// Only `.ralph/activity.now` files (the frequent case: read those again).
    Activity,
    /// Anything else (read every loop again).
    Loops,
}

/// The names wanted in a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Names {
    Any,
    Some(Vec<OsString>),
}

impl Names {
    fn add(&mut self, name: OsString) {
        if let Names::Some(v) = self
            && !v.contains(&name)
        {
            v.push(name);
        }
    }

    fn matches(&self, name: Option<&std::ffi::OsStr>) -> bool {
        match (self, name) {
            (Names::Any, _) => true,
            (Names::Some(v), Some(n)) => v.iter().any(|w| w == n),
            (Names::Some(_), None) => false,
        }
    }
}

/// Directory → the names wanted in it.
pub(crate) type Interest = HashMap<PathBuf, Names>;

/// Watch for `path` (its name in its directory).
pub(crate) fn want(map: &mut Interest, path: &Path) {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        map.entry(dir.to_path_buf())
            .or_insert_with(|| Names::Some(Vec::new()))
            .add(name.to_os_string());
    }
}

/// What to watch for the loops `entries` of the repository whose common git directory is
/// `common`.
pub(crate) fn interest(common: &Path, entries: &[Entry]) -> Interest {
    let mut map = Interest::new();
    want(&mut map, &common.join("worktrees"));
    map.insert(common.join("worktrees"), Names::Any);
    for e in entries {
        let ralph = e.path.join(crate::state::DIR);
        want(&mut map, &ralph);
        for name in ["state.json", "iterations.log", crate::activity::FILE] {
            want(&mut map, &ralph.join(name));
        }
        want(&mut map, &e.status.task_file);
        if let Some(st) = &e.status.st {
            for file in files_of(st) {
                want(&mut map, &e.path.join(file));
            }
        }
        // Its question, answer and hints (SPEC §16), kept in ralph's state directory.
        if let Some(desk) = crate::person::Desk::find_at(&e.path) {
            want(&mut map, desk.dir());
            map.insert(desk.dir().to_path_buf(), Names::Any);
        }
        // The locks a live run is told by: each is closed when its holder dies.
        let locks = &e.status.locks;
        for lock in locks.own.iter().chain([&locks.git]) {
            want(&mut map, lock);
        }
    }
    map
}

/// The files of a run its figures are read from: its targets (the table's PROGRESS.md) and
/// its log when kept elsewhere (CPM's).
fn files_of(st: &RunState) -> impl Iterator<Item = &String> {
    st.targets.iter().chain(st.iterations_log.as_ref())
}

/// What `ev` changed of what is wanted, if anything. Opening or reading a file is no change;
/// closing a file written to is (a dead supervisor's lock).
pub(crate) fn relevant(interest: &Interest, ev: &notify::Event) -> Option<Change> {
    match ev.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return None,
        _ => {}
    }
    if ev.need_rescan() {
        return Some(Change::Loops);
    }
    ev.paths
        .iter()
        .filter(|p| {
            interest.contains_key(*p)
                || p.parent()
                    .and_then(|d| interest.get(d))
                    .is_some_and(|n| n.matches(p.file_name()))
        })
        .map(|p| {
            if p.file_name() == Some(std::ffi::OsStr::new(crate::activity::FILE)) {
                Change::Activity
            } else {
                Change::Loops
            }
        })
        .max()
}

/// The file watches, kept in step with the loops.
pub(crate) struct Watches {
    watcher: notify::RecommendedWatcher,
    interest: Arc<Mutex<Interest>>,
    /// Watched directory → its identity (device, inode) when the watch was added.
    watched: HashMap<PathBuf, (u64, u64)>,
}

impl Watches {
    /// A watcher that sends [`Msg::Changed`] to `tx` on every relevant event.
    pub(crate) fn new(tx: Sender<Msg>) -> notify::Result<Watches> {
        Watches::calling(move |c, _| {
            let _ = tx.send(Msg::Changed(c));
        })
    }

    /// A watcher that calls `changed` on every relevant event (on notify's thread), with the
    /// paths the event names (none when events may have been lost: read everything again).
    pub(crate) fn calling(
        changed: impl Fn(Change, &[PathBuf]) + Send + 'static,
    ) -> notify::Result<Watches> {
        let interest: Arc<Mutex<Interest>> = Arc::default();
        let wanted = Arc::clone(&interest);
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let (change, paths) = match res {
                Ok(ev) => (wanted.lock().ok().and_then(|i| relevant(&i, &ev)), ev.paths),
                // Events may have been lost: read everything again.
                Err(_) => (Some(Change::Loops), Vec::new()),
            };
            if let Some(c) = change {
                changed(c, &paths);
            }
        })?;
        Ok(Watches {
            watcher,
            interest,
            watched: HashMap::new(),
        })
    }

    /// Watch what `wanted` names, and nothing else. True when a directory was newly watched:
    /// what changed there before the watch was missed, so read again.
    pub(crate) fn update(&mut self, wanted: Interest) -> bool {
        let mut added = false;
        let gone: Vec<PathBuf> = self
            .watched
            .keys()
            .filter(|d| !wanted.contains_key(*d))
            .cloned()
            .collect();
        for dir in gone {
            let _ = self.watcher.unwatch(&dir);
            self.watched.remove(&dir);
        }
        for dir in wanted.keys() {
            let id = identity(dir);
            if id.is_some() && self.watched.get(dir) == id.as_ref() {
                continue;
            }
            if self.watched.remove(dir).is_some() {
                let _ = self.watcher.unwatch(dir);
            }
            if let Some(id) = id
                && self.watcher.watch(dir, RecursiveMode::NonRecursive).is_ok()
            {
                self.watched.insert(dir.clone(), id);
                added = true;
            }
        }
        if let Ok(mut i) = self.interest.lock() {
            *i = wanted;
        }
        added
    }

    #[cfg(test)]
    pub(crate) fn watched(&self) -> Vec<PathBuf> {
        self.watched.keys().cloned().collect()
    }
}

/// A directory's (device, inode), or `None` when it is not a directory now.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|m| (m.dev(), m.ino()))
}

/// Read the terminal on a thread of its own, sending what it reads to `tx`. The thread blocks
/// in the kernel between events and ends when the dashboard is gone.
pub(crate) fn spawn_input(tx: Sender<Msg>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ralph-watch-input".into())
        .spawn(move || {
            loop {
                let msg = match crossterm::event::read() {
                    Ok(ev) => Msg::Input(ev),
                    Err(e) => {
                        let _ = tx.send(Msg::InputFailed(e.to_string()));
                        return;
                    }
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
        })
        .map(drop)
}

/// Forward the first SIGINT, SIGTERM or SIGHUP to `tx` (a thread of its own driving the
/// signal handlers of `signals.rs`), so a `kill` still leaves the terminal restored.
pub(crate) fn spawn_signals(tx: Sender<Msg>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut interrupts = rt.block_on(async { crate::signals::Interrupts::install() })?;
    std::thread::Builder::new()
        .name("ralph-watch-signals".into())
        .spawn(move || {
            rt.block_on(interrupts.after(0));
            let _ = tx.send(Msg::Signal);
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use notify::event::{CreateKind, ModifyKind};

    use super::*;

    fn ev(kind: EventKind, path: &Path) -> notify::Event {
        notify::Event::new(kind).add_path(path.to_path_buf())
    }

    #[test]
    fn only_wanted_names_count_and_opening_never_does() {
        let mut i = Interest::new();
        want(&mut i, Path::new("/r/.ralph/state.json"));
        want(&mut i, Path::new("/r/.ralph/activity.now"));
        i.insert(PathBuf::from("/g/worktrees"), Names::Any);
        let at = |kind, path: &str| relevant(&i, &ev(kind, Path::new(path)));
        let (loops, activity) = (Some(Change::Loops), Some(Change::Activity));
        let modify = EventKind::Modify(ModifyKind::Any);
        assert_eq!(at(modify, "/r/.ralph/state.json"), loops);
        assert_eq!(at(modify, "/r/.ralph/activity.now"), activity);
        assert_eq!(at(modify, "/r/.ralph/progress.md"), None);
        assert_eq!(at(modify, "/r/src/state.json"), None);
        let create = EventKind::Create(CreateKind::Folder);
        assert_eq!(at(create, "/g/worktrees/b"), loops);
        let open = EventKind::Access(AccessKind::Open(AccessMode::Read));
        assert_eq!(at(open, "/r/.ralph/state.json"), None);
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(at(closed, "/r/.ralph/state.json"), loops);
        // The watched directory itself (removed, moved).
        assert_eq!(at(EventKind::Any, "/r/.ralph"), loops);
        // A rename onto the activity file, and one touching both kinds.
        let both = ev(modify, Path::new("/r/.ralph/.tmp-activity.now"))
            .add_path(PathBuf::from("/r/.ralph/activity.now"));
        assert_eq!(relevant(&i, &both), activity);
        let both = both.add_path(PathBuf::from("/r/.ralph/state.json"));
        assert_eq!(relevant(&i, &both), loops);
    }

    #[test]
    fn a_directory_that_appears_is_watched_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ralph = dir.path().join(".ralph");
        let (tx, rx) = std::sync::mpsc::channel();
        let mut w = Watches::new(tx).unwrap();
        let mut wanted = Interest::new();
        want(&mut wanted, &ralph);
        want(&mut wanted, &ralph.join("state.json"));
        assert!(w.update(wanted.clone()), "the root is watched");
        assert_eq!(w.watched(), vec![dir.path().to_path_buf()]);
        std::fs::create_dir(&ralph).unwrap();
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(Msg::Changed(_))
        ));
        assert!(w.update(wanted.clone()), ".ralph/ is watched now");
        assert!(!w.update(wanted.clone()), "nothing new");
        while rx.try_recv().is_ok() {}
        std::fs::read_to_string(dir.path().join("nothing")).ok();
        std::fs::write(ralph.join("progress.md"), "x").unwrap();
        std::fs::write(ralph.join("state.json"), "{}").unwrap();
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(Msg::Changed(_))
        ));
        // Reading it back wakes nobody.
        while rx.recv_timeout(Duration::from_millis(100)).is_ok() {}
        std::fs::read_to_string(ralph.join("state.json")).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        assert!(!w.update(Interest::new()));
        assert!(w.watched().is_empty());
    }
}
