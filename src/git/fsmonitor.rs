//! ralph as git's file-system monitor (hook protocol version 2): the answers file ralph writes
//! before each of its git commands, and the hook git runs (`ralph __fsmonitor FILE 2 TOKEN`)
//! that reads it.
//!
//! A token is `{nonce}:{position}`: a position in the watcher's journal of changed paths, in
//! this ralph process (the nonce). Asked for the changes since a token of ours that is still
//! covered by the journal, the hook answers the paths recorded since then; for anything else —
//! a token of another process, an unreadable file, a journal that lost events (`floor` above
//! the token), a changed ignore or attributes file — it answers `/`, which makes git check
//! everything, as it would without a monitor. So a wrong answer can only cost time.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

const MAGIC: &str = "ralph-fsmonitor 1";

/// The subcommand git runs as the hook.
pub(crate) const HOOK_COMMAND: &str = "__fsmonitor";

/// What the journal says now, written for the hook.
pub(crate) struct Answers<'a> {
    pub(crate) nonce: &'a str,
    /// Tokens below this position may have missed changes: they get `/`.
    pub(crate) floor: u64,
    /// The current position: the token the hook hands out.
    pub(crate) position: u64,
    /// `(position, path)` of every change recorded from the floor on; directories end in `/`.
    pub(crate) changes: &'a [(u64, Vec<u8>)],
    /// Paths answered in every answer (gitlinks: their commits happen in git directories the
    /// watcher does not see).
    pub(crate) always: &'a [Vec<u8>],
}

/// Write the answers file atomically (temp file and rename in the same directory).
pub(crate) fn write_answers(path: &Path, a: &Answers<'_>) -> std::io::Result<()> {
    let mut bytes = format!("{MAGIC}\n{}\n{}\n{}\n", a.nonce, a.floor, a.position).into_bytes();
    for (pos, p) in a.changes {
        bytes.extend_from_slice(pos.to_string().as_bytes());
        bytes.push(b'\t');
        bytes.extend_from_slice(p);
        bytes.push(0);
    }
    for p in a.always {
        bytes.extend_from_slice(b"*\t");
        bytes.extend_from_slice(p);
        bytes.push(0);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".ralph-fsmonitor-")
        .tempfile_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The hook's answer to git for `version` and `token`, from the answers file's bytes.
pub(crate) fn answer(file: &[u8], version: &str, token: &str) -> Vec<u8> {
    let everything = |current: &str| {
        let mut out = Vec::new();
        if version == "2" {
            out.extend_from_slice(current.as_bytes());
            out.push(0);
        }
        out.extend_from_slice(b"/\0");
        out
    };
    let Some(parsed) = parse(file) else {
        // Never a token git could present back as ours: the next query is a full one too.
        return everything("ralph:unreadable");
    };
    let current = format!("{}:{}", parsed.nonce, parsed.position);
    if version != "2" {
        return everything(&current);
    }
    let since = token
        .strip_prefix(parsed.nonce)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|p| p.parse::<u64>().ok())
        .filter(|&p| p >= parsed.floor && p <= parsed.position);
    let Some(since) = since else {
        return everything(&current);
    };
    let mut seen = HashSet::new();
    let mut paths: Vec<&[u8]> = Vec::new();
    for (pos, p) in &parsed.changes {
        if pos.is_none_or(|pos| pos >= since) && seen.insert(*p) {
            if changes_rules(p) {
                return everything(&current);
            }
            paths.push(p);
        }
    }
    let mut out = current.into_bytes();
    out.push(0);
    for p in paths {
        out.extend_from_slice(p);
        out.push(0);
    }
    out
}

/// An ignore or attributes file: what git would decide about many paths may change.
pub(super) fn changes_rules(path: &[u8]) -> bool {
    let name = path
        .strip_suffix(b"/")
        .unwrap_or(path)
        .rsplit(|&b| b == b'/')
        .next()
        .unwrap_or(b"");
    name == b".gitignore" || name == b".gitattributes"
}

struct Parsed<'a> {
    nonce: &'a str,
    floor: u64,
    position: u64,
    /// `None`: a path answered always.
    changes: Vec<(Option<u64>, &'a [u8])>,
}

fn parse(file: &[u8]) -> Option<Parsed<'_>> {
    let mut rest = file;
    let mut line = || {
        let nl = rest.iter().position(|&b| b == b'\n')?;
        let (l, r) = rest.split_at(nl);
        rest = &r[1..];
        std::str::from_utf8(l).ok()
    };
    if line()? != MAGIC {
        return None;
    }
    let nonce = line()?;
    let floor = line()?.parse().ok()?;
    let position = line()?.parse().ok()?;
    let mut changes = Vec::new();
    for rec in rest.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let tab = rec.iter().position(|&b| b == b'\t')?;
        let pos = match &rec[..tab] {
            b"*" => None,
            p => Some(std::str::from_utf8(p).ok()?.parse().ok()?),
        };
        changes.push((pos, &rec[tab + 1..]));
    }
    Some(Parsed {
        nonce,
        floor,
        position,
        changes,
    })
}

