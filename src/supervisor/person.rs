//! A person in the loop, the loop's side (SPEC §16): after each agent, the question it asked
//! (`.ralph/question.md`, read through `person::take_asked`'s door) is taken into the loop's
//! desk in ralph's state directory; before the next iteration the loop waits for its answer —
//! no iteration spent, no stall counted, a `question` event and the `on_question` hook — until
//! `ralph answer`, the web view, a reply where else the loop asks (`Loop::elsewhere`, a queue
//! item's issue: `person::relay`), an interrupt, or `--answer-timeout` (exit 12); the answer
//! and any hints go into the next prompt, once.

use std::path::PathBuf;
use std::time::Duration;

use super::Loop;
use super::decide::Halt;
use crate::event::{Event, Question as Asked};
use crate::person::{Desk, NO_QUESTIONS_VAR, QUESTION_FILE_VAR, Question, take_asked};
use crate::state;

/// How questions go in a run: `--no-questions` and `--answer-timeout`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Questions {
    /// `--no-questions`: the agent is told nobody answers, and `ralph ask` refuses.
    pub(crate) refused: bool,
    /// How long an answer is waited for; `None`: as long as it takes.
    pub(crate) timeout: Option<Duration>,
}

impl Questions {
    /// `--no-questions` and `--answer-timeout` as given; without a timeout, none while a person
    /// is there to answer (a terminal, or `ralph serve` for the repository), 24h unattended.
    pub(crate) fn resolve(
        refused: bool,
        timeout: Option<Duration>,
        interactive: bool,
        repo: &crate::git::Repo,
    ) -> Questions {
        let timeout = match timeout {
            Some(t) => Some(t),
            None if interactive || web_view_there(repo) => None,
            None => Some(Duration::from_secs(24 * 3600)),
        };
        Questions { refused, timeout }
    }
}

/// Whether `ralph serve` runs for `repo`'s repository now: it holds its `serve.pid` locked while
/// it runs (the kernel drops the lock on any death, so neither a stale file nor a reused pid
/// counts).
fn web_view_there(repo: &crate::git::Repo) -> bool {
    crate::state::StateHome::locate()
        .and_then(|h| h.find_repo(repo.git2().commondir()))
        .is_some_and(|records| crate::state::Lock::is_held(&records.join("serve.pid")))
}

/// What the next prompt carries from a person, and what to clear once it is saved.
#[derive(Debug, Default)]
pub(super) struct Words {
    pub(super) section: String,
    answered: bool,
    hints: Vec<PathBuf>,
}

impl Loop {
    /// The agent's environment for questions: where `ralph ask` writes, or that it may not.
    pub(super) fn question_env(&self) -> Vec<(String, String)> {
        if self.setup.questions.refused {
            return vec![(NO_QUESTIONS_VAR.to_string(), "1".to_string())];
        }
        let file = self.tree.rd.path.join(crate::person::ASKED);
        vec![(
            QUESTION_FILE_VAR.to_string(),
            file.to_string_lossy().into_owned(),
        )]
    }

    /// After iteration `n`'s agent: the question it asked, taken into the desk (a run that
    /// takes no questions drops it, said in the activity log).
    pub(super) fn take_question(&mut self, n: u32) {
        let asked = match take_asked(self.tree.repo.root()) {
            Ok(Some(text)) => text,
            Ok(None) => return,
            Err(why) => {
                self.setup
                    .ui
                    .warn(&format!("the agent's question is not read: {why}"));
                return;
            }
        };
        if self.setup.questions.refused {
            self.log(&format!(
                "Iteration {n}: the agent asked a question, but this run takes none (--no-questions): {asked}"
            ));
            return;
        }
        let q = Question {
            text: asked,
            asked_at: state::now_rfc3339(),
            iteration: n,
        };
        match self.desk().and_then(|d| d.ask(&q)) {
            Ok(()) => self.log(&format!(
                "Iteration {n}: the agent asks a person: {}",
                q.text
            )),
            Err(e) => self.setup.ui.warn(&format!(
                "the agent's question is not kept: {}",
                super::faults::chain(&e)
            )),
        }
    }

    /// Before an iteration: while a question is open and unanswered, wait for a person.
    /// `Some(exit code)` when the run halts instead (interrupted, or no answer in time).
    pub(super) async fn wait_for_person(&mut self) -> Option<i32> {
        let desk = self.desk().ok()?;
        let q = desk.question()?;
        if desk.answer().is_some() {
            return None;
        }
        self.announce_question(&q).await;
        let activity = crate::activity::Sink::start(&self.tree.rd.path);
        activity.set(&format!("waiting for a person: {}", q.text));
        // Asked where else a person answers too (a queue item's issue), looked for there
        // meanwhile; whichever answer reaches the desk first wins.
        let relay = self.elsewhere.clone().map(|there| {
            crate::person::relay(
                there,
                desk.clone(),
                self.loop_name(),
                q.clone(),
                self.setup.ui,
            )
        });
        let answered = self.await_answer(&desk).await;
        drop(relay);
        drop(activity);
        match answered {
            Waited::Answered => {
                self.log("A person answered; the next prompt carries the answer");
                self.setup
                    .ui
                    .line("✓ A person answered: the next iteration gets the answer");
                None
            }
            Waited::Interrupted => {
                self.check_the_tree_between();
                Some(self.halt(&Halt::Interrupted))
            }
            Waited::TimedOut => {
                self.log("No answer came within --answer-timeout");
                Some(self.halt(&Halt::WaitingForPerson(q.text)))
            }
        }
    }

