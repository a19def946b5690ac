//! Planning: `PRD.md` and `PROGRESS.md` scaffolds, the planning prompt (the exact format the
//! readers accept, by example), and matching a description to a plan under `docs/plans/`.

use std::path::PathBuf;

use super::prd::clean_title;
use super::progress::escape_cell;
use super::{DEFAULT_PROMISE, PRD_FILE, PROGRESS_FILE, one_line};
use crate::markdown;

/// A one-line title that survives being a heading: read back as the PRD reader reads a task
/// title (a closing `#` sequence and edge `*` dropped) until it no longer changes.
fn heading_safe(text: &str, fallback: &str) -> String {
    let mut t = one_line(text);
    // Each round removes something, so this ends; the bound is only a guard.
    for _ in 0..t.len() + 1 {
        let heading = markdown::parse(&format!("# {t}"));
        let next = heading
            .headings
            .first()
            .map_or_else(String::new, |h| clean_title(&h.markup));
        if next == t {
            break;
        }
        t = next;
    }
    if t.is_empty() {
        fallback.to_string()
    } else {
        t
    }
}

/// Cut to `max` characters, adding `…` when cut.
fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// `PRD.md` and `PROGRESS.md` for `ralph init --table`: the description is the goal (and the
/// only task when `tasks` is empty); each task gets a placeholder criterion to edit. Both files
/// parse and validate whatever the input.
pub(crate) fn scaffold(description: &str, tasks: &[String], promise: &str) -> (String, String) {
    let goal_line = one_line(description);
    let title = heading_safe(&truncate_chars(&goal_line, 72), "Project");
    let mut goal = if goal_line.is_empty() {
        "Describe what success looks like, in one sentence.".to_string()
    } else {
        goal_line
    };
    // A leading `#`, fence or HTML-block opener would turn the goal into something else.
    if goal.starts_with(['#', '`', '~', '<']) {
        goal.insert(0, '\\');
    }
    let titles: Vec<String> = if tasks.is_empty() {
        vec![title.clone()]
    } else {
        tasks
            .iter()
            .enumerate()
            .map(|(i, t)| heading_safe(t, &format!("Task {}", i + 1)))
            .collect()
    };
    let promise = one_line(&promise.replace('`', ""));
    let promise = if promise.is_empty() {
        DEFAULT_PROMISE.to_string()
    } else {
        promise
    };

    // Without tasks given, the one task is the whole goal: its criterion is an example to
    // replace, marked as one (a run refuses it).
    let mark = if tasks.is_empty() {
        format!("{}: ", crate::task::placeholder::MARK)
    } else {
        String::new()
    };
    let mut prd = format!("# {title}\n\n## Goal\n\n{goal}\n\n## Tasks\n\n");
    for (i, t) in titles.iter().enumerate() {
        prd.push_str(&format!(
            "### Task {n}: {t}\n\n**Acceptance Criteria:**\n- [ ] {mark}{t}: implemented and \
             covered by passing tests\n\n",
            n = i + 1
        ));
    }
    prd.push_str(&format!("## Completion Promise\n\n`{promise}`\n"));

    let mut progress = String::from(
        "# Progress\n\n## Status: IN_PROGRESS\n\n| # | Task | Status | Notes |\n\
         |---|------|--------|-------|\n",
    );
    for (i, t) in titles.iter().enumerate() {
        progress.push_str(&format!("| {} | {} | PENDING | |\n", i + 1, escape_cell(t)));
    }
    (prd, progress)
}

const EXAMPLE_PRD: &str = "# Add OAuth login

## Goal

Users can sign in with GitHub, and their session survives a restart.

## Tasks

### Task 1: GitHub OAuth flow

Add the redirect and callback endpoints using the existing HTTP router.

**Acceptance Criteria:**
- [ ] `/auth/github` redirects to GitHub with the configured client id
- [ ] `/auth/github/callback` exchanges the code and creates a session
- [ ] Tests cover both endpoints

### Task 2: Persistent sessions

**Acceptance Criteria:**
- [ ] Sessions are stored in the database and survive a server restart
- [ ] Tests cover session expiry

## Completion Promise

`DONE`
";

const EXAMPLE_PROGRESS: &str = "# Progress

## Status: IN_PROGRESS

