//! Phase 3 of an iteration (SPEC §3, §5.1 step 6): the task source judges what the agent left;
//! a table task marked DONE under `--review` first goes to a second, fresh agent run.

use super::Loop;
use super::checks::Check;
use super::decide::Halt;
use super::prepare::Prepared;
use super::source::Judged;
use crate::agent::stream::{Observer, format_for};
use crate::error::{Error, Result};
use crate::proc::observe::{Echo, Watchers};

/// The reviewer's answer: `None` when it gave no REVIEW line, else PASS or FAIL with a reason.
type ReviewVerdict = Option<std::result::Result<(), String>>;

impl Loop {
    /// The source's judgement, or the halt that ends the iteration instead (an unreadable
    /// source, an interrupt during the review).
    pub(super) async fn judge(
        &mut self,
        prep: &mut Prepared,
    ) -> Result<std::result::Result<Judged, Halt>> {
        let judged = match self.source.judge() {
            Ok(j) => j,
            Err(e) => return Ok(Err(self.unreadable(prep.n, e))),
        };
        let Some(k) = judged.review_task else {
            self.note_judged(prep, &judged);
            return Ok(Ok(judged));
        };
        let restored = judged.restored;
        let Some(verdict) = self.run_reviewer(prep, k).await? else {
            return Ok(Err(Halt::Interrupted));
        };
        let (line, note) = match &verdict {
            Some(Ok(())) => (format!("review of task {k}: PASS"), None),
            Some(Err(why)) => (
                format!("review of task {k}: FAIL {why}"),
                Some(format!("Review of task {k} failed: {why}")),
            ),
            None => (
                format!("the reviewer of task {k} gave no verdict"),
                Some(format!(
                    "The reviewer of task {k} gave no REVIEW line: counted as a fail"
                )),
            ),
        };
        self.log(&format!("Iteration {}: {line}", prep.n));
        prep.notes.extend(note);
        match self.source.review_done(verdict) {
            Ok(mut j) => {
                j.restored = restored;
                self.note_judged(prep, &j);
                Ok(Ok(j))
            }
            Err(e) => Ok(Err(self.unreadable(prep.n, e))),
        }
    }

    /// The task source cannot be read after the agent ran: the run halts with an error, after
    /// the iteration is recorded like any other.
    fn unreadable(&self, n: u32, e: Error) -> Halt {
        self.log(&format!(
            "Iteration {n}: the task source is unreadable after the agent ran: {e}"
        ));
        Halt::Error {
            message: format!("iteration {n} left the task source unreadable: {e}"),
            hint: e.hint().unwrap_or_else(|| {
                "fix the file (see `git log -p`), then continue with `ralph resume`".into()
            }),
        }
    }

    /// Log and report what the judgement found besides the counts.
    fn note_judged(&mut self, prep: &mut Prepared, j: &Judged) {
        let n = prep.n;
        for r in &j.regressions {
            self.log(&format!(
                "Iteration {n}: regression: criterion unchecked: \"{r}\""
            ));
            prep.notes
                .push(format!("Regression: \"{r}\" was unchecked"));
        }
        for r in &j.restored {
            self.log(&format!(
                "Iteration {n}: the agent changed another row: {r}"
            ));
            prep.notes.push(format!("Put back: {r}"));
        }
        for a in &j.annotations {
            if !self.state.annotations.contains(a) {
                self.log(&format!("Iteration {n}: criterion annotated: {a}"));
                prep.notes.push(format!("Annotated (for review): {a}"));
                self.state.annotations.push(a.clone());
            }
        }
        for t in &j.tampered {
            self.log(&format!("Iteration {n}: tampered: {t}"));
        }
    }

    /// A second fresh agent run reviews task `k` (table `--review`). `None` when interrupted.
    async fn run_reviewer(&mut self, prep: &mut Prepared, k: u32) -> Result<Option<ReviewVerdict>> {
        let Some(prompt) = self
            .source
            .review_prompt(k, self.setup.settings.test_command.as_deref())
        else {
            return Ok(Some(Some(Ok(()))));
        };
        let run_dir = self.tree.rd.run_dir(&self.state.run_id);
        let prompt_file = run_dir.join(format!("iter-{:03}.review.prompt.md", prep.n));
        crate::files::write_own(&prompt_file, prompt.as_bytes())
            .map_err(|e| Error::file("write", &prompt_file, e))?;
        let inv = self.invocation(prep.n, &prompt, &prompt_file)?;
        let mut observer =
            Observer::new(format_for(&self.agents.current().name), chrono::Utc::now());
        let watchers = Watchers::default().with(&mut observer);
        let check = Check {
            what: format!(
                "review of task {k}: a fresh {} run",
                self.agents.current().name
            ),
            inv: self.setup.settings.confine(inv, true),
            echo: Echo::None,
            limits: self.agent_limits(),
        };
        let Some(fin) = self.run_aux(check, prep, watchers).await? else {
            return Ok(None);
        };
        self.add_usage(&observer.usage());
        let text = observer
            .final_message()
            .unwrap_or_else(|| String::from_utf8_lossy(&fin.stdout_tail).into_owned());
        Ok(Some(crate::task::table::parse_review(&text)))
    }
}
