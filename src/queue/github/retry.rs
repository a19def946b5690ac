//! Which of GitHub's answers are worth another try, and when (SPEC §15): a 5xx, a connection
//! reset, refused or timed out is tried again after an exponential backoff with jitter, within a
//! retry budget; a 429, or a 403 with `x-ratelimit-remaining: 0` or a `retry-after`, waits for
//! the limit's reset; anything else stands. Pure, so the schedule is tested as a table.

use std::io::ErrorKind;
use std::time::Duration;

use crate::error::{Error, Result};

/// The first wait.
const FIRST: Duration = Duration::from_millis(500);
/// No single wait is longer.
const CAP: Duration = Duration::from_secs(30);
/// How long one request keeps trying through transient faults, unless `RALPH_TRACKER_RETRY`.
const BUDGET: Duration = Duration::from_secs(120);
/// The variable that sets the budget (a humantime duration; `0s`: never try again).
pub(super) const BUDGET_VAR: &str = "RALPH_TRACKER_RETRY";

/// What a failed try calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Not transient: the answer stands.
    Stop,
    /// Transient: try again after the backoff, while the budget lasts.
    Backoff,
    /// A rate limit: try again once it resets, `wait` from now.
    RateLimit(Duration),
}

/// The rate-limit headers of an answer, as sent.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LimitHeaders<'a> {
    pub(super) retry_after: Option<&'a str>,
    pub(super) remaining: Option<&'a str>,
    pub(super) reset: Option<&'a str>,
}

/// What an answer with `status` calls for, `now` in epoch seconds. GitHub's rule: `retry-after`
/// first, else `x-ratelimit-reset` when nothing remains; a 429 without either is backed off, a
/// 403 without either is a refusal.
pub(super) fn of_status(status: u16, h: LimitHeaders<'_>, now: u64) -> Next {
    let limited = status == 429
        || (status == 403 && (h.retry_after.is_some() || h.remaining.map(str::trim) == Some("0")));
    if limited {
        return rate_limit_wait(h, now).map_or(Next::Backoff, Next::RateLimit);
    }
    if (500..600).contains(&status) {
        Next::Backoff
    } else {
        Next::Stop
    }
}

/// How long a rate limit lasts from `now`: `retry-after` (seconds, or an HTTP date), else the
/// `x-ratelimit-reset` epoch second (plus one: it is the second the limit resets in) when
/// nothing remains.
pub(super) fn rate_limit_wait(h: LimitHeaders<'_>, now: u64) -> Option<Duration> {
    if let Some(v) = h.retry_after.map(str::trim) {
        if let Ok(secs) = v.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Ok(at) = chrono::DateTime::parse_from_rfc2822(v) {
            let at = u64::try_from(at.timestamp()).unwrap_or(0);
            return Some(Duration::from_secs(at.saturating_sub(now)));
        }
    }
    if h.remaining.map(str::trim) == Some("0") {
        let reset: u64 = h.reset?.trim().parse().ok()?;
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    None
}

/// Whether a transport failure is worth another try: the connection reset, refused, aborted or
/// cut short, or a timeout. A name that does not resolve, TLS and protocol errors are not.
pub(super) fn transient(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionReset
                | ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof
                | ErrorKind::TimedOut
                | ErrorKind::Interrupted
        ),
        ureq::Error::Timeout(_) | ureq::Error::ConnectionFailed => true,
        _ => false,
    }
}

/// The wait before try `n + 2` (after `n + 1` failed): 0.5 s doubled each time, up to 30 s,
/// plus up to a quarter more by `jitter` (in `[0, 1)`), so workers that failed together do not
/// come back together.
pub(super) fn backoff(n: u32, jitter: f64) -> Duration {
    let base = FIRST.saturating_mul(1u32 << n.min(16)).min(CAP);
    let jitter = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(0.0, 1.0)
    };
    base.saturating_add(base.mul_f64(jitter / 4.0)).min(CAP)
}

/// A jitter in `[0, 1)` from the system's randomness (0 without it).
pub(super) fn jitter() -> f64 {
    getrandom::u64().map_or(0.0, |r| (r >> 11) as f64 / (1u64 << 53) as f64)
}

