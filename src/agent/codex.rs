//! OpenAI Codex CLI: `codex exec --dangerously-bypass-approvals-and-sandbox {prompt}` (`-` and
//! stdin for a huge prompt), plain text as the preset runs it; its `exec --json` events (turns
//! and their usage, commands, messages, file changes, `error`/`turn.failed`) are read too, and
//! its limit texts: `You've hit your usage limit. … try again at …`, `usage_limit_reached`,
//! `exceeded retry limit, last status: 429` (`AGENT-CLIS.md`).

use serde_json::Value;

use super::cli::{Cli, Launch, Output, Part, literal};
use super::findings::{Findings, raw_text};
use super::output::LimitKind;
use super::signal::Patterns;
use super::text::as_u64;

/// The messages Codex prints for limits and login failures.
const PATTERNS: Patterns = Patterns {
    // `You've hit your usage limit. Upgrade to Pro (…) or try again at 3:28 PM.`
    hit_your_limit: true,
    limit_reached_resets: false,
    limits: &[
        ("usage_limit_reached", LimitKind::UsageLimit),
        (
            "exceeded retry limit, last status: 429",
            LimitKind::RateLimit,
        ),
    ],
    auth: &["unexpected status 401", "invalid api key", "not logged in"],
    retries: &[reconnecting_429],
};

/// `Reconnecting... 2/5 (unexpected status 429 Too Many Requests …)`: Codex retrying a 429.
fn reconnecting_429(lower: &str) -> Option<usize> {
    let p = lower.find("reconnecting")?;
    lower[p..].contains("429").then_some(p)
}

/// OpenAI Codex CLI.
#[derive(Debug)]
pub(crate) struct Codex;

impl Cli for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some("npm install -g @openai/codex")
    }

    fn launch(&self) -> Launch {
        let mut args = literal(&["exec", "--dangerously-bypass-approvals-and-sandbox"]);
        args.push(Part::Template("{prompt}".into()));
        Launch {
            args,
            stdin_args: Some(literal(&[
                "exec",
                "--dangerously-bypass-approvals-and-sandbox",
                "-",
            ])),
            ..Launch::default()
        }
    }

    fn output(&self) -> Output {
        Output::Text
    }

    fn event(&self, v: &Value, raw: &[u8], seen: &mut Findings) {
        let ty = v["type"].as_str().unwrap_or("");
        match ty {
            "thread.started" => {
                if let Some(id) = v["thread_id"].as_str() {
                    seen.session_id = Some(id.to_owned());
                }
            }
            "turn.completed" => {
                seen.progress();
                let u = &v["usage"];
                let input = as_u64(&u["input_tokens"]).unwrap_or(0);
                let cached = as_u64(&u["cached_input_tokens"]).unwrap_or(0);
                let output = as_u64(&u["output_tokens"]).unwrap_or(0);
                let usage = &mut seen.usage;
                usage.input_tokens = usage
                    .input_tokens
                    .saturating_add(input.saturating_sub(cached));
                usage.cache_read_input_tokens =
                    usage.cache_read_input_tokens.saturating_add(cached);
                usage.output_tokens = usage.output_tokens.saturating_add(output);
                usage.turns = usage.turns.saturating_add(1);
            }
            "turn.failed" => error(v["error"]["message"].as_str().unwrap_or(""), raw, seen),
            "error" => error(v["message"].as_str().unwrap_or(""), raw, seen),
            "item.started" | "item.updated" | "item.completed" => {
                item(&v["item"], ty == "item.started", raw, seen);
            }
            _ => {}
        }
    }

    fn signals(&self) -> &'static Patterns {
        &PATTERNS
    }
}

