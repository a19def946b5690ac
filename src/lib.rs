//! ralph: a supervisor for autonomous coding-agent loops. See ARCHITECTURE.md for the map.

pub mod activity;
pub mod agent;
pub mod cli;
pub mod commands;
pub mod config;
pub mod error;
pub mod event;
pub mod files;
pub mod git;
pub mod guard;
pub mod hooks;
pub mod iter_record;
pub mod live;
pub mod loops;
pub mod markdown;
pub mod proc;
pub mod sandbox;
pub mod signals;
pub mod state;
pub mod supervisor;
pub mod task;
pub(crate) mod trace;
pub mod ui;
pub mod watch;
pub mod worktree;

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
    if first.as_deref() == Some(std::ffi::OsStr::new(sandbox::confine::COMMAND)) {
        return sandbox::confine::main(&args.collect::<Vec<_>>());
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
    let dir = cli.dir.as_deref();
    let ctx = || Context::new(dir, ui);
    match &cli.command {
        Command::Init(args) => commands::init::run(&ctx()?, args),
        Command::Run(args) => commands::run::run(ui, dir, args),
        Command::Resume(args) => commands::run::resume(ui, dir, args),
        Command::Status(args) => commands::status::run(&ctx()?, args.json, args.all),
        Command::Merge(args) => commands::merge::run(&ctx()?, &args.name),
        Command::Watch => commands::watch::run(&ctx()?),
    }
}
