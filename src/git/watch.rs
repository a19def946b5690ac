//! Knowing what changed from file events (SPEC §12): an inotify watcher over the work tree
//! records every changed path in a journal, and ralph answers git's file-system monitor queries
//! from it (`fsmonitor.rs`), so `git status` and `git add` look at what changed instead of
//! walking the whole tree.
//!
//! Whenever events may be incomplete the journal says "everything" and git does a full walk:
//! the kernel queue overflowed, a watch could not be added (the watch limit), the agent touched
//! the git directory, an ignore or attributes file changed (decided by the hook), a directory
//! moved. Before each of ralph's git commands a barrier (a file created in `.ralph/` and seen
//! come back as an event) makes sure every change made so far is in the journal. Linux only;
//! elsewhere there is no watcher and git walks the tree itself.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::cli::Monitor;
use super::fsmonitor::{self, Answers};

/// Past this many recorded paths the journal starts over ("everything"): bounded memory.
const MAX_CHANGES: usize = 100_000;
/// How long a barrier may take before the journal is assumed incomplete.
const BARRIER_WAIT: Duration = Duration::from_secs(2);
/// Barrier files: `.ralph/.barrier-N`.
const BARRIER_PREFIX: &str = ".barrier-";

/// The changed paths, in order, since the floor.
#[derive(Debug)]
struct Journal {
    nonce: String,
    floor: u64,
    next: u64,
    changes: Vec<(u64, Vec<u8>)>,
    /// Paths recorded since the last answer (a path is recorded once per answer).
    segment: HashSet<Vec<u8>>,
    /// An agent is running: its touching the git directory makes the journal incomplete.
    agent: bool,
    /// The watcher could not watch everything: every answer is "everything".
    broken: bool,
    barriers_seen: u64,
    /// Always reported: gitlinks (submodules, nested repositories), whose commits happen in
    /// git directories ralph does not watch.
    always: Vec<Vec<u8>>,
}

impl Journal {
    fn record(&mut self, rel: Vec<u8>) {
        if self.segment.insert(rel.clone()) {
            self.changes.push((self.next, rel));
            self.next += 1;
            if self.changes.len() > MAX_CHANGES {
                self.everything();
            }
        }
    }

    /// Every token handed out so far may have missed changes.
    fn everything(&mut self) {
        self.next += 1;
        self.floor = self.next;
        self.changes.clear();
        self.segment.clear();
    }
}

struct Shared {
    journal: Mutex<Journal>,
    seen: Condvar,
}

/// The running watcher of one work tree.
pub struct Watch {
    shared: Arc<Shared>,
    ralph_dir: PathBuf,
    answers: PathBuf,
    barrier_seq: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("answers", &self.answers)
            .finish()
    }
}

