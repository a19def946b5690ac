#!/usr/bin/env bash
# Benchmark (SPEC §12, "Stopping"): Ctrl-C or a timeout leaves no process of the agent's tree
# alive, within 100 ms — plus the grace period for an agent that ignores SIGTERM.
#
# The agent (`bash agent.sh`, generated below) builds a tree of five processes and records each
# one's pid and start time (field 22 of /proc/PID/stat) in a file of its own, then hangs:
#   agent      the command ralph (or the baseline) started, waiting on its child;
#   child      a subshell in the agent's process group, waiting on
#   grandchild a `bash` that execs `sleep` (still in the group);
#   daemon     `setsid` (a session and group of its own), stdio to /dev/null;
#   daemon2    the same, double-forked: its parent exits at once, so it is orphaned.
# Two cases:
#   obeyed     every process dies of SIGTERM (the agent through a trap that stamps the moment
#              the signal arrived, then exits);
#   ignored    the agent runs `trap '' TERM` before starting the others, so all five ignore it
#              and only SIGKILL, after the grace G, ends them.
# Two ways to stop:
#   Ctrl-C     SIGINT sent to the supervisor's pid (as a terminal's Ctrl-C reaches the
#              foreground group: ralph's guard and the agent are in groups of their own). The
#              origin is the µs stamp taken just before `kill -INT`.
#   timeout    `--timeout T` (default 500 ms). The origin is when the timeout is due as the user
#              sees it: the agent's start plus T, the start being the agent script's first
#              command (a µs stamp). ralph arms its timer when its guard reports the agent
#              started, which is within a millisecond or two of that stamp (bash's own start-up
#              comes before it, so the origin errs late by about that much, for both sides
#              alike). In the obeyed case the moment the agent's SIGTERM trap ran is printed
#              against the same origin ("TERM at"), which shows how close it is.
# Supervisors, side by side, interleaved trials (the order alternating), on one repository:
#   ralph      `ralph run --agent-cmd 'bash agent.sh …' --grace G --max-iterations 1 --yes
#              --reset [--timeout T]`, release build, with a one-criterion RALPH_TASK.md;
#   baseline   the usual shell supervisor. Timeout: `timeout --kill-after=G T bash agent.sh …`
#              (SIGTERM to its process group at T, SIGKILL at T + G). Ctrl-C: a bash script that
#              runs the agent as a job of its own (`set -m`: a process group of its own) and on
#              SIGINT does `kill -TERM -- -PGID; sleep G; kill -KILL -- -PGID; exit 130`.
# Both supervisors are started with SIGINT at its default (`env --default-signal=INT`), as from a
# terminal; a background job of a script would otherwise start with it ignored.
#
# How it is measured: from the origin, this script polls /proc in a loop: a round checks every
# recorded process not yet seen gone (a process is gone when its pid is absent, a zombie, or
# has another start time), then sleeps 1 ms (`read -t 0.001` on a FIFO: no fork); a round takes
# 1.1–1.7 ms. A process's moment of death is the stamp taken right after the check that first
# saw it gone, so it errs late by at most one round. Polling ends when all five are gone, or
# 2 s after the supervisor exited (or at the origin + G + 10 s): what is still alive then is
# counted as left, and killed (SIGKILL by pid, start time checked) so the machine stays clean.
#   ralph: whole tree gone        the latest death of the five;
#   shell: its process group gone the latest death of agent, child and grandchild (the baseline's
#                                 group kill never reaches the setsid daemons, which are counted
#                                 as left: polling went on 2 s after the baseline exited).
# In the ignored case the figures are latency − G (written "G + x"). Medians and maxima over the
# trials; per-trial figures go to stderr (with each supervisor's exit code and the moment it
# exited), the Markdown table for docs/benchmarks.md to stdout. The target is 100 ms (G + 100 ms).
#
#   bash benches/stopping.sh [TRIALS] [GRACE]      (defaults: 5 trials, 300ms)
#   TIMEOUT=500ms sets T; RALPH_BIN=PATH measures that binary instead; KEEP=1 keeps the
#   temporary directory. About a minute with the defaults, most of it the baseline's 2 s watches.
set -euo pipefail
export LC_ALL=C
trials=${1:-5}
grace_arg=${2:-300ms}
timeout_arg=${TIMEOUT:-500ms}
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "TRIALS must be a positive number" >&2; exit 2; }
to_ms() { # 300ms, 300 (ms) or 0.3s / 1s → ms
  case $1 in
    *ms) [[ ${1%ms} =~ ^[0-9]+$ ]] && echo "${1%ms}" ;;
    *s) [[ ${1%s} =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v s="${1%s}" 'BEGIN { printf "%.0f", s * 1000 }' ;;
    *) [[ $1 =~ ^[0-9]+$ ]] && echo "$1" ;;
  esac
}
g=$(to_ms "$grace_arg") || true; t=$(to_ms "$timeout_arg") || true
[ -n "$g" ] && [ "$g" -ge 1 ] || { echo "GRACE must be a duration of at least 1ms, like 300ms" >&2; exit 2; }
[ -n "$t" ] && [ "$t" -ge 100 ] || { echo "TIMEOUT must be a duration of at least 100ms, like 500ms" >&2; exit 2; }
secs() { awk -v m="$1" 'BEGIN { printf "%.3f", m / 1000 }'; }
gs=$(secs "$g") ts=$(secs "$t")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
now_us() { echo "${EPOCHREALTIME/./}"; }
start_all=$(now_us)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

