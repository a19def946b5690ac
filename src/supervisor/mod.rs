//! The loop (SPEC §5): one fresh agent process per iteration, judged from the repository,
//! committed, logged, and decided by the pure `decide` function.

pub mod decide;
pub mod prompt;
pub mod source;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use serde_json::json;

use crate::agent::process::{self, Echo, Finished, Limits, StopCause, Watchers};
use crate::agent::stream::{Limit, Observer, backoff, format_for};
use crate::agent::{Agent, Invocation};
use crate::config::Settings;
use crate::error::{Error, Result, exit};
use crate::git::Repo;
use crate::live::LiveView;
use crate::signals::Interrupts;
use crate::state::{self, IterKey, RalphDir, RunState};
use crate::task::checklist::{Checklist, normalize};
use crate::task::verdict::{Verdict, VerdictClass};
use crate::ui::{Report, Ui, human_duration};
use decide::{Counters, Decision, Halt, Outcome, decide};
use source::{PromptCtx, Source};

/// `sh -c CMD` for the user's own commands.
fn shell(cmd: &str) -> Invocation {
    Invocation {
        program: "sh".into(),
        args: vec!["-c".into(), cmd.into()],
        stdin: None,
        env: Vec::new(),
    }
}

/// Everything the loop needs, resolved by `ralph run`.
pub struct Loop {
    pub repo: Repo,
    pub rd: RalphDir,
    pub source: Source,
    pub task_name: String,
    pub settings: Settings,
    pub agent: Agent,
    pub ui: Ui,
    pub state: RunState,
    pub counters: Counters,
    pub interrupts: Interrupts,
    pub started: Instant,
    pub stream: bool,
    /// Never ask (`--yes`, or stdin is not a terminal).
    pub unattended: bool,
    /// HEAD when the last iteration left the tree clean (its staged tree is then HEAD's).
    pub clean_at: Option<String>,
}

/// What `git status --porcelain | cksum` prints for a clean tree.
pub const CLEAN_FINGERPRINT: &str = "4294967295 0";

/// Short result of the bookkeeping after an agent run.
struct Committed {
    subject: Option<String>,
    head: String,
}

impl Loop {
    pub async fn run(mut self) -> Result<i32> {
        loop {
            if self.interrupts.count() > 0 {
                // Interrupted between iterations: the last one is fully recorded.
                return self.interrupted(self.counters.iteration).await;
            }
            let n = self.counters.iteration + 1;
            let prev = Counters {
                iteration: n,
                ..self.counters.clone()
            };
            let stuck_alert = prev.no_progress_streak >= prev.stuck_threshold;
            match self.iteration(n, &prev, stuck_alert).await? {
                Some(code) => return Ok(code),
                None => continue,
            }
        }
    }

    fn log(&self, line: &str) -> Result<()> {
        state::append_line(
            &self.rd.activity_log(),
            &format!("[{}] {line}", state::now_rfc3339()),
        )
    }

    /// One iteration; `Some(exit code)` when the run halts.
    async fn iteration(
        &mut self,
        n: u32,
        prev: &Counters,
        stuck_alert: bool,
    ) -> Result<Option<i32>> {
        let started_at = state::now_rfc3339();
        let t0 = Instant::now();
        self.source.select_next();
        let prompt = self.source.prompt(&PromptCtx {
            iteration: n,
            max_iterations: self.settings.max_iterations,
            test_command: self.settings.test_command.as_deref(),
            stuck_alert,
            stuck_streak: prev.no_progress_streak,
            completion_promise: self.settings.completion_promise.as_deref(),
        })?;
        let run_dir = self.rd.run_dir(&self.state.run_id);
        state::create_private_dir(&run_dir)?;
        let prompt_file = run_dir.join(format!("iter-{n:03}.prompt.md"));
        std::fs::write(&prompt_file, &prompt).map_err(|e| Error::file("write", &prompt_file, e))?;
        let transcript_path = run_dir.join(format!("iter-{n:03}.log"));
        let mut transcript = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&transcript_path)
            .map_err(|e| Error::file("create", &transcript_path, e))?;

        let mut inv = self.agent.invocation(&prompt, &prompt_file)?;
        inv.env.extend(self.ralph_env(n));
        let (done_before, total_before) = self.source.counts();
        let unit = self.source.unit();
        self.ui.line(&format!(
            "▶ Iteration {n}/{} — {} ({done_before}/{total_before} {unit})",
            self.settings.max_iterations, self.agent.name,
        ));
        self.ui.event(
            "iteration_started",
            json!({
                "run_id": self.state.run_id,
                "iteration": n,
                "max_iterations": self.settings.max_iterations,
                "done": done_before,
                "total": total_before,
                "stuck_alert": stuck_alert,
            }),
        );
        self.state.iteration = n;
        self.state.save(&self.rd.state_file())?;

