//! Running the git CLI for the steps libgit2 cannot do as git does (see ARCHITECTURE.md, "Git"):
//! `git status` (the fingerprint and what changed) and `git add` (staging with every ignore rule,
//! sparse checkout, clean filters such as git-lfs, autocrlf). Always on the repository ralph
//! opened (`--git-dir`, `--work-tree`), with ralph's file monitor when one is running.
//!
//! The caches in the index (the untracked cache, the monitor's token and the entries it marks
//! unchanged) are trusted only in an index ralph's own git commands wrote last: any other
//! writer — the agent, its git, a hook, the repository's test command — may have planted them,
//! and `git add -A` reads neither. Before ralph's next command reads such a foreign index, the
//! monitor takes a new nonce (no token the index holds is answered in part); before a `git
//! status` (the only command that reads the untracked cache), `git update-index
//! --no-untracked-cache` drops the cache (and the token), so that status walks the whole tree
//! and builds a fresh one; any other command on a foreign index runs without the cache.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use super::GitError;
use super::index::Stamp;

/// ralph as git's file-system monitor (`core.fsmonitor`): the hook command git runs, and what
/// must happen before each git command so the hook answers with everything that changed.
#[derive(Clone)]
pub(crate) struct Monitor {
    /// The `core.fsmonitor` value: `'ralph' __fsmonitor 'file'`, run by git through the shell.
    pub(crate) hook: String,
    /// Called before each git command: wait for the watcher to see every change made so far,
    /// then write the hook's answers; returns the journal position of the token the hook hands
    /// out to that command.
    pub(crate) prepare: Arc<dyn Fn() -> std::io::Result<u64> + Send + Sync>,
    /// How many paths git, holding the token of a position, would now be answered with;
    /// `None` for "everything".
    pub(crate) changed_since: Arc<dyn Fn(u64) -> Option<usize> + Send + Sync>,
    /// Trust no token handed out so far, whoever presents it: the next answer is
    /// "everything" under a new nonce.
    pub(crate) distrust: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").field("hook", &self.hook).finish()
    }
}

/// The git CLI for one repository.
#[derive(Debug, Clone)]
pub(crate) struct GitCli {
    git_dir: PathBuf,
    pub(super) work_tree: PathBuf,
    pub(crate) monitor: Option<Monitor>,
    /// Under `--sandbox`: the common git directory, pinned. ralph's commands then also do not
    /// look inside submodules (whose configuration the agent can write), and ignore a
    /// `commondir` the agent may have added (see ARCHITECTURE.md, "The sandbox"). Every command
    /// runs no hook and no file-system monitor but ralph's, sandboxed or not.
    pub(crate) sandboxed: Option<PathBuf>,
    /// Under `--sandbox`: every command writes only beneath the repository (`beneath.rs`).
    pub(crate) beneath: Option<super::Beneath>,
    /// Under `--sandbox`: ralph's own binary where the agent cannot write it, run as the
    /// monitor's hook. A git confined by [`Self::beneath`] cannot execute `/proc/PID/exe` of
    /// an unconfined ralph (Landlock refuses it the access a ptrace would need).
    pub(crate) hook_program: Option<PathBuf>,
    /// ralph's runtime files, which its staging leaves out whatever the ignore rules say
    /// (`Repo::keep_out`).
    pub(crate) own: Vec<String>,
    /// The run's interrupts: a command running when one comes is killed at once.
    pub(crate) stop: Option<crate::signals::Stop>,
    /// The index file as ralph's own git commands last left it (shared by the clones).
    index: Arc<IndexTrust>,
    /// Under `--sandbox`: the nested repositories ralph's walk found last (`nested.rs`).
    pub(super) nested: Arc<Mutex<Option<(u64, Nested)>>>,
    /// Leave the nested repositories alone without `--sandbox` too ([`Self::leaving_nested`]).
    pub(super) leave_nested: bool,
}

/// The nested repositories one walk found (`nested.rs`), as git names them.
pub(crate) type Nested = Arc<Vec<Vec<u8>>>;

/// Which index ralph's git commands wrote last.
#[derive(Debug)]
struct IndexTrust {
    path: PathBuf,
    /// The index file's stamp after ralph's last command; `None`: no index file.
    seen: Mutex<Option<Stamp>>,
}

