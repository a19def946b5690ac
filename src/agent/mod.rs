//! Agents (SPEC §4): presets and custom templates turned into an argv, never through a shell.

pub mod process;
pub mod stream;
pub mod unix;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::AgentChoice;
use crate::error::{Error, Result};

/// A prompt longer than this never travels as one argument (Linux refuses a single argument over
/// 128 KiB); presets switch to stdin and custom `{prompt}` templates are refused.
pub const MAX_PROMPT_ARG: usize = 100 * 1024;

/// The four presets and what installs them.
pub const PRESETS: &[(&str, &str)] = &[
    ("copilot", "npm install -g @github/copilot"),
    ("claude", "npm install -g @anthropic-ai/claude-code"),
    ("codex", "npm install -g @openai/codex"),
    ("gemini", "npm install -g @google/gemini-cli"),
];

/// One piece of an argv template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    /// An argument containing `{prompt}` and/or `{prompt_file}`, substituted at spawn time.
    Template(String),
}

/// Where the prompt goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptVia {
    Argument,
    File,
    Stdin,
}

/// A resolved agent: how to build its argv for a given prompt.
#[derive(Debug, Clone)]
pub struct Agent {
    /// `copilot`, `claude`, … or `custom`.
    pub name: String,
    pub program: String,
    /// The absolute path the program resolved to on PATH.
    pub resolved: Option<PathBuf>,
    args: Vec<Part>,
    /// For presets: the argv to use when the prompt goes through stdin.
    stdin_args: Option<Vec<Part>>,
    pub env: Vec<(String, String)>,
    /// Things to say once (e.g. `IS_SANDBOX=1` for claude as root).
    pub notes: Vec<String>,
}

/// What to spawn for one iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: String,
    pub args: Vec<OsString>,
    pub stdin: Option<Vec<u8>>,
    pub env: Vec<(String, String)>,
}

impl Invocation {
    /// The argv for display, with a long prompt abbreviated.
    pub fn display(&self) -> String {
        let mut words = vec![self.program.clone()];
        for a in &self.args {
            let a = a.to_string_lossy();
            if a.len() > 80 {
                words.push(format!("<prompt: {} bytes>", a.len()));
            } else {
                words.push(shell_words::quote(&a).into_owned());
            }
        }
        let mut s = words.join(" ");
        if let Some(input) = &self.stdin {
            s.push_str(&format!(" < <prompt: {} bytes on stdin>", input.len()));
        }
        s
    }
}

fn install_hint(program: &str) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|(name, _)| *name == program)
        .map(|(_, hint)| *hint)
}

fn literal(words: &[&str]) -> Vec<Part> {
    words.iter().map(|w| Part::Literal(w.to_string())).collect()
}

impl Agent {
    /// Resolve the configured agent. `probe` allows spawning `copilot --help` once to learn
    /// which permission flag it accepts (dry runs pass false and show `--yolo`).
    pub fn resolve(choice: &AgentChoice, probe: bool) -> Result<Agent> {
        let mut agent = match choice {
            AgentChoice::Preset(name) => Self::preset(name)?,
            AgentChoice::Template(t) => Self::template(t)?,
        };
        agent.resolved = Some(find_program(&agent.program)?);
        if agent.name == "copilot" && probe {
            let flag = copilot_permission_flag(agent.resolved.as_deref().unwrap_or(Path::new("")));
            if flag != "--yolo" {
                agent
                    .notes
                    .push(format!("this copilot rejects --yolo; using {flag}"));
            }
            for args in [&mut agent.args]
                .into_iter()
                .chain(agent.stdin_args.as_mut())
            {
                for p in args.iter_mut() {
                    if *p == Part::Literal("--yolo".into()) {
                        *p = Part::Literal(flag.to_string());
                    }
                }
            }
        }
        Ok(agent)
    }

    fn preset(name: &str) -> Result<Agent> {
        let prompt = || Part::Template("{prompt}".into());
        let (args, stdin_args) = match name {
            "copilot" => (
                vec![
                    Part::Literal("-p".into()),
                    prompt(),
                    Part::Literal("--yolo".into()),
                ],
                literal(&["--yolo"]),
            ),
            "claude" => {
                let tail = [
                    "--dangerously-skip-permissions",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                ];
                let mut args = vec![Part::Literal("-p".into()), prompt()];
                args.extend(literal(&tail));
                let mut stdin = literal(&["-p"]);
                stdin.extend(literal(&tail));
                (args, stdin)
            }
            "codex" => {
                let mut args = literal(&["exec", "--dangerously-bypass-approvals-and-sandbox"]);
                args.push(prompt());
                (
                    args,
                    literal(&["exec", "--dangerously-bypass-approvals-and-sandbox", "-"]),
                )
            }
            "gemini" => (
                vec![
                    Part::Literal("-p".into()),
                    prompt(),
                    Part::Literal("--yolo".into()),
                ],
                literal(&["--yolo"]),
            ),
            other => {
                let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
                return Err(
                    Error::user(format!("unknown agent `{other}`")).with_hint(format!(
                        "use one of {}, or --agent-cmd 'PROGRAM ARGS {{prompt}}'",
                        names.join(", ")
                    )),
                );
            }
        };
        let mut agent = Agent {
            name: name.to_string(),
            program: name.to_string(),
            resolved: None,
            args,
            stdin_args: Some(stdin_args),
            env: Vec::new(),
            notes: Vec::new(),
        };
        if name == "claude" && nix::unistd::Uid::effective().is_root() {
            agent.env.push(("IS_SANDBOX".into(), "1".into()));
            agent.notes.push(
                "running as root: setting IS_SANDBOX=1 so claude accepts --dangerously-skip-permissions"
                    .into(),
            );
        }
        Ok(agent)
    }

