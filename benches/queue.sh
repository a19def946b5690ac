#!/usr/bin/env bash
# Benchmark (SPEC §12 "a queue's own cost", issue 32): `ralph run --from beads` over a queue of
# ITEMS beads items (default 20) on a repository of FILES tracked files (default 20,000, built as
# benches/iteration.sh builds its repositories), with an instant agent, against a shell script
# doing the same steps per item with beads' CLI and git, side by side in the same trials:
#   ready    `br ready --json`, the first item taken (jq), its text read from that answer
#   claim    `br update ID --claim`, beads' changed files committed on the base branch
#   worktree `git worktree add -b ralph/beads-ID DIR HEAD`
#   task     the item's task file `.ralph/tasks/beads-ID.md` written (title, criteria as boxes)
#   agent    the same agent as ralph's: it checks every box of the task file and writes one file
#   commit   `git add -A && git commit` in the worktree
#   merge    `git merge --no-edit ralph/beads-ID` on the base branch, `git worktree remove DIR`
#   close    `br close ID --reason …`, beads' changed files committed on the base branch
# ralph runs `--parallel 1` and `--parallel 4`; the script runs the items one after the other.
#
# How it is measured: wall clock of the whole run ($EPOCHREALTIME), from launching it to its exit,
# divided by the items; the ratio is ralph's per item over the script's (means over the trials,
# the range of the per-trial ratios in brackets). Every run starts on its own copy of one prepared
# repository (beads initialised, the items created and committed; `cp -a`, then one `git status`
# to refresh the stat cache before the clock starts), with a scratch state and configuration
# directory for ralph; the three runs of a trial take turns at going first. Memory: ralph's
# resident high-water mark (VmHWM of /proc/PID/status, the ralph process alone, read every 20 ms
# while it runs — the last read is within 20 ms of its exit); with `--parallel N` the loops are
# threads of that one process, so "per loop" is the peak over N. Each run ends by checking that
# every item is closed, its file merged into the base branch, and no worktree left.
#
#   bash benches/queue.sh [TRIALS] [ITEMS] [FILES]        e.g. bash benches/queue.sh 3 20 20000 (the default)
#   BR=PATH the beads CLI (default ~/.cache/ralph/br-0.7.6/bin/br, as scripts/install-beads.sh
#   builds it: a debug build, whose own time both sides pay alike); BENCH_DIR=DIR puts the
#   repositories in DIR (default /dev/shm when it has room); KEEP=1 keeps them.
# Per-trial figures go to stderr; the Markdown table for docs/benchmarks.md to stdout, with the
# load average at the start and at the end.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tree.sh"
export LC_ALL=C
trials=${1:-3} items=${2:-20} n=${3:-20000}
[[ $trials =~ ^[1-9][0-9]?$ ]] || { echo "TRIALS must be 1..99" >&2; exit 2; }
[[ $items =~ ^[1-9][0-9]{0,2}$ ]] || { echo "ITEMS must be 1..999" >&2; exit 2; }
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1000 ] && [ "$n" -le 2000000 ] ||
  { echo "FILES must be a number of files, 1000..2000000" >&2; exit 2; }
