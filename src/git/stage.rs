//! Staging exactly as `git add -A` (SPEC §8): `git status` (through the file monitor when one
//! runs) names what changed; those paths, less what the commit guard keeps out and what git
//! refuses, are staged by git. When every one of them is a file (or a deleted or tracked
//! gitlink path) and no sparse checkout is on, `git update-index --add --remove --replace` takes
//! exactly those paths — git's own code for hashing a path (clean filters, autocrlf, modes,
//! gitlinks) without `git add`'s matching of every index entry against every pathspec, which at
//! 100,000 files costs more than the staging itself; untracked directories were expanded by
//! `git ls-files --others --exclude-standard`, so the ignore rules are git's. Otherwise (a nested
//! repository to record, a sparse checkout, an ancestor replaced by a file, a tracked file
//! replaced by a directory — whose files are listed the same way, for the guard) the paths go
//! to `git add -A` as literal pathspecs, with what the guard keeps out as exclusions. Paths are
//! git's bytes throughout: a name need not be UTF-8.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::{GitError, Repo, Staged};

/// Past this many changed paths, `git add -A` takes the whole tree (with the exclusions).
const MAX_PATHSPECS: usize = 20_000;

/// Past this many bytes of untracked directories' names, `git ls-files --others` lists every
/// untracked file instead of taking them as arguments (a command line is bounded).
const MAX_SPEC_BYTES: usize = 128 * 1024;

/// Why a nested repository is left out under `--sandbox`.
const SANDBOXED_NESTED: &str = "it is a nested repository, whose git directory ralph's git never opens under --sandbox (the agent could write it): neither it nor its files are committed";

/// One line of `git status --porcelain=v1 -z --no-renames`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(crate) x: u8,
    pub(crate) y: u8,
    /// The path as git printed it (not always UTF-8).
    pub(crate) path: Vec<u8>,
}

impl Entry {
    fn untracked(&self) -> bool {
        self.x == b'?' && self.y == b'?'
    }

    /// An unresolved conflict: `AU`, `UD`, `UA`, `DU` or `UU`.
    fn unmerged(&self) -> bool {
        self.x == b'U' || self.y == b'U'
    }

    /// `DD` or `AA`: both deleted or both added in a conflict — or, for `DD`, an intent-to-add
    /// entry whose file was deleted (`git rm --cached f; git add -N f; rm f`), which is none.
    fn maybe_unmerged(&self) -> bool {
        matches!((self.x, self.y), (b'A', b'A') | (b'D', b'D'))
    }
}

/// Parse `git status --porcelain=v1 -z --no-renames` output.
pub(super) fn parse_status(out: &[u8]) -> Vec<Entry> {
    out.split(|&b| b == 0)
        .filter(|r| r.len() > 3)
        .map(|r| Entry {
            x: r[0],
            y: r[1],
            path: r[3..].to_vec(),
        })
        .collect()
}

/// What goes to `git add` (or `git update-index`).
#[derive(Default)]
struct AddPlan {
    /// Paths as git names them (bytes, not always UTF-8), for pathspecs.
    include: Vec<Vec<u8>>,
    /// Every path to stage, one by one (for `git update-index`).
    files: Vec<Vec<u8>>,
    /// Something only `git add` does as `git add -A` would (see the module's doc).
    needs_add: bool,
    exclude: Vec<Vec<u8>>,
    left_out: Vec<(String, String)>,
    /// Untracked directories whose files are yet to be listed, each ending in `/`.
    listed: Vec<Vec<u8>>,
}

impl AddPlan {
    fn leave_out(&mut self, path: &[u8], why: String) {
        self.exclude.push(path.to_vec());
        self.left_out
            .push((String::from_utf8_lossy(path).into_owned(), why));
    }
}

/// Why git cannot add what is at `abs` (a FIFO, a socket, a device), if it cannot.
fn refused(abs: &Path) -> Option<String> {
    let ft = std::fs::symlink_metadata(abs).ok()?.file_type();
    let what = if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else {
        return None;
    };
    Some(format!(
        "it is {what}, which git cannot add (a tracked version is kept)"
    ))
}

impl Repo {
    /// ralph's runtime files (its logs, transcripts, state, barriers, temporary names), as paths
    /// from the root: a name ending in `/` is a directory, one ending in `*` a prefix. Staging
    /// leaves them out, untracked or tracked, whatever the ignore rules say — the agent can
    /// write every ignore file — and without a word: they are ralph's own.
    pub(crate) fn keep_out(&mut self, names: Vec<String>) {
        self.git.own = names;
    }

