//! A scripted fake agent for ralph's integration tests, in the spirit of jj's fake editor.
//!
//! `FAKE_AGENT_SCRIPT` is a comma-separated list of steps, one per iteration (`RALPH_ITERATION`
//! picks it; the last step repeats). A step is one or more actions joined by `+`:
//!   check            check the first unchecked criterion in $RALPH_TASK_FILE and write a file
//!   tick-first       check the first box the task file shows anywhere, a quoted one too (a line
//!                    whose `>` markers and list marker are followed by `[ ]`), and write a
//!                    file: an agent that ticks the first box it finds
//!   check-unless:TEXT  check as `check` does, unless the task file holds TEXT (then idle): one
//!                    item of a queue that never gets done
//!   idle             change nothing
//!   churn            modify churn.txt without touching the criteria
//!   delete           delete the line of the first unchecked criterion
//!   uncheck          uncheck the first checked criterion
//!   promise:WORD     print <promise>WORD</promise>
//!   echo             print the prompt back
//!   print:TEXT       print TEXT
//!   commit:MSG       `git add -A && git commit -m MSG` by itself
//!   fail             print to stderr and exit 1 (after the other actions)
//!   exit:N           exit with code N
//!   hang             sleep for a long time
//!   ignore-term      ignore SIGTERM (combine with hang)
//!   note-term        the same, but each SIGTERM creates `term-N.txt` in FAKE_AGENT_LOG: a test
//!                    waits for it to know the stop came (what it spawns later gets SIGTERM's
//!                    default)
//!   grandchild       start `sleep 300` holding stdout (recording its pid)
//!   leak             start `sleep 300` holding stdout, then exit 0 at once
//!   garble           make the task file's frontmatter unparseable
//!   touch:PATH       create PATH (and its directories) holding the iteration number
//!   copy:SRC|DST     copy SRC (outside the repository) to DST
//!   claude-result:USD  print a Claude stream-json session (a Bash tool call, then the result
//!                    event with this cost and 1000/50 tokens)
//!   done-task        table mode: mark the task the prompt names DONE in PROGRESS.md
//!   done-task-except:K  the same, except for task K (never finished)
//!   review:VERDICT   as the reviewer (a prompt starting `# Ralph review`): print
//!                    `REVIEW: VERDICT` (PASS, or FAIL reason); ignored in a work prompt
//!   story-pass       prd.json: mark the story the prompt names passing (with a note), write
//!                    `work/story-ID.txt` and a learning in progress.txt
//!   story-pass-all   prd.json: mark every story passing, and retitle the others (hostile)
//!   write-table:N    write PRD.md and PROGRESS.md with N tasks (the planning run)
//!   rmrf:PATH        delete PATH recursively (an agent that removes ralph's files)
//!   plan-criteria:N  append N criteria to the task file (the `ralph init --plan` run)
//!   limit-once:SECS  on the first attempt of this iteration only, print Claude's
//!                    `rate_limit_event` (resets in SECS) and a limit result, and exit 1
//!   sh:FILE          run `sh FILE` in the repository (its output is the agent's; a test
//!                    writes the script, so any hostile behaviour fits without a new action)
//!   exchange:A|B     swap A and B atomically (`renameat2` with `RENAME_EXCHANGE`), which no
//!                    shell tool does; a script can run it too, as
//!                    `FAKE_AGENT_SCRIPT='exchange:A|B' fake-agent`
//!   forge-index:PATH rewrite `.git/index` by hand without PATH's entry, its untracked cache
//!                    kept (`forge_index.rs`): an agent planting a cache that hides PATH
//!   fanotify-write:PATH|TEXT  write TEXT at the start of PATH through a descriptor fanotify
//!                    opened (root only), which makes no inotify event at all
//! With `FAKE_AGENT_LOG=DIR`, it records `prompt-N.txt`, `argv-N.txt`, `env-N.txt` and `pids-N.txt`.

