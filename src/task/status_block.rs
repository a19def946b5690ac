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

/// The first line of a merged block: no loop runs on the merged branch, and each line after it
/// is one branch's last status.
const MERGED: &str = "Status: Merged; the branches' last statuses follow";

/// The Current Status block of a merge (SPEC §13), from the block of each side (`None`: the
/// side's file has none) and the merge base's: as a three-way merge would, the side that
/// changed it wins; when both did, a merged block names each branch with its last status —
/// `- LABEL: Iteration: 3; Criteria completed: 3/3; Status: Complete` — a side's own block
/// under its label (`ours`/`theirs`: the branch merged into and the branch merged), a side's
/// merged block with its lines as they are (the same branch twice: the branch merged wins).
pub(crate) fn merged_block(
    base: Option<&str>,
    ours: Option<&str>,
    theirs: Option<&str>,
    (ours_label, theirs_label): (&str, &str),
) -> Option<String> {
    if ours == theirs || theirs == base {
        return ours.map(str::to_string);
    }
    if ours == base {
        return theirs.map(str::to_string);
    }
    let mut entries: Vec<(String, String)> = Vec::new();
    for (block, label) in [(ours, ours_label), (theirs, theirs_label)] {
        for (label, status) in block.map(|b| entries_of(b, label)).unwrap_or_default() {
            match entries.iter_mut().find(|(l, _)| *l == label) {
                Some(entry) => entry.1 = status,
                None => entries.push((label, status)),
            }
        }
    }
    let mut out = format!("## Current Status\n- {MERGED}\n");
    for (label, status) in entries {
        out.push_str(&format!("- {label}: {status}\n"));
    }
    Some(out)
}

/// The block of a progress file, from its heading to the next heading of level 1 or 2.
pub(crate) fn block_of(text: &str) -> Option<&str> {
    split_status(text).map(|(s, e)| &text[s..e])
}

/// A block's lines as `(label, status)`: a merged block's own, or one line for a loop's block
/// (its items joined by `; `) under `label`.
fn entries_of(block: &str, label: &str) -> Vec<(String, String)> {
    let md = crate::markdown::parse(block);
    let items: Vec<&str> = md
        .items
        .iter()
        .filter(|i| i.depth == 0 && !i.quoted)
        .map(|i| i.markup.as_str())
        .collect();
    match items.split_first() {
        Some((first, rest)) if *first == MERGED => rest
            .iter()
            .filter_map(|line| line.split_once(": "))
            .map(|(l, s)| (l.to_string(), s.to_string()))
            .collect(),
        Some(_) => vec![(label.to_string(), items.join("; "))],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_of_two_loops_names_each_branch_with_its_last_status() {
        let a = status_block(1, 1, 1, "Complete");
        let b = status_block(3, 3, 3, "Complete");
        let base = status_block(0, 0, 1, "Not started");
        let merged = merged_block(Some(&base), Some(&a), Some(&b), ("main", "ralph/b")).unwrap();
        assert_eq!(
            merged,
            "## Current Status\n- Status: Merged; the branches' last statuses follow\n\
             - main: Iteration: 1; Criteria completed: 1/1; Status: Complete\n\
             - ralph/b: Iteration: 3; Criteria completed: 3/3; Status: Complete\n"
        );
        // A third loop merged later adds its line; the same branch merged again replaces its own.
        let c = status_block(2, 2, 2, "Complete");
        let again = merged_block(Some(&a), Some(&merged), Some(&c), ("main", "ralph/b")).unwrap();
        assert!(
            again.ends_with(
                "- main: Iteration: 1; Criteria completed: 1/1; Status: Complete\n\
             - ralph/b: Iteration: 2; Criteria completed: 2/2; Status: Complete\n"
            ),
            "{again}"
        );
        let third = merged_block(None, Some(&merged), Some(&c), ("main", "ralph/c")).unwrap();
        assert_eq!(third.lines().count(), 5, "{third}");
        assert!(
            third.ends_with("- ralph/c: Iteration: 2; Criteria completed: 2/2; Status: Complete\n")
        );
    }

    #[test]
    fn a_block_only_one_side_changed_is_that_sides() {
        let base = status_block(0, 0, 1, "Not started");
        let a = status_block(1, 1, 1, "Complete");
        let labels = ("main", "ralph/a");
        assert_eq!(
            merged_block(Some(&base), Some(&base), Some(&a), labels),
            Some(a.clone())
        );
        assert_eq!(
            merged_block(Some(&base), Some(&a), Some(&base), labels),
            Some(a.clone())
        );
        assert_eq!(
            merged_block(None, Some(&a), Some(&a), labels),
            Some(a.clone())
        );
        assert_eq!(merged_block(Some(&base), None, Some(&base), labels), None);
        // Added on both sides (no base): both named.
        let b = status_block(2, 1, 2, "Running");
        let both = merged_block(None, Some(&a), Some(&b), labels).unwrap();
        assert!(
            both.contains("- main: Iteration: 1;") && both.contains("- ralph/a: Iteration: 2;"),
            "{both}"
        );
    }

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
