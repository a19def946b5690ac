//! The loop's events (SPEC §9, §10): each one is printed as a `--json` line and handed, as the
//! very same object, to its `[hooks]` command (`on_iteration`, `on_stuck`, `on_waiting`,
//! `on_halt`) on stdin, with `RALPH_EVENT` set. A hook runs under the same supervision as any
//! child (own process group, `hook_timeout`, SIGTERM then SIGKILL); a hook that fails or hangs is
//! logged and shown, and never stops the loop or changes its exit code.

use super::Loop;
use super::checks::{Check, run_check, shell};
use crate::config::Command;
use crate::event::Event;
use crate::proc::observe::{Echo, Watchers};
use crate::proc::relay::Limits;
use crate::state;

/// The grace a hook gets after its timeout before SIGKILL.
const HOOK_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// An event whose hook has yet to run, with the very line `--json` printed.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    name: &'static str,
    hook: Command,
    line: String,
}

impl Loop {
    /// Announce an event: its `--json` line now, its hook (if any) at the next `run_hooks`.
    pub(super) fn emit(&mut self, event: Event) {
        let line = event.line_now();
        self.setup.ui.event(&line);
        if let Some(hook) = self.setup.settings.hooks.for_event(&event) {
            self.pending_events.push(Pending {
                name: event.name(),
                hook: hook.clone(),
                line,
            });
        }
    }

    /// Run the hooks of the events emitted since the last call, in order.
    pub(super) async fn run_hooks(&mut self) {
        for pending in std::mem::take(&mut self.pending_events) {
            let span = tracing::info_span!("hook", event = %pending.name);
            if let Err(why) = tracing::Instrument::instrument(self.run_hook(&pending), span).await {
                let line = format!("hook for `{}` {why}: {}", pending.name, pending.hook.cmd);
                self.setup.ui.warn(&line);
                self.log(&format!("Hook: {line}"));
            }
        }
    }

    /// [`Self::run_hooks`] after an iteration was recorded or the run halted, then a walk of
    /// the tree: what the commands left (they run in the repository, and may write there) is
    /// committed as `ralph: iteration N — what the [hooks] commands left`, through the guard
    /// and the repository's hooks, and named in the activity log — the ITER record is written
    /// by then, as at an interrupt between iterations — so no run ends with a tree its records
    /// do not account for (SPEC §5.1 step 7). Nothing is committed under `--no-commit`.
    pub(super) async fn run_hooks_then_walk(&mut self) {
        let ran = !self.pending_events.is_empty();
        self.run_hooks().await;
        if !ran || self.setup.settings.no_commit {
            return;
        }
        let n = self.counters.iteration;
        let subject = match n {
            0 => "ralph: what the [hooks] commands left".to_string(),
            n => format!("ralph: iteration {n} — what the [hooks] commands left"),
        };
        let message = super::commit_message(&subject, n, &self.state.run_id);
        let ui = self.setup.ui;
        let settings = &self.setup.settings;
        let line =
            match super::guarded_commit(&mut self.tree.repo, settings, ui, &self.tree.rd, &message)
            {
                Ok(g) => match (g.outcome, g.refused) {
                    (Some(out), _) => format!(
                        "the [hooks] commands changed the tree: committed as {} ({})",
                        out.commit.short, out.commit.summary
                    ),
                    (None, Some(_)) => {
                        "the [hooks] commands changed the tree: the commit was refused".to_string()
                    }
                    (None, None) => return,
                },
                Err(e) => {
                    let line = format!(
                        "what the [hooks] commands left in the tree is not committed: {}",
                        super::faults::chain(&e)
                    );
                    ui.warn(&line);
                    line
                }
            };
        self.log(&format!("Iteration {n}: {line}"));
    }

    /// One hook run; `Err` says how it failed.
    async fn run_hook(&mut self, pending: &Pending) -> Result<(), String> {
        let Pending { name, hook, line } = pending;
        let cmd = hook.cmd.as_str();
        let dir = self.tree.rd.run_dir(&self.state.run_id);
        state::create_private_dir(&dir).map_err(|e| format!("could not run ({e})"))?;
        let path = dir.join("hooks.log");
        let mut transcript =
            crate::files::open_own(&path, true).map_err(|e| format!("could not run ({e})"))?;
        // A hook from `.ralph/config.toml` may be the agent's: in the sandbox (SPEC §4).
        let mut inv = self.setup.settings.confine(shell(cmd), hook.from_repo);
        inv.stdin = Some(format!("{line}\n").into_bytes());
        let mut env = self.ralph_env(self.state.iteration);
        env.push(("RALPH_EVENT".into(), (*name).to_string()));
        let timeout = self.setup.settings.hook_timeout;
        let check = Check {
            what: format!("hook for {name}: {cmd}"),
            inv,
            echo: Echo::None,
            limits: Limits {
                timeout: Some(timeout),
                idle_timeout: None,
                grace: HOOK_GRACE,
                quiet_retry: None,
            },
        };
        let root = self.tree.repo.root().to_path_buf();
        let fin = run_check(
            &root,
            check,
            &mut transcript,
            &env,
            &mut self.interrupts,
            Watchers::default(),
        )
        .await
        .map_err(|e| format!("could not run ({e})"))?;
        match fin {
            None => Err("was interrupted".into()),
            Some(f) if f.stopped.is_some() => Err(format!(
                "ran past hook_timeout {} and was stopped",
                crate::ui::human_duration(timeout)
            )),
            Some(f) if f.exit_code != 0 => Err(format!("failed (exit {})", f.exit_code)),
            Some(_) => Ok(()),
        }
    }
}