impl IndexTrust {
    fn now(&self) -> Option<Stamp> {
        Stamp::of(&self.path)
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Option<Stamp>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How one command runs.
#[derive(Clone, Copy)]
struct Run {
    /// With ralph's monitor (its answers were written).
    monitored: bool,
    /// On an index another process wrote, its untracked cache not dropped yet.
    foreign: bool,
}

impl super::Repo {
    /// Hear the run's interrupts: a git command running when one comes is killed at once, and
    /// fails as `GitError::Stopped`.
    pub(crate) fn set_stop(&mut self, stop: crate::signals::Stop) {
        self.git.stop = Some(stop);
    }

    /// The interrupts this repository's commands hear, for what runs beside them (git hooks).
    pub(crate) fn stop(&self) -> Option<crate::signals::Stop> {
        self.git.stop.clone()
    }
}

impl GitCli {
    pub(crate) fn new(git_dir: &Path, work_tree: &Path) -> GitCli {
        GitCli {
            git_dir: git_dir.to_path_buf(),
            work_tree: work_tree.to_path_buf(),
            monitor: None,
            sandboxed: None,
            index: Arc::new(IndexTrust {
                path: git_dir.join("index"),
                // An index that is there before ralph's first command is not ralph's; one
                // that is not there holds no cache.
                seen: Mutex::new(None),
            }),
            beneath: None,
            hook_program: None,
            own: Vec::new(),
            stop: None,
            nested: Arc::new(Mutex::new(None)),
            leave_nested: false,
        }
    }

    /// This CLI without ralph's monitor, for a command whose output the monitor cannot change
    /// and that writes no index: `ls-files` and `diff-index --cached` read the index as it is
    /// (`--others` walks the directories it is given, without the untracked cache). Each
    /// monitored command costs a barrier and a run of the hook; the token in the index stays
    /// for the next monitored one.
    pub(crate) fn unmonitored(&self) -> GitCli {
        GitCli {
            monitor: None,
            ..self.clone()
        }
    }

    /// This CLI without ralph's monitor and without the Landlock confinement of its writes, for
    /// the fetch of the agent's commits: its sending side is the sandbox (bwrap, which a
    /// Landlock-confined process cannot start), and it writes only in the git directory, which
    /// the agent never writes.
    pub(crate) fn for_fetch(&self) -> GitCli {
        GitCli {
            monitor: None,
            beneath: None,
            ..self.clone()
        }
    }

    /// Whether the index was written by another process since ralph's last git command (or
    /// was there before ralph's first): its caches are not trusted by the next command.
    pub(crate) fn index_foreign(&self) -> bool {
        *self.index.seen() != self.index.now()
    }

    /// Trust no monitor token handed out so far (the configuration git compares with
    /// changed): the next command is answered "everything".
    pub(crate) fn distrust(&self) {
        if let Some(m) = &self.monitor {
            (m.distrust)();
        }
    }

    fn command(&self, args: &[&str], run: Run, nested: &[Vec<u8>]) -> Command {
        let mut cmd = Command::new("git");
        cmd.arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree);
        // Reading the configuration runs nothing, and must show the repository's own values.
        let runs = args.first().is_some_and(|a| *a != "config");
        if runs {
            // Whatever ralph runs git for, outside any sandbox, on a repository an agent
            // wrote: no hook git would run (`post-index-change`, `post-checkout` for a worktree,
            // `post-merge`, `reference-transaction`… — the agent can write `.git/hooks`, in a
            // sandboxed loop too), and no file-system monitor but ralph's own. git hands these
            // on to the git it runs inside a submodule. ralph runs `pre-commit` and
            // `commit-msg` itself (`hooks.rs`), in the sandbox under --sandbox.
            cmd.args(["-c", "core.hooksPath=/dev/null"]);
            self.caches(&mut cmd, run);
        }
        if let Some(common) = self.sandboxed.as_ref().filter(|_| runs) {
            cmd.args(["-c", "diff.ignoreSubmodules=dirty"]);
            cmd.env("GIT_COMMON_DIR", common);
        }
        let sandboxed_status = args
            .iter()
            .position(|a| *a == "status")
            .filter(|_| self.sandboxed.is_some())
            .filter(|_| !args.iter().any(|a| a.starts_with("--ignore-submodules")));
        let args = super::nested::excluded_args(args, nested);
        match sandboxed_status {
            // A `.gitmodules` entry (which the agent writes) saying `ignore = none` beats the
            // configuration above; only the command line beats it: ralph's status never looks
            // inside a submodule whose configuration the agent can write.
            Some(at) => {
                cmd.args(&args[..=at])
                    .arg("--ignore-submodules=dirty")
                    .args(&args[at + 1..]);
            }
            None => {
                cmd.args(args);
            }
        }
        cmd.current_dir(&self.work_tree);
        // ralph reads git's output: the same messages whatever the user's language. Nobody
        // answers a prompt for a password: a remote that needs one fails at once.
        // An agent's `refs/replace/` never changes what ralph's git reads: a commit is its
        // own content (libgit2 knows no replace objects at all).
        cmd.env("LC_ALL", "C")
            .env_remove("LANGUAGE")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            // Nothing downloaded at the agent's say: a checkout leaves LFS files as their
            // pointers (git-lfs's smudge reads `lfs.url` from the agent's `.lfsconfig`), and
            // ralph fills them from the local store only (`lfs.rs`).
            .env("GIT_LFS_SKIP_SMUDGE", "1");
        for var in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX"] {
            cmd.env_remove(var);
        }
        if self.sandboxed.is_none() {
            cmd.env_remove("GIT_COMMON_DIR");
        }
        // The lib tests compare ralph's git with one that reads neither the user's nor the
        // system's configuration (git/tests.rs): ralph's reads none either there.
        #[cfg(test)]
        cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1");
        if let Some(b) = &self.beneath {
            b.command(&mut cmd);
        }
        // Its memory bounded: a file of the git directory that never ends is git's death, not
        // the machine's (`memory.rs`).
        super::memory::bound(&mut cmd);
        cmd
    }