#[path = "forge_index.rs"]
mod forge_index;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn main() {
    let iteration: usize = std::env::var("RALPH_ITERATION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let prompt = read_prompt(&args);
    let log = std::env::var_os("FAKE_AGENT_LOG").map(PathBuf::from);
    if let Some(dir) = &log {
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(dir.join(format!("prompt-{iteration}.txt")), &prompt);
        let _ = std::fs::write(dir.join(format!("argv-{iteration}.txt")), args.join("\n"));
        let env: Vec<String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("RALPH_") || k == "IS_SANDBOX")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = std::fs::write(dir.join(format!("env-{iteration}.txt")), env.join("\n"));
        record_pid(&log, iteration, std::process::id());
    }
    let script = std::env::var("FAKE_AGENT_SCRIPT").unwrap_or_else(|_| "check".into());
    let steps: Vec<&str> = script.split(',').map(str::trim).collect();
    let step = steps
        .get(iteration - 1)
        .or(steps.last())
        .copied()
        .unwrap_or("idle");
    let task = std::env::var("RALPH_TASK_FILE").unwrap_or_else(|_| "RALPH_TASK.md".into());
    let mut exit_code = 0;
    let mut hang = false;
    println!("fake agent: iteration {iteration}, step `{step}`");
    if prompt.starts_with("# Ralph review") {
        // The reviewer run: only the `review:` action applies.
        let verdict = step
            .split('+')
            .find_map(|a| a.strip_prefix("review:"))
            .unwrap_or("PASS");
        println!("Reviewed the task.\nREVIEW: {verdict}");
        std::process::exit(0);
    }
    let task_number: Option<u32> = prompt
        .lines()
        .next()
        .and_then(|l| l.split(": task ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    for action in step.split('+') {
        let (name, arg) = action.split_once(':').unwrap_or((action, ""));
        match name {
            "check" => {
                if let Some(text) = edit_first(&task, "[ ]", "[x]") {
                    let _ = std::fs::create_dir_all("work");
                    let _ = std::fs::write(format!("work/iter-{iteration}.txt"), &text);
                    println!("checked: {text}");
                }
            }
            "tick-first" => {
                if let Some(text) = tick_first(&task) {
                    let _ = std::fs::create_dir_all("work");
                    let _ = std::fs::write(format!("work/iter-{iteration}.txt"), &text);
                    println!("ticked: {text}");
                }
            }
            "check-unless" => {
                let text = std::fs::read_to_string(&task).unwrap_or_default();
                if text.contains(arg) {
                    println!("not this one: {arg}");
                } else if let Some(done) = edit_first(&task, "[ ]", "[x]") {
                    // A file of this task's own: items worked at once never collide.
                    let stem = std::path::Path::new(&task)
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let _ = std::fs::create_dir_all("work");
                    let _ = std::fs::write(format!("work/{stem}-{iteration}.txt"), &done);
                    println!("checked: {done}");
                }
            }
            "idle" => println!("thinking about it, changing nothing"),
            "churn" => {
                let _ = std::fs::write(
                    "churn.txt",
                    format!("churn {iteration} {}\n", std::process::id()),
                );
                println!("rewrote churn.txt");
            }
            "delete" => delete_first_unchecked(&task),
            "uncheck" => {
                edit_first(&task, "[x]", "[ ]");
            }
            "promise" => println!("All done!\n<promise>{arg}</promise>"),
            "echo" => println!("{prompt}"),
            "print" => println!("{arg}"),
            "commit" => {
                let _ = Command::new("git").args(["add", "-A"]).status();
                let _ = Command::new("git")
                    .args(["commit", "-q", "-m", arg])
                    .status();
            }
            "fail" => {
                eprintln!("fake agent: something went wrong");
                exit_code = 1;
            }
            "exit" => exit_code = arg.parse().unwrap_or(1),
            "hang" => hang = true,
            "ignore-term" => unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            },
            "note-term" => note_term(&log, iteration),
            "grandchild" | "leak" => {
                let child = Command::new("sleep")
                    .arg("300")
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("spawn sleep");
                record_pid(&log, iteration, child.id());
                std::mem::forget(child);
                if name == "leak" {
                    let _ = std::io::stdout().flush();
                    std::process::exit(0);
                }
            }
            "touch" => {
                if let Some(dir) = std::path::Path::new(arg).parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::write(arg, format!("{iteration}\n"));
                println!("wrote {arg}");
            }
            "copy" => {
                let (src, dst) = arg.split_once('|').unwrap_or((arg, arg));
                if let Some(dir) = std::path::Path::new(dst).parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::copy(src, dst);
                println!("copied {dst}");
            }
            "claude-result" => {
                let cost: f64 = arg.parse().unwrap_or(0.1);
                println!(
                    r#"{{"type":"system","subtype":"init","session_id":"fake-session","tools":["Bash"]}}"#
                );
                println!(
                    r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t1","name":"Bash","input":{{"command":"sed -i s/x/y/ RALPH_TASK.md"}}}}]}}}}"#
                );
                println!(
                    r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"ok"}}]}}}}"#
                );
                println!(
                    r#"{{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Checked one box.","session_id":"fake-session","total_cost_usd":{cost},"usage":{{"input_tokens":1000,"output_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"permission_denials":[]}}"#
                );
            }
            "limit-once" => {
                let marker = log.as_ref().map(|d| d.join(format!("limited-{iteration}")));
                if let Some(m) = marker.filter(|m| !m.exists()) {
                    let _ = std::fs::write(&m, "");
                    let secs: u64 = arg.parse().unwrap_or(2);
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0);
                    println!(
                        r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"rejected","resetsAt":{},"rateLimitType":"five_hour"}}}}"#,
                        now + secs
                    );
                    println!(
                        r#"{{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":"You've hit your session limit","session_id":"fake-session","total_cost_usd":0,"usage":{{"input_tokens":0,"output_tokens":0}}}}"#
                    );
                    let _ = std::io::stdout().flush();
                    std::process::exit(1);
                }
            }
            "done-task" | "done-task-except" => {
                let skip: Option<u32> = arg.parse().ok();
                if let Some(k) = task_number.filter(|k| Some(*k) != skip) {
                    set_row_done("PROGRESS.md", k);
                    let _ = std::fs::create_dir_all("work");
                    let _ = std::fs::write(format!("work/task-{k}.txt"), format!("{iteration}\n"));
                    println!("finished task {k}");
                } else {
                    println!("could not finish task {task_number:?}");
                }
            }
            "story-pass" | "story-pass-all" => {
                let story = prompt
                    .lines()
                    .next()
                    .and_then(|l| l.split(": story ").nth(1))
                    .and_then(|rest| rest.split_whitespace().next())
                    .unwrap_or_default()
                    .to_string();
                edit_stories(&task, &story, name == "story-pass-all");
                let _ = std::fs::create_dir_all("work");
                let _ = std::fs::write(format!("work/story-{story}.txt"), format!("{iteration}\n"));
                let progress = std::path::Path::new(&task).with_file_name("progress.txt");
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(progress)
                    .expect("progress.txt");
                let _ = writeln!(f, "learned: story {story} needs a file");
                println!("passed story {story}");
            }
            "write-table" if !prompt.starts_with("# Ralph iteration") => {
                let n: u32 = arg.parse().unwrap_or(2);
                let mut prd =
                    String::from("# Planned\n\n## Goal\n\nThe planned goal.\n\n## Tasks\n\n");
                let mut progress = String::from(
                    "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|---|---|---|\n",
                );
                for k in 1..=n {
                    prd.push_str(&format!(
                        "### Task {k}: Step {k}\n\n**Acceptance Criteria:**\n- [ ] step {k} works\n\n"
                    ));
                    progress.push_str(&format!("| {k} | Step {k} | PENDING | |\n"));
                }
                prd.push_str("## Completion Promise\n\n`SHIPPED`\n");
                let _ = std::fs::write("PRD.md", prd);
                let _ = std::fs::write("PROGRESS.md", progress);
            }
            "hop" => hop(arg),
            "rmrf" => {
                let _ = std::fs::remove_dir_all(arg);
            }
            "sh" => {
                let _ = std::io::stdout().flush();
                match Command::new("sh").arg(arg).status() {
                    Ok(s) if !s.success() => exit_code = s.code().unwrap_or(1),
                    Ok(_) => {}
                    Err(e) => eprintln!("fake agent: cannot run sh {arg}: {e}"),
                }
            }
            "exchange" => {
                let (a, b) = arg.split_once('|').unwrap_or((arg, arg));
                let swapped = nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    a,
                    nix::fcntl::AT_FDCWD,
                    b,
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                );
                match swapped {
                    Ok(()) => println!("exchanged {a} and {b}"),
                    Err(e) => println!("could not exchange {a} and {b}: {e}"),
                }
            }
            "forge-index" => match forge_index::forge(".git/index".as_ref(), arg.as_bytes()) {
                Ok(()) => println!("forged the index without {arg}"),
                Err(e) => {
                    eprintln!("fake agent: cannot forge the index: {e}");
                    exit_code = 1;
                }
            },
            "fanotify-write" => {
                let (path, text) = arg.split_once('|').unwrap_or((arg, ""));
                match fanotify_write(path, text.as_bytes()) {
                    Ok(()) => println!("wrote {path} through fanotify"),
                    Err(e) => {
                        eprintln!("fake agent: cannot write {path} through fanotify: {e}");
                        exit_code = 1;
                    }
                }
            }
            "plan-criteria" => {
                let n: u32 = arg.parse().unwrap_or(3);
                let mut text = std::fs::read_to_string(&task).unwrap_or_default();
                for i in 1..=n {
                    text.push_str(&format!("- [ ] planned criterion {i}\n"));
                }
                let _ = std::fs::write(&task, text);
            }
            // The reviewer's verdict, and a plan outside a planning run, do nothing here.
            "review" | "write-table" => {}
            "garble" => {
                let text = std::fs::read_to_string(&task).unwrap_or_default();
                let _ = std::fs::write(&task, text.replacen("---\n", "---\n: : [unclosed\n", 1));
            }
            other => {
                eprintln!("fake agent: unknown action `{other}`");
                std::process::exit(97);
            }
        }
    }
    let _ = std::io::stdout().flush();
    if hang {
        std::thread::sleep(std::time::Duration::from_secs(300));
    }
    std::process::exit(exit_code);
}

