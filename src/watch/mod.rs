//! `ralph watch` (SPEC §13): a live dashboard of every loop of a repository, drawn with
//! ratatui on crossterm. `app` holds what was read, `view` draws it (pure, tested with
//! ratatui's `TestBackend`), `events` wakes the loop below on keys, resizes and file events.
//!
//! The loop redraws after every event; file events are gathered for [`DEBOUNCE`], then the
//! activity files alone are read again when only they changed (the frequent case, at most a few
//! times a second per running loop), else every loop (`loops::all`), its watches brought in step. The only timer is a 1 s tick
//! while some loop is running, for its elapsed clock; with nothing running it sleeps until an
//! event. The terminal is restored on every way out: `q`, an error, or a panic.

mod app;
pub(crate) mod events;
pub(crate) mod view;

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::error::{Error, Result, exit};
use crate::git::Repo;
use app::App;
use events::{Change, Msg, Watches};

/// How long file events are gathered before the loops are read again.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(50);
/// How often a running loop's clock is redrawn.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// Show the dashboard of `repo`'s loops on the terminal until the user quits (exit 0) or a
/// signal ends it (exit 130).
pub(crate) fn run(repo: Repo, color: bool) -> Result<i32> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut watches = Watches::new(tx.clone())
        .map_err(|e| Error::user(format!("failed to watch the loops' files: {e}")))?;
    let mut app = App::new(repo, color);
    refresh(&mut app, &mut watches, Change::Loops);
    // Nothing ralph prints may go over the dashboard: held, and shown on its footer (dropped
    // after the terminal is restored: declared first).
    let wake = tx.clone();
    let _held = crate::ui::hold_terminal(Box::new(move || {
        let _ = wake.send(Msg::Held);
    }));
    let mut term = Term::enter()?;
    events::spawn_signals(tx.clone()).map_err(|e| Error::io("failed to listen for signals", e))?;
    events::spawn_input(tx).map_err(|e| Error::io("failed to read the terminal", e))?;
    dashboard(&mut term.0, &mut app, &mut watches, &rx)
}

/// Read what changed: the activities alone, or every loop, then watch what they are made of
/// (and read again when a watch is new).
fn refresh(app: &mut App, watches: &mut Watches, change: Change) {
    if change == Change::Activity {
        app.reload_activities();
        return;
    }
    app.reload();
    if watches.update(events::interest(&app.common_dir(), app.entries())) {
        app.reload();
    }
}

/// The terminal in raw mode on the alternate screen, restored when dropped (ratatui's panic
/// hook restores it on a panic).
struct Term(ratatui::DefaultTerminal);

impl Term {
    fn enter() -> Result<Term> {
        match ratatui::try_init() {
            Ok(t) => Ok(Term(t)),
            Err(e) => {
                ratatui::restore();
                Err(Error::io("failed to set up the terminal", e))
            }
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.0.show_cursor();
        ratatui::restore();
    }
}

/// What a message asks of the loop.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Quit,
    /// Quit: a signal asked for it.
    Interrupted,
    Redraw,
    Reload(Change),
    Nothing,
}

fn action(msg: &Msg) -> Action {
    match msg {
        Msg::Input(Event::Key(k)) if quits(k) => Action::Quit,
        Msg::Input(Event::Resize(..) | Event::FocusGained) => Action::Redraw,
        Msg::Input(_) => Action::Nothing,
        Msg::InputFailed(_) => Action::Quit,
        Msg::Signal => Action::Interrupted,
        Msg::Changed(c) => Action::Reload(*c),
        Msg::Held => Action::Redraw,
    }
}

