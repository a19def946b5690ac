//! CPM's pre-flight (SPEC §3.4) before the loop: `[plan]` stripping, earlier runs, the roll-up and
//! test runner in use, the session-state ignore check, the stop-hook warning.

use std::path::Path;

use crate::error::Result;
use crate::state::RalphDir;
use crate::supervisor;
use crate::supervisor::source::{CpmSource, cpm_error};
use crate::task::cpm;

/// CPM pre-flight (SPEC §3.4): strip `[plan]`, report earlier runs, the session-state ignore
/// check and the stop-hook warning.
pub(super) fn cpm_preflight(
    ui: crate::ui::Ui,
    root: &Path,
    rd: &RalphDir,
    c: &CpmSource,
    yes: bool,
) -> Result<()> {
    for epic in c.epics()? {
        // An epic that cannot be read is reported by the roll-up and the agent; here it only
        // keeps its tags (a link out of the repository is never written through).
        let lines = match cpm::strip_plan_file(root, &epic) {
            Ok(lines) => lines,
            Err(e @ cpm::CpmError::Read { .. }) => {
                ui.warn(&format!("[plan] tags not stripped: {e}"));
                continue;
            }
            Err(e) => return Err(cpm_error(e)),
        };
        for l in lines {
            ui.line(&l);
            supervisor::log_activity(ui, rd, &l);
        }
    }
    for run in cpm::earlier_runs(root).map_err(cpm_error)? {
        ui.line(&format!("earlier run: {}", run.describe()));
    }
    if let Some(r) = &c.rollup {
        ui.line(&format!("roll-up: {}", r.display()));
    }
    if let Some(t) = &c.test_runner {
        ui.line(&format!("test runner: {t}"));
    }
    let missing = cpm::missing_ignore_lines(root);
    if !missing.is_empty() {
        let apply = if yes {
            true
        } else if supervisor::is_interactive(false) {
            use std::io::Write;
            eprint!(
                "Add {} to .gitignore (session state, not project history)? [Y/n] ",
                missing.join(", ")
            );
            let _ = std::io::stderr().flush();
            let mut answer = String::new();
            let _ = std::io::stdin().read_line(&mut answer);
            !answer.trim().eq_ignore_ascii_case("n")
        } else {
            false
        };
        if apply {
            cpm::apply_ignore_lines(root, &missing).map_err(cpm_error)?;
            ui.note(&format!("added to .gitignore: {}", missing.join(", ")));
            supervisor::log_activity(
                ui,
                rd,
                &format!("Added to .gitignore: {}", missing.join(", ")),
            );
        } else {
            ui.warn(&format!(
                ".gitignore does not cover session state ({}): pass --yes to add it",
                missing.join(", ")
            ));
        }
    }
    if cpm::stop_hook_armed(root) {
        ui.warn(&format!(
            "{} exists: an armed stop-hook loop would fight ralph's fresh iterations; delete it",
            cpm::STOP_HOOK_STATE
        ));
    }
    Ok(())
}
