//! Reading `PROGRESS.md` — its `## Status:` line and the task table — and writing it back with
//! only the cells ralph owns changed (byte spans from the Markdown reader), every other byte kept.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;

use super::{MAX_ATTEMPTS, OverallStatus, Progress, Row, RowStatus, TableError, clean, one_line};
use crate::markdown::{self, Field, Markdown};

#[derive(Debug, Clone, Copy)]
struct Columns {
    number: usize,
    task: usize,
    status: usize,
    notes: usize,
}

/// Match header cells to the four columns; the names of those missing otherwise.
fn columns(header: &[&str]) -> Result<Columns, Vec<&'static str>> {
    let find = |names: &[&str]| {
        header.iter().position(|c| {
            let c = clean(c).to_ascii_lowercase();
            names.contains(&c.as_str())
        })
    };
    let number = find(&["#", "no", "no.", "num", "number"]);
    let task = find(&["task", "tasks", "title"]);
    let status = find(&["status", "state"]);
    let notes = find(&["notes", "note"]);
    match (number, task, status, notes) {
        (Some(number), Some(task), Some(status), Some(notes)) => Ok(Columns {
            number,
            task,
            status,
            notes,
        }),
        _ => Err([
            (number, "`#`"),
            (task, "`Task`"),
            (status, "`Status`"),
            (notes, "`Notes`"),
        ]
        .into_iter()
        .filter(|(c, _)| c.is_none())
        .map(|(_, n)| n)
        .collect()),
    }
}

/// Unescape a cell: trim, `\|` → `|`, `<br>` → newline.
pub(super) fn unescape_cell(cell: &str) -> String {
    cell.trim()
        .replace("\\|", "|")
        .replace("<br />", "\n")
        .replace("<br/>", "\n")
        .replace("<br>", "\n")
}

/// Escape text for a cell: `|` → `\|`, newlines → `<br>`; spaces at either end go, line breaks
/// stay (a cell holding only `<br>` reads back as it was written).
pub(super) fn escape_cell(text: &str) -> String {
    text.replace("\r\n", "\n")
        .replace('\r', "\n")
        .trim_matches([' ', '\t'])
        .replace('|', "\\|")
        .replace('\n', "<br>")
}

fn parse_overall(value: &str) -> Option<OverallStatus> {
    let v = clean(value).to_ascii_uppercase().replace([' ', '-'], "_");
    match v.as_str() {
        "IN_PROGRESS" | "INPROGRESS" => Some(OverallStatus::InProgress),
        "COMPLETE" | "COMPLETED" => Some(OverallStatus::Complete),
        "PARTIAL" => Some(OverallStatus::Partial),
        _ => None,
    }
}

fn overall_text(status: OverallStatus) -> &'static str {
    match status {
        OverallStatus::InProgress => "IN_PROGRESS",
        OverallStatus::Complete => "COMPLETE",
        OverallStatus::Partial => "PARTIAL",
    }
}

/// Parse a Status cell: keyword (case-insensitive, emphasis/emoji tolerated) and attempts (the
/// first `a/b` in the rest of the cell).
pub(super) fn parse_status_cell(cell: &str) -> Option<(RowStatus, u32)> {
    let t = cell.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    let word_len = t.bytes().take_while(u8::is_ascii_alphabetic).count();
    let (word, rest) = t.split_at(word_len);
    if rest
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return None;
    }
    let status = match word.to_ascii_uppercase().as_str() {
        "PENDING" => RowStatus::Pending,
        "DONE" => RowStatus::Done,
        "FAILED" => RowStatus::Failed,
        "BLOCKED" => RowStatus::Blocked,
        _ => return None,
    };
    let counted = attempts_in(rest);
    let attempts = match status {
        RowStatus::Pending => 0,
        RowStatus::Done => counted.unwrap_or(0).min(MAX_ATTEMPTS),
        RowStatus::Failed => counted.unwrap_or(1).clamp(1, MAX_ATTEMPTS),
        RowStatus::Blocked => counted.unwrap_or(MAX_ATTEMPTS).clamp(1, MAX_ATTEMPTS),
    };
    Some((status, attempts))
}

