//! Work from a queue (SPEC §14): a tracker is a source of items behind one small trait — what
//! is ready, claim, close, release — one file per tracker; each item runs as the loop that
//! already exists, in a worktree of its own, on a task file written from the item.

pub(crate) mod beads;
pub(crate) mod github;
pub(crate) mod lease;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};

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

/// The item's task file (SPEC §3.1): the title as the task and heading, the body as the
/// description (quoted), its criteria (else the title) as the Success Criteria.
pub(crate) fn task_file(source: &str, item: &Item) -> String {
    let title = one_line(&item.title);
    let mut text = format!(
        "---\ntask: {}\n---\n\n# Task: {title}\n\nFrom {source} item `{}`.\n\n",
        yaml_string(&title),
        item.id
    );
    // The tracker's text as a quote: its headings and task items are the item's words, never
    // sections or criteria of the task file.
    // Every line ending Markdown knows ends a line here (a lone `\r` too), so no line of the
    // item's text escapes the quote.
    let body = item.body.replace("\r\n", "\n").replace('\r', "\n");
    if !body.trim().is_empty() {
        for line in body.trim().lines() {
            text.push_str(format!("> {line}").trim_end());
            text.push('\n');
        }
        text.push('\n');
    }
    text.push_str("## Success Criteria\n\n");
    for c in expected_criteria(item) {
        text.push_str(&format!("- [ ] {c}\n"));
    }
    text
}

/// The item's criteria, else its title, each on one line.
fn expected_criteria(item: &Item) -> Vec<String> {
    let criteria: Vec<String> = if item.criteria.is_empty() {
        vec![one_line(&item.title)]
    } else {
        item.criteria.iter().map(|c| one_line(c)).collect()
    };
    criteria.into_iter().filter(|c| !c.is_empty()).collect()
}

/// Whether the task file `text` written for `item` asks for exactly what the same file without
/// the item's text would: the text (quoted) adds, hides or changes no criterion. Read with the
/// reader every run uses.
pub(crate) fn asks_only_its_criteria(source: &str, item: &Item, text: &str) -> bool {
    let criteria = |t: &str| {
        crate::task::document::parse_task_bytes(Path::new("task.md"), t.as_bytes())
            .ok()
            .map(|d| {
                d.checklist
                    .remaining()
                    .map(|c| c.text.clone())
                    .collect::<Vec<_>>()
            })
    };
    let bare = Item {
        body: String::new(),
        ..item.clone()
    };
    let wanted = criteria(&task_file(source, &bare));
    wanted.as_ref().is_some_and(|w| !w.is_empty()) && criteria(text) == wanted
}

/// Criteria from a tracker's text: its unchecked task-list items, else its non-empty lines
/// (bullets and numbers taken off).
pub(crate) fn criteria_of(text: &str) -> Vec<String> {
    let items: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix("- [ ]")
                .or_else(|| l.strip_prefix("* [ ]"))?;
            Some(rest.trim().to_string())
        })
        .filter(|c| !c.is_empty())
        .collect();
    if !items.is_empty() {
        return items;
    }
    text.lines()
        .map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("- ")
                .or_else(|| l.strip_prefix("* "))
                .unwrap_or(l);
            let numbered = l
                .split_once(". ")
                .filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
            numbered.map_or(l, |(_, rest)| rest).trim().to_string()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// Text on one line: a tracker's title or criterion cannot open a new Markdown block.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A YAML double-quoted string.
fn yaml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}

#[cfg(test)]
mod tests;
