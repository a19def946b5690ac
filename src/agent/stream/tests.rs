//! Tests of the stream observer: every CLI's events, plain text, chunking, and a property:
//! reading only what can still matter gives what reading every line in order gives.

use chrono::FixedOffset;
use proptest::prelude::*;

use super::events::STASH;
use super::*;
use crate::agent::claude::Claude;
use crate::agent::codex::Codex;
use crate::agent::copilot::Copilot;
use crate::agent::custom::Custom;
use crate::agent::findings::ACTIVITY_CHARS;
use crate::agent::testkit::*;
use crate::agent::text::MESSAGE_CHARS;

/// Everything an observer reports, for comparing two runs.
#[derive(Debug, PartialEq)]
struct Snapshot {
    activity: Option<String>,
    result: Option<AgentResult>,
    usage: Usage,
    limit: Option<Limit>,
    retrying: Option<Limit>,
    auth: Option<String>,
    final_message: Option<String>,
    session_id: Option<String>,
}

fn snapshot(o: &Observer) -> Snapshot {
    Snapshot {
        activity: o.activity().map(str::to_owned),
        result: o.result().cloned(),
        usage: o.usage(),
        limit: o.limit().cloned(),
        retrying: o.retrying().cloned(),
        auth: o.auth_error().map(str::to_owned),
        final_message: o.final_message(),
        session_id: o.session_id().map(str::to_owned),
    }
}

#[test]
fn plain_text_activity_is_the_last_line() {
    let mut o = observer(Format::of(&Custom));
    o.feed(
        b"   Compiling ralph v0.1.0\n\x1b[1m\x1b[32m    Finished\x1b[0m `dev` profile",
        false,
    );
    assert_eq!(o.activity(), Some("Compiling ralph v0.1.0"));
    assert!(o.take_activity_changed());
    assert!(!o.take_activity_changed());
    o.feed(b" in 2.1s\n\n   \n", false);
    assert_eq!(o.activity(), Some("Finished `dev` profile in 2.1s"));
    assert!(o.take_activity_changed());
    // A progress bar redrawn with carriage returns shows its last state.
    o.feed(
        b"Downloading 10%\rDownloading 55%\rDownloading 100%\r\n",
        true,
    );
    assert_eq!(o.activity(), Some("Downloading 100%"));
    // The same line again is no change.
    o.take_activity_changed();
    o.feed(b"Downloading 100%\n", true);
    assert!(!o.take_activity_changed());
    // Long lines are cut.
    let long = "x".repeat(500);
    o.feed(format!("{long}\n").as_bytes(), false);
    let a = o.activity().unwrap();
    assert_eq!(a.chars().count(), ACTIVITY_CHARS + 1);
    assert!(a.ends_with('…'));
    // A last line without a newline counts at finish.
    o.feed(b"<promise>DONE</promise>", false);
    o.finish(Some(0));
    assert_eq!(o.activity(), Some("<promise>DONE</promise>"));
    let last = o.final_message().unwrap();
    assert!(last.ends_with("<promise>DONE</promise>"));
    assert!(
        !last.contains("Downloading"),
        "stderr is not the agent's message"
    );
}

#[test]
fn final_message_tail_is_bounded() {
    let mut o = observer(Format::of(&Custom));
    for i in 0..20_000 {
        o.feed(
            format!("line {i} of the agent's answer\n").as_bytes(),
            false,
        );
    }
    let tail = o.final_message().unwrap();
    assert!(tail.len() <= TAIL_BYTES);
    assert!(tail.ends_with("line 19999 of the agent's answer"));
    assert!(o.tail.len() <= 2 * TAIL_BYTES + MAX_LINE);
}

