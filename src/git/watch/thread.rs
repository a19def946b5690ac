//! The watcher thread (Linux): it alone owns the inotify instance and the map of its watches.
//! It sleeps in `poll` on the inotify descriptor, the mount table (`POLLPRI`) and a stop pipe;
//! it records every changed path of the work tree in the journal, declares events lost when
//! they may have been (a queue overflow, a directory moved or exchanged, a watched directory
//! gone unexplained, a mount, a watch that could not be added), and — when a barrier of
//! ralph's arrives while events are lost, or an overflow may have swallowed one — walks the
//! tree again and re-adds a watch on every directory before it answers the barrier.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::Shared;
use super::journal::Journal;
use super::mounts::Mounts;

/// What a directory's watch reports: every change of an entry, and the directory's own move,
/// deletion or unmount.
fn full_mask() -> WatchMask {
    quiet_mask() | WatchMask::MODIFY | WatchMask::CLOSE_WRITE
}

/// Directories whose files grow in many small writes (`.ralph/runs`): entries coming and
/// going, and modes, but no content events; the journal answers these directories always, so
/// git re-checks what it tracks there itself.
fn quiet_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::DONT_FOLLOW
        | WatchMask::EXCL_UNLINK
        | WatchMask::ONLYDIR
}

/// What the watcher thread knows about its watches.
pub(super) struct Tree {
    pub(crate) root: PathBuf,
    /// The repository's git directory (watched at its top level only, to see an agent touch it).
    pub(crate) git_dir: PathBuf,
    pub(crate) ralph_dir: PathBuf,
    /// Watched with the quiet mask, and everything below it.
    pub(crate) quiet_dir: PathBuf,
    /// Watch descriptor → directory (absolute), and back. One directory may be seen at several
    /// paths (a bind mount of a directory of the tree elsewhere in it): one watch, whose
    /// events are recorded under every path.
    dirs: HashMap<WatchDescriptor, Vec<PathBuf>>,
    paths: HashMap<PathBuf, WatchDescriptor>,
}

impl Tree {
    pub(crate) fn new(root: PathBuf, git_dir: PathBuf, ralph_dir: PathBuf) -> Tree {
        Tree {
            quiet_dir: ralph_dir.join("runs"),
            root,
            git_dir,
            ralph_dir,
            dirs: HashMap::new(),
            paths: HashMap::new(),
        }
    }

    /// Watch every directory of the work tree (and a linked worktree's git directory outside
    /// it). `Err` names the first watch that could not be added.
    pub(crate) fn watch_all(&mut self, watches: &mut Watches) -> Result<(), String> {
        let root = self.root.clone();
        let mut result = self.watch_tree(watches, &root);
        if self.git_dir.strip_prefix(&self.root).is_err() {
            let git_dir = self.git_dir.clone();
            result = result.and(self.watch_one(watches, &git_dir));
        }
        result
    }

    /// Walk the tree again from scratch: a watch on every directory (an existing watch is
    /// kept, with its path as it is now), and the watches on directories no longer found
    /// removed.
    fn rewatch(&mut self, watches: &mut Watches) -> Result<(), String> {
        let old: Vec<WatchDescriptor> = self.dirs.keys().cloned().collect();
        self.dirs.clear();
        self.paths.clear();
        let result = self.watch_all(watches);
        for wd in old {
            if !self.dirs.contains_key(&wd) {
                let _ = watches.remove(wd);
            }
        }
        result
    }

    /// Watch `dir` and every directory below it (not following symlinks); of a `.git`
    /// directory below the root, only its top level.
    fn watch_tree(&mut self, watches: &mut Watches, dir: &Path) -> Result<(), String> {
        let mut result = Ok(());
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            if let Err(e) = self.watch_one(watches, &d) {
                result = result.and(Err(e));
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if e.file_name() == ".git" {
                    result = result.and(self.watch_one(watches, &e.path()));
                } else {
                    stack.push(e.path());
                }
            }
        }
        result
    }

    fn watch_one(&mut self, watches: &mut Watches, dir: &Path) -> Result<(), String> {
        let mask = if dir.starts_with(&self.quiet_dir) {
            quiet_mask()
        } else {
            full_mask()
        };
        match watches.add(dir, mask) {
            Ok(wd) => {
                if let Some(old) = self.paths.insert(dir.to_path_buf(), wd.clone())
                    && old != wd
                    && let Some(aliases) = self.dirs.get_mut(&old)
                {
                    aliases.retain(|p| p != dir);
                }
                let aliases = self.dirs.entry(wd).or_default();
                if !aliases.iter().any(|p| p == dir) {
                    aliases.push(dir.to_path_buf());
                }
                Ok(())
            }
            // Gone already, or no longer a directory: its parent reports it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(()),
            Err(e) => Err(format!(
                "a watch could not be added on {} ({e})",
                dir.display()
            )),
        }
    }

    /// The kernel dropped a watch (its directory was deleted or unmounted, or ralph removed it).
    fn forget(&mut self, wd: &WatchDescriptor) {
        for path in self.dirs.remove(wd).unwrap_or_default() {
            if self.paths.get(&path) == Some(wd) {
                self.paths.remove(&path);
            }
        }
    }

    /// A watched directory was deleted: explained when its parent is watched (which reports
    /// the deletion of its entry); the root, or a directory whose parent is not watched, is not.
    fn deletion_explained(&self, dir: &Path) -> bool {
        dir != self.root && dir.parent().is_some_and(|p| self.paths.contains_key(p))
    }

    /// Whether `dir` is a git directory (the repository's or a nested one).
    fn is_git_dir(&self, dir: &Path) -> bool {
        dir == self.git_dir || dir.file_name() == Some(OsStr::new(".git"))
    }
}