/// The `a` of the first `a/b` in `text`.
fn attempts_in(text: &str) -> Option<u32> {
    let bytes = text.as_bytes();
    let slash = (0..bytes.len()).find(|&i| {
        bytes.get(i) == Some(&b'/')
            && i > 0
            && bytes.get(i - 1).is_some_and(u8::is_ascii_digit)
            && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
    })?;
    let start = text
        .get(..slash)?
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .len();
    Some(text.get(start..slash)?.parse().unwrap_or(u32::MAX))
}

/// The canonical Status cell text.
pub(super) fn status_text(status: RowStatus, attempts: u32) -> String {
    let a = attempts.min(MAX_ATTEMPTS);
    match status {
        RowStatus::Pending => "PENDING".to_string(),
        RowStatus::Done => "DONE".to_string(),
        RowStatus::Failed => format!("FAILED (attempt {}/{MAX_ATTEMPTS})", a.max(1)),
        RowStatus::Blocked => format!("BLOCKED ({}/{MAX_ATTEMPTS} attempts)", a.max(1)),
    }
}

fn row_number(cell: &str) -> Option<u32> {
    clean(cell).trim_start_matches('#').trim().parse().ok()
}

/// Where the task table is, or why there is none.
enum TableFind<'m> {
    None,
    MissingColumns {
        line: usize,
        missing: Vec<&'static str>,
    },
    NoDelimiter {
        line: usize,
    },
    Found {
        header_line: usize,
        cols: Columns,
        rows: Vec<&'m markdown::Row>,
    },
}

/// What a lenient pass over `PROGRESS.md` finds (used by both parsing and rendering).
struct Scan<'m> {
    /// The `## Status:` heading's line and value.
    status: Option<(usize, Field)>,
    table: TableFind<'m>,
}

/// The first `Status:` heading, and the first table whose header has the four columns (its rows
/// up to the first line without a pipe); else the most telling reason there is none: a header
/// line without its `|---|` row, then a table without the columns.
fn scan(md: &Markdown) -> Scan<'_> {
    let status = md
        .top_headings()
        .find_map(|(_, h)| h.field("status").map(|f| (h.line, f)));
    let tables: Vec<&markdown::Table> = md.tables.iter().filter(|t| !t.quoted).collect();
    let header = |t: &markdown::Table| {
        columns(
            &t.header
                .cells
                .iter()
                .map(|c| c.text.as_str())
                .collect::<Vec<_>>(),
        )
    };
    let found = tables.iter().find_map(|t| Some((*t, header(t).ok()?)));
    let table = if let Some((t, cols)) = found {
        TableFind::Found {
            header_line: t.line,
            cols,
            rows: t.rows.iter().take_while(|r| !r.bare).collect(),
        }
    } else if let Some(l) = md.lines.iter().find(|l| {
        let cells = markdown::split_row(&l.markup);
        !l.quoted
            && cells.len() > 1
            && columns(&cells.iter().map(String::as_str).collect::<Vec<_>>()).is_ok()
    }) {
        TableFind::NoDelimiter { line: l.line }
    } else if let Some(t) = tables.first() {
        TableFind::MissingColumns {
            line: t.line,
            missing: header(t).err().unwrap_or_default(),
        }
    } else {
        TableFind::None
    };
    Scan { status, table }
}

/// A cell's source.
fn raw<'t>(text: &'t str, cell: Option<&markdown::Cell>) -> Option<&'t str> {
    cell.map(|c| text.get(c.range.clone()).unwrap_or(""))
}