#[test]
fn huge_single_line_is_bounded() {
    for format in [
        Format::of(&Custom),
        Format::of(&Claude),
        Format::json(&Codex),
        Format::json(&Copilot),
    ] {
        let mut o = observer(format);
        let chunk = vec![b'a'; 64 * 1024];
        for _ in 0..80 {
            o.feed(&chunk, false);
            assert!(o.out.buf.len() <= MAX_LINE);
            assert!(o.out.buf.capacity() <= 2 * MAX_LINE);
        }
        o.feed(b"\nafter\n", false);
        assert_eq!(o.activity(), Some("after"));
        // A huge JSON line is cut and then ignored, not shown as garbage.
        let mut o = observer(format);
        o.feed(
            br#"{"type":"assistant","message":{"content":[{"type":"text","text":""#,
            false,
        );
        for _ in 0..80 {
            o.feed(&chunk, false);
        }
        o.feed(b"\"}]}}\n", false);
        o.finish(Some(0));
        assert!(o.out.buf.is_empty());
        if format != Format::of(&Custom) {
            assert_eq!(o.activity(), None);
        }
    }
    // One 5 MiB chunk.
    let mut o = observer(Format::of(&Custom));
    let mut big = vec![b'b'; 5 * 1024 * 1024];
    big.push(b'\n');
    o.feed(&big, false);
    assert!(o.activity().unwrap().starts_with("bbbb"));
    assert!(o.tail.len() <= 2 * TAIL_BYTES);
}

#[test]
fn invalid_utf8_and_control_codes() {
    let mut o = observer(Format::of(&Custom));
    o.feed(
        b"\xff\xfe hello \xc3\x28 world\x07\x1b]0;title\x07\n",
        false,
    );
    let a = o.activity().unwrap();
    assert!(a.contains("hello"), "{a}");
    assert!(a.contains("world"));
    assert!(!a.contains('\x07') && !a.contains("title"));
    let mut o = observer(Format::of(&Claude));
    o.feed(b"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}]}}\n", false);
    o.feed(b"{not json at all\n", false);
    o.feed(b"[1,2,3]\n", false);
    o.feed(b"null\n", false);
    o.finish(Some(0));
    assert!(o.result().is_none());
}

#[test]
fn odd_json_values_are_tolerated() {
    let o = observe(
        Format::of(&Claude),
        r#"{"type":"result","subtype":7,"is_error":"yes","api_error_status":"429","num_turns":-3,"total_cost_usd":"0.5","usage":{"input_tokens":1e3,"output_tokens":null},"permission_denials":{},"duration_ms":1.5e30,"result":["x"]}"#,
    );
    let r = o.result().unwrap();
    assert_eq!(r.api_error_status, Some(429));
    assert_eq!(r.usage.input_tokens, 1000);
    assert_eq!(r.usage.cost_usd, 0.5);
    assert_eq!(r.usage.turns, 0);
    assert_eq!(r.permission_denials, 0);
    assert_eq!(r.text, "");
    let o = observe(
        Format::json(&Codex),
        r#"{"type":"item.started","item":{"type":"command_execution","command":["/bin/bash","-lc","ls -la"]}}"#,
    );
    assert_eq!(o.activity(), Some("$ ls -la"));
}

#[test]
fn talk_about_limits_and_logins_in_plain_text_that_exited_0_is_work() {
    let talk = TALK.join("\n") + "\n";
    let mut o = observer(Format::of(&Custom));
    o.feed(talk.as_bytes(), false);
    o.feed(talk.as_bytes(), true);
    o.finish(Some(0));
    assert_no_signal(&o, "plain text, exit 0");
    // Each alone, as the very last line of either stream.
    for text in TALK {
        for is_stderr in [false, true] {
            let mut o = observer(Format::of(&Custom));
            o.feed(format!("{text}\n").as_bytes(), is_stderr);
            o.finish(Some(0));
            assert_no_signal(&o, text);
        }
    }
}

