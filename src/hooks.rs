//! The repository's `pre-commit` and `commit-msg` hooks, run as git would run them (libgit2 runs
//! none), honouring `core.hooksPath`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::proc::Invocation;
use crate::signals::Stop;

/// How long a hook may run before it is killed (and counts as failed).
const HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the hooks live: `core.hooksPath` (relative to the work tree), else `$GIT_DIR/hooks`.
pub(crate) fn hooks_dir(repo: &crate::git::Repo) -> PathBuf {
    let configured = repo.config_value("core.hooksPath").map(|p| expand_home(&p));
    match configured {
        Some(p) if p.is_absolute() => p,
        Some(p) => repo.root().join(p),
        // A linked worktree's hooks are the repository's: in the common git directory.
        None => repo.git2().commondir().join("hooks"),
    }
}

/// `~/x` as git's path values read it.
fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `hooks` holds a hook [`run`] would run.
pub(crate) fn any(hooks: &Path) -> bool {
    ["pre-commit", "commit-msg"]
        .iter()
        .any(|h| executable(&hooks.join(h)))
}

/// Where the message for `commit-msg` is written: `COMMIT_EDITMSG` in the git directory the hook
/// sees — `shown`, its path as the hook is given it, and `dir`, where ralph writes and reads it
/// (the same directory without `--sandbox`; under it, the agent's own git directory, which the
/// sandbox shows at the repository's).
pub(crate) struct MessageDir {
    pub(crate) dir: std::path::PathBuf,
    pub(crate) shown: std::path::PathBuf,
}

/// Run `pre-commit`, then `commit-msg` on the message (through `COMMIT_EDITMSG`, [`MessageDir`]).
/// Returns the message as the hook left it, or what the failing hook said.
///
/// Each runs as `confine` makes it (under `--sandbox`, in the sandbox: the agent can have
/// written them). An interrupt (`stop`) while one runs kills it at once: the commit is refused.
pub(crate) fn run(
    root: &Path,
    hooks: &Path,
    at: &MessageDir,
    message: &str,
    confine: &dyn Fn(Invocation) -> Invocation,
    stop: Option<&Stop>,
) -> Result<String, String> {
    let pre = hooks.join("pre-commit");
    if executable(&pre) {
        run_hook(root, &pre, &[], confine, stop)?;
    }
    let msg_hook = hooks.join("commit-msg");
    if !executable(&msg_hook) {
        return Ok(message.to_string());
    }
    let file = at.dir.join("COMMIT_EDITMSG");
    crate::files::write_own(&file, message.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let shown = at.shown.join("COMMIT_EDITMSG");
    run_hook(root, &msg_hook, &[shown.as_os_str()], confine, stop)?;
    // The hook ran on the repository's say (in the sandbox under --sandbox): what it left is
    // read following no link at all — the hook may have put one there, to a secret.
    let edited =
        crate::files::read_text_unlinked(&at.dir, &file).map_err(|e| format!("cannot read {e}"))?;
    let cleaned: String = edited
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    let cleaned = cleaned.trim_end().to_string() + "\n";
    if cleaned.trim().is_empty() {
        return Err("the commit-msg hook left an empty message".into());
    }
    Ok(cleaned)
}

fn run_hook(
    root: &Path,
    hook: &Path,
    args: &[&std::ffi::OsStr],
    confine: &dyn Fn(Invocation) -> Invocation,
    stop: Option<&Stop>,
) -> Result<(), String> {
    let name = hook
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let inv = confine(Invocation {
        program: hook.to_string_lossy().into_owned(),
        args: args.iter().map(|a| a.into()).collect(),
        stdin: None,
        env: Vec::new(),
    });
    let mut cmd = Command::new(inv.program);
    cmd.args(inv.args);
    let brief = crate::proc::brief::run_guarded(cmd.current_dir(root), HOOK_TIMEOUT, stop)
        .map_err(|e| format!("cannot run the {name} hook: {e}"))?;
    if brief.stopped {
        return Err(format!(
            "the {name} hook was stopped: ralph was interrupted"
        ));
    }
    let (status, output) = (brief.status, brief.output);
    let tail: String = output
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join(" / ");
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!(
            "the {name} hook failed (exit {}){}",
            s.code()
                .map_or("by a signal".to_string(), |c| c.to_string()),
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            }
        )),
        None => Err(format!(
            "the {name} hook ran longer than {} s and was killed",
            HOOK_TIMEOUT.as_secs()
        )),
    }
}
