//! Committing (SPEC §8): every ralph commit goes through the commit guard and the repository's
//! hooks; an iteration commits only when its agent changed something, and ralph's own
//! bookkeeping rides along, never alone.

use super::Tree;
use super::faults::Faults;
use super::prepare::Prepared;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::git::{CommitOutcome, Repo};
use crate::iter_record::UNKNOWN;
use crate::state::{self, RalphDir};
use crate::task::status_block;
use crate::ui::Ui;

pub(crate) const FALLBACK_IDENTITY_WARNING: &str =
    "no git identity configured (user.name/user.email): committing as `ralph <ralph@localhost>`";

static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a guarded commit came to.
#[derive(Debug, Default)]
pub(crate) struct Guarded {
    /// The commit made, if any (none when nothing was staged or a hook refused).
    pub(crate) outcome: Option<CommitOutcome>,
    /// What the refusing hook said: the changes stay staged.
    pub(crate) refused: Option<String>,
}

/// Commit like `git add -A && git commit`, through the commit guard and (unless `no_verify`)
/// the repository's hooks. What the guard left out, or a hook's refusal, is logged to the
/// activity log and shown; a refused commit leaves the changes staged and the loop goes on.
pub(crate) fn guarded_commit(
    repo: &mut Repo,
    settings: &Settings,
    ui: Ui,
    rd: &RalphDir,
    message: &str,
) -> Result<Guarded> {
    let hooks = hooks(repo, settings);
    let report = repo.commit_with(message, &guard(settings), hooks.as_deref())?;
    tell(ui, rd, &report.left_out, report.hook_failure.as_deref());
    if let Some(out) = &report.outcome {
        warn_fallback(ui, out);
        if hooks.is_some() {
            commit_what_hooks_left(repo, settings, ui, rd, message);
        }
    }
    Ok(Guarded {
        outcome: report.outcome,
        refused: report.hook_failure,
    })
}

/// The fallback identity's warning, once per run.
fn warn_fallback(ui: Ui, out: &CommitOutcome) {
    if out.used_fallback_identity && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        ui.warn(FALLBACK_IDENTITY_WARNING);
    }
}

/// After a commit whose hooks ran: a `pre-commit` hook may edit the tree as it runs (a
/// formatter), and the commit holds the index as it was staged, so the tree is dirty right
/// after it. What the hooks left is staged and committed once more, as the same message with
/// `(what its hooks left)` after its subject, through the guard and the hooks again; what those
/// leave stays in the tree, and the status taken after it (the fingerprint) holds it, as it
/// does when this commit cannot be made (said and logged).
fn commit_what_hooks_left(
    repo: &mut Repo,
    settings: &Settings,
    ui: Ui,
    rd: &RalphDir,
    message: &str,
) {
    let (subject, rest) = message.split_once('\n').unwrap_or((message, ""));
    let message = format!("{subject} (what its hooks left)\n{rest}");
    let line = match commit_left_by_hooks(repo, settings, ui, rd, &message) {
        Ok(None) => return,
        Ok(Some(line)) => line,
        Err(e) => {
            let line = format!(
                "what the commit's hooks left in the tree is not committed: {}",
                super::faults::chain(&e)
            );
            ui.warn(&line);
            line
        }
    };
    super::log_activity(ui, rd, &line);
}

/// Stage and commit what the hooks left; the activity line saying so, `None` when they left
/// nothing.
fn commit_left_by_hooks(
    repo: &mut Repo,
    settings: &Settings,
    ui: Ui,
    rd: &RalphDir,
    message: &str,
) -> Result<Option<String>> {
    let staged = repo.stage_all(&guard(settings))?;
    if staged.changed.is_empty() {
        return Ok(None);
    }
    let report = repo.commit_staged(message, hooks(repo, settings).as_deref())?;
    tell(ui, rd, &[], report.hook_failure.as_deref());
    let paths = super::final_walk::shown(&staged.changed);
    Ok(Some(match report.outcome {
        Some(out) => {
            warn_fallback(ui, &out);
            format!(
                "The commit's hooks left {paths} changed: committed as {} ({})",
                out.commit.short, out.commit.summary
            )
        }
        None => format!("The commit's hooks left {paths} changed: not committed"),
    }))
}

/// The commit guard as the git layer takes it.
pub(super) fn guard(
    settings: &Settings,
) -> impl Fn(&str, &std::path::Path) -> Option<String> + use<> {
    let max = settings.max_file_size;
    move |rel: &str, abs: &std::path::Path| crate::guard::check(rel, abs, max)
}

/// The repository's hooks, unless `--no-verify` or there are none.
/// Under `--sandbox`, the agent's own git directory.
fn agent_git(settings: &Settings) -> Option<&crate::sandbox::agent_git::AgentGit> {
    settings.sandboxed.as_deref().and_then(|s| s.agent_git())
}