/// The prompt, wherever the argv puts it: `--prompt-file P`, `-p PROMPT` (copilot, claude,
/// gemini), a positional argument (codex, custom templates), else stdin (`-` or nothing).
fn read_prompt(args: &[String]) -> String {
    if let Some(i) = args.iter().position(|a| a == "--prompt-file") {
        return args
            .get(i + 1)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
    }
    if let Some(i) = args.iter().position(|a| a == "-p")
        && let Some(p) = args.get(i + 1).filter(|p| !p.starts_with("--"))
    {
        return p.clone();
    }
    let positional = args
        .iter()
        .filter(|a| !a.starts_with('-') && a.as_str() != "exec")
        .max_by_key(|a| a.len());
    if let Some(p) = positional {
        return p.clone();
    }
    let mut s = String::new();
    let _ = std::io::stdin().read_to_string(&mut s);
    s
}

/// Where `note-term`'s handler notes a SIGTERM, built before the handler is installed.
static TERM_NOTE: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();

extern "C" fn on_term(_: libc::c_int) {
    if let Some(path) = TERM_NOTE.get() {
        // SAFETY: open and close are async-signal-safe; the path is a valid C string.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

/// SIGTERM noted in `term-N.txt` in the log directory, and otherwise ignored.
fn note_term(log: &Option<PathBuf>, iteration: usize) {
    use std::os::unix::ffi::OsStringExt;
    let Some(dir) = log else { return };
    let path = dir.join(format!("term-{iteration}.txt")).into_os_string();
    let _ = TERM_NOTE.set(std::ffi::CString::new(path.into_vec()).expect("a path without NUL"));
    // SAFETY: the handler only calls async-signal-safe functions.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
}

fn record_pid(log: &Option<PathBuf>, iteration: usize, pid: u32) {
    if let Some(dir) = log {
        let path = dir.join(format!("pids-{iteration}.txt"));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("pid log");
        let _ = writeln!(f, "{pid}");
    }
}

/// Replace the first `from` checkbox marker (in a task-list line) with `to`; returns the text.
fn edit_first(task: &str, from: &str, to: &str) -> Option<String> {
    let text = std::fs::read_to_string(task).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut found = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = format!("- {from} ");
        if found.is_none() && trimmed.starts_with(&marker) {
            found = Some(trimmed[marker.len()..].trim().to_string());
            out.push_str(&line.replacen(&format!("- {from}"), &format!("- {to}"), 1));
        } else {
            out.push_str(line);
        }
    }
    std::fs::write(task, out).ok()?;
    found
}

/// Set the Status cell of row `k` of a progress table to DONE.
/// Mark `story` passing in the story file (every story, retitling the others, when `all`).
fn edit_stories(path: &str, story: &str, all: bool) {
    let text = std::fs::read_to_string(path).expect("prd.json");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("prd.json is JSON");
    for s in doc["userStories"]
        .as_array_mut()
        .expect("userStories")
        .iter_mut()
    {
        let id = match &s["id"] {
            serde_json::Value::String(t) => t.clone(),
            other => other.to_string(),
        };
        if id == story {
            s["passes"] = true.into();
            s["notes"] = "done by the fake agent".into();
        } else if all {
            s["passes"] = true.into();
            s["title"] = "Nothing to do".into();
        }
    }
    let out = serde_json::to_string_pretty(&doc).expect("JSON");
    std::fs::write(path, out + "\n").expect("write prd.json");
}

fn set_row_done(path: &str, k: u32) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let out: String = text
        .split_inclusive('\n')
        .map(|line| {
            let cells: Vec<&str> = line.trim_end().split('|').collect();
            if cells.len() >= 5 && cells[1].trim() == k.to_string() {
                let mut cells: Vec<String> = cells.iter().map(|c| c.to_string()).collect();
                cells[3] = " DONE ".into();
                cells[4] = " done by the fake agent ".into();
                format!("{}\n", cells.join("|"))
            } else {
                line.to_string()
            }
        })
        .collect();
    let _ = std::fs::write(path, out);
}

