//! Limit, retry and login messages in text, as data: each CLI lists the messages it prints in a
//! [`Patterns`], and [`find`] looks for them in an error field (anywhere) or on a plain line of a
//! failed attempt (only where a message opens the line, unquoted).

use super::output::LimitKind;
use super::text::floor_char_boundary;

/// A plain-text signal must start within this many bytes of its line.
const SIGNAL_WINDOW: usize = 200;

/// Words allowed before a login failure on a plain line (`Error:`, a log prefix, a timestamp).
const AUTH_PREFIX_WORDS: &[&str] = &[
    "error", "err", "fatal", "warn", "warning", "info", "api", "failed", "failure", "codex",
    "core", "exec", "copilot", "claude", "gemini", "cli",
];

/// Where a text to be scanned came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A field the agent uses for errors: a message anywhere in it counts.
    Error,
    /// A plain line of a failed attempt: a message must open the line.
    Plain,
}

/// What a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Limit,
    /// A rate limit the agent is retrying by itself: informational until it proves final.
    Retry,
    Auth,
}

/// A message found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) class: Class,
    pub(crate) kind: LimitKind,
    /// Byte offset of the message in the scanned text.
    pub(crate) at: usize,
}

/// Finds, in the ASCII-lowercased text, a rate limit the CLI retries by itself: the offset of
/// the message.
pub(crate) type RetryMatcher = fn(&str) -> Option<usize>;

/// The limit, retry and login messages one CLI prints. Lowercase patterns.
#[derive(Debug)]
pub(crate) struct Patterns {
    /// `You've hit your session limit`, `… weekly limit`, `… usage limit`, `… session rate limit`
    /// (the words before `limit` name the kind).
    pub(crate) hit_your_limit: bool,
    /// Claude's older `5-hour limit reached ∙ resets 3pm`.
    pub(crate) limit_reached_resets: bool,
    pub(crate) limits: &'static [(&'static str, LimitKind)],
    pub(crate) auth: &'static [&'static str],
    pub(crate) retries: &'static [RetryMatcher],
}

/// The first message of `patterns` in `text` (`lower` is its ASCII-lowercase copy).
pub(crate) fn find(text: &str, lower: &str, scope: Scope, patterns: &Patterns) -> Option<Found> {
    let plain = scope == Scope::Plain;
    let limit_ok = |at: usize| !plain || plain_limit_ok(text, at);
    let limit = |kind: LimitKind, at: usize| Found {
        class: Class::Limit,
        kind,
        at,
    };
    if patterns.hit_your_limit
        && let Some((kind, at)) = hit_your_limit(lower, &limit_ok)
    {
        return Some(limit(kind, at));
    }
    for (pattern, kind) in patterns.limits {
        if let Some(p) = lower.find(pattern) {
            let at = opener_start(lower, p);
            if limit_ok(at) {
                return Some(limit(kind.clone(), at));
            }
        }
    }
    if patterns.limit_reached_resets
        && let Some(p) = lower.find("limit reached")
        && lower[p..]
            .get(..40)
            .unwrap_or(&lower[p..])
            .contains("resets")
        && limit_ok(p)
    {
        return Some(limit(LimitKind::UsageLimit, p));
    }
    for pattern in patterns.auth {
        if let Some(p) = lower.find(pattern)
            && (!plain || plain_auth_ok(text, p))
        {
            return Some(Found {
                class: Class::Auth,
                kind: LimitKind::Other("auth".into()),
                at: p,
            });
        }
    }
    patterns
        .retries
        .iter()
        .find_map(|matcher| matcher(lower).filter(|at| limit_ok(*at)))
        .map(|at| Found {
            class: Class::Retry,
            kind: LimitKind::RateLimit,
            at,
        })
}