#[test]
fn talk_about_limits_and_logins_in_json_formats_is_work() {
    let talk = TALK.join("\n");
    let claude = [
        serde_json::json!({"type": "system", "subtype": "init", "session_id": "s", "model": "claude-sonnet-4-5"}),
        serde_json::json!({"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [{"type": "text", "text": talk}]}}),
        serde_json::json!({"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "name": "Bash", "input": {"command": format!("echo '{talk}'")}}]}}),
        serde_json::json!({"type": "user", "message": {"content": [{"type": "tool_result", "content": talk}]}}),
        serde_json::json!({"type": "result", "subtype": "success", "is_error": false, "result": talk, "total_cost_usd": 0.1, "usage": {"input_tokens": 10, "output_tokens": 5}, "permission_denials": []}),
    ];
    let codex = [
        serde_json::json!({"type": "thread.started", "thread_id": "t"}),
        serde_json::json!({"type": "item.started", "item": {"type": "command_execution", "command": format!("grep -r '{}' src", TALK[0])}}),
        serde_json::json!({"type": "item.completed", "item": {"type": "command_execution", "aggregated_output": talk, "exit_code": 0}}),
        serde_json::json!({"type": "item.completed", "item": {"type": "agent_message", "text": talk}}),
        serde_json::json!({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 5}}),
    ];
    let copilot = [
        serde_json::json!({"type": "session.start", "data": {"sessionId": "c"}}),
        serde_json::json!({"type": "assistant.message", "data": {"content": talk, "outputTokens": 5}}),
        serde_json::json!({"type": "tool.execution_start", "data": {"toolName": "bash", "arguments": {"command": format!("echo '{talk}'")}}}),
        serde_json::json!({"type": "result", "sessionId": "c", "exitCode": 0, "usage": {"premiumRequests": 1}}),
    ];
    let plain = TALK.join("\n") + "\n";
    for (format, events) in [
        (Format::of(&Claude), &claude[..]),
        (Format::json(&Codex), &codex[..]),
        (Format::json(&Copilot), &copilot[..]),
    ] {
        let mut stream: String = events.iter().map(|e| format!("{e}\n")).collect();
        // Plain lines among the events, and on stderr.
        stream.push_str(&plain);
        let mut o = observer(format);
        o.feed(stream.as_bytes(), false);
        o.feed(plain.as_bytes(), true);
        o.finish(Some(0));
        assert_no_signal(&o, &format!("{format:?}"));
        // Failed, the events and the assistant's words still say nothing.
        let mut o = observer(format);
        let events: String = events.iter().map(|e| format!("{e}\n")).collect();
        o.feed(events.as_bytes(), false);
        o.finish(Some(1));
        assert_no_signal(&o, &format!("{format:?}, exit 1"));
    }
}

#[test]
fn the_failed_tail_is_bounded() {
    let mut o = observer(Format::of(&Custom));
    let long = "z".repeat(10 * FAILED_TAIL_LINE_BYTES);
    for _ in 0..3 * FAILED_TAIL_LINES {
        o.feed(format!("{long}\n").as_bytes(), false);
        o.feed(format!("{long}\n").as_bytes(), true);
    }
    for last in [&o.last_out, &o.last_err] {
        assert_eq!(last.lines.len(), FAILED_TAIL_LINES);
        assert!(
            last.lines
                .iter()
                .all(|(_, l)| l.len() <= FAILED_TAIL_LINE_BYTES)
        );
    }
    o.finish(Some(1));
    assert_no_signal(&o, "long lines");
}

/// Feeds `data` split at `cuts` (positions taken modulo its length), stdout only.
fn feed_split(format: Format, data: &[u8], cuts: &[usize]) -> Observer {
    let mut o = observer(format);
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.sort_unstable();
    let mut last = 0;
    for p in points {
        o.feed(&data[last..p], false);
        last = p;
    }
    o.feed(&data[last..], false);
    o.finish(Some(1));
    o
}

#[test]
fn real_messages_as_the_last_lines_of_a_failed_plain_attempt_are_signals() {
    let limits = [
        ("You've hit your limit · resets 3pm (UTC)", "usage_limit"),
        (
            "You've hit your session limit · resets 12:43pm (UTC)",
            "session_limit",
        ),
        ("You've hit the rate limit for this model.", "rate_limit"),
        (
            "API Error: Request rejected (429) · this may be a temporary rate limit",
            "rate_limit",
        ),
        ("API Error: 529 Overloaded", "overloaded"),
        ("No remaining quota for premium requests", "premium_quota"),
        (
            "You've hit your usage limit. Try again at 3:28 PM.",
            "usage_limit",
        ),
        (
            "exceeded retry limit, last status: 429 Too Many Requests",
            "rate_limit",
        ),
        (
            "Attempt 2 failed with status 429. Retrying with backoff...",
            "rate_limit",
        ),
    ];
    for (text, kind) in limits {
        for (stdout, stderr) in [
            (format!("working\n{text}\n"), String::new()),
            (String::new(), format!("{text}\n")),
        ] {
            let o = failed(&Custom, &stdout, &stderr);
            let limit = o.limit().unwrap_or_else(|| panic!("no limit in {text:?}"));
            assert_eq!(limit.kind, kind, "{text}");
            assert!(o.auth_error().is_none(), "{text}");
        }
    }
    for text in [
        "Invalid API key · Please run /login",
        "Not logged in · Please run /login",
        "Error: No authentication information found.",
        "ERROR: unexpected status 401 Unauthorized",
    ] {
        let o = failed(&Custom, "", &format!("{text}\n"));
        assert_eq!(o.auth_error(), Some(text));
    }
}

/// Lines an attempt may print, for comparing the observer with reading every line in order:
/// Claude's events of every kind (messages that settle and that do not, API errors), other
/// CLIs' events, plain text with control codes, blank and broken lines.
const LINES: &[&str] = &[
    r#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}"#,
    r#"{"type":"assistant","message":{"id":"m1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Running the tests first."}]},"session_id":"s-1"}"#,
    r#"{"type":"assistant","message":{"id":"m2","model":"claude-sonnet-4-5","content":[{"type":"text","text":"\nA message that begins with a newline"}]}}"#,
    r#"{"type":"assistant","message":{"id":"m3","model":"claude-sonnet-4-5","content":[{"type":"text","text":"   "}]}}"#,
    r#"{"type":"assistant","message":{"id":"m4","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"hmm"}]}}"#,
    r#"{"type":"assistant","message":{"id":"m5","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]}}"#,
    r#"{"type":"assistant","message":{"id":"m6","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"a.json","content":[{"type":"text","text":"nested"}]}}]}}"#,
    r#"{"type":"assistant","message":{"id":"m7","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Both: a text"},{"type":"tool_use","id":"t3","name":"Read","input":{"file_path":"src/lib.rs"}}]}}"#,
    r#"{"type":"assistant","message":{"id":"m8","content":"A message as a plain string"}}"#,
    r#"{"type":"assistant","message":{"id":"m9","model":"claude-sonnet-4-5","content":[{"type":"text","text":"cut short"#,
    r#"{"type": "assistant", "message": {"content": [{"type": "text", "text": "Spaced JSON"}]}}"#,
    r#"{"type":"assistant","message":{"id":"m10","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"You've hit your session limit · resets 1:03pm (UTC)"}]},"session_id":"s-1","error":"rate_limit"}"#,
    r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"OAuth token has expired · Please run /login"}]},"error":"authentication_failed"}"#,
    r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"test result: ok"}]}}"#,
    r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"error_status":429,"error":"rate_limit"}"#,
    r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1773147780,"rateLimitType":"five_hour"}}"#,
    r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"Done. <promise>DONE</promise>","session_id":"s-1","total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":5}}"#,
    r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited","usage":{}}"#,
    r#"{"type":"thread.started","thread_id":"th-1"}"#,
    r#"{"type":"item.completed","item":{"type":"agent_message","text":"Codex says hi"}}"#,
    r#"{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":5}}"#,
    r#"{"type":"assistant.message","data":{"content":"Copilot says hi","outputTokens":5}}"#,
    r#"{"type":"result","sessionId":"c-1","exitCode":0,"usage":{"premiumRequests":1}}"#,
    "   Compiling ralph v0.1.0",
    "\x1b[1m\x1b[32m    Finished\x1b[0m `dev` profile",
    "\x1b[0m",
    "Downloading 10%\rDownloading 100%\r",
    "You've hit your session limit · resets 12:43pm (UTC)",
    "Not logged in · Please run /login",
    "{not json at all",
    "[1,2,3]",
    "   ",
    "",
];

