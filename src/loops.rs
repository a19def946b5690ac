//! The loops of a repository (SPEC §2.4, §13): what `ralph status` reports for one work tree,
//! read without its lock and in O(1) of its logs, and the list of every loop — the main work
//! tree's and each worktree's — for `status --all` and `ralph watch`.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::Result;
use crate::git::Repo;
use crate::iter_record;
use crate::state::{self, HaltReason, Mode, RalphDir, Recorded, RunState, TreeLocks};
use crate::task::document::{TaskDocument, TaskError, load_task_file};
use crate::task::table;

/// Everything `status` reports, read once.
pub(crate) struct Status {
    /// The run recorded: ralph's own record of it when it has one (SPEC §11).
    pub(crate) st: Option<RunState>,
    /// Why `.ralph/state.json` was not taken as it is, when it was not.
    pub(crate) warning: Option<String>,
    /// A supervisor holds the work tree's lock now.
    pub(crate) running: bool,
    /// The pid of that supervisor, as it wrote it into its lock (else as recorded).
    pub(crate) pid: Option<u32>,
    /// The locks a live run is told by, for a watcher (a lock is closed when its holder dies).
    pub(crate) locks: TreeLocks,
    /// The last (up to three) ITER records, each bounded.
    pub(crate) records: Vec<String>,
    pub(crate) stalled: bool,
    pub(crate) task_file: std::path::PathBuf,
    pub(crate) doc: Option<TaskDocument>,
    pub(crate) done: usize,
    pub(crate) total: usize,
    pub(crate) remaining: Vec<String>,
    pub(crate) halt_reason: Option<HaltReason>,
    pub(crate) elapsed_s: Option<f64>,
    /// The task file is there but ralph refuses it (a run would stop at once, exit 1).
    pub(crate) refused: Option<Refusal>,
    /// What ralph reads past in the task file (`path:line: …`).
    pub(crate) task_warnings: Vec<String>,
    /// The run recorded when it is another task's: its task file now holds none of the criteria
    /// it started with (`ralph init --force` wrote a new task). `st` is `None` then.
    pub(crate) other_task: Option<RunState>,
    /// The question the loop waits on a person for (SPEC §16), if one is open.
    pub(crate) question: Option<crate::person::Question>,
}

impl Status {
    /// A running loop that waits for a person's answer.
    pub(crate) fn waiting(&self) -> bool {
        self.running && self.question.is_some()
    }
}

/// Why the task file is refused, as `status` shows it.
pub(crate) struct Refusal {
    /// `path:line: …`, as `ralph run` would print it after `error:`.
    pub(crate) error: String,
    pub(crate) hint: Option<String>,
    pub(crate) line: Option<usize>,
}

/// The state of the loop in `repo`'s work tree.
pub(crate) fn report(repo: &Repo) -> Result<Status> {
    let root = repo.root();
    let rd = RalphDir::new(root);
    let Recorded { state: st, warning } = RunState::recorded(&rd.state_file())?;
    // A supervisor is running when someone holds the lock (the kernel drops it on any death),
    // whatever the files say.
    let locks = TreeLocks::find(root, repo.git2().path());
    let holder = locks.holder();
    let running = holder.is_some();
    let pid = holder.map(|pid| pid.or(st.as_ref().map(|s| s.pid)));
    let task_file = st.as_ref().map_or_else(
        || root.join(crate::task::TASK_FILE),
        |s| root.join(&s.task_file),
    );
    let mode = st.as_ref().map_or(Mode::Checklist, |s| s.mode);
    let (doc, refused) = match mode {
        Mode::Checklist => read_task(&task_file),
        _ => (None, None),
    };
    let (st, other_task) = match st {
        Some(s) if !running && is_another_task(&s, doc.as_ref()) => (None, Some(s)),
        st => (st, None),
    };
    let (records, warning) = last_records(root, &rd, st.as_ref(), other_task.is_some(), warning);
    let parsed: Vec<iter_record::IterRecord> = records
        .iter()
        .filter_map(|r| iter_record::parse_iter_record(r))
        .collect();
    let task_warnings = doc.as_ref().map_or_else(Vec::new, |d| {
        d.warnings.iter().map(|w| w.to_string()).collect()
    });
    let (done, total, remaining) = counts(root, st.as_ref(), doc.as_ref());
    let halt_reason = st.as_ref().and_then(|s| {
        if running {
            None
        } else if s.running {
            Some(HaltReason::Error)
        } else {
            s.halt_reason
        }
    });
    let elapsed_s = st.as_ref().and_then(|s| elapsed(s, running));
    // Stalled by the run's own record when there is one: lines appended to the log (which the
    // agent can write) make no stall, and hide none.
    let stalled = st.as_ref().map_or_else(
        || iter_record::last_three_repeat(&parsed),
        |s| iter_record::last_three_keys_repeat(&s.last_keys),
    );
    Ok(Status {
        stalled,
        st,
        warning,
        running,
        pid: pid.flatten(),
        locks,
        records,
        task_file,
        doc,
        done,
        total,
        remaining,
        halt_reason,
        elapsed_s,
        refused,
        task_warnings,
        other_task,
        question: crate::person::open_question(repo),
    })
}

