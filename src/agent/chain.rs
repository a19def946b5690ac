//! The agents of a run (SPEC §4, `--fallback-agent`): the run's own agent first, then its
//! fallbacks, each with the time its usage limit lifts. A limited agent hands the next attempt
//! to the first agent of the chain that is not limited; the first agent is used again once its
//! reset has passed; when all are limited, the one whose limit lifts first is waited for.

use std::time::{Duration, Instant};

use super::Agent;

/// The chain of agents and what each is limited by.
#[derive(Debug)]
pub(crate) struct Chain {
    agents: Vec<Link>,
    /// The agent of the attempt being run (an index into `agents`).
    current: usize,
}

#[derive(Debug)]
struct Link {
    agent: Agent,
    /// When its usage limit lifts (`None`: not limited).
    until: Option<Instant>,
    /// Its limited attempts in a row, for the backoff of a limit that names no reset.
    strikes: u32,
}

/// Which agent runs the next attempt after a limit, and after how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    pub(crate) agent: usize,
    pub(crate) wait: Duration,
}

impl Chain {
    /// `primary`, then `fallbacks` in their order.
    pub(crate) fn new(primary: Agent, fallbacks: Vec<Agent>) -> Chain {
        let agents = std::iter::once(primary)
            .chain(fallbacks)
            .map(|agent| Link {
                agent,
                until: None,
                strikes: 0,
            })
            .collect();
        Chain { agents, current: 0 }
    }

    /// The run's own agent.
    pub(crate) fn primary(&self) -> &Agent {
        &self.agents[0].agent
    }

    /// The agent of the attempt being run.
    pub(crate) fn current(&self) -> &Agent {
        &self.agents[self.current].agent
    }

    /// Whether the run has fallback agents (then every ITER record names its agent).
    pub(crate) fn has_fallbacks(&self) -> bool {
        self.agents.len() > 1
    }

    /// The fallbacks' names, in order.
    pub(crate) fn fallback_names(&self) -> Vec<&str> {
        self.agents[1..]
            .iter()
            .map(|l| l.agent.name.as_str())
            .collect()
    }

    /// The chain as the run's header names it: `claude` or `claude (fallback qwen, droid)`.
    pub(crate) fn describe(&self) -> String {
        let name = &self.primary().name;
        if self.has_fallbacks() {
            format!("{name} (fallback {})", self.fallback_names().join(", "))
        } else {
            name.clone()
        }
    }

    /// Every agent of the chain, the run's own first.
    pub(crate) fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.agents.iter().map(|l| &l.agent)
    }

    /// The agent for a new iteration: the first whose limit has lifted at `now` (else the one
    /// whose limit lifts first, which will be waited for when it is met again).
    pub(crate) fn choose(&mut self, now: Instant) -> &Agent {
        self.current = self.next(now).agent;
        self.current()
    }

    /// The current agent is usage-limited: its strike count (1 for the first limit in a row),
    /// for its backoff.
    pub(crate) fn strike(&mut self) -> u32 {
        let link = &mut self.agents[self.current];
        link.strikes = link.strikes.saturating_add(1);
        link.strikes
    }

    /// The current agent's limit lifts `wait` after `now`.
    pub(crate) fn limited_for(&mut self, wait: Duration, now: Instant) {
        self.agents[self.current].until = Some(now + wait);
    }

    /// The current agent ran an attempt that was not limited: its strikes are forgiven.
    pub(crate) fn worked(&mut self) {
        let link = &mut self.agents[self.current];
        link.strikes = 0;
        link.until = None;
    }

    /// The agent the next attempt goes to: the first of the chain whose limit has lifted at
    /// `now`, at once; when all are limited, the one whose limit lifts first (the earliest of
    /// the chain on a tie), after its wait.
    pub(crate) fn next(&self, now: Instant) -> Next {
        let left = |l: &Link| {
            l.until
                .map_or(Duration::ZERO, |u| u.saturating_duration_since(now))
        };
        if let Some(agent) = self.agents.iter().position(|l| left(l).is_zero()) {
            return Next {
                agent,
                wait: Duration::ZERO,
            };
        }
        let (agent, wait) = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, l)| (i, left(l)))
            .min_by_key(|&(i, wait)| (wait, i))
            .unwrap_or((0, Duration::ZERO));
        Next { agent, wait }
    }

    /// The attempt goes to agent `i` (of [`Chain::next`]); its name.
    pub(crate) fn switch(&mut self, i: usize) -> &Agent {
        self.current = i.min(self.agents.len() - 1);
        self.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentChoice;

    fn agent(name: &str) -> Agent {
        let mut a = Agent::resolve(&AgentChoice::Template(format!("sh -c {name}")), false)
            .expect("sh is on PATH");
        a.name = name.to_owned();
        a
    }

    fn chain(names: &[&str]) -> Chain {
        Chain::new(
            agent(names[0]),
            names[1..].iter().map(|n| agent(n)).collect(),
        )
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_limited_agent_hands_over_to_the_next_at_once() {
        let t0 = Instant::now();
        let mut c = chain(&["claude", "qwen", "droid"]);
        assert_eq!(c.choose(t0).name, "claude");
        c.limited_for(10 * MIN, t0);
        let next = c.next(t0);
        assert_eq!(
            next,
            Next {
                agent: 1,
                wait: Duration::ZERO
            }
        );
        assert_eq!(c.switch(next.agent).name, "qwen");
        // The next iteration, still inside claude's limit: qwen again.
        assert_eq!(c.choose(t0 + MIN).name, "qwen");
        // Past claude's reset: claude again.
        assert_eq!(c.choose(t0 + 11 * MIN).name, "claude");
    }

    #[test]
    fn all_limited_waits_for_the_earliest_reset() {
        let t0 = Instant::now();
        let mut c = chain(&["claude", "qwen"]);
        c.choose(t0);
        c.limited_for(10 * MIN, t0);
        c.switch(1);
        c.limited_for(3 * MIN, t0);
        assert_eq!(
            c.next(t0),
            Next {
                agent: 1,
                wait: 3 * MIN
            }
        );
        // A tie goes to the earlier agent of the chain.
        c.switch(0);
        c.limited_for(3 * MIN, t0);
        assert_eq!(c.next(t0 + MIN).agent, 0);
        assert_eq!(c.next(t0 + MIN).wait, 2 * MIN);
    }

    #[test]
    fn strikes_count_per_agent_and_are_forgiven_by_work() {
        let t0 = Instant::now();
        let mut c = chain(&["claude", "qwen"]);
        c.choose(t0);
        assert_eq!(c.strike(), 1);
        assert_eq!(c.strike(), 2);
        c.switch(1);
        assert_eq!(c.strike(), 1, "qwen's own count");
        c.worked();
        assert_eq!(c.strike(), 1);
        c.switch(0);
        c.worked();
        assert_eq!(c.strike(), 1);
    }

    #[test]
    fn a_single_agent_waits_for_itself() {
        let t0 = Instant::now();
        let mut c = chain(&["copilot"]);
        assert!(!c.has_fallbacks());
        c.choose(t0);
        c.limited_for(MIN, t0);
        assert_eq!(
            c.next(t0),
            Next {
                agent: 0,
                wait: MIN
            }
        );
        assert_eq!(c.next(t0 + 2 * MIN).wait, Duration::ZERO);
    }
}