/// The thread's loop: until the stop pipe says so (or the descriptors fail, which leaves the
/// journal untrusted for good).
pub(super) fn run(
    mut inotify: Inotify,
    mut tree: Tree,
    mut mounts: Option<Mounts>,
    stop: std::io::PipeReader,
    shared: &Shared,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (events, mounted, stopped) = match wait(&inotify, mounts.as_ref(), &stop) {
            Ok(ready) => ready,
            Err(e) => return die(shared, &format!("the watcher could not poll ({e})")),
        };
        if stopped {
            return;
        }
        if mounted {
            check_mounts(&mut mounts, shared);
        }
        if events && let Err(e) = drain(&mut inotify, &mut tree, &mut mounts, &mut buf, shared) {
            return die(
                shared,
                &format!("the watcher could not read its events ({e})"),
            );
        }
    }
}

/// Sleep until something is ready: (inotify events, the mount table changed, stop).
fn wait(
    inotify: &Inotify,
    mounts: Option<&Mounts>,
    stop: &std::io::PipeReader,
) -> nix::Result<(bool, bool, bool)> {
    let mut fds = vec![
        PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
        PollFd::new(stop.as_fd(), PollFlags::POLLIN),
    ];
    if let Some(m) = mounts {
        fds.push(PollFd::new(m.file.as_fd(), PollFlags::POLLPRI));
    }
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
    let ready = |i: usize, what: PollFlags| {
        fds.get(i)
            .and_then(PollFd::revents)
            .is_some_and(|r| r.intersects(what))
    };
    let any = PollFlags::POLLIN | PollFlags::POLLERR | PollFlags::POLLHUP;
    Ok((
        ready(0, any),
        ready(2, PollFlags::POLLPRI | PollFlags::POLLERR),
        ready(1, any),
    ))
}

/// A mount that matters makes events lost.
fn check_mounts(mounts: &mut Option<Mounts>, shared: &Shared) {
    if mounts.as_mut().is_some_and(Mounts::changed) {
        lock(shared).lose("a file system was mounted or unmounted in the work tree");
    }
}

