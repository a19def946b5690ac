//! The run state (SPEC §2.4, §7, §11): what `status` reports and what a resume restores,
//! written atomically twice — ralph's own record in its state directory, which is the
//! authority, and `.ralph/state.json` in the work tree, for people and tools to read; a file
//! from a newer ralph is refused, never rewritten.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::home::StateHome;
use crate::error::{Error, Result, exit};
use crate::iter_record::IterKey;

/// The version of `state.json` this ralph writes. Version 1 files are read too (every field
/// added since has a default); a newer version is refused so no field it knows is lost.
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// How a run works its task (SPEC §2.2), as `status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Mode {
    #[serde(rename = "checklist")]
    Checklist,
    #[serde(rename = "table")]
    Table,
    #[serde(rename = "cpm-epic")]
    CpmEpic,
    #[serde(rename = "cpm-spec")]
    CpmSpec,
    /// `prd.json`'s user stories (SPEC §14).
    #[serde(rename = "stories")]
    Stories,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Checklist => "checklist",
            Mode::Table => "table",
            Mode::CpmEpic => "cpm-epic",
            Mode::CpmSpec => "cpm-spec",
            Mode::Stories => "stories",
        }
    }

    /// What the figures of this mode count, for display.
    pub(crate) fn unit(self) -> &'static str {
        match self {
            Mode::Checklist => "criteria",
            Mode::Table => "tasks",
            Mode::CpmEpic | Mode::CpmSpec => "rows",
            Mode::Stories => "stories",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run halted: the `halt_reason` of `ralph status --json` (SPEC §2.4), with its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HaltReason {
    Complete,
    MaxIterations,
    Stalled,
    Stuck,
    TargetOnly,
    VerdictUnavailable,
    Tampered,
    Partial,
    Budget,
    Interrupted,
    /// The agent's question went unanswered for `--answer-timeout`.
    WaitingForPerson,
    Error,
}

impl HaltReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HaltReason::Complete => "complete",
            HaltReason::MaxIterations => "max_iterations",
            HaltReason::Stalled => "stalled",
            HaltReason::Stuck => "stuck",
            HaltReason::TargetOnly => "target_only",
            HaltReason::VerdictUnavailable => "verdict_unavailable",
            HaltReason::Tampered => "tampered",
            HaltReason::Partial => "partial",
            HaltReason::Budget => "budget",
            HaltReason::Interrupted => "interrupted",
            HaltReason::WaitingForPerson => "waiting_for_person",
            HaltReason::Error => "error",
        }
    }

    /// The exit code of a run that halts for this reason (SPEC §6).
    pub(crate) fn exit_code(self) -> i32 {
        match self {
            HaltReason::Complete => exit::COMPLETE,
            HaltReason::MaxIterations => exit::MAX_ITERATIONS,
            HaltReason::Stalled => exit::STALLED,
            HaltReason::Stuck => exit::STUCK,
            HaltReason::TargetOnly => exit::TARGET_ONLY,
            HaltReason::VerdictUnavailable => exit::VERDICT_UNAVAILABLE,
            HaltReason::Tampered => exit::TAMPERED,
            HaltReason::Partial => exit::PARTIAL,
            HaltReason::Budget => exit::BUDGET,
            HaltReason::Interrupted => exit::INTERRUPTED,
            HaltReason::WaitingForPerson => exit::WAITING_FOR_PERSON,
            HaltReason::Error => exit::ERROR,
        }
    }
}

