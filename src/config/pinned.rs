//! What a resume keeps of its run (SPEC §2.3): the agent, the checks, the sandbox and the
//! limits recorded when it began, except where the resume's own flags give one.

use std::time::Duration;

use super::sandbox::sandbox_config;
use super::{Layer, Settings, Source};
use crate::agent::AgentChoice;
use crate::error::Result;

impl Settings {
    /// The agent and checks to record for a resume ([`crate::state::Pinned`]).
    pub(crate) fn pinned(&self) -> crate::state::Pinned {
        let (agent, agent_cmd) = match &self.agent {
            AgentChoice::Preset(p) => (Some(p.clone()), None),
            AgentChoice::Template(t) => (None, Some(t.clone())),
        };
        crate::state::Pinned {
            agent,
            agent_cmd,
            fallback_agents: self.fallback_agents.clone(),
            test_command: self.test_command.clone(),
            verdict_command: self.verdict_command.clone(),
            sandbox: self
                .sandbox
                .as_ref()
                .map(|c| crate::sandbox::Pinned { net: c.net }),
            limits: Some(self.limits()),
        }
    }

    fn limits(&self) -> crate::state::Limits {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        crate::state::Limits {
            max_cost: self.max_cost,
            max_wait_ms: ms(self.max_wait),
            timeout_ms: self.timeout.map(ms),
            idle_timeout_ms: self.idle_timeout.map(ms),
            check_timeout_ms: ms(self.check_timeout),
            stuck_threshold: self.stuck_threshold,
            completion_promise: self.completion_promise.clone(),
            no_verify: self.no_verify,
            no_commit: self.no_commit,
            max_file_size: Some(self.max_file_size),
        }
    }

    /// Resuming: the recorded limits, but those the resume's own flags (`now`) give.
    fn keep_limits(&mut self, was: &crate::state::Limits, now: &Layer) {
        let ms = Duration::from_millis;
        if now.max_cost.is_none() {
            self.max_cost = was.max_cost;
        }
        if now.max_wait.is_none() {
            self.max_wait = ms(was.max_wait_ms);
        }
        if now.timeout.is_none() {
            self.timeout = was.timeout_ms.map(ms);
        }
        if now.idle_timeout.is_none() {
            self.idle_timeout = was.idle_timeout_ms.map(ms);
        }
        if now.check_timeout.is_none() {
            self.check_timeout = ms(was.check_timeout_ms);
        }
        if now.stuck_threshold.is_none() {
            self.stuck_threshold = was.stuck_threshold;
        }
        if now.completion_promise.is_none() {
            self.completion_promise.clone_from(&was.completion_promise);
        }
        if now.no_verify.is_none() {
            self.no_verify = was.no_verify;
        }
        if now.no_commit.is_none() {
            self.no_commit = was.no_commit;
        }
        if let Some(size) = was.max_file_size {
            self.max_file_size = size;
        }
    }

    /// Resuming: the recorded run's agent, checks and limits, except where the resume's own
    /// flags (`layers[0]`) name one. A command taken from `state.json` counts as the repository's: the
    /// agent can write that file, so under `--sandbox` it runs in the sandbox (SPEC §4). The
    /// sandbox is part of the run: a resume can turn it on or take its network away, never the
    /// reverse.
    pub(crate) fn keep_pinned(
        &mut self,
        pinned: &crate::state::Pinned,
        layers: &[Source],
    ) -> Result<()> {
        if let Some(was) = &pinned.sandbox {
            let config = self.sandbox.get_or_insert(sandbox_config(layers)?);
            if was.net == crate::sandbox::Net::None {
                config.net = crate::sandbox::Net::None;
            }
        }
        let now = layers
            .first()
            .map(|s| &s.layer)
            .cloned()
            .unwrap_or_default();
        if now.agent.is_none() && now.agent_cmd.is_none() {
            match (&pinned.agent, &pinned.agent_cmd) {
                (_, Some(t)) => self.agent = AgentChoice::Template(t.clone()),
                (Some(p), None) => self.agent = AgentChoice::Preset(p.clone()),
                (None, None) => {}
            }
        }
        if now.fallback_agents.is_none() {
            self.fallback_agents.clone_from(&pinned.fallback_agents);
        }
        if now.test_command.is_none() {
            self.test_command.clone_from(&pinned.test_command);
            self.test_command_from_repo = pinned.test_command.is_some();
        }
        if now.verdict_command.is_none() {
            self.verdict_command.clone_from(&pinned.verdict_command);
            self.verdict_command_from_repo = pinned.verdict_command.is_some();
        }
        if let Some(was) = &pinned.limits {
            self.keep_limits(was, &now);
        }
        Ok(())
    }
}
