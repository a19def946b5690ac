//! A stand-in for the GitHub REST API's issue endpoints, for the queue tests (SPEC §14):
//! loopback only, an ephemeral port (printed on stdout), the token checked, every request
//! recorded. `github-standin STATE.json`: the state holds `token`, `login`, `page_size` and
//! `issues` (`number`, `title`, `body`, `labels`, `assignees`, `state`, `pull_request`,
//! `blocked_by`: issue numbers); it is written back after every change, and each request is
//! appended to `STATE.json.log` as `METHOD PATH`. Shapes follow the real API: issues oldest
//! last unless `direction=asc`, pages linked by `Link: <…>; rel="next"`, pull requests as
//! issues with a `pull_request` key, `issue_dependencies_summary.blocked_by` counting open
//! blockers, 401 `Bad credentials`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use serde_json::{Value, json};

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

/// One request on one connection.
fn serve(mut stream: TcpStream, path: &str, port: u16) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let (mut auth, mut length) = (String::new(), 0usize);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "authorization" => auth = v.trim().to_string(),
                "content-length" => length = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("{path}.log"))?;
    writeln!(log, "{method} {target}")?;
    let mut state: Value =
        serde_json::from_str(&std::fs::read_to_string(path)?).expect("the state is JSON");
    let (status, link, out) = if auth != format!("Bearer {}", state["token"].as_str().unwrap_or(""))
    {
        (401, None, json!({ "message": "Bad credentials" }))
    } else {
        let (status, link, out) = route(&mut state, &method, &target, &sent, port);
        std::fs::write(path, serde_json::to_string_pretty(&state)?)?;
        (status, link, out)
    };
    let text = out.to_string();
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        text.len()
    );
    if let Some(l) = link {
        head.push_str(&format!("Link: {l}\r\n"));
    }
    stream.write_all(format!("{head}\r\n{text}").as_bytes())
}

/// The API: `(status, Link header, body)`.
fn route(
    state: &mut Value,
    method: &str,
    target: &str,
    sent: &Value,
    port: u16,
) -> (u16, Option<String>, Value) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or("")
            .to_string()
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, segs.as_slice()) {
        ("GET", ["user"]) => (200, None, json!({ "login": state["login"] })),
        ("GET", ["repos", o, r, "issues"]) => {
            let wanted = match param("state").as_str() {
                "" => "open".to_string(),
                s => s.to_string(),
            };
            let mut list: Vec<Value> = issues(state)
                .filter(|i| {
                    (wanted == "all" || i["state"] == wanted.as_str())
                        && param("labels")
                            .split(',')
                            .filter(|l| !l.is_empty())
                            .all(|l| labels(i).contains(&l.to_string()))
                })
                .map(|i| shown(state, &i))
                .collect();
            if param("direction") != "asc" {
                list.reverse();
            }
            let size = state["page_size"].as_u64().unwrap_or(30) as usize;
            let page: usize = param("page").parse().unwrap_or(1).max(1);
            let chunk: Vec<Value> = list
                .iter()
                .skip((page - 1) * size)
                .take(size)
                .cloned()
                .collect();
            let link = (list.len() > page * size).then(|| {
                let q: Vec<String> = query
                    .split('&')
                    .filter(|kv| !kv.starts_with("page=") && !kv.is_empty())
                    .map(str::to_string)
                    .collect();
                format!(
                    "<http://127.0.0.1:{port}/repos/{o}/{r}/issues?{}&page={}>; rel=\"next\"",
                    q.join("&"),
                    page + 1
                )
            });
            (200, link, Value::Array(chunk))
        }
        ("POST", ["repos", o, r, "pulls"]) => {
            if !state["pulls"].is_array() {
                state["pulls"] = json!([]);
            }
            let number = 100 + state["pulls"].as_array().map_or(0, Vec::len);
            let mut pull = sent.clone();
            pull["number"] = json!(number);
            pull["html_url"] = json!(format!("https://github.com/{o}/{r}/pull/{number}"));
            if let Some(a) = state["pulls"].as_array_mut() {
                a.push(pull.clone());
            }
            (201, None, pull)
        }
        (_, ["repos", _, _, "issues", n, rest @ ..]) => {
            let Some(i) = issues(state).position(|i| i["number"].as_u64() == n.parse().ok()) else {
                return (404, None, json!({ "message": "Not Found" }));
            };
            let changed = change(&mut state["issues"][i], method, rest, sent);
            match changed {
                Some(status) => {
                    let issue = state["issues"][i].clone();
                    (status, None, shown(state, &issue))
                }
                None => (404, None, json!({ "message": "Not Found" })),
            }
        }
        _ => (404, None, json!({ "message": "Not Found" })),
    }
}

/// A change to one issue; `None` for an endpoint the stand-in does not have.
fn change(issue: &mut Value, method: &str, rest: &[&str], sent: &Value) -> Option<u16> {
    let names = |k: &str| -> Vec<Value> { sent[k].as_array().cloned().unwrap_or_default() };
    match (method, rest) {
        ("GET", []) => {}
        ("PATCH", []) => {
            for k in [
                "state",
                "state_reason",
                "title",
                "body",
                "labels",
                "assignees",
            ] {
                if !sent[k].is_null() {
                    issue[k] = sent[k].clone();
                }
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
        ("POST", ["comments"]) => {
            if !issue["comments"].is_array() {
                issue["comments"] = json!([]);
            }
            if let Some(a) = issue["comments"].as_array_mut() {
                a.push(sent["body"].clone());
            }
        }
        _ => return None,
    }
    Some(if method == "POST" { 201 } else { 200 })
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
        .filter(|n| issues(state).any(|j| &j["number"] == *n && j["state"] == "open"))
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