br=${BR:-${XDG_CACHE_HOME:-$HOME/.cache}/ralph/br-0.7.6/bin/br}
[ -x "$br" ] || { echo "no beads CLI at $br (scripts/install-beads.sh builds it; or set BR=PATH)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is needed (the shell script reads beads' JSON with it)" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

ralph=$(cargo build --release --message-format=json-render-diagnostics --manifest-path "$root/Cargo.toml" --bin ralph \
  | grep '"kind":\["bin"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$ralph" ] || { echo "could not find the ralph executable in cargo's output" >&2; exit 1; }
start_all=${EPOCHREALTIME/./} # the build of ralph not counted

need_kb=$(( n * 25 )) # the prepared repository, a copy of it and up to four worktrees, ~4 KiB a file
if [ -n "${BENCH_DIR:-}" ]; then place=$BENCH_DIR
elif [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt "$need_kb" ]; then place=/dev/shm
else place=${TMPDIR:-/tmp}; fi
work=$(mktemp -d "$place/ralph-queue-bench.XXXXXX")
fs=$(df -PT "$work" | awk 'NR == 2 { print $2 }')
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '%s\n' "$*" >&2; }
now_us() { echo "${EPOCHREALTIME/./}"; }
ms() { awk -v u="$1" 'BEGIN { printf "%.0f", u / 1000 }'; }

# The repository: FILES files as benches/iteration.sh makes them (one commit through `git
# fast-import`, a few hundred leaf directories, files of 0.1–10 KB, a .gitignore), checked out;
# beads initialised in it and ITEMS items created, each with two criteria as task-list boxes.
prepare() {
  local repo=$work/prepared i out id
  bench_dirs "$n" > "$work/dirs"
  git init -q --initial-branch=main "$repo"
  git -C "$repo" config user.name bench; git -C "$repo" config user.email bench@localhost
  {
    printf 'commit refs/heads/main\ncommitter bench <bench@localhost> 1700000000 +0000\ndata 4\ninit\n'
    bench_files "$n" "$work/dirs"
    bench_inline .gitignore $'# build output\nbuild/\n*.o\n*.log\n'
  } | git -C "$repo" fast-import --quiet
  git -C "$repo" checkout -q -f main
  (cd "$repo" && "$br" init >/dev/null 2>&1) || { log "br init failed in $repo"; exit 1; }
  for i in $(seq "$items"); do
    out=$(cd "$repo" && "$br" create --title "Item $i" --description "Item $i of the queue benchmark." \
      --acceptance-criteria "- [ ] queue-work/item-$i.txt exists
- [ ] it names item $i" --priority 2 --json 2>/dev/null) || { log "br create failed: $out"; exit 1; }
    id=$(jq -r 'if type == "array" then .[0].id else .id end' <<< "$out")
    [ -n "$id" ] && [ "$id" != null ] || { log "br create gave no id: $out"; exit 1; }
  done
  git -C "$repo" add -A && git -C "$repo" commit -q -m "the queue's items"
}

# The agent, ralph's and the script's alike: every box of its task file checked, one file written.
cat > "$work/agent.sh" <<'SH'
#!/usr/bin/env bash
cat > /dev/null
task=${RALPH_TASK_FILE:?the task file}
sed -i -E 's/^([[:space:]]*[-*+] )\[ \]/\1[x]/' "$task"
mkdir -p queue-work
printf 'done: %s\n' "$(basename "$task" .md)" > "queue-work/$(basename "$task" .md).txt"
SH
chmod +x "$work/agent.sh"

# The shell script: the same steps per item, one item after the other, until none is ready.
cat > "$work/script.sh" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
br=$1 agent=$2 wts=$3
beads_commit() { git add -A .beads && { git diff --cached --quiet || git commit -q -m "$1"; }; }
while :; do
  item=$("$br" ready --json 2>/dev/null | jq -c '[.[] | select(.status == "open")][0] // empty')
  [ -n "$item" ] || break
  id=$(jq -r .id <<< "$item")
  "$br" update "$id" --claim >/dev/null
  beads_commit "beads claimed $id"
  wt=$wts/beads-$id
  git worktree add -q -b "ralph/beads-$id" "$wt" HEAD
  mkdir -p "$wt/.ralph/tasks"
  { printf '# Task: %s\n\n%s\n\n## Success Criteria\n\n' "$(jq -r .title <<< "$item")" "$(jq -r '.description // ""' <<< "$item")"
    jq -r '.acceptance_criteria // ""' <<< "$item"; } > "$wt/.ralph/tasks/beads-$id.md"
  (cd "$wt" && RALPH_TASK_FILE=.ralph/tasks/beads-$id.md RALPH_ITERATION=1 "$agent" < /dev/null)
  git -C "$wt" add -A && git -C "$wt" commit -q -m "beads-$id: iteration 1"
  git merge -q --no-edit "ralph/beads-$id"
  git worktree remove "$wt"
  "$br" close "$id" --reason "complete at $(git rev-parse --short HEAD)" >/dev/null
  beads_commit "beads closed $id"
done
SH
chmod +x "$work/script.sh"

# A run's own copy of the prepared repository, its stat cache refreshed; prints its path.
copy() { # $1 = a name
  local dest=$work/run-$1
  rm -rf "$dest" "$work/wts-$1" "$work/state-$1"; cp -a "$work/prepared" "$dest"
  mkdir -p "$work/wts-$1" "$work/state-$1/config" "$work/state-$1/state"
  git -C "$dest" status --porcelain > /dev/null
  echo "$dest"
}

# Every item closed, its file on the base branch, no worktree left, nothing uncommitted.
check() { # $1 = the repository, $2 = the run's name
  local repo=$1 open files wts
  open=$(cd "$repo" && "$br" list --all --limit 0 --json 2>/dev/null |
    jq '[(if type == "array" then . else .issues end)[] | select(.status != "closed")] | length')
  [ -n "$open" ] || { log "$2: br list gave no list of items"; exit 1; }
  files=$(git -C "$repo" ls-tree --name-only HEAD queue-work/ | wc -l)
  wts=$(git -C "$repo" worktree list --porcelain | grep -c '^worktree ')
  [ "$open" = 0 ] || { log "$2: $open items not closed"; exit 1; }
  [ "$files" = "$items" ] || { log "$2: $files of $items items' files on the base branch"; exit 1; }
  [ "$wts" = 1 ] || { log "$2: $((wts - 1)) worktrees left"; git -C "$repo" worktree list >&2; exit 1; }
  [ -z "$(git -C "$repo" status --porcelain)" ] || { log "$2: uncommitted changes left"; git -C "$repo" status --short | head >&2; exit 1; }
}

# One run of the shell script; prints its wall time (µs).
run_script() { # $1 = trial
  local repo t0 t1
  repo=$(copy "script-$1")
  t0=$(now_us)
  (cd "$repo" && "$work/script.sh" "$br" "$work/agent.sh" "$work/wts-script-$1") > "$work/script.out" 2>&1 ||
    { log "the shell script failed:"; cat "$work/script.out" >&2; exit 1; }
  t1=$(now_us)
  check "$repo" "the shell script"
  rm -rf "$repo" "$work/wts-script-$1"
  echo "$((t1 - t0))"
}

# One run of ralph with --parallel $1; prints its wall time (µs), its peak resident memory and the
# largest anonymous part of it sampled (KiB).
run_ralph() { # $1 = parallel, $2 = trial
  local repo t0 t1 pid rc hwm=0 anon=0 state=R key value fd name=ralph-$1-$2
  repo=$(copy "$name")
  exec {fd}<> <(:) # a pipe nobody writes: `read -t` on it is a sleep without a process
  t0=$(now_us)
  (cd "$repo" && exec env XDG_CONFIG_HOME="$work/state-$name/config" XDG_STATE_HOME="$work/state-$name/state" \
    RALPH_BEADS_CMD="$br" "$ralph" -q run --from beads --parallel "$1" --agent-cmd "$work/agent.sh" --yes \
    --color never) > "$work/ralph.out" 2>&1 < /dev/null &
  pid=$!
  # until it exits (a zombie, whose status has no memory left to show, or gone)
  while [ "$state" != Z ] && [ -r "/proc/$pid/status" ]; do
    while read -r key value _; do
      case $key in
        State:) state=$value ;;
        VmHWM:) [ "$value" -le "$hwm" ] || hwm=$value ;;
        RssAnon:) [ "$value" -le "$anon" ] || anon=$value ;;
      esac
    done < "/proc/$pid/status" 2>/dev/null || state=Z
    read -r -t 0.02 -u "$fd" _ || true
  done
  set +e; wait "$pid"; rc=$?; set -e
  t1=$(now_us)
  exec {fd}>&-
  [ "$rc" = 0 ] || { log "ralph --parallel $1 exited $rc:"; tail -n 40 "$work/ralph.out" >&2; exit 1; }
  check "$repo" "ralph --parallel $1"
  rm -rf "$repo" "$work/state-$name"
  echo "$((t1 - t0)) $hwm $anon"
}

