//! The Current Status block ralph keeps in `.ralph/progress.md` (the rest of the file is the
//! agent's): written by ralph, replaced in place, never mixed with what the agent wrote.

/// The Current Status block ralph maintains in `.ralph/progress.md`.
pub(crate) fn status_block(iteration: u32, done: usize, total: usize, status: &str) -> String {
    format!(
        "## Current Status\n- Iteration: {iteration}\n- Criteria completed: {done}/{total}\n- Status: {status}\n"
    )
}

/// Where the block sits in a progress file: from its `## Current Status` heading to the next
/// heading of level 1 or 2 (read with the one Markdown reader, so a `##` inside a code block
/// the agent wrote is not taken for a heading).
fn split_status(text: &str) -> Option<(usize, usize)> {
    let md = crate::markdown::parse(text);
    let top: Vec<&crate::markdown::Heading> = md.top_headings().map(|(_, h)| h).collect();
    let at = top
        .iter()
        .position(|h| h.level == 2 && h.text == "Current Status")?;
    let end = top[at + 1..]
        .iter()
        .find(|h| h.level <= 2)
        .map_or(text.len(), |h| md.line_range(h.line).start);
    Some((md.line_range(top[at].line).start, end))
}

/// The end of the title line (an ATX level-1 heading opening the file), its newline included.
fn title_end(text: &str) -> Option<usize> {
    let md = crate::markdown::parse(text);
    let (_, first) = md.top_headings().next()?;
    if first.level != 1 || first.line != 1 || !first.atx {
        return None;
    }
    let end = md.line_range(1).end;
    let eol = if text[end..].starts_with("\r\n") {
        2
    } else {
        usize::from(text[end..].starts_with('\n'))
    };
    Some(end + eol)
}

/// Replace (or insert after the title) the Current Status block.
pub(crate) fn with_status_block(text: &str, block: &str) -> String {
    let mut block = block.to_string();
    match split_status(text) {
        Some((s, e)) => {
            if e < text.len() {
                block.push('\n');
            }
            format!("{}{block}{}", &text[..s], &text[e..])
        }
        None => {
            // After the title when the file opens with one, else at the top.
            match title_end(text) {
                Some(e) => format!("{}\n{block}\n{}", &text[..e], &text[e..]),
                None => format!("{block}\n{text}"),
            }
        }
    }
}

/// The progress file without its Current Status block: what the agent wrote.
pub(crate) fn without_status_block(text: &str) -> String {
    match split_status(text) {
        Some((s, e)) => format!("{}{}", &text[..s], &text[e..]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_block_is_replaced_in_place() {
        let text = "# RALPH Progress\n\n## Current Status\n- Iteration: 0\n\n## Iteration Log\nagent notes\n";
        let out = with_status_block(text, &status_block(2, 1, 3, "Running"));
        assert_eq!(
            out,
            "# RALPH Progress\n\n## Current Status\n- Iteration: 2\n- Criteria completed: 1/3\n- Status: Running\n\n## Iteration Log\nagent notes\n"
        );
        assert_eq!(
            without_status_block(&out),
            "# RALPH Progress\n\n## Iteration Log\nagent notes\n"
        );
    }

    #[test]
    fn status_block_is_inserted_when_missing() {
        let out = with_status_block("# Title\nnotes\n", &status_block(1, 0, 1, "x"));
        assert!(out.starts_with("# Title\n\n## Current Status\n"));
        assert!(out.ends_with("notes\n"));
        let out = with_status_block("notes\n", &status_block(1, 0, 1, "x"));
        assert!(out.starts_with("## Current Status\n") && out.ends_with("\nnotes\n"));
    }

    #[test]
    fn a_heading_in_the_agents_code_block_is_not_one() {
        let text = "# P\n\n## Current Status\n- Iteration: 1\n\n## Iteration Log\n```\n## Current Status\n```\n";
        let out = with_status_block(text, &status_block(2, 1, 1, "x"));
        assert!(out.contains("```\n## Current Status\n```\n"), "{out}");
        assert!(out.contains("- Status: x\n\n## Iteration Log"), "{out}");
    }

    #[test]
    fn status_block_at_end_of_file() {
        let text = "# P\n\n## Current Status\n- Iteration: 0\n";
        let out = with_status_block(text, &status_block(5, 5, 5, "Complete"));
        assert!(out.ends_with("- Status: Complete\n"));
        assert_eq!(without_status_block(&out), "# P\n\n");
    }
}
