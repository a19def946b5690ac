//! What ralph keeps from the commands it supervises (SPEC §15): the tracker's token is not the
//! agent's. Once a queue holds a token, every supervised command — the agent, the test and
//! verdict commands, `[hooks]`, the repository's git hooks — starts without `GITHUB_TOKEN`,
//! `GH_TOKEN` (and their enterprise forms) and without any variable holding the token's value,
//! whatever its name; `pass_env` in the user's own configuration gives a name back on purpose.
//! ralph's own git keeps them (a credential helper such as `gh auth git-credential` reads them).

use std::sync::{Mutex, PoisonError};

/// The variables that carry a GitHub token by convention.
pub(crate) const TOKEN_VARS: [&str; 4] = [
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
];

#[derive(Default)]
struct Withheld {
    values: Vec<String>,
    names: Vec<String>,
    passed: Vec<String>,
}

static WITHHELD: Mutex<Withheld> = Mutex::new(Withheld {
    values: Vec::new(),
    names: Vec::new(),
    passed: Vec::new(),
});

/// From now on, supervised commands start without `names` and without any variable whose
/// value is `value` (a secret ralph holds).
pub(crate) fn withhold(names: &[&str], value: &str) {
    let mut w = WITHHELD.lock().unwrap_or_else(PoisonError::into_inner);
    w.names.extend(names.iter().map(|n| n.to_string()));
    if !value.trim().is_empty() {
        w.values.push(value.trim().to_string());
    }
}

/// The names the user gives back to supervised commands on purpose (`pass_env`).
pub(crate) fn pass(names: &[String]) {
    let mut w = WITHHELD.lock().unwrap_or_else(PoisonError::into_inner);
    w.passed.extend(names.iter().cloned());
}

/// The variables of ralph's environment a supervised command must not inherit.
pub(crate) fn names() -> Vec<std::ffi::OsString> {
    let w = WITHHELD.lock().unwrap_or_else(PoisonError::into_inner);
    if w.names.is_empty() && w.values.is_empty() {
        return Vec::new();
    }
    std::env::vars_os()
        .filter(|(k, v)| {
            let name = k.to_string_lossy();
            let value = v.to_string_lossy();
            let held = w.names.iter().any(|n| *n == name)
                || w.values.iter().any(|s| value.trim() == s.as_str());
            held && !w.passed.iter().any(|p| *p == name)
        })
        .map(|(k, _)| k)
        .collect()
}
