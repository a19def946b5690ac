//! The files ralph reads and writes, against an agent that plants what it likes where ralph looks
//! (issue 29, SPEC §4, §7, §11): a `.ralph/config.toml` that appears as a link during the run, a
//! user configuration linked into the repository, `progress.txt` linked to `prd.json`, the
//! temporary names of ralph's atomic writes made first, and a corrupt record of ralph's own
//! before `run --reset`. Each test shows the attack really does what it says (the control),
//! then that ralph neither read nor wrote through it, nor stopped for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

const SECRET: &str = "hunter2-secret";

/// Two criteria, committed.
fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_task(&["one", "two"], "");
    env.commit_all("initial");
    env
}

fn said(out: &std::process::Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

fn resume(env: &TestEnv, extra_env: &[(&str, &str)]) -> std::process::Output {
    let agent = fake_agent_cmd();
    let mut vars = vec![("FAKE_AGENT_SCRIPT", "check")];
    vars.extend_from_slice(extra_env);
    env.ralph_with_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--grace",
            "1s",
            "--max-iterations",
            "2",
        ],
        &vars,
        Duration::from_secs(30),
    )
}

/// A secret outside the repository, written as a configuration would be: a parse of it shows
/// its key in the error.
fn plant_secret(env: &TestEnv) -> PathBuf {
    let p = env.home.join("secret.toml");
    std::fs::write(&p, format!("{SECRET} = 1\n")).unwrap();
    p
}

// --- Break 1: a config layer planted as a link during the run ---

/// Promise (SPEC §4, issue 29): every config layer the agent could have written is opened
/// beneath the repository root without following a link, whenever it appears. Bug caught: a
/// `.ralph/config.toml` absent at the start and linked by the agent to a secret was parsed on
/// `ralph resume` (its key printed), and one linked to `/dev/zero` was read until memory ran
/// out.
#[test]
fn a_config_planted_as_a_link_during_the_run_is_never_read_on_resume() {
    let secret_env = setup();
    let secret = plant_secret(&secret_env);
    let mut broken = Vec::new();
    for (env, target) in [
        (secret_env, secret.display().to_string()),
        (setup(), "/dev/zero".to_string()),
        (setup(), "../RALPH_TASK.md".to_string()),
    ] {
        let plant = agent_sh(
            &env,
            "plant",
            &format!("ln -s '{target}' .ralph/config.toml"),
        );
        let out = env.run_fake(&format!("check+{plant}"), &["--max-iterations", "1"]);
        assert_exit(&out, 3);
        let planted = env.repo.join(".ralph/config.toml");
        assert!(
            std::fs::symlink_metadata(&planted)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the agent planted the link"
        );
        let out = ralph_with_memory_limit(
            &env,
            1024 * 1024,
            &[
                "resume",
                "--agent-cmd",
                &fake_agent_cmd(),
                "--grace",
                "1s",
                "--max-iterations",
                "2",
            ],
            &[("FAKE_AGENT_SCRIPT", "check")],
            Duration::from_secs(30),
        );
        let text = said(&out);
        if out.status.code() != Some(1)
            || text.contains(SECRET)
            || !(text.contains(".ralph/config.toml") && text.contains("symbolic link"))
        {
            // Every planted target is tried: each one's failure is said.
            broken.push(format!(
                "{target}: exit {:?}, not a refusal naming the link:\n{text}",
                out.status.code()
            ));
            continue;
        }
        // Once the link is gone, the resume goes on.
        std::fs::remove_file(&planted).unwrap();
        assert_exit(&resume(&env, &[]), 0);
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The control beside it: a regular `.ralph/config.toml` that appears during the run is read
/// on resume (what it sets counts), and a FIFO there is refused at once, named.
#[test]
fn a_config_that_appears_as_a_file_is_read_and_a_fifo_refused() {
    let env = setup();
    let plant = agent_sh(
        &env,
        "plant",
        "printf 'max_wait = \"1x\"\\n' > .ralph/config.toml",
    );
    let out = env.run_fake(&format!("check+{plant}"), &["--max-iterations", "1"]);
    assert_exit(&out, 3);
    let out = resume(&env, &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(".ralph/config.toml") && stderr(&out).contains("max_wait"),
        "{}",
        stderr(&out)
    );
    let planted = env.repo.join(".ralph/config.toml");
    std::fs::remove_file(&planted).unwrap();
    nix_mkfifo(&planted);
    let out = resume(&env, &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(".ralph/config.toml") && stderr(&out).contains("FIFO"),
        "{}",
        stderr(&out)
    );
}

fn nix_mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

// --- Break 2: a user configuration that resolves into the agent's reach ---

/// Promise (issue 29): a user configuration that resolves into the repository — where the
/// agent writes — is refused at the start, naming it, before any agent runs. Bug caught:
/// `~/.config/ralph` linked into the repository let the agent add a hook that ran outside the
/// sandbox.
#[test]
fn a_user_config_linked_into_the_repository_is_refused_at_start() {
    for linked in ["dir", "file"] {
        let env = setup();
        env.write("dotfiles/ralph/config.toml", "max_iterations = 1\n");
        env.commit_all("dotfiles");
        let config = env.home.join(".config");
        std::fs::create_dir_all(&config).unwrap();
        if linked == "dir" {
            std::os::unix::fs::symlink(env.repo.join("dotfiles/ralph"), config.join("ralph"))
                .unwrap();
        } else {
            std::fs::create_dir_all(config.join("ralph")).unwrap();
            std::os::unix::fs::symlink(
                env.repo.join("dotfiles/ralph/config.toml"),
                config.join("ralph/config.toml"),
            )
            .unwrap();
        }
        let out = env.run_fake("check", &[]);
        assert_exit(&out, 1);
        assert!(!env.agent_ran(1), "{linked}: the agent ran");
        let err = stderr(&out);
        assert!(
            err.contains(".config/ralph/config.toml") && err.contains("the repository"),
            "{linked}: {err}"
        );
    }
}

/// The same under `--sandbox` for a place the sandbox lets the agent write: a user whose
/// configuration lives in a directory shared with the agent (`sandbox_writable`). The control
/// beside it: the same configuration elsewhere is obeyed.
#[test]
fn a_user_config_in_what_the_sandbox_lets_the_agent_write_is_refused() {
    if !bwrap_works() {
        return;
    }
    for shared in [true, false] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["one", "two"], "");
        env.commit_all("initial");
        let dir = env.home.join("shared/ralph");
        std::fs::create_dir_all(&dir).unwrap();
        let writable = if shared { "~/shared" } else { "~/other" };
        std::fs::create_dir_all(env.home.join("other")).unwrap();
        std::fs::write(
            dir.join("config.toml"),
            format!("max_iterations = 1\nsandbox_writable = [\"{writable}\"]\n"),
        )
        .unwrap();
        std::fs::create_dir_all(env.home.join(".config")).unwrap();
        std::os::unix::fs::symlink(&dir, env.home.join(".config/ralph")).unwrap();
        let out = env.run_fake("check", &["--sandbox"]);
        if shared {
            assert_exit(&out, 1);
            assert!(env.iter_records().is_empty(), "no iteration ran");
            assert!(
                stderr(&out).contains("what the sandbox lets the agent write"),
                "{}",
                stderr(&out)
            );
        } else {
            // The agent's log is out of the sandbox's reach: the ITER records tell.
            assert_exit(&out, 3);
            assert_eq!(env.iter_records().len(), 1);
        }
    }
}

