//! The verdict command (SPEC §3.3): a roll-up whose exit code decides, its figures relayed
//! (a generic command's SUMMARY line verbatim; CPM counts the roll-up's records itself).

/// What a verdict command's exit code means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VerdictClass {
    /// 0: every row verified.
    Verified,
    /// 3: rows unverified: keep working.
    Unverified,
    /// 4: nothing planned for this spec yet (spec mode only).
    NothingPlanned,
    /// 5: target-only rows that cannot be verified here (their labels).
    TargetOnly(Vec<String>),
    /// Any other code (or none): the check could not run.
    Unavailable,
}

/// One run of the verdict command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) exit_code: i32,
    pub(crate) class: VerdictClass,
    /// The figures: the `SUMMARY` line, else the last non-empty stdout line, verbatim
    /// (trimmed); in CPM mode the figures ralph counted from the roll-up's records.
    pub(crate) summary: Option<String>,
    /// What explains the verdict, one line each: the rows still unverified (exit 3), or what
    /// the command said on stderr when it could not run. Empty when there is nothing to add.
    pub(crate) details: Vec<String>,
}

impl Verdict {
    pub(crate) fn from_output(exit_code: i32, stdout: &str) -> Verdict {
        let class = match exit_code {
            0 => VerdictClass::Verified,
            3 => VerdictClass::Unverified,
            4 => VerdictClass::NothingPlanned,
            5 => VerdictClass::TargetOnly(target_only_rows(stdout)),
            _ => VerdictClass::Unavailable,
        };
        Verdict {
            exit_code,
            class,
            summary: summary_line(stdout),
            details: Vec::new(),
        }
    }

    /// The details as one clause: at most `max` of them joined by `; `, then how many more.
    pub(crate) fn details_listed(&self, max: usize) -> String {
        let mut s = self
            .details
            .iter()
            .take(max)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("; ");
        if self.details.len() > max {
            s.push_str(&format!("; … and {} more", self.details.len() - max));
        }
        s
    }

    /// The ITER figures: the summary verbatim, or a placeholder naming the exit code.
    pub(crate) fn figures(&self) -> String {
        self.summary
            .clone()
            .unwrap_or_else(|| format!("verdict exit {} (no output)", self.exit_code))
    }
}

/// The verdict's summary: the last line starting with `SUMMARY` (verbatim, trimmed), else the
/// last non-empty line.
pub(crate) fn summary_line(stdout: &str) -> Option<String> {
    let is_summary = |l: &str| {
        l.strip_prefix("SUMMARY")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', ':']))
    };
    let mut lines = stdout
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty());
    lines
        .clone()
        .find(|l| is_summary(l))
        .or_else(|| lines.next())
        .map(str::to_string)
}

/// The labels of target-only rows a verdict exit 5 printed: lines starting with `TARGET-ONLY`
/// or `TARGET` (one per row), else every non-summary line.
pub(crate) fn target_only_rows(stdout: &str) -> Vec<String> {
    let lines: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("SUMMARY"))
        .collect();
    let tagged: Vec<String> = lines
        .iter()
        .filter(|l| l.starts_with("TARGET"))
        .map(|l| {
            l.trim_start_matches("TARGET-ONLY")
                .trim_start_matches("TARGET")
                .trim_start_matches([':', ' ', '\t'])
                .to_string()
        })
        .filter(|l| !l.is_empty())
        .collect();
    if tagged.is_empty() {
        lines.into_iter().map(str::to_string).collect()
    } else {
        tagged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_to_classes() {
        assert_eq!(Verdict::from_output(0, "").class, VerdictClass::Verified);
        assert_eq!(Verdict::from_output(3, "").class, VerdictClass::Unverified);
        assert_eq!(
            Verdict::from_output(4, "").class,
            VerdictClass::NothingPlanned
        );
        assert_eq!(Verdict::from_output(1, "").class, VerdictClass::Unavailable);
        assert_eq!(
            Verdict::from_output(127, "").class,
            VerdictClass::Unavailable
        );
        assert_eq!(
            Verdict::from_output(
                5,
                "TARGET-ONLY: R3 deploy works\nTARGET-ONLY: R7 cdn\nSUMMARY x"
            )
            .class,
            VerdictClass::TargetOnly(vec!["R3 deploy works".into(), "R7 cdn".into()])
        );
    }

    #[test]
    fn summary_is_verbatim_else_last_line() {
        let out = "row 1 unverified\nSUMMARY verified=3 unverified=2  \nbye\n\n";
        assert_eq!(
            summary_line(out).as_deref(),
            Some("SUMMARY verified=3 unverified=2")
        );
        assert_eq!(summary_line("a\nb\n  \n").as_deref(), Some("b"));
        assert_eq!(summary_line(""), None);
        assert_eq!(
            Verdict::from_output(2, "").figures(),
            "verdict exit 2 (no output)"
        );
    }

    #[test]
    fn long_details_are_cut() {
        let mut v = Verdict::from_output(3, "");
        v.details = (1..=4).map(|i| format!("R{i}")).collect();
        assert_eq!(v.details_listed(2), "R1; R2; … and 2 more");
        assert_eq!(v.details_listed(9), "R1; R2; R3; R4");
    }

    #[test]
    fn target_rows_fall_back_to_all_lines() {
        assert_eq!(target_only_rows("R1\nR2\nSUMMARY s\n"), vec!["R1", "R2"]);
    }
}