    async fn announce_question(&mut self, q: &Question) {
        let name = self.loop_name();
        let ui = self.setup.ui;
        ui.alert(&format!(
            "❓ The agent asks (iteration {}): {}",
            q.iteration, q.text
        ));
        ui.plain("The loop waits for a person; no iteration is spent while it waits.");
        ui.next(
            &format!("ralph answer {name} \"YOUR ANSWER\""),
            "answer it from any terminal in the repository",
        );
        if let Some(there) = &self.elsewhere {
            ui.plain(&format!(
                "It is asked on {} too: a reply there answers it.",
                there.place()
            ));
        }
        self.emit(Event::Question(Asked {
            iteration: q.iteration,
            loop_name: name,
            question: q.text.clone(),
        }));
        self.run_hooks().await;
    }

    /// Wait until the desk holds an answer, an interrupt comes, or the timeout passes: woken by
    /// the desk's file events (inotify), never polling.
    async fn await_answer(&mut self, desk: &Desk) -> Waited {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let _ = state::create_private_dir(desk.dir());
        let watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            let _ = tx.send(());
        })
        .and_then(|mut w| {
            notify::Watcher::watch(&mut w, desk.dir(), notify::RecursiveMode::NonRecursive)?;
            Ok(w)
        });
        if let Err(e) = &watcher {
            self.setup.ui.warn(&format!(
                "the answer is not watched for ({e}): ralph looks for it every second"
            ));
        }
        let seen = self.interrupts.count();
        let deadline = self
            .setup
            .questions
            .timeout
            .map(|t| tokio::time::Instant::now() + t);
        loop {
            if desk.answer().is_some() {
                return Waited::Answered;
            }
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.interrupts.after(seen) => return Waited::Interrupted,
                _ = timeout => return Waited::TimedOut,
                _ = rx.recv(), if watcher.is_ok() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)), if watcher.is_err() => {}
            }
        }
    }

    /// The person's words for iteration `n`'s prompt: the answer to the question the agent
    /// asked, and every hint left since, each said once in the activity log.
    pub(super) fn persons_words(&mut self, n: u32) -> Words {
        let Ok(desk) = self.desk() else {
            return Words::default();
        };
        let mut words = Words::default();
        if let Some((q, a)) = desk.take_answered() {
            words.section.push_str(&format!(
                "\n## A person answered your question\n\nYou asked (iteration {}): {}\n\nA person answered your question: {}\n",
                q.iteration, q.text, a.text
            ));
            words.answered = true;
            self.log(&format!(
                "Iteration {n}: the prompt carries a person's answer: {}",
                a.text
            ));
        }
        let hints = desk.hints();
        if !hints.is_empty() {
            words.section.push_str("\n## A person's notes\n\n");
        }
        for (path, h) in hints {
            words.section.push_str(&format!("- {}\n", h.text));
            self.log(&format!(
                "Iteration {n}: the prompt carries a person's hint: {}",
                h.text
            ));
            words.hints.push(path);
        }
        words
    }

    /// What the prompt took off the desk, removed once the prompt is saved.
    pub(super) fn clear_words(&self, words: &Words) {
        if let Ok(desk) = self.desk() {
            desk.clear(words.answered, &words.hints);
        }
    }

    /// A run that completes closes the question its agent asked on the way (in the very
    /// iteration that completed the task): nobody waits for its answer, no completed loop shows
    /// "waiting for a person", and no later run inherits it. Said in the activity log.
    pub(super) fn close_question(&mut self) {
        let Ok(desk) = self.desk() else { return };
        let Some(q) = desk.question() else { return };
        desk.clear(true, &[]);
        let line = format!(
            "The task is complete: the agent's question is closed unanswered: {}",
            q.text
        );
        self.setup.ui.note(&line);
        self.log(&line);
    }

    /// How the agent asks, for every prompt.
    pub(super) fn asking_section(&self) -> String {
        if self.setup.questions.refused {
            return "\n## Questions\n\nNo person answers questions in this run: decide yourself, and write the assumption you made in .ralph/progress.md.\n".to_string();
        }
        let ralph = std::env::current_exe()
            .map(|p| shell_words::quote(&p.to_string_lossy()).into_owned())
            .unwrap_or_else(|_| "ralph".to_string());
        format!(
            "\n## Questions\n\nIf you cannot go on without a person's decision, run `{ralph} ask \"YOUR QUESTION\"` (it returns at once), then end this iteration: the loop waits for the answer and gives it to you in the next prompt. Ask only what you cannot decide yourself.\n"
        )
    }

    fn desk(&self) -> crate::error::Result<Desk> {
        Desk::open(&self.tree.repo)
    }

    /// The loop's name as `ralph answer` takes it: `main`, or its worktree's.
    fn loop_name(&self) -> String {
        crate::worktree::loop_name(&self.tree.repo).unwrap_or_else(|| "main".to_string())
    }
}

enum Waited {
    Answered,
    Interrupted,
    TimedOut,
}
