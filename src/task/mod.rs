//! Task sources (SPEC §3): what the loop reads to judge progress. Checklist mode for now.

pub mod checklist;
pub mod cpm;
pub mod document;
pub mod table;
pub mod verdict;

/// The default task file name.
pub const TASK_FILE: &str = "RALPH_TASK.md";
