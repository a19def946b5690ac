//! The `ITER` record (SPEC §5.4): the line ralph writes for every iteration, to
//! `.ralph/iterations.log` and to CPM's log, read back by `status`, the CPM pre-flight and a
//! resume; and the STALLED rule over the last three. Its own room, below the state and the task
//! sources that both read it.

use serde::{Deserialize, Serialize};

/// What an ITER record's commit or fingerprint says when ralph could not read it (HEAD
/// unreadable, `git status` failing): never equal to anything, so it never makes a stall.
pub(crate) const UNKNOWN: &str = "unknown";

/// The exit field of an ITER record: the verdict's code when there is one, else the agent's; or
/// `error` when the iteration ended in an error (SPEC §11: a phase failed, git refused, a write
/// failed, the agent cannot log in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IterExit {
    Code(i32),
    Error,
}

impl std::fmt::Display for IterExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IterExit::Code(c) => write!(f, "{c}"),
            IterExit::Error => f.write_str("error"),
        }
    }
}

impl std::str::FromStr for IterExit {
    type Err = ();

    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        match s {
            "error" => Ok(IterExit::Error),
            code => code.parse().map(IterExit::Code).map_err(|_| ()),
        }
    }
}

/// One `ITER {n} | {figures} | exit {code} | {commit} | {fingerprint}` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IterRecord {
    /// The iteration number, when it parses.
    pub(crate) iteration: Option<u32>,
    /// The figures, verbatim.
    pub(crate) figures: String,
    /// The exit field's value (`3`, `error`, or whatever was written).
    pub(crate) exit: String,
    /// The agent of the iteration, when the run has fallback agents (`agent NAME`).
    pub(crate) agent: Option<String>,
    /// The short HEAD or `no-commit`.
    pub(crate) commit: String,
    /// The `git status --porcelain | cksum` output.
    pub(crate) fingerprint: String,
}

impl IterRecord {
    /// The exit field read: a code or `error`; `None` for anything else (a record ralph did
    /// not write).
    pub(crate) fn ended(&self) -> Option<IterExit> {
        self.exit.parse().ok()
    }
}

/// Parse an `ITER` record; fields are read from both ends so figures containing ` | ` survive.
/// A run with fallback agents writes `agent NAME` between the exit and the commit.
pub(crate) fn parse_iter_record(line: &str) -> Option<IterRecord> {
    let line = line.trim();
    let rest = line.strip_prefix("ITER ")?;
    let mut fields: Vec<&str> = rest.split(" | ").collect();
    if fields.len() < 5 {
        return None;
    }
    let n = fields.len();
    let agent = match fields[n - 3].trim().strip_prefix("agent ") {
        Some(name) if n >= 6 => {
            let name = name.trim().to_string();
            fields.remove(n - 3);
            Some(name)
        }
        _ => None,
    };
    let n = fields.len();
    let exit = fields[n - 3].trim();
    let exit = exit.strip_prefix("exit").map_or(exit, str::trim);
    Some(IterRecord {
        iteration: fields[0].trim().parse().ok(),
        figures: fields[1..n - 3].join(" | ").trim().to_string(),
        exit: exit.to_string(),
        agent,
        commit: fields[n - 2].trim().to_string(),
        fingerprint: fields[n - 1].trim().to_string(),
    })
}

/// The STALLED condition: at least three records, and the last three carry the same figures,
/// commit and fingerprint (an [`UNKNOWN`] one never matches). How an iteration ended (its exit)
/// is not part of it: an iteration that ended in an error and changed nothing changed nothing.
pub(crate) fn last_three_repeat(records: &[IterRecord]) -> bool {
    let keys: Vec<IterKey> = records
        .iter()
        .map(|r| IterKey {
            figures: r.figures.clone(),
            commit: r.commit.clone(),
            fingerprint: r.fingerprint.clone(),
        })
        .collect();
    last_three_keys_repeat(&keys)
}

/// [`last_three_repeat`] over the keys a run state records.
pub(crate) fn last_three_keys_repeat(keys: &[IterKey]) -> bool {
    let [.., a, b, c] = keys else {
        return false;
    };
    a.same_as(b) && b.same_as(c)
}

/// One ITER record's identity for the STALLED rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IterKey {
    pub(crate) figures: String,
    pub(crate) commit: String,
    pub(crate) fingerprint: String,
}

impl IterKey {
    /// The record as `.ralph/iterations.log` (or the CPM log) holds it (SPEC §5.4).
    pub(crate) fn record(&self, n: u32, exit: IterExit) -> String {
        format!(
            "ITER {n} | {} | exit {exit} | {} | {}",
            self.figures, self.commit, self.fingerprint
        )
    }

