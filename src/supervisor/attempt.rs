//! Phase 2 of an iteration (SPEC §5.1 steps 3–5, §6): run the agent; a usage limit is not an
//! iteration, so the attempt is waited out and run again inside this phase. Every attempt's cost
//! counts. The phase ends with the agent's last run, or with a halt (interrupt, a login failure,
//! the waiting or cost budget) that the record phase closes like any other ending.

use super::Loop;
use super::checks::run_failed;
use super::decide::Halt;
use super::prepare::Prepared;
use std::time::Duration;

use crate::agent::chain::Next;
use crate::agent::output::add_cost;
use crate::agent::render::Stream;
use crate::agent::stream::{Limit, Observer, Usage, format_for};
use crate::agent::views::Watched;
use crate::error::Result;
use crate::event::{Event, Waiting};
use crate::git::Taken;
use crate::live::LiveView;
use crate::proc::observe::{Echo, Watchers};
use crate::proc::relay::{self, Finished, RunError, StopCause};
use crate::ui::human_duration;

/// How the agent phase of an iteration ended.
pub(super) struct Attempted {
    /// The last attempt.
    pub(crate) finished: Finished,
    /// Cost and tokens of every attempt of this iteration, limited ones included.
    pub(crate) usage: Usage,
    /// The agent's final message (for the completion promise and the reviewer).
    pub(crate) final_message: Option<String>,
    pub(crate) ended_at: String,
    /// Set when the iteration ends here instead of being judged.
    pub(crate) stop: Option<Halt>,
}

impl Loop {
    pub(super) async fn attempt(&mut self, prep: &mut Prepared) -> Result<Attempted> {
        let mut usage = Usage::default();
        let mut starts = 0;
        loop {
            let (finished, observer) = match self.run_agent(prep).await? {
                Ok(ran) => ran,
                Err(halt) => return Ok(Attempted::failed(usage, halt)),
            };
            let u = observer.usage();
            self.add_usage(&u);
            usage.add(&u);
            let interrupted =
                finished.stopped == Some(StopCause::Interrupt) || self.interrupts.count() > 0;
            let stop = if interrupted {
                Some(Halt::Interrupted)
            } else if let Some(limit) = observer.limit().cloned() {
                match self.after_limit(prep, &limit).await? {
                    None => {
                        use std::io::Write;
                        let _ = writeln!(
                            prep.transcript,
                            "\n--- ralph: usage limit; retrying iteration {} with {} ---",
                            prep.n,
                            self.agents.current().name
                        );
                        continue;
                    }
                    stop => stop,
                }
            } else if let Some(said) = observer.cannot_start() {
                Some(self.cannot_start(said, finished.exit_code))
            } else if let Some(said) = observer.sandbox_refused().filter(|said| {
                starts += 1;
                self.setup.settings.sandboxed.is_some()
                    && starts < crate::sandbox::START_TRIES
                    && crate::sandbox::vanished(said)
            }) {
                // A socket or secret listed to be covered vanished as bwrap started: again.
                self.log(&format!(
                    "Iteration {}: the sandbox did not start ({said}); starting it again",
                    prep.n
                ));
                continue;
            } else if let Some(said) = observer
                .sandbox_refused()
                .filter(|_| self.setup.settings.sandboxed.is_some())
            {
                Some(sandbox_cannot_start(said, finished.exit_code))
            } else {
                observer.auth_error().map(|auth| Halt::Error {
                    message: format!("agent `{}` cannot work: {auth}", self.agents.current().name),
                    hint: "log the agent CLI in (or set its API key), then continue with `ralph resume`"
                        .into(),
                })
            };
            if observer.limit().is_none() {
                self.agents.worked();
            }
            // The agent may have deleted .ralph/: the logs must be writable again.
            self.tree.rd.ensure_runtime()?;
            self.source.mark_planning_ran();
            self.note_agent_end(prep, &finished, observer.failure());
            return Ok(Attempted {
                final_message: observer.final_message(),
                finished,
                usage,
                ended_at: crate::state::now_rfc3339(),
                stop,
            });
        }
    }

