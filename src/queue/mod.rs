//! Work from a queue (SPEC §14): a tracker is a source of items behind one small trait — what
//! is ready, claim, close, release — one file per tracker; each item runs as the loop that
//! already exists, in a worktree of its own, on a task file written from the item.

pub(crate) mod beads;
pub(crate) mod github;
pub(crate) mod lease;
mod text;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
pub(crate) use text::{Text, refusal, task_file, text_hash};
#[cfg(test)]
use text::{criteria_of, task_items};

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
    /// Whether standing `is` (as [`Tracker::states`] gives it) is an item someone claimed
    /// (beads: `in_progress`), which a queue that claimed it and died must give back.
    fn claimed(&self, _is: &str) -> bool {
        false
    }
    /// The queue is stopping (SIGTERM, Ctrl-C): faults are tried again only briefly and no rate
    /// limit is waited for, so the items are released within the stop's time.
    fn hurry(&mut self) {}
    /// From now on, hurry (as [`Tracker::hurry`]) as soon as `stop` counts an interrupt, even
    /// in the middle of a request tried again: a stop never waits out a retry budget.
    fn hurry_on(&mut self, _stop: crate::signals::Background) {}
    /// Whether standing `is` (as [`Tracker::states`] gives it) is a person's decision that no
    /// ledger puts back: an issue closed as not planned.
    fn stands(&self, _is: &str) -> bool {
        false
    }
    /// Put item `id` back from state `is` to state `was`, saying why.
    fn restore(&mut self, _id: &str, _is: &str, _was: &str, _why: &str) -> Result<()> {
        Ok(())
    }
    /// Each open item's text as the last [`Tracker::states`] read it (taken: the next call
    /// gives the next read's); `None` when the tracker cannot list them.
    fn texts(&mut self) -> Option<BTreeMap<String, Text>> {
        None
    }
    /// Put item `id`'s text back from `is` to `was` (the fields that differ), saying why.
    fn restore_text(&mut self, _id: &str, _is: &Text, _was: &Text, _why: &str) -> Result<()> {
        Ok(())
    }
    /// Files the tracker keeps in the repository and rewrites on every change (beads'
    /// `.beads/`): ralph commits them on the base branch, never on an item's.
    fn own_paths(&self) -> &'static [&'static str] {
        &[]
    }
    /// Whether workers on other machines share the tracker's items (SPEC §15): claims are then
    /// leases on `origin`, and results are published there before an item is closed.
    fn shared(&self) -> bool {
        false
    }
    /// The tracker, as its items' leases name it: `github:O/R` (items of two trackers may have
    /// the same id).
    fn name(&self) -> String {
        self.source().to_string()
    }
    /// The clock a shared tracker keeps (its own, as its answers say): the team's.
    fn clock(&self) -> Option<lease::Clock> {
        None
    }
    /// `--pr`: the open pull request from `head`, if there is one (a pull request opened whose
    /// answer was lost is found, never opened twice).
    fn find_pr(&mut self, _head: &str) -> Result<Option<String>> {
        Ok(None)
    }
    /// The item as the tracker has it now, for the steps that must not undo a person's
    /// decision: closed as not planned, or gone.
    fn now(&mut self, _item: &Item) -> Result<Now> {
        Ok(Now::Open)
    }
    /// Where item `item`'s loop also asks a person when it waits for one, and reads the reply
    /// (GitHub: a comment on the issue); `None`: only at the desk (`ralph answer`, the web view).
    fn person_there(&self, _item: &Item) -> Option<std::sync::Arc<dyn crate::person::Elsewhere>> {
        None
    }
}

/// An item as the tracker has it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Now {
    Open,
    /// Closed as completed (by ralph, or a person who did the work).
    Completed,
    /// Closed by a person as not planned: that stands.
    NotPlanned,
    /// Deleted (or moved away).
    Gone,
}

/// `--from SOURCE`: the tracker in the repository at `root`; `origin` is the configured
/// `remote.origin.url` (as written, before any `insteadOf` rewriting), for `github` without
/// `:OWNER/REPO`; `max_wait` the run's waiting budget, for a tracker's rate limits.
pub(crate) fn open(
    spec: &str,
    root: &Path,
    origin: Option<&str>,
    max_wait: Duration,
) -> Result<Box<dyn Tracker>> {
    match spec.split_once(':') {
        None if spec == "beads" => Ok(Box::new(beads::Beads::find(root)?)),
        Some(("github", repo)) => Ok(Box::new(github::GitHub::new(repo, max_wait)?)),
        None if spec == "github" => {
            let repo = origin.and_then(github::repo_of_url).ok_or_else(|| {
                Error::user(format!(
                    "--from github: remote.origin.url ({}) is not a GitHub repository",
                    origin.unwrap_or("unset")
                ))
                .with_hint("name it: --from github:OWNER/REPO")
            })?;
            Ok(Box::new(github::GitHub::new(&repo, max_wait)?))
        }
        _ => Err(Error::usage(format!("unknown queue `{spec}`"))
            .with_hint("use --from beads or --from github[:OWNER/REPO]")),
    }
}

/// The loop's name for an item: `<source>-<id>`, one-to-one (SPEC §14: two items never share a
/// task file or a branch). Letters, digits and `-` stay; every other byte of the id — `_`
/// included, which starts the escape — is written `_hh` (its hex), so `x/1` is `x_2f1` and never
/// `x-1`. A name past a worktree name's 64 characters keeps its first 40 and adds `_h` and 16
/// hex digits of the id's git blob hash (the work is told apart by that).
pub(crate) fn loop_name(source: &str, id: &str) -> String {
    let mut escaped = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            escaped.push(char::from(b));
        } else {
            escaped.push_str(&format!("_{b:02x}"));
        }
    }
    let name = format!("{source}-{escaped}");
    if name.len() <= 64 {
        return name;
    }
    let digest = git2::Oid::hash_object(git2::ObjectType::Blob, id.as_bytes())
        .map_or_else(|_| "0".repeat(16), |o| o.to_string());
    // The escaped name is ASCII: any byte is a character boundary.
    format!("{}_h{}", &name[..40], &digest[..16])
}

#[cfg(test)]
mod tests;
