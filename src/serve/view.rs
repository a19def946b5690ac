//! One loop's own view for `GET /api/loops/NAME`: its criteria (checked or not), its last ITER
//! records, its activity log, the tail of the running (or latest) iteration's transcript, its
//! `activity.now`, and the question it waits on. Every read is a bounded tail of a file opened
//! as one the agent can touch (`files::open_read`: no FIFO waited on, no link out followed).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::{Value, json};

use crate::loops::Entry;
use crate::state::{self, RalphDir};

/// How many lines of the ITER records and of the activity log are shown.
const LINES: usize = 50;
/// How much of the transcript's end is shown.
const TRANSCRIPT_TAIL: u64 = 16 * 1024;
/// How much of `activity.now` is shown.
const NOW_MAX: u64 = 4 * 1024;

/// Add the view's fields to `v`, the loop's `status` object.
pub(super) fn add(v: &mut Value, e: &Entry) {
    let s = &e.status;
    let rd = RalphDir::new(&e.path);
    let criteria: Vec<Value> = s.doc.as_ref().map_or_else(Vec::new, |d| {
        d.checklist
            .criteria
            .iter()
            .map(|c| json!({"text": c.text, "checked": c.checked}))
            .collect()
    });
    let log =
        s.st.as_ref()
            .and_then(|st| st.iterations_log.as_ref())
            .map_or_else(|| rd.iterations_log(), |l| e.path.join(l));
    v["criteria"] = criteria.into();
    v["records"] = state::tail_lines(&log, LINES).unwrap_or_default().into();
    v["activity"] = state::tail_lines(&rd.activity_log(), LINES)
        .unwrap_or_default()
        .into();
    v["transcript_tail"] =
        s.st.as_ref()
            .filter(|st| st.iteration > 0)
            .and_then(|st| {
                let run = rd.run_dir(&st.run_id);
                tail(
                    &run.join(format!("iter-{:03}.log", st.iteration)),
                    TRANSCRIPT_TAIL,
                )
            })
            .into();
    v["activity_now"] = activity_now(e).into();
    let question = crate::git::Repo::discover(&e.path)
        .ok()
        .and_then(|repo| super::person::open_question(&repo));
    v["question"] = question.map_or(
        Value::Null,
        |q| json!({"text": q.text, "asked_at": q.asked_at, "iteration": q.iteration}),
    );
}

/// What the loop's agent is doing now, as `.ralph/activity.now` says (its end).
pub(super) fn activity_now(e: &Entry) -> Option<String> {
    let file = RalphDir::new(&e.path).path.join(crate::activity::FILE);
    tail(&file, NOW_MAX).map(|t| t.trim().to_string())
}

/// The last `max` bytes of the file at `path` as text (a character cut at the start dropped);
/// `None` when it cannot be read as a regular file.
fn tail(path: &Path, max: u64) -> Option<String> {
    let (mut f, meta) = crate::files::open_read(path).ok()?;
    let start = meta.len().saturating_sub(max);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::with_capacity((meta.len() - start) as usize);
    f.take(max).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let text = if start > 0 {
        text.trim_start_matches('\u{fffd}')
    } else {
        &text
    };
    Some(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_bounded_whatever_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.log");
        let mut big = "é".repeat(20_000);
        big.push_str("END");
        std::fs::write(&p, &big).unwrap();
        let t = tail(&p, 1024).unwrap();
        assert!(t.len() <= 1024 && t.ends_with("END"), "{}", t.len());
        assert!(!t.starts_with('\u{fffd}'));
        std::fs::write(&p, "short").unwrap();
        assert_eq!(tail(&p, 1024).as_deref(), Some("short"));
        assert_eq!(tail(&dir.path().join("missing"), 10), None);
    }
}
