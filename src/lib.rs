//! ralph: a supervisor for autonomous coding-agent loops. See ARCHITECTURE.md for the map.

pub(crate) mod activity;
pub(crate) mod agent;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod files;
pub mod git;
pub(crate) mod guard;
pub(crate) mod hooks;
pub(crate) mod iter_record;
pub(crate) mod live;
pub(crate) mod loops;
pub(crate) mod markdown;
pub(crate) mod person;
pub(crate) mod proc;
pub(crate) mod queue;
pub(crate) mod sandbox;
pub(crate) mod serve;
pub(crate) mod signals;
pub(crate) mod state;
pub(crate) mod suggest;
pub(crate) mod supervisor;
pub(crate) mod task;
pub(crate) mod trace;
pub(crate) mod ui;
pub(crate) mod watch;
pub(crate) mod worktree;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::commands::Context;
use crate::error::Error;
use crate::ui::Ui;

/// Parse arguments, run the command, and return the process exit code.
pub fn main() -> i32 {
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    if first.as_deref() == Some(std::ffi::OsStr::new(git::fsmonitor::HOOK_COMMAND)) {
        return git::fsmonitor::hook_main(&args.collect::<Vec<_>>());
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(proc::reaper::GUARD_COMMAND)) {
        return proc::reaper::main(&args.collect::<Vec<_>>());
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(worktree::own_files::COMMAND)) {
        return worktree::own_files::main(&args.collect::<Vec<_>>());
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(sandbox::confine::COMMAND)) {
        return sandbox::confine::main(&args.collect::<Vec<_>>());
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(commands::manual::MAN_COMMAND)) {
        return commands::manual::man_main(&args.collect::<Vec<_>>());
    }
    let cli = Cli::parse();
    ui::init_color(cli.color);
    trace::init(cli.verbose);
    let json = match &cli.command {
        Command::Run(a) => a.options.json,
        Command::Resume(a) => a.options.json,
        _ => false,
    };
    let ui = Ui {
        quiet: cli.quiet,
        json,
    };
    match dispatch(&cli, ui) {
        Ok(code) => code,
        // A run closes its own errors (its `halted` event said); what is left is told here.
        Err(e) => {
            ui.error(&e);
            e.exit_code()
        }
    }
}

fn dispatch(cli: &Cli, ui: Ui) -> Result<i32, Error> {
    // A bad bound for ralph's git (its memory, the agent's LFS objects it takes) stops it
    // here, before any git runs.
    git::memory::limit().map_err(Error::user)?;
    git::lfs::max_bytes().map_err(Error::user)?;
    let dir = cli.dir.as_deref();
    let ctx = || Context::new(dir, ui);
    match &cli.command {
        Command::Init(args) => commands::init::run(&ctx()?, args),
        Command::Run(args) => commands::run::run(ui, dir, args),
        Command::Resume(args) => commands::run::resume(ui, dir, args),
        Command::Status(args) => commands::status::run(&ctx()?, args.json, args.all),
        Command::Merge(args) => commands::merge::run(&ctx()?, &args.name),
        Command::Watch => commands::watch::run(&ctx()?),
        Command::Serve(args) => serve::run(&ctx()?, args),
        Command::Completions(args) => commands::manual::completions(args),
        Command::Ask(args) => commands::person::ask(&ctx()?, args),
        Command::Answer(args) => commands::person::answer(&ctx()?, args),
        Command::Hint(args) => commands::person::hint(&ctx()?, args),
    }
}