/// Parse `PROGRESS.md`. `path` is only used in error messages.
///
/// The first table whose header has `#`, `Task`, `Status` and `Notes` columns (any order, extra
/// columns allowed) is the task table; it ends where the table ends, or at the first line
/// without a `|`. The `## Status:` line may be anywhere.
pub(crate) fn parse_progress(path: &Path, text: &str) -> Result<Progress, TableError> {
    let md = markdown::parse_document(text);
    let scan = scan(&md);
    let err_path = || path.to_path_buf();
    let Some((status_line, field)) = scan.status else {
        return Err(TableError::MissingStatus { path: err_path() });
    };
    let status = parse_overall(&field.markup).ok_or_else(|| TableError::UnknownOverallStatus {
        path: err_path(),
        line: status_line,
        value: one_line(&field.markup),
    })?;
    let (header_line, cols, table_rows) = match scan.table {
        TableFind::None => return Err(TableError::NoTable { path: err_path() }),
        TableFind::MissingColumns { line, missing } => {
            return Err(TableError::MissingColumns {
                path: err_path(),
                line,
                missing: missing.join(", "),
            });
        }
        TableFind::NoDelimiter { line } => {
            return Err(TableError::MissingDelimiter {
                path: err_path(),
                line,
            });
        }
        TableFind::Found {
            header_line,
            cols,
            rows,
        } => (header_line, cols, rows),
    };
    let mut rows: Vec<Row> = Vec::with_capacity(table_rows.len());
    let mut first: HashMap<u32, usize> = HashMap::new();
    for r in table_rows {
        let row = read_row(path, text, r, cols)?;
        if let Some(&f) = first.get(&row.number) {
            return Err(TableError::DuplicateRow {
                path: err_path(),
                line: row.line,
                number: row.number,
                first: f,
            });
        }
        first.insert(row.number, row.line);
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(TableError::NoRows {
            path: err_path(),
            line: header_line,
        });
    }
    Ok(Progress {
        status,
        rows,
        status_line,
        table_line: header_line,
    })
}

/// One table row as a [`Row`].
fn read_row(path: &Path, text: &str, r: &markdown::Row, cols: Columns) -> Result<Row, TableError> {
    let num_text = r.cells.get(cols.number).map_or("", |c| c.text.as_str());
    let number = row_number(num_text).ok_or_else(|| TableError::BadRowNumber {
        path: path.to_path_buf(),
        line: r.line,
        value: one_line(num_text),
    })?;
    let Some(status_cell) = r.cells.get(cols.status) else {
        return Err(TableError::MissingCell {
            path: path.to_path_buf(),
            line: r.line,
            number,
        });
    };
    let (status, attempts) =
        parse_status_cell(&status_cell.text).ok_or_else(|| TableError::UnknownStatus {
            path: path.to_path_buf(),
            line: r.line,
            number,
            value: one_line(&status_cell.text),
        })?;
    Ok(Row {
        number,
        task: one_line(&unescape_cell(
            raw(text, r.cells.get(cols.task)).unwrap_or(""),
        )),
        status,
        attempts,
        notes: unescape_cell(raw(text, r.cells.get(cols.notes)).unwrap_or("")),
        line: r.line,
    })
}

/// `original` with only the rows' Status and Notes cells and the `## Status:` value changed to
/// match `progress`; every other byte (line endings included) is kept. A cell is rewritten only
/// when its meaning differs (so `FAILED` stays `FAILED` while it means attempt 1). Rows are
/// matched by number; rows of `progress` missing from `original` are not added. When
/// `original` has no `## Status:` line, one is inserted before the table.
pub(crate) fn render_progress(original: &str, progress: &Progress) -> String {
    let md = markdown::parse_document(original);
    let scan = scan(&md);
    let eol = if original.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let wanted = overall_text(progress.status);
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    match &scan.status {
        Some((_, field)) if parse_overall(&field.markup) != Some(progress.status) => {
            let token = clean(&field.markup);
            let edit = match field.markup.find(token).filter(|_| !token.is_empty()) {
                Some(t) => {
                    let at = field.range.start + t;
                    (at..at + token.len(), wanted.to_string())
                }
                None => (field.range.clone(), format!(" {wanted}")),
            };
            edits.push(edit);
        }
        Some(_) => {}
        None => match &scan.table {
            TableFind::Found { header_line, .. } => {
                let at = md.line_range(*header_line).start;
                edits.push((at..at, format!("## Status: {wanted}{eol}{eol}")));
            }
            _ => {
                let mut line = format!("## Status: {wanted}{eol}");
                if !original.is_empty() && !original.ends_with('\n') {
                    line.insert_str(0, eol);
                }
                edits.push((original.len()..original.len(), line));
            }
        },
    }
    if let TableFind::Found { cols, rows, .. } = &scan.table {
        edits.extend(row_edits(original, rows, *cols, progress));
    }
    apply(original, edits)
}

