//! A queue item's question on its GitHub issue (SPEC §16): said as a comment once per question
//! (a comment the token's user left with the same words counts), and answered by the first
//! comment created after it by anyone but the token's user — read every
//! `RALPH_GITHUB_ANSWER_POLL` (default 30 s) with `since=` the question's time, through the same
//! requests, retries and rate limits as every other call of the tracker. ralph's own comments,
//! and an agent's made with the token, never answer.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

use super::{GitHub, User};
use crate::error::{Error, Result};
use crate::person::{Elsewhere, Question, Replies};

/// How often a reply is looked for, unless `RALPH_GITHUB_ANSWER_POLL` says.
pub(super) const POLL: Duration = Duration::from_secs(30);
const POLL_VAR: &str = "RALPH_GITHUB_ANSWER_POLL";
/// The shortest time between two looks.
const MIN_POLL: Duration = Duration::from_millis(100);

/// `RALPH_GITHUB_ANSWER_POLL`, checked: a duration of at least 100 ms.
pub(super) fn poll_every() -> Result<Duration> {
    let v = match std::env::var(POLL_VAR) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => return Ok(POLL),
    };
    let hint = "a humantime duration of at least 100ms, such as `30s` or `2m`";
    match humantime::parse_duration(v.trim()) {
        Ok(d) if d >= MIN_POLL => Ok(d),
        Ok(_) => Err(Error::usage(format!("{POLL_VAR}: `{v}` is too short")).with_hint(hint)),
        Err(e) => {
            Err(Error::usage(format!("{POLL_VAR}: `{v}` is not a duration: {e}")).with_hint(hint))
        }
    }
}

/// A comment as ralph reads it.
#[derive(Debug, Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    user: Option<User>,
    #[serde(default)]
    created_at: String,
}

impl Comment {
    fn created(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(&self.created_at)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    fn by(&self, login: &str) -> bool {
        self.user.as_ref().is_some_and(|u| u.login == login)
    }

    fn text(&self) -> &str {
        self.body.as_deref().unwrap_or("")
    }
}

/// Issue `number` as the place an item's loop asks a person.
pub(crate) struct OnIssue {
    gh: Arc<Mutex<GitHub>>,
    number: String,
    every: Duration,
    /// `issue O/R#N`, for people.
    place: String,
}

impl GitHub {
    /// Where item `number`'s loop asks: a client of its own, for the loop's thread.
    pub(super) fn on_issue(&self, number: &str) -> OnIssue {
        let mut gh = GitHub::at(
            &self.api,
            &self.repo,
            (self.token.clone(), self.token_from),
            self.retry,
            self.max_wait,
        );
        gh.login.clone_from(&self.login);
        gh.clock = self.clock.clone();
        gh.stop.clone_from(&self.stop);
        OnIssue {
            gh: Arc::new(Mutex::new(gh)),
            number: number.to_string(),
            every: self.answer_poll,
            place: format!("issue {}#{number}", self.repo),
        }
    }

    /// Comment `body` on issue `number` unless the token's user said exactly that there
    /// already; the comment either way.
    fn said_once(&mut self, number: &str, body: &str) -> Result<Comment> {
        let login = self.login()?;
        let url = format!("{}/comments?per_page=100", self.issue_url(number));
        let said: Vec<Comment> = self.pages(url, "a list of comments")?;
        if let Some(c) = said.into_iter().find(|c| c.text() == body && c.by(&login)) {
            return Ok(c);
        }
        let url = format!("{}/comments", self.issue_url(number));
        let (_, text) = self.call("POST", &url, Some(&json!({ "body": body })))?;
        serde_json::from_str(&text)
            .map_err(|e| Error::user(format!("POST {url}: not a comment: {e}")))
    }
}

fn lock(gh: &Mutex<GitHub>) -> MutexGuard<'_, GitHub> {
    gh.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The comment that asks question `q` of loop `name`: the question quoted line by line, with
/// no secret ralph withholds in it (an agent given the token that wrote it into its question).
pub(super) fn question_comment(name: &str, q: &Question) -> String {
    let text = crate::proc::withheld::redact(&q.text);
    let quoted: Vec<String> = text.lines().map(|l| format!("> {l}")).collect();
    format!(
        "**ralph** (loop `{name}`, iteration {}) asks:\n\n{}\n\nReply to this issue to answer; the loop waits.",
        q.iteration,
        quoted.join("\n")
    )
}

impl Elsewhere for OnIssue {
    fn ask(&self, name: &str, q: &Question) -> Result<Box<dyn Replies>> {
        let asked = lock(&self.gh).said_once(&self.number, &question_comment(name, q))?;
        let at = asked.created().ok_or_else(|| {
            Error::user(format!(
                "the question's comment has no time GitHub gives as RFC 3339: `{}`",
                asked.created_at
            ))
        })?;
        Ok(Box::new(Reply {
            gh: self.gh.clone(),
            number: self.number.clone(),
            asked: (at, asked.id),
            since: asked.created_at,
        }))
    }

