//! The roll-up's records (SPEC §3.4): one parser into typed records, and the figures ralph
//! counts from them. The roll-up's exit code decides; these counts only describe.
//!
//! `coverage-rollup.sh` (cpm 3.11.0) prints tab-separated records, one per line, the record
//! type in the first field: `MATRIX`, `REQ`, `STATE`, `EXCLUDED`, `SUMMARY` (spec scope only,
//! and counting requirements, not rows), `ROW`, `CRITERION` (a story-originated row, with no
//! requirement behind it) and `UNRESOLVED` (a row whose label names no single requirement).
//! Anything else on stdout is not a record and is skipped.

use std::collections::{BTreeSet, HashMap};

/// A requirement's state in spec scope (a `STATE` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqState {
    /// No matrix row traces it.
    Untraced,
    /// Traced, some rows unverified.
    InProgress,
    /// Every row verified.
    Delivered,
}

/// One matrix row: a `ROW`, or a `CRITERION` (then `req` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// The matrix, relative to the project root.
    pub(crate) matrix: String,
    /// The requirement the row traces (`None` for a story-originated criterion).
    pub(crate) req: Option<String>,
    /// The row's label as written (`FR1 (must NOT)`).
    pub(crate) label: String,
    /// The story that covers it (`Story 3`).
    pub(crate) story: String,
    /// The Verified cell holds the tick.
    pub(crate) verified: bool,
    /// The spec's test approach for the row (`[unit]`, `[target]`).
    pub(crate) spec_tag: String,
    /// The tags written in the story criterion itself.
    pub(crate) criterion_tag: String,
}

impl Row {
    /// The row cannot be verified in this environment: its tags say `[target]` and nothing
    /// checkable, in both tag columns when the criterion has tags of its own (the roll-up's
    /// rule for exit 5; a disagreement keeps the row in play).
    pub(crate) fn withheld(&self) -> bool {
        fn target_only(tag: &str) -> bool {
            tag.contains("[target]")
                && !["[unit]", "[integration]", "[feature]"]
                    .iter()
                    .any(|t| tag.contains(t))
        }
        target_only(&self.spec_tag)
            && (self.criterion_tag.is_empty() || target_only(&self.criterion_tag))
    }

    /// How a report names the row: `FR1 (must NOT) — Story 3`.
    pub(crate) fn describe(&self) -> String {
        let label = if self.label.trim().is_empty() {
            format!("(unlabelled row in {})", self.matrix)
        } else {
            self.label.trim().to_string()
        };
        match self.story.trim() {
            "" => label,
            story => format!("{label} — {story}"),
        }
    }
}

/// The four counts of a `SUMMARY` record (requirements, not rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Requirements counted (excluded ones left out).
    pub(crate) requirements: u64,
    /// Requirements no row traces.
    pub(crate) untraced: u64,
    /// Requirements whose rows are all verified.
    pub(crate) delivered: u64,
    /// Requirements with some rows unverified.
    pub(crate) in_progress: u64,
}

/// One roll-up record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// A matrix the roll-up read, and the spec it names.
    Matrix { path: String, spec: String },
    /// A requirement of the spec.
    Req {
        id: String,
        priority: String,
        text: String,
    },
    /// A requirement's state.
    State {
        id: String,
        priority: String,
        state: ReqState,
    },
    /// A requirement the spec rules out (Won't Have).
    Excluded { id: String, priority: String },
    /// The requirement-level summary of a spec.
    Summary(Summary),
    /// A matrix row (`ROW` or `CRITERION`).
    Row(Row),
    /// A row whose label resolves to no single requirement (`ENV1–ENV5`).
    Unresolved {
        matrix: String,
        label: String,
        story: String,
    },
}

/// Every record in the roll-up's stdout, in order; other lines and malformed records are
/// skipped.
pub(crate) fn parse_records(stdout: &str) -> Vec<Record> {
    stdout
        .lines()
        .filter_map(|l| parse_record(l.trim_end_matches('\r')))
        .collect()
}

fn parse_record(line: &str) -> Option<Record> {
    let f: Vec<&str> = line.split('\t').collect();
    let s = |i: usize| f.get(i).map(|v| v.trim().to_string());
    // Trailing tag fields may be empty, and a record printed without them still counts.
    let tag = |i: usize| s(i).unwrap_or_default();
    let verified = |v: &str| match v.trim() {
        "verified" => Some(true),
        "unverified" => Some(false),
        _ => None,
    };
    let number = |i: usize| f.get(i).and_then(|v| v.trim().parse::<u64>().ok());
    Some(match *f.first()? {
        "MATRIX" => Record::Matrix {
            path: s(1)?,
            spec: tag(2),
        },
        "REQ" => Record::Req {
            id: s(1)?,
            priority: s(2)?,
            text: tag(3),
        },
        "STATE" => Record::State {
            id: s(1)?,
            priority: s(2)?,
            state: match s(3)?.as_str() {
                "untraced" => ReqState::Untraced,
                "in-progress" => ReqState::InProgress,
                "delivered" => ReqState::Delivered,
                _ => return None,
            },
        },
        "EXCLUDED" => Record::Excluded {
            id: s(1)?,
            priority: tag(2),
        },
        "SUMMARY" => Record::Summary(Summary {
            requirements: number(2)?,
            untraced: number(3)?,
            delivered: number(4)?,
            in_progress: number(5)?,
        }),
        "ROW" => Record::Row(Row {
            matrix: s(1)?,
            req: Some(s(2)?),
            label: s(3)?,
            story: s(4)?,
            verified: verified(f.get(5)?)?,
            spec_tag: tag(6),
            criterion_tag: tag(7),
        }),
        "CRITERION" => Record::Row(Row {
            matrix: s(1)?,
            req: None,
            label: s(2)?,
            story: s(3)?,
            verified: verified(f.get(4)?)?,
            spec_tag: tag(5),
            criterion_tag: tag(6),
        }),
        "UNRESOLVED" => Record::Unresolved {
            matrix: s(1)?,
            label: s(2)?,
            story: tag(3),
        },
        _ => return None,
    })
}

