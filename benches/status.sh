#!/usr/bin/env bash
# Benchmark (SPEC §12): `ralph status` must cost the same with 20,000 or 1,000,000 past ITER
# records as with 10 — it reads the tail of the log, never the whole of it. Baseline: the same
# command on a 10-record log, run side by side. Prints the mean wall time per call and the ratio.
#   bash benches/status.sh [CALLS]
set -euo pipefail
calls=${1:-200}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin ralph --example fake-agent
ralph="$root/target/release/ralph"
agent="$root/target/release/examples/fake-agent"

make_repo() { # $1 = number of ITER records
  local dir; dir=$(mktemp -d)
  (
    cd "$dir" && git init -q && git config user.name bench && git config user.email bench@localhost
    printf -- '---\ntask: bench\n---\n## Success Criteria\n- [ ] a\n- [ ] b\n' > RALPH_TASK.md
    git add -A && git commit -qm init
    FAKE_AGENT_SCRIPT=idle "$ralph" run --agent-cmd "$agent" --yes -q >/dev/null || true
    awk -v n="$1" 'BEGIN { for (i = 1; i <= n; i++) printf "ITER %d | 0/2 criteria | exit 0 | abcdef0 | 4294967295 0\n", i }' \
      > .ralph/iterations.log
  )
  echo "$dir"
}

mean_ms() { # $1 = repo
  local start end
  start=$(date +%s%N)
  for _ in $(seq "$calls"); do "$ralph" -C "$1" status --json >/dev/null; done
  end=$(date +%s%N)
  echo $(( (end - start) / calls / 1000 ))
}

base=$(make_repo 10)
mid=$(make_repo 20000)
big=$(make_repo 1000000)
b=$(mean_ms "$base"); m=$(mean_ms "$mid"); g=$(mean_ms "$big")
printf 'ralph status --json, mean of %d calls\n' "$calls"
printf '  10 records:        %6d µs (baseline)\n' "$b"
printf '  20,000 records:    %6d µs (ratio %s)\n' "$m" "$(awk -v a="$m" -v b="$b" 'BEGIN{printf "%.2f", a/b}')"
printf '  1,000,000 records: %6d µs (ratio %s, log %s)\n' "$g" "$(awk -v a="$g" -v b="$b" 'BEGIN{printf "%.2f", a/b}')" \
  "$(du -h "$big/.ralph/iterations.log" | cut -f1)"
rm -rf "$base" "$mid" "$big"
