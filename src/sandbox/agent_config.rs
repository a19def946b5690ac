//! The copy of the repository's configuration in the agent's own git directory
//! (`agent_git.rs`), without the credentials a configuration holds (issue 29, the hostile
//! review): CI leaves a token in `http.<url>.extraHeader` (actions/checkout), in a remote's URL
//! (`https://x-access-token:TOKEN@github.com/…`) or an `insteadOf` base, and `credential.*`
//! names helpers and users. Every `http.*extraheader` and `credential.*` key is left out, and
//! the userinfo of every URL a remote or `url.<base>` names (`scheme://user:password@host`) is
//! taken away; everything else stays as it was. Read and written by git's own parser (`git
//! config --file`), never by matching the file's text: what git reads is what is scrubbed.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// What becomes of one entry.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Kept,
    Dropped,
    /// Written again under this key, with this value.
    Changed(String, Option<String>),
}

/// Take the credentials out of the configuration file `file` (the agent's copy), in place.
pub(super) fn scrub(file: &Path) -> Result<()> {
    if !file.is_file() {
        return Ok(());
    }
    let listed = git_config(file, &["--list", "-z"])?;
    let entries = parse(&listed);
    let fates: Vec<Fate> = entries.iter().map(|(k, v)| fate(k, *v)).collect();
    // Every value of a key that changes is written again, in its order: `--unset-all` takes
    // them all.
    let mut redo: Vec<&str> = Vec::new();
    for ((key, _), fate) in entries.iter().zip(&fates) {
        if *fate != Fate::Kept && !redo.contains(key) {
            redo.push(key);
        }
    }
    for key in &redo {
        git_config(file, &["--unset-all", key])?;
    }
    for ((key, value), fate) in entries.iter().zip(fates) {
        if !redo.contains(key) {
            continue;
        }
        let (key, value) = match fate {
            Fate::Dropped => continue,
            Fate::Kept => (key.to_string(), value.map(str::to_string)),
            Fate::Changed(k, v) => (k, v),
        };
        let value = value.unwrap_or_else(|| "true".to_string());
        git_config(file, &["--add", &key, &value])?;
    }
    Ok(())
}

/// `key NL value NUL` (or `key NUL` for a key without a value), as `--list -z` writes them.
fn parse(bytes: &[u8]) -> Vec<(&str, Option<&str>)> {
    std::str::from_utf8(bytes)
        .unwrap_or_default()
        .split('\0')
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once('\n') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        })
        .collect()
}

/// What becomes of `key` (as `--list` writes it: section and name in lower case) = `value`.
fn fate(key: &str, value: Option<&str>) -> Fate {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let (sub, name) = match rest.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, rest),
    };
    if section == "credential" || (section == "http" && name == "extraheader") {
        return Fate::Dropped;
    }
    let url_value = matches!(
        (section, name),
        ("remote", "url" | "pushurl") | ("url", "insteadof" | "pushinsteadof")
    );
    let new_value = value.map(|v| {
        if url_value {
            without_userinfo(v)
        } else {
            v.to_string()
        }
    });
    let new_key = match sub {
        Some(sub) if matches!(section, "http" | "url") => {
            format!("{section}.{}.{name}", without_userinfo(sub))
        }
        _ => key.to_string(),
    };
    if new_key == key && new_value.as_deref() == value {
        Fate::Kept
    } else {
        Fate::Changed(new_key, new_value)
    }
}

/// `url` without the userinfo of its authority (`scheme://user:password@host/…` →
/// `scheme://host/…`); anything else as it is (an scp-like `user@host:path` names an ssh
/// login, not a secret).
fn without_userinfo(url: &str) -> String {
    let Some(i) = url.find("://") else {
        return url.to_string();
    };
    let (scheme, rest) = url.split_at(i + 3);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// `git config --file FILE ARGS…`, outside any repository (run beside the file's directory,
/// which is the agent's git directory), under ralph's memory limit; its stdout.
fn git_config(file: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let beside = file
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    let mut cmd = Command::new("git");
    cmd.arg("config")
        .arg("--file")
        .arg(file)
        .args(args)
        .current_dir(beside)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CEILING_DIRECTORIES", beside)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    crate::git::memory::bound(&mut cmd);
    let out = cmd
        .output()
        .map_err(|e| Error::io("failed to run `git config`", e))?;
    if !out.status.success() {
        return Err(Error::user(format!(
            "--sandbox: `git config --file {} {}` failed: {}",
            file.display(),
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_dropped_and_userinfo_taken_out_of_urls() {
        assert_eq!(fate("credential.helper", Some("store")), Fate::Dropped);
        assert_eq!(
            fate("credential.https://h.username", Some("u")),
            Fate::Dropped
        );
        assert_eq!(fate("http.extraheader", Some("A: b")), Fate::Dropped);
        assert_eq!(
            fate("http.https://h/.extraheader", Some("A")),
            Fate::Dropped
        );
        assert_eq!(fate("http.sslverify", Some("true")), Fate::Kept);
        assert_eq!(fate("user.name", Some("U")), Fate::Kept);
        assert_eq!(
            fate("remote.origin.url", Some("https://x:T@h.com/o/r.git")),
            Fate::Changed(
                "remote.origin.url".into(),
                Some("https://h.com/o/r.git".into())
            )
        );
        assert_eq!(
            fate("remote.origin.url", Some("git@github.com:o/r.git")),
            Fate::Kept
        );
        assert_eq!(
            fate("url.https://x:T@h/.insteadof", Some("https://h/")),
            Fate::Changed("url.https://h/.insteadof".into(), Some("https://h/".into()))
        );
        assert_eq!(without_userinfo("https://a@b@h:1/p@q"), "https://h:1/p@q");
        assert_eq!(without_userinfo("file:///x@y"), "file:///x@y");
    }

    #[test]
    fn the_file_is_scrubbed_by_git_and_the_rest_kept_in_order() {
        let d = tempfile::tempdir().unwrap();
        let git = d.path().join("git");
        std::fs::create_dir(&git).unwrap();
        let file = git.join("config");
        std::fs::write(
            &file,
            "[user]\n\tname = U\n[http \"https://github.com/\"]\n\textraHeader = AUTHORIZATION: basic SECRET\n\
             [remote \"origin\"]\n\turl = https://tok:SECRET@h/r.git\n\turl = https://h/second.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
             [Credential]\n\thelper = SECRET\n",
        )
        .unwrap();
        scrub(&file).unwrap();
        let listed = git_config(&file, &["--list"]).unwrap();
        let listed = String::from_utf8(listed).unwrap();
        assert_eq!(
            listed,
            "user.name=U\nremote.origin.fetch=+refs/heads/*:refs/remotes/origin/*\n\
             remote.origin.url=https://h/r.git\nremote.origin.url=https://h/second.git\n"
        );
        assert!(!std::fs::read_to_string(&file).unwrap().contains("SECRET"));
    }
}