/// What ralph counts from one roll-up run (SPEC §3.4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Coverage {
    /// Records read (0: the roll-up printed none).
    pub(crate) records: usize,
    /// Distinct matrices (`MATRIX` records).
    pub(crate) matrices: usize,
    /// Matrix rows: `ROW`, `CRITERION` and `UNRESOLVED` records.
    pub(crate) rows: usize,
    /// Rows marked verified.
    pub(crate) verified: usize,
    /// Spec scope: the requirements counted (`STATE` records; excluded ones are left out).
    pub(crate) requirements: usize,
    /// Spec scope: requirements some row traces.
    pub(crate) traced: usize,
    /// The untraced requirements, `FR2 — text`.
    pub(crate) untraced: Vec<String>,
    /// The traced requirements' ids.
    pub(crate) traced_ids: Vec<String>,
    /// Rows still to verify here (unverified and checkable, or unresolved), described.
    pub(crate) unverified: Vec<String>,
    /// Unverified rows that only the deployment target can verify, described.
    pub(crate) target_only: Vec<String>,
}

impl Coverage {
    /// Count the records.
    pub(crate) fn count(records: &[Record]) -> Coverage {
        let mut c = Coverage {
            records: records.len(),
            ..Coverage::default()
        };
        let mut matrices = BTreeSet::new();
        let mut texts: HashMap<&str, &str> = HashMap::new();
        for r in records {
            if let Record::Req { id, text, .. } = r {
                texts.insert(id, text);
            }
        }
        for r in records {
            match r {
                Record::Matrix { path, .. } => {
                    matrices.insert(path.as_str());
                }
                Record::State { id, state, .. } => {
                    c.requirements += 1;
                    if *state == ReqState::Untraced {
                        c.untraced.push(match texts.get(id.as_str()) {
                            Some(t) if !t.is_empty() => format!("{id} — {t}"),
                            _ => id.clone(),
                        });
                    } else {
                        c.traced += 1;
                        c.traced_ids.push(id.clone());
                    }
                }
                Record::Row(row) => {
                    c.rows += 1;
                    if row.verified {
                        c.verified += 1;
                    } else if row.withheld() {
                        c.target_only.push(row.describe());
                    } else {
                        c.unverified.push(row.describe());
                    }
                }
                Record::Unresolved { label, story, .. } => {
                    c.rows += 1;
                    c.unverified
                        .push(format!("{label} — {story} (names no single requirement)"));
                }
                Record::Req { .. } | Record::Excluded { .. } | Record::Summary(_) => {}
            }
        }
        c.matrices = matrices.len();
        c
    }

    /// The figures ralph relays: `N of M rows marked verified across K matrices`, and in spec
    /// mode `, T of R requirements traced`.
    pub(crate) fn figures(&self, spec: bool) -> String {
        let mut s = format!(
            "{} of {} marked verified across {}",
            self.verified,
            plural(self.rows, "row", "rows"),
            plural(self.matrices, "matrix", "matrices")
        );
        if spec {
            s.push_str(&format!(
                ", {} of {} traced",
                self.traced,
                plural(self.requirements, "requirement", "requirements")
            ));
        }
        s
    }

