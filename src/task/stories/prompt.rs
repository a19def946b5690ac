//! The prompt of one story iteration: the story, its acceptance criteria, the memory in
//! `progress.txt`, and what the agent may change in `prd.json`.

use super::{MAX_ATTEMPTS, Stories, Story};

/// Where the iteration stands.
pub(crate) struct Turn<'a> {
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) attempt: u32,
    pub(crate) test_command: Option<&'a str>,
    /// `prd.json` and `progress.txt`, repository-relative.
    pub(crate) file: &'a str,
    pub(crate) progress: &'a str,
}

/// The prompt for `story`.
pub(crate) fn story_prompt(stories: &Stories, story: &Story, turn: &Turn<'_>) -> String {
    let Turn {
        iteration,
        max_iterations,
        attempt,
        test_command,
        file,
        progress,
    } = *turn;
    let mut text = format!(
        "# Ralph iteration {iteration}/{max_iterations}: story {} (attempt {attempt}/{MAX_ATTEMPTS})\n\n\
         You are a Ralph executor with fresh context: you remember nothing of earlier iterations. \
         All state is in the files ({file}, {progress}, the code, git history).\n\n",
        story.id
    );
    if !stories.description.trim().is_empty() {
        text.push_str(&format!("## Project\n\n{}\n\n", stories.description.trim()));
    }
    text.push_str(&format!(
        "## Your story: {} — {}\n\n",
        story.id, story.title
    ));
    if !story.description.trim().is_empty() {
        text.push_str(&format!("{}\n\n", story.description.trim()));
    }
    if !story.criteria.is_empty() {
        text.push_str("Acceptance criteria:\n");
        for c in &story.criteria {
            text.push_str(&format!("- {}\n", c.trim()));
        }
        text.push('\n');
    }
    let checks = match test_command.map(str::trim).filter(|c| !c.is_empty()) {
        Some(cmd) => format!(
            "Run `{cmd}`: the supervisor runs it after you, and the story passes only if it passes."
        ),
        None => "Run the project's checks.".to_string(),
    };
    text.push_str(&format!(
        "## Instructions\n\n\
         1. Read {progress} first: it holds what earlier iterations learned.\n\
         2. Implement this story only, and meet every acceptance criterion. {checks}\n\
         3. When the story is done, set `\"passes\": true` for story {id} in {file}, and say what \
         you did in its `notes`. Change nothing else in {file}: the supervisor puts back any other \
         change.\n\
         4. Append what you learned (patterns, gotchas, where things are) to {progress}.\n\
         5. Do not commit: ralph commits your work after this iteration.\n",
        id = story.id,
    ));
    text
}