/// Whether the git that runs the hook (in its work tree's top directory) is the repository
/// whose git directory holds the answers file.
fn asked_by_owner(answers: &Path) -> bool {
    let (Ok(cwd), Some(dir)) = (std::env::current_dir(), answers.parent()) else {
        return false;
    };
    let dot = cwd.join(".git");
    let git_dir = if dot.is_dir() {
        dot
    } else {
        // A linked worktree's or a submodule's `.git` file: `gitdir: PATH`.
        let Ok(text) = std::fs::read_to_string(&dot) else {
            return false;
        };
        match text.trim_end().strip_prefix("gitdir: ") {
            Some(path) => cwd.join(path),
            None => return false,
        }
    };
    match (git_dir.canonicalize(), dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `ralph __fsmonitor FILE VERSION TOKEN`: print the answer for git; never fails (a problem
/// answers `/`).
pub(crate) fn hook_main(args: &[std::ffi::OsString]) -> i32 {
    let arg = |i: usize| {
        args.get(i)
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let answers = std::path::PathBuf::from(arg(0));
    let out = if asked_by_owner(&answers) {
        answer(
            &std::fs::read(&answers).unwrap_or_default(),
            &arg(1),
            &arg(2),
        )
    } else {
        // A submodule's git, run by the superproject's with ralph's `-c core.fsmonitor` (git
        // hands `-c` on to submodules): the journal's paths are not its paths.
        answer(b"", &arg(1), &arg(2))
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&out);
    let _ = stdout.flush();
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(floor: u64, position: u64, changes: &[(u64, &str)]) -> Vec<u8> {
        file_with(floor, position, changes, &[])
    }

    fn file_with(floor: u64, position: u64, changes: &[(u64, &str)], always: &[&str]) -> Vec<u8> {
        let always: Vec<Vec<u8>> = always.iter().map(|s| s.as_bytes().to_vec()).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers");
        let changes: Vec<(u64, Vec<u8>)> = changes
            .iter()
            .map(|(p, s)| (*p, s.as_bytes().to_vec()))
            .collect();
        write_answers(
            &path,
            &Answers {
                nonce: "ralph-1-2",
                floor,
                position,
                changes: &changes,
                always: &always,
            },
        )
        .unwrap();
        std::fs::read(path).unwrap()
    }

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap().replace('\0', "|")
    }

    #[test]
    fn changes_since_a_known_token() {
        let f = file(2, 7, &[(2, "a"), (3, "dir/"), (5, "a"), (6, "b c\nd")]);
        assert_eq!(
            text(answer(&f, "2", "ralph-1-2:3")),
            "ralph-1-2:7|dir/|a|b c\nd|"
        );
        assert_eq!(text(answer(&f, "2", "ralph-1-2:7")), "ralph-1-2:7|");
        assert_eq!(
            text(answer(&f, "2", "ralph-1-2:2")),
            "ralph-1-2:7|a|dir/|b c\nd|"
        );
    }

    #[test]
    fn gitlinks_are_in_every_incremental_answer() {
        let f = file_with(0, 2, &[(1, "a")], &["sub", "nested"]);
        assert_eq!(
            text(answer(&f, "2", "ralph-1-2:2")),
            "ralph-1-2:2|sub|nested|"
        );
        assert_eq!(
            text(answer(&f, "2", "ralph-1-2:0")),
            "ralph-1-2:2|a|sub|nested|"
        );
        assert_eq!(text(answer(&f, "2", "other")), "ralph-1-2:2|/|");
    }

    #[test]
    fn anything_uncertain_is_everything() {
        let f = file(4, 7, &[(5, "a")]);
        for token in [
            "ralph-1-2:3",         // below the floor: events may be missing
            "ralph-1-2:8",         // from the future
            "ralph-9-9:5",         // another ralph
            "1796108112791806446", // git's own first token
            "",
        ] {
            assert_eq!(text(answer(&f, "2", token)), "ralph-1-2:7|/|", "{token}");
        }
        assert_eq!(text(answer(b"garbage", "2", "x")), "ralph:unreadable|/|");
        assert_eq!(text(answer(&f, "1", "123")), "/|");
        let f = file(0, 3, &[(1, "a"), (2, "sub/.gitignore")]);
        assert_eq!(text(answer(&f, "2", "ralph-1-2:0")), "ralph-1-2:3|/|");
        assert_eq!(text(answer(&f, "2", "ralph-1-2:2")), "ralph-1-2:3|/|");
        let f = file(0, 3, &[(1, ".gitattributes")]);
        assert_eq!(text(answer(&f, "2", "ralph-1-2:0")), "ralph-1-2:3|/|");
    }
}