/// The observer as it was: every line read, in order, one at a time.
fn read_line_by_line(format: Format, stdout: &[u8], stderr: &[u8]) -> Observer {
    let mut o = observer(format);
    if format.output == Output::Text {
        o.tail_cut = keep_tail(&mut o.tail, stdout, TAIL_BYTES);
    }
    for (data, is_stderr) in [(stdout, false), (stderr, true)] {
        let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
        // What follows the last newline is not a line yet.
        let unfinished = lines.pop().unwrap_or_default();
        for line in lines {
            o.line(&line[..line.len().min(MAX_LINE)], is_stderr);
        }
        o.pending(is_stderr).append(unfinished);
    }
    o.seen.flush_activity();
    o
}

/// The observer fed the two streams in chunks cut at `cuts`.
fn read_in_chunks(format: Format, stdout: &[u8], stderr: &[u8], cuts: &[usize]) -> Observer {
    let mut o = observer(format);
    for (data, is_stderr) in [(stdout, false), (stderr, true)] {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        points.sort_unstable();
        let mut last = 0;
        for p in points {
            o.feed(&data[last..p], is_stderr);
            last = p;
        }
        o.feed(&data[last..], is_stderr);
    }
    o
}

proptest! {
    #[test]
    fn reading_only_what_can_matter_changes_nothing(
        picks in proptest::collection::vec((0..LINES.len(), any::<bool>()), 0..50),
        cuts in proptest::collection::vec(any::<usize>(), 0..30),
        failed in any::<bool>(),
        format in prop_oneof![
            Just(Format::of(&Claude)),
            Just(Format::of(&Custom)),
            Just(Format::json(&Codex)),
            Just(Format::json(&Copilot)),
        ],
    ) {
        let (mut stdout, mut stderr) = (String::new(), String::new());
        for (i, (pick, is_stderr)) in picks.iter().enumerate() {
            let out = if *is_stderr { &mut stderr } else { &mut stdout };
            out.push_str(LINES[*pick]);
            // The last line of a stream may lack its newline.
            if i + 1 < picks.len() || pick % 2 == 0 {
                out.push('\n');
            }
        }
        let (stdout, stderr) = (stdout.as_bytes(), stderr.as_bytes());
        let exit = if failed { Some(1) } else { Some(0) };
        let mut lines = read_line_by_line(format, stdout, stderr);
        let mut chunks = read_in_chunks(format, stdout, stderr, &cuts);
        prop_assert_eq!(lines.activity(), chunks.activity());
        prop_assert_eq!(lines.final_message(), chunks.final_message());
        prop_assert_eq!(lines.retrying(), chunks.retrying());
        prop_assert_eq!(lines.failed_tail(), chunks.failed_tail());
        let mut lines = read_line_by_line(format, stdout, stderr);
        let mut chunks = read_in_chunks(format, stdout, stderr, &cuts);
        lines.finish(exit);
        chunks.finish(exit);
        prop_assert_eq!(snapshot(&lines), snapshot(&chunks));
    }
}

