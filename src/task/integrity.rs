//! Checklist integrity (SPEC §3.1): the criteria recorded when a run starts — every criteria
//! section's, one per phase — must all still be there, so "all boxes checked" cannot be reached
//! by deleting or rewording boxes, or by moving them out of the sections.
//!
//! Texts compare normalised ([`normalize`]: Unicode NFC, whitespace collapsed). Criteria with
//! the same text are distinct: each baseline criterion needs a criterion of its own. A criterion
//! the agent annotated (`- [x] GET /login redirects — done in src/auth.rs`) keeps its baseline
//! text whole at the start and is the same criterion; the annotation is reported for review.
//! When it cannot be told which of two identical criteria went, the unchecked one is assumed
//! gone: the strict reading, which can only stop a run, never complete one.

use std::collections::HashMap;

use super::checklist::{Checklist, normalize};

/// The criteria at the start of a run, normalised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Baseline {
    /// Unchecked at the start: removing or rewording one is tampering.
    pub(crate) unchecked: Vec<String>,
    /// Already checked at the start: they may go (they are done), but they still take their
    /// own match, so a twin of an unchecked criterion cannot stand in for it.
    pub(crate) checked: Vec<String>,
    /// Unchecked task items outside the criteria sections at the start.
    pub(crate) unchecked_outside: Vec<String>,
}

impl Baseline {
    pub(crate) fn of(list: &Checklist) -> Baseline {
        let mut b = Baseline::default();
        for c in &list.criteria {
            let t = normalize(&c.text);
            if c.checked {
                b.checked.push(t);
            } else {
                b.unchecked.push(t);
            }
        }
        b.unchecked_outside.clone_from(&list.unchecked_outside);
        b
    }
}

/// A baseline criterion found with text appended to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Annotation {
    /// The baseline text.
    pub(crate) criterion: String,
    /// The criterion as the agent left it.
    pub(crate) written: String,
    pub(crate) checked: bool,
}

/// The baseline held against the current criteria.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Review {
    /// Unchecked baseline criteria that are gone (removed or reworded), in baseline order.
    pub(crate) tampered: Vec<String>,
    /// Baseline criteria kept with an annotation after their text.
    pub(crate) annotated: Vec<Annotation>,
}

/// Match every baseline criterion to a distinct current one: first by equal text, then by a
/// current text that starts with the baseline text and goes on after a word boundary (an
/// annotation). Checked baseline criteria are matched first, so an ambiguity leaves an
/// unchecked one unmatched.
pub(crate) fn review(baseline: &Baseline, current: &Checklist) -> Review {
    let texts: Vec<String> = current
        .criteria
        .iter()
        .map(|c| normalize(&c.text))
        .collect();
    let mut taken = vec![false; texts.len()];
    // Baseline entries in matching order: checked first, each with its index in its list.
    let order: Vec<(bool, usize, &str)> = baseline
        .checked
        .iter()
        .enumerate()
        .map(|(i, t)| (true, i, t.as_str()))
        .chain(
            baseline
                .unchecked
                .iter()
                .enumerate()
                .map(|(i, t)| (false, i, t.as_str())),
        )
        .collect();
    let mut matched = vec![false; order.len()];
    let mut by_text: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in texts.iter().enumerate().rev() {
        by_text.entry(t.as_str()).or_default().push(i);
    }
    for (k, (_, _, text)) in order.iter().enumerate() {
        if let Some(i) = by_text.get_mut(text).and_then(Vec::pop) {
            taken[i] = true;
            matched[k] = true;
        }
    }
    // Annotations: longer baseline texts first, so `a b` is not taken by the baseline `a`.
    let mut rest: Vec<usize> = (0..order.len()).filter(|&k| !matched[k]).collect();
    rest.sort_by_key(|&k| (!order[k].0, std::cmp::Reverse(order[k].2.len())));
    let mut out = Review::default();
    for k in rest {
        let text = order[k].2;
        if let Some(i) = (0..texts.len()).find(|&i| !taken[i] && annotates(&texts[i], text)) {
            taken[i] = true;
            matched[k] = true;
            out.annotated.push(Annotation {
                criterion: text.to_string(),
                written: current.criteria[i].text.clone(),
                checked: current.criteria[i].checked,
            });
        }
    }
    out.tampered = baseline
        .unchecked
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            let k = baseline.checked.len() + i;
            !matched[k]
        })
        .map(|(_, t)| t.clone())
        .collect();
    out.tampered.extend(moved_out(baseline, current));
    out
}

/// Unchecked criteria of the baseline now standing, unchecked, outside the criteria sections
/// more often than they did at the start: a section was moved away from them (its heading
/// renamed, a criterion written under a heading that held none, with checked copies inside).
/// Each is named once per extra occurrence.
fn moved_out(baseline: &Baseline, current: &Checklist) -> Vec<String> {
    fn count(list: &[String]) -> HashMap<&str, usize> {
        let mut m: HashMap<&str, usize> = HashMap::new();
        for t in list {
            *m.entry(t.as_str()).or_default() += 1;
        }
        m
    }
    let (was, now) = (
        count(&baseline.unchecked_outside),
        count(&current.unchecked_outside),
    );
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in &baseline.unchecked {
        if !seen.insert(t.as_str()) {
            continue;
        }
        let extra = now
            .get(t.as_str())
            .copied()
            .unwrap_or(0)
            .saturating_sub(was.get(t.as_str()).copied().unwrap_or(0));
        for _ in 0..extra {
            out.push(format!("{t} (left unchecked outside the criteria section)"));
        }
    }
    out
}

