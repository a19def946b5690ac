//! GitHub issues (SPEC §14) through the REST API at `$GITHUB_API_URL` (default
//! `https://api.github.com`): issues labelled `ralph`, oldest first, following the `Link` pages;
//! pull requests, issues claimed (`ralph:in-progress`, `ralph:pr-open`), assigned to someone else
//! or blocked by open issues skipped. Claimed by assigning the token's user plus the label, then
//! read again; closed with a comment and `state_reason: completed`. `wire` sends a request and
//! tries again through transient faults (`retry` says which and when); `find` reads what
//! stands now (an issue, the open pull request from a branch); `ask` an item's question on its
//! issue, and a person's reply.

mod ask;
mod find;
mod retry;
mod wire;
#[cfg(test)]
mod wire_tests;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Claim, Item, Now, Text, Tracker};
use crate::error::{Error, Result};

/// How long a fault is tried again once the queue is stopping.
const HURRIED: Duration = Duration::from_secs(2);
/// The label that puts an issue in the queue.
const LABEL: &str = "ralph";
/// The label of an issue a run holds.
const IN_PROGRESS: &str = "ralph:in-progress";
/// The label of an issue whose pull request is open.
const PR_OPEN: &str = "ralph:pr-open";
/// Pages followed at most (100 issues each).
const MAX_PAGES: usize = 100;

/// One repository's issues.
pub(crate) struct GitHub {
    agent: ureq::Agent,
    api: String,
    repo: String,
    token: String,
    /// Where the token came from, for errors.
    token_from: &'static str,
    login: Option<String>,
    /// Every issue the ledger has seen: read by number when it no longer carries the label.
    known: std::collections::BTreeSet<String>,
    /// How long one request keeps trying through transient faults (`RALPH_TRACKER_RETRY`).
    retry: Duration,
    /// The waiting budget (`--max-wait`): rate limits waited out, in all, up to this.
    max_wait: Duration,
    /// Rate limits waited out so far.
    waited: std::cell::Cell<Duration>,
    /// The API's clock, as its answers' `Date` says: the team's (leases).
    clock: crate::queue::lease::Clock,
    /// The queue's interrupts: once one is counted, requests tried again give up soon.
    stop: Option<crate::signals::Background>,
    /// Each open issue's text as the last [`Tracker::states`] read it.
    texts: Option<BTreeMap<String, Text>>,
    /// How often an item's loop that waits for a person looks for a reply on its issue.
    answer_poll: Duration,
}

/// An issue as the API gives it (other fields ignored).
#[derive(Debug, Deserialize)]
struct Issue {
    number: u64,
    #[serde(default)]
    state: String,
    #[serde(default)]
    state_reason: Option<String>,
    #[serde(default)]
    title: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    labels: Vec<Label>,
    #[serde(default)]
    assignees: Vec<User>,
    #[serde(default)]
    pull_request: Option<Value>,
    #[serde(default)]
    issue_dependencies_summary: Option<Dependencies>,
}

#[derive(Debug, Deserialize)]
struct Label {
    name: String,
}

#[derive(Debug, Deserialize)]
struct User {
    login: String,
}

#[derive(Debug, Deserialize)]
struct Dependencies {
    #[serde(default)]
    blocked_by: u64,
}

