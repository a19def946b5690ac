//! What the dashboard knows: every loop as `loops::all` last read it, each one's latest
//! activity, and when that was read (so a running loop's clock goes on between reads).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::view::{LoopState, Row, Screen};
use crate::git::Repo;
use crate::loops::{self, Entry};

pub(crate) struct App {
    repo: Repo,
    entries: Vec<Entry>,
    /// The latest activity of each entry (same order).
    activities: Vec<Option<String>>,
    read_at: Instant,
    error: Option<String>,
    /// The latest line ralph would have printed over the dashboard (`ui::hold_terminal`).
    said: Option<String>,
    color: bool,
}

impl App {
    pub(crate) fn new(repo: Repo, color: bool) -> App {
        App {
            repo,
            entries: Vec::new(),
            activities: Vec::new(),
            read_at: Instant::now(),
            error: None,
            said: None,
            color,
        }
    }

    /// A line ralph would have printed: shown on the footer instead.
    pub(crate) fn said(&mut self, line: String) {
        self.said = Some(line);
    }

    /// Read every loop again. A failure keeps the last good rows and shows the error.
    pub(crate) fn reload(&mut self) {
        match loops::all(&self.repo) {
            Ok(entries) => {
                self.activities = read_activities(&entries);
                self.entries = entries;
                self.error = None;
            }
            Err(e) => self.error = Some(chain(&e)),
        }
        self.read_at = Instant::now();
    }

    /// Read the latest activities again (the loops as they were).
    pub(crate) fn reload_activities(&mut self) {
        self.activities = read_activities(&self.entries);
    }

    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The git directory shared by every work tree of the repository.
    pub(crate) fn common_dir(&self) -> PathBuf {
        self.repo.git2().commondir().to_path_buf()
    }

    fn root(&self) -> &Path {
        self.repo.root()
    }

    /// Whether a loop is running (its clock needs the tick).
    pub(crate) fn any_running(&self) -> bool {
        self.entries.iter().any(|e| e.status.running)
    }

    /// The screen as of `now`.
    pub(crate) fn screen(&self, now: Instant) -> Screen {
        let since = now.saturating_duration_since(self.read_at);
        Screen {
            title: self.root().display().to_string(),
            rows: self
                .entries
                .iter()
                .zip(&self.activities)
                .map(|(e, a)| row(e, a.as_deref(), since))
                .collect(),
            error: self.error.clone(),
            said: self.said.clone(),
            color: self.color,
        }
    }
}

/// One loop's row; `since` is the time since it was read (a running loop's clock goes on).
pub(crate) fn row(e: &Entry, activity: Option<&str>, since: Duration) -> Row {
    let s = &e.status;
    let st = s.st.as_ref();
    let state = match st {
        None => LoopState::NoRun,
        Some(_) if s.waiting() => LoopState::Waiting,
        Some(_) if s.running => LoopState::Running,
        Some(st) => LoopState::Halted {
            reason: s.halt_reason,
            exit_code: st.exit_code.filter(|_| !st.running),
        },
    };
    let elapsed = s.elapsed_s.map(|secs| {
        let d = Duration::from_secs_f64(secs);
        if s.running { d + since } else { d }
    });
    let activity = if s.running {
        activity.unwrap_or_default().to_string()
    } else {
        s.records.last().cloned().unwrap_or_default()
    };
    Row {
        name: e.name.clone(),
        branch: e.branch.clone(),
        state,
        iteration: st.map(|st| (st.iteration, st.max_iterations)),
        progress: (
            s.done,
            s.total,
            st.map_or(crate::state::Mode::Checklist, |st| st.mode)
                .unit(),
        ),
        elapsed,
        cost_usd: st.map_or(0.0, |st| st.cost_usd),
        activity,
    }
}

fn read_activities(entries: &[Entry]) -> Vec<Option<String>> {
    entries
        .iter()
        .map(|e| crate::activity::read(&e.path))
        .collect()
}

/// An error and its causes on one line.
fn chain(e: &crate::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}
