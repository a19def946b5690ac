//! No link leads ralph out of the repository (SPEC §4): ralph runs outside any sandbox, so a
//! symbolic link the agent plants — `.ralph/progress.md` to `~/.netrc`, an epic to `~/.bashrc`,
//! the commit message file to a secret — must never make ralph read a secret for it (into the
//! repository, a commit, a prompt) or write where the agent chose. Each test plants the link,
//! shows it leads to the secret (the control), and checks that ralph neither read nor wrote
//! through it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

const SECRET: &str = "machine api.example.com login me password hunter2-secret";

/// A secret outside the repository, as `~/.netrc` (hidden inside the sandbox).
fn plant_secret(env: &TestEnv) -> PathBuf {
    let p = env.home.join(".netrc");
    std::fs::write(&p, format!("{SECRET}\n")).unwrap();
    p
}

/// Everything the repository holds and held: every commit's patch, every file of the work
/// tree (not following links), the prompts ralph saved.
fn everything_in(env: &TestEnv) -> String {
    let mut all = env.git(&["log", "-p", "--all", "--format=%H %B"]);
    let mut stack = vec![env.repo.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() && e.file_name() != ".git" {
                stack.push(p);
            } else if ft.is_file() {
                all.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
            }
        }
    }
    all
}

fn sh_agent(env: &TestEnv, name: &str, body: &str) -> String {
    let path = env.dir().join(format!("{name}.sh"));
    std::fs::write(&path, body).unwrap();
    format!("sh '{}'", path.display())
}

fn run(env: &TestEnv, agent: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--agent-cmd", agent, "--yes", "--grace", "1s"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(&args, &[], Duration::from_secs(60))
}

#[test]
fn a_progress_file_linked_to_a_secret_is_replaced_never_read() {
    for sandboxed in [false, true] {
        if sandboxed && !bwrap_works() {
            return;
        }
        let env = TestEnv::outside_tmp();
        let secret = plant_secret(&env);
        env.write_task(&["first", "second"], "");
        env.commit_all("initial");
        // Inside the repository: the sandboxed agent can write nowhere else.
        let marks = env.repo.join("marks");
        let agent = sh_agent(
            &env,
            "link",
            &format!(
                r#"if [ "$RALPH_ITERATION" = 1 ]; then
  ln -sf "$HOME/.netrc" .ralph/progress.md
  ln -sf "$HOME/.netrc" .ralph/guardrails.md
  readlink .ralph/progress.md > "{m}.link" 2>/dev/null || true
  if cat .ralph/progress.md >/dev/null 2>&1; then echo readable > "{m}.agent"; else echo hidden > "{m}.agent"; fi
  sed -i 's/- \[ \] first/- [x] first/' RALPH_TASK.md
else
  sed -i 's/- \[ \] second/- [x] second/' RALPH_TASK.md
fi
"#,
                m = marks.display()
            ),
        );
        let extra: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run(&env, &agent, extra);
        assert_exit(&out, 0);
        // The control: the agent planted a link to the secret (which the sandbox hides from it).
        let link = std::fs::read_to_string(marks.with_extension("link"))
            .unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        assert_eq!(link.trim(), secret.display().to_string());
        let seen = std::fs::read_to_string(marks.with_extension("agent")).unwrap();
        assert_eq!(seen.trim(), if sandboxed { "hidden" } else { "readable" });
        // ralph wrote its status block into a file of its own, not through the link, and never
        // read the secret into the repository or a commit.
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            format!("{SECRET}\n")
        );
        let progress = std::fs::symlink_metadata(env.repo.join(".ralph/progress.md")).unwrap();
        assert!(progress.is_file(), "progress.md is still a link");
        assert!(
            !everything_in(&env).contains("hunter2"),
            "the secret reached the repository (sandboxed: {sandboxed})"
        );
    }
}

