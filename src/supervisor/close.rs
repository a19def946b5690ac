//! The run's close (SPEC §6, §9), as `record` is the iteration's: every way a run ends — a halt
//! in the loop, or an ending before it (nothing to do, already complete, tampered while ralph
//! was down, interrupted while checking, an error) — goes through [`close`] once. The halt is
//! recorded in the run's state when there is a run (a state that cannot be saved turns it into
//! an error naming the save), logged, announced as the run's one `halted` event, and summed up;
//! its exit code is returned. Nothing announces a halt but this.

use super::Loop;
use super::decide::Halt;
use super::faults::{Faults, chain};
use crate::error::Error;
use crate::event::{At, Event, Halted};
use crate::state::{RalphDir, RunState};
use crate::ui::Ui;

/// Where a run ends: what its close needs from there.
pub(crate) trait Ends {
    fn ui(&self) -> Ui;

    /// The run this ends — its state, saved with the halt, and its directory — or `None` when
    /// no run began (nothing is recorded then).
    fn run(&mut self) -> Option<(&RalphDir, &mut RunState)>;

    /// Where the task stood, for the `halted` event; `None` before it was read.
    fn at(&self) -> Option<At>;

    /// Announce the `halted` event (the loop also runs its hook).
    fn announce(&mut self, event: Event);

    /// What the user reads about `halt` (as recorded).
    fn sum_up(&mut self, halt: &Halt);

    /// The exit code of `halt`.
    fn exit_code(&self, halt: &Halt) -> i32 {
        halt.exit_code()
    }
}

/// Close the run with `halt`: recorded, logged, announced once, summed up; its exit code.
pub(crate) fn close(end: &mut impl Ends, halt: &Halt) -> i32 {
    let ui = end.ui();
    let (halt, run_id, named) = match end.run() {
        Some((rd, state)) => {
            let halt = record(rd, state, halt);
            let said = match &halt {
                Halt::Error { message, .. } => format!(": {message}"),
                _ => String::new(),
            };
            super::log_activity(
                ui,
                rd,
                &format!("Halt: {} (exit {}){said}", halt.reason(), halt.exit_code()),
            );
            let named = (state.task.clone(), state.task_file.clone());
            (halt, Some(state.run_id.clone()), Some(named))
        }
        None => (halt.clone(), None, None),
    };
    let (task, task_file) = named.unzip();
    let code = end.exit_code(&halt);
    end.announce(Event::Halted(Halted {
        run_id,
        task,
        task_file,
        reason: halt.reason(),
        exit_code: code,
        at: end.at(),
        message: match &halt {
            Halt::Error { message, .. } => Some(message.clone()),
            _ => None,
        },
    }));
    end.sum_up(&halt);
    code
}

/// Record `halt` in the run's state: the halt recorded.
fn record(rd: &RalphDir, state: &mut RunState, halt: &Halt) -> Halt {
    let mark = |state: &mut RunState, halt: &Halt| {
        state.running = false;
        state.halt_reason = Some(halt.reason());
        state.exit_code = Some(halt.exit_code());
    };
    mark(state, halt);
    let Err(e) = state.save(&rd.state_file()) else {
        return halt.clone();
    };
    let unsaved = not_saved(halt, &e);
    mark(state, &unsaved);
    unsaved
}

/// `halt`, when `state.json` cannot be saved: an error naming the save (and the halt it
/// replaces), unless `halt` already is that very error.
fn not_saved(halt: &Halt, e: &Error) -> Halt {
    if let Halt::Error { message, .. } = halt
        && message.ends_with(&chain(e))
    {
        return halt.clone();
    }
    let mut faults = Faults::default();
    match halt {
        Halt::Error { .. } => faults.note("the state is not saved", e),
        _ => faults.note(
            format_args!(
                "the run halted ({}), but its state is not saved",
                halt.reason()
            ),
            e,
        ),
    }
    faults.halt_with(Some(halt))
}

impl Ends for Loop {
    fn ui(&self) -> Ui {
        self.setup.ui
    }

    fn run(&mut self) -> Option<(&RalphDir, &mut RunState)> {
        Some((&self.tree.rd, &mut self.state))
    }

    fn at(&self) -> Option<At> {
        Some(At {
            iteration: self.state.iteration,
            done: self.state.done,
            total: self.state.total,
        })
    }

    fn announce(&mut self, event: Event) {
        self.emit(event);
    }

    fn sum_up(&mut self, halt: &Halt) {
        self.summary(halt);
    }
}

impl Loop {
    /// The commit the loop's own branch is at, recorded with the state (what `ralph merge`
    /// merges); kept as it was when the branch is gone.
    pub(super) fn take_tip(&mut self) {
        if let Some(tip) = self.tree.repo.own_tip() {
            self.state.tip = Some(tip);
        }
    }

    /// Halt: the run's close ([`close`]); the exit code.
    pub(super) fn halt(&mut self, halt: &Halt) -> i32 {
        if matches!(halt, Halt::Complete) {
            self.close_question();
        }
        self.take_tip();
        close(self, halt)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::supervisor) fn full_disk(what: &str) -> Error {
        Error::file(
            "write",
            std::path::Path::new(what),
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        )
    }

    pub(in crate::supervisor) fn message(h: &Halt) -> &str {
        match h {
            Halt::Error { message, .. } => message,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn a_state_that_cannot_be_saved_turns_the_halt_into_an_error_once() {
        let e = full_disk(".ralph/state.json");
        let h = not_saved(&Halt::Complete, &e);
        assert!(
            message(&h).starts_with("the run halted (complete), but its state is not saved: "),
            "{h:?}"
        );
        // The same failure, met again when the error itself is saved, is not repeated.
        let first = super::super::faults::failed("the state is not saved", &e);
        assert_eq!(not_saved(&first, &e), first);
        let other =
            super::super::faults::failed("iteration 2's work is not committed", &full_disk("x"));
        assert!(message(&not_saved(&other, &e)).contains("; and the state is not saved: "));
    }
}