impl GitHub {
    /// The tracker for `OWNER/REPO`, with a token from `GITHUB_TOKEN`, `GH_TOKEN` or
    /// `gh auth token`; rate limits waited out up to `max_wait` in all.
    pub(crate) fn new(repo: &str, max_wait: Duration) -> Result<GitHub> {
        if repo.split('/').filter(|p| !p.is_empty()).count() != 2 {
            return Err(Error::usage(format!("`{repo}` is not OWNER/REPO")));
        }
        let retry = retry::budget()?;
        let (token, token_from) = token()?;
        // The tracker's token is not the agent's (SPEC §15).
        crate::proc::withheld::withhold(&crate::proc::withheld::TOKEN_VARS, &token);
        let api = std::env::var("GITHUB_API_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| "https://api.github.com".to_string());
        let mut gh = GitHub::at(&api, repo, (token, token_from), retry, max_wait);
        gh.answer_poll = ask::poll_every()?;
        Ok(gh)
    }

    /// The tracker for `repo` at the API `api`, resolved.
    fn at(
        api: &str,
        repo: &str,
        (token, token_from): (String, &'static str),
        retry: Duration,
        max_wait: Duration,
    ) -> GitHub {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .max_redirects(0)
            .build();
        GitHub {
            agent: config.into(),
            api: api.trim_end_matches('/').to_string(),
            repo: repo.to_string(),
            token,
            token_from,
            login: None,
            known: Default::default(),
            retry,
            max_wait,
            waited: Default::default(),
            clock: Default::default(),
            stop: None,
            texts: None,
            answer_poll: ask::POLL,
        }
    }

    /// Whether the queue is being stopped (an interrupt, SIGTERM).
    fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.count() > 0)
    }

    /// One request: the `Link` header and the body. A status outside 2xx is an error naming
    /// the method, the URL and what the API said (after transient faults were tried again).
    fn call(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
    ) -> Result<(Option<String>, String)> {
        self.call_allowing(method, url, body, &[])
            .map(|(_, link, text)| (link, text))
    }

    /// Remove `label` from issue `number`; one already gone is no error, any other failure is.
    fn unlabel(&self, number: &str, label: &str) -> Result<()> {
        let url = format!(
            "{}/labels/{}",
            self.issue_url(number),
            label.replace(':', "%3A")
        );
        self.call_allowing("DELETE", &url, None, &[404]).map(|_| ())
    }

    /// The issues labelled `ralph` in `state` (`open`, `all`), oldest first, every page.
    fn labelled(&self, state: &str) -> Result<Vec<Issue>> {
        let url = format!(
            "{}/repos/{}/issues?labels={LABEL}&state={state}&sort=created&direction=asc&per_page=100",
            self.api, self.repo
        );
        self.pages(url, "a list of issues")
    }

    /// Every page of the list at `url` (`what` it is, for errors), following `Link`.
    fn pages<T: serde::de::DeserializeOwned>(&self, mut url: String, what: &str) -> Result<Vec<T>> {
        let mut all = Vec::new();
        for _ in 0..MAX_PAGES {
            let (link, text) = self.call("GET", &url, None)?;
            let page: Vec<T> = serde_json::from_str(&text)
                .map_err(|e| Error::user(format!("GET {url}: not {what}: {e}")))?;
            all.extend(page);
            match link.as_deref().and_then(next_page) {
                // Only pages of the same API: a `Link` elsewhere would take the token along.
                Some(next) if next.starts_with(&format!("{}/", self.api)) => url = next,
                _ => break,
            }
        }
        Ok(all)
    }

    /// Comment `body` on issue `number` unless the token's user said it there already (a step
    /// a worker before failed to finish, done again: SPEC §15).
    fn comment_once(&mut self, number: &str, body: &str) -> Result<()> {
        #[derive(Deserialize)]
        struct Comment {
            #[serde(default)]
            body: String,
            user: Option<User>,
        }
        let login = self.login()?;
        let url = format!("{}/comments?per_page=100", self.issue_url(number));
        let said: Vec<Comment> = self.pages(url, "a list of comments")?;
        let already = said
            .iter()
            .any(|c| c.body == body && c.user.as_ref().is_some_and(|u| u.login == login));
        if already {
            return Ok(());
        }
        self.comment(number, body)
    }

    fn issue_url(&self, number: &str) -> String {
        format!("{}/repos/{}/issues/{number}", self.api, self.repo)
    }

    /// The token's user, asked once.
    fn login(&mut self) -> Result<String> {
        if let Some(l) = &self.login {
            return Ok(l.clone());
        }
        let url = format!("{}/user", self.api);
        let (_, text) = self.call("GET", &url, None)?;
        let user: User = serde_json::from_str(&text)
            .map_err(|e| Error::user(format!("GET {url}: not a user: {e}")))?;
        self.login = Some(user.login.clone());
        Ok(user.login)
    }

