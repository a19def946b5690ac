//! The iteration prompt: the `cpm:ralph` skill's template, minus what the supervisor now does
//! itself.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{leading_number, one_line};

/// Which step of a run the iteration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Spec mode before any epic exists (verdict exit 4): run `/cpm:epics` on the spec once.
    Planning,
    /// `/cpm:do` on the epics, in file-name order.
    Delivery,
}

/// What the prompt is built from.
#[derive(Debug, Clone)]
pub(crate) struct PromptParams<'a> {
    /// The spec in spec mode; `None` in epic mode.
    pub(crate) mode_spec: Option<&'a Path>,
    /// The epics to work (epic mode: the resolved targets; spec mode: the spec's epics so far).
    pub(crate) epics: &'a [PathBuf],
    /// Planning or delivery. Planning needs a spec: without one the Delivery prompt is built.
    pub(crate) phase: Phase,
    /// This iteration's number (1-based).
    pub(crate) iteration: u32,
    /// The iteration cap.
    pub(crate) max_iterations: u32,
    /// `--story-filter` (e.g. `1-3`, `!4`).
    pub(crate) story_filter: Option<&'a str>,
    /// The discovered test runner.
    pub(crate) test_runner: Option<&'a str>,
    /// Continuing an earlier run.
    pub(crate) resuming: bool,
    /// The task budget (`###` task headings in the target epics).
    pub(crate) task_budget: Option<u32>,
}

/// The autonomy overrides, verbatim from the skill's template (which uses `--` for dashes).
const AUTONOMY: &str = "Make all decisions autonomously -- choose the most reasonable option for every AskUserQuestion. Use inline planning for all stories. Task complete means: all tagged criteria ([unit]/[integration]/[feature]) have passing test results, and all [manual] criteria have self-assessment lines in the progress file. A [target] criterion is checkable only against the real deployment target, so never self-assess one and never count it as met -- record it as target-only -- unverified in this environment, name it in the run summary, and let the other criteria decide completion. An unrecognised tag is reported the same way, never self-assessed. A failure (for the 3-strike skip rule) is a test command exit code != 0 after a code change attempt -- tool errors and permission denials are retries, not failures. If acceptance criteria are ambiguous and completion cannot be determined, mark the story Blocked -- criteria ambiguous and continue to the next story. At the do retro consumption gate, do not block -- branch by category: auto-apply safe categories (codebase discoveries, patterns worth reusing), recording Retro applied: {nn} {category} applied (autonomous, safe-category) -- {what it did} and carrying each as context; defer the rest (scope surprises, criteria gaps, complexity underestimates, testing gaps) as Retro applied: {nn} {category} deferred (autonomous run, unreviewed); smooth deliveries informational; never auto-retire. List both applied and deferred observations in the run summary. At the do Change Type Decision gate, do not block and do not pick one of its options -- take do's autonomous branch: inline edit, retro observation, or amend the open epic doc so later stories inherit the fix; never /cpm:pivot. Amend only on a citable contradiction, and record a Pivot deferred breadcrumb for each artefact left behind. Report amendments separately from the deferred observations.";

/// The skill's cpm:epics gate override: only a Planning iteration runs cpm:epics, so only
/// its prompt carries it (a Delivery prompt never names cpm:epics at all).
const EPICS_GATE: &str = " If a cpm:epics gate is reached, do not block -- take cpm:epics' Autonomous Mode branch, and never restate its rules here.";

/// Kept from the template: the agent's own per-story commits give the history its subjects
/// (ralph commits whatever is left after the iteration) and nothing is ever pushed.
const COMMITS: &str = " Commit after each completed story. Keep all commits local.";

