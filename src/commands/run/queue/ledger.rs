//! What ralph knows of a queue's items: each one's standing as ralph last left it, and which
//! items the tracker had when the queue started.

use std::collections::{BTreeMap, HashSet};

use super::item::commit_tracker_files;
use crate::commands::Context;
use crate::error::Result;
use crate::git::Repo;
use crate::queue::Tracker;

/// What ralph knows of the tracker's items: each one's state as ralph last left it. An item
/// whose state changed without ralph (an agent running `br close` on the main work tree) is
/// put back, with a comment, before ralph does anything else: an item is closed only on
/// ralph's own exit 0.
pub(super) struct Ledger(Option<BTreeMap<String, String>>, Option<HashSet<String>>);

impl Ledger {
    /// The states now; the items the tracker has now are the ones this queue may take.
    pub(super) fn read(tracker: &mut dyn Tracker) -> Result<Ledger> {
        let states = tracker.states()?;
        let start = states.as_ref().map(|s| s.keys().cloned().collect());
        Ok(Ledger(states, start))
    }

    /// Whether the tracker had item `id` when the queue started (without a ledger: any).
    pub(super) fn known(&self, id: &str) -> bool {
        self.1.as_ref().is_none_or(|start| start.contains(id))
    }

    /// Put back what changed without ralph; then the tracker's files, whoever changed them
    /// (a person adding items meanwhile), are committed, so no merge finds the base dirty.
    pub(super) fn hold(
        &mut self,
        ctx: &Context,
        repo: &mut Repo,
        tracker: &mut dyn Tracker,
    ) -> Result<()> {
        let (Some(expected), Some(now)) = (&self.0, tracker.states()?) else {
            return Ok(());
        };
        let mut put_back = Vec::new();
        for (id, was) in expected {
            if let Some(is) = now.get(id).filter(|is| *is != was) {
                let why = format!(
                    "ralph: put back from `{is}` to `{was}`: it changed outside ralph while a queue ran"
                );
                tracker.restore(id, is, was, &why)?;
                ctx.ui.warn(&format!("{} {id}: {why}", tracker.source()));
                put_back.push(id.clone());
            }
        }
        let what = if put_back.is_empty() {
            "changes made outside the queue".to_string()
        } else {
            format!("put back {}", put_back.join(", "))
        };
        commit_tracker_files(repo, tracker, &what)?;
        // Read again only when something was put back: otherwise `now` is the standing.
        self.0 = if put_back.is_empty() {
            Some(now)
        } else {
            tracker.states()?
        };
        Ok(())
    }

    /// After ralph's own change: the states as they are now.
    pub(super) fn update(&mut self, tracker: &mut dyn Tracker) -> Result<()> {
        self.0 = tracker.states()?;
        Ok(())
    }
}