    /// The file-system monitor and the untracked cache of one command: ralph's monitor or
    /// none; the untracked cache with ralph's monitor (it lets git skip the directories the
    /// monitor says are unchanged), never from a foreign index (git drops it when it writes).
    fn caches(&self, cmd: &mut Command, run: Run) {
        match self.monitor.as_ref().filter(|_| run.monitored) {
            Some(m) => cmd
                .arg("-c")
                .arg(format!("core.fsmonitor={}", self.hook(m))),
            None => cmd.args(["-c", "core.fsmonitor=false"]),
        };
        if run.foreign {
            cmd.args(["-c", "core.untrackedCache=false"]);
        } else if run.monitored {
            cmd.args(["-c", "core.untrackedCache=true"]);
        }
    }

    /// The monitor's hook command, run by [`Self::hook_program`] when there is one.
    fn hook(&self, m: &Monitor) -> String {
        let tail = format!(" {} ", super::fsmonitor::HOOK_COMMAND);
        match (&self.hook_program, m.hook.find(&tail)) {
            (Some(program), Some(at)) => format!(
                "{}{}",
                shell_words::quote(&program.to_string_lossy()),
                &m.hook[at..]
            ),
            _ => m.hook.clone(),
        }
    }

    /// Run `git ARGS` (with `stdin` fed to it), returning its stdout; a non-zero exit is an
    /// error carrying its stderr.
    pub(crate) fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
        self.run_handed(args, stdin).map(|(out, _)| out)
    }

    /// [`Self::run`], with the journal position of the token ralph's monitor handed out to
    /// the command (`None` without a monitor).
    pub(crate) fn run_handed(
        &self,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<(Vec<u8>, Option<u64>), GitError> {
        let (out, handed) = self.output_handed(args, stdin)?;
        if out.status.success() {
            return Ok((out.stdout, handed));
        }
        Err(GitError::Cli {
            command: format!("git {}", args.join(" ")),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// Run `git ARGS` and return whatever it did.
    pub(crate) fn output(
        &self,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<std::process::Output, GitError> {
        self.output_handed(args, stdin).map(|(out, _)| out)
    }

    /// [`Self::output`], with the journal position of the token ralph's monitor handed out to
    /// the command (`None` without a monitor).
    fn output_handed(
        &self,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<(std::process::Output, Option<u64>), GitError> {
        // Reading the configuration looks at no file of the work tree, nor at the index.
        if subcommand(args).is_none_or(|c| c == "config") {
            let plain = Run {
                monitored: false,
                foreign: false,
            };
            return Ok((
                output_of(
                    self.command(args, plain, &[]),
                    args,
                    stdin,
                    self.stop.as_ref(),
                )?,
                None,
            ));
        }
        let foreign = self.index_foreign() && !self.settle_index(args);
        let handed = self.monitor.as_ref().and_then(|m| {
            // Answers that cannot be written (the agent put a directory in their place) cost
            // this command a walk of the whole tree, never the command.
            (m.prepare)()
                .inspect_err(|e| {
                    tracing::warn!(
                        "the file monitor's answers cannot be written ({e}): git walks the whole tree"
                    );
                })
                .ok()
        });
        let run = Run {
            monitored: handed.is_some(),
            foreign,
        };
        let nested = self.nested_for(args, subcommand(args))?;
        let stdin = super::nested::excluded_stdin(args, stdin, &nested);
        let before = self.index.now();
        let lock = self.git_dir.join("index.lock");
        let locked_before = lock.exists();
        let cmd = self.command(args, run, &nested);
        let out = output_of(cmd, args, stdin.as_deref(), self.stop.as_ref()).inspect_err(|e| {
            // ralph killed its own git at the deadline, with the lock that git took: no one
            // else writes the index then (the agent's processes are gone), so the lock is
            // removed as git would have on its way out. A lock that was there before is not
            // ralph's to remove.
            if matches!(e, GitError::Hung(..) | GitError::Stopped(..)) && !locked_before {
                let _ = std::fs::remove_file(&lock);
            }
        })?;
        // An index ralph's command left is ralph's; a foreign one once a command rewrote it
        // (without the untracked cache, which `core.untrackedCache=false` drops).
        let after = self.index.now();
        if !foreign || after != before {
            *self.index.seen() = after;
        }
        Ok((out, handed))
    }

    /// Before a command reads an index another process wrote since ralph's last command: no
    /// monitor token handed out so far is trusted (a new nonce), whatever the command; and
    /// before a `git status`, the only command that reads the untracked cache, the cache goes
    /// (`git update-index --no-untracked-cache`, one read and write of the index, which also
    /// drops the monitor's token and marks), so that status walks the whole tree and builds a
    /// fresh cache as it goes. `false` while the index stays foreign: the command runs without
    /// the untracked cache (and drops it if it writes the index).
    fn settle_index(&self, args: &[&str]) -> bool {
        self.distrust();
        if subcommand(args) != Some("status") {
            return false;
        }
        let drop = ["update-index", "--no-untracked-cache"];
        let plain = Run {
            monitored: false,
            foreign: false,
        };
        let dropped = output_of(
            self.command(&drop, plain, &[]),
            &drop,
            None,
            self.stop.as_ref(),
        )
        .is_ok_and(|out| out.status.success());
        if dropped {
            *self.index.seen() = self.index.now();
        }
        dropped
    }
}

/// The git subcommand of `args` (after `-c NAME=VALUE` and the global options).
fn subcommand<'a>(args: &[&'a str]) -> Option<&'a str> {
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match *a {
            "-c" => {
                rest.next();
            }
            a if a.starts_with('-') => {}
            a => return Some(a),
        }
    }
    None
}

/// Run `cmd` (git `args`, for errors) with `stdin` fed to it, and return whatever it did. An
/// interrupt (`stop`) while it runs kills it at once; one started after an interrupt has
/// [`AFTER_STOP`] at most; none is started after a second interrupt, or once one had to be
/// killed for an interrupt (git hangs here: each would).
fn output_of(
    mut cmd: Command,
    args: &[&str],
    stdin: Option<&[u8]>,
    stop: Option<&crate::signals::Stop>,
) -> Result<std::process::Output, GitError> {
    let stopped = stop.map_or(0, crate::signals::Stop::count);
    if stopped >= 2 || stop.is_some_and(crate::signals::Stop::given_up) {
        return Err(GitError::Stopped(args.join(" ")));
    }
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // Its own process group: the deadline ends git and whatever it started (a filter, the git of
    // a submodule), which would otherwise keep the pipes open.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| GitError::Spawn(args.join(" "), e))?;
    let deadline = match stopped {
        0 => git_deadline(),
        _ => git_deadline().min(AFTER_STOP),
    };
    let listen = stop.filter(|_| stopped == 0).cloned();
    let watchdog = Watchdog::start(child.id(), deadline, listen);
    // stdin is fed from a thread while wait_with_output drains both pipes.
    let feeder = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => {
            let bytes = bytes.to_vec();
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            }))
        }
        _ => None,
    };
    let out = child
        .wait_with_output()
        .map_err(|e| GitError::Spawn(args.join(" "), e))?;
    if let Some(f) = feeder {
        let _ = f.join();
    }
    match watchdog.map_or(Fired::No, Watchdog::fired) {
        Fired::No => Ok(out),
        Fired::Deadline if stopped == 0 => Err(GitError::Hung(args.join(" "), deadline.as_secs())),
        Fired::Deadline | Fired::Stop => {
            stop.inspect(|s| s.give_up());
            Err(GitError::Stopped(args.join(" ")))
        }
    }
}