/// Build the iteration prompt: the skill's template, assembled for ralph.
///
/// Kept: the opening (`/cpm:do` on the epics in order, or the spec's phase), every autonomy
/// override, the commit rule, and the story-filter, test-runner, task-budget and resume
/// clauses (each only when set). Added: one sentence naming the iteration and that each
/// iteration starts from a fresh context (there is no continuing session any more).
///
/// Removed, because the supervisor now does it itself:
/// - the iteration-log clause (`{log_clause}`: append an `ITER` line, compare the last three,
///   print STALLED and stop) — ralph writes the `ITER` record to [`log_path`] after every
///   iteration from facts it measured (SPEC §5.4) and applies the STALLED rule (§6, exit 4);
///   an agent-written copy would be a second, untrusted writer of the same file;
/// - the completion clause (run `coverage-rollup.sh --epic/--spec ... --verdict`, branch on
///   0/3/5/other, print `COVERAGE:` and the promise) — ralph runs the roll-up after every
///   iteration ([`rollup_argv`]), applies the exit-code contract (§3.3), prints the
///   `COVERAGE:` line and the completion word itself ([`completion_lines`]) and halts on
///   exit 5 with the TARGET-ONLY rows it counted ([`Coverage`]); the prompt therefore names
///   neither the roll-up path nor a promise word the agent could echo;
/// - "stop the loop -- delete .claude/ralph-loop.local.md" — there is no stop hook or state
///   file; ralph ends the run;
/// - spec mode's phase predicate (run the roll-up at the start of every iteration, print
///   `COUNTS:`, branch on exit 1/2/4 and the untraced count) — ralph reads the verdict and
///   picks the phase, so a Planning prompt only runs `/cpm:epics` and a Delivery prompt only
///   runs `/cpm:do`; the partial-set report on `untraced > 0` is ralph's halt (exit 9);
/// - spec mode's "strip `[plan]` tags from the epic docs this run generated" — the caller
///   applies [`strip_plan_markers`] to the epics `/cpm:epics` wrote once the roll-up confirms
///   phase 2, before the first Delivery iteration, as the pre-flight does for the others;
/// - the cpm:epics gate override in Delivery prompts — only a Planning iteration runs
///   cpm:epics, and a Delivery prompt must never name it.
///
/// [`log_path`]: super::log_path
/// [`rollup_argv`]: super::rollup_argv
/// [`completion_lines`]: super::completion_lines
/// [`Coverage`]: super::Coverage
/// [`strip_plan_markers`]: super::strip_plan_markers
pub(crate) fn prompt(p: &PromptParams) -> String {
    let phase = match (p.phase, p.mode_spec) {
        (Phase::Planning, Some(_)) => Phase::Planning,
        _ => Phase::Delivery,
    };
    let mut out = format!(
        "This is iteration {} of {} of a run supervised by ralph; every iteration starts with a fresh context, so take where the work stands from the epic docs, their progress files and git, never from memory.\n\n",
        p.iteration, p.max_iterations
    );
    out.push_str(&the_work(p, phase));
    out.push_str("\n\n");
    out.push_str(AUTONOMY);
    if phase == Phase::Planning {
        out.push_str(EPICS_GATE);
    }
    out.push_str(COMMITS);
    let clauses = clauses(p, phase);
    if !clauses.is_empty() {
        out.push_str("\n\n");
        out.push_str(&clauses.join("\n"));
    }
    out.push_str("\n\n");
    out.push_str(if phase == Phase::Planning {
        "The supervisor reads the coverage roll-up after this iteration to decide the next phase, so do not run it and do not start /cpm:do in this iteration."
    } else {
        "The supervisor runs the coverage roll-up after every iteration and decides completion from its exit code, so never run it to decide whether you are done and never announce completion yourself; when no further progress is possible, say why and stop."
    });
    out
}

/// The opening's work: the spec's planning phase, the spec's epics, or the epics given.
fn the_work(p: &PromptParams, phase: Phase) -> String {
    let list = epic_list(p.epics);
    let mut out = String::new();
    match (phase, p.mode_spec) {
        (Phase::Planning, Some(spec)) => {
            let spec = one_line(&spec.to_string_lossy());
            let _ = write!(
                out,
                "Work spec {spec} to completion. This iteration is the planning phase: no epics exist for this spec yet, so run /cpm:epics on {spec}, taking cpm:epics' Autonomous Mode branch, and end the iteration there. Run it once: never run /cpm:epics twice in one run, since a second run writes a fresh set of epics instead of completing the set already there, and leave every epic doc already on disk exactly as it is."
            );
        }
        (_, Some(spec)) => {
            let spec = one_line(&spec.to_string_lossy());
            let _ = write!(
                out,
                "Work spec {spec} to completion: run /cpm:do on every epic doc naming {spec} as its source spec, in filename order"
            );
            if !list.is_empty() {
                let _ = write!(out, " ({list})");
            }
            out.push_str(", continuing to each next epic automatically.");
        }
        (_, None) => {
            let _ = write!(
                out,
                "Run /cpm:do on epics {} sequentially ({list}). Continue to each next epic automatically.",
                epic_range(p.epics)
            );
        }
    }
    out
}

