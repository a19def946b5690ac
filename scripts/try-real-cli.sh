#!/usr/bin/env bash
# Run one real agent CLI (Claude Code, Copilot CLI or Codex) ONCE, directly (not through ralph),
# against the stand-in model server (testing/standin/server.py), offline, and show what happened.
#
#   scripts/try-real-cli.sh claude|copilot|codex [options]
#
# Two checks, each in a fresh temp git repo with a 2-criterion RALPH_TASK.md and a fresh HOME
# (and CODEX_HOME) under the temp dir:
#   session  the ralph preset argv with the prompt as an argument; the stand-in answers with one
#            shell tool call (a sed that checks the first unchecked box) and then a final text.
#            PASS when exactly one box got checked.
#   stdin    a 300 KiB prompt on stdin (claude -p, copilot, codex exec -); PASS when the stand-in
#            received it intact (same length and sha256, see the server's JSON log).
#
# Options:
#   --only session|stdin   run one check only
#   --rate-limit K         the first K model requests get HTTP 429 (retry-after 1 s)
#   --usage-limit SECS     claude: the first model request gets a subscription usage limit that
#                          resets in SECS (Claude then prints a rate_limit_event and exits); the
#                          script waits for the reset and runs the session again, which passes.
#                          Uses CLAUDE_CODE_OAUTH_TOKEN instead of ANTHROPIC_API_KEY (see docs/agents.md).
#                          codex: a 429 {"type":"usage_limit_reached","resets_at":...} answer;
#                          copilot: 6 answers 429 "You've hit your session rate limit." (Copilot
#                          retries a 429 five times, then gives up with exit 1).
#   --json                 copilot: add --output-format json; codex: add --json
#   --prompt-kib N         size of the stdin prompt (default 300)
#   --keep                 keep the temp dir (printed); default: removed unless a check failed
#   --no-netns             do not use a network namespace even when root
# Environment: AGENT_CLIS_BIN (default: the bin dir of scripts/install-agent-clis.sh),
#   STANDIN_TIMEOUT (seconds per CLI run, default 180).
# Exit status: 0 when every check passed, 1 when one failed, 2 usage, 3 the CLI is not installed.
set -uo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"
SERVER="$REPO/testing/standin/server.py"

usage() { sed -n '2,30p' "$SELF" | sed 's/^# \{0,1\}//'; exit 2; }

[[ $# -ge 1 ]] || usage
CLI="$1"; shift
case "$CLI" in claude|copilot|codex) ;; -h|--help) usage ;; *) echo "unknown CLI '$CLI'" >&2; usage ;; esac

ONLY="" RATE_LIMIT=0 USAGE_LIMIT="" JSON=0 KEEP=0 NO_NETNS=0 PROMPT_KIB=300
ORIG_ARGS=("$CLI" "$@")
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --rate-limit) RATE_LIMIT="$2"; shift 2 ;;
    --usage-limit) USAGE_LIMIT="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    --prompt-kib) PROMPT_KIB="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-netns) NO_NETNS=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown option '$1'" >&2; usage ;;
  esac
done

BIN_DIR="${AGENT_CLIS_BIN:-$("$REPO/scripts/install-agent-clis.sh" --print-bin-dir)}"
PREFIX="$(dirname "$BIN_DIR")"
if [[ ! -x "$BIN_DIR/$CLI" ]]; then
  echo "SKIP: $CLI is not installed in $BIN_DIR; run scripts/install-agent-clis.sh $CLI" >&2
  exit 3
fi

# ---- network isolation: re-run this script inside a loopback-only network namespace ----------
if [[ -z "${STANDIN_NETNS:-}" && $NO_NETNS == 0 && $(id -u) == 0 ]] \
   && command -v unshare >/dev/null && command -v ip >/dev/null && unshare --net true 2>/dev/null; then
  exec unshare --net env STANDIN_NETNS=1 bash "$SELF" "${ORIG_ARGS[@]}"
fi
if [[ -n "${STANDIN_NETNS:-}" ]]; then
  ip link set lo up
  NETMODE="loopback-only network namespace (unshare --net)"
else
  NETMODE="host network, loopback only by configuration (no namespace: not root or no unshare/ip)"
fi

