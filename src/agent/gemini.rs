//! Google Gemini CLI: `gemini -p {prompt} --yolo` (`--yolo` alone and stdin for a huge prompt),
//! plain text; it retries a 429 with backoff for minutes (`Attempt N failed with status 429`)
//! and rejects a bad key with `API key not valid` (`AGENT-CLIS.md`).

use super::cli::{Cli, Launch, Output, Part, literal};
use super::signal::Patterns;

/// The messages Gemini prints for limits and login failures.
const PATTERNS: Patterns = Patterns {
    hit_your_limit: false,
    limit_reached_resets: false,
    limits: &[],
    auth: &["api key not valid", "invalid api key"],
    retries: &[attempt_failed_429],
};

/// `Attempt 2 failed with status 429. Retrying with backoff...`: Gemini retrying a 429.
fn attempt_failed_429(lower: &str) -> Option<usize> {
    let p = lower.find("failed with status 429")?;
    let a = lower[..p].rfind("attempt ")?;
    (p - a < 24).then_some(a)
}

/// Google Gemini CLI.
#[derive(Debug)]
pub(crate) struct Gemini;

impl Cli for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g @google/gemini-cli")
    }

    fn launch(&self) -> Launch {
        Launch {
            args: vec![
                Part::Literal("-p".into()),
                Part::Template("{prompt}".into()),
                Part::Literal("--yolo".into()),
            ],
            stdin_args: Some(literal(&["--yolo"])),
            ..Launch::default()
        }
    }

    fn output(&self) -> Output {
        Output::Text
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::testkit::*;

    const RETRIES: &str = "Attempt 1 failed with status 429. Retrying with backoff... GaxiosError: [{\n  \"error\": {\"code\": 429}\n}]\nAttempt 2 failed with status 429. Retrying with backoff...\n";

    #[test]
    fn retries_that_end_a_failed_attempt_are_a_limit() {
        // Plain text is only read at the end.
        let mut o = observer(Format::of(&Gemini));
        o.feed(RETRIES.as_bytes(), true);
        assert!(o.limit().is_none());
        assert!(o.retrying().is_none());
        o.finish(Some(1));
        let limit = o.limit().expect("limit at finish");
        assert!(
            limit
                .message
                .starts_with("Attempt 2 failed with status 429")
        );
        assert_eq!(limit.kind, "rate_limit");
        // Stopped by ralph (a signal, no exit code) while retrying: the same.
        let mut o = observer(Format::of(&Gemini));
        o.feed(RETRIES.as_bytes(), true);
        o.finish(None);
        assert!(o.limit().is_some());
    }

    #[test]
    fn retries_it_got_past_are_not_a_limit() {
        // Retried, then answered: not a limit, even when it failed afterwards.
        let mut o = observer(Format::of(&Gemini));
        o.feed(RETRIES.as_bytes(), true);
        o.feed(b"I updated the README.\n", false);
        o.finish(Some(1));
        assert_no_signal(&o, "answered after retrying");
        // Retried, then exited 0: its work, not a limit.
        let mut o = observer(Format::of(&Gemini));
        o.feed(RETRIES.as_bytes(), true);
        o.finish(Some(0));
        assert_no_signal(&o, "exit 0");
    }

    #[test]
    fn a_bad_key_is_a_login_failure() {
        let text = "API key not valid. Please pass a valid API key.";
        let o = failed(&Gemini, "", &format!("{text}\n"));
        assert_eq!(o.auth_error(), Some(text));
    }

    #[test]
    fn launch_takes_the_prompt_as_an_argument_or_on_stdin() {
        let launch = Gemini.launch();
        assert_eq!(launch.args.len(), 3);
        assert_eq!(launch.stdin_args, Some(literal(&["--yolo"])));
    }
}
