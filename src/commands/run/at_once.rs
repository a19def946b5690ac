//! Endings before the loop (SPEC §3.2, §5.3, §2.3): nothing to run, a table with nothing left,
//! a task already complete (by its checks now, where there are any), a recorded run whose task
//! file lost criteria of its baseline — each closed through the run's close (`close::Before`).

use super::begin::Continuation;
use super::close::Before;
use super::plan::Plan;
use super::resolve::Resolved;
use crate::error::{Error, Result};
use crate::signals::Interrupts;
use crate::state::{self, HaltReason, Mode, RunState};
use crate::supervisor;
use crate::supervisor::decide::Halt;
use crate::supervisor::preflight::{Evidence, fresh_evidence};
use crate::supervisor::source::{Source, cpm_error};
use crate::task::cpm::Targets;
use crate::task::integrity::Baseline;
use crate::task::table;
use crate::ui::Ui;

/// Plans that end before anything starts: nothing to run in CPM auto-discovery, a table with
/// only BLOCKED tasks left (SPEC §3.2: PARTIAL, spawning nothing), a table all DONE or a
/// checklist all checked when no check could say otherwise. Where a test or verdict command is
/// set, "already complete" is the evidence's to say, checked now (SPEC §5.3: `evidence_now`).
/// An unfinished run's last iteration may have left work uncommitted or unrecorded: a resume of
/// it (and a new run on a tree it left dirty) never ends here, before that is settled under the
/// lock (`Begin::settle`).
pub(super) fn end_at_once(ui: Ui, r: &Resolved, how: Continuation) -> Result<Option<i32>> {
    let unfinished = r
        .prior
        .as_ref()
        .is_some_and(|p| p.halt_reason != Some(HaltReason::Complete));
    if unfinished
        && (how == Continuation::Resume || (!r.settings.no_commit && r.repo.is_dirty()?))
    {
        return Ok(None);
    }
    let checked = r.settings.test_command.is_some() || r.settings.verdict_command.is_some();
    match &r.plan {
        Plan::Cpm {
            targets: Targets::Epics(e),
        } if e.is_empty() => {
            let said = crate::task::cpm::nothing_to_run_message(&r.root).map_err(cpm_error)?;
            let end = Before::new(ui, Halt::Complete, move |ui| ui.plain(&said));
            Ok(Some(end.at(0, (0, 0)).close()))
        }
        Plan::Table { progress, prd, .. } if table::next_task(progress).is_none() => {
            let mut finished = progress.clone();
            let overall = table::finish(&mut finished);
            let (done, total) = (table::done_count(&finished), finished.rows.len());
            let complete = match overall {
                table::OverallStatus::Complete if checked => return Ok(None),
                table::OverallStatus::Complete => true,
                _ => false,
            };
            let lines = table::summary(&finished);
            let halt = if complete {
                Halt::Complete
            } else {
                Halt::Partial(lines.clone())
            };
            let end = Before::new(ui, halt, move |ui| {
                if complete {
                    ui.success(&format!(
                        "The task table is already COMPLETE ({done}/{total} tasks done). Nothing to run."
                    ));
                } else {
                    ui.alert("## ⚠️ RALPH Loop — PARTIAL: no task is left to work");
                }
                ui.plain(&format!("<promise>{}</promise>", prd.promise));
                for l in lines {
                    ui.plain(&l);
                }
            });
            Ok(Some(end.at(0, (done, total)).close()))
        }
        Plan::Checklist { doc, rel, .. }
            if doc.checklist.remaining().next().is_none()
                && !checked
                && gone_from_baseline(r.prior.as_ref(), &doc.checklist).is_empty() =>
        {
            let (done, total) = (doc.checklist.done(), doc.checklist.total());
            let end = Before::new(ui, Halt::Complete, |ui| {
                ui.success(&format!(
                    "{rel}: already complete ({done}/{total} criteria checked). Nothing to run."
                ));
                run_again(ui, r, &format!("once {rel} has an unchecked criterion"));
            });
            Ok(Some(end.at(0, (done, total)).close()))
        }
        Plan::Stories { rel, stories }
            if !checked && stories.passing() == stories.stories.len() =>
        {
            let (done, total) = (stories.passing(), stories.stories.len());
            let end = Before::new(ui, Halt::Complete, |ui| {
                ui.success(&format!(
                    "{rel}: already complete ({done}/{total} stories pass). Nothing to run."
                ));
                run_again(ui, r, &format!("once {rel} has a story that does not pass"));
            });
            Ok(Some(end.at(0, (done, total)).close()))
        }
        _ => Ok(None),
    }
}

