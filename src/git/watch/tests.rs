//! The watcher against a real inotify in temporary directories: what it journals, and the
//! faults that lose events (a real queue overflow, a directory exchange, moves, deletions)
//! followed by later edits in the directories they concern.

use super::*;

/// A watched work tree: `.git` and `.ralph` as ralph has them.
fn tree() -> (tempfile::TempDir, Arc<Watch>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in [".git", ".ralph", ".ralph/runs/r1", "src/deep"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("src/a.txt"), "a").unwrap();
    std::fs::write(root.join(".ralph/runs/r1/t.log"), "transcript").unwrap();
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

/// The paths of an answer, without ralph's own barriers (journalled like any path).
fn names(answer: &str) -> Vec<&str> {
    answer
        .split('|')
        .skip(1)
        .filter(|p| !p.is_empty() && !p.starts_with(".ralph/.barrier-"))
        .collect()
}

#[track_caller]
fn assert_names(answer: &str, want: &[&str]) {
    let got = names(answer);
    for w in want {
        assert!(got.contains(w), "{w} missing from {answer}");
    }
}

#[track_caller]
fn assert_everything(answer: &str) {
    assert_eq!(names(answer), ["/"], "not a full answer: {answer}");
}

#[test]
fn changes_since_a_token_and_nothing_else() {
    let (dir, w) = tree();
    let root = dir.path();
    let t0 = token(&ask(&w, "unknown"));
    std::fs::write(root.join("src/a.txt"), "changed").unwrap();
    std::fs::create_dir_all(root.join("new/inner")).unwrap();
    std::fs::write(root.join("new/inner/f"), "f").unwrap();
    std::fs::write(root.join(".ralph/progress.md"), "notes").unwrap();
    let a = ask(&w, &t0);
    assert_names(
        &a,
        &[
            "src/a.txt",
            "new/",
            "new/inner/",
            "new/inner/f",
            ".ralph/progress.md",
        ],
    );
    assert!(!names(&a).contains(&"/"), "{a}");
    // Nothing since: the same token back, no paths but the ones answered always.
    let t1 = token(&a);
    assert_eq!(names(&ask(&w, &t1)), [".ralph/runs/"]);
    // A chmod is a change too.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        root.join("src/a.txt"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_names(&ask(&w, &t1), &["src/a.txt"]);
}

/// Nothing is left out by a name of ralph's: its runtime files, barriers and transcripts are
/// paths like any other (git's ignore rules decide). Transcripts grow without events, and
/// `.ralph/runs/` is in every answer, so git re-checks what it tracks there.
#[test]
fn ralph_runtime_names_are_journalled_like_any_path() {
    let (dir, w) = tree();
    let root = dir.path();
    let t0 = token(&ask(&w, "unknown"));
    for name in [
        "activity.log",
        "lock",
        ".tmp-x",
        ".barrier-99999",
        "state.json",
    ] {
        std::fs::write(root.join(".ralph").join(name), "x").unwrap();
    }
    std::fs::write(root.join(".ralph/runs/x"), "x").unwrap();
    std::fs::create_dir(root.join(".ralph/runs/r2")).unwrap();
    std::fs::write(root.join(".ralph/runs/r2/new.log"), "x").unwrap();
    let a = ask(&w, &t0);
    assert_names(
        &a,
        &[
            ".ralph/activity.log",
            ".ralph/lock",
            ".ralph/.tmp-x",
            ".ralph/state.json",
            ".ralph/runs/x",
            ".ralph/runs/r2/",
            ".ralph/runs/r2/new.log",
            ".ralph/runs/",
        ],
    );
    assert!(a.split('|').any(|p| p == ".ralph/.barrier-99999"), "{a}");
    // ralph's own barrier before this answer: an unguessable name, journalled.
    let t1 = token(&a);
    let a = ask(&w, &t1);
    let barriers: Vec<&str> = a
        .split('|')
        .filter(|p| p.starts_with(".ralph/.barrier-"))
        .collect();
    // Its own, and the last one's removal (a barrier's file goes once it was seen).
    assert!(!barriers.is_empty() && barriers.len() <= 2, "{a}");
    for b in &barriers {
        let hex = b.strip_prefix(".ralph/.barrier-").unwrap();
        assert!(
            hex.len() == 32 && hex.bytes().all(|c| c.is_ascii_hexdigit()),
            "{a}"
        );
    }
    // A transcript growing is no event; the directory is answered anyway.
    let t2 = token(&a);
    std::fs::write(root.join(".ralph/runs/r1/t.log"), "more transcript").unwrap();
    let a = ask(&w, &t2);
    assert!(!names(&a).contains(&".ralph/runs/r1/t.log"), "{a}");
    assert_names(&a, &[".ralph/runs/"]);
}

#[test]
fn an_agent_touching_the_git_directory_makes_everything_changed() {
    let (dir, w) = tree();
    let root = dir.path();
    let t0 = token(&ask(&w, "unknown"));
    // ralph's own git commands touch it before the agent starts (their events may still be
    // queued): not a reason.
    std::fs::write(root.join(".git/index"), "ralph's").unwrap();
    w.begin_agent();
    w.end_agent();
    let a = ask(&w, &t0);
    assert!(!names(&a).contains(&"/"), "{a}");
    let t2 = token(&a);
    w.begin_agent();
    std::fs::write(root.join(".git/index"), "the agent's").unwrap();
    w.end_agent();
    assert_everything(&ask(&w, &t2));
    assert_eq!(w.take_losses(), None, "no watch is lost by it");
}

#[test]
fn an_ignore_file_change_is_answered_in_full() {
    let (dir, w) = tree();
    let t0 = token(&ask(&w, "unknown"));
    std::fs::write(dir.path().join("src/.gitignore"), "*.o\n").unwrap();
    assert_everything(&ask(&w, &t0));
}

/// A directory moved: the next answer is a full walk after the tree was walked again, and
/// later edits in the moved directory (and one made inside it meanwhile) are seen.
#[test]
fn a_moved_directory_is_a_loss_and_is_watched_again() {
    let (dir, w) = tree();
    let root = dir.path();
    let t0 = token(&ask(&w, "unknown"));
    std::fs::rename(root.join("src/deep"), root.join("moved")).unwrap();
    std::fs::create_dir(root.join("moved/made-meanwhile")).unwrap();
    let a = ask(&w, &t0);
    assert_everything(&a);
    let losses = w.take_losses().unwrap();
    assert_eq!(
        losses.reasons,
        ["a directory moved (or two were exchanged)"]
    );
    assert!(losses.rewatched);
    let t1 = token(&a);
    std::fs::write(root.join("moved/inside"), "x").unwrap();
    std::fs::write(root.join("moved/made-meanwhile/f"), "x").unwrap();
    assert_names(&ask(&w, &t1), &["moved/inside", "moved/made-meanwhile/f"]);
}

/// `renameat2(RENAME_EXCHANGE)` of two directories: two paired moves whose names collide,
/// which once cost a watch for good. Both directories' later edits, at every depth, are seen.
#[test]
fn exchanged_directories_are_watched_again() {
    let (dir, w) = tree();
    let root = dir.path();
    for d in ["a/sub", "b/sub"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let t0 = token(&ask(&w, "unknown"));
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &root.join("a"),
        nix::fcntl::AT_FDCWD,
        &root.join("b"),
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .unwrap();
    let a = ask(&w, &t0);
    assert_everything(&a);
    assert!(w.take_losses().unwrap().rewatched);
    let t1 = token(&a);
    // One edit on each side, at two depths: a watcher that still had the paths before the
    // exchange would name the other side.
    for f in ["a/only-a", "b/sub/only-b"] {
        std::fs::write(root.join(f), "x").unwrap();
    }
    assert_names(&ask(&w, &t1), &["a/only-a", "b/sub/only-b"]);
}

/// A real overflow of the kernel's queue: the watcher thread is held (the test takes the
/// journal's lock) while more events than the queue holds happen, and directories are created
/// meanwhile (their events dropped). The next answer is a full walk after the tree was walked
/// again, and later edits in those directories are seen.
#[test]
fn a_queue_overflow_is_walked_again_before_the_next_answer() {
    let (dir, w) = tree();
    let root = dir.path();
    let t0 = token(&ask(&w, "unknown"));
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(16_384);
    let held = w.journal();
    use std::os::unix::fs::PermissionsExt;
    // A chmod is one event; two files alternate, so no two events in a row are alike (the
    // kernel merges those).
    for i in 0..max + 4096 {
        let f = root.join(if i % 2 == 0 { "src/a.txt" } else { "src/deep" });
        let mode = if i % 4 < 2 { 0o755 } else { 0o700 };
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    for k in 0..20 {
        std::fs::create_dir_all(root.join(format!("burst/d{k}/e"))).unwrap();
    }
    drop(held);
    let a = ask(&w, &t0);
    assert_everything(&a);
    let losses = w.take_losses().unwrap();
    assert_eq!(losses.reasons, ["the kernel's event queue overflowed"]);
    assert!(losses.rewatched);
    let t1 = token(&a);
    for k in 0..20 {
        std::fs::write(root.join(format!("burst/d{k}/e/f")), "x").unwrap();
    }
    let a = ask(&w, &t1);
    for k in 0..20 {
        let f = format!("burst/d{k}/e/f");
        assert!(names(&a).contains(&f.as_str()), "{f} missing from {a}");
    }
}

/// Deleting a directory tree is explained by its parents' events: no loss, no walk.
#[test]
fn a_deleted_directory_tree_is_no_loss() {
    let (dir, w) = tree();
    let root = dir.path();
    std::fs::create_dir_all(root.join("gone/a/b")).unwrap();
    let t0 = token(&ask(&w, "unknown"));
    std::fs::remove_dir_all(root.join("gone")).unwrap();
    let a = ask(&w, &t0);
    assert_names(&a, &["gone", "gone/"]);
    assert!(!names(&a).contains(&"/"), "{a}");
    assert_eq!(w.take_losses(), None);
}

/// A stopped watcher is no longer handed out; a new start watches afresh.
#[test]
fn a_stopped_watcher_is_not_reused() {
    let (dir, w) = tree();
    let root = dir.path();
    let again = Watch::start(root, &root.join(".git"), &root.join(".ralph")).unwrap();
    assert!(Arc::ptr_eq(&w, &again));
    w.stop();
    let fresh = Watch::start(root, &root.join(".git"), &root.join(".ralph")).unwrap();
    assert!(!Arc::ptr_eq(&w, &fresh));
    let t0 = token(&ask(&fresh, "unknown"));
    std::fs::write(root.join("src/a.txt"), "after").unwrap();
    assert_names(&ask(&fresh, &t0), &["src/a.txt"]);
    fresh.stop();
}

/// The agent put a symlink where `.ralph` was: the barrier makes it a directory again and is
/// answered (not timed out into a full answer, as a barrier written through the link would
/// be), and the new `.ralph` is watched.
#[test]
fn a_ralph_directory_replaced_by_a_symlink_is_a_directory_again() {
    let (dir, w) = tree();
    let root = dir.path();
    let t0 = token(&ask(&w, "unknown"));
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::remove_dir_all(root.join(".ralph")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.join(".ralph")).unwrap();
    let a = ask(&w, &t0);
    // A barrier that timed out would have made it a full answer.
    assert!(!names(&a).contains(&"/"), "{a}");
    assert_names(&a, &[".ralph", ".ralph/"]);
    assert!(root.join(".ralph").symlink_metadata().unwrap().is_dir());
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none()
    );
    let t1 = token(&a);
    std::fs::write(root.join(".ralph/progress.md"), "x").unwrap();
    assert_names(&ask(&w, &t1), &[".ralph/progress.md"]);
}

/// After `distrust` (an index ralph's git did not write, a changed configuration) no token
/// handed out before is answered in part — the last one, nor one forged ahead with the nonce
/// read from the answers file — and the next token is answered in part again.
#[test]
fn a_distrusted_token_is_answered_everything() {
    let (dir, w) = tree();
    let root = dir.path();
    let a = ask(&w, "unknown");
    let t0 = token(&a);
    let (nonce, pos) = t0.rsplit_once(':').unwrap();
    let ahead = format!("{nonce}:{}", pos.parse::<u64>().unwrap() + 3);
    for i in 0..5 {
        std::fs::write(root.join(format!("src/f{i}")), "f").unwrap();
    }
    // The control: before `distrust`, both tokens are answered in part.
    assert!(!names(&ask(&w, &t0)).contains(&"/"));
    assert!(!names(&ask(&w, &ahead)).contains(&"/"));
    w.distrust();
    assert_everything(&ask(&w, &t0));
    let a = ask(&w, &ahead);
    assert_everything(&a);
    assert_ne!(token(&a).rsplit_once(':').unwrap().0, nonce, "a new nonce");
    let t1 = token(&a);
    std::fs::write(root.join("src/a.txt"), "again").unwrap();
    assert_eq!(names(&ask(&w, &t1)), ["src/a.txt", ".ralph/runs/"]);
}
