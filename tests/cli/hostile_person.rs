//! The hostile review of questions, hints and the web view (issue 31, SPEC §16): an agent that
//! answers its own question or leaves itself a "person's" hint, a question file that is a link,
//! a FIFO, a flood or bad bytes, escapes in a question, a question as the task completes or in
//! a run that takes none, `ralph ask` asked again and again, a page of another site, a token in
//! a query, a flood of a body, a loop name that walks out, and two people answering at once.
//! Each attack runs against real processes, repositories and files, beside its control: the
//! honest case working, or the attack working where the protection is absent.
//!
//! Out of scope, written down: an agent without `--sandbox` runs as the user, and can do all
//! the user can — read `serve.token`, write the desk (the control of the first test shows it).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::*;
use crate::sandbox::run_script;
use crate::serve::{Server, files_under, request, state_home};

/// The agent's peek: iteration by iteration, what of ralph's state directory it can read (the
/// server's token) and whether it can leave itself a "person's" hint on its desk; then a box.
const PEEK: &str = r#"st="$HOME/.local/state/ralph"
{ echo "iteration $RALPH_ITERATION"; find "$st" -type f -name serve.token -exec cat {} \; ; } >> seen.txt 2>&1
for d in $(find "$st" -type d -name person 2>/dev/null); do
  mkdir -p "$d/hints" 2>/dev/null && printf '{"text":"forged by the agent","at":"t"}' > "$d/hints/0-forged.json" 2>/dev/null && echo "forged in $d" >> seen.txt
done
sed -i '0,/- \[ \]/s//- [x]/' "$RALPH_TASK_FILE"
"#;

/// The prompt ralph saved for iteration `n` (the newest run's).
fn saved_prompt(env: &TestEnv, n: u32) -> String {
    let name = format!("iter-{n:03}.prompt.md");
    files_under(&env.repo.join(".ralph/runs"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|f| f == name.as_str()))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap_or_default()
}

fn stop(s: Server) {
    s.bg.signal(libc::SIGTERM);
    let (code, _, err) = s.bg.wait(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains(&s.token), "the token on the server's stderr");
}

/// Attack 1: under `--sandbox` the agent reads `ralph serve`'s token (with which it could
/// `POST /api/loops/main/answer` on loopback and answer itself) and writes its desk. Broke
/// before: the home is bound read-only, so the token was readable. Now ralph's whole state
/// directory is an empty read-only tmpfs in the sandbox. Control: without the sandbox (out of
/// scope: the agent is the user) it reads the token and its forged hint reaches its prompt.
#[test]
fn a_sandboxed_agent_sees_neither_the_serve_token_nor_the_desk() {
    if !bwrap_works() {
        return;
    }
    for sandboxed in [true, false] {
        let env = TestEnv::outside_tmp();
        env.write_task(&["a", "b"], "");
        env.commit_all("initial");
        let s = Server::start(&env, &[], &[]);
        // A person's hint makes the loop's desk.
        assert_exit(&env.ralph(&["hint", "main", "use postgres"]), 0);
        let script = env.dir().join("peek.sh");
        std::fs::write(&script, PEEK).unwrap();
        let args: &[&str] = if sandboxed { &["--sandbox"] } else { &[] };
        let out = run_script(&env, &script, args, &[]);
        assert_exit(&out, 0);
        let seen = env.read("seen.txt");
        assert!(seen.contains("iteration 2"), "{seen}");
        let second = saved_prompt(&env, 2);
        assert!(
            saved_prompt(&env, 1).contains("use postgres"),
            "the real hint"
        );
        if sandboxed {
            assert!(!seen.contains(&s.token), "the token in the sandbox: {seen}");
            assert!(!seen.contains("forged"), "{seen}");
            assert!(!second.contains("forged by the agent"), "{second}");
        } else {
            assert!(seen.contains(&s.token), "control: {seen}");
            assert!(second.contains("forged by the agent"), "control: {second}");
        }
        stop(s);
    }
}

/// A `sh` agent script beside the repository: in iteration 1 `first`, then in every iteration
/// the first unchecked box checked (unless `check` is false).
fn agent(env: &TestEnv, name: &str, first: &str, check: bool) -> PathBuf {
    let path = env.dir().join(format!("{name}.sh"));
    let tick = if check {
        "sed -i '0,/- \\[ \\]/s//- [x]/' \"$RALPH_TASK_FILE\"\n"
    } else {
        ""
    };
    let body = format!("if [ \"$RALPH_ITERATION\" = 1 ]; then\n{first}\nfi\n{tick}");
    std::fs::write(&path, body).unwrap();
    path
}

fn setup(criteria: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_task(criteria, "");
    env.commit_all("initial");
    env
}

fn said(o: &Output) -> String {
    format!("{}\n{}", stdout(o), stderr(o))
}

