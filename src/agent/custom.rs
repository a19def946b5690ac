//! A custom agent, `--agent-cmd 'prog --flag {prompt}'`: the template split into argv with
//! shell-word rules (no shell runs), the prompt at `{prompt}`, in a file at `{prompt_file}`, or,
//! with neither placeholder, on stdin. Its output is plain text; since the template may wrap
//! any CLI, the last lines of a failed attempt are read with every preset's messages.

use super::cli::{Cli, Launch, Output, Part};
use super::findings::{Findings, TailLine};
use super::signal::Patterns;
use crate::error::{Error, Result};

/// What a custom agent prints for limits and logins is unknown: see [`Custom::failed_tail`].
const NONE: Patterns = Patterns {
    hit_your_limit: false,
    limit_reached_resets: false,
    limits: &[],
    auth: &[],
    retries: &[],
};

/// A `--agent-cmd` template.
#[derive(Debug)]
pub(crate) struct Custom;

impl Cli for Custom {
    fn name(&self) -> &'static str {
        "custom"
    }

    fn install_hint(&self) -> Option<&'static str> {
        None
    }

    /// A bare `--agent-cmd PROGRAM`: the prompt on stdin. A template brings its own words
    /// ([`template`]).
    fn launch(&self) -> Launch {
        Launch::default()
    }

    fn output(&self) -> Output {
        Output::Text
    }

    fn signals(&self) -> &'static Patterns {
        &NONE
    }

    fn failed_tail(&self, tail: &[TailLine], seen: &mut Findings) {
        let sets: Vec<&Patterns> = super::PRESETS.iter().map(|cli| cli.signals()).collect();
        seen.read_tail(tail, &sets);
    }
}

/// Splits a `--agent-cmd` template into its program and launch.
pub(crate) fn template(template: &str) -> Result<(String, Launch)> {
    let words = shell_words::split(template).map_err(|e| {
        Error::user(format!("cannot split --agent-cmd `{template}`: {e}")).with_hint(
            "quote arguments as in a shell: --agent-cmd 'prog --flag \"two words\" {prompt}'",
        )
    })?;
    let Some((program, rest)) = words.split_first() else {
        return Err(Error::user("--agent-cmd is empty"));
    };
    if program.contains("{prompt") {
        return Err(Error::user(format!(
            "--agent-cmd `{template}` starts with a placeholder; it must start with the program"
        )));
    }
    let args = rest
        .iter()
        .map(|w| {
            if w.contains("{prompt}") || w.contains("{prompt_file}") {
                Part::Template(w.clone())
            } else {
                Part::Literal(w.clone())
            }
        })
        .collect();
    Ok((
        program.clone(),
        Launch {
            args,
            ..Launch::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testkit::*;

    #[test]
    fn every_presets_messages_end_a_failed_custom_attempt() {
        let limits = [
            (
                "You've hit your session limit · resets 12:43pm (UTC)",
                "session_limit",
            ),
            (
                "Error: You've hit the rate limit for this model. Try another model.",
                "rate_limit",
            ),
            (
                "✗ No remaining quota for premium requests. Upgrade your plan.",
                "premium_quota",
            ),
            ("API Error: 529 Overloaded", "overloaded"),
            (
                "ERROR: exceeded retry limit, last status: 429 Too Many Requests",
                "rate_limit",
            ),
            (
                "Attempt 2 failed with status 429. Retrying with backoff...",
                "rate_limit",
            ),
        ];
        for (text, kind) in limits {
            let o = failed(&Custom, "", &format!("{text}\n"));
            assert_eq!(
                o.limit().map(|l| l.kind.to_string()).as_deref(),
                Some(kind),
                "{text}"
            );
        }
        for text in [
            "Invalid API key · Please run /login",
            "Not logged in · Please run /login",
            "Error: No authentication information found.",
            "API key not valid. Please pass a valid API key.",
            "ERROR: unexpected status 401 Unauthorized: Missing bearer authentication in header",
        ] {
            let o = failed(&Custom, "", &format!("{text}\n"));
            assert_eq!(o.auth_error(), Some(text), "{text}");
            assert!(o.limit().is_none());
        }
    }

    #[test]
    fn a_reset_time_of_day_in_a_failed_tail_rolls_over() {
        let text = "You've hit your session limit · resets 12:43pm (UTC)\n";
        let o = failed_at(&Custom, at("2026-03-10T20:15:00Z"), text, "");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-11T12:43:00Z"))
        );
    }

    #[test]
    fn quoted_or_prose_mentions_are_not_signals_even_in_a_failed_tail() {
        for line in [
            r#"src/agent/stream.rs:512:    ("invalid api key", "auth"),"#,
            "I fixed the handling of an Invalid API key in the client.",
            r#"  let msg = "You've hit your session limit · resets 12:43pm (UTC)";"#,
            "- Quota texts include `You've hit your session rate limit.`",
            "You've used 93% of your session limit · resets 3:40pm",
            "Approaching usage limit · resets at 10pm",
            "test agent::stream::tests::gemini_429_retries ... ok",
        ] {
            let o = failed(&Custom, &format!("{line}\n"), "");
            assert_no_signal(&o, line);
        }
    }

    #[test]
    fn template_words() {
        let (program, launch) = template("./a.sh --in={prompt_file} 'two words' {prompt}").unwrap();
        assert_eq!(program, "./a.sh");
        assert_eq!(
            launch.args,
            [
                Part::Template("--in={prompt_file}".into()),
                Part::Literal("two words".into()),
                Part::Template("{prompt}".into()),
            ]
        );
        assert_eq!(launch.stdin_args, None);
    }

    #[test]
    fn template_errors() {
        assert!(template("").is_err());
        assert!(template("prog 'unterminated").is_err());
        assert!(template("{prompt} x").is_err());
    }
}
