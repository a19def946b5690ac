//! Tests of the git module: against real git in real repositories.

use super::*;
use std::io::Write;
use std::process::{Command, Stdio};
use tempfile::TempDir;

/// A `git` command isolated from the user's and system's configuration.
fn git_cmd(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_cmd(dir).args(args).output().expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `git` and return its raw stdout, whatever the exit status.
fn git_any(dir: &Path, args: &[&str]) -> std::process::Output {
    git_cmd(dir).args(args).output().expect("run git")
}

/// Run a shell script in `dir` with the same isolation as `git_cmd`.
fn sh(dir: &Path, script: &str) -> Vec<u8> {
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(script).current_dir(dir);
    for (k, v) in git_cmd(dir).get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let out = sh.output().expect("run sh");
    assert!(
        out.status.success(),
        "sh {script:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// An empty repository on branch `main` with a local identity.
fn empty_repo() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["config", "user.name", "Config Person"]);
    git(dir.path(), &["config", "user.email", "config@example.com"]);
    dir
}

/// A repository with one commit holding `a.txt`, `dir/b.txt` and `z.txt`.
fn repo_with_commit() -> TempDir {
    let dir = empty_repo();
    sh(
        dir.path(),
        "mkdir dir && printf 'alpha\\n' > a.txt && printf 'beta\\n' > dir/b.txt && \
         printf 'zeta\\n' > z.txt && git add -A && git commit -q -m initial",
    );
    dir
}

/// The repository as ralph opens it; its git CLI reads neither the user's nor the system's
/// configuration under test (`GitCli::command`), like `git_cmd`.
fn open(dir: &Path) -> Repo {
    Repo::discover(dir).expect("discover")
}

fn git_porcelain(dir: &Path) -> Vec<u8> {
    sh(dir, "git status --porcelain")
}

fn git_fingerprint(dir: &Path) -> String {
    let out = sh(dir, "git status --porcelain | cksum");
    String::from_utf8_lossy(&out).trim_end().to_string()
}

/// Our porcelain and fingerprint equal git's; returns the porcelain text.
fn assert_like_git(dir: &Path) -> String {
    let repo = open(dir);
    let ours = repo.porcelain().expect("porcelain");
    let theirs = git_porcelain(dir);
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&theirs),
        "porcelain differs from git's"
    );
    assert_eq!(ours, theirs);
    assert_eq!(
        repo.fingerprint().expect("fingerprint"),
        git_fingerprint(dir)
    );
    assert_eq!(repo.is_dirty().expect("is_dirty"), !theirs.is_empty());
    String::from_utf8_lossy(&ours).into_owned()
}