/// An item of a turn: a command, a message, a file change, a tool call, a search, an error.
fn item(item: &Value, started: bool, raw: &[u8], seen: &mut Findings) {
    let item_type = item["type"]
        .as_str()
        .or_else(|| item["item_type"].as_str())
        .unwrap_or("");
    let activity = match item_type {
        "command_execution" if started => {
            let command = codex_command(&item["command"]);
            (!command.is_empty()).then(|| format!("$ {command}"))
        }
        "agent_message" => {
            seen.progress();
            seen.assistant_text(item["text"].as_str().unwrap_or(""));
            None
        }
        "file_change" => item["changes"].as_array().and_then(|changes| {
            let path = changes.first()?["path"].as_str()?;
            Some(match changes.len() - 1 {
                0 => format!("Edit: {path}"),
                more => format!("Edit: {path} (+{more})"),
            })
        }),
        "mcp_tool_call" if started => {
            let server = item["server"].as_str().unwrap_or("mcp");
            let tool = item["tool"].as_str().unwrap_or("tool");
            Some(format!("{server}.{tool}"))
        }
        "web_search" if started => {
            Some(format!("Search: {}", item["query"].as_str().unwrap_or("")))
        }
        "error" => {
            error(item["message"].as_str().unwrap_or(""), raw, seen);
            None
        }
        _ => return,
    };
    if item_type != "error" && item_type != "agent_message" {
        seen.progress();
    }
    if let Some(activity) = activity {
        seen.set_activity_clean(&activity);
    }
}

/// An error event; the raw line may carry `usage_limit_reached` and a `resets_at` the message
/// does not.
fn error(message: &str, raw: &[u8], seen: &mut Findings) {
    seen.json_error(message, raw, &PATTERNS);
    let raw = raw_text(raw);
    if raw.to_ascii_lowercase().contains("usage_limit_reached") {
        let reset = seen.parse_reset(&raw);
        let text = if message.trim().is_empty() {
            "usage_limit_reached"
        } else {
            message
        };
        seen.set_limit(LimitKind::UsageLimit, text, reset);
    }
}

/// Codex's command: a string, or an argv such as `["bash", "-lc", "cargo test"]`.
fn codex_command(v: &Value) -> String {
    let command = match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let parts: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
            if parts.len() == 3 && is_shell(parts[0]) && parts[1].starts_with('-') {
                return parts[2].to_owned();
            }
            parts.join(" ")
        }
        _ => return String::new(),
    };
    // `bash -lc 'cargo test'` → `cargo test`.
    let mut words = command.splitn(3, ' ');
    if let (Some(shell), Some(flag), Some(rest)) = (words.next(), words.next(), words.next())
        && is_shell(shell)
        && flag.starts_with('-')
        && flag.contains('c')
    {
        let rest = rest.trim();
        for q in ['\'', '"'] {
            if rest.len() >= 2
                && rest.starts_with(q)
                && rest.ends_with(q)
                && !rest[1..rest.len() - 1].contains(q)
            {
                return rest[1..rest.len() - 1].to_owned();
            }
        }
        return rest.to_owned();
    }
    command
}

fn is_shell(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    matches!(base, "bash" | "sh" | "zsh" | "dash")
}

#[cfg(test)]
mod tests {
    use chrono::{FixedOffset, TimeZone, Utc};

    use super::*;
    use crate::agent::cli::Format;
    use crate::agent::output::Usage;
    use crate::agent::stream::Observer;
    use crate::agent::testkit::*;

