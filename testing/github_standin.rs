//! A stand-in for the GitHub REST API's issue, comment and pull-request endpoints, for the queue
//! tests (SPEC §14, §15): loopback only, an ephemeral port (printed on stdout), each token its own
//! user, every request recorded, faults injected on demand.
//!
//! `github-standin STATE.json`. The state file is JSON, read before and written after every
//! request (written whole to `STATE.json.tmp`, then renamed: a reader never sees half a file):
//! - `tokens`: `{TOKEN: LOGIN}`, each token its own user; the older `token` + `login` (one user)
//!   still count. Any other token is 401 `Bad credentials`.
//! - `page_size`: items per page of every list (default 30), pages linked by `Link: <…>;
//!   rel="next"`.
//! - `issues`: `[{number, title, body, labels: [NAME], assignees: [LOGIN], state: open|closed,
//!   state_reason, pull_request: bool, blocked_by: [NUMBER], deleted: bool, comments: [{id, user:
//!   {login}, body, created_at, updated_at}]}]`. Shown as GitHub shows them: labels and
//!   assignees as objects, `comments` a count, `issue_dependencies_summary.blocked_by` counting
//!   open blockers, a `pull_request` key on pull requests; lists oldest last unless
//!   `direction=asc`. A `deleted` issue answers 410 `This issue was deleted` and is in no list.
//!   `PATCH` with `state`: `closed` keeps the `state_reason` sent (default `completed`), `open`
//!   makes it `reopened`; a `state_reason` without `state` is ignored, as GitHub does.
//! - `next_id`: the next comment id (ids are never reused).
//! - `pulls`: `[{number, title, body, head: BRANCH, base: BRANCH, state, html_url, user}]`,
//!   created only by the first `POST …/pulls`; a second one with the head and base of an open one
//!   is 422 `A pull request already exists for O:BRANCH.`
//! - `faults`: `[{route: "METHOD /path", status, headers: {NAME: VALUE}, body, reset: bool,
//!   apply: bool, times}]`, `route` without the query. The first fault whose route matches
//!   answers instead of the API: `status` (default 500) with `headers` and `body` (default
//!   `{"message": <the status's reason>}`), or with `reset` no answer at all (the connection
//!   reset). With `apply` the request is carried out first (an answer lost after the change).
//!   `times` counts down, the fault gone at 0; absent, it stays.
//!
//! Endpoints: `GET /user`; `GET /repos/O/R/issues` (`labels`, `state`, `direction`, `page`);
//! `GET|PATCH /repos/O/R/issues/N`; `POST|DELETE …/N/assignees`; `POST …/N/labels`, `DELETE
//! …/N/labels/NAME`; `GET …/N/comments` (`since`, `page`) and `POST`; `PATCH|DELETE
//! /repos/O/R/issues/comments/ID`; `POST /repos/O/R/pulls`, `GET /repos/O/R/pulls` (`head=O:BRANCH`,
//! `base`, `state=open|closed|all`, `page`), `GET|PATCH /repos/O/R/pulls/N`. Control (no token,
//! not logged), for tests that change the state while ralph runs: `POST /_standin/faults`
//! appends the faults sent (one or an array), `POST /_standin/faults/clear` drops them all;
//! `POST /_standin/issues/N` sets the fields sent on
//! issue N as the state file has them (`{"deleted": true}`: deleted, as only the web can).
//!
//! Logs: `STATE.json.log` has one `METHOD TARGET` line per request (faults included, the query
//! kept); `STATE.json.calls` one JSON line per request: `{user, method, target, status, fault}`
//! (`user` null for a refused token, `status` 0 for a reset).
//!
//! Requests are served one after another on one thread: each reads the state, changes it and
//! writes it back before the next is read, so every request is atomic and two clients racing for
//! the same change see one win — as GitHub's own writes are.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde_json::{Value, json};

#[path = "github_standin/comments.rs"]
mod comments;
#[path = "github_standin/pulls.rs"]
mod pulls;

use comments::{comments_of, edit_comment, new_comment};
use pulls::pulls;

fn main() {
    let path = std::env::args().nth(1).expect("github-standin STATE.json");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    println!("{port}");
    let _ = std::io::stdout().flush();
    for stream in listener.incoming().flatten() {
        let _ = serve(stream, &path, port);
    }
}

/// A request as read off the connection.
struct Request {
    method: String,
    target: String,
    token: String,
    sent: Value,
}

