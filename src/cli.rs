//! Command-line types (clap derive): one `Args` struct per subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const MAIN_EXAMPLES: &str = "\
Examples:
  ralph init \"Add OAuth login\" --criterion \"GET /login redirects\" --test-command \"cargo test\"
  ralph run                      # loop on RALPH_TASK.md with the default agent (copilot)
  ralph run --agent claude --max-iterations 10 --timeout 30m
  ralph run --agent-cmd 'my-agent --prompt-file {prompt_file}' --yes
  ralph status --json";

/// `0.1.0 (abc1234 2026-12-07)`: the commit built from, when built from a git checkout (build.rs).
pub(crate) const VERSION: &str = env!("RALPH_VERSION");

/// The heading of the options every subcommand takes: apart, not interleaved with its own.
const GLOBAL: &str = "Global Options";

/// `run`'s (and `resume`'s) options by what they are about; the ones without a heading, such as
/// `--dry-run`, `--reset` and `--yes`, come first.
const AGENT: &str = "Agent";
const LIMITS: &str = "Limits";
const JUDGING: &str = "Judging and tests";
const GIT: &str = "Git";
const SANDBOX: &str = "Sandbox";
const OUTPUT: &str = "Output";
const CPM: &str = "CPM epics and specs";
const QUEUE: &str = "Queue and workers";
const QUESTIONS: &str = "Questions";

/// Supervise autonomous coding-agent loops: a fresh agent process per iteration, progress judged
/// from the repository, every iteration committed and logged.
#[derive(Debug, Parser)]
#[command(
    name = "ralph",
    version = VERSION,
    after_help = MAIN_EXAMPLES,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// Work in DIR instead of the current directory.
    #[arg(short = 'C', global = true, value_name = "DIR", help_heading = GLOBAL)]
    pub(crate) dir: Option<PathBuf>,

    /// More diagnostics on stderr (repeat for more; also `RALPH_LOG=debug`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = GLOBAL)]
    pub(crate) verbose: u8,

    /// Only errors, warnings and the final summary.
    #[arg(short, long, global = true, conflicts_with = "verbose", help_heading = GLOBAL)]
    pub(crate) quiet: bool,

    /// When to colour the output (`NO_COLOR` is honoured with `auto`).
    #[arg(long, global = true, value_enum, default_value_t = ColorWhen::Auto, value_name = "WHEN", help_heading = GLOBAL)]
    pub(crate) color: ColorWhen,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Scaffold RALPH_TASK.md and the .ralph/ state directory.
    #[command(after_help = INIT_EXAMPLES)]
    Init(InitArgs),
    /// Run the loop until the task is complete or a halt rule fires.
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Continue the unfinished run recorded in .ralph/state.json.
    #[command(after_help = RESUME_EXAMPLES)]
    Resume(ResumeArgs),
    /// Report the current or last run, without taking the lock.
    #[command(after_help = STATUS_EXAMPLES)]
    Status(StatusArgs),
    /// Merge a completed worktree loop (`run --worktree NAME`) into its starting branch.
    #[command(after_help = MERGE_EXAMPLES)]
    Merge(MergeArgs),
    /// A live dashboard of every loop of the repository (q quits).
    #[command(after_help = WATCH_EXAMPLES)]
    Watch,
    /// Serve a live web view of every loop, with its actions (loopback, token in the URL).
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Print a shell completion script for ralph on stdout.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    /// For the agent: ask a person; returns at once, and the loop waits for the answer.
    #[command(after_help = ASK_EXAMPLES)]
    Ask(AskArgs),
    /// Answer the question a loop waits on; it goes into the loop's next prompt.
    #[command(after_help = ANSWER_EXAMPLES)]
    Answer(WordsArgs),
    /// Leave a note for a loop's next prompt (once); the running iteration is not disturbed.
    #[command(after_help = HINT_EXAMPLES)]
    Hint(WordsArgs),
}

const ASK_EXAMPLES: &str = "\
Examples (run by the agent, inside a loop):
  ralph ask \"Should the API keep v1 endpoints, or may I remove them?\"

The loop waits for a person's answer after this iteration and puts it into the next prompt.";