/// Attack 2: `.ralph/question.md` as a link to a secret outside the repository, a FIFO (ralph
/// must never wait on it), a 50 MB file, invalid UTF-8. Held: the door refuses each (warned),
/// removes it, and the run goes on to completion; the secret is nowhere. Control: a plain
/// question makes the loop wait for a person (exit 12 with `--answer-timeout 1s`).
#[test]
fn the_question_door_refuses_links_fifos_floods_and_bad_bytes() {
    let cases = [
        ("plain", "printf 'Which DB?' > .ralph/question.md"),
        ("link", "ln -s \"$HOME/id_rsa\" .ralph/question.md"),
        ("fifo", "mkfifo .ralph/question.md"),
        (
            "flood",
            "head -c 52428800 /dev/zero | tr '\\0' q > .ralph/question.md",
        ),
        (
            "bytes",
            "printf 'Which \\377\\376 DB?' > .ralph/question.md",
        ),
    ];
    for (kind, first) in cases {
        let env = setup(&["a", "b"]);
        std::fs::write(env.home.join("id_rsa"), "PRIVATE KEY 42").unwrap();
        let script = agent(&env, kind, first, true);
        let out = run_script(&env, &script, &["--answer-timeout", "1s"], &[]);
        let all = format!("{}\n{}", said(&out), env.activity());
        assert!(
            std::fs::symlink_metadata(env.repo.join(".ralph/question.md")).is_err(),
            "{kind}: the question file is taken away"
        );
        if kind == "plain" {
            assert_exit(&out, 12);
            assert!(all.contains("Which DB?"), "{all}");
            continue;
        }
        assert_exit(&out, 0);
        assert!(
            stderr(&out).contains("the agent's question is not read"),
            "{kind}: {}",
            stderr(&out)
        );
        assert!(!all.contains("PRIVATE KEY"), "{kind}: {all}");
        assert!(status_json(&env)["question"].is_null(), "{kind}");
    }
}

/// Attack 2: a question holding terminal escapes (OSC 52 sets the clipboard, `ESC[2K` erases a
/// line). Held: shown escaped on the terminal (the run's output, `ralph status`), kept as text
/// in the JSON (`status --json` gives the very characters). Control: the JSON holds them raw,
/// so the escaping is the printer's doing, not a loss.
#[test]
fn escapes_in_a_question_are_shown_escaped_and_kept_as_text() {
    let env = setup(&["a", "b"]);
    let first = "printf 'Which DB\\033]52;c;ZXZpbA==\\007 now\\033[2K?' > .ralph/question.md";
    let script = agent(&env, "escapes", first, false);
    let out = run_script(&env, &script, &["--answer-timeout", "1s"], &[]);
    assert_exit(&out, 12);
    let status = env.ralph(&["status"]);
    for text in [said(&out), said(&status)] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("Which DB\\u{1b}]52;c;ZXZpbA=="), "{text}");
    }
    let q = status_json(&env)["question"].clone();
    let text = q["text"].as_str().or(q.as_str()).unwrap_or_default();
    assert_eq!(
        text, "Which DB\u{1b}]52;c;ZXZpbA==\u{7} now\u{1b}[2K?",
        "{q}"
    );
}

/// Attack 3: a question asked in the iteration that completes the task. The run completes
/// (exit 0), and the question goes with it: no completed loop shows "waiting for a person",
/// and an answer to it is refused. Control: the same question in an iteration that does not
/// complete leaves the loop waiting (exit 12), and then an answer is taken.
#[test]
fn a_question_asked_as_the_task_completes_goes_with_the_run() {
    for completes in [true, false] {
        let env = setup(if completes { &["a"] } else { &["a", "b"] });
        let first = "printf 'Which DB?' > .ralph/question.md";
        let script = agent(&env, "asks", first, true);
        let out = run_script(&env, &script, &["--answer-timeout", "1s"], &[]);
        let answer = env.ralph(&["answer", "main", "postgres"]);
        if completes {
            assert_exit(&out, 0);
            assert!(
                status_json(&env)["question"].is_null(),
                "{}",
                status_json(&env)
            );
            assert!(env.activity().contains("closed unanswered: Which DB?"));
            assert_exit(&answer, 1);
            assert!(
                stderr(&answer).contains("no question is open"),
                "{}",
                stderr(&answer)
            );
        } else {
            assert_exit(&out, 12);
            assert_exit(&answer, 0);
        }
    }
}

