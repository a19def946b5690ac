//! The sandbox's bounds (SPEC §4): the size of each private tmpfs it mounts, and the most
//! processes the agent's tree may have. Without a size, each tmpfs could take half the memory —
//! `/tmp`, `/run` and `/dev` (where `/dev/shm` lies) together 150 % of it.
//!
//! - `/tmp` and `/dev/shm`: each [`TMPFS_ENV`] (default a quarter of the memory: both together
//!   half); `/run` and `/var/run`: 64 MiB each, or that when it is smaller. Sizes need bwrap 0.8
//!   (`--size`); an older one mounts them unsized, and the run says so.
//! - `/dev` itself and the empty directories that hide secrets: read-only (`argv.rs`).
//! - processes: [`PIDS_ENV`] (default 4096), by a cgroup's `pids.max` where ralph can make one
//!   (`cgroup.rs`), and by `RLIMIT_NPROC` in the sandbox's user namespace (`confine.rs`), which
//!   the kernel applies to every user but root.

use crate::error::{Error, Result};

/// The size of `/tmp` and of `/dev/shm` each: bytes (`512M`, `4G`) or a share of the memory
/// (`25%`).
pub(crate) const TMPFS_ENV: &str = "RALPH_SANDBOX_TMPFS";

/// The most processes of the sandbox (every attempt's own count).
pub(crate) const PIDS_ENV: &str = "RALPH_SANDBOX_PIDS";

/// `/run` and `/var/run` hold what bwrap and ralph put there (a few files).
const RUN_SIZE: u64 = 64 << 20;

/// The default share of the memory for `/tmp` and `/dev/shm` each, in percent.
const TMPFS_SHARE: u64 = 25;

/// The default pids limit.
const PIDS: u64 = 4096;

/// The sizes of the private tmpfs mounts, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// `/tmp` and `/dev/shm`, each.
    pub(crate) tmp: u64,
    /// `/run` and `/var/run`, each.
    pub(crate) run: u64,
}

impl Sizes {
    /// The sizes this run uses: [`TMPFS_ENV`], else a quarter of the memory.
    pub(crate) fn of_host() -> Result<Sizes> {
        let tmp = match std::env::var(TMPFS_ENV) {
            Ok(v) if !v.trim().is_empty() => parse_size(&v, memory()).ok_or_else(|| {
                Error::user(format!("{TMPFS_ENV}=`{v}` is not a size"))
                    .with_hint("write bytes (`512M`, `4G`) or a share of the memory (`25%`)")
            })?,
            _ => share(memory(), TMPFS_SHARE),
        };
        Ok(Sizes {
            tmp,
            run: tmp.min(RUN_SIZE),
        })
    }
}

/// The pids limit this run uses: [`PIDS_ENV`], else 4096.
pub(crate) fn pids() -> Result<u64> {
    match std::env::var(PIDS_ENV) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                Error::user(format!("{PIDS_ENV}=`{v}` is not a number of processes"))
                    .with_hint("write a whole number above 0, such as 4096")
            }),
        _ => Ok(PIDS),
    }
}

/// `512M`, `4G`, `1048576`, `25%` (of `memory`): bytes, at least a page; `None` for anything
/// else (a size of 0 would be no size at all to the kernel's tmpfs).
pub(crate) fn parse_size(text: &str, memory: u64) -> Option<u64> {
    let t = text.trim();
    let bytes = if let Some(share) = t.strip_suffix('%') {
        let share: u64 = share
            .trim()
            .parse()
            .ok()
            .filter(|s| (1..=100).contains(s))?;
        self::share(memory, share)
    } else {
        let (digits, shift) = match t.char_indices().last()? {
            (i, 'k' | 'K') => (&t[..i], 10),
            (i, 'm' | 'M') => (&t[..i], 20),
            (i, 'g' | 'G') => (&t[..i], 30),
            (i, 't' | 'T') => (&t[..i], 40),
            _ => (t, 0),
        };
        let n: u64 = digits.trim().parse().ok()?;
        n.checked_mul(1u64 << shift)?
    };
    (bytes >= 4096).then_some(bytes)
}

/// `percent` % of `bytes`.
fn share(bytes: u64, percent: u64) -> u64 {
    u64::try_from(u128::from(bytes) * u128::from(percent) / 100).unwrap_or(u64::MAX)
}

/// The machine's memory in bytes (4 GiB when the kernel does not say).
fn memory() -> u64 {
    // SAFETY: sysconf takes an integer and returns one; nothing of ours is read or written.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(p), Ok(s)) if p > 0 && s > 0 => p.saturating_mul(s),
        _ => 4 << 30,
    }
}

/// Whether this bwrap sizes a tmpfs (`--size`, bubblewrap 0.8): from `bwrap --version`
/// (`bubblewrap 0.8.0`).
pub(crate) fn sizes_tmpfs(version: &str) -> bool {
    let Some(v) = version.split_whitespace().last() else {
        return false;
    };
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (0, 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bytes_with_a_unit_or_a_share_of_the_memory() {
        let mem = 16u64 << 30;
        assert_eq!(parse_size("512M", mem), Some(512 << 20));
        assert_eq!(parse_size("4G", mem), Some(4 << 30));
        assert_eq!(parse_size("1048576", mem), Some(1 << 20));
        assert_eq!(parse_size("25%", mem), Some(4 << 30));
        for bad in [
            "",
            "0",
            "12",
            "x",
            "4Q",
            "0%",
            "101%",
            "-1G",
            "99999999999T",
        ] {
            assert_eq!(parse_size(bad, mem), None, "{bad}");
        }
    }

    #[test]
    fn bwrap_sizes_a_tmpfs_from_0_8() {
        assert!(sizes_tmpfs("bubblewrap 0.8.0"));
        assert!(sizes_tmpfs("bubblewrap 0.11.0"));
        assert!(sizes_tmpfs("bubblewrap 1.0"));
        assert!(!sizes_tmpfs("bubblewrap 0.6.2"));
        assert!(!sizes_tmpfs(""));
    }
}
