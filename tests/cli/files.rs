//! ralph's files and inputs (SPEC §3.1, §7, §2): torn and huge logs, a `state.json` from the
//! future or with a hostile run id, bad limits, `-C` on a file, a run from a subdirectory, the
//! quickstart with an outside target directory, and a transcript that cannot be written.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

const THREE: [&str; 3] = ["first criterion", "second criterion", "third criterion"];

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.write("README.md", "project\n");
    env.commit_all("initial");
    env
}

/// `ralph run|resume` with the fake agent, unattended, bounded.
fn fake(env: &TestEnv, command: &str, script: &str, extra: &[&str]) -> std::process::Output {
    let agent = fake_agent_cmd();
    let mut args = vec![command, "--agent-cmd", &agent, "--yes", "--grace", "1s"];
    args.extend_from_slice(extra);
    env.ralph_with_limit(
        &args,
        &[("FAKE_AGENT_SCRIPT", script)],
        Duration::from_secs(30),
    )
}

/// One iteration of a three-criterion task, halted at max iterations (exit 3).
fn one_iteration_run() -> TestEnv {
    let env = setup(&THREE);
    assert_exit(&fake(&env, "run", "check", &["--max-iterations", "1"]), 3);
    env
}

fn said(out: &std::process::Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

fn append_raw(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

// --- Case 15: torn last lines ---

/// Promise (SPEC §7): a record is never glued to a torn last line; a log that does not end in
/// a newline gets one first. The torn lines are what a SIGKILL mid-write could leave. Bug
/// caught: resume appended `ITER 2 | …` right after the torn bytes, on the same line.
#[test]
fn a_record_is_never_glued_to_a_torn_last_line() {
    let env = one_iteration_run();
    append_raw(
        &env.repo.join(".ralph/iterations.log"),
        b"ITER 9 | 1/3 criteria | ex",
    );
    append_raw(
        &env.repo.join(".ralph/activity.log"),
        b"[2026-01-01T00:00:00+00:00] Iteration 9: torn",
    );
    let out = fake(&env, "resume", "check", &["--max-iterations", "2"]);
    assert_exit(&out, 3);
    let recs = env.iter_records();
    assert!(
        recs.iter().any(|r| r.starts_with("ITER 2 | ")),
        "ITER 2 starts its own line: {recs:?}"
    );
    assert!(
        recs.iter().any(|r| r == "ITER 9 | 1/3 criteria | ex"),
        "the torn bytes stay as they were, on their own line: {recs:?}"
    );
    let activity = env.activity();
    assert!(
        activity
            .lines()
            .any(|l| l == "[2026-01-01T00:00:00+00:00] Iteration 9: torn"),
        "the activity log's next line is not glued to the torn one:\n{activity}"
    );
}

// --- Case 16: a huge last line ---

/// Run `ralph status [--json]` under a 1 GiB address-space limit with its output going to
/// files (never into this process's memory); returns (exit code, stdout size, the first
/// 64 KiB of stdout, stderr).
fn status_to_files(env: &TestEnv, json: bool) -> (Option<i32>, u64, String, String) {
    let out_path = env.home.join(format!("status-{json}.out"));
    let err_path = env.home.join(format!("status-{json}.err"));
    let mut cmd = env.command("sh");
    cmd.arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ralph"))
        .arg("status")
        .args(json.then_some("--json"))
        .current_dir(&env.repo)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut child = cmd.spawn().unwrap();
    let ended = wait_until(Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
        panic!("ralph status did not answer within 10s");
    }
    let code = child.wait().unwrap().code();
    let size = std::fs::metadata(&out_path).unwrap().len();
    let mut head = vec![0u8; 64 * 1024];
    let n = {
        use std::io::Read;
        std::fs::File::open(&out_path)
            .unwrap()
            .read(&mut head)
            .unwrap()
    };
    head.truncate(n);
    let mut err = std::fs::read(&err_path).unwrap();
    err.truncate(64 * 1024);
    (
        code,
        size,
        String::from_utf8_lossy(&head).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// Promise (SPEC §2.4, §7): reading the tail of a log is bounded in time and memory whatever its
/// last line holds: a 200 MiB last line (no newline; a sparse file, so it costs no disk) leaves
/// `ralph status` answering at once with a bounded output (< 1 MiB), text and JSON. Bug caught:
/// the tail window grew until it held the whole line, which status then printed whole (200 MiB
/// of text; the JSON ran out of memory).
#[test]
fn status_stays_bounded_with_a_200_mib_last_line() {
    let env = one_iteration_run();
    let log = env.repo.join(".ralph/iterations.log");
    append_raw(&log, b"ITER 2 | ");
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len + 200 * 1024 * 1024).unwrap();
    drop(f);
    for json in [false, true] {
        let start = Instant::now();
        let (code, size, head, err) = status_to_files(&env, json);
        assert_eq!(code, Some(0), "status (json: {json}) failed:\n{err}");
        assert!(
            size < 1024 * 1024,
            "status (json: {json}) printed {size} bytes; the first ones:\n{}",
            &head[..head.len().min(2000)]
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "status (json: {json}) took {:?}",
            start.elapsed()
        );
        if json {
            let v: serde_json::Value = serde_json::from_str(&head)
                .unwrap_or_else(|e| panic!("not one JSON object: {e}\n{head}"));
            assert_eq!(v["halt_reason"], "max_iterations");
        }
    }
}

// --- Case 17: state.json from a newer ralph ---

/// A halted run's state.json rewritten as a newer ralph would write it: `schema_version` 99, a
/// field this ralph does not know, and `halt_reason`.
fn future_state(env: &TestEnv, halt_reason: &str) -> Vec<u8> {
    let path = env.repo.join(".ralph/state.json");
    let mut v: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    v["schema_version"] = 99.into();
    v["halt_reason"] = halt_reason.into();
    v["worktree_fleet"] = serde_json::json!({"leader": "ralph/a", "members": 3});
    let bytes = serde_json::to_vec_pretty(&v).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    bytes
}

#[track_caller]
fn refuses_naming_state_json(out: &std::process::Output) {
    assert_exit(out, 1);
    assert!(said(out).contains("state.json"), "{}", said(out));
}

/// Promise (SPEC §7): a `state.json` newer than this ralph knows is refused by `status`,
/// `resume` and `run`, with an error naming the file, and never rewritten (no field is lost).
/// Bug caught: the unknown version was read as if it were 1 (status answered, exit 0; resume
/// rewrote the file as version 1, dropping the unknown field).
#[test]
fn a_newer_state_json_is_refused_and_left_byte_identical() {
    let env = one_iteration_run();
    let path = env.repo.join(".ralph/state.json");
    let bytes = future_state(&env, "max_iterations");

    let out = env.ralph(&["status"]);
    refuses_naming_state_json(&out);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "status left it alone");

    let out = env.ralph(&["status", "--json"]);
    assert_ne!(out.status.code(), Some(0), "{}", said(&out));
    assert!(said(&out).contains("state.json"), "{}", said(&out));

    let out = fake(&env, "resume", "check", &["--max-iterations", "5"]);
    refuses_naming_state_json(&out);
    assert!(!env.agent_ran(2), "nothing spawned");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "resume never rewrote it"
    );
}

/// The same for `ralph run` over a newer ralph's *completed* run (which `run` would otherwise
/// replace with a fresh state). Bug caught: a new run started and overwrote the file.
#[test]
fn run_refuses_a_newer_state_json_and_leaves_it_byte_identical() {
    let env = one_iteration_run();
    let path = env.repo.join(".ralph/state.json");
    let bytes = future_state(&env, "complete");
    std::fs::remove_dir_all(&env.log).unwrap();
    let out = fake(&env, "run", "check", &[]);
    refuses_naming_state_json(&out);
    assert!(!env.agent_ran(1), "nothing spawned");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "run never rewrote it");
}

