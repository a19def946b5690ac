//! Each agent CLI's own files under `$HOME`, as data: its state, which its preset may write
//! inside the sandbox, and what the CLI later runs or obeys outside it — settings, hooks,
//! commands, plugins, instructions, its own unpacked code — which is read-only inside wherever
//! it lies in a place the agent can write (its preset's state, or `sandbox_writable`).
//!
//! Adding a CLI is one entry of [`CLIS`].

use std::path::{Path, PathBuf};

use super::paths::{Make, normal, pinnable, within};
use crate::error::Result;

/// What stands in for a file the CLI runs or obeys when it does not exist yet: it is created
/// so, then bound read-only, so that the agent cannot plant it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Empty {
    /// An empty directory (mode 0700).
    Dir,
    /// A file holding the CLI's empty form of it (mode 0600).
    File(&'static str),
    /// Bound only when it exists: creating it would change what the CLI does (an override that
    /// replaces another file, an `.env` that shadows `~/.env`), or nothing names it unless the
    /// user set it up (a local install).
    IfExists,
}

/// One agent CLI's files, relative to `$HOME`.
struct Cli {
    /// The preset's name.
    name: &'static str,
    /// The variable that moves its state directory elsewhere, and what lies in it with it.
    moved_by: Option<&'static str>,
    /// Its state: the first `made` are the directories it needs to start (created when missing,
    /// since the read-only home would refuse it), the rest are bound when they exist.
    state: &'static [&'static str],
    made: usize,
    /// What it later runs or obeys.
    runs: &'static [(&'static str, Empty)],
}

use Empty::{Dir, File, IfExists};

const CLIS: &[Cli] = &[
    Cli {
        name: "claude",
        moved_by: Some("CLAUDE_CONFIG_DIR"),
        state: &[".claude", ".config/claude", ".cache/claude"],
        made: 1,
        runs: &[
            // `mcpServers` are commands; Claude cannot rewrite this file in the sandbox anyway
            // (it writes through a temporary file in the read-only `$HOME`).
            (".claude.json", File("{}")),
            (".claude/settings.json", File("{}")),
            (".claude/settings.local.json", File("{}")),
            (".claude/CLAUDE.md", File("")),
            (".claude/hooks", Dir),
            (".claude/commands", Dir),
            (".claude/agents", Dir),
            (".claude/skills", Dir),
            (".claude/plugins", Dir),
            (".claude/workflows", Dir),
            (".claude/rules", Dir),
            (".claude/output-styles", Dir),
            (".claude/local", IfExists),
        ],
    },
    Cli {
        name: "copilot",
        moved_by: Some("COPILOT_HOME"),
        state: &[".copilot", ".config/copilot", ".cache/copilot"],
        made: 1,
        runs: &[
            // Not `config.json`: the CLI rewrites it at every start (and fails on a read-only
            // one); its settings moved to `settings.json`.
            (".copilot/settings.json", File("{}")),
            (".copilot/mcp-config.json", File("{}")),
            (".copilot/lsp-config.json", IfExists),
            (".copilot/permissions-config.json", IfExists),
            (".copilot/copilot-instructions.md", File("")),
            (".copilot/instructions", Dir),
            (".copilot/hooks", Dir),
            (".copilot/agents", Dir),
            (".copilot/skills", Dir),
            (".copilot/extensions", Dir),
            (".copilot/plugins", IfExists),
            (".copilot/installed-plugins", IfExists),
            // The CLI's own code, unpacked from its npm package on its first run.
            (".cache/copilot/pkg", Dir),
        ],
    },
    Cli {
        name: "codex",
        moved_by: Some("CODEX_HOME"),
        state: &[".codex", ".config/codex", ".cache/codex"],
        made: 1,
        runs: &[
            (".codex/config.toml", File("")),
            (".codex/AGENTS.md", File("")),
            (".codex/AGENTS.override.md", IfExists),
            (".codex/hooks.json", IfExists),
            (".codex/rules", Dir),
            (".codex/prompts", Dir),
            (".codex/skills", Dir),
        ],
    },
    Cli {
        name: "gemini",
        moved_by: None,
        state: &[".gemini", ".config/gemini", ".cache/gemini"],
        made: 1,
        runs: &[
            (".gemini/settings.json", File("{}")),
            (".gemini/GEMINI.md", File("")),
            (".gemini/.env", IfExists),
            (".gemini/commands", Dir),
            (".gemini/extensions", Dir),
            (".gemini/hooks", IfExists),
            (".gemini/skills", IfExists),
            (".gemini/agents", IfExists),
            (".gemini/policies", IfExists),
        ],
    },
    Cli {
        name: "droid",
        // `FACTORY_HOME_OVERRIDE` moves the home `.factory` lies in, not `.factory` itself.
        moved_by: None,
        state: &[".factory"],
        made: 1,
        runs: &[
            // `customModels` (a base URL and key), `hooks`, `mcpServers`; droid only reads it.
            (".factory/settings.json", File("{}")),
            (".factory/settings.local.json", File("{}")),
            (".factory/config.json", File("{}")),
            (".factory/mcp.json", File("{}")),
            (".factory/hooks.json", File("{}")),
            (".factory/AGENTS.md", File("")),
            (".factory/hooks", Dir),
            (".factory/commands", Dir),
            (".factory/skills", Dir),
            // Custom droids (subagents); droid writes its built-in ones here at start, and
            // goes on without them when it cannot.
            (".factory/droids", Dir),
            (".factory/output-styles", Dir),
            (".factory/plugins", Dir),
            (".factory/bin", Dir),
        ],
    },
    Cli {
        name: "opencode",
        moved_by: None,
        // Sessions, snapshots, `auth.json` and logs; locks; downloads; and its config directory,
        // where it writes a `.gitignore` (and installs plugins' packages) at start.
        state: &[
            ".local/share/opencode",
            ".local/state/opencode",
            ".cache/opencode",
            ".config/opencode",
        ],
        // It makes each at start (`EROFS` in the read-only home otherwise).
        made: 4,
        runs: &[
            // `permission`, `mcp` (commands), `plugin`, `provider`, … ; merged, in this order.
            (".config/opencode/config.json", File("{}")),
            (".config/opencode/opencode.json", File("{}")),
            (".config/opencode/opencode.jsonc", File("{}")),
            (".config/opencode/AGENTS.md", File("")),
            (".config/opencode/agents", Dir),
            (".config/opencode/agent", Dir),
            (".config/opencode/commands", Dir),
            (".config/opencode/command", Dir),
            (".config/opencode/plugins", Dir),
            (".config/opencode/plugin", Dir),
            (".config/opencode/tools", Dir),
            (".config/opencode/tool", Dir),
            (".config/opencode/modes", Dir),
            (".config/opencode/skills", Dir),
            (".config/opencode/package.json", File("{}")),
            (".config/opencode/node_modules", Dir),
            // Programs it downloads (ripgrep, language servers) and plugin packages it installs.
            (".cache/opencode/bin", Dir),
            (".cache/opencode/node_modules", Dir),
        ],
    },
    Cli {
        name: "qwen",
        moved_by: Some("QWEN_HOME"),
        // `extension-store/` (its install transactions) stays writable: it makes its
        // directories there at every start, and fails when it cannot.
        state: &[".qwen"],
        made: 1,
        runs: &[
            // Hooks, MCP servers and tool settings live in it.
            (".qwen/settings.json", File("{}")),
            (".qwen/QWEN.md", File("")),
            (".qwen/.env", IfExists),
            (".qwen/commands", Dir),
            (".qwen/agents", Dir),
            (".qwen/skills", Dir),
            (".qwen/extensions", Dir),
            // Instructions it writes once and obeys after (an empty one it fills in outside).
            (".qwen/output-language.md", File("")),
            (".qwen/hooks", Dir),
        ],
    },
];