const ANSWER_EXAMPLES: &str = "\
Examples:
  ralph answer \"Keep v1 for one more release\"     # the one loop that waits, or this worktree's
  ralph answer auth \"Use the existing session table\"
  ralph status --all                                  # which loop waits for a person";

const HINT_EXAMPLES: &str = "\
Examples:
  ralph hint \"The flaky test is tests/login.rs; skip it\"
  ralph hint auth \"Use the existing session table\"";

#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    /// The question, as one argument or several words.
    #[arg(required = true, value_name = "QUESTION")]
    pub(crate) question: Vec<String>,
}

/// `ralph answer [NAME] TEXT` and `ralph hint [NAME] TEXT`.
#[derive(Debug, Args)]
pub(crate) struct WordsArgs {
    /// The loop (`main`, or a worktree loop's NAME), then the text; the text alone is enough
    /// where only one loop is meant.
    #[arg(required = true, num_args = 1..=2, value_names = ["NAME", "TEXT"])]
    pub(crate) words: Vec<String>,
}

impl WordsArgs {
    /// The loop named, if one was, and the text.
    pub(crate) fn split(&self) -> (Option<&str>, &str) {
        match self.words.as_slice() {
            [name, text] => (Some(name), text),
            [text] => (None, text),
            _ => (None, ""),
        }
    }
}

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  source <(ralph completions bash)                  # in this bash session
  ralph completions bash > ~/.local/share/bash-completion/completions/ralph
  ralph completions zsh > \"${fpath[1]}/_ralph\"     # then start a new zsh
  ralph completions fish > ~/.config/fish/completions/ralph.fish";

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

const MERGE_EXAMPLES: &str = "\
Examples:
  ralph merge auth          # merge ralph/auth into the branch `run --worktree auth` started from
  ralph status --all        # the loops, their branches and how they ended

Only a completed loop merges, only into a work tree without uncommitted changes; a conflict
changes nothing and exits 11 naming the files.";

#[derive(Debug, Args)]
pub(crate) struct MergeArgs {
    /// The loop's worktree name (`ralph run --worktree NAME`).
    pub(crate) name: String,
}

const INIT_EXAMPLES: &str = "\
Examples:
  ralph init \"Add OAuth login\" --criterion \"GET /login redirects to the provider\" \\
             --criterion \"Token refresh is covered by a test\" --test-command \"cargo test\"
  ralph init \"Port the CLI to clap 4\" --max-iterations 20 --agent claude
  ralph init --table \"Ship v2\" --criterion \"Migrate the schema\" --criterion \"Port the API\"
  ralph init \"Add rate limiting to the API\" --plan --agent claude   # the agent writes the criteria
  ralph init --force             # overwrite an existing RALPH_TASK.md";

const RUN_EXAMPLES: &str = "\
Examples:
  ralph run                                  # RALPH_TASK.md with the configured agent
  ralph run docs/tasks/login.md --agent claude --timeout 30m --max-iterations 20
  ralph run --agent-cmd 'aider --yes --message {prompt}'
  ralph run --agent-cmd './my-agent.sh'      # the prompt arrives on stdin
  ralph run --dry-run                        # show mode, agent argv, limits and the first prompt
  ralph run --yes --test-command 'cargo test' # unattended: never ask
  ralph run --worktree auth docs/auth.md --merge   # a loop of its own on branch ralph/auth
  ralph run prd.json --test-command 'npm test'     # snarktank Ralph's stories, one per iteration
  ralph run --from beads --parallel 2              # the tracker's ready items, two at a time
  ralph run --from github --pr                     # labelled issues, a pull request for each";

const RESUME_EXAMPLES: &str = "\
Examples:
  ralph resume                          # after Ctrl-C, a crash, or any halt but completion
  ralph resume --max-iterations 80      # after a max-iterations halt
  ralph resume --timeout 45m --yes";

const STATUS_EXAMPLES: &str = "\
Examples:
  ralph status
  ralph status --json | jq .halt_reason";

const WATCH_EXAMPLES: &str = "\
Examples:
  ralph watch                    # every loop: the main work tree's and each worktree's
  ralph -C ../project watch
  ralph status --all --json      # the same, once, for scripts (watch needs a terminal)";