ralph=${RALPH_BIN:-$(cargo build --release --manifest-path "$root/Cargo.toml" --bin ralph \
  --message-format=json-render-diagnostics |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)}
[ -x "$ralph" ] || { echo "could not build ralph" >&2; exit 1; }
rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo '?')
[ -z "${RALPH_BIN:-}" ] || rev=$RALPH_BIN

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-stopping.XXXXXX")
names=(agent child grandchild daemon daemon2)
pids=() starts=() sup_pid='' sup_start=''
# Per-trial lines go to fd 3, the real stderr: run_one's own stderr goes to a file, as bash
# reports there the background jobs that died of a signal (`timeout --kill-after` kills itself).
exec 3>&2
log() { printf '%s\n' "$*" >&3; }

# Is process $1 with start time $2 alive (not gone, not a zombie, not a reused pid)?
alive() {
  local f
  read -r -a f 2>/dev/null < "/proc/$1/stat" || return 1
  if [[ ${f[1]} != *')' ]]; then # a command name with a space: split after the last ')'
    local l; read -r l 2>/dev/null < "/proc/$1/stat" || return 1; read -r -a f <<< "x x ${l##*) }"
  fi
  [ "${f[2]}" != Z ] && [ "${f[21]}" = "$2" ]
}
start_time() { local f; read -r -a f < "/proc/$1/stat" && echo "${f[21]}"; }