    fn issue(&self, number: &str) -> Result<Issue> {
        let url = self.issue_url(number);
        let (_, text) = self.call("GET", &url, None)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::user(format!("GET {url}: not an issue: {e}")))
    }

    fn comment(&self, number: &str, body: &str) -> Result<()> {
        let url = format!("{}/comments", self.issue_url(number));
        self.call("POST", &url, Some(&json!({ "body": body })))
            .map(|_| ())
    }
}

impl Tracker for GitHub {
    fn source(&self) -> &'static str {
        "github"
    }

    fn has_pull_requests(&self) -> bool {
        true
    }

    fn ready(&mut self) -> Result<Vec<Item>> {
        let login = self.login()?;
        let issues = self.labelled("open")?;
        Ok(issues
            .into_iter()
            .filter(|i| ready(i, &login))
            .map(|i| text(&i).item(&i.number.to_string()))
            .collect())
    }

    /// Each issue's state, assignees and labels (`open|alice|ralph,ralph:in-progress`): the
    /// labelled ones, and every one seen before that lost the label since.
    /// The open ones' texts are kept for [`Tracker::texts`].
    fn states(&mut self) -> Result<Option<BTreeMap<String, String>>> {
        let mut issues: Vec<Issue> = self.labelled("all")?;
        issues.retain(|i| i.pull_request.is_none());
        let listed: std::collections::BTreeSet<String> =
            issues.iter().map(|i| i.number.to_string()).collect();
        for id in self.known.clone() {
            if listed.contains(&id) {
                continue;
            }
            // An issue deleted since (404, 410) is gone from the standing, not an error.
            match self.issue_if_any(&id)? {
                Some(i) => issues.push(i),
                None => {
                    self.known.remove(&id);
                }
            }
        }
        let texts = issues
            .iter()
            .filter(|i| i.state == "open")
            .map(|i| (i.number.to_string(), text(i)))
            .collect();
        self.texts = Some(texts);
        let states: BTreeMap<String, String> = issues
            .iter()
            .map(|i| (i.number.to_string(), standing(i)))
            .collect();
        self.known.extend(states.keys().cloned());
        Ok(Some(states))
    }

    fn texts(&mut self) -> Option<BTreeMap<String, Text>> {
        self.texts.take()
    }

    fn restore_text(&mut self, id: &str, _is: &Text, was: &Text, why: &str) -> Result<()> {
        let sent = json!({ "title": was.title, "body": was.body });
        self.call("PATCH", &self.issue_url(id), Some(&sent))?;
        self.comment(id, why)
    }

    fn shared(&self) -> bool {
        true
    }

    fn name(&self) -> String {
        format!("github:{}", self.repo)
    }

    fn clock(&self) -> Option<crate::queue::lease::Clock> {
        Some(self.clock.clone())
    }

    fn hurry(&mut self) {
        self.retry = self.retry.min(HURRIED);
        self.max_wait = self.waited.get();
    }

    fn hurry_on(&mut self, stop: crate::signals::Background) {
        self.stop = Some(stop);
    }

    fn person_there(&self, item: &Item) -> Option<std::sync::Arc<dyn crate::person::Elsewhere>> {
        Some(std::sync::Arc::new(self.on_issue(&item.id)))
    }

    fn now(&mut self, item: &Item) -> Result<Now> {
        let Some(i) = self.issue_if_any(&item.id)? else {
            return Ok(Now::Gone);
        };
        Ok(match (i.state.as_str(), i.state_reason.as_deref()) {
            ("closed", Some("not_planned")) => Now::NotPlanned,
            ("closed", _) => Now::Completed,
            _ => Now::Open,
        })
    }

    fn find_pr(&mut self, head: &str) -> Result<Option<String>> {
        GitHub::find_pr(self, head)
    }

    fn stands(&self, is: &str) -> bool {
        is.starts_with("closed|") && is.ends_with("|not_planned")
    }

    fn restore(&mut self, id: &str, _is: &str, was: &str, why: &str) -> Result<()> {
        let mut parts = was.split('|');
        let (state, assignees, labels, reason) = (
            parts.next().unwrap_or("open"),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts
                .next()
                .filter(|r| !r.is_empty())
                .unwrap_or("completed"),
        );
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        };
        let mut sent = json!({
            "state": state,
            "assignees": list(assignees),
            "labels": list(labels),
        });
        if state == "closed" {
            sent["state_reason"] = json!(reason);
        }
        self.call("PATCH", &self.issue_url(id), Some(&sent))?;
        self.comment(id, why)
    }

    fn claim(&mut self, item: &Item) -> Result<Claim> {
        let login = self.login()?;
        let url = self.issue_url(&item.id);
        self.call(
            "POST",
            &format!("{url}/assignees"),
            Some(&json!({ "assignees": [login] })),
        )?;
        self.call(
            "POST",
            &format!("{url}/labels"),
            Some(&json!({ "labels": [IN_PROGRESS] })),
        )?;
        // Read again: a peer that claimed it at the same time shows as another assignee.
        let now = self.issue(&item.id)?;
        if now.assignees.iter().any(|a| a.login != login) {
            self.release(
                item,
                "ralph: claimed by someone else at the same time; left to them",
            )?;
            return Ok(Claim::Taken);
        }
        Ok(Claim::Ours)
    }

    fn close(&mut self, item: &Item, commit: &str) -> Result<()> {
        // The claim's label first: an issue is never left closed and still claimed.
        self.unlabel(&item.id, IN_PROGRESS)?;
        self.comment_once(&item.id, &format!("ralph: complete at {commit}"))?;
        let url = self.issue_url(&item.id);
        self.call(
            "PATCH",
            &url,
            Some(&json!({ "state": "closed", "state_reason": "completed" })),
        )?;
        Ok(())
    }

    fn mark_pr_open(&mut self, item: &Item) -> Result<()> {
        let issue = self.issue_url(&item.id);
        self.call(
            "POST",
            &format!("{issue}/labels"),
            Some(&json!({ "labels": [PR_OPEN] })),
        )?;
        self.unlabel(&item.id, IN_PROGRESS)
    }

    fn open_pr(&mut self, item: &Item, head: &str, base: &str, body: &str) -> Result<String> {
        let body = format!("{body}\n\nCloses #{}", item.id);
        let (pr, asked) = self.open_or_find_pr(&item.title, head, base, &body)?;
        // Opened and labelled: the comment only says where (its failure changes nothing).
        if asked {
            let _ = self.comment(&item.id, &format!("ralph: pull request {pr}"));
        }
        Ok(pr)
    }

    fn release(&mut self, item: &Item, why: &str) -> Result<()> {
        let login = self.login()?;
        let url = self.issue_url(&item.id);
        self.unlabel(&item.id, IN_PROGRESS)?;
        self.unlabel(&item.id, PR_OPEN)?;
        self.call(
            "DELETE",
            &format!("{url}/assignees"),
            Some(&json!({ "assignees": [login] })),
        )?;
        self.comment(&item.id, why)
    }
}

