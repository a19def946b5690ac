#!/usr/bin/env bash
# Benchmark (SPEC §12): per-iteration overhead — everything but the agent: read the task, stage,
# commit, fingerprint, log, state, report, spawn the next agent — against the equivalent shell
# loop, run side by side:
#   grep -c -- '- \[x\]' RALPH_TASK.md; git add -A && git commit -q -m ...; git status --porcelain | cksum
# on repositories of SIZE tracked files (default 20,000, 100,000 and 500,000: a few hundred to a
# few thousand directories, up to four levels deep, files of 0.1–10 KB, a .gitignore with a few
# rules plus a nested one, an ignored build/ directory and scattered ignored *.o/*.log files), and
# beside both git's own floor for the same changes (below). Each iteration makes a realistic
# change: 50 files modified, 20 added (5 of them in a new directory),
# 5 deleted, a few ignored build outputs written.
#
# Every size's repository is built once (one commit, packed by `git fast-import`); each trial then
# prepares, for the shell loop, ralph and git's floor alike, a working copy in each case:
#   fresh    `git clone` of it: git's stat cache is valid;
#   copied   that clone copied with `cp -a` to a new path: every entry's ctime and inode changed,
#            so the stat cache is stale once (as after a restore or on a container volume);
#   touched  a clone in which every tracked file's mtime was then bumped (as by a formatter):
#            every entry stale, contents unchanged.
#   sandboxed  a fresh clone, ralph run with `--sandbox` (issue 29: the agent's own git directory
#            made afresh before each attempt, its commits fetched through the sandbox's `git
#            upload-pack` after it). The agent, and with it the shell loop, runs in the sandbox
#            (the work directory made writable there by a `sandbox_writable` in a configuration of
#            the benchmark's own, `XDG_CONFIG_HOME`); its "beside" CPU figure is not read there.
#            Not run unless CASES names it.
#
# How it is measured: wall clock, microsecond stamps ($EPOCHREALTIME), no subtraction of runs.
# Per case and trial, one `ralph run` of ITERATIONS iterations on its copy, with an agent
# (`--agent-cmd`, a bash script) that stamps the moment it starts, makes the change of iteration
# k, then — while ralph waits on it — applies the same change to the shell loop's own copy and
# times the shell loop's iteration k there, and stamps the moment it ends. So each shell
# iteration runs just before the ralph iteration close it is compared with, under the same load.
#   ralph  its overhead for iteration k is the time from agent k's end to agent k+1's start (the
#          close of iteration k — judge, stage, commit, fingerprint, logs, state, report — and
#          the preparation and spawn of k+1); the agent's own time is excluded exactly, and the
#          cost of spawning a bash script is counted as ralph's. After the last agent the gap
#          runs to the process's exit (its halt summary stands in for preparing one more).
#   shell  the pipeline above, timed alone (the change is applied before the clock starts).
#   first  iteration 1. ralph's includes everything from launching the process to the first
#          agent (start-up, pre-flight; printed apart on stderr as "start-up"): in the copied and
#          touched cases the one-time stat refresh may happen there or in the first close. The
#          shell's first is its first pipeline on the new copy, where git refreshes and writes
#          back its stat cache.
#   steady the mean of iterations 2..N (ralph's: 2..N-1, the iterations in the middle of a run).
#   whole  the whole run as a user pays it (issue 22): ralph's start-up and every gap to its exit
#          (iterations 1..N, the halt and its full check included) against the sum of the shell
#          loop's N iterations.
#   last   ralph's iteration N: its close also halts the run, and before any halt ralph checks
#          the tree once with a full walk without its file watcher (SPEC §12, the price of
#          exactness paid once per run); shown apart, in a note under the table.
#   beside ralph's CPU time (its own and that of helpers it reaped, from /proc/PID/stat) while
#          its agents ran: work done beside the agent escapes the gaps above, so it is printed
#          under the table (it would also slow the shell iteration timed in the meantime).
#   floor  git's own floor for the same change (SPEC §12, issue 32), timed in the same agent right
#          after the shell loop's iteration, on a third copy made like the case's others and
#          warmed: the untracked cache on, and a file-system monitor (a hook of a few lines) that
#          answers exactly the paths the change touched (the change script lists them; the new
#          directory and the ignored outputs too). The least a supervisor that stages through
#          git runs: `git status --porcelain=v1 -z`, `git update-index --add --remove` of exactly
#          the changed paths, `git diff-index --cached HEAD`, `git commit-tree` + `git
#          update-ref` (no hooks) and `git status --porcelain` for the fingerprint, each command
#          timed; the commit's tree comes from `git write-tree`, run between them and timed apart
#          (ralph builds its trees itself: that is ralph's share). The floor's steady figure is
#          the mean over ralph's steady iterations (2..N-1); `ralph / floor` is ralph's steady
#          iteration over it. The run fails if the floor's status did not list every changed path
#          (the monitor must have told git) or its last tree is not ralph's.
# Figures are means over the trials; the ratio is ralph / shell of those means, followed, with
# more than one trial, by the range of the per-trial ratios. Per-trial figures go to stderr, the
# Markdown table for docs/benchmarks.md to stdout. ralph's exit 3 (max iterations) is expected; each
# case ends by checking that ralph and git's floor committed the same tree as the shell loop and
# left none of it uncommitted. A note under the table gives the floor's commands one by one.
#
#   bash benches/iteration.sh [TRIALS] [SIZE[:TRIALS]...]     (SIZE at least 2000 files)
#   e.g. bash benches/iteration.sh 3 20000 100000:1 500000:1        (the default)
#   ITERATIONS=5 (4..15) iterations per run; KEEP=1 keeps the temporary directory.
#   CASES="fresh copied touched" (the default) the cases run, in order; add `sandboxed`, e.g.
#   CASES="fresh sandboxed" bash benches/iteration.sh 3 20000 for the sandbox's cost.
#   PROFILE=DIR (an existing directory) writes, per run, ralph's phase times (`ralph -v`) to
#   DIR/ralph-FILES-CASE-TRIAL.txt and git's trace2 performance log of every git command ralph
#   runs (index reads and writes, status walks) to DIR/git-FILES-CASE-TRIAL.perf.
#   BENCH_DIR=DIR puts the repositories in DIR; by default they go to /dev/shm (tmpfs) when it has
#   room: on shared virtual disks creating a file can cost ten times what it does on tmpfs or a
#   local SSD, which would make the set-up slow and the figures noisy. BENCH_DIR=/tmp measures on
#   disk (there ralph's fsyncs of its state files count; on tmpfs they cost nothing).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/tree.sh"
export LC_ALL=C
trials=${1:-3}; shift || true
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(20000 100000:1 500000:1)
iters=${ITERATIONS:-5}
[[ $iters =~ ^[0-9]+$ ]] && [ "$iters" -ge 4 ] && [ "$iters" -le 15 ] || { echo "ITERATIONS must be 4..15" >&2; exit 2; }
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "TRIALS must be a positive number" >&2; exit 2; }
read -r -a cases <<< "${CASES:-fresh copied touched}"
for kind in "${cases[@]}"; do
  [[ $kind =~ ^(fresh|copied|touched|sandboxed)$ ]] || { echo "CASES: '$kind' is not fresh, copied, touched or sandboxed" >&2; exit 2; }