/// `You've hit your session limit` and the like: the kind its words name, and where it starts.
fn hit_your_limit(lower: &str, limit_ok: &impl Fn(usize) -> bool) -> Option<(LimitKind, usize)> {
    let mut from = 0;
    while let Some(p) = lower[from..].find("hit your ") {
        let p = from + p;
        let after = p + "hit your ".len();
        from = after;
        let span = &lower[after..floor_char_boundary(lower, after + 40).max(after)];
        let Some(q) = span.find("limit") else {
            continue;
        };
        let words: Vec<&str> = span[..q]
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let at = opener_start(lower, p);
        if words.len() <= 3 && limit_ok(at) {
            let kind = if words.is_empty() {
                LimitKind::UsageLimit
            } else {
                LimitKind::from_word(&format!("{}_limit", words.join("_")))
            };
            return Some((kind, at));
        }
    }
    None
}

/// Moves a match back over an opening `You've ` / `You’ve ` / `You have `.
fn opener_start(lower: &str, p: usize) -> usize {
    for opener in ["you've ", "you\u{2019}ve ", "you have ", "youve "] {
        if lower[..p].ends_with(opener) {
            return p - opener.len();
        }
    }
    p
}

/// Where the line holding byte `at` starts.
pub(crate) fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |n| n + 1)
}

/// A limit message on a plain line must open it (give or take a prefix such as `Error: ` or a
/// log header), and not be quoted (as in source code or docs an agent is reading).
fn plain_limit_ok(text: &str, at: usize) -> bool {
    let start = line_start(text, at);
    at - start <= SIGNAL_WINDOW && !text[start..at].contains(['"', '\'', '`', '\\'])
}

/// A login failure on a plain line halts the run, so only an error prefix may come before it.
fn plain_auth_ok(text: &str, at: usize) -> bool {
    if !plain_limit_ok(text, at) {
        return false;
    }
    let start = line_start(text, at);
    text[start..at]
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .all(|w| {
            w.chars().any(|c| c.is_ascii_digit())
                || AUTH_PREFIX_WORDS
                    .iter()
                    .any(|allowed| allowed.eq_ignore_ascii_case(w))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Patterns = Patterns {
        hit_your_limit: true,
        limit_reached_resets: true,
        limits: &[("no remaining quota", LimitKind::PremiumQuota)],
        auth: &["not logged in"],
        retries: &[|lower| lower.find("retrying 429")],
    };

    fn found(text: &str, scope: Scope) -> Option<Found> {
        find(text, &text.to_ascii_lowercase(), scope, &ALL)
    }

    #[test]
    fn hit_your_limit_names_its_kind() {
        let kind = |t| found(t, Scope::Plain).map(|f| f.kind);
        assert_eq!(kind("You've hit your limit"), Some(LimitKind::UsageLimit));
        assert_eq!(
            kind("You’ve hit your weekly limit · resets 5pm"),
            Some(LimitKind::WeeklyLimit)
        );
        assert_eq!(
            kind("You've hit your session rate limit."),
            Some(LimitKind::SessionRateLimit)
        );
        assert_eq!(
            kind("You have hit your daily limit"),
            Some(LimitKind::Other("daily_limit".into()))
        );
        assert_eq!(
            kind("You hit your head against the wall at the limit"),
            None
        );
    }

    #[test]
    fn a_plain_line_must_open_with_the_message() {
        for (text, class) in [
            ("Error: No remaining quota", Some(Class::Limit)),
            ("  the error said \"no remaining quota\"", None),
            ("Not logged in", Some(Class::Auth)),
            ("ERROR 2026-01-01: not logged in", Some(Class::Auth)),
            ("Users not logged in see /login", None),
            ("retrying 429 in 2s", Some(Class::Retry)),
            ("log: `retrying 429`", None),
        ] {
            assert_eq!(found(text, Scope::Plain).map(|f| f.class), class, "{text}");
        }
        // In an error field the message may be anywhere.
        let f = found("Users not logged in see /login", Scope::Error).unwrap();
        assert_eq!((f.class, f.at), (Class::Auth, 6));
        // Only patterns the CLI listed count.
        assert_eq!(found("API Error: 429", Scope::Error), None);
    }
}
