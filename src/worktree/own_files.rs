//! ralph's own files never make a merge conflict (SPEC §13): the merge driver ralph defines on
//! its own merge commands for `.ralph/progress.md`, `.ralph/guardrails.md` and
//! `.ralph/.gitignore`, and `ralph __merge-own`, the driver git runs.
//!
//! Two loops that both completed both changed these files from the same base: the status block
//! and the notes below it, the Signs. git's own way to merge a file its own way is a merge
//! driver, and git runs it from every merge ralph makes — `git merge` in a work tree and `git
//! merge-tree --write-tree` alike. The driver exists only on ralph's command lines (`-c
//! merge.ralph-own.driver=…`), never in a configuration file, and its attributes come from a
//! file ralph writes for the one merge (`core.attributesFile`, the user's own file copied
//! first, since the option replaces it), naming only the files of ralph's that both sides
//! changed; a merge that needs no driver runs as it did without one.
//!
//! git reads that file last: a repository's `.gitattributes` (the agent's too, once merged)
//! and `info/attributes` beat it. A repository that says how ralph's files merge is obeyed
//! (`merge=binary`: a real conflict, exit 11). One that names ralph's driver for any other
//! file gets a conflict there: the driver merges a path only when it is one of ralph's own and
//! each side's version is the very file that branch's tip holds at that path (a rename would
//! bring another file's text), as ralph listed them on the driver's command line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::git::{GitError, Repo};
use crate::sandbox::OwnBinary;
use crate::task::status_block;

/// The subcommand git runs as the driver.
pub(crate) const COMMAND: &str = "__merge-own";

/// The driver's name in git's configuration.
const DRIVER: &str = "ralph-own";

const PROGRESS: &str = ".ralph/progress.md";

/// The files ralph commits under `.ralph/` that two loops both change. A queue item's task file
/// (`.ralph/tasks/<source>-<id>.md`) is a path of its own per item; the rest is ignored.
const OWN: [&str; 3] = [PROGRESS, ".ralph/guardrails.md", ".ralph/.gitignore"];

/// The driver for one merge: the `-c` options of ralph's git command, and the files they name.
pub(crate) struct Driver {
    config: Vec<String>,
    _attributes: tempfile::TempDir,
    _program: Option<OwnBinary>,
}

/// One side of a merge: its label in the merged status block and its tip.
pub(crate) struct Side<'a> {
    pub(crate) label: &'a str,
    pub(crate) tip: git2::Oid,
}

impl Driver {
    /// The driver for merging `theirs` into `ours`; `None` when no file of ralph's differs
    /// between the two tips (git runs no driver then). `confined`: the merge's git writes only
    /// beneath the repository (a sandboxed loop's), and cannot run ralph through `/proc`.
    pub(crate) fn for_merge(
        repo: &Repo,
        ours: &Side<'_>,
        theirs: &Side<'_>,
        confined: bool,
    ) -> Result<Option<Driver>> {
        let mut expect = Vec::new();
        for path in OWN {
            if let (Some(o), Some(t)) = (
                blob_at(repo, ours.tip, path)?,
                blob_at(repo, theirs.tip, path)?,
            ) && o != t
            {
                expect.push((path, o, t));
            }
        }
        if expect.is_empty() {
            return Ok(None);
        }
        let dir = tempfile::Builder::new()
            .prefix("ralph-merge-")
            .tempdir()
            .map_err(|e| Error::io("failed to make a directory for the merge's attributes", e))?;
        let attributes = dir.path().join("attributes");
        let mut text = user_attributes(repo);
        if !text.is_empty() && !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        for (path, _, _) in &expect {
            text.extend_from_slice(format!("/{path} merge={DRIVER}\n").as_bytes());
        }
        std::fs::write(&attributes, &text).map_err(|e| Error::file("write", &attributes, e))?;
        let (program, copy) = program(repo, confined)?;
        let mut command = vec![
            quoted(&program.to_string_lossy()),
            COMMAND.to_string(),
            "--ours".into(),
            quoted(ours.label),
            "--theirs".into(),
            quoted(theirs.label),
        ];
        for (path, o, t) in &expect {
            command.extend(["--expect".into(), quoted(&format!("{path}={o}:{t}"))]);
        }
        command.push("%O %A %B %P".into());
        let config = [
            format!("core.attributesFile={}", attributes.display()),
            format!("merge.{DRIVER}.name=ralph's own files"),
            format!("merge.{DRIVER}.driver={}", command.join(" ")),
            // Between merge bases (a criss-cross), git's own three-way merge: those versions
            // are no branch's tip.
            format!("merge.{DRIVER}.recursive=text"),
        ]
        .into_iter()
        .flat_map(|c| ["-c".to_string(), c])
        .collect();
        Ok(Some(Driver {
            config,
            _attributes: dir,
            _program: copy,
        }))
    }

