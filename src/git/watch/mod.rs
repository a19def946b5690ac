//! Knowing what changed from file events (SPEC §12): an inotify watcher over the work tree
//! records every changed path in a journal, and ralph answers git's file-system monitor queries
//! from it (`fsmonitor.rs`), so `git status` and `git add` look at what changed instead of
//! walking the whole tree.
//!
//! The events are an optimisation, never the truth. Whenever they may be incomplete the
//! journal says "everything" and git walks the whole tree: the kernel queue overflowed, a
//! directory moved or two were exchanged, a watched directory went unexplained, a mount
//! changed, a watch could not be added (the watch limit), the agent touched the git directory,
//! an ignore or attributes file changed (decided by the hook). After a loss the watcher thread
//! also walks the tree again and re-adds a watch on every directory before the next answer
//! (`journal.rs` holds the invariant, `thread.rs` the thread). Before each of ralph's git
//! commands a barrier — a file of an unguessable name created in `.ralph/` and seen come back
//! as an event — makes sure every change made so far is journalled and, after a loss, that the
//! tree was walked again. Nothing is left out by a name of ralph's: git's ignore rules decide.
//! Linux only; elsewhere there is no watcher and git walks the tree itself.

mod journal;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod thread;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::cli::Monitor;
use super::fsmonitor::{self, Answers};
use journal::Journal;
pub(crate) use journal::Losses;

/// How long a barrier may take before the journal is assumed incomplete.
const BARRIER_WAIT: Duration = Duration::from_secs(2);
/// Barrier files: `.ralph/.barrier-{32 random hex digits}`.
const BARRIER_PREFIX: &str = ".barrier-";

/// What the watcher thread and ralph's git commands share.
struct Shared {
    journal: Mutex<Journal>,
    /// Signalled whenever the thread handled events (a barrier may have come back).
    seen: Condvar,
}

/// The running watchers of this process, one per work tree. Weak: a watcher lives as long as a
/// run holds it, and its thread ends with the last holder (the stop pipe's writer dropped) —
/// a queue's item's watcher goes with its loop, never kept for the rest of the queue (issue 32).
static RUNNING: Mutex<Vec<(PathBuf, Weak<Watch>)>> = Mutex::new(Vec::new());

/// The running watcher of one work tree.
pub(crate) struct Watch {
    shared: Arc<Shared>,
    ralph_dir: PathBuf,
    answers: PathBuf,
    /// Writing to it (or dropping it) ends the thread.
    stop: Mutex<std::io::PipeWriter>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("answers", &self.answers)
            .finish()
    }
}

impl Watch {
    /// Watch every directory of `root` (the insides of `.git` directories excepted: only their
    /// top level, to see an agent touch them), and the git directory. `None` where there is no
    /// inotify. A second start for the same work tree gets the running one, until `stop` or
    /// until its last holder drops it.
    pub(crate) fn start(root: &Path, git_dir: &Path, ralph_dir: &Path) -> Option<Arc<Watch>> {
        let mut running = RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        running.retain(|(_, w)| w.strong_count() > 0);
        if let Some(w) = running
            .iter()
            .filter(|(r, _)| r == root)
            .find_map(|(_, w)| w.upgrade())
        {
            return Some(w);
        }
        let watch = imp::start(root, git_dir, ralph_dir)?;
        running.push((root.to_path_buf(), Arc::downgrade(&watch)));
        Some(watch)
    }

