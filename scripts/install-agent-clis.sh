#!/usr/bin/env bash
# Install the real agent CLIs (Claude Code, Copilot CLI, Codex, droid, opencode, Qwen Code) from
# npm into a project-local prefix, for the tests that run them against the stand-in model server
# (testing/standin/).
#
#   scripts/install-agent-clis.sh [claude] [copilot] [codex] [droid] [opencode] [qwen]   # default: all
#   export PATH="$(scripts/install-agent-clis.sh --print-bin-dir):$PATH"
#
# Idempotent: a CLI already installed at the wanted version is skipped. Versions are pinned to the
# ones shared/AGENT-CLIS.md was verified with; when a pinned version cannot be installed the latest
# is installed instead, with a warning. Overrides (environment):
#   AGENT_CLIS_PREFIX       install prefix (default: /var/cache/ralph/agent-clis as root, else
#                           ${XDG_CACHE_HOME:-~/.cache}/ralph/agent-clis: once per machine,
#                           outside every clone, so that the sandbox tests see the CLIs wherever
#                           the clone lies, /tmp included)
#   CLAUDE_CODE_VERSION     default 2.1.197   (@anthropic-ai/claude-code)
#   COPILOT_VERSION         default 1.0.102   (@github/copilot)
#   CODEX_VERSION           default 0.171.0   (@openai/codex)
#   DROID_VERSION           default 0.215.0   (droid)
#   OPENCODE_VERSION        default 1.18.33   (opencode-ai)
#   QWEN_VERSION            default 0.24.4    (@qwen-code/qwen-code)
#   QWEN_OLD_VERSION        default 0.15.10   (installed with qwen into <prefix>/qwen-<version>, for
#                           the tests of its older output; empty: not installed)
#   AGENT_CLIS_LATEST=1     ignore the pins, install/upgrade to the latest
# Only the npm registry is contacted (the packages ship their native binaries as npm packages).
# Sizes: Claude ~235 MB, Copilot ~190 MB (+ ~235 MB unpacked on first run), Codex ~425 MB,
# droid ~295 MB, opencode ~355 MB.
# The last line printed on stdout is the bin directory to put on PATH (all else goes to stderr).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# As root, a machine-wide place every user can read (the sandbox tests run a CLI as a normal user
# too); else the user's cache. Never in the clone: a clone under /tmp is hidden by the sandbox.
if [[ $(id -u) == 0 ]]; then default_prefix=/var/cache/ralph/agent-clis; else default_prefix="${XDG_CACHE_HOME:-$HOME/.cache}/ralph/agent-clis"; fi
PREFIX="${AGENT_CLIS_PREFIX:-$default_prefix}"
BIN_DIR="$PREFIX/bin"

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  echo "$BIN_DIR"
  exit 0
fi

log() { echo "install-agent-clis: $*" >&2; }

if ! command -v npm >/dev/null 2>&1; then
  log "error: npm not found (Node.js 18+ is needed; e.g. apt-get install -y nodejs npm)"
  exit 1
fi

declare -A PKG=([claude]=@anthropic-ai/claude-code [copilot]=@github/copilot [codex]=@openai/codex
               [qwen]=@qwen-code/qwen-code)
declare -A PIN=([claude]="${CLAUDE_CODE_VERSION:-2.1.197}" [copilot]="${COPILOT_VERSION:-1.0.102}"
                [codex]="${CODEX_VERSION:-0.171.0}" [qwen]="${QWEN_VERSION:-0.24.4}")
PKG[droid]=droid PIN[droid]="${DROID_VERSION:-0.215.0}"
PKG[opencode]=opencode-ai PIN[opencode]="${OPENCODE_VERSION:-1.18.33}"
ALL=(claude copilot codex droid opencode qwen)

