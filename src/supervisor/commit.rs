//! Committing (SPEC §8): every ralph commit goes through the commit guard and the repository's
//! hooks; an iteration commits only when its agent changed something, and ralph's own
//! bookkeeping rides along, never alone.

use super::Loop;
use super::prepare::Prepared;
use crate::config::Settings;
use crate::error::Result;
use crate::git::{CommitOutcome, Repo};
use crate::state::{self, RalphDir};
use crate::ui::Ui;

pub const FALLBACK_IDENTITY_WARNING: &str =
    "no git identity configured (user.name/user.email): committing as `ralph <ralph@localhost>`";

static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a guarded commit came to.
#[derive(Debug, Default)]
pub struct Guarded {
    /// The commit made, if any (none when nothing was staged or a hook refused).
    pub outcome: Option<CommitOutcome>,
    /// What the refusing hook said: the changes stay staged.
    pub refused: Option<String>,
}

/// Commit like `git add -A && git commit`, through the commit guard and (unless `no_verify`)
/// the repository's hooks. What the guard left out, or a hook's refusal, is logged to the
/// activity log and shown; a refused commit leaves the changes staged and the loop goes on.
pub fn guarded_commit(
    repo: &mut Repo,
    settings: &Settings,
    ui: Ui,
    rd: &RalphDir,
    message: &str,
    staged_plus: Option<&[&str]>,
) -> Result<Guarded> {
    let max = settings.max_file_size;
    let exclude = move |rel: &str, abs: &std::path::Path| crate::guard::check(rel, abs, max);
    let hooks_dir = crate::hooks::hooks_dir(repo.git2(), repo.root());
    let git_dir = repo.git2().path().to_path_buf();
    let run_hooks =
        move |root: &std::path::Path, msg: &str| crate::hooks::run(root, &hooks_dir, &git_dir, msg);
    let hooks: Option<&crate::git::HookRunner> = (!settings.no_verify).then_some(&run_hooks as _);
    let report = match staged_plus {
        Some(also) => repo.commit_staged_with(message, also, &exclude, hooks)?,
        None => repo.commit_with(message, &exclude, hooks)?,
    };
    let log = |line: &str| {
        state::append_line(
            &rd.activity_log(),
            &format!("[{}] {line}", state::now_rfc3339()),
        )
    };
    for (path, why) in &report.left_out {
        ui.warn(&format!("left `{path}` out of the commit: {why}"));
        log(&format!(
            "Commit guard: left {path} out of the commit ({why})"
        ))?;
    }
    if let Some(failure) = &report.hook_failure {
        ui.warn(&format!("{failure}: the changes stay uncommitted (staged)"));
        log(&format!("Commit refused: {failure}"))?;
    }
    if let Some(out) = &report.outcome
        && out.used_fallback_identity
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        ui.warn(FALLBACK_IDENTITY_WARNING);
    }
    Ok(Guarded {
        outcome: report.outcome,
        refused: report.hook_failure,
    })
}

/// `subject`, a blank line, and the trailers.
pub fn commit_message(subject: &str, n: u32, run_id: &str) -> String {
    format!("{subject}\n\nRalph-Iteration: {n}\nRalph-Run: {run_id}\n")
}

/// What committing an iteration came to.
pub(super) struct IterationCommit {
    /// The subject of the commit holding the iteration's work (ralph's, or the agent's own).
    pub subject: Option<String>,
    /// Short HEAD afterwards, or `no-commit`.
    pub head: String,
    /// A hook refused the commit: what it said.
    pub refused: Option<String>,
}

/// How the iteration's commit is named.
pub(super) enum Subject {
    /// `ralph: iteration N — {what}`: the first newly checked item, else the agent's own last
    /// commit subject, else `no criteria completed`.
    Work(Option<String>),
    /// `ralph: iteration N (interrupted)`, `(budget reached)`, `(halted: error)`: an iteration
    /// that ended before it was judged.
    Stopped(&'static str),
}

impl Loop {
    /// Update the progress file's status block and commit the iteration when the agent changed
    /// something (its bookkeeping riding along).
    pub(super) fn commit_iteration(
        &mut self,
        prep: &Prepared,
        subject: Subject,
        status: (&str, usize, usize),
    ) -> Result<IterationCommit> {
        let n = prep.n;
        // The agent changed something when the tree `git add -A` would stage now differs from
        // the one before it ran; ralph's own bookkeeping is written after this comparison.
        // Staged once: this index is what gets committed (plus the status block below).
        let agent_changed = match prep.tree_before {
            Some(before) => self.repo.stage_all()?.tree != before,
            None => false,
        };
        if prep.tree_before.is_some() && !agent_changed {
            self.repo.reload_index()?;
        }
        self.write_status_block(n, status)?;
        let head_before = prep.head_before.as_deref();
        let agents_own = self
            .repo
            .head()?
            .filter(|h| Some(h.id.as_str()) != head_before)
            .map(|h| h.summary);
        let mut out = IterationCommit {
            subject: agents_own.clone(),
            head: String::new(),
            refused: None,
        };
        if agent_changed {
            let subject = match subject {
                Subject::Stopped(why) => format!("ralph: iteration {n} ({why})"),
                Subject::Work(what) => {
                    let what = what
                        .or(agents_own)
                        .unwrap_or_else(|| "no criteria completed".to_string());
                    format!("ralph: iteration {n} — {what}")
                }
            };
            let message = commit_message(&subject, n, &self.state.run_id);
            let progress_rel = format!("{}/progress.md", state::DIR);
            let g = guarded_commit(
                &mut self.repo,
                &self.settings,
                self.ui,
                &self.rd,
                &message,
                Some(&[progress_rel.as_str()]),
            )?;
            if let Some(c) = g.outcome {
                out.subject = Some(c.commit.summary);
            }
            out.refused = g.refused;
        }
        out.head = self
            .repo
            .head()?
            .map_or_else(|| "no-commit".to_string(), |h| h.short);
        Ok(out)
    }

    /// Ralph's Current Status block in `.ralph/progress.md` (bookkeeping: never committed alone).
    fn write_status_block(&self, n: u32, status: (&str, usize, usize)) -> Result<()> {
        let (status_text, done, total) = status;
        let path = self.rd.progress();
        let current = crate::files::read_text_if_exists(&path)
            .ok()
            .flatten()
            .unwrap_or_default();
        let block = state::status_block(n, done, total, status_text);
        let updated = state::with_status_block(&current, &block);
        if updated != current {
            state::write_atomic(&path, updated.as_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_message_has_trailers() {
        assert_eq!(
            commit_message("ralph: iteration 2 — x", 2, "r1"),
            "ralph: iteration 2 — x\n\nRalph-Iteration: 2\nRalph-Run: r1\n"
        );
    }
}