        let head_before = self.repo.head()?.map(|c| c.id);
        // What `git add -A` would stage before the agent runs. After an iteration that left the
        // tree clean at this same HEAD, that is HEAD's tree: no walk of the work tree needed.
        let tree_before = if self.settings.no_commit {
            None
        } else if head_before.is_some() && self.clean_at == head_before {
            self.repo.clean_tree()?
        } else {
            None
        };
        let tree_before = match tree_before {
            Some(t) => Some(t),
            None if self.settings.no_commit => None,
            None => {
                let staged = self.repo.stage_all()?;
                self.repo.reload_index()?;
                Some(staged.tree)
            }
        };
        let limits = self.limits();
        let echo = match (self.stream, self.ui.json) {
            (false, _) => Echo::None,
            (true, false) => Echo::Stdout,
            (true, true) => Echo::Stderr,
        };
        // A usage or rate limit is not an iteration: wait for the reset and run the same
        // iteration again (SPEC §6).
        let mut limited_attempts = 0u32;
        let (finished, observer) = loop {
            let mut observer = Observer::new(format_for(&self.agent.name), chrono::Utc::now());
            let view = (!self.stream && !self.ui.quiet && LiveView::available())
                .then(|| self.live_view(n));
            let watchers = Watchers {
                observer: Some(&mut observer),
                view: view.as_ref(),
            };
            let root = self.repo.root().to_path_buf();
            let finished = process::run(
                &inv,
                &root,
                &mut transcript,
                &limits,
                &mut self.interrupts,
                echo,
                watchers,
            )
            .await
            .map_err(|e| e.into_error(format_args!("agent `{}`", inv.program)))?;
            if let Some(v) = view {
                v.finish();
            }
            if finished.stopped == Some(StopCause::Interrupt) {
                break (finished, observer);
            }
            if let Some(limit) = observer.limit().cloned() {
                limited_attempts += 1;
                if let Some(code) = self.wait_for_limit(n, &limit, limited_attempts).await? {
                    return Ok(Some(code));
                }
                use std::io::Write;
                let _ = writeln!(
                    transcript,
                    "\n--- ralph: usage limit; retrying iteration {n} ---"
                );
                continue;
            }
            break (finished, observer);
        };
        if let Some(auth) = observer.auth_error() {
            let message = format!("agent `{}` cannot work: {auth}", self.agent.name);
            self.log(&format!("Iteration {n}: {message}"))?;
            self.finish_state("error", exit::ERROR)?;
            return Err(Error::user(message).with_hint(
                "log the agent CLI in (or set its API key), then continue with `ralph resume`",
            ));
        }
        let usage = observer.usage();
        self.state.cost_usd += usage.cost_usd;
        self.state.input_tokens += usage.input_tokens;
        self.state.output_tokens += usage.output_tokens;
        let ended_at = state::now_rfc3339();
        self.source.mark_planning_ran();
        self.rd.ensure_runtime()?;

        let mut notes = Vec::new();
        self.note_agent_end(n, &finished, &limits, &mut notes)?;

        if finished.stopped == Some(StopCause::Interrupt) || self.interrupts.count() > 0 {
            return self.interrupted(n).await.map(Some);
        }

        // Read the task source (and, for a table task marked DONE under --review, ask a second
        // fresh agent run whether it really is).
        let judged = match self.source.judge() {
            Ok(j) if j.review_task.is_some() => {
                let k = j.review_task.unwrap_or_default();
                let Some(verdict) = self.run_reviewer(n, k, &mut transcript, &inv.env).await?
                else {
                    return self.interrupted(n).await.map(Some);
                };
                match &verdict {
                    Some(Ok(())) => {
                        self.log(&format!("Iteration {n}: review of task {k}: PASS"))?
                    }
                    Some(Err(why)) => {
                        self.log(&format!("Iteration {n}: review of task {k}: FAIL {why}"))?;
                        notes.push(format!("Review of task {k} failed: {why}"));
                    }
                    None => {
                        self.log(&format!(
                            "Iteration {n}: the reviewer of task {k} gave no verdict"
                        ))?;
                        notes.push(format!(
                            "The reviewer of task {k} gave no REVIEW line: counted as a fail"
                        ));
                    }
                }
                self.source.review_done(verdict)
            }
            other => other,
        };
        let judged = match judged {
            Ok(j) => j,
            Err(e) => {
                self.log(&format!(
                    "Iteration {n}: the task source is unreadable after the agent ran: {e}"
                ))?;
                let (d, t) = self.source.counts();
                let committed = self.commit(
                    n,
                    None,
                    head_before.as_deref(),
                    tree_before,
                    ("Task file unreadable", d, t),
                )?;
                self.finish_state("error", exit::ERROR)?;
                self.ui.plain(&format!(
                    "Iteration {n} left the task source unreadable; its work is {}.",
                    committed
                        .subject
                        .as_deref()
                        .map_or("uncommitted".to_string(), |s| format!(
                            "committed as \"{s}\""
                        ))
                ));
                return Err(e);
            }
        };
        for r in &judged.regressions {
            self.log(&format!(
                "Iteration {n}: regression: criterion unchecked: \"{r}\""
            ))?;
            notes.push(format!("Regression: \"{r}\" was unchecked"));
        }

        // The test command, then the verdict command, with their output in the transcript.
        let tests_ok = match self.settings.test_command.clone() {
            None => true,
            Some(cmd) => {
                let Some(fin) = self
                    .run_aux(
                        &format!("test command: {cmd}"),
                        shell(&cmd),
                        &mut transcript,
                        &inv.env,
                        echo,
                        Watchers::default(),
                    )
                    .await?
                else {
                    return self.interrupted(n).await.map(Some);
                };
                if !fin.success() {
                    let why = match fin.stopped {
                        Some(_) => "timed out".to_string(),
                        None => format!("exit {}", fin.exit_code),
                    };
                    self.log(&format!("Iteration {n}: tests failed ({why}): {cmd}"))?;
                    notes.push(format!("Tests failed ({why}): {cmd}"));
                }
                fin.success()
            }
        };
        let verdict = match self.source.verdict_invocation(&self.settings) {
            None => None,
            Some((display, vinv)) => {
                let Some(fin) = self
                    .run_aux(
                        &format!("verdict command: {display}"),
                        vinv,
                        &mut transcript,
                        &inv.env,
                        echo,
                        Watchers::default(),
                    )
                    .await?
                else {
                    return self.interrupted(n).await.map(Some);
                };
                let v = self
                    .source
                    .verdict(fin.exit_code, &String::from_utf8_lossy(&fin.stdout_tail));
                self.note_verdict(n, &v, &mut notes)?;
                Some(v)
            }
        };
        let verdict_halt = verdict.as_ref().and_then(|v| self.source.after_verdict(v));
        let source_halt = judged.halt.clone().or(verdict_halt);
        let promise_ok = match &self.settings.completion_promise {
            None => true,
            Some(word) => {
                let last = observer.final_message().unwrap_or_default();
                promise_in_final_message(last.as_bytes(), word, &prompt)
            }
        };
        let evidence = verdict.as_ref().map_or(judged.source_complete, |v| {
            v.class == VerdictClass::Verified
        });
        let status_text = if evidence && tests_ok && promise_ok && judged.tampered.is_empty() {
            "Complete"
        } else {
            "In progress"
        };