| # | Task | Status | Notes |
|---|------|--------|-------|
| 1 | GitHub OAuth flow | PENDING | |
| 2 | Persistent sessions | PENDING | |
";

/// The prompt for the planning run: write `PRD.md` and `PROGRESS.md` for `description`, in
/// exactly the format [`parse_prd`] and [`parse_progress`] read, and nothing else.
///
/// [`parse_prd`]: super::parse_prd
/// [`parse_progress`]: super::parse_progress
pub(crate) fn planning_prompt(description: &str) -> String {
    format!(
        "# Ralph planning\n\n\
         You are planning work that fresh agents will then do one task at a time. Do not \
         implement anything yet and do not commit: write two files in the repository root, \
         {PRD_FILE} and {PROGRESS_FILE}, then stop.\n\n\
         ## The work\n\n{}\n\n\
         ## {PRD_FILE}\n\n\
         - A `# ` title, then `## Goal` with one sentence saying what success looks like.\n\
         - `## Tasks`, then one `### Task N: title` heading per task, numbered 1, 2, 3, … Each \
         task is atomic and independently doable in one session, in dependency order, with a \
         short description and a `**Acceptance Criteria:**` line followed by `- [ ]` items that \
         can be tested.\n\
         - `## Completion Promise` followed by the keyword in backticks (`DONE` unless the work \
         says otherwise).\n\n\
         ## {PROGRESS_FILE}\n\n\
         A `## Status: IN_PROGRESS` line and a table `| # | Task | Status | Notes |` with one \
         row per task, same numbers, every Status `PENDING`, Notes empty.\n\n\
         Read the code first so the tasks fit the project. Example of the exact format:\n\n\
         ```markdown\n{EXAMPLE_PRD}```\n\n```markdown\n{EXAMPLE_PROGRESS}```\n",
        description.trim()
    )
}

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "from", "into", "onto", "that", "this", "these", "those", "its",
    "our", "your", "their", "are", "was", "were", "been", "being", "has", "have", "had", "but",
    "not", "all", "any", "some", "via", "per", "then", "than", "when", "where", "which", "who",
    "what", "how", "can", "should", "would", "will", "must", "also", "out", "off", "about",
];

/// Lowercase alphanumeric words of `text`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn same_word(a: &str, b: &str) -> bool {
    let plural = |long: &str, short: &str| {
        long.strip_prefix(short)
            .is_some_and(|rest| rest == "s" || rest == "es")
    };
    a == b || plural(a, b) || plural(b, a)
}

/// A plan in `docs/plans/` that matches `description`, given `(path, contents)` pairs.
///
/// The rule is conservative: the description's significant words (3+ characters, not a common
/// stop word such as "the", "and", "for", "with") must *all* appear among the words of the plan's
/// file stem or its first heading (the first `# ` heading, else the first heading of any level),
/// compared case-insensitively with a trailing `s`/`es` ignored. Only `.md`/`.markdown` files
/// count. A description without significant words matches nothing. When several plans match,
/// the one with the greatest path wins (plans are date-prefixed, so that is the newest).
pub(crate) fn find_plan(plans: &[(PathBuf, String)], description: &str) -> Option<PathBuf> {
    let wanted: Vec<String> = words(description)
        .into_iter()
        .filter(|w| w.chars().count() >= 3 && !STOPWORDS.contains(&w.as_str()))
        .collect();
    if wanted.is_empty() {
        return None;
    }
    plans
        .iter()
        .filter(|(path, _)| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"))
        })
        .filter(|(path, text)| {
            let mut have = words(
                &path
                    .file_stem()
                    .map(|s| s.to_string_lossy())
                    .unwrap_or_default(),
            );
            have.extend(words(&first_heading(text)));
            wanted.iter().all(|w| have.iter().any(|h| same_word(h, w)))
        })
        .map(|(path, _)| path)
        .max()
        .cloned()
}