/// The rewrites of the rows whose Status or Notes differ from `progress`.
fn row_edits(
    text: &str,
    rows: &[&markdown::Row],
    cols: Columns,
    progress: &Progress,
) -> Vec<(Range<usize>, String)> {
    let by_number: HashMap<u32, &Row> = progress.rows.iter().rev().map(|r| (r.number, r)).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for r in rows {
        let Some(number) = r.cells.get(cols.number).and_then(|c| row_number(&c.text)) else {
            continue;
        };
        if !seen.insert(number) {
            continue;
        }
        let Some(row) = by_number.get(&number) else {
            continue;
        };
        let mut cells = Vec::new();
        let want_status = status_text(row.status, row.attempts);
        let have_status = r
            .cells
            .get(cols.status)
            .and_then(|c| parse_status_cell(&c.text))
            .map(|(s, a)| status_text(s, a));
        if have_status.as_deref() != Some(want_status.as_str()) {
            cells.push((cols.status, want_status));
        }
        let want_notes = escape_cell(&row.notes);
        let have_notes = raw(text, r.cells.get(cols.notes)).map(|c| escape_cell(&unescape_cell(c)));
        if have_notes.as_deref() != Some(want_notes.as_str())
            && !(have_notes.is_none() && want_notes.is_empty())
        {
            cells.push((cols.notes, want_notes));
        }
        if !cells.is_empty() {
            out.push((r.range.clone(), set_cells(text, r, &mut cells)));
        }
    }
    out
}

/// A row's source with cells replaced; cells the row lacks are appended first.
fn set_cells(text: &str, row: &markdown::Row, edits: &mut [(usize, String)]) -> String {
    let base = row.range.start;
    let mut out = text.get(row.range.clone()).unwrap_or("").to_string();
    let mut spans: Vec<Range<usize>> = row
        .cells
        .iter()
        .map(|c| c.range.start.saturating_sub(base)..c.range.end.saturating_sub(base))
        .collect();
    let need = edits.iter().map(|(c, _)| c + 1).max().unwrap_or(0);
    if spans.len() < need {
        out.truncate(out.trim_end().len());
        if !row.closed {
            // The last cell now ends at a pipe of its own: it takes the space before it.
            if let Some(last) = spans.last_mut()
                && last.end >= out.len()
            {
                last.end = out.len() + 1;
            }
            out.push_str(" |");
        }
        while spans.len() < need {
            let s = out.len();
            out.push_str("  |");
            spans.push(s..s + 2);
        }
    }
    edits.sort_by_key(|(c, _)| std::cmp::Reverse(*c));
    for (col, value) in edits.iter() {
        if let Some(span) = spans.get(*col)
            && span.start <= span.end
            && out.is_char_boundary(span.start)
            && out.get(span.end..).is_some()
        {
            out.replace_range(span.clone(), &format!(" {value} "));
        }
    }
    out
}