        let committed = self.commit(
            n,
            judged.what.clone(),
            head_before.as_deref(),
            tree_before,
            (status_text, judged.done, judged.total),
        )?;
        let fingerprint = self.repo.fingerprint()?;
        self.clean_at = if fingerprint == CLEAN_FINGERPRINT {
            self.repo.head()?.map(|h| h.id)
        } else {
            None
        };
        let figures = match (&verdict, &judged.figures) {
            (Some(v), _) => v.figures(),
            (None, Some(f)) => f.clone(),
            (None, None) => format!("{}/{} {unit}", judged.done, judged.total),
        };
        let figures_changed =
            verdict.is_some() && prev.last_keys.last().is_some_and(|k| k.figures != figures);
        let key = IterKey {
            figures,
            commit: committed.head.clone(),
            fingerprint,
        };
        // The ITER exit is the verdict's when there is one, else the agent's.
        let iter_exit = verdict.as_ref().map_or(finished.exit_code, |v| v.exit_code);
        let outcome = Outcome {
            done: judged.done,
            total: judged.total,
            source_complete: judged.source_complete,
            tests_ok,
            promise_ok,
            tampered: judged.tampered.clone(),
            over_budget: self
                .settings
                .max_cost
                .is_some_and(|max| self.state.cost_usd >= max),
            verdict: verdict.as_ref().map(|v| v.class.clone()),
            figures_changed,
            source_halt,
            key: key.clone(),
        };
        let (counters, mut decision) = decide(prev, &outcome);
        self.counters = counters;
        let duration = t0.elapsed();
        self.ui.event(
            "iteration_finished",
            json!({
                "run_id": self.state.run_id,
                "iteration": n,
                "done": judged.done,
                "total": judged.total,
                "figures": key.figures,
                "exit_code": finished.exit_code,
                "verdict_exit_code": verdict.as_ref().map(|v| v.exit_code),
                "timed_out": matches!(finished.stopped, Some(StopCause::Timeout | StopCause::IdleTimeout)),
                "tests_passed": self.settings.test_command.as_ref().map(|_| tests_ok),
                "commit": key.commit,
                "committed": committed.subject.is_some(),
                "fingerprint": key.fingerprint,
                "duration_s": duration.as_secs_f64(),
                "cost_usd": usage.cost_usd,
                "total_cost_usd": self.state.cost_usd,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "turns": usage.turns,
                "regressions": judged.regressions,
            }),
        );