#[test]
fn a_task_file_linked_out_of_the_repository_is_refused_not_read() {
    let env = TestEnv::new();
    let secret = plant_secret(&env);
    env.write(
        "elsewhere.md",
        "---\ntask: t\n---\n## Success Criteria\n- [ ] x\n",
    );
    env.commit_all("initial");
    std::os::unix::fs::symlink(&secret, env.repo.join("RALPH_TASK.md")).unwrap();
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("RALPH_TASK.md") && err.contains("out of the repository"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    // A link inside the repository is fine (SPEC §3.1: a symlink to a regular file).
    std::fs::remove_file(env.repo.join("RALPH_TASK.md")).unwrap();
    std::os::unix::fs::symlink("elsewhere.md", env.repo.join("RALPH_TASK.md")).unwrap();
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    // The control: the secret was there to read all along.
    assert!(
        std::fs::read_to_string(&secret)
            .unwrap()
            .contains("hunter2")
    );
}

#[test]
fn a_commit_message_file_linked_to_a_secret_is_not_committed() {
    let env = TestEnv::new();
    let secret = plant_secret(&env);
    env.write_task(&["first"], "");
    env.commit_all("initial");
    // The repository's commit-msg hook (which the agent can write) swaps the message file for a
    // link to the secret; ralph reads the message the hook left.
    let hook = env.repo.join(".git/hooks/commit-msg");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nrm -f \"$1\"\nln -s '{}' \"$1\"\n",
            secret.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.run_fake("check", &["--max-iterations", "1"]);
    // The refused message is the commit's refusal, not the secret as a commit message.
    assert!(!everything_in(&env).contains("hunter2"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hunter2"));
    assert!(stderr(&out).contains("COMMIT_EDITMSG"), "{}", stderr(&out));
    // The control: the hook really left a link to the secret.
    let msg = env.repo.join(".git/COMMIT_EDITMSG");
    assert!(std::fs::read_to_string(&msg).unwrap().contains("hunter2"));
}

/// An epic whose `[plan]` tags ralph strips, linked to a file outside the repository.
#[test]
fn plan_stripping_never_writes_through_a_link_out_of_the_repository() {
    let (env, rollup) = crate::cpm::setup();
    let outside = env.home.join("bashrc");
    let original = crate::cpm::epic("In Progress", None);
    std::fs::write(&outside, &original).unwrap();
    let m = "docs/epics/01-coverage-accounts.md";
    env.write(
        m,
        &crate::cpm::unit_matrix(
            "",
            "docs/epics/01-epic-accounts.md",
            &crate::cpm::unit_rows(1),
        ),
    );
    std::fs::create_dir_all(env.repo.join("docs/epics")).unwrap();
    std::os::unix::fs::symlink(&outside, env.repo.join("docs/epics/01-epic-accounts.md")).unwrap();
    env.commit_all("initial");
    let out = crate::cpm::run_cpm(
        &env,
        &crate::cpm::tick(&env, m),
        &["docs/epics/01-epic-accounts.md", "--rollup", &rollup],
    );
    // The control: the file outside holds tags a pre-flight would strip.
    assert!(original.contains("[plan]"));
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        original,
        "{}",
        stderr(&out)
    );
    let said = crate::cpm::output(&out);
    assert!(
        said.contains("[plan] tags not stripped") && said.contains("out of the repository"),
        "{said}"
    );
}

/// `docs/plans` (where CPM's iteration log goes) linked to a directory outside.
#[test]
fn the_cpm_log_is_never_written_through_a_linked_directory() {
    let (env, rollup) = crate::cpm::setup();
    let outside = env.home.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    env.write(
        "docs/epics/01-epic-accounts.md",
        &crate::cpm::epic("In Progress", None),
    );
    let m = "docs/epics/01-coverage-accounts.md";
    env.write(
        m,
        &crate::cpm::unit_matrix(
            "",
            "docs/epics/01-epic-accounts.md",
            &crate::cpm::unit_rows(1),
        ),
    );
    std::os::unix::fs::symlink(&outside, env.repo.join("docs/plans")).unwrap();
    env.commit_all("initial");
    let out = crate::cpm::run_cpm(
        &env,
        &crate::cpm::tick(&env, m),
        &["docs/epics/01-epic-accounts.md", "--rollup", &rollup],
    );
    let written: Vec<PathBuf> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        written.is_empty(),
        "written outside: {written:?}\n{}",
        crate::cpm::output(&out)
    );
    // The control: the link leads to a directory ralph could have written.
    assert!(is_writable_dir(&env.repo.join("docs/plans")));
}

fn is_writable_dir(p: &Path) -> bool {
    let probe = p.join(".probe");
    let ok = std::fs::write(&probe, "x").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// The agent replaces its own transcript with a link to a secret; a failing test command then
/// sends the transcript's last lines to the next prompt (the check's feedback). Run in the
/// sandbox, where the agent cannot read the secret itself: ralph, outside, must not read it for
/// it.
#[test]
fn a_transcript_linked_to_a_secret_never_feeds_the_next_prompt() {
    if !bwrap_works() {
        return;
    }
    let env = TestEnv::outside_tmp();
    let secret = plant_secret(&env);
    env.write_task(&["one"], "");
    env.commit_all("initial");
    let agent = sh_agent(
        &env,
        "relink",
        &format!(
            "if [ \"$RALPH_ITERATION\" = 1 ]; then\n\
               if cat '{secret}' >/dev/null 2>&1; then echo read > direct.txt; else echo hidden > direct.txt; fi\n\
               t=$(ls .ralph/runs/*/iter-001.log); rm -f \"$t\"; ln -s '{secret}' \"$t\"\n\
               echo work > work.txt\n\
             fi\n",
            secret = secret.display()
        ),
    );
    let out = run(
        &env,
        &agent,
        &[
            "--sandbox",
            "--max-iterations",
            "2",
            "--test-command",
            "false",
        ],
    );
    assert_exit(&out, 3);
    // The control: the secret is hidden from the agent, and the link leads to it.
    assert_eq!(env.read("direct.txt").trim(), "hidden");
    let run_dir = std::fs::read_dir(env.repo.join(".ralph/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let link = run_dir.join("iter-001.log");
    assert_eq!(std::fs::read_link(&link).unwrap(), secret);
    let prompt = std::fs::read_to_string(run_dir.join("iter-002.prompt.md")).unwrap();
    // The feedback reached the prompt, without a word of the secret.
    assert!(prompt.contains("Tests failed (exit 1): false"), "{prompt}");
    assert!(!prompt.contains("hunter2"), "{prompt}");
    assert!(!everything_in(&env).contains("hunter2"));
}
