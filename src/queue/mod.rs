//! Work from a queue (SPEC §14): a tracker is a source of items behind one small trait — what
//! is ready, claim, close, release — one file per tracker; each item runs as the loop that
//! already exists, in a worktree of its own, on a task file written from the item.

pub(crate) mod beads;
pub(crate) mod github;
mod text;

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
pub(crate) use text::{criteria_of, refusal, task_file, task_items};

/// One item of a tracker, as ralph needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) body: String,
    /// Its acceptance criteria (none: the title is the one criterion).
    pub(crate) criteria: Vec<String>,
}

/// What a claim came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The item is this run's now.
    Ours,
    /// Someone else holds it: take the next.
    Taken,
}

/// A tracker: its ready items in its own order, and what ralph does to one.
pub(crate) trait Tracker {
    /// The source's name, as in `ralph/<source>-<id>` (`beads`, `github`).
    fn source(&self) -> &'static str;
    /// The ready items, in the tracker's order.
    fn ready(&mut self) -> Result<Vec<Item>>;
    fn claim(&mut self, item: &Item) -> Result<Claim>;
    /// Done: ralph's own run completed and merged at `commit`.
    fn close(&mut self, item: &Item, commit: &str) -> Result<()>;
    /// Given back, with why: open again for a person or a later run.
    fn release(&mut self, item: &Item, why: &str) -> Result<()>;
    /// Whether the tracker has pull requests (`--pr` is refused before any claim when not).
    fn has_pull_requests(&self) -> bool {
        false
    }
    /// `--pr`, before anything is pushed: the item marked as having its pull request (so a
    /// later run skips it), no longer claimed.
    fn mark_pr_open(&mut self, _item: &Item) -> Result<()> {
        Err(Error::usage(format!(
            "--pr opens pull requests on GitHub: not with --from {}",
            self.source()
        )))
    }
    /// `--pr`: the pull request from `head` into `base` opened for the item; its URL.
    fn open_pr(&mut self, _item: &Item, _head: &str, _base: &str, _body: &str) -> Result<String> {
        Err(Error::usage(format!(
            "--pr opens pull requests on GitHub: not with --from {}",
            self.source()
        )))
    }
    /// Every item's state (`open`, `in_progress`, `closed`…), to find the changes ralph did
    /// not make; `None` when the tracker cannot list them.
    fn states(&mut self) -> Result<Option<BTreeMap<String, String>>> {
        Ok(None)
    }
    /// Put item `id` back from state `is` to state `was`, saying why.
    fn restore(&mut self, _id: &str, _is: &str, _was: &str, _why: &str) -> Result<()> {
        Ok(())
    }
    /// Files the tracker keeps in the repository and rewrites on every change (beads'
    /// `.beads/`): ralph commits them on the base branch, never on an item's.
    fn own_paths(&self) -> &'static [&'static str] {
        &[]
    }
}

/// `--from SOURCE`: the tracker in the repository at `root`; `origin` is the configured
/// `remote.origin.url` (as written, before any `insteadOf` rewriting), for `github` without
/// `:OWNER/REPO`.
pub(crate) fn open(spec: &str, root: &Path, origin: Option<&str>) -> Result<Box<dyn Tracker>> {
    match spec.split_once(':') {
        None if spec == "beads" => Ok(Box::new(beads::Beads::find(root)?)),
        Some(("github", repo)) => Ok(Box::new(github::GitHub::new(repo)?)),
        None if spec == "github" => {
            let repo = origin.and_then(github::repo_of_url).ok_or_else(|| {
                Error::user(format!(
                    "--from github: remote.origin.url ({}) is not a GitHub repository",
                    origin.unwrap_or("unset")
                ))
                .with_hint("name it: --from github:OWNER/REPO")
            })?;
            Ok(Box::new(github::GitHub::new(&repo)?))
        }
        _ => Err(Error::usage(format!("unknown queue `{spec}`"))
            .with_hint("use --from beads or --from github[:OWNER/REPO]")),
    }
}

/// The loop's name for an item: `<source>-<id>`, each character git refuses in a branch name
/// or a path made a `-`.
pub(crate) fn loop_name(source: &str, id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{source}-{}", id.trim_matches('-'))
}

#[cfg(test)]
mod tests;