    /// Whether `path` (as git names it) is one of ralph's runtime files, or under one.
    fn is_own(&self, path: &[u8]) -> bool {
        self.git.own.iter().any(|name| {
            let name = name.as_bytes();
            match (name.strip_suffix(b"/"), name.strip_suffix(b"*")) {
                (Some(dir), _) => path
                    .strip_prefix(dir)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/")),
                (_, Some(prefix)) => path.starts_with(prefix),
                _ => path == name,
            }
        })
    }

    /// Stage as `git add -A` would, less the paths `exclude` names (the commit guard: only for
    /// paths not yet tracked) and the paths git refuses, writing the index.
    pub fn stage_all(
        &mut self,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
    ) -> Result<Staged, GitError> {
        self.stage_unless_only(exclude, &[])
    }

    /// [`Self::stage_all`], unless the only changes are of `alone` (ralph's bookkeeping, which
    /// never goes alone into a commit), each unstaged: then nothing is staged and the index is
    /// not written (issue 32) — `changed` names them, `tree` is HEAD's.
    pub(crate) fn stage_unless_only(
        &mut self,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        alone: &[String],
    ) -> Result<Staged, GitError> {
        self.check_state()?;
        self.wait_for_lock(self.lock_wait)?;
        // A submodule's new commit counts whatever the configuration hides (`git add -A`
        // stages it); what changed inside a submodule does not.
        let out = self.status(&[
            "--porcelain=v1",
            "-z",
            "--no-renames",
            "-unormal",
            "--ignore-submodules=dirty",
        ])?;
        let entries = parse_status(&out);
        if entries.iter().any(Entry::unmerged) {
            return Err(GitError::Conflicts);
        }
        if entries.iter().any(Entry::maybe_unmerged) {
            self.check_conflicts()?;
        }
        if let Some(staged) = self.only_bookkeeping(&entries, alone)? {
            return Ok(staged);
        }
        let mut plan = AddPlan {
            needs_add: self.sparse(),
            ..AddPlan::default()
        };
        for e in entries {
            self.plan_entry(&e, exclude, &mut plan)?;
        }
        self.plan_listed(exclude, &mut plan)?;
        self.plan_left_alone(&mut plan)?;
        if plan.needs_add && !plan.include.is_empty() {
            self.add(&plan)?;
        } else if !plan.files.is_empty() {
            self.update_index(&plan.files)?;
        }
        let tree = self.index_tree()?;
        Ok(Staged {
            tree,
            changed: self.changed_paths(tree)?,
            left_out: plan.left_out,
        })
    }

    /// `Some` when every entry is a runtime file of ralph's or one of `alone`, changed in the
    /// work tree only (the index as HEAD has it), on a branch that has a commit.
    fn only_bookkeeping(
        &self,
        entries: &[Entry],
        alone: &[String],
    ) -> Result<Option<Staged>, GitError> {
        let named = |path: &[u8]| alone.iter().any(|a| a.as_bytes() == path);
        // An untracked directory (`.ralph/` before its first commit) counts when every file in
        // it is ralph's: walked here, following no link, bounded.
        let only = entries.iter().all(|e| match e.path.strip_suffix(b"/") {
            _ if self.is_own(&e.path) => true,
            Some(dir) if e.untracked() => self.only_files_of(dir, &named, &mut 256),
            _ => named(&e.path) && (e.untracked() || e.x == b' '),
        });
        if alone.is_empty() || !only {
            return Ok(None);
        }
        let Some(head) = self.git2().head().ok().and_then(|h| h.peel_to_tree().ok()) else {
            return Ok(None);
        };
        let changed = entries
            .iter()
            .filter(|e| !self.is_own(&e.path))
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        Ok(Some(Staged {
            tree: head.id(),
            changed,
            left_out: Vec::new(),
        }))
    }

    /// Whether every file under the untracked directory `dir` is a runtime file of ralph's or
    /// `named`; anything else there — another file, a link, more than `budget` entries — is not.
    fn only_files_of(&self, dir: &[u8], named: &dyn Fn(&[u8]) -> bool, budget: &mut u32) -> bool {
        let Ok(read) = std::fs::read_dir(self.abs(dir)) else {
            return false;
        };
        read.into_iter().all(|entry| {
            let Ok(entry) = entry else { return false };
            *budget = budget.saturating_sub(1);
            let mut path = dir.to_vec();
            path.push(b'/');
            path.extend_from_slice(entry.file_name().as_bytes());
            match entry.file_type() {
                _ if *budget == 0 => false,
                _ if self.is_own(&path) => true,
                Ok(t) if t.is_dir() => self.only_files_of(&path, named, budget),
                Ok(t) if t.is_file() => named(&path),
                _ => false,
            }
        })
    }