    /// The `-c NAME=VALUE` options that go before the git subcommand.
    pub(crate) fn args(&self) -> impl Iterator<Item = &str> {
        self.config.iter().map(String::as_str)
    }
}

/// A word of the driver's command: quoted for the shell git runs it with, a `%` doubled so git
/// replaces none of it.
fn quoted(word: &str) -> String {
    shell_words::quote(word).replace('%', "%%")
}

/// The blob `path` names in commit `tip`'s tree (`None`: none there, or not a file).
fn blob_at(repo: &Repo, tip: git2::Oid, path: &str) -> Result<Option<git2::Oid>> {
    let g = repo.git2();
    let tree = g
        .find_commit(tip)
        .and_then(|c| c.tree())
        .map_err(GitError::from)?;
    Ok(tree
        .get_path(Path::new(path))
        .ok()
        .filter(|e| e.kind() == Some(git2::ObjectType::Blob))
        .map(|e| e.id()))
}

/// The attributes file of the user's (and the system's) configuration, or git's default one:
/// ralph's `core.attributesFile` replaces it for the merge, so its lines come first. The
/// repository's own configuration is not asked: the agent can write it.
fn user_attributes(repo: &Repo) -> Vec<u8> {
    let named = ["--global", "--system"].into_iter().find_map(|scope| {
        let args = ["config", scope, "--path", "--get", "core.attributesFile"];
        let out = repo.cli().output(&args, None).ok()?;
        let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !value.is_empty()).then(|| PathBuf::from(value))
    });
    let default = || {
        std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
            .map(|c| c.join("git/attributes"))
    };
    named
        .or_else(default)
        .and_then(|p| crate::files::read_bytes(&p, crate::files::MAX_TEXT).ok())
        .unwrap_or_default()
}

/// The program git runs as the driver: this very binary through `/proc/PID/exe` (a build the
/// agent made may have replaced the file at its path); for a confined git, which cannot run
/// that, the installed binary when the agent cannot write it, else a private copy.
fn program(repo: &Repo, confined: bool) -> Result<(PathBuf, Option<OwnBinary>)> {
    if confined {
        let g = repo.git2();
        let reach = [repo.root(), g.path(), g.commondir()].map(Path::to_path_buf);
        let own = OwnBinary::resolve(&reach)?;
        return Ok((own.path().to_path_buf(), Some(own)));
    }
    let proc_exe = PathBuf::from(format!("/proc/{}/exe", std::process::id()));
    if proc_exe.exists() {
        return Ok((proc_exe, None));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("failed to find ralph's own binary for the merge", e))?;
    Ok((exe, None))
}

/// `ralph __merge-own --ours LABEL --theirs LABEL [--expect PATH=OURS:THEIRS]… BASE OURS THEIRS
/// PATH`, run by git in the work tree's top directory: the merged file written over `OURS`,
/// exit 0; anything it will not merge is left to git as a conflict (exit 1, said on stderr).
pub(crate) fn main(args: &[OsString]) -> i32 {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // Every open stays beneath the work tree git runs the driver in.
    if let Ok(top) = std::env::current_dir() {
        crate::files::confine(&top);
    }
    match run(&args) {
        Ok(()) => 0,
        Err(why) => {
            let path = args.last().map_or("?", String::as_str);
            eprintln!("{REFUSED_PREFIX}{path}{REFUSED}{why}");
            1
        }
    }
}

/// Why the driver left `file` to git as a conflict, from what git's command printed.
pub(crate) fn refused<'a>(stderr: &'a str, file: &str) -> Option<&'a str> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix(REFUSED_PREFIX))
        .find_map(|l| l.strip_prefix(file)?.strip_prefix(REFUSED))
}

const REFUSED_PREFIX: &str = "ralph: ";
const REFUSED: &str = ": not merged by ralph: ";

