//! The checklist source (SPEC §3.1): the prompt names the next criterion; the judgement re-reads
//! the task file and holds it against the criteria the run started with.

use std::path::PathBuf;

use super::{Judged, PromptCtx};
use crate::error::Result;
use crate::supervisor::prompt;
use crate::task::checklist::Checklist;
use crate::task::document::{TaskError, load_task_file};
use crate::task::integrity::{self, Baseline};

pub(crate) struct ChecklistSource {
    /// Absolute path of the task file.
    pub(crate) path: PathBuf,
    /// The same, relative to the repository root (as the prompt names it).
    pub(crate) rel: String,
    /// The checklist as of the end of the previous iteration.
    pub(crate) previous: Checklist,
    /// The criteria at the start of the run: each unchecked one must stay.
    pub(crate) baseline: Baseline,
}

impl ChecklistSource {
    pub(crate) fn prompt(&self, p: &PromptCtx<'_>) -> String {
        let next = self.previous.remaining().next().map(|x| x.text.clone());
        prompt::checklist_prompt(&prompt::PromptInput {
            iteration: p.iteration,
            max_iterations: p.max_iterations,
            task_file: &self.rel,
            next_criterion: next.as_deref(),
            done: self.previous.done(),
            total: self.previous.total(),
            test_command: p.test_command,
            stuck_alert: p.stuck_alert,
            stuck_streak: p.stuck_streak,
            completion_promise: p.completion_promise,
            feedback: p.feedback,
        })
    }

    /// Re-read the task file. A file deleted, renamed, emptied of criteria or replaced by
    /// anything but a regular file is tampering, like a removed criterion; a file that no longer
    /// parses (frontmatter, encoding) is an error.
    pub(crate) fn judge(&mut self) -> Result<Judged> {
        let (current, gone_how) = match load_task_file(&self.path) {
            Ok(doc) => (doc.checklist, None),
            Err(TaskError::Missing { .. }) => (empty(), Some("was deleted or renamed".into())),
            Err(TaskError::NotRegular { kind, .. }) => {
                (empty(), Some(format!("was replaced by {kind}")))
            }
            Err(TaskError::NoCriteria { .. }) => (empty(), Some("holds no criteria".into())),
            Err(e) => return Err(e.into()),
        };
        let review = integrity::review(&self.baseline, &current);
        let mut tampered: Vec<String> = review
            .tampered
            .iter()
            .map(|t| format!("- [ ] {t}"))
            .collect();
        if let Some(how) = gone_how {
            tampered.insert(0, format!("{} {how}", self.rel));
        }
        let judged = Judged {
            done: current.done(),
            total: current.total(),
            source_complete: current.total() > 0 && current.done() == current.total(),
            tampered,
            regressions: integrity::regressions(&self.previous, &current),
            what: integrity::newly_checked(&self.previous, &current)
                .into_iter()
                .next(),
            annotations: review
                .annotated
                .iter()
                .map(|a| format!("\"{}\" → \"{}\"", a.criterion, a.written))
                .collect(),
            ..Judged::counts(0, 0)
        };
        // A file that went away leaves the last good reading as the one to report from.
        if !current.criteria.is_empty() {
            self.previous = current;
        }
        Ok(judged)
    }
}

