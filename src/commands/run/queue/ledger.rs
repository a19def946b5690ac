//! What ralph knows of a queue's items: each one's standing as the team last left it, which
//! items the tracker had when the queue started, and each one's text as the queue first read it.

use std::collections::{BTreeMap, HashSet};

use crate::error::Result;
use crate::queue::{self, Item, Text, Tracker};
use crate::ui::Ui;

/// Every item's standing (state, and on GitHub its assignees and labels) as ralph's workers
/// last left it. A change made outside them — an agent running `br close` on the main work
/// tree, or an agent given the token on purpose closing another issue — is put back, with a
/// comment, before ralph does anything else: an item is closed only on ralph's own exit 0.
/// A change another worker made under its lease is the team's and stands (SPEC §15), and so
/// does a person's "not planned".
///
/// Each open item's text is pinned when the queue first reads it (SPEC §14): a change to it —
/// no worker of ralph changes an item's text — is put back, and the item is worked on the
/// pinned text whether or not that succeeds.
pub(super) struct Ledger {
    standing: Option<BTreeMap<String, String>>,
    start: Option<HashSet<String>>,
    pinned: BTreeMap<String, Text>,
    /// Each open item's text as the last look read it.
    last: BTreeMap<String, Text>,
}

impl Ledger {
    /// The standing now; the items the tracker has now are the ones this queue may take.
    pub(super) fn read(tracker: &mut dyn Tracker) -> Result<Ledger> {
        let standing = tracker.states()?;
        let start = standing.as_ref().map(|s| s.keys().cloned().collect());
        let pinned = tracker.texts().unwrap_or_default();
        Ok(Ledger {
            standing,
            start,
            last: pinned.clone(),
            pinned,
        })
    }

    /// `item` as the queue first read it: its pinned text (the one listed when none is).
    pub(super) fn pinned(&self, item: Item) -> Item {
        match self.pinned.get(&item.id) {
            Some(text) => text.item(&item.id),
            None => item,
        }
    }

    /// Item `item.id` pinned to `item`'s text from now on, when the last look read that text
    /// (a takeover works on the text its lease names: the team's, not this queue's first read).
    pub(super) fn repin(&mut self, item: &Item) {
        if let Some(text) = self
            .last
            .get(&item.id)
            .filter(|t| t.item(&item.id) == *item)
        {
            self.pinned.insert(item.id.clone(), text.clone());
        }
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
        worked_on: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<String>> {
        // The texts this `now` came with (the tracker's last read).
        let texts = tracker.texts();
        self.hold_texts(ui, tracker, texts, worked_on);
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

    /// Each open item's text `now` held against its pinned one: a change is put back, with a
    /// comment, and said; one that cannot be put back is said too (the item is worked on its
    /// pinned text all the same). A text read for the first time is pinned, and so is one
    /// whose hash is what the item's held lease says its worker works on (`worked_on`): the
    /// team's text, which a worker that first read it otherwise puts back — two workers never
    /// put each other's text back for ever.
    fn hold_texts(
        &mut self,
        ui: Ui,
        tracker: &mut dyn Tracker,
        now: Option<BTreeMap<String, Text>>,
        worked_on: &dyn Fn(&str) -> Option<String>,
    ) {
        let source = tracker.source();
        let Some(now) = now else {
            return;
        };
        self.last = now.clone();
        for (id, is) in now {
            let Some(was) = self.pinned.get(&id) else {
                self.pinned.insert(id, is);
                continue;
            };
            if *was == is {
                continue;
            }
            if worked_on(&id).is_some_and(|h| h == queue::text_hash(&is.item(&id))) {
                self.pinned.insert(id, is);
                continue;
            }
            let why = "ralph: put back its text as the queue first read it: it changed outside ralph while a queue ran";
            match tracker.restore_text(&id, &is, was, why) {
                Ok(()) => ui.warn(&format!("{source} {id}: {}", &why[7..])),
                Err(e) => ui.warn(&format!(
                    "{source} {id}: its text changed outside ralph while a queue ran and could not be put back ({e}); it is worked on the text the queue first read"
                )),
            }
        }
    }

    /// After ralph's own change: the standing as it is now.
    pub(super) fn update(&mut self, tracker: &mut dyn Tracker) -> Result<()> {
        self.standing = tracker.states()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Claim;

    /// A tracker of one open item whose text the test sets; what was put back, recorded.
    struct Fake {
        text: Text,
        put_back: Vec<Text>,
    }

    impl Tracker for Fake {
        fn source(&self) -> &'static str {
            "fake"
        }
        fn ready(&mut self) -> Result<Vec<Item>> {
            Ok(vec![self.text.item("1")])
        }
        fn claim(&mut self, _: &Item) -> Result<Claim> {
            Ok(Claim::Ours)
        }
        fn close(&mut self, _: &Item, _: &str) -> Result<()> {
            Ok(())
        }
        fn release(&mut self, _: &Item, _: &str) -> Result<()> {
            Ok(())
        }
        fn states(&mut self) -> Result<Option<BTreeMap<String, String>>> {
            Ok(Some(BTreeMap::from([("1".into(), "open".into())])))
        }
        fn texts(&mut self) -> Option<BTreeMap<String, Text>> {
            Some(BTreeMap::from([("1".into(), self.text.clone())]))
        }
        fn restore_text(&mut self, _: &str, _: &Text, was: &Text, _: &str) -> Result<()> {
            self.put_back.push(was.clone());
            self.text = was.clone();
            Ok(())
        }
    }

    fn text(body: &str) -> Text {
        Text {
            title: "One".into(),
            body: body.into(),
            criteria: None,
        }
    }

    #[test]
    fn a_changed_text_is_put_back_unless_a_held_lease_says_the_team_works_on_it() {
        let (first, other) = (text("- [ ] a\n- [ ] b\n"), text("- [ ] trivial\n"));
        let mut t = Fake {
            text: first.clone(),
            put_back: Vec::new(),
        };
        let mut ledger = Ledger::read(&mut t).unwrap();
        let ui = Ui::default();
        let hold = |ledger: &mut Ledger, t: &mut Fake, worked_on: Option<String>| {
            let now = t.states().unwrap();
            ledger
                .hold(ui, t, now, &|_| false, &|_| worked_on.clone())
                .unwrap();
        };
        // Changed outside ralph: put back, and the item worked on its first text.
        t.text = other.clone();
        hold(&mut ledger, &mut t, None);
        assert_eq!(t.put_back.len(), 1);
        assert_eq!(t.put_back[0], first);
        assert_eq!(ledger.pinned(other.item("1")), first.item("1"));
        // Changed to the text another worker's held lease names: the team's, pinned, left.
        t.text = other.clone();
        let theirs = queue::text_hash(&other.item("1"));
        hold(&mut ledger, &mut t, Some(theirs));
        assert_eq!(t.put_back.len(), 1);
        assert_eq!(ledger.pinned(first.item("1")), other.item("1"));
        // A lease naming another text changes nothing: put back to the pinned one.
        t.text = first.clone();
        hold(&mut ledger, &mut t, Some("0".repeat(40)));
        assert_eq!(t.put_back, [first, other]);
    }
}
