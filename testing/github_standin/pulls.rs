//! The stand-in's pull requests (see `github_standin.rs`): opened (422 when an open one has the
//! same head and base), listed by head, base and state, read and changed.

use serde_json::{Value, json};

use super::{Answer, Request, paged, param, str_of};

/// `/repos/O/R/pulls…`: open (422 when an open one has the same head and base), list, read,
/// change.
pub(super) fn pulls(
    state: &mut Value,
    req: &Request,
    repo: &str,
    login: &str,
    rest: &[&str],
    port: u16,
) -> Answer {
    let owner = repo.split('/').next().unwrap_or("");
    let query = req.target.split_once('?').map_or("", |(_, q)| q);
    match (req.method.as_str(), rest) {
        ("POST", []) => open_pull(state, &req.sent, repo, owner, login),
        ("GET", []) => {
            let head = param(query, "head");
            let (base, wanted) = (param(query, "base"), param(query, "state"));
            let wanted = if wanted.is_empty() {
                "open".into()
            } else {
                wanted
            };
            let mut list: Vec<Value> = state["pulls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| {
                    (wanted == "all" || p["state"] == wanted.as_str())
                        && (head.is_empty() || head == format!("{owner}:{}", str_of(&p["head"])))
                        && (base.is_empty() || p["base"] == base.as_str())
                })
                .map(|p| shown_pull(p, owner))
                .collect();
            // Newest first, as GitHub sorts by default.
            list.reverse();
            paged(state, list, &req.target, port)
        }
        (method @ ("GET" | "PATCH"), [n]) => {
            let Some(p) = state["pulls"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .find(|p| p["number"].as_u64() == n.parse().ok())
            else {
                return Answer::message(404, "Not Found");
            };
            if method == "PATCH" {
                for k in ["title", "body", "base"] {
                    if !req.sent[k].is_null() {
                        p[k] = req.sent[k].clone();
                    }
                }
                if let Some(s @ ("open" | "closed")) = req.sent["state"].as_str() {
                    p["state"] = json!(s);
                }
            }
            Answer::json(200, shown_pull(p, owner))
        }
        _ => Answer::message(404, "Not Found"),
    }
}

fn open_pull(state: &mut Value, sent: &Value, repo: &str, owner: &str, login: &str) -> Answer {
    let head = str_of(&sent["head"]);
    let head = head
        .strip_prefix(&format!("{owner}:"))
        .unwrap_or(&head)
        .to_string();
    let base = str_of(&sent["base"]);
    if head.is_empty() || base.is_empty() {
        return Answer::json(
            422,
            json!({ "message": "Validation Failed", "errors": [
                { "resource": "PullRequest", "field": if head.is_empty() { "head" } else { "base" }, "code": "missing_field" }
            ]}),
        );
    }
    let exists =
        state["pulls"].as_array().into_iter().flatten().any(|p| {
            p["state"] == "open" && p["head"] == head.as_str() && p["base"] == base.as_str()
        });
    if exists {
        return Answer::json(
            422,
            json!({
                "message": "Validation Failed",
                "errors": [{ "resource": "PullRequest", "code": "custom",
                    "message": format!("A pull request already exists for {owner}:{head}.") }],
                "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                "status": "422",
            }),
        );
    }
    if !state["pulls"].is_array() {
        state["pulls"] = json!([]);
    }
    let number = 100 + state["pulls"].as_array().map_or(0, Vec::len);
    let pull = json!({
        "number": number, "title": sent["title"], "body": sent["body"],
        "head": head, "base": base, "state": "open", "user": login,
        "html_url": format!("https://github.com/{repo}/pull/{number}"),
    });
    if let Some(a) = state["pulls"].as_array_mut() {
        a.push(pull.clone());
    }
    Answer::json(201, shown_pull(&pull, owner))
}

/// A pull request as the API shows it: `head` and `base` as objects with `ref` and `label`.
fn shown_pull(p: &Value, owner: &str) -> Value {
    let side = |b: &Value| json!({ "ref": b, "label": format!("{owner}:{}", str_of(b)) });
    json!({
        "number": p["number"], "html_url": p["html_url"], "state": p["state"],
        "title": p["title"], "body": p["body"], "user": { "login": p["user"] },
        "head": side(&p["head"]), "base": side(&p["base"]), "merged": false,
    })
}