impl Watch {
    /// Watch `root` (every directory but `.git` internals and `.ralph/runs`), and the git
    /// directory itself (to see an agent touch it). `None` where there is no inotify. A watcher
    /// lives as long as the process: a second start for the same work tree gets the first.
    pub fn start(root: &Path, git_dir: &Path, ralph_dir: &Path) -> Option<Arc<Watch>> {
        static RUNNING: Mutex<Vec<(PathBuf, Arc<Watch>)>> = Mutex::new(Vec::new());
        let mut running = RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, w)) = running.iter().find(|(r, _)| r == root) {
            return Some(Arc::clone(w));
        }
        let watch = imp::start(root, git_dir, ralph_dir)?;
        running.push((root.to_path_buf(), Arc::clone(&watch)));
        Some(watch)
    }

    /// Whether the watcher lost track and every answer is a full walk.
    pub fn is_broken(&self) -> bool {
        self.shared.journal.lock().is_ok_and(|j| j.broken)
    }

    /// The paths git must always re-check (gitlinks).
    pub fn set_always(&self, paths: Vec<Vec<u8>>) {
        if let Ok(mut j) = self.shared.journal.lock() {
            j.always = paths;
        }
    }

    /// An agent starts: from now on, its touching the git directory makes the journal
    /// incomplete.
    pub fn begin_agent(&self) {
        if let Ok(mut j) = self.shared.journal.lock() {
            j.agent = true;
        }
    }

    /// The agent ended: once every event it caused is in, the git directory is ralph's again.
    pub fn end_agent(&self) {
        self.barrier();
        if let Ok(mut j) = self.shared.journal.lock() {
            j.agent = false;
        }
    }

    /// Wait until the watcher has seen every change made before this call: a barrier file is
    /// created and its event awaited (inotify keeps one instance's events in order). On a
    /// timeout the journal is declared incomplete.
    pub fn barrier(&self) {
        let n = self
            .barrier_seq
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let file = self.ralph_dir.join(format!("{BARRIER_PREFIX}{n}"));
        if crate::files::write_own(&file, b"").is_err() {
            self.mark_everything();
            return;
        }
        let _ = std::fs::remove_file(&file);
        let Ok(j) = self.shared.journal.lock() else {
            return;
        };
        let (mut j, timeout) = match self
            .shared
            .seen
            .wait_timeout_while(j, BARRIER_WAIT, |j| j.barriers_seen < n && !j.broken)
        {
            Ok(r) => r,
            Err(_) => return,
        };
        if timeout.timed_out() {
            j.everything();
        }
    }

    fn mark_everything(&self) {
        if let Ok(mut j) = self.shared.journal.lock() {
            j.everything();
        }
    }

    /// How many paths a token of `since` is answered with now, or `None` when it gets
    /// "everything" (the journal no longer covers it, or an ignore or attributes file changed
    /// since). Without a barrier of its own: the command it is asked for writes the answers
    /// after one (`write_answers`), and a change seen only then can cost that command a
    /// write-back it skipped, never a wrong answer.
    pub fn changed_since(&self, since: u64) -> Option<usize> {
        let j = self.shared.journal.lock().ok()?;
        if j.broken || since < j.floor || since > j.next {
            return None;
        }
        let from = j.changes.partition_point(|(pos, _)| *pos < since);
        let newer = &j.changes[from..];
        (!newer.iter().any(|(_, p)| fsmonitor::changes_rules(p))).then_some(newer.len())
    }

    /// Write the hook's answers for the changes so far (after a barrier), and start a new
    /// segment; returns the position of the token the hook hands out.
    pub fn write_answers(&self) -> std::io::Result<u64> {
        self.barrier();
        let Ok(mut j) = self.shared.journal.lock() else {
            return Err(std::io::Error::other("the watcher's journal is poisoned"));
        };
        if j.broken {
            j.everything();
        }
        fsmonitor::write_answers(
            &self.answers,
            &Answers {
                nonce: &j.nonce,
                floor: j.floor,
                position: j.next,
                changes: &j.changes,
                always: &j.always,
            },
        )?;
        j.segment.clear();
        Ok(j.next)
    }

    /// What the git CLI needs to use this watcher as its file-system monitor.
    pub fn monitor(self: &Arc<Self>) -> Option<Monitor> {
        let exe = std::env::current_exe().ok()?;
        let hook = format!(
            "{} {} {}",
            shell_words::quote(&exe.to_string_lossy()),
            fsmonitor::HOOK_COMMAND,
            shell_words::quote(&self.answers.to_string_lossy())
        );
        let me = Arc::clone(self);
        let again = Arc::clone(self);
        Some(Monitor {
            hook,
            prepare: Arc::new(move || me.write_answers()),
            changed_since: Arc::new(move |since| again.changed_since(since)),
        })
    }
}

/// Record an event's path (relative to the root) in the journal; `dir` paths get both forms,
/// so git re-checks the entry and everything under it.
fn record_path(j: &mut Journal, rel: &Path, dir: bool) {
    use std::os::unix::ffi::OsStrExt;
    let bytes = rel.as_os_str().as_bytes().to_vec();
    if bytes.is_empty() {
        return;
    }
    if dir {
        let mut d = bytes.clone();
        d.push(b'/');
        j.record(d);
    }
    j.record(bytes);
}