    /// How many watchers of this process are running (held by a run), for
    /// `RALPH_REPORT_MEMORY`.
    pub(crate) fn running() -> usize {
        RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, w)| w.strong_count() > 0)
            .count()
    }

    /// Stop watching: the thread ends and its watches go (the rest of the run walks in full).
    pub(crate) fn stop(&self) {
        RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(_, w)| !std::ptr::eq(w.as_ptr(), self));
        if let Ok(mut w) = self.stop.lock() {
            let _ = w.write_all(b"x");
        }
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.shared
            .journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether events may be missing now (every answer is a full walk until the tree is
    /// watched again).
    pub(crate) fn is_broken(&self) -> bool {
        self.journal().untrusted()
    }

    /// What the watcher lost since the last call (for the activity log).
    pub(crate) fn take_losses(&self) -> Option<Losses> {
        self.journal().take_losses()
    }

    /// The paths git must always re-check (gitlinks).
    pub(crate) fn set_always(&self, paths: Vec<Vec<u8>>) {
        self.journal().always = paths;
    }

    /// Trust no token handed out so far, whoever presents it: the index that holds one was
    /// written by another process (which could have put any token there, ralph's nonce read
    /// from the answers file and a position ahead included), or the configuration git compares
    /// with changed. A new nonce, so the next answer is "everything".
    pub(crate) fn distrust(&self) {
        let mut j = self.journal();
        j.nonce = nonce();
        j.everything();
    }

    /// An agent starts: from now on, its touching the git directory makes the journal
    /// incomplete. ralph's own git commands' events are all in first.
    pub(crate) fn begin_agent(&self) {
        self.barrier();
        self.journal().agent = true;
    }

    /// The agent ended: once every event it caused is in (and, after a loss, the tree was
    /// walked again), the git directory is ralph's again.
    pub(crate) fn end_agent(&self) {
        self.barrier();
        self.journal().agent = false;
    }

    /// Wait until the watcher has seen every change made before this call (a barrier file of
    /// a fresh random name is created and its event awaited: inotify keeps one instance's
    /// events in order), and, when events were lost, until the thread walked the tree again.
    /// On a failure or a timeout the next answer is "everything".
    pub(crate) fn barrier(&self) {
        let Some(name) = barrier_name() else {
            self.journal().everything();
            return;
        };
        let mut j = self.journal();
        if j.dead {
            j.everything();
            return;
        }
        j.pending.insert(name.clone().into());
        drop(j);
        let file = self.ralph_dir.join(&name);
        // `.ralph` made a real directory again if the agent removed it or put a symlink in its
        // place: a barrier written elsewhere would never come back.
        let made = crate::files::own_dir(&self.ralph_dir)
            .and_then(|()| crate::files::write_own(&file, b""));
        if made.is_err() {
            let mut j = self.journal();
            j.pending.remove(std::ffi::OsStr::new(&name));
            j.everything();
            return;
        }
        let j = self.journal();
        let waited = self.shared.seen.wait_timeout_while(j, BARRIER_WAIT, |j| {
            j.pending.contains(std::ffi::OsStr::new(&name)) && !j.dead
        });
        let (mut j, timeout) = waited.unwrap_or_else(std::sync::PoisonError::into_inner);
        if timeout.timed_out() || j.dead {
            j.pending.remove(std::ffi::OsStr::new(&name));
            j.everything();
        }
        drop(j);
        // Removed only now: a `.ralph` made again just before is watched once the thread sees
        // it appear, and its walk of the new directory finds the barrier there.
        let _ = std::fs::remove_file(&file);
    }

    /// How many paths a token of `since` is answered with now, or `None` when it gets
    /// "everything" (the journal no longer covers it, events were lost, or an ignore or
    /// attributes file changed since). Without a barrier of its own: the command it is asked
    /// for writes the answers after one (`write_answers`), and a change seen only then can
    /// cost that command a write-back it skipped, never a wrong answer.
    pub(crate) fn changed_since(&self, since: u64) -> Option<usize> {
        let j = self.journal();
        if j.untrusted() || since < j.floor || since > j.next {
            return None;
        }
        let from = j.changes.partition_point(|(pos, _)| *pos < since);
        let newer = &j.changes[from..];
        (!newer.iter().any(|(_, p)| fsmonitor::changes_rules(p))).then_some(newer.len())
    }

    /// Write the hook's answers for the changes so far (after a barrier, which also re-walks
    /// the tree after a loss), and start a new segment; returns the position of the token the
    /// hook hands out. While events may be missing the floor moves up first, so this answer
    /// is "everything" and its token is not trusted later either.
    pub(crate) fn write_answers(&self) -> std::io::Result<u64> {
        self.barrier();
        let mut j = self.journal();
        if j.untrusted() {
            j.everything();
        }
        let always = j.always_answered();
        fsmonitor::write_answers(
            &self.answers,
            &Answers {
                nonce: &j.nonce,
                floor: j.floor,
                position: j.next,
                changes: &j.changes,
                always: &always,
            },
        )?;
        j.answered();
        Ok(j.next)
    }

    /// What the git CLI needs to use this watcher as its file-system monitor.
    pub(crate) fn monitor(self: &Arc<Self>) -> Option<Monitor> {
        // git runs the hook outside any sandbox, while this ralph lives: through its
        // /proc/PID/exe, it is this very binary even when a build the agent made (ralph built
        // in the repository it works on) has replaced the file at its path.
        let proc_exe = PathBuf::from(format!("/proc/{}/exe", std::process::id()));
        let exe = if proc_exe.exists() {
            proc_exe
        } else {
            std::env::current_exe().ok()?
        };
        let hook = format!(
            "{} {} {}",
            shell_words::quote(&exe.to_string_lossy()),
            fsmonitor::HOOK_COMMAND,
            shell_words::quote(&self.answers.to_string_lossy())
        );
        let me = Arc::clone(self);
        let again = Arc::clone(self);
        let third = Arc::clone(self);
        Some(Monitor {
            hook,
            prepare: Arc::new(move || me.write_answers()),
            changed_since: Arc::new(move |since| again.changed_since(since)),
            distrust: Arc::new(move || third.distrust()),
        })
    }
}