    #[test]
    fn codex_json_usage_summed_over_turns() {
        let stream = [
            r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"test result: ok","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Tests pass; next I'll add docs."}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"README.md","kind":"update"}],"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Docs added. <promise>DONE</promise>"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":200,"output_tokens":50}}"#,
        ]
        .join("\n");
        let mut o = observer(Format::json(&Codex));
        let lines: Vec<&str> = stream.lines().collect();
        o.feed(
            format!("{}\n{}\n{}\n", lines[0], lines[1], lines[2]).as_bytes(),
            false,
        );
        assert_eq!(o.activity(), Some("$ cargo test"));
        let o = observe(Format::json(&Codex), &stream);
        assert_eq!(
            o.usage(),
            Usage {
                input_tokens: 315 + 800,
                output_tokens: 172,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 24648,
                cost_usd: 0.0,
                turns: 2,
            }
        );
        assert_eq!(o.session_id(), Some("0199a213-81c0-7800-8aa1-bbab2a035a53"));
        assert_eq!(
            o.final_message().as_deref(),
            Some("Docs added. <promise>DONE</promise>")
        );
        assert!(o.limit().is_none());
    }

    #[test]
    fn codex_usage_limit_with_try_again_at() {
        let message = "You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/codex/settings/usage to purchase more credits or try again at 3:28 PM.";
        let stream = format!(
            "{}\n{}\n{}\n",
            r#"{"type":"thread.started","thread_id":"t"}"#,
            serde_json::json!({"type": "error", "message": message}),
            serde_json::json!({"type": "turn.failed", "error": {"message": message}}),
        );
        let eastern = FixedOffset::west_opt(5 * 3600).unwrap();
        let mut o = Observer::new(Format::json(&Codex), at("2026-03-10T14:00:00Z"))
            .with_local_zone(eastern, None);
        o.feed(stream.as_bytes(), false);
        o.finish(Some(1));
        let limit = o.limit().expect("limit");
        assert_eq!(limit.kind, "usage_limit");
        assert_eq!(limit.reset_at, Some(at("2026-03-10T20:28:00Z")));
        assert_eq!(limit.message, message);

        // The same in text mode (stderr), with a date.
        let o = failed(
            &Codex,
            "",
            "ERROR: You've hit your usage limit. To get more access now, send a request to your admin or try again at Aug 8th, 2026 12:30 PM.\n",
        );
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-08-08T12:30:00Z"))
        );
        // Relative.
        let o = failed(
            &Codex,
            "You've hit your usage limit. To get more access now, send a request to your admin or try again in 3 days 6 hours 57 minutes.\n",
            "",
        );
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-13T15:57:00Z"))
        );
        // The code, with the reset epoch in the raw error.
        let o = observe(
            Format::json(&Codex),
            r#"{"type":"error","message":"unexpected status 429 Too Many Requests: {\"error\":{\"type\":\"usage_limit_reached\",\"message\":\"The usage limit has been reached\",\"plan_type\":\"plus\",\"resets_at\":1773158400}}"}"#,
        );
        assert_eq!(o.limit().unwrap().kind, "usage_limit");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(Utc.timestamp_opt(1773158400, 0).unwrap())
        );
        // The reset only in the raw line, inside escaped JSON.
        let o = observe(
            Format::json(&Codex),
            r#"{"type":"turn.failed","error":{"message":"You've hit your usage limit."},"detail":"{\"type\":\"usage_limit_reached\",\"resets_at\":1773158400}"}"#,
        );
        assert_eq!(o.limit().unwrap().message, "You've hit your usage limit.");
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(Utc.timestamp_opt(1773158400, 0).unwrap())
        );
        // Unparseable time: a limit without a reset.
        let o = failed(
            &Codex,
            "You've hit your usage limit. Try again later.\n",
            "",
        );
        assert_eq!(o.limit().unwrap().reset_at, None);
    }

    #[test]
    fn codex_retry_exhaustion_is_a_rate_limit() {
        let o = observe(
            Format::json(&Codex),
            &[
                r#"{"type":"error","message":"Reconnecting... 1/5 (unexpected status 429 Too Many Requests)"}"#,
                r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#,
            ]
            .join("\n"),
        );
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
        let o = failed(
            &Codex,
            "",
            "[2026-03-10T09:00:01] ERROR: exceeded retry limit, last status: 429 Too Many Requests\n",
        );
        assert_eq!(o.limit().unwrap().kind, "rate_limit");
    }

    #[test]
    fn commands_read_as_the_shell_line() {
        assert_eq!(
            codex_command(&serde_json::json!("bash -lc 'cargo test'")),
            "cargo test"
        );
        assert_eq!(
            codex_command(&serde_json::json!(["/bin/zsh", "-c", "ls -la"])),
            "ls -la"
        );
        assert_eq!(
            codex_command(&serde_json::json!(["git", "status"])),
            "git status"
        );
        assert_eq!(codex_command(&serde_json::json!(7)), "");
    }

    #[test]
    fn a_limited_attempt_reports_the_usage_of_its_turns() {
        let o = observe(
            Format::json(&Codex),
            &[
                r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":200,"output_tokens":50}}"#,
                r#"{"type":"turn.failed","error":{"message":"You've hit your usage limit. Try again in 2 hours."}}"#,
            ]
            .join("\n"),
        );
        assert_eq!(o.limit().unwrap().kind, LimitKind::UsageLimit);
        assert_eq!(
            o.limit().unwrap().reset_at,
            Some(at("2026-03-10T11:00:00Z"))
        );
        let u = o.usage();
        assert_eq!(
            (
                u.input_tokens,
                u.cache_read_input_tokens,
                u.output_tokens,
                u.turns
            ),
            (800, 200, 50, 1)
        );
    }
}