fn hooks(repo: &Repo, settings: &Settings) -> Option<Box<crate::git::HookRunner>> {
    if settings.no_verify {
        return None;
    }
    let hooks_dir = crate::hooks::hooks_dir(repo);
    if !crate::hooks::any(&hooks_dir) {
        return None;
    }
    let git_dir = repo.git2().path().to_path_buf();
    let at = match agent_git(settings) {
        Some(a) => a.message_dir(),
        None => crate::hooks::MessageDir {
            dir: git_dir.clone(),
            shown: git_dir,
        },
    };
    // The repository's hooks run on its say: in the sandbox under `--sandbox`.
    let settings = settings.clone();
    let confine = move |inv| settings.confine(inv, true);
    let stop = repo.stop();
    Some(Box::new(move |root: &std::path::Path, msg: &str| {
        crate::hooks::run(root, &hooks_dir, &at, msg, &confine, stop.as_ref())
    }))
}

/// Show and log what was left out of a commit and a hook's refusal.
fn tell(ui: Ui, rd: &RalphDir, left_out: &[(String, String)], refused: Option<&str>) {
    for (path, why) in left_out {
        ui.warn(&format!("left `{path}` out of the commit: {why}"));
        super::log_activity(
            ui,
            rd,
            &format!("Commit guard: left {path} out of the commit ({why})"),
        );
    }
    if let Some(failure) = refused {
        ui.warn(&format!("{failure}: the changes stay uncommitted (staged)"));
        super::log_activity(ui, rd, &format!("Commit refused: {failure}"));
    }
}

/// `subject`, a blank line, and the trailers.
pub(crate) fn commit_message(subject: &str, n: u32, run_id: &str) -> String {
    format!("{subject}\n\nRalph-Iteration: {n}\nRalph-Run: {run_id}\n")
}

/// What committing an iteration came to.
pub(super) struct IterationCommit {
    /// The subject of the commit holding the iteration's work (ralph's, or the agent's own).
    pub(crate) subject: Option<String>,
    /// Short HEAD afterwards, or `no-commit`.
    pub(crate) head: String,
    /// A hook refused the commit: what it said.
    pub(crate) refused: Option<String>,
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

/// What committing an iteration needs, and nothing more: the work tree, the settings, where to
/// tell what happened, and the run's id for the trailers.
pub(super) struct Committer<'a> {
    pub(crate) tree: &'a mut Tree,
    pub(crate) settings: &'a Settings,
    pub(crate) ui: Ui,
    pub(crate) run_id: &'a str,
}