/// The last (up to three) ITER records of the run `st` (none for another task's run), and the
/// warning to show, which says so when the log cannot be read.
fn last_records(
    root: &Path,
    rd: &RalphDir,
    st: Option<&RunState>,
    other_task: bool,
    warning: Option<String>,
) -> (Vec<String>, Option<String>) {
    let log = st
        .and_then(|s| s.iterations_log.as_ref())
        .map_or_else(|| rd.iterations_log(), |l| root.join(l));
    // A log the agent made unreadable (a FIFO, a link out) hides the records, not the run.
    // Another task's run: its records are its own, not this task's.
    let records = if other_task {
        Ok(Vec::new())
    } else {
        state::tail_lines(&log, 3)
    };
    match records {
        Ok(records) => (records, warning),
        Err(e) => {
            let unread = format!("{e}: the last ITER records are not shown");
            let both = warning.map_or_else(|| unread.clone(), |w| format!("{w}; {unread}"));
            (Vec::new(), Some(both))
        }
    }
}

/// A finished checklist run whose task file now keeps none of the criteria the run started with
/// is another task's (`ralph init --force` wrote a new one). A run halted as tampered lost its
/// criteria to its agent: it stays this task's run, as does one still recorded as running.
fn is_another_task(s: &RunState, doc: Option<&TaskDocument>) -> bool {
    let Some(doc) = doc else {
        return false;
    };
    s.mode == Mode::Checklist
        && !s.running
        && s.halt_reason != Some(HaltReason::Tampered)
        && !doc.checklist.criteria.is_empty()
        && crate::task::integrity::keeps_none(
            &crate::task::integrity::Baseline {
                unchecked: s.baseline.clone(),
                checked: s.baseline_checked.clone(),
                unchecked_outside: Vec::new(),
            },
            &doc.checklist,
        )
}

/// The task file as `ralph run` would read it. A missing one is no refusal: there is nothing
/// to run yet (or the run's own record tells what it had).
fn read_task(path: &Path) -> (Option<TaskDocument>, Option<Refusal>) {
    match load_task_file(path) {
        Ok(doc) => (Some(doc), None),
        Err(TaskError::Missing { .. }) => (None, None),
        Err(e) => (
            None,
            Some(Refusal {
                error: e.to_string(),
                hint: e.hint(),
                line: e.line(),
            }),
        ),
    }
}

/// Done, total and the remaining items: from the task file or table as they are now, else from
/// what the state recorded.
fn counts(
    root: &std::path::Path,
    st: Option<&RunState>,
    doc: Option<&TaskDocument>,
) -> (usize, usize, Vec<String>) {
    if let Some(d) = doc {
        let remaining = d.checklist.remaining().map(|c| c.text.clone()).collect();
        return (d.checklist.done(), d.checklist.total(), remaining);
    }
    if let Some(s) = st
        && s.mode == Mode::Table
        && let [_, progress] = s.targets.as_slice()
    {
        let path = root.join(progress);
        let parsed = crate::files::read_text(&path)
            .ok()
            .and_then(|t| table::parse_progress(&path, &t).ok());
        if let Some(p) = parsed {
            let remaining = p
                .rows
                .iter()
                .filter(|r| r.status != table::RowStatus::Done)
                .map(|r| format!("task {}: {}", r.number, r.task))
                .collect();
            return (table::done_count(&p), p.rows.len(), remaining);
        }
    }
    (
        st.map_or(0, |s| s.done),
        st.map_or(0, |s| s.total),
        Vec::new(),
    )
}