done
[ ${#cases[@]} -gt 0 ] || { echo "CASES names no case" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

ralph=$(cargo build --release --message-format=json-render-diagnostics --manifest-path "$root/Cargo.toml" --bin ralph \
  | grep '"kind":\["bin"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$ralph" ] || { echo "could not find the ralph executable in cargo's output" >&2; exit 1; }
start_all=${EPOCHREALTIME/./} # the build of ralph not counted

# Where the repositories live: BENCH_DIR, else /dev/shm when it has room, else $TMPDIR or /tmp.
max_n=0
for spec in "${sizes[@]}"; do
  [[ $spec =~ ^[0-9]+(:[1-9][0-9]*)?$ ]] && [ "${spec%%:*}" -ge 2000 ] ||
    { echo "size '$spec': expected FILES[:TRIALS], at least 2000 files" >&2; exit 2; }
  [ "${spec%%:*}" -le "$max_n" ] || max_n=${spec%%:*}
done
need_kb=$(( max_n * 27 )) # four copies at once (three, and a clone being copied) of ~4 KiB files, and room to spare
if [ -n "${BENCH_DIR:-}" ]; then place=$BENCH_DIR
elif [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt "$need_kb" ]; then place=/dev/shm
else place=${TMPDIR:-/tmp}; fi
work=$(mktemp -d "$place/ralph-iteration-bench.XXXXXX")
fs=$(df -PT "$work" | awk 'NR == 2 { print $2 }')
# The sandboxed case's own configuration, outside it: the work directory writable in the sandbox
# (the agent's stamps, the shell loop's repository; ralph's repository there is bound as always).
xdg=$(mktemp -d "$place/ralph-iteration-bench-config.XXXXXX")
cleanup() { rm -rf "$xdg"; if [ "${KEEP:-0}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
mkdir -p "$xdg/ralph"
printf 'sandbox_writable = ["%s"]\n' "$work" > "$xdg/ralph/config.toml"
trap 'exit 130' INT TERM
log() { printf '%s\n' "$*" >&2; }
now_us() { echo "${EPOCHREALTIME/./}"; }

# The repository of $1 files, built once: $work/base-$1, its directory list $work/dirs-$1.
make_base() {
  local n=$1 base=$work/base-$1 f
  bench_dirs "$n" > "$work/dirs-$n"
  # ralph's own files, as `ralph init` writes them
  rm -rf "$work/init" && git init -q "$work/init"
  (cd "$work/init" && "$ralph" init bench --criterion a --criterion b --max-iterations 50 >/dev/null)
  # One commit streamed into `git fast-import` (a packed repository, without a work tree to write
  # and hash); file i lives in directory int(i / (n / d)), so neighbours share a directory.
  git init -q --bare --initial-branch=main "$base"
  {
    printf 'commit refs/heads/main\ncommitter bench <bench@localhost> 1700000000 +0000\ndata 4\ninit\n'
    bench_files "$n" "$work/dirs-$n"
    bench_inline .gitignore $'# build output\nbuild/\n*.o\n*.log\n!keep.log\n/coverage/\n.cache/\n'
    bench_inline src/.gitignore $'*.gen.rs\n'
    bench_inline src/keep.log $'kept\n'
    (cd "$work/init" && git ls-files --others --exclude-standard) | while read -r f; do
      printf 'M 100644 inline %s\ndata %d\n' "$f" "$(wc -c < "$work/init/$f")"; cat "$work/init/$f"; echo
    done
  } | git -C "$base" fast-import --quiet
}

# A working copy for case $2 at path $3; $1 = files.
make_case() {
  local n=$1 kind=$2 dest=$3 src
  src=$dest; [ "$kind" = copied ] && src=$dest.orig
  git clone -q "$work/base-$n" "$src"
  git -C "$src" config user.name bench; git -C "$src" config user.email bench@localhost
  (cd "$src" && awk -v n="$((n / 20))" 'BEGIN { for (i = 0; i < n; i++) {
      d = sprintf("build/obj%02d", i % 40); if (i < 40) system("mkdir -p " d)
      f = sprintf("%s/o%05d.o", d, i); print i > f; close(f) } }'
   awk 'NR % 10 == 0 { f = $0 "/debug.log"; print NR > f; close(f) }
        NR % 10 == 5 && /^src\// { f = $0 "/x.gen.rs"; print NR > f; close(f) }' "$work/dirs-$n")
  case $kind in
    copied) cp -a "$src" "$dest" && rm -rf "$src" ;;
    touched) (cd "$dest" && git ls-files -z | xargs -0 touch) ;;
  esac
}

# git's floor's copy for case $2 at path $3 ($1 = files): made as the case's others are, then a
# file-system monitor that answers exactly the paths the changes touched (protocol 2: the token is
# the generation of changes; the answer, every path changed in the generations after the token
# git gives it, or "/" — everything — for a token it never gave) and the untracked cache, warmed
# by two statuses (the stat cache refreshed and written back, the token and the cache stored).
make_floor() {
  make_case "$1" "$2" "$3"
  cat > "$3/.git/floor-hook.sh" <<'HOOK'
#!/bin/sh
d=$(dirname "$0"); g=$(cat "$d/floor-gen")
printf 'floor-%s\0' "$g"
t=${2#floor-}
case $2 in floor-*) ;; *) printf '/\0'; exit 0 ;; esac
case $t in ''|*[!0-9]*) printf '/\0'; exit 0 ;; esac
while [ "$t" -lt "$g" ]; do t=$((t + 1)); cat "$d/floor-changed-$t"; done
HOOK
  chmod +x "$3/.git/floor-hook.sh"; echo 0 > "$3/.git/floor-gen"
  git -C "$3" config core.fsmonitor "$3/.git/floor-hook.sh"
  git -C "$3" config core.untrackedCache true
  git -C "$3" status --porcelain > /dev/null; git -C "$3" status --porcelain > /dev/null
}

