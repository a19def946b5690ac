//! The step inside the sandbox (`ralph __confine -- PROGRAM ARGS`): after bubblewrap has made
//! its mounts (a Landlocked process could not), ralph restricts itself with Landlock's scopes —
//! no connecting to abstract UNIX sockets made outside the sandbox (X11's `@/tmp/.X11-unix/X0`,
//! some D-Bus buses: reachable whenever the network namespace is the host's), no signals to
//! processes outside it — and becomes the program. Landlock ABI 6 (Linux 6.12) has the scopes;
//! on an older kernel the step restricts what it can and the run says so once ([`supported`]).

use std::ffi::OsString;

/// The hidden subcommand.
pub const COMMAND: &str = "__confine";

/// Its flag: every scope is required.
pub const SCOPED: &str = "--scoped";

/// `ralph __confine [--scoped] -- PROGRAM [ARGS...]`: returns only when the program could not be
/// run (127 when it is not there, 126 otherwise, as a shell does), or the restriction failed
/// (126). `--scoped`: the kernel has the scopes (ralph probed it outside), so anything less than
/// all of them is a failure, not a degraded sandbox.
pub fn main(args: &[OsString]) -> i32 {
    let (scoped, args) = match args.split_first() {
        Some((flag, rest)) if flag == SCOPED => (true, rest),
        _ => (false, args),
    };
    let Some((program, rest)) = (match args.split_first() {
        Some((dashes, rest)) if dashes == "--" => rest.split_first(),
        _ => None,
    }) else {
        eprintln!("ralph {COMMAND}: [{SCOPED}] -- PROGRAM [ARGS...]");
        return 2;
    };
    if let Err(e) = restrict(scoped) {
        eprintln!("ralph {COMMAND}: cannot confine the sandbox with Landlock: {e}");
        return 126;
    }
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("ralph {COMMAND}: {}: {e}", program.to_string_lossy());
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

#[cfg(target_os = "linux")]
fn ruleset(
    level: landlock::CompatLevel,
) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{ABI, Access, Compatible, Ruleset, RulesetAttr, Scope};
    Ruleset::default()
        .set_compatibility(level)
        .scope(Scope::from_all(ABI::V6))?
        .create()
}

/// Restrict this process and what it becomes: with every scope (`required`), or as far as the
/// kernel can.
#[cfg(target_os = "linux")]
fn restrict(required: bool) -> Result<(), landlock::RulesetError> {
    use landlock::CompatLevel;
    let level = if required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    ruleset(level)?.restrict_self()?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict(_required: bool) -> Result<(), std::io::Error> {
    Ok(())
}

/// Whether this kernel has the scopes (the probe makes a ruleset and drops it: ralph itself is
/// not restricted).
#[cfg(target_os = "linux")]
pub fn supported() -> bool {
    ruleset(landlock::CompatLevel::HardRequirement).is_ok()
}

#[cfg(not(target_os = "linux"))]
pub fn supported() -> bool {
    false
}
