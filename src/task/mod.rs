//! Task sources (SPEC §3): what the loop reads to judge progress — the checklist
//! (`RALPH_TASK.md`) and its integrity, the task table (`PRD.md` + `PROGRESS.md`), CPM epics and
//! specs, and verdict commands; and the Current Status block ralph keeps in `.ralph/progress.md`. Every Markdown document is read with the one reader,
//! [`crate::markdown`].

pub(crate) mod checklist;
pub(crate) mod cpm;
pub(crate) mod document;
pub(crate) mod integrity;
pub(crate) mod placeholder;
pub(crate) mod status_block;
pub(crate) mod stories;
pub(crate) mod table;
pub(crate) mod verdict;

/// The default task file name.
pub(crate) const TASK_FILE: &str = "RALPH_TASK.md";
