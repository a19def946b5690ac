//! The prompts of this mode: one task per iteration, the reviewer's run, and reading the
//! reviewer's `REVIEW: PASS` / `REVIEW: FAIL reason` verdict.

use super::{MAX_ATTEMPTS, Prd, one_line, strip_prefix_ci};

/// The task's heading, body and criteria as prompt text (or a note that it is missing).
fn task_block(prd: &Prd, k: u32) -> String {
    let Some(task) = prd.tasks.iter().find(|t| t.number == k) else {
        return format!("Task {k} is not in the PRD; read it from the plan file.\n");
    };
    let mut s = format!("### Task {k}: {}\n\n", task.title);
    if !task.body.is_empty() {
        s.push_str(&task.body);
        s.push_str("\n\n");
    }
    s.push_str("Acceptance criteria:\n");
    for c in &task.criteria {
        s.push_str(&format!("- {c}\n"));
    }
    s
}

/// Where the run stands: the iteration's number, the run's cap and the test command it will run.
pub(crate) struct Turn<'a> {
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) test_command: Option<&'a str>,
}

/// The PRD's and the progress table's paths as the prompt names them.
pub(crate) struct Files<'a> {
    pub(crate) prd: &'a str,
    pub(crate) progress: &'a str,
}

/// The prompt for one iteration working task `k` (and no other). `attempt` is 1-based; on a retry
/// the prompt points the agent at the Notes left by the previous attempt.
pub(crate) fn task_prompt(
    prd: &Prd,
    k: u32,
    attempt: u32,
    turn: &Turn<'_>,
    files: &Files<'_>,
) -> String {
    let Turn {
        iteration,
        max_iterations,
        test_command,
    } = *turn;
    let (prd_file, progress_file) = (files.prd, files.progress);
    let title = prd
        .tasks
        .iter()
        .find(|t| t.number == k)
        .map_or("", |t| t.title.as_str());
    let mut s = format!("# Ralph iteration {iteration}/{max_iterations}: task {k}");
    if !title.is_empty() {
        s.push_str(&format!(" — {title}"));
    }
    s.push_str("\n\n");
    s.push_str(
        "You are a Ralph executor working a single task with fresh context: you remember nothing \
         of earlier iterations. All state is in the files (the PRD, the progress table, the code, \
         git history).\n\n",
    );
    s.push_str(&format!("Attempt {attempt}/{MAX_ATTEMPTS} at this task."));
    if attempt > 1 {
        s.push_str(&format!(
            " Attempt {} did not finish it: read the Notes cell of row {k} in {progress_file} \
             for what went wrong, and `git log` for what was already done, before you start.",
            attempt - 1
        ));
    }
    s.push_str("\n\n## Goal\n\n");
    s.push_str(prd.goal.trim());
    s.push_str("\n\n## Your task\n\n");
    s.push_str(&task_block(prd, k));
    s.push_str("\n## Instructions\n\n");
    s.push_str(&format!(
        "1. Read {prd_file} and {progress_file} for context. Work on task {k} only.\n\
         2. Implement it: write the code and the tests it needs.\n"
    ));
    match test_command {
        Some(cmd) if !cmd.trim().is_empty() => s.push_str(&format!(
            "3. Verify every acceptance criterion above; run `{}` and make it pass.\n",
            cmd.trim()
        )),
        _ => {
            s.push_str("3. Verify every acceptance criterion above, and run the project's tests.\n")
        }
    }
    s.push_str(&format!(
        "4. When all its criteria are met and verified, set the Status cell of row {k} in \
         {progress_file} to `DONE` and put a short note in its Notes cell.\n\
         5. If you cannot finish, leave row {k}'s Status as it is and write what blocked you in \
         its Notes cell.\n\
         6. Do not change other rows, the `## Status:` line, or {prd_file}.\n\
         7. Do not commit: ralph commits your work after this iteration.\n"
    ));
    s
}

