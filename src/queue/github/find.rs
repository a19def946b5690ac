//! What stands on GitHub now, read before acting so a step is never done twice (SPEC §15): an
//! issue as it is (`None` once deleted), the open pull request from a branch, and a pull request
//! opened only when none is — one opened whose answer was lost is found, not opened again.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{GitHub, Issue};
use crate::error::{Error, Result};

/// A pull request as listed (other fields ignored).
#[derive(Debug, Deserialize)]
struct Pull {
    html_url: String,
}

impl GitHub {
    /// Issue `number`, `None` when it is gone (404, 410).
    pub(super) fn issue_if_any(&self, number: &str) -> Result<Option<Issue>> {
        let url = self.issue_url(number);
        let (status, _, text) = self.call_allowing("GET", &url, None, &[404, 410])?;
        if status == 404 || status == 410 {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::user(format!("GET {url}: not an issue: {e}")))
    }

    /// The open pull request from branch `head` of this repository: its `html_url`.
    pub(crate) fn find_pr(&self, head: &str) -> Result<Option<String>> {
        let owner = self.repo.split('/').next().unwrap_or_default();
        let url = format!(
            "{}/repos/{}/pulls?head={owner}:{}&state=open&per_page=100",
            self.api,
            self.repo,
            query_value(head)
        );
        let (_, text) = self.call("GET", &url, None)?;
        let pulls: Vec<Pull> = serde_json::from_str(&text)
            .map_err(|e| Error::user(format!("GET {url}: not a list of pull requests: {e}")))?;
        Ok(pulls.into_iter().next().map(|p| p.html_url))
    }

    /// The pull request from `head` into `base`: the open one found, else opened; its URL, and
    /// whether this call asked for it (opened it, or found the one a try whose answer was lost
    /// opened: GitHub's 422 "already exists").
    pub(crate) fn open_or_find_pr(
        &self,
        title: &str,
        head: &str,
        base: &str,
        body: &str,
    ) -> Result<(String, bool)> {
        if let Some(url) = self.find_pr(head)? {
            return Ok((url, false));
        }
        let url = format!("{}/repos/{}/pulls", self.api, self.repo);
        let sent = json!({ "title": title, "head": head, "base": base, "body": body });
        let (status, _, text) = self.call_allowing("POST", &url, Some(&sent), &[422])?;
        if status == 422 {
            if already_exists(&text)
                && let Some(found) = self.find_pr(head)?
            {
                return Ok((found, true));
            }
            let said: String = text.chars().take(300).collect();
            return Err(Error::user(format!("POST {url}: HTTP 422: {said}")));
        }
        let pr = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["html_url"].as_str().map(str::to_string))
            .ok_or_else(|| Error::user(format!("POST {url}: no pull request in the answer")))?;
        Ok((pr, true))
    }
}

/// Whether a 422 says a pull request for the branch exists already (GitHub: `errors[].message`
/// "A pull request already exists for O:BRANCH.").
fn already_exists(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|v| {
        v["errors"].as_array().into_iter().flatten().any(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("A pull request already exists"))
        })
    })
}

/// A value safe in a query string: the characters that would end or change it escaped.
fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '_' | '.' | '~' | '/' | ':' => out.push(c),
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_422_for_an_existing_pull_request_is_told_from_others() {
        let exists = r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:ralph/github-1."}]}"#;
        assert!(already_exists(exists));
        let no_head = r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"head","code":"invalid"}]}"#;
        assert!(!already_exists(no_head));
        assert!(!already_exists("not json"));
    }

    #[test]
    fn branch_names_stay_one_query_value() {
        assert_eq!(query_value("ralph/github-1"), "ralph/github-1");
        assert_eq!(query_value("a&state=closed#x"), "a%26state%3Dclosed%23x");
        assert_eq!(query_value("é +"), "%C3%A9%20%2B");
    }
}
