//! The `.ralph/` directory (SPEC §7): scaffolding, `state.json` written atomically, append-only
//! logs, the progress file's Current Status block, and the one-supervisor lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const SCHEMA_VERSION: u32 = 1;
pub const DIR: &str = ".ralph";

/// What `.ralph/.gitignore` keeps out of git: the runtime files.
pub const GITIGNORE: &str = "\
# Written by ralph: runtime files stay out of git.
# progress.md and guardrails.md are the agent's memory across fresh contexts: commit them.
activity.log
iterations.log
runs/
state.json
state.json.tmp*
lock
";

pub const GUARDRAILS: &str = "\
# RALPH Guardrails

Rules and lessons learned across iterations. Each \"Sign\" prevents repeating mistakes.

## Signs

<!-- Signs are added by the agent when it learns something important. Example:
### Sign: Always run tests before finishing
- **Trigger**: After any code change
- **Instruction**: Run the test suite and fix failures before finishing
- **Added after**: Iteration 2 — left broken code
-->
";

/// Paths inside `.ralph/`.
#[derive(Debug, Clone)]
pub struct RalphDir {
    pub path: PathBuf,
}

impl RalphDir {
    pub fn new(root: &Path) -> RalphDir {
        RalphDir {
            path: root.join(DIR),
        }
    }
    pub fn progress(&self) -> PathBuf {
        self.path.join("progress.md")
    }
    pub fn guardrails(&self) -> PathBuf {
        self.path.join("guardrails.md")
    }
    pub fn activity_log(&self) -> PathBuf {
        self.path.join("activity.log")
    }
    pub fn iterations_log(&self) -> PathBuf {
        self.path.join("iterations.log")
    }
    pub fn state_file(&self) -> PathBuf {
        self.path.join("state.json")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.path.join("lock")
    }
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.path.join("runs").join(run_id)
    }

    /// Make sure ralph's runtime files can be written and stay ignored, even if the agent
    /// deleted `.ralph/` (the logs start again; nothing else is recreated).
    pub fn ensure_runtime(&self) -> Result<()> {
        create_private_dir(&self.path)?;
        let ignore = self.path.join(".gitignore");
        if !ignore.exists() {
            std::fs::write(&ignore, GITIGNORE).map_err(|e| Error::file("write", &ignore, e))?;
        }
        Ok(())
    }

    /// Create `.ralph/` (mode 0700) and every file that is missing; existing files are kept.
    /// Returns the files it created.
    pub fn scaffold(
        &self,
        task_name: &str,
        total: usize,
        max_iterations: u32,
    ) -> Result<Vec<PathBuf>> {
        create_private_dir(&self.path)?;
        let mut created = Vec::new();
        let files = [
            (self.path.join(".gitignore"), GITIGNORE.to_string()),
            (self.progress(), initial_progress(total)),
            (self.guardrails(), GUARDRAILS.to_string()),
            (
                self.activity_log(),
                format!(
                    "# RALPH Activity Log\n# Task: {task_name}\n# Started: {}\n# Max iterations: {max_iterations}\n",
                    now_rfc3339()
                ),
            ),
        ];
        for (path, text) in files {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut f) => {
                    f.write_all(text.as_bytes())
                        .map_err(|e| Error::file("write", &path, e))?;
                    created.push(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::file("create", &path, e)),
            }
        }
        Ok(created)
    }
}

/// `mkdir -p` with mode 0700 for the last component (transcripts can hold secrets).
pub fn create_private_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| Error::file("create directory", path, e))
}

pub fn now_rfc3339() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

fn initial_progress(total: usize) -> String {
    format!(
        "# RALPH Progress\n\n{}\n## Iteration Log\n<!-- Each iteration appends here -->\n",
        status_block(0, 0, total, "Not started")
    )
}

/// The Current Status block ralph maintains in `.ralph/progress.md`.
pub fn status_block(iteration: u32, done: usize, total: usize, status: &str) -> String {
    format!(
        "## Current Status\n- Iteration: {iteration}\n- Criteria completed: {done}/{total}\n- Status: {status}\n"
    )
}

/// Split a progress file into (before, status block, after); the block runs from its heading to
/// the next `## ` heading.
fn split_status(text: &str) -> Option<(usize, usize)> {
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if let Some(s) = start {
            if trimmed.starts_with("## ") || trimmed.starts_with("# ") {
                return Some((s, offset));
            }
        } else if trimmed == "## Current Status" {
            start = Some(offset);
        }
        offset += line.len();
    }
    start.map(|s| (s, text.len()))
}