fn scenario(script: &str) -> (TempDir, String) {
    let dir = repo_with_commit();
    sh(dir.path(), script);
    let text = assert_like_git(dir.path());
    (dir, text)
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn local_identity(repo: &Repo, env: &dyn Fn(&str) -> Option<String>) -> Identity {
    Identity::resolve(&|k| repo.config_value(k), env)
}

fn head_id(dir: &Path) -> String {
    git(dir, &["rev-parse", "HEAD"]).trim().to_string()
}

// ---- cksum ----

#[test]
fn cksum_matches_posix_cksum() {
    assert_eq!(cksum(b""), "4294967295 0");
    let mut big = Vec::new();
    for i in 0..70_000u32 {
        big.push((i % 251) as u8);
    }
    for input in [&b""[..], b"abc", b"hello\n", b"?? a\n M b\n", &big] {
        let mut child = Command::new("cksum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run cksum");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write");
        let out = child.wait_with_output().expect("cksum output");
        let expected = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        assert_eq!(cksum(input), expected, "input of {} bytes", input.len());
    }
    assert_eq!(cksum(b"abc"), "1219131554 3");
}

// ---- porcelain / fingerprint ----

#[test]
fn fingerprint_clean() {
    let dir = repo_with_commit();
    let text = assert_like_git(dir.path());
    assert_eq!(text, "");
    assert_eq!(open(dir.path()).fingerprint().unwrap(), "4294967295 0");
    assert!(!open(dir.path()).is_dirty().unwrap());
}

#[test]
fn fingerprint_modified_staged_and_both() {
    let (_d, text) = scenario("echo x >> a.txt");
    assert_eq!(text, " M a.txt\n");
    let (_d, text) = scenario("echo x >> a.txt && git add a.txt");
    assert_eq!(text, "M  a.txt\n");
    let (_d, text) = scenario("echo x >> a.txt && git add a.txt && echo y >> a.txt");
    assert_eq!(text, "MM a.txt\n");
    let (_d, text) = scenario("echo new > n && git add n && echo more >> n");
    assert_eq!(text, "AM n\n");
    let (_d, text) = scenario("echo new > n && git add n && rm n");
    assert_eq!(text, "AD n\n");
}

#[test]
fn fingerprint_deleted() {
    let (_d, text) = scenario("rm a.txt");
    assert_eq!(text, " D a.txt\n");
    let (_d, text) = scenario("git rm -q z.txt");
    assert_eq!(text, "D  z.txt\n");
    let (_d, text) = scenario("git rm -q --cached a.txt");
    assert_eq!(text, "D  a.txt\n?? a.txt\n");
    let (_d, text) = scenario("git rm -q --cached a.txt && echo a.txt >> .git/info/exclude");
    assert_eq!(text, "D  a.txt\n");
}

#[test]
fn fingerprint_untracked() {
    let (_d, text) = scenario("echo u > untracked.txt");
    assert_eq!(text, "?? untracked.txt\n");
    let (_d, text) = scenario("mkdir -p new/deeper && touch new/x new/deeper/y");
    assert_eq!(text, "?? new/\n");
    let (_d, text) = scenario("mkdir -p dir/sub/deep && touch dir/sub/deep/f dir/c");
    assert_eq!(text, "?? dir/c\n?? dir/sub/\n");
    // A directory replacing a file that is still in the index is not listed...
    let (_d, text) = scenario("rm a.txt && mkdir -p a.txt/s && touch a.txt/in a.txt/s/x");
    assert_eq!(text, " D a.txt\n");
    // ...except file by file with -uall, or once the file has left the index.
    let (_d, text) = scenario(
        "git config status.showUntrackedFiles all && rm a.txt && mkdir a.txt && touch a.txt/in",
    );
    assert_eq!(text, " D a.txt\n?? a.txt/in\n");
    let (_d, text) =
        scenario("git rm -q --cached a.txt && rm a.txt && mkdir a.txt && touch a.txt/in");
    assert_eq!(text, "D  a.txt\n?? a.txt/\n");
    // Empty directories are not shown.
    let (_d, text) = scenario("mkdir -p empty/inner");
    assert_eq!(text, "");
}

#[test]
fn fingerprint_sorts_like_git() {
    let (_d, text) = scenario(
        "mkdir a && touch a/f a-b a.b a0 B && echo x >> z.txt && echo x >> a.txt && \
         git add a.txt && printf 'q' > dir/b.txt",
    );
    assert_eq!(
        text,
        "M  a.txt\n M dir/b.txt\n M z.txt\n?? B\n?? a-b\n?? a.b\n?? a/\n?? a0\n"
    );
}

#[test]
fn fingerprint_ignored() {
    let (_d, text) = scenario(
        "printf '*.log\\nbuild/\\n' > .gitignore && touch x.log && mkdir build && \
         touch build/out && mkdir only-ignored && touch only-ignored/y.log && \
         printf 'secret\\n' >> .git/info/exclude && touch secret && \
         printf 'local.txt\\n' > dir/.gitignore && touch dir/local.txt dir/kept.txt",
    );
    assert_eq!(text, "?? .gitignore\n?? dir/.gitignore\n?? dir/kept.txt\n");
}

#[test]
fn fingerprint_staged_rename() {
    let (_d, text) = scenario("git mv a.txt c.txt");
    assert_eq!(text, "R  a.txt -> c.txt\n");
    let (_d, text) = scenario("git mv z.txt dir/moved.txt && echo tail >> dir/moved.txt");
    assert_eq!(text, "RM z.txt -> dir/moved.txt\n");
    let (_d, text) = scenario("git config status.renames false && git mv a.txt c.txt");
    assert_eq!(text, "D  a.txt\nA  c.txt\n");
}

#[test]
fn fingerprint_quoting() {
    let (_d, text) = scenario("touch 'with space.txt'");
    assert_eq!(text, "?? \"with space.txt\"\n");
    let (_d, text) = scenario("git mv a.txt 'a b.txt'");
    assert_eq!(text, "R  a.txt -> \"a b.txt\"\n");
    let (_d, text) = scenario("touch 'caf\u{e9}.txt' && mkdir '\u{fc}ber' && touch '\u{fc}ber/f'");
    assert_eq!(text, "?? \"caf\\303\\251.txt\"\n?? \"\\303\\274ber/\"\n");
    let (_d, text) = scenario("touch 'tab\tx' 'q\"x' 'back\\s' \"$(printf 'bell\\a')\"");
    assert!(text.contains("\"tab\\tx\""), "{text}");
    let (_d, text) = scenario("git config core.quotePath false && touch 'caf\u{e9} x.txt'");
    assert_eq!(text, "?? \"caf\u{e9} x.txt\"\n");
}

#[test]
fn fingerprint_show_untracked_config() {
    let (_d, text) = scenario(
        "git config status.showUntrackedFiles no && mkdir n && touch n/x u && echo x >> a.txt",
    );
    assert_eq!(text, " M a.txt\n");
    let (_d, text) =
        scenario("git config status.showUntrackedFiles all && mkdir -p n/m && touch n/m/x u");
    assert_eq!(text, "?? n/m/x\n?? u\n");
}

#[test]
fn fingerprint_typechange_and_subdir_discovery() {
    let (dir, text) = scenario("rm z.txt && ln -s a.txt z.txt && touch dir/new");
    assert_eq!(text, " T z.txt\n?? dir/new\n");
    // Discovered from a subdirectory, paths stay relative to the root.
    let sub = dir.path().join("dir");
    let repo = open(&sub);
    assert_eq!(
        repo.root().canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
    assert_eq!(repo.porcelain().unwrap(), git_porcelain(&sub));
}

const NESTED_REPOS: &str = "mkdir -p nested a/n2 dir/n3 e && \
    (cd nested && git init -q && git -c user.name=n -c user.email=n@n commit -q --allow-empty -m x) && \
    git init -q a/n2 && git init -q dir/n3 && git init -q e && touch a/x.log e/f && \
    mkdir -p ign/n4 && git init -q ign/n4 && printf '*.log\\nign/\\n' > .gitignore";

#[test]
fn fingerprint_nested_repositories() {
    let (_d, text) = scenario(NESTED_REPOS);
    assert_eq!(
        text,
        "?? .gitignore\n?? a/\n?? dir/n3/\n?? e/\n?? nested/\n"
    );
    let (_d, text) = scenario(&format!(
        "{NESTED_REPOS} && git config status.showUntrackedFiles all"
    ));
    assert_eq!(
        text,
        "?? .gitignore\n?? a/n2/\n?? dir/n3/\n?? e/\n?? nested/\n"
    );
}

#[test]
fn fingerprint_intent_to_add() {
    let (_d, text) = scenario("echo n > ita && git add -N ita");
    assert_eq!(text, " A ita\n");
    let (_d, text) = scenario("echo n > ita && git add -N ita && rm ita");
    assert_eq!(text, " D ita\n");
}

#[test]
fn fingerprint_conflict_kinds() {
    let dir = diverged_repo();
    let p = dir.path();
    sh(
        p,
        "git checkout -q side && git rm -q z.txt && echo s > both && git add both && \
         git commit -q -m more && git checkout -q main && echo zz >> z.txt && \
         echo m > both && git add both && git commit -q -am more",
    );
    assert!(!git_any(p, &["merge", "-q", "side"]).status.success());
    assert_eq!(assert_like_git(p), "UU a.txt\nAA both\nUD z.txt\n");
}

#[test]
fn submodule_changes_like_git() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("main");
    sh(
        dir.path(),
        "git init -q up && cd up && echo u > u && git add u && \
         git -c user.name=n -c user.email=n@n commit -q -m u && cd .. && \
         git init -q -b main main && cd main && git config user.name c && \
         git config user.email c@c && \
         git -c protocol.file.allow=always submodule add -q ../up sm 2>/dev/null && \
         git commit -q -m sm && cd sm && echo x >> u && \
         git -c user.name=n -c user.email=n@n commit -qam x",
    );
    assert_eq!(assert_like_git(&p), " M sm\n");
    let mut repo = open(&p);
    assert_eq!(repo.stage_all(&|_, _| None).unwrap().changed, ["sm"]);
    assert!(repo.commit_all("bump sm").unwrap().is_some());
    assert_eq!(assert_like_git(&p), "");
    sh(&p, "touch sm/untracked");
    assert_eq!(assert_like_git(&p), " M sm\n");
    assert!(repo.commit_all("nothing to record").unwrap().is_none());
}

// ---- stage_all / commit_all ----

#[test]
fn commit_all_records_nested_repositories_like_git_add() {
    let dir = repo_with_commit();
    let p = dir.path();
    sh(p, NESTED_REPOS);
    sh(
        p,
        "git clone -q nested with-files && cd with-files && echo f > f && git add f && \
         git -c user.name=n -c user.email=n@n commit -q -m f",
    );
    let mut repo = open(p);
    let staged = repo.stage_all(&|_, _| None).unwrap();
    assert_eq!(staged.changed, [".gitignore", "nested", "with-files"]);
    repo.commit_all("nested").unwrap().expect("commit");
    let stage = git(p, &["ls-files", "-s", "nested"]);
    assert!(stage.starts_with("160000 "), "{stage}");
    // Repositories without a commit cannot be recorded (git add -A fails on them).
    assert_eq!(assert_like_git(p), "?? a/\n?? dir/n3/\n?? e/\n");
}

#[test]
fn commit_all_adds_modifies_deletes_and_honours_ignores() {
    let dir = repo_with_commit();
    let p = dir.path();
    sh(
        p,
        "printf '*.log\\n' > .gitignore && echo keep > new.txt && echo skip > x.log && \
         mkdir -p deep/er && echo d > deep/er/f && echo changed > a.txt && rm dir/b.txt && \
         printf 'tmp/\\n' > deep/.gitignore && mkdir deep/tmp && touch deep/tmp/t",
    );
    let mut repo = open(p);
    let staged = repo.stage_all(&|_, _| None).unwrap();
    assert_eq!(
        staged.changed,
        [
            ".gitignore",
            "a.txt",
            "deep/.gitignore",
            "deep/er/f",
            "dir/b.txt",
            "new.txt"
        ]
    );
    // Staged as git would: the new file is in the index.
    assert_eq!(repo.porcelain().unwrap(), git_porcelain(p));
    assert!(String::from_utf8_lossy(&git_porcelain(p)).contains("A  new.txt"));

    let message = "ralph: iteration 3\n\nRalph-Iteration: 3\nRalph-Task: demo";
    let outcome = repo.commit_all(message).unwrap().expect("a commit");
    assert_eq!(outcome.commit.summary, "ralph: iteration 3");
    assert_eq!(outcome.commit.id, head_id(p));
    assert_eq!(outcome.commit.short, &outcome.commit.id[..7]);
    assert_eq!(repo.head().unwrap(), Some(outcome.commit.clone()));
    assert_eq!(git_porcelain(p), b"");
    assert_eq!(repo.fingerprint().unwrap(), "4294967295 0");
    assert_eq!(
        git(p, &["log", "-1", "--format=%B"]),
        format!("{message}\n\n")
    );
    assert_eq!(git(p, &["rev-list", "--count", "HEAD"]).trim(), "2");
    let files = git(p, &["ls-files"]);
    assert!(
        !files.contains("x.log") && !files.contains("deep/tmp"),
        "{files}"
    );
    assert!(!files.contains("dir/b.txt"), "{files}");
    let ignored = git(p, &["status", "--porcelain", "--ignored"]);
    assert!(ignored.contains("!! x.log"), "{ignored}");
    assert_eq!(git(p, &["fsck", "--no-progress"]), "");
}

#[test]
fn tracked_ignored_file_is_still_committed() {
    let dir = repo_with_commit();
    let p = dir.path();
    sh(
        p,
        "printf 'a.txt\\n' > .git/info/exclude && echo more >> a.txt",
    );
    let mut repo = open(p);
    let outcome = repo.commit_all("update").unwrap();
    assert!(outcome.is_some());
    assert_eq!(git_porcelain(p), b"");
    assert_eq!(
        repo.head_file("a.txt").unwrap().as_deref(),
        Some(&b"alpha\nmore\n"[..])
    );
}

#[test]
fn nothing_to_commit_leaves_head_alone() {
    let dir = repo_with_commit();
    let p = dir.path();
    let before = head_id(p);
    let mut repo = open(p);
    assert_eq!(
        repo.stage_all(&|_, _| None).unwrap().changed,
        Vec::<String>::new()
    );
    assert!(repo.commit_all("nothing").unwrap().is_none());
    // Ignored-only and touched-but-identical changes commit nothing either.
    sh(
        p,
        "printf 'alpha\\n' > a.txt && echo '*.tmp' >> .git/info/exclude && touch x.tmp",
    );
    assert!(repo.commit_all("nothing").unwrap().is_none());
    assert_eq!(head_id(p), before);
    assert_eq!(git_porcelain(p), b"");
}

#[test]
fn first_commit_on_unborn_branch() {
    let dir = empty_repo();
    let p = dir.path();
    let mut repo = open(p);
    assert_eq!(repo.head().unwrap(), None);
    assert_eq!(repo.head_file("f").unwrap(), None);
    assert!(repo.commit_all("empty").unwrap().is_none());
    sh(
        p,
        "echo one > f && mkdir d && echo two > d/g && touch 'sp ace'",
    );
    assert_like_git(p);
    let staged = repo.stage_all(&|_, _| None).unwrap();
    assert_eq!(staged.changed, ["d/g", "f", "sp ace"]);
    let outcome = repo.commit_all("first").unwrap().expect("commit");
    assert_eq!(git(p, &["rev-list", "--count", "HEAD"]).trim(), "1");
    assert_eq!(
        git(p, &["rev-list", "--parents", "-n1", "HEAD"]).trim(),
        outcome.commit.id
    );
    assert_eq!(git(p, &["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
    assert_eq!(git_porcelain(p), b"");
    assert_eq!(
        repo.head_file("d/g").unwrap().as_deref(),
        Some(&b"two\n"[..])
    );
}

#[test]
fn identity_from_env_config_and_fallback() {
    let dir = repo_with_commit();
    let p = dir.path();
    let mut repo = open(p);

    let env = |var: &str| match var {
        "GIT_AUTHOR_NAME" => Some("Env Author".to_string()),
        "GIT_AUTHOR_EMAIL" => Some("author@env".to_string()),
        "GIT_COMMITTER_NAME" => Some("Env Committer".to_string()),
        "GIT_COMMITTER_EMAIL" => Some("committer@env".to_string()),
        _ => None,
    };
    let ident = local_identity(&repo, &env);
    sh(p, "echo 1 >> a.txt");
    let out = repo.commit_all_as("env", &ident).unwrap().unwrap();
    assert!(!out.used_fallback_identity);
    assert_eq!(
        git(p, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
        "Env Author <author@env>|Env Committer <committer@env>"
    );

    let ident = local_identity(&repo, &no_env);
    sh(p, "echo 2 >> a.txt");
    let out = repo.commit_all_as("config", &ident).unwrap().unwrap();
    assert!(!out.used_fallback_identity);
    assert_eq!(
        git(p, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
        "Config Person <config@example.com>|Config Person <config@example.com>"
    );

    git(p, &["config", "--unset", "user.name"]);
    git(p, &["config", "--unset", "user.email"]);
    let mut repo = open(p);
    let ident = local_identity(&repo, &no_env);
    assert!(ident.used_fallback);
    sh(p, "echo 3 >> a.txt");
    let out = repo.commit_all_as("fallback", &ident).unwrap().unwrap();
    assert!(out.used_fallback_identity);
    assert_eq!(
        git(p, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
        "ralph <ralph@localhost>|ralph <ralph@localhost>"
    );
}

#[test]
fn bad_identity_is_an_error_not_a_panic() {
    let dir = repo_with_commit();
    let p = dir.path();
    let mut repo = open(p);
    let env = |var: &str| (var == "GIT_AUTHOR_NAME").then(|| "Bad <name>".to_string());
    let ident = local_identity(&repo, &env);
    sh(p, "echo 1 >> a.txt");
    let before = head_id(p);
    assert!(matches!(
        repo.commit_all_as("x", &ident),
        Err(GitError::Git(_))
    ));
    assert_eq!(head_id(p), before);
    assert_like_git(p);
}

// ---- refusals ----

#[test]
fn not_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let err = Repo::discover(dir.path()).unwrap_err();
    assert!(matches!(err, GitError::NotARepo));
    assert_eq!(err.to_string(), "Git required. Run git init first.");
    assert_eq!(err.to_string(), NOT_A_REPO_MESSAGE);
}

#[test]
fn bare_repository_refused() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "--bare", "b.git"]);
    let err = Repo::discover(&dir.path().join("b.git")).unwrap_err();
    assert!(matches!(err, GitError::Bare(_)), "{err}");
}

/// Branch `side` and `main` both change `a.txt`; HEAD is on `main`.
fn diverged_repo() -> TempDir {
    let dir = repo_with_commit();
    sh(
        dir.path(),
        "git checkout -q -b side && echo side > a.txt && git commit -q -am side && \
         git checkout -q main && echo main > a.txt && git commit -q -am main",
    );
    dir
}

#[test]
fn refuses_during_merge() {
    let dir = diverged_repo();
    let p = dir.path();
    assert!(!git_any(p, &["merge", "-q", "side"]).status.success());
    assert!(p.join(".git/MERGE_HEAD").exists());
    let text = assert_like_git(p);
    assert_eq!(text, "UU a.txt\n");
    let mut repo = open(p);
    let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
    assert!(err.to_string().contains("merge"), "{err}");
    let before = head_id(p);
    assert!(matches!(
        repo.commit_all("x"),
        Err(GitError::InProgress("merge"))
    ));
    assert_eq!(head_id(p), before);

    // Conflicts left behind without MERGE_HEAD are refused too.
    std::fs::remove_file(p.join(".git/MERGE_HEAD")).unwrap();
    let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
    assert!(matches!(err, GitError::Conflicts), "{err}");
    assert!(matches!(repo.commit_all("x"), Err(GitError::Conflicts)));
    assert_eq!(head_id(p), before);
}

#[test]
fn refuses_during_rebase_and_other_operations() {
    let dir = diverged_repo();
    let p = dir.path();
    assert!(!git_any(p, &["rebase", "side"]).status.success());
    assert!(p.join(".git/rebase-merge").exists());
    let repo = open(p);
    let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
    assert!(err.to_string().contains("rebase"), "{err}");
    git(p, &["rebase", "--abort"]);
    repo.check_ready(Duration::from_millis(10)).unwrap();

    for (marker, is_dir, word) in [
        ("rebase-apply", true, "rebase"),
        ("CHERRY_PICK_HEAD", false, "cherry-pick"),
        ("REVERT_HEAD", false, "revert"),
        ("BISECT_LOG", false, "bisect"),
    ] {
        let path = p.join(".git").join(marker);
        if is_dir {
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("rebasing"), "").unwrap();
        } else {
            let head = head_id(p);
            std::fs::write(&path, format!("{head}\n")).unwrap();
        }
        let err = repo.check_ready(Duration::from_millis(10)).unwrap_err();
        assert!(err.to_string().contains(word), "{marker}: {err}");
        if is_dir {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    repo.check_ready(Duration::from_millis(10)).unwrap();
}

#[test]
fn index_lock_waited_for_then_reported() {
    let dir = repo_with_commit();
    let p = dir.path();
    let lock = p.join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let mut repo = open(p);
    let started = Instant::now();
    let err = repo.check_ready(Duration::from_millis(150)).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert!(matches!(err, GitError::IndexLocked(_)));
    assert!(err.to_string().contains("index.lock"), "{err}");
    assert!(lock.exists(), "the lock must never be deleted");

    sh(p, "echo x >> a.txt");
    repo.set_lock_wait(Duration::from_millis(100));
    let before = head_id(p);
    let err = repo.commit_all("locked").unwrap_err();
    assert!(matches!(err, GitError::IndexLocked(_)), "{err}");
    assert!(lock.exists());
    assert_eq!(head_id(p), before);

    // Released while waiting: both succeed.
    let remover = {
        let lock = lock.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            std::fs::remove_file(lock).unwrap();
        })
    };
    repo.check_ready(Duration::from_secs(3)).unwrap();
    remover.join().unwrap();
    std::fs::write(&lock, "").unwrap();
    let remover = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        std::fs::remove_file(lock).unwrap();
    });
    repo.set_lock_wait(Duration::from_secs(3));
    assert!(repo.commit_all("unlocked").unwrap().is_some());
    remover.join().unwrap();
    assert_eq!(git_porcelain(p), b"");
}

