//! The final check's git side (SPEC §12): one `git status` without ralph's file-system monitor
//! and without the untracked cache — git walks every directory and checks every file — held
//! against the same status through the monitor, which is what ralph's staging and fingerprints
//! believed. Whatever the two disagree on, the watcher missed.

use std::collections::HashSet;

use super::stage::parse_status;
use super::{GitError, Repo};

/// The status both views run: what staging reads (`Repo::stage_all`), and written by neither.
const STATUS: &[&str] = &[
    "--no-optional-locks",
    "status",
    "--porcelain=v1",
    "-z",
    "--no-renames",
    "-unormal",
    "--ignore-submodules=dirty",
];

impl Repo {
    /// The paths a full walk finds in another state than the monitored status says, sorted
    /// (a new directory git lists as one entry is one path, `dir/`); empty without a monitor,
    /// whose statuses walk in full already.
    pub(crate) fn missed_by_monitor(&self) -> Result<Vec<String>, GitError> {
        if self.git.monitor.is_none() {
            return Ok(Vec::new());
        }
        let seen = self.git.run(STATUS, None)?;
        // Without the monitor, and without the untracked cache the repository may enable.
        let mut args = vec!["-c", "core.untrackedCache=false"];
        args.extend_from_slice(STATUS);
        let full = self.git.unmonitored().run(&args, None)?;
        Ok(differences(&seen, &full))
    }
}

/// The paths whose entries differ between two `--porcelain=v1 -z` outputs.
fn differences(seen: &[u8], full: &[u8]) -> Vec<String> {
    let entries = |out: &[u8]| -> HashSet<(u8, u8, Vec<u8>)> {
        parse_status(out)
            .into_iter()
            .map(|e| (e.x, e.y, e.path))
            .collect()
    };
    let (seen, full) = (entries(seen), entries(full));
    let mut paths: Vec<String> = full
        .symmetric_difference(&seen)
        .map(|(_, _, path)| String::from_utf8_lossy(path).into_owned())
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_in_another_state_or_only_on_one_side_differ() {
        let seen = b" M a\0?? new/\0 M same\0";
        let full = b"MM a\0?? new/\0 M same\0 D gone\0?? b c\0";
        assert_eq!(differences(seen, full), ["a", "b c", "gone"]);
        assert!(differences(full, full).is_empty());
        assert_eq!(differences(b" M x\0", b""), ["x"]);
    }
}
