//! Under `--sandbox`, the nested repositories of the work tree are git directories the agent
//! could write (issue 29): ralph's git outside never opens one. git's own walk of the work tree
//! does, as soon as it meets a directory holding a `.git` (`is_nonbare_repository_dir` reads its
//! `HEAD`, `commondir`, configuration; the refresh of a gitlink resolves its `HEAD`), and no
//! option stops it: only a pathspec excluding the directory does. So ralph finds them by its
//! own walk — a directory (not the root) with an entry named `.git`, of any kind, seen in its
//! listing and never opened — and every command of ralph's git that walks the work tree or
//! refreshes the index (`status`, `ls-files --others`, `add`, `diff-files`) is given each one as
//! an `:(exclude,literal)` pathspec (`cli.rs`). Staging leaves them out, each named in a warning
//! unless it is a gitlink already tracked or ignored (`stage.rs`); a gitlink keeps the commit
//! its index entry names.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::Arc;

use super::GitError;
use super::cli::{GitCli, Nested};

/// At most this many bytes of nested repositories' names are excluded on a command line.
const MAX_BYTES: usize = 128 * 1024;

/// The subcommands that walk the work tree or refresh the index's entries against it, and so
/// would open a nested repository's git directory.
pub(super) fn walks(args: &[&str], subcommand: Option<&str>) -> bool {
    match subcommand {
        Some("status" | "add" | "diff-files") => true,
        Some("ls-files") => args.iter().any(|a| matches!(*a, "--others" | "-o")),
        _ => false,
    }
}

/// The directories below `root` (relative to it, as git names them) that hold a `.git` entry;
/// ralph's walk never follows a link, never enters a nested repository, nor reads any `.git`.
pub(super) fn find(root: &Path) -> Result<Vec<Vec<u8>>, GitError> {
    let mut found = Vec::new();
    let mut bytes = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut below = Vec::new();
        let mut nested = false;
        for e in entries.flatten() {
            if e.file_name() == ".git" {
                nested = true;
            } else if e.file_type().is_ok_and(|t| t.is_dir()) {
                below.push(e.path());
            }
        }
        if dir == root || !nested {
            stack.extend(below);
            continue;
        }
        let Ok(rel) = dir.strip_prefix(root) else {
            continue;
        };
        let rel = rel.as_os_str().as_bytes().to_vec();
        bytes += rel.len() + 20;
        if bytes > MAX_BYTES {
            return Err(GitError::Cli {
                command: "ralph's walk for nested repositories".into(),
                message: format!(
                    "{} holds more nested repositories than ralph's git can be told to leave alone ({} KiB of names): under --sandbox ralph's git never opens one",
                    root.display(),
                    MAX_BYTES / 1024
                ),
            });
        }
        found.push(rel);
    }
    found.sort();
    Ok(found)
}

/// The pathspec that keeps git out of the nested repository at `path`.
pub(super) fn exclusion(path: &[u8]) -> OsString {
    let mut spec = b":(exclude,literal)".to_vec();
    spec.extend_from_slice(path);
    OsString::from_vec(spec)
}

/// Whether `args` take their pathspecs from stdin (`--pathspec-from-file=-`).
pub(super) fn from_stdin(args: &[&str]) -> bool {
    args.contains(&"--pathspec-from-file=-")
}

/// `args` with the exclusions of `nested` added after its pathspecs (after a `--` it adds when
/// there is none); unchanged when the pathspecs come from stdin ([`excluded_stdin`]).
pub(super) fn excluded_args(args: &[&str], nested: &[Vec<u8>]) -> Vec<OsString> {
    let mut out: Vec<OsString> = args.iter().map(OsString::from).collect();
    if nested.is_empty() || from_stdin(args) {
        return out;
    }
    if !args.contains(&"--") {
        out.push("--".into());
    }
    out.extend(nested.iter().map(|n| exclusion(n)));
    out
}

