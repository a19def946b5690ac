//! The story source (SPEC §14, `prd.json`): one story per iteration by priority; the agent owns
//! only that story's `passes` and `notes`; a story passes only with the tests passing in that
//! iteration; three failed attempts skip it, and the run ends PARTIAL once nothing else is left.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Judged, PromptCtx, stuck_paragraph};
use crate::error::{Error, Result};
use crate::supervisor::decide::Halt;
use crate::task::stories::{self, MAX_ATTEMPTS, Stories};

/// `prd.json` and the memory beside it.
pub(crate) struct StoriesSource {
    pub(crate) path: PathBuf,
    pub(crate) rel: String,
    pub(crate) progress_path: PathBuf,
    pub(crate) progress_rel: String,
    /// The stories as of the end of the last iteration.
    pub(crate) stories: Stories,
    /// Failed attempts per story id (kept in the run's record, which the agent cannot write).
    pub(crate) attempts: BTreeMap<String, u32>,
    /// The story and attempt this iteration works.
    pub(crate) current: Option<(String, u32)>,
    /// The file after the agent, held to what it may change, and whether the agent marked its
    /// story passing, until the tests have spoken.
    pending: Option<(Stories, bool)>,
}

impl StoriesSource {
    pub(crate) fn new(path: PathBuf, rel: String, stories: Stories) -> StoriesSource {
        let progress_path = path.with_file_name(stories::PROGRESS_FILE);
        let progress_rel = match rel.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{}", stories::PROGRESS_FILE),
            None => stories::PROGRESS_FILE.to_string(),
        };
        StoriesSource {
            path,
            rel,
            progress_path,
            progress_rel,
            stories,
            attempts: BTreeMap::new(),
            current: None,
            pending: None,
        }
    }

    /// Stories skipped after their last attempt.
    fn skipped(&self) -> Vec<String> {
        self.attempts
            .iter()
            .filter(|(_, n)| **n >= MAX_ATTEMPTS)
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub(crate) fn select_next(&mut self) {
        let skipped = self.skipped();
        self.current = self.stories.next(&skipped).map(|s| {
            let tried = self.attempts.get(&s.id).copied().unwrap_or(0);
            (s.id.clone(), tried + 1)
        });
    }

    pub(crate) fn claims_complete(&self) -> bool {
        self.stories.passing() == self.stories.stories.len()
    }

    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.stories.passing(), self.stories.stories.len())
    }

    pub(crate) fn prompt(&self, p: &PromptCtx<'_>) -> String {
        let story = self
            .current
            .as_ref()
            .and_then(|(id, _)| self.stories.story(id));
        let mut text = match (story, &self.current) {
            (Some(story), Some((_, attempt))) => stories::story_prompt(
                &self.stories,
                story,
                &stories::Turn {
                    iteration: p.iteration,
                    max_iterations: p.max_iterations,
                    attempt: *attempt,
                    test_command: p.test_command,
                    file: &self.rel,
                    progress: &self.progress_rel,
                },
            ),
            _ => self.checks_prompt(p),
        };
        if p.stuck_alert {
            text.push('\n');
            text.push_str(&stuck_paragraph(p.stuck_streak, "passed no story"));
        }
        text
    }

    /// Every story passes but the checks fail: the prompt asks for them to pass.
    fn checks_prompt(&self, p: &PromptCtx<'_>) -> String {
        let run = match p.test_command.map(str::trim).filter(|c| !c.is_empty()) {
            Some(cmd) => format!("run `{cmd}` and make it pass"),
            None => "make the project's checks pass".to_string(),
        };
        format!(
            "# Ralph iteration {}/{}: every story passes, the checks fail\n\n\
             You are a Ralph executor with fresh context. All state is in the files ({}, {}, the \
             code, git history).\n\nEvery story in {} is marked passing, but the supervisor's \
             checks fail (what they said is below). Find why and fix the work; {run}. Do not \
             change {}. Do not commit: ralph commits your work after this iteration.\n",
            p.iteration, p.max_iterations, self.rel, self.progress_rel, self.rel, self.rel
        )
    }

    /// Read `prd.json` after the agent: only the current story's `passes` and `notes` stay
    /// as the agent left them; anything else is put back (and said); stories removed, added or
    /// re-identified are tampering. The story passes or not once the tests have run
    /// ([`StoriesSource::after_tests`]); until then the file says it does not, so a run
    /// stopped in between (interrupted, killed) never resumes with a story its tests did not
    /// pass.
    pub(crate) fn judge(&mut self) -> Result<Judged> {
        let text = match super::read_after_agent(&self.path, &self.rel) {
            Ok(t) => t,
            Err(Ok(gone)) => {
                return Ok(Judged {
                    tampered: vec![gone],
                    ..self.counted(&self.stories)
                });
            }
            Err(Err(e)) => return self.put_back(&e.to_string()),
        };
        let after = match stories::parse(std::path::Path::new(&self.rel), &text) {
            Ok(after) => after,
            Err(e) => return self.put_back(&e),
        };
        let current = self.current.as_ref().map(|(id, _)| id.as_str());
        let guarded = stories::guard(&self.stories, &after, current.unwrap_or(""));
        if !guarded.tampered.is_empty() {
            return Ok(Judged {
                tampered: guarded.tampered,
                ..self.counted(&self.stories)
            });
        }
        let mut kept = guarded.kept;
        let claimed = current.is_some_and(|id| kept.story(id).is_some_and(|s| s.passes));
        if let Some(id) = current.filter(|_| claimed) {
            kept.set_passes(id, false);
        }
        if claimed || !guarded.restored.is_empty() {
            crate::state::write_atomic(&self.path, kept.render().as_bytes())?;
        }
        let judged = Judged {
            restored: guarded
                .restored
                .iter()
                .map(|l| format!("{}: {l}", self.rel))
                .collect(),
            ..self.counted(&kept)
        };
        self.pending = Some((kept, claimed));
        Ok(judged)
    }

    /// The agent left `prd.json` unreadable (not JSON, a duplicate key, over the size limit):
    /// the file before the iteration is written back and said, and the story has not passed —
    /// the run goes on, the attempt counted.
    fn put_back(&mut self, why: &str) -> Result<Judged> {
        crate::state::write_atomic(&self.path, self.stories.render().as_bytes())?;
        self.pending = Some((self.stories.clone(), false));
        Ok(Judged {
            restored: vec![format!(
                "{}: unreadable after the agent ({why}): put back as it was",
                self.rel
            )],
            ..self.counted(&self.stories)
        })
    }

    /// The tests have run (`tests_ok`: passed, or there are none): the current story passes
    /// only now, or its `passes` is put back and the attempt counted; ralph's line goes to
    /// `progress.txt`; a run with nothing left to work ends, COMPLETE or PARTIAL.
    pub(crate) fn after_tests(&mut self, judged: Judged, tests_ok: bool) -> Result<Judged> {
        let Some((mut kept, claimed)) = self.pending.take() else {
            return Ok(judged);
        };
        let mut restored = judged.restored.clone();
        let Some((id, attempt)) = self.current.clone() else {
            // Every story passed already: the checks alone were worked.
            self.stories = kept;
            return Ok(Judged {
                restored,
                ..self.finish(judged)
            });
        };
        let passed = claimed && tests_ok;
        if passed {
            kept.set_passes(&id, true);
            crate::state::write_atomic(&self.path, kept.render().as_bytes())?;
        } else if claimed {
            restored.push(format!(
                "{}: story {id}: `passes` put back: the tests failed",
                self.rel
            ));
        }
        let line = if passed {
            format!("story {id}: passed")
        } else {
            self.attempts.insert(id.clone(), attempt);
            let skip = if attempt >= MAX_ATTEMPTS {
                ": skipped"
            } else {
                ""
            };
            format!("story {id}: not yet (attempt {attempt}/{MAX_ATTEMPTS}){skip}")
        };
        let stamped = format!("{} {line}\n", crate::state::now_rfc3339());
        // Never through a link the agent planted (to `prd.json`, say): a link there is replaced
        // by a regular file, anything else odd moved aside (SPEC §4).
        crate::files::open_own(&self.progress_path, true)
            .and_then(|mut f| std::io::Write::write_all(&mut f, stamped.as_bytes()))
            .map_err(|e| Error::user(format!("{}: {e}", self.progress_rel)))?;
        let title = kept.story(&id).map(|s| s.title.clone()).unwrap_or_default();
        self.stories = kept;
        let figures = format!(
            "{}/{} stories, story {id} attempt {attempt}/{MAX_ATTEMPTS}",
            self.stories.passing(),
            self.stories.stories.len()
        );
        Ok(Judged {
            what: passed.then(|| format!("story {id}: {title}")),
            figures: Some(figures),
            restored,
            ..self.finish(judged)
        })
    }

    /// The counts of `stories`, and how the run stands when nothing is left to work.
    fn finish(&self, judged: Judged) -> Judged {
        let counted = self.counted(&self.stories);
        let left = self.stories.next(&self.skipped()).is_some();
        let halt = (!counted.source_complete && !left).then(|| Halt::Partial(self.closing_lines()));
        Judged {
            halt,
            ..Judged {
                done: counted.done,
                total: counted.total,
                source_complete: counted.source_complete,
                ..judged
            }
        }
    }

    fn counted(&self, s: &Stories) -> Judged {
        let (done, total) = (s.passing(), s.stories.len());
        Judged {
            source_complete: done == total,
            ..Judged::counts(done, total)
        }
    }

    /// The stories not passing, skipped ones said so.
    pub(crate) fn remaining(&self) -> Vec<String> {
        let skipped = self.skipped();
        self.stories
            .stories
            .iter()
            .filter(|s| !s.passes)
            .map(|s| {
                let how = if skipped.contains(&s.id) {
                    format!(" (skipped after {MAX_ATTEMPTS} attempts)")
                } else {
                    String::new()
                };
                format!("story {}: {}{how}", s.id, s.title)
            })
            .collect()
    }

    /// The summary of a run that ended with stories skipped.
    pub(crate) fn closing_lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{}/{} stories pass",
            self.stories.passing(),
            self.stories.stories.len()
        )];
        lines.extend(self.remaining());
        lines
    }
}
