//! Where else a person answers (SPEC §16): a queue's tracker that shows the loop's question on
//! its item and reads a person's reply there (GitHub: a comment on the issue, answered by a
//! reply comment from someone other than the token's user). While the loop waits, a thread of
//! its own ([`relay`]) says the question there once and looks for a reply every so often; a
//! reply is given through the desk ([`Desk::give_answer`]), where the loop's wait — woken by the
//! desk's file events — sees it as it sees `ralph answer`. Whichever answer comes first wins;
//! a failure there is a warning, never the end of the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Desk, MAX_WORDS, Question};
use crate::error::Result;
use crate::ui::Ui;

/// A place besides the desk where a person sees the loop's question and answers it.
pub(crate) trait Elsewhere: Send + Sync {
    /// Say question `q` of loop `name` there — once per question, however often it is asked
    /// again (a resumed loop, a second worker) — and what to look for its reply with.
    fn ask(&self, name: &str, q: &Question) -> Result<Box<dyn Replies>>;
    /// How long between two looks for a reply.
    fn every(&self) -> Duration;
    /// Where it is, for the person at the terminal (`issue o/r#12`).
    fn place(&self) -> String;
}

/// The replies to one question said [`Elsewhere`].
pub(crate) trait Replies: Send {
    /// The first reply a person gave since the question was said, if any.
    fn reply(&mut self) -> Result<Option<String>>;
}

/// A relay running while the loop waits; dropped, it stops (a request under way finishes on
/// its own, and its answer is no longer given).
pub(crate) struct Relay {
    stop: Arc<AtomicBool>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Say question `q` of loop `name` `there`, then look for its reply every so often, on a
/// thread of its own, until a reply is given through `desk`, the desk holds an answer or
/// another question, or the returned [`Relay`] is dropped.
pub(crate) fn relay(
    there: Arc<dyn Elsewhere>,
    desk: Desk,
    name: String,
    q: Question,
    ui: Ui,
) -> Relay {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let prefix = crate::ui::line_prefix();
    let spawned = std::thread::Builder::new()
        .name(format!("ralph-ask-{name}"))
        .spawn(move || {
            crate::ui::set_line_prefix(prefix);
            Watch {
                there,
                desk,
                name,
                q,
                ui,
                stop: stopped,
            }
            .run();
        });
    if let Err(e) = spawned {
        ui.warn(&format!(
            "the question is not shown on the item (no thread: {e}); answer it with `ralph answer`"
        ));
    }
    Relay { stop }
}

/// The relay's thread: what it says and where it gives the reply.
struct Watch {
    there: Arc<dyn Elsewhere>,
    desk: Desk,
    name: String,
    q: Question,
    ui: Ui,
    stop: Arc<AtomicBool>,
}

impl Watch {
    fn run(self) {
        if self.stopped() {
            return;
        }
        let mut replies = match self.there.ask(&self.name, &self.q) {
            Ok(r) => r,
            Err(e) => {
                self.ui.warn(&format!(
                    "{}: the question is not shown on {} ({e}); answer it with `ralph answer {}`",
                    self.name,
                    self.there.place(),
                    self.name
                ));
                return;
            }
        };
        let mut failing = false;
        loop {
            if self.stopped() || !self.still_open() {
                return;
            }
            match replies.reply() {
                Ok(Some(text)) => return self.give(&text),
                Ok(None) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    self.ui.warn(&format!(
                        "{}: no reply could be read from {} ({e}); ralph looks again",
                        self.name,
                        self.there.place()
                    ));
                }
                Err(_) => {}
            }
            if !self.pause(self.there.every()) {
                return;
            }
        }
    }

    /// Whether the question is still open on the desk and unanswered.
    fn still_open(&self) -> bool {
        self.desk.question().as_ref() == Some(&self.q) && self.desk.answer().is_none()
    }