#[test]
fn head_file_reads_head_tree() {
    let dir = repo_with_commit();
    let p = dir.path();
    sh(p, "echo changed > a.txt");
    let repo = open(p);
    assert_eq!(
        repo.head_file("a.txt").unwrap().as_deref(),
        Some(&b"alpha\n"[..])
    );
    assert_eq!(
        repo.head_file("dir/b.txt").unwrap().as_deref(),
        Some(&b"beta\n"[..])
    );
    assert_eq!(
        repo.head_file("./z.txt").unwrap().as_deref(),
        Some(&b"zeta\n"[..])
    );
    assert_eq!(repo.head_file("missing").unwrap(), None);
    assert_eq!(repo.head_file("dir").unwrap(), None);
    assert_eq!(repo.head_file("dir/missing/x").unwrap(), None);
    assert_eq!(repo.head_file("").unwrap(), None);
    assert_eq!(repo.head_file("/etc/passwd").unwrap(), None);
    assert_eq!(repo.head_file("../a.txt").unwrap(), None);
}

/// The index's tree made from HEAD's and `git diff-index --cached` (no rewrite of the index) is
/// the tree `git write-tree` makes of the same index, for every shape of change: a file turned
/// into a directory and back, a directory emptied, a symlink, the executable bit, a gitlink
/// added and one removed, an intent-to-add entry, an unusual name, deep new paths, and what
/// the agent staged itself.
#[test]
fn index_tree_from_head_is_git_write_trees() {
    let dir = repo_with_commit();
    let d = dir.path();
    sh(
        d,
        "mkdir -p sub deep/er && git init -q sub && git -C sub -c user.name=s -c user.email=s@x commit -q --allow-empty -m s && \
         printf 'x\\n' > deep/er/f && printf 'x\\n' > tool && git add -A && git commit -q -m two",
    );
    let cases = [
        "rm a.txt && mkdir a.txt && printf 'now a dir\\n' > a.txt/inside",
        "rm -r a.txt && printf 'a file again\\n' > a.txt",
        "rm dir/b.txt && ln -s z.txt link && chmod +x tool",
        "rm -rf sub && mkdir -p new/sub && git init -q new/sub && git -C new/sub -c user.name=s -c user.email=s@x commit -q --allow-empty -m n",
        "printf 'ita\\n' > later && git add -N later && printf \"tab\\there\\n\" > \"$(printf 'tab\\there')\"",
        "rm -r deep && mkdir -p deep/er/est && printf 'y\\n' > deep/er/est/g && printf 'staged\\n' > z.txt && git add z.txt",
        "rm later new/sub/.git -rf; rm -rf new; printf 'y\\n' > deep/a",
    ];
    let mut repo = open(d);
    // As at the start of a run: the index's tree, made by git, is HEAD's.
    assert_eq!(
        repo.index_tree().unwrap().to_string(),
        git(d, &["rev-parse", "HEAD^{tree}"]).trim()
    );
    for (i, script) in cases.iter().enumerate() {
        sh(d, script);
        repo.stage_all(&|_, _| None).expect("stage");
        // An entry added with intent only (as a pre-commit hook might) is in no tree.
        sh(d, &format!("printf 'i\\n' > ita{i} && git add -N ita{i}"));
        let index = d.join(".git/index");
        let before = std::fs::read(&index).unwrap();
        let ours = repo.tree_from_head().expect("diff-index").map(|(t, _)| t);
        assert_eq!(
            std::fs::read(&index).unwrap(),
            before,
            "case {i}: the index was rewritten"
        );
        let git_tree = git(d, &["write-tree"]).trim().to_string();
        assert_eq!(
            ours.map(|t| t.to_string()),
            Some(git_tree.clone()),
            "case {i} ({script}): the tree made from HEAD's is not git's"
        );
        git(
            d,
            &["commit", "-q", "--allow-empty", "-m", &format!("case {i}")],
        );
        assert_eq!(git(d, &["rev-parse", "HEAD^{tree}"]).trim(), git_tree);
    }
}

