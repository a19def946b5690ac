//! The CPM source (SPEC §3.4): the skill's prompt over the epics, the coverage roll-up as the
//! verdict (its records counted by ralph, its stderr kept for when it cannot run), and spec
//! mode's phase rule, read from the roll-up's exit code only.

use std::path::{Path, PathBuf};

use super::{Judged, PromptCtx, stuck_paragraph};
use crate::error::Result;
use crate::proc::Invocation;
use crate::supervisor::decide::Halt;
use crate::task::cpm::{self, Coverage, Phase, Targets};
use crate::task::verdict::{Verdict, VerdictClass};

/// The most roll-up stdout read back (its records); more is cut.
const STDOUT_MAX: u64 = 16 * 1024 * 1024;
/// The last lines of the roll-up's stderr kept to explain a failure.
const STDERR_LINES: usize = 12;

/// Runs the roll-up with its stdout and stderr captured to files (`$RALPH_ROLLUP_STDOUT`,
/// `$RALPH_ROLLUP_STDERR`), then copies both to the transcript. Paths are arguments, never
/// part of the script text.
const CAPTURE: &str = r#"bash "$0" "$@" >"$RALPH_ROLLUP_STDOUT" 2>"$RALPH_ROLLUP_STDERR"; s=$?; cat "$RALPH_ROLLUP_STDERR" >&2; cat "$RALPH_ROLLUP_STDOUT"; exit $s"#;

pub(crate) struct CpmSource {
    pub(crate) root: PathBuf,
    pub(crate) targets: Targets,
    /// The coverage roll-up script; without one, only the generic verdict command decides.
    pub(crate) rollup: Option<PathBuf>,
    pub(crate) phase: Phase,
    /// The planning iteration (`/cpm:epics`) already ran in this run.
    pub(crate) planned: bool,
    pub(crate) story_filter: Option<String>,
    pub(crate) test_runner: Option<String>,
    pub(crate) resuming: bool,
    /// The iteration log: `docs/plans/.cpm-ralph-log-{run_id}.md`.
    pub(crate) log: PathBuf,
    /// What the last roll-up that ran (exit 0, 3, 4 or 5) counted.
    pub(crate) coverage: Coverage,
    /// What the last roll-up said on stderr (its last lines).
    stderr: Vec<String>,
    /// The spec's epics when the run started: after `/cpm:epics`, only the others are
    /// stripped of `[plan]` (the pre-flight did these).
    launch_epics: Vec<PathBuf>,
    /// The epics `/cpm:epics` wrote were stripped already.
    stripped: bool,
    /// Lines for the activity log and the report, taken by the loop ([`Self::take_notes`]).
    notes: Vec<String>,
    /// Where the roll-up's stdout and stderr are captured: `.ralph/runs/.rollup-PID` (ignored
    /// with the transcripts), inside the repository so that a roll-up run in the sandbox, whose
    /// `/tmp` is a private one, writes where ralph reads (`None`: stdout's tail only).
    capture: Option<PathBuf>,
}

impl CpmSource {
    pub(crate) fn new(
        root: PathBuf,
        targets: Targets,
        rollup: Option<PathBuf>,
        phase: Phase,
        story_filter: Option<String>,
        test_runner: Option<String>,
    ) -> CpmSource {
        let mut c = CpmSource {
            root,
            targets,
            rollup,
            phase,
            planned: false,
            story_filter,
            test_runner,
            resuming: false,
            log: cpm::log_path("RUN_ID"),
            coverage: Coverage::default(),
            stderr: Vec::new(),
            launch_epics: Vec::new(),
            stripped: false,
            notes: Vec::new(),
            capture: None,
        };
        let dir = crate::state::RalphDir::new(&c.root)
            .path
            .join("runs")
            .join(format!(".rollup-{}", std::process::id()));
        c.capture = crate::files::own_dir(&dir).is_ok().then_some(dir);
        c.launch_epics = c.epics().unwrap_or_default();
        c
    }

    /// The epics this iteration works: the resolved targets, or the spec's epics now.
    pub(crate) fn epics(&self) -> Result<Vec<PathBuf>> {
        match &self.targets {
            Targets::Epics(e) => Ok(e.clone()),
            Targets::Spec(s) => Ok(cpm::epics_for_spec(&self.root, s)
                .map_err(super::cpm_error)?
                .into_iter()
                .map(|e| e.path)
                .collect()),
        }
    }