    /// The agent never started (the shell could not run it): the run halts at once, naming
    /// the command and what the shell said — under `--sandbox`, a path in a directory the
    /// sandbox makes private is said to be one.
    fn cannot_start(&self, said: &str, code: i32) -> Halt {
        let private = ["/tmp/", "/run/", "/var/run/", "/dev/shm/"];
        let hint = if self.setup.settings.sandbox.is_some()
            && private.iter().any(|p| said.contains(p))
        {
            "under --sandbox, /tmp, /run and /dev/shm are the sandbox's own, empty: put the agent's script in the repository or your home"
        } else {
            "check the path in --agent-cmd (relative paths start in the repository) and that the file is executable"
        };
        Halt::Error {
            message: format!(
                "agent `{}` could not start (exit {code}): {said}",
                self.agents.current().name
            ),
            hint: hint.into(),
        }
    }

    /// One run of the agent, relayed to the transcript (and the terminal), observed. A
    /// transcript that cannot be written (a full disk) stops the agent and the run, as a halt
    /// the record phase still closes.
    async fn run_agent(
        &mut self,
        prep: &mut Prepared,
    ) -> Result<std::result::Result<(Finished, Observer), Halt>> {
        let mut observer =
            Observer::new(format_for(&self.agents.current().name), chrono::Utc::now())
                .given(&prep.prompt);
        let view = (!self.setup.stream && !self.setup.ui.quiet && LiveView::available())
            .then(|| self.live_view(prep.n));
        // The latest activity for `ralph watch`; dropped (its last line written) with this run.
        let activity = crate::activity::Sink::start(&self.tree.rd.path);
        let mut watched = Watched::new(&mut observer)
            .shown_on(view.as_ref())
            .shown_on(Some(&activity));
        // `--stream`: a JSON agent's events rendered as text (the transcript stays raw).
        let mut echo = Stream::new(self.echo(), format_for(&self.agents.current().name));
        let watchers = Watchers::default().with(&mut watched).with(&mut echo);
        let root = self.tree.repo.root().to_path_buf();
        let limits = self.agent_limits();
        if let Some(w) = &self.tree.watch {
            w.begin_agent();
        }
        self.agents_git_afresh()?;
        let inv = self.setup.settings.confine(prep.inv.clone(), true);
        if self.interrupts.count() > 0 {
            // Interrupted while the attempt was set up (no await since: the count cannot move
            // before `relay::run` takes it): no agent is started.
            if let Some(w) = &self.tree.watch {
                w.end_agent();
            }
            if let Some(v) = view {
                v.finish();
            }
            return Ok(Err(Halt::Interrupted));
        }
        let run = relay::run(
            &inv,
            &root,
            &mut prep.transcript,
            &limits,
            &mut self.interrupts,
            watchers,
        )
        .await;
        if let Some(w) = &self.tree.watch {
            w.end_agent();
        }
        if let Some(v) = view {
            v.finish();
        }
        self.take_agents_commits(prep.n);
        match run {
            Ok(finished) => Ok(Ok((finished, observer))),
            Err(RunError::Transcript(e)) => {
                let message = format!(
                    "iteration {} failed to write the transcript `{}`: {e}",
                    prep.n,
                    prep.transcript_path.display()
                );
                self.log(&format!(
                    "Iteration {}: the transcript cannot be written ({e}); the agent was stopped",
                    prep.n
                ));
                Ok(Err(Halt::Error {
                    message,
                    hint: "free some disk space, then continue with `ralph resume`".into(),
                }))
            }
            Err(e) => Err(run_failed(e, format_args!("agent `{}`", prep.inv.program))),
        }
    }

    /// Under `--sandbox`: the agent's own git directory made afresh from ralph's repository
    /// (`sandbox/agent_git.rs`) before it runs.
    fn agents_git_afresh(&self) -> Result<()> {
        match self
            .setup
            .settings
            .sandboxed
            .as_ref()
            .and_then(|s| s.agent_git())
        {
            Some(a) => a.reset(),
            None => Ok(()),
        }
    }

