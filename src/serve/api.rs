//! The routes, and the JSON API's reads: `GET /api/loops` (every loop, as
//! `ralph status --all --json` gives them, the main work tree's named `main`, and whether this
//! server is read-only), `GET /api/loops/NAME` (that loop with its own view), and
//! `POST /api/session` (the page's cookie). Reads run on the blocking pool: they read files.

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{App, MAIN, actions, auth, events, page};
use crate::error::Result;
use crate::git::Repo;
use crate::loops::{self, Entry, Retired};

/// The most a request body may hold (an answer, a hint).
const BODY_LIMIT: usize = 64 * 1024;

pub(super) fn router(app: App) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/app.js", get(page::script))
        .route("/style.css", get(page::style))
        .route("/api/session", post(session))
        .route("/api/loops", get(list))
        .route("/api/loops/{name}", get(one))
        .route("/api/loops/{name}/{action}", post(actions::act))
        .route("/api/events", get(events::stream))
        .fallback(|| async { auth::refusal(StatusCode::NOT_FOUND, "no such page") })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::guard,
        ))
        .with_state(app)
}

/// The page's cookie, for a request that showed the token.
async fn session(State(app): State<App>) -> Response {
    (
        [(header::SET_COOKIE, auth::cookie(&app.token))],
        axum::Json(json!({"ok": true, "message": "signed in"})),
    )
        .into_response()
}

async fn list(State(app): State<App>) -> Response {
    let cwd = app.cwd.clone();
    let read_only = app.read_only;
    blocking(move || snapshot(&cwd, read_only)).await
}

async fn one(State(app): State<App>, Path(name): Path<String>) -> Response {
    let cwd = app.cwd.clone();
    blocking(move || {
        let repo = Repo::discover(&cwd)?;
        let entries = loops::all(&repo)?;
        let retired = crate::worktree::retired(&repo);
        let all = named(loops::all_to_json(&entries, &retired));
        let found = all["loops"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == name.as_str()).cloned());
        let Some(mut v) = found else {
            return Ok(None);
        };
        if let Some(e) = entries.iter().find(|e| api_name(e) == name) {
            super::view::add(&mut v, e);
        }
        Ok(Some(v))
    })
    .await
}

/// Run `read` on the blocking pool: its JSON (200), 404 for `None`, 500 for an error.
async fn blocking<T, F>(read: F) -> Response
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Into<Option<Value>> + Send + 'static,
{
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(v)) => match v.into() {
            Some(v) => axum::Json(v).into_response(),
            None => auth::refusal(StatusCode::NOT_FOUND, "no such loop"),
        },
        Ok(Err(e)) => auth::refusal(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(_) => auth::refusal(StatusCode::INTERNAL_SERVER_ERROR, "the read failed"),
    }
}

/// `{"schema_version":1,"loops":[…],"read_only":…}`.
pub(super) fn snapshot(cwd: &std::path::Path, read_only: bool) -> Result<Value> {
    let repo = Repo::discover(cwd)?;
    let entries = loops::all(&repo)?;
    let retired = crate::worktree::retired(&repo);
    Ok(snapshot_of(&entries, &retired, read_only))
}

/// The `/api/loops` JSON of these loops.
pub(super) fn snapshot_of(entries: &[Entry], retired: &[Retired], read_only: bool) -> Value {
    let mut v = named(loops::all_to_json(entries, retired));
    if let Some(list) = v["loops"].as_array_mut() {
        for (l, e) in list.iter_mut().zip(entries) {
            l["activity_now"] = super::view::activity_now(e).into();
        }
    }
    v["read_only"] = read_only.into();
    v
}

/// The main work tree's loop is `main` here.
fn named(mut all: Value) -> Value {
    if let Some(list) = all["loops"].as_array_mut() {
        for l in list {
            if l["name"] == loops::MAIN && !l["path"].is_null() {
                l["name"] = MAIN.into();
            }
        }
    }
    all
}

/// A loop's name in the API.
pub(super) fn api_name(e: &Entry) -> &str {
    if e.name == loops::MAIN { MAIN } else { &e.name }
}
