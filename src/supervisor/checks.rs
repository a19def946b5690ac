//! The processes an iteration runs besides the agent — the test command, the verdict command,
//! the reviewer — under the same supervision, their output appended to the transcript; and what
//! a failed check tells the next prompt.

use std::io::Write;
use std::path::Path;

use super::Loop;
use super::prepare::Prepared;
use crate::error::{Error, Result};
use crate::proc::Invocation;
use crate::proc::observe::{Echo, Watchers};
use crate::proc::relay::{self, Finished, Limits, RunError, StopCause};
use crate::signals::Interrupts;

/// How many lines of a failed check's output the next prompt gets.
const FEEDBACK_LINES: usize = 40;
/// The most bytes of feedback kept (in `state.json` and the prompt).
const FEEDBACK_BYTES: usize = 8 * 1024;

/// `sh -c CMD` for the user's own commands.
pub(crate) fn shell(cmd: &str) -> Invocation {
    Invocation {
        program: "sh".into(),
        args: vec!["-c".into(), cmd.into()],
        stdin: None,
        env: Vec::new(),
    }
}

/// The header line a check's output starts with in the transcript.
fn header(what: &str) -> String {
    format!("--- ralph: {what} ---")
}

/// One supervised process an iteration runs besides the agent.
pub(crate) struct Check {
    /// What it is, for the transcript and messages (`test command: make test`).
    pub(crate) what: String,
    pub(crate) inv: Invocation,
    pub(crate) echo: Echo,
    pub(crate) limits: Limits,
}

impl Loop {
    /// Run a check (or the reviewer) under supervision, its output appended to the iteration's
    /// transcript. `None` when an interrupt stopped it.
    pub(super) async fn run_aux(
        &mut self,
        check: Check,
        prep: &mut Prepared,
        watchers: Watchers<'_>,
    ) -> Result<Option<Finished>> {
        let env = self.ralph_env(prep.n);
        self.run_in(check, &mut prep.transcript, &env, watchers)
            .await
    }

    /// [`Loop::run_aux`] with any transcript (the pre-flight writes its own).
    pub(super) async fn run_in(
        &mut self,
        check: Check,
        transcript: &mut std::fs::File,
        env: &[(String, String)],
        watchers: Watchers<'_>,
    ) -> Result<Option<Finished>> {
        let root = self.tree.repo.root().to_path_buf();
        run_check(
            &root,
            check,
            transcript,
            env,
            &mut self.interrupts,
            watchers,
        )
        .await
    }
}

/// Run one check in `root` under supervision, its output appended to `transcript` after a
/// header naming it. `None` when an interrupt stopped it.
pub(crate) async fn run_check(
    root: &Path,
    check: Check,
    transcript: &mut std::fs::File,
    env: &[(String, String)],
    interrupts: &mut Interrupts,
    watchers: Watchers<'_>,
) -> Result<Option<Finished>> {
    let Check {
        what,
        mut inv,
        echo,
        limits,
    } = check;
    let _ = writeln!(transcript, "\n{}", header(&what));
    inv.env.extend_from_slice(env);
    let mut echo = echo;
    let watchers = watchers.with(&mut echo);
    let fin = relay::run(&inv, root, transcript, &limits, interrupts, watchers)
        .await
        .map_err(|e| run_failed(e, format_args!("the {what}")))?;
    Ok((fin.stopped != Some(StopCause::Interrupt)).then_some(fin))
}

/// The crate's error for a run that failed, naming what ran (`agent `claude``, `the test
/// command: make`): "failed to spawn agent `claude`", "failed to write the transcript", "failed
/// to wait for …", with the OS error as its cause.
pub(super) fn run_failed(e: RunError, what: impl std::fmt::Display) -> Error {
    match e {
        RunError::Spawn(e) => Error::io(format!("failed to spawn {what}"), e),
        RunError::Transcript(e) => Error::io("failed to write the transcript", e),
        RunError::Wait(e) => Error::io(format!("failed to wait for {what}"), e),
    }
}

/// One agent run outside the loop (the planning runs of `ralph init --plan` and `ralph run
/// "description"`): its prompt saved as `{dir}/{name}.prompt.md`, its output in
/// `{dir}/{name}.log` (returned), under the run's limits and its own signal handling.
/// `Ok(None)` when an interrupt stopped it.
pub(crate) async fn run_agent_once(
    root: &Path,
    dir: &Path,
    name: &str,
    prompt: &str,
    agent: &crate::agent::Agent,
    settings: &crate::config::Settings,
) -> Result<(Option<Finished>, std::path::PathBuf)> {
    crate::state::create_private_dir(dir)?;
    let prompt_file = dir.join(format!("{name}.prompt.md"));
    crate::files::write_own(&prompt_file, prompt.as_bytes())
        .map_err(|e| Error::file("write", &prompt_file, e))?;
    let transcript_path = dir.join(format!("{name}.log"));
    let mut transcript = crate::files::open_own(&transcript_path, false)
        .map_err(|e| Error::file("create", &transcript_path, e))?;
    let check = Check {
        what: format!("{name}: a {} run", agent.name),
        inv: settings.confine(agent.invocation(prompt, &prompt_file)?, true),
        echo: Echo::None,
        limits: Limits {
            timeout: settings.timeout,
            idle_timeout: settings.idle_timeout,
            grace: settings.grace,
            quiet_retry: Some(settings.max_wait),
        },
    };
    let mut interrupts =
        Interrupts::install().map_err(|e| Error::io("failed to install signal handlers", e))?;
    let fin = run_check(
        root,
        check,
        &mut transcript,
        &[],
        &mut interrupts,
        Watchers::default(),
    )
    .await?;
    Ok((fin, transcript_path))
}

