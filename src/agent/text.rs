//! Small text helpers shared by the observer and the CLIs: terminal control codes stripped (found
//! eight bytes at a time), lines found with `memchr` (vectorised, so finding lines costs far less
//! than relaying them), messages cut to one short line, lenient JSON numbers.

use serde_json::Value;

/// How much of a message a limit or an authentication error carries.
pub(super) const MESSAGE_CHARS: usize = 400;
/// How much of the agent's final message is kept (its end, where a promise would be).
pub(super) const TAIL_BYTES: usize = 64 * 1024;

/// Appends `line` without terminal control sequences; a carriage return followed by more text
/// starts the line over, as a terminal would show it.
pub(super) fn strip_controls(line: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    let mut cr = false;
    let mut i = 0;
    while i < line.len() {
        let run = find_control(&line[i..]).unwrap_or(line.len() - i);
        if run > 0 {
            if std::mem::take(&mut cr) {
                out.truncate(start);
            }
            out.extend_from_slice(&line[i..i + run]);
            i += run;
            continue;
        }
        let b = line[i];
        match b {
            0x1b => {
                i = skip_escape(line, i);
                continue;
            }
            b'\r' => cr = true,
            b'\t' => {
                if std::mem::take(&mut cr) {
                    out.truncate(start);
                }
                out.push(b' ');
            }
            0x00..=0x1f | 0x7f => {}
            // C1 controls, UTF-8 encoded.
            0xc2 if line.get(i + 1).is_some_and(|c| (0x80..=0x9f).contains(c)) => i += 1,
            _ => {
                if std::mem::take(&mut cr) {
                    out.truncate(start);
                }
                out.push(b);
            }
        }
        i += 1;
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any byte of the word is zero.
fn has_zero(word: u64) -> bool {
    word.wrapping_sub(ONES) & !word & HIGHS != 0
}

/// Finds the first byte matching `byte`, testing eight at a time with `word` (which may say yes
/// for a word with no match, never no for a word with one).
fn find_byte(bytes: &[u8], word: impl Fn(u64) -> bool, byte: impl Fn(u8) -> bool) -> Option<usize> {
    let mut i = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(array) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        if word(u64::from_le_bytes(array)) {
            break;
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| byte(b)).map(|p| i + p)
}

/// The first newline.
pub(super) fn find_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// The last newline.
pub(super) fn find_last_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memrchr(b'\n', bytes)
}

/// The first byte [`strip_controls`] must look at: a C0 control, DEL, or the lead byte of a C1.
fn find_control(bytes: &[u8]) -> Option<usize> {
    find_byte(
        bytes,
        |w| {
            // A byte below 0x20 (or with the high bit set, to be checked) …
            w.wrapping_sub(ONES * 0x20) & !w & HIGHS != 0
                || has_zero(w ^ (ONES * 0x7f))
                || has_zero(w ^ (ONES * 0xc2))
        },
        |b| b < 0x20 || b == 0x7f || b == 0xc2,
    )
}

/// The index after the escape sequence starting at `i` (an ESC).
fn skip_escape(line: &[u8], i: usize) -> usize {
    let len = line.len();
    match line.get(i + 1) {
        // CSI: parameters and intermediates, then a final byte.
        Some(b'[') => {
            let mut j = i + 2;
            while j < len && (0x20..=0x3f).contains(&line[j]) {
                j += 1;
            }
            if j < len && (0x40..=0x7e).contains(&line[j]) {
                j += 1;
            }
            j
        }
        // OSC, DCS, APC, PM, SOS: a string up to BEL or ST.
        Some(b']' | b'P' | b'_' | b'^' | b'X') => {
            let mut j = i + 2;
            while j < len {
                if line[j] == 0x07 {
                    return j + 1;
                }
                if line[j] == 0x1b && line.get(j + 1) == Some(&b'\\') {
                    return j + 2;
                }
                j += 1;
            }
            len
        }
        Some(c) if (0x20..=0x2f).contains(c) => {
            let mut j = i + 2;
            while j < len && (0x20..=0x2f).contains(&line[j]) {
                j += 1;
            }
            (j + 1).min(len)
        }
        Some(_) => i + 2,
        None => len,
    }
}

/// The first non-empty line, trimmed.
pub(super) fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// The first `max` characters, and whether there were more.
pub(super) fn cut_chars(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    match text.char_indices().nth(max) {
        Some((i, _)) => (&text[..i], true),
        None => (text, false),
    }
}

/// A message as one line with its whitespace collapsed.
pub(super) fn one_line(text: &str) -> String {
    let text = &text[..floor_char_boundary(text, 4 * MESSAGE_CHARS)];
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Shortened to [`MESSAGE_CHARS`] with an ellipsis.
pub(super) fn clip(text: &str) -> String {
    let one = one_line(text);
    let (head, cut) = cut_chars(&one, MESSAGE_CHARS);
    if cut {
        format!("{head}…")
    } else {
        head.to_owned()
    }
}

/// A message kept whole up to [`TAIL_BYTES`] (its end, where a promise would be).
pub(super) fn bounded(text: &str) -> String {
    let start = text.len().saturating_sub(TAIL_BYTES);
    let mut start = start;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

pub(super) fn floor_char_boundary(text: &str, max: usize) -> usize {
    if max >= text.len() {
        return text.len();
    }
    let mut i = max;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(super) fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

pub(super) fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.min(u64::MAX as f64) as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(super) fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|f| f.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_controls_cases() {
        let strip = |b: &[u8]| {
            let mut out = Vec::new();
            strip_controls(b, &mut out);
            String::from_utf8_lossy(&out).into_owned()
        };
        assert_eq!(strip(b"\x1b[1;31merror\x1b[0m: x"), "error: x");
        assert_eq!(strip(b"a\tb"), "a b");
        assert_eq!(strip(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), "link");
        assert_eq!(strip(b"\x1b(Bplain\x1b"), "plain");
        assert_eq!(strip("\u{9b}x".as_bytes()), "x");
        assert_eq!(strip(b"old\rnew"), "new");
        assert_eq!(strip(b"keep\r"), "keep");
    }

    #[test]
    fn messages_are_one_short_line() {
        assert_eq!(one_line("  a\n\tb  c "), "a b c");
        let long = "é".repeat(MESSAGE_CHARS + 5);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), MESSAGE_CHARS + 1);
        assert!(clipped.ends_with('…'));
        assert_eq!(cut_chars("abc", 2), ("ab", true));
        assert_eq!(floor_char_boundary("é", 1), 0);
        assert_eq!(first_line("\n  \n second \nthird"), "second");
    }

    #[test]
    fn lenient_numbers() {
        assert_eq!(as_u64(&Value::from("42")), Some(42));
        assert_eq!(as_u64(&Value::from(1e3)), Some(1000));
        assert_eq!(as_u64(&Value::from(-3)), None);
        assert_eq!(as_f64(&Value::from("0.5")), Some(0.5));
        assert_eq!(as_f64(&Value::Null), None);
    }
}
