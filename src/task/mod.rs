//! Task sources (SPEC §3): what the loop reads to judge progress — the checklist (and its
//! integrity), the task table, the verdict command and CPM's epics and specs.

pub mod checklist;
pub mod cpm;
pub mod document;
pub mod integrity;
pub mod table;
pub mod verdict;

/// The default task file name.
pub const TASK_FILE: &str = "RALPH_TASK.md";