/// The control: a user configuration linked to a place outside the repository (a dotfile
/// manager's) is read as always.
#[test]
fn a_user_config_linked_outside_the_repository_is_read() {
    let env = setup();
    let dotfiles = env.home.join("dotfiles/ralph");
    std::fs::create_dir_all(&dotfiles).unwrap();
    std::fs::write(dotfiles.join("config.toml"), "max_iterations = 1\n").unwrap();
    std::fs::create_dir_all(env.home.join(".config")).unwrap();
    std::os::unix::fs::symlink(&dotfiles, env.home.join(".config/ralph")).unwrap();
    let out = env.run_fake("check", &[]);
    // max_iterations = 1 came from it: one iteration, then the cap.
    assert_exit(&out, 3);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
}

// --- Break 3: progress.txt linked to prd.json ---

const PRD: &str = r#"{
  "project": "P",
  "userStories": [
    { "id": "US-001", "title": "One", "priority": 1, "passes": false },
    { "id": "US-002", "title": "Two", "priority": 2, "passes": false }
  ]
}
"#;

/// Promise (SPEC §4, §14): ralph writes `progress.txt` beneath the root without following a
/// link — a link there is replaced by a regular file, never written through. Bug caught: the
/// agent linked `progress.txt` to `prd.json`, and ralph's line went into `prd.json` (corrupted,
/// and committed).
#[test]
fn progress_txt_linked_to_prd_json_is_replaced_never_written_through() {
    let env = TestEnv::new();
    env.write("prd.json", PRD);
    env.commit_all("initial");
    let plant = agent_sh(
        &env,
        "plant",
        "rm -f progress.txt\nln -s prd.json progress.txt",
    );
    let out = env.run_fake(
        &format!("story-pass+{plant}"),
        &["--test-command", "true", "--max-iterations", "1"],
    );
    assert_exit(&out, 3);
    let prd = env.read("prd.json");
    let parsed: serde_json::Value =
        serde_json::from_str(&prd).unwrap_or_else(|e| panic!("prd.json corrupted ({e}):\n{prd}"));
    assert_eq!(parsed["userStories"][0]["passes"], true, "{prd}");
    let committed = env.git(&["show", "HEAD:prd.json"]);
    assert!(!committed.contains("story US-001"), "{committed}");
    let meta = std::fs::symlink_metadata(env.repo.join("progress.txt")).unwrap();
    assert!(meta.is_file(), "the link was replaced by a regular file");
    assert!(env.read("progress.txt").contains("story US-001: passed"));
}