# SIGKILL whatever of the current run is still alive: the recorded processes and the supervisor
# (a SIGKILLed ralph's guard sweeps the rest).
kill_left() {
  local i
  if [ -n "$sup_pid" ] && alive "$sup_pid" "$sup_start"; then kill -KILL "$sup_pid" 2>/dev/null || true; fi
  for i in "${!pids[@]}"; do
    if alive "${pids[i]}" "${starts[i]}"; then kill -KILL "${pids[i]}" 2>/dev/null || true; fi
  done
}
cleanup() {
  kill_left
  [ -z "$sup_pid" ] || wait "$sup_pid" 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# A sleep of 1 ms without a fork.
mkfifo "$work/tick"
exec {tick}<>"$work/tick"
nap() { read -r -t 0.001 -u "$tick" _ || true; }

# proc.sh REC NAME: record this process as NAME, then hang (exec keeps the pid and start time).
cat > "$work/proc.sh" <<'SH'
read -r -a f < /proc/$$/stat
echo "$$ ${f[21]}" > "$1/$2"
exec sleep 3600
SH
# agent.sh REC MODE: the tree; MODE is obeyed or ignored.
cat > "$work/agent.sh" <<'SH'
rec=$1 mode=$2 proc=${0%/*}/proc.sh
echo "${EPOCHREALTIME/./}" > "$rec/start"
[ "$mode" = ignored ] && trap '' TERM
record() { local f; read -r -a f < "/proc/$BASHPID/stat"; echo "$BASHPID ${f[21]}" > "$rec/$1"; }
record agent
( record child; bash "$proc" "$rec" grandchild & wait ) &
setsid bash "$proc" "$rec" daemon < /dev/null > /dev/null 2>&1 &
( setsid bash "$proc" "$rec" daemon2 < /dev/null > /dev/null 2>&1 & )
for n in child grandchild daemon daemon2; do
  until [ -s "$rec/$n" ]; do sleep 0.005; done
done
[ "$mode" = ignored ] || trap 'echo "${EPOCHREALTIME/./}" > "$rec/term"; exit 143' TERM
echo ready > "$rec/ready"
while :; do wait; done
SH
# ctrlc.sh GRACE_S PROGRAM ARGS…: the shell supervisor of the Ctrl-C baseline.
cat > "$work/ctrlc.sh" <<'SH'
g=$1; shift
set -m
"$@" &
pg=$!
trap 'kill -TERM -- -$pg 2>/dev/null; sleep "$g"; kill -KILL -- -$pg 2>/dev/null; exit 130' INT
wait "$pg"
SH

repo=$work/repo
mkdir "$repo"
(
  cd "$repo" && git init -q && git config user.name bench && git config user.email bench@localhost
  printf -- '---\ntask: bench\n---\n## Success Criteria\n- [ ] stop the agent\n' > RALPH_TASK.md
  git add -A && git commit -qm init
)

# One run: $1 = ralph|shell, $2 = int|timeout, $3 = obeyed|ignored. Appends to $work/results
# "SUP STOP MODE group_us tree_us left term_us exit_us rc" (µs from the origin; - when never).
run_one() {
  local sup=$1 stop=$2 mode=$3 rec=$work/rec i t0 now left rc=0 term=- exited=- sup_gone='' deadline group=- tree=-
  rm -rf "$rec"; mkdir "$rec"
  pids=() starts=()
  local agent=(bash "$work/agent.sh" "$rec" "$mode")
  case $sup/$stop in
    ralph/*)
      local args=(run -C "$repo" --agent-cmd "bash $work/agent.sh $rec $mode" --grace "${g}ms"
        --max-iterations 1 --yes --reset --color never)
      [ "$stop" = timeout ] && args+=(--timeout "${t}ms")
      env --default-signal=INT "$ralph" "${args[@]}" > "$work/sup.out" 2>&1 < /dev/null &
      ;;
    shell/int) env --default-signal=INT bash "$work/ctrlc.sh" "$gs" "${agent[@]}" > "$work/sup.out" 2>&1 < /dev/null & ;;
    shell/timeout) timeout --kill-after="$gs" "$ts" "${agent[@]}" > "$work/sup.out" 2>&1 < /dev/null & ;;
  esac
  sup_pid=$!
  sup_start=$(start_time "$sup_pid")
  deadline=$(( $(now_us) + 20000000 ))
  until [ -e "$rec/ready" ]; do
    if ! alive "$sup_pid" "$sup_start" || [ "${EPOCHREALTIME/./}" -gt "$deadline" ]; then
      log "$sup ($stop, $mode): the agent never got ready; its output:"; cat "$work/sup.out" >&3; exit 1
    fi
    nap
  done
  for i in "${!names[@]}"; do
    read -r "pids[i]" "starts[i]" < "$rec/${names[i]}"
  done
  local gone=("" "" "" "" "")
  if [ "$stop" = int ]; then
    t0=${EPOCHREALTIME/./}
    kill -INT "$sup_pid"
  else
    t0=$(( $(<"$rec/start") + t * 1000 ))
    [ "${EPOCHREALTIME/./}" -lt "$t0" ] || { log "the agent took longer than the timeout to get ready: raise TIMEOUT"; exit 1; }
  fi
  deadline=$(( t0 + (g + 10000) * 1000 ))
  while :; do
    left=0
    for i in "${!names[@]}"; do
      [ -z "${gone[i]}" ] || continue
      if alive "${pids[i]}" "${starts[i]}"; then left=$((left + 1)); else gone[i]=${EPOCHREALTIME/./}; fi
    done
    now=${EPOCHREALTIME/./}
    if [ -z "$sup_gone" ] && ! alive "$sup_pid" "$sup_start"; then sup_gone=$now; fi
    [ "$left" -gt 0 ] || break
    [ -z "$sup_gone" ] || [ $((now - sup_gone)) -lt 2000000 ] || break
    [ "$now" -lt "$deadline" ] || break
    nap
  done
  # The survivors go; the supervisor is left to finish by itself (ralph commits and exits).
  for i in "${!names[@]}"; do
    if alive "${pids[i]}" "${starts[i]}"; then kill -KILL "${pids[i]}" 2>/dev/null || true; fi
  done
  while [ -z "$sup_gone" ]; do
    nap
    alive "$sup_pid" "$sup_start" || sup_gone=${EPOCHREALTIME/./}
    [ "${EPOCHREALTIME/./}" -lt $((deadline + 20000000)) ] || { log "$sup ($stop, $mode) did not exit; killed"; kill_left; }
  done
  { wait "$sup_pid"; } 2>/dev/null || rc=$?
  sup_pid=''
  exited=$((sup_gone - t0))
  [ ! -s "$rec/term" ] || term=$(( $(<"$rec/term") - t0 ))
  if [ -n "${gone[0]}" ] && [ -n "${gone[1]}" ] && [ -n "${gone[2]}" ]; then
    group=$(printf '%s\n' "${gone[@]:0:3}" | sort -n | tail -1); group=$((group - t0))
  fi
  if [ "$left" = 0 ]; then tree=$(printf '%s\n' "${gone[@]}" | sort -n | tail -1); tree=$((tree - t0)); fi
  echo "$sup $stop $mode $group $tree $left $term $exited $rc" >> "$work/results"
  local fmt='%-5s %-7s %-7s trial %d: group gone %s, tree gone %s, %d left, TERM at %s, exited %s (exit %d)'
  log "$(printf "$fmt" "$sup" "$stop" "$mode" "$trial" "$(ms "$group")" "$(ms "$tree")" "$left" "$(ms "$term")" "$(ms "$exited")" "$rc")"
}
ms() { [ "$1" = - ] && echo - || awk -v u="$1" 'BEGIN { printf "%.1f ms", u / 1000 }'; }

: > "$work/results"
for trial in $(seq "$trials"); do
  for stop in int timeout; do
    for mode in obeyed ignored; do
      if [ $((trial % 2)) = 1 ]; then order=(ralph shell); else order=(shell ralph); fi
      for sup in "${order[@]}"; do run_one "$sup" "$stop" "$mode" 2>> "$work/notices"; done
    done
  done
done

# Median and maximum of column $4 of the rows for $1 $2 $3, less $5 µs, as "x ms (max y)";
# "never" when a trial's figure is missing.
stat_cell() {
  awk -v s="$1" -v p="$2" -v m="$3" -v col="$4" -v less="$5" -v pre="$6" '
    $1 == s && $2 == p && $3 == m { if ($col == "-") never++; else v[++n] = $col - less }
    END {
      if (never) { printf "never (%d of %d)", never, never + n; exit }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
      med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      printf "%s ms (max %s)", f(med), f(v[n]) }
    function f(u) { return pre == "" ? sprintf("%.1f", u / 1000) : sprintf("G %s %.1f", u < 0 ? "−" : "+", (u < 0 ? -u : u) / 1000) }' "$work/results"
}
left_cell() { # the number of processes left, "lo–hi of 5" when the trials differ
  awk -v s="$1" -v p="$2" -v m="$3" '$1 == s && $2 == p && $3 == m { if (!n++ || $6 < lo) lo = $6; if ($6 > hi) hi = $6 }
    END { if (lo == hi) printf "%d of 5", hi; else printf "%d–%d of 5", lo, hi }' "$work/results"
}
rows=()
for stop in int timeout; do
  for mode in obeyed ignored; do
    if [ "$mode" = ignored ]; then less=$((g * 1000)) pre=G target="G + 100 ms"; else less=0 pre='' target="100 ms"; fi
    if [ "$stop" = int ]; then how='Ctrl-C'; else how="timeout"; fi
    rows+=("| $how | $mode | $(stat_cell ralph "$stop" "$mode" 5 "$less" "$pre") | $(left_cell ralph "$stop" "$mode") | $(stat_cell shell "$stop" "$mode" 4 "$less" "$pre") | $(left_cell shell "$stop" "$mode") | $target |")
  done
done
term_obeyed=$(awk '$3 == "obeyed" && $7 != "-" { k = $1 " " ($2 == "int" ? "Ctrl-C" : "timeout"); v[k] = v[k] sprintf(" %.1f", $7 / 1000) }
  END { for (k in v) print "  " k ":" v[k] }' "$work/results" | sort)

elapsed=$(( ($(now_us) - start_all) / 1000000 ))
printf 'Stopping a tree of 5 processes (agent, child and grandchild in its group, a setsid daemon and a double-forked one), %d interleaved trials; grace G = %d ms, timeout T = %d ms. Latency from the stop (Ctrl-C: the SIGINT; timeout: agent start + T) to the last process gone, median (max), less G where the tree ignores SIGTERM. Shell: `timeout --kill-after=G T` for the timeout; for Ctrl-C a bash script running the agent as a job of its own (`set -m`) that on INT does `kill -TERM -- -PGID; sleep G; kill -KILL -- -PGID`. %s cores, load average %s before and %s after, ralph %s; %d s in all.\n\n' \
  "$trials" "$g" "$t" "$(nproc)" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$rev" "$elapsed"
echo '| stop | SIGTERM | ralph: whole tree gone | left alive | shell: its process group gone | left alive 2 s after the shell exited | target |'
echo '|---|---|---:|---:|---:|---:|---:|'
printf '%s\n' "${rows[@]}"
printf '\nWhen the obeying agent'"'"'s SIGTERM trap ran (ms from the origin), per supervisor and stop, trial by trial:\n%s\n' "$term_obeyed"