    /// Under `--sandbox`: what the agent committed in its own git directory, fetched through
    /// the sandbox's `git upload-pack` (`git/fetch.rs`); the branch moves on to it when it
    /// descends from ralph's tip. Whatever fails, the work tree is committed as always.
    fn take_agents_commits(&self, n: u32) {
        let Some(s) = &self.setup.settings.sandboxed else {
            return;
        };
        // An agent that committed nothing spares the fetch (and the sandbox it starts).
        if s.agent_git().is_some_and(|a| a.unmoved()) {
            return;
        }
        match self
            .tree
            .repo
            .take_agents_commits(&s.upload_pack(), &s.repo.git_dir)
        {
            Ok(Taken::Nothing) => {}
            Ok(Taken::Forwarded { from, to }) => {
                self.log(&format!(
                    "Iteration {n}: the agent's commits taken (fetched from its git directory): the branch is at {}",
                    &to[..to.len().min(7)]
                ));
                if let Some(agent) = s.agent_git() {
                    self.take_agents_lfs(n, from.as_deref(), &to, &agent.outside());
                }
            }
            Ok(Taken::NotDescendant { commit }) => {
                let said = format!(
                    "iteration {n}: the agent's HEAD ({}) does not descend from the loop's branch (it reset or rewrote ralph's commits): its commits are not taken; its work tree is committed as always",
                    &commit[..commit.len().min(7)]
                );
                self.setup.ui.warn(&said);
                self.log(&format!("Iteration {n}: {said}"));
            }
            Err(e) => {
                let said = format!(
                    "iteration {n}: the agent's commits cannot be fetched ({e}): its work tree is committed as always"
                );
                self.setup.ui.warn(&said);
                self.log(&format!("Iteration {n}: {said}"));
            }
        }
    }

    /// Under `--sandbox`: the LFS objects of the agent's commits (`from`, ralph's tip before,
    /// to `to`), taken from its git directory through ralph's checked door (`git/lfs.rs`);
    /// what is refused is said once, and never copied.
    fn take_agents_lfs(&self, n: u32, from: Option<&str>, to: &str, agent_git: &std::path::Path) {
        let max = crate::git::lfs::max_bytes().unwrap_or(u64::MAX);
        let said = match self.tree.repo.take_agents_lfs(from, to, agent_git, max) {
            Ok(taken) => {
                if taken.copied > 0 {
                    self.log(&format!(
                        "Iteration {n}: {} LFS object(s) of the agent's taken ({} bytes)",
                        taken.copied, taken.bytes
                    ));
                }
                if taken.refused.is_empty() {
                    return;
                }
                let more = taken.refused.len().saturating_sub(5);
                format!(
                    "iteration {n}: the agent's commits name LFS objects ralph does not take from its git directory (their files stay pointers): {}{}",
                    taken.refused[..taken.refused.len() - more].join("; "),
                    if more > 0 {
                        format!("; and {more} more")
                    } else {
                        String::new()
                    }
                )
            }
            Err(e) => format!(
                "iteration {n}: the LFS objects of the agent's commits cannot be taken ({e}): their files stay pointers"
            ),
        };
        self.setup.ui.warn(&said);
        self.log(&format!("Iteration {n}: {said}"));
    }

    /// Count an attempt's cost and tokens: the run's, and the current agent's.
    pub(super) fn add_usage(&mut self, u: &Usage) {
        self.state.cost_usd = add_cost(self.state.cost_usd, u.cost_usd);
        // Saturating: the counters may come from a `state.json` the agent wrote.
        self.state.input_tokens = self.state.input_tokens.saturating_add(u.input_tokens);
        self.state.output_tokens = self.state.output_tokens.saturating_add(u.output_tokens);
        let name = self.agents.current().name.clone();
        let mine = self.state.agents.entry(name).or_default();
        mine.cost_usd = add_cost(mine.cost_usd, u.cost_usd);
        mine.input_tokens = mine.input_tokens.saturating_add(u.input_tokens);
        mine.output_tokens = mine.output_tokens.saturating_add(u.output_tokens);
    }

    /// Where `--stream` copies the agent's output.
    pub(super) fn echo(&self) -> Echo {
        match (self.setup.stream, self.setup.ui.json) {
            (false, _) => Echo::None,
            (true, false) => Echo::Stdout,
            (true, true) => Echo::Stderr,
        }
    }

    /// The spinner of one agent run, watching the task file when there is one.
    fn live_view(&self, n: u32) -> LiveView {
        let (done, total) = self.source.counts();
        let unit = self.source.unit();
        let watch = self.source.watched_file().map(|path| {
            let path = path.to_path_buf();
            let read = path.clone();
            let counter: crate::live::Counter = Box::new(move || {
                crate::task::document::load_task_file(&read)
                    .ok()
                    .map(|d| format!("{}/{} criteria", d.checklist.done(), d.checklist.total()))
            });
            (path, counter)
        });
        LiveView::start(
            format!("iteration {n}/{}", self.setup.settings.max_iterations),
            format!("{done}/{total} {unit}"),
            watch,
        )
    }

