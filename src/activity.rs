//! The agent's latest activity as a runtime file, `.ralph/activity.now` (SPEC §13): one line —
//! for Claude the tool in use, else the last output line, or the usage-limit wait — written by
//! the supervisor so that `ralph watch`, another process, can show it.
//!
//! A [`Sink`] hands the line to a writer thread: the relay of the agent's output never waits on
//! the disk. The thread rewrites the file in place (one short write; a reader may catch it
//! empty for an instant), only when the line changed, and then rests [`MIN_INTERVAL`], so the
//! file changes at most a few times a second; the newest line set while it rests is written
//! after, so the last activity always lands. In place, not through a temporary file renamed
//! over it: while the agent runs, ralph makes no other path appear in the work tree (an agent
//! that un-ignores `.tmp-*` would see it come and go). Best effort: a failed write is dropped
//! (the agent may have removed `.ralph/`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The file's name inside `.ralph/`.
pub(crate) const FILE: &str = "activity.now";
/// The least time between two writes.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(250);
/// The longest line kept, in characters.
const MAX_CHARS: usize = 200;

#[derive(Default)]
struct Shared {
    /// The newest line not written yet.
    pending: Option<String>,
    /// The sink was dropped: write what is pending, then stop.
    closed: bool,
    /// Writes done (for tests of the throttle).
    writes: usize,
}

type Cell = Arc<(Mutex<Shared>, Condvar)>;

/// Where the supervisor puts the agent's latest activity; dropping it writes the last line and
/// stops the writer.
pub(crate) struct Sink {
    cell: Option<Cell>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// A sink for the work tree whose `.ralph/` is `ralph_dir`, starting empty (the file of an
    /// earlier attempt is removed). It writes nothing when `.ralph/.gitignore` does not list the
    /// file (a scaffold older than it): git would see the file as a change of the agent's.
    pub(crate) fn start(ralph_dir: &Path) -> Sink {
        if !ignored(ralph_dir) {
            return Sink::disabled();
        }
        let _ = std::fs::remove_file(ralph_dir.join(FILE));
        let cell: Cell = Arc::default();
        let dir = ralph_dir.to_path_buf();
        let shared = Arc::clone(&cell);
        let thread = std::thread::Builder::new()
            .name("ralph-activity".into())
            .spawn(move || writer(&dir, &shared))
            .ok();
        match thread {
            Some(t) => Sink {
                cell: Some(cell),
                thread: Some(t),
            },
            None => Sink::disabled(),
        }
    }

    /// A sink that writes nothing.
    pub(crate) fn disabled() -> Sink {
        Sink {
            cell: None,
            thread: None,
        }
    }

    /// The agent's latest activity (its first line, cut to a bounded length).
    pub(crate) fn set(&self, activity: &str) {
        let Some(cell) = &self.cell else { return };
        let line = one_line(activity);
        if let Ok(mut s) = cell.0.lock() {
            s.pending = Some(line);
            cell.1.notify_one();
        }
    }