        // Logs after the commit, so the record describes the tree the iteration leaves behind.
        self.log(&format!(
            "Iteration {n}: {}/{} {unit} complete (started: {started_at}, ended: {ended_at}, duration: {})",
            judged.done,
            judged.total,
            human_duration(duration)
        ))?;
        let iter_log = self.source.iter_log(&self.rd.iterations_log());
        if let Some(dir) = iter_log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::file("create directory", dir, e))?;
        }
        state::append_line(&iter_log, &key.record(n, iter_exit))?;
        if let Decision::Continue {
            newly_stuck: true, ..
        } = decision
        {
            let t = self.settings.stuck_threshold;
            self.log(&format!(
                "⚠️ Stuck detected — {t} iterations with no progress"
            ))?;
            self.ui.event(
                "stuck",
                json!({"iteration": n, "no_progress_iterations": t}),
            );
            notes.push(format!(
                "Stuck detected — {t} iterations with no progress; the next prompt carries the STUCK ALERT"
            ));
        }
        if decision == Decision::AskStuck {
            decision = if self.ask_continue_when_stuck() {
                self.log("Stuck: the user chose to continue")?;
                self.counters.no_progress_streak = 0;
                if self.counters.iteration >= self.settings.max_iterations {
                    Decision::Halt(Halt::MaxIterations)
                } else {
                    Decision::Continue {
                        stuck_alert: false,
                        newly_stuck: false,
                    }
                }
            } else {
                Decision::Halt(Halt::Stuck)
            };
        }
        self.state.done = judged.done;
        self.state.total = judged.total;
        self.counters.save_into(&mut self.state);

        let next_iteration = matches!(decision, Decision::Continue { .. }).then_some(n + 1);
        let report = Report {
            iteration: n,
            max_iterations: self.settings.max_iterations,
            done: judged.done,
            total: judged.total,
            unit,
            last_commit: committed.subject.as_deref(),
            started: &started_at,
            ended: &ended_at,
            duration,
            elapsed: self.started.elapsed(),
            next: next_iteration,
            notes: &notes,
            cost: (usage.cost_usd > 0.0 || usage.input_tokens > 0).then_some(crate::ui::CostLine {
                iteration_usd: usage.cost_usd,
                total_usd: self.state.cost_usd,
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
            }),
        };
        self.ui.line(&report.render());

        match decision {
            Decision::Continue { .. } => {
                self.state.save(&self.rd.state_file())?;
                Ok(None)
            }
            Decision::AskStuck => unreachable!("resolved above"),
            Decision::Halt(halt) => {
                let code = halt.exit_code();
                self.log(&format!("Halt: {} (exit {code})", halt.reason()))?;
                self.finish_state(halt.reason(), code)?;
                self.summary(&halt);
                Ok(Some(code))
            }
        }
    }

    /// A second fresh agent run reviews task `k` (table `--review`). `None` when interrupted;
    /// else the verdict it ended with (`None` inside: no REVIEW line).
    async fn run_reviewer(
        &mut self,
        n: u32,
        k: u32,
        transcript: &mut std::fs::File,
        env: &[(String, String)],
    ) -> Result<Option<Option<std::result::Result<(), String>>>> {
        let Some(prompt) = self
            .source
            .review_prompt(k, self.settings.test_command.as_deref())
        else {
            return Ok(Some(Some(Ok(()))));
        };
        let run_dir = self.rd.run_dir(&self.state.run_id);
        let prompt_file = run_dir.join(format!("iter-{n:03}.review.prompt.md"));
        std::fs::write(&prompt_file, &prompt).map_err(|e| Error::file("write", &prompt_file, e))?;
        let inv = self.agent.invocation(&prompt, &prompt_file)?;
        let mut observer = Observer::new(format_for(&self.agent.name), chrono::Utc::now());
        let watchers = Watchers {
            observer: Some(&mut observer),
            view: None,
        };
        let what = format!("review of task {k}: a fresh {} run", self.agent.name);
        let Some(fin) = self
            .run_aux(&what, inv, transcript, env, Echo::None, watchers)
            .await?
        else {
            return Ok(None);
        };
        let usage = observer.usage();
        self.state.cost_usd += usage.cost_usd;
        let text = observer
            .final_message()
            .unwrap_or_else(|| String::from_utf8_lossy(&fin.stdout_tail).into_owned());
        Ok(Some(crate::task::table::parse_review(&text)))
    }

    /// The spinner of one agent run, watching the task file when there is one.
    fn live_view(&self, n: u32) -> LiveView {
        let (done, total) = self.source.counts();
        let unit = self.source.unit();
        let watch = match &self.source {
            Source::Checklist(c) => {
                let path = c.path.clone();
                let counter: crate::live::Counter = Box::new(move || {
                    crate::task::document::load_task_file(&path)
                        .ok()
                        .map(|d| format!("{}/{} criteria", d.checklist.done(), d.checklist.total()))
                });
                Some((c.path.clone(), counter))
            }
            _ => None,
        };
        LiveView::start(
            format!("iteration {n}/{}", self.settings.max_iterations),
            format!("{done}/{total} {unit}"),
            watch,
        )
    }

    /// A usage limit ended the attempt: wait until it lifts (or back off), showing the wait,
    /// then let the caller retry. `Some(exit code)` when the run ends instead (interrupted, or
    /// the waiting budget is spent).
    async fn wait_for_limit(&mut self, n: u32, limit: &Limit, attempt: u32) -> Result<Option<i32>> {
        let now = chrono::Utc::now();
        let base = self.settings.limit_backoff;
        let wait = match limit.reset_at {
            // A little past the reset, so the retry does not land just before it; a limit met
            // again right after its reset also backs off, so a misread never spins.
            Some(t) => {
                let until =
                    (t - now).to_std().unwrap_or_default() + std::time::Duration::from_secs(1);
                if attempt > 1 {
                    until.max(backoff(base, attempt - 1))
                } else {
                    until
                }
            }
            None => backoff(base, attempt),
        };
        let waited = std::time::Duration::from_secs_f64(self.state.waited_s);
        if waited + wait > self.settings.max_wait {
            self.log(&format!(
                "Iteration {n}: usage limit ({}: {}); waiting {} more would pass --max-wait {}",
                limit.kind,
                limit.message,
                human_duration(wait),
                human_duration(self.settings.max_wait)
            ))?;
            let halt = Halt::Budget(format!(
                "the agent's usage limit ({}) would need {} more waiting, past --max-wait {}",
                limit.kind,
                human_duration(wait),
                human_duration(self.settings.max_wait)
            ));
            let code = halt.exit_code();
            self.finish_state(halt.reason(), code)?;
            self.summary(&halt);
            return Ok(Some(code));
        }
        let until = limit.reset_at.map(|t| {
            t.with_timezone(&chrono::Local)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
        });
        let when = until.clone().map_or_else(
            || format!("backing off {}", human_duration(wait)),
            |u| format!("until {u}"),
        );
        self.log(&format!(
            "Iteration {n}: usage limit ({}: {}); waiting {} ({when}), then retrying the same iteration",
            limit.kind,
            limit.message,
            human_duration(wait)
        ))?;
        self.ui.alert(&format!(
            "⏸ Usage limit ({}): waiting {} ({when}); iteration {n} will run again",
            limit.kind,
            human_duration(wait)
        ));
        self.ui.event(
            "waiting",
            json!({
                "iteration": n,
                "kind": limit.kind,
                "message": limit.message,
                "reset_at": limit.reset_at.map(|t| t.to_rfc3339()),
                "wait_s": wait.as_secs_f64(),
            }),
        );
        let countdown = (!self.ui.quiet && LiveView::available()).then(|| {
            LiveView::start(
                format!("waiting for the usage limit ({})", limit.kind),
                String::new(),
                None,
            )
        });
        let seen = self.interrupts.count();
        let deadline = tokio::time::Instant::now() + wait;
        let interrupted = loop {
            if let Some(v) = &countdown {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                v.set_activity(&format!("{} left", human_duration(left)));
            }
            tokio::select! {
                _ = self.interrupts.after(seen) => break true,
                _ = tokio::time::sleep_until(deadline) => break false,
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)), if countdown.is_some() => {}
            }
        };
        if let Some(v) = countdown {
            v.finish();
        }
        self.state.waited_s += wait.as_secs_f64();
        if interrupted {
            return self.interrupted(n).await.map(Some);
        }
        self.state.save(&self.rd.state_file())?;
        Ok(None)
    }

    /// The environment every process of an iteration gets.
    fn ralph_env(&self, n: u32) -> Vec<(String, String)> {
        vec![
            ("RALPH_ITERATION".to_string(), n.to_string()),
            (
                "RALPH_MAX_ITERATIONS".to_string(),
                self.settings.max_iterations.to_string(),
            ),
            ("RALPH_RUN_ID".to_string(), self.state.run_id.clone()),
            ("RALPH_TASK_FILE".to_string(), self.source.task_file()),
        ]
    }

    fn limits(&self) -> Limits {
        Limits {
            timeout: self.settings.timeout,
            idle_timeout: self.settings.idle_timeout,
            grace: self.settings.grace,
        }
    }

    /// Spec mode: run the roll-up once before the first iteration to learn the phase.
    /// `Some(exit code)` when that already ends the run.
    pub async fn preflight_verdict(&mut self) -> Result<Option<i32>> {
        if self.source.mode() != "cpm-spec" || self.counters.iteration > 0 {
            return Ok(None);
        }
        let Some((display, vinv)) = self.source.verdict_invocation(&self.settings) else {
            return Ok(None);
        };
        let run_dir = self.rd.run_dir(&self.state.run_id);
        state::create_private_dir(&run_dir)?;
        let path = run_dir.join("preflight.log");
        let mut transcript =
            std::fs::File::create(&path).map_err(|e| Error::file("create", &path, e))?;
        let env = self.ralph_env(0);
        let Some(fin) = self
            .run_aux(
                &format!("roll-up: {display}"),
                vinv,
                &mut transcript,
                &env,
                Echo::None,
                Watchers::default(),
            )
            .await?
        else {
            return self.interrupted(0).await.map(Some);
        };
        let v = self
            .source
            .verdict(fin.exit_code, &String::from_utf8_lossy(&fin.stdout_tail));
        self.log(&format!(
            "Pre-flight roll-up: exit {}: {}",
            v.exit_code,
            v.figures()
        ))?;
        if v.exit_code == 0 {
            self.ui
                .success("The roll-up already verifies every row of the spec.");
            self.finish_state("complete", exit::COMPLETE)?;
            for l in self.source.completion_lines() {
                self.ui.plain(&l);
            }
            return Ok(Some(exit::COMPLETE));
        }
        if let Some(halt) = self.source.after_verdict(&v) {
            let code = halt.exit_code();
            self.finish_state(halt.reason(), code)?;
            self.summary(&halt);
            return Ok(Some(code));
        }
        Ok(None)
    }

    /// Run a test or verdict command under the same supervision as the agent, its output
    /// appended to the transcript. `None` when an interrupt stopped it.
    async fn run_aux(
        &mut self,
        what: &str,
        mut inv: Invocation,
        transcript: &mut std::fs::File,
        env: &[(String, String)],
        echo: Echo,
        watchers: Watchers<'_>,
    ) -> Result<Option<Finished>> {
        use std::io::Write;
        let _ = writeln!(transcript, "\n--- ralph: {what} ---");
        inv.env.extend_from_slice(env);
        let root = self.repo.root().to_path_buf();
        let limits = self.limits();
        let fin = process::run(
            &inv,
            &root,
            transcript,
            &limits,
            &mut self.interrupts,
            echo,
            watchers,
        )
        .await
        .map_err(|e| e.into_error(format_args!("the {what}")))?;
        Ok((fin.stopped != Some(StopCause::Interrupt)).then_some(fin))
    }

    /// Relay what the verdict command said into the log and the report.
    fn note_verdict(&self, n: u32, v: &Verdict, notes: &mut Vec<String>) -> Result<()> {
        let figures = v.figures();
        match &v.class {
            VerdictClass::Verified => {
                self.log(&format!(
                    "Iteration {n}: verdict exit 0 (every row verified): {figures}"
                ))?;
            }
            VerdictClass::Unverified | VerdictClass::NothingPlanned => {
                self.log(&format!(
                    "Iteration {n}: verdict exit {}: {figures}",
                    v.exit_code
                ))?;
                notes.push(format!("Verdict exit {}: {figures}", v.exit_code));
            }
            VerdictClass::TargetOnly(rows) => {
                self.log(&format!(
                    "Iteration {n}: verdict exit 5: TARGET-ONLY: {} rows unverifiable in this environment",
                    rows.len()
                ))?;
            }
            VerdictClass::Unavailable => {
                self.log(&format!(
                    "Iteration {n}: the verdict command could not run (exit {}): {figures}",
                    v.exit_code
                ))?;
                notes.push(format!(
                    "The verdict command could not run (exit {}); neither progress nor work remaining",
                    v.exit_code
                ));
            }
        }
        Ok(())
    }

    /// Log what happened to the agent process and collect report notes.
    fn note_agent_end(
        &self,
        n: u32,
        f: &Finished,
        limits: &Limits,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let how = if f.killed { "SIGKILL" } else { "SIGTERM" };
        match f.stopped {
            Some(StopCause::Timeout) => {
                let t = limits.timeout.map(human_duration).unwrap_or_default();
                self.log(&format!(
                    "Iteration {n}: agent timed out after {t} (stopped with {how})"
                ))?;
                notes.push(format!("Agent timed out after {t} (stopped with {how})"));
            }
            Some(StopCause::IdleTimeout) => {
                let t = limits.idle_timeout.map(human_duration).unwrap_or_default();
                self.log(&format!("Iteration {n}: agent printed nothing for {t}: idle timeout (stopped with {how})"))?;
                notes.push(format!("Agent idle for {t}: stopped with {how}"));
            }
            Some(StopCause::Interrupt) => {
                self.log(&format!(
                    "Iteration {n}: interrupted (agent stopped with {how})"
                ))?;
            }
            None if f.exit_code != 0 => {
                self.log(&format!(
                    "Iteration {n}: agent exited with code {}",
                    f.exit_code
                ))?;
                notes.push(format!("Agent exited with code {}", f.exit_code));
            }
            None => {}
        }
        if f.leaked_pipes {
            self.log(&format!(
                "Iteration {n}: a process left by the agent still held its output after it exited; killed its process group"
            ))?;
            notes.push("A leftover process held the agent's output: killed".into());
        }
        Ok(())
    }

    /// Update the progress file's status block and commit the iteration when the agent changed
    /// something. Returns the commit subject (when committed) and HEAD for the ITER record.
    fn commit(
        &mut self,
        n: u32,
        what: Option<String>,
        head_before: Option<&str>,
        tree_before: Option<git2::Oid>,
        status: (&str, usize, usize),
    ) -> Result<Committed> {
        let (status_text, done, total) = status;
        let progress_path = self.rd.progress();
        // The agent changed something when the tree `git add -A` would stage now differs from
        // the one before it ran; ralph's own bookkeeping is written after this comparison.
        // Staged once: this index is what gets committed (plus the status block below).
        let agent_changed = match tree_before {
            Some(before) => {
                let staged = self.repo.stage_all()?;
                staged.tree != before
            }
            None => false,
        };
        if tree_before.is_some() && !agent_changed {
            self.repo.reload_index()?;
        }
        // Bookkeeping rides along with the agent's changes, never commits by itself.
        let current = std::fs::read_to_string(&progress_path).unwrap_or_default();
        let block = state::status_block(n, done, total, status_text);
        let updated = state::with_status_block(&current, &block);
        if updated != current {
            state::write_atomic(&progress_path, updated.as_bytes())?;
        }
        let head_after_agent = self.repo.head()?;
        let mut subject = None;
        if agent_changed {
            let what = what
                .or_else(|| {
                    head_after_agent
                        .as_ref()
                        .filter(|h| Some(h.id.as_str()) != head_before)
                        .map(|h| h.summary.clone())
                })
                .unwrap_or_else(|| "no criteria completed".to_string());
            let message = commit_message(
                &format!("ralph: iteration {n} — {what}"),
                n,
                &self.state.run_id,
            );
            let progress_rel = format!("{}/progress.md", state::DIR);
            if let Some(out) = guarded_commit(
                &mut self.repo,
                &self.settings,
                self.ui,
                &self.rd,
                &message,
                Some(&[progress_rel.as_str()]),
            )? {
                subject = Some(out.commit.summary.clone());
            }
        } else if let Some(h) = head_after_agent
            .as_ref()
            .filter(|h| Some(h.id.as_str()) != head_before)
        {
            subject = Some(h.summary.clone());
        }
        let head = self
            .repo
            .head()?
            .map_or_else(|| "no-commit".to_string(), |h| h.short);
        Ok(Committed { subject, head })
    }

    /// The first interrupt stopped the agent: commit its partial work, save state, exit 130.
    async fn interrupted(&mut self, n: u32) -> Result<i32> {
        if !self.settings.no_commit {
            let message = commit_message(
                &format!("ralph: iteration {n} (interrupted)"),
                n,
                &self.state.run_id,
            );
            if let Some(out) = guarded_commit(
                &mut self.repo,
                &self.settings,
                self.ui,
                &self.rd,
                &message,
                None,
            )? {
                self.log(&format!(
                    "Iteration {n}: partial work committed as {}",
                    out.commit.short
                ))?;
            }
        }
        self.log(&format!(
            "Halt: interrupted during iteration {n} (exit 130)"
        ))?;
        self.finish_state("interrupted", exit::INTERRUPTED)?;
        self.ui.alert(&format!(
            "Interrupted in iteration {n}: the agent was stopped and its work committed. Continue with: ralph resume"
        ));
        Ok(exit::INTERRUPTED)
    }

    /// Record the halt in `state.json` and announce it.
    fn finish_state(&mut self, reason: &str, code: i32) -> Result<()> {
        self.state.running = false;
        self.state.halt_reason = Some(reason.to_string());
        self.state.exit_code = Some(code);
        self.state.save(&self.rd.state_file())?;
        self.ui.event(
            "halted",
            json!({
                "run_id": self.state.run_id,
                "reason": reason,
                "exit_code": code,
                "iteration": self.state.iteration,
                "done": self.state.done,
                "total": self.state.total,
            }),
        );
        Ok(())
    }

    fn ask_continue_when_stuck(&self) -> bool {
        let t = 2 * self.settings.stuck_threshold;
        if self.unattended || !std::io::stdin().is_terminal() {
            return false;
        }
        eprint!("The loop has made no progress for {t} iterations. Continue or stop? [c/S] ");
        let mut answer = String::new();
        if std::io::stdin().read_line(&mut answer).is_err() {
            return false;
        }
        matches!(
            answer.trim().to_ascii_lowercase().as_str(),
            "c" | "continue"
        )
    }

    fn summary(&self, halt: &Halt) {
        let ui = self.ui;
        let (done, total) = self.source.counts();
        let unit = self.source.unit();
        let n = self.counters.iteration;
        let max = self.settings.max_iterations;
        let elapsed = human_duration(self.started.elapsed());
        match halt {
            Halt::Complete => {
                ui.success("## 🎉 RALPH Loop Complete!");
                ui.plain(&format!("**Task:** {}", self.task_name));
                ui.plain(&format!("**Iterations:** {n} of {max}"));
                ui.plain(&format!("**Duration:** {elapsed}"));
                if self.source.mode() == "checklist" {
                    ui.plain(&format!("**Criteria:** {total}/{total} ✅"));
                }
                for l in self.source.completion_lines() {
                    ui.plain(&l);
                }
                ui.plain(&format!("\nAll success criteria are met. Review the changes with:\n  git log --oneline -{n}"));
            }
            Halt::MaxIterations => {
                ui.alert("## 🛑 RALPH Loop — Max Iterations Reached");
                ui.plain(&format!("**Task:** {}", self.task_name));
                ui.plain(&format!("**Iterations:** {n} of {max}"));
                ui.plain(&format!(
                    "**Criteria:** {done}/{total} ({done} completed, {} remaining)",
                    total - done
                ));
                self.print_remaining();
                ui.plain(&format!(
                    "\nTo continue, raise the limit: ralph resume --max-iterations {}",
                    max + 10
                ));
            }
            Halt::Stalled { iterations, commit } => {
                ui.alert(&format!(
                    "STALLED: {iterations} iterations with no change at {commit}"
                ));
                ui.plain(&format!(
                    "**Progress:** {done}/{total} {unit} after {n} iterations ({elapsed})"
                ));
                self.print_remaining();
                ui.plain("\nThe agent changed nothing for three iterations: check its transcript in .ralph/runs/ and the task.");
            }
            Halt::Stuck => {
                let t = 2 * self.settings.stuck_threshold;
                ui.alert(&format!(
                    "## 🤚 RALPH Loop — Stuck: no progress for {t} iterations"
                ));
                ui.plain(&format!(
                    "**Progress:** {done}/{total} {unit} after {n} iterations ({elapsed})"
                ));
                self.print_remaining();
                ui.plain("\nAdjust the task (split hard criteria, add guardrails) and run again.");
            }
            Halt::TargetOnly(rows) => {
                ui.alert(&format!(
                    "TARGET-ONLY: {} rows unverifiable in this environment",
                    rows.len()
                ));
                for r in rows {
                    ui.plain(&format!("- {r}"));
                }
                ui.plain("\nThese rows can only be verified against the real deployment target.");
            }
            Halt::VerdictUnavailable => {
                ui.alert("## ⛔ RALPH Loop — the verdict command could not run twice in a row");
                ui.plain(&format!(
                    "Check it by hand: {}",
                    self.settings.verdict_command.as_deref().unwrap_or("")
                ));
            }
            Halt::Budget(why) => {
                ui.alert("## 💸 RALPH Loop — Budget reached");
                ui.plain(&format!("{why}."));
                ui.plain(&format!(
                    "**Progress:** {done}/{total} {unit} after {n} iterations ({elapsed}); total cost ${:.2}",
                    self.state.cost_usd
                ));
                ui.plain("\nContinue later with: ralph resume (raise --max-cost or --max-wait if needed)");
            }
            Halt::Partial(lines) => {
                ui.alert("## ⚠️ RALPH Loop — PARTIAL");
                for l in lines {
                    ui.plain(l);
                }
            }
            Halt::Tampered(gone) => {
                ui.alert("## ⛔ RALPH Loop — Criteria tampered");
                ui.plain(&format!(
                    "Iteration {n} removed or reworded unchecked criteria from {}:",
                    self.task_name
                ));
                for g in gone {
                    ui.plain(&format!("- [ ] {g}"));
                }
                ui.plain("\n\"All boxes checked\" must not be reachable by deleting boxes. Restore them (see git log -p) and run again.");
            }
        }
    }

    fn print_remaining(&self) {
        let remaining = self.source.remaining();
        if !remaining.is_empty() {
            self.ui.plain("\nRemaining criteria:");
            for c in remaining {
                self.ui.plain(&format!("- [ ] {c}"));
            }
        }
    }
}

