//! A lease as its commit says it (SPEC §15): the stage, the worker, the time it runs out by the
//! team's clock, and how the message is written and read back.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

/// A lease's message opens with this line, then `Key: value` lines.
const TITLE: &str = "ralph lease";

/// The team's clock: this machine's, set by the tracker's (the `Date` of its answers) when
/// they differ by a second or more. Every worker writes and reads a lease's `Until` by it, so
/// a clock skewed between machines neither lets a worker take a lease still held nor makes a
/// lease look held long after it ran out (SPEC §15). Shared by the clones of [`Leases`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Clock {
    /// The tracker's time less this machine's, in milliseconds.
    ahead_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Clock {
    /// Now, as the tracker's clock says.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        let ms = self.ahead_ms.load(std::sync::atomic::Ordering::Relaxed);
        Utc::now() + chrono::Duration::milliseconds(ms)
    }

    /// An answer whose `Date` header said `date` came between `sent` and `got` (this
    /// machine's clock). `Date` has whole seconds: its middle is taken.
    pub(crate) fn heard(&self, date: &str, sent: DateTime<Utc>, got: DateTime<Utc>) {
        let Ok(date) = DateTime::parse_from_rfc2822(date.trim()) else {
            return;
        };
        let theirs = date.with_timezone(&Utc) + chrono::Duration::milliseconds(500);
        let ours = sent + (got - sent) / 2;
        let ahead = (theirs - ours).num_milliseconds();
        // Within a second, the clocks agree as far as `Date` can tell.
        let ahead = if ahead.abs() < 1000 { 0 } else { ahead };
        self.ahead_ms
            .store(ahead, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How far one worker got with an item, as its lease says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Its loop runs (or ran, when the lease is no longer held).
    Working,
    /// Given back: open for any worker.
    Released,
    /// Its work is on origin's base branch (`commit`); the tracker is yet to be told.
    Merged,
    /// Its pull request is open (`note` is its URL).
    PrOpen,
    /// Done: closed on the tracker.
    Closed,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Working => "working",
            Stage::Released => "released",
            Stage::Merged => "merged",
            Stage::PrOpen => "pr-open",
            Stage::Closed => "closed",
        }
    }

    fn parse(s: &str) -> Option<Stage> {
        [
            Stage::Working,
            Stage::Released,
            Stage::Merged,
            Stage::PrOpen,
            Stage::Closed,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }
}

/// An item's lease as origin has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lease {
    /// The commit the lease ref points to on origin: what a compare-and-swap names.
    pub(crate) oid: String,
    pub(crate) stage: Stage,
    pub(crate) worker: String,
    /// Held until then (`None`: not held).
    pub(crate) until: Option<DateTime<Utc>>,
    /// `Merged`, `Closed`: the commit origin's base branch has.
    pub(crate) commit: Option<String>,
    /// Why it was released; a pull request's URL.
    pub(crate) note: Option<String>,
    /// The tracker whose item it is (`github:O/R`; `None` from a ralph that did not say).
    pub(crate) tracker: Option<String>,
    /// The item's branch on origin as the lease's holder pushed it (or started from): a
    /// branch origin has otherwise was pushed by someone not holding the lease.
    pub(crate) branch: Option<String>,
    /// The hash of the item's text its holder took it with (`queue::text_hash`): the goal a
    /// worker taking it over works on.
    pub(crate) text: Option<String>,
}

impl Lease {
    /// Whether some worker holds it at `now`.
    pub(crate) fn held(&self, now: DateTime<Utc>) -> bool {
        self.until.is_some_and(|u| u > now)
    }
}

/// What a worker writes as an item's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Next {
    pub(crate) stage: Stage,
    /// Held for the worker's lease duration from now (else not held).
    pub(crate) hold: bool,
    pub(crate) commit: Option<String>,
    pub(crate) note: Option<String>,
    /// The item's branch on origin as this worker left it.
    pub(crate) branch: Option<String>,
    /// The hash of the item's text this worker works on.
    pub(crate) text: Option<String>,
}

impl Next {
    pub(crate) fn held(stage: Stage) -> Next {
        Next {
            stage,
            hold: true,
            commit: None,
            note: None,
            branch: None,
            text: None,
        }
    }

    /// With the item's branch at `tip` on origin (unless it says one already).
    pub(crate) fn on_branch(mut self, tip: Option<&str>) -> Next {
        if self.branch.is_none() {
            self.branch = tip.map(str::to_string);
        }
        self
    }

    /// With the hash of the item's text the worker works on (unless it says one already).
    pub(crate) fn on_text(mut self, text: Option<&str>) -> Next {
        if self.text.is_none() {
            self.text = text.map(str::to_string);
        }
        self
    }

    pub(crate) fn free(stage: Stage) -> Next {
        Next {
            hold: false,
            ..Next::held(stage)
        }
    }

    pub(crate) fn with_commit(mut self, commit: &str) -> Next {
        self.commit = Some(commit.to_string());
        self
    }

    pub(crate) fn with_note(mut self, note: &str) -> Next {
        self.note = Some(one_line(note));
        self
    }
}

/// A lease as its commit's message says it.
pub(super) fn render(
    name: &str,
    (worker, tracker): (&str, &str),
    next: &Next,
    until: Option<DateTime<Utc>>,
    nonce: &str,
) -> String {
    let mut m = format!(
        "{TITLE} {name}: {}\n\nStage: {}\nWorker: {}\n",
        next.stage.as_str(),
        next.stage.as_str(),
        one_line(worker)
    );
    if !tracker.is_empty() {
        m.push_str(&format!("Tracker: {}\n", one_line(tracker)));
    }
    if let Some(u) = until {
        m.push_str(&format!(
            "Until: {}\n",
            u.to_rfc3339_opts(SecondsFormat::Millis, true)
        ));
    }
    if let Some(c) = &next.commit {
        m.push_str(&format!("Commit: {c}\n"));
    }
    if let Some(n) = &next.note {
        m.push_str(&format!("Note: {n}\n"));
    }
    if let Some(b) = &next.branch {
        m.push_str(&format!("Branch: {}\n", one_line(b)));
    }
    if let Some(t) = &next.text {
        m.push_str(&format!("Text: {}\n", one_line(t)));
    }
    m.push_str(&format!("Nonce: {nonce}\n"));
    m
}

/// The lease of a commit message; `None` when it is not one.
pub(super) fn parse(oid: &str, message: &str) -> Option<Lease> {
    let mut lines = message.lines();
    if !lines.next()?.starts_with(TITLE) {
        return None;
    }
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(": ") {
            fields.insert(k, v);
        }
    }
    Some(Lease {
        oid: oid.to_string(),
        stage: Stage::parse(fields.get("Stage")?)?,
        worker: fields.get("Worker")?.to_string(),
        until: fields
            .get("Until")
            .and_then(|u| DateTime::parse_from_rfc3339(u).ok())
            .map(|u| u.with_timezone(&Utc)),
        commit: fields.get("Commit").map(|c| c.to_string()),
        note: fields.get("Note").map(|n| n.to_string()),
        tracker: fields.get("Tracker").map(|t| t.to_string()),
        branch: fields.get("Branch").map(|b| b.to_string()),
        text: fields.get("Text").map(|t| t.to_string()),
    })
}

/// 16 random hex digits: no two lease commits are the same object.
pub(super) fn nonce() -> String {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