#[test]
fn a_long_text_output_keeps_its_last_lines_whatever_the_chunks() {
    let mut text = String::new();
    for i in 0..30_000 {
        match i % 7 {
            0 => text.push_str(&format!("\x1b[32m   Compiling\x1b[0m crate-{i}\n")),
            1 => text.push_str("\n   \n"),
            2 => text.push_str(&format!("{}\n", "long line ".repeat(i % 500))),
            3 => text.push_str(&format!("progress {i}%\rprogress done\r\n")),
            _ => text.push_str(&format!("line {i} of the agent's answer\n")),
        }
    }
    text.push_str("Not logged in · Please run /login");
    let lines = read_line_by_line(Format::of(&Custom), text.as_bytes(), b"");
    let mut lines_tail = read_line_by_line(Format::of(&Custom), text.as_bytes(), b"");
    for size in [1, 100, 4096, 65536, 1 << 20, text.len()] {
        let cuts: Vec<usize> = (1..=text.len() / size).map(|k| k * size).collect();
        let mut chunks = read_in_chunks(Format::of(&Custom), text.as_bytes(), b"", &cuts);
        assert_eq!(lines.activity(), chunks.activity(), "{size}");
        assert!(
            chunks.tail.len() <= 2 * TAIL_BYTES + size.min(TAIL_BYTES),
            "{size}"
        );
        assert_eq!(lines_tail.failed_tail(), chunks.failed_tail(), "{size}");
        lines_tail = read_line_by_line(Format::of(&Custom), text.as_bytes(), b"");
        chunks.finish(Some(1));
        assert_eq!(
            chunks.auth_error(),
            Some("Not logged in · Please run /login")
        );
        let message = chunks.final_message().unwrap();
        assert!(message.len() <= TAIL_BYTES, "{size}");
        assert!(
            message
                .ends_with("line 29999 of the agent's answer\nNot logged in · Please run /login"),
            "{size}"
        );
        assert!(!message.contains('\x1b'), "{size}");
    }
}

