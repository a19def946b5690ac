//! beads (SPEC §14) through its CLI: `bd`, or `br` (beads_rust) when `bd` is missing. Exit codes
//! decide (errors come as JSON on stdout): `update --claim` exits 4 when someone holds the item,
//! `close` exits 3 when it is closed already (that is done).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use super::{Claim, Item, Text, Tracker};
use crate::error::{Error, Result};
use crate::proc::brief;

/// How long one `bd` command may take.
const DEADLINE: Duration = Duration::from_secs(60);
/// The most of a command's output read.
const OUTPUT_LIMIT: u64 = 16 * 1024 * 1024;

/// The beads CLI in one repository.
pub(crate) struct Beads {
    program: PathBuf,
    root: PathBuf,
    /// Each open item's text as the last [`Tracker::states`] read it.
    texts: Option<BTreeMap<String, Text>>,
}

/// An issue as `ready --json` and `show --json` print it (other fields ignored).
#[derive(Debug, Deserialize)]
struct Issue {
    id: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    acceptance_criteria: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

impl Issue {
    /// Its text: the title, the description, the acceptance criteria as written.
    fn text(&self) -> Text {
        Text {
            title: self.title.clone(),
            body: self.description.clone().unwrap_or_default(),
            criteria: Some(self.acceptance_criteria.clone().unwrap_or_default()),
        }
    }
}

impl Beads {
    /// `$RALPH_BEADS_CMD`, else `bd`, else `br`, on PATH.
    pub(crate) fn find(root: &Path) -> Result<Beads> {
        let named = std::env::var_os("RALPH_BEADS_CMD").map(PathBuf::from);
        let program = named
            .or_else(|| which("bd"))
            .or_else(|| which("br"))
            .ok_or_else(|| {
                Error::user("neither `bd` nor `br` (beads) is on PATH").with_hint(
                    "install beads (`bd`) or beads_rust (`cargo install beads_rust`), or name it with RALPH_BEADS_CMD",
                )
            })?;
        Ok(Beads {
            program,
            root: root.to_path_buf(),
            texts: None,
        })
    }

    /// Run `bd ARGS`: its exit code and stdout; a command that cannot run or runs past its
    /// deadline is an error naming it.
    fn run(&self, args: &[&str]) -> Result<(i32, String, String)> {
        let shown = format!(
            "{} {}",
            self.program.file_name().map_or_else(
                || self.program.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            ),
            args.join(" ")
        );
        let mut cmd = Command::new(&self.program);
        cmd.args(args).current_dir(&self.root);
        let out = brief::run_split(&mut cmd, DEADLINE, OUTPUT_LIMIT)
            .map_err(|e| Error::user(format!("cannot run `{shown}`: {e}")))?;
        let Some(status) = out.status else {
            return Err(Error::user(format!(
                "`{shown}` ran longer than {} s and was killed",
                DEADLINE.as_secs()
            )));
        };
        let code = status.code().unwrap_or(-1);
        Ok((code, out.stdout, out.stderr))
    }

    /// A failed command as an error: what it said (its JSON error on stdout, or stderr).
    fn failed(&self, args: &[&str], code: i32, stdout: &str, stderr: &str) -> Error {
        let said = [stdout.trim(), stderr.trim()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        let said: String = said.chars().take(2000).collect();
        Error::user(format!(
            "`{} {}` failed (exit {code}){}",
            self.program.display(),
            args.join(" "),
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        ))
    }

    fn ok(&self, args: &[&str], also_ok: &[i32]) -> Result<i32> {
        let (code, stdout, stderr) = self.run(args)?;
        if code == 0 || also_ok.contains(&code) {
            Ok(code)
        } else {
            Err(self.failed(args, code, &stdout, &stderr))
        }
    }
}

impl Tracker for Beads {
    fn source(&self) -> &'static str {
        "beads"
    }