/// Whether `current` keeps none of the criteria of `baseline` (as they were, or annotated):
/// the criteria of another task. An empty baseline is no evidence: `false`.
pub(crate) fn keeps_none(baseline: &Baseline, current: &Checklist) -> bool {
    let texts: Vec<String> = current
        .criteria
        .iter()
        .map(|c| normalize(&c.text))
        .collect();
    let mut all = baseline
        .checked
        .iter()
        .chain(&baseline.unchecked)
        .peekable();
    all.peek().is_some() && all.all(|b| !texts.iter().any(|t| t == b || annotates(t, b)))
}

/// `written` is `criterion` with something appended after a word boundary.
fn annotates(written: &str, criterion: &str) -> bool {
    if criterion.is_empty() || written.len() <= criterion.len() {
        return false;
    }
    let Some(rest) = written.strip_prefix(criterion) else {
        return false;
    };
    // `opens` annotated as `opens.`, `opens — done`, `opens (see x)`; never `opensX`.
    let last = criterion.chars().next_back();
    let next = rest.chars().next();
    match (last, next) {
        (Some(l), Some(n)) => !(l.is_alphanumeric() && n.is_alphanumeric()),
        _ => false,
    }
}

/// Criteria checked before this iteration and present but unchecked now.
pub(crate) fn regressions(before: &Checklist, after: &Checklist) -> Vec<String> {
    let mut was_checked = counts(before, true);
    let still = counts(after, true);
    let mut out = Vec::new();
    for c in after.criteria.iter().filter(|c| !c.checked) {
        let t = normalize(&c.text);
        let before_n = was_checked.get(&t).copied().unwrap_or(0);
        let now_n = still.get(&t).copied().unwrap_or(0);
        if before_n > now_n {
            was_checked.insert(t, before_n - 1);
            out.push(c.text.clone());
        }
    }
    out
}

/// Criteria checked now that were not checked before (new ones included), in file order.
pub(crate) fn newly_checked(before: &Checklist, after: &Checklist) -> Vec<String> {
    let mut was_checked = counts(before, true);
    let mut out = Vec::new();
    for c in after.criteria.iter().filter(|c| c.checked) {
        match was_checked.get_mut(&normalize(&c.text)) {
            Some(k) if *k > 0 => *k -= 1,
            _ => out.push(c.text.clone()),
        }
    }
    out
}