/// Whether a path under `.ralph/` is ralph's own runtime noise (logs, state, barriers), which
/// git ignores through `.ralph/.gitignore`.
fn is_runtime(name: &str) -> bool {
    name.starts_with(BARRIER_PREFIX)
        || name.starts_with(".tmp-")
        || matches!(
            name,
            "activity.log" | "activity.now" | "iterations.log" | "state.json" | "lock" | "runs"
        )
        || name.starts_with("state.json.tmp")
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

    use super::*;

    /// What the watcher thread knows about its watches.
    struct Tree {
        root: PathBuf,
        git_dirs: Vec<PathBuf>,
        ralph_dir: PathBuf,
        runs_dir: PathBuf,
        /// Watch descriptor → directory (absolute).
        dirs: HashMap<WatchDescriptor, PathBuf>,
    }

    fn mask() -> WatchMask {
        WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MODIFY
            | WatchMask::ATTRIB
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::DONT_FOLLOW
            | WatchMask::EXCL_UNLINK
            | WatchMask::ONLYDIR
    }

    pub(super) fn start(root: &Path, git_dir: &Path, ralph_dir: &Path) -> Option<Arc<Watch>> {
        let inotify = Inotify::init().ok()?;
        let git_dir = git_dir
            .canonicalize()
            .unwrap_or_else(|_| git_dir.to_path_buf());
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let nonce = format!(
            "ralph-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let journal = Journal {
            nonce,
            floor: 0,
            next: 0,
            changes: Vec::new(),
            segment: HashSet::new(),
            agent: false,
            broken: false,
            barriers_seen: 0,
            always: Vec::new(),
        };
        let shared = Arc::new(Shared {
            journal: Mutex::new(journal),
            seen: Condvar::new(),
        });
        let ralph_dir = ralph_dir
            .canonicalize()
            .unwrap_or_else(|_| ralph_dir.to_path_buf());
        let mut tree = Tree {
            root: root.clone(),
            git_dirs: vec![git_dir.clone()],
            runs_dir: ralph_dir.join("runs"),
            ralph_dir: ralph_dir.clone(),
            dirs: HashMap::new(),
        };
        let mut watches = inotify.watches();
        let mut ok = tree.watch_tree(&mut watches, &root);
        if git_dir.strip_prefix(&root).is_err() {
            // A linked worktree's git directory lives outside the work tree.
            ok &= tree.watch_one(&mut watches, &git_dir);
        }
        if !ok && let Ok(mut j) = shared.journal.lock() {
            j.broken = true;
        }
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("ralph-watch".into())
            .spawn(move || run(inotify, tree, &thread_shared))
            .ok()?;
        Some(Arc::new(Watch {
            shared,
            ralph_dir,
            answers: git_dir.join("ralph-fsmonitor"),
            barrier_seq: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    impl Tree {
        /// Watch `dir` and every directory below it (not following symlinks), skipping `.git`
        /// internals below the root and `.ralph/runs`. False when a watch could not be added.
        fn watch_tree(&mut self, watches: &mut inotify::Watches, dir: &Path) -> bool {
            let mut ok = true;
            let mut stack = vec![dir.to_path_buf()];
            while let Some(d) = stack.pop() {
                if !self.watch_one(watches, &d) {
                    ok = false;
                    continue;
                }
                let Ok(entries) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in entries.flatten() {
                    if !e.file_type().is_ok_and(|t| t.is_dir()) {
                        continue;
                    }
                    let p = e.path();
                    if p == self.runs_dir {
                        continue;
                    }
                    if e.file_name() == ".git" {
                        // The git directory's own top level shows an agent touching it.
                        ok &= self.watch_one(watches, &p);
                        continue;
                    }
                    stack.push(p);
                }
            }
            ok
        }

        fn watch_one(&mut self, watches: &mut inotify::Watches, dir: &Path) -> bool {
            match watches.add(dir, mask()) {
                Ok(wd) => {
                    self.dirs.insert(wd, dir.to_path_buf());
                    true
                }
                // Gone already (created and removed): its events are recorded by its parent.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                Err(_) => false,
            }
        }

        /// Whether `dir` is a git directory (the repository's or a nested one).
        fn is_git_dir(&self, dir: &Path) -> bool {
            self.git_dirs.iter().any(|g| g == dir) || dir.file_name() == Some(OsStr::new(".git"))
        }
    }

    fn run(mut inotify: Inotify, mut tree: Tree, shared: &Shared) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let events = match inotify.read_events_blocking(&mut buf) {
                Ok(e) => e,
                Err(_) => {
                    if let Ok(mut j) = shared.journal.lock() {
                        j.broken = true;
                    }
                    shared.seen.notify_all();
                    return;
                }
            };
            let owned: Vec<(WatchDescriptor, EventMask, Option<std::ffi::OsString>)> = events
                .map(|e| (e.wd, e.mask, e.name.map(|n| n.to_os_string())))
                .collect();
            let mut watches = inotify.watches();
            let Ok(mut j) = shared.journal.lock() else {
                return;
            };
            for (wd, mask, name) in owned {
                handle(&mut tree, &mut watches, &mut j, &wd, mask, name.as_deref());
            }
            drop(j);
            shared.seen.notify_all();
        }
    }

    fn handle(
        tree: &mut Tree,
        watches: &mut inotify::Watches,
        j: &mut Journal,
        wd: &WatchDescriptor,
        mask: EventMask,
        name: Option<&OsStr>,
    ) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            j.everything();
            return;
        }
        if mask.contains(EventMask::IGNORED) {
            tree.dirs.remove(wd);
            return;
        }
        let Some(dir) = tree.dirs.get(wd).cloned() else {
            return;
        };
        if tree.is_git_dir(&dir) {
            git_dir_event(tree, j, &dir, name);
            return;
        }
        if dir == tree.ralph_dir && name.is_some_and(|n| is_runtime(&n.to_string_lossy())) {
            if name.is_some_and(|n| n.as_bytes().starts_with(BARRIER_PREFIX.as_bytes()))
                && mask.contains(EventMask::CREATE)
            {
                let n: u64 = name
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_prefix(BARRIER_PREFIX))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                j.barriers_seen = j.barriers_seen.max(n);
            }
            return;
        }
        let path = match name {
            Some(n) => dir.join(n),
            None => dir.clone(),
        };
        let Ok(rel) = path.strip_prefix(&tree.root) else {
            return;
        };
        let rel = rel.to_path_buf();
        let is_dir = mask.contains(EventMask::ISDIR);
        if is_dir && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            // Watch the new directory, and record what is already in it (created before the
            // watch existed).
            if !tree.watch_tree(watches, &path) {
                j.broken = true;
            }
            record_tree(tree, j, &path);
        }
        if is_dir && mask.contains(EventMask::MOVED_FROM) {
            // The moved directory's watches now point elsewhere: drop them.
            let gone: Vec<WatchDescriptor> = tree
                .dirs
                .iter()
                .filter(|(_, d)| d.starts_with(&path))
                .map(|(w, _)| w.clone())
                .collect();
            for w in gone {
                let _ = watches.remove(w.clone());
                tree.dirs.remove(&w);
            }
        }
        if mask.contains(EventMask::MOVE_SELF) && name.is_none() && dir != tree.root {
            // This directory moved (out from under its parent's view): start over.
            j.everything();
            return;
        }
        // A moved entry may be a file or a directory: record both forms.
        let moved = mask.intersects(EventMask::MOVED_FROM | EventMask::MOVED_TO);
        record_path(j, &rel, is_dir || moved);
    }

    /// An event in a git directory: the agent touching it makes the journal incomplete; a
    /// nested repository's git directory changing means its commit may have changed.
    fn git_dir_event(tree: &Tree, j: &mut Journal, dir: &Path, name: Option<&OsStr>) {
        if name.is_some_and(|n| {
            n.as_bytes().starts_with(b"ralph-fsmonitor")
                || n.as_bytes().starts_with(b".ralph-fsmonitor")
        }) {
            return;
        }
        let nested = dir.file_name() == Some(OsStr::new(".git"))
            && dir.parent().is_some_and(|p| p != tree.root);
        if nested {
            if let Some(repo) = dir.parent().and_then(|p| p.strip_prefix(&tree.root).ok()) {
                record_path(j, repo, true);
            }
        } else if j.agent {
            j.everything();
        }
    }

    /// Record every path under a directory that just appeared.
    fn record_tree(tree: &Tree, j: &mut Journal, dir: &Path) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if let Ok(rel) = p.strip_prefix(&tree.root) {
                    record_path(j, rel, is_dir);
                }
                if is_dir && e.file_name() != ".git" {
                    stack.push(p);
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    pub(super) fn start(_root: &Path, _git_dir: &Path, _ralph_dir: &Path) -> Option<Arc<Watch>> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A watched work tree: `.git` and `.ralph` as ralph has them.
    fn tree() -> (tempfile::TempDir, Arc<Watch>) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in [".git", ".ralph", ".ralph/runs", "src/deep"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        let w = Watch::start(root, &root.join(".git"), &root.join(".ralph")).unwrap();
        assert!(!w.is_broken());
        (dir, w)
    }

    /// The hook's answer for `token` right now, as text (NULs as `|`).
    fn ask(w: &Watch, token: &str) -> String {
        w.write_answers().unwrap();
        let file = std::fs::read(&w.answers).unwrap();
        String::from_utf8_lossy(&fsmonitor::answer(&file, "2", token)).replace('\0', "|")
    }

    /// The token an answer hands out.
    fn token(answer: &str) -> String {
        answer.split('|').next().unwrap().to_string()
    }

    #[test]
    fn changes_since_a_token_and_nothing_else() {
        let (dir, w) = tree();
        let root = dir.path();
        let t0 = token(&ask(&w, "unknown"));
        std::fs::write(root.join("src/a.txt"), "changed").unwrap();
        std::fs::create_dir_all(root.join("new/inner")).unwrap();
        std::fs::write(root.join("new/inner/f"), "f").unwrap();
        // ralph's own runtime noise and transcripts are not changes.
        std::fs::write(root.join(".ralph/activity.log"), "log").unwrap();
        std::fs::write(root.join(".ralph/runs/t.log"), "transcript").unwrap();
        std::fs::write(root.join(".ralph/progress.md"), "notes").unwrap();
        let a = ask(&w, &t0);
        for want in [
            "src/a.txt",
            "new/",
            "new/inner/",
            "new/inner/f",
            ".ralph/progress.md",
        ] {
            assert!(a.split('|').any(|p| p == want), "{want} missing from {a}");
        }
        assert!(!a.contains("activity.log") && !a.contains("t.log"), "{a}");
        assert!(!a.split('|').any(|p| p == "/"), "{a}");
        // Nothing since: the same token back, no paths.
        let t1 = token(&a);
        assert_eq!(ask(&w, &t1), format!("{t1}|"));
        // A chmod is a change too.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            root.join("src/a.txt"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert!(ask(&w, &t1).split('|').any(|p| p == "src/a.txt"));
    }

    #[test]
    fn an_agent_touching_the_git_directory_makes_everything_changed() {
        let (dir, w) = tree();
        let root = dir.path();
        let t0 = token(&ask(&w, "unknown"));
        // ralph's own git commands touch it between agents: not a reason.
        std::fs::write(root.join(".git/index"), "ralph's").unwrap();
        let a = ask(&w, &t0);
        assert!(!a.contains("|/|"), "{a}");
        let t1 = token(&a);
        w.begin_agent();
        std::fs::write(root.join(".git/index"), "the agent's").unwrap();
        w.end_agent();
        assert!(ask(&w, &t1).ends_with("|/|"));
    }

    #[test]
    fn an_ignore_file_change_or_a_moved_directory_is_answered_in_full() {
        let (dir, w) = tree();
        let root = dir.path();
        let t0 = token(&ask(&w, "unknown"));
        std::fs::write(root.join("src/.gitignore"), "*.o\n").unwrap();
        assert!(ask(&w, &t0).ends_with("|/|"));
        let t1 = token(&ask(&w, "unknown"));
        std::fs::rename(root.join("src/deep"), root.join("moved")).unwrap();
        std::fs::write(root.join("moved/inside"), "x").unwrap();
        let a = ask(&w, &t1);
        for want in ["src/deep", "src/deep/", "moved", "moved/", "moved/inside"] {
            assert!(a.split('|').any(|p| p == want), "{want} missing from {a}");
        }
    }
}
