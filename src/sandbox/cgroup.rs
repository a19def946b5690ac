//! A pids limit for the sandbox's processes (`pids.max` of a cgroup of its own), where one can be
//! made: the cgroup v2 hierarchy (beneath ralph's own cgroup, or, as root, the hierarchy's root,
//! when the `pids` controller is on for it), else a cgroup v1 `pids` hierarchy. ralph's guard
//! moves each sandboxed command into it before the command starts (`proc/reaper.rs`, told by
//! [`JOIN_ENV`]), so bwrap and everything under it counts. The cgroup goes with the sandbox.
//!
//! Why both this and `RLIMIT_NPROC` (`confine.rs`): the kernel applies no `RLIMIT_NPROC` to root,
//! and a user cannot make a cgroup where nothing was delegated to it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The variable that tells ralph's guard the `cgroup.procs` to move the command into: the
/// guard's own word (the sandbox only names the file).
pub(crate) use crate::proc::reaper::JOIN_ENV;

/// A cgroup of ralph's own, removed (when empty) on drop.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
}

impl PartialEq for Cgroup {
    fn eq(&self, other: &Self) -> bool {
        self.dir == other.dir
    }
}

impl Eq for Cgroup {}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Cgroup {
    /// A new cgroup whose `pids.max` is `max`, or `None` when none can be made here.
    pub(crate) fn make(max: u64) -> Option<Cgroup> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mounts = parse_mounts(&mountinfo);
        let (v2, v1) = own_paths(&own);
        let mut parents = Vec::new();
        if let Some(m) = mounts.iter().find(|m| m.v2) {
            parents.extend(v2.and_then(|p| m.dir_of(p)));
            parents.push(m.point.clone());
        }
        if let Some(m) = mounts.iter().find(|m| m.pids_v1) {
            parents.extend(v1.and_then(|p| m.dir_of(p)));
        }
        parents.into_iter().find_map(|p| Cgroup::beneath(&p, max))
    }

    /// A cgroup made in `parent` with the `pids` controller and `pids.max` = `max`.
    fn beneath(parent: &Path, max: u64) -> Option<Cgroup> {
        static MADE: AtomicU32 = AtomicU32::new(0);
        remove_stale(parent);
        let name = format!(
            "ralph-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        let cgroup = Cgroup { dir };
        if !cgroup.dir.join("pids.max").exists() {
            // v2: the controller must be on in the parent (it cannot be where the parent holds
            // processes of its own, but for the root).
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+pids");
        }
        std::fs::write(cgroup.dir.join("pids.max"), max.to_string()).ok()?;
        let set = std::fs::read_to_string(cgroup.dir.join("pids.max")).ok()?;
        (set.trim() == max.to_string()).then_some(cgroup)
    }

    /// The file whose writing moves a process in.
    pub(crate) fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

/// The cgroups of ralphs that are gone (one that exited without dropping its sandbox, or was
/// killed): removed when empty, as the kernel allows (`rmdir` of a cgroup holding processes
/// fails).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("ralph-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// A cgroup file system mounted here.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// The directory of the hierarchy it shows.
    root: PathBuf,
    point: PathBuf,
    v2: bool,
    pids_v1: bool,
}

impl Mount {
    /// Where the cgroup `path` of this hierarchy is in this mount.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rel = Path::new(path).strip_prefix(&self.root).ok()?;
        Some(self.point.join(rel))
    }
}

/// The cgroup mounts of `/proc/self/mountinfo` (`ID PARENT DEV ROOT POINT OPTS... - TYPE SOURCE
/// SUPER`).
fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (root, point) = (left.get(3)?, left.get(4)?);
            let fstype = *right.first()?;
            let pids = right
                .get(2)
                .is_some_and(|o| o.split(',').any(|o| o == "pids"));
            (fstype == "cgroup2" || (fstype == "cgroup" && pids)).then(|| Mount {
                root: PathBuf::from(root),
                point: PathBuf::from(point),
                v2: fstype == "cgroup2",
                pids_v1: fstype == "cgroup",
            })
        })
        .collect()
}

/// This process's cgroup in the v2 hierarchy and in the v1 `pids` one (`/proc/self/cgroup`:
/// `ID:CONTROLLERS:PATH`).
fn own_paths(text: &str) -> (Option<&str>, Option<&str>) {
    let mut v2 = None;
    let mut v1 = None;
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == "pids") {
            v1 = Some(path);
        }
    }
    (v2, v1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mounts_and_paths_are_read_as_the_kernel_writes_them() {
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
            39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
            35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
            41 31 0:38 /ns /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let mounts = parse_mounts(mountinfo);
        assert_eq!(mounts.len(), 2);
        assert!(mounts[0].pids_v1 && !mounts[0].v2);
        assert!(mounts[1].v2);
        assert_eq!(
            mounts[1].dir_of("/ns/user.slice"),
            Some(PathBuf::from("/sys/fs/cgroup/unified/user.slice"))
        );
        assert_eq!(mounts[1].dir_of("/elsewhere"), None);
        let (v2, v1) = own_paths("9:name=systemd:/\n8:pids:/a/b\n4:memory:/x\n0::/user.slice\n");
        assert_eq!(v2, Some("/user.slice"));
        assert_eq!(v1, Some("/a/b"));
    }
}