    pub(crate) fn prompt(&self, p: &PromptCtx<'_>) -> Result<String> {
        let epics = self.epics()?;
        let budget = cpm::task_budget(&self.root, &epics).ok();
        let spec = match &self.targets {
            Targets::Spec(s) => Some(s.as_path()),
            Targets::Epics(_) => None,
        };
        let mut text = cpm::prompt(&cpm::PromptParams {
            mode_spec: spec,
            epics: &epics,
            phase: self.phase,
            iteration: p.iteration,
            max_iterations: p.max_iterations,
            story_filter: self.story_filter.as_deref(),
            test_runner: self.test_runner.as_deref(),
            resuming: self.resuming || p.iteration > 1,
            task_budget: budget,
        });
        if p.stuck_alert {
            text.push_str("\n\n");
            text.push_str(&stuck_paragraph(
                p.stuck_streak,
                "did not move the roll-up's figures",
            ));
        }
        Ok(text)
    }

    /// Rows marked verified / rows, from the last roll-up that ran.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.coverage.verified, self.coverage.rows)
    }

    /// The judgement the last roll-up makes: rows verified / rows, and the progress measure
    /// (verified rows plus traced requirements, SPEC §3.4). Without a roll-up, a generic
    /// verdict command's figures are the progress, as in any mode.
    pub(crate) fn judged(&self) -> Judged {
        let (done, total) = self.counts();
        Judged {
            progress: self.rollup.is_some().then(|| self.coverage.progress()),
            ..Judged::counts(done, total)
        }
    }

    /// `bash {rollup} --epic … --verdict` with absolute paths and `CLAUDE_PROJECT_DIR` set to
    /// the work tree (plugin caches do not always keep the executable bit), its output
    /// captured so the records are read whole and stderr apart.
    pub(crate) fn rollup_invocation(&self) -> Option<(String, Invocation)> {
        let r = self.rollup.as_ref()?;
        let root = std::path::absolute(&self.root).unwrap_or_else(|_| self.root.clone());
        let argv = cpm::rollup_argv(r, &root, &self.targets);
        let display = format!("bash {}", argv.join(" "));
        let mut env = vec![(
            "CLAUDE_PROJECT_DIR".to_string(),
            root.to_string_lossy().into_owned(),
        )];
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(dir) = &self.capture {
            let (out, err) = (dir.join("stdout"), dir.join("stderr"));
            // A run that never starts must not be read as the last one's records.
            let _ = std::fs::remove_file(&out);
            let _ = std::fs::remove_file(&err);
            args.extend(["-c".into(), CAPTURE.into()]);
            env.push(("RALPH_ROLLUP_STDOUT".into(), out.to_string_lossy().into()));
            env.push(("RALPH_ROLLUP_STDERR".into(), err.to_string_lossy().into()));
        }
        args.extend(argv.into_iter().map(Into::into));
        Some((
            display,
            Invocation {
                program: "bash".into(),
                args,
                stdin: None,
                env,
            },
        ))
    }

    /// Read a roll-up run: its exit code decides the class; ralph counts its records for the
    /// figures, and keeps its stderr to show when it could not run.
    pub(crate) fn verdict(&mut self, exit_code: i32, stdout_tail: &str) -> Verdict {
        let captured = |name: &str| {
            let dir = self.capture.as_ref()?;
            read_capped(&dir.join(name))
        };
        let stdout = captured("stdout").unwrap_or_else(|| stdout_tail.to_string());
        let stderr = captured("stderr").unwrap_or_default();
        let spec = self.targets.is_spec();
        let coverage = Coverage::count(&cpm::parse_records(&stdout));
        let class = match exit_code {
            0 => VerdictClass::Verified,
            3 => VerdictClass::Unverified,
            // Outside spec mode, 4 is a roll-up that could not run (SPEC §3.3).
            4 if spec => VerdictClass::NothingPlanned,
            5 => VerdictClass::TargetOnly(coverage.target_only.clone()),
            _ => VerdictClass::Unavailable,
        };
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        self.stderr = lines[lines.len().saturating_sub(STDERR_LINES)..]
            .iter()
            .map(|l| shown_line(l))
            .collect();
        let (summary, details) = if class == VerdictClass::Unavailable {
            (
                format!("roll-up exit {exit_code}: could not run"),
                self.stderr.clone(),
            )
        } else {
            self.coverage = coverage;
            let details = match &class {
                VerdictClass::Unverified => self.coverage.unverified.clone(),
                _ => Vec::new(),
            };
            (self.coverage.figures(spec), details)
        };
        Verdict {
            exit_code,
            class,
            summary: Some(summary),
            details,
        }
    }

    /// Spec mode's phase predicate after a roll-up (SPEC §3.4), from the exit code only:
    /// 4 → `/cpm:epics` next (once per run); untraced 0 → `/cpm:do`; untraced > 0 → halt
    /// PARTIAL naming them; any other code → the check could not run (never planning).
    /// `Some(halt)` ends the run.
    pub(crate) fn after_verdict(&mut self, v: &Verdict) -> Option<Halt> {
        if !self.targets.is_spec() || self.rollup.is_none() {
            return None;
        }
        match v.exit_code {
            4 if self.planned || self.resuming => Some(self.planning_twice()),
            4 => {
                self.phase = Phase::Planning;
                None
            }
            0 | 3 | 5 if self.coverage.untraced.is_empty() => {
                self.phase = Phase::Delivery;
                if v.exit_code == 3 {
                    self.strip_generated();
                }
                None
            }
            // Epics exist but do not cover the spec: a second /cpm:epics cannot fix that.
            0 | 3 | 5 => Some(self.partial_spec()),
            _ => None,
        }
    }

    /// A planning iteration just ran: never again in this run (the roll-up decides what next).
    pub(crate) fn mark_planning_ran(&mut self) {
        if self.phase == Phase::Planning {
            self.planned = true;
            self.phase = Phase::Delivery;
        }
    }

    /// The lines for the activity log and the report gathered since the last call.
    pub(crate) fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// What to tell the user when the roll-up could not run: how to run it by hand and the
    /// last lines it wrote to stderr.
    pub(crate) fn verdict_failure(&self) -> (String, Vec<String>) {
        let display = self
            .rollup_display()
            .unwrap_or_else(|| "the roll-up (none was found)".to_string());
        (display, self.stderr.clone())
    }

    fn rollup_display(&self) -> Option<String> {
        let r = self.rollup.as_ref()?;
        let root = std::path::absolute(&self.root).unwrap_or_else(|_| self.root.clone());
        let root_text = root.to_string_lossy();
        Some(format!(
            "CLAUDE_PROJECT_DIR={} bash {}",
            shell_words::quote(&root_text),
            shell_words::join(cpm::rollup_argv(r, &root, &self.targets))
        ))
    }

    pub(crate) fn completion_lines(&self) -> Vec<String> {
        let figures =
            (self.coverage.records > 0).then(|| self.coverage.figures(self.targets.is_spec()));
        let (word, coverage) = cpm::completion_lines(self.targets.is_spec(), figures.as_deref());
        vec![coverage, word]
    }

    /// `[plan]` stripped from the epics `/cpm:epics` wrote in this run, once, before the first
    /// `/cpm:do` iteration (the pre-flight did the epics that were there at launch).
    fn strip_generated(&mut self) {
        if !self.planned || self.stripped {
            return;
        }
        self.stripped = true;
        let epics = match self.epics() {
            Ok(e) => e,
            Err(e) => {
                self.notes.push(format!("[plan] tags not stripped: {e}"));
                return;
            }
        };
        for epic in epics.iter().filter(|e| !self.launch_epics.contains(e)) {
            match cpm::strip_plan_file(&self.root, epic) {
                Ok(lines) => self.notes.extend(lines),
                Err(e) => self.notes.push(format!("[plan] tags not stripped: {e}")),
            }
        }
    }

    fn planning_twice(&self) -> Halt {
        let why = if self.planned {
            "/cpm:epics already ran in this run"
        } else {
            "this resumed run may already have run /cpm:epics"
        };
        Halt::Partial(vec![
            format!("The roll-up finds no matrix for the spec, and {why}."),
            "Running it twice would write a second set of epics; check the epics it wrote.".into(),
        ])
    }

    fn partial_spec(&self) -> Halt {
        let c = &self.coverage;
        let mut lines = vec![format!(
            "{} of the spec's {} requirements are untraced: the epics on disk cover part of it, and a second /cpm:epics would write a fresh set instead of completing this one.",
            c.untraced.len(),
            c.requirements
        )];
        lines.push("Untraced:".into());
        lines.extend(c.untraced.iter().map(|u| format!("- {u}")));
        if !c.traced_ids.is_empty() {
            lines.push(format!("Traced: {}", c.traced_ids.join(", ")));
        }
        lines.push(
            "The epic docs are left as they are; plan the missing requirements, then run again."
                .into(),
        );
        Halt::Partial(lines)
    }
}

/// At most [`STDOUT_MAX`] bytes of a capture file, as text; `None` when it is missing.
/// Read as any file the agent can touch (never through a link out of the repository, never a
/// FIFO); a larger file is cut to its first [`STDOUT_MAX`] bytes.
fn read_capped(path: &Path) -> Option<String> {
    use std::io::Read;
    let (f, _) = crate::files::open_read(path).ok()?;
    let mut bytes = Vec::new();
    f.take(STDOUT_MAX).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A stderr line as shown: control characters replaced, bounded.
fn shown_line(line: &str) -> String {
    let clean: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim_end();
    match clean.char_indices().nth(500) {
        Some((i, _)) => format!("{}…", &clean[..i]),
        None => clean.to_string(),
    }
}