wanted=("$@")
[[ ${#wanted[@]} -eq 0 ]] && wanted=("${ALL[@]}")
for w in "${wanted[@]}"; do
  [[ -n "${PKG[$w]:-}" ]] || { log "error: unknown CLI '$w' (${ALL[*]})"; exit 2; }
done

mkdir -p "$PREFIX"
# npm's own cache (~/.npm) is used: a reinstall after removing the prefix is then fast.
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

# Shared, pre-extracted Copilot package cache: the npm package unpacks ~235 MB of JS on its first
# run; tests point COPILOT_PKG_CACHE_HOME here so that a fresh HOME does not unpack it again.
COPILOT_PKG_CACHE="$PREFIX/copilot-pkg-cache"

# Run a CLI with no network at all when we can (root + unshare), with every update/telemetry switch
# off in any case, and with a throw-away HOME/CODEX_HOME: `--version` must not phone home or write
# into the real home directory.
offline() {
  local vhome="$PREFIX/.version-home"
  mkdir -p "$vhome/codex"
  local envs=(HOME="$vhome" CODEX_HOME="$vhome/codex" COPILOT_PKG_CACHE_HOME="$COPILOT_PKG_CACHE"
              DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
              COPILOT_OFFLINE=true COPILOT_AUTO_UPDATE=false NO_UPDATE_NOTIFIER=1
              OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1)
  if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null 2>&1 && unshare --net true 2>/dev/null; then
    env "${envs[@]}" timeout 60 unshare --net "$@"
  else
    env "${envs[@]}" timeout 60 "$@"
  fi
}

installed_version() { # $1 = package name
  local pj="$PREFIX/lib/node_modules/$1/package.json"
  [[ -f "$pj" ]] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version || "")' "$pj" 2>/dev/null || true
}

status=0
for w in "${wanted[@]}"; do
  pkg="${PKG[$w]}"
  want="${PIN[$w]}"
  [[ "${AGENT_CLIS_LATEST:-}" == 1 ]] && want="$(npm view "$pkg" version 2>/dev/null || echo latest)"
  have="$(installed_version "$pkg")"
  if [[ -n "$have" && "$have" == "$want" && -x "$BIN_DIR/$w" ]]; then
    log "$w: $pkg@$have already installed, skipping"
    continue
  fi
  log "$w: installing $pkg@$want into $PREFIX ${have:+(replacing $have)}"
  t0=$(date +%s)
  if ! npm install -g --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$pkg@$want" >&2; then
    log "warning: $pkg@$want failed to install; trying the latest version"
    if ! npm install -g --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$pkg@latest" >&2; then
      log "error: $pkg could not be installed"
      status=1
      continue
    fi
  fi
  got="$(installed_version "$pkg")"
  [[ "$got" != "$want" ]] && log "warning: $w: wanted $want, installed $got"
  size="$(du -sh "$PREFIX/lib/node_modules/$pkg" 2>/dev/null | cut -f1)"
  log "$w: $pkg@$got installed in $(( $(date +%s) - t0 ))s ($size)"
done

for w in "${wanted[@]}"; do
  if [[ -x "$BIN_DIR/$w" ]]; then
    # Also unpacks Copilot's package into $COPILOT_PKG_CACHE on its first run.
    v="$(offline "$BIN_DIR/$w" --version 2>/dev/null | head -1)" || true
    if [[ -n "$v" ]]; then log "$w: $v"; else log "warning: '$BIN_DIR/$w --version' failed"; status=1; fi
  fi
done
# Qwen Code's older version (API errors reported as a successful result), in a prefix of its own.
old_qwen="${QWEN_OLD_VERSION-0.15.10}"
if [[ " ${wanted[*]} " == *" qwen "* && -n "$old_qwen" && -z "${AGENT_CLIS_NESTED:-}" ]]; then
  AGENT_CLIS_NESTED=1 AGENT_CLIS_PREFIX="$PREFIX/qwen-$old_qwen" QWEN_VERSION="$old_qwen" \
    AGENT_CLIS_LATEST='' bash "${BASH_SOURCE[0]}" qwen >&2 || status=1
fi
log "put this on PATH:  export PATH=\"$BIN_DIR:\$PATH\""
echo "$BIN_DIR"
exit $status