    fn every(&self) -> Duration {
        self.every
    }

    fn place(&self) -> String {
        self.place.clone()
    }
}

/// The replies to one question's comment.
struct Reply {
    gh: Arc<Mutex<GitHub>>,
    number: String,
    /// The question's comment: its time and id.
    asked: (DateTime<Utc>, u64),
    /// Its time as GitHub wrote it, for `since=`.
    since: String,
}

impl Replies for Reply {
    fn reply(&mut self) -> Result<Option<String>> {
        let mut gh = lock(&self.gh);
        let login = gh.login()?;
        let url = format!(
            "{}/comments?since={}&per_page=100",
            gh.issue_url(&self.number),
            self.since
        );
        let comments: Vec<Comment> = gh.pages(url, "a list of comments")?;
        Ok(first_reply(comments, self.asked, &login))
    }
}

/// The text of the first comment created after the question's (`asked`: its time and id) by
/// anyone but `login`, with something to say.
fn first_reply(comments: Vec<Comment>, asked: (DateTime<Utc>, u64), login: &str) -> Option<String> {
    comments
        .into_iter()
        .filter(|c| !c.by(login) && c.user.is_some() && !c.text().trim().is_empty())
        .filter_map(|c| c.created().map(|t| ((t, c.id), c)))
        // GitHub's times are whole seconds: a reply in the question's second comes after it
        // by its id.
        .filter(|(at, _)| *at > asked)
        .min_by_key(|(at, _)| *at)
        .map(|(_, c)| crate::person::bounded(c.text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64, login: &str, at: &str, body: &str) -> Comment {
        Comment {
            id,
            body: Some(body.into()),
            user: Some(User {
                login: login.into(),
            }),
            created_at: at.into(),
        }
    }

    #[test]
    fn the_first_reply_after_the_question_by_another_user_answers() {
        let asked = (
            DateTime::parse_from_rfc3339("2025-01-02T03:04:05Z")
                .unwrap()
                .with_timezone(&Utc),
            10,
        );
        let list = vec![
            c(9, "alice", "2025-01-02T03:04:05Z", "before the question"),
            c(10, "ralph-bot", "2025-01-02T03:04:05Z", "the question"),
            c(
                11,
                "ralph-bot",
                "2025-01-02T03:04:06Z",
                "ralph's own, never",
            ),
            c(13, "bob", "2025-01-02T03:04:09Z", "later"),
            c(12, "alice", "2025-01-02T03:04:05Z", "  \n"),
            c(
                14,
                "carol",
                "2025-01-02T03:04:05Z",
                " same second, after it ",
            ),
        ];
        assert_eq!(
            first_reply(list, asked, "ralph-bot").as_deref(),
            Some("same second, after it")
        );
        // Control: only the token's user (and the empty) replied — no answer.
        let list = vec![
            c(11, "ralph-bot", "2025-01-02T03:04:06Z", "ralph's own"),
            c(12, "alice", "2025-01-02T03:04:07Z", " "),
        ];
        assert_eq!(first_reply(list, asked, "ralph-bot"), None);
    }

    #[test]
    fn the_question_is_quoted_line_by_line() {
        let q = Question {
            text: "Keep v1?\nOr drop it?".into(),
            asked_at: "t".into(),
            iteration: 3,
        };
        assert_eq!(
            question_comment("github-12", &q),
            "**ralph** (loop `github-12`, iteration 3) asks:\n\n> Keep v1?\n> Or drop it?\n\nReply to this issue to answer; the loop waits."
        );
    }
}
