#!/usr/bin/env bash
# Benchmark (SPEC §12): per-iteration overhead — everything but the agent — on repositories of
# 20,000 and 100,000 files with a realistic change (50 files modified, 20 added, 5 deleted),
# against the equivalent shell pipeline run side by side:
#   grep -c '\- \[x\]' RALPH_TASK.md; git add -A && git commit -q -m ...; git status --porcelain | cksum
# ralph's figure is the cost of one more iteration: a 5-iteration run minus a 1-iteration run,
# divided by 4 (so start-up cancels out), minus the agent's own time (the change applied alone).
# Start-up (one run of one iteration, less the change) is printed beside it.
# Prints the means of TRIALS runs and the ratio ralph / shell.
#   bash benches/iteration.sh [TRIALS] [SIZES...]
set -euo pipefail
trials=${1:-3}; shift || true
sizes=("${@:-20000 100000}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin ralph
ralph="$root/target/release/ralph"
now_ms() { date +%s%3N; }

make_repo() { # $1 = files
  local dir; dir=$(mktemp -d)
  (
    cd "$dir" && git init -q && git config user.name bench && git config user.email bench@localhost
    for i in $(seq 0 499); do mkdir -p "$(printf 'src/d%03d' "$i")"; done
    awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) { f = sprintf("src/d%03d/f%d.txt", i % 500, i);
      print i > f; close(f) } }' 
    printf -- '---\ntask: bench\n---\n## Success Criteria\n- [ ] a\n- [ ] b\n' > RALPH_TASK.md
    git add -A >/dev/null && git commit -qm init
  )
  echo "$dir"
}

# The change an iteration makes; $1 = trial number (so every trial changes something new).
cat > /tmp/ralph-bench-change.sh <<'SH'
#!/bin/sh
t=${RALPH_ITERATION:-0}-$$
i=0; for f in $(ls src/d000 | head -50); do echo "$t" >> "src/d000/$f"; done
mkdir -p "new/$t"; for i in $(seq 20); do echo "$t" > "new/$t/n$i.txt"; done
for f in $(ls src/d001 | head -5); do rm -f "src/d001/$f"; done
SH
chmod +x /tmp/ralph-bench-change.sh

for n in ${sizes[@]}; do
  repo=$(make_repo "$n")
  # make sure the directories hold enough files
  ( cd "$repo" && for d in d000 d001; do mkdir -p src/$d; for i in $(seq 60); do echo x > src/$d/extra$i.txt; done; done; git add -A && git commit -qm more )
  change_ms=0; shell_ms=0; one_ms=0; five_ms=0
  for t in $(seq "$trials"); do
    # the change alone
    s=$(now_ms); ( cd "$repo" && RALPH_ITERATION=c$t /tmp/ralph-bench-change.sh ); e=$(now_ms)
    change_ms=$((change_ms + e - s))
    ( cd "$repo" && git add -A && git commit -qm "reset $t" )
    # the shell pipeline
    ( cd "$repo" && RALPH_ITERATION=s$t /tmp/ralph-bench-change.sh )
    s=$(now_ms)
    ( cd "$repo" && grep -c -- '- \[x\]' RALPH_TASK.md >/dev/null || true; git add -A && git commit -qm "shell $t" && git status --porcelain | cksum >/dev/null )
    e=$(now_ms); shell_ms=$((shell_ms + e - s))
    # ralph: runs whose agent makes the change every iteration
    s=$(now_ms)
    ( cd "$repo" && "$ralph" run --agent-cmd /tmp/ralph-bench-change.sh --yes --reset --max-iterations 1 -q >/dev/null 2>&1 || true )
    e=$(now_ms); one_ms=$((one_ms + e - s))
    s=$(now_ms)
    ( cd "$repo" && "$ralph" run --agent-cmd /tmp/ralph-bench-change.sh --yes --reset --max-iterations 5 --stuck-threshold 5 -q >/dev/null 2>&1 || true )
    e=$(now_ms); five_ms=$((five_ms + e - s))
  done
  cm=$((change_ms / trials)); sm=$((shell_ms / trials))
  per=$(( (five_ms - one_ms) / trials / 4 - cm ))
  startup=$(( one_ms / trials - cm ))
  printf '%7d files: shell %5d ms, ralph %5d ms per iteration (ratio %s); a 1-iteration run %d ms\n' \
    "$n" "$sm" "$per" \
    "$(awk -v a="$per" -v b="$sm" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "n/a" }')" "$startup"
  rm -rf "$repo"
done
