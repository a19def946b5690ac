//! What a run works on (SPEC §2.2): the targets resolved into a plan (checklist, table, CPM, or
//! a description to plan first), the plan of a recorded run, and the task source built from it.

use std::path::{Path, PathBuf};

use crate::cli::RunOptions;
use crate::commands::Context;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::files;
use crate::state::{Mode, RunState};
use crate::supervisor::source::{
    ChecklistSource, CpmSource, Source, StoriesSource, TableSource, cpm_error, table_error,
};
use crate::task::TASK_FILE;
use crate::task::cpm::{self, Phase, Targets};
use crate::task::document::{TaskDocument, load_task_file};
use crate::task::integrity::Baseline;
use crate::task::stories::{self, Stories};
use crate::task::table;

/// What a run works on, resolved from the targets (SPEC §2.2).
pub(super) enum Plan {
    Checklist {
        doc: Box<TaskDocument>,
        path: PathBuf,
        rel: String,
    },
    Cpm {
        targets: Targets,
    },
    Table {
        prd_path: PathBuf,
        progress_path: PathBuf,
        prd: Box<table::Prd>,
        progress: table::Progress,
    },
    /// `prd.json`'s user stories (SPEC §14); `rel` is repository-relative.
    Stories {
        rel: String,
        stories: Box<Stories>,
    },
    /// `ralph run "a description"`: plan first (a matching plan, else one planning run).
    Describe(String),
}

impl Plan {
    pub(super) fn name(&self) -> String {
        match self {
            Plan::Checklist { doc, .. } => doc.name.clone(),
            Plan::Cpm {
                targets: Targets::Spec(s),
            } => format!("spec {}", s.display()),
            Plan::Cpm {
                targets: Targets::Epics(e),
            } => format!("epics {}", cpm::epic_range(e)),
            Plan::Table { prd, .. } => prd.title.clone(),
            Plan::Stories { stories, .. } => stories.name(),
            Plan::Describe(d) => d.clone(),
        }
    }

    pub(super) fn counts(&self) -> (usize, usize) {
        match self {
            Plan::Checklist { doc, .. } => (doc.checklist.done(), doc.checklist.total()),
            Plan::Cpm { .. } | Plan::Describe(_) => (0, 0),
            Plan::Table { progress, .. } => (table::done_count(progress), progress.rows.len()),
            Plan::Stories { stories, .. } => (stories.passing(), stories.stories.len()),
        }
    }

    pub(super) fn mode(&self) -> Mode {
        match self {
            Plan::Checklist { .. } => Mode::Checklist,
            Plan::Cpm { targets } if targets.is_spec() => Mode::CpmSpec,
            Plan::Cpm { .. } => Mode::CpmEpic,
            Plan::Table { .. } | Plan::Describe(_) => Mode::Table,
            Plan::Stories { .. } => Mode::Stories,
        }
    }

    /// What `state.json` records so a resume finds the same work.
    pub(super) fn recorded_targets(&self) -> (String, Vec<String>) {
        match self {
            Plan::Checklist { rel, .. } => (rel.clone(), Vec::new()),
            Plan::Table {
                prd_path,
                progress_path,
                ..
            } => (
                prd_path.to_string_lossy().into_owned(),
                vec![
                    prd_path.to_string_lossy().into_owned(),
                    progress_path.to_string_lossy().into_owned(),
                ],
            ),
            Plan::Stories { rel, .. } => (rel.clone(), vec![rel.clone()]),
            Plan::Describe(_) => (String::new(), Vec::new()),
            Plan::Cpm { targets } => {
                let paths: Vec<String> = match targets {
                    Targets::Spec(s) => vec![s.to_string_lossy().into_owned()],
                    Targets::Epics(e) => {
                        e.iter().map(|p| p.to_string_lossy().into_owned()).collect()
                    }
                };
                (paths.first().cloned().unwrap_or_default(), paths)
            }
        }
    }
}

