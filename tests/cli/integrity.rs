//! Never fooled (SPEC §3.1 integrity, §3.2 table ownership): an agent that deletes, hides or
//! replaces the criteria, or finishes other tasks' rows, never makes a run look complete; an
//! agent that works honestly (annotations, NFD text) is never called a cheat.

use std::time::Duration;

use crate::common::*;

/// A task file with frontmatter, a title and these raw criteria lines.
fn task_text(lines: &[&str]) -> String {
    let mut s = String::from(
        "---\ntask: Test task\n---\n# Task: Test task\n\nDo it.\n\n## Success Criteria\n",
    );
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn checklist(lines: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write("RALPH_TASK.md", &task_text(lines));
    env.write("README.md", "project\n");
    env.commit_all("initial");
    env
}

/// Every output the user sees, both streams.
fn said(out: &std::process::Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

/// The files in HEAD's tree.
fn head_files(env: &TestEnv) -> String {
    env.git(&["ls-tree", "-r", "--name-only", "HEAD"])
}

/// The halt reason `status --json` reports. A task file the agent left unreadable (emptied, a
/// FIFO, a directory) is also reported as refused, and `status` then exits 1 (SPEC §3.1).
#[track_caller]
fn assert_halt_reason(env: &TestEnv, reason: &str) {
    let out = env.ralph(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["halt_reason"], reason, "status --json: {v}");
    let refused = !v["refused"].is_null();
    assert_eq!(out.status.code(), Some(if refused { 1 } else { 0 }), "{v}");
}

// --- Checklist integrity (SPEC §3.1) ---

/// Promise: criteria with the same text are distinct; deleting one of two identical criteria
/// deletes a criterion (ralph assumes the unchecked one went), so the run halts tampered (exit 8)
/// naming it. Bug caught: the twin's text was still "present" (the checked twin), so deleting the
/// unchecked twin and checking `other` ended the run "complete", exit 0.
#[test]
fn deleting_the_unchecked_twin_of_a_checked_criterion_is_tampering() {
    let env = checklist(&[
        "- [x] the cache is warmed",
        "- [ ] the cache is warmed",
        "- [ ] the logs rotate",
    ]);
    let script = agent_sh(
        &env,
        "twins",
        "sed -i -e '/^- \\[ \\] the cache is warmed$/d' -e 's/^- \\[ \\] the logs rotate$/- [x] the logs rotate/' RALPH_TASK.md\n\
         mkdir -p work && echo rotated > work/logs.txt",
    );
    let out = env.run_fake(&script, &[]);
    assert_exit(&out, 8);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    assert!(
        said(&out).contains("the cache is warmed"),
        "the tampered criterion is named:\n{}",
        said(&out)
    );
    assert_halt_reason(&env, "tampered");
    assert!(
        head_files(&env).contains("work/logs.txt"),
        "the work is committed"
    );
}

/// Control for the twins: an honest agent that checks the unchecked twin and then `other`
/// completes (exit 0). Holds today.
#[test]
fn checking_both_twins_honestly_completes() {
    let env = checklist(&[
        "- [x] the cache is warmed",
        "- [ ] the cache is warmed",
        "- [ ] the logs rotate",
    ]);
    let out = env.run_fake("check", &[]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
}

/// Promise: an agent that deletes every unchecked criterion has tampered (exit 8, the criteria
/// named), it is not the user's mistake. Bug caught: the emptied list was reported as
/// "no criteria: needs `- [ ]` checkboxes" (exit 1), blaming the user's task file.
#[test]
fn deleting_every_unchecked_criterion_is_tampering_not_a_user_error() {
    let env = checklist(&["- [ ] alpha works", "- [ ] beta works", "- [ ] gamma works"]);
    let script = agent_sh(
        &env,
        "delete-all",
        "sed -i '/^- \\[ \\]/d' RALPH_TASK.md\nmkdir -p work && echo x > work/x.txt",
    );
    let out = env.run_fake(&script, &[]);
    assert_exit(&out, 8);
    let all = said(&out);
    for c in ["alpha works", "beta works", "gamma works"] {
        assert!(all.contains(c), "{c:?} is named:\n{all}");
    }
    assert_halt_reason(&env, "tampered");
    assert!(head_files(&env).contains("work/x.txt"));
}

/// Control: the same deletion with one checked criterion left is tampering too (holds today;
/// the fix for the empty list must not lose it).
#[test]
fn deleting_every_unchecked_criterion_beside_a_checked_one_is_tampering() {
    let env = checklist(&["- [x] alpha works", "- [ ] beta works", "- [ ] gamma works"]);
    let script = agent_sh(&env, "delete-rest", "sed -i '/^- \\[ \\]/d' RALPH_TASK.md");
    let out = env.run_fake(&script, &[]);
    assert_exit(&out, 8);
    assert!(said(&out).contains("beta works") && said(&out).contains("gamma works"));
}

/// The agent writes `work/other.txt` (its other work), then does `replace` to the task file.
/// Promise (SPEC §3.1, §5.1): exit 8 tampered in that iteration, no hang, the other work
/// committed.
#[track_caller]
fn replacing_the_task_file_is_tampering(replace: &str) {
    let env = checklist(&["- [ ] first criterion", "- [ ] second criterion"]);
    let script = agent_sh(
        &env,
        "replace",
        &format!("mkdir -p work && echo other > work/other.txt\n{replace}"),
    );
    let out = env.ralph_with_limit(
        &[
            "run",
            "--agent-cmd",
            &fake_agent_cmd(),
            "--yes",
            "--grace",
            "1s",
            "--max-iterations",
            "3",
        ],
        &[("FAKE_AGENT_SCRIPT", &script)],
        Duration::from_secs(20),
    );
    assert_exit(&out, 8);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    assert_halt_reason(&env, "tampered");
    assert!(
        head_files(&env).contains("work/other.txt"),
        "the agent's other work is committed: {:?}",
        env.commits()
    );
}

/// Bug caught: an emptied task file was "no criteria" (exit 1, an error blaming the user).
#[test]
fn emptying_the_task_file_is_tampering() {
    replacing_the_task_file_is_tampering(": > RALPH_TASK.md");
}

/// Truncated right after the criteria heading (as an interrupted write would leave it).
/// Bug caught: "no criteria", exit 1.
#[test]
fn truncating_the_task_file_is_tampering() {
    replacing_the_task_file_is_tampering("sed -i '/^## Success Criteria$/q' RALPH_TASK.md");
}

/// Bug caught: "task file not found", exit 1 (an error, not tampering).
#[test]
fn deleting_the_task_file_is_tampering() {
    replacing_the_task_file_is_tampering("rm RALPH_TASK.md");
}

/// Bug caught: "task file not found", exit 1.
#[test]
fn renaming_the_task_file_with_git_mv_is_tampering() {
    replacing_the_task_file_is_tampering("git mv RALPH_TASK.md TASK-DONE.md");
}

/// Bug caught: "task file not found", exit 1.
#[test]
fn renaming_the_task_file_with_mv_is_tampering() {
    replacing_the_task_file_is_tampering("mv RALPH_TASK.md old-task.md");
}

/// Bug caught: "Is a directory", exit 1.
#[test]
fn replacing_the_task_file_by_a_directory_is_tampering() {
    replacing_the_task_file_is_tampering(
        "rm RALPH_TASK.md && mkdir RALPH_TASK.md && echo notes > RALPH_TASK.md/notes.md",
    );
}

/// A FIFO is never read (SPEC §3.1 Reading): opening it would wait for a writer forever.
/// Bug caught: ralph blocked reading the FIFO and never ended (the harness killed it).
#[test]
fn replacing_the_task_file_by_a_fifo_is_tampering_and_never_hangs() {
    replacing_the_task_file_is_tampering("rm RALPH_TASK.md && mkfifo RALPH_TASK.md");
}

/// A symlink to a device is not a regular file: refused at once, never read to the end. The
/// run is bounded in time (harness) and address space (`ulimit -v`, 1 GiB), so a ralph that
/// reads `/dev/zero` dies of it quickly. Bug caught: ralph read `/dev/zero` until its memory
/// ran out (killed by the allocation failure, not exit 8).
#[test]
fn replacing_the_task_file_by_a_symlink_to_dev_zero_is_tampering_and_reads_nothing() {
    let env = checklist(&["- [ ] first criterion", "- [ ] second criterion"]);
    let script = agent_sh(
        &env,
        "zero",
        "mkdir -p work && echo other > work/other.txt\nrm RALPH_TASK.md && ln -s /dev/zero RALPH_TASK.md",
    );
    let agent = fake_agent_cmd();
    let out = ralph_with_memory_limit(
        &env,
        1024 * 1024,
        &[
            "run",
            "--agent-cmd",
            &agent,
            "--yes",
            "--grace",
            "1s",
            "--max-iterations",
            "3",
        ],
        &[("FAKE_AGENT_SCRIPT", &script)],
        Duration::from_secs(30),
    );
    assert_exit(&out, 8);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    assert_halt_reason(&env, "tampered");
    assert!(head_files(&env).contains("work/other.txt"));
}

/// Control for the memory bound: the same limit lets an honest run complete (holds today), so
/// the failure above is the unbounded read, not the limit.
#[test]
fn an_honest_run_completes_under_the_same_memory_limit() {
    let env = checklist(&["- [ ] first criterion", "- [ ] second criterion"]);
    let agent = fake_agent_cmd();
    let out = ralph_with_memory_limit(
        &env,
        1024 * 1024,
        &["run", "--agent-cmd", &agent, "--yes", "--grace", "1s"],
        &[("FAKE_AGENT_SCRIPT", "check")],
        Duration::from_secs(30),
    );
    assert_exit(&out, 0);
}

/// Promise: an annotation appended to a criterion the agent checks keeps the criterion (the
/// baseline text stays whole at the start); the run goes on and completes, and the annotation
/// is logged and listed in the final summary for a person to review. The annotated criterion is
/// checked beside a plain one listed first, so the commit subject (the first newly checked
/// criterion) does not carry the annotation: only ralph's report of it can. Bug caught: the
/// annotated text no longer equalled the baseline, so honest work halted "tampered", exit 8.
#[test]
fn an_annotation_on_a_checked_criterion_is_not_tampering_and_is_reported() {
    let env = checklist(&[
        "- [ ] menu lists prices",
        "- [ ] café opens",
        "- [ ] bills are split",
    ]);
    let annotated = env.home.join("annotated.md");
    std::fs::write(
        &annotated,
        task_text(&[
            "- [x] menu lists prices",
            "- [x] café opens — done in src/cafe.rs",
            "- [ ] bills are split",
        ]),
    )
    .unwrap();
    let script = agent_sh(
        &env,
        "annotate",
        &format!(
            "cp '{}' RALPH_TASK.md\nmkdir -p src && echo 'fn open() {{}}' > src/cafe.rs",
            annotated.display()
        ),
    );
    let out = env.run_fake(&format!("{script},check"), &[]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    assert!(
        env.commits()
            .iter()
            .all(|c| !c.contains("done in src/cafe.rs")),
        "{:?}",
        env.commits()
    );
    assert!(
        said(&out).contains("café opens — done in src/cafe.rs"),
        "the final summary lists the annotation:\n{}",
        said(&out)
    );
    assert!(
        env.activity().contains("done in src/cafe.rs"),
        "the activity log records the annotation:\n{}",
        env.activity()
    );
}

/// The other side of the annotation rule: a checked criterion whose baseline text is cut short
/// (`café opens on Sundays` → `café opens`) is a rewording, so tampering (exit 8). Holds today;
/// guards the annotation fix against accepting any shared prefix.
#[test]
fn checking_a_shortened_criterion_is_tampering() {
    let env = checklist(&["- [ ] café opens on Sundays", "- [ ] menu lists prices"]);
    let script = agent_sh(
        &env,
        "shorten",
        "sed -i 's/^- \\[ \\] café opens on Sundays$/- [x] café opens/' RALPH_TASK.md",
    );
    let out = env.run_fake(&script, &[]);
    assert_exit(&out, 8);
    assert!(
        said(&out).contains("café opens on Sundays"),
        "{}",
        said(&out)
    );
}

/// Promise: texts compare after Unicode NFC, so an agent (or its editor) that rewrites `café`
/// as `cafe\u{301}` while checking it has not reworded it. Holds today (NFC comparison).
#[test]
fn a_criterion_rewritten_in_nfd_is_not_tampering() {
    let env = checklist(&["- [ ] café opens"]);
    let nfd = env.home.join("nfd.md");
    std::fs::write(&nfd, task_text(&["- [x] cafe\u{301} opens"])).unwrap();
    let script = agent_sh(
        &env,
        "nfd",
        &format!("cp '{}' RALPH_TASK.md", nfd.display()),
    );
    let out = env.run_fake(&script, &[]);
    assert_exit(&out, 0);
}

// --- Table mode (SPEC §3.2) ---

fn prd(n: u32) -> String {
    let mut s = String::from("# Accounts\n\n## Goal\n\nUsers can sign in.\n\n## Tasks\n\n");
    for k in 1..=n {
        s.push_str(&format!(
            "### Task {k}: Part {k}\n\nDo part {k}.\n\n**Acceptance Criteria:**\n- [ ] part {k} works\n\n"
        ));
    }
    s.push_str("## Completion Promise\n\n`DONE`\n");
    s
}

fn progress(statuses: &[&str]) -> String {
    let mut s = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|------|--------|-------|\n",
    );
    for (i, st) in statuses.iter().enumerate() {
        let k = i + 1;
        s.push_str(&format!("| {k} | Part {k} | {st} | |\n"));
    }
    s
}

fn table(statuses: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write("PRD.md", &prd(statuses.len() as u32));
    env.write("PROGRESS.md", &progress(statuses));
    env.commit_all("initial");
    env
}

/// The Status cell of row `k` in a PROGRESS.md text.
fn row_status(progress: &str, k: u32) -> String {
    progress
        .lines()
        .find(|l| l.starts_with(&format!("| {k} |")))
        .unwrap_or_else(|| panic!("no row {k} in\n{progress}"))
        .split('|')
        .nth(3)
        .unwrap()
        .trim()
        .to_string()
}

/// Promise: the agent owns only the current task's row; ralph keeps the other rows as they were
/// (logging the change), so one iteration completes at most its own task. With an agent that
/// marks every row DONE each time, a 3-task table takes 3 iterations, one commit per task.
/// Bug caught: the first iteration's "all DONE" ended the run COMPLETE after one task.
#[test]
fn an_agent_marking_every_row_done_completes_only_its_own_task() {
    let env = table(&["PENDING", "PENDING", "PENDING"]);
    let script = agent_sh(
        &env,
        "all-done",
        "sed -i 's/| PENDING |/| DONE |/' PROGRESS.md\n\
         mkdir -p work && echo done > work/iter-$RALPH_ITERATION.txt",
    );
    let out = env.run_fake(&script, &[]);
    assert!(
        env.agent_ran(2),
        "the run ended after one iteration: the other rows' DONE counted\n{}",
        said(&out)
    );
    assert_exit(&out, 0);
    assert!(env.agent_ran(3) && !env.agent_ran(4));
    for k in 1..=3 {
        assert!(
            env.agent_prompt(k as usize)
                .starts_with(&format!("# Ralph iteration {k}/50: task {k}")),
            "iteration {k} works task {k}: {}",
            env.agent_prompt(k as usize)
        );
    }
    let commits = env.commits();
    for k in 1..=3 {
        assert!(
            commits.contains(&format!("ralph: iteration {k} — task {k}: Part {k}")),
            "{commits:?}"
        );
    }
    // What iteration 1 committed: its own row DONE, the others put back to PENDING.
    let first = env.git(&["log", "--format=%H", "--grep", "^ralph: iteration 1 "]);
    let after_one = env.git(&["show", &format!("{}:PROGRESS.md", first.trim())]);
    assert_eq!(row_status(&after_one, 1), "DONE", "{after_one}");
    assert_eq!(row_status(&after_one, 2), "PENDING", "{after_one}");
    assert_eq!(row_status(&after_one, 3), "PENDING", "{after_one}");
    assert!(
        env.iter_records()[0].starts_with("ITER 1 | 1/3 tasks done"),
        "{:?}",
        env.iter_records()
    );
    // The change to the other rows is logged.
    let activity = env.activity();
    assert!(
        activity
            .lines()
            .any(|l| l.contains("Iteration 1") && (l.contains("task 2") || l.contains("row 2"))),
        "the activity log records the agent's change to task 2's row:\n{activity}"
    );
}

/// The agent finishes its task and then does `edit` to the table's rows. Promise: rows removed,
/// added or renumbered are tampering (exit 8) in that iteration, the work committed.
#[track_caller]
fn table_rows_edited_is_tampering(edit: &str) {
    let env = table(&["PENDING", "PENDING", "PENDING"]);
    let script = agent_sh(&env, "rows", edit);
    let out = env.ralph_with_limit(
        &[
            "run",
            "--agent-cmd",
            &fake_agent_cmd(),
            "--yes",
            "--grace",
            "1s",
        ],
        &[("FAKE_AGENT_SCRIPT", &format!("done-task+{script}"))],
        Duration::from_secs(30),
    );
    assert_exit(&out, 8);
    assert!(env.agent_ran(1) && !env.agent_ran(2));
    assert_halt_reason(&env, "tampered");
    assert!(
        head_files(&env).contains("work/task-1.txt"),
        "the work is committed"
    );
}

/// Bug caught: with rows 2 and 3 gone, task 1 DONE was "every task DONE": COMPLETE, exit 0.
#[test]
fn deleting_the_other_rows_is_tampering() {
    table_rows_edited_is_tampering("sed -i '/^| [23] |/d' PROGRESS.md");
}

/// Bug caught: the extra row was accepted and the run went on.
#[test]
fn adding_a_row_is_tampering() {
    table_rows_edited_is_tampering("printf '| 4 | Bonus | DONE | |\\n' >> PROGRESS.md");
}

/// Bug caught: the renumbered row was accepted.
#[test]
fn renumbering_a_row_is_tampering() {
    table_rows_edited_is_tampering("sed -i 's/^| 3 | Part 3 |/| 7 | Part 3 |/' PROGRESS.md");
}

/// Promise: PRD.md is read leniently, including the compound seed's own form (`**Goal:**`
/// line, `## Tasks` with a numbered list `1. Title` and nested `- Acceptance:` / `- [ ]`
/// criteria, a `**Completion Promise:** WORD` line). Bug caught: refused at the start.
#[test]
fn a_prd_in_the_seeds_own_form_runs_and_completes() {
    let env = TestEnv::new();
    env.write(
        "PRD.md",
        "# Accounts\n\n\
         **Goal:** Users can sign in with a password.\n\n\
         ## Tasks\n\n\
         1. Add the login form\n   \
            - Acceptance: the form renders at /login\n   \
            - Acceptance: it posts the credentials\n\
         2. Add the session store\n   \
            - [ ] sessions survive a restart\n\n\
         **Completion Promise:** SHIPPED\n",
    );
    env.write(
        "PROGRESS.md",
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n|---|------|--------|-------|\n\
         | 1 | Add the login form | PENDING | |\n| 2 | Add the session store | PENDING | |\n",
    );
    env.commit_all("initial");
    let out = env.run_fake("done-task", &[]);
    assert_exit(&out, 0);
    assert!(env.agent_ran(2) && !env.agent_ran(3));
    assert!(
        env.agent_prompt(1).contains("the form renders at /login"),
        "the task's criteria reach the prompt: {}",
        env.agent_prompt(1)
    );
    assert!(
        env.agent_prompt(2).contains("sessions survive a restart"),
        "{}",
        env.agent_prompt(2)
    );
    assert!(
        said(&out)
            .lines()
            .any(|l| l == "<promise>SHIPPED</promise>"),
        "{}",
        said(&out)
    );
}

/// Promise: a table with nothing left to work when the run starts ends at once: all DONE →
/// COMPLETE, exit 0, nothing spawned. Bug caught: ralph failed with "no task is left to work in
/// the table" (exit 1).
#[test]
fn a_table_already_all_done_ends_complete_without_spawning() {
    let env = table(&["DONE", "DONE"]);
    let out = env.run_fake("done-task", &[]);
    assert_exit(&out, 0);
    assert!(!env.agent_ran(1), "nothing is spawned");
}

/// Promise: DONE and BLOCKED only at the start → PARTIAL, exit 9, nothing spawned.
/// Bug caught: exit 1 ("no task is left to work in the table").
#[test]
fn a_table_with_only_blocked_tasks_left_ends_partial_without_spawning() {
    let env = table(&["DONE", "BLOCKED", "DONE"]);
    let out = env.run_fake("done-task", &[]);
    assert_exit(&out, 9);
    assert!(!env.agent_ran(1), "nothing is spawned");
}

/// Promise: a second criteria heading put above the original, holding checked copies of the
/// criteria, completes nothing: every criteria section counts, so the originals still stand
/// unchecked (2/4). Bug caught before issue 18 read only the first section and ended
/// "complete"; until then this was caught as tampering (the originals left outside the one
/// section read), which `a_phase_moved_out_of_the_sections_with_checked_copies_is_tampering`
/// (task_files) still holds for a section whose heading is renamed.
#[test]
fn a_new_criteria_section_above_the_original_completes_nothing() {
    let env = checklist(&["- [ ] alpha", "- [ ] beta"]);
    let script = agent_sh(
        &env,
        "section",
        "sed -i 's/^## Success Criteria$/## Success Criteria (v2)\\n- [x] alpha\\n- [x] beta\\n\\n## Success Criteria/' RALPH_TASK.md",
    );
    let out = env.run_fake(&format!("{script},idle"), &["--max-iterations", "2"]);
    assert_exit(&out, 3);
    assert!(
        env.iter_records()[0].starts_with("ITER 1 | 2/4 criteria"),
        "{}",
        said(&out)
    );
    assert!(
        env.read("RALPH_TASK.md")
            .contains("## Success Criteria (v2)")
    );
    assert_halt_reason(&env, "max_iterations");
}

/// The control for the rule above: a task file that already has the same text as an unchecked
/// item outside its criteria section when the run starts (a to-do list under Notes) completes
/// honestly once the criterion itself is checked.
#[test]
fn an_unchecked_twin_outside_the_section_from_the_start_is_no_tampering() {
    let env = TestEnv::new();
    let mut text = task_text(&["- [ ] alpha"]);
    text.push_str("\n## Notes\n- [ ] alpha\n");
    env.write("RALPH_TASK.md", &text);
    env.commit_all("initial");
    let out = env.run_fake("check", &["--max-iterations", "3"]);
    assert_exit(&out, 0);
}
