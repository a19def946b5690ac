//! Integration tests: the real `ralph` binary driving the scripted fake agent in real temporary
//! git repositories. One module per command, as in jj's test suite.

mod agents;
mod authority;
mod cannot_start;
mod commit_guard;
mod common;
mod completion;
mod cpm;
mod cpm_rollup;
mod endings;
mod errors;
mod escapes;
mod events;
mod fallback;
mod files;
mod git_bookkeeping;
mod git_boundary;
mod git_boundary_refs;
mod git_budget;
mod git_exact;
mod git_links;
mod git_props;
mod git_rules;
mod github_faults;
mod help;
mod hints;
mod hooks;
mod hostile_boundary;
mod hostile_clean;
mod hostile_config;
mod hostile_fallback;
mod hostile_files;
mod hostile_github;
mod hostile_lease;
mod hostile_person;
mod hostile_queue_stories;
mod hostile_team;
mod init;
mod integrity;
mod lfs_boundary;
mod limits;
mod limits_wait;
mod links;
mod live;
mod merge_own_files;
mod observe;
mod own_files;
mod planted;
mod questions;
mod queue;
mod queue_github;
mod queue_questions;
mod queue_text;
mod readable;
mod readme;
mod real_agents;
mod real_droid;
mod real_opencode;
mod real_qwen;
mod run;
mod sandbox;
mod sandbox_doors;
mod sandbox_edges;
mod sandbox_halts;
mod screen_halts;
mod serve;
mod startup;
mod status;
mod stories;
mod stream;
mod suggestions;
mod supervise;
mod surface;
mod table;
mod task_files;
mod tmux;
mod tools_missing;
mod verbose;
mod verdict;
mod watch;
mod watcher_faults;
mod watcher_hostile;
mod web;
mod workers;
mod worktree_doors;
mod worktree_names;
mod worktrees;

/// Every file of this directory is a module above: a test file left out would never run.
#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(module) = name.strip_suffix(".rs")
            && module != "main"
            && !main.lines().any(|l| l == format!("mod {module};"))
        {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "not in tests/cli/main.rs: {missing:?}");
}