impl Cli {
    /// Where `rel` (relative to `$HOME`) is: in the directory its variable names, when it lies
    /// in its state directory and the variable is set.
    fn place(&self, home: &Path, rel: &str) -> PathBuf {
        let moved = self
            .moved_by
            .and_then(std::env::var_os)
            .map(PathBuf::from)
            .filter(|d| d.is_absolute());
        relocate(home, self.state.first().copied(), moved.as_deref(), rel)
    }
}

fn relocate(home: &Path, dir: Option<&str>, moved: Option<&Path>, rel: &str) -> PathBuf {
    if let (Some(dir), Some(moved)) = (dir, moved)
        && let Ok(rest) = Path::new(rel).strip_prefix(dir)
    {
        return moved.join(rest);
    }
    home.join(rel)
}

/// The state `agent`'s preset writes: its state directory (created when missing, mode 0700)
/// and those of its other paths that exist. A custom command gets none: what it needs,
/// `sandbox_writable` names.
pub(super) fn writable_state(home: &Path, agent: &str, make: Make) -> Result<Vec<PathBuf>> {
    let Some(cli) = CLIS.iter().find(|c| c.name == agent) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, rel) in cli.state.iter().enumerate() {
        let p = cli.place(home, rel);
        if i < cli.made {
            make.dir(&p)?;
        } else if !p.exists() {
            continue;
        }
        out.push(p);
    }
    Ok(out)
}

