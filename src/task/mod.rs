//! Task sources (SPEC §3): what the loop reads to judge progress — the checklist
//! (`RALPH_TASK.md`) and its integrity, the task table (`PRD.md` + `PROGRESS.md`), CPM epics and
//! specs, and verdict commands; and the Current Status block ralph keeps in `.ralph/progress.md`. Every Markdown document is read with the one reader,
//! [`crate::markdown`].

pub mod checklist;
pub mod cpm;
pub mod document;
pub mod integrity;
pub mod status_block;
pub mod table;
pub mod verdict;

/// The default task file name.
pub const TASK_FILE: &str = "RALPH_TASK.md";
