//! The step inside the sandbox (`ralph __confine [--scoped] [--fifos DIR]... -- PROGRAM ARGS`):
//! after bubblewrap has made its mounts (a Landlocked process could not), ralph restricts
//! itself with Landlock — no connecting to abstract UNIX sockets made outside the sandbox
//! (X11's `@/tmp/.X11-unix/X0`, some D-Bus buses: reachable whenever the network namespace is
//! the host's), no signals to processes outside it, no FIFO made but in the sandbox's private
//! directories — leaves the session keyring it inherited, and becomes the program. Landlock ABI 6
//! (Linux 6.12) has the scopes; on an older kernel the step restricts what it can and the run
//! says so once ([`supported`]).
//!
//! Why FIFOs: git, and ralph's git commands outside the sandbox, open the repository's files
//! (`.git/index`, `HEAD`, every `.gitignore`) with a blocking `open`; a FIFO there would hang
//! ralph for ever, deaf to Ctrl-C. Why the keyring: the session keyring is a process's, passed on
//! to every child whatever its namespaces, and holds what `keyctl` and Kerberos keep there.

use std::ffi::OsString;

/// The hidden subcommand.
pub(crate) const COMMAND: &str = "__confine";

/// Its flag: every scope is required.
pub(crate) const SCOPED: &str = "--scoped";

/// Its flag: a directory (the sandbox's private ones) where FIFOs may still be made.
pub(crate) const FIFOS: &str = "--fifos";

/// What `__confine` was told.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args<'a> {
    scoped: bool,
    fifos: Vec<&'a OsString>,
    program: Option<(&'a OsString, &'a [OsString])>,
}

fn parse(args: &[OsString]) -> Args<'_> {
    let mut out = Args::default();
    let mut rest = args;
    loop {
        match rest {
            [flag, tail @ ..] if flag == SCOPED => {
                out.scoped = true;
                rest = tail;
            }
            [flag, dir, tail @ ..] if flag == FIFOS => {
                out.fifos.push(dir);
                rest = tail;
            }
            [dashes, program, tail @ ..] if dashes == "--" => {
                out.program = Some((program, tail));
                return out;
            }
            _ => return out,
        }
    }
}

/// `ralph __confine [--scoped] [--fifos DIR]... -- PROGRAM [ARGS...]`: returns only when the
/// program could not be run (127 when it is not there, 126 otherwise, as a shell does), or the
/// restriction failed (126). `--scoped`: the kernel has the scopes (ralph probed it outside), so
/// anything less than all of them is a failure, not a degraded sandbox.
pub(crate) fn main(args: &[OsString]) -> i32 {
    let parsed = parse(args);
    let Some((program, rest)) = parsed.program else {
        eprintln!("ralph {COMMAND}: [{SCOPED}] [{FIFOS} DIR]... -- PROGRAM [ARGS...]");
        return 2;
    };
    if let Err(e) = restrict(parsed.scoped, &parsed.fifos) {
        eprintln!("ralph {COMMAND}: cannot confine the sandbox with Landlock: {e}");
        return 126;
    }
    leave_session_keyring();
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("ralph {COMMAND}: {}: {e}", program.to_string_lossy());
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Join a new, empty session keyring: the inherited one stays the user's (its keys can no longer
/// be searched or read from here). A kernel without keyrings has nothing to leave.
fn leave_session_keyring() {
    #[cfg(target_os = "linux")]
    {
        const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
        // SAFETY: keyctl(JOIN_SESSION_KEYRING, NULL) takes integers and a null name, which the
        // kernel reads as "a new anonymous keyring": no memory of ours is read or written. No
        // safe crate covers it: neither rustix nor nix has keyctl, and linux-keyutils (0.2) keeps
        // joining a session keyring to itself.
        let _ = unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_JOIN_SESSION_KEYRING,
                std::ptr::null::<libc::c_char>(),
            )
        };
    }
}

#[cfg(target_os = "linux")]
fn ruleset(
    level: landlock::CompatLevel,
    fifos: &[&OsString],
) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{
        ABI, Access, AccessFs, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope,
    };
    let created = Ruleset::default()
        .set_compatibility(level)
        .scope(Scope::from_all(ABI::V6))?
        // Making a FIFO is ABI 1: wherever there is Landlock at all.
        .set_compatibility(landlock::CompatLevel::BestEffort)
        .handle_access(AccessFs::MakeFifo)?
        .create()?;
    let allowed = fifos
        .iter()
        .filter_map(|d| PathFd::new(d).ok())
        .map(|fd| Ok(PathBeneath::new(fd, AccessFs::MakeFifo)));
    created.add_rules(allowed)
}

/// Restrict this process and what it becomes: with every scope (`required`), or as far as the
/// kernel can; FIFOs made only beneath `fifos`.
#[cfg(target_os = "linux")]
fn restrict(required: bool, fifos: &[&OsString]) -> Result<(), landlock::RulesetError> {
    use landlock::CompatLevel;
    let level = if required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    ruleset(level, fifos)?.restrict_self()?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict(_required: bool, _fifos: &[&OsString]) -> Result<(), std::io::Error> {
    Ok(())
}

/// Whether this kernel has the scopes (the probe makes a ruleset and drops it: ralph itself is
/// not restricted).
#[cfg(target_os = "linux")]
pub(crate) fn supported() -> bool {
    ruleset(landlock::CompatLevel::HardRequirement, &[]).is_ok()
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn supported() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_flags_come_before_the_program_and_its_own_flags_are_its_own() {
        let a = os(&[
            "--scoped", "--fifos", "/tmp", "--fifos", "/run", "--", "sh", "--fifos", "x",
        ]);
        let p = parse(&a);
        assert!(p.scoped);
        assert_eq!(p.fifos, [&a[2], &a[4]]);
        let (program, rest) = p.program.unwrap();
        assert_eq!(program, "sh");
        assert_eq!(rest, &a[7..]);
        assert_eq!(parse(&os(&["--", "true"])).fifos.len(), 0);
        assert!(parse(&os(&["--fifos"])).program.is_none());
        assert!(parse(&os(&["sh"])).program.is_none());
    }
}