// --- Case 18: a hostile run id ---

/// Promise (SPEC §7): `run_id` must be a plain name (letters, digits, `-`, `_`): `../../x` is
/// refused with an error and nothing is written outside `.ralph/`. Bug caught: resume used it
/// as a path, writing the prompt and transcript to `<repo>/x/` (out of `.ralph/runs/`).
#[test]
fn a_run_id_with_a_path_in_it_is_refused() {
    let env = one_iteration_run();
    let path = env.repo.join(".ralph/state.json");
    let mut v: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    v["run_id"] = "../../x".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let out = fake(&env, "resume", "check", &["--max-iterations", "3"]);
    assert!(
        !env.repo.join("x").exists(),
        "ralph wrote outside .ralph/: {:?}",
        std::fs::read_dir(env.repo.join("x"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default()
    );
    assert_exit(&out, 1);
    assert!(
        said(&out).contains("state.json") || said(&out).contains("run_id"),
        "{}",
        said(&out)
    );
    assert!(!env.agent_ran(2), "nothing spawned");
    assert_eq!(
        env.git(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "no file appeared outside .ralph/"
    );
}

// --- Case 19: max_iterations: 0 ---

/// Promise (SPEC §3.1 validation): `max_iterations: 0` cannot run anything: an error naming the
/// file and the line, exit 1, nothing spawned. Bug caught: accepted.
#[test]
fn max_iterations_zero_in_the_frontmatter_is_an_error_naming_file_and_line() {
    let env = TestEnv::new();
    env.write_task(&["a"], "max_iterations: 0\n");
    env.commit_all("initial");
    let out = fake(&env, "run", "check", &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("RALPH_TASK.md:3")
            || (err.contains("RALPH_TASK.md") && err.contains("line 3")),
        "the error names the file and line 3:\n{err}"
    );
    assert!(err.contains("max_iterations"), "{err}");
    assert!(!env.agent_ran(1));
}

// --- Case 20: -C on a file ---

/// Promise (SPEC §2): `-C DIR` works in a directory; a regular file is an error naming it.
/// Bug caught: `ralph -C notes.txt status` was accepted (it found the repository around it).
#[test]
fn dash_c_on_a_regular_file_is_an_error() {
    let env = setup(&["a"]);
    env.write("notes.txt", "not a directory\n");
    let out = env.ralph(&["-C", "notes.txt", "status"]);
    assert!(
        matches!(out.status.code(), Some(1) | Some(2)),
        "refused (exit 1 or 2), got {:?}\n{}",
        out.status,
        said(&out)
    );
    assert!(stderr(&out).contains("notes.txt"), "{}", stderr(&out));
}

// --- Case 21: run from a subdirectory ---

/// Promise: like git (and `ralph status`), `ralph run` from a subdirectory works on the
/// repository root's `RALPH_TASK.md`. Bug caught: it looked for `RALPH_TASK.md` in the
/// subdirectory ("no RALPH_TASK.md in `…/src`", exit 1).
#[test]
fn run_from_a_subdirectory_finds_the_root_task_file() {
    let env = setup(&["a1", "a2"]);
    env.write("src/lib.rs", "// code\n");
    env.commit_all("code");
    let agent = fake_agent_cmd();
    let mut cmd = env.ralph_cmd();
    cmd.current_dir(env.repo.join("src"))
        .args(["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"])
        .env("FAKE_AGENT_SCRIPT", "check");
    let out = run_with_limit(cmd, Duration::from_secs(30));
    assert_exit(&out, 0);
    assert!(env.read("RALPH_TASK.md").contains("- [x] a2"));
    assert!(!env.repo.join("src/RALPH_TASK.md").exists());
    assert!(
        !env.repo.join("src/.ralph").exists(),
        ".ralph/ is at the root"
    );
}

// --- Case 22: the quickstart with CARGO_TARGET_DIR outside the repository ---

/// The real cargo on PATH.
fn real_cargo() -> std::path::PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("cargo"))
        .find(|p| p.is_file())
        .expect("cargo on PATH")
}

/// Promise (README "Set up for development"): `bash examples/quickstart.sh` works on a fresh machine, also with
/// `CARGO_TARGET_DIR` set (a shared target directory, outside the repository). Kept cheap: a
/// stand-in `cargo` answers `build` by placing a wrapper of the already-built ralph where cargo
/// would put it (honouring `CARGO_TARGET_DIR`, `--target-dir`, the profile, and printing the
/// artifact for `--message-format json`); other subcommands (`metadata`…) go to the real
/// cargo. The wrapper records that it ran. Bug caught: the script ran
/// `$root/target/release/ralph` whatever `CARGO_TARGET_DIR` said (absent here: exit 127).
#[test]
fn the_quickstart_honours_an_outside_cargo_target_dir() {
    let env = TestEnv::new();
    let bin = env.home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = env.home.join("ralph-runs");
    let target = env.home.join("shared-target");
    let tmp = env.home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let cargo = format!(
        r#"#!/bin/sh
if [ "$1" != build ]; then exec '{real}' "$@"; fi
dir="$CARGO_TARGET_DIR"; profile=debug; manifest=Cargo.toml; json=; prev=
for a in "$@"; do
  case "$prev" in --target-dir) dir=$a;; --manifest-path) manifest=$a;; --profile) profile=$a;; esac
  case "$a" in
    --release|-r) profile=release;;
    --target-dir=*) dir=${{a#--target-dir=}};;
    --manifest-path=*) manifest=${{a#--manifest-path=}};;
    --profile=*) profile=${{a#--profile=}};;
    --message-format*) json=1;;
  esac
  prev=$a
done
[ -n "$dir" ] || dir=$(dirname "$manifest")/target
[ "$profile" = dev ] && profile=debug
mkdir -p "$dir/$profile"
exe="$dir/$profile/ralph"
printf '#!/bin/sh\necho "$0 $*" >> %s\nexec %s "$@"\n' '{marker}' '{ralph}' > "$exe"
chmod +x "$exe"
[ -z "$json" ] || printf '{{"reason":"compiler-artifact","target":{{"name":"ralph","kind":["bin"]}},"executable":"%s"}}\n{{"reason":"build-finished","success":true}}\n' "$exe"
exit 0
"#,
        real = real_cargo().display(),
        marker = marker.display(),
        ralph = env!("CARGO_BIN_EXE_ralph"),
    );
    std::fs::write(bin.join("cargo"), cargo).unwrap();
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.sh");
    let mut cmd = env.command("bash");
    cmd.arg(&script)
        .current_dir(&env.home)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("CARGO_TARGET_DIR", &target)
        .env("TMPDIR", &tmp);
    // The test's HOME is isolated: the real cargo (a rustup proxy) still finds its toolchain.
    for (key, default) in [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")] {
        let value = std::env::var_os(key).or_else(|| {
            std::env::var_os("HOME").map(|h| Path::new(&h).join(default).into_os_string())
        });
        if let Some(v) = value {
            cmd.env(key, v);
        }
    }
    if let Some(t) = std::env::var_os("RUSTUP_TOOLCHAIN") {
        cmd.env("RUSTUP_TOOLCHAIN", t);
    }
    let out = run_with_limit(cmd, Duration::from_secs(60));
    assert_exit(&out, 0);
    let runs = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        runs.lines().any(|l| l.contains(" run ")),
        "the quickstart ran the ralph built into CARGO_TARGET_DIR ({}): {runs:?}\n{}",
        target.display(),
        said(&out)
    );
    assert!(
        stdout(&out).contains("ralph: iteration 3"),
        "three iterations committed:\n{}",
        stdout(&out)
    );
}