log "building the $n-file repository and its $items beads items"
t_setup=$(now_us)
prepare
log "  made in $(ms $(( $(now_us) - t_setup ))) ms"
declare -a sc=() p1=() p4=() m1=() m4=() a1=() a4=()
for trial in $(seq "$trials"); do
  order=(script 1 4); r=$(( (trial - 1) % 3 )); order=("${order[@]:r}" "${order[@]:0:r}")
  for side in "${order[@]}"; do
    case $side in
      script) sc+=("$(run_script "$trial")")
        log "$(printf 'trial %d: shell script %s ms for %d items (%s ms an item)' "$trial" "$(ms "${sc[-1]}")" "$items" "$(ms $(( ${sc[-1]} / items )))")" ;;
      *) read -r w m a < <(run_ralph "$side" "$trial")
        if [ "$side" = 1 ]; then p1+=("$w"); m1+=("$m"); a1+=("$a"); else p4+=("$w"); m4+=("$m"); a4+=("$a"); fi
        log "$(printf 'trial %d: ralph --parallel %s %s ms for %d items (%s ms an item), peak RSS %s KiB (anonymous at most %s KiB)' "$trial" "$side" "$(ms "$w")" "$items" "$(ms $(( w / items )))" "$m" "$a")" ;;
    esac
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