#[test]
fn claude_messages_are_read_only_as_far_as_they_matter() {
    // Many messages between two results: the observer reads only the newest, yet knows the
    // activity and the final message as if it had read them all.
    let text = |i: usize| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"Step {i} done."}}]}},"session_id":"s"}}"#
        )
    };
    let tool = |i: usize| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"t{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"tool_use","id":"u{i}","name":"Bash","input":{{"command":"make step-{i}"}}}}]}},"session_id":"s"}}"#
        )
    };
    let mut stream = String::new();
    for i in 0..5_000 {
        stream.push_str(&text(i));
        stream.push('\n');
        stream.push_str(&tool(i));
        stream.push('\n');
    }
    let mut o = observer(Format::of(&Claude));
    for chunk in stream.as_bytes().chunks(64 * 1024) {
        o.feed(chunk, false);
        assert!(o.stash.len() <= STASH + 64 * 1024);
    }
    assert_eq!(o.activity(), Some("Bash: make step-4999"));
    assert_eq!(o.final_message().as_deref(), Some("Step 4999 done."));
    assert!(o.take_activity_changed());
    assert!(o.stash.is_empty());
    // Tool calls only, no message: still bounded, still right.
    let mut o = observer(Format::of(&Claude));
    o.feed(format!("{}\n", text(1)).as_bytes(), false);
    for i in 0..20_000 {
        o.feed(format!("{}\n", tool(i)).as_bytes(), false);
        assert!(o.stash.len() <= STASH + 64 * 1024);
    }
    o.finish(Some(0));
    assert_eq!(o.activity(), Some("Bash: make step-19999"));
    assert_eq!(o.final_message().as_deref(), Some("Step 1 done."));
}

proptest! {
    #[test]
    fn any_split_gives_identical_results(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
        for (format, data) in [
            (Format::of(&Claude), claude_session()),
            (Format::of(&Claude), limit_session()),
            (Format::of(&Custom), "one\r\ntwo\n\x1b[32mthree\x1b[0m\nYou've hit your session limit · resets 12:43pm (UTC)\nlast".to_owned()),
        ] {
            let whole = feed_split(format, data.as_bytes(), &[]);
            let split = feed_split(format, data.as_bytes(), &cuts);
            prop_assert_eq!(snapshot(&whole), snapshot(&split));
        }
    }

    #[test]
    fn feed_never_panics(
        chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..300), any::<bool>()), 0..20),
        exit in prop_oneof![Just(None), Just(Some(0)), Just(Some(1))],
        format in prop_oneof![
            Just(Format::of(&Claude)),
            Just(Format::json(&Codex)),
            Just(Format::json(&Copilot)),
            Just(Format::of(&Custom)),
        ],
    ) {
        let mut o = observer(format);
        for (chunk, is_stderr) in &chunks {
            o.feed(chunk, *is_stderr);
            let _ = o.take_activity_changed();
        }
        o.finish(exit);
        let _ = (o.activity(), o.result(), o.usage(), o.limit(), o.auth_error(), o.final_message());
    }

    #[test]
    fn signal_texts_never_panic(
        lead in "(Error: |■ |\\[2026-01-01\\] |)",
        opener in "(You've hit your (session |weekly |Opus |usage |)limit|Claude AI usage limit reached\\||You've hit your usage limit\\.|Attempt [0-9] failed with status 429|Invalid API key|usage_limit_reached)",
        middle in "( · resets | or try again at | try again in | try again |\"resets_at\":|\\.)",
        tail in "\\PC{0,40}",
        format in prop_oneof![Just(Format::of(&Custom)), Just(Format::json(&Codex)), Just(Format::json(&Copilot))],
        offset in -50_400i32..=50_400,
    ) {
        let line = format!("{lead}{opener}{middle}{tail}");
        let mut o = Observer::new(format, utc_now()).with_local_zone(FixedOffset::east_opt(offset).unwrap(), Some("Etc/Test"));
        o.feed(line.as_bytes(), true);
        o.feed(b"\n", true);
        let json = serde_json::json!({"type": "error", "message": line, "data": {"errorType": "rate_limit", "message": line}});
        o.feed(format!("{json}\n").as_bytes(), false);
        o.finish(Some(1));
        if let Some(limit) = o.limit() {
            prop_assert!(limit.message.chars().count() <= MESSAGE_CHARS + 1);
        }
    }
}