/// The retry budget: `RALPH_TRACKER_RETRY`, else two minutes.
pub(super) fn budget() -> Result<Duration> {
    match std::env::var(BUDGET_VAR) {
        Ok(v) if !v.trim().is_empty() => humantime::parse_duration(v.trim()).map_err(|e| {
            Error::usage(format!("{BUDGET_VAR}: `{v}` is not a duration: {e}"))
                .with_hint("a humantime duration such as `30s` or `2m`; `0s` never tries again")
        }),
        _ => Ok(BUDGET),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    fn h<'a>(
        retry_after: Option<&'a str>,
        remaining: Option<&'a str>,
        reset: Option<&'a str>,
    ) -> LimitHeaders<'a> {
        LimitHeaders {
            retry_after,
            remaining,
            reset,
        }
    }

    #[test]
    fn the_backoff_doubles_from_half_a_second_up_to_thirty() {
        let ms = |n, j| backoff(n, j).as_millis();
        assert_eq!(
            (0..8).map(|n| ms(n, 0.0)).collect::<Vec<_>>(),
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]
        );
        // Jitter adds up to a quarter, never past the cap.
        assert_eq!(ms(0, 0.5), 562);
        assert_eq!(ms(1, 0.999_999), 1249);
        assert_eq!(ms(5, 0.999_999), 19999);
        assert_eq!(ms(6, 0.999_999), 30000);
        assert_eq!(ms(40, 0.7), 30000);
        // Out-of-range jitter is clamped, not trusted.
        assert_eq!(ms(0, 9.0), 625);
        assert_eq!(ms(0, -1.0), 500);
        assert_eq!(ms(0, f64::NAN), 500);
    }

    #[test]
    fn jitter_is_a_fraction() {
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn answers_are_retried_only_when_github_says_they_are_transient() {
        let none = h(None, None, None);
        let table: &[(u16, LimitHeaders<'_>, Next)] = &[
            (500, none, Next::Backoff),
            (502, none, Next::Backoff),
            (503, none, Next::Backoff),
            (504, none, Next::Backoff),
            (429, none, Next::Backoff),
            (
                429,
                h(Some("1"), None, None),
                Next::RateLimit(Duration::from_secs(1)),
            ),
            (
                403,
                h(Some("60"), None, None),
                Next::RateLimit(Duration::from_secs(60)),
            ),
            (
                403,
                h(None, Some("0"), Some("1700000100")),
                Next::RateLimit(Duration::from_secs(101)),
            ),
            // A refusal, not a limit: the token may not do it.
            (403, none, Next::Stop),
            (403, h(None, Some("12"), Some("1700000100")), Next::Stop),
            (400, none, Next::Stop),
            (401, none, Next::Stop),
            (404, none, Next::Stop),
            (410, none, Next::Stop),
            (422, none, Next::Stop),
            (301, none, Next::Stop),
        ];
        for (status, headers, want) in table {
            assert_eq!(
                of_status(*status, *headers, NOW),
                *want,
                "{status} {headers:?}"
            );
        }
    }

    #[test]
    fn rate_limit_headers_are_read_as_github_sends_them() {
        let wait = |r, m, s| rate_limit_wait(h(r, m, s), NOW);
        assert_eq!(
            wait(Some(" 30 "), None, None),
            Some(Duration::from_secs(30))
        );
        // retry-after wins over the reset.
        assert_eq!(
            wait(Some("2"), Some("0"), Some("1700009999")),
            Some(Duration::from_secs(2))
        );
        // An HTTP date, as HTTP allows.
        assert_eq!(
            wait(Some("Tue, 14 Nov 2023 22:14:20 GMT"), None, None),
            Some(Duration::from_secs(1_700_000_060 - NOW))
        );
        // A reset already past: try at once (one second of margin).
        assert_eq!(
            wait(None, Some("0"), Some("1699999000")),
            Some(Duration::from_secs(1))
        );
        // Two hours away.
        let later = (NOW + 7200).to_string();
        assert_eq!(
            wait(None, Some("0"), Some(&later)),
            Some(Duration::from_secs(7201))
        );
        for (r, m, s) in [
            (None, Some("0"), None),
            (None, Some("0"), Some("soon")),
            (None, Some("3"), Some("1700000100")),
            (Some("later"), None, None),
            (None, None, None),
        ] {
            assert_eq!(wait(r, m, s), None, "{r:?} {m:?} {s:?}");
        }
    }

    #[test]
    fn transport_failures_worth_another_try() {
        let io = |k| ureq::Error::Io(std::io::Error::from(k));
        for k in [
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionRefused,
            ErrorKind::UnexpectedEof,
            ErrorKind::TimedOut,
        ] {
            assert!(transient(&io(k)), "{k:?}");
        }
        assert!(transient(&ureq::Error::Timeout(ureq::Timeout::Global)));
        assert!(!transient(&io(ErrorKind::PermissionDenied)));
        assert!(!transient(&ureq::Error::HostNotFound));
        assert!(!transient(&ureq::Error::BadUri("x".into())));
        assert!(!transient(&ureq::Error::BodyExceedsLimit(1)));
    }
}
