//! The append-only logs (SPEC §5.4, §7): one write per record, never glued to a torn last line,
//! and tails read in bounded time and memory whatever the last line holds.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result};

/// The most of one log line a tail read returns; a longer line is cut, its end kept.
pub(crate) const MAX_SHOWN_LINE: usize = 2048;
/// The most a tail read looks at, from the end of the file.
const TAIL_WINDOW_MAX: u64 = 256 * 1024;

/// Append one line to a log in one write, so a crash never leaves half a record in the middle.
/// A log whose last line was torn (a crash mid-write left no newline) gets the newline first, so
/// the new record starts on its own line.
pub(crate) fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = crate::files::open_own(path, true).map_err(|e| Error::file("open", path, e))?;
    let len = f
        .metadata()
        .map_err(|e| Error::file("read", path, e))?
        .len();
    let mut rec = String::with_capacity(line.len() + 2);
    if len > 0 {
        let mut last = [0u8; 1];
        f.read_exact_at(&mut last, len - 1)
            .map_err(|e| Error::file("read", path, e))?;
        if last[0] != b'\n' {
            rec.push('\n');
        }
    }
    rec.push_str(line);
    rec.push('\n');
    f.write_all(rec.as_bytes())
        .map_err(|e| Error::file("append to", path, e))
}

/// The last `n` non-empty lines of a file, reading only its tail: at most 256 KiB are read and
/// each line returned holds at most [`MAX_SHOWN_LINE`] bytes (a longer one keeps its end, after
/// `…`), so a log whose last line is hundreds of megabytes costs what a short one does.
/// The log is opened as any file an agent can touch (`files::open_read`): a FIFO is refused, never
/// waited on, and a link out of the repository is never followed (a transcript linked to
/// `~/.ssh/id_rsa` would hand its last lines to the next prompt).
pub(crate) fn tail_lines(path: &Path, n: usize) -> Result<Vec<String>> {
    let (mut f, meta) = match crate::files::open_read(path) {
        Ok(opened) => opened,
        Err(e) if e.is_missing() => return Ok(Vec::new()),
        Err(e) => return Err(Error::user(e.to_string())),
    };
    let len = meta.len();
    let mut window: u64 = 4096;
    loop {
        let start = len.saturating_sub(window);
        f.seek(SeekFrom::Start(start))
            .map_err(|e| Error::file("read", path, e))?;
        let mut buf = Vec::with_capacity((len - start) as usize);
        (&mut f)
            .take(len - start)
            .read_to_end(&mut buf)
            .map_err(|e| Error::file("read", path, e))?;
        let lines: Vec<&[u8]> = buf
            .split(|&b| b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
            .collect();
        // The first line of a window that does not start the file may be cut.
        let cut_first = start > 0;
        let complete = lines.len() - usize::from(cut_first && !lines.is_empty());
        let exhausted = start == 0 || window >= TAIL_WINDOW_MAX;
        if complete >= n || exhausted {
            let take = if complete >= n { n } else { lines.len().min(n) };
            let from = lines.len() - take;
            return Ok(lines[from..]
                .iter()
                .enumerate()
                .map(|(i, l)| shown(l, cut_first && from + i == 0))
                .collect());
        }
        window *= 4;
    }
}

/// A line as a tail read shows it: at most [`MAX_SHOWN_LINE`] bytes, its end kept.
fn shown(line: &[u8], cut: bool) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() <= MAX_SHOWN_LINE && !cut {
        return String::from_utf8_lossy(line).into_owned();
    }
    let keep = &line[line.len().saturating_sub(MAX_SHOWN_LINE)..];
    let text = String::from_utf8_lossy(keep);
    // Start on a character boundary of the lossy text (a cut can split a character).
    let text = text.trim_start_matches('\u{fffd}');
    format!("…{text}")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_reads_last_lines_of_long_logs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut text = String::new();
        for i in 1..=20_000 {
            text.push_str(&format!(
                "ITER {i} | 0/1 criteria | exit 0 | abc1234 | 4294967295 0\n"
            ));
        }
        std::fs::write(&p, text).unwrap();
        let last = tail_lines(&p, 3).unwrap();
        assert_eq!(last.len(), 3);
        assert!(last[0].starts_with("ITER 19998 "));
        assert!(last[2].starts_with("ITER 20000 "));
        std::fs::write(&p, "only\n").unwrap();
        assert_eq!(tail_lines(&p, 3).unwrap(), vec!["only"]);
        assert!(tail_lines(&dir.path().join("none"), 3).unwrap().is_empty());
    }

    #[test]
    fn a_huge_last_line_is_read_in_bounded_memory_and_shown_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(b"ITER 1 | a | exit 0 | x | 1 2\n").unwrap();
        // 8 MiB without a newline: the window stops at 256 KiB.
        let chunk = vec![b'z'; 1024 * 1024];
        for _ in 0..8 {
            f.write_all(&chunk).unwrap();
        }
        drop(f);
        let last = tail_lines(&p, 3).unwrap();
        assert_eq!(last.len(), 1, "only the cut last line is in reach");
        assert!(last[0].starts_with('…'));
        assert!(last[0].len() <= MAX_SHOWN_LINE + '…'.len_utf8());
        // A long complete line among short ones keeps its end.
        let long = format!("ITER 2 | {} | exit 0 | x | 1 2", "f".repeat(10_000));
        std::fs::write(&p, format!("ITER 1 | a | exit 0 | x | 1 2\n{long}\n")).unwrap();
        let last = tail_lines(&p, 3).unwrap();
        assert_eq!(last.len(), 2);
        assert!(last[1].starts_with('…') && last[1].ends_with("exit 0 | x | 1 2"));
    }

    #[test]
    fn append_repairs_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        append_line(&p, "ITER 1 | a").unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"ITER 2 | tor")
            .unwrap();
        append_line(&p, "ITER 3 | c").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "ITER 1 | a\nITER 2 | tor\nITER 3 | c\n"
        );
    }
}