#[test]
fn only_the_last_lines_of_each_stream_count() {
    // A message buried under more output is history.
    let mut buried = String::from("You've hit your session limit · resets 12:43pm (UTC)\n");
    for i in 0..FAILED_TAIL_LINES {
        buried.push_str(&format!("later line {i}\n"));
    }
    let o = failed(&Custom, &buried, "");
    assert_no_signal(&o, "buried");
    // Each stream keeps its own last lines: chatty stdout does not push out stderr's error.
    let o = failed(&Custom, &buried, "Not logged in · Please run /login\n");
    assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
    // A JSON-format attempt's plain lines (the CLI's own stderr) count the same way.
    let mut o = observer(Format::of(&Claude));
    o.feed(b"Invalid API key \xc2\xb7 Please run /login\n", true);
    o.finish(Some(1));
    assert_eq!(o.auth_error(), Some("Invalid API key · Please run /login"));
    // A signal ending the attempt (no exit code) is a failure too.
    let mut o = observer(Format::of(&Custom));
    o.feed(b"Not logged in \xc2\xb7 Please run /login\n", true);
    o.finish(None);
    assert_eq!(o.auth_error(), Some("Not logged in · Please run /login"));
}

#[test]
fn format_for_presets() {
    assert_eq!(format_for("claude"), Format::of(&Claude));
    assert_eq!(format_for("claude").output, Output::JsonLines);
    for preset in ["copilot", "codex", "gemini", "custom", ""] {
        assert_eq!(format_for(preset).output, Output::Text, "{preset}");
    }
    assert_eq!(format_for("nonsense"), Format::of(&Custom));
}

proptest! {
    #[test]
    fn nothing_a_plain_attempt_that_exited_0_printed_is_a_signal(
        lines in proptest::collection::vec(
            (prop_oneof![
                proptest::sample::select(TALK).prop_map(str::to_owned),
                "\\PC{0,80}",
                (proptest::sample::select(TALK), "\\PC{0,20}").prop_map(|(t, s)| format!("{s}{t}")),
            ], any::<bool>()),
            0..40,
        ),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
        preset in proptest::sample::select(vec!["copilot", "codex", "gemini", "custom", "claude"]),
    ) {
        let mut o = observer(format_for(preset));
        for (line, is_stderr) in &lines {
            let bytes = format!("{line}\n").into_bytes();
            let mut last = 0;
            for c in &cuts {
                let c = c % (bytes.len() + 1);
                if c > last {
                    o.feed(&bytes[last..c], *is_stderr);
                    last = c;
                }
            }
            o.feed(&bytes[last..], *is_stderr);
        }
        o.finish(Some(0));
        prop_assert!(o.limit().is_none());
        prop_assert!(o.auth_error().is_none());
        prop_assert!(o.retrying().is_none());
    }
}
