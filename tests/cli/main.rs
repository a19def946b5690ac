//! Integration tests: the real `ralph` binary driving the scripted fake agent in real temporary
//! git repositories. One module per command, as in jj's test suite.

mod agents;
mod commit_guard;
mod common;
mod cpm;
mod errors;
mod init;
mod limits;
mod observe;
mod real_agents;
mod run;
mod status;
mod supervise;
mod table;
mod verdict;
