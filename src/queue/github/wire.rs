//! The GitHub tracker's HTTP layer: one request sent and its answer read, tried again through
//! transient faults (SPEC §15; [`super::retry`] decides which and when). One warning line per
//! request that is tried again, not one per try; once the retry budget is spent, an error naming
//! the method, the URL, the status and the tries; a rate limit whose reset is beyond the waiting
//! budget (`--max-wait`) is the queue's budget halt (exit 10).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::GitHub;
use super::retry::{self, LimitHeaders, Next};
use crate::error::{Error, Result};
use crate::ui::human_duration;

/// The most of a response read.
const BODY_LIMIT: u64 = 16 * 1024 * 1024;

/// An answer as read: its status, the headers ralph uses, its body.
struct Answer {
    status: u16,
    link: Option<String>,
    retry_after: Option<String>,
    remaining: Option<String>,
    reset: Option<String>,
    text: String,
}

impl Answer {
    fn limits(&self) -> LimitHeaders<'_> {
        LimitHeaders {
            retry_after: self.retry_after.as_deref(),
            remaining: self.remaining.as_deref(),
            reset: self.reset.as_deref(),
        }
    }
}

type Got = std::result::Result<Answer, ureq::Error>;

impl GitHub {
    /// One request, a status outside 2xx or `also` an error naming the method, the URL and
    /// what the API said: the status, the `Link` header and the body. Transient faults are
    /// tried again (see the module).
    pub(super) fn call_allowing(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
        also: &[u16],
    ) -> Result<(u16, Option<String>, String)> {
        let started = Instant::now();
        let mut tries = 0u32;
        loop {
            tries += 1;
            let got = match self.send(method, url, body) {
                Ok(a) if (200..300).contains(&a.status) || also.contains(&a.status) => {
                    return Ok((a.status, a.link, a.text));
                }
                got => got,
            };
            let next = match &got {
                Ok(a) => retry::of_status(a.status, a.limits(), epoch_now()),
                Err(e) if retry::transient(e) => Next::Backoff,
                Err(_) => Next::Stop,
            };
            let backoff = retry::backoff(tries - 1, retry::jitter());
            // A queue being stopped tries for a moment more, never for the whole budget.
            let budget = match self.stopping() {
                true => self.retry.min(super::HURRIED),
                false => self.retry,
            };
            let wait = match next {
                Next::Stop => return Err(self.failure(method, url, got, "")),
                Next::Backoff if started.elapsed() + backoff > budget => {
                    let tried = match tries {
                        1 => format!(
                            " (tried once: the retry budget is {})",
                            human_duration(self.retry)
                        ),
                        n => format!(" ({n} tries in {})", human_duration(started.elapsed())),
                    };
                    return Err(self.failure(method, url, got, &tried));
                }
                Next::Backoff => backoff,
                // Never sooner than the backoff: a limit that says "now" again and again must
                // still add up to the waiting budget.
                Next::RateLimit(wait) => self.rate_limited(method, url, &got, wait.max(backoff))?,
            };
            if tries == 1 {
                crate::ui::Ui::default().warn(&format!(
                    "{method} {url}: {}; trying again in {:.1} s",
                    what(&got),
                    wait.as_secs_f64()
                ));
            }
            self.pause(wait);
        }
    }

    /// Wait `wait` before trying again, cut short when the queue is being stopped.
    fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait;
        while !self.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }

    /// A rate limit's wait, counted against the waiting budget; beyond it, the budget halt
    /// naming the reset.
    fn rate_limited(&self, method: &str, url: &str, got: &Got, wait: Duration) -> Result<Duration> {
        let waited = self.waited.get();
        let max_wait = match self.stopping() {
            true => waited,
            false => self.max_wait,
        };
        if waited.saturating_add(wait) > max_wait {
            let at = chrono::Utc::now() + wait;
            return Err(Error::budget(format!(
                "{method} {url}: {}: the rate limit resets at {} ({} from now), beyond the waiting budget (--max-wait {}{})",
                what(got),
                at.format("%Y-%m-%d %H:%M:%S UTC"),
                human_duration(wait),
                human_duration(self.max_wait),
                if waited.is_zero() {
                    String::new()
                } else {
                    format!(", {} waited already", human_duration(waited))
                },
            ))
            .with_hint("run the queue again after the reset, or give it a longer --max-wait"));
        }
        self.waited.set(waited + wait);
        Ok(wait)
    }

    /// One try: the request sent, the answer's status, headers and body read.
    fn send(&self, method: &str, url: &str, body: Option<&Value>) -> Got {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(url)
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header("User-Agent", "ralph")
            .header("Content-Type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())?;
        let sent = chrono::Utc::now();
        let mut resp = self.agent.run(req)?;
        if let Some(date) = resp.headers().get("date").and_then(|v| v.to_str().ok()) {
            self.clock.heard(date, sent, chrono::Utc::now());
        }
        let header = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (link, retry_after) = (header("link"), header("retry-after"));
        let (remaining, reset) = (header("x-ratelimit-remaining"), header("x-ratelimit-reset"));
        let text = resp
            .body_mut()
            .with_config()
            .limit(BODY_LIMIT)
            .read_to_string()?;
        Ok(Answer {
            status: resp.status().as_u16(),
            link,
            retry_after,
            remaining,
            reset,
            text,
        })
    }

    /// The error of a request that will not be tried again; `tried` says how often it was.
    fn failure(&self, method: &str, url: &str, got: Got, tried: &str) -> Error {
        let a = match got {
            Ok(a) => a,
            Err(e) => return Error::user(format!("{method} {url}: {e}{tried}")),
        };
        let said = serde_json::from_str::<Value>(&a.text)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| a.text.chars().take(200).collect());
        let err = Error::user(format!("{method} {url}: HTTP {}: {said}{tried}", a.status));
        if a.status != 401 {
            return err;
        }
        err.with_hint(format!(
            "the token (from {}) was refused: set GITHUB_TOKEN or GH_TOKEN to a token for {}",
            self.token_from, self.repo
        ))
    }
}

/// What went wrong, in a few words: `HTTP 502`, `HTTP 429 (rate limited)`, the transport error.
fn what(got: &Got) -> String {
    match got {
        Ok(a) if retry::rate_limit_wait(a.limits(), epoch_now()).is_some() => {
            format!("HTTP {} (rate limited)", a.status)
        }
        Ok(a) => format!("HTTP {}", a.status),
        Err(e) => e.to_string(),
    }
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