/// What runs again on a task found complete, from where the user stands (`what`: once the task
/// has work left). A loop's worktree started from a commit: what it runs is the task as
/// committed there, so an edit in the main work tree is committed first.
fn run_again(ui: Ui, r: &Resolved, what: &str) {
    let flag = crate::worktree::loop_flag(&r.repo);
    let what = if flag.is_empty() {
        what.to_string()
    } else {
        format!("{what} in the commit the loop starts from (commit the change first)")
    };
    ui.next(&format!("ralph run{flag}"), &what);
}

/// `ralph run --reset` on a checklist's `task_file` (named unless it is the one `ralph run`
/// finds by itself), from where the user stands.
fn start_over(r: &Resolved, task_file: &str) -> String {
    let flag = crate::worktree::loop_flag(&r.repo);
    let target = if task_file == crate::task::TASK_FILE {
        String::new()
    } else {
        format!(" {}", shell_words::quote(task_file))
    };
    format!("ralph run --reset{flag}{target}")
}

/// A task whose criteria are still `ralph init`'s examples (marked by
/// [`crate::task::placeholder::MARK`]) is refused before iteration 1: no agent works on
/// "EXAMPLE — replace me". The error names the first one's `file:line` and how to fix it.
pub(super) fn refuse_placeholders(r: &Resolved) -> Result<()> {
    use crate::task::placeholder::{is_placeholder, line_of};
    let (file, text, criterion, hint) = match &r.plan {
        Plan::Checklist { doc, rel, .. } => {
            let Some(c) = doc.checklist.remaining().find(|c| is_placeholder(&c.text)) else {
                return Ok(());
            };
            let hint = format!(
                "replace the example criteria in {rel} with your own (`- [ ] what done looks like`), or write it anew: `ralph init --force --criterion \"...\"`"
            );
            return Err(placeholder_error(rel, c.line, &c.text, hint));
        }
        Plan::Table { prd_path, prd, .. } => {
            let Some(c) = prd
                .tasks
                .iter()
                .flat_map(|t| &t.criteria)
                .find(|c| is_placeholder(c))
            else {
                return Ok(());
            };
            // The plan names it from the repository's root.
            let rel = prd_path.strip_prefix(&r.root).unwrap_or(prd_path);
            let text = crate::files::read_text(&r.root.join(rel)).unwrap_or_default();
            let hint = "replace it with the task's own acceptance criteria, or scaffold the table with its tasks: `ralph init --table --force \"GOAL\" --criterion \"TASK\"`".to_string();
            (rel.display().to_string(), text, c.clone(), hint)
        }
        _ => return Ok(()),
    };
    // The criterion as read may have lost its Markdown (backquotes): then the marker's line.
    let mark = crate::task::placeholder::MARK;
    let line = line_of(&text, &criterion)
        .or_else(|| line_of(&text, mark))
        .unwrap_or(1);
    Err(placeholder_error(&file, line, &criterion, hint))
}

fn placeholder_error(file: &str, line: usize, criterion: &str, hint: String) -> Error {
    Error::user(format!(
        "{file}:{line}: `{criterion}` is an example `ralph init` wrote, not a criterion: nothing was run"
    ))
    .with_hint(hint)
}

/// The criteria an unfinished earlier run started with that the task file no longer has: such
/// a file is not "already complete" (SPEC §5.3), whether the run is resumed or asked about.
pub(super) fn gone_from_baseline(
    prior: Option<&RunState>,
    now: &crate::task::checklist::Checklist,
) -> Vec<String> {
    let Some(p) = prior.filter(|p| p.halt_reason != Some(HaltReason::Complete)) else {
        return Vec::new();
    };
    crate::task::integrity::review(&recorded_baseline(p), now).tampered
}

/// The criteria a recorded run started with.
pub(super) fn recorded_baseline(p: &RunState) -> Baseline {
    Baseline {
        unchecked: p.baseline.clone(),
        checked: p.baseline_checked.clone(),
        unchecked_outside: p.baseline_outside.clone(),
    }
}

/// A resumed checklist run whose task file lost criteria of its baseline (while ralph was down,
/// or in the iteration that halted it as tampered) halts as tampered again at once (exit 8),
/// spawning nothing, and says which.
pub(super) fn halt_if_tampered(
    ui: Ui,
    r: &Resolved,
    resumed: Option<&RunState>,
    source: &Source,
) -> Result<Option<i32>> {
    let (Some(p), Source::Checklist(c)) = (resumed, source) else {
        return Ok(None);
    };
    let gone = crate::task::integrity::review(&c.baseline, &c.previous).tampered;
    let counts = (c.previous.done(), c.previous.total());
    halt_tampered(ui, r, p, &source.task_file(), &gone, counts)
}