/// Replace (or insert after the title) the Current Status block.
pub fn with_status_block(text: &str, block: &str) -> String {
    let mut block = block.to_string();
    match split_status(text) {
        Some((s, e)) => {
            if e < text.len() {
                block.push('\n');
            }
            format!("{}{block}{}", &text[..s], &text[e..])
        }
        None => {
            // After the first line when it is a title, else at the top.
            let first_end = text.find('\n').map_or(text.len(), |i| i + 1);
            if text.starts_with("# ") {
                format!("{}\n{block}\n{}", &text[..first_end], &text[first_end..])
            } else {
                format!("{block}\n{text}")
            }
        }
    }
}

/// The progress file without its Current Status block: what the agent wrote.
pub fn without_status_block(text: &str) -> String {
    match split_status(text) {
        Some((s, e)) => format!("{}{}", &text[..s], &text[e..]),
        None => text.to_string(),
    }
}

/// Write a file atomically: temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .map_err(|e| Error::file("create a temporary file in", dir, e))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::file("write", path, e))?;
    tmp.persist(path)
        .map_err(|e| Error::file("replace", path, e.error))?;
    Ok(())
}

/// Append one line to a log (one write, so a crash never leaves half a record in the middle).
pub fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::file("open", path, e))?;
    let mut rec = String::with_capacity(line.len() + 1);
    rec.push_str(line);
    rec.push('\n');
    f.write_all(rec.as_bytes())
        .map_err(|e| Error::file("append to", path, e))
}

/// The last `n` lines of a file, reading only its tail (O(1) in the file's length for short lines).
pub fn tail_lines(path: &Path, n: usize) -> Result<Vec<String>> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::file("open", path, e)),
    };
    let len = f
        .metadata()
        .map_err(|e| Error::file("read", path, e))?
        .len();
    let mut window: u64 = 4096;
    loop {
        let start = len.saturating_sub(window);
        f.seek(SeekFrom::Start(start))
            .map_err(|e| Error::file("read", path, e))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)
            .map_err(|e| Error::file("read", path, e))?;
        let text = String::from_utf8_lossy(&buf);
        let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        // The first line of a window that does not start the file may be cut.
        let complete = if start == 0 {
            lines.len()
        } else {
            lines.len().saturating_sub(1)
        };
        if complete >= n || start == 0 {
            let skip = lines.len() - complete;
            lines.drain(..skip);
            let from = lines.len().saturating_sub(n);
            return Ok(lines[from..].iter().map(|s| s.to_string()).collect());
        }
        window *= 4;
    }
}

/// One `ITER {n} | {figures} | exit {code} | {commit} | {fingerprint}` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IterRecord {
    /// The iteration number, when it parses.
    pub iteration: Option<u32>,
    /// The figures, verbatim.
    pub figures: String,
    /// The exit field's value (`3`, or whatever was written).
    pub exit: String,
    /// The short HEAD or `no-commit`.
    pub commit: String,
    /// The `git status --porcelain | cksum` output.
    pub fingerprint: String,
}

/// Parse an `ITER` record; fields are read from both ends so figures containing ` | ` survive.
pub fn parse_iter_record(line: &str) -> Option<IterRecord> {
    let line = line.trim();
    let rest = line.strip_prefix("ITER ")?;
    let fields: Vec<&str> = rest.split(" | ").collect();
    if fields.len() < 5 {
        return None;
    }
    let n = fields.len();
    let exit = fields[n - 3].trim();
    let exit = exit.strip_prefix("exit").map_or(exit, str::trim);
    Some(IterRecord {
        iteration: fields[0].trim().parse().ok(),
        figures: fields[1..n - 3].join(" | ").trim().to_string(),
        exit: exit.to_string(),
        commit: fields[n - 2].trim().to_string(),
        fingerprint: fields[n - 1].trim().to_string(),
    })
}

/// The STALLED condition: at least three records, and the last three carry the same figures,
/// commit and fingerprint.
pub fn last_three_repeat(records: &[IterRecord]) -> bool {
    let [.., a, b, c] = records else {
        return false;
    };
    let same = |x: &IterRecord, y: &IterRecord| {
        x.figures == y.figures && x.commit == y.commit && x.fingerprint == y.fingerprint
    };
    same(a, b) && same(b, c)
}

/// One ITER record's identity for the STALLED rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IterKey {
    pub figures: String,
    pub commit: String,
    pub fingerprint: String,
}

impl IterKey {
    /// The record as `.ralph/iterations.log` (or the CPM log) holds it (SPEC §5.4).
    pub fn record(&self, n: u32, exit: i32) -> String {
        format!(
            "ITER {n} | {} | exit {exit} | {} | {}",
            self.figures, self.commit, self.fingerprint
        )
    }
}