# The change of iteration k (1..15; `awk -v k=… -v n=FILES -f change.awk DIRS /dev/null`), in the
# current directory: 50 files modified in ten neighbouring directories, 5 deleted beside them, 15
# added across directories and 5 in a new one, and ignored build outputs written. Iteration k of
# both sides makes exactly the same change.
cat > "$work/change.awk" <<'AWK'
NR == FNR { dir[NR - 1] = $0; nd = NR; next }
END {
  per = n / nd; b = (k * 1000) % (n - 1000)
  for (j = 0; j < 50; j++) { f = sprintf("%s/f%06d.rs", dir[int((b + j * 10) / per)], b + j * 10)
    printf "// edited in iteration %d\nfn added_%d() {}\n", k, j >> f; close(f); if (list != "") print f > list }
  rm = "rm -f"
  for (j = 0; j < 5; j++) { f = sprintf("%s/f%06d.rs", dir[int((b + 600 + j) / per)], b + 600 + j)
    rm = rm " " f; if (list != "" && system("test -e " f) == 0) print f > list }
  system(rm)
  for (j = 0; j < 15; j++) { f = sprintf("%s/added_%d_%d.rs", dir[int((b + j * 37) / per)], k, j)
    printf "// added in iteration %d\npub fn f%d() -> u32 { %d }\n", k, j, j > f; close(f); if (list != "") print f > list }
  nd2 = dir[int(b / per)] "/feature" k; system("mkdir -p " nd2 " build")
  for (j = 0; j < 5; j++) { f = sprintf("%s/part%d.rs", nd2, j); printf "// part %d\n", j > f; close(f); if (list != "") print f > list }
  f = "build/iter" k ".o"; print k > f; close(f); f = "build.log"; print k >> f; close(f)
  # With -v list=FILE: the paths to stage in FILE, and in FILE.more the rest a file-system monitor
  # reports (the new directory, the ignored outputs).
  if (list != "") { close(list); printf "%s/\nbuild/iter%d.o\nbuild.log\n", nd2, k > (list ".more"); close(list ".more") }
}
AWK
# The agent ralph runs. It stamps its start and its end (µs) into $work/stamps; in between it
# makes the change of iteration k in ralph's repository, then the same change in the shell loop's
# repository, and times the shell loop's iteration k there (into $work/shell-times) while ralph
# waits: the two sides' iterations run back to back, under the same load.
cat > "$work/agent.sh" <<SH
#!/usr/bin/env bash
s=\${EPOCHREALTIME/./}
# CPU ticks ralph (the parent) and the helpers it reaped have used so far
cpu() { local l; read -r l < /proc/\$PPID/stat 2>/dev/null || { echo 0; return; }; set -- \${l##*) }; echo \$((\${12} + \${13} + \${14} + \${15})); }
c0=\$(cpu)
cat >/dev/null
n=\$(<"$work/size") k=\$RALPH_ITERATION shell=\$(<"$work/shell-repo")
awk -v k="\$k" -v n="\$n" -f "$work/change.awk" "$work/dirs-\$n" /dev/null
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_TRACE2_PERF
cd "\$shell"
awk -v k="\$k" -v n="\$n" -f "$work/change.awk" "$work/dirs-\$n" /dev/null
a=\${EPOCHREALTIME/./}
if { grep -c -- '- \[x\]' RALPH_TASK.md || true; } >/dev/null &&
  git add -A && git commit -q -m "iteration \$k" && git status --porcelain | cksum >/dev/null; then
  b=\${EPOCHREALTIME/./}; echo "\$k \$((b - a))" >> "$work/shell-times"
fi
# git's floor for the same change, on the third copy: its monitor (the hook) answers exactly the
# paths this change touched; the commands any supervisor that stages through git must run, each
# timed: status, update-index of the changed paths, diff-index, (write-tree: the commit's tree,
# timed apart), commit-tree + update-ref, the fingerprint's status.
cd "\$(<"$work/floor-repo")"
awk -v k="\$k" -v n="\$n" -v list="$work/floor-list" -f "$work/change.awk" "$work/dirs-\$n" /dev/null
g=\$(( \$(<.git/floor-gen) + 1 ))
cat "$work/floor-list" "$work/floor-list.more" | tr '\n' '\0' > ".git/floor-changed-\$g"
echo "\$g" > .git/floor-gen
t0=\${EPOCHREALTIME/./}
if git status --porcelain=v1 -z > "$work/floor-status" && t1=\${EPOCHREALTIME/./} &&
  git update-index --add --remove --stdin < "$work/floor-list" && t2=\${EPOCHREALTIME/./} &&
  git -c core.fsmonitor=false diff-index --cached HEAD > /dev/null && t3=\${EPOCHREALTIME/./} &&
  tree=\$(git write-tree) && t4=\${EPOCHREALTIME/./} &&
  c=\$(git commit-tree "\$tree" -p HEAD -m "iteration \$k") && git update-ref HEAD "\$c" && t5=\${EPOCHREALTIME/./} &&
  git status --porcelain | cksum > /dev/null; then
  t6=\${EPOCHREALTIME/./}
  echo "\$k \$((t3 - t0 + t6 - t4)) \$((t1 - t0)) \$((t2 - t1)) \$((t3 - t2)) \$((t4 - t3)) \$((t5 - t4)) \$((t6 - t5))" >> "$work/floor-times"
  # The monitor must have told git of every change: the status listed each staged path, the new
  # directory as one entry.
  d=\$(head -n 1 "$work/floor-list.more")
  want=\$(awk -v d="\$d" 'index(\$0, d) != 1 { k++ } END { print k + 1 }' "$work/floor-list")
  got=\$(tr -cd '\0' < "$work/floor-status" | wc -c)
  [ "\$got" = "\$want" ] || echo "iteration \$k: the floor's status listed \$got paths, the change made \$want" >> "$work/floor-error"
else
  echo "iteration \$k: a git command of the floor failed" >> "$work/floor-error"
fi
printf '%s %s %s %s\n' "\$s" "\${EPOCHREALTIME/./}" "\$c0" "\$(cpu)" >> "$work/stamps"
SH
chmod +x "$work/agent.sh"

# One run of N iterations of ralph, with the shell loop's inside its agent; prints (µs) the
# shell's first iteration and steady mean, ralph's first and steady mean, ralph's start-up (the
# part of its first iteration before the first agent), and the CPU time ralph spent while its
# agents ran, per iteration.
run_pair() { # $1 = ralph's repo, $2 = the shell loop's, $3 = a name for the profile, $4 = the case, $5 = the floor's
  echo "$2" > "$work/shell-repo"; echo "$5" > "$work/floor-repo"
  local t0 t1 rc
  : > "$work/stamps"; : > "$work/shell-times"; : > "$work/floor-times"; rm -f "$work/floor-error"
  t0=$(now_us)
  set +e
  local quiet=(-q) trace=() sandbox=()
  [ "$4" != sandboxed ] || sandbox=(--sandbox) trace=(XDG_CONFIG_HOME="$xdg")
  if [ -n "${PROFILE:-}" ]; then
    # ralph's own phases (`-v`: `time: run › iteration N › PHASE: …`) and git's regions (index
    # reads and writes, status walks) per git command ralph runs.
    quiet=(-v); trace+=(GIT_TRACE2_PERF="$PROFILE/git-$3.perf")
  fi
  (cd "$1" && env "${trace[@]}" "$ralph" "${quiet[@]}" run --agent-cmd "$work/agent.sh" --yes --reset \
    --max-iterations "$iters" --stuck-threshold 1000 --color never "${sandbox[@]}") > "$work/ralph.out" 2>&1 < /dev/null
  rc=$?
  [ -z "${PROFILE:-}" ] || grep -a '^time: \|time: ' "$work/ralph.out" > "$PROFILE/ralph-$3.txt" || true
  t1=$(now_us)
  set -e
  case $rc in
    3|4) ;; # max iterations (expected) or stalled
    *) log "ralph exited $rc:"; cat "$work/ralph.out" >&2; exit 1 ;;
  esac
  # the stamps, then the moment ralph had exited as the start of a next agent that never ran
  echo "$t1 0 0 0" >> "$work/stamps"
  awk -v t0="$t0" -v tick="$tick_us" '{ s[NR] = $1; e[NR] = $2; beside += $4 - $3 } END {
    if (NR < 5) { print "ralph ran only " NR - 1 " iterations (4 are needed)" > "/dev/stderr"; exit 1 }
    first = (s[1] - t0) + (s[2] - e[1])
    for (k = 2; k < NR - 1; k++) rest += s[k + 1] - e[k]
    whole = s[1] - t0; for (k = 1; k < NR; k++) whole += s[k + 1] - e[k]
    printf "%d %d %d %d %d %d\n", first, rest / (NR - 3), s[1] - t0, beside * tick / (NR - 1), s[NR] - e[NR - 1], whole }' "$work/stamps" > "$work/ralph-figures"
  awk -v n="$iters" '$1 == 1 { first = $2 } $1 > 1 { rest += $2; k++ } END {
    if (NR != n || k != n - 1) { print "the shell loop ran " NR " of " n " iterations" > "/dev/stderr"; exit 1 }
    printf "%d %d %d ", first, rest / k, first + rest }' "$work/shell-times"
  [ ! -s "$work/floor-error" ] || { log "git's floor:"; cat "$work/floor-error" >&2; exit 1; }
  # git's floor: the steady mean over the iterations of ralph's (2..N-1), the sum and per command
  awk -v n="$iters" '$1 > 1 && $1 < n { for (i = 2; i <= 8; i++) m[i] += $i; k++ } END {
    if (NR != n) { print "git'"'"'s floor ran " NR " of " n " iterations" > "/dev/stderr"; exit 1 }
    for (i = 2; i <= 8; i++) printf "%d ", m[i] / k }' "$work/floor-times"
  cat "$work/ralph-figures"
}

