//! GitHub issues (SPEC §14) through the REST API at `$GITHUB_API_URL` (default
//! `https://api.github.com`): issues labelled `ralph`, oldest first, following the `Link` pages;
//! pull requests, issues claimed (`ralph:in-progress`, `ralph:pr-open`), assigned to someone else
//! or blocked by open issues skipped. Claimed by assigning the token's user plus the label, then
//! read again; closed with a comment and `state_reason: completed`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Claim, Item, Tracker, task_items};
use crate::error::{Error, Result};

/// The label that puts an issue in the queue.
const LABEL: &str = "ralph";
/// The label of an issue a run holds.
const IN_PROGRESS: &str = "ralph:in-progress";
/// The label of an issue whose pull request is open.
const PR_OPEN: &str = "ralph:pr-open";
/// The most of a response read.
const BODY_LIMIT: u64 = 16 * 1024 * 1024;
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
}

/// An issue as the API gives it (other fields ignored).
#[derive(Debug, Deserialize)]
struct Issue {
    number: u64,
    #[serde(default)]
    state: String,
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
    /// `gh auth token`.
    pub(crate) fn new(repo: &str) -> Result<GitHub> {
        if repo.split('/').filter(|p| !p.is_empty()).count() != 2 {
            return Err(Error::usage(format!("`{repo}` is not OWNER/REPO")));
        }
        let (token, token_from) = token()?;
        let api = std::env::var("GITHUB_API_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| "https://api.github.com".to_string());
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .max_redirects(0)
            .build();
        Ok(GitHub {
            agent: config.into(),
            api: api.trim_end_matches('/').to_string(),
            repo: repo.to_string(),
            token,
            token_from,
            login: None,
            known: Default::default(),
        })
    }

    /// One request: the status, the `Link` header and the body. A status outside 2xx is an
    /// error naming the method, the URL and what the API said.
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

    /// As [`GitHub::call`], a status in `also` answered as no error: the status, the `Link`
    /// header and the body.
    fn call_allowing(
        &self,
        method: &str,
        url: &str,
        body: Option<&Value>,
        also: &[u16],
    ) -> Result<(u16, Option<String>, String)> {
        let auth = format!("Bearer {}", self.token);
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(url)
            .header("Authorization", auth)
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header("User-Agent", "ralph")
            .header("Content-Type", "application/json");
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let req = req
            .body(payload)
            .map_err(|e| Error::user(format!("{method} {url}: {e}")))?;
        let mut resp = self
            .agent
            .run(req)
            .map_err(|e| Error::user(format!("{method} {url}: {e}")))?;
        let status = resp.status().as_u16();
        let link = resp
            .headers()
            .get("link")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp
            .body_mut()
            .with_config()
            .limit(BODY_LIMIT)
            .read_to_string()
            .map_err(|e| Error::user(format!("{method} {url}: {e}")))?;
        if !(200..300).contains(&status) && !also.contains(&status) {
            let said = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| text.chars().take(200).collect());
            let mut err = Error::user(format!("{method} {url}: HTTP {status}: {said}"));
            if status == 401 {
                err = err.with_hint(format!(
                    "the token (from {}) was refused: set GITHUB_TOKEN or GH_TOKEN to a token for {}",
                    self.token_from, self.repo
                ));
            }
            return Err(err);
        }
        Ok((status, link, text))
    }

    /// The issues labelled `ralph` in `state` (`open`, `all`), oldest first, every page.
    fn labelled(&self, state: &str) -> Result<Vec<Issue>> {
        let mut url = format!(
            "{}/repos/{}/issues?labels={LABEL}&state={state}&sort=created&direction=asc&per_page=100",
            self.api, self.repo
        );
        let mut all = Vec::new();
        for _ in 0..MAX_PAGES {
            let (link, text) = self.call("GET", &url, None)?;
            let issues: Vec<Issue> = serde_json::from_str(&text)
                .map_err(|e| Error::user(format!("GET {url}: not a list of issues: {e}")))?;
            all.extend(issues);
            match link.as_deref().and_then(next_page) {
                // Only pages of the same API: a `Link` elsewhere would take the token along.
                Some(next) if next.starts_with(&format!("{}/", self.api)) => url = next,
                _ => break,
            }
        }
        Ok(all)
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
            .map(|i| {
                let body = i.body.unwrap_or_default();
                Item {
                    id: i.number.to_string(),
                    title: i.title,
                    criteria: task_items(&body),
                    body,
                }
            })
            .collect())
    }

    /// Each issue's state, assignees and labels (`open|alice|ralph,ralph:in-progress`): the
    /// labelled ones, and every one seen before that lost the label since.
    fn states(&mut self) -> Result<Option<BTreeMap<String, String>>> {
        let mut states: BTreeMap<String, String> = self
            .labelled("all")?
            .iter()
            .filter(|i| i.pull_request.is_none())
            .map(|i| (i.number.to_string(), standing(i)))
            .collect();
        for id in self.known.clone() {
            if !states.contains_key(&id) {
                states.insert(id.clone(), standing(&self.issue(&id)?));
            }
        }
        self.known.extend(states.keys().cloned());
        Ok(Some(states))
    }

    fn restore(&mut self, id: &str, _is: &str, was: &str, why: &str) -> Result<()> {
        let mut parts = was.split('|');
        let (state, assignees, labels) = (
            parts.next().unwrap_or("open"),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
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
            sent["state_reason"] = json!("completed");
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
        self.comment(&item.id, &format!("ralph: complete at {commit}"))?;
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
        let url = format!("{}/repos/{}/pulls", self.api, self.repo);
        let sent = json!({
            "title": item.title,
            "head": head,
            "base": base,
            "body": format!("{body}\n\nCloses #{}", item.id),
        });
        let (_, text) = self.call("POST", &url, Some(&sent))?;
        let pr = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["html_url"].as_str().map(str::to_string))
            .ok_or_else(|| Error::user(format!("POST {url}: no pull request in the answer")))?;
        // Opened and labelled: the comment only says where (its failure changes nothing).
        let _ = self.comment(&item.id, &format!("ralph: pull request {pr}"));
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

/// An issue's standing as the ledger keeps it: its state, assignees and labels (sorted).
fn standing(i: &Issue) -> String {
    let mut assignees: Vec<&str> = i.assignees.iter().map(|a| a.login.as_str()).collect();
    let mut labels: Vec<&str> = i.labels.iter().map(|l| l.name.as_str()).collect();
    assignees.sort_unstable();
    labels.sort_unstable();
    format!("{}|{}|{}", i.state, assignees.join(","), labels.join(","))
}

/// Whether an open labelled issue is free to take: no pull request, no claim, nobody else
/// assigned, no open blocker.
fn ready(i: &Issue, login: &str) -> bool {
    i.pull_request.is_none()
        && !i
            .labels
            .iter()
            .any(|l| l.name == IN_PROGRESS || l.name == PR_OPEN)
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