/// Attack 3: under `--no-questions` `ralph ask` refuses, and a question written by hand is
/// dropped (said in the activity log) while the run goes on to completion. Control: the same
/// agent in a run that takes questions makes the loop wait (exit 12).
#[test]
fn no_questions_drops_a_question_and_the_run_goes_on() {
    let ralph = env!("CARGO_BIN_EXE_ralph");
    for refused in [true, false] {
        let env = setup(&["a", "b"]);
        let first = format!(
            "'{ralph}' ask 'Which DB?' 2> ask-err.txt; echo $? > ask-exit.txt\nprintf 'By hand?' >> .ralph/question.md"
        );
        let script = agent(&env, "noq", &first, true);
        let mut args = vec!["--answer-timeout", "1s"];
        if refused {
            args.push("--no-questions");
        }
        let out = run_script(&env, &script, &args, &[]);
        if refused {
            assert_exit(&out, 0);
            assert_ne!(env.read("ask-exit.txt").trim(), "0");
            assert!(env.read("ask-err.txt").contains("takes no questions"));
            let log = env.activity();
            assert!(
                log.contains("this run takes none (--no-questions): By hand?"),
                "{log}"
            );
        } else {
            assert_exit(&out, 12);
            assert_eq!(env.read("ask-exit.txt").trim(), "0");
            assert!(said(&out).contains("Which DB?"), "{}", said(&out));
        }
    }
}

/// `ralph ask` as an agent runs it, its question file at `file`.
fn ask(env: &TestEnv, file: &Path, question: &str) -> Output {
    let mut cmd = env.ralph_cmd();
    cmd.args(["ask", question]).env("RALPH_QUESTION_FILE", file);
    run_with_limit(cmd, Duration::from_secs(10))
}