    fn ready(&mut self) -> Result<Vec<Item>> {
        let args = ["ready", "--json"];
        let (code, stdout, stderr) = self.run(&args)?;
        if code != 0 {
            return Err(self.failed(&args, code, &stdout, &stderr));
        }
        let issues: Vec<Issue> = serde_json::from_str(stdout.trim()).map_err(|e| {
            Error::user(format!(
                "`{} ready --json` did not print a JSON array of issues: {e}",
                self.program.display()
            ))
        })?;
        Ok(issues
            .into_iter()
            // `ready` also lists issues in progress; only an open one is free to take.
            .filter(|i| i.status.as_deref().is_none_or(|s| s == "open"))
            .map(|i| i.text().item(&i.id))
            .collect())
    }

    fn claim(&mut self, item: &Item) -> Result<Claim> {
        match self.ok(&["update", &item.id, "--claim"], &[4])? {
            4 => Ok(Claim::Taken),
            _ => Ok(Claim::Ours),
        }
    }

    fn close(&mut self, item: &Item, commit: &str) -> Result<()> {
        let reason = format!("ralph: complete at {commit}");
        self.ok(&["close", &item.id, "--reason", &reason], &[3])
            .map(|_| ())
    }

    fn release(&mut self, item: &Item, why: &str) -> Result<()> {
        self.ok(
            &["update", &item.id, "--status", "open", "--assignee", ""],
            &[],
        )?;
        self.ok(&["comments", "add", &item.id, why], &[])
            .map(|_| ())
    }

    fn states(&mut self) -> Result<Option<BTreeMap<String, String>>> {
        #[derive(Deserialize)]
        struct Listed {
            issues: Vec<Issue>,
            #[serde(default)]
            has_more: bool,
        }
        let args = ["list", "--all", "--json"];
        let (code, stdout, stderr) = self.run(&args)?;
        if code != 0 {
            return Err(self.failed(&args, code, &stdout, &stderr));
        }
        let listed: Listed = serde_json::from_str(stdout.trim()).map_err(|e| {
            Error::user(format!(
                "`{} list --all --json` did not print its issues: {e}",
                self.program.display()
            ))
        })?;
        if listed.has_more {
            self.texts = None;
            return Ok(None);
        }
        let texts = listed
            .issues
            .iter()
            .filter(|i| i.status.as_deref().is_none_or(|s| s != "closed"))
            .map(|i| (i.id.clone(), i.text()))
            .collect();
        self.texts = Some(texts);
        Ok(Some(
            listed
                .issues
                .into_iter()
                .map(|i| (i.id, i.status.unwrap_or_default()))
                .collect(),
        ))
    }

    fn texts(&mut self) -> Option<BTreeMap<String, Text>> {
        self.texts.take()
    }

    /// `update` with the fields that differ, as `--field=value` (a value may start with `-`);
    /// with `--force` when br refuses it without (it guards a text from being shortened).
    fn restore_text(&mut self, id: &str, is: &Text, was: &Text, why: &str) -> Result<()> {
        let mut args = vec!["update".to_string(), id.to_string()];
        let fields = [
            ("title", Some(&is.title), Some(&was.title)),
            ("description", Some(&is.body), Some(&was.body)),
            (
                "acceptance-criteria",
                is.criteria.as_ref(),
                was.criteria.as_ref(),
            ),
        ];
        for (field, is, was) in fields {
            if let Some(was) = was.filter(|w| Some(*w) != is) {
                args.push(format!("--{field}={was}"));
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if self.ok(&args, &[]).is_err() {
            let forced = [&args[..], &["--force"]].concat();
            self.ok(&forced, &[])?;
        }
        self.ok(&["comments", "add", id, why], &[]).map(|_| ())
    }

    fn restore(&mut self, id: &str, is: &str, was: &str, why: &str) -> Result<()> {
        if is == "closed" {
            self.ok(&["reopen", id], &[])?;
        }
        if was != "open" || is != "closed" {
            self.ok(&["update", id, "--status", was], &[])?;
        }
        self.ok(&["comments", "add", id, why], &[]).map(|_| ())
    }

    fn claimed(&self, is: &str) -> bool {
        is == "in_progress"
    }

    fn own_paths(&self) -> &'static [&'static str] {
        &[".beads"]
    }
}

/// `program` on PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
