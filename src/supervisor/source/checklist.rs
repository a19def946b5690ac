//! The checklist source (SPEC §3.1): the prompt names the next criterion; the judgement re-reads
//! the task file and holds it against the criteria the run started with.

use std::path::PathBuf;

use super::{Judged, PromptCtx};
use crate::error::Result;
use crate::supervisor::prompt;
use crate::task::checklist::Checklist;
use crate::task::document::{TaskError, load_task_file};
use crate::task::integrity::{self, Baseline};

pub struct ChecklistSource {
    /// Absolute path of the task file.
    pub path: PathBuf,
    /// The same, relative to the repository root (as the prompt names it).
    pub rel: String,
    /// The checklist as of the end of the previous iteration.
    pub previous: Checklist,
    /// The criteria at the start of the run: each unchecked one must stay.
    pub baseline: Baseline,
}

impl ChecklistSource {
    pub fn prompt(&self, p: &PromptCtx<'_>) -> String {
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
    pub fn judge(&mut self) -> Result<Judged> {
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
    }
}