/// An answer: status, extra headers, body (`None`: no body at all, as a 204).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Option<Value>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: Some(body),
        }
    }

    fn message(status: u16, text: &str) -> Answer {
        Answer::json(status, json!({ "message": text }))
    }
}

/// One request on one connection.
fn serve(mut stream: TcpStream, path: &str, port: u16) -> std::io::Result<()> {
    // A client that connects and never sends must not stop the others forever.
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let req = read_request(&stream)?;
    let mut state = load(path)?;
    if req.method == "POST" && req.target.starts_with("/_standin/") {
        let a = control(&mut state, &req);
        save(path, &state)?;
        return respond(&mut stream, &a);
    }
    append(
        &format!("{path}.log"),
        &format!("{} {}", req.method, req.target),
    )?;
    let user = login_of(&state, &req.token);
    let route = format!(
        "{} {}",
        req.method,
        req.target.split('?').next().unwrap_or("")
    );
    let fault = take_fault(&mut state, &route);
    let answer = match &fault {
        Some(f) if f["apply"] != true => None,
        _ => Some(answer(&mut state, &req, user.as_deref(), port)),
    };
    save(path, &state)?;
    let (status, outcome) = match &fault {
        Some(f) if f["reset"] == true => (0, None),
        Some(f) => {
            let a = fault_answer(f);
            (a.status, Some(a))
        }
        None => {
            let a = answer.expect("answered");
            (a.status, Some(a))
        }
    };
    let call = json!({
        "user": user, "method": req.method, "target": req.target,
        "status": status, "fault": fault.is_some(),
    });
    append(&format!("{path}.calls"), &call.to_string())?;
    match outcome {
        Some(a) => respond(&mut stream, &a),
        None => reset(stream),
    }
}

/// The API's answer to an authenticated request; 401 for any other.
fn answer(state: &mut Value, req: &Request, user: Option<&str>, port: u16) -> Answer {
    match user {
        Some(login) => route(state, req, login, port),
        None => Answer::message(401, "Bad credentials"),
    }
}

fn read_request(stream: &TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let (mut token, mut length) = (String::new(), 0usize);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                // GitHub takes both `Bearer T` and `token T`.
                "authorization" => {
                    let v = v.trim();
                    token = v
                        .strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("token "))
                        .unwrap_or("")
                        .trim()
                        .to_string();
                }
                "content-length" => length = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Request {
        method,
        target,
        token,
        sent: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn load(path: &str) -> std::io::Result<Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?).expect("the state is JSON"))
}

/// The state written whole, then renamed over the old: never half a file.
fn save(path: &str, state: &Value) -> std::io::Result<()> {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(state)?)?;
    std::fs::rename(&tmp, path)
}

fn append(path: &str, line: &str) -> std::io::Result<()> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(log, "{line}")
}

/// The token's user: `tokens[token]`, else `login` when it is the old single `token`.
fn login_of(state: &Value, token: &str) -> Option<String> {
    if token.is_empty() {
        return None;
    }
    if let Some(login) = state["tokens"][token].as_str() {
        return Some(login.to_string());
    }
    (state["token"].as_str() == Some(token))
        .then(|| state["login"].as_str().unwrap_or("ralph-bot").to_string())
}

