//! What ralph knows of a queue's items: each one's standing as the team last left it, and which
//! items the tracker had when the queue started.

use std::collections::{BTreeMap, HashSet};

use crate::error::Result;
use crate::queue::Tracker;
use crate::ui::Ui;

/// Every item's standing (state, and on GitHub its assignees and labels) as ralph's workers
/// last left it. A change made outside them — an agent running `br close` on the main work
/// tree, or an agent given the token on purpose closing another issue — is put back, with a
/// comment, before ralph does anything else: an item is closed only on ralph's own exit 0.
/// A change another worker made under its lease is the team's and stands (SPEC §15), and so
/// does a person's "not planned".
pub(super) struct Ledger {
    standing: Option<BTreeMap<String, String>>,
    start: Option<HashSet<String>>,
}

impl Ledger {
    /// The standing now; the items the tracker has now are the ones this queue may take.
    pub(super) fn read(tracker: &mut dyn Tracker) -> Result<Ledger> {
        let standing = tracker.states()?;
        let start = standing.as_ref().map(|s| s.keys().cloned().collect());
        Ok(Ledger { standing, start })
    }

    /// Whether the tracker had item `id` when the queue started (without a ledger: any).
    pub(super) fn known(&self, id: &str) -> bool {
        self.start.as_ref().is_none_or(|start| start.contains(id))
    }

    /// Held against `now` (the tracker's standing, read before the team's leases were): what
    /// changed outside ralph's workers is put back; a change on an item `by_team` says the team
    /// touched, or to a standing the tracker says a person decided, stands. The ids put back.
    pub(super) fn hold(
        &mut self,
        ui: Ui,
        tracker: &mut dyn Tracker,
        now: Option<BTreeMap<String, String>>,
        by_team: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<String>> {
        let (Some(expected), Some(now)) = (&self.standing, now) else {
            return Ok(Vec::new());
        };
        let mut put_back = Vec::new();
        for (id, was) in expected {
            let Some(is) = now.get(id).filter(|is| *is != was) else {
                continue;
            };
            if by_team(id) || tracker.stands(is) {
                continue;
            }
            let why = format!(
                "ralph: put back from `{is}` to `{was}`: it changed outside ralph while a queue ran"
            );
            tracker.restore(id, is, was, &why)?;
            ui.warn(&format!("{} {id}: {why}", tracker.source()));
            put_back.push(id.clone());
        }
        // Read again only when something was put back: otherwise `now` is the standing.
        self.standing = if put_back.is_empty() {
            Some(now)
        } else {
            tracker.states()?
        };
        Ok(put_back)
    }

    /// After ralph's own change: the standing as it is now.
    pub(super) fn update(&mut self, tracker: &mut dyn Tracker) -> Result<()> {
        self.standing = tracker.states()?;
        Ok(())
    }
}
