//! What the agent may change in `prd.json` (SPEC §14): the `passes` and `notes` of the story it
//! works, nothing else. The rule is one invariant, not a list of forbidden edits: the file ralph
//! keeps is the one before the iteration with those two values taken from the agent's; whatever
//! else differs is put back and said. Stories removed, added or re-identified are tampering.

use serde_json::{Map, Value};

use super::{Stories, id_of, story_value_mut, story_values};

/// The story file after the agent, held to what it may change.
#[derive(Debug, Clone)]
pub(crate) struct Guarded {
    /// The file before the iteration with the current story's `passes` and `notes` as the agent
    /// left them.
    pub(crate) kept: Stories,
    /// What was put back, one line each (empty: the agent's file is `kept`).
    pub(crate) restored: Vec<String>,
    /// Stories removed, added or re-identified, one line each: non-empty halts the run.
    pub(crate) tampered: Vec<String>,
}

/// Hold `after` to `before`, the agent working story `current`.
pub(crate) fn guard(before: &Stories, after: &Stories, current: &str) -> Guarded {
    let ids = |s: &Stories| s.stories.iter().map(|x| x.id.clone()).collect::<Vec<_>>();
    let (was, now) = (ids(before), ids(after));
    let mut tampered: Vec<String> = was
        .iter()
        .filter(|id| !now.contains(id))
        .map(|id| format!("story {id} was removed or re-identified"))
        .collect();
    tampered.extend(
        now.iter()
            .filter(|id| !was.contains(id))
            .map(|id| format!("story {id} was added")),
    );
    let mut kept = before.clone();
    if let (Some(theirs), Some(ours)) = (
        story_values(&after.doc).find(|s| id_of(s).as_deref() == Some(current)),
        story_value_mut(&mut kept.doc, current),
    ) {
        for key in ["passes", "notes"] {
            match theirs.get(key) {
                Some(v) => {
                    ours.insert(key.to_string(), v.clone());
                }
                None => {
                    ours.shift_remove(key);
                }
            }
        }
    }
    if let (Some(theirs), Some(ours)) = (
        after.story(current),
        kept.stories.iter_mut().find(|s| s.id == current),
    ) {
        ours.passes = theirs.passes;
        ours.notes = theirs.notes.clone();
    }
    let restored = if tampered.is_empty() {
        differences(&kept.doc, &after.doc)
    } else {
        Vec::new()
    };
    tampered.sort();
    Guarded {
        kept,
        restored,
        tampered,
    }
}

/// What differs between the kept document and the agent's, one line per key put back.
fn differences(kept: &Value, theirs: &Value) -> Vec<String> {
    if kept == theirs {
        return Vec::new();
    }
    let (Some(k), Some(t)) = (kept.as_object(), theirs.as_object()) else {
        return vec!["the document put back".to_string()];
    };
    let mut lines = keys_put_back(k, t)
        .into_iter()
        .filter(|key| key != "userStories")
        .map(|key| format!("`{key}` put back"))
        .collect::<Vec<_>>();
    let order = |d: &Value| story_values(d).filter_map(id_of).collect::<Vec<_>>();
    if order(kept) != order(theirs) {
        lines.push("the stories' order put back".to_string());
    }
    for ours in story_values(kept) {
        let Some(id) = id_of(ours) else { continue };
        if let Some(agents) = story_values(theirs).find(|s| id_of(s).as_deref() == Some(&id)) {
            for key in keys_put_back(ours, agents) {
                lines.push(format!("story {id}: `{key}` put back"));
            }
        }
    }
    lines
}

/// The keys whose values differ between two objects (either side's), in the kept order.
fn keys_put_back(kept: &Map<String, Value>, theirs: &Map<String, Value>) -> Vec<String> {
    let mut keys: Vec<String> = kept
        .iter()
        .filter(|(k, v)| theirs.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    keys.extend(theirs.keys().filter(|k| !kept.contains_key(*k)).cloned());
    keys
}