/// `q`, Esc and Ctrl-C quit.
fn quits(k: &KeyEvent) -> bool {
    k.kind == KeyEventKind::Press
        && match k.code {
            KeyCode::Char('q' | 'Q') | KeyCode::Esc => true,
            KeyCode::Char('c') => k.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// The loop: draw, then sleep until a message (or the tick, while a loop runs).
fn dashboard(
    term: &mut ratatui::DefaultTerminal,
    app: &mut App,
    watches: &mut Watches,
    rx: &Receiver<Msg>,
) -> Result<i32> {
    let mut redraw = true;
    let mut drawn_at = Instant::now();
    loop {
        if let Some(said) = crate::ui::take_held().pop() {
            app.said(said);
            redraw = true;
        }
        if redraw {
            term.draw(|f| view::render(f, &app.screen(Instant::now())))
                .map_err(|e| Error::io("failed to draw on the terminal", e))?;
            drawn_at = Instant::now();
        }
        let msg = if app.any_running() {
            match rx.recv_timeout(TICK.saturating_sub(drawn_at.elapsed())) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    redraw = true;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(exit::COMPLETE),
            }
        } else {
            match rx.recv() {
                Ok(m) => m,
                Err(_) => return Ok(exit::COMPLETE),
            }
        };
        if let Msg::InputFailed(e) = &msg {
            return Err(Error::user(format!("failed to read the terminal: {e}")));
        }
        let mut act = action(&msg);
        if let Action::Reload(c) = act {
            act = gather(rx, c);
        }
        redraw = match act {
            Action::Quit => return Ok(exit::COMPLETE),
            Action::Interrupted => return Ok(exit::INTERRUPTED),
            Action::Reload(c) => {
                refresh(app, watches, c);
                true
            }
            Action::Redraw => true,
            Action::Nothing => false,
        };
    }
}

/// Let a burst of file events settle for [`DEBOUNCE`], then `Reload` the most any of them
/// asked, starting from `change`; a key that quits, or a signal, still ends it at once.
fn gather(rx: &Receiver<Msg>, mut change: Change) -> Action {
    let until = Instant::now() + DEBOUNCE;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(m) => match action(&m) {
                a @ (Action::Quit | Action::Interrupted) => return a,
                Action::Reload(c) => change = change.max(c),
                _ => {}
            },
            Err(_) => break,
        }
    }
    Action::Reload(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> Msg {
        Msg::Input(Event::Key(KeyEvent::new(code, modifiers)))
    }

    #[test]
    fn q_esc_and_ctrl_c_quit_other_keys_do_nothing() {
        let none = KeyModifiers::NONE;
        assert_eq!(action(&key(KeyCode::Char('q'), none)), Action::Quit);
        assert_eq!(action(&key(KeyCode::Esc, none)), Action::Quit);
        assert_eq!(
            action(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
        assert_eq!(action(&key(KeyCode::Char('c'), none)), Action::Nothing);
        assert_eq!(action(&key(KeyCode::Down, none)), Action::Nothing);
        assert_eq!(action(&Msg::Input(Event::Resize(80, 24))), Action::Redraw);
        assert_eq!(
            action(&Msg::Changed(Change::Loops)),
            Action::Reload(Change::Loops)
        );
        assert_eq!(action(&Msg::Signal), Action::Interrupted);
    }

    #[test]
    fn a_burst_settles_but_a_quit_ends_it() {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..5 {
            tx.send(Msg::Changed(Change::Activity)).unwrap();
        }
        assert_eq!(
            gather(&rx, Change::Activity),
            Action::Reload(Change::Activity)
        );
        assert!(rx.try_recv().is_err(), "the burst was drained");
        tx.send(Msg::Changed(Change::Loops)).unwrap();
        tx.send(Msg::Changed(Change::Activity)).unwrap();
        assert_eq!(gather(&rx, Change::Activity), Action::Reload(Change::Loops));
        tx.send(Msg::Changed(Change::Loops)).unwrap();
        tx.send(key(KeyCode::Char('q'), KeyModifiers::NONE))
            .unwrap();
        assert_eq!(gather(&rx, Change::Loops), Action::Quit);
    }
}