/// What the next prompt is told about a failed check: a first line naming it, then the last
/// lines of its output from the transcript (bounded).
pub(crate) fn feedback(first: &str, transcript: &Path) -> String {
    let mut lines: Vec<String> =
        crate::state::tail_lines(transcript, FEEDBACK_LINES).unwrap_or_default();
    // Only the check's own output: what follows its header.
    if let Some(p) = lines.iter().rposition(|l| l.starts_with("--- ralph: ")) {
        lines.drain(..=p);
    }
    let mut text = String::from(first);
    for l in lines {
        text.push('\n');
        text.push_str(&l);
    }
    bounded(text)
}

/// What the shell said when a check's command could not run at all — exit 126 or 127, and a
/// line of its output where the shell names the command's own program (its first word, after
/// any `VAR=value`) as not found or not executable (`sh: 1: pytset: not found`). A test suite
/// that ran and met a missing program inside names that program, not the command's own, after
/// its own name (`./run_tests.sh: 3: foo: not found`): that stays a failing check. And the
/// program is not there to run (`which`: not on `PATH`, or, with a `/`, not an executable file
/// from `root`), so a check that merely prints such a line itself is a failing check too.
pub(crate) fn cannot_run(
    cmd: &str,
    exit_code: i32,
    transcript: &Path,
    root: &Path,
) -> Option<String> {
    const REFUSALS: [&str; 6] = [
        "not found",
        "command not found",
        "No such file or directory",
        "Permission denied",
        "Is a directory",
        "cannot execute",
    ];
    if !matches!(exit_code, 126 | 127) {
        return None;
    }
    let words = shell_words::split(cmd).ok()?;
    let program = words.iter().find(|w| !is_assignment(w))?;
    if runnable(program, root) {
        return None;
    }
    let said = feedback("", transcript);
    said.lines()
        .find(|l| {
            REFUSALS
                .iter()
                .any(|r| l.contains(&format!("{program}: {r}")))
        })
        .map(|l| l.trim().to_string())
}

/// `program` is an executable file: found on `PATH` as a shell looks it up, or — a path —
/// from `root`.
fn runnable(program: &str, root: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(&root.join(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

/// `NAME=value`, as a shell reads a word before the program.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// At most [`FEEDBACK_BYTES`], keeping the start (the line naming the check) and the end.
pub(crate) fn bounded(mut text: String) -> String {
    if text.len() > FEEDBACK_BYTES {
        let mut cut = FEEDBACK_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_keeps_the_checks_own_output() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("iter-001.log");
        std::fs::write(
            &t,
            "agent said things\n\n--- ralph: test command: make test ---\nrunning 3 tests\nFAIL: login\n",
        )
        .unwrap();
        let f = feedback("Tests failed (exit 1): make test", &t);
        assert_eq!(
            f,
            "Tests failed (exit 1): make test\nrunning 3 tests\nFAIL: login"
        );
        let long = bounded("x".repeat(20_000));
        assert!(long.len() <= FEEDBACK_BYTES + 3);
    }

    #[test]
    fn only_the_shells_word_about_the_commands_own_program_is_cannot_run() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("iter-001.log");
        let said = |out: &str| {
            std::fs::write(&t, format!("agent\n--- ralph: test command: x ---\n{out}")).unwrap();
        };
        let root = dir.path();
        said("sh: 1: pytset: not found\n");
        assert_eq!(
            cannot_run("pytset -q", 127, &t, root).as_deref(),
            Some("sh: 1: pytset: not found")
        );
        assert!(cannot_run("CI=1 pytset", 127, &t, root).is_some());
        assert!(cannot_run("pytset", 1, &t, root).is_none(), "not 126/127");
        said("./run.sh: 3: pytset: not found\n");
        let inside = cannot_run("./run.sh", 127, &t, root);
        assert!(inside.is_none(), "a test inside ran it");
        said("sh: 1: ./run.sh: Permission denied\n");
        assert!(cannot_run("./run.sh", 126, &t, root).is_some());
        // `sh` is there: a script saying so itself is a failing check.
        said("sh: not found\n");
        assert!(cannot_run("sh ./verdict.sh", 127, &t, root).is_none());
    }
}