    #[cfg(test)]
    fn writes(&self) -> usize {
        self.cell
            .as_ref()
            .and_then(|c| c.0.lock().ok().map(|s| s.writes))
            .unwrap_or(0)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(cell) = &self.cell
            && let Ok(mut s) = cell.0.lock()
        {
            s.closed = true;
            cell.1.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The file rests [`MIN_INTERVAL`] between writes, so the activity is worked out for it at most
/// that often (and once more at the end).
impl crate::agent::views::ActivityView for Sink {
    fn interval(&self) -> Option<Duration> {
        Some(MIN_INTERVAL)
    }

    fn show(&self, activity: &str) {
        self.set(activity);
    }
}

/// The writer thread: take the newest line, write it if it changed, rest, until closed.
fn writer(dir: &Path, cell: &Cell) {
    let (lock, wake) = &**cell;
    let mut last: Option<String> = None;
    loop {
        let line = {
            let Ok(guard) = lock.lock() else { return };
            let Ok(mut s) = wake.wait_while(guard, |s| s.pending.is_none() && !s.closed) else {
                return;
            };
            match s.pending.take() {
                Some(line) => line,
                None => return,
            }
        };
        if last.as_deref() != Some(line.as_str()) {
            write(dir, &line);
            if let Ok(mut s) = lock.lock() {
                s.writes += 1;
            }
            last = Some(line);
        }
        // Rest, unless the sink is closing (its last line is written at once).
        let Ok(guard) = lock.lock() else { return };
        let _ = wake.wait_timeout_while(guard, MIN_INTERVAL, |s| !s.closed);
    }
}

fn write(dir: &Path, line: &str) {
    let done = crate::files::write_own(&dir.join(FILE), format!("{line}\n").as_bytes());
    if let Err(e) = done {
        tracing::debug!("could not write {}: {e}", dir.join(FILE).display());
    }
}

/// Whether `.ralph/.gitignore` keeps the file out of git.
fn ignored(ralph_dir: &Path) -> bool {
    crate::files::read_text(&ralph_dir.join(".gitignore"))
        .is_ok_and(|t| t.lines().any(|l| l.trim() == FILE))
}

/// The first line, trimmed, cut to [`MAX_CHARS`] characters.
fn one_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = line.trim();
    if line.chars().count() > MAX_CHARS {
        let cut: String = line.chars().take(MAX_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

/// The path of the file in the work tree `root`.
pub(crate) fn path(root: &Path) -> PathBuf {
    root.join(crate::state::DIR).join(FILE)
}

/// The latest activity recorded in the work tree `root` (read as any file an agent can touch:
/// bounded, never blocking), or `None`.
pub(crate) fn read(root: &Path) -> Option<String> {
    let text = crate::files::read_text(&path(root)).ok()?;
    let line = one_line(&text);
    (!line.is_empty()).then_some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ralph_dir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let rd = dir.path().join(crate::state::DIR);
        std::fs::create_dir_all(&rd).unwrap();
        std::fs::write(rd.join(".gitignore"), crate::state::GITIGNORE).unwrap();
        (dir, rd)
    }

    #[test]
    fn the_last_line_lands_and_bursts_are_throttled() {
        let (dir, rd) = ralph_dir();
        std::fs::write(rd.join(FILE), "stale\n").unwrap();
        let sink = Sink::start(&rd);
        assert_eq!(read(dir.path()), None, "an earlier attempt's line is gone");
        for i in 0..200 {
            sink.set(&format!("Bash: step {i}\nmore output"));
        }
        let writes = sink.writes();
        drop(sink);
        assert_eq!(read(dir.path()).as_deref(), Some("Bash: step 199"));
        assert!(writes <= 2, "{writes} writes for a burst of 200 lines");
        let names: Vec<_> = std::fs::read_dir(&rd).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    }

    #[test]
    fn an_unchanged_line_is_not_written_again() {
        let (_dir, rd) = ralph_dir();
        let sink = Sink::start(&rd);
        sink.set("Read: src/lib.rs");
        std::thread::sleep(MIN_INTERVAL * 2);
        sink.set("Read: src/lib.rs");
        std::thread::sleep(MIN_INTERVAL * 2);
        assert_eq!(sink.writes(), 1);
    }

    #[test]
    fn nothing_is_written_when_git_would_not_ignore_it() {
        let (dir, rd) = ralph_dir();
        std::fs::write(rd.join(".gitignore"), "activity.log\nstate.json\n").unwrap();
        let sink = Sink::start(&rd);
        sink.set("Bash: cargo test");
        drop(sink);
        assert!(!path(dir.path()).exists());
    }

    #[test]
    fn lines_are_one_and_bounded() {
        assert_eq!(one_line("\n  Edit: a.rs  \nb"), "Edit: a.rs");
        let long = one_line(&"é".repeat(500));
        assert_eq!(long.chars().count(), MAX_CHARS);
        assert!(long.ends_with('…'));
    }
}