TIMEOUT="${STANDIN_TIMEOUT:-180}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ralph-try-$CLI.XXXXXX")"
FAILED=0
SERVER_PID=""
cleanup() {
  [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null
  if [[ $KEEP == 1 || $FAILED != 0 ]]; then echo "(kept $WORK)"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

say() { printf '\n=== %s\n' "$*"; }

make_repo() { # $1 dir
  mkdir -p "$1"
  git -C "$1" init -q
  cat > "$1/RALPH_TASK.md" <<'EOF'
---
task: Stand-in smoke test
---
# Task: Stand-in smoke test

Check one criterion per session.

## Success Criteria
- [ ] First criterion
- [ ] Second criterion
EOF
  git -C "$1" add -A
  git -C "$1" -c user.email=standin@example.invalid -c user.name=standin commit -qm init
}

count_checked() { grep -c '^- \[[xX]\]' "$1" || true; }

start_server() { # $1 name; $2 scenario json text
  local name="$1"
  printf '%s\n' "$2" > "$WORK/$name.scenario.json"
  rm -f "$WORK/$name.port"
  python3 "$SERVER" --scenario "$WORK/$name.scenario.json" --port-file "$WORK/$name.port" \
    --log "$WORK/$name.requests.jsonl" --idle-timeout $((TIMEOUT + 30)) --max-requests 200 \
    > "$WORK/$name.server.out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -s "$WORK/$name.port" ]] && break; sleep 0.05; done
  PORT="$(cat "$WORK/$name.port" 2>/dev/null)"
  [[ -n "$PORT" ]] || { echo "stand-in server did not start:"; cat "$WORK/$name.server.out"; exit 1; }
}

stop_server() { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""; }

# The environment each CLI gets: a clean one (env -i) with PATH, a fresh HOME, and the offline
# settings from shared/AGENT-CLIS.md. Sets CLI_ENV (array) and CLI_ARGV_BASE.
cli_env() { # $1 home dir
  local home="$1"
  mkdir -p "$home"
  CLI_ENV=(PATH="$BIN_DIR:/usr/local/bin:/usr/bin:/bin" HOME="$home" LANG=C.UTF-8 TERM=dumb
           NO_COLOR=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1)
  case "$CLI" in
    claude)
      CLI_ENV+=(ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1)
      if [[ -n "$USAGE_LIMIT" ]]; then
        CLI_ENV+=(CLAUDE_CODE_OAUTH_TOKEN=standin-oauth-token)   # subscription-style login
      else
        CLI_ENV+=(ANTHROPIC_API_KEY=standin-key)
      fi
      [[ $(id -u) == 0 ]] && CLI_ENV+=(IS_SANDBOX=1)
      ;;
    copilot)
      CLI_ENV+=(COPILOT_OFFLINE=true COPILOT_PROVIDER_BASE_URL="http://127.0.0.1:$PORT/v1"
                COPILOT_PROVIDER_API_KEY=standin-key COPILOT_MODEL=standin-model
                COPILOT_AUTO_UPDATE=false COPILOT_PKG_CACHE_HOME="$PREFIX/copilot-pkg-cache")
      ;;
    codex)
      # shellcheck source=../testing/standin/codex-config.sh
      . "$REPO/testing/standin/codex-config.sh"
      write_codex_config "$home/.codex" "$PORT"
      CLI_ENV+=(CODEX_HOME="$home/.codex" STANDIN_API_KEY=standin-key)
      ;;
  esac
}

# The ralph preset argv (SPEC §4). $1 = prompt, or "" for the stdin form.
preset_argv() {
  local p="$1"
  case "$CLI" in
    claude)
      if [[ -n "$p" ]]; then ARGV=(claude -p "$p"); else ARGV=(claude -p); fi
      ARGV+=(--dangerously-skip-permissions --output-format stream-json --verbose) ;;
    copilot)
      if [[ -n "$p" ]]; then ARGV=(copilot -p "$p" --yolo); else ARGV=(copilot --yolo); fi
      [[ $JSON == 1 ]] && ARGV+=(--output-format json) ;;
    codex)
      ARGV=(codex exec --dangerously-bypass-approvals-and-sandbox)
      [[ $JSON == 1 ]] && ARGV+=(--json)
      if [[ -n "$p" ]]; then ARGV+=("$p"); else ARGV+=(-); fi ;;
  esac
}

run_cli() { # $1 name  $2 repo  $3 stdin-file ("" = /dev/null)  $4.. argv
  local name="$1" repo="$2" stdin="${3:-/dev/null}"; shift 3
  local t0 t1
  t0=$(date +%s%N)
  ( cd "$repo" && env -i "${CLI_ENV[@]}" timeout -k 5 "$TIMEOUT" "$@" \
      < "$stdin" > "$WORK/$name.stdout" 2> "$WORK/$name.stderr" )
  RC=$?
  t1=$(date +%s%N)
  ELAPSED_MS=$(( (t1 - t0) / 1000000 ))
}