/// The epics' paths in file-name order, on one line.
fn epic_list(epics: &[PathBuf]) -> String {
    let mut epics: Vec<&PathBuf> = epics.iter().collect();
    epics.sort_by(|a, b| {
        a.file_name()
            .cmp(&b.file_name())
            .then_with(|| a.as_os_str().cmp(b.as_os_str()))
    });
    one_line(
        &epics
            .iter()
            .map(|e| e.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The story-filter, test-runner, task-budget and resume clauses, each only when set.
fn clauses(p: &PromptParams, phase: Phase) -> Vec<String> {
    let mut clauses: Vec<String> = Vec::new();
    if let Some(f) = p.story_filter.map(one_line).filter(|f| !f.is_empty()) {
        clauses.push(format!(
            "Story filter: {f} -- work only the stories it selects (1-3 is a range, !4 excludes story 4) and leave the others untouched."
        ));
    }
    if let Some(t) = p.test_runner.map(one_line).filter(|t| !t.is_empty()) {
        clauses.push(format!(
            "Test runner: {t} -- use it for the tagged criteria's test results."
        ));
    }
    if let Some(n) = p.task_budget {
        clauses.push(format!(
            "Task budget: {n} tasks, estimate ~2000 tokens per task."
        ));
    }
    if p.resuming {
        clauses.push(if phase == Phase::Planning {
            "Resuming an earlier run: if a cpm:epics progress file for this spec is under docs/plans, continue the generation it records instead of starting over.".to_string()
        } else {
            "Resuming an earlier run: leave finished stories alone and continue from the first story whose Status is not Complete.".to_string()
        });
    }
    clauses
}

/// The `{epic_range}` label: the epics' numbers, runs collapsed (`23-26`, `23-24, 26`); file
/// stems for epics without a number.
pub(crate) fn epic_range(epics: &[PathBuf]) -> String {
    let mut numbers: Vec<u32> = Vec::new();
    let mut others: Vec<String> = Vec::new();
    for e in epics {
        let name = e.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match leading_number(name) {
            Some(n) => numbers.push(n),
            None => others.push(
                e.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
        }
    }
    numbers.sort_unstable();
    numbers.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        let mut end = start;
        while i + 1 < numbers.len() && numbers[i + 1] == end.saturating_add(1) {
            i += 1;
            end = numbers[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.extend(others);
    one_line(&parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params<'a>(spec: Option<&'a Path>, epics: &'a [PathBuf], phase: Phase) -> PromptParams<'a> {
        PromptParams {
            mode_spec: spec,
            epics,
            phase,
            iteration: 2,
            max_iterations: 50,
            story_filter: None,
            test_runner: None,
            resuming: false,
            task_budget: None,
        }
    }

    #[test]
    fn delivery_prompt_in_epic_mode() {
        let epics = [
            PathBuf::from("docs/epics/26-epic-d.md"),
            PathBuf::from("docs/epics/23-epic-a.md"),
            PathBuf::from("docs/epics/24-epic-b.md"),
        ];
        let p = prompt(&params(None, &epics, Phase::Delivery));
        assert!(
            p.starts_with("This is iteration 2 of 50 of a run supervised by ralph;"),
            "{p}"
        );
        assert!(
            p.contains(
                "Run /cpm:do on epics 23-24, 26 sequentially (docs/epics/23-epic-a.md \
                 docs/epics/24-epic-b.md docs/epics/26-epic-d.md). Continue to each next epic \
                 automatically."
            ),
            "{p}"
        );
        assert!(p.contains(AUTONOMY));
        assert!(p.contains("Commit after each completed story. Keep all commits local."));
        assert!(!p.contains("cpm:epics"), "{p}");
        for gone in [
            "coverage-rollup",
            "ALL_EPICS_COMPLETE",
            "SPEC_DELIVERED",
            "ralph-loop.local.md",
            "ITER",
            "STALLED",
            "Story filter:",
            "Test runner:",
            "Task budget:",
            "Resuming",
            "<promise>",
        ] {
            assert!(!p.contains(gone), "{gone} in {p}");
        }
        // Plain text, ASCII dashes for the template's own dashes.
        assert!(!p.contains('`') && !p.contains("```"));
        // Epic-mode Planning has no spec to plan: it is the Delivery prompt.
        assert_eq!(prompt(&params(None, &epics, Phase::Planning)), p);
    }

    #[test]
    fn planning_and_delivery_prompts_in_spec_mode() {
        let spec = Path::new("docs/specifications/45-spec-login.md");
        let planning = prompt(&params(Some(spec), &[], Phase::Planning));
        assert!(planning.contains(
            "run /cpm:epics on docs/specifications/45-spec-login.md, taking cpm:epics' \
             Autonomous Mode branch, and end the iteration there"
        ));
        assert!(planning.contains("never run /cpm:epics twice"));
        assert!(planning.contains(EPICS_GATE.trim()));
        assert!(!planning.contains("Run /cpm:do on"));
        assert!(!planning.contains("SPEC_DELIVERED"));

        let epics = [
            PathBuf::from("docs/epics/45-02-epic-b.md"),
            PathBuf::from("docs/epics/45-01-epic-a.md"),
        ];
        let delivery = prompt(&params(Some(spec), &epics, Phase::Delivery));
        assert!(delivery.contains(
            "Work spec docs/specifications/45-spec-login.md to completion: run /cpm:do on every \
             epic doc naming docs/specifications/45-spec-login.md as its source spec, in filename \
             order (docs/epics/45-01-epic-a.md docs/epics/45-02-epic-b.md), continuing to each \
             next epic automatically."
        ));
        assert!(!delivery.contains("cpm:epics"), "{delivery}");
        assert!(!delivery.contains("SPEC_DELIVERED") && !delivery.contains("coverage-rollup"));
        let none = prompt(&params(Some(spec), &[], Phase::Delivery));
        assert!(none.contains("in filename order, continuing"), "{none}");
    }

    #[test]
    fn optional_clauses_appear_only_when_set() {
        let epics = [PathBuf::from("docs/epics/23-epic-a.md")];
        let mut p = params(None, &epics, Phase::Delivery);
        p.story_filter = Some("1-3");
        p.test_runner = Some("cargo test\n--all");
        p.task_budget = Some(12);
        p.resuming = true;
        let text = prompt(&p);
        assert!(text.contains(
            "Story filter: 1-3 -- work only the stories it selects (1-3 is a range, !4 excludes \
             story 4) and leave the others untouched."
        ));
        assert!(
            text.contains("Test runner: cargo test --all -- use it"),
            "{text}"
        );
        assert!(text.contains("Task budget: 12 tasks, estimate ~2000 tokens per task."));
        assert!(text.contains("Resuming an earlier run: leave finished stories alone"));
        for (field, marker) in [
            ("story_filter", "Story filter:"),
            ("test_runner", "Test runner:"),
            ("task_budget", "Task budget:"),
            ("resuming", "Resuming"),
        ] {
            let mut q = p.clone();
            match field {
                "story_filter" => q.story_filter = None,
                "test_runner" => q.test_runner = Some("  "),
                "task_budget" => q.task_budget = None,
                _ => q.resuming = false,
            }
            let text = prompt(&q);
            assert!(!text.contains(marker), "{marker} present without {field}");
            assert!(text.len() < prompt(&p).len());
        }
        let spec = Path::new("docs/specifications/45-spec-x.md");
        let mut planning = params(Some(spec), &[], Phase::Planning);
        planning.resuming = true;
        assert!(prompt(&planning).contains("cpm:epics progress file"));
    }

    #[test]
    fn epic_range_labels() {
        let paths = |names: &[&str]| -> Vec<PathBuf> {
            names
                .iter()
                .map(|n| PathBuf::from(format!("docs/epics/{n}")))
                .collect()
        };
        assert_eq!(
            epic_range(&paths(&["23-epic-a.md", "24-epic-b.md", "25-epic-c.md"])),
            "23-25"
        );
        assert_eq!(epic_range(&paths(&["7-epic-a.md"])), "7");
        assert_eq!(
            epic_range(&paths(&["x-epic-a.md", "3-epic-b.md", "3-01-epic-c.md"])),
            "3, x-epic-a"
        );
        assert_eq!(epic_range(&[]), "");
    }
}
