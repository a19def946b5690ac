//! The guard in front of every request: the `Host` must be the server's own (DNS rebinding), a
//! POST's `Origin` too (no cross-site form or fetch), and no API request or POST a browser says
//! comes from another site (`Sec-Fetch-Site`), every `/api/` request carries the token
//! (`Authorization: Bearer`, or the `ralph_token` cookie the page gets from `/api/session`),
//! compared in constant time; and every response, refusals too, carries the security headers.
//! No CORS header is ever sent.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::App;
use crate::error::{Error, Result};

/// The cookie the page authenticates with after `/api/session`.
pub(super) const COOKIE: &str = "ralph_token";

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// 32 random bytes, hex: the only key to the API.
pub(super) struct Token(String);

impl Token {
    pub(super) fn fresh() -> Result<Token> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::user(format!("no random bytes for the token: {e}")))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token itself: for the printed URL, the token file and the cookie only.
    pub(super) fn reveal(&self) -> &str {
        &self.0
    }

    fn matches(&self, given: &str) -> bool {
        constant_time_eq(self.0.as_bytes(), given.as_bytes())
    }
}

/// Equal, in a time that depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The `Host` values the server answers to: the loopback names with its port, and the listen
/// address itself.
pub(super) fn hosts(local: SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    let own = local.to_string().to_ascii_lowercase();
    if !hosts.contains(&own) {
        hosts.push(own);
    }
    hosts
}

/// The middleware: refuse what must be refused, then add the headers to whatever answers.
pub(super) async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    let mut res = match check(&app, &req) {
        Ok(()) => next.run(req).await,
        Err((code, why)) => refusal(code, why),
    };
    secure(res.headers_mut());
    res
}

fn check(app: &App, req: &Request) -> std::result::Result<(), (StatusCode, &'static str)> {
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    if !host.is_some_and(|h| app.hosts.contains(&h)) {
        return Err((StatusCode::FORBIDDEN, "this Host is not the server's own"));
    }
    if req.method() == Method::POST
        && let Some(origin) = headers.get(header::ORIGIN)
        && !origin
            .to_str()
            .is_ok_and(|o| app.origins.iter().any(|own| own.eq_ignore_ascii_case(o)))
    {
        return Err((StatusCode::FORBIDDEN, "this Origin is not the server's own"));
    }
    let api = req.uri().path().starts_with("/api/");
    if (api || req.method() == Method::POST) && from_another_site(headers) {
        return Err((StatusCode::FORBIDDEN, "a request from another site"));
    }
    if api && !authorized(&app.token, headers) {
        return Err((StatusCode::UNAUTHORIZED, "the token is missing or wrong"));
    }
    Ok(())
}

/// The browser says the request comes from a page of another origin (`Sec-Fetch-Site`:
/// `cross-site`, or `same-site` — a page on another port of localhost is the same site): refused
/// for the API and every POST even when no `Origin` is sent, since the `SameSite` cookie goes
/// with a same-site request. The page's own requests say `same-origin`; a URL typed or opened
/// says `none`.
fn from_another_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.trim();
            v.eq_ignore_ascii_case("cross-site") || v.eq_ignore_ascii_case("same-site")
        })
}

/// The bearer token, else the cookie, is the server's token.
fn authorized(token: &Token, headers: &HeaderMap) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(given) = bearer {
        return token.matches(given.trim());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|given| token.matches(given))
}

/// `{ok: false, message}` with `code`.
pub(super) fn refusal(code: StatusCode, why: &str) -> Response {
    let mut res = (
        code,
        axum::Json(serde_json::json!({"ok": false, "message": why})),
    )
        .into_response();
    if code == StatusCode::UNAUTHORIZED {
        res.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    res
}

/// The headers of every response.
fn secure(h: &mut HeaderMap) {
    let set = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in set {
        h.insert(name, HeaderValue::from_static(value));
    }
}

/// The `Set-Cookie` value carrying the token.
pub(super) fn cookie(token: &Token) -> String {
    format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
        token.reveal()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_only_when_every_byte_is() {
        assert!(constant_time_eq(b"abcd", b"abcd"));
        assert!(!constant_time_eq(b"abcd", b"abce"));
        assert!(!constant_time_eq(b"abcd", b"abc"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn tokens_are_fresh_hex_of_32_bytes() {
        let (a, b) = (Token::fresh().unwrap(), Token::fresh().unwrap());
        assert_eq!(a.reveal().len(), 64);
        assert!(a.reveal().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.reveal(), b.reveal());
        assert!(a.matches(a.reveal()) && !a.matches(b.reveal()));
    }

    #[test]
    fn another_sites_requests_are_told_apart_from_the_pages_own() {
        let said = |v: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = v {
                h.insert("sec-fetch-site", HeaderValue::from_static(v));
            }
            from_another_site(&h)
        };
        assert!(said(Some("cross-site")) && said(Some("same-site")) && said(Some("Cross-Site")));
        assert!(!said(Some("same-origin")) && !said(Some("none")) && !said(None));
    }

    #[test]
    fn the_listen_address_and_loopback_names_are_the_hosts() {
        let h = hosts("10.1.2.3:8080".parse().unwrap());
        assert!(h.contains(&"localhost:8080".to_string()));
        assert!(h.contains(&"10.1.2.3:8080".to_string()));
        assert!(!h.iter().any(|h| h.ends_with(":80")));
    }
}