/// What the driver was told.
#[derive(Default)]
struct Told<'a> {
    ours: &'a str,
    theirs: &'a str,
    expect: Vec<(&'a str, &'a str, &'a str)>,
    files: Vec<&'a str>,
}

fn parse(args: &[String]) -> std::result::Result<Told<'_>, String> {
    let mut told = Told::default();
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        let mut value = || {
            rest.next()
                .map(String::as_str)
                .ok_or(format!("{a} without a value"))
        };
        match a.as_str() {
            "--ours" => told.ours = value()?,
            "--theirs" => told.theirs = value()?,
            "--expect" => {
                let v = value()?;
                let (path, blobs) = v.rsplit_once('=').ok_or("a bad --expect")?;
                let (o, t) = blobs.split_once(':').ok_or("a bad --expect")?;
                told.expect.push((path, o, t));
            }
            file => told.files.push(file),
        }
    }
    if told.files.len() != 4 {
        return Err(format!("four files expected, got {}", told.files.len()));
    }
    Ok(told)
}

fn run(args: &[String]) -> std::result::Result<(), String> {
    let told = parse(args)?;
    let [base, ours, theirs, path] = [0, 1, 2, 3].map(|i| told.files[i]);
    if !OWN.contains(&path) {
        return Err("not one of ralph's own files".into());
    }
    let &(_, want_ours, want_theirs) = told
        .expect
        .iter()
        .find(|(p, _, _)| *p == path)
        .ok_or("ralph did not ask to merge it")?;
    let read = |f: &str| {
        crate::files::read_bytes(Path::new(f), crate::files::MAX_TEXT).map_err(|e| e.to_string())
    };
    let (b, o, t) = (read(base)?, read(ours)?, read(theirs)?);
    for (bytes, want, side) in [(&o, want_ours, told.ours), (&t, want_theirs, told.theirs)] {
        let id =
            git2::Oid::hash_object(git2::ObjectType::Blob, bytes).map_err(|e| e.to_string())?;
        if id.to_string() != want {
            return Err(format!(
                "the version of `{side}` is not the file its tip holds at this path"
            ));
        }
    }
    let dir = Path::new(ours)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let merged = if path == PROGRESS {
        progress(dir, [&b, &o, &t], (told.ours, told.theirs))?
    } else {
        union(dir, [&b, &o, &t])?
    };
    crate::files::write_atomic(Path::new(ours), &merged, 0o600).map_err(|e| e.to_string())
}

/// A three-way merge of lines in which both sides' lines are kept where they differ: git's own
/// `union` (`git merge-file --union`), the notes and Signs each agent wrote all kept, the first
/// side's first. The versions are written to files of ralph's in `dir`, where git put its own
/// (a confined git's driver writes nowhere else).
fn union(dir: &Path, [base, ours, theirs]: [&[u8]; 3]) -> std::result::Result<Vec<u8>, String> {
    let file = |bytes: &[u8]| -> std::io::Result<tempfile::NamedTempFile> {
        let mut f = tempfile::Builder::new()
            .prefix(".ralph-merge-")
            .tempfile_in(dir)?;
        std::io::Write::write_all(&mut f, bytes)?;
        Ok(f)
    };
    let files = [ours, base, theirs]
        .map(file)
        .into_iter()
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("cannot write its versions: {e}"))?;
    let mut cmd = std::process::Command::new("git");
    cmd.args(["merge-file", "--union", "-p", "--"]);
    crate::git::memory::bound(&mut cmd);
    cmd.args(files.iter().map(tempfile::NamedTempFile::path));
    let out = cmd
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run `git merge-file`: {e}"))?;
    if !out.status.success() {
        return Err("`git merge-file --union` did not merge its versions".into());
    }
    Ok(out.stdout)
}

/// `.ralph/progress.md`: the agents' notes merged as [`union`] does, and one status block,
/// [`status_block::merged_block`]'s, where the block was.
fn progress(
    dir: &Path,
    [base, ours, theirs]: [&[u8]; 3],
    labels: (&str, &str),
) -> std::result::Result<Vec<u8>, String> {
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| "not UTF-8")
    };
    let (b, o, t) = (text(base)?, text(ours)?, text(theirs)?);
    let block = status_block::merged_block(
        status_block::block_of(&b),
        status_block::block_of(&o),
        status_block::block_of(&t),
        labels,
    );
    // Each side's block stands as the same bare heading while the notes merge: the blocks
    // never meet as text, and the merged one goes where they were.
    let bare = |s: &str| status_block::with_status_block(s, PLACEHOLDER);
    let base = if b.is_empty() { b } else { bare(&b) };
    let (o, t) = (bare(&o), bare(&t));
    let notes = union(dir, [base.as_bytes(), o.as_bytes(), t.as_bytes()])?;
    let notes = String::from_utf8(notes).map_err(|_| "not UTF-8")?;
    Ok(match block {
        Some(block) => status_block::with_status_block(&notes, &block),
        None => status_block::without_status_block(&notes),
    }
    .into_bytes())
}

