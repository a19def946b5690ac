//! Agents (SPEC §4): presets and custom templates turned into an argv, never through a shell,
//! and their output understood.
//!
//! Each CLI is a unit struct implementing [`Cli`] in a file of its own — its argv, what it
//! prints, its limit and login signals — and one line in [`PRESETS`]; `--agent-cmd` templates
//! are `custom`. Below them all: the vocabulary ([`output`], [`cli`], [`findings`]), the
//! reset-time parser (`reset`), text signals (`signal`) and helpers (`text`); above them, the
//! [`stream::Observer`] that reads an attempt's output (`crate::proc` runs it).

pub(crate) mod chain;
pub(crate) mod cli;
pub(crate) mod findings;
pub(crate) mod output;
pub(crate) mod render;
mod reset;
pub(crate) mod signal;
pub(crate) mod stream;
mod text;
mod tools;
pub(crate) mod views;

mod claude;
mod codex;
mod copilot;
mod custom;
mod droid;
mod gemini;
mod opencode;
mod qwen;

#[cfg(test)]
mod testkit;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) use chain::Chain;
pub(crate) use cli::{Cli, Format, Launch, Part};

use crate::error::{Error, Result};
use crate::proc::Invocation;

/// A prompt longer than this never travels as one argument (Linux refuses a single argument over
/// 128 KiB); presets switch to stdin and custom `{prompt}` templates are refused.
pub(crate) const MAX_PROMPT_ARG: usize = 100 * 1024;

/// How the agent is chosen: a preset name or a custom command template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AgentChoice {
    Preset(String),
    Template(String),
}

/// The presets, in the order they are listed to the user. Adding a CLI is a file implementing
/// [`Cli`] and one line here.
pub(crate) const PRESETS: &[&dyn Cli] = &[
    &copilot::Copilot,
    &claude::Claude,
    &codex::Codex,
    &gemini::Gemini,
    &droid::Droid,
    &opencode::Opencode,
    &qwen::Qwen,
];

/// The preset named `name`.
pub(crate) fn preset(name: &str) -> Option<&'static dyn Cli> {
    PRESETS.iter().copied().find(|cli| cli.name() == name)
}

/// "unknown agent `claud`; did you mean `claude`?" (the suggestion only for a near name).
pub(crate) fn unknown(name: &str) -> String {
    let names = PRESETS.iter().map(|cli| cli.name());
    format!(
        "unknown agent `{name}`{}",
        crate::suggest::did_you_mean(name, names)
    )
}

/// How the observer reads an agent's output: a preset's own format; plain text for `custom` or
/// anything else.
pub(crate) fn format_for(name: &str) -> Format {
    Format::of(preset(name).unwrap_or(&custom::Custom))
}

/// Where the prompt goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PromptVia {
    Argument,
    File,
    Stdin,
}

/// A resolved agent: how to build its argv for a given prompt.
#[derive(Debug, Clone)]
pub(crate) struct Agent {
    /// `copilot`, `claude`, … or `custom`.
    pub(crate) name: String,
    pub(crate) program: String,
    /// The absolute path the program resolved to on PATH.
    pub(crate) resolved: Option<PathBuf>,
    /// The CLI: its output format and signals.
    pub(crate) cli: &'static dyn Cli,
    args: Vec<Part>,
    /// For presets: the argv to use when the prompt goes through stdin.
    stdin_args: Option<Vec<Part>>,
    pub(crate) env: Vec<(String, String)>,
    /// Things to say once (e.g. `IS_SANDBOX=1` for claude as root).
    pub(crate) notes: Vec<String>,
}

impl Agent {
    /// Resolve the configured agent. `probe` lets a CLI look at the installed program once
    /// (copilot's `--help`, for the permission flag it accepts); dry runs pass false.
    pub(crate) fn resolve(choice: &AgentChoice, probe: bool) -> Result<Agent> {
        let mut agent = match choice {
            AgentChoice::Preset(name) => Self::preset(name)?,
            AgentChoice::Template(t) => Self::template(t)?,
        };
        let resolved = find_program(&agent.program)?;
        if probe {
            let mut launch = agent.take_launch();
            agent.cli.probe(&resolved, &mut launch);
            agent.set_launch(launch);
        }
        agent.resolved = Some(resolved);
        Ok(agent)
    }

    fn preset(name: &str) -> Result<Agent> {
        let Some(cli) = preset(name) else {
            let names: Vec<&str> = PRESETS.iter().map(|cli| cli.name()).collect();
            return Err(Error::user(unknown(name)).with_hint(format!(
                "use one of {}, or --agent-cmd 'PROGRAM ARGS {{prompt}}'",
                names.join(", ")
            )));
        };
        Ok(Agent::new(
            cli,
            cli.name(),
            cli.name().to_owned(),
            cli.launch(),
        ))
    }