/// The pathspecs on `stdin` (NUL-separated: ralph gives `--pathspec-file-nul`) with the
/// exclusions of `nested` added, when `args` take them from there.
pub(super) fn excluded_stdin(
    args: &[&str],
    stdin: Option<&[u8]>,
    nested: &[Vec<u8>],
) -> Option<Vec<u8>> {
    let mut specs = stdin.map(<[u8]>::to_vec);
    if from_stdin(args) && !nested.is_empty() {
        let s = specs.get_or_insert_with(Vec::new);
        for n in nested {
            s.extend_from_slice(exclusion(n).as_bytes());
            s.push(0);
        }
    }
    specs
}

impl GitCli {
    /// This CLI leaving the nested repositories alone (`nested.rs`) with or without `--sandbox`:
    /// for what ralph's git reads of a loop's worktree after the loop, when it may not know
    /// whether the loop was sandboxed.
    pub(crate) fn leaving_nested(&self) -> GitCli {
        let mut git = self.clone();
        git.leave_nested = true;
        git
    }

    fn leaves_nested(&self) -> bool {
        self.sandboxed.is_some() || self.leave_nested
    }

    /// Under `--sandbox`, for a command that walks the work tree: the nested repositories it must
    /// leave alone (`nested.rs`), walked for again whenever a program that may write the tree
    /// started since the last walk (`files::writers_started`; only ralph's own walk can tell
    /// whether one appeared: git's would open it). Empty otherwise.
    pub(super) fn nested_for(
        &self,
        args: &[&str],
        subcommand: Option<&str>,
    ) -> Result<Nested, GitError> {
        if !self.leaves_nested() || !walks(args, subcommand) {
            return Ok(Arc::default());
        }
        let mut last = self
            .nested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The last walk holds while no program that may write the tree started since: ralph's
        // own git commands make no nested repository (its walk never enters `.git`).
        let now = crate::files::writers_started();
        if let Some((_, found)) = last.as_ref().filter(|(at, _)| *at == now) {
            return Ok(Arc::clone(found));
        }
        let found = Arc::new(find(&self.work_tree)?);
        *last = Some((now, Arc::clone(&found)));
        Ok(found)
    }

    /// The nested repositories ralph's last walk found (`nested.rs`), walking now when there
    /// was none or a program that may write the tree started since; empty but under
    /// `--sandbox`.
    pub(crate) fn nested(&self) -> Result<Nested, GitError> {
        if !self.leaves_nested() {
            return Ok(Arc::default());
        }
        let last = self
            .nested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match last {
            Some((at, found)) if at == crate::files::writers_started() => Ok(found),
            _ => Ok(Arc::new(find(&self.work_tree)?)),
        }
    }
}

/// `path` for a message.
pub(super) fn shown(path: &[u8]) -> String {
    OsStr::from_bytes(path).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_with_any_git_entry_is_nested_and_not_entered() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::create_dir_all(root.join("a/b/.git")).unwrap();
        std::fs::create_dir_all(root.join("a/b/c/.git")).unwrap();
        std::fs::create_dir_all(root.join("f")).unwrap();
        std::fs::write(root.join("f/.git"), "gitdir: /elsewhere\n").unwrap();
        std::fs::create_dir_all(root.join("l")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("l/.git")).unwrap();
        std::fs::create_dir_all(root.join("plain/d")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("plain/link")).unwrap();
        assert_eq!(find(root).unwrap(), [&b"a/b"[..], b"f", b"l"]);
    }

    #[test]
    fn exclusions_follow_the_pathspecs_or_the_specs_on_stdin() {
        let nested = vec![b"sub".to_vec()];
        let a = excluded_args(&["status", "-z"], &nested);
        assert_eq!(a, ["status", "-z", "--", ":(exclude,literal)sub"]);
        let a = excluded_args(&["ls-files", "--others", "--", "d"], &nested);
        assert_eq!(
            a,
            ["ls-files", "--others", "--", "d", ":(exclude,literal)sub"]
        );
        let add = ["add", "--pathspec-from-file=-", "--pathspec-file-nul"];
        assert_eq!(excluded_args(&add, &nested).len(), 3);
        let s = excluded_stdin(&add, Some(b":/\0"), &nested);
        assert_eq!(s.unwrap(), b":/\0:(exclude,literal)sub\0");
        assert_eq!(
            excluded_stdin(&["status"], Some(b"x"), &nested).unwrap(),
            b"x"
        );
    }
}