pub const FALLBACK_IDENTITY_WARNING: &str =
    "no git identity configured (user.name/user.email): committing as `ralph <ralph@localhost>`";

static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Commit like `git add -A && git commit`, through the commit guard and (unless `no_verify`)
/// the repository's hooks. What the guard left out, or a hook's refusal, is logged to the
/// activity log and shown; a refused commit leaves the changes staged and the loop goes on.
pub fn guarded_commit(
    repo: &mut Repo,
    settings: &Settings,
    ui: Ui,
    rd: &RalphDir,
    message: &str,
    staged_plus: Option<&[&str]>,
) -> Result<Option<crate::git::CommitOutcome>> {
    let max = settings.max_file_size;
    let exclude = move |rel: &str, abs: &std::path::Path| crate::guard::check(rel, abs, max);
    let hooks_dir = crate::hooks::hooks_dir(repo.git2(), repo.root());
    let git_dir = repo.git2().path().to_path_buf();
    let run_hooks =
        move |root: &std::path::Path, msg: &str| crate::hooks::run(root, &hooks_dir, &git_dir, msg);
    let hooks: Option<&crate::git::HookRunner> = (!settings.no_verify).then_some(&run_hooks as _);
    let report = match staged_plus {
        Some(also) => repo.commit_staged_with(message, also, &exclude, hooks)?,
        None => repo.commit_with(message, &exclude, hooks)?,
    };
    let log = |line: &str| {
        state::append_line(
            &rd.activity_log(),
            &format!("[{}] {line}", state::now_rfc3339()),
        )
    };
    for (path, why) in &report.left_out {
        ui.warn(&format!("left `{path}` out of the commit: {why}"));
        log(&format!(
            "Commit guard: left {path} out of the commit ({why})"
        ))?;
    }
    if let Some(failure) = &report.hook_failure {
        ui.warn(&format!("{failure}: the changes stay uncommitted (staged)"));
        log(&format!("Commit refused: {failure}"))?;
    }
    if let Some(out) = &report.outcome
        && out.used_fallback_identity
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        ui.warn(FALLBACK_IDENTITY_WARNING);
    }
    Ok(report.outcome)
}