elapsed=$(( ($(now_us) - start_all) / 1000000 ))
printf 'Wall time per item in ms (the whole run over %s items); ratio = ralph / the shell script (per-trial range in brackets). %s files, %s trials, repositories on %s; %s cores, %s, %s, ralph %s; load average %s at the start, %s at the end; %d s in all.\n\n' \
  "$items" "$n" "$trials" "$fs" "$(nproc)" "$(git --version)" "$("$br" --version 2>/dev/null | head -n 1)" \
  "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')" "$load_start" "$load_end" "$elapsed"
echo '| run | per item | ratio | peak resident (anonymous) | per running loop |'
echo '|---|---:|---:|---:|---:|'
awk -v items="$items" -v sc="${sc[*]}" -v p1="${p1[*]}" -v p4="${p4[*]}" -v m1="${m1[*]}" -v m4="${m4[*]}" -v a1="${a1[*]}" -v a4="${a4[*]}" '
  function mean(a, k,   i, x) { x = 0; for (i = 1; i <= k; i++) x += a[i]; return x / k }
  function max(a, k,   i, x) { x = 0; for (i = 1; i <= k; i++) if (a[i] > x) x = a[i]; return x }
  function ratio(ra, sh, k,   i, lo, hi, r, m) {
    m = sprintf("%.2f", mean(ra, k) / mean(sh, k))
    if (k > 1) { lo = 1e9; hi = 0
      for (i = 1; i <= k; i++) { r = ra[i] / sh[i]; if (r < lo) lo = r; if (r > hi) hi = r }
      m = m sprintf(" (%.2f–%.2f)", lo, hi) }
    return m }
  BEGIN { loops = items < 4 ? items : 4; k = split(sc, s); split(p1, a); split(p4, b); split(m1, c); split(m4, d); split(a1, e); split(a4, f)
    printf "| shell script, one item after the other | %.0f ms | 1.00 | – | – |\n", mean(s, k) / items / 1000
    printf "| ralph --parallel 1 | %.0f ms | %s | %.1f MiB (%.1f) | %.1f MiB (%.1f) |\n", mean(a, k) / items / 1000, ratio(a, s, k), max(c, k) / 1024, max(e, k) / 1024, max(c, k) / 1024, max(e, k) / 1024
    printf "| ralph --parallel 4 | %.0f ms | %s | %.1f MiB (%.1f) | %.1f MiB (%.1f) |\n", mean(b, k) / items / 1000, ratio(b, s, k), max(d, k) / 1024, max(f, k) / 1024, max(d, k) / loops / 1024, max(f, k) / loops / 1024 }'
printf '\nPeak resident: the largest VmHWM of the ralph process over the trials (its git and agent children not counted; file pages it maps, such as a pack of the repository on tmpfs, count in it); in brackets the largest RssAnon sampled (its own heap and stacks); per running loop: over the loops that ran at once (4, or the items when fewer).\n'