    fn plan_entry(
        &self,
        e: &Entry,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        plan: &mut AddPlan,
    ) -> Result<(), GitError> {
        // Already staged as the work tree has it: nothing for `git add` to do.
        if !e.untracked() && e.y == b' ' {
            return Ok(());
        }
        let path = e.path.strip_suffix(b"/").unwrap_or(&e.path);
        if self.is_own(path) {
            plan.exclude.push(path.to_vec());
            return Ok(());
        }
        let abs = self.abs(path);
        if let Some(why) = refused(&abs) {
            plan.leave_out(path, why);
            return Ok(());
        }
        if !e.untracked() {
            let reachable = self.reachable(path);
            let retyped = matches!(e.x, b'D' | b'T') || matches!(e.y, b'D' | b'T');
            if reachable == path && retyped && abs.is_dir() {
                // A tracked file replaced by a directory: `git add` removes the file and adds
                // what the directory holds, each file through the guard as in any new
                // directory; or records it as a gitlink, when it is a nested repository.
                plan.needs_add = true;
                return self.plan_untracked_dir(path, plan);
            }
            // An ancestor replaced by a file: only a pathspec `git add` follows reaches it.
            plan.needs_add |= reachable != path;
            plan.include.push(reachable.to_vec());
            plan.files.push(path.to_vec());
            return Ok(());
        }
        if e.path.ends_with(b"/") {
            return self.plan_untracked_dir(path, plan);
        }
        match exclude(&String::from_utf8_lossy(path), &abs) {
            Some(why) => plan.leave_out(path, why),
            None => {
                plan.include.push(path.to_vec());
                plan.files.push(path.to_vec());
            }
        }
        Ok(())
    }