/// Attack 3: `ralph ask` again and again (or one huge question). Broke before: every ask
/// appended, so the file grew past what ralph reads (1 MiB) and the whole question was lost.
/// Now what is asked in one iteration stays within what a person reads (4000 characters):
/// an ask beyond it is refused, what was asked kept. A FIFO as the file is refused, not waited
/// on. Control: the first questions are kept, in order.
#[test]
fn ralph_ask_stays_bounded_however_often_it_is_asked() {
    let env = setup(&["a"]);
    let file = env.dir().join("question.md");
    assert_exit(&ask(&env, &file, "Which DB?"), 0);
    let long = "x".repeat(3000);
    assert_exit(&ask(&env, &file, &long), 0);
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(kept.starts_with("Which DB?\n\nxxx"), "{kept}");
    let refused = ask(&env, &file, &long);
    assert_exit(&refused, 1);
    assert!(
        stderr(&refused).contains("at most 4000"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        kept,
        "kept as it was"
    );
    let huge = "y".repeat(120_000);
    assert_exit(&ask(&env, &file, &huge), 1);
    for _ in 0..20 {
        let _ = ask(&env, &file, &"z".repeat(100));
    }
    let len = std::fs::metadata(&file).unwrap().len();
    assert!(len <= 4001, "{len} bytes");
    let fifo = env.dir().join("fifo.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let out = ask(&env, &fifo, "Which DB?");
    assert_exit(&out, 1);
}

/// A run whose agent asked `Which DB?` in iteration 1 and then waited no more than a second:
/// exit 12, the question open on the desk. The fake agent records its prompts.
fn open_question(env: &TestEnv) -> [(&'static str, String); 2] {
    let asks = env.dir().join("asks.sh");
    std::fs::write(&asks, "printf 'Which DB?' > .ralph/question.md\n").unwrap();
    let vars = [
        ("RALPH_AGENT_CMD", format!("'{}'", fake_agent().display())),
        ("FAKE_AGENT_SCRIPT", format!("sh:{},check", asks.display())),
    ];
    let out = env.ralph_with_limit(
        &["run", "--yes", "--answer-timeout", "1s"],
        &vars
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
        Duration::from_secs(60),
    );
    assert_exit(&out, 12);
    vars
}

/// The answers on the desks of ralph's state directory.
fn answers(env: &TestEnv) -> Vec<PathBuf> {
    files_under(&state_home(env))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "answer.json"))
        .collect()
}

/// Attack 4: a page of another site (an `Origin` or a `Sec-Fetch-Site` that says so — a page
/// on another port of localhost is the same site, and the SameSite cookie goes with it), a
/// token in the query string, an event stream without the token, a body over 64 KiB, loop
/// names that walk out of the loops or carry odd bytes. Broke before: a POST saying
/// `Sec-Fetch-Site: cross-site` (no `Origin`) answered the question. Held: all the rest. No
/// answer lands, no file appears. Control: the same POST as the page sends it lands.
#[test]
fn the_web_view_refuses_other_sites_queries_floods_and_stray_names() {
    let env = setup(&["a", "b"]);
    open_question(&env);
    let s = Server::start(&env, &[], &[]);
    let (host, auth) = (s.host(), s.bearer());
    let body = r#"{"text":"postgres"}"#;
    let post = |path: &str, extra: &[(&str, &str)], body: &str| {
        let mut h = vec![("Host", host.as_str()), ("Authorization", auth.as_str())];
        h.extend_from_slice(extra);
        request(s.port, "POST", path, &h, body)
    };
    let before = files_under(env.dir());
    let answer = "/api/loops/main/answer";
    assert_eq!(
        post(answer, &[("Origin", "http://evil.example")], body).status,
        403
    );
    let other_port = format!("http://localhost:{}", s.port + 1);
    assert_eq!(post(answer, &[("Origin", &other_port)], body).status, 403);
    for site in ["cross-site", "same-site"] {
        let r = post(answer, &[("Sec-Fetch-Site", site)], body);
        assert_eq!(r.status, 403, "{site}: {}", r.body);
    }
    // The token in a query string is no token.
    let q = format!("/api/loops?token={}", s.token);
    assert_eq!(
        request(s.port, "GET", &q, &[("Host", &host)], "").status,
        401
    );
    let q = format!("{answer}?token={}", s.token);
    assert_eq!(
        request(s.port, "POST", &q, &[("Host", &host)], body).status,
        401
    );
    // The event stream wants the token.
    let ev = request(s.port, "GET", "/api/events", &[("Host", &host)], "");
    assert_eq!(ev.status, 401);
    // A flood of a body: 413 before anything is read into the desk; one over what a prompt
    // takes: refused too.
    let flood = format!(r#"{{"text":"{}"}}"#, "x".repeat(70 * 1024));
    assert_eq!(post(answer, &[], &flood).status, 413);
    let long = format!(r#"{{"text":"{}"}}"#, "x".repeat(20 * 1024));
    assert_eq!(post(answer, &[], &long).status, 409);
    // Names that walk out, or carry odd bytes.
    for name in [
        "..",
        "..%2F..%2Fescape",
        "%2e%2e%2f%2e%2e%2fescape",
        "main%00",
        "%ff",
        "main%2F..%2Fmain",
    ] {
        for action in ["answer", "hint"] {
            let r = post(&format!("/api/loops/{name}/{action}"), &[], body);
            assert!(
                matches!(r.status, 400 | 404),
                "{name}/{action}: {} {}",
                r.status,
                r.body
            );
        }
    }
    assert!(answers(&env).is_empty(), "no answer landed");
    assert_eq!(files_under(env.dir()), before, "no file appeared or went");
    // The cookie the page gets: HttpOnly, SameSite=Strict.
    let session = post("/api/session", &[("Sec-Fetch-Site", "same-origin")], "");
    assert_eq!(session.status, 200);
    assert!(
        session.headers.contains("httponly; samesite=strict"),
        "{}",
        session.headers
    );
    // Control: the page's own POST lands.
    let own = format!("http://{host}");
    let r = post(
        answer,
        &[("Origin", &own), ("Sec-Fetch-Site", "same-origin")],
        body,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(answers(&env).len(), 1);
    stop(s);
}

/// Attack 5: six people answer at once. Broke before: every `ralph answer` said "Answered" and
/// the last rename won, so five were told their answer would go on when it would not. Now the
/// first answer stands, whole, and the others are told it is answered already; the next
/// prompt carries that one answer, whole. Control: the answer given is the one the prompt has.
#[test]
fn two_answers_at_once_one_lands_whole_and_the_prompt_carries_it() {
    let env = setup(&["a", "b"]);
    let vars = open_question(&env);
    let letters = ["A", "B", "C", "D", "E", "F"];
    let runs: Vec<Background> = letters
        .iter()
        .map(|l| {
            let mut cmd = env.ralph_cmd();
            cmd.args(["answer", "main", &l.repeat(6000)]);
            env.spawn(cmd)
        })
        .collect();
    let codes: Vec<(Option<i32>, String)> = runs
        .into_iter()
        .map(|r| {
            let (code, _, err) = r.wait(Duration::from_secs(20));
            (code, err)
        })
        .collect();
    let won: Vec<usize> = (0..codes.len())
        .filter(|i| codes[*i].0 == Some(0))
        .collect();
    assert_eq!(won.len(), 1, "{codes:?}");
    for (i, (code, err)) in codes.iter().enumerate() {
        if i != won[0] {
            assert_eq!(*code, Some(1), "{err}");
            assert!(err.contains("answered already"), "{err}");
        }
    }
    let winner = letters[won[0]].repeat(6000);
    let resumed = env.ralph_with_limit(
        &["resume", "--yes"],
        &vars
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<Vec<_>>(),
        Duration::from_secs(60),
    );
    assert_exit(&resumed, 0);
    let prompt = env.agent_prompt(2);
    assert_eq!(
        prompt.matches("A person answered your question:").count(),
        1,
        "{prompt}"
    );
    assert!(prompt.contains(&format!("A person answered your question: {winner}\n")));
    for (i, l) in letters.iter().enumerate() {
        if i != won[0] {
            assert!(!prompt.contains(&l.repeat(50)), "{l} in the prompt");
        }
    }
}
