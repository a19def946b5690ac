//! ralph's commits against real git's (SPEC §8: "Real git is the oracle"). Each test builds a
//! repository through git, copies it into a twin (`cp -a`, so both start from the same files,
//! index and configuration), and makes the same change in both: in ralph's copy the fake agent
//! makes it during one iteration (a `sh:` script, so file-event tracking is exercised); in the
//! twin the same script runs, followed by `git add -A && git commit`. Then both must hold the
//! same tree at HEAD and print the same `git status --porcelain | cksum`, and ralph's ITER record
//! must carry that fingerprint.
//!
//! ralph's own files: ralph's first iteration also commits `.ralph/.gitignore`, `progress.md`
//! and `guardrails.md`. The twin gets a copy of exactly those three files, as they are on disk in
//! ralph's work tree once the run is over, before its `git add -A`. Both work trees then hold the
//! same files (ralph's runtime files are ignored through `.ralph/.gitignore`, which the twin has
//! too), so the comparison is exact, `.ralph/` included, and where git would not commit ralph's
//! files (ignore rules that exclude `.ralph/`, a sparse cone without it) the twin shows what git
//! does instead.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

/// One situation: how the repository is built and what changes in it.
struct Case<'a> {
    /// Shell run in the repository before the initial commit.
    setup: &'a str,
    /// Shell run after the initial commit, before the copy: the state both runs start from.
    prepare: &'a str,
    /// The change: the fake agent's `sh:` script in ralph's copy, then the twin's.
    change: &'a str,
    /// How the twin stages, in order: git's arguments and the exit code git gives.
    twin_add: &'a [(&'a [&'a str], i32)],
}

const GIT_ADD_ALL: &[(&[&str], i32)] = &[(&["add", "-A"], 0)];

impl Default for Case<'_> {
    fn default() -> Self {
        Case {
            setup: "",
            prepare: "",
            change: "",
            twin_add: GIT_ADD_ALL,
        }
    }
}

/// Both repositories after the change.
struct Ran {
    env: TestEnv,
    twin: PathBuf,
    /// ralph's run.
    out: Output,
    /// What the twin's staging steps printed on stderr.
    twin_stderr: String,
}

