//! The memory of every git command ralph runs outside the sandbox (issue 29, "Bounds"): its
//! data — the heap and every private writable mapping, `RLIMIT_DATA` — at most
//! [`MEMORY_ENV`] (default 4 GiB), set between fork and exec. A git directory with a file that
//! leads to `/dev/zero` (`objects/info/alternates`, `info/attributes`, a ref) has git read
//! without end: it dies of the limit ("Out of memory") instead of taking the machine's memory.
//! Packs git maps to read them are not data, so a large repository is not refused for its size.
//! What git starts inherits the limit (the sandbox's `git upload-pack` of a fetch, a merge
//! driver); ralph itself and its libgit2 are not bounded by it.

use std::process::Command;
use std::sync::OnceLock;

/// The most data of one git command: bytes (`512M`, `4G`).
pub(crate) const MEMORY_ENV: &str = "RALPH_GIT_MEMORY";

/// The default: 4 GiB.
const DEFAULT: u64 = 4 << 30;

static LIMIT: OnceLock<u64> = OnceLock::new();

/// The limit this process uses, [`MEMORY_ENV`] read once: an error naming the variable when it
/// is not a size. ralph calls it at its start, so that a bad value stops it there.
pub(crate) fn limit() -> Result<u64, String> {
    if let Some(n) = LIMIT.get() {
        return Ok(*n);
    }
    let n = match std::env::var(MEMORY_ENV) {
        Ok(v) if !v.trim().is_empty() => parse(&v).ok_or_else(|| {
            format!("{MEMORY_ENV}=`{v}` is not a size: write bytes, such as `512M` or `8G`")
        })?,
        _ => DEFAULT,
    };
    Ok(*LIMIT.get_or_init(|| n))
}

/// Bound `cmd`'s data to [`limit`] (the default where the variable is bad: ralph refused it at
/// its start), never above the hard limit ralph has.
pub(crate) fn bound(cmd: &mut Command) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    use std::os::unix::process::CommandExt;
    let want = limit().unwrap_or(DEFAULT);
    let hard = getrlimit(Resource::Data).maximum;
    let limit = Rlimit {
        current: Some(hard.map_or(want, |h| want.min(h))),
        maximum: hard,
    };
    // SAFETY: between fork and exec the closure makes one `setrlimit` system call on values
    // computed before the fork: no allocation, no lock. `pre_exec` is unsafe by its nature
    // (std's only hook between fork and exec); `Command` has no safe way to set a limit.
    unsafe {
        cmd.pre_exec(move || setrlimit(Resource::Data, limit).map_err(Into::into));
    }
}

/// `512M`, `4G`, `1048576`: bytes, at least a mebibyte (git needs that much to start).
pub(crate) fn parse(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        (i, 'T' | 't') => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(1 << shift).filter(|b| *b >= 1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bytes_with_a_unit_and_at_least_a_mebibyte() {
        assert_eq!(parse("4G"), Some(4 << 30));
        assert_eq!(parse(" 512m "), Some(512 << 20));
        assert_eq!(parse("1048576"), Some(1 << 20));
        for bad in ["", "G", "lots", "0", "100K", "-1G", "99999999999T"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_bounded_git_and_what_it_starts_have_the_data_limit() {
        let d = tempfile::tempdir().unwrap();
        let git = |bounded: bool, args: &[&str]| {
            let mut cmd = Command::new("git");
            cmd.current_dir(d.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(args);
            if bounded {
                bound(&mut cmd);
            }
            cmd.output().unwrap()
        };
        assert!(git(false, &["init", "-q"]).status.success());
        let data = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();
        let out = git(true, &["rev-parse", "--git-dir"]);
        assert!(out.status.success(), "{}", data(&out));
        // The limit is there for what git starts (a shell from an alias: `ulimit -d`, KiB).
        let out = git(true, &["-c", "alias.d=!ulimit -d", "d"]);
        assert_eq!(data(&out).trim(), (limit().unwrap() >> 10).to_string());
        // Control: unbounded, the shell sees no such limit (the test's own, unlimited).
        let out = git(false, &["-c", "alias.d=!ulimit -d", "d"]);
        assert_ne!(data(&out).trim(), (limit().unwrap() >> 10).to_string());
    }
}