/// A test's change to the state, in line with every request.
fn control(state: &mut Value, req: &Request) -> Answer {
    match req.target.trim_start_matches("/_standin/").split_once('/') {
        None if req.target == "/_standin/faults" => add_faults(state, &req.sent),
        Some(("faults", "clear")) => state["faults"] = json!([]),
        Some(("issues", n)) => {
            let i = state["issues"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .find(|i| i["number"].as_u64() == n.parse().ok());
            match (i.and_then(Value::as_object_mut), req.sent.as_object()) {
                (Some(i), Some(fields)) => i.extend(fields.clone()),
                _ => return Answer::message(404, "Not Found"),
            }
        }
        _ => return Answer::message(404, "Not Found"),
    }
    Answer::json(201, json!({}))
}

fn add_faults(state: &mut Value, sent: &Value) {
    let new = match sent {
        Value::Array(a) => a.clone(),
        v => vec![v.clone()],
    };
    if !state["faults"].is_array() {
        state["faults"] = json!([]);
    }
    if let Some(a) = state["faults"].as_array_mut() {
        a.extend(new);
    }
}

/// The first fault for `route`, counted down (gone at 0).
fn take_fault(state: &mut Value, route: &str) -> Option<Value> {
    let faults = state["faults"].as_array_mut()?;
    let i = faults
        .iter()
        .position(|f| f["route"] == route && f["times"].as_u64() != Some(0))?;
    let fault = faults[i].clone();
    if let Some(n) = fault["times"].as_u64() {
        if n <= 1 {
            faults.remove(i);
        } else {
            faults[i]["times"] = json!(n - 1);
        }
    }
    Some(fault)
}

fn fault_answer(f: &Value) -> Answer {
    let status = f["status"].as_u64().unwrap_or(500) as u16;
    let body = match &f["body"] {
        Value::Null => json!({ "message": reason(status) }),
        b => b.clone(),
    };
    let headers = f["headers"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_string)))
        .collect();
    Answer {
        status,
        headers,
        body: Some(body),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn respond(stream: &mut TcpStream, a: &Answer) -> std::io::Result<()> {
    let text = a.body.as_ref().map(Value::to_string).unwrap_or_default();
    let mut head = format!("HTTP/1.1 {} {}\r\n", a.status, reason(a.status));
    if a.body.is_some() {
        head.push_str("Content-Type: application/json; charset=utf-8\r\n");
    }
    // As GitHub's: the server's clock, which workers on skewed machines go by.
    head.push_str(&format!(
        "Date: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        chrono::Utc::now().format("%a, %d %b %Y %H:%M:%S GMT"),
        text.len()
    ));
    for (k, v) in &a.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    stream.write_all(format!("{head}\r\n{text}").as_bytes())?;
    stream.flush()
}

/// Close with a TCP reset (SO_LINGER 0): the client reads ECONNRESET, not an answer.
fn reset(stream: TcpStream) -> std::io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor owned by `stream`, and a `linger` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::from_ref(&linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    drop(stream);
    Ok(())
}

/// The value of query parameter `k` (empty when absent).
fn param(query: &str, k: &str) -> String {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
        .unwrap_or("")
        .replace("%3A", ":")
        .replace("%3a", ":")
}

/// One page of `list` (`page_size` a page), with the `Link` to the next when there is one.
fn paged(state: &Value, list: Vec<Value>, target: &str, port: u16) -> Answer {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let size = state["page_size"].as_u64().unwrap_or(30).max(1) as usize;
    let page: usize = param(query, "page").parse().unwrap_or(1).max(1);
    let chunk: Vec<Value> = list
        .iter()
        .skip((page - 1) * size)
        .take(size)
        .cloned()
        .collect();
    let mut a = Answer::json(200, Value::Array(chunk));
    if list.len() > page * size {
        let q: Vec<&str> = query
            .split('&')
            .filter(|kv| !kv.starts_with("page=") && !kv.is_empty())
            .collect();
        let sep = if q.is_empty() { "" } else { "&" };
        a.headers.push((
            "Link".into(),
            format!(
                "<http://127.0.0.1:{port}{path}?{}{sep}page={}>; rel=\"next\"",
                q.join("&"),
                page + 1
            ),
        ));
    }
    a
}

/// The API.
fn route(state: &mut Value, req: &Request, login: &str, port: u16) -> Answer {
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method.as_str();
    match (method, segs.as_slice()) {
        ("GET", ["user"]) => Answer::json(200, json!({ "login": login, "type": "User" })),
        ("GET", ["repos", _, _, "issues"]) => {
            let list = list_issues(state, query);
            paged(state, list, &req.target, port)
        }
        (_, ["repos", o, r, "issues", "comments", id]) => {
            edit_comment(state, method, &format!("{o}/{r}"), id, &req.sent)
        }
        (_, ["repos", o, r, "pulls", rest @ ..]) => {
            let repo = format!("{o}/{r}");
            pulls(state, req, &repo, login, rest, port)
        }
        (_, ["repos", o, r, "issues", n, rest @ ..]) => {
            let repo = format!("{o}/{r}");
            let Some(i) = issues(state).position(|i| i["number"].as_u64() == n.parse().ok()) else {
                return Answer::message(404, "Not Found");
            };
            if state["issues"][i]["deleted"] == true {
                return Answer::json(
                    410,
                    json!({
                        "message": "This issue was deleted",
                        "documentation_url": "https://docs.github.com/rest/issues/issues#get-an-issue",
                        "status": "410",
                    }),
                );
            }
            if let ("GET", ["comments"]) = (method, rest) {
                let since = param(query, "since");
                let list = comments_of(&state["issues"][i], &repo, n, &since);
                return paged(state, list, &req.target, port);
            }
            if let ("POST", ["comments"]) = (method, rest) {
                return Answer::json(201, new_comment(state, i, &repo, login, &req.sent));
            }
            match change(&mut state["issues"][i], method, rest, &req.sent) {
                Some(status) => {
                    let issue = state["issues"][i].clone();
                    Answer::json(status, shown(state, &issue))
                }
                None => Answer::message(404, "Not Found"),
            }
        }
        _ => Answer::message(404, "Not Found"),
    }
}

/// The issues a listing shows, in its order.
fn list_issues(state: &Value, query: &str) -> Vec<Value> {
    let wanted = match param(query, "state").as_str() {
        "" => "open".to_string(),
        s => s.to_string(),
    };
    let labels_wanted = param(query, "labels");
    let mut list: Vec<Value> = issues(state)
        .filter(|i| {
            i["deleted"] != true
                && (wanted == "all" || i["state"] == wanted.as_str())
                && labels_wanted
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .all(|l| labels(i).contains(&l.to_string()))
        })
        .map(|i| shown(state, &i))
        .collect();
    if param(query, "direction") != "asc" {
        list.reverse();
    }
    list
}

/// A change to one issue; `None` for an endpoint the stand-in does not have.
fn change(issue: &mut Value, method: &str, rest: &[&str], sent: &Value) -> Option<u16> {
    let names = |k: &str| -> Vec<Value> { sent[k].as_array().cloned().unwrap_or_default() };
    match (method, rest) {
        ("GET", []) => {}
        ("PATCH", []) => {
            for k in ["title", "body", "labels", "assignees"] {
                if !sent[k].is_null() {
                    issue[k] = sent[k].clone();
                }
            }
            match sent["state"].as_str() {
                Some("closed") => {
                    issue["state"] = json!("closed");
                    issue["state_reason"] = match &sent["state_reason"] {
                        Value::String(r) => json!(r),
                        _ => json!("completed"),
                    };
                }
                Some("open") if issue["state"] != "open" => {
                    issue["state"] = json!("open");
                    issue["state_reason"] = json!("reopened");
                }
                Some("open") | None => {}
                Some(_) => return Some(422),
            }
        }
        ("POST", ["assignees"]) => push_all(&mut issue["assignees"], names("assignees")),
        ("DELETE", ["assignees"]) => remove_all(&mut issue["assignees"], &names("assignees")),
        ("POST", ["labels"]) => push_all(&mut issue["labels"], names("labels")),
        ("DELETE", ["labels", name]) => {
            let name = name.replace("%3A", ":").replace("%3a", ":");
            let before = issue["labels"].as_array().map_or(0, Vec::len);
            remove_all(&mut issue["labels"], &[Value::String(name)]);
            if issue["labels"].as_array().map_or(0, Vec::len) == before {
                return Some(404);
            }
        }
        _ => return None,
    }
    Some(if method == "POST" { 201 } else { 200 })
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

fn push_all(list: &mut Value, items: Vec<Value>) {
    if !list.is_array() {
        *list = json!([]);
    }
    let a = list.as_array_mut().expect("an array");
    for item in items {
        if !a.contains(&item) {
            a.push(item);
        }
    }
}

fn remove_all(list: &mut Value, items: &[Value]) {
    if let Some(a) = list.as_array_mut() {
        a.retain(|x| !items.contains(x));
    }
}

fn issues(state: &Value) -> impl Iterator<Item = Value> + '_ {
    state["issues"].as_array().into_iter().flatten().cloned()
}

fn labels(i: &Value) -> Vec<String> {
    i["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_string))
        .collect()
}

/// An issue as the API shows it.
fn shown(state: &Value, i: &Value) -> Value {
    let open_blockers = i["blocked_by"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            issues(state)
                .any(|j| &j["number"] == *n && j["state"] == "open" && j["deleted"] != true)
        })
        .count();
    let mut v = json!({
        "number": i["number"],
        "title": i["title"],
        "body": i["body"],
        "state": i["state"],
        "state_reason": i["state_reason"],
        "labels": labels(i).iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
        "assignees": i["assignees"].as_array().into_iter().flatten()
            .map(|a| json!({ "login": a })).collect::<Vec<_>>(),
        "comments": i["comments"].as_array().map_or(0, Vec::len),
        "issue_dependencies_summary": {
            "blocked_by": open_blockers,
            "total_blocked_by": i["blocked_by"].as_array().map_or(0, Vec::len),
        },
    });
    if i["pull_request"] == true {
        v["pull_request"] = json!({ "url": "https://example.invalid/pull" });
    }
    v
}