/// Tick the first line that shows a box (`- [ ] x`, `> 1. [ ] x`, …): its text.
fn tick_first(task: &str) -> Option<String> {
    let text = std::fs::read_to_string(task).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut found = None;
    for line in text.split_inclusive('\n') {
        let at = if found.is_none() { box_at(line) } else { None };
        match at {
            Some(at) => {
                found = Some(line[at + 3..].trim().to_string());
                out.push_str(&line[..at]);
                out.push_str("[x]");
                out.push_str(&line[at + 3..]);
            }
            None => out.push_str(line),
        }
    }
    std::fs::write(task, out).ok()?;
    found
}

/// Where the `[ ]` of a line that shows a box starts: after quote markers, spaces and a list
/// marker (`-`, `*`, `+`, `1.`, `1)`), and followed by a space.
fn box_at(line: &str) -> Option<usize> {
    let rest = line.trim_start_matches(['>', ' ', '\t']);
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let after = if digits > 0 {
        rest[digits..].strip_prefix(['.', ')'])?
    } else {
        rest.strip_prefix(['-', '*', '+'])?
    };
    let boxed = after.trim_start_matches([' ', '\t']);
    if after.len() == boxed.len() || !boxed.starts_with("[ ] ") {
        return None;
    }
    Some(line.len() - boxed.len())
}