/// Resolve the targets of a new run into a plan.
pub(super) fn resolve_plan(ctx: &Context, root: &Path, targets: &[String]) -> Result<Plan> {
    let has_cpm_target = targets.iter().any(|t| cpm::is_cpm_target(t));
    // Without a target the task is at the repository root, wherever ralph is started (as
    // `.ralph/` and `ralph status` are); a task file elsewhere is named as a target.
    let task_here = root.join(TASK_FILE).exists();
    let auto_cpm = targets.is_empty() && !task_here && root.join(cpm::EPICS_DIR).is_dir();
    if has_cpm_target || auto_cpm {
        let targets = cpm::resolve_targets(root, targets).map_err(cpm_error)?;
        return Ok(Plan::Cpm { targets });
    }
    match targets {
        [] if !task_here
            && root.join(table::PRD_FILE).is_file()
            && root.join(table::PROGRESS_FILE).is_file() =>
        {
            return load_table(
                root,
                &root.join(table::PRD_FILE),
                &root.join(table::PROGRESS_FILE),
            );
        }
        [] if !task_here && story_file(root).is_some() => {
            return load_stories(root, &story_file(root).unwrap_or_default());
        }
        [one] => {
            let path = ctx.cwd.join(one);
            let rel = relative_to(&path, root);
            if path.extension().is_some_and(|e| e == "json") {
                return load_stories(root, &path);
            }
            if path.is_file() && path.file_name().is_some_and(|n| n == table::PRD_FILE) {
                let progress = path.with_file_name(table::PROGRESS_FILE);
                return load_table(root, &path, &progress);
            }
            if path.is_file() && rel.starts_with(&format!("{}/", cpm::PLANS_DIR)) {
                return load_table(root, &path, &root.join(table::PROGRESS_FILE));
            }
            if !path.exists() && one.trim().contains(char::is_whitespace) && !one.ends_with(".md") {
                return Ok(Plan::Describe(one.trim().to_string()));
            }
        }
        _ => {}
    }
    let path = resolve_target(root, &ctx.cwd, targets)?;
    let doc = Box::new(load_task_file(&path)?);
    let rel = relative_to(&path, root);
    Ok(Plan::Checklist { doc, path, rel })
}

/// Read and validate a task table. A plan under docs/plans/ without a progress table gets one
/// (every task PENDING), written when the run starts.
pub(super) fn load_table(root: &Path, prd_path: &Path, progress_path: &Path) -> Result<Plan> {
    let prd_rel = relative_to(prd_path, root);
    let prd_text = files::read_text(prd_path).map_err(|e| Error::user(e.to_string()))?;
    let prd = table::parse_prd(Path::new(&prd_rel), &prd_text).map_err(table_error)?;
    let progress_rel = relative_to(progress_path, root);
    let progress_text = match files::read_text_if_exists(progress_path) {
        Ok(Some(t)) => t,
        Ok(None) => {
            let titles: Vec<String> = prd.tasks.iter().map(|t| t.title.clone()).collect();
            table::scaffold(&prd.goal, &titles, &prd.promise).1
        }
        Err(e) => return Err(Error::user(e.to_string())),
    };
    let progress =
        table::parse_progress(Path::new(&progress_rel), &progress_text).map_err(table_error)?;
    table::validate(
        &prd,
        Path::new(&prd_rel),
        &progress,
        Path::new(&progress_rel),
    )
    .map_err(table_error)?;
    Ok(Plan::Table {
        prd_path: PathBuf::from(prd_rel),
        progress_path: PathBuf::from(progress_rel),
        prd: Box::new(prd),
        progress,
    })
}

/// The story file found without a target: `prd.json` at the root, else where the snarktank
/// layout keeps it.
fn story_file(root: &Path) -> Option<PathBuf> {
    [stories::FILE, stories::NESTED]
        .iter()
        .map(|f| root.join(f))
        .find(|p| p.is_file())
}

/// Read and validate a story file (`prd.json`).
pub(super) fn load_stories(root: &Path, path: &Path) -> Result<Plan> {
    let rel = relative_to(path, root);
    let text = files::read_text(path).map_err(|e| Error::user(e.to_string()))?;
    let stories = stories::parse(Path::new(&rel), &text).map_err(Error::user)?;
    Ok(Plan::Stories {
        rel,
        stories: Box::new(stories),
    })
}