/// Seconds since the start: to now while running, else to the last state update.
fn elapsed(s: &RunState, running: bool) -> Option<f64> {
    let start = chrono::DateTime::parse_from_rfc3339(&s.started_at).ok()?;
    let end = if running {
        chrono::Local::now().fixed_offset()
    } else {
        chrono::DateTime::parse_from_rfc3339(&s.updated_at).ok()?
    };
    Some((end - start).num_milliseconds().max(0) as f64 / 1000.0)
}

/// The `ralph status --json` object (SPEC §2.4).
pub(crate) fn to_json(s: &Status) -> serde_json::Value {
    let st = s.st.as_ref();
    let counted = s.refused.is_none() || st.is_some();
    let mut v = json!({
        "schema_version": 1,
        "task": st.map(|s| s.task.clone()).or_else(|| s.doc.as_ref().map(|d| d.name.clone())),
        "mode": st.map_or(Mode::Checklist, |s| s.mode),
        "run_id": st.map(|s| s.run_id.clone()),
        "running": s.running,
        "pid": s.pid,
        "iteration": st.map_or(0, |s| s.iteration),
        "max_iterations": st.map(|s| s.max_iterations),
        // A refused task file with no run recorded has no counts: null, never a made-up 0/0.
        "done": counted.then_some(s.done),
        "total": counted.then_some(s.total),
        "halt_reason": s.halt_reason,
        "exit_code": if s.running { None } else { st.and_then(|s| s.exit_code) },
        "cost_usd": st.map_or(0.0, |s| s.cost_usd),
        "input_tokens": st.map_or(0, |s| s.input_tokens),
        "output_tokens": st.map_or(0, |s| s.output_tokens),
        // The agent of the latest iteration, and what each agent of the run did.
        "agent": st.and_then(|s| s.agent.clone()),
        "agents": st.map(|s| &s.agents),
        "elapsed_s": s.elapsed_s,
        "started_at": st.map(|s| s.started_at.clone()),
        "updated_at": st.map(|s| s.updated_at.clone()),
        "last_records": s.records,
        "stalled": s.stalled,
        "remaining": s.remaining,
        "annotations": st.map_or(&[][..], |s| s.annotations.as_slice()),
        "refused": s.refused.as_ref().map(|r| json!({
            "error": r.error,
            "hint": r.hint,
            "line": r.line,
        })),
        "task_warnings": s.task_warnings,
        // SPEC §16: the question the loop waits on, and whether it waits now.
        "question": s.question,
        "waiting": s.waiting(),
    });
    // The run recorded when it is another task's (its criteria are gone from the task file).
    if let Some(o) = &s.other_task {
        v["other_task_run"] = json!({
            "run_id": o.run_id,
            "task": o.task,
            "halt_reason": o.halt_reason,
        });
    }
    v
}

/// One loop of the repository: a work tree and what `status` says of it.
pub(crate) struct Entry {
    /// `(main)` for the main work tree; a worktree's name otherwise (`NAME` of `--worktree`).
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    /// The branch checked out there; `None` when detached.
    pub(crate) branch: Option<String>,
    pub(crate) status: Status,
}

/// The name of the main work tree's loop.
pub(crate) const MAIN: &str = "(main)";

/// Every loop of the repository `repo` belongs to: the main work tree's, then each worktree's
/// (sorted by name). A worktree whose directory is gone is skipped.
pub(crate) fn all(repo: &Repo) -> Result<Vec<Entry>> {
    let common = repo.git2().commondir().to_path_buf();
    let main = git2::Repository::open(&common).map_err(crate::git::GitError::from)?;
    let mut out = Vec::new();
    if let Some(w) = main.workdir() {
        out.push(entry(MAIN, w)?);
    }
    let mut names: Vec<String> = main
        .worktrees()
        .map_err(crate::git::GitError::from)?
        .iter()
        .flatten()
        .flatten()
        .map(str::to_string)
        .collect();
    names.sort();
    for name in names {
        let Ok(wt) = main.find_worktree(&name) else {
            continue;
        };
        // A worktree another loop is still creating (no `.git` file yet) is not a loop yet.
        if wt.path().is_dir()
            && let Ok(e) = entry(&name, wt.path())
        {
            out.push(e);
        }
    }
    Ok(out)
}

