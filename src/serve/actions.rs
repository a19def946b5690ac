//! `POST /api/loops/NAME/ACTION` (none under `--read-only`: 403): `stop` a running loop as its
//! Ctrl-C would (SIGINT to the supervisor holding its lock, the lock checked again just
//! before), `resume` a halted one (`ralph resume --yes [--worktree NAME]` started detached
//! from the main work tree, its output appended to `serve-resume-NAME.log` in the state
//! directory; the reply does not wait), `merge` a completed worktree loop (`ralph merge NAME`,
//! its exit code and the end of its output in the reply), `answer` the question it waits on
//! and leave it a `hint` (`{"text": "…"}`). Each reply is `{ok, message}`; an action that does
//! not apply to the loop now is 409.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::{App, MAIN, person};
use crate::git::Repo;
use crate::loops::{self, Entry};
use crate::state::HaltReason;

/// How much of `ralph merge`'s output a reply carries (its end).
const OUTPUT_TAIL: u64 = 16 * 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Stop,
    Resume,
    Merge,
    Answer,
    Hint,
}

type Reply = (StatusCode, String);

pub(super) async fn act(
    State(app): State<App>,
    UrlPath((name, action)): UrlPath<(String, String)>,
    body: Bytes,
) -> Response {
    let action = match action.as_str() {
        "stop" => Action::Stop,
        "resume" => Action::Resume,
        "merge" => Action::Merge,
        "answer" => Action::Answer,
        "hint" => Action::Hint,
        _ => return reply((StatusCode::NOT_FOUND, format!("no action `{action}`"))),
    };
    if app.read_only {
        let why = "this web view is read-only (ralph serve --read-only)";
        return reply((StatusCode::FORBIDDEN, why.into()));
    }
    let text = if matches!(action, Action::Answer | Action::Hint) {
        match text_of(&body) {
            Ok(t) => t,
            Err(why) => return reply((StatusCode::BAD_REQUEST, why)),
        }
    } else {
        String::new()
    };
    let cwd = app.cwd.clone();
    let logs = app.state.as_ref().map(|s| s.join("."));
    let done =
        tokio::task::spawn_blocking(move || perform(&cwd, &name, action, &text, logs.as_deref()))
            .await;
    reply(done.unwrap_or_else(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the action failed".into(),
        )
    }))
}

/// `{"text": "…"}`, not blank.
fn text_of(body: &[u8]) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Body {
        text: String,
    }
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| format!("the body must be JSON {{\"text\": \"…\"}}: {e}"))?;
    if b.text.trim().is_empty() {
        return Err("the text is empty".into());
    }
    Ok(b.text)
}

fn reply((code, message): Reply) -> Response {
    let ok = code.is_success();
    (
        code,
        axum::Json(serde_json::json!({"ok": ok, "message": message})),
    )
        .into_response()
}

fn perform(cwd: &Path, name: &str, action: Action, text: &str, logs: Option<&Path>) -> Reply {
    let found = Repo::discover(cwd)
        .map_err(crate::error::Error::from)
        .and_then(|repo| Ok((loops::all(&repo)?, repo.root().to_path_buf())));
    let (entries, root) = match found {
        Ok(f) => f,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(entry) = entries.iter().find(|e| super::api::api_name(e) == name) else {
        return (StatusCode::NOT_FOUND, format!("no loop named {name}"));
    };
    let main = entries
        .iter()
        .find(|e| e.name == loops::MAIN)
        .map_or(root, |e| e.path.clone());
    match action {
        Action::Stop => stop(name, entry),
        Action::Resume => resume(name, entry, &main, logs),
        Action::Merge => merge(name, entry, &main),
        Action::Answer | Action::Hint => person_says(name, entry, action, text),
    }
}

/// SIGINT to the supervisor that holds the loop's lock now.
fn stop(name: &str, e: &Entry) -> Reply {
    let not_running = || (StatusCode::CONFLICT, format!("{name} is not running"));
    let (true, Some(pid)) = (e.status.running, e.status.pid) else {
        return not_running();
    };
    // Still held, and by the same supervisor: a pid reused since is never signalled.
    match e.status.locks.holder() {
        Some(Some(holder)) if holder != pid => return not_running(),
        None => return not_running(),
        Some(_) => {}
    }
    let pid_t = nix::unistd::Pid::from_raw(pid as i32);
    match nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGINT) {
        Ok(()) => (
            StatusCode::OK,
            format!("stopping {name}: its iteration is recorded, then its run ends (exit 130)"),
        ),
        Err(e) => (
            StatusCode::CONFLICT,
            format!("{name} could not be stopped: {e}"),
        ),
    }
}