const PLACEHOLDER: &str = "## Current Status\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn file(block: &str, notes: &str) -> String {
        format!(
            "# RALPH Progress\n\n{block}\n## Iteration Log\n<!-- Each iteration appends here -->\n{notes}"
        )
    }

    #[test]
    fn two_loops_progress_files_keep_every_note_and_one_merged_block() {
        let base = file(&status_block::status_block(0, 0, 1, "Not started"), "");
        let a = file(
            &status_block::status_block(1, 1, 1, "Complete"),
            "- a did one\n",
        );
        let b = file(
            &status_block::status_block(3, 3, 3, "Complete"),
            "- b did one\n- b did two\n- b did three\n",
        );
        for base in [base.as_str(), ""] {
            let dir = tempfile::tempdir().unwrap();
            let versions = [base.as_bytes(), a.as_bytes(), b.as_bytes()];
            let out = progress(dir.path(), versions, ("main", "ralph/b")).unwrap();
            let out = String::from_utf8(out).unwrap();
            assert_eq!(
                out,
                "# RALPH Progress\n\n## Current Status\n\
                 - Status: Merged; the branches' last statuses follow\n\
                 - main: Iteration: 1; Criteria completed: 1/1; Status: Complete\n\
                 - ralph/b: Iteration: 3; Criteria completed: 3/3; Status: Complete\n\n\
                 ## Iteration Log\n<!-- Each iteration appends here -->\n\
                 - a did one\n- b did one\n- b did two\n- b did three\n",
                "base {base:?}"
            );
        }
    }

    #[test]
    fn signs_of_both_sides_are_kept() {
        let base = "# Signs\n";
        let dir = tempfile::tempdir().unwrap();
        let out = union(
            dir.path(),
            [base.as_bytes(), b"# Signs\n- a\n", b"# Signs\n- b\n"],
        )
        .unwrap();
        assert_eq!(out, b"# Signs\n- a\n- b\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no file left behind"
        );
    }

    #[test]
    fn the_driver_refuses_any_other_path_and_any_version_not_the_tips() {
        let dir = tempfile::tempdir().unwrap();
        let f = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let (o, a, b) = (f("o", "x\n"), f("a", "x\n- a\n"), f("b", "x\n- b\n"));
        let hash = |t: &str| git2::Oid::hash_object(git2::ObjectType::Blob, t.as_bytes()).unwrap();
        let expect = format!(
            ".ralph/guardrails.md={}:{}",
            hash("x\n- a\n"),
            hash("x\n- b\n")
        );
        let args = |path: &str, expect: &str| -> Vec<String> {
            [
                "--ours", "main", "--theirs", "ralph/b", "--expect", expect, &o, &a, &b, path,
            ]
            .map(String::from)
            .to_vec()
        };
        assert_eq!(
            run(&args("src/lib.rs", &expect)),
            Err("not one of ralph's own files".into())
        );
        assert_eq!(
            run(&args(".ralph/.gitignore", &expect)),
            Err("ralph did not ask to merge it".into())
        );
        let other = format!(".ralph/guardrails.md={}:{}", hash("y\n"), hash("x\n- b\n"));
        assert!(
            run(&args(".ralph/guardrails.md", &other))
                .unwrap_err()
                .contains("`main`")
        );
        assert_eq!(
            std::fs::read_to_string(&a).unwrap(),
            "x\n- a\n",
            "untouched"
        );
        let said = "Auto-merging x\nralph: src/lib.rs: not merged by ralph: not one of ralph's own files\n";
        assert_eq!(
            refused(said, "src/lib.rs"),
            Some("not one of ralph's own files")
        );
        assert_eq!(refused(said, "src/lib"), None);
        run(&args(".ralph/guardrails.md", &expect)).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "x\n- a\n- b\n");
    }
}
