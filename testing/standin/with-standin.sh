#!/usr/bin/env bash
# Run a command (typically `ralph run ...` in a test repository) with the stand-in model server up
# and the environment pointing one real agent CLI at it: for tests.
#
#   testing/standin/with-standin.sh --cli claude|copilot|codex|droid|opencode|qwen --work DIR \
#       [--scenario FILE] [--claude-oauth] [--is-sandbox] [--no-netns] [--idle-timeout S] \
#       [--bin DIR] \
#       -- COMMAND [ARGS...]
#
# * As root, with unshare and ip available, everything (server, COMMAND, the agent CLI it spawns)
#   runs inside a new loopback-only network namespace (unshare --net; lo brought up). Otherwise the
#   host network is used and only the configuration keeps traffic on 127.0.0.1.
# * The server log (JSON Lines, one record per request) is DIR/standin.requests.jsonl, its port
#   DIR/standin.port, its own output DIR/standin.out. HOME is DIR/home (created fresh if absent);
#   Codex gets CODEX_HOME=DIR/home/.codex with a config.toml provider entry; droid a
#   DIR/home/.factory/settings.json whose custom model (BYOK) is the server.
# * COMMAND inherits the caller's environment plus: PATH with the agent-CLI bin dir first,
#   HOME, the offline/telemetry switches, and the CLI's endpoint settings (README.md). IS_SANDBOX is
#   NOT set for claude unless --is-sandbox (ralph must set it itself as root). --claude-oauth uses
#   CLAUDE_CODE_OAUTH_TOKEN instead of ANTHROPIC_API_KEY (needed for Claude's rate_limit_event).
# * COMMAND's stdin, stdout and stderr are passed through untouched; its exit status is returned.
#   The server is stopped when COMMAND ends. Exit 3 (and a message on stderr) when the agent CLI is
#   not installed: tests should skip then. --bin DIR takes the CLI from DIR instead of the install
#   script's bin directory (e.g. <prefix>/qwen-0.15.10/bin, Qwen Code's older version).
set -uo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
HERE="$(dirname "$SELF")"
REPO="$(cd "$HERE/../.." && pwd)"

ORIG_ARGS=("$@")
CLI="" WORK="" SCENARIO="" OAUTH=0 SANDBOX=0 NO_NETNS=0 IDLE=600 BIN=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) CLI="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --scenario) SCENARIO="$2"; shift 2 ;;
    --claude-oauth) OAUTH=1; shift ;;
    --is-sandbox) SANDBOX=1; shift ;;
    --no-netns) NO_NETNS=1; shift ;;
    --idle-timeout) IDLE="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "with-standin: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$CLI" && -n "$WORK" && $# -gt 0 ]] || {
  echo "usage: with-standin.sh --cli claude|copilot|codex|droid|opencode|qwen --work DIR [--scenario FILE] -- COMMAND..." >&2
  exit 2
}
case "$CLI" in claude|copilot|codex|droid|opencode|qwen) ;; *) echo "with-standin: unknown CLI '$CLI'" >&2; exit 2 ;; esac

BIN_DIR="${AGENT_CLIS_BIN:-$("$REPO/scripts/install-agent-clis.sh" --print-bin-dir)}"
PREFIX="$(dirname "$BIN_DIR")"
[[ -n "$BIN" ]] && BIN_DIR="$BIN"
if [[ ! -x "$BIN_DIR/$CLI" ]]; then
  echo "with-standin: $CLI is not installed in $BIN_DIR (run scripts/install-agent-clis.sh $CLI)" >&2
  exit 3
fi

if [[ -z "${STANDIN_NETNS:-}" && $NO_NETNS == 0 && $(id -u) == 0 ]] \
   && command -v unshare >/dev/null && command -v ip >/dev/null && unshare --net true 2>/dev/null; then
  exec unshare --net env STANDIN_NETNS=1 bash "$SELF" "${ORIG_ARGS[@]}"
fi
[[ -n "${STANDIN_NETNS:-}" ]] && ip link set lo up

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
rm -f "$WORK/standin.port"
python3 "$HERE/server.py" ${SCENARIO:+--scenario "$SCENARIO"} --port-file "$WORK/standin.port" \
  --log "$WORK/standin.requests.jsonl" --idle-timeout "$IDLE" > "$WORK/standin.out" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null' EXIT