    fn template(template: &str) -> Result<Agent> {
        let words = shell_words::split(template).map_err(|e| {
            Error::user(format!("cannot split --agent-cmd `{template}`: {e}")).with_hint(
                "quote arguments as in a shell: --agent-cmd 'prog --flag \"two words\" {prompt}'",
            )
        })?;
        let Some((program, rest)) = words.split_first() else {
            return Err(Error::user("--agent-cmd is empty"));
        };
        if program.contains("{prompt") {
            return Err(Error::user(format!(
                "--agent-cmd `{template}` starts with a placeholder; it must start with the program"
            )));
        }
        let args = rest
            .iter()
            .map(|w| {
                if w.contains("{prompt}") || w.contains("{prompt_file}") {
                    Part::Template(w.clone())
                } else {
                    Part::Literal(w.clone())
                }
            })
            .collect();
        Ok(Agent {
            name: "custom".into(),
            program: program.clone(),
            resolved: None,
            args,
            stdin_args: None,
            env: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// How this agent receives a prompt of `len` bytes.
    pub fn prompt_via(&self, len: usize) -> PromptVia {
        let mut via = PromptVia::Stdin;
        for p in &self.args {
            if let Part::Template(t) = p {
                if t.contains("{prompt}") {
                    via = PromptVia::Argument;
                } else if via == PromptVia::Stdin {
                    via = PromptVia::File;
                }
            }
        }
        if via == PromptVia::Argument && len > MAX_PROMPT_ARG && self.stdin_args.is_some() {
            PromptVia::Stdin
        } else {
            via
        }
    }

    /// Build the argv for one prompt; `prompt_file` is where the prompt was saved.
    pub fn invocation(&self, prompt: &str, prompt_file: &Path) -> Result<Invocation> {
        let via = self.prompt_via(prompt.len());
        if via == PromptVia::Argument && prompt.len() > MAX_PROMPT_ARG {
            return Err(Error::user(format!(
                "the prompt is {} KiB, too long to pass as one argument (limit {} KiB)",
                prompt.len() / 1024,
                MAX_PROMPT_ARG / 1024
            ))
            .with_hint("use {prompt_file} in --agent-cmd, or leave out the placeholder to send it on stdin"));
        }
        let parts = match (via, &self.stdin_args) {
            (PromptVia::Stdin, Some(stdin_args)) => stdin_args,
            _ => &self.args,
        };
        let file = prompt_file.to_string_lossy();
        let args = parts
            .iter()
            .map(|p| match p {
                Part::Literal(s) => OsString::from(s),
                Part::Template(t) => OsString::from(
                    t.replace("{prompt_file}", &file)
                        .replace("{prompt}", prompt),
                ),
            })
            .collect();
        let program = self.resolved.as_ref().map_or_else(
            || self.program.clone(),
            |p| p.to_string_lossy().into_owned(),
        );
        Ok(Invocation {
            program,
            args,
            stdin: (via == PromptVia::Stdin).then(|| prompt.as_bytes().to_vec()),
            env: self.env.clone(),
        })
    }
}

/// Find a program on PATH (or at the given path), with the install hint when it is missing.
pub fn find_program(program: &str) -> Result<PathBuf> {
    let found = if program.contains('/') {
        let p = PathBuf::from(program);
        is_executable(&p).then_some(p)
    } else {
        which::which(program).ok()
    };
    found.ok_or_else(|| {
        let err = Error::user(format!("agent `{program}` not found on PATH"));
        match install_hint(program) {
            Some(hint) => err.with_hint(format!("install it with `{hint}`")),
            None if program.contains('/') => {
                err.with_hint("check that the file exists and is executable")
            }
            None => err.with_hint("check the program name in --agent-cmd, or its PATH"),
        }
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Ask `copilot --help` which permission flag it knows: `--yolo`, else `--allow-all`, else
/// `--allow-all-tools` (older versions).
fn copilot_permission_flag(program: &Path) -> &'static str {
    let help = crate::brief::run(
        std::process::Command::new(program).arg("--help"),
        Duration::from_secs(10),
    )
    .map(|b| b.output)
    .unwrap_or_default();
    pick_permission_flag(&help)
}

fn pick_permission_flag(help: &str) -> &'static str {
    let has = |flag: &str| {
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']' || c == '=')
            .any(|w| w == flag)
    };
    if has("--yolo") {
        "--yolo"
    } else if has("--allow-all") {
        "--allow-all"
    } else if has("--allow-all-tools") {
        "--allow-all-tools"
    } else {
        "--yolo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn custom(t: &str) -> Agent {
        Agent::template(t).unwrap()
    }

    fn args(inv: &Invocation) -> Vec<String> {
        inv.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn presets_build_the_documented_argv() {
        let file = Path::new("/tmp/p.md");
        let cases = [
            ("copilot", vec!["-p", "hi", "--yolo"]),
            (
                "claude",
                vec![
                    "-p",
                    "hi",
                    "--dangerously-skip-permissions",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                ],
            ),
            (
                "codex",
                vec!["exec", "--dangerously-bypass-approvals-and-sandbox", "hi"],
            ),
            ("gemini", vec!["-p", "hi", "--yolo"]),
        ];
        for (name, want) in cases {
            let inv = Agent::preset(name).unwrap().invocation("hi", file).unwrap();
            assert_eq!(inv.program, name);
            assert_eq!(args(&inv), want, "{name}");
            assert_eq!(inv.stdin, None);
        }
    }

    #[test]
    fn presets_switch_to_stdin_for_huge_prompts() {
        let big = "x".repeat(MAX_PROMPT_ARG + 1);
        let file = Path::new("/tmp/p.md");
        for (name, want) in [
            ("copilot", vec!["--yolo"]),
            (
                "codex",
                vec!["exec", "--dangerously-bypass-approvals-and-sandbox", "-"],
            ),
            ("gemini", vec!["--yolo"]),
        ] {
            let inv = Agent::preset(name).unwrap().invocation(&big, file).unwrap();
            assert_eq!(args(&inv), want, "{name}");
            assert_eq!(inv.stdin.as_deref(), Some(big.as_bytes()));
        }
        let claude = Agent::preset("claude")
            .unwrap()
            .invocation(&big, file)
            .unwrap();
        assert_eq!(args(&claude)[0], "-p");
        assert!(!args(&claude).iter().any(|a| a.len() > 100));
    }

    #[test]
    fn claude_never_gets_yolo() {
        let inv = Agent::preset("claude")
            .unwrap()
            .invocation("p", Path::new("f"))
            .unwrap();
        assert!(!args(&inv).contains(&"--yolo".to_string()));
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let e = Agent::preset("cursor").unwrap_err();
        assert!(e.to_string().contains("`cursor`"));
        assert!(e.hint().unwrap().contains("copilot, claude, codex, gemini"));
    }

    #[test]
    fn template_places_prompt_as_one_argument() {
        let inv = custom("prog --flag 'two words' {prompt}")
            .invocation("a prompt with spaces; $(rm -rf /)", Path::new("/f"))
            .unwrap();
        assert_eq!(
            args(&inv),
            vec!["--flag", "two words", "a prompt with spaces; $(rm -rf /)"]
        );
        assert_eq!(inv.stdin, None);
    }

    #[test]
    fn template_with_prompt_file_and_inline_placeholders() {
        let inv = custom("prog --in={prompt_file}")
            .invocation("p", Path::new("/r/.ralph/runs/x/iter-001.prompt.md"))
            .unwrap();
        assert_eq!(args(&inv), vec!["--in=/r/.ralph/runs/x/iter-001.prompt.md"]);
        assert_eq!(inv.stdin, None);
    }

    #[test]
    fn template_without_placeholder_uses_stdin() {
        let inv = custom("./agent.sh --fast")
            .invocation("prompt", Path::new("/f"))
            .unwrap();
        assert_eq!(args(&inv), vec!["--fast"]);
        assert_eq!(inv.stdin.as_deref(), Some(&b"prompt"[..]));
    }

    #[test]
    fn template_refuses_a_huge_prompt_argument() {
        let big = "y".repeat(MAX_PROMPT_ARG + 1);
        let e = custom("prog {prompt}")
            .invocation(&big, Path::new("/f"))
            .unwrap_err();
        assert!(e.hint().unwrap().contains("{prompt_file}"));
        // {prompt_file} is fine at any size
        assert!(
            custom("prog {prompt_file}")
                .invocation(&big, Path::new("/f"))
                .is_ok()
        );
    }

    #[test]
    fn template_errors() {
        assert!(Agent::template("").is_err());
        assert!(Agent::template("prog 'unterminated").is_err());
        assert!(Agent::template("{prompt} x").is_err());
    }

    #[test]
    fn missing_program_has_install_hint() {
        let e = find_program("claude-definitely-not-installed").unwrap_err();
        assert!(e.to_string().contains("not found on PATH"));
        let e = find_program("/nonexistent/agent").unwrap_err();
        assert!(e.hint().unwrap().contains("executable"));
    }

    #[test]
    fn permission_flag_probe_reads_help_text() {
        assert_eq!(pick_permission_flag("  --yolo  Allow all"), "--yolo");
        assert_eq!(
            pick_permission_flag("  --allow-all-tools  x\n  --allow-all  y"),
            "--allow-all"
        );
        assert_eq!(
            pick_permission_flag("  --allow-all-tools  x"),
            "--allow-all-tools"
        );
        assert_eq!(pick_permission_flag(""), "--yolo");
    }
}