/// An unmerged path, a sparse checkout, an unborn branch and a HEAD no index made go to
/// `git write-tree`; a `git replace` of HEAD changes nothing.
#[test]
fn index_tree_from_head_declines_what_it_cannot_make() {
    // A HEAD made by hand, holding an empty subtree and a mode git never writes: git's tree of
    // the index has neither, so it cannot be HEAD's with the changes.
    let odd = repo_with_commit();
    let d = odd.path();
    let mut repo = open(d);
    repo.index_tree().unwrap();
    sh(
        d,
        "e=$(git mktree </dev/null) && b=$(git rev-parse HEAD:z.txt) && \
         t=$( (git ls-tree HEAD | grep -v z.txt; printf '040000 tree %s\tempty\n100664 blob %s\tz.txt\n' $e $b) | git mktree --missing) && \
         git reset -q --soft $(git commit-tree $t -p HEAD -m odd) && printf 'more\n' >> a.txt",
    );
    repo.stage_all(&|_, _| None).unwrap();
    assert!(repo.tree_from_head().unwrap().is_none());
    assert_eq!(
        repo.index_tree().unwrap().to_string(),
        git(d, &["write-tree"]).trim()
    );
    // git diff-index would compare with the replacement; libgit2 reads the commit itself.
    let replaced = repo_with_commit();
    let d = replaced.path();
    let mut repo = open(d);
    repo.index_tree().unwrap();
    sh(
        d,
        "printf 'new\n' > a.txt && git add a.txt && \
         r=$(git commit-tree $(git write-tree) -p HEAD -m repl) && git reset -q a.txt && \
         git replace $(git rev-parse HEAD) $r && printf 'z2\n' >> z.txt",
    );
    let staged = repo.stage_all(&|_, _| None).unwrap();
    assert_eq!(staged.tree.to_string(), git(d, &["write-tree"]).trim());

    let unborn = empty_repo();
    sh(unborn.path(), "printf 'x\\n' > f && git add f");
    assert!(open(unborn.path()).tree_from_head().unwrap().is_none());

    // Each of the next two first has its HEAD's tree made of the index (as every run does at
    // its start), so the tree could be made from HEAD's but for the case itself. The control:
    // a plain change on such a HEAD is made from it.
    let plain = repo_with_commit();
    let repo = open(plain.path());
    repo.index_tree().unwrap();
    sh(
        plain.path(),
        "printf 'q\\n' > dir/b.txt && git add dir/b.txt",
    );
    assert!(repo.tree_from_head().unwrap().is_some(), "control");

    let sparse = repo_with_commit();
    sh(sparse.path(), "git sparse-checkout set dir 2>/dev/null");
    let repo = open(sparse.path());
    repo.index_tree().unwrap();
    sh(
        sparse.path(),
        "printf 'q\\n' > dir/b.txt && git add dir/b.txt",
    );
    assert!(
        repo.tree_from_head().unwrap().is_none(),
        "a sparse checkout"
    );

    let conflicted = diverged_repo();
    let repo = open(conflicted.path());
    repo.index_tree().unwrap();
    let merge = git_any(conflicted.path(), &["merge", "-q", "side"]);
    assert!(!merge.status.success(), "the merge was meant to conflict");
    assert!(repo.tree_from_head().unwrap().is_none(), "an unmerged path");
    assert!(matches!(repo.index_tree(), Err(GitError::Conflicts)));
}

