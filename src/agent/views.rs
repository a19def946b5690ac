//! The agent's latest activity handed on to the views that show it — the live line
//! (`live::LiveView`), `.ralph/activity.now` (`activity::Sink`) — as the observer works it out
//! from what the relay publishes. The views subscribe; neither the relay nor the observer
//! knows them.

use std::time::{Duration, Instant};

use super::stream::Observer;
use crate::proc::observe::{Observation, Watcher};

/// Something that shows the agent's latest activity.
pub(crate) trait ActivityView {
    /// The least time between two activities worked out for it: `None`, every change (working
    /// it out can cost a JSON parse, so a view that rests between writes asks less often).
    fn interval(&self) -> Option<Duration> {
        None
    }

    fn show(&self, activity: &str);
}

/// The observer, watching a supervised run for the relay, and the views of its activity.
pub(crate) struct Watched<'a> {
    observer: &'a mut Observer,
    views: Vec<&'a dyn ActivityView>,
    /// When the activity was last worked out.
    asked: Option<Instant>,
    /// Output arrived since then, for a view that rests between activities.
    pending: bool,
}

impl<'a> Watched<'a> {
    pub(crate) fn new(observer: &'a mut Observer) -> Watched<'a> {
        Watched {
            observer,
            views: Vec::new(),
            asked: None,
            pending: false,
        }
    }

    /// Shows the activity on `view` too, if there is one.
    pub(crate) fn shown_on<V: ActivityView>(mut self, view: Option<&'a V>) -> Watched<'a> {
        if let Some(v) = view {
            self.views.push(v);
        }
        self
    }

    /// After a chunk: the activity for every view that is due, if it changed.
    fn output(&mut self) {
        let due = self.views.iter().any(|v| {
            v.interval()
                .is_none_or(|every| self.asked.is_none_or(|t| t.elapsed() >= every))
        });
        if due && self.observer.take_activity_changed() {
            self.asked = Some(Instant::now());
            self.pending = false;
            if let Some(a) = self.observer.activity() {
                for v in &self.views {
                    v.show(a);
                }
            }
        } else if self.views.iter().any(|v| v.interval().is_some()) {
            self.pending = true;
        }
    }

    /// At the end: the last activity reaches a resting view even when its interval skipped it.
    fn ended(&mut self) {
        if self.pending
            && let Some(a) = self.observer.activity()
        {
            for v in self.views.iter().filter(|v| v.interval().is_some()) {
                v.show(a);
            }
        }
    }
}

impl Watcher for Watched<'_> {
    fn observe(&mut self, what: &Observation<'_>) {
        if let Observation::Ended { .. } = what {
            self.ended();
        }
        self.observer.observe(what);
        if let Observation::Output { .. } = what {
            self.output();
        }
    }

    fn waiting(&self) -> bool {
        self.observer.waiting()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::agent::Format;
    use crate::agent::cli::Output;
    use crate::agent::custom::Custom;
    use crate::agent::testkit::observer;

    /// Writes down what it was shown.
    struct Shown {
        every: Option<Duration>,
        seen: RefCell<Vec<String>>,
    }

    impl ActivityView for Shown {
        fn interval(&self) -> Option<Duration> {
            self.every
        }

        fn show(&self, activity: &str) {
            self.seen.borrow_mut().push(activity.to_owned());
        }
    }

    fn shown(every: Option<Duration>) -> Shown {
        Shown {
            every,
            seen: RefCell::new(Vec::new()),
        }
    }

    fn output(bytes: &[u8]) -> Observation<'_> {
        Observation::Output {
            bytes,
            stderr: false,
        }
    }

    #[test]
    fn every_change_reaches_a_live_view_and_a_resting_one_gets_the_first_and_the_last() {
        let format = Format::of(&Custom);
        assert_eq!(format.output, Output::Text);
        let mut o = observer(format);
        let live = shown(None);
        let file = shown(Some(Duration::from_secs(3600)));
        let mut watched = Watched::new(&mut o)
            .shown_on(Some(&live))
            .shown_on(Some(&file));
        watched.observe(&Observation::Started);
        for line in ["one\n", "two\n", "two\n", "three"] {
            watched.observe(&output(line.as_bytes()));
        }
        watched.observe(&Observation::Ended {
            exit: Some(0),
            stdout_tail: b"one\ntwo\ntwo\nthree",
            cut: false,
        });
        assert_eq!(*live.seen.borrow(), ["one", "two"]);
        // Shown with the live view while it asks at every change; the last line settled by the
        // end is not the observer's until it finishes, as before.
        assert_eq!(*file.seen.borrow(), ["one", "two", "two"]);
        assert_eq!(o.activity(), Some("three"));
        assert_eq!(o.final_message().as_deref(), Some("one\ntwo\ntwo\nthree"));
    }

    #[test]
    fn a_resting_view_alone_is_asked_once_per_interval_and_at_the_end() {
        let mut o = observer(Format::of(&Custom));
        let file = shown(Some(Duration::from_secs(3600)));
        let mut watched = Watched::new(&mut o).shown_on(Some(&file));
        for line in ["one\n", "two\n", "three\n"] {
            watched.observe(&output(line.as_bytes()));
        }
        watched.observe(&Observation::Ended {
            exit: Some(0),
            stdout_tail: b"one\ntwo\nthree\n",
            cut: false,
        });
        assert_eq!(*file.seen.borrow(), ["one", "three"]);
    }
}
