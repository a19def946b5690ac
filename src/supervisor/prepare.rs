//! Phase 1 of an iteration (SPEC §5.1 steps 1–2): what it works, its prompt (saved), its
//! transcript, the agent's invocation, and the tree `git add -A` would stage before the agent.

use std::path::PathBuf;
use std::time::Instant;

use super::Loop;
use super::decide::Counters;
use super::source::PromptCtx;
use crate::error::{Error, Result};
use crate::event::{Event, IterationStarted};
use crate::proc::Invocation;
use crate::state;

/// An iteration ready to run its agent.
pub(super) struct Prepared {
    pub(crate) n: u32,
    pub(crate) started_at: String,
    pub(crate) t0: Instant,
    pub(crate) prompt: String,
    pub(crate) transcript: std::fs::File,
    pub(crate) transcript_path: PathBuf,
    pub(crate) inv: Invocation,
    /// Where the prompt was saved (an agent taking over after a limit gets it again).
    pub(crate) prompt_file: PathBuf,
    pub(crate) head_before: Option<String>,
    /// Lines for the report block, gathered by every phase.
    pub(crate) notes: Vec<String>,
}

impl Loop {
    /// Everything iteration `prev.iteration` needs before its agent starts. Its number is
    /// spent last, once nothing here can fail any more: an error before that ends the run
    /// without using the number (no iteration number without its record, SPEC §5.1).
    pub(super) fn prepare(&mut self, prev: &Counters) -> Result<Prepared> {
        let n = prev.iteration;
        let started_at = state::now_rfc3339();
        let stuck_alert = prev.no_progress_streak >= prev.stuck_threshold;
        self.source.select_next();
        let mut prompt = self.source.prompt(&PromptCtx {
            iteration: n,
            max_iterations: self.setup.settings.max_iterations,
            test_command: self.setup.settings.test_command.as_deref(),
            stuck_alert,
            stuck_streak: prev.no_progress_streak,
            completion_promise: self.setup.settings.completion_promise.as_deref(),
            feedback: self.state.feedback.as_deref(),
        })?;
        // How to ask a person (not for CPM's slash command), then a person's words, once.
        if !matches!(
            self.source.mode(),
            crate::state::Mode::CpmEpic | crate::state::Mode::CpmSpec
        ) {
            prompt.push_str(&self.asking_section());
        }
        let words = self.persons_words(n);
        prompt.push_str(&words.section);
        let run_dir = self.tree.rd.run_dir(&self.state.run_id);
        state::create_private_dir(&run_dir)?;
        let prompt_file = run_dir.join(format!("iter-{n:03}.prompt.md"));
        crate::files::write_own(&prompt_file, prompt.as_bytes())
            .map_err(|e| Error::file("write", &prompt_file, e))?;
        let transcript_path = run_dir.join(format!("iter-{n:03}.log"));
        let transcript = crate::files::open_own(&transcript_path, true)
            .map_err(|e| Error::file("create", &transcript_path, e))?;
        self.state.agent = Some(self.agents.choose(Instant::now()).name.clone());
        let inv = self.invocation(n, &prompt, &prompt_file)?;
        let head_before = self.tree.repo.head()?.map(|c| c.id);
        self.spend(n)?;
        self.clear_words(&words);
        self.announce(n, stuck_alert);
        Ok(Prepared {
            n,
            started_at,
            t0: Instant::now(),
            prompt,
            transcript,
            transcript_path,
            inv,
            prompt_file,
            head_before,
            notes: Vec::new(),
        })
    }

    /// The current agent's invocation for iteration `n`'s prompt.
    pub(super) fn invocation(
        &self,
        n: u32,
        prompt: &str,
        prompt_file: &std::path::Path,
    ) -> Result<Invocation> {
        let mut inv = self.agents.current().invocation(prompt, prompt_file)?;
        inv.env.extend(self.ralph_env(n));
        Ok(inv)
    }

    /// Spend iteration number `n`: `state.json` names it before its agent starts, so a ralph
    /// killed while the agent runs is known to have been in it (`ralph resume` records it).
    fn spend(&mut self, n: u32) -> Result<()> {
        let was = self.state.iteration;
        self.state.iteration = n;
        let saved = self.state.save(&self.tree.rd.state_file());
        if saved.is_err() {
            self.state.iteration = was;
        }
        saved
    }

    fn announce(&mut self, n: u32, stuck_alert: bool) {
        let (done, total) = self.source.counts();
        self.setup.ui.line(&format!(
            "▶ Iteration {n}/{} — {} ({done}/{total} {})",
            self.setup.settings.max_iterations,
            self.agents.current().name,
            self.source.unit()
        ));
        self.emit(Event::IterationStarted(IterationStarted {
            run_id: self.state.run_id.clone(),
            iteration: n,
            agent: self.agents.current().name.clone(),
            max_iterations: self.setup.settings.max_iterations,
            done,
            total,
            stuck_alert,
        }));
    }
}