/// A fresh barrier name no one can guess ahead (an agent's `.barrier-99999` answers nothing).
fn barrier_name() -> Option<String> {
    Some(format!("{BARRIER_PREFIX}{}", random_hex()?))
}

/// 32 random hexadecimal digits.
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A nonce for the tokens handed out from now on: never one another ralph (or a restarted
/// one, or this one before) handed out, nor one an agent can guess ahead.
fn nonce() -> String {
    let unique = random_hex().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            .to_string()
    });
    format!("ralph-{}-{unique}", std::process::id())
}

#[cfg(target_os = "linux")]
mod imp {
    use std::os::unix::ffi::OsStrExt;

    use inotify::Inotify;

    use super::*;

    pub(super) fn start(root: &Path, git_dir: &Path, ralph_dir: &Path) -> Option<Arc<Watch>> {
        let inotify = Inotify::init().ok()?;
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let (root, git_dir, ralph_dir) =
            (canonical(root), canonical(git_dir), canonical(ralph_dir));
        let mut tree = thread::Tree::new(root.clone(), git_dir.clone(), ralph_dir.clone());
        let quiet = tree
            .quiet_dir
            .strip_prefix(&root)
            .map(|rel| {
                let mut dir = rel.as_os_str().as_bytes().to_vec();
                dir.push(b'/');
                vec![dir]
            })
            .unwrap_or_default();
        let shared = Arc::new(Shared {
            journal: Mutex::new(Journal::new(nonce(), quiet)),
            seen: Condvar::new(),
        });
        // Opened before the first walk: a mount after it is seen.
        let mounts = mounts::Mounts::open(&root);
        if let Err(why) = tree.watch_all(&mut inotify.watches()) {
            shared.journal.lock().ok()?.lose(&why);
        }
        let (reader, writer) = std::io::pipe().ok()?;
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("ralph-watch".into())
            .spawn(move || thread::run(inotify, tree, mounts, reader, &thread_shared))
            .ok()?;
        Some(Arc::new(Watch {
            shared,
            ralph_dir,
            answers: git_dir.join("ralph-fsmonitor"),
            stop: Mutex::new(writer),
        }))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    pub(super) fn start(_root: &Path, _git_dir: &Path, _ralph_dir: &Path) -> Option<Arc<Watch>> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