impl std::fmt::Display for HaltReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run id is a plain name (SPEC §7): it names a directory under `.ralph/runs/`.
pub(crate) fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `state.json`: what `status` reports and what a resume restores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunState {
    pub(crate) schema_version: u32,
    pub(crate) run_id: String,
    pub(crate) task: String,
    pub(crate) task_file: String,
    pub(crate) mode: Mode,
    /// The resolved targets (CPM epics or spec; the table's PRD and progress files), so a
    /// resume works on the same ones.
    #[serde(default)]
    pub(crate) targets: Vec<String>,
    pub(crate) pid: u32,
    pub(crate) running: bool,
    pub(crate) started_at: String,
    pub(crate) updated_at: String,
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) done: usize,
    pub(crate) total: usize,
    pub(crate) best_done: usize,
    pub(crate) no_progress_streak: u32,
    /// The criteria unchecked at the start of the run (normalised): each must stay.
    pub(crate) baseline: Vec<String>,
    /// The criteria already checked at the start (normalised), so twins stay distinct.
    #[serde(default)]
    pub(crate) baseline_checked: Vec<String>,
    /// Unchecked task items outside the criteria section at the start (normalised).
    #[serde(default)]
    pub(crate) baseline_outside: Vec<String>,
    pub(crate) last_keys: Vec<IterKey>,
    #[serde(default)]
    pub(crate) verdict_failures: u32,
    /// Fingerprints of the verdict figures this run has seen (progress means unseen figures).
    #[serde(default)]
    pub(crate) seen_figures: Vec<String>,
    pub(crate) halt_reason: Option<HaltReason>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) cost_usd: f64,
    #[serde(default)]
    pub(crate) input_tokens: u64,
    #[serde(default)]
    pub(crate) output_tokens: u64,
    /// Seconds spent waiting for agents' usage limits to lift.
    #[serde(default)]
    pub(crate) waited_s: f64,
    /// Where the ITER records go when not `.ralph/iterations.log` (CPM mode), repo-relative.
    #[serde(default)]
    pub(crate) iterations_log: Option<String>,
    /// What the last iteration's checks said (failing tests, a refused commit), for the next
    /// prompt; bounded.
    #[serde(default)]
    pub(crate) feedback: Option<String>,
    /// Criteria the agent annotated when it checked them (`baseline → as written`), for review.
    #[serde(default)]
    pub(crate) annotations: Vec<String>,
    /// Failed attempts per story id (`prd.json`, SPEC §14): three skip a story.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) story_attempts: std::collections::BTreeMap<String, u32>,
    /// The agent of the latest iteration (a run with fallback agents changes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
    /// What each agent of the run did: its iterations, cost and tokens (their sums are the
    /// run's).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) agents: std::collections::BTreeMap<String, AgentUse>,
    /// What the run was started with that a resume keeps (SPEC §2.3: the same run), unless a
    /// flag of the resume says otherwise. `None` in a state from an older ralph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pinned: Option<Pinned>,
    /// The branch the run commits onto (`refs/heads/…`: the one it started on, a worktree
    /// loop's `ralph/NAME`); `None`: a detached HEAD, or an older ralph's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) branch: Option<String>,
    /// The commit that branch was at when the run last recorded itself: what `ralph merge`
    /// merges, whatever the branch says later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tip: Option<String>,
}

/// What one agent did in a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentUse {
    /// The iterations it ended.
    pub(crate) iterations: u32,
    pub(crate) cost_usd: f64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

/// The agent and the checks a run was started with. A resume takes them from here, not from
/// today's files: a task file the agent edited (`test_command: "true"`) or a flag not repeated
/// (`--test-command`, `--agent-cmd`) must not change what judges the run it continues.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pinned {
    /// A preset's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
    /// A custom command template (`--agent-cmd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent_cmd: Option<String>,
    /// The presets that take over while the agent is usage-limited (`--fallback-agent`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) fallback_agents: Vec<String>,
    /// Whatever its source, a command kept here runs as the repository's on resume (the agent
    /// can write `state.json`): in the sandbox under `--sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) test_command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) verdict_command: Option<String>,
    /// The run's sandbox (`--sandbox`): a resume runs in it too, whatever its flags say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sandbox: Option<crate::sandbox::Pinned>,
    /// The run's budgets and limits: a resume keeps them unless its own flags give one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limits: Option<Limits>,
}