/// How long a git command started after an interrupt may run: what the close of an
/// interrupted iteration needs (a status, a commit) takes milliseconds.
const AFTER_STOP: std::time::Duration = std::time::Duration::from_secs(1);

/// How long one of ralph's git commands may run: `RALPH_GIT_TIMEOUT` (a duration such as `90s`),
/// else 10 minutes, as for the hooks. git waits on nothing of ralph's; one that runs that long
/// reads a FIFO planted where it reads a file (`.gitignore`, `.git/info/exclude`…) or runs a
/// filter that never ends, and would hang an unattended run for good.
fn git_deadline() -> std::time::Duration {
    std::env::var("RALPH_GIT_TIMEOUT")
        .ok()
        .and_then(|v| humantime::parse_duration(v.trim()).ok())
        .unwrap_or(std::time::Duration::from_secs(600))
}

/// Why the watchdog killed a command, if it did.
enum Fired {
    No,
    Deadline,
    Stop,
}

/// Kills a git command's process group at its deadline, or at once when an interrupt comes. It
/// waits on a pidfd and the stop's eventfd (no polling): the first readable once git exits,
/// when it returns at once.
struct Watchdog {
    thread: std::thread::JoinHandle<Fired>,
}

impl Watchdog {
    /// `None` where there are no pidfds (before Linux 5.3, other systems): no deadline there.
    fn start(
        pid: u32,
        deadline: std::time::Duration,
        stop: Option<crate::signals::Stop>,
    ) -> Option<Watchdog> {
        #[cfg(target_os = "linux")]
        {
            use rustix::process::{Pid, PidfdFlags, pidfd_open};
            use std::os::fd::AsFd;
            let raw = i32::try_from(pid).ok().and_then(Pid::from_raw)?;
            let pidfd = pidfd_open(raw, PidfdFlags::empty()).ok()?;
            let thread = std::thread::spawn(move || {
                use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
                let ms = u32::try_from(deadline.as_millis()).unwrap_or(u32::MAX);
                let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
                if let Some(stop) = &stop {
                    fds.push(PollFd::new(stop.fd(), PollFlags::POLLIN));
                }
                let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
                let fired = loop {
                    match poll(&mut fds, timeout) {
                        Err(nix::errno::Errno::EINTR) => continue,
                        Ok(0) => break Fired::Deadline,
                        _ if fds[0].any().unwrap_or(true) => break Fired::No,
                        _ => break Fired::Stop,
                    }
                };
                if !matches!(fired, Fired::No) {
                    // git is alive (not reaped: its pid and group id are still its own).
                    let group = nix::unistd::Pid::from_raw(pid as i32);
                    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                }
                fired
            });
            Some(Watchdog { thread })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (pid, deadline, stop);
            None
        }
    }

    /// Whether, and why, the watchdog killed the command.
    fn fired(self) -> Fired {
        self.thread.join().unwrap_or(Fired::No)
    }
}

#[cfg(test)]
mod tests {
    use super::subcommand;

    #[test]
    fn the_subcommand_follows_the_global_options() {
        assert_eq!(subcommand(&["status", "-z"]), Some("status"));
        assert_eq!(
            subcommand(&["-c", "a=b", "--no-optional-locks", "status"]),
            Some("status")
        );
        assert_eq!(
            subcommand(&["--no-replace-objects", "diff-index", "--cached"]),
            Some("diff-index")
        );
        assert_eq!(subcommand(&["config", "--list"]), Some("config"));
        assert_eq!(subcommand(&["-c", "status"]), None);
    }
}
