//! The stand-in's comments (see `github_standin.rs`): kept on their issue in the state, shown as
//! GitHub shows them, edited and deleted by id.

use serde_json::{Value, json};

use super::Answer;

pub(super) fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A comment by `login` on issue `i`, kept in the state; the comment as GitHub shows it.
pub(super) fn new_comment(
    state: &mut Value,
    i: usize,
    repo: &str,
    login: &str,
    sent: &Value,
) -> Value {
    let id = state["next_id"].as_u64().unwrap_or(1001);
    state["next_id"] = json!(id + 1);
    let at = now();
    let comment = json!({
        "id": id, "user": { "login": login }, "body": sent["body"],
        "created_at": at, "updated_at": at,
    });
    let issue = &mut state["issues"][i];
    if !issue["comments"].is_array() {
        issue["comments"] = json!([]);
    }
    if let Some(a) = issue["comments"].as_array_mut() {
        a.push(comment.clone());
    }
    let n = issue["number"].clone();
    shown_comment(&comment, repo, &n.to_string())
}

/// An issue's comments updated at or after `since` (every one when empty), oldest first.
pub(super) fn comments_of(issue: &Value, repo: &str, n: &str, since: &str) -> Vec<Value> {
    issue["comments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| since.is_empty() || c["updated_at"].as_str().unwrap_or("") >= since)
        .map(|c| shown_comment(c, repo, n))
        .collect()
}

fn shown_comment(c: &Value, repo: &str, n: &str) -> Value {
    let id = &c["id"];
    json!({
        "id": id,
        "url": format!("https://api.github.com/repos/{repo}/issues/comments/{id}"),
        "html_url": format!("https://github.com/{repo}/issues/{n}#issuecomment-{id}"),
        "issue_url": format!("https://api.github.com/repos/{repo}/issues/{n}"),
        "user": { "login": c["user"]["login"], "type": "User" },
        "body": c["body"],
        "created_at": c["created_at"],
        "updated_at": c["updated_at"],
        "author_association": "OWNER",
    })
}

/// `PATCH` (its body) or `DELETE` comment `id`, wherever it is; 404 when it is nowhere.
pub(super) fn edit_comment(
    state: &mut Value,
    method: &str,
    repo: &str,
    id: &str,
    sent: &Value,
) -> Answer {
    let id: Option<u64> = id.parse().ok();
    let all = state["issues"].as_array_mut().into_iter().flatten();
    for issue in all {
        let n = issue["number"].to_string();
        let Some(list) = issue["comments"].as_array_mut() else {
            continue;
        };
        let Some(at) = list.iter().position(|c| c["id"].as_u64() == id) else {
            continue;
        };
        match method {
            "PATCH" => {
                list[at]["body"] = sent["body"].clone();
                list[at]["updated_at"] = json!(now());
                return Answer::json(200, shown_comment(&list[at], repo, &n));
            }
            "DELETE" => {
                list.remove(at);
                return Answer {
                    status: 204,
                    headers: Vec::new(),
                    body: None,
                };
            }
            "GET" => return Answer::json(200, shown_comment(&list[at], repo, &n)),
            _ => break,
        }
    }
    Answer::message(404, "Not Found")
}
