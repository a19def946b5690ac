//! Integration tests: the real `ralph` binary driving the scripted fake agent in real temporary
//! git repositories. One module per command, as in jj's test suite.

mod agents;
mod authority;
mod commit_guard;
mod common;
mod completion;
mod cpm;
mod cpm_rollup;
mod endings;
mod errors;
mod escapes;
mod files;
mod git_bookkeeping;
mod git_exact;
mod git_props;
mod hooks;
mod init;
mod integrity;
mod limits;
mod limits_wait;
mod links;
mod observe;
mod own_files;
mod real_agents;
mod run;
mod sandbox;
mod sandbox_doors;
mod status;
mod supervise;
mod table;
mod task_files;
mod verdict;
mod watch;
mod watcher_faults;
mod worktree_doors;
mod worktrees;