show_output() { # $1 name
  local n; n=$(wc -l < "$WORK/$1.stdout")
  echo "--- $CLI stdout ($(wc -c < "$WORK/$1.stdout") bytes, $n lines; up to 40 shown, 400 chars each, without Copilot's session.background_tasks_changed):"
  grep -v '"type":"session.background_tasks_changed"' "$WORK/$1.stdout" | head -40 | cut -c1-400
  if (( n > 40 )); then echo "  [...]"; tail -3 "$WORK/$1.stdout" | cut -c1-400; fi
  echo "--- $CLI stderr ($(wc -c < "$WORK/$1.stderr") bytes, last 20 lines):"
  tail -20 "$WORK/$1.stderr" | cut -c1-300
}

show_requests() { # $1 name
  echo "--- requests the stand-in received:"
  python3 - "$WORK/$1.requests.jsonl" <<'EOF'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for l in lines:
    r = json.loads(l)
    print(f"  #{r['n']} {r.get('method')} {r.get('path')} kind={r.get('kind')} "
          f"model={r.get('model')} tool_result={r.get('tool_result')} action={r.get('action')} "
          f"status={r.get('status')} prompt_len={r.get('prompt_len')} "
          f"tool={r.get('tool', '')} prompt_head={r.get('prompt_head', '')[:60]!r}")
EOF
}

scenario_json() {
  local rl=""
  if [[ -n "$USAGE_LIMIT" ]]; then
    # Copilot retries any 429 five times before giving up: 6 limited answers make it give up.
    local first=1; [[ $CLI == copilot ]] && first=6
    rl=", \"rate_limit\": {\"first\": $first, \"kind\": \"usage_limit\", \"resets_in\": $USAGE_LIMIT}"
  elif [[ "$RATE_LIMIT" != 0 ]]; then
    rl=", \"rate_limit\": {\"first\": $RATE_LIMIT, \"kind\": \"429\", \"retry_after\": 1}"
  fi
  echo "{\"tool_command\": \"sed -i '0,/- \\\\[ \\\\]/s//- [x]/' RALPH_TASK.md\", \"final_text\": \"Checked the first unchecked criterion of RALPH_TASK.md.\"$rl}"
}

echo "CLI: $CLI ($(env -i PATH="$BIN_DIR:/usr/bin:/bin" HOME="$WORK/version-home" COPILOT_PKG_CACHE_HOME="$PREFIX/copilot-pkg-cache" CODEX_HOME="$WORK/version-home" COPILOT_OFFLINE=true timeout 60 "$BIN_DIR/$CLI" --version 2>/dev/null | head -1))"
echo "network: $NETMODE"
echo "work dir: $WORK"

# ---- check 1: one session checks exactly one box ----------------------------------------------
if [[ -z "$ONLY" || "$ONLY" == session ]]; then
  say "session: ralph preset argv, prompt as an argument"
  R="$WORK/session-repo"; make_repo "$R"
  start_server session "$(scenario_json)"
  cli_env "$WORK/session-home"
  PROMPT="You are working in this repository. Read RALPH_TASK.md and complete the first unchecked criterion under Success Criteria, then check its box."
  preset_argv "$PROMPT"
  echo "env: $(printf '%s ' "${CLI_ENV[@]}" | sed "s|$WORK|\$WORK|g")"
  printf 'argv (exact):'; printf ' %q' "${ARGV[@]}"; echo
  run_cli session "$R" "" "${ARGV[@]}"
  echo "exit status: $RC, elapsed: ${ELAPSED_MS} ms"
  if [[ -n "$USAGE_LIMIT" ]]; then
    show_output session
    show_requests session
    if grep -q '"rate_limit_event"' "$WORK/session.stdout"; then
      echo "rate_limit_event seen: $(grep -m1 '"rate_limit_event"' "$WORK/session.stdout" | cut -c1-300)"
    fi
    checked=$(count_checked "$R/RALPH_TASK.md")
    echo "boxes checked after the limited attempt: $checked (expected 0)"
    [[ $checked == 0 ]] || FAILED=1
    echo "waiting $USAGE_LIMIT s for the reset, then running the same session again..."
    sleep "$USAGE_LIMIT"
    mv "$WORK/session.stdout" "$WORK/session-limited.stdout"
    mv "$WORK/session.stderr" "$WORK/session-limited.stderr"
    run_cli session "$R" "" "${ARGV[@]}"
    echo "retry: exit status: $RC, elapsed: ${ELAPSED_MS} ms"
  fi
  stop_server
  show_output session
  show_requests session
  checked=$(count_checked "$R/RALPH_TASK.md")
  echo "--- RALPH_TASK.md criteria now:"; grep '^- \[' "$R/RALPH_TASK.md"
  if [[ "$checked" == 1 ]]; then
    echo "PASS session: exactly one box checked (exit $RC, ${ELAPSED_MS} ms)"
  else
    echo "FAIL session: $checked boxes checked, expected 1 (exit $RC)"; FAILED=1
  fi
