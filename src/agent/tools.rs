//! What a tool call and a tool's result say: the call as one line of activity from its input's
//! most telling field (`Bash: cargo test`), and the results of a Claude-style `user` message.

use serde_json::Value;

use super::findings::Findings;
use super::text::first_line;

/// The tool results of a Claude-style `user` message (Claude's, Qwen's): each `tool_result`
/// block's content, a text or text blocks. Read only when rendering (the observer skips these
/// lines: they can be huge).
pub(super) fn tool_results(v: &Value, seen: &mut Findings) {
    let Some(blocks) = v["message"]["content"].as_array() else {
        return;
    };
    if !seen.rendering() {
        return;
    }
    for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
        let text = match &block["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        seen.tool_result(&text, block["is_error"].as_bool() == Some(true));
    }
}

/// What a tool call is doing, from its input's most telling field: `Bash: cargo test`.
pub(crate) fn tool_activity(name: &str, input: &Value) -> String {
    let detail = tool_detail(name, input);
    let detail = first_line(detail.trim());
    if detail.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {detail}")
    }
}

fn tool_detail(name: &str, input: &Value) -> String {
    let s = |key: &str| input[key].as_str().map(str::to_owned);
    let by_name = match name {
        "Bash" | "bash" | "shell" | "Shell" => s("command").or_else(|| s("cmd")),
        "Read" | "Edit" | "Write" | "MultiEdit" | "view" | "edit" | "create" => {
            s("file_path").or_else(|| s("path"))
        }
        "NotebookEdit" | "NotebookRead" => s("notebook_path"),
        "Grep" | "Glob" | "grep" | "glob" => s("pattern"),
        "WebFetch" | "web_fetch" => s("url"),
        "WebSearch" | "web_search" => s("query"),
        "Task" | "Agent" => s("description").or_else(|| s("prompt")),
        "TodoWrite" => input["todos"].as_array().map(|todos| {
            todos
                .iter()
                .find(|t| t["status"].as_str() == Some("in_progress"))
                .and_then(|t| t["activeForm"].as_str().or_else(|| t["content"].as_str()))
                .map_or_else(|| format!("{} items", todos.len()), str::to_owned)
        }),
        _ => None,
    };
    if let Some(d) = by_name {
        return d;
    }
    for key in [
        "command",
        "cmd",
        "file_path",
        "path",
        "pattern",
        "url",
        "query",
        "description",
        "prompt",
    ] {
        if let Some(d) = s(key) {
            return d;
        }
    }
    match input {
        Value::Object(map) => map
            .values()
            .find_map(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_activity_picks_the_telling_field() {
        let cases = [
            (
                r#"{"name":"Read","input":{"file_path":"src/lib.rs","limit":20}}"#,
                "Read: src/lib.rs",
            ),
            (
                r#"{"name":"Grep","input":{"pattern":"fn main","path":"src"}}"#,
                "Grep: fn main",
            ),
            (
                r#"{"name":"WebFetch","input":{"url":"https://docs.rs","prompt":"x"}}"#,
                "WebFetch: https://docs.rs",
            ),
            (
                r#"{"name":"TodoWrite","input":{"todos":[{"content":"a","status":"completed","activeForm":"Doing a"},{"content":"b","status":"in_progress","activeForm":"Doing b"}]}}"#,
                "TodoWrite: Doing b",
            ),
            (
                r#"{"name":"Bash","input":{"command":"cd x &&\n  make"}}"#,
                "Bash: cd x &&",
            ),
            (
                r#"{"name":"mcp__github__get_issue","input":{"owner":"o","issue_number":3}}"#,
                "mcp__github__get_issue: o",
            ),
            (r#"{"name":"Weird","input":{}}"#, "Weird"),
        ];
        for (block, expected) in cases {
            let block: Value = serde_json::from_str(block).unwrap();
            assert_eq!(
                tool_activity(block["name"].as_str().unwrap(), &block["input"]),
                expected
            );
        }
    }
}