impl Committer<'_> {
    /// Write the progress file's status block, stage like `git add -A`, and commit the
    /// iteration when the agent changed something (its bookkeeping riding along). A step that
    /// fails is noted in `faults` and the ones after it still run: git refusing to stage (an
    /// `index.lock` still held after a brief wait, a merge or another operation in progress,
    /// conflicts) leaves the index and the tree exactly as the agent left them.
    pub(super) fn commit_iteration(
        &mut self,
        prep: &Prepared,
        subject: Subject,
        status: (&str, usize, usize),
        faults: &mut Faults,
    ) -> IterationCommit {
        let n = prep.n;
        // Written first, so one `git add` stages it with the agent's work and git sees no
        // change of the work tree between the commit and the fingerprint.
        self.keep_ignoring(n);
        let block = self.write_status_block(n, status);
        faults.or(
            block,
            format_args!("iteration {n}'s status block is not written"),
            (),
        );
        let mut out = IterationCommit {
            subject: None,
            head: String::new(),
            refused: None,
        };
        if let Err(e) = self.commit_left(prep, subject, &mut out) {
            faults.note(format_args!("iteration {n}'s work is not committed"), &e);
        }
        let head = self.tree.repo.head().map_err(Error::from);
        out.head = faults.or(
            head.map(|h| h.map_or_else(|| "no-commit".to_string(), |h| h.short)),
            "HEAD cannot be read",
            UNKNOWN.to_string(),
        );
        out
    }

    /// The agent's own commit, then (unless `--no-commit`) ralph's commit of what is left.
    fn commit_left(
        &mut self,
        prep: &Prepared,
        subject: Subject,
        out: &mut IterationCommit,
    ) -> Result<()> {
        let n = prep.n;
        let head_now = self.tree.repo.head()?;
        let agents_own = head_now
            .as_ref()
            .filter(|h| Some(h.id.as_str()) != prep.head_before.as_deref())
            .map(|h| h.summary.clone());
        out.subject = agents_own.clone();
        if self.settings.no_commit {
            return Ok(());
        }
        // HEAD is the agent's to move: whatever it did, ralph commits onto the loop's own
        // branch or not at all (issue 29).
        self.tree.repo.check_own_head()?;
        // Under --sandbox, a merge (rebase…) the agent left under way in its own git directory
        // would have its conflicts committed: the tree is left as it is, as in the repository's.
        if let Some(what) = agent_git(self.settings).and_then(|a| a.in_progress()) {
            return Err(Error::user(format!(
                "the agent left a {what} in progress in its git directory (under --sandbox, its own): its work is left uncommitted in the tree"
            ))
            .with_hint("look at the tree (conflict markers), then `ralph resume`: the next attempt starts from ralph's last commit"));
        }
        // ralph's bookkeeping alone is not staged: an iteration that changed nothing else writes
        // no index (issue 32).
        let alone: Vec<String> = [".gitignore", "progress.md", "guardrails.md"]
            .iter()
            .map(|n| format!("{}/{n}", state::DIR))
            .filter(|p| self.is_bookkeeping(p))
            .collect();
        let staged = self
            .tree
            .repo
            .stage_unless_only(&guard(self.settings), &alone)?;
        // The agent's change is what the staged tree changes from HEAD's (whoever staged it),
        // less ralph's bookkeeping (read once, above; `.ralph/` itself is named only when all
        // it holds is that): a change undone, or staged and restored, is none.
        let own_dir = format!("{}/", state::DIR);
        let mut worked = staged
            .changed
            .iter()
            .filter(|p| !alone.contains(p) && **p != own_dir);
        if worked.next().is_none() {
            tell(self.ui, &self.tree.rd, &staged.left_out, None);
            // The run ends with this iteration: its bookkeeping, which never goes alone into a
            // commit, is put back as HEAD has it rather than left staged in the user's index.
            if matches!(subject, Subject::Stopped(_)) {
                self.tree.repo.put_back(&staged.changed)?;
            }
            return Ok(());
        }
        let subject = match subject {
            Subject::Stopped(why) => format!("ralph: iteration {n} ({why})"),
            Subject::Work(what) => {
                let what = what
                    .or(agents_own)
                    .unwrap_or_else(|| "no criteria completed".to_string());
                format!("ralph: iteration {n} — {what}")
            }
        };
        self.commit_work(&subject, n, &staged.left_out, out)
    }

    fn commit_work(
        &mut self,
        subject: &str,
        n: u32,
        left_out: &[(String, String)],
        out: &mut IterationCommit,
    ) -> Result<()> {
        let message = commit_message(subject, n, self.run_id);
        let runner = hooks(&self.tree.repo, self.settings);
        // The hooks run in the sandbox on the agent's git directory: made afresh now (its
        // commits were taken), they see ralph's HEAD and what ralph staged.
        if let Some(a) = agent_git(self.settings).filter(|_| runner.is_some()) {
            a.reset()?;
        }
        let report = self.tree.repo.commit_staged(&message, runner.as_deref())?;
        tell(
            self.ui,
            &self.tree.rd,
            left_out,
            report.hook_failure.as_deref(),
        );
        out.refused = report.hook_failure;
        let Some(c) = report.outcome else {
            return Ok(());
        };
        warn_fallback(self.ui, &c);
        out.subject = Some(c.commit.summary);
        if hooks(&self.tree.repo, self.settings).is_some() {
            let rd = &self.tree.rd;
            commit_what_hooks_left(&mut self.tree.repo, self.settings, self.ui, rd, &message);
        }
        Ok(())
    }

    /// Whether a changed path is ralph's bookkeeping, not the agent's work: `.ralph/.gitignore`,
    /// the progress file when only its status block differs from HEAD's, and an untouched
    /// guardrails scaffold.
    fn is_bookkeeping(&self, path: &str) -> bool {
        let rel = |name: &str| format!("{}/{name}", state::DIR);
        if path == rel(".gitignore") || path == format!("{}/", state::DIR) {
            return true;
        }
        let now = |p: &std::path::Path| {
            crate::files::read_own_text(self.tree.repo.root(), p).unwrap_or_default()
        };
        let head = |name: &str| {
            self.tree
                .repo
                .head_file(&rel(name))
                .ok()
                .flatten()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        if path == rel("progress.md") {
            let was = head("progress.md").unwrap_or_else(|| state::initial_progress(0));
            return status_block::without_status_block(&now(&self.tree.rd.progress()))
                == status_block::without_status_block(&was);
        }
        if path == rel("guardrails.md") {
            return head("guardrails.md").is_none()
                && now(&self.tree.rd.guardrails()) == state::GUARDRAILS;
        }
        false
    }

    /// `.ralph/.gitignore` with ralph's lines last again (`RalphDir::keep_ignoring`), said in
    /// the activity log; a failure to write it is said too, and changes nothing else: ralph's
    /// staging leaves its runtime files out by itself.
    fn keep_ignoring(&self, n: u32) {
        let line = match self.tree.rd.keep_ignoring() {
            Ok(false) => return,
            Ok(true) => format!(
                "Iteration {n}: .ralph/.gitignore no longer ended with ralph's lines: they are put back last, so git ignores ralph's runtime files again"
            ),
            Err(e) => format!(
                "Iteration {n}: .ralph/.gitignore cannot be put back ({}): ralph's runtime files may show as untracked",
                super::faults::chain(&e)
            ),
        };
        super::log_activity(self.ui, &self.tree.rd, &line);
    }

    /// Ralph's Current Status block in `.ralph/progress.md` (bookkeeping: never committed alone).
    fn write_status_block(&self, n: u32, status: (&str, usize, usize)) -> Result<()> {
        let (status_text, done, total) = status;
        let path = self.tree.rd.progress();
        let current = crate::files::read_own_text(self.tree.repo.root(), &path).unwrap_or_default();
        let block = status_block::status_block(n, done, total, status_text);
        let updated = status_block::with_status_block(&current, &block);
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