/// `ralph run` unattended, meeting an unfinished checklist run whose task file lost criteria
/// of its baseline: that run halts as tampered (exit 8), as its resume would, rather than
/// leaving a choice nobody is there to make. In a terminal the user chooses.
pub(super) fn halt_if_left_tampered(
    ui: Ui,
    r: &Resolved,
    p: &RunState,
    yes: bool,
) -> Result<Option<i32>> {
    let Plan::Checklist { doc, rel, .. } = &r.plan else {
        return Ok(None);
    };
    if supervisor::is_interactive(yes) || p.mode != Mode::Checklist || *rel != p.task_file {
        return Ok(None);
    }
    let gone = gone_from_baseline(Some(p), &doc.checklist);
    let counts = (doc.checklist.done(), doc.checklist.total());
    halt_tampered(ui, r, p, rel, &gone, counts)
}

/// Halt the recorded run `p` as tampered when criteria of its baseline are `gone` from
/// `task_file` (whose criteria now count `done`/`total`), saying which.
pub(super) fn halt_tampered(
    ui: Ui,
    r: &Resolved,
    p: &RunState,
    task_file: &str,
    gone: &[String],
    counts: (usize, usize),
) -> Result<Option<i32>> {
    if gone.is_empty() {
        return Ok(None);
    }
    let flag = crate::worktree::loop_flag(&r.repo);
    let said = |ui: Ui| {
        ui.alert("## ⛔ RALPH Loop — Criteria tampered");
        ui.plain(&format!(
            "{task_file} no longer has {} of the criteria run {} started with:",
            gone.len(),
            p.run_id
        ));
        for g in gone {
            ui.plain(&format!("  - [ ] {g}"));
        }
        ui.plain("\n\"All boxes checked\" must not be reachable by deleting boxes.");
        ui.next(
            &format!("ralph resume{flag}"),
            &format!(
                "continue run {}, once the criteria are back in {} (see git log -p)",
                p.run_id, p.task_file
            ),
        );
        ui.next(
            &start_over(r, &p.task_file),
            "a new run on the task as it is now",
        );
    };
    let end = Before::new(ui, Halt::Tampered(gone.to_vec()), said);
    Ok(Some(
        end.of_run(&r.rd, p.clone()).at(p.iteration, counts).close(),
    ))
}

/// SPEC §5.3: a source that says it is done is complete only when its checks pass now (a
/// `resumed` run is then recorded as complete). `Err(exit code)` when the run ends here;
/// `Ok(Some(evidence))` carries a failed check's output to the first prompt.
pub(super) async fn evidence_now(
    ui: Ui,
    r: &Resolved,
    source: &Source,
    run_id: &str,
    interrupts: &mut Interrupts,
    resumed: Option<&RunState>,
) -> Result<std::result::Result<Option<Evidence>, i32>> {
    if !source.claims_complete() {
        return Ok(Ok(None));
    }
    r.rd.ensure_runtime()?;
    let dir = r.rd.run_dir(run_id);
    state::create_private_dir(&dir)?;
    let transcript = dir.join("evidence.log");
    let counts = source.counts();
    let Some(evidence) = fresh_evidence(&r.root, &r.settings, &transcript, interrupts).await?
    else {
        let end = Before::new(ui, Halt::Interrupted, |ui| {
            ui.alert("Interrupted while checking: nothing was run");
        });
        return Ok(Err(end.at(0, counts).close()));
    };
    if evidence.complete {
        let (done, total) = counts;
        let end = Before::new(ui, Halt::Complete, |ui| {
            ui.success(&format!(
                "{}: already complete ({done}/{total} {} done, and its checks pass now). Nothing to run.",
                source.task_file(),
                source.unit()
            ));
            for l in source.completion_lines() {
                ui.plain(&l);
            }
            run_again(ui, r, &format!("once {} has work left", source.task_file()));
        });
        let end = match resumed {
            Some(p) => end.of_run(&r.rd, p.clone()).at(p.iteration, counts),
            None => end.at(0, counts),
        };
        return Ok(Err(end.close()));
    }
    ui.note(&format!(
        "every {} is marked done, but the checks fail now: the loop goes on (see {})",
        source.unit(),
        transcript.display()
    ));
    Ok(Ok(Some(evidence)))
}
