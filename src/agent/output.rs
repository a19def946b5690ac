//! The shared vocabulary of what an agent reports, below every CLI and the observer: tokens and
//! cost ([`Usage`]), the agent's own account of its run ([`AgentResult`]), and a usage or rate
//! limit ([`Limit`], [`LimitKind`]) with the backoff used when it gives no reset time.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Tokens and cost; zero when unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Usage {
    /// Input tokens not read from the cache (Codex's figure has its cached tokens taken out).
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cache_creation_input_tokens: u64,
    pub(crate) cache_read_input_tokens: u64,
    pub(crate) cost_usd: f64,
    pub(crate) turns: u64,
}

/// `total` with `cost` added: only a finite, positive cost counts (a CLI's negative or absurd
/// figure never lowers a total), and the sum stays finite (JSON has no infinity: the run state
/// must stay readable).
pub(crate) fn add_cost(total: f64, cost: f64) -> f64 {
    if cost.is_finite() && cost > 0.0 {
        (total + cost).min(f64::MAX)
    } else {
        total
    }
}

impl Usage {
    /// Adds another usage to this one (for totals across iterations).
    pub(crate) fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
        self.cost_usd = add_cost(self.cost_usd, other.cost_usd);
        self.turns = self.turns.saturating_add(other.turns);
    }

    /// All tokens, cached or not.
    #[cfg(test)]
    pub(crate) fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }
}

/// The agent's own account of how the run ended (Claude's `result` event, Copilot's `result`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AgentResult {
    /// Test this, not `subtype`: an API error still says `subtype: "success"`.
    pub(crate) is_error: bool,
    pub(crate) subtype: String,
    pub(crate) api_error_status: Option<u16>,
    pub(crate) session_id: Option<String>,
    /// The final text (Claude's `result`; Copilot: its last assistant message).
    pub(crate) text: String,
    pub(crate) permission_denials: usize,
    pub(crate) duration_ms: Option<u64>,
    pub(crate) usage: Usage,
}

/// What kind of limit stopped an attempt. Shown and serialised as the word the agent's message
/// or event gave: `rate_limit`, `usage_limit`, `session_limit`, Claude's `five_hour`, …
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum LimitKind {
    /// Too many requests (HTTP 429).
    RateLimit,
    /// The plan's usage is used up (`You've hit your usage limit`, `usage_limit_reached`).
    UsageLimit,
    /// Claude's `You've hit your session limit`.
    SessionLimit,
    /// Claude's `You've hit your weekly limit`.
    WeeklyLimit,
    /// Claude's `You've hit your Opus limit`.
    OpusLimit,
    /// Copilot's `You've hit your session rate limit`.
    SessionRateLimit,
    /// Copilot's `No remaining quota for premium requests`.
    PremiumQuota,
    /// The model is overloaded (HTTP 529).
    Overloaded,
    /// Claude's `rateLimitType: five_hour`.
    FiveHour,
    /// Claude's `rateLimitType: seven_day`.
    SevenDay,
    /// Claude's `rateLimitType: seven_day_opus`.
    SevenDayOpus,
    /// Any other word an agent used (`seven_day_sonnet`, `You've hit your daily limit` →
    /// `daily_limit`), kept as said.
    Other(String),
}

/// The named kinds and their words.
const KIND_WORDS: &[(LimitKind, &str)] = &[
    (LimitKind::RateLimit, "rate_limit"),
    (LimitKind::UsageLimit, "usage_limit"),
    (LimitKind::SessionLimit, "session_limit"),
    (LimitKind::WeeklyLimit, "weekly_limit"),
    (LimitKind::OpusLimit, "opus_limit"),
    (LimitKind::SessionRateLimit, "session_rate_limit"),
    (LimitKind::PremiumQuota, "premium_quota"),
    (LimitKind::Overloaded, "overloaded"),
    (LimitKind::FiveHour, "five_hour"),
    (LimitKind::SevenDay, "seven_day"),
    (LimitKind::SevenDayOpus, "seven_day_opus"),
];

impl LimitKind {
    /// The kind a word names (as the agent spelled it; case and spaces do not matter).
    pub(crate) fn from_word(word: &str) -> LimitKind {
        let word = word.trim().to_ascii_lowercase().replace([' ', '-'], "_");
        KIND_WORDS
            .iter()
            .find(|(_, w)| *w == word)
            .map_or(LimitKind::Other(word), |(kind, _)| kind.clone())
    }