/// `subject`, a blank line, and the trailers.
pub fn commit_message(subject: &str, n: u32, run_id: &str) -> String {
    format!("{subject}\n\nRalph-Iteration: {n}\nRalph-Run: {run_id}\n")
}

/// Baseline criteria (unchecked at the start of the run) that are no longer present.
pub fn tampered(baseline: &[String], current: &Checklist) -> Vec<String> {
    let mut present: HashMap<String, usize> = HashMap::new();
    for c in &current.criteria {
        *present.entry(normalize(&c.text)).or_default() += 1;
    }
    let mut gone = Vec::new();
    for b in baseline {
        match present.get_mut(b) {
            Some(k) if *k > 0 => *k -= 1,
            _ => gone.push(b.clone()),
        }
    }
    gone
}

/// Criteria checked before this iteration and present but unchecked now.
pub fn regressions(before: &Checklist, after: &Checklist) -> Vec<String> {
    let mut was_checked: HashMap<String, usize> = HashMap::new();
    for c in before.criteria.iter().filter(|c| c.checked) {
        *was_checked.entry(normalize(&c.text)).or_default() += 1;
    }
    let mut still: HashMap<String, usize> = HashMap::new();
    for c in after.criteria.iter().filter(|c| c.checked) {
        *still.entry(normalize(&c.text)).or_default() += 1;
    }
    let mut out = Vec::new();
    for c in after.criteria.iter().filter(|c| !c.checked) {
        let t = normalize(&c.text);
        let before_n = was_checked.get(&t).copied().unwrap_or(0);
        let now_n = still.get(&t).copied().unwrap_or(0);
        if before_n > now_n {
            was_checked.insert(t.clone(), before_n - 1);
            out.push(c.text.clone());
        }
    }
    out
}

