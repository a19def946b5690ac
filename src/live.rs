//! The live terminal view during an iteration (SPEC §9): one indicatif spinner line on stderr
//! with the iteration, the elapsed time, the live count from the task file (watched with
//! notify) and the agent's latest activity. Only on a terminal; plain output otherwise.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use notify::{RecursiveMode, Watcher};

/// Recomputes the live count (e.g. `2/5 criteria`) after the task file changed.
pub(crate) type Counter = Box<dyn Fn() -> Option<String> + Send + Sync>;

struct Shown {
    count: String,
    activity: String,
}

pub(crate) struct LiveView {
    bar: ProgressBar,
    shown: Arc<Mutex<Shown>>,
    _watcher: Option<notify::RecommendedWatcher>,
}

fn render(bar: &ProgressBar, shown: &Shown) {
    let msg = if shown.activity.is_empty() {
        shown.count.clone()
    } else {
        format!("{} · {}", shown.count, shown.activity)
    };
    bar.set_message(msg);
}

/// Cut to `max` characters on a char boundary, one line.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

/// Set once loops share the terminal ([`LiveView::share_terminal`]).
static SHARED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl LiveView {
    /// Whether a live view can be shown: stderr is a terminal.
    pub(crate) fn available() -> bool {
        std::io::stderr().is_terminal() && !SHARED.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Several loops of this process share the terminal (a queue's `--parallel`): no loop draws
    /// a live line, whose redraws would overwrite each other's; their reports still print.
    pub(crate) fn share_terminal() {
        SHARED.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Start the spinner for one iteration; `watch` is the task file and how to count it.
    pub(crate) fn start(
        prefix: String,
        count: String,
        watch: Option<(PathBuf, Counter)>,
    ) -> LiveView {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{spinner:.cyan} {prefix} · {elapsed} · {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.set_prefix(prefix);
        let shown = Arc::new(Mutex::new(Shown {
            count,
            activity: String::new(),
        }));
        if let Ok(s) = shown.lock() {
            render(&bar, &s);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        let watcher = watch.and_then(|(path, counter)| {
            let dir = path.parent()?.to_path_buf();
            let file_name = path.file_name()?.to_os_string();
            let bar2 = bar.clone();
            let shown2 = Arc::clone(&shown);
            let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                let Ok(ev) = res else { return };
                if !ev.paths.iter().any(|p| p.file_name() == Some(&file_name)) {
                    return;
                }
                if let (Some(count), Ok(mut s)) = (counter(), shown2.lock())
                    && s.count != count
                {
                    s.count = count;
                    render(&bar2, &s);
                }
            })
            .ok()?;
            w.watch(&dir, RecursiveMode::NonRecursive).ok()?;
            Some(w)
        });
        LiveView {
            bar,
            shown,
            _watcher: watcher,
        }
    }

    pub(crate) fn set_activity(&self, activity: &str) {
        if let Ok(mut s) = self.shown.lock() {
            // The agent's words: no escape sequence reaches the terminal.
            let a = crate::ui::shown(&one_line(activity, 100)).into_owned();
            if s.activity != a {
                s.activity = a;
                render(&self.bar, &s);
            }
        }
    }

    /// The count currently shown.
    #[cfg(test)]
    pub(crate) fn count(&self) -> String {
        self.shown
            .lock()
            .map(|s| s.count.clone())
            .unwrap_or_default()
    }

    /// Remove the line (the report block follows).
    pub(crate) fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// The live line shows every change of the agent's activity (indicatif redraws at its own pace).
impl crate::agent::views::ActivityView for LiveView {
    fn show(&self, activity: &str) {
        self.set_activity(activity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_is_one_short_line() {
        assert_eq!(one_line("Bash: cargo test\nmore", 100), "Bash: cargo test");
        assert_eq!(
            one_line(&"x".repeat(200), 10),
            format!("{}…", "x".repeat(9))
        );
        assert_eq!(one_line("  é  ", 10), "é");
    }

    #[test]
    fn watched_file_updates_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("RALPH_TASK.md");
        std::fs::write(&path, "0").unwrap();
        let p2 = path.clone();
        let counter: Counter = Box::new(move || {
            std::fs::read_to_string(&p2)
                .ok()
                .map(|t| format!("{}/3 criteria", t.trim()))
        });
        let view = LiveView::start(
            "iteration 1/3".into(),
            "0/3 criteria".into(),
            Some((path.clone(), counter)),
        );
        std::fs::write(&path, "2").unwrap();
        let start = std::time::Instant::now();
        while view.count() != "2/3 criteria" && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(view.count(), "2/3 criteria");
        view.finish();
    }
}