/// An issue's standing as the ledger keeps it: its state, assignees and labels (sorted), and
/// why it was closed.
fn standing(i: &Issue) -> String {
    let mut assignees: Vec<&str> = i.assignees.iter().map(|a| a.login.as_str()).collect();
    let mut labels: Vec<&str> = i.labels.iter().map(|l| l.name.as_str()).collect();
    assignees.sort_unstable();
    labels.sort_unstable();
    let reason = match i.state.as_str() {
        "closed" => i.state_reason.as_deref().unwrap_or("completed"),
        _ => "",
    };
    format!(
        "{}|{}|{}|{reason}",
        i.state,
        assignees.join(","),
        labels.join(",")
    )
}

/// An issue's text: its title and body (whose task items are its criteria).
fn text(i: &Issue) -> Text {
    Text {
        title: i.title.clone(),
        body: i.body.clone().unwrap_or_default(),
        criteria: None,
    }
}

/// Whether an open labelled issue is free to take: no pull request, nobody else assigned, no
/// open blocker.
fn ready(i: &Issue, login: &str) -> bool {
    // `ralph:in-progress` is for people: whether a worker holds the issue is its lease's to
    // say (SPEC §15), and a worker killed midway leaves the label behind.
    i.pull_request.is_none()
        && !i.labels.iter().any(|l| l.name == PR_OPEN)
        && i.assignees.iter().all(|a| a.login == login)
        && i.issue_dependencies_summary
            .as_ref()
            .is_none_or(|d| d.blocked_by == 0)
}