/// The plan of the run being resumed.
pub(super) fn recorded_plan(root: &Path, p: &RunState) -> Result<Plan> {
    match p.mode {
        Mode::CpmSpec => Ok(Plan::Cpm {
            targets: Targets::Spec(PathBuf::from(&p.task_file)),
        }),
        Mode::CpmEpic => Ok(Plan::Cpm {
            targets: Targets::Epics(p.targets.iter().map(PathBuf::from).collect()),
        }),
        Mode::Table => match p.targets.as_slice() {
            [prd, progress] => load_table(root, &root.join(prd), &root.join(progress)),
            _ => Err(
                Error::user("state.json does not name the task table of the run")
                    .with_hint("start over with `ralph run --reset`"),
            ),
        },
        Mode::Stories => load_stories(root, &root.join(&p.task_file)),
        Mode::Checklist => {
            let path = root.join(&p.task_file);
            let doc = Box::new(load_task_file(&path)?);
            Ok(Plan::Checklist {
                doc,
                path,
                rel: p.task_file.clone(),
            })
        }
    }
}

/// Turn a plan into the loop's task source.
pub(super) fn build_source(
    plan: &Plan,
    root: &Path,
    options: &RunOptions,
    rollup: Option<PathBuf>,
    settings: &Settings,
) -> Result<Source> {
    Ok(match plan {
        Plan::Checklist { doc, path, rel } => Source::Checklist(ChecklistSource {
            path: path.clone(),
            rel: rel.clone(),
            previous: doc.checklist.clone(),
            baseline: Baseline::of(&doc.checklist),
        }),
        Plan::Cpm { targets } => {
            let spec = match targets {
                Targets::Spec(s) => Some(root.join(s)),
                Targets::Epics(_) => None,
            };
            // A first guess for --dry-run and a run without a roll-up: with one, the roll-up's
            // exit code before the first iteration decides the phase (SPEC §3.4).
            let phase = match targets {
                Targets::Spec(s) if cpm::epics_for_spec(root, s).map_err(cpm_error)?.is_empty() => {
                    Phase::Planning
                }
                _ => Phase::Delivery,
            };
            let test_runner = settings
                .test_command
                .clone()
                .or_else(|| cpm::discover_test_runner(root, spec.as_deref()).map(|(cmd, _)| cmd));
            Source::Cpm(CpmSource::new(
                root.to_path_buf(),
                targets.clone(),
                rollup,
                phase,
                options.story_filter.clone(),
                test_runner,
            ))
        }
        Plan::Table {
            prd_path,
            progress_path,
            prd,
            progress,
        } => Source::Table(TableSource {
            prd_path: root.join(prd_path),
            prd_rel: prd_path.to_string_lossy().into_owned(),
            progress_path: root.join(progress_path),
            progress_rel: progress_path.to_string_lossy().into_owned(),
            prd: (**prd).clone(),
            progress: progress.clone(),
            current: None,
            review: options.review,
            pending: None,
        }),
        Plan::Stories { rel, stories } => Source::Stories(StoriesSource::new(
            root.join(rel),
            rel.clone(),
            (**stories).clone(),
        )),
        Plan::Describe(_) => {
            return Err(Error::user("a description must be planned before it runs"));
        }
    })
}

/// The task file of a checklist run: the one target (relative to where ralph was started), else
/// `RALPH_TASK.md` at the repository root.
fn resolve_target(root: &Path, cwd: &Path, targets: &[String]) -> Result<PathBuf> {
    match targets {
        [] => {
            let p = root.join(TASK_FILE);
            if p.exists() {
                Ok(p)
            } else {
                Err(Error::user(format!(
                    "no {TASK_FILE} at the repository root `{}`",
                    root.display()
                ))
                .with_hint(
                    "create one with `ralph init \"describe the task\" --criterion \"...\"`, or name a task file: `ralph run path/to/TASK.md`",
                ))
            }
        }
        [one] => Ok(cwd.join(one)),
        many => Err(Error::usage(format!(
            "a checklist run takes one task file, got {}: {}",
            many.len(),
            many.join(", ")
        ))),
    }
}

pub(super) fn relative_to(path: &Path, root: &Path) -> String {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (p, r) = (canon(path), canon(root));
    p.strip_prefix(&r)
        .map(|rel| rel.to_string_lossy().into_owned())
        .unwrap_or_else(|_| p.to_string_lossy().into_owned())
}