/// What bounds a run and its agent (SPEC §6) and guards its commits, as it was started. The task file and
/// `.ralph/config.toml` set them too, and the agent can write both: an agent that raised its own
/// `max_cost` (or timeout, stuck threshold, or dropped the completion promise) must not have
/// the run it continues spend, wait or trust more. Durations in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_wait_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) idle_timeout_ms: Option<u64>,
    pub(crate) check_timeout_ms: u64,
    pub(crate) stuck_threshold: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completion_promise: Option<String>,
    /// The guards of the commits: the repository's hooks skipped, no commits, the commit
    /// guard's size limit (`.ralph/config.toml` sets them, and the agent can create that file).
    #[serde(default)]
    pub(crate) no_verify: bool,
    #[serde(default)]
    pub(crate) no_commit: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_file_size: Option<u64>,
}

/// What is recorded of a work tree's run (SPEC §11): ralph's own record when it has one, and
/// why `.ralph/state.json` was not taken as it is, when it was not.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub(crate) state: Option<RunState>,
    pub(crate) warning: Option<String>,
}

impl RunState {
    /// The run recorded for the work tree whose `state.json` is `path` ([`RunState::recorded`]),
    /// the warning logged.
    pub(crate) fn load(path: &Path) -> Result<Option<RunState>> {
        let r = Self::recorded(path)?;
        if let Some(w) = &r.warning {
            tracing::warn!("{w}");
        }
        Ok(r.state)
    }

    /// The run recorded for the work tree whose `state.json` is `path`: ralph's own record, in
    /// its state directory, where the agent cannot write under `--sandbox`; a `state.json`
    /// that disagrees with it (another run, another baseline, or none) is ignored. Without a
    /// record (no state directory; a repository moved; a run an older ralph started)
    /// `state.json` is all there is. Either file, when unreadable, from a newer ralph or
    /// naming its run otherwise than plainly, is an error naming it (and left as it is).
    pub(crate) fn recorded(path: &Path) -> Result<Recorded> {
        Self::recorded_in(StateHome::locate().as_ref(), path)
    }

    fn recorded_in(home: Option<&StateHome>, path: &Path) -> Result<Recorded> {
        let record = own_record(home, path, false).ok().flatten();
        let own = match &record {
            Some(r) => read(r)?,
            None => None,
        };
        let file = match (read_checked(path), &own) {
            (Ok(file), _) => file,
            // ralph's own record stands: a `state.json` the agent made unreadable (a FIFO,
            // garbage) is ignored as one it rewrote is. What this ralph refuses (a newer
            // schema, a run id that is not plain) stays refused, named (SPEC §7).
            (
                Err(Bad {
                    error,
                    refused: false,
                    ..
                }),
                Some(o),
            ) => {
                return Ok(Recorded {
                    warning: Some(format!(
                        "{error}: the file is ignored, ralph's own record of run {} stands",
                        o.run_id
                    )),
                    state: own,
                });
            }
            (Err(bad), _) => return Err(bad.error),
        };
        Ok(authority(path, home.is_some(), own, file))
    }

    /// The run recorded for the work tree whose `state.json` is `path`, for `ralph run --reset`,
    /// which starts over whatever is recorded: a record of ralph's own it cannot take (garbage,
    /// a FIFO, a run id that is not plain) is passed over with a warning naming it, never an
    /// error (issue 29). One written by a newer ralph is still refused (SPEC §7).
    pub(crate) fn recorded_for_reset(path: &Path) -> Result<Recorded> {
        let home = StateHome::locate();
        let record = own_record(home.as_ref(), path, false).ok().flatten();
        let mut bad = Vec::new();
        for p in record.iter().map(PathBuf::as_path).chain([path]) {
            match read_checked(p) {
                Err(b) if b.newer => return Err(b.error),
                Err(b) => bad.push(b.error.to_string()),
                Ok(_) => {}
            }
        }
        if bad.is_empty() {
            return Self::recorded_in(home.as_ref(), path);
        }
        Ok(Recorded {
            state: None,
            warning: Some(format!(
                "{}: passed over, --reset starts a new run",
                bad.join("; and ")
            )),
        })
    }

