//! The step inside the sandbox (`ralph __confine [--scoped] [--fifos DIR]... [--refer DIR]...
//! [--nproc N] -- PROGRAM ARGS`): after bubblewrap has made its mounts (a Landlocked process
//! could not), ralph restricts itself with Landlock — no connecting to abstract UNIX sockets
//! made outside the sandbox (X11's `@/tmp/.X11-unix/X0`, some D-Bus buses: reachable whenever
//! the network namespace is the host's), no signals to processes outside it, no FIFO made but in
//! the sandbox's private directories, renames across directories only beneath the places the
//! agent writes — caps the number of processes of its user in the sandbox's user namespace
//! (`RLIMIT_NPROC`), leaves the session keyring it inherited, and becomes the program. Landlock
//! ABI 6 (Linux 6.12) has the scopes; on an older kernel the step restricts what it can and the
//! run says so once ([`supported`]).
//!
//! Why `Refer`: a ruleset that handles any file-system right denies every rename and link across
//! directories unless a rule allows `Refer` there (ABI 2), and on ABI 1 always — `git mv a/x
//! b/x`, git's own object writes, a build's temporary file moved into place. So the file-system
//! part is made only where the kernel has ABI 2, and then allows `Refer` beneath the repository
//! and the other places the agent writes ([`fs_rules`]).
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

/// Its flag: a directory beneath which files may be renamed or linked across directories.
pub(crate) const REFER: &str = "--refer";

/// Its flag: the most processes the sandbox's user may have (`RLIMIT_NPROC`).
pub(crate) const NPROC: &str = "--nproc";

/// What `__confine` was told.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args<'a> {
    scoped: bool,
    fifos: Vec<&'a OsString>,
    refer: Vec<&'a OsString>,
    nproc: Option<u64>,
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
            [flag, dir, tail @ ..] if flag == REFER => {
                out.refer.push(dir);
                rest = tail;
            }
            [flag, n, tail @ ..] if flag == NPROC => {
                match n.to_str().and_then(|n| n.parse().ok()) {
                    Some(n) => out.nproc = Some(n),
                    None => return out,
                }
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

/// `ralph __confine [--scoped] [--fifos DIR]... [--refer DIR]... [--nproc N] -- PROGRAM
/// [ARGS...]`: returns only when the program could not be run (127 when it is not there, 126
/// otherwise, as a shell does), or the restriction failed (126). `--scoped`: the kernel has the
/// scopes (ralph probed it outside), so anything less than all of them is a failure, not a
/// degraded sandbox.
pub(crate) fn main(args: &[OsString]) -> i32 {
    let parsed = parse(args);
    let Some((program, rest)) = parsed.program else {
        eprintln!(
            "ralph {COMMAND}: [{SCOPED}] [{FIFOS} DIR]... [{REFER} DIR]... [{NPROC} N] -- PROGRAM [ARGS...]"
        );
        return 2;
    };
    if let Err(e) = restrict(parsed.scoped, &parsed.fifos, &parsed.refer) {
        eprintln!("ralph {COMMAND}: cannot confine the sandbox with Landlock: {e}");
        return 126;
    }
    if let Some(n) = parsed.nproc
        && let Err(e) = limit_processes(n)
    {
        eprintln!("ralph {COMMAND}: cannot limit the number of processes: {e}");
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

/// `RLIMIT_NPROC`, soft and hard, to `n`: in a user namespace of its own the kernel counts the
/// processes of the sandbox's user in that namespace (and, above it, the user's whole count
/// against the limit the user had), so `n` bounds the agent's tree. The kernel does not apply
/// it to root (`INIT_USER`): as root the sandbox's cgroup bounds it (`pids.rs`).
fn limit_processes(n: u64) -> std::io::Result<()> {
    let limit = rustix::process::Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    rustix::process::setrlimit(rustix::process::Resource::Nproc, limit)?;
    Ok(())
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

/// The file-system rights handled: making FIFOs, and renaming or linking across directories.
#[cfg(target_os = "linux")]
fn fs_rights() -> landlock::BitFlags<landlock::AccessFs> {
    landlock::AccessFs::MakeFifo | landlock::AccessFs::Refer
}

/// Whether this kernel's Landlock has `Refer` (ABI 2, Linux 5.19): without it a ruleset that
/// handles any file-system right forbids every rename across directories, so none is handled.
#[cfg(target_os = "linux")]
pub(crate) fn fs_rules() -> bool {
    use landlock::{AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Refer)
        .and_then(Ruleset::create)
        .is_ok()
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn fs_rules() -> bool {
    false
}

#[cfg(target_os = "linux")]
fn ruleset(
    level: landlock::CompatLevel,
    fifos: &[&OsString],
    refer: &[&OsString],
) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{
        ABI, Access, AccessFs, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope,
    };
    let scoped = Ruleset::default()
        .set_compatibility(level)
        .scope(Scope::from_all(ABI::V6))?;
    if !fs_rules() {
        return scoped.create();
    }
    let created = scoped
        .set_compatibility(landlock::CompatLevel::HardRequirement)
        .handle_access(fs_rights())?
        .create()?;
    let beneath = |dirs: &[&OsString], access: AccessFs| {
        dirs.iter()
            .filter_map(|d| PathFd::new(d).ok())
            .map(move |fd| Ok(PathBeneath::new(fd, access)))
            .collect::<Vec<_>>()
    };
    created
        .add_rules(beneath(fifos, AccessFs::MakeFifo))?
        .add_rules(beneath(refer, AccessFs::Refer))
}

/// Restrict this process and what it becomes: with every scope (`required`), or as far as the
/// kernel can; FIFOs made only beneath `fifos`, renames across directories only beneath `refer`.
#[cfg(target_os = "linux")]
fn restrict(
    required: bool,
    fifos: &[&OsString],
    refer: &[&OsString],
) -> Result<(), landlock::RulesetError> {
    use landlock::CompatLevel;
    let level = if required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    ruleset(level, fifos, refer)?.restrict_self()?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict(
    _required: bool,
    _fifos: &[&OsString],
    _refer: &[&OsString],
) -> Result<(), std::io::Error> {
    Ok(())
}

/// Whether this kernel has the scopes (the probe makes a ruleset and drops it: ralph itself is
/// not restricted).
#[cfg(target_os = "linux")]
pub(crate) fn supported() -> bool {
    ruleset(landlock::CompatLevel::HardRequirement, &[], &[]).is_ok()
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
            "--scoped", "--fifos", "/tmp", "--fifos", "/run", "--refer", "/r", "--nproc", "64",
            "--", "sh", "--fifos", "x",
        ]);
        let p = parse(&a);
        assert!(p.scoped);
        assert_eq!(p.fifos, [&a[2], &a[4]]);
        assert_eq!(p.refer, [&a[6]]);
        assert_eq!(p.nproc, Some(64));
        let (program, rest) = p.program.unwrap();
        assert_eq!(program, "sh");
        assert_eq!(rest, &a[11..]);
        assert!(
            parse(&os(&["--nproc", "many", "--", "sh"]))
                .program
                .is_none()
        );
        assert_eq!(parse(&os(&["--", "true"])).fifos.len(), 0);
        assert!(parse(&os(&["--fifos"])).program.is_none());
        assert!(parse(&os(&["sh"])).program.is_none());
    }
}