/// A shell snippet run in `dir` with the test's isolated environment, success asserted.
#[track_caller]
fn shell(env: &TestEnv, dir: &Path, script: &str) {
    if script.is_empty() {
        return;
    }
    let out = env
        .command("sh")
        .args(["-c", &format!("set -e\n{script}")])
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "setup script failed: {script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fixed dates and identities for commits made inside nested repositories and submodules, so
/// the twin's commits get the same ids as ralph's.
const FIXED_COMMITS: &str = "export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' \
    GIT_COMMITTER_DATE='2020-01-01T00:00:00Z' GIT_AUTHOR_NAME=Nested \
    GIT_AUTHOR_EMAIL=nested@example.com GIT_COMMITTER_NAME=Nested \
    GIT_COMMITTER_EMAIL=nested@example.com";

fn run_case(case: &Case) -> Ran {
    run_case_in(TestEnv::new(), case)
}

fn run_case_in(env: TestEnv, case: &Case) -> Ran {
    env.write_task(&["never checked by the agent"], "");
    shell(&env, &env.repo, case.setup);
    env.commit_all("initial");
    shell(&env, &env.repo, case.prepare);
    let twin = make_twin(&env);
    let action = agent_sh(&env, "change", case.change);
    let out = env.run_fake(&action, &["--max-iterations", "1"]);

    let script = PathBuf::from(action.strip_prefix("sh:").expect("sh: action"));
    sh_file_in(&env, &twin, &script);
    copy_ralph_files(&env, &twin);
    let mut twin_stderr = String::new();
    for (args, code) in case.twin_add {
        let o = git_output_in(&env, &twin, args);
        assert_eq!(
            o.status.code(),
            Some(*code),
            "the oracle changed: git {args:?} in the twin: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        twin_stderr.push_str(&String::from_utf8_lossy(&o.stderr));
    }
    git_in(
        &env,
        &twin,
        &["commit", "-q", "--allow-empty", "-m", "twin"],
    );
    Ran {
        env,
        twin,
        out,
        twin_stderr,
    }
}

/// The files ralph commits on its first iteration, as they are in ralph's work tree now.
fn copy_ralph_files(env: &TestEnv, twin: &Path) {
    std::fs::create_dir_all(twin.join(".ralph")).unwrap();
    for name in [".gitignore", "progress.md", "guardrails.md"] {
        let from = env.repo.join(".ralph").join(name);
        if from.exists() {
            std::fs::copy(&from, twin.join(".ralph").join(name)).unwrap();
        }
    }
}

fn tree_id(env: &TestEnv, dir: &Path) -> String {
    git_in(env, dir, &["rev-parse", "HEAD^{tree}"])
        .trim()
        .to_string()
}

/// Same tree at HEAD, same `git status --porcelain | cksum`, and ralph's ITER fingerprint equal
/// to git's; every difference is listed in one failure message.
#[track_caller]
fn assert_same_as_git(ran: &Ran) {
    let Ran { env, twin, out, .. } = ran;
    let mut problems = String::new();
    if out.status.code() != Some(3) {
        problems.push_str(&format!(
            "- ralph exited {:?}, not 3 (max iterations)\n",
            out.status.code()
        ));
    }
    let (ours, theirs) = (tree_id(env, &env.repo), tree_id(env, twin));
    if ours != theirs {
        let listing = entries_diff(
            &tree_entries(env, &env.repo, "HEAD", &|_| false),
            &tree_entries(env, twin, "HEAD", &|_| false),
        );
        problems.push_str(&format!(
            "- HEAD trees differ (ralph's {ours}, git's {theirs}):\n{listing}"
        ));
    }
    let (ours_ck, theirs_ck) = (env.porcelain_cksum(), porcelain_cksum_in(env, twin));
    if ours_ck != theirs_ck {
        problems.push_str(&format!(
            "- `git status --porcelain | cksum` differs: {ours_ck} in ralph's repository, {theirs_ck} in git's\n  ralph's status: {:?}\n  git's status:   {:?}\n",
            porcelain_in(env, &env.repo),
            porcelain_in(env, twin)
        ));
    }
    let fingerprint = last_fingerprint(env);
    if fingerprint != theirs_ck {
        problems.push_str(&format!(
            "- ralph's ITER fingerprint is {fingerprint:?}, git's is {theirs_ck:?} (git itself says {ours_ck} in ralph's repository)\n"
        ));
    }
    assert!(
        problems.is_empty(),
        "ralph's commit differs from `git add -A && git commit`:\n{problems}--- ralph's stderr ---\n{}",
        stderr(out)
    );
}

// ---- The situations of the issue, and a second path git refuses: ralph differs today. ----

/// A sparse checkout (cone `in`, plus `.ralph` so ralph's own files are inside it): `git status`
/// is clean, so no "state before run" commit is due, and the skip-worktree files outside the cone
/// stay in every commit (SPEC §8: skip-worktree entries are never deleted).
///
/// Before the git CLI staged (libgit2 only): libgit2 sees the files outside the cone as deleted, the "state before run"
/// commit deletes `out/b.txt`, and HEAD's tree lacks it.
#[test]
fn sparse_checkout_keeps_the_files_outside_the_cone() {
    let ran = run_case(&Case {
        setup: "mkdir -p in out && echo i > in/a.txt && echo o > out/b.txt && echo t > top.txt",
        prepare: "git sparse-checkout set in .ralph",
        change: "echo more >> in/a.txt",
        ..Case::default()
    });
    assert_same_as_git(&ran);
    let subjects = ran.env.commits();
    assert!(
        !subjects.iter().any(|s| s.contains("state before run")),
        "`git status` was clean before the run, yet ralph committed a state before run: {subjects:?}"
    );
}

/// A sparse checkout whose cone (`in`) leaves out new paths: `git add -A` stages the change
/// inside the cone and refuses new files outside it (exit 1, "outside of your sparse-checkout
/// definition") — the agent's `newdir/n` and ralph's own `.ralph/` files stay untracked, and
/// `out/b.txt` (skip-worktree) stays in the tree.
///
/// Before the git CLI staged (libgit2 only): ralph deletes `out/b.txt` from the tree and commits `newdir/n` and `.ralph/`.
#[test]
fn sparse_checkout_leaves_new_files_outside_the_cone_out_as_git_does() {
    let ran = run_case(&Case {
        setup: "mkdir -p in out && echo i > in/a.txt && echo o > out/b.txt",
        prepare: "git sparse-checkout set in",
        change: "echo more >> in/a.txt && mkdir newdir && echo n > newdir/n",
        twin_add: &[(&["add", "-A"], 1)],
    });
    assert!(
        ran.twin_stderr
            .contains("outside of your sparse-checkout definition"),
        "git's refusal: {}",
        ran.twin_stderr
    );
    assert_same_as_git(&ran);
}

/// A clean filter (`filter.upper.clean = tr a-z A-Z`, `smudge = cat`, `*.up filter=upper`):
/// git stores the filtered content, `HELLO WORLD`.
///
/// Before the git CLI staged (libgit2 only): libgit2 runs no external filter driver: ralph commits the raw `hello world`
/// blob, and its fingerprint says clean where git lists both files as modified.
#[test]
fn clean_filter_output_is_what_gets_committed() {
    let ran = run_case(&Case {
        setup: "git config filter.upper.clean 'tr a-z A-Z' && git config filter.upper.smudge cat \
                && echo '*.up filter=upper' > .gitattributes && echo 'tracked text' > old.up",
        change: "echo 'hello world' > hello.up && echo 'more text' >> old.up",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// git-lfs for real (`git lfs install --local`, `git lfs track '*.bin'`): a 1 MB asset is
/// committed as an LFS pointer, the object kept under `.git/lfs`. Skipped (with a message) only
/// when `git lfs` is not installed; `.ci/run` installs it.
///
/// Before the git CLI staged (libgit2 only): ralph commits the 1 MB file as a blob instead of the pointer, and its
/// fingerprint says clean where git lists ` M asset.bin`.
#[test]
fn git_lfs_commits_a_pointer_not_the_file() {
    let env = TestEnv::new();
    if !env
        .command("git")
        .args(["lfs", "version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip_or_fail("`git lfs` is not installed (apt-get install git-lfs)");
        return;
    }
    // Random, but the same bytes for ralph's copy and the twin.
    let payload = env.home.join("asset.bin");
    let mut bytes = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in bytes.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 24) as u8;
    }
    std::fs::write(&payload, &bytes).unwrap();
    let change = format!(
        "cp '{}' asset.bin && echo note > note.txt",
        payload.display()
    );
    let ran = run_case_in(
        env,
        &Case {
            setup: "git lfs install --local >/dev/null && git lfs track '*.bin' >/dev/null",
            change: &change,
            ..Case::default()
        },
    );
    let pointer = git_in(&ran.env, &ran.twin, &["cat-file", "-p", "HEAD:asset.bin"]);
    assert!(
        pointer.starts_with("version https://git-lfs.github.com/spec/v1"),
        "the oracle stores a pointer: {pointer}"
    );
    assert_same_as_git(&ran);
}

/// A nested negation: `*.log` in the root `.gitignore`, `!keep.log` in `dir/.gitignore`. git
/// adds `dir/keep.log` (the deeper file wins) and leaves `dir/drop.log` and `root.log` out.
///
/// Before the git CLI staged (libgit2 only): libgit2 (issue 7284) treats `dir/keep.log` as ignored: ralph sees no change
/// at all and commits nothing, and its fingerprint lists only `.ralph/` where git lists
/// `dir/keep.log` too.
#[test]
fn nested_gitignore_negation_reincludes_the_file() {
    let ran = run_case(&Case {
        setup: "printf '*.log\\n' > .gitignore && mkdir dir && printf '!keep.log\\n' > dir/.gitignore \
                && echo o > dir/other.txt",
        change: "echo k > dir/keep.log && echo d > dir/drop.log && echo r > root.log",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// A file re-included under an excluded directory (`vendor/` then `!*.keep`, `vendor/` holding a
/// tracked file): git cannot re-include a file whose parent directory is excluded, so
/// `vendor/a.keep` stays out — tracked files in it still get their changes staged — and a
/// `*.keep` outside it is added.
///
/// Before the git CLI staged (libgit2 only): libgit2 descends into the excluded directory because it holds a tracked file,
/// and ralph commits `vendor/a.keep` (git's status does not list it; ralph's fingerprint does).
/// With no tracked file under `vendor/` ralph agrees with git.
#[test]
fn a_file_reincluded_under_an_excluded_directory_stays_ignored() {
    let ran = run_case(&Case {
        setup: "mkdir vendor && echo t > vendor/tracked.txt && git add -f vendor/tracked.txt \
                && printf 'vendor/\\n!*.keep\\n' > .gitignore",
        change: "echo a > vendor/a.keep && echo b > vendor/b.txt && echo more >> vendor/tracked.txt \
                 && echo t > top.keep",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// Ignore rules that exclude `.ralph/` (the root `.gitignore` says `.ralph/`): git stages
/// nothing under it, so ralph's files stay out of the commit like anything else ignored.
///
/// Before the git CLI staged (libgit2 only): ralph force-adds `.ralph/progress.md` into the commit (after this one
/// iteration both fingerprints are clean).
#[test]
fn ignore_rules_that_exclude_ralph_dir_are_honoured() {
    let ran = run_case(&Case {
        setup: "printf '.ralph/\\n' > .gitignore",
        change: "echo w > work.txt",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// A tracked file replaced by a FIFO. git refuses the path: `git add -A` prints
/// `error: channel: can only add regular files, symbolic links or git-directories` and
/// `fatal: updating files failed`, exits 128 and stages nothing at all; `git status` shows
/// ` M channel`. An untracked FIFO is skipped silently (neither listed nor added). SPEC §8:
/// ralph leaves the refused path out with a warning and keeps its tracked version — the oracle
/// is `git add -A -- . ':(exclude)channel'`, and ralph's stderr must name `channel` in a warning.
///
/// Before the git CLI staged (libgit2 only): ralph commits the deletion of `channel`, its fingerprint says clean where git
/// lists ` M channel`, and no warning names the path.
#[test]
fn a_tracked_file_replaced_by_a_fifo_keeps_its_tracked_version_with_a_warning() {
    let ran = run_case(&Case {
        setup: "echo 'tracked content' > channel && echo o > other.txt",
        change: "rm channel && mkfifo channel && mkfifo new-fifo && echo m >> other.txt",
        twin_add: &[
            (&["add", "-A"], 128),
            (&["add", "-A", "--", ".", ":(exclude)channel"], 0),
        ],
        ..Case::default()
    });
    assert!(
        ran.twin_stderr
            .contains("channel: can only add regular files, symbolic links or git-directories"),
        "git's refusal: {}",
        ran.twin_stderr
    );
    assert_same_as_git(&ran);
    let err = stderr(&ran.out);
    assert!(
        err.lines()
            .any(|l| l.contains("warning") && l.contains("channel")),
        "no warning names the refused path `channel`:\n{err}"
    );
}

/// An untracked nested repository without a commit: git refuses it (`git add -A` prints
/// `error: 'empty-nested/' does not have a commit checked out`, exits 128 and stages nothing)
/// and lists it as `?? empty-nested/`. Like any refused path (SPEC §8) ralph leaves it out with
/// a warning and stages the rest — the oracle is `git add -A -- . ':(exclude)empty-nested'`.
///
/// Before the git CLI staged (libgit2 only): trees and fingerprints agree (ralph leaves it out), but silently: no warning
/// names `empty-nested`.
#[test]
fn a_nested_repository_without_a_commit_is_left_out_with_a_warning() {
    let ran = run_case(&Case {
        change: "git init -q empty-nested && echo w > work.txt",
        twin_add: &[
            (&["add", "-A"], 128),
            (&["add", "-A", "--", ".", ":(exclude)empty-nested"], 0),
        ],
        ..Case::default()
    });
    assert!(
        ran.twin_stderr
            .contains("'empty-nested/' does not have a commit checked out"),
        "git's refusal: {}",
        ran.twin_stderr
    );
    assert_same_as_git(&ran);
    let err = stderr(&ran.out);
    assert!(
        err.lines()
            .any(|l| l.contains("warning") && l.contains("empty-nested")),
        "no warning names the refused path `empty-nested`:\n{err}"
    );
}

// ---- Situations where ralph and git agree today: guards for the new engine. ----

const CRLF_CHANGE: &str = "printf 'one\\r\\ntwo\\r\\n' > crlf.txt && printf 'a\\nb\\n' > lf-new.txt \
    && printf 'x\\r\\ny\\r\\n' > tracked.txt && printf 'mixed\\r\\nline\\n' > mixed.txt";

/// `core.autocrlf=true`: CRLF text is stored with LF, and a tracked file rewritten with CRLF.
///
/// Held before too.
#[test]
fn autocrlf_true_is_applied_like_git() {
    let ran = run_case(&Case {
        setup: "git config core.autocrlf true && printf 'x\\ny\\n' > tracked.txt",
        change: CRLF_CHANGE,
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// `core.autocrlf=input`: CRLF converted on the way in only.
///
/// Held before too.
#[test]
fn autocrlf_input_is_applied_like_git() {
    let ran = run_case(&Case {
        setup: "git config core.autocrlf input && printf 'x\\ny\\n' > tracked.txt",
        change: CRLF_CHANGE,
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// Symlinks are committed as links (mode 120000): to a file, dangling, to a directory, and a
/// tracked link retargeted.
///
/// Held before too.
#[test]
fn symlinks_are_committed_as_links() {
    let ran = run_case(&Case {
        setup: "echo t > target.txt && mkdir d && echo x > d/f && ln -s target.txt old-link",
        change: "ln -s target.txt link && ln -s missing dangling && ln -s d dirlink \
                 && rm old-link && ln -s d/f old-link",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// The executable bit (chmod +x / -x on tracked files, a new executable file).
///
/// Held before too.
#[test]
fn the_executable_bit_follows_chmod() {
    let ran = run_case(&Case {
        setup: "echo s > run.sh && echo n > was-exec.sh && chmod +x was-exec.sh",
        change: "chmod +x run.sh && chmod -x was-exec.sh && echo n > new-exec.sh \
                 && chmod +x new-exec.sh",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// Type changes: file → symlink, symlink → file, file → directory, directory → file.
///
/// Held before too.
#[test]
fn type_changes_are_committed_like_git() {
    let ran = run_case(&Case {
        setup: "echo f > file-to-link && echo t > target && ln -s target link-to-file \
                && echo f > file-to-dir && mkdir dir-to-file && echo x > dir-to-file/x",
        change: "rm file-to-link && ln -s target file-to-link \
                 && rm link-to-file && echo now a file > link-to-file \
                 && rm file-to-dir && mkdir file-to-dir && echo inner > file-to-dir/inner \
                 && rm -r dir-to-file && echo now a file > dir-to-file",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// A repository to add as a submodule (`one.txt` committed, then `more`), with fixed commits.
fn submodule_source(env: &TestEnv, more: &str) -> PathBuf {
    let src = env.home.join("subsrc");
    std::fs::create_dir_all(&src).unwrap();
    shell(
        env,
        &src,
        &format!(
            "{FIXED_COMMITS}\ngit init -q -b main && echo one > one.txt && git add one.txt \
             && git commit -q -m one{more}"
        ),
    );
    src
}

/// Submodules: a submodule whose checked-out commit moved is recorded at the new commit (its
/// untracked dirt is not), and a submodule the agent adds itself (`git submodule add`).
///
/// Held before too.
#[test]
fn submodules_are_recorded_like_git() {
    let env = TestEnv::new();
    let src = submodule_source(&env, "");
    let setup = format!(
        "git -c protocol.file.allow=always submodule add -q '{}' sub",
        src.display()
    );
    let change = format!(
        "{FIXED_COMMITS}\n(cd sub && echo two > two.txt && git add two.txt && git commit -q -m two)\n\
         echo dirt > sub/untracked-dirt.txt\n\
         git -c protocol.file.allow=always submodule add -q '{}' sub2\n\
         echo w > work.txt",
        src.display()
    );
    let ran = run_case_in(
        env,
        &Case {
            setup: &setup,
            change: &change,
            ..Case::default()
        },
    );
    assert_same_as_git(&ran);
}

/// An untracked nested repository with a commit is recorded as a gitlink at its HEAD (git warns
/// "adding embedded git repository").
///
/// Held before too.
#[test]
fn a_nested_repository_with_a_commit_is_recorded_as_a_gitlink() {
    let change = format!(
        "{FIXED_COMMITS}\ngit init -q -b main nested\n\
         (cd nested && echo n > n.txt && git add n.txt && git commit -q -m nested)\n\
         echo w > work.txt"
    );
    let ran = run_case(&Case {
        change: &change,
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// Intent-to-add entries (`git add -N`): made before the run (the "state before run" commit)
/// and by the agent; `git add -A` stages their content, and drops one whose file is gone.
///
/// Held before too.
#[test]
fn intent_to_add_entries_are_staged_like_git() {
    let ran = run_case(&Case {
        prepare: "echo p > pre-ita.txt && git add -N pre-ita.txt",
        change: "echo i > ita.txt && git add -N ita.txt && echo g > ita-gone.txt \
                 && git add -N ita-gone.txt && rm ita-gone.txt && echo more >> pre-ita.txt",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// Unusual file names: spaces, quotes, backslash, newline, tab, non-ASCII, a leading dash, `*`
/// — new, modified, renamed — committed as git does and quoted as `git status` quotes them.
///
/// Held before too.
#[test]
fn unusual_file_names_are_committed_like_git() {
    let ran = run_case(&Case {
        setup: "echo o > 'old name.txt' && echo q > 'tracked \"q\".txt'",
        change: r#"printf 'sp\n' > 'with space.txt'
printf 'dq\n' > 'double"quote.txt'
printf 'sq\n' > "single'quote.txt"
printf 'bs\n' > 'back\slash.txt'
printf 'nl\n' > "$(printf 'new\nline.txt')"
printf 'tab\n' > "$(printf 'tab\there.txt')"
printf 'na\n' > 'naïve-日本.txt'
printf 'dash\n' > ./-leading-dash.txt
printf 'star\n' > '*'
mv 'old name.txt' 'renamed name.txt'
printf 'mod\n' >> 'tracked "q".txt'"#,
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

// ---- Further corner cases SPEC §8 names: ignore sources, attributes, configuration. ----

/// Ignore rules outside the work tree's `.gitignore` files: `.git/info/exclude`, the default
/// global excludes file (`$HOME/.config/git/ignore`, read even without a global config) and a
/// `core.excludesFile` named in the repository's configuration.
///
/// Held before too.
#[test]
fn info_exclude_and_global_excludes_are_honoured() {
    let env = TestEnv::new();
    let global = env.home.join(".config/git/ignore");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    std::fs::write(&global, "*.tmp\n").unwrap();
    let named = env.home.join("excludes");
    std::fs::write(&named, "*.bak\n").unwrap();
    let setup = format!(
        "printf '*.secretish\\n' >> .git/info/exclude && git config core.excludesFile '{}'",
        named.display()
    );
    let ran = run_case_in(
        env,
        &Case {
            setup: &setup,
            change: "echo s > x.secretish && echo b > x.bak && echo t > x.tmp && echo k > kept.txt",
            ..Case::default()
        },
    );
    assert_same_as_git(&ran);
}

/// `.gitattributes`: `text eol=crlf` and `text=auto` normalise CRLF to LF in the blob, `-text`
/// and `binary` keep the bytes, `ident` collapses `$Id…$`.
///
/// Held before too.
#[test]
fn gitattributes_text_eol_and_ident_are_applied_like_git() {
    let ran = run_case(&Case {
        setup: "printf '*.crlf text eol=crlf\\n*.auto text=auto\\n*.raw -text\\n*.bin binary\\n*.id ident\\n' > .gitattributes",
        change: "printf 'a\\r\\nb\\r\\n' > f.crlf && printf 'a\\r\\nb\\r\\n' > f.auto \
                 && printf 'a\\r\\nb\\r\\n' > f.raw && printf 'a\\r\\nb\\0\\r\\n' > f.bin \
                 && printf '$Id: deadbeef $\\nx\\n' > f.id",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// `core.fileMode=false`: git ignores the executable bit in the work tree, keeping the mode
/// recorded in the index (and new files get 100644).
///
/// Held before too.
#[test]
fn core_filemode_false_ignores_the_executable_bit() {
    let ran = run_case(&Case {
        setup: "git config core.fileMode false && echo s > run.sh && echo e > was-exec.sh \
                && git add was-exec.sh && git update-index --chmod=+x was-exec.sh",
        change: "chmod +x run.sh && chmod -x was-exec.sh && echo m >> was-exec.sh \
                 && echo n > new.sh && chmod +x new.sh",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// git's configuration environment: every run here has `GIT_CONFIG_GLOBAL=/dev/null` and
/// `GIT_CONFIG_NOSYSTEM=1`, so git reads neither `$HOME/.gitconfig` nor the system file. A
/// `$HOME/.gitconfig` naming an excludes file (`*.txt`) must then change nothing: git adds
/// `notes.txt`.
///
/// Before the git CLI staged (libgit2 only): ralph opens the repository with libgit2's discover, which reads
/// `$HOME/.gitconfig` whatever `GIT_CONFIG_GLOBAL` says (and the system file whatever
/// `GIT_CONFIG_NOSYSTEM` says): `notes.txt` is ignored, nothing is committed.
#[test]
fn git_config_global_from_the_environment_is_honoured() {
    let env = TestEnv::new();
    let excludes = env.home.join("home-excludes");
    std::fs::write(&excludes, "*.txt\n").unwrap();
    std::fs::write(
        env.home.join(".gitconfig"),
        format!("[core]\n\texcludesFile = {}\n", excludes.display()),
    )
    .unwrap();
    let ran = run_case_in(
        env,
        &Case {
            change: "echo n > notes.txt",
            ..Case::default()
        },
    );
    assert_same_as_git(&ran);
}

/// A nested repository recorded as a gitlink, whose HEAD then moves in a later iteration with
/// nothing else changed: the commit happens in its own `.git`, which the watcher does not see.
/// git since 2.37 never trusts a file-system monitor for gitlinks; for older git ralph reports
/// every gitlink in each answer (read from the index's tree after every commit). Either way ralph
/// records the new commit, as `git add -A` would, and leaves `git status` clean.
#[test]
fn a_nested_repository_moved_in_a_later_iteration_is_recorded() {
    let env = TestEnv::new();
    env.write_task(&["never checked by the agent"], "");
    env.commit_all("initial");
    let first = agent_sh(
        &env,
        "nest",
        &format!(
            "{FIXED_COMMITS}\ngit init -q -b main nested\n\
             (cd nested && echo n > n.txt && git add n.txt && git commit -q -m one)"
        ),
    );
    let second = agent_sh(
        &env,
        "move",
        &format!("{FIXED_COMMITS}\n(cd nested && git commit -q --allow-empty -m two)"),
    );
    let out = env.run_fake(&format!("{first},{second}"), &["--max-iterations", "2"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let nested_head = git_in(&env, &env.repo.join("nested"), &["rev-parse", "HEAD"]);
    let recorded = git_in(&env, &env.repo, &["rev-parse", "HEAD:nested"]);
    assert_eq!(recorded.trim(), nested_head.trim(), "the gitlink at HEAD");
    let subjects = git_in(&env, &env.repo, &["log", "--format=%s", "-2"]);
    assert!(
        subjects.lines().all(|s| s.starts_with("ralph: iteration")),
        "both iterations committed: {subjects}"
    );
    let status = git_in(&env, &env.repo, &["status", "--porcelain"]);
    assert_eq!(status, "", "nothing left uncommitted");
}

/// Over many iterations, not one: the fingerprint of every ITER record is the one git prints
/// for the tree that iteration left. The agent itself is the oracle — each iteration starts by
/// recording `git --no-optional-locks status --porcelain | cksum` (a status of its own, without
/// ralph's monitor, that writes nothing), then makes its change: a new untracked directory with
/// files, a file added to an existing directory, one modified, one deleted, and (in the sparse
/// case) a new directory outside the cone. This holds the watcher, the untracked cache and the
/// statuses that do not write the index back to git's answer from one iteration to the next, in
/// a plain repository and in a sparse checkout.
#[test]
fn every_iterations_fingerprint_is_gits_over_many_iterations() {
    for sparse in [false, true] {
        let env = TestEnv::new();
        env.write_task(&["never checked by the agent"], "");
        shell(
            &env,
            &env.repo,
            "mkdir -p in/a in/b out && for i in 1 2 3 4 5 6 7 8; do echo $i > in/a/f$i; \
             echo $i > in/b/g$i; echo $i > out/o$i; done",
        );
        env.commit_all("initial");
        if sparse {
            shell(&env, &env.repo, "git sparse-checkout set in .ralph");
        }
        let oracle = env.home.join("oracle.log");
        let script = agent_sh(
            &env,
            "many",
            &format!(
                "git --no-optional-locks status --porcelain | cksum >> '{o}'\n\
                 k=$RALPH_ITERATION\n\
                 mkdir -p in/new$k/deep && echo x > in/new$k/x && echo y > in/new$k/deep/y\n\
                 echo $k > in/a/added$k\n\
                 echo more >> in/b/g1\n\
                 rm -f in/a/f$k\n\
                 mkdir -p outside$k && echo z > outside$k/z",
                o = oracle.display()
            ),
        );
        let out = env.run_fake(
            &script,
            &["--max-iterations", "6", "--stuck-threshold", "99"],
        );
        assert_exit(&out, 3);
        let mut seen: Vec<String> = std::fs::read_to_string(&oracle)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        seen.push(env.porcelain_cksum());
        let records: Vec<String> = env
            .iter_records()
            .iter()
            .filter_map(|r| r.rsplit(" | ").next().map(str::to_string))
            .collect();
        assert_eq!(records.len(), 6, "{:?}", env.iter_records());
        for (k, fingerprint) in records.iter().enumerate() {
            assert_eq!(
                fingerprint,
                &seen[k + 1],
                "sparse={sparse}: ITER {} fingerprint {fingerprint}, git's {} (git's status now: {:?})",
                k + 1,
                seen[k + 1],
                env.git(&["status", "--porcelain"])
            );
        }
        // In the sparse checkout the directories outside the cone stay untracked, so the
        // fingerprints there are not the clean tree's: the comparison is not a trivial one.
        let clean = seen[1..].iter().all(|s| s == "4294967295 0");
        assert_eq!(clean, !sparse, "sparse={sparse}: {seen:?}");
    }
}

/// Work the agent staged itself and left uncommitted (`git add`, `git mv`, `git rm`) is the
/// agent's change: ralph commits it, as `git add -A && git commit` would.
///
/// Before (found by a hostile probe): ralph counted only what it staged itself, so an agent
/// that staged everything got no commit, every iteration, and the run stalled.
#[test]
fn work_the_agent_staged_itself_is_committed() {
    let ran = run_case(&Case {
        setup: "echo a > a && echo b > b && echo c > c",
        change: "echo n > n && git add n && git mv b moved && echo 3 >> a && git add a \
                 && git rm -q c",
        ..Case::default()
    });
    assert_same_as_git(&ran);
    let subjects = ran.env.commits();
    assert!(
        subjects[0].starts_with("ralph: iteration 1"),
        "the iteration made a commit: {subjects:?}"
    );
}

/// `DD` in `git status` is a conflict (both deleted) — or an intent-to-add entry whose file is
/// gone after `git rm --cached` (`git rm --cached f; git add -N f; rm f`), which git commits as
/// the deletion of `f`.
///
/// Before (found by a hostile probe): ralph refused it as an unresolved conflict (exit 1).
#[test]
fn an_intent_to_add_entry_deleted_after_rm_cached_is_no_conflict() {
    let ran = run_case(&Case {
        setup: "echo f > f && echo g > g",
        change: "git rm -q --cached f && git add -N f && rm f && echo more >> g",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// A tracked file and a tracked symlink replaced by nested repositories with a commit: git
/// records each as a gitlink.
///
/// Before (found by a hostile probe): ralph's `git update-index` removed the path and left the
/// repository untracked (`?? sub/`).
#[test]
fn a_tracked_file_replaced_by_a_nested_repository_becomes_a_gitlink() {
    let change = format!(
        "{FIXED_COMMITS}\nrm file && git init -q -b main file && \
         (cd file && echo n > n && git add n && git commit -q -m n)\n\
         rm link && git init -q -b main link && \
         (cd link && echo l > l && git add l && git commit -q -m l)"
    );
    let ran = run_case(&Case {
        setup: "echo f > file && echo t > target && ln -s target link",
        change: &change,
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// A submodule moved to another commit is staged by `git add -A` even when the configuration
/// hides it from `git status` (`submodule.NAME.ignore=all` in `.gitmodules`).
///
/// Before (found by a hostile probe): ralph staged from a status that hid it, so its commits
/// kept the old commit.
#[test]
fn a_submodule_commit_hidden_from_status_is_staged_like_git() {
    let env = TestEnv::new();
    let src = submodule_source(
        &env,
        " && echo two > two.txt && git add two.txt && git commit -q -m two",
    );
    let setup = format!(
        "git -c protocol.file.allow=always submodule add -q '{}' sub && \
         git config -f .gitmodules submodule.sub.ignore all",
        src.display()
    );
    let ran = run_case_in(
        env,
        &Case {
            setup: &setup,
            change: "(cd sub && git checkout -q HEAD~1) && echo w > work.txt",
            ..Case::default()
        },
    );
    assert_same_as_git(&ran);
}

/// A file name that is not UTF-8, at the top and in a new directory: committed as git does.
///
/// Before (found by a hostile probe): ralph read the name lossily and handed git a pathspec
/// that matched nothing (exit 1), or left the file out.
#[test]
fn a_file_name_that_is_not_utf8_is_committed_like_git() {
    let ran = run_case(&Case {
        change: "echo u > \"$(printf 'bad\\377')\" && mkdir nd && \
                 echo v > \"$(printf 'nd/bad\\376')\" && echo ok > nd/ok",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// New directories whose files ralph lists without naming them to git (one `git ls-files
/// --others` for all of them, `stage.rs`): a directory whose own name is not UTF-8, and 600
/// directories whose names pass the bound of a command line's worth; beside them a new file at
/// the top, an ignored file in a new directory and a new directory that is all ignored, which
/// the whole list holds and the plan must not take twice or at all.
#[test]
fn new_directories_listed_in_one_go_are_committed_like_git() {
    let ran = run_case(&Case {
        change: "mkdir \"$(printf 'nd\\377')\" && echo u > \"$(printf 'nd\\377/f')\" && \
                 mkdir ok && echo v > ok/f && echo x > ok/x.log && echo top > top.txt && \
                 mkdir logs && echo l > logs/a.log && \
                 echo '*.log' >> .gitignore",
        ..Case::default()
    });
    assert_same_as_git(&ran);
    let ran = run_case(&Case {
        change: "for i in $(seq 600); do d=$(printf 'd%0240d' $i); mkdir $d && echo $i > $d/f; \
                 done && echo top > top.txt",
        ..Case::default()
    });
    assert_same_as_git(&ran);
}

/// A submodule whose files were changed but not committed: `git status` shows it modified, and
/// the ITER fingerprint must too, iteration after iteration. ralph's `-c core.fsmonitor` reaches
/// the submodule's own git (git hands `-c` on), whose paths are not the journal's: ralph's hook
/// answers it "everything". The agent is the oracle, as in the test above: each iteration
/// starts by recording git's own fingerprint of the tree the last one left.
///
/// Before (found by a hostile probe): the hook answered the submodule with the superproject's
/// paths, so the submodule's git saw no change and the fingerprints missed ` M sub`.
#[test]
fn a_submodule_with_uncommitted_changes_shows_in_every_fingerprint() {
    let env = TestEnv::new();
    env.write_task(&["never checked by the agent"], "");
    let src = submodule_source(&env, "");
    shell(
        &env,
        &env.repo,
        &format!(
            "git -c protocol.file.allow=always submodule add -q '{}' sub",
            src.display()
        ),
    );
    env.commit_all("initial");
    // ralph's own files exist already (as after `ralph init`): no ignore file appears during
    // the run, which would make every answer "everything" for a while.
    assert_exit(&env.run_fake("churn", &["--max-iterations", "1"]), 3);
    let oracle = env.home.join("oracle.log");
    let script = agent_sh(
        &env,
        "dirty-sub",
        &format!(
            "git --no-optional-locks status --porcelain | cksum >> '{o}'\n\
             if [ \"$RALPH_ITERATION\" = 1 ]; then echo dirty >> sub/one.txt; fi",
            o = oracle.display()
        ),
    );
    let out = env.run_fake(
        &script,
        &[
            "--reset",
            "--max-iterations",
            "3",
            "--stuck-threshold",
            "99",
        ],
    );
    assert!(matches!(out.status.code(), Some(3 | 4)), "{}", stderr(&out));
    let mut seen: Vec<String> = std::fs::read_to_string(&oracle)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    seen.push(env.porcelain_cksum());
    let records: Vec<String> = env
        .iter_records()
        .iter()
        .filter_map(|r| r.rsplit(" | ").next().map(str::to_string))
        .collect();
    // The first record is the set-up run's.
    let records = &records[1..];
    assert!(records.len() >= 2, "{:?}", env.iter_records());
    for (k, fingerprint) in records.iter().enumerate() {
        assert_eq!(
            fingerprint,
            &seen[k + 1],
            "ITER {} fingerprint {fingerprint}, git's {} (git's status now: {:?})",
            k + 1,
            seen[k + 1],
            env.git(&["status", "--porcelain"])
        );
    }
}