const SERVE_EXAMPLES: &str = "\
Examples:
  ralph serve                           # http://127.0.0.1:PORT/#token=… on a free port
  ralph serve --listen 127.0.0.1:8080   # then, elsewhere: ssh -L 8080:127.0.0.1:8080 HOST
  ralph serve --read-only               # look, but no stop, resume, merge, answer or hint

The printed URL carries a fresh token (also in serve.token, 0600, in ralph's state directory);
every API request needs it. Stop the server with Ctrl-C.";

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen (`ADDR:PORT`; port 0 picks a free one). Beyond loopback, the token is the
    /// only guard: a warning says so.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:0")]
    pub(crate) listen: String,

    /// Show the loops, refuse every action (stop, resume, merge, answer, hint).
    #[arg(long)]
    pub(crate) read_only: bool,
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// What the task is; becomes the `task` field and the `# Task:` title.
    pub(crate) description: Option<String>,

    /// A success criterion (repeatable); without any, example criteria to edit are written.
    #[arg(long = "criterion", value_name = "TEXT")]
    pub(crate) criteria: Vec<String>,

    /// Shell command that must pass before the task counts as complete.
    #[arg(long, value_name = "CMD")]
    pub(crate) test_command: Option<String>,

    /// Iteration cap written to the frontmatter.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_iterations: u32,

    /// Agent written to the frontmatter (copilot, claude, codex, gemini, droid, opencode, qwen).
    #[arg(long, value_name = "NAME")]
    pub(crate) agent: Option<String>,

    /// Scaffold PRD.md + PROGRESS.md (a task table: one task per --criterion) instead.
    #[arg(long)]
    pub(crate) table: bool,

    /// Run the agent once to write the criteria (with --table, the PRD) from the description.
    #[arg(long, conflicts_with = "criteria")]
    pub(crate) plan: bool,

    /// With --plan: a custom agent command (see `ralph run --help`).
    #[arg(
        long,
        value_name = "TEMPLATE",
        requires = "plan",
        conflicts_with = "agent"
    )]
    pub(crate) agent_cmd: Option<String>,

    /// Overwrite an existing task file.
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// RALPH_TASK.md (default) or another checklist file, prd.json, CPM epics or a spec.
    ///
    /// A checklist (`- [ ]` criteria), a task table (PRD.md), snarktank Ralph's prd.json, CPM
    /// epic paths or a range like `23..26`, or one spec under docs/specifications/.
    #[arg(value_name = "TARGET")]
    pub(crate) targets: Vec<String>,

    #[command(flatten)]
    pub(crate) options: RunOptions,

    /// Resolve everything and print it (mode, agent argv, limits, first prompt); spawn nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Continue the unfinished run recorded in .ralph/state.json (same as `ralph resume`).
    #[arg(long, conflicts_with = "reset")]
    pub(crate) resume: bool,

    /// Forget the unfinished run recorded in .ralph/state.json and start a new one.
    #[arg(long)]
    pub(crate) reset: bool,

    /// Work from a queue: `beads`, `github` or `github:OWNER/REPO`.
    ///
    /// Takes the tracker's ready items one by one, each in a worktree of its own
    /// (`ralph/<source>-<id>`), merged and closed when ralph's run completes.
    #[arg(long, value_name = "SOURCE", help_heading = QUEUE,
          conflicts_with_all = ["targets", "resume", "reset", "dry_run"])]
    pub(crate) from: Option<String>,

    /// With --from: take at most N items.
    #[arg(long, value_name = "N", requires = "from", help_heading = QUEUE)]
    pub(crate) max_tasks: Option<usize>,

    /// With --from github: open a pull request for each completed item instead of merging.
    ///
    /// Pushes the item's branch to origin and opens a pull request (`Closes #N`); the issue stays
    /// open, labelled `ralph:pr-open`.
    #[arg(long, requires = "from", help_heading = QUEUE)]
    pub(crate) pr: bool,

    /// With --from github: this worker's name in its leases (default `<hostname>-<pid>`).
    ///
    /// A worker restarted with the same name takes its leases on origin back at once.
    #[arg(long, value_name = "ID", env = "RALPH_WORKER_ID", requires = "from", help_heading = QUEUE)]
    pub(crate) worker_id: Option<String>,

    /// With --from github: how long an item's lease on origin holds unrenewed (default 10m).
    ///
    /// Renewed every third of it while the loop runs (config `lease`); after a worker is lost,
    /// another takes the item over once it ran out.
    #[arg(long, value_name = "DUR", env = "RALPH_LEASE", requires = "from", help_heading = QUEUE)]
    pub(crate) lease: Option<humantime::Duration>,

    /// With --from: up to N items at once, each in its own worktree; merges one at a time.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "from", help_heading = QUEUE,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) parallel: u16,
}

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    #[command(flatten)]
    pub(crate) options: RunOptions,
}