/// Read and handle every event queued now. Before each batch, the mount table: a mount made
/// before a barrier is known before the barrier is answered, however long the events flow.
fn drain(
    inotify: &mut Inotify,
    tree: &mut Tree,
    mounts: &mut Option<Mounts>,
    buf: &mut [u8],
    shared: &Shared,
) -> std::io::Result<()> {
    loop {
        let events = match inotify.read_events(buf) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if mounts.as_ref().is_some_and(Mounts::signalled) {
            check_mounts(mounts, shared);
        }
        let owned: Vec<(WatchDescriptor, EventMask, Option<OsString>)> = events
            .map(|e| (e.wd, e.mask, e.name.map(OsStr::to_os_string)))
            .collect();
        let mut watches = inotify.watches();
        let mut j = lock(shared);
        for (wd, mask, name) in owned {
            handle(tree, &mut watches, &mut j, &wd, mask, name.as_deref());
        }
        drop(j);
        shared.seen.notify_all();
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Journal> {
    shared
        .journal
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn die(shared: &Shared, why: &str) {
    let mut j = lock(shared);
    j.lose(why);
    j.dead = true;
    drop(j);
    shared.seen.notify_all();
}

/// One event.
fn handle(
    tree: &mut Tree,
    watches: &mut Watches,
    j: &mut Journal,
    wd: &WatchDescriptor,
    mask: EventMask,
    name: Option<&OsStr>,
) {
    if mask.contains(EventMask::Q_OVERFLOW) {
        j.lose("the kernel's event queue overflowed");
        // A barrier's own event may be among those dropped: walk now, which answers it.
        if !j.pending.is_empty() {
            walk_again(tree, watches, j);
        }
        return;
    }
    if mask.contains(EventMask::UNMOUNT) {
        j.lose("a file system in the work tree was unmounted");
    }
    if mask.contains(EventMask::IGNORED) {
        tree.forget(wd);
        return;
    }
    for dir in tree.dirs.get(wd).cloned().unwrap_or_default() {
        handle_in(tree, watches, j, &dir, mask, name);
    }
}

/// One event, in the watched directory `dir` (one of the paths it is seen at).
fn handle_in(
    tree: &mut Tree,
    watches: &mut Watches,
    j: &mut Journal,
    dir: &Path,
    mask: EventMask,
    name: Option<&OsStr>,
) {
    if tree.is_git_dir(dir) {
        return git_dir_event(tree, j, dir, mask, name);
    }
    let Some(name) = name else {
        return self_event(tree, j, dir, mask);
    };
    let path = dir.join(name);
    let Ok(rel) = path.strip_prefix(&tree.root) else {
        return;
    };
    let is_dir = mask.contains(EventMask::ISDIR);
    let moved = mask.intersects(EventMask::MOVED_FROM | EventMask::MOVED_TO);
    // A moved entry may be a file or a directory: both forms, so git re-checks it and, for a
    // directory, everything under it.
    record_path(j, rel, is_dir || moved);
    if is_dir && moved {
        j.lose("a directory moved (or two were exchanged)");
    } else if is_dir && mask.contains(EventMask::CREATE) {
        // Watch the new directory, and record what is already in it (made before the watch).
        if let Err(why) = tree.watch_tree(watches, &path) {
            j.lose(&why);
        }
        record_tree(tree, j, &path);
        if path == tree.ralph_dir {
            barriers_found(tree, watches, j);
        }
    }
    if dir == tree.ralph_dir && mask.contains(EventMask::CREATE) && j.pending.remove(name) {
        barrier_seen(tree, watches, j);
    }
}

/// An event about a watched directory itself.
fn self_event(tree: &Tree, j: &mut Journal, dir: &Path, mask: EventMask) {
    if mask.contains(EventMask::MOVE_SELF) {
        j.lose("a directory moved (or two were exchanged)");
    } else if mask.contains(EventMask::DELETE_SELF) && !tree.deletion_explained(dir) {
        j.lose(&format!(
            "{} was deleted unseen by its parent",
            dir.display()
        ));
    }
}

/// A barrier of ralph's came back: every event before it is in. When events were lost, the
/// tree is walked again first, so the answer that follows finds every directory watched.
fn barrier_seen(tree: &mut Tree, watches: &mut Watches, j: &mut Journal) {
    if j.lost.is_some() {
        walk_again(tree, watches, j);
    }
}

/// `.ralph` appeared (made again after the agent removed it): barriers written into it before
/// its watch existed raised no event, but are there.
fn barriers_found(tree: &mut Tree, watches: &mut Watches, j: &mut Journal) {
    let before = j.pending.len();
    let dir = tree.ralph_dir.clone();
    j.pending.retain(|name| !dir.join(name).exists());
    if j.pending.len() < before {
        barrier_seen(tree, watches, j);
    }
}

fn walk_again(tree: &mut Tree, watches: &mut Watches, j: &mut Journal) {
    let walk = tree.rewatch(watches);
    j.rewatched(walk);
}

/// An event in a git directory: the agent touching the repository's makes the journal
/// incomplete; a nested repository's changing means its commit may have changed.
fn git_dir_event(tree: &Tree, j: &mut Journal, dir: &Path, mask: EventMask, name: Option<&OsStr>) {
    if name.is_none() {
        // The git directory itself moved or went: as for any directory.
        return self_event(tree, j, dir, mask);
    }
    let nested = dir != tree.git_dir && dir.parent().is_some_and(|p| p != tree.root);
    if nested {
        if let Some(repo) = dir.parent().and_then(|p| p.strip_prefix(&tree.root).ok()) {
            record_path(j, repo, true);
        }
    } else if j.agent {
        j.everything();
    }
}

/// Record an event's path (relative to the root) in the journal; `dir` paths get both forms,
/// so git re-checks the entry and everything under it.
fn record_path(j: &mut Journal, rel: &Path, dir: bool) {
    let bytes = rel.as_os_str().as_bytes().to_vec();
    if bytes.is_empty() {
        return;
    }
    if dir {
        let mut d = bytes.clone();
        d.push(b'/');
        j.record(d);
    }
    j.record(bytes);
}

/// Record every path under a directory that just appeared.
fn record_tree(tree: &Tree, j: &mut Journal, dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if let Ok(rel) = p.strip_prefix(&tree.root) {
                record_path(j, rel, is_dir);
            }
            if is_dir && e.file_name() != ".git" {
                stack.push(p);
            }
        }
    }
}
