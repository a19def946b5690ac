//! The HTTP layer and the look-ups against a scripted loopback server: real requests through
//! ureq, answers given in order, every request line recorded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::error::exit;

/// A whole HTTP answer.
fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    format!("{head}\r\n{body}")
}

/// A server answering `answers` in order, one a connection; `METHOD TARGET` of each request.
fn server(answers: Vec<String>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for a in answers {
            let (mut stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut first, mut length) = (String::new(), 0usize);
            reader.read_line(&mut first).unwrap();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() == 0 || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            reader.read_exact(&mut vec![0; length]).unwrap();
            let line: Vec<&str> = first.split_whitespace().take(2).collect();
            log.lock().unwrap().push(line.join(" "));
            stream.write_all(a.as_bytes()).unwrap();
        }
    });
    (url, seen)
}

fn github(url: &str, retry: Duration, max_wait: Duration) -> GitHub {
    GitHub::at(url, "o/r", ("t".into(), "GITHUB_TOKEN"), retry, max_wait)
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn a_5xx_is_tried_again_until_it_answers() {
    let (url, seen) = server(vec![
        answer(502, &[], r#"{"message":"Bad Gateway"}"#),
        answer(503, &[], ""),
        answer(200, &[], "[]"),
    ]);
    let gh = github(&url, MINUTE, MINUTE);
    let (status, _, text) = gh
        .call_allowing("GET", &format!("{url}/x"), None, &[])
        .unwrap();
    assert_eq!((status, text.as_str()), (200, "[]"));
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[test]
fn a_4xx_is_never_tried_again() {
    for status in [400, 403, 404, 410, 422] {
        let (url, seen) = server(vec![
            answer(status, &[], r#"{"message":"No"}"#),
            answer(200, &[], "{}"),
        ]);
        let gh = github(&url, MINUTE, MINUTE);
        let e = gh.call("PATCH", &format!("{url}/x"), None).unwrap_err();
        assert_eq!(e.to_string(), format!("PATCH {url}/x: HTTP {status}: No"));
        assert_eq!(e.exit_code(), exit::ERROR);
        assert_eq!(seen.lock().unwrap().len(), 1, "{status}");
    }
}

#[test]
fn a_fault_past_the_budget_is_an_error_naming_its_tries() {
    let fault = || answer(502, &[], r#"{"message":"Bad Gateway"}"#);
    // Room for the first wait (0.5 to 0.625 s), not for many more (1 s, then 2 s…).
    let (url, seen) = server(vec![fault(), fault(), fault(), fault()]);
    let gh = github(&url, Duration::from_millis(1500), MINUTE);
    let e = gh.call("POST", &format!("{url}/c"), None).unwrap_err();
    let tries = seen.lock().unwrap().len();
    assert!((2..4).contains(&tries), "{tries}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "POST {url}/c: HTTP 502: Bad Gateway ({tries} tries in "
        )),
        "{text}"
    );
    // No budget: tried once, and said so.
    let (url, seen) = server(vec![fault(), fault()]);
    let e = github(&url, Duration::ZERO, MINUTE)
        .call("GET", &format!("{url}/c"), None)
        .unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(
        e.to_string()
            .ends_with("(tried once: the retry budget is 0.0s)"),
        "{e}"
    );
}

#[test]
fn a_rate_limit_beyond_the_waiting_budget_is_exit_10_and_within_it_is_waited() {
    let limited = answer(
        429,
        &[("retry-after", "3600")],
        r#"{"message":"slow down"}"#,
    );
    let (url, seen) = server(vec![limited]);
    let e = github(&url, MINUTE, MINUTE)
        .call("GET", &format!("{url}/x"), None)
        .unwrap_err();
    assert_eq!(e.exit_code(), exit::BUDGET);
    assert!(
        e.to_string()
            .contains("HTTP 429 (rate limited): the rate limit resets at "),
        "{e}"
    );
    assert!(e.to_string().contains("(1h 00m 00s from now)"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Within it: waited, then answered, the wait counted.
    let (url, _) = server(vec![
        answer(429, &[("retry-after", "1")], "{}"),
        answer(200, &[], "{}"),
    ]);
    let gh = github(&url, Duration::ZERO, MINUTE);
    gh.call("GET", &format!("{url}/x"), None).unwrap();
    assert_eq!(gh.waited.get(), Duration::from_secs(1));
}

#[test]
fn an_issue_now_is_gone_once_deleted_and_a_persons_not_planned_is_told() {
    let issue = r#"{"number":1,"state":"closed","state_reason":"not_planned","labels":[{"name":"ralph"}],"assignees":[{"login":"alice"}]}"#;
    let (url, seen) = server(vec![
        answer(410, &[], r#"{"message":"This issue was deleted"}"#),
        answer(404, &[], r#"{"message":"Not Found"}"#),
        answer(200, &[], issue),
    ]);
    let mut gh = github(&url, MINUTE, MINUTE);
    let item = crate::queue::Item {
        id: "1".into(),
        title: String::new(),
        body: String::new(),
        criteria: Vec::new(),
    };
    use crate::queue::{Now, Tracker};
    assert_eq!(gh.now(&item).unwrap(), Now::Gone);
    assert_eq!(gh.now(&item).unwrap(), Now::Gone);
    assert_eq!(gh.now(&item).unwrap(), Now::NotPlanned);
    assert_eq!(seen.lock().unwrap()[0], "GET /repos/o/r/issues/1");
}

#[test]
fn an_open_pull_request_is_found_before_one_is_opened() {
    let pulls = r#"[{"html_url":"https://github.com/o/r/pull/7","number":7}]"#;
    let (url, seen) = server(vec![answer(200, &[], pulls)]);
    let gh = github(&url, MINUTE, MINUTE);
    let got = gh
        .open_or_find_pr("T", "ralph/github-1", "main", "b")
        .unwrap();
    assert_eq!(got, ("https://github.com/o/r/pull/7".to_string(), false));
    assert_eq!(
        *seen.lock().unwrap(),
        ["GET /repos/o/r/pulls?head=o:ralph/github-1&state=open&per_page=100"]
    );
    // A 422 that is not "already exists" is an error, not a search.
    let invalid = r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"head","code":"invalid"}]}"#;
    let (url, seen) = server(vec![answer(200, &[], "[]"), answer(422, &[], invalid)]);
    let e = github(&url, MINUTE, MINUTE)
        .open_or_find_pr("T", "ralph/github-1", "main", "b")
        .unwrap_err();
    assert!(e.to_string().contains("HTTP 422"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 2);
}