    /// Log what happened to the agent process and collect report notes; `failure`: what the
    /// CLI said its run failed on, shown with a non-zero exit.
    fn note_agent_end(&self, prep: &mut Prepared, f: &Finished, failure: Option<&str>) {
        let n = prep.n;
        let limits = self.agent_limits();
        let how = if f.killed { "SIGKILL" } else { "SIGTERM" };
        // (activity-log line, report note)
        let said = match f.stopped {
            Some(StopCause::Timeout) => {
                let t = limits.timeout.map(human_duration).unwrap_or_default();
                Some((
                    format!("agent timed out after {t} (stopped with {how})"),
                    format!("Agent timed out after {t} (stopped with {how})"),
                ))
            }
            Some(StopCause::IdleTimeout) => {
                let t = limits.idle_timeout.map(human_duration).unwrap_or_default();
                Some((
                    format!("agent printed nothing for {t}: idle timeout (stopped with {how})"),
                    format!("Agent idle for {t}: stopped with {how}"),
                ))
            }
            Some(StopCause::Interrupt) => {
                self.log(&format!(
                    "Iteration {n}: interrupted (agent stopped with {how})"
                ));
                None
            }
            None if f.exit_code != 0 => {
                let said = failure.map_or_else(String::new, |s| format!(": {s}"));
                Some((
                    format!("agent exited with code {}{said}", f.exit_code),
                    format!("Agent exited with code {}{said}", f.exit_code),
                ))
            }
            None => None,
        };
        if let Some((line, note)) = said {
            self.log(&format!("Iteration {n}: {line}"));
            prep.notes.push(note);
        }
        if f.leaked_pipes {
            self.log(&format!(
                "Iteration {n}: a process left by the agent still held its output after it exited; killed"
            ));
            prep.notes
                .push("A leftover process held the agent's output: killed".into());
        }
        if f.left_running > 0 {
            self.log(&format!(
                "Iteration {n}: ended {} process(es) the agent left running (daemons do not outlive an iteration)",
                f.left_running
            ));
        }
    }

    /// A usage limit ended the attempt. The limited agent waits out its reset; the next
    /// attempt goes at once to the first agent of the chain that is not limited, or, when all
    /// are, to the one whose limit lifts first, after waiting for it. `None`: run the attempt
    /// again (`prep.inv` is the agent's). `Some(halt)`: the iteration ends here (interrupted, or
    /// the waiting or cost budget is spent); the record phase still closes it.
    async fn after_limit(&mut self, prep: &mut Prepared, limit: &Limit) -> Result<Option<Halt>> {
        let n = prep.n;
        if let Some(max) = self.setup.settings.max_cost
            && self.state.cost_usd >= max
        {
            self.log(&format!(
                "Iteration {n}: usage limit ({}), and the total cost reached --max-cost",
                limit.kind
            ));
            return Ok(Some(Halt::Budget(
                "the total cost reached --max-cost".into(),
            )));
        }
        let strikes = self.agents.strike();
        let own = limit_wait(limit, self.setup.settings.limit_backoff, strikes);
        let now = std::time::Instant::now();
        self.agents.limited_for(own, now);
        let was = self.agents.current().name.clone();
        let next = self.agents.next(now);
        if !next.wait.is_zero()
            && let Some(halt) = self.wait_for_limit(n, limit, next).await?
        {
            return Ok(Some(halt));
        }
        let to = self.agents.switch(next.agent).name.clone();
        if to != was {
            self.announce_switch(n, limit, &was, &to, own);
        }
        prep.inv = self.invocation(n, &prep.prompt, &prep.prompt_file)?;
        self.state.agent = Some(to);
        Ok(None)
    }

    /// Every agent of the chain is limited: wait `next.wait`, the earliest reset (bounded by
    /// `--max-wait`), showing the wait. `Some(halt)` when the iteration ends instead.
    async fn wait_for_limit(&mut self, n: u32, limit: &Limit, next: Next) -> Result<Option<Halt>> {
        let wait = next.wait;
        if self.waited().saturating_add(wait) > self.setup.settings.max_wait {
            let why = format!(
                "the agent's usage limit ({}) would need {} more waiting, past --max-wait {}",
                limit.kind,
                human_duration(wait),
                human_duration(self.setup.settings.max_wait)
            );
            self.log(&format!("Iteration {n}: {}: {why}", limit.message));
            return Ok(Some(Halt::Budget(why)));
        }
        let agent = self
            .agents
            .agents()
            .nth(next.agent)
            .map_or_else(String::new, |a| a.name.clone());
        self.announce_wait(n, limit, wait, agent);
        self.run_hooks().await;
        let interrupted = self
            .sleep_interruptibly(wait, &limit.kind.to_string())
            .await;
        self.state.waited_s += wait.as_secs_f64();
        if interrupted {
            return Ok(Some(Halt::Interrupted));
        }
        self.state.save(&self.tree.rd.state_file())?;
        Ok(None)
    }

