//! Placeholder criteria (issue 30): what `ralph init` writes where the user's own criteria
//! belong, marked by one exact prefix, so that a run refuses to spend an iteration on them.
//! Only that prefix counts: no guessing from words.

/// The prefix of every criterion `ralph init` writes as an example to replace.
pub(crate) const MARK: &str = "EXAMPLE — replace me";

/// The criterion is one of `ralph init`'s examples.
pub(crate) fn is_placeholder(criterion: &str) -> bool {
    criterion.trim_start().starts_with(MARK)
}

/// The first line (1-based) of `text` that holds `criterion`, for a message naming
/// `file:line`.
pub(crate) fn line_of(text: &str, criterion: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.contains(criterion.trim()))
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_mark_makes_a_placeholder() {
        assert!(is_placeholder(&format!("{MARK}: a verifiable outcome")));
        assert!(!is_placeholder(
            "Example — replace me: lower case is the user's"
        ));
        assert!(!is_placeholder(
            "GET /health returns 200 (EXAMPLE — replace me later)"
        ));
        assert_eq!(line_of("a\n- [ ] x\n- [ ] y\n", "y"), Some(3));
    }
}