/// Every file any known CLI runs or obeys that lies inside a writable place (not one named
/// itself: `sandbox_writable = ["~/.claude/hooks"]` keeps that writable), made to exist (but
/// for [`Empty::IfExists`]), and the files these name by path in such a place (a status-line
/// script, a `notify` program).
pub(super) fn run_files(home: &Path, writable: &[PathBuf], make: Make) -> Result<Vec<PathBuf>> {
    let places: Vec<PathBuf> = writable.iter().map(|p| normal(p)).collect();
    let inside = |p: &Path| within(p, &places) && !places.iter().any(|w| w == p);
    let mut out = Vec::new();
    let runs = CLIS.iter().flat_map(|c| {
        c.runs
            .iter()
            .map(move |(rel, empty)| (c.place(home, rel), empty))
    });
    for (p, empty) in runs {
        pinnable(&p, &places)?;
        let p = normal(&p);
        if !inside(&p) {
            continue;
        }
        let exists = std::fs::symlink_metadata(&p).is_ok();
        match empty {
            _ if exists => {}
            Dir => make.dir(&p)?,
            File(text) => make.file(&p, text.as_bytes())?,
            IfExists => continue,
        }
        out.push(p);
    }
    let named: Vec<PathBuf> = out
        .iter()
        .filter(|p| p.is_file())
        .filter_map(|p| crate::files::read_text(p).ok())
        .flat_map(|text| named_paths(&text, home))
        .collect();
    for p in named {
        pinnable(&p, &places)?;
        let p = normal(&p);
        if inside(&p) && p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The absolute paths a settings file names (`/…`, `~/…`, `$HOME/…`), whatever its format: the
/// words of its strings and commands.
fn named_paths(text: &str, home: &Path) -> Vec<PathBuf> {
    let text = text.replace("\\/", "/");
    let stop = |c: char| c.is_whitespace() || "\"'`,;=()[]{}|&<>".contains(c);
    text.split(stop)
        .filter_map(|word| {
            for prefix in ["~/", "$HOME/", "${HOME}/"] {
                if let Some(rest) = word.strip_prefix(prefix) {
                    return Some(home.join(rest));
                }
            }
            word.starts_with('/').then(|| PathBuf::from(word))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cli_has_a_state_directory_and_no_run_file_outside_home() {
        for cli in CLIS {
            assert!(!cli.state.is_empty(), "{}", cli.name);
            for (rel, _) in cli.runs {
                assert!(!rel.starts_with('/') && !rel.contains(".."), "{rel}");
            }
        }
        for preset in crate::agent::PRESETS {
            assert!(
                CLIS.iter().any(|c| c.name == preset.name()),
                "{} has no entry",
                preset.name()
            );
        }
    }

    #[test]
    fn a_moved_state_directory_takes_its_files_along() {
        let home = Path::new("/h");
        let moved = Some(Path::new("/elsewhere/codex"));
        let at = |rel| relocate(home, Some(".codex"), moved, rel);
        assert_eq!(
            at(".codex/config.toml"),
            PathBuf::from("/elsewhere/codex/config.toml")
        );
        assert_eq!(at(".codex"), PathBuf::from("/elsewhere/codex"));
        assert_eq!(at(".codexx/a"), PathBuf::from("/h/.codexx/a"));
        assert_eq!(at(".config/codex"), PathBuf::from("/h/.config/codex"));
        let not_moved = relocate(home, Some(".codex"), None, ".codex/config.toml");
        assert_eq!(not_moved, PathBuf::from("/h/.codex/config.toml"));
    }

    #[test]
    fn a_custom_command_gets_no_state_and_a_preset_its_own() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path();
        assert_eq!(
            writable_state(home, "custom", Make::Create).unwrap(),
            Vec::<PathBuf>::new()
        );
        std::fs::create_dir_all(home.join(".cache/claude")).unwrap();
        let got = writable_state(home, "claude", Make::Create).unwrap();
        assert_eq!(got, vec![home.join(".claude"), home.join(".cache/claude")]);
    }

    #[test]
    fn run_files_in_writable_state_are_made_and_named_scripts_follow() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::write(
            home.join(".claude/settings.json"),
            r#"{"statusLine":{"command":"bash ~/.claude/status.sh"},"x":"/etc/passwd"}"#,
        )
        .unwrap();
        std::fs::write(home.join(".claude/status.sh"), "echo hi").unwrap();
        let got = run_files(&home, &[home.join(".claude")], Make::Create).unwrap();
        for want in [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".claude/hooks",
            ".claude/status.sh",
        ] {
            assert!(got.contains(&home.join(want)), "{want} in {got:?}");
        }
        assert_eq!(
            std::fs::read_to_string(home.join(".claude/settings.local.json")).unwrap(),
            "{}"
        );
        assert!(home.join(".claude/hooks").is_dir());
        // Only what lies in the writable place: not ~/.claude.json, not ~/.codex, not /etc.
        assert!(!home.join(".claude.json").exists());
        assert!(!home.join(".codex").exists());
        assert!(!got.iter().any(|p| p.starts_with("/etc")));
        // An override file is never created.
        let got = run_files(&home, std::slice::from_ref(&home), Make::Create).unwrap();
        assert!(got.contains(&home.join(".codex/config.toml")));
        assert!(!home.join(".codex/AGENTS.override.md").exists());
        // A run file named itself stays writable.
        let hooks = home.join(".claude/hooks");
        assert!(
            !run_files(&home, std::slice::from_ref(&hooks), Make::Create)
                .unwrap()
                .contains(&hooks)
        );
    }
}