    /// Write the state: ralph's own record first (so a kill between the two writes leaves the
    /// record the newer), then `state.json`. Without a state directory `state.json` is the
    /// only record; when the record cannot be written (said once) the last one written stays.
    pub(crate) fn save(&mut self, path: &Path) -> Result<()> {
        self.save_in(StateHome::locate().as_ref(), path)
    }

    fn save_in(&mut self, home: Option<&StateHome>, path: &Path) -> Result<()> {
        self.schema_version = SCHEMA_VERSION;
        self.updated_at = super::now_rfc3339();
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| Error::user(e.to_string()))?;
        text.push('\n');
        // A record that cannot be brought up to date is left as it was, never removed: a file
        // the agent wrote must not become the authority because ralph's write failed.
        let recorded = own_record(home, path, true).and_then(|record| match record {
            Some(r) => crate::files::write_atomic(&r, text.as_bytes(), 0o600),
            None => Ok(()),
        });
        if let Err(e) = recorded {
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    "ralph's own record of this run cannot be written ({e}): {} is the only one",
                    path.display()
                );
            }
        }
        super::write_atomic(path, text.as_bytes())
    }
}

/// ralph's own record of the work tree whose state file is `path` (`ROOT/.ralph/state.json`):
/// `state.json` in the work tree's directory of the state home. `Ok(None)` without a state
/// home, or, not creating, without records of this work tree.
fn own_record(
    home: Option<&StateHome>,
    path: &Path,
    create: bool,
) -> std::io::Result<Option<PathBuf>> {
    let (Some(home), Some(ralph_dir)) = (home, path.parent()) else {
        return Ok(None);
    };
    let Some(root) = ralph_dir
        .parent()
        .filter(|_| ralph_dir.file_name().is_some_and(|n| n == super::DIR))
    else {
        return Ok(None);
    };
    let keyed = home.records_of(root, create)?;
    Ok(keyed.map(|k| k.join(RECORD)))
}

/// The name of ralph's own record in a work tree's directory of the state home.
const RECORD: &str = "state.json";

/// Which record stands (SPEC §11), and the warning when `state.json` is not taken as it is.
fn authority(
    path: &Path,
    has_home: bool,
    own: Option<RunState>,
    file: Option<RunState>,
) -> Recorded {
    let warning = match (&own, &file) {
        (Some(o), Some(f)) if o == f => None,
        (Some(o), Some(f)) if o.run_id != f.run_id => Some(format!(
            "{} names run {}, but ralph's own record of this work tree is of run {}: the file is ignored",
            path.display(),
            f.run_id,
            o.run_id
        )),
        (Some(o), Some(_)) => Some(format!(
            "{} was changed since ralph wrote it: the file is ignored, ralph's own record of run {} stands",
            path.display(),
            o.run_id
        )),
        (Some(o), None) => Some(format!(
            "{} is missing: ralph's own record of run {} stands",
            path.display(),
            o.run_id
        )),
        (None, Some(f)) if has_home => Some(format!(
            "ralph has no record of its own of run {} (a repository moved, or a run an older ralph started): {} is taken as it is",
            f.run_id,
            path.display()
        )),
        (None, _) => None,
    };
    Recorded {
        state: own.or(file),
        warning,
    }
}

/// Read a state file: `None` when there is none. A newer schema, an unreadable file or a run id
/// that is not a plain name is an error naming the file (the file is left as it is).
fn read(path: &Path) -> Result<Option<RunState>> {
    read_checked(path).map_err(|bad| bad.error)
}

/// Why a state file was not taken.
struct Bad {
    error: Error,
    /// It says something this ralph refuses (a newer schema, a run id or log path that is not
    /// plain), rather than nothing readable at all (a FIFO, garbage).
    refused: bool,
    /// A newer ralph wrote it: refused, never rewritten.
    newer: bool,
}

