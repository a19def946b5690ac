//! A tmux server of the test's own, to run ralph in a real terminal and read the screen
//! (`ralph watch`, the live view of `ralph run`).

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;

/// A tmux server of its own (socket in the test's directory), killed with the test.
pub(crate) struct Tmux {
    socket: PathBuf,
    /// Background `ralph run`s to kill if the test fails half-way.
    pub(crate) runs: Vec<i32>,
    /// Every line typed into the pane (`type_line`): a wait that its own typing would satisfy
    /// is a test bug (it would pass before the shell answered), refused at once.
    typed: std::cell::RefCell<Vec<String>>,
}

impl Tmux {
    /// A detached 120x30 session `w` running the shell command `command` in the repository;
    /// `None` (the test skips, saying why; in CI it fails) when tmux cannot run here.
    pub(crate) fn start(env: &TestEnv, command: &str) -> Option<Tmux> {
        let tmux = Tmux {
            socket: env.home.join("tmux.sock"),
            runs: Vec::new(),
            typed: Default::default(),
        };
        let repo = env.repo.to_str().unwrap();
        let args = ["new-session", "-d", "-s", "w", "-x", "120", "-y", "30"];
        let started = env
            .command("tmux")
            .arg("-S")
            .arg(&tmux.socket)
            .args(args)
            .args(["-c", repo, command])
            .env("TERM", "xterm-256color")
            .output();
        match started {
            Ok(o) if o.status.success() => Some(tmux),
            Ok(o) => {
                let why = String::from_utf8_lossy(&o.stderr);
                skip_or_fail(&format!("tmux cannot start a session here: {why}"));
                None
            }
            Err(e) => {
                skip_or_fail(&format!(
                    "tmux cannot run here ({e}); install it: apt-get install tmux"
                ));
                None
            }
        }
    }

    pub(crate) fn cmd(&self, env: &TestEnv, args: &[&str]) -> std::process::Output {
        env.command("tmux")
            .env("TERM", "xterm-256color")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    pub(crate) fn pane(&self, env: &TestEnv) -> String {
        String::from_utf8_lossy(&self.cmd(env, &["capture-pane", "-p", "-t", "w"]).stdout)
            .into_owned()
    }

    /// Type `line` into the pane and press Enter (remembered: see `wait_for`).
    pub(crate) fn type_line(&self, env: &TestEnv, line: &str) {
        self.typed.borrow_mut().push(line.to_string());
        let out = self.cmd(env, &["send-keys", "-t", "w", line, "Enter"]);
        assert!(out.status.success(), "tmux send-keys: {out:?}");
    }

    /// Wait until the pane shows what `cond` wants; the pane as last seen. A `cond` that the
    /// lines typed so far would satisfy on their own fails at once: it would be met by the
    /// echo of the typing, before the program answered.
    pub(crate) fn wait_for(
        &self,
        env: &TestEnv,
        what: &str,
        cond: impl Fn(&str) -> bool,
    ) -> String {
        let typed = self.typed.borrow().join("\n");
        assert!(
            typed.is_empty() || !cond(&typed),
            "waiting for {what} would be satisfied by the text typed itself: {typed:?}"
        );
        let mut seen = String::new();
        let ok = wait_until(Duration::from_secs(30), || {
            seen = self.pane(env);
            cond(&seen)
        });
        assert!(ok, "the pane never showed {what}:\n{seen}");
        seen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        for pid in &self.runs {
            // SAFETY: signalling our own child (its guard then kills the agent).
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}
