//! `ralph ask` (the agent's: a question for a person, recorded in its work tree's
//! `.ralph/question.md`, returning at once), `ralph answer [NAME] TEXT` and
//! `ralph hint [NAME] TEXT` (a person's: into the loop's desk in ralph's state directory,
//! `person::Desk`) — SPEC §16.

use super::Context;
use crate::cli::{AskArgs, WordsArgs};
use crate::error::{Error, Result};
use crate::git::Repo;
use crate::loops;

use crate::person::{MAX_QUESTION, NO_QUESTIONS_VAR, QUESTION_FILE_VAR};

/// `ralph ask QUESTION`, run by the agent: the question written where its loop reads it after
/// the iteration. It returns at once; the loop waits for the answer, not this command.
pub(crate) fn ask(ctx: &Context, args: &AskArgs) -> Result<i32> {
    let text = args.question.join(" ");
    if text.trim().is_empty() {
        return Err(Error::usage("the question is empty"));
    }
    if std::env::var_os(NO_QUESTIONS_VAR).is_some() {
        return Err(Error::user(
            "this run takes no questions (--no-questions): nobody will answer",
        )
        .with_hint("decide yourself, and write the assumption you made in .ralph/progress.md"));
    }
    let Some(file) = std::env::var_os(QUESTION_FILE_VAR) else {
        return Err(Error::user(format!(
            "`ralph ask` is for an agent inside a ralph loop ({QUESTION_FILE_VAR} is not set)"
        ))
        .with_hint("a person answers with `ralph answer NAME \"TEXT\"`"));
    };
    let file = std::path::PathBuf::from(file);
    // Asked twice in one iteration: both questions are kept, in order — as much as ralph
    // keeps of a question, never more (the file stays small however often it is asked).
    let before = match crate::files::read_text(&file) {
        Ok(t) => t,
        Err(e) if e.is_missing() => String::new(),
        Err(e) => return Err(Error::user(format!("the question file: {e}"))),
    };
    let joined = if before.trim().is_empty() {
        format!("{}\n", text.trim())
    } else {
        format!("{}\n\n{}\n", before.trim_end(), text.trim())
    };
    let chars = joined.trim().chars().count();
    if chars > MAX_QUESTION {
        return Err(Error::user(format!(
            "the question{} would hold {chars} characters; a person reads at most {MAX_QUESTION}",
            if before.trim().is_empty() {
                ""
            } else {
                "s asked in this iteration"
            }
        ))
        .with_hint("ask one short question: what you need decided, and the options"));
    }
    std::fs::write(&file, joined).map_err(|e| Error::file("write", &file, e))?;
    ctx.ui.plain(
        "Asked. End this iteration now: the loop waits for a person's answer and puts it into your next prompt.",
    );
    Ok(0)
}

/// `ralph answer [NAME] TEXT`: the answer to the question loop NAME waits on.
pub(crate) fn answer(ctx: &Context, args: &WordsArgs) -> Result<i32> {
    let (name, text) = args.split();
    let (name, repo) = find_loop(ctx, name, true)?;
    crate::person::answer(&repo, text)?;
    ctx.ui.plain(&format!(
        "Answered: loop {name} goes on with your answer in its next prompt."
    ));
    Ok(0)
}

/// `ralph hint [NAME] TEXT`: a note for loop NAME's next prompt, once.
pub(crate) fn hint(ctx: &Context, args: &WordsArgs) -> Result<i32> {
    let (name, text) = args.split();
    let (name, repo) = find_loop(ctx, name, false)?;
    crate::person::hint(&repo, text)?;
    ctx.ui.plain(&format!(
        "Noted: loop {name}'s next prompt carries your hint."
    ));
    Ok(0)
}

/// The loop a person means: NAME (`main` for the main work tree), else the loop whose work tree
/// they stand in when it is a loop's worktree, else — for an answer — the one loop that waits for
/// a person, else `main`.
fn find_loop(ctx: &Context, name: Option<&str>, answering: bool) -> Result<(String, Repo)> {
    let here = Repo::discover(&ctx.cwd)?;
    let entries = loops::all(&here)?;
    let named = |e: &loops::Entry| {
        if e.name == loops::MAIN {
            "main".to_string()
        } else {
            e.name.clone()
        }
    };
    let chosen = match name {
        Some(n) => entries.iter().find(|e| named(e) == n).ok_or_else(|| {
            let known: Vec<String> = entries.iter().map(named).collect();
            Error::user(format!("no loop is named `{n}`"))
                .with_hint(format!("the loops here: {}", known.join(", ")))
        })?,
        None => {
            let own = crate::worktree::loop_name(&here);
            let waiting: Vec<&loops::Entry> = entries
                .iter()
                .filter(|e| answering && e.status.question.is_some())
                .collect();
            match (own, waiting.as_slice()) {
                (Some(own), _) => entries.iter().find(|e| e.name == own).ok_or_else(|| {
                    Error::user(format!("loop `{own}` is not among the repository's loops"))
                })?,
                (None, [one]) => one,
                (None, [_, _, ..]) => {
                    let names: Vec<String> = waiting.iter().map(|e| named(e)).collect();
                    return Err(Error::usage(format!(
                        "{} loops wait for a person: {}; name the one you answer",
                        names.len(),
                        names.join(", ")
                    )));
                }
                (None, []) => entries
                    .iter()
                    .find(|e| e.name == loops::MAIN)
                    .ok_or_else(|| Error::user("this repository has no main work tree"))?,
            }
        }
    };
    Ok((named(chosen), Repo::discover(&chosen.path)?))
}
