//! The prompt of one iteration, after the copilot skill's template: the files to read, the one
//! criterion to work on, the test command, and the STUCK ALERT when the loop says so.

use std::fmt::Write;

/// Everything a checklist prompt is built from.
#[derive(Debug, Clone)]
pub(crate) struct PromptInput<'a> {
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    /// The task file as the agent should open it (relative to the repository root).
    pub(crate) task_file: &'a str,
    pub(crate) next_criterion: Option<&'a str>,
    pub(crate) done: usize,
    pub(crate) total: usize,
    pub(crate) test_command: Option<&'a str>,
    pub(crate) stuck_alert: bool,
    pub(crate) stuck_streak: u32,
    pub(crate) completion_promise: Option<&'a str>,
    /// What the last iteration's checks said (failing tests, a refused commit).
    pub(crate) feedback: Option<&'a str>,
}

pub(crate) const STUCK_ALERT: &str = "STUCK ALERT";

pub(crate) fn checklist_prompt(p: &PromptInput<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "You are iteration {} of {} of a RALPH loop: an autonomous development agent started \
         with a fresh context. Your job is to make progress on exactly ONE success criterion.",
        p.iteration, p.max_iterations
    );
    let _ = writeln!(
        s,
        "Progress so far: {}/{} criteria checked. Everything you know about earlier iterations \
         is in the files below and in git.\n",
        p.done, p.total
    );
    s.push_str("== INSTRUCTIONS (follow in order) ==\n\n");
    let mut steps: Vec<String> = vec![
        "Read .ralph/guardrails.md and follow ALL Signs listed there.".into(),
        format!("Read {}: it is your task, with its success criteria.", p.task_file),
        "Read .ralph/progress.md to see what previous iterations accomplished.".into(),
        match p.next_criterion {
            Some(c) => format!(
                "Identify the next unchecked criterion (- [ ]) in {}. It is probably: \"{c}\"",
                p.task_file
            ),
            None => format!("Identify the next unchecked criterion (- [ ]) in {}.", p.task_file),
        },
        "Work on that ONE criterion. Do it thoroughly: quality over speed.".into(),
        format!(
            "When it is done and verified, check it in {}: change \"- [ ]\" to \"- [x]\" for that item only.",
            p.task_file
        ),
        "Update .ralph/progress.md under \"## Iteration Log\" with what you accomplished (leave the \"## Current Status\" block to the supervisor).".into(),
        "If you discover an important gotcha or pattern, add a Sign to .ralph/guardrails.md.".into(),
    ];
    if let Some(cmd) = p.test_command {
        steps.push(format!("Run: {cmd} and fix any failures before finishing."));
    }
    steps.push(
        "Finish. The supervisor commits your changes after you exit; you may commit yourself, but never push."
            .into(),
    );
    for (i, step) in steps.iter().enumerate() {
        let _ = writeln!(s, "{}. {step}", i + 1);
    }
    s.push_str("\n== RULES ==\n\n");
    s.push_str("- Focus on ONE criterion. Do not attempt to complete several.\n");
    s.push_str(
        "- Check a box only when the criterion is really met: the supervisor verifies the task file, the tests and git, not your words.\n",
    );
    s.push_str(
        "- Never delete or reword an unchecked criterion; you may split one into smaller new criteria.\n",
    );
    s.push_str(
        "- If a criterion is blocked by something outside your control, note it in .ralph/progress.md and move to the next unchecked item.\n",
    );
    s.push_str("- Do NOT modify files under .ralph/ other than progress.md and guardrails.md.\n");
    s.push_str("- If you break something, fix it before finishing.\n");
    if let Some(word) = p.completion_promise {
        let _ = writeln!(
            s,
            "- When every criterion is checked and verified, end your final message with <promise>{word}</promise> on its own line."
        );
    }
    if p.stuck_alert {
        let _ = writeln!(
            s,
            "- ⚠️ {STUCK_ALERT}: the last {} iterations made no progress on the criteria.\n  \
             Try a COMPLETELY DIFFERENT approach. Re-read the codebase. Consider whether the\n  \
             criterion needs to be broken into smaller criteria (add them as new - [ ] items).",
            p.stuck_streak
        );
    }
    if let Some(f) = p.feedback {
        s.push_str(&super::source::feedback_section(f));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> PromptInput<'static> {
        PromptInput {
            iteration: 4,
            max_iterations: 10,
            task_file: "RALPH_TASK.md",
            next_criterion: Some("GET /health returns 200"),
            done: 1,
            total: 3,
            test_command: Some("cargo test"),
            stuck_alert: false,
            stuck_streak: 0,
            completion_promise: None,
            feedback: None,
        }
    }

    #[test]
    fn names_iteration_files_criterion_and_test_command() {
        let p = checklist_prompt(&input());
        assert!(p.starts_with("You are iteration 4 of 10 of a RALPH loop"));
        for needle in [
            ".ralph/guardrails.md",
            "Read RALPH_TASK.md",
            ".ralph/progress.md",
            "\"GET /health returns 200\"",
            "Run: cargo test",
            "1/3 criteria",
        ] {
            assert!(p.contains(needle), "missing {needle:?} in\n{p}");
        }
        assert!(!p.contains(STUCK_ALERT));
        assert!(!p.contains("<promise>"));
    }

    #[test]
    fn stuck_alert_and_promise_only_when_asked() {
        let mut i = input();
        i.stuck_alert = true;
        i.stuck_streak = 3;
        i.completion_promise = Some("DONE");
        i.test_command = None;
        let p = checklist_prompt(&i);
        assert!(p.contains("STUCK ALERT: the last 3 iterations"));
        assert!(p.contains("<promise>DONE</promise>"));
        assert!(!p.contains("Run: "));
        assert!(!p.contains("CHECKS SAID"));
        i.feedback = Some("Tests failed (exit 1): make test\nFAIL: test_login");
        let p = checklist_prompt(&i);
        assert!(
            p.contains("CHECKS SAID") && p.contains("FAIL: test_login"),
            "{p}"
        );
    }
}
