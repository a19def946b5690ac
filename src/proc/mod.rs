//! Every command ralph supervises, whatever it is (an agent, the test and verdict commands,
//! `[hooks]`, git hooks, the roll-up): what to run ([`Invocation`]), the guard it runs under so
//! that nothing it starts outlives it (`guarded` ralph's side, `reaper` the guard itself, `tree`
//! the `/proc` walk), short runs ralph waits for (`brief`), and the relay of a long one
//! (`relay`: spawn, relay; `supervise`: the timers and the stop), which publishes what it
//! observes (`observe`) to whoever watches.
//!
//! Below `agent/`, `sandbox/`, `hooks` and `config`: nothing here knows which program runs.

pub(crate) mod brief;
pub(crate) mod guarded;
pub(crate) mod observe;
pub(crate) mod reaper;
pub(crate) mod relay;
mod supervise;
pub(crate) mod tree;
pub(crate) mod withheld;

use std::ffi::OsString;

/// What to spawn: a program, its arguments, what goes to its stdin, its extra environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub(crate) program: String,
    pub(crate) args: Vec<OsString>,
    pub(crate) stdin: Option<Vec<u8>>,
    pub(crate) env: Vec<(String, String)>,
}

impl Invocation {
    /// The argv for display, with a long prompt abbreviated.
    pub(crate) fn display(&self) -> String {
        let mut words = vec![self.program.clone()];
        for a in &self.args {
            let a = a.to_string_lossy();
            if a.len() > 80 {
                words.push(format!("<prompt: {} bytes>", a.len()));
            } else {
                words.push(shell_words::quote(&a).into_owned());
            }
        }
        let mut s = words.join(" ");
        if let Some(input) = &self.stdin {
            s.push_str(&format!(" < <prompt: {} bytes on stdin>", input.len()));
        }
        s
    }
}
