//! Commits (SPEC §8): the index git staged becomes a commit through libgit2, after the
//! repository's hooks (run by ralph, since libgit2 runs none) had their say.

use std::path::Path;

use git2::Signature;

use super::{
    CommitOutcome, CommitReport, GitError, HookRunner, Identity, Repo, commit_info, head_commit_of,
};

impl Repo {
    /// Stage like `git add -A` (less what `exclude` keeps out) and commit with the hooks.
    pub(crate) fn commit_with(
        &mut self,
        message: &str,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        hooks: Option<&HookRunner>,
    ) -> Result<CommitReport, GitError> {
        let staged = self.stage_all(exclude)?;
        let mut report = self.commit_staged(message, hooks)?;
        report.left_out = staged.left_out;
        Ok(report)
    }

    /// `git add -A && git commit -m message` without hooks or guard: `None` when nothing
    /// changed.
    pub fn commit_all(&mut self, message: &str) -> Result<Option<CommitOutcome>, GitError> {
        Ok(self.commit_with(message, &|_, _| None, None)?.outcome)
    }

    /// Stage `paths` as `git add -A -- PATHS` does (those that exist) and commit when the
    /// index then differs from HEAD, without hooks: ralph's commits of the files a tool keeps
    /// in the repository (a tracker's), never an agent's work.
    pub(crate) fn commit_paths(
        &mut self,
        paths: &[&str],
        message: &str,
    ) -> Result<Option<CommitOutcome>, GitError> {
        self.check_state()?;
        let literal: Vec<String> = paths
            .iter()
            .filter(|p| self.root().join(p).exists())
            .map(|p| format!(":(literal){p}"))
            .collect();
        if literal.is_empty() {
            return Ok(None);
        }
        let mut args = vec!["add", "-A", "--"];
        args.extend(literal.iter().map(String::as_str));
        self.git.run(&args, None)?;
        Ok(self.commit_staged(message, None)?.outcome)
    }

    /// Put `paths` back as HEAD has them: out of the index (`git reset -- PATHS`), and in the
    /// work tree those HEAD holds (`git checkout -- PATHS`); one HEAD lacks stays as an untracked
    /// file. What ralph staged of its own bookkeeping, undone when nothing rides with it.
    pub(crate) fn put_back(&self, paths: &[String]) -> Result<(), GitError> {
        if paths.is_empty() {
            return Ok(());
        }
        let literal = |p: &String| format!(":(literal){p}");
        let all: Vec<String> = paths.iter().map(literal).collect();
        let mut args = vec!["reset", "-q", "--"];
        args.extend(all.iter().map(String::as_str));
        self.git.run(&args, None)?;
        let mut held = Vec::new();
        for p in paths {
            if self.head_file(p)?.is_some() {
                held.push(literal(p));
            }
        }
        if held.is_empty() {
            return Ok(());
        }
        let mut args = vec!["checkout", "-q", "--"];
        args.extend(held.iter().map(String::as_str));
        self.git.run(&args, None).map(|_| ())
    }

    /// Commit the index as it is on disk, when its tree differs from HEAD's (the first commit
    /// on an unborn branch when it holds anything): the hooks run first (they see the staged
    /// index and may refuse, or rewrite the message, or stage more).
    pub(crate) fn commit_staged(
        &mut self,
        message: &str,
        hooks: Option<&HookRunner>,
    ) -> Result<CommitReport, GitError> {
        let identity = self.identity();
        self.commit_staged_as(message, hooks, &identity)
    }

    /// `git add -A && git commit` as `identity`, without hooks or guard.
    #[cfg(test)]
    pub(crate) fn commit_all_as(
        &mut self,
        message: &str,
        identity: &Identity,
    ) -> Result<Option<CommitOutcome>, GitError> {
        self.stage_all(&|_, _| None)?;
        Ok(self.commit_staged_as(message, None, identity)?.outcome)
    }

    fn commit_staged_as(
        &mut self,
        message: &str,
        hooks: Option<&HookRunner>,
        identity: &Identity,
    ) -> Result<CommitReport, GitError> {
        self.check_state()?;
        self.check_own_head()?;
        let parent = head_commit_of(&self.repo)?;
        let tree = self.index_tree()?;
        let unchanged = match &parent {
            Some(c) => c.tree_id() == tree,
            // An unborn branch commits a non-empty index only, as git does.
            None => tree == self.writing(|r| r.treebuilder(None)?.write())?,
        };
        let mut report = CommitReport {
            outcome: None,
            left_out: Vec::new(),
            hook_failure: None,
        };
        if unchanged {
            return Ok(report);
        }
        // Validate the identity before anything runs.
        Signature::now(&identity.author_name, &identity.author_email)?;
        Signature::now(&identity.committer_name, &identity.committer_email)?;
        let mut message = message.to_string();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        if let Some(run_hooks) = hooks {
            let ran = run_hooks(&self.root, &message);
            // The hooks are the repository's code: what they did to the configuration counts
            // from the next status on (the fingerprint's).
            self.reload_config();
            match ran {
                Ok(m) => message = m,
                Err(failure) => {
                    // Like git: the changes stay staged, nothing is committed.
                    report.hook_failure = Some(failure);
                    return Ok(report);
                }
            }
        }
        // A hook may have staged more (a formatter, say): commit the index as it is now. The
        // hooks are the repository's code: HEAD is checked again.
        self.check_own_head()?;
        let tree = self.index_tree()?;
        let parents: Vec<git2::Oid> = parent.iter().map(git2::Commit::id).collect();
        self.unlink_planted_reflogs();
        let oid = self.writing(|r| {
            let tree = r.find_tree(tree)?;
            let parents = parents
                .iter()
                .map(|p| r.find_commit(*p))
                .collect::<Result<Vec<_>, _>>()?;
            let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
            let author = Signature::now(&identity.author_name, &identity.author_email)?;
            let committer = Signature::now(&identity.committer_name, &identity.committer_email)?;
            let summary = message.lines().next().unwrap_or_default();
            let oid = r.commit(None, &author, &committer, &message, &tree, &parents)?;
            super::own::advance(r, oid, parents.first().map(|p| p.id()), summary)?;
            Ok(oid)
        })?;
        let commit = self.repo.find_commit(oid)?;
        report.outcome = Some(CommitOutcome {
            commit: commit_info(&commit),
            used_fallback_identity: identity.used_fallback,
        });
        Ok(report)
    }

    /// libgit2 appends to the reflogs of HEAD and of the branch through whatever is at their
    /// paths, and the git directory is the agent's to write (also under `--sandbox`): a reflog,
    /// or a directory on its way, that is a symlink is the agent's — the link goes (never what
    /// it points to) and the reflog starts afresh, so ralph's commit subject (whose words can be
    /// the agent's) never lands in a file outside the repository.
    fn unlink_planted_reflogs(&self) {
        let mut logs = vec![(self.repo.path().to_path_buf(), "logs/HEAD".to_string())];
        if let Ok(head) = self.repo.find_reference("HEAD")
            && let Ok(Some(target)) = head.symbolic_target()
        {
            logs.push((
                self.repo.commondir().to_path_buf(),
                format!("logs/{target}"),
            ));
        }
        for (base, rel) in logs {
            let mut p = base;
            for part in rel.split('/') {
                p.push(part);
                match std::fs::symlink_metadata(&p) {
                    Ok(m) if m.file_type().is_symlink() => {
                        let _ = std::fs::remove_file(&p);
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
    }
}