fn empty() -> Checklist {
    Checklist {
        criteria: Vec::new(),
        scope: crate::task::checklist::Scope::WholeDocument,
        unchecked_outside: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::checklist::normalize;
    use proptest::prelude::*;

    /// What an agent can do to a task file between two judgements.
    #[derive(Debug, Clone)]
    enum Act {
        Check(usize),
        Uncheck(usize),
        Add(u8, bool),
        Delete(usize),
        Reword(usize),
        Annotate(usize),
        Duplicate(usize),
        /// Empty the file, or replace it by nothing at all.
        Empty,
        Remove,
    }

    fn act() -> impl Strategy<Value = Act> {
        prop_oneof![
            4 => (0..8usize).prop_map(Act::Check),
            1 => (0..8usize).prop_map(Act::Uncheck),
            1 => (0..4u8, any::<bool>()).prop_map(|(t, c)| Act::Add(t, c)),
            2 => (0..8usize).prop_map(Act::Delete),
            1 => (0..8usize).prop_map(Act::Reword),
            1 => (0..8usize).prop_map(Act::Annotate),
            1 => (0..8usize).prop_map(Act::Duplicate),
            1 => Just(Act::Empty),
            1 => Just(Act::Remove),
        ]
    }

    /// The file's criteria as the agent leaves them; `None`: no file.
    fn apply(items: &mut Option<Vec<(String, bool)>>, a: &Act) {
        let Some(list) = items else {
            // A removed file may come back with anything: here, a fresh checked criterion.
            if let Act::Add(t, _) = a {
                *items = Some(vec![(format!("c{t}"), true)]);
            }
            return;
        };
        let n = list.len();
        match *a {
            Act::Check(i) if n > 0 => list[i % n].1 = true,
            Act::Uncheck(i) if n > 0 => list[i % n].1 = false,
            Act::Add(t, c) => list.push((format!("c{t}"), c)),
            Act::Delete(i) if n > 0 => {
                list.remove(i % n);
            }
            Act::Reword(i) if n > 0 => list[i % n].0.push('s'),
            Act::Annotate(i) if n > 0 => list[i % n].0.push_str(" — done in x.rs"),
            Act::Duplicate(i) if n > 0 => list.push(list[i % n].clone()),
            Act::Empty => list.clear(),
            Act::Remove => *items = None,
            _ => {}
        }
    }

    fn write(path: &std::path::Path, items: &Option<Vec<(String, bool)>>) {
        match items {
            None => {
                let _ = std::fs::remove_file(path);
            }
            Some(list) => {
                let mut s = String::from("---\ntask: t\n---\n## Success Criteria\n");
                for (t, c) in list {
                    s.push_str(&format!("- [{}] {t}\n", if *c { 'x' } else { ' ' }));
                }
                std::fs::write(path, s).unwrap();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Iteration after iteration of random agent behaviour against the judge reading a
        /// real file: whenever it would let the run complete (everything checked, nothing
        /// tampered), every criterion the run started with unchecked is in the file, checked,
        /// each as an item of its own (equal, or annotated after its whole text).
        #[test]
        fn the_judge_never_completes_without_every_baseline_criterion_done(
            start in proptest::collection::vec((0..4u8, any::<bool>()), 1..6),
            iterations in proptest::collection::vec(proptest::collection::vec(act(), 0..4), 1..6),
        ) {
            prop_assume!(start.iter().any(|(_, c)| !c));
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("RALPH_TASK.md");
            let mut items = Some(start.iter().map(|(t, c)| (format!("c{t}"), *c)).collect::<Vec<_>>());
            write(&path, &items);
            let doc = load_task_file(&path).unwrap();
            let mut source = ChecklistSource {
                path: path.clone(),
                rel: "RALPH_TASK.md".into(),
                baseline: Baseline::of(&doc.checklist),
                previous: doc.checklist,
            };
            let baseline = source.baseline.unchecked.clone();
            for acts in &iterations {
                for a in acts {
                    apply(&mut items, a);
                }
                write(&path, &items);
                let j = source.judge().unwrap();
                if !(j.source_complete && j.tampered.is_empty()) {
                    continue;
                }
                let list = items.clone().unwrap_or_default();
                let mut free: Vec<(String, bool)> =
                    list.iter().map(|(t, c)| (normalize(t), *c)).collect();
                let mut need = baseline.clone();
                need.sort_by_key(|t| std::cmp::Reverse(t.len()));
                for t in need {
                    let pos = free.iter().position(|(w, c)| {
                        *c && (*w == t || w.strip_prefix(t.as_str()).is_some_and(|r| r.starts_with(' ')))
                    });
                    prop_assert!(pos.is_some(), "complete without {t:?}: {list:?}");
                    free.remove(pos.unwrap());
                }
            }
        }
    }
}