/// [`read`], telling a file that could not be read from one that was refused.
fn read_checked(path: &Path) -> std::result::Result<Option<RunState>, Bad> {
    let hint = "it is ralph's runtime file: delete it, or start over with `ralph run --reset`";
    let unreadable = |error: Error| Bad {
        error: error.with_hint(hint),
        refused: false,
        newer: false,
    };
    let refused = |error: Error| Bad {
        error,
        refused: true,
        newer: false,
    };
    let text = match crate::files::read_text(path) {
        Ok(t) => t,
        Err(e) if e.is_missing() => return Ok(None),
        Err(e) => return Err(unreadable(Error::user(e.to_string()))),
    };
    let garbled = |e: serde_json::Error| {
        unreadable(Error::user(format!(
            "{}:{}: unreadable state: {e}",
            path.display(),
            e.line()
        )))
    };
    let raw: serde_json::Value = serde_json::from_str(&text).map_err(garbled)?;
    let version = raw["schema_version"].as_u64().unwrap_or(0);
    if version > u64::from(SCHEMA_VERSION) {
        return Err(Bad {
            newer: true,
            ..refused(Error::user(format!(
            "{}: written by a newer ralph (schema_version {version}; this ralph knows up to {SCHEMA_VERSION})",
            path.display()
        ))
        .with_hint("use that newer ralph to resume or inspect this run; this one leaves the file untouched"))
        });
    }
    let state: RunState = serde_json::from_value(raw).map_err(garbled)?;
    if !valid_run_id(&state.run_id) {
        return Err(refused(
            Error::user(format!(
                "{}: run_id `{}` is not a plain name (letters, digits, `-`, `_`)",
                path.display(),
                state.run_id.escape_debug()
            ))
            .with_hint(hint),
        ));
    }
    if let Some(log) = &state.iterations_log
        && !is_plain_relative(log)
    {
        return Err(refused(
            Error::user(format!(
                "{}: iterations_log `{}` is not a path inside the repository",
                path.display(),
                log.escape_debug()
            ))
            .with_hint(hint),
        ));
    }
    Ok(Some(state))
}