/// A run that halted, short of completion.
fn halted(e: &Entry) -> bool {
    !e.status.running && e.status.st.is_some() && e.status.halt_reason != Some(HaltReason::Complete)
}

/// `ralph resume` started detached, in a process group of its own.
fn resume(name: &str, e: &Entry, main: &Path, logs: Option<&Path>) -> Reply {
    if !halted(e) {
        return (StatusCode::CONFLICT, format!("{name} is not a halted loop"));
    }
    let mut cmd = ralph(main);
    cmd.args(["resume", "--yes"]);
    if name != MAIN {
        cmd.args(["--worktree", name]);
    }
    let log = logs.map(|d| d.join(format!("serve-resume-{}.log", file_safe(name))));
    let opened = log.as_ref().map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
    });
    let (out, err) = match opened {
        Some(Ok(f)) => match f.try_clone() {
            Ok(g) => (Stdio::from(f), Stdio::from(g)),
            Err(_) => (Stdio::null(), Stdio::null()),
        },
        _ => (Stdio::null(), Stdio::null()),
    };
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    match cmd.spawn() {
        Ok(mut child) => {
            // Reaped when it ends; the reply does not wait.
            let _ = std::thread::Builder::new()
                .name("ralph-serve-resume".into())
                .spawn(move || child.wait());
            let said = log.map_or_else(String::new, |l| format!("; its output: {}", l.display()));
            (StatusCode::OK, format!("resuming {name}{said}"))
        }
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("ralph resume could not start: {err}"),
        ),
    }
}

/// `ralph merge NAME`, its output gathered in an unnamed file and its end returned.
fn merge(name: &str, e: &Entry, main: &Path) -> Reply {
    if name == MAIN || e.status.running || e.status.halt_reason != Some(HaltReason::Complete) {
        return (
            StatusCode::CONFLICT,
            format!("{name} is not a completed worktree loop"),
        );
    }
    let run = || -> std::io::Result<(Option<i32>, String)> {
        let mut file = tempfile::tempfile()?;
        let status = ralph(main)
            .args(["merge", name])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file.try_clone()?)
            .status()?;
        let len = file.seek(SeekFrom::End(0))?;
        file.seek(SeekFrom::Start(len.saturating_sub(OUTPUT_TAIL)))?;
        let mut buf = Vec::new();
        file.take(OUTPUT_TAIL).read_to_end(&mut buf)?;
        Ok((
            status.code(),
            String::from_utf8_lossy(&buf).trim().to_string(),
        ))
    };
    match run() {
        Ok((Some(0), out)) => (StatusCode::OK, format!("ralph merge {name}: exit 0\n{out}")),
        Ok((code, out)) => (
            StatusCode::CONFLICT,
            format!(
                "ralph merge {name}: exit {}\n{out}",
                code.map_or_else(|| "by a signal".into(), |c| c.to_string())
            ),
        ),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("ralph merge could not run: {err}"),
        ),
    }
}

fn person_says(name: &str, e: &Entry, action: Action, text: &str) -> Reply {
    let done = Repo::discover(&e.path)
        .map_err(crate::error::Error::from)
        .and_then(|repo| match action {
            Action::Answer => person::answer(&repo, text),
            _ => person::hint(&repo, text),
        });
    match (done, action) {
        (Ok(()), Action::Answer) => (StatusCode::OK, format!("answer sent to {name}")),
        (Ok(()), _) => (
            StatusCode::OK,
            format!("hint left for {name}'s next iteration"),
        ),
        (Err(err), _) => (StatusCode::CONFLICT, format!("{name}: {err}")),
    }
}

/// This ralph, run in `main` with plain output.
fn ralph(main: &Path) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ralph"));
    let mut cmd = Command::new(exe);
    cmd.arg("-C").arg(main).args(["--color", "never"]);
    cmd
}

/// A loop's name as part of a file name.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