/// The text of the first `# ` heading of `text`, else of its first heading, else "" (headings in
/// block quotes and list items, code and frontmatter left out).
fn first_heading(text: &str) -> String {
    let md = markdown::parse_document(text);
    let top = || md.top_headings().map(|(_, h)| h);
    top()
        .find(|h| h.level == 1)
        .or_else(|| top().next())
        .map(|h| h.text.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::table::fixtures::*;
    use crate::task::table::{RowStatus, validate};

    #[test]
    fn scaffold_and_example_parse_and_validate() {
        let code = read_prd("## Goal\ng\n### Task 1: Add `--verbose`\n- [ ] x\n").unwrap();
        assert_eq!(code.tasks[0].title, "Add `--verbose`");
        let tasks = vec![
            "Fix C#".to_string(),
            "`".into(),
            "#*".into(),
            "pipes | here #".into(),
            "**".into(),
        ];
        let cases = [
            ("Build a thing", tasks.as_slice(), "SHIP"),
            ("", &[][..], ""),
            ("# `weird` goal\nline", &[][..], "`X`"),
        ];
        for (desc, tasks, promise) in cases {
            let (prd_text, progress_text) = scaffold(desc, tasks, promise);
            let prd = read_prd(&prd_text).unwrap();
            let pr = read_progress(&progress_text).unwrap();
            validate(&prd, &p("PRD.md"), &pr, &p("PROGRESS.md")).unwrap();
            assert_eq!(prd.tasks.len(), tasks.len().max(1));
            assert!(pr.rows.iter().all(|r| r.status == RowStatus::Pending));
        }
        let (prd_text, progress_text) = scaffold("Build a thing", &tasks, "SHIP");
        let prd = read_prd(&prd_text).unwrap();
        assert_eq!(prd.promise, "SHIP");
        assert_eq!(prd.tasks[0].title, "Fix C#");
        assert_eq!(prd.tasks[2].title, "Task 3");
        assert_eq!(
            read_progress(&progress_text).unwrap().rows[3].task,
            "pipes | here"
        );
        let ex = read_prd(EXAMPLE_PRD).unwrap();
        validate(
            &ex,
            &p("PRD.md"),
            &read_progress(EXAMPLE_PROGRESS).unwrap(),
            &p("PROGRESS.md"),
        )
        .unwrap();
        assert!(planning_prompt("add oauth").contains(EXAMPLE_PROGRESS));
    }

    #[test]
    fn finds_plans_conservatively() {
        let plans = vec![
            (
                p("docs/plans/2024-01-02-feat-oauth-login-plan.md"),
                "# feat: Add OAuth login\n".to_string(),
            ),
            (
                p("docs/plans/2024-03-01-feat-oauth-login-v2.md"),
                "# Add OAuth login, again\n".to_string(),
            ),
            (
                p("docs/plans/2024-02-01-billing.md"),
                "---\ntitle: x\n---\n## Stripe invoices\n".to_string(),
            ),
            (p("docs/plans/notes.txt"), "# stripe invoices".to_string()),
        ];
        assert_eq!(
            find_plan(&plans, "Add OAuth login"),
            Some(p("docs/plans/2024-03-01-feat-oauth-login-v2.md"))
        );
        assert_eq!(
            find_plan(&plans, "stripe invoice"),
            Some(p("docs/plans/2024-02-01-billing.md"))
        );
        assert_eq!(find_plan(&plans, "OAuth login with SAML"), None);
        assert_eq!(find_plan(&plans[2..], "Add OAuth login"), None);
        assert_eq!(
            find_plan(&plans[..1], "oauth logins"),
            Some(p("docs/plans/2024-01-02-feat-oauth-login-plan.md"))
        );
        assert_eq!(find_plan(&plans, "the a to"), None);
    }

    proptest::proptest! {

        #[test]
        fn scaffold_always_validates(desc in "(?s).{0,80}", tasks in proptest::collection::vec("(?s).{0,30}", 0..4), promise in ".{0,10}") {
            let (prd_text, progress_text) = scaffold(&desc, &tasks, &promise);
            let prd = read_prd(&prd_text);
            proptest::prop_assert!(prd.is_ok(), "{:?}\n{}", prd, prd_text);
            let pr = read_progress(&progress_text);
            proptest::prop_assert!(pr.is_ok(), "{:?}\n{}", pr, progress_text);
            if let (Ok(prd), Ok(pr)) = (prd, pr) {
                proptest::prop_assert!(validate(&prd, &p("PRD.md"), &pr, &p("PROGRESS.md")).is_ok());
            }
        }
    }
}
