//! The Current Status block ralph keeps in `.ralph/progress.md` (the rest of the file is the
//! agent's): written by ralph, replaced in place, never mixed with what the agent wrote.

/// The Current Status block ralph maintains in `.ralph/progress.md`.
pub fn status_block(iteration: u32, done: usize, total: usize, status: &str) -> String {
    format!(
        "## Current Status\n- Iteration: {iteration}\n- Criteria completed: {done}/{total}\n- Status: {status}\n"
    )
}

/// Split a progress file into (before, status block, after); the block runs from its heading to
/// the next `## ` heading.
fn split_status(text: &str) -> Option<(usize, usize)> {
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if let Some(s) = start {
            if trimmed.starts_with("## ") || trimmed.starts_with("# ") {
                return Some((s, offset));
            }
        } else if trimmed == "## Current Status" {
            start = Some(offset);
        }
        offset += line.len();
    }
    start.map(|s| (s, text.len()))
}

/// Replace (or insert after the title) the Current Status block.
pub fn with_status_block(text: &str, block: &str) -> String {
    let mut block = block.to_string();
    match split_status(text) {
        Some((s, e)) => {
            if e < text.len() {
                block.push('\n');
            }
            format!("{}{block}{}", &text[..s], &text[e..])
        }
        None => {
            // After the first line when it is a title, else at the top.
            let first_end = text.find('\n').map_or(text.len(), |i| i + 1);
            if text.starts_with("# ") {
                format!("{}\n{block}\n{}", &text[..first_end], &text[first_end..])
            } else {
                format!("{block}\n{text}")
            }
        }
    }
}

/// The progress file without its Current Status block: what the agent wrote.
pub fn without_status_block(text: &str) -> String {
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
    fn status_block_at_end_of_file() {
        let text = "# P\n\n## Current Status\n- Iteration: 0\n";
        let out = with_status_block(text, &status_block(5, 5, 5, "Complete"));
        assert!(out.ends_with("- Status: Complete\n"));
        assert_eq!(without_status_block(&out), "# P\n\n");
    }
}
