//! Phase 4 of an iteration (SPEC §3.3, §5.1 step 6, §5.3): the test command, the verdict command
//! (or the CPM roll-up) and the completion promise — the evidence completion needs. What a failed
//! check printed becomes feedback for the next prompt.

use super::Loop;
use super::attempt::Attempted;
use super::checks::{Check, shell};
use super::decide::{Evidence, Halt};
use super::prepare::Prepared;
use super::source::Judged;
use crate::error::Result;
use crate::proc::observe::Watchers;
use crate::task::checklist::normalize;
use crate::task::verdict::{Verdict, VerdictClass};

/// The judgement with its evidence.
pub(super) struct Verified {
    pub(crate) judged: Judged,
    /// The test command passed, or there is none.
    pub(crate) tests_ok: bool,
    pub(crate) verdict: Option<Verdict>,
    /// A halt the verdict calls for (spec mode's phase rule).
    pub(crate) verdict_halt: Option<Halt>,
    pub(crate) promise_ok: bool,
    /// What the failed checks said, for the next prompt.
    pub(crate) feedback: Option<String>,
}

impl Verified {
    /// What completion rests on, as the one rule (`Evidence::complete`) reads it.
    pub(crate) fn evidence(&self) -> Evidence {
        Evidence {
            source_complete: self.judged.source_complete,
            verdict: self.verdict.as_ref().map(|v| v.class.clone()),
            tests_ok: self.tests_ok,
            promise_ok: self.promise_ok,
        }
    }
}

impl Loop {
    pub(super) async fn verify(
        &mut self,
        prep: &mut Prepared,
        judged: Judged,
        attempted: &Attempted,
    ) -> Result<std::result::Result<Verified, Halt>> {
        let mut feedback = Vec::new();
        let tests_ok = match self.run_tests(prep, &mut feedback).await? {
            None => return Ok(Err(Halt::Interrupted)),
            Some(Err(cannot_run)) => return Ok(Err(cannot_run)),
            Some(Ok(ok)) => ok,
        };
        let judged = self.source.after_tests(judged, tests_ok)?;
        let verdict = match self.source.verdict_invocation(&self.setup.settings) {
            None => None,
            Some((display, inv)) => {
                let Some((v, cannot_run)) =
                    self.run_verdict(prep, display, inv, &mut feedback).await?
                else {
                    return Ok(Err(Halt::Interrupted));
                };
                // A verdict command that cannot run at all says no more the next time.
                if v.class == VerdictClass::Unavailable
                    && let Some(said) = cannot_run
                {
                    self.log(&format!("Iteration {}: {said}", prep.n));
                    return Ok(Err(Halt::VerdictUnavailable));
                }
                Some(v)
            }
        };
        let verdict_halt = verdict.as_ref().and_then(|v| self.source.after_verdict(v));
        for line in self.source.take_notes() {
            self.log(&format!("Iteration {}: {line}", prep.n));
            prep.notes.push(line);
        }
        let judged = self.source.with_verdict_counts(judged);
        let promise_ok = match &self.setup.settings.completion_promise {
            None => true,
            Some(word) => {
                let last = attempted.final_message.clone().unwrap_or_default();
                promise_in_final_message(last.as_bytes(), word, &prep.prompt)
            }
        };
        Ok(Ok(Verified {
            judged,
            tests_ok,
            verdict,
            verdict_halt,
            promise_ok,
            feedback: (!feedback.is_empty()).then(|| super::checks::bounded(feedback.join("\n\n"))),
        }))
    }

    /// The test command; `None` when interrupted. A failure is logged and fed to the next
    /// prompt; a command that cannot run at all (`checks::cannot_run`) halts the run as an
    /// error naming it, after this first iteration that ran it.
    async fn run_tests(
        &mut self,
        prep: &mut Prepared,
        feedback: &mut Vec<String>,
    ) -> Result<Option<std::result::Result<bool, Halt>>> {
        let Some(cmd) = self.setup.settings.test_command.clone() else {
            return Ok(Some(Ok(true)));
        };
        let check = Check {
            what: format!("test command: {cmd}"),
            inv: self
                .setup
                .settings
                .confine(shell(&cmd), self.setup.settings.test_command_from_repo),
            echo: self.echo(),
            limits: self.check_limits(),
        };
        let Some(fin) = self.run_aux(check, prep, Watchers::default()).await? else {
            return Ok(None);
        };
        if fin.stopped.is_none()
            && let Some(said) = super::checks::cannot_run(
                &cmd,
                fin.exit_code,
                &prep.transcript_path,
                self.tree.repo.root(),
            )
        {
            let message = format!(
                "the test command `{cmd}` could not run (exit {}): {said}",
                fin.exit_code
            );
            self.log(&format!("Iteration {}: {message}", prep.n));
            return Ok(Some(Err(Halt::Error {
                message,
                hint: "fix test_command (in the task's frontmatter, .ralph/config.toml or --test-command): its program must be installed and on PATH".into(),
            })));
        }
        if !fin.success() {
            let why = match fin.stopped {
                Some(_) => format!(
                    "timed out after {}",
                    crate::ui::human_duration(self.setup.settings.check_timeout)
                ),
                None => format!("exit {}", fin.exit_code),
            };
            let line = format!("Tests failed ({why}): {cmd}");
            self.log(&format!(
                "Iteration {}: tests failed ({why}): {cmd}",
                prep.n
            ));
            feedback.push(super::checks::feedback(&line, &prep.transcript_path));
            prep.notes.push(line);
        }
        Ok(Some(Ok(fin.success())))
    }