// --- Case 23: a transcript that cannot be written ---

/// Promise (SPEC §9 errors name the cause): when the transcript cannot be written (a full disk,
/// a quota), the error says so — it names the transcript (or the write) and the system's reason
/// — and does not claim the agent failed to spawn. The transcript of iteration 2 is made as
/// long as the file-size limit ralph runs under, so no write to it can succeed ("File too
/// large", as "No space left on device" on a full disk; a symlink to `/dev/full` no longer
/// does it: ralph never writes through a link at its own files). Bug caught: "failed to spawn
/// agent `…`".
#[test]
fn a_full_disk_for_the_transcript_is_not_a_spawn_failure() {
    let env = one_iteration_run();
    let v: serde_json::Value = serde_json::from_str(&env.read(".ralph/state.json")).unwrap();
    let run_id = v["run_id"].as_str().unwrap();
    let transcript = env
        .repo
        .join(".ralph/runs")
        .join(run_id)
        .join("iter-002.log");
    const LIMIT: u64 = 4 << 20;
    std::fs::write(&transcript, vec![b'.'; LIMIT as usize]).unwrap();
    let agent = fake_agent_cmd();
    let out = env.ralph_with_fsize_limit(
        &[
            "resume",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
            "--max-iterations",
            "2",
        ],
        &[("FAKE_AGENT_SCRIPT", "check")],
        LIMIT,
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(!err.contains("failed to spawn"), "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(
        err.contains("iter-002.log") || err.contains("transcript") || err.contains("write"),
        "{err}"
    );
}