/// `text` with the `edits` (non-overlapping byte ranges and their replacements) applied.
fn apply(text: &str, mut edits: Vec<(Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for (r, new) in edits {
        if r.start < at
            || r.end > text.len()
            || !text.is_char_boundary(r.start)
            || !text.is_char_boundary(r.end)
        {
            continue;
        }
        out.push_str(&text[at..r.start]);
        out.push_str(&new);
        at = r.end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::table::fixtures::*;
    use crate::task::table::{AttemptResult, finish, record_attempt, review_failed};

    #[test]
    fn parses_progress() {
        let pr = read_progress(PROGRESS).unwrap();
        assert_eq!(
            (pr.status, pr.status_line, pr.table_line),
            (OverallStatus::InProgress, 3, 5)
        );
        let r = &pr.rows;
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].status, r[0].attempts, r[0].notes.as_str()),
            (RowStatus::Done, 0, "shipped | tested")
        );
        assert_eq!(
            (r[1].status, r[1].attempts, r[1].line),
            (RowStatus::Failed, 2, 8)
        );
        assert_eq!(
            (r[2].status, r[2].attempts, r[2].task.as_str()),
            (RowStatus::Pending, 0, "Docs")
        );
        let crlf = PROGRESS.replace('\n', "\r\n");
        assert_eq!(read_progress(&crlf).unwrap().rows, pr.rows);
    }

    #[test]
    fn parses_status_cells() {
        let cell = parse_status_cell;
        assert_eq!(cell("FAILED"), Some((RowStatus::Failed, 1)));
        assert_eq!(
            cell(" **failed** (attempt 2/3)"),
            Some((RowStatus::Failed, 2))
        );
        assert_eq!(cell("BLOCKED"), Some((RowStatus::Blocked, 3)));
        assert_eq!(
            cell("BLOCKED (3/3 attempts)"),
            Some((RowStatus::Blocked, 3))
        );
        assert_eq!(cell("✅ DONE"), Some((RowStatus::Done, 0)));
        assert_eq!(
            cell("FAILED (attempt 99999999999/3)"),
            Some((RowStatus::Failed, 3))
        );
        assert_eq!(cell("DONEISH"), None);
        assert_eq!(cell("IN_PROGRESS"), None);
    }

    #[test]
    fn progress_errors_name_file_and_line() {
        let table = "| # | Task | Status | Notes |\n|---|---|---|---|\n";
        assert_eq!(
            err(read_progress(&format!("{table}| 1 | a | DONE | |\n"))),
            "PROGRESS.md: no `## Status:` line"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: WORKING\n{table}| 1 | a | DONE | |\n"
            ))),
            "PROGRESS.md:1: unknown status `WORKING`"
        );
        assert!(
            err(read_progress("## Status: IN_PROGRESS\n"))
                .starts_with("PROGRESS.md: no task table")
        );
        assert_eq!(
            err(read_progress(
                "## Status: IN_PROGRESS\n\n| # | Task | State |\n|---|---|---|\n| 1 | a | DONE |\n"
            )),
            "PROGRESS.md:3: the table has no `Notes` column"
        );
        assert_eq!(
            err(read_progress(
                "## Status: IN_PROGRESS\n| # | Task | Status | Notes |\n| 1 | a | DONE | |\n"
            )),
            "PROGRESS.md:2: the table header is not followed by a `|---|` row"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| 1 | a | WORKING | |\n"
            ))),
            "PROGRESS.md:4: row 1 has unknown status `WORKING`"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| 1 | a | DONE | |\n| 1 | b | DONE | |\n"
            ))),
            "PROGRESS.md:5: row 1 appears twice (first at line 4)"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| x | a | DONE | |\n"
            ))),
            "PROGRESS.md:4: row number `x` is not a number"
        );
        assert_eq!(
            err(read_progress(&format!("## Status: IN_PROGRESS\n{table}\n"))),
            "PROGRESS.md:2: the task table has no rows"
        );
        assert_eq!(
            err(read_progress(&format!(
                "## Status: IN_PROGRESS\n{table}| 1 | a |\n"
            ))),
            "PROGRESS.md:4: row 1 has no status cell"
        );
    }

    /// Lines that differ between two texts, by index (both must have the same line count).
    fn changed_lines(a: &str, b: &str) -> Vec<usize> {
        let (la, lb): (Vec<_>, Vec<_>) = (
            a.split_inclusive('\n').collect(),
            b.split_inclusive('\n').collect(),
        );
        assert_eq!(la.len(), lb.len());
        (0..la.len()).filter(|&i| la[i] != lb[i]).collect()
    }

    #[test]
    fn render_round_trip_changes_only_cells() {
        for original in [PROGRESS.to_string(), PROGRESS.replace('\n', "\r\n")] {
            let mut pr = read_progress(&original).unwrap();
            assert_eq!(
                render_progress(&original, &pr),
                original,
                "no change, no edit"
            );
            assert_eq!(
                record_attempt(&mut pr, 3, "agent exited 1"),
                AttemptResult::Failed { attempt: 1 }
            );
            pr.rows[0].notes = "a|b\nc".to_string();
            pr.status = OverallStatus::Partial;
            let out = render_progress(&original, &pr);
            assert_eq!(changed_lines(&original, &out), [2, 6, 8]);
            assert!(out.contains("## Status: PARTIAL"));
            assert!(out.contains("| 1 | OAuth flow | DONE | a\\|b<br>c |"));
            assert!(out.contains("| 3 | Docs | FAILED (attempt 1/3) | agent exited 1 |"));
            assert_eq!(out.contains("\r\n"), original.contains("\r\n"));
            assert_eq!(out.matches('\n').count(), original.matches('\n').count());
            let again = read_progress(&out).unwrap();
            assert_eq!(again.rows, pr.rows);
            assert_eq!(again.status, OverallStatus::Partial);
            assert_eq!(render_progress(&out, &again), out);
        }
    }

    #[test]
    fn render_handles_short_rows_and_missing_status() {
        let original = "| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | a | PENDING\n";
        let pr = Progress {
            status: OverallStatus::Complete,
            rows: vec![Row {
                number: 1,
                task: "a".into(),
                status: RowStatus::Done,
                attempts: 0,
                notes: "ok".into(),
                line: 3,
            }],
            status_line: 0,
            table_line: 0,
        };
        let out = render_progress(original, &pr);
        assert_eq!(
            out,
            "## Status: COMPLETE\n\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | a | DONE | ok |\n"
        );
        assert_eq!(read_progress(&out).unwrap().rows[0].notes, "ok");
    }

    #[test]
    fn reads_tables_as_markdown_does() {
        let table = "| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | a | DONE | |\n";
        let quoted: String = table.lines().map(|l| format!("> {l}\n")).collect();
        type Case = (
            &'static str,
            String,
            Result<(OverallStatus, usize, Vec<usize>), &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "a table in a code block is not the table",
                format!("## Status: IN_PROGRESS\n```\n{table}```\n"),
                Err("PROGRESS.md: no task table"),
            ),
            (
                "a quoted table is not the table",
                format!("## Status: IN_PROGRESS\n\n{quoted}"),
                Err("PROGRESS.md: no task table"),
            ),
            (
                "a quoted status line does not count",
                format!("> ## Status: COMPLETE\n\n## Status: IN_PROGRESS\n{table}"),
                Ok((OverallStatus::InProgress, 3, vec![6])),
            ),
            (
                "a BOM and frontmatter keep the file's lines",
                format!("\u{feff}---\ntitle: x\n---\n## **Status:** COMPLETE\n{table}"),
                Ok((OverallStatus::Complete, 4, vec![7])),
            ),
            (
                "a line without a pipe ends the table",
                format!("## Status: PARTIAL\n{table}Trailing text.\n| 2 | b | PENDING | |\n"),
                Ok((OverallStatus::Partial, 1, vec![4])),
            ),
            (
                "a header without its delimiter row",
                "## Status: IN_PROGRESS\n\nSome text\n| # | Task | Status | Notes |\n| 1 | a | DONE | |\n".to_string(),
                Err("PROGRESS.md:4: the table header is not followed by a `|---|` row"),
            ),
        ];
        for (name, text, want) in cases {
            let got = read_progress(&text)
                .map(|p| {
                    (
                        p.status,
                        p.status_line,
                        p.rows.iter().map(|r| r.line).collect(),
                    )
                })
                .map_err(|e| e.to_string());
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "{name}"),
                Err(prefix) => {
                    let e = got.expect_err(name);
                    assert!(e.starts_with(prefix), "{name}: {e}");
                }
            }
        }
    }

    #[test]
    fn render_keeps_a_bom_and_the_status_label_markup() {
        let original = "\u{feff}## **Status:** IN_PROGRESS\r\n\r\n| # | Task | Status | Notes |\r\n|---|---|---|---|\r\n| 1 | a | PENDING |\r\n";
        let mut pr = read_progress(original).unwrap();
        pr.status = OverallStatus::Complete;
        pr.rows[0].status = RowStatus::Done;
        let out = render_progress(original, &pr);
        assert_eq!(
            out,
            "\u{feff}## **Status:** COMPLETE\r\n\r\n| # | Task | Status | Notes |\r\n|---|---|---|---|\r\n| 1 | a | DONE |\r\n"
        );
        let empty =
            "## Status:\n| # | Task | Status | Notes |\n|---|---|---|---|\n| 1 | a | DONE | |\n";
        let pr = Progress {
            status: OverallStatus::Complete,
            ..read_progress(&empty.replace("Status:", "Status: IN_PROGRESS")).unwrap()
        };
        assert!(render_progress(empty, &pr).starts_with("## Status: COMPLETE\n"));
    }

    proptest::proptest! {

        #[test]
        fn render_changes_only_cells(
            rows in proptest::collection::vec((
                proptest::sample::select(vec!["PENDING", "DONE", "FAILED", "failed (attempt 2/3)", "**BLOCKED**", "✅ DONE"]),
                "[ a-z|\\\\<>/é]{0,12}",
                " {0,2}",
            ), 1..6),
            crlf in proptest::bool::ANY,
            ops in proptest::collection::vec((0u32..7, 0u8..3, "[ a-z|\\\\\n]{0,8}"), 0..8),
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut text = format!("# Progress{eol}{eol}## Status: IN_PROGRESS  {eol}{eol}| # | Task | Status | Notes |{eol}|---|:--|---|---|{eol}");
            for (i, (status, notes, pad)) in rows.iter().enumerate() {
                text.push_str(&format!("|{pad}{}{pad}| task {i} |{pad}{status}| {} |{eol}", i + 1, escape_cell(notes)));
            }
            text.push_str(&format!("{eol}tail | not a row{eol}"));
            let original = read_progress(&text);
            proptest::prop_assert!(original.is_ok(), "{:?}", original);
            let Ok(mut pr) = original else { return Ok(()) };
            proptest::prop_assert_eq!(render_progress(&text, &pr), text.clone());
            for (k, op, note) in &ops {
                match op {
                    0 => { let _ = record_attempt(&mut pr, *k, note); }
                    1 => { let _ = review_failed(&mut pr, *k, note); }
                    _ => { finish(&mut pr); }
                }
            }
            let out = render_progress(&text, &pr);
            let (a, b): (Vec<&str>, Vec<&str>) = (text.split_inclusive('\n').collect(), out.split_inclusive('\n').collect());
            proptest::prop_assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                if x != y {
                    proptest::prop_assert!(i == 2 || (6..6 + rows.len()).contains(&i), "line {} changed: {:?} -> {:?}", i, x, y);
                    proptest::prop_assert_eq!(x.ends_with("\r\n"), y.ends_with("\r\n"));
                }
            }
            let again = read_progress(&out);
            proptest::prop_assert!(again.is_ok(), "{:?}\n{}", again, out);
            if let Ok(again) = again {
                proptest::prop_assert_eq!(again.status, pr.status);
                for (r, m) in again.rows.iter().zip(&pr.rows) {
                    proptest::prop_assert_eq!(status_text(r.status, r.attempts), status_text(m.status, m.attempts));
                    proptest::prop_assert_eq!(escape_cell(&r.notes), escape_cell(&m.notes));
                }
                proptest::prop_assert_eq!(render_progress(&out, &again), out);
            }
        }
    }
}