/// Criteria checked now that were not checked before (new ones included), in file order.
pub fn newly_checked(before: &Checklist, after: &Checklist) -> Vec<String> {
    let mut was_checked: HashMap<String, usize> = HashMap::new();
    for c in before.criteria.iter().filter(|c| c.checked) {
        *was_checked.entry(normalize(&c.text)).or_default() += 1;
    }
    let mut out = Vec::new();
    for c in after.criteria.iter().filter(|c| c.checked) {
        let t = normalize(&c.text);
        match was_checked.get_mut(&t) {
            Some(k) if *k > 0 => *k -= 1,
            _ => out.push(c.text.clone()),
        }
    }
    out
}

/// `<promise>WORD</promise>` in the agent's final message: after the last echo of the prompt,
/// compared after whitespace normalisation.
pub fn promise_in_final_message(stdout_tail: &[u8], word: &str, prompt: &str) -> bool {
    let text = String::from_utf8_lossy(stdout_tail);
    // An agent that echoes its prompt must not satisfy the promise by the echo.
    let last_prompt_line = prompt
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let after = match (!last_prompt_line.is_empty())
        .then(|| text.rfind(last_prompt_line))
        .flatten()
    {
        Some(i) => &text[i + last_prompt_line.len()..],
        None => &text[..],
    };
    let want = normalize(word);
    let mut rest = after;
    while let Some(start) = rest.find("<promise>") {
        let inner = &rest[start + "<promise>".len()..];
        match inner.find("</promise>") {
            Some(end) => {
                if normalize(&inner[..end]) == want {
                    return true;
                }
                rest = &inner[end..];
            }
            None => break,
        }
    }
    false
}