fn counts(list: &Checklist, checked: bool) -> HashMap<String, usize> {
    let mut m: HashMap<String, usize> = HashMap::new();
    for c in list.criteria.iter().filter(|c| c.checked == checked) {
        *m.entry(normalize(&c.text)).or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::checklist::parse_checklist;

    fn list(md: &str) -> Checklist {
        parse_checklist(md, 1)
    }

    fn base(md: &str) -> Baseline {
        Baseline::of(&list(md))
    }

    #[test]
    fn a_checklist_keeping_none_of_the_baseline_is_another_tasks() {
        let b = base("## Success Criteria\n- [x] a\n- [ ] b\n");
        let keeps_none = |md: &str| keeps_none(&b, &list(md));
        assert!(keeps_none("## Success Criteria\n- [ ] n1\n- [ ] n2\n"));
        // One criterion kept — checked or not, annotated or not — is the same task.
        assert!(!keeps_none("## Success Criteria\n- [ ] a\n- [ ] n2\n"));
        assert!(!keeps_none("## Success Criteria\n- [x] b — done in x.rs\n"));
        // `ab` is no annotation of `a`.
        assert!(keeps_none("## Success Criteria\n- [ ] ab\n"));
        // An empty baseline is no evidence.
        assert!(!super::keeps_none(&Baseline::default(), &list("- [ ] n\n")));
    }

    #[test]
    fn removal_or_rewording_of_an_unchecked_criterion_is_tampering() {
        let b = base("## Success Criteria\n- [ ] a\n- [ ] b\n");
        let r = review(
            &b,
            &list("## Success Criteria\n- [x] a\n- [ ] b  \n- [ ] c\n"),
        );
        assert!(r.tampered.is_empty());
        let r = review(&b, &list("## Success Criteria\n- [x] a\n- [ ] c\n"));
        assert_eq!(r.tampered, vec!["b"]);
        let r = review(&b, &list("## Success Criteria\n- [ ] a\n- [ ] B\n"));
        assert_eq!(r.tampered, vec!["b"], "rewording is tampering");
        let r = review(&b, &list("## Success Criteria\n"));
        assert_eq!(r.tampered, vec!["a", "b"], "emptied");
    }

    #[test]
    fn twins_are_distinct_criteria() {
        let b = base("## Success Criteria\n- [x] dup\n- [ ] dup\n- [ ] other\n");
        // The unchecked twin deleted, the other checked: one `dup` is gone.
        let r = review(&b, &list("## Success Criteria\n- [x] dup\n- [x] other\n"));
        assert_eq!(r.tampered, vec!["dup"]);
        // Both twins kept and checked: fine.
        let r = review(
            &b,
            &list("## Success Criteria\n- [x] dup\n- [x] dup\n- [x] other\n"),
        );
        assert!(r.tampered.is_empty());
        // The checked one removed instead: which one went cannot be told; the unchecked is
        // assumed gone (strict).
        let r = review(&b, &list("## Success Criteria\n- [ ] dup\n- [x] other\n"));
        assert_eq!(r.tampered, vec!["dup"]);
    }

    #[test]
    fn annotations_keep_the_criterion() {
        let b = base("## Success Criteria\n- [ ] café opens\n- [ ] b\n");
        let r = review(
            &b,
            &list("## Success Criteria\n- [x] café opens — done in src/cafe.rs\n- [ ] b\n"),
        );
        assert!(r.tampered.is_empty());
        assert_eq!(
            r.annotated,
            vec![Annotation {
                criterion: "café opens".into(),
                written: "café opens — done in src/cafe.rs".into(),
                checked: true
            }]
        );
        // NFD is the same criterion, not an annotation.
        let r = review(
            &b,
            &list("## Success Criteria\n- [x] cafe\u{301} opens\n- [ ] b\n"),
        );
        assert!(r.tampered.is_empty() && r.annotated.is_empty(), "{r:?}");
        // The text must stay whole at the start, ending at a word boundary.
        for reworded in ["café open", "the café opens", "café opensX"] {
            let r = review(
                &b,
                &list(&format!("## Success Criteria\n- [x] {reworded}\n- [ ] b\n")),
            );
            assert_eq!(r.tampered, vec!["café opens"], "{reworded}");
        }
        // `a` and `a b` both in the baseline: `a b — done` is the annotated `a b`.
        let b = base("## Success Criteria\n- [ ] a\n- [ ] a b\n");
        let r = review(
            &b,
            &list("## Success Criteria\n- [x] a b — done\n- [ ] a\n"),
        );
        assert!(r.tampered.is_empty(), "{r:?}");
    }

    /// The baseline holds every section's criteria; what leaves the sections unchecked (a
    /// heading renamed, a first criterion written under a criteria heading that held none) is
    /// still there, unchecked.
    #[test]
    fn every_section_is_in_the_baseline() {
        let phased = "## Phase 1\n### Success Criteria\n- [ ] a\n## Phase 2\n### Success Criteria\n- [ ] b\n- [ ] c\n## Open\n- [ ] q\n";
        let b = base(phased);
        assert_eq!(b.unchecked, vec!["a", "b", "c"]);
        assert_eq!(b.unchecked_outside, vec!["q"]);
        let deleted = phased.replace("- [ ] c\n", "");
        assert_eq!(review(&b, &list(&deleted)).tampered, vec!["c"]);
        // Phase 2's heading renamed, checked copies under phase 1: every criterion in a section
        // is checked, and phase 2's stand outside, unchecked.
        let moved = "## Phase 1\n### Success Criteria\n- [x] a\n- [x] b\n- [x] c\n## Phase 2\n### Notes\n- [ ] b\n- [ ] c\n## Open\n- [ ] q\n";
        assert_eq!(list(moved).remaining().count(), 0);
        assert_eq!(
            review(&b, &list(moved)).tampered,
            vec![
                "b (left unchecked outside the criteria section)",
                "c (left unchecked outside the criteria section)"
            ]
        );
        // A criteria heading that held nothing (every checkbox counted) given one checked
        // criterion: the others are outside now, unchecked.
        let empty = "## Success Criteria\nsee below\n## Tasks\n- [ ] a\n- [ ] b\n";
        let b = base(empty);
        assert_eq!((b.unchecked.len(), b.unchecked_outside.len()), (2, 0));
        let one = "## Success Criteria\n- [x] a\n## Tasks\n- [ ] a\n- [ ] b\n";
        assert_eq!(list(one).remaining().count(), 0);
        assert_eq!(
            review(&b, &list(one)).tampered,
            vec![
                "b",
                "a (left unchecked outside the criteria section)",
                "b (left unchecked outside the criteria section)"
            ]
        );
    }

    #[test]
    fn regressions_and_new_checks() {
        let before = list("## Success Criteria\n- [x] a\n- [ ] b\n");
        let after = list("## Success Criteria\n- [ ] a\n- [x] b\n- [x] c\n");
        assert_eq!(regressions(&before, &after), vec!["a"]);
        assert_eq!(newly_checked(&before, &after), vec!["b", "c"]);
        let twins = list("## Success Criteria\n- [x] a\n- [x] a\n");
        let one_unchecked = list("## Success Criteria\n- [x] a\n- [ ] a\n");
        assert_eq!(regressions(&twins, &one_unchecked), vec!["a"]);
        assert!(newly_checked(&one_unchecked, &twins).len() == 1);
    }
}