    /// The verdict command (or roll-up), and what the shell said when it could not run at all
    /// (`checks::cannot_run`); `None` when interrupted.
    async fn run_verdict(
        &mut self,
        prep: &mut Prepared,
        display: String,
        inv: crate::proc::Invocation,
        feedback: &mut Vec<String>,
    ) -> Result<Option<(Verdict, Option<String>)>> {
        let check = Check {
            what: format!("verdict command: {display}"),
            inv,
            echo: self.echo(),
            limits: self.check_limits(),
        };
        let Some(fin) = self.run_aux(check, prep, Watchers::default()).await? else {
            return Ok(None);
        };
        let cannot_run = fin
            .stopped
            .is_none()
            .then(|| {
                super::checks::cannot_run(
                    &display,
                    fin.exit_code,
                    &prep.transcript_path,
                    self.tree.repo.root(),
                )
            })
            .flatten()
            .map(|said| format!("the verdict command `{display}` could not run: {said}"));
        let v = self
            .source
            .verdict(fin.exit_code, &String::from_utf8_lossy(&fin.stdout_tail));
        if let Some(note) = self.note_verdict(prep.n, &v) {
            feedback.push(super::checks::feedback(&note, &prep.transcript_path));
            prep.notes.push(note);
        }
        Ok(Some((v, cannot_run)))
    }

    /// Relay what the verdict command said into the log; the report note when there is one.
    fn note_verdict(&self, n: u32, v: &Verdict) -> Option<String> {
        let figures = v.figures();
        let (line, note) = match &v.class {
            VerdictClass::Verified => (
                format!("verdict exit 0 (every row verified): {figures}"),
                None,
            ),
            VerdictClass::Unverified | VerdictClass::NothingPlanned => {
                let mut said = format!("exit {}: {figures}", v.exit_code);
                if !v.details.is_empty() {
                    said.push_str(&format!("; unverified: {}", v.details_listed(10)));
                }
                (format!("verdict {said}"), Some(format!("Verdict {said}")))
            }
            VerdictClass::TargetOnly(rows) => (
                format!(
                    "verdict exit 5: TARGET-ONLY: {} rows unverifiable in this environment",
                    rows.len()
                ),
                None,
            ),
            VerdictClass::Unavailable => {
                let (log, note) = if v.details.is_empty() {
                    (String::new(), String::new())
                } else {
                    (
                        format!("; it said: {}", v.details.join(" | ")),
                        format!(". It said:\n  {}", v.details.join("\n  ")),
                    )
                };
                (
                    format!(
                        "the verdict command could not run (exit {}): {figures}{log}",
                        v.exit_code
                    ),
                    Some(format!(
                        "The verdict command could not run (exit {}); neither progress nor work remaining{note}",
                        v.exit_code
                    )),
                )
            }
        };
        self.log(&format!("Iteration {n}: {line}"));
        note
    }
}

/// `<promise>WORD</promise>` in the agent's final message: after the last echo of the prompt,
/// compared after whitespace normalisation.
pub(crate) fn promise_in_final_message(stdout_tail: &[u8], word: &str, prompt: &str) -> bool {
    let text = String::from_utf8_lossy(stdout_tail);
    // An agent that echoes its prompt must not satisfy the promise by the echo.
    let last_prompt_line = prompt
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let after = match (!last_prompt_line.is_empty())
        .then(|| text.rfind(last_prompt_line))
        .flatten()
    {
        Some(i) => &text[i + last_prompt_line.len()..],
        None => &text[..],
    };
    let want = normalize(word);
    let mut rest = after;
    while let Some(start) = rest.find("<promise>") {
        let inner = &rest[start + "<promise>".len()..];
        match inner.find("</promise>") {
            Some(end) => {
                if normalize(&inner[..end]) == want {
                    return true;
                }
                rest = &inner[end..];
            }
            None => break,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promise_must_follow_the_prompt_echo() {
        let prompt = "do it\nend with <promise>DONE</promise>\n";
        assert!(promise_in_final_message(
            b"work...\n<promise>DONE</promise>\n",
            "DONE",
            prompt
        ));
        assert!(promise_in_final_message(
            b"<promise> DONE </promise>",
            "DONE",
            prompt
        ));
        assert!(!promise_in_final_message(
            b"<promise>NOPE</promise>",
            "DONE",
            prompt
        ));
        let echo = format!("{prompt}thinking\n");
        assert!(!promise_in_final_message(echo.as_bytes(), "DONE", prompt));
    }
}