/// Whether questions may be asked (stdin and stderr are terminals and `--yes` was not given).
pub fn is_interactive(yes: bool) -> bool {
    !yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::checklist::parse_checklist;

    fn list(md: &str) -> Checklist {
        parse_checklist(md, 1)
    }

    #[test]
    fn tampering_is_removal_of_unchecked_baseline_items() {
        let baseline = vec!["a".to_string(), "b".to_string()];
        let now = list("## Success Criteria\n- [x] a\n- [ ] b  \n- [ ] c\n");
        assert!(tampered(&baseline, &now).is_empty());
        let now = list("## Success Criteria\n- [x] a\n- [ ] c\n");
        assert_eq!(tampered(&baseline, &now), vec!["b"]);
        let now = list("## Success Criteria\n- [ ] a\n- [ ] B\n");
        assert_eq!(
            tampered(&baseline, &now),
            vec!["b"],
            "rewording is tampering"
        );
    }

    #[test]
    fn regressions_and_new_checks() {
        let before = list("## Success Criteria\n- [x] a\n- [ ] b\n");
        let after = list("## Success Criteria\n- [ ] a\n- [x] b\n- [x] c\n");
        assert_eq!(regressions(&before, &after), vec!["a"]);
        assert_eq!(newly_checked(&before, &after), vec!["b", "c"]);
    }

    #[test]
    fn promise_must_follow_the_prompt_echo() {
        let prompt = "do it\nend with <promise>DONE</promise>\n";
        assert!(promise_in_final_message(
            b"work...\n<promise>DONE</promise>\n",
            "DONE",
            prompt
        ));
        assert!(promise_in_final_message(
            b"<promise> DONE </promise>",
            "DONE",
            prompt
        ));
        assert!(!promise_in_final_message(
            b"<promise>NOPE</promise>",
            "DONE",
            prompt
        ));
        let echo = format!("{prompt}thinking\n");
        assert!(!promise_in_final_message(echo.as_bytes(), "DONE", prompt));
    }

    #[test]
    fn commit_message_has_trailers() {
        assert_eq!(
            commit_message("ralph: iteration 2 — x", 2, "r1"),
            "ralph: iteration 2 — x\n\nRalph-Iteration: 2\nRalph-Run: r1\n"
        );
    }
}
