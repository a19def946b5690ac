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

/// `text` with no secret in it: the credentials of a URL (`https://user:TOKEN@host/…` →
/// `https://***@host/…`) and every value ralph withholds, wherever they appear, as `***`.
/// Every line ralph prints, every event and every activity line goes through it (a token
/// written into `remote.origin.url` reached an error message).
pub(crate) fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    let values: Vec<String> = {
        let w = WITHHELD.lock().unwrap_or_else(PoisonError::into_inner);
        w.values.iter().filter(|v| v.len() >= 8).cloned().collect()
    };
    let has_userinfo = userinfo_at(text).is_some();
    if !has_userinfo && !values.iter().any(|v| text.contains(v.as_str())) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for v in &values {
        out = out.replace(v.as_str(), "***");
    }
    while let Some(range) = userinfo_at(&out) {
        out.replace_range(range, "***");
    }
    std::borrow::Cow::Owned(out)
}

/// Where the first URL's credentials lie in `text` (between `://` and an `@` before the next
/// `/`, space or quote) — a password (`user:…`) or any user of an `http(s)` URL, where a token
/// goes — unless they are already `***` (`ssh://git@host` names no secret).
fn userinfo_at(text: &str) -> Option<std::ops::Range<usize>> {
    let mut from = 0;
    while let Some(at) = text[from..].find("://") {
        let start = from + at + 3;
        let scheme = text[..from + at]
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '+' && c != '-' && c != '.')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let rest = &text[start..];
        let end = rest
            .find(|c: char| c == '/' || c.is_whitespace() || "\"'`<>)".contains(c))
            .unwrap_or(rest.len());
        if let Some(amp) = rest[..end].rfind('@') {
            let user = &rest[..amp];
            let secret = user.contains(':') || scheme == "http" || scheme == "https";
            if secret && user != "***" {
                return Some(start..start + amp);
            }
        }
        from = start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_and_withheld_values_are_never_shown() {
        assert_eq!(
            redact(
                "fatal: unable to access 'https://x-access-token:ghs_abc123@github.com/o/r.git/': 403"
            ),
            "fatal: unable to access 'https://***@github.com/o/r.git/': 403"
        );
        assert_eq!(
            redact("ssh://git@github.com/o/r"),
            "ssh://git@github.com/o/r"
        );
        assert_eq!(
            redact("https://ghp_x@github.com/o/r"),
            "https://***@github.com/o/r"
        );
        assert_eq!(
            redact("mail me: a@b.c, see https://github.com/o/r"),
            "mail me: a@b.c, see https://github.com/o/r"
        );
        withhold(&[], "ghp_withheld_for_test_1234");
        assert_eq!(
            redact("remote.origin.url (https://github.com/o/r?t=ghp_withheld_for_test_1234)"),
            "remote.origin.url (https://github.com/o/r?t=***)"
        );
    }
}