/// ralph's runtime files are left out of its staging by name, whatever the ignore rules say
/// (none here): a new `.ralph/` directory, a file and a directory of ralph's in it, and a
/// tracked one modified. The rest is staged as `git add -A` stages it.
#[test]
fn keep_out_leaves_ralphs_runtime_files_unstaged() {
    let dir = repo_with_commit();
    sh(
        dir.path(),
        "mkdir -p .ralph/runs/r1 && echo log > .ralph/activity.log && echo t > .ralph/runs/r1/t.log \
         && echo x > .ralph/.tmp-0a && echo p > .ralph/progress.md && echo n > new.txt",
    );
    let mut repo = open(dir.path());
    repo.keep_out(vec![
        ".ralph/activity.log".into(),
        ".ralph/runs/".into(),
        ".ralph/.tmp-*".into(),
    ]);
    let staged = repo.stage_all(&|_, _| None).unwrap();
    assert_eq!(staged.changed, [".ralph/progress.md", "new.txt"]);
    assert!(
        staged.left_out.is_empty(),
        "said nothing: {:?}",
        staged.left_out
    );
    // Tracked (the agent force-added it) and modified: still never staged by ralph.
    sh(
        dir.path(),
        "git add -f .ralph/activity.log && git commit -qm agent && echo more >> .ralph/activity.log",
    );
    let staged = repo.stage_all(&|_, _| None).unwrap();
    assert!(
        !staged.changed.iter().any(|p| p.contains("activity")),
        "{:?}",
        staged.changed
    );
    // The control: without the names, the same tree stages them.
    let mut plain = open(dir.path());
    let staged = plain.stage_all(&|_, _| None).unwrap();
    assert!(
        staged.changed.contains(&".ralph/runs/r1/t.log".to_string()),
        "{:?}",
        staged.changed
    );
    assert!(
        staged.changed.contains(&".ralph/activity.log".to_string()),
        "{:?}",
        staged.changed
    );
}