    /// The limited agent `was` hands the attempt to `to`, at once.
    fn announce_switch(&mut self, n: u32, limit: &Limit, was: &str, to: &str, own: Duration) {
        self.log(&format!(
            "Iteration {n}: usage limit of {was} ({}: {}); {to} takes over at once ({was} is limited for {})",
            limit.kind,
            limit.message,
            human_duration(own)
        ));
        self.setup.ui.alert(&format!(
            "⇄ Usage limit of {was} ({}): iteration {n} runs again with {to}",
            limit.kind
        ));
    }

    fn announce_wait(&mut self, n: u32, limit: &Limit, wait: Duration, agent: String) {
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
        ));
        self.setup.ui.alert(&format!(
            "⏸ Usage limit ({}): waiting {} ({when}); iteration {n} will run again",
            limit.kind,
            human_duration(wait)
        ));
        self.emit(Event::Waiting(Waiting {
            iteration: n,
            agent,
            kind: limit.kind.clone(),
            message: limit.message.clone(),
            reset_at: limit.reset_at.map(|t| t.to_rfc3339()),
            wait_s: wait.as_secs_f64(),
        }));
    }

    /// Sleep for `wait` with a countdown on a terminal; true when an interrupt cut it short.
    async fn sleep_interruptibly(&mut self, wait: std::time::Duration, kind: &str) -> bool {
        let countdown = (!self.setup.ui.quiet && LiveView::available()).then(|| {
            LiveView::start(
                format!("waiting for the usage limit ({kind})"),
                String::new(),
                None,
            )
        });
        let activity = crate::activity::Sink::start(&self.tree.rd.path);
        let until = chrono::Local::now() + chrono::Duration::from_std(wait).unwrap_or_default();
        activity.set(&format!(
            "waiting for the usage limit ({kind}) until {}",
            until.format("%H:%M:%S")
        ));
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
        interrupted
    }
}

/// How long to wait before retrying: until a little past the reported reset, else a backoff
/// from `--limit-backoff` (never under 1 s) that doubles with each limited attempt. A limit met
/// again right after its reset also backs off, so a misread reset never spins.
fn limit_wait(limit: &Limit, base: Duration, attempt: u32) -> Duration {
    use crate::agent::stream::backoff;
    let base = base.max(std::time::Duration::from_secs(1));
    match limit.reset_at {
        Some(t) => {
            let until = (t - chrono::Utc::now()).to_std().unwrap_or_default()
                + std::time::Duration::from_secs(1);
            if attempt > 1 {
                until.max(backoff(base, attempt - 1))
            } else {
                until
            }
        }
        None => backoff(base, attempt),
    }
}

impl Attempted {
    /// The agent phase ended in an error (its transcript failed, the agent could not be run):
    /// there is no finished attempt to show, and the ITER record says `exit error`. `usage`:
    /// what the attempts before cost.
    pub(super) fn failed(usage: Usage, halt: Halt) -> Attempted {
        Attempted {
            finished: Finished {
                exit_code: 128 + libc::SIGKILL,
                stopped: None,
                killed: true,
                leaked_pipes: false,
                left_running: 0,
                stdout_tail: Vec::new(),
            },
            usage,
            final_message: None,
            ended_at: crate::state::now_rfc3339(),
            stop: Some(halt),
        }
    }
}

/// The sandbox did not start (bwrap's own error, before anything ran in it): not the agent's
/// doing, and no later attempt would do better — the run halts at once with bwrap's words.
fn sandbox_cannot_start(said: &str, code: i32) -> Halt {
    Halt::Error {
        message: format!("the sandbox could not start (exit {code}): {said}"),
        hint: "that is bubblewrap's own word on the sandbox (`ralph run --dry-run --sandbox` prints the whole argv); fix what it names, then continue with `ralph resume`".into(),
    }
}
