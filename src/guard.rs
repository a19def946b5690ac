//! The commit guard (SPEC §8): files an agent created that ralph leaves out of its commits —
//! very large files and likely secrets — unless they are already tracked.

use std::io::Read;
use std::path::Path;

pub(crate) const DEFAULT_MAX_FILE_SIZE: u64 = 50 * 1024 * 1024;

/// How much of a file is searched for a private-key block.
const SCAN: u64 = 1024 * 1024;

/// Why `rel` (repository-relative; `abs` on disk) must stay out of the commit, if it must.
pub(crate) fn check(rel: &str, abs: &Path, max_size: u64) -> Option<String> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    if name.starts_with(".env") {
        return Some("likely secrets (.env*)".into());
    }
    if name.ends_with(".pem") || name.ends_with(".key") {
        return Some("likely a key or certificate (*.pem, *.key)".into());
    }
    if name.starts_with("id_rsa") {
        return Some("likely an SSH key (id_rsa*)".into());
    }
    let meta = std::fs::symlink_metadata(abs).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.len() > max_size {
        return Some(format!(
            "{} MiB, over the {} MiB limit (max_file_size)",
            meta.len() / (1024 * 1024),
            max_size / (1024 * 1024)
        ));
    }
    let mut head = Vec::new();
    std::fs::File::open(abs)
        .ok()?
        .take(SCAN)
        .read_to_end(&mut head)
        .ok()?;
    contains_private_key(&head).then(|| "contains a private-key block".into())
}

/// `-----BEGIN … PRIVATE KEY-----` anywhere in the bytes.
fn contains_private_key(bytes: &[u8]) -> bool {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const END: &[u8] = b"PRIVATE KEY-----";
    let mut rest = bytes;
    while let Some(i) = find(rest, BEGIN) {
        let after = &rest[i + BEGIN.len()..];
        let line_end = after
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(after.len());
        if find(&after[..line_end], END).is_some() {
            return true;
        }
        rest = after;
    }
    false
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parse a size like `50MiB`, `10MB`, `1GiB`, `2048` (bytes).
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        "g" | "gb" | "gib" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_look_like_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, "x").unwrap();
        for name in [
            ".env",
            ".env.local",
            "config/.env.prod",
            "tls/server.pem",
            "a.key",
            "id_rsa",
            "id_rsa.pub",
        ] {
            assert!(check(name, &p, DEFAULT_MAX_FILE_SIZE).is_some(), "{name}");
        }
        for name in ["src/main.rs", "environment.md", "keys.txt"] {
            assert!(check(name, &p, DEFAULT_MAX_FILE_SIZE).is_none(), "{name}");
        }
    }

    #[test]
    fn private_key_blocks_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notes.txt");
        std::fs::write(&p, "hello\n-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n").unwrap();
        assert_eq!(
            check("notes.txt", &p, DEFAULT_MAX_FILE_SIZE).as_deref(),
            Some("contains a private-key block")
        );
        std::fs::write(&p, "-----BEGIN PUBLIC KEY-----\n").unwrap();
        assert!(check("notes.txt", &p, DEFAULT_MAX_FILE_SIZE).is_none());
        std::fs::write(&p, vec![b'a'; 2048]).unwrap();
        assert!(check("notes.txt", &p, 1024).unwrap().contains("over the"));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("50MiB"), Some(50 * 1024 * 1024));
        assert_eq!(parse_size("10 mb"), Some(10 * 1024 * 1024));
        assert_eq!(parse_size("2048"), Some(2048));
        assert_eq!(parse_size("1GiB"), Some(1024 * 1024 * 1024));
        assert_eq!(parse_size("big"), None);
        assert_eq!(parse_size("5 parsecs"), None);
    }
}
