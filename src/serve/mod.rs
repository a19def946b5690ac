//! `ralph serve` (SPEC §16): a small HTTP server (axum on a current-thread tokio runtime) for
//! every loop of the repository — the page and its script embedded (`page`), a JSON API
//! (`api`, the loops as `status --all --json` reads them, and one loop's own view, `view`),
//! server-sent events fed by file events (`events`), the actions (`actions`), and the guard in
//! front of all of it (`auth`: the token, the `Host` check, the security headers).
//!
//! Start-up: the address is bound, the token made, written to `serve.token` (0600) and the pid
//! to `serve.pid` in the repository's state directory, and the one URL printed on stdout —
//! the only place the token is ever printed. SIGINT, SIGTERM or SIGHUP end the server with
//! exit 0, its two files removed.

mod actions;
mod api;
mod auth;
mod events;
mod page;
use crate::person;
mod view;

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::ServeArgs;
use crate::commands::Context;
use crate::error::{Error, Result};
use crate::git::Repo;

/// The name of the main work tree's loop in the API and on the page.
pub(crate) const MAIN: &str = "main";

/// What every request handler shares.
pub(crate) struct Shared {
    token: auth::Token,
    /// The `Host` values accepted (lowercase): the loopback names and the listen address.
    hosts: Vec<String>,
    /// `http://` + each of `hosts`: the only `Origin`s a POST may carry.
    origins: Vec<String>,
    read_only: bool,
    /// A directory of the repository (where ralph was started), discovered again per request.
    cwd: PathBuf,
    /// The repository's records in ralph's state directory, when there is one (resume logs).
    state: Option<crate::state::Keyed>,
    hub: events::Hub,
}

type App = Arc<Shared>;

pub(crate) fn run(ctx: &Context, args: &ServeArgs) -> Result<i32> {
    let repo = Repo::discover(&ctx.cwd)?;
    let addr = listen_address(&args.listen)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("failed to start the server's runtime", e))?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| Error::io(format!("failed to listen on {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("failed to read the listen address", e))?;
    if !local.ip().is_loopback() {
        ctx.ui.warn(&format!(
            "ralph serve listens on {local}: the web view is reachable from the network, guarded by its token only"
        ));
    }
    let token = auth::Token::fresh()?;
    let common = repo.git2().commondir().to_path_buf();
    let state = crate::state::StateHome::locate().and_then(|h| h.repo(&common).ok());
    let files = Files::write(state.as_ref(), &token)?;
    if state.is_none() {
        ctx.ui.warn(
            "no state directory ($XDG_STATE_HOME or $HOME): the token is only in the URL below",
        );
    }
    let hub = events::Hub::start(ctx.cwd.clone(), args.read_only)
        .map_err(|e| Error::user(format!("failed to watch the loops' files: {e}")))?;
    let hosts = auth::hosts(local);
    let app: App = Arc::new(Shared {
        origins: hosts.iter().map(|h| format!("http://{h}")).collect(),
        hosts,
        token,
        read_only: args.read_only,
        cwd: ctx.cwd.clone(),
        state,
        hub,
    });
    announce(local, &app.token)?;
    let served = rt.block_on(serve(listener, app));
    drop(files);
    served.map(|()| 0)
}

/// `ADDR:PORT`; `:PORT` listens on 127.0.0.1.
fn listen_address(given: &str) -> Result<SocketAddr> {
    let full = if given.starts_with(':') {
        format!("127.0.0.1{given}")
    } else {
        given.to_string()
    };
    let bad = |why: String| {
        Error::usage(format!("--listen `{given}`: {why}"))
            .with_hint("give ADDR:PORT, e.g. 127.0.0.1:8080 (port 0 picks a free one)")
    };
    full.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("no address".into()))
}

/// The one line on stdout with the token, flushed at once.
fn announce(local: SocketAddr, token: &auth::Token) -> Result<()> {
    let host = match local {
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
        SocketAddr::V6(a) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
        a => a.to_string(),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "http://{host}/#token={}", token.reveal())
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("failed to print the URL", e))
}

/// Serve until SIGINT, SIGTERM or SIGHUP. Open event streams are dropped with the runtime,
/// never waited for.
async fn serve(listener: tokio::net::TcpListener, app: App) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind| signal(kind).map_err(|e| Error::io("failed to listen for signals", e));
    let (mut int, mut term, mut hup) = (
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
        listen(SignalKind::hangup())?,
    );
    let router = api::router(app);
    tokio::select! {
        r = axum::serve(listener, router) => r.map_err(|e| Error::io("the server failed", e)),
        _ = int.recv() => Ok(()),
        _ = term.recv() => Ok(()),
        _ = hup.recv() => Ok(()),
    }
}

/// `serve.token` (0600) and `serve.pid` in the repository's state directory, removed on drop;
/// `serve.pid` held locked while the server runs (the kernel drops the lock on any death), so a
/// second server for the same repository is refused instead of taking the first one's files.
struct Files {
    written: Vec<PathBuf>,
    _pid: Option<std::fs::File>,
}

impl Files {
    fn write(state: Option<&crate::state::Keyed>, token: &auth::Token) -> Result<Files> {
        let Some(state) = state else {
            return Ok(Files {
                written: Vec::new(),
                _pid: None,
            });
        };
        let pid_file = state.join("serve.pid");
        let mut pid = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&pid_file)
            .map_err(|e| Error::file("open", &pid_file, e))?;
        if pid.try_lock().is_err() {
            let mut holder = String::new();
            let _ = std::io::Read::read_to_string(&mut pid, &mut holder);
            return Err(Error::user(format!(
                "another ralph serve (pid {}) serves this repository",
                holder.trim()
            ))
            .with_hint("open the URL it printed, or stop it first"));
        }
        let mut files = Files {
            written: vec![pid_file.clone()],
            _pid: None,
        };
        pid.set_len(0)
            .and_then(|()| writeln!(pid, "{}", std::process::id()))
            .map_err(|e| Error::file("write", &pid_file, e))?;
        files._pid = Some(pid);
        let token_file = state.join("serve.token");
        let bytes = format!("{}\n", token.reveal());
        crate::files::write_atomic(&token_file, bytes.as_bytes(), 0o600)
            .map_err(|e| Error::file("write", &token_file, e))?;
        files.written.push(token_file);
        Ok(files)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        for p in &self.written {
            let _ = std::fs::remove_file(p);
        }
    }
}