    /// [`IterKey::record`] naming the agent of the iteration (a run with fallback agents).
    pub(crate) fn record_by(&self, n: u32, exit: IterExit, agent: Option<&str>) -> String {
        match agent {
            Some(name) => format!(
                "ITER {n} | {} | exit {exit} | agent {name} | {} | {}",
                self.figures, self.commit, self.fingerprint
            ),
            None => self.record(n, exit),
        }
    }

    /// The same figures, commit and fingerprint — the STALLED rule's "no change". A commit or
    /// fingerprint ralph could not read ([`UNKNOWN`]) proves no sameness.
    pub(crate) fn same_as(&self, other: &IterKey) -> bool {
        let known = |k: &IterKey| k.commit != UNKNOWN && k.fingerprint != UNKNOWN;
        known(self) && self == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iter_records_parse_from_both_ends() {
        let r = parse_iter_record("ITER 4 | SUMMARY a | b | exit 3 | abc1234 | 1 2").unwrap();
        assert_eq!(r.iteration, Some(4));
        assert_eq!(r.figures, "SUMMARY a | b");
        assert_eq!(r.exit, "3");
        assert_eq!(
            (r.commit.as_str(), r.fingerprint.as_str()),
            ("abc1234", "1 2")
        );
        assert!(parse_iter_record("ITER 1 | too | few").is_none());
        let key = IterKey {
            figures: "1/2 criteria".into(),
            commit: "abc".into(),
            fingerprint: "1 2".into(),
        };
        assert_eq!(
            parse_iter_record(&key.record(7, IterExit::Code(0)))
                .unwrap()
                .figures,
            "1/2 criteria"
        );
    }

    #[test]
    fn a_record_naming_its_agent_reads_back() {
        let key = IterKey {
            figures: "SUMMARY a | b".into(),
            commit: "abc1234".into(),
            fingerprint: "1 2".into(),
        };
        let line = key.record_by(2, IterExit::Code(0), Some("qwen"));
        assert_eq!(
            line,
            "ITER 2 | SUMMARY a | b | exit 0 | agent qwen | abc1234 | 1 2"
        );
        let r = parse_iter_record(&line).unwrap();
        assert_eq!(r.agent.as_deref(), Some("qwen"));
        assert_eq!(r.figures, "SUMMARY a | b");
        assert_eq!(r.ended(), Some(IterExit::Code(0)));
        assert_eq!(r.commit, "abc1234");
        // Without an agent: the record as before, no agent read.
        let plain = parse_iter_record(&key.record_by(2, IterExit::Code(0), None)).unwrap();
        assert_eq!(plain.agent, None);
        assert_eq!(plain.figures, "SUMMARY a | b");
        // Figures that merely say `agent …` are figures: only the field after the exit names one.
        let r = parse_iter_record("ITER 3 | agent x | exit 1 | abc | 1 2").unwrap();
        assert_eq!((r.agent, r.figures.as_str()), (None, "agent x"));
    }

    #[test]
    fn an_iteration_that_ended_in_an_error_reads_back() {
        let key = IterKey {
            figures: "1/2 criteria".into(),
            commit: "abc1234".into(),
            fingerprint: "1 2".into(),
        };
        let line = key.record(3, IterExit::Error);
        assert_eq!(line, "ITER 3 | 1/2 criteria | exit error | abc1234 | 1 2");
        let r = parse_iter_record(&line).unwrap();
        assert_eq!(r.iteration, Some(3));
        assert_eq!(r.exit, "error");
        assert_eq!(r.ended(), Some(IterExit::Error));
        assert_eq!(
            (r.commit.as_str(), r.fingerprint.as_str()),
            ("abc1234", "1 2")
        );
        let coded = parse_iter_record(&key.record(4, IterExit::Code(137))).unwrap();
        assert_eq!(coded.ended(), Some(IterExit::Code(137)));
        assert_eq!(
            parse_iter_record("ITER 5 | x | exit what | c | 1 2")
                .unwrap()
                .ended(),
            None
        );
    }

    #[test]
    fn errors_stall_like_any_record_but_unknown_trees_never_do() {
        let rec = |exit: &str, fp: &str| {
            parse_iter_record(&format!("ITER 1 | 0/2 criteria | exit {exit} | abc | {fp}")).unwrap()
        };
        let same = [rec("0", "1 2"), rec("error", "1 2"), rec("0", "1 2")];
        assert!(last_three_repeat(&same), "the exit is not part of the key");
        let unknown = [rec("0", UNKNOWN), rec("error", UNKNOWN), rec("0", UNKNOWN)];
        assert!(
            !last_three_repeat(&unknown),
            "an unread tree proves nothing"
        );
        let k = IterKey {
            figures: "f".into(),
            commit: UNKNOWN.into(),
            fingerprint: "1 2".into(),
        };
        assert!(!k.same_as(&k.clone()));
    }
}
