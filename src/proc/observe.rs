//! What the relay observes of a supervised process, published as it happens to watchers it does
//! not know (watchexec's action handler receives events; it does not own the screen): the
//! agent-output observer (activity, cost, limits), and through it the live view and
//! `.ralph/activity.now`; `--stream`'s copy of the output ([`Echo`]). The relay itself only
//! writes the transcript and keeps the timers.

use std::io::Write;

use super::relay::StopCause;

/// One thing the relay saw, in the order it saw them: [`Observation::Started`] first, then
/// output, stops and kills in any order, [`Observation::Ended`] last (unless waiting for the
/// process failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Observation<'a> {
    /// The process runs. The relay keeps the end of its stdout and hands it over with
    /// [`Observation::Ended`], so no watcher needs to copy it from every chunk.
    Started,
    /// A chunk of its output, as the pipe delivered it (any size, lines cut anywhere).
    Output { bytes: &'a [u8], stderr: bool },
    /// ralph began to stop it (SIGTERM to its tree), for this cause.
    Stopping(StopCause),
    /// SIGKILL to its tree: the grace ran out, a second interrupt, leaked pipes, or a transcript
    /// that can no longer be written.
    Killed,
    /// It is over and all its output was published: its exit code (`None`: a signal ended it),
    /// the last bytes of its stdout (at least 64 KiB of them when there were that many), and
    /// whether stdout was longer than that.
    Ended {
        exit: Option<i32>,
        stdout_tail: &'a [u8],
        cut: bool,
    },
}

/// Anything that watches a supervised process. Called on the relay's path, once per chunk: cheap
/// work only (a watcher that writes somewhere slow hands the work to a thread of its own, as
/// `activity::Sink` does).
pub(crate) trait Watcher {
    fn observe(&mut self, what: &Observation<'_>);

    /// Whether the process, quiet now, said it is waiting (a rate limit it retries by itself
    /// after a silent sleep): its silence is then no hang. Asked only when the idle timer
    /// fires. No by default.
    fn waiting(&self) -> bool {
        false
    }
}

/// The watchers of one supervised run, each given every observation in the order listed.
#[derive(Default)]
pub(crate) struct Watchers<'a>(Vec<&'a mut dyn Watcher>);

impl<'a> Watchers<'a> {
    /// These watchers, and `watcher` after them (it may live shorter than they do).
    pub(crate) fn with<'b>(self, watcher: &'b mut dyn Watcher) -> Watchers<'b>
    where
        'a: 'b,
    {
        let mut all: Vec<&'b mut dyn Watcher> = self
            .0
            .into_iter()
            .map(|w| w as &'b mut dyn Watcher)
            .collect();
        all.push(watcher);
        Watchers(all)
    }

    pub(crate) fn publish(&mut self, what: &Observation<'_>) {
        for w in &mut self.0 {
            w.observe(what);
        }
    }

    /// Whether any watcher says the process is waiting ([`Watcher::waiting`]).
    pub(crate) fn waiting(&self) -> bool {
        self.0.iter().any(|w| w.waiting())
    }
}

/// Where the output goes besides the transcript: a watcher that copies it to ralph's own
/// terminal streams (`--stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Echo {
    None,
    /// Copy the agent's stdout to ralph's stdout, its stderr to ralph's stderr (`--stream`).
    Stdout,
    /// Copy both to ralph's stderr (`--stream --json`: stdout carries only JSON events).
    Stderr,
}

impl Watcher for Echo {
    fn observe(&mut self, what: &Observation<'_>) {
        let Observation::Output { bytes, stderr } = *what else {
            return;
        };
        match (*self, stderr) {
            (Echo::None, _) => {}
            (Echo::Stdout, false) => {
                let mut stdout = std::io::stdout();
                let _ = stdout.write_all(bytes);
                let _ = stdout.flush();
            }
            (Echo::Stdout | Echo::Stderr, _) => {
                let _ = std::io::stderr().write_all(bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes down what it was given.
    #[derive(Default)]
    struct Record(Vec<String>);

    impl Watcher for Record {
        fn observe(&mut self, what: &Observation<'_>) {
            self.0.push(format!("{what:?}"));
        }
    }

    #[test]
    fn every_watcher_is_given_every_observation_in_order() {
        let seen = [
            Observation::Started,
            Observation::Output {
                bytes: b"hi\n",
                stderr: false,
            },
            Observation::Stopping(StopCause::Timeout),
            Observation::Killed,
            Observation::Ended {
                exit: None,
                stdout_tail: b"hi\n",
                cut: false,
            },
        ];
        let want: Vec<String> = seen.iter().map(|o| format!("{o:?}")).collect();
        let (mut first, mut second) = (Record::default(), Record::default());
        {
            // A watcher that lives shorter than the others joins them.
            let mut third = Record::default();
            let mut watchers = Watchers::default()
                .with(&mut first)
                .with(&mut second)
                .with(&mut third);
            for o in &seen {
                watchers.publish(o);
            }
            drop(watchers);
            assert_eq!(third.0, want);
        }
        assert_eq!(first.0, want);
        assert_eq!(second.0, want);
    }
}