// --- Break 4: predictable temporary names ---

/// Promise (issue 29): the temporary files of ralph's atomic writes have names nobody can
/// predict, created exclusively. Bug caught: they were `.tmp-PID-N` beside the file; an agent
/// that knows ralph's pid (`state.json` names it) made those names first (directories), and
/// every write of `state.json` after the iteration failed: the run ended in an error.
#[test]
fn temporary_names_made_first_by_the_agent_never_stop_a_write() {
    let env = setup();
    let plant = agent_sh(
        &env,
        "plant",
        "pid=$(sed -n 's/.*\"pid\": *\\([0-9]*\\).*/\\1/p' .ralph/state.json)\n\
         test -n \"$pid\"\n\
         for i in $(seq 0 200); do mkdir -p .ralph/.tmp-$pid-$i .tmp-$pid-$i; done\n\
         echo planted > planted.txt",
    );
    let out = env.run_fake(&format!("check+{plant}"), &["--max-iterations", "2"]);
    // The control: the agent did plant its names.
    assert!(env.repo.join("planted.txt").exists(), "{}", said(&out));
    assert_exit(&out, 0);
    assert_eq!(env.iter_records().len(), 2, "{}", said(&out));
}

// --- Break 5: a corrupt record of ralph's own never blocks `run --reset` ---

/// ralph's own record of this work tree, in its state directory.
fn own_record(env: &TestEnv) -> PathBuf {
    let base = env.home.join(".local/state/ralph");
    let mut stack = vec![base];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "state.json") {
                return p;
            }
        }
    }
    panic!("no record of ralph's own")
}

/// Promise (issue 29): a corrupt record of ralph's own — its record in the state directory,
/// `.ralph/state.json` beside it, a run id in it that is not a plain name — never blocks
/// `ralph run --reset`: the reset starts over with a warning naming the file. Bug caught:
/// `run --reset` refused ("unreadable state", with the hint to run `ralph run --reset`).
#[test]
fn a_corrupt_record_of_ralphs_own_never_blocks_a_reset() {
    type Corrupt = fn(&TestEnv) -> PathBuf;
    let cases: [(&str, Corrupt); 3] = [
        ("garbage", |env| {
            let p = own_record(env);
            std::fs::write(&p, "{ not json").unwrap();
            p
        }),
        ("both garbage", |env| {
            let p = own_record(env);
            std::fs::write(&p, "{ not json").unwrap();
            std::fs::write(env.repo.join(".ralph/state.json"), "\u{0}\u{1}").unwrap();
            p
        }),
        ("a run id that is not plain", |env| {
            let p = own_record(env);
            let text = std::fs::read_to_string(&p).unwrap();
            let re = regex::Regex::new(r#""run_id": "[^"]*""#).unwrap();
            std::fs::write(&p, re.replace(&text, r#""run_id": "../../x""#).as_ref()).unwrap();
            p
        }),
    ];
    for (what, corrupt) in cases {
        let env = setup();
        assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
        let bad = corrupt(&env);
        // The control: ralph cannot read the record (status refuses, naming it).
        let out = env.ralph(&["status"]);
        assert_exit(&out, 1);
        assert!(stderr(&out).contains(&bad.display().to_string()), "{what}");
        let out = env.run_fake("check", &["--reset"]);
        assert_exit(&out, 0);
        assert!(
            stderr(&out).contains(&bad.display().to_string()) && stderr(&out).contains("--reset"),
            "{what}: the warning names the file:\n{}",
            stderr(&out)
        );
        assert_eq!(status_json(&env)["halt_reason"], "complete", "{what}");
    }
}

/// Beside it: a record from a newer ralph is not corrupt — `--reset` leaves it alone, refused
/// as SPEC §7 says; and an ITER log made garbage, a FIFO, a directory or a link to `/dev/zero`
/// never stopped a reset (a guard: it did not on the code before either).
#[test]
fn a_newer_record_is_still_refused_and_an_odd_iter_log_never_stops_a_reset() {
    let env = setup();
    assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
    let p = own_record(&env);
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        text.replacen("\"schema_version\": 2", "\"schema_version\": 99", 1),
    )
    .unwrap();
    let out = env.run_fake("check", &["--reset"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("newer ralph"), "{}", stderr(&out));
    assert!(std::fs::read_to_string(&p).unwrap().contains("99"));
    for v in ["garbage", "fifo", "dir", "zero"] {
        let env = setup();
        assert_exit(&env.run_fake("check", &["--max-iterations", "1"]), 3);
        let log = env.repo.join(".ralph/iterations.log");
        std::fs::remove_file(&log).unwrap();
        match v {
            "garbage" => std::fs::write(&log, b"ITER \xff\xfe\n").unwrap(),
            "fifo" => nix_mkfifo(&log),
            "dir" => std::fs::create_dir(&log).unwrap(),
            _ => std::os::unix::fs::symlink("/dev/zero", &log).unwrap(),
        }
        let out = env.run_fake("check", &["--reset"]);
        assert_exit(&out, 0);
    }
}
