//! "Did you mean": the known word nearest a misspelt one (a frontmatter or config key, an agent
//! name), if it is near enough to be a typo rather than another word.

/// The word of `known` nearest `word` by optimal string alignment distance (a swap of two
/// neighbours counts one edit), when at most a third of `word`'s characters (at least one)
/// differ; the first of equally near ones. `max_iteratons` gives `max_iterations`, `claud`
/// `claude`; `completion_criteria` (another tool's key) gives nothing.
pub(crate) fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let bound = (word.chars().count() / 3).max(1);
    known
        .into_iter()
        .map(|k| (strsim::osa_distance(word, k), k))
        .filter(|&(d, k)| d <= bound && k != word)
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// ` (did you mean `WORD`?)` for the word of `known` nearest `word`, else nothing: to append to
/// a message naming `word`.
pub(crate) fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, known).map_or_else(String::new, |k| format!("; did you mean `{k}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: [&str; 5] = ["max_iterations", "agent", "timeout", "test_command", "task"];

    #[test]
    fn a_typo_finds_its_word_and_another_word_none() {
        assert_eq!(nearest("max_iteratons", KEYS), Some("max_iterations"));
        assert_eq!(nearest("agnet", KEYS), Some("agent"), "a swap is one edit");
        assert_eq!(nearest("timout", KEYS), Some("timeout"));
        assert_eq!(nearest("tsak", KEYS), Some("task"));
        assert_eq!(
            nearest("claud", ["copilot", "claude", "codex"]),
            Some("claude")
        );
        for other in [
            "completion_criteria",
            "browser_validation",
            "alias",
            "x",
            "",
        ] {
            assert_eq!(nearest(other, KEYS), None, "{other}");
        }
        assert_eq!(
            nearest("cursor", ["copilot", "claude", "codex", "gemini"]),
            None
        );
    }

    #[test]
    fn the_phrase_is_empty_without_a_near_word() {
        assert_eq!(did_you_mean("agnt", KEYS), "; did you mean `agent`?");
        assert_eq!(did_you_mean("browser_validation", KEYS), "");
    }
}