fi

# ---- check 2: a big prompt on stdin arrives intact --------------------------------------------
if [[ -z "$ONLY" || "$ONLY" == stdin ]]; then
  say "stdin: a ${PROMPT_KIB} KiB prompt on stdin"
  R="$WORK/stdin-repo"; make_repo "$R"
  USAGE_LIMIT_SAVED="$USAGE_LIMIT"; USAGE_LIMIT=""   # the stdin check never uses a usage limit
  start_server stdin "$(scenario_json)"
  cli_env "$WORK/stdin-home"
  P="$WORK/big-prompt.md"
  python3 - "$P" "$PROMPT_KIB" <<'EOF'
import sys
path, kib = sys.argv[1], int(sys.argv[2])
head = ("BIG-PROMPT-START. Read RALPH_TASK.md and complete the first unchecked criterion under "
        "Success Criteria, then check its box. The rest of this prompt is filler that must arrive "
        "intact.\n\n")
tail = "\nBIG-PROMPT-END"
body, i = [], 0
size = len(head) + len(tail)
while size < kib * 1024:
    line = f"filler line {i:06d}: the quick brown fox jumps over the lazy dog; ralph stdin check.\n"
    body.append(line); size += len(line); i += 1
text = (head + "".join(body) + tail)
text = text[: kib * 1024 - len(tail)] + tail if len(text) > kib * 1024 else text
open(path, "w").write(text)
EOF
  want_len=$(wc -c < "$P"); want_sha=$(sha256sum "$P" | cut -d' ' -f1)
  preset_argv ""
  printf 'argv (exact):'; printf ' %q' "${ARGV[@]}"; echo "  < big-prompt.md ($want_len bytes)"
  run_cli stdin "$R" "$P" "${ARGV[@]}"
  echo "exit status: $RC, elapsed: ${ELAPSED_MS} ms"
  stop_server
  show_output stdin
  show_requests stdin
  verdict=$(python3 - "$WORK/stdin.requests.jsonl" "$P" <<'EOF'
import hashlib, json, sys
want = open(sys.argv[2], encoding="utf-8").read()
try:
    recs = [json.loads(l) for l in open(sys.argv[1])]
except FileNotFoundError:
    recs = []
mains = [r for r in recs if r.get("kind") == "main"]
if not mains:
    print("FAIL no model request with tools reached the stand-in"); sys.exit()
r = mains[0]
sha = lambda s: hashlib.sha256(s.encode()).hexdigest()
if r["prompt_sha256"] == sha(want):
    print(f"PASS exact: {r['prompt_bytes']} bytes, sha256 matches")
elif r["prompt_sha256"] == sha(want.strip()):
    print(f"PASS after trimming surrounding whitespace: {r['prompt_bytes']} bytes")
else:
    print(f"FAIL got {r['prompt_bytes']} bytes (want {len(want.encode())}), head={r['prompt_head'][:60]!r} tail={r['prompt_tail'][-60:]!r}")
EOF
)
  echo "--- RALPH_TASK.md criteria now:"; grep '^- \[' "$R/RALPH_TASK.md"
  case "$verdict" in
    PASS*) echo "PASS stdin: the ${PROMPT_KIB} KiB prompt arrived intact (${verdict#PASS }) (exit $RC, ${ELAPSED_MS} ms, boxes checked: $(count_checked "$R/RALPH_TASK.md"))" ;;
    *) echo "FAIL stdin: ${verdict#FAIL }"; FAILED=1 ;;
  esac
  USAGE_LIMIT="$USAGE_LIMIT_SAVED"
fi

exit $FAILED