/// The `rel="next"` URL of a `Link` header.
fn next_page(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// The token and where it came from: `GITHUB_TOKEN`, `GH_TOKEN`, else `gh auth token`.
fn token() -> Result<(String, &'static str)> {
    for var in ["GITHUB_TOKEN", "GH_TOKEN"] {
        if let Some(t) = std::env::var(var).ok().filter(|t| !t.trim().is_empty()) {
            return Ok((t.trim().to_string(), var));
        }
    }
    let mut cmd = std::process::Command::new("gh");
    cmd.args(["auth", "token"]);
    let from_gh = crate::proc::brief::run_split(&mut cmd, Duration::from_secs(20), 64 * 1024)
        .ok()
        .filter(|o| o.status.is_some_and(|s| s.success()))
        .map(|o| o.stdout.trim().to_string())
        .filter(|t| !t.is_empty());
    from_gh.map(|t| (t, "gh auth token")).ok_or_else(|| {
        Error::user("no GitHub token: GITHUB_TOKEN and GH_TOKEN are unset and `gh auth token` gave none")
            .with_hint("set GITHUB_TOKEN (or GH_TOKEN) to a token that can read and write the repository's issues")
    })
}

/// `OWNER/REPO` of a GitHub remote URL (`https://github.com/O/R(.git)`, `git@github.com:O/R`,
/// `ssh://git@github.com/O/R`); `None` for any other.
pub(crate) fn repo_of_url(url: &str) -> Option<String> {
    let url = url.trim();
    let rest = url
        .strip_prefix("https://github.com/")
        .or_else(|| url.strip_prefix("http://github.com/"))
        .or_else(|| url.strip_prefix("git@github.com:"))
        .or_else(|| url.strip_prefix("ssh://git@github.com/"))?;
    let rest = rest.trim_end_matches('/').trim_end_matches(".git");
    let mut parts = rest.split('/');
    let (owner, repo) = (parts.next()?, parts.next()?);
    (parts.next().is_none() && !owner.is_empty() && !repo.is_empty())
        .then(|| format!("{owner}/{repo}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::text::task_items;

    #[test]
    fn remote_urls_name_their_repository() {
        for url in [
            "https://github.com/o/r.git",
            "https://github.com/o/r",
            "git@github.com:o/r.git",
            "ssh://git@github.com/o/r",
        ] {
            assert_eq!(repo_of_url(url).as_deref(), Some("o/r"), "{url}");
        }
        assert_eq!(repo_of_url("https://gitlab.com/o/r"), None);
        assert_eq!(repo_of_url("https://github.com/o/r/x"), None);
    }

    #[test]
    fn the_next_page_is_found_in_a_link_header() {
        let link = r#"<https://api.github.com/repositories/1/issues?page=2>; rel="next", <https://api.github.com/repositories/1/issues?page=5>; rel="last""#;
        assert_eq!(
            next_page(link).as_deref(),
            Some("https://api.github.com/repositories/1/issues?page=2")
        );
        assert_eq!(next_page(r#"<https://x/?page=1>; rel="prev""#), None);
    }

    #[test]
    fn criteria_are_the_bodys_open_task_items() {
        assert_eq!(
            task_items("Intro\r\n- [ ] one\n- [x] done\r* [ ] two\n"),
            ["one", "two"]
        );
        assert!(task_items("no boxes here").is_empty());
    }
}
