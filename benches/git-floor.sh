#!/usr/bin/env bash
# Benchmark (SPEC §12, issue 22): what git itself costs per command as the repository grows,
# with nothing of ralph's in the way — the floor under any supervisor that stages through git's
# own commands. Per size (default 20,000, 100,000 and 500,000 tracked files, ten to a
# directory, three levels), in a repository on tmpfs whose stat cache, untracked cache and
# monitor token are warm:
#   status       `git status --porcelain` with a file-system monitor that answers "nothing
#                changed" (a two-line sh hook) and the untracked cache: no walk, no refresh
#   status-1     the same after one tracked file changed (the hook names it)
#   update-index `git update-index` of that one file: the index read and written whole
#   diff-index   `git diff-index --cached HEAD`: the index read, compared with HEAD's tree
#   ls-files     `git ls-files --unmerged`: the index read, nothing else
#   rev-parse    `git rev-parse HEAD`: a git process that reads no index (the spawn)
#   shell        the shell loop's iteration (benches/iteration.sh) after one file changed:
#                `git add -A && git commit && git status --porcelain`, no monitor
# Each figure is the best of 7 runs (the floor, not the mean), in ms; the last column is the
# largest size's over the one before it. `iteration` sums what one iteration of a supervisor
# that stages through git needs at least: a status, an update-index, a diff-index (or a
# write-tree) and the status after the commit.
#   bash benches/git-floor.sh [SIZE...]        e.g. bash benches/git-floor.sh 100000 500000
# BENCH_DIR=DIR puts the repositories in DIR (default /dev/shm, else $TMPDIR or /tmp).
set -euo pipefail
export LC_ALL=C
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(20000 100000 500000)
for n in "${sizes[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1000 ] || { echo "SIZE must be a number of files, at least 1000" >&2; exit 2; }
done
base=${BENCH_DIR:-}
[ -n "$base" ] || { [ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm; } || base=${TMPDIR:-/tmp}
tmp=$(mktemp -d "$base/ralph-git-floor.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# A repository of $1 files: one commit streamed into fast-import, then checked out.
build() {
  local n=$1 dir=$tmp/repo-$1
  git init -q "$dir"
  awk -v n="$n" 'BEGIN {
    print "commit refs/heads/main"; print "committer bench <bench@localhost> 0 +0000"
    print "data 5"; print "init"
    for (i = 0; i < n; i++) {
      body = sprintf("file %d of the floor benchmark\n", i)
      leaf = int(i / 10)
      printf "M 100644 inline d%d/e%d/g%d/f%d.txt\ndata %d\n%s\n", leaf % 20, int(leaf / 20) % 25, int(leaf / 500), i, length(body), body
    }
  }' | git -C "$dir" fast-import --quiet
  git -C "$dir" checkout -q -f main
  cat > "$dir/.git/hook.sh" <<'EOF'
#!/bin/sh
# Protocol 2: the token handed out, then the paths changed since the token given.
printf 'floor-token\0'
[ -f "$(dirname "$0")/changed" ] && cat "$(dirname "$0")/changed"
exit 0
EOF
  chmod +x "$dir/.git/hook.sh"
  echo "$dir"
}

failed() { echo "a measured command failed: $*" >&2; exit 1; }

best() { # best of 7 wall times of "$@" in ms (one decimal); a failing command ends the run
  local b=999999999 s e
  for _ in 1 2 3 4 5 6 7; do
    s=${EPOCHREALTIME/./}; "$@" >/dev/null 2>&1 || failed "$@"; e=${EPOCHREALTIME/./}
    (( e - s < b )) && b=$(( e - s ))
  done
  printf '%d.%d' $(( b / 1000 )) $(( b % 1000 / 100 ))
}

shell_best() { # best of 7 shell-loop iterations in $1, each after a one-line change
  local b=999999999 s e k
  for k in 1 2 3 4 5 6 7; do
    echo "$k" >> "$1/d2/e0/g0/f21.txt"
    s=${EPOCHREALTIME/./}
    { git -C "$1" add -A && git -C "$1" commit -q -m "iteration $k" && git -C "$1" status --porcelain; } >/dev/null 2>&1 ||
      failed "the shell loop's iteration $k"
    e=${EPOCHREALTIME/./}
    (( e - s < b )) && b=$(( e - s ))
  done
  printf '%d.%d' $(( b / 1000 )) $(( b % 1000 / 100 ))
}

declare -A ms
for n in "${sizes[@]}"; do
  dir=$(build "$n")
  g=(git -C "$dir" -c core.fsmonitor="$dir/.git/hook.sh" -c core.untrackedCache=true)
  # Warm: the untracked cache built, the monitor's token and stat data written back.
  "${g[@]}" status --porcelain >/dev/null; "${g[@]}" status --porcelain >/dev/null
  ms[status,$n]=$(best "${g[@]}" --no-optional-locks status --porcelain)
  one=d0/e0/g0/f0.txt
  echo changed >> "$dir/$one"; printf '%s\0' "$one" > "$dir/.git/changed"
  ms[status-1,$n]=$(best "${g[@]}" --no-optional-locks status --porcelain)
  ms[update-index,$n]=$(best "${g[@]}" update-index --add --remove -- "$one")
  ms[diff-index,$n]=$(best git -C "$dir" -c core.fsmonitor=false diff-index --cached --raw HEAD)
  ms[ls-files,$n]=$(best git -C "$dir" -c core.fsmonitor=false ls-files --unmerged)
  ms[rev-parse,$n]=$(best git -C "$dir" rev-parse HEAD)
  git -C "$dir" -c core.fsmonitor=false update-index --really-refresh >/dev/null 2>&1 || true
  ms[shell,$n]=$(GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost GIT_COMMITTER_NAME=bench \
    GIT_COMMITTER_EMAIL=bench@localhost shell_best "$dir")
  ms[iteration,$n]=$(awk -v a="${ms[status-1,$n]}" -v b="${ms[update-index,$n]}" -v c="${ms[diff-index,$n]}" -v d="${ms[status,$n]}" 'BEGIN { printf "%.1f", a + b + c + d }')
  ms[bytes,$n]=$(stat -c %s "$dir/.git/index")
  echo "  $n files: built and measured (index $(( ${ms[bytes,$n]} / 1000 )) kB)" >&2
  rm -rf "$dir"
done

last=${sizes[-1]}; prev=""; [ ${#sizes[@]} -lt 2 ] || prev=${sizes[-2]}
printf '| git command |'; for n in "${sizes[@]}"; do printf ' %s files |' "$n"; done
[ -n "$prev" ] && printf ' %s / %s |' "$last" "$prev"; echo
printf '|---|'; for _ in "${sizes[@]}"; do printf -- '---:|'; done; [ -n "$prev" ] && printf -- '---:|'; echo
for row in status status-1 update-index diff-index ls-files rev-parse iteration shell; do
  printf '| %s |' "$row"
  for n in "${sizes[@]}"; do printf ' %s ms |' "${ms[$row,$n]}"; done
  [ -n "$prev" ] && awk -v a="${ms[$row,$last]}" -v b="${ms[$row,$prev]}" 'BEGIN { printf " %.1f× |", a / b }'
  echo
done