    /// The reply given as the answer, unless the wait ended or an answer came meanwhile.
    fn give(&self, text: &str) {
        if self.stopped() || !self.still_open() {
            return;
        }
        if let Err(e) = self.desk.give_answer(&bounded(text)) {
            self.ui.warn(&format!(
                "{}: the reply on {} is not taken as the answer: {e}",
                self.name,
                self.there.place()
            ));
        }
    }

    /// Wait `wait`, in short steps; `false` once stopped.
    fn pause(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            if self.stopped() {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A reply as an answer takes it: trimmed, at most [`MAX_WORDS`] bytes (cut at a character).
pub(crate) fn bounded(text: &str) -> String {
    let t = text.trim();
    let mut end = t.len().min(MAX_WORDS);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_reply_is_trimmed_and_cut_at_a_character() {
        assert_eq!(bounded("  yes \n"), "yes");
        let long = "é".repeat(MAX_WORDS);
        let kept = bounded(&long);
        assert!(kept.len() <= MAX_WORDS && kept.len() >= MAX_WORDS - 1);
        assert!(kept.chars().all(|c| c == 'é'));
    }

    /// Said once; replies `None` until `after` looks, then `Some`.
    struct There {
        asked: Mutex<Vec<String>>,
        looks: Arc<Mutex<u32>>,
        after: u32,
    }

    struct Looks(Arc<Mutex<u32>>, u32);

    impl Replies for Looks {
        fn reply(&mut self) -> Result<Option<String>> {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            Ok((*n > self.1).then(|| "  postgres  ".to_string()))
        }
    }

    impl Elsewhere for There {
        fn ask(&self, name: &str, q: &Question) -> Result<Box<dyn Replies>> {
            self.asked
                .lock()
                .unwrap()
                .push(format!("{name}: {}", q.text));
            Ok(Box::new(Looks(self.looks.clone(), self.after)))
        }
        fn every(&self) -> Duration {
            Duration::from_millis(10)
        }
        fn place(&self) -> String {
            "the test".into()
        }
    }

    fn open_desk(d: &tempfile::TempDir) -> (Desk, Question) {
        let desk = Desk {
            dir: d.path().join("person"),
        };
        let q = Question {
            text: "Which DB?".into(),
            asked_at: "t".into(),
            iteration: 2,
        };
        desk.ask(&q).unwrap();
        (desk, q)
    }

    fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_reply_there_is_given_as_the_answer_once_asked_once() {
        let d = tempfile::tempdir().unwrap();
        let (desk, q) = open_desk(&d);
        let there = Arc::new(There {
            asked: Mutex::new(Vec::new()),
            looks: Arc::new(Mutex::new(0)),
            after: 3,
        });
        let relay = relay(
            there.clone(),
            desk.clone(),
            "github-7".into(),
            q,
            Ui::default(),
        );
        assert!(wait_for(|| desk.answer().is_some()), "no answer given");
        assert_eq!(desk.answer().unwrap().text, "postgres");
        assert_eq!(*there.asked.lock().unwrap(), ["github-7: Which DB?"]);
        drop(relay);
    }

    #[test]
    fn an_answer_here_first_stands_and_the_relay_stops_looking() {
        let d = tempfile::tempdir().unwrap();
        let (desk, q) = open_desk(&d);
        let looks = Arc::new(Mutex::new(0));
        let there = Arc::new(There {
            asked: Mutex::new(Vec::new()),
            looks: looks.clone(),
            after: 5,
        });
        // Answered here first: the relay stops looking, and the local answer stands.
        let relay = relay(there, desk.clone(), "main".into(), q, Ui::default());
        assert!(wait_for(|| *looks.lock().unwrap() >= 1), "never looked");
        desk.give_answer("mysql").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let seen = *looks.lock().unwrap();
        assert!(seen <= 5, "kept looking after the answer: {seen}");
        assert_eq!(desk.answer().unwrap().text, "mysql");
        drop(relay);
    }
}