/// A relative path that stays below its base (no `..`, not absolute).
fn is_plain_relative(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunState {
        serde_json::from_str(
            r#"{"schema_version":1,"run_id":"r-1","task":"t","task_file":"T.md","mode":"cpm-spec",
                "pid":1,"running":false,"started_at":"s","updated_at":"u","iteration":4,
                "max_iterations":9,"done":1,"total":3,"best_done":1,"no_progress_streak":2,
                "baseline":[],"last_keys":[],"halt_reason":"max_iterations","exit_code":3,"cost_usd":0.0}"#,
        )
        .unwrap()
    }

    #[test]
    fn version_one_files_load_and_save_as_the_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        let mut st = sample();
        assert_eq!(st.mode, Mode::CpmSpec);
        assert_eq!(st.halt_reason, Some(HaltReason::MaxIterations));
        st.save(&p).unwrap();
        let back = RunState::load(&p).unwrap().unwrap();
        assert_eq!(back.schema_version, SCHEMA_VERSION);
        assert_eq!(back.run_id, "r-1");
    }

    #[test]
    fn newer_schema_and_bad_run_ids_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        let mut v = serde_json::to_value(sample()).unwrap();
        v["schema_version"] = 99.into();
        v["from_the_future"] = "keep me".into();
        let text = v.to_string();
        std::fs::write(&p, &text).unwrap();
        let e = RunState::load(&p).unwrap_err().to_string();
        assert!(e.contains("newer ralph") && e.contains("state.json"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
        for bad in ["../../x", "", "a/b", "a b", ".."] {
            let mut v = serde_json::to_value(sample()).unwrap();
            v["run_id"] = bad.into();
            std::fs::write(&p, v.to_string()).unwrap();
            let e = RunState::load(&p).unwrap_err().to_string();
            assert!(e.contains("run_id"), "{bad}: {e}");
        }
        let mut v = serde_json::to_value(sample()).unwrap();
        v["iterations_log"] = "../../etc/x".into();
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(RunState::load(&p).is_err());
    }

    /// A repository at `d/repo` and a state home at `d/state`; the state file's path.
    fn repo_and_home(d: &Path) -> (StateHome, PathBuf) {
        let root = d.join("repo");
        git2::Repository::init(&root).unwrap();
        std::fs::create_dir_all(root.join(".ralph")).unwrap();
        (
            StateHome::at(&d.join("state")),
            root.join(".ralph/state.json"),
        )
    }

    #[test]
    fn ralphs_own_record_is_the_authority() {
        let d = tempfile::tempdir().unwrap();
        let (home, path) = repo_and_home(d.path());
        let mut st = sample();
        st.save_in(Some(&home), &path).unwrap();
        let read = |h: Option<&StateHome>| RunState::recorded_in(h, &path).unwrap();
        let r = read(Some(&home));
        assert_eq!(r.state.as_ref().map(|s| s.run_id.as_str()), Some("r-1"));
        assert_eq!(r.warning, None, "the two agree");

        // Another run written over the file: ignored, with a warning naming both runs.
        let mut other = sample();
        other.run_id = "r-2".into();
        other.halt_reason = Some(HaltReason::Complete);
        std::fs::write(&path, serde_json::to_string(&other).unwrap()).unwrap();
        let r = read(Some(&home));
        assert_eq!(r.state.unwrap().run_id, "r-1");
        let w = r.warning.unwrap();
        assert!(
            w.contains("r-2") && w.contains("r-1") && w.contains("ignored"),
            "{w}"
        );

        // The same run with another baseline: ignored too.
        let mut edited = st.clone();
        edited.baseline = vec!["x".into()];
        std::fs::write(&path, serde_json::to_string(&edited).unwrap()).unwrap();
        let r = read(Some(&home));
        assert_eq!(r.state.unwrap().baseline, st.baseline);
        assert!(r.warning.unwrap().contains("changed since ralph wrote it"));

        // Missing: the record stands.
        std::fs::remove_file(&path).unwrap();
        let r = read(Some(&home));
        assert_eq!(r.state.unwrap().run_id, "r-1");
        assert!(r.warning.unwrap().contains("missing"));

        // Without a state home, the file is all there is; without a record, too (said).
        std::fs::write(&path, serde_json::to_string(&other).unwrap()).unwrap();
        let r = read(None);
        assert_eq!(
            (r.state.unwrap().run_id, r.warning),
            ("r-2".to_string(), None)
        );
        let elsewhere = StateHome::at(&d.path().join("other-state"));
        let r = read(Some(&elsewhere));
        assert_eq!(r.state.unwrap().run_id, "r-2");
        assert!(r.warning.unwrap().contains("no record of its own"));
        assert!(
            !elsewhere.path().exists(),
            "a reader creates nothing in the state home"
        );
    }

    #[test]
    fn without_a_writable_state_home_state_json_is_the_only_record() {
        let d = tempfile::tempdir().unwrap();
        let (_, path) = repo_and_home(d.path());
        // A file where the state home should be: nothing can be made in it, even by root.
        std::fs::write(d.path().join("state"), "").unwrap();
        let home = StateHome::at(&d.path().join("state"));
        let mut st = sample();
        st.save_in(Some(&home), &path).unwrap();
        let r = RunState::recorded_in(Some(&home), &path).unwrap();
        assert_eq!(r.state.unwrap().run_id, "r-1");
        assert!(r.warning.unwrap().contains("no record of its own"));
    }

    #[test]
    fn halt_reasons_serialise_to_the_spec_words() {
        for (r, word, code) in [
            (HaltReason::Complete, "complete", 0),
            (HaltReason::MaxIterations, "max_iterations", 3),
            (HaltReason::TargetOnly, "target_only", 6),
            (HaltReason::VerdictUnavailable, "verdict_unavailable", 7),
            (HaltReason::Interrupted, "interrupted", 130),
            (HaltReason::WaitingForPerson, "waiting_for_person", 12),
        ] {
            assert_eq!(serde_json::to_value(r).unwrap(), word);
            assert_eq!(r.as_str(), word);
            assert_eq!(r.exit_code(), code);
        }
        assert_eq!(serde_json::to_value(Mode::CpmEpic).unwrap(), "cpm-epic");
    }
}