    fn template(template: &str) -> Result<Agent> {
        let (program, launch) = custom::template(template)?;
        Ok(Agent::new(&custom::Custom, "custom", program, launch))
    }

    fn new(cli: &'static dyn Cli, name: &str, program: String, launch: Launch) -> Agent {
        let mut agent = Agent {
            name: name.to_owned(),
            program,
            resolved: None,
            cli,
            args: Vec::new(),
            stdin_args: None,
            env: Vec::new(),
            notes: Vec::new(),
        };
        agent.set_launch(launch);
        agent
    }

    fn take_launch(&mut self) -> Launch {
        Launch {
            args: std::mem::take(&mut self.args),
            stdin_args: self.stdin_args.take(),
            env: std::mem::take(&mut self.env),
            notes: std::mem::take(&mut self.notes),
        }
    }

    fn set_launch(&mut self, launch: Launch) {
        self.args = launch.args;
        self.stdin_args = launch.stdin_args;
        self.env = launch.env;
        self.notes = launch.notes;
    }

    /// How this agent receives `prompt`. A preset takes it on stdin when it is too long for one
    /// argument, or when it begins with `-` (a CLI would read it as an option: Qwen Code ends
    /// with a usage error).
    pub(crate) fn prompt_via(&self, prompt: &str) -> PromptVia {
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
        let unsafe_arg = prompt.len() > MAX_PROMPT_ARG || prompt.starts_with('-');
        if via == PromptVia::Argument && unsafe_arg && self.stdin_args.is_some() {
            PromptVia::Stdin
        } else {
            via
        }
    }

    /// Build the argv for one prompt; `prompt_file` is where the prompt was saved.
    pub(crate) fn invocation(&self, prompt: &str, prompt_file: &Path) -> Result<Invocation> {
        let via = self.prompt_via(prompt);
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
pub(crate) fn find_program(program: &str) -> Result<PathBuf> {
    let found = if program.contains('/') {
        let p = PathBuf::from(program);
        is_executable(&p).then_some(p)
    } else {
        which::which(program).ok()
    };
    found.ok_or_else(|| {
        let err = Error::user(format!("agent `{program}` not found on PATH"));
        match preset(program).and_then(|cli| cli.install_hint()) {
            Some(hint) => err.with_hint(format!(
                "install it with `{hint}`, or name another agent with --agent-cmd 'PROGRAM ARGS {{prompt}}'"
            )),
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
            (
                "droid",
                vec!["exec", "--auto", "high", "-o", "stream-json", "hi"],
            ),
            ("qwen", vec!["hi", "--yolo", "-o", "stream-json"]),
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
            ("qwen", vec!["--yolo", "-o", "stream-json"]),
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
    fn a_prompt_that_looks_like_an_option_goes_to_presets_on_stdin() {
        let file = Path::new("/tmp/p.md");
        for cli in PRESETS {
            let agent = Agent::preset(cli.name()).unwrap();
            let inv = agent.invocation("--help me", file).unwrap();
            assert_eq!(
                inv.stdin.as_deref(),
                Some(&b"--help me"[..]),
                "{}",
                cli.name()
            );
            assert!(
                !args(&inv).iter().any(|a| a == "--help me"),
                "{}",
                cli.name()
            );
        }
        // A custom template says where its prompt goes: as it says.
        let inv = custom("prog {prompt}").invocation("-x", file).unwrap();
        assert_eq!(args(&inv), vec!["-x"]);
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
        assert!(
            e.hint()
                .unwrap()
                .contains("copilot, claude, codex, gemini, droid, opencode, qwen")
        );
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
    fn missing_program_has_install_hint() {
        let e = find_program("claude-definitely-not-installed").unwrap_err();
        assert!(e.to_string().contains("not found on PATH"));
        let e = find_program("/nonexistent/agent").unwrap_err();
        assert!(e.hint().unwrap().contains("executable"));
    }

    #[test]
    fn every_preset_names_its_program_and_install_hint() {
        let names: Vec<&str> = PRESETS.iter().map(|cli| cli.name()).collect();
        assert_eq!(
            names,
            [
                "copilot", "claude", "codex", "gemini", "droid", "opencode", "qwen"
            ]
        );
        for cli in PRESETS {
            assert!(cli.install_hint().unwrap().starts_with("npm install -g "));
            assert!(preset(cli.name()).is_some());
            let agent = Agent::preset(cli.name()).unwrap();
            assert_eq!(agent.cli.name(), cli.name());
            assert!(
                agent.stdin_args.is_some(),
                "{} takes a prompt on stdin",
                cli.name()
            );
        }
        assert!(preset("custom").is_none());
        let e = find_program("codex-not-here").unwrap_err();
        assert!(e.hint().is_some());
    }
}