/// `state.json`: what `status` reports and what a resume restores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub schema_version: u32,
    pub run_id: String,
    pub task: String,
    pub task_file: String,
    pub mode: String,
    /// The resolved targets (CPM epics or spec; the table's PRD and progress files), so a
    /// resume works on the same ones.
    #[serde(default)]
    pub targets: Vec<String>,
    pub pid: u32,
    pub running: bool,
    pub started_at: String,
    pub updated_at: String,
    pub iteration: u32,
    pub max_iterations: u32,
    pub done: usize,
    pub total: usize,
    pub best_done: usize,
    pub no_progress_streak: u32,
    pub baseline: Vec<String>,
    pub last_keys: Vec<IterKey>,
    #[serde(default)]
    pub verdict_failures: u32,
    pub halt_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub cost_usd: f64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// Seconds spent waiting for agents' usage limits to lift.
    #[serde(default)]
    pub waited_s: f64,
    /// Where the ITER records go when not `.ralph/iterations.log` (CPM mode), repo-relative.
    #[serde(default)]
    pub iterations_log: Option<String>,
}

impl RunState {
    pub fn load(path: &Path) -> Result<Option<RunState>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::file("read", path, e)),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::user(format!(
                "{}:{}: unreadable state: {e}",
                path.display(),
                e.line()
            ))
            .with_hint("it is ralph's runtime file; delete it to forget the last run")
        })
    }

    pub fn save(&mut self, path: &Path) -> Result<()> {
        self.updated_at = now_rfc3339();
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| Error::user(e.to_string()))?;
        text.push('\n');
        write_atomic(path, text.as_bytes())
    }
}

/// The advisory lock held by a running supervisor (std's `File::try_lock`): the kernel releases
/// it when the holder dies, so a crash never leaves a stale lock.
pub struct Lock {
    _file: File,
}

impl Lock {
    pub fn acquire(path: &Path) -> Result<Lock> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::file("open", path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() {
                    "another ralph".to_string()
                } else {
                    format!("ralph (pid {holder})")
                };
                return Err(Error::user(format!(
                    "{who} is already supervising this repository (lock `{}`)",
                    path.display()
                ))
                .with_hint("wait for it, or stop it; `ralph status` shows what it is doing"));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::file("lock", path, e)),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(|e| Error::file("write", path, e))?;
        Ok(Lock { _file: file })
    }

    /// Whether some process holds the lock now (without taking it for long).
    pub fn is_held(path: &Path) -> bool {
        let Ok(file) = File::open(path) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_block_is_replaced_in_place() {
        let text = "# RALPH Progress\n\n## Current Status\n- Iteration: 0\n\n## Iteration Log\nagent notes\n";
        let out = with_status_block(text, &status_block(2, 1, 3, "Running"));
        assert_eq!(
            out,
            "# RALPH Progress\n\n## Current Status\n- Iteration: 2\n- Criteria completed: 1/3\n- Status: Running\n\n## Iteration Log\nagent notes\n"
        );
        assert_eq!(
            without_status_block(&out),
            "# RALPH Progress\n\n## Iteration Log\nagent notes\n"
        );
    }

    #[test]
    fn status_block_is_inserted_when_missing() {
        let out = with_status_block("# Title\nnotes\n", &status_block(1, 0, 1, "x"));
        assert!(out.starts_with("# Title\n\n## Current Status\n"));
        assert!(out.ends_with("notes\n"));
        let out = with_status_block("notes\n", &status_block(1, 0, 1, "x"));
        assert!(out.starts_with("## Current Status\n") && out.ends_with("\nnotes\n"));
    }

    #[test]
    fn status_block_at_end_of_file() {
        let text = "# P\n\n## Current Status\n- Iteration: 0\n";
        let out = with_status_block(text, &status_block(5, 5, 5, "Complete"));
        assert!(out.ends_with("- Status: Complete\n"));
        assert_eq!(without_status_block(&out), "# P\n\n");
    }

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
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn second_lock_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lock");
        let held = Lock::acquire(&p).unwrap();
        assert!(Lock::is_held(&p));
        let e = Lock::acquire(&p).err().unwrap().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        assert!(!Lock::is_held(&p));
        Lock::acquire(&p).unwrap();
    }

    #[test]
    fn scaffold_keeps_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        let rd = RalphDir::new(dir.path());
        create_private_dir(&rd.path).unwrap();
        std::fs::write(rd.guardrails(), "mine").unwrap();
        let created = rd.scaffold("t", 2, 5).unwrap();
        assert_eq!(created.len(), 3);
        assert_eq!(std::fs::read_to_string(rd.guardrails()).unwrap(), "mine");
        assert!(
            std::fs::read_to_string(rd.progress())
                .unwrap()
                .contains("0/2")
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&rd.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