/// The prompt for the fresh agent run that reviews task `k` after it was marked `DONE`.
pub(crate) fn review_prompt(prd: &Prd, k: u32, test_command: Option<&str>) -> String {
    let mut s = format!("# Ralph review: task {k}\n\n");
    s.push_str(
        "You are a Ralph reviewer with fresh context. Another agent marked the task below done. \
         Check its work; do not change any files.\n\n## Goal\n\n",
    );
    s.push_str(prd.goal.trim());
    s.push_str("\n\n## Task under review\n\n");
    s.push_str(&task_block(prd, k));
    s.push_str("\n## Check\n\n1. The project builds (and lints clean, if it has a linter).\n");
    match test_command {
        Some(cmd) if !cmd.trim().is_empty() => {
            s.push_str(&format!("2. The tests pass: run `{}`.\n", cmd.trim()));
        }
        _ => s.push_str("2. The project's tests pass, and the task's work is tested.\n"),
    }
    s.push_str(
        "3. Each acceptance criterion above is met by the code as it is now (see `git log` and \
         `git show` for the task's changes).\n\n\
         The last line of your reply must be the verdict: the words `REVIEW: PASS` when all \
         checks hold, or else `REVIEW: FAIL` followed by a one-line reason.\n",
    );
    s
}

/// The verdict of a review run: the last line reading `REVIEW: PASS` (`Some(Ok(()))`) or
/// `REVIEW: FAIL reason` (`Some(Err(reason))`). Case-insensitive; surrounding `*`, `` ` ``, `>`
/// and whitespace are ignored. `None` when no such line exists.
pub(crate) fn parse_review(output: &str) -> Option<Result<(), String>> {
    output.lines().rev().find_map(|line| {
        let t = line
            .trim()
            .trim_start_matches(['*', '`', '>', '#', '_', ' ', '\t']);
        let rest = strip_prefix_ci(t, "review")?.trim_start_matches(['*', '_', ' ', '\t']);
        let rest = rest.strip_prefix(':')?;
        let rest = rest.trim().trim_matches(['*', '`', '_']).trim();
        let word_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (word, tail) = rest.split_at(word_len);
        match word.to_ascii_uppercase().as_str() {
            "PASS" | "PASSED" => Some(Ok(())),
            "FAIL" | "FAILED" => {
                let reason = one_line(tail.trim_start_matches([':', '-', '—', '–', ' ', '\t']));
                Some(Err(if reason.is_empty() {
                    "no reason given".to_string()
                } else {
                    reason
                }))
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::table::fixtures::*;

    const FILES: Files<'static> = Files {
        prd: "PRD.md",
        progress: "PROGRESS.md",
    };

    #[test]
    fn parses_review_verdicts() {
        assert_eq!(parse_review("work...\nREVIEW: PASS\n"), Some(Ok(())));
        assert_eq!(
            parse_review("REVIEW: PASS\nREVIEW: FAIL tests fail\n"),
            Some(Err("tests fail".into()))
        );
        assert_eq!(
            parse_review("REVIEW: FAIL x\n**Review: pass**\n"),
            Some(Ok(()))
        );
        assert_eq!(
            parse_review("`REVIEW: FAIL — no tests`\r\n"),
            Some(Err("no tests".into()))
        );
        assert_eq!(
            parse_review("REVIEW: FAIL\n"),
            Some(Err("no reason given".into()))
        );
        assert_eq!(parse_review("REVIEW: maybe\nthe REVIEW: PASS line\n"), None);
        let prd = read_prd(PRD).unwrap();
        assert_eq!(
            parse_review(&review_prompt(&prd, 1, Some("cargo test"))),
            None,
            "the prompt holds no verdict line"
        );
    }

    #[test]
    fn prompts_name_only_their_task() {
        let prd = read_prd(PRD).unwrap();
        let turn = Turn {
            iteration: 5,
            max_iterations: 50,
            test_command: Some("cargo test"),
        };
        let s = task_prompt(&prd, 2, 2, &turn, &FILES);
        assert!(
            s.contains("Sessions") && s.contains("sessions persist") && s.contains("`cargo test`")
        );
        assert!(
            s.contains("iteration 5/50")
                && s.contains("Attempt 2/3")
                && s.contains("Attempt 1 did not finish")
        );
        assert!(s.contains("row 2") && s.contains("`DONE`") && s.contains("Do not commit"));
        for other in [
            "OAuth flow",
            "redirect works",
            "Docs",
            "README explains",
            "Task 1",
            "Task 3",
        ] {
            assert!(!s.contains(other), "prompt mentions {other}");
        }
        let turn = Turn {
            iteration: 1,
            max_iterations: 50,
            test_command: None,
        };
        let first = task_prompt(&prd, 1, 1, &turn, &FILES);
        assert!(!first.contains("did not finish") && first.contains("redirect works"));
        let r = review_prompt(&prd, 3, None);
        assert!(
            r.contains("README explains setup")
                && !r.contains("OAuth flow")
                && r.contains("REVIEW: FAIL")
        );
    }
}