for _ in $(seq 200); do [[ -s "$WORK/standin.port" ]] && break; sleep 0.05; done
PORT="$(cat "$WORK/standin.port" 2>/dev/null)"
[[ -n "$PORT" ]] || { echo "with-standin: the stand-in server did not start" >&2; cat "$WORK/standin.out" >&2; exit 1; }

HOME_DIR="$WORK/home"
mkdir -p "$HOME_DIR"
export HOME="$HOME_DIR" PATH="$BIN_DIR:$PATH" STANDIN_PORT="$PORT" \
       STANDIN_LOG="$WORK/standin.requests.jsonl" \
       DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1
case "$CLI" in
  claude)
    export ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
    unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN CLAUDE_CODE_OAUTH_TOKEN
    if [[ $OAUTH == 1 ]]; then export CLAUDE_CODE_OAUTH_TOKEN=standin-oauth-token
    else export ANTHROPIC_API_KEY=standin-key; fi
    if [[ $SANDBOX == 1 ]]; then export IS_SANDBOX=1; else unset IS_SANDBOX; fi
    ;;
  copilot)
    export COPILOT_OFFLINE=true COPILOT_PROVIDER_BASE_URL="http://127.0.0.1:$PORT/v1" \
           COPILOT_PROVIDER_API_KEY=standin-key COPILOT_MODEL=standin-model \
           COPILOT_AUTO_UPDATE=false COPILOT_PKG_CACHE_HOME="$PREFIX/copilot-pkg-cache"
    ;;
  codex)
    export CODEX_HOME="$HOME_DIR/.codex" STANDIN_API_KEY=standin-key
    # shellcheck source=codex-config.sh
    . "$HERE/codex-config.sh"
    write_codex_config "$CODEX_HOME" "$PORT"
    ;;
  droid)
    # No Factory login for a custom (BYOK) model; the air-gap switch skips Factory's services.
    export FACTORY_AIRGAP_ENABLED=1
    unset FACTORY_API_KEY
    mkdir -p "$HOME_DIR/.factory"
    cat > "$HOME_DIR/.factory/settings.json" <<JSON
{"customModels": [{"model": "standin-model", "displayName": "Standin",
  "baseUrl": "http://127.0.0.1:$PORT/v1", "apiKey": "standin-key",
  "provider": "generic-chat-completion-api", "maxOutputTokens": 4096}],
 "sessionDefaultSettings": {"model": "custom:Standin-0"}}
JSON
    ;;
  opencode)
    # A custom OpenAI-compatible provider (its SDK is bundled), priced so that `cost` is not 0;
    # no models.dev fetch, no self-update, no login. README.md: "opencode".
    export OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1
    mkdir -p "$HOME_DIR/.config/opencode"
    cat > "$HOME_DIR/.config/opencode/opencode.json" <<JSON
{"provider": {"standin": {"npm": "@ai-sdk/openai-compatible", "name": "Stand-in",
   "options": {"baseURL": "http://127.0.0.1:$PORT/v1", "apiKey": "standin-key"},
   "models": {"standin-model": {"name": "Stand-in model", "tool_call": true,
     "cost": {"input": 3, "output": 15}}}}},
 "model": "standin/standin-model", "autoupdate": false, "share": "disabled"}
JSON
    ;;
  qwen)
    # OpenAI-compatible endpoint from the environment; no auth type, login or onboarding needed.
    # Settings: no update check, no telemetry, no usage statistics.
    export OPENAI_BASE_URL="http://127.0.0.1:$PORT/v1" OPENAI_API_KEY=standin-key \
           OPENAI_MODEL=standin-model
    unset QWEN_HOME QWEN_RUNTIME_DIR
    mkdir -p "$HOME_DIR/.qwen"
    [[ -f "$HOME_DIR/.qwen/settings.json" ]] || cat > "$HOME_DIR/.qwen/settings.json" <<'JSON'
{"general": {"enableAutoUpdate": false},
 "privacy": {"usageStatisticsEnabled": false},
 "telemetry": {"enabled": false}}
JSON
    ;;
esac

"$@"
rc=$?
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null
exit $rc