    /// The progress measure (SPEC §3.4): verified rows plus traced requirements, so a
    /// requirement spread over many rows moves row by row, and planning moves the traced
    /// count.
    pub(crate) fn progress(&self) -> usize {
        self.verified + self.traced
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SPEC_SCOPE: &str = "MATRIX\tdocs/epics/45-01-coverage-a.md\tdocs/specifications/45-spec-x.md\n\
        REQ\tFR1\tMust Have\tsearch works\n\
        REQ\tFR2\tMust Have\tresults are ranked\n\
        REQ\tFR9\tWon't Have (this iteration)\tvoice\n\
        STATE\tFR2\tMust Have\tuntraced\n\
        STATE\tFR1\tMust Have\tin-progress\n\
        EXCLUDED\tFR9\tWon't Have (this iteration)\n\
        SUMMARY\tspec\t2\t1\t0\t1\n\
        ROW\tdocs/epics/45-01-coverage-a.md\tFR1\tFR1\tStory 1\tverified\t[unit]\t[unit]\n\
        ROW\tdocs/epics/45-01-coverage-a.md\tFR1\tFR1 (must NOT)\tStory 1\tunverified\t[unit]\t\n\
        ROW\tdocs/epics/45-01-coverage-a.md\tFR1\tFR1 host\tStory 2\tunverified\t[target]\t\n\
        CRITERION\tdocs/epics/45-01-coverage-a.md\t(story-originated)\tStory 2\tverified\t—\t[unit]\n\
        UNRESOLVED\tdocs/epics/45-01-coverage-a.md\tENV1–ENV5\tStory 3\n";

    #[test]
    fn records_parse_into_types() {
        let r = parse_records(&format!(
            "coverage-rollup: project root /x\n{SPEC_SCOPE}junk\n"
        ));
        assert_eq!(r.len(), 13);
        assert_eq!(
            r[0],
            Record::Matrix {
                path: "docs/epics/45-01-coverage-a.md".into(),
                spec: "docs/specifications/45-spec-x.md".into()
            }
        );
        assert_eq!(
            r[7],
            Record::Summary(Summary {
                requirements: 2,
                untraced: 1,
                delivered: 0,
                in_progress: 1
            })
        );
        let Record::Row(row) = &r[9] else {
            panic!("{:?}", r[9])
        };
        assert_eq!(row.req.as_deref(), Some("FR1"));
        assert_eq!(row.label, "FR1 (must NOT)");
        assert!(!row.verified && row.criterion_tag.is_empty());
        let Record::Row(crit) = &r[11] else {
            panic!("{:?}", r[11])
        };
        assert_eq!((crit.req.as_deref(), crit.verified), (None, true));
        // Malformed records are skipped, never guessed at.
        assert!(
            parse_records(
                "ROW\tm\tFR1\tFR1\tS\tmaybe\t\t\nSTATE\tFR1\tMust\tdone\nSUMMARY\tspec\tx\n"
            )
            .is_empty()
        );
    }

    #[test]
    fn coverage_counts_rows_and_requirements() {
        let c = Coverage::count(&parse_records(SPEC_SCOPE));
        assert_eq!((c.matrices, c.rows, c.verified), (1, 5, 2));
        assert_eq!((c.requirements, c.traced), (2, 1));
        assert_eq!(c.untraced, ["FR2 — results are ranked"]);
        assert_eq!(c.traced_ids, ["FR1"]);
        assert_eq!(
            c.unverified,
            [
                "FR1 (must NOT) — Story 1",
                "ENV1–ENV5 — Story 3 (names no single requirement)"
            ]
        );
        assert_eq!(c.target_only, ["FR1 host — Story 2"]);
        assert_eq!(
            c.figures(true),
            "2 of 5 rows marked verified across 1 matrix, 1 of 2 requirements traced"
        );
        assert_eq!(c.progress(), 3);
        let none = Coverage::default();
        assert_eq!(
            none.figures(true),
            "0 of 0 rows marked verified across 0 matrices, 0 of 0 requirements traced"
        );
    }

    #[test]
    fn epic_scope_has_no_summary_and_counts_rows() {
        let out = "MATRIX\tdocs/epics/01-coverage-a.md\t\n\
            MATRIX\tdocs/epics/02-coverage-b.md\t\n\
            ROW\tdocs/epics/01-coverage-a.md\tFR1\tFR1\tStory 1\tverified\t[unit]\t\n\
            ROW\tdocs/epics/02-coverage-b.md\tFR2\tFR2\tStory 1\tunverified\t[unit]\t\n";
        let c = Coverage::count(&parse_records(out));
        assert_eq!(
            c.figures(false),
            "1 of 2 rows marked verified across 2 matrices"
        );
        assert_eq!(c.unverified, ["FR2 — Story 1"]);
    }

    #[test]
    fn withholding_needs_both_tags_to_agree() {
        let row = |spec: &str, crit: &str| Row {
            matrix: "m".into(),
            req: Some("ENV1".into()),
            label: String::new(),
            story: String::new(),
            verified: false,
            spec_tag: spec.into(),
            criterion_tag: crit.into(),
        };
        assert!(row("[target]", "").withheld());
        assert!(row("[target]", "[target] [manual]").withheld());
        assert!(!row("[target]", "[integration]").withheld());
        assert!(!row("[target] [unit]", "").withheld());
        assert!(!row("[unit]", "[target]").withheld());
        assert_eq!(row("", "").describe(), "(unlabelled row in m)");
    }

    proptest! {
        #[test]
        fn record_readers_never_panic(text in "(\\PC|\n|\t|ROW|CRITERION|STATE|SUMMARY|MATRIX|REQ|UNRESOLVED|verified|untraced|[0-9])*") {
            let c = Coverage::count(&parse_records(&text));
            let _ = c.figures(true);
            prop_assert!(c.verified <= c.rows);
            prop_assert!(c.traced <= c.requirements);
        }
    }
}
