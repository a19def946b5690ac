//! Under `--sandbox`, what the agent committed, taken into ralph's repository through git's own
//! protocol (issue 29): `git fetch` of the agent's `HEAD`, its sending side (`git upload-pack`)
//! run inside the sandbox on the agent's own git directory, the pack checked as it arrives
//! (`transfer.fsckObjects`), no replace object believed. ralph's git never opens a directory the
//! agent wrote. The loop's branch then moves to the agent's commit only when that commit
//! descends from the branch's tip: the agent adds history, it never rewrites ralph's.

use std::path::Path;

use git2::Oid;

use super::{GitError, Repo};

/// What became of the agent's commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The agent's `HEAD` is where ralph's branch is (or it has none).
    Nothing,
    /// The branch moved on to the agent's commit (`from` → `to`).
    Forwarded { from: Option<String>, to: String },
    /// The agent's `HEAD` does not descend from the branch's tip (a reset, an amend of
    /// ralph's commit): its commits are not taken; the work tree is committed as always.
    NotDescendant { commit: String },
}

impl Repo {
    /// Fetch the agent's `HEAD` through `upload_pack` (a shell command: the sandbox's `git
    /// upload-pack`, which is given `url`) and move the branch on to it when it descends from
    /// the branch's tip.
    pub(crate) fn take_agents_commits(
        &self,
        upload_pack: &str,
        url: &Path,
    ) -> Result<Taken, GitError> {
        let git = self.git.for_fetch();
        let url = url.to_string_lossy();
        let args = [
            "-c",
            "transfer.fsckObjects=true",
            "-c",
            "fetch.fsckObjects=true",
            "-c",
            "fetch.writeCommitGraph=false",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-recurse-submodules",
            "--no-auto-maintenance",
            "--upload-pack",
            upload_pack,
            "--",
            &url,
            "HEAD",
        ];
        let out = git.output(&args, None)?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            // An agent whose HEAD names no commit committed nothing.
            if said.contains("couldn't find remote ref") {
                return Ok(Taken::Nothing);
            }
            return Err(GitError::Cli {
                command: "git fetch (the agent's commits)".into(),
                message: said.trim().to_string(),
            });
        }
        let fetched = fetched_head(&self.repo.path().join("FETCH_HEAD"))?;
        self.forward_to(fetched)
    }

    /// Move the branch `HEAD` names on to `to` when `to` descends from its tip.
    fn forward_to(&self, to: Oid) -> Result<Taken, GitError> {
        let tip = self.head_commit()?.map(|c| c.id());
        if tip == Some(to) {
            return Ok(Taken::Nothing);
        }
        if let Some(tip) = tip
            && !self.repo.graph_descendant_of(to, tip)?
        {
            return Ok(Taken::NotDescendant {
                commit: to.to_string(),
            });
        }
        self.writing(|r| {
            let head = r.find_reference("HEAD")?;
            let msg = "ralph: the agent's commits";
            match (head.symbolic_target().ok().flatten(), tip) {
                (Some(branch), Some(tip)) => r.reference_matching(branch, to, true, tip, msg),
                (Some(branch), None) => r.reference(branch, to, false, msg),
                (None, _) => {
                    r.set_head_detached(to)?;
                    r.find_reference("HEAD")
                }
            }
            .map(|_| ())
        })?;
        Ok(Taken::Forwarded {
            from: tip.map(|t| t.to_string()),
            to: to.to_string(),
        })
    }
}

/// The commit on `FETCH_HEAD`'s first line (ralph's own file, in its git directory).
fn fetched_head(file: &Path) -> Result<Oid, GitError> {
    let text = std::fs::read_to_string(file).map_err(|e| GitError::Cli {
        command: "git fetch (the agent's commits)".into(),
        message: format!("{} cannot be read: {e}", file.display()),
    })?;
    let hex: String = text.chars().take_while(char::is_ascii_hexdigit).collect();
    Ok(Oid::from_str(&hex)?)
}