/// The options of `run` that are also configuration (SPEC §10): flags win over `RALPH_*`
/// variables, which win over the task's frontmatter and the config files.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct RunOptions {
    /// Agent preset: copilot, claude, codex, gemini, droid, opencode or qwen.
    #[arg(
        long,
        env = "RALPH_AGENT",
        value_name = "NAME",
        conflicts_with = "agent_cmd",
        help_heading = AGENT
    )]
    pub(crate) agent: Option<String>,

    /// Custom agent command; `{prompt}` or `{prompt_file}` mark where the prompt goes, else stdin.
    #[arg(long, env = "RALPH_AGENT_CMD", value_name = "TEMPLATE", help_heading = AGENT)]
    pub(crate) agent_cmd: Option<String>,

    /// A preset to run while the agent is usage-limited (repeatable: tried in order).
    #[arg(
        long = "fallback-agent",
        env = "RALPH_FALLBACK_AGENTS",
        value_name = "NAME",
        value_delimiter = ',',
        help_heading = AGENT
    )]
    pub(crate) fallback_agents: Vec<String>,

    /// Stop after N iterations (default 50).
    #[arg(long, env = "RALPH_MAX_ITERATIONS", value_name = "N", help_heading = LIMITS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_iterations: Option<u32>,

    /// Wall-clock limit per iteration, e.g. `30m`.
    #[arg(long, env = "RALPH_TIMEOUT", value_name = "DUR", help_heading = LIMITS)]
    pub(crate) timeout: Option<humantime::Duration>,

    /// Stop an iteration whose agent printed nothing for DUR.
    #[arg(long, env = "RALPH_IDLE_TIMEOUT", value_name = "DUR", help_heading = LIMITS)]
    pub(crate) idle_timeout: Option<humantime::Duration>,

    /// Time between SIGTERM and SIGKILL when stopping the agent (default 10s; 0 kills at once).
    #[arg(long, env = "RALPH_GRACE", value_name = "DUR", help_heading = LIMITS)]
    pub(crate) grace: Option<humantime::Duration>,

    /// Halt (exit 10) once the cost the agent reports (Claude's result events) reaches USD.
    #[arg(long, env = "RALPH_MAX_COST", value_name = "USD", help_heading = LIMITS)]
    pub(crate) max_cost: Option<f64>,

    /// The most time to spend waiting for usage limits to lift, in all (default 6h; exit 10).
    #[arg(long, env = "RALPH_MAX_WAIT", value_name = "DUR", help_heading = LIMITS)]
    pub(crate) max_wait: Option<humantime::Duration>,

    /// The first wait after a usage limit that gives no reset time (default 60s).
    ///
    /// At least 1s; each further wait doubles it.
    #[arg(long, env = "RALPH_LIMIT_BACKOFF", value_name = "DUR", help_heading = LIMITS)]
    pub(crate) limit_backoff: Option<humantime::Duration>,

    /// Shell command run after every iteration; completion needs it to pass.
    #[arg(long, env = "RALPH_TEST_COMMAND", value_name = "CMD", help_heading = JUDGING)]
    pub(crate) test_command: Option<String>,

    /// Shell command run after every iteration (after the tests) whose exit code decides.
    ///
    /// 0 complete, 3 keep working, 5 target-only (exit 6), other twice in a row: exit 7.
    #[arg(long, env = "RALPH_VERDICT_CMD", value_name = "CMD", help_heading = JUDGING)]
    pub(crate) verdict_cmd: Option<String>,

    /// Wall-clock limit of each test and verdict command run (default 30m; no idle limit).
    #[arg(long, env = "RALPH_CHECK_TIMEOUT", value_name = "DUR", help_heading = JUDGING)]
    pub(crate) check_timeout: Option<humantime::Duration>,

    /// Also require `<promise>WORD</promise>` in the agent's final message to complete.
    #[arg(long, env = "RALPH_COMPLETION_PROMISE", value_name = "WORD", help_heading = JUDGING)]
    pub(crate) completion_promise: Option<String>,

    /// Iterations without progress before the STUCK ALERT (default 3; twice this halts).
    #[arg(long, env = "RALPH_STUCK_THRESHOLD", value_name = "N", help_heading = JUDGING,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) stuck_threshold: Option<u32>,

    /// Table mode: a second fresh agent run reviews every task marked DONE.
    ///
    /// The reviewer answers `REVIEW: PASS` or `REVIEW: FAIL <reason>`.
    #[arg(long, env = "RALPH_REVIEW", help_heading = JUDGING)]
    pub(crate) review: bool,

    /// Do not commit; the fingerprint still reflects the tree.
    #[arg(long, env = "RALPH_NO_COMMIT", help_heading = GIT)]
    pub(crate) no_commit: bool,

    /// Skip the repository's pre-commit and commit-msg hooks when committing.
    #[arg(long, env = "RALPH_NO_VERIFY", help_heading = GIT)]
    pub(crate) no_verify: bool,

    /// Run the loop in a git worktree of its own, on branch `ralph/NAME` from the current HEAD.
    ///
    /// Reused while its loop is unfinished; a finished loop's name starts a new branch. No NAME
    /// with a prd.json target: its `branchName` (`ralph/NAME`), exactly as written.
    #[arg(long, value_name = "NAME", num_args = 0..=1, help_heading = GIT)]
    pub(crate) worktree: Option<Option<String>>,

    /// With --worktree: once the loop completed, merge its branch where it started from.
    ///
    /// Into the branch the loop started from (config `merge = true`); exit 11 when it cannot.
    #[arg(long, requires = "worktree", help_heading = GIT)]
    pub(crate) merge: bool,

    /// Run every agent attempt under bubblewrap: read-only but the repository; secrets hidden.
    ///
    /// The repository's own hooks and commands too. Writable: the repository, /tmp and the
    /// agent's state; the rest of the file system read-only.
    #[arg(long, env = "RALPH_SANDBOX", help_heading = SANDBOX)]
    pub(crate) sandbox: bool,

    /// The sandbox's network: `host` (default; the agent needs its model API) or `none`.
    #[arg(long, env = "RALPH_SANDBOX_NET", value_enum, value_name = "NET", help_heading = SANDBOX)]
    pub(crate) sandbox_net: Option<crate::sandbox::Net>,

    /// Unattended: never ask, take the documented default.
    #[arg(long, short = 'y', env = "RALPH_YES")]
    pub(crate) yes: bool,

    /// How long to wait for a person's answer to the agent's question (exit 12 after it).
    ///
    /// Default: no limit while a terminal or `ralph serve` is there, 24h unattended.
    #[arg(long, env = "RALPH_ANSWER_TIMEOUT", value_name = "DUR", help_heading = QUESTIONS)]
    pub(crate) answer_timeout: Option<humantime::Duration>,

    /// Tell the agent no person answers questions in this run (`ralph ask` refuses).
    #[arg(long, env = "RALPH_NO_QUESTIONS", help_heading = QUESTIONS)]
    pub(crate) no_questions: bool,

    /// Show the agent's full output live.
    #[arg(long, help_heading = OUTPUT)]
    pub(crate) stream: bool,

    /// JSON Lines events on stdout (human output moves to stderr).
    #[arg(long, help_heading = OUTPUT)]
    pub(crate) json: bool,

    /// The coverage roll-up script (default: $CLAUDE_PLUGIN_ROOT, then the plugin cache).
    #[arg(long, value_name = "PATH", help_heading = CPM)]
    pub(crate) rollup: Option<PathBuf>,

    /// Which stories to work, passed to /cpm:do (e.g. `1-3`).
    #[arg(long, value_name = "SPEC", help_heading = CPM)]
    pub(crate) story_filter: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// Every loop of the repository: the main work tree's and each worktree's.
    #[arg(long)]
    pub(crate) all: bool,
}