fn delete_first_unchecked(task: &str) {
    let Ok(text) = std::fs::read_to_string(task) else {
        return;
    };
    let mut done = false;
    let out: String = text
        .split_inclusive('\n')
        .filter(|l| {
            if !done && l.trim_start().starts_with("- [ ] ") {
                done = true;
                false
            } else {
                true
            }
        })
        .collect();
    let _ = std::fs::write(task, out);
}

/// `hop:FILE:N`: a fast fork-and-exit chain of N links outside the agent (every third calls
/// `setsid`), as a process hopping pids to outrun a supervisor's `/proc` walks; the last link
/// ignores SIGTERM and SIGHUP, records `pid pgrp session start` into FILE and sleeps. The agent
/// goes on 200 ms after starting it.
fn hop(arg: &str) {
    let (file, n) = arg.rsplit_once(':').unwrap_or((arg, "20000"));
    let n: u32 = n.parse().unwrap_or(20000);
    let _ = std::io::stdout().flush();
    // SAFETY: the fake agent is single-threaded here; the children only fork, exit, call
    // setsid and signal, and the last one writes a file and sleeps.
    unsafe {
        if libc::fork() != 0 {
            std::thread::sleep(std::time::Duration::from_millis(200));
            return;
        }
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        let mut i = 0;
        while i < n {
            let p = libc::fork();
            if p < 0 {
                libc::usleep(1000);
                continue;
            }
            if p > 0 {
                libc::_exit(0);
            }
            if i % 3 == 0 {
                libc::setsid();
            }
            i += 1;
        }
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let rest: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        let line = format!(
            "{} {} {} {}\n",
            libc::getpid(),
            rest.get(2).unwrap_or(&"0"),
            rest.get(3).unwrap_or(&"0"),
            rest.get(19).unwrap_or(&"0")
        );
        let tmp = format!("{file}.tmp");
        let _ = std::fs::write(&tmp, line);
        let _ = std::fs::rename(&tmp, file);
        libc::sleep(300);
        libc::_exit(0);
    }
}