fn entry(name: &str, path: &Path) -> Result<Entry> {
    let repo = Repo::discover(path)?;
    let branch = repo
        .git2()
        .head()
        .ok()
        .filter(|h| h.is_branch())
        .and_then(|h| h.shorthand().ok().map(str::to_string));
    Ok(Entry {
        name: name.to_string(),
        path: repo.root().to_path_buf(),
        branch,
        status: report(&repo)?,
    })
}

/// A loop ralph retired (SPEC §13): its worktree removed — merged, or its name taken by a new
/// loop — shown from the record and logs ralph kept in its state directory.
pub(crate) struct Retired {
    pub(crate) name: String,
    /// Its branch as it is called now.
    pub(crate) branch: String,
    /// The base branch's commit once the loop was merged into it; `None`: never merged.
    pub(crate) merged_at: Option<String>,
    /// Where its logs are kept.
    pub(crate) logs: PathBuf,
    pub(crate) status: Status,
}

impl Retired {
    /// A retired loop as ralph kept it (`worktree::retired` reads the records): its run as last
    /// recorded, and its logs.
    pub(crate) fn kept(
        name: String,
        branch: String,
        merged_at: Option<String>,
        logs: PathBuf,
        st: Option<RunState>,
    ) -> Retired {
        Retired {
            status: kept_status(st, &logs),
            name,
            branch,
            merged_at,
            logs,
        }
    }
}

/// What `status` says of a retired loop: its run as ralph recorded it, its last records.
fn kept_status(st: Option<RunState>, logs: &Path) -> Status {
    let records = state::tail_lines(&logs.join("iterations.log"), 3).unwrap_or_default();
    let parsed: Vec<iter_record::IterRecord> = records
        .iter()
        .filter_map(|r| iter_record::parse_iter_record(r))
        .collect();
    Status {
        stalled: st.as_ref().map_or_else(
            || iter_record::last_three_repeat(&parsed),
            |s| iter_record::last_three_keys_repeat(&s.last_keys),
        ),
        records,
        warning: None,
        refused: None,
        task_warnings: Vec::new(),
        running: false,
        pid: None,
        // A retired loop has no work tree, and no lock anyone could hold.
        locks: TreeLocks {
            own: None,
            git: PathBuf::new(),
        },
        task_file: st
            .as_ref()
            .map_or_else(PathBuf::new, |s| PathBuf::from(&s.task_file)),
        doc: None,
        done: st.as_ref().map_or(0, |s| s.done),
        total: st.as_ref().map_or(0, |s| s.total),
        remaining: Vec::new(),
        halt_reason: st.as_ref().and_then(|s| s.halt_reason),
        elapsed_s: st.as_ref().and_then(|s| elapsed(s, false)),
        st,
        other_task: None,
        question: None,
    }
}

/// The `ralph status --all --json` object (SPEC §13): the live loops, then the retired ones
/// (`path` null, `merged_at` and `logs` set).
pub(crate) fn all_to_json(entries: &[Entry], retired: &[Retired]) -> serde_json::Value {
    let live = entries.iter().map(|e| {
        let mut v = to_json(&e.status);
        v["name"] = e.name.clone().into();
        v["path"] = e.path.to_string_lossy().into_owned().into();
        v["branch"] = e.branch.clone().into();
        v
    });
    let kept = retired.iter().map(|r| {
        let mut v = to_json(&r.status);
        v["name"] = r.name.clone().into();
        v["path"] = serde_json::Value::Null;
        v["branch"] = r.branch.clone().into();
        v["merged_at"] = r.merged_at.clone().into();
        v["logs"] = r.logs.to_string_lossy().into_owned().into();
        v
    });
    let loops: Vec<serde_json::Value> = live.chain(kept).collect();
    json!({"schema_version": 1, "loops": loops})
}