    /// The word: `rate_limit`, `five_hour`, …
    pub(crate) fn as_str(&self) -> &str {
        match self {
            LimitKind::Other(word) => word,
            named => KIND_WORDS
                .iter()
                .find(|(kind, _)| kind == named)
                .map_or("limit", |(_, w)| w),
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for LimitKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<str> for LimitKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for LimitKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A usage or rate limit reported by the agent: the attempt is not an iteration; ralph waits until
/// `reset_at` (or [`backoff`]) and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limit {
    /// When the limit lifts, when the agent said so in a form that could be read.
    pub(crate) reset_at: Option<DateTime<Utc>>,
    pub(crate) kind: LimitKind,
    /// What the agent said, one line, shortened.
    pub(crate) message: String,
}

/// The shortest backoff, whatever `--limit-backoff` says (SPEC §6): a zero base must never make
/// ralph re-run a limited agent in a tight loop.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_secs(1);

/// Backoff when a limit gives no reset time: attempt 1 → `base` (at least [`MIN_BACKOFF`]),
/// doubling, capped at 30 min.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    const CAP: Duration = Duration::from_secs(30 * 60);
    let doublings = attempt.saturating_sub(1).min(16);
    base.max(MIN_BACKOFF)
        .saturating_mul(1 << doublings)
        .min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_kinds_are_the_agents_words() {
        for (kind, word) in KIND_WORDS {
            assert_eq!(LimitKind::from_word(word), *kind);
            assert_eq!(kind.to_string(), *word);
            assert_eq!(serde_json::to_value(kind).unwrap(), *word);
        }
        assert_eq!(LimitKind::from_word("Five-Hour"), LimitKind::FiveHour);
        let other = LimitKind::from_word("seven_day_sonnet");
        assert_eq!(other, LimitKind::Other("seven_day_sonnet".into()));
        assert_eq!(other.to_string(), "seven_day_sonnet");
        assert_eq!(
            serde_json::json!({ "kind": other }),
            serde_json::json!({ "kind": "seven_day_sonnet" })
        );
        assert_eq!(LimitKind::RateLimit, "rate_limit");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_secs(60);
        let secs: Vec<u64> = (0..=8).map(|a| backoff(base, a).as_secs()).collect();
        assert_eq!(secs, [60, 60, 120, 240, 480, 960, 1800, 1800, 1800]);
        assert_eq!(backoff(base, u32::MAX), Duration::from_secs(1800));
        assert_eq!(backoff(Duration::from_secs(1), 3), Duration::from_secs(4));
    }

    #[test]
    fn costs_only_add_and_stay_finite() {
        assert_eq!(add_cost(1.0, 0.5), 1.5);
        for bad in [-100.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(add_cost(1.0, bad), 1.0, "{bad}");
        }
        assert_eq!(add_cost(f64::MAX, f64::MAX), f64::MAX);
        let mut u = Usage::default();
        for _ in 0..3 {
            u.add(&Usage {
                cost_usd: 1.7e308,
                ..Usage::default()
            });
        }
        assert!(u.cost_usd.is_finite());
    }

    #[test]
    fn backoff_is_at_least_a_second_whatever_the_base() {
        for base in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(999),
        ] {
            for attempt in [0, 1, 2, 5, u32::MAX] {
                assert!(backoff(base, attempt) >= MIN_BACKOFF, "{base:?} {attempt}");
            }
            assert_eq!(backoff(base, 1), MIN_BACKOFF);
            assert_eq!(backoff(base, 3), Duration::from_secs(4));
        }
        assert_eq!(backoff(Duration::MAX, 9), Duration::from_secs(1800));
    }

    #[test]
    fn usage_adds_up() {
        let mut total = Usage::default();
        let one = Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_creation_input_tokens: 3,
            cache_read_input_tokens: 4,
            cost_usd: 0.5,
            turns: 1,
        };
        total.add(&one);
        total.add(&one);
        assert_eq!(total.total_tokens(), 20);
        assert_eq!(total.cost_usd, 1.0);
        assert_eq!(total.turns, 2);
    }
}