# Both sides must have committed the same trees (ralph's own .ralph/ files aside), all of it.
same_result() { # $1 = the shell's repo, $2 = ralph's, $3 = the floor's
  local a b c
  a=$(git -C "$1" ls-tree -r HEAD | grep -v $'\t\.ralph/' | cksum)
  b=$(git -C "$2" ls-tree -r HEAD | grep -v $'\t\.ralph/' | cksum)
  c=$(git -C "$3" ls-tree -r HEAD | grep -v $'\t\.ralph/' | cksum)
  [ "$a" = "$b" ] || { log "ralph's last commit in $2 differs from the shell loop's in $1"; exit 1; }
  [ "$c" = "$b" ] || { log "the floor's last commit in $3 differs from ralph's in $2"; exit 1; }
  [ -z "$(git -C "$3" status --porcelain)" ] || { log "the floor left uncommitted changes in $3"; exit 1; }
  [ -z "$(git -C "$2" status --porcelain)" ] || { log "ralph left uncommitted changes in $2"; exit 1; }
}

ms() { awk -v u="$1" 'BEGIN { printf "%.0f", u / 1000 }'; }

table=() last=() floor_parts=() beside=0 tick_us=$(( 1000000 / $(getconf CLK_TCK) ))
for spec in "${sizes[@]}"; do
  n=${spec%%:*}; t=$trials; [ "$spec" = "$n" ] || t=${spec#*:}
  log "building the $n-file repository"
  t_setup=$(now_us)
  make_base "$n"
  log "  built in $(ms $(( $(now_us) - t_setup ))) ms"
  echo "$n" > "$work/size"
  declare -A sf=() ss=() rf=() rs=() swh=() rwh=() fls=()
  for trial in $(seq "$t"); do
    for kind in "${cases[@]}"; do
      t_setup=$(now_us)
      make_case "$n" "$kind" "$work/$kind-shell"
      make_case "$n" "$kind" "$work/$kind-ralph"
      make_floor "$n" "$kind" "$work/$kind-floor"
      log "  $kind, trial $trial: three working copies made in $(ms $(( $(now_us) - t_setup ))) ms"
      sleep 1 # no file as new as the index the first iteration writes (racy git)
      read -r a b sw fl f1 f2 f3 f4 f5 f6 c d u v w rw < <(run_pair "$work/$kind-ralph" "$work/$kind-shell" "$n-$kind-$trial" "$kind" "$work/$kind-floor")
      same_result "$work/$kind-shell" "$work/$kind-ralph" "$work/$kind-floor"
      rm -rf "$work/$kind-shell" "$work/$kind-ralph" "$work/$kind-floor"
      log "$(printf '%7d files %-7s trial %d: shell first %6s ms steady %6s ms | ralph first %6s ms (start-up %s) steady %6s ms last %6s ms | floor steady %s ms (status %s, update-index %s, diff-index %s, commit %s, status %s; write-tree %s); whole run: shell %s ms, ralph %s ms; CPU beside the agent %s ms' \
        "$n" "$kind" "$trial" "$(ms "$a")" "$(ms "$b")" "$(ms "$c")" "$(ms "$u")" "$(ms "$d")" "$(ms "$w")" \
        "$(ms "$fl")" "$(ms "$f1")" "$(ms "$f2")" "$(ms "$f3")" "$(ms "$f5")" "$(ms "$f6")" "$(ms "$f4")" "$(ms "$sw")" "$(ms "$rw")" "$(ms "$v")")"
      floor_parts+=("$n $kind $f1 $f2 $f3 $f5 $f6 $f4")
      last+=("$n $kind $w")
      [ "$kind" = sandboxed ] || [ "$v" -le "$beside" ] || beside=$v
      sf[$kind]+="$a "; ss[$kind]+="$b "; rf[$kind]+="$c "; rs[$kind]+="$d "
      swh[$kind]+="$sw "; rwh[$kind]+="$rw "; fls[$kind]+="$fl "
    done
  done
  for kind in "${cases[@]}"; do
    table+=("$(awk -v n="$n" -v kind="$kind" -v t="$t" -v sf="${sf[$kind]}" -v ss="${ss[$kind]}" \
      -v rf="${rf[$kind]}" -v rs="${rs[$kind]}" -v sw="${swh[$kind]}" -v rw="${rwh[$kind]}" -v fl="${fls[$kind]}" '
      function commas(v,   s, o) { s = sprintf("%.0f", v); o = ""
        while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
        return s o }
      function mean(a, k,   i, x) { x = 0; for (i = 1; i <= k; i++) x += a[i]; return x / k }
      function cell(sh, ra, k,   i, lo, hi, r, m) {
        m = sprintf("%s | %s | %.2f", commas(mean(sh, k) / 1000), commas(mean(ra, k) / 1000), mean(ra, k) / mean(sh, k))
        if (k > 1) { lo = 1e9; hi = 0
          for (i = 1; i <= k; i++) { r = ra[i] / sh[i]; if (r < lo) lo = r; if (r > hi) hi = r }
          m = m sprintf(" (%.2f–%.2f)", lo, hi) }
        return m }
      function floor_cell(fl, ra, k,   m) { m = cell(fl, ra, k); sub(/ \| [0-9,]+ \|/, " |", m); return m }
      BEGIN { k = split(sf, a); split(ss, b); split(rf, c); split(rs, d); split(sw, e); split(rw, f); split(fl, g)
        printf "| %s | %s | %s | %s | %s | %s |\n", commas(n), kind, cell(a, c, k), cell(b, d, k), floor_cell(g, d, k), cell(e, f, k) }')")
  done
  rm -rf "$work/base-$n"
  unset sf ss rf rs swh rwh fls
done

elapsed=$(( ($(now_us) - start_all) / 1000000 ))
printf 'Per-iteration overhead in ms; ratio = ralph / shell (per-trial range in brackets). Sizes %s (size:trials), %s iterations per run, repositories on %s; %s cores, %s, ralph %s; %d s in all.\n\n' \
  "$(for spec in "${sizes[@]}"; do n=${spec%%:*}; [ "$spec" = "$n" ] && printf '%s:%s ' "$n" "$trials" || printf '%s ' "$spec"; done | sed 's/ $//')" \
  "$iters" "$fs" "$(nproc)" "$(git --version)" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')" "$elapsed"
echo '| files | case | shell first | ralph first | ratio | shell steady | ralph steady | ratio | git floor steady | ralph / floor | shell whole run | ralph whole run | ratio |'
echo '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|'
printf '%s\n' "${table[@]}"
printf '\nralph'"'"'s last iteration (its close also halts the run, after the full check of the tree without the watcher), ms, mean over the trials: %s.\n' \
  "$(printf '%s\n' "${last[@]}" | awk '{ k = $1 " " $2; s[k] += $3; c[k]++; if (!(k in o)) { o[k] = ++n; key[n] = k } }
    END { for (i = 1; i <= n; i++) { split(key[i], p, " "); printf "%s%s %s %.0f", (i > 1 ? ", " : ""), p[1], p[2], s[key[i]] / c[key[i]] / 1000 } }')"
printf '\nralph'"'"'s own CPU time while its agents ran (work beside the agent, not counted above): at most %s ms per iteration.\n' "$(ms "$beside")"
printf '\ngit'"'"'s floor per steady iteration (status, update-index of the changed paths, diff-index --cached, commit-tree + update-ref, the fingerprint'"'"'s status), ms, mean over the trials; in brackets write-tree, run to make the commit'"'"'s tree, not counted: %s.\n' \
  "$(printf '%s\n' "${floor_parts[@]}" | awk '{ k = $1 " " $2; for (i = 3; i <= 8; i++) s[k, i] += $i; c[k]++; if (!(k in o)) { o[k] = ++n; key[n] = k } }
    END { for (i = 1; i <= n; i++) { k = key[i]; split(k, p, " "); m = c[k] * 1000
      printf "%s%s %s: %.0f + %.0f + %.0f + %.0f + %.0f (%.0f)", (i > 1 ? "; " : ""), p[1], p[2], s[k, 3] / m, s[k, 4] / m, s[k, 5] / m, s[k, 6] / m, s[k, 7] / m, s[k, 8] / m } }')"
