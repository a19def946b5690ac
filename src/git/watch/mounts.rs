//! The mounts that matter to a watched work tree, from `/proc/self/mountinfo`: a mount at or
//! below the work tree (a bind mount over a tracked directory hides the inodes the watches are
//! on), or over one of its ancestors. The watcher thread polls the file for `POLLPRI` (the
//! kernel's signal that the mount table changed) and compares these lines before and after;
//! mounts elsewhere on the machine are not its business.

use std::io::{Read, Seek};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The lines of `mountinfo` whose mount point is `root`, below it, or above it.
pub(super) fn relevant(mountinfo: &str, root: &Path) -> Vec<String> {
    mountinfo
        .lines()
        .filter(|line| {
            mount_point(line).is_some_and(|p| p.starts_with(root) || root.starts_with(&p))
        })
        .map(str::to_string)
        .collect()
}

/// The mount point of a `mountinfo` line (its fifth field, octal escapes undone).
fn mount_point(line: &str) -> Option<PathBuf> {
    let field = line.split(' ').nth(4)?;
    Some(PathBuf::from(std::ffi::OsString::from_vec(unescape(field))))
}

/// `mountinfo` writes a space, tab, newline and backslash in a path as `\040`, `\011`, `\012`
/// and `\134`.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// The mount table of this process, open for polling, and what mattered in it last time.
pub(super) struct Mounts {
    pub(crate) file: std::fs::File,
    root: PathBuf,
    last: Vec<String>,
}

impl Mounts {
    /// Open `/proc/self/mountinfo` (before the first walk, so a change after it is seen);
    /// `None` where there is none.
    pub(crate) fn open(root: &Path) -> Option<Mounts> {
        let mut file = std::fs::File::open("/proc/self/mountinfo").ok()?;
        let last = read(&mut file).map(|t| relevant(&t, root))?;
        Some(Mounts {
            file,
            root: root.to_path_buf(),
            last,
        })
    }

    /// Whether the kernel says the table changed since the last look (a poll that does not
    /// wait).
    pub(crate) fn signalled(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(self.file.as_fd(), PollFlags::POLLPRI)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
            && fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR))
    }

    /// The kernel said the table changed: whether a mount that matters did (an unreadable
    /// table counts as one).
    pub(crate) fn changed(&mut self) -> bool {
        let now = read(&mut self.file).map(|t| relevant(&t, &self.root));
        match now {
            Some(now) if now == self.last => false,
            Some(now) => {
                self.last = now;
                true
            }
            None => true,
        }
    }
}

fn read(file: &mut std::fs::File) -> Option<String> {
    file.rewind().ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid - proc proc rw
40 22 0:35 / /work/repo\\040two/lib rw - tmpfs tmpfs rw
41 22 8:1 /other /work/repo-sibling rw - ext4 /dev/sda1 rw
42 22 0:36 / /work rw - tmpfs tmpfs rw
";

    #[test]
    fn mounts_at_below_and_above_the_work_tree_matter() {
        let got = relevant(TABLE, Path::new("/work/repo two"));
        let ids: Vec<&str> = got.iter().map(|l| l.split(' ').next().unwrap()).collect();
        // `/`, the bind mount inside (a space in the name), `/work`; not `/proc`, not a
        // sibling whose name merely starts the same.
        assert_eq!(ids, ["22", "40", "42"]);
    }

    #[test]
    fn octal_escapes_are_undone() {
        assert_eq!(unescape(r"a\040b\011c\012d\134e"), b"a b\tc\nd\\e");
        assert_eq!(unescape(r"trailing\04"), b"trailing\\04");
        assert_eq!(unescape(r"\777"), b"?");
    }
}
