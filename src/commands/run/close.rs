//! A run that ends before its loop — nothing to do, already complete, tampered while ralph was
//! down, interrupted while checking, an error — closes as every run does, through the run's
//! close (`supervisor::close`): the recorded run it ends saved with the halt, one `halted`
//! event, what it says, its exit code.

use crate::error::Error;
use crate::event::{At, Event};
use crate::state::{RalphDir, RunState};
use crate::supervisor::close::{Ends, close};
use crate::supervisor::decide::Halt;
use crate::ui::Ui;

/// A run's ending before its loop, and what it says.
pub(super) struct Before<'a> {
    ui: Ui,
    halt: Halt,
    /// The recorded run this ends, and where it is kept; `None`: no run began.
    run: Option<(&'a RalphDir, RunState)>,
    at: Option<At>,
    /// The error this ending is (its exit code, its cause chain in the summary).
    error: Option<Error>,
    said: Option<Box<dyn FnOnce(Ui) + 'a>>,
}

impl<'a> Before<'a> {
    /// An ending with `halt`, which `said` tells the user about.
    pub(super) fn new(ui: Ui, halt: Halt, said: impl FnOnce(Ui) + 'a) -> Self {
        Before {
            ui,
            halt,
            run: None,
            at: None,
            error: None,
            said: Some(Box::new(said)),
        }
    }

    /// An ending in the error `e`.
    pub(super) fn error(ui: Ui, e: Error) -> Self {
        let halt = Halt::Error {
            message: e.to_string(),
            hint: e.hint().unwrap_or_default(),
        };
        Before {
            error: Some(e),
            ..Before::new(ui, halt, |_| {})
        }
    }

    /// The ending closes the recorded run `state` (kept in `rd`), which is saved with it.
    pub(super) fn of_run(self, rd: &'a RalphDir, state: RunState) -> Self {
        Before {
            run: Some((rd, state)),
            ..self
        }
    }

    /// The task stood at `done` of `total` after `iteration` iterations.
    pub(super) fn at(self, iteration: u32, (done, total): (usize, usize)) -> Self {
        Before {
            at: Some(At {
                iteration,
                done,
                total,
            }),
            ..self
        }
    }

    /// Close the run; its exit code.
    pub(super) fn close(mut self) -> i32 {
        let halt = self.halt.clone();
        close(&mut self, &halt)
    }
}

impl Ends for Before<'_> {
    fn ui(&self) -> Ui {
        self.ui
    }

    fn run(&mut self) -> Option<(&RalphDir, &mut RunState)> {
        self.run.as_mut().map(|(rd, state)| (&**rd, state))
    }

    fn at(&self) -> Option<At> {
        self.at
    }

    fn announce(&mut self, event: Event) {
        self.ui.event(&event.line_now());
    }

    fn sum_up(&mut self, halt: &Halt) {
        if *halt != self.halt {
            // The run's state could not be saved: that error is the ending now.
            if let Halt::Error { message, hint } = halt {
                let e = Error::user(message.clone());
                let e = if hint.is_empty() {
                    e
                } else {
                    e.with_hint(hint.clone())
                };
                self.ui.error(&e);
            }
            return;
        }
        match (&self.error, self.said.take()) {
            (Some(e), _) => self.ui.error(e),
            (None, Some(said)) => said(self.ui),
            (None, None) => {}
        }
    }

    fn exit_code(&self, halt: &Halt) -> i32 {
        match &self.error {
            Some(e) if *halt == self.halt => e.exit_code(),
            _ => halt.exit_code(),
        }
    }
}