    /// A sparse checkout (or a sparse index): `git add` knows which paths it must leave alone.
    pub(super) fn sparse(&self) -> bool {
        ["core.sparseCheckout", "index.sparse"].iter().any(|k| {
            self.config_value(k).is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1")
            })
        })
    }

    /// A pathspec git can follow to `path`: when an ancestor directory was replaced by a symlink
    /// or a file, git refuses a pathspec "beyond" it; the ancestor itself names the same index
    /// entries (and what replaced them).
    fn reachable<'p>(&self, path: &'p [u8]) -> &'p [u8] {
        for (i, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
            let ancestor = &path[..i];
            let real_dir = std::fs::symlink_metadata(self.abs(ancestor))
                .map(|m| m.is_dir())
                .unwrap_or(true);
            if !real_dir {
                return ancestor;
            }
        }
        path
    }

    /// Where a path git names (bytes, from the root) is on disk.
    fn abs(&self, path: &[u8]) -> PathBuf {
        self.root.join(OsStr::from_bytes(path))
    }

    /// An untracked directory: everything git would add under it, each file through the guard
    /// once [`Self::plan_listed`] has listed them.
    fn plan_untracked_dir(&self, dir: &[u8], plan: &mut AddPlan) -> Result<(), GitError> {
        if self.abs(dir).join(".git").exists() {
            return self.plan_nested_repo(dir, plan);
        }
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        plan.listed.push(prefix);
        plan.include.push(dir.to_vec());
        Ok(())
    }

    /// The files of every untracked directory the plan holds, each through the guard, from one
    /// `git ls-files --others --exclude-standard`: each run reads the whole index, and the agent
    /// decides how many new directories there are.
    fn plan_listed(
        &self,
        exclude: &dyn Fn(&str, &Path) -> Option<String>,
        plan: &mut AddPlan,
    ) -> Result<(), GitError> {
        let dirs: HashSet<Vec<u8>> = std::mem::take(&mut plan.listed).into_iter().collect();
        if dirs.is_empty() {
            return Ok(());
        }
        // Names git can be given as arguments, within a command line's bounds; otherwise
        // every untracked file, those under the directories picked out below.
        let specs: Option<Vec<String>> = dirs
            .iter()
            .map(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .map(|p| format!(":(literal){p}"))
            })
            .collect::<Option<_>>()
            .filter(|s: &Vec<String>| s.iter().map(String::len).sum::<usize>() <= MAX_SPEC_BYTES);
        let mut args = vec!["ls-files", "-z", "--others", "--exclude-standard"];
        if let Some(specs) = &specs {
            args.push("--");
            args.extend(specs.iter().map(String::as_str));
        }
        let out = self.git.unmonitored().run(&args, None)?;
        let under = |rec: &[u8]| {
            rec.iter()
                .enumerate()
                .any(|(i, b)| *b == b'/' && i + 1 < rec.len() && dirs.contains(&rec[..=i]))
        };
        for rec in out.split(|&b| b == 0).filter(|r| under(r)) {
            let rel = rec.strip_suffix(b"/").unwrap_or(rec);
            if self.is_own(rel) {
                plan.exclude.push(rel.to_vec());
                continue;
            }
            let abs = self.abs(rel);
            if rec.ends_with(b"/") && abs.join(".git").exists() {
                self.plan_nested_repo(rel, plan)?;
                continue;
            }
            match refused(&abs).or_else(|| exclude(&String::from_utf8_lossy(rel), &abs)) {
                Some(why) => plan.leave_out(rel, why),
                None => plan.files.push(rel.to_vec()),
            }
        }
        Ok(())
    }

    /// Under `--sandbox`: the nested repositories ralph's git left alone (`nested.rs`), each
    /// named in a warning unless it is a gitlink the index holds (which keeps its commit), one of
    /// ralph's own files, or ignored (`git check-ignore`, which reads no `.git`).
    fn plan_left_alone(&self, plan: &mut AddPlan) -> Result<(), GitError> {
        let nested = self.git.nested()?;
        if nested.is_empty() {
            return Ok(());
        }
        let tracked = self.gitlinks()?;
        let untracked: Vec<&Vec<u8>> = nested
            .iter()
            .filter(|n| !tracked.contains(n) && !self.is_own(n))
            .collect();
        if untracked.is_empty() {
            return Ok(());
        }
        let mut list = Vec::new();
        for n in &untracked {
            list.extend_from_slice(n);
            list.push(0);
        }
        let out = self
            .git
            .unmonitored()
            .output(&["check-ignore", "-z", "--stdin"], Some(&list))?;
        let ignored: HashSet<&[u8]> = out.stdout.split(|&b| b == 0).collect();
        for n in untracked
            .into_iter()
            .filter(|n| !ignored.contains(n.as_slice()))
        {
            plan.left_out
                .push((super::nested::shown(n), SANDBOXED_NESTED.into()));
        }
        Ok(())
    }

    /// An untracked nested repository: git records it as a gitlink when it has a commit, and
    /// refuses it otherwise. Under `--sandbox` ralph's git never meets one (`nested.rs`); were
    /// it to, it is left out unopened.
    fn plan_nested_repo(&self, dir: &[u8], plan: &mut AddPlan) -> Result<(), GitError> {
        if self.git.sandboxed.is_some() {
            plan.leave_out(dir, SANDBOXED_NESTED.into());
            return Ok(());
        }
        let has_commit = git2::Repository::open(self.abs(dir))
            .ok()
            .is_some_and(|r| r.head().and_then(|h| h.peel_to_commit()).is_ok());
        if has_commit {
            plan.include.push(dir.to_vec());
            plan.needs_add = true;
        } else {
            plan.leave_out(
                dir,
                "it is a nested repository without a commit, which git cannot add".into(),
            );
        }
        Ok(())
    }

    /// `git add -A` of the planned paths as literal pathspecs, less the exclusions.
    fn add(&self, plan: &AddPlan) -> Result<(), GitError> {
        let mut specs: Vec<u8> = Vec::new();
        let mut push = |magic: &str, p: &[u8]| {
            specs.extend_from_slice(magic.as_bytes());
            specs.extend_from_slice(p);
            specs.push(0);
        };
        if plan.include.len() > MAX_PATHSPECS {
            push(":/", b"");
        } else {
            for p in &plan.include {
                push(":(literal)", p);
            }
        }
        for p in &plan.exclude {
            push(":(exclude,literal)", p);
        }
        let args = ["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"];
        let out = self.git.output(&args, Some(&specs))?;
        added(&args, &out)
    }

    /// Stage exactly `files` (paths from the root; missing ones are removed from the index).
    fn update_index(&self, files: &[Vec<u8>]) -> Result<(), GitError> {
        let mut list: Vec<u8> = Vec::new();
        for f in files {
            list.extend_from_slice(f);
            list.push(0);
        }
        let args = [
            "update-index",
            "--add",
            "--remove",
            "--replace",
            "-z",
            "--stdin",
        ];
        self.git.run(&args, Some(&list)).map(drop)
    }
}

/// Whether `git add` did its work: success, or git's advice that it left out paths the user's
/// ignore rules or sparse-checkout definition exclude (exit 1 after staging everything else —
/// what `git add -A` itself would leave out).
fn added(args: &[&str], out: &std::process::Output) -> Result<(), GitError> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let advice = stderr.contains("ignored by one of your .gitignore files")
        || stderr.contains("outside of your sparse-checkout definition");
    if out.status.success() || (out.status.code() == Some(1) && advice) {
        return Ok(());
    }
    Err(GitError::Cli {
        command: format!("git {}", args.join(" ")),
        message: stderr.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_records_parse() {
        let e = parse_status(b" M a b\0?? dir/\0D  gone\0");
        assert_eq!(e.len(), 3);
        assert_eq!(
            (e[0].x, e[0].y, e[0].path.as_slice()),
            (b' ', b'M', &b"a b"[..])
        );
        assert!(e[1].untracked() && e[1].path == b"dir/");
        assert_eq!(e[2].path, b"gone");
    }
}