/// `fanotify-write`: mark PATH for opens, open it once, and write through the descriptor the
/// event carries (opened by fanotify with `FMODE_NONOTIFY`: no inotify event for the write or
/// its close).
fn fanotify_write(path: &str, text: &[u8]) -> std::io::Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let err = std::io::Error::last_os_error;
    let cpath = std::ffi::CString::new(path).map_err(std::io::Error::other)?;
    // SAFETY: plain system calls on descriptors this function owns; the buffer outlives read.
    unsafe {
        let fan = libc::fanotify_init(libc::FAN_CLASS_NOTIF, libc::O_RDWR as libc::c_uint);
        if fan < 0 {
            return Err(err());
        }
        let _fan = OwnedFd::from_raw_fd(fan);
        if libc::fanotify_mark(
            fan,
            libc::FAN_MARK_ADD,
            libc::FAN_OPEN,
            libc::AT_FDCWD,
            cpath.as_ptr(),
        ) < 0
        {
            return Err(err());
        }
        drop(std::fs::File::open(path)?);
        let mut meta: libc::fanotify_event_metadata = std::mem::zeroed();
        let size = std::mem::size_of::<libc::fanotify_event_metadata>();
        if libc::read(fan, (&raw mut meta).cast(), size) < size as isize || meta.fd < 0 {
            return Err(err());
        }
        let fd = OwnedFd::from_raw_fd(meta.fd);
        if libc::pwrite(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            text.as_ptr().cast(),
            text.len(),
            0,
        ) < 0
        {
            return Err(err());
        }
    }
    Ok(())
}
