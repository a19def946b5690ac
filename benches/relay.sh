#!/usr/bin/env bash
# Benchmark (SPEC §12, "Output relay"): 1 GiB of agent output must reach the transcript in at
# most 1.2× the time of writing it straight to a file, with ralph's resident memory at most
# 16 MiB, every byte still seen by the observer.
#
# Two outputs of the same size, generated once into a scratch directory on the filesystem the
# transcript goes to:
#   text    source-code-like and log-like lines of varied length (some coloured, some long,
#           some empty), read by the plain-text observer (`--agent-cmd 'cat FILE'`);
#   claude  a Claude Code stream-json session (system init; assistant text and tool_use events;
#           user tool_result events; the final result), read by the `claude` preset — a stand-in
#           `claude` on PATH that cats the file — so the JSON observer really parses it.
# Side by side, interleaved trials (the page cache warm, `sync` and a settle before each, see
# `settle` below), medians reported:
#   cat | cat   `cat big | cat > out`: a producer piping to a writer, as an agent and ralph are
#               (the baseline of the ratio);
#   cat         `cat big > out`, for reference;
#   ralph       a one-iteration `ralph run` (throwaway repository, one criterion) whose agent
#               prints the file, less ralph's fixed cost: the same run with a 1-line output
#               (its median is printed beside).
# Beside the time, the CPU of the consumer (what the ratio is about once each process has a
# core of its own, and steadier on a shared machine): the writing `cat` against ralph's own
# (its total with its children, from /usr/bin/time, less the agent's `cat`, timed alone).
# With two CPUs or more, the producer (the agent's `cat`) runs on CPU 1 and the consumer (the
# writing `cat`, ralph) on CPU 0, for both sides alike (RELAY_PIN=0 leaves it to the scheduler,
# whose placement of a pure-copy pipeline moved single runs by ±30% on a shared machine).
# The transcript (`.ralph/runs/*/iter-001.log`) is checked byte-identical with `cmp`. Peak RSS
# is the "Maximum resident set size" of ralph and its children (ralph is the largest).
#   bash benches/relay.sh [TRIALS] [MIB]      (defaults: 5 trials, 1024 MiB)
#   RELAY_DIR=DIR keeps the generated outputs; RALPH_BIN=PATH measures that binary instead;
#   the scratch directory is in /dev/shm when it has room (see below), RELAY_TMP=DIR elsewhere.
# Before and after in the same run: RALPH_BEFORE=PATH (an earlier build, say from a `git
# worktree` of an older commit built with its own CARGO_TARGET_DIR) is measured beside this one
# ("after", or RALPH_BIN), in the same trials against the same `cat | cat`, the two taking turns
# at going first; each gets its own rows and ratios, and their relay times are compared.
set -euo pipefail
trials=${1:-5}
mib=${2:-1024}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

# The release binary, wherever CARGO_TARGET_DIR puts it (RALPH_BIN=PATH measures another one,
# say an earlier build, for a before/after).
ralph=${RALPH_BIN:-$(cargo build --release --manifest-path "$root/Cargo.toml" --bin ralph \
  --message-format=json-render-diagnostics |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)}
[ -x "$ralph" ] || { echo "could not build ralph" >&2; exit 1; }
# The builds measured, as "label path" lines: this one alone, or the one before and this one.
if [ -n "${RALPH_BEFORE:-}" ]; then
  [ -x "$RALPH_BEFORE" ] || { echo "RALPH_BEFORE=$RALPH_BEFORE is not an executable" >&2; exit 1; }
  builds=(before after) bin_before=$RALPH_BEFORE bin_after=$ralph
else
  builds=(ralph) bin_ralph=$ralph
fi

# RELAY_DIR=DIR keeps the outputs there between runs (generated when missing or of another size).
if [ -n "${RELAY_DIR:-}" ]; then
  work=$RELAY_DIR; mkdir -p "$work"
else
  # In memory when /dev/shm has room for the output, the sink and the transcript (four times
  # the size, to spare): on a disk the writes of either side soon wait on writeback, which on
  # a shared virtual disk moved the same 1.2 GB copy between 1.7 s and 5 s, so the figures
  # measured the disk, not the relay. RELAY_TMP=DIR measures on DIR's file system instead.
  place=${RELAY_TMP:-}
  if [ -z "$place" ]; then
    place=${TMPDIR:-/tmp}
    if [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt $((mib * 4096)) ]; then
      place=/dev/shm
    fi
  fi
  work=$(mktemp -d "$place/ralph-relay.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
want=$((mib * 1024 * 1024))

# ----- the outputs -----

# Writes one block of about 4 MiB of text lines (deterministic).
text_block() {
  awk 'BEGIN {
    srand(7)
    split("buf chunk line relay observer transcript tail ring bytes pipe read write stream event result usage limit activity", w, " ")
    nw = 18
    while (size < 4194304) {
      r = rand()
      if (r < 0.35) {        # source code
        ind = substr("                ", 1, 4 * int(rand() * 4))
        s = sprintf("%slet %s_%d = %s.%s(&mut %s[..%d])?; // %s the %s", ind, w[1 + int(rand() * nw)], NR + size % 97,
          w[1 + int(rand() * nw)], w[1 + int(rand() * nw)], w[1 + int(rand() * nw)], int(rand() * 65536),
          w[1 + int(rand() * nw)], w[1 + int(rand() * nw)])
      } else if (r < 0.70) { # log lines
        s = sprintf("2026-03-10T14:%02d:%02d.%03dZ  INFO ralph::agent::%s: %s %d %s in %.1fms", int(rand() * 60),
          int(rand() * 60), int(rand() * 1000), w[1 + int(rand() * nw)], w[1 + int(rand() * nw)], int(rand() * 100000),
          w[1 + int(rand() * nw)], rand() * 1000)
      } else if (r < 0.80) { # coloured cargo-style output
        s = sprintf("\033[1m\033[32m   Compiling\033[0m %s-%s v0.%d.%d", w[1 + int(rand() * nw)], w[1 + int(rand() * nw)],
          int(rand() * 30), int(rand() * 10))
      } else if (r < 0.85) { # blank
        s = ""
      } else if (r < 0.97) { # prose
        n = 5 + int(rand() * 40); s = "The"
        for (i = 0; i < n; i++) s = s " " w[1 + int(rand() * nw)]
        s = s "."
      } else {               # a long line (a minified file, a base64 blob)
        n = 300 + int(rand() * 3000); s = ""
        while (length(s) < n) s = s w[1 + int(rand() * nw)] "_" int(rand() * 1000) ","
      }
      print s
      size += length(s) + 1
    }
  }'
}

# Writes one block of about 4 MiB of Claude stream-json events (deterministic).
claude_block() {
  awk 'BEGIN {
    srand(11)
    split("buf chunk line relay observer transcript tail ring bytes pipe read write stream event result usage limit activity", w, " ")
    nw = 18
    sess = "\"session_id\":\"7f3c2a9e-1b4d-4e8f-9a0b-5c6d7e8f9a0b\""
    use = "\"usage\":{\"input_tokens\":4,\"cache_creation_input_tokens\":1234,\"cache_read_input_tokens\":15000,\"output_tokens\":1,\"service_tier\":\"standard\"}"
    while (size < 4194304) {
      r = rand(); id++
      if (r < 0.40) {        # assistant text
        n = 10 + int(rand() * 200); t = "I will"
        for (i = 0; i < n; i++) t = t (rand() < 0.05 ? "\\n" : " ") w[1 + int(rand() * nw)]
        s = sprintf("{\"type\":\"assistant\",\"message\":{\"id\":\"msg_%08d\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[{\"type\":\"text\",\"text\":\"%s.\"}],\"stop_reason\":null,\"stop_sequence\":null,%s},\"parent_tool_use_id\":null,%s,\"uuid\":\"u-%08d\"}", id, t, use, sess, id)
      } else if (r < 0.70) { # assistant tool_use (a Bash call or an Edit with code)
        if (rand() < 0.5) {
          inp = sprintf("{\"command\":\"cargo test --lib agent::%s -- --nocapture\",\"description\":\"Run the %s tests\"}", w[1 + int(rand() * nw)], w[1 + int(rand() * nw)])
          name = "Bash"
        } else {
          n = 5 + int(rand() * 60); code = ""
          for (i = 0; i < n; i++) code = code sprintf("    let %s = %s(\\\"%s\\\")?;\\n", w[1 + int(rand() * nw)], w[1 + int(rand() * nw)], w[1 + int(rand() * nw)])
          inp = sprintf("{\"file_path\":\"/repo/src/%s.rs\",\"old_string\":\"%s\",\"new_string\":\"%s\"}", w[1 + int(rand() * nw)], code, code)
          name = "Edit"
        }
        s = sprintf("{\"type\":\"assistant\",\"message\":{\"id\":\"msg_%08d\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_%08d\",\"name\":\"%s\",\"input\":%s}],\"stop_reason\":null,\"stop_sequence\":null,%s},\"parent_tool_use_id\":null,%s,\"uuid\":\"u-%08d\"}", id, id, name, inp, use, sess, id)
      } else {               # user tool_result (command output, file contents)
        n = 20 + int(rand() * 400); t = ""
        for (i = 0; i < n; i++) t = t sprintf("%s %d %s\\n", w[1 + int(rand() * nw)], int(rand() * 10000), w[1 + int(rand() * nw)])
        s = sprintf("{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"tool_use_id\":\"toolu_%08d\",\"type\":\"tool_result\",\"content\":\"%s\",\"is_error\":false}]},\"parent_tool_use_id\":null,%s,\"uuid\":\"u-%08d\"}", id - 1, t, sess, id)
      }
      print s
      size += length(s) + 1
    }
  }'
}

# $1 = block generator, $2 = file, $3 = first line, $4 = last line: exactly $want bytes.
make_output() {
  local block="$work/block"
  "$1" > "$block"
  local n=$(( want / $(stat -c %s "$block") + 1 ))
  {
    printf '%s\n' "$3"
    for _ in $(seq "$n"); do cat "$block"; done
  } > "$2"
  rm -f "$block"
  # cut, end the cut line, then the last line
  truncate -s $((want - ${#4} - 2)) "$2"
  printf '\n%s\n' "$4" >> "$2"
}

if [ "$(stat -c %s "$work/text.out" 2>/dev/null)" != "$want" ] ||
  [ "$(stat -c %s "$work/claude.out" 2>/dev/null)" != "$want" ]; then
echo "generating ${mib} MiB outputs in $work ..." >&2
make_output text_block "$work/text.out" "Starting the agent" "All done."
make_output claude_block "$work/claude.out" \
  '{"type":"system","subtype":"init","cwd":"/repo","session_id":"7f3c2a9e-1b4d-4e8f-9a0b-5c6d7e8f9a0b","tools":["Bash","Edit","Read"],"model":"claude-sonnet-4-5-20250929","permissionMode":"bypassPermissions"}' \
  '{"type":"result","subtype":"success","is_error":false,"duration_ms":912345,"num_turns":4242,"result":"All done.","session_id":"7f3c2a9e-1b4d-4e8f-9a0b-5c6d7e8f9a0b","total_cost_usd":12.5,"usage":{"input_tokens":1000,"output_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}'
fi
printf 'Starting the agent\n' > "$work/tiny-text.out"
head -1 "$work/claude.out" > "$work/tiny-claude.out"
tail -1 "$work/claude.out" >> "$work/tiny-claude.out"

# Where the producer and the consumer run.
producer=() consumer=()
if [ "${RELAY_PIN:-1}" != 0 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  producer=(taskset -c 1) consumer=(taskset -c 0)
fi
placement=${consumer[*]:+"pinned: producer on CPU 1, consumer on CPU 0"}
placement=${placement:-"placed by the scheduler"}

# The agent is `cat` under /usr/bin/time, so that its CPU can be told apart from ralph's. The
# stand-in `claude`: whatever its arguments, it prints $RELAY_OUTPUT.
mkdir -p "$work/bin"
printf '#!/bin/sh\nexec %s /usr/bin/time -f "%%U %%S" -o "$RELAY_TIME" cat "$RELAY_OUTPUT"\n' \
  "${producer[*]}" > "$work/bin/claude"
chmod +x "$work/bin/claude"

# A throwaway repository for each build (what one version leaves in the index is not the
# other's to meet), and a state directory of the scratch one's own, emptied before every run:
# ralph keeps its own record of a run there (SPEC §11), and a run that ran out of iterations is
# one to resume, which the next `ralph run` would refuse to start over.
for b in "${builds[@]}"; do
  repo="$work/repo-$b"
  rm -rf "$repo"
  mkdir -p "$repo"
  (
    cd "$repo" && git init -q && git config user.name bench && git config user.email bench@localhost
    printf -- '---\ntask: bench\n---\n## Success Criteria\n- [ ] relay the output\n' > RALPH_TASK.md
    git add -A && git commit -qm init
  )
done
# Before a run: every earlier output, the sink excepted (each caller deletes that), and records.
clear_runs() { rm -rf "$work"/repo-*/.ralph "$work/state"; }

now_ns() { date +%s%N; }

# Before each measured run: the 1 GiB output of the run before it (whichever side wrote it) is
# deleted, written back and given time to settle. On a virtual machine whose guest hands freed
# memory back to the host (free page reporting, as on Firecracker, or QEMU with a balloon) a
# write into a page the host has taken back faults it in again on the host, and the reporter
# works about 2 s after memory is freed. When only the sink was deleted before each run, `cat`
# always wrote into memory freed a moment before and the transcript into memory freed long before
# (handed back by then): ralph was the slow side in nearly every trial, a 1.7× that was the
# host's. So every 1 GiB writer, ralph or cat, starts right after the previous 1 GiB output is
# deleted, and RELAY_SETTLE seconds later (default 3 where the reporter is present, 0 elsewhere),
# so that no reporting pass overlaps a run (without it, one trial in ten still did).
reporter=/sys/module/page_reporting/parameters/reported_kib
settle_s=${RELAY_SETTLE:-$([ -r "$reporter" ] && echo 3 || echo 0)}
settle() { sync; [ "$settle_s" = 0 ] || sleep "$settle_s"; }
# CPU in ms from a "%U %S" (or "%M %U %S") /usr/bin/time file (its last line: the first may say
# that the command exited non-zero, as ralph does when the iterations run out).
cpu_ms() { tail -1 "$1" | awk '{ printf "%.0f", ($(NF - 1) + $NF) * 1000 }'; }

# $1 = format (text|claude), $2 = output file, $3 = the build; prints "wall_ns own_cpu_ms
# maxrss_kib", ralph's own CPU being its total (with its children) less the agent's. (The
# caller deletes the sink before a 1 GiB run.)
run_ralph() {
  local format=$1 file=$2 bin="bin_$3" repo="$work/repo-$3" s e
  local ralph=${!bin}
  clear_runs
  settle
  local args=(run --yes --max-iterations 1 -q)
  if [ "$format" = claude ]; then
    args+=(--agent claude)
  else
    args+=(--agent-cmd "${producer[*]} /usr/bin/time -f '%U %S' -o $work/agent.time cat $file")
  fi
  s=$(now_ns)
  ( cd "$repo" && RELAY_OUTPUT="$file" RELAY_TIME="$work/agent.time" PATH="$work/bin:$PATH" \
      XDG_STATE_HOME="$work/state" \
      "${consumer[@]}" /usr/bin/time -f '%M %U %S' -o "$work/ralph.time" "$ralph" "${args[@]}" \
      >/dev/null 2>&1 ) || true
  e=$(now_ns)
  local log
  log=$(ls "$repo"/.ralph/runs/*/iter-001.log)
  cmp -s "$file" "$log" || { echo "transcript differs from the output ($format, $file)" >&2; exit 1; }
  echo "$((e - s)) $(($(cpu_ms "$work/ralph.time") - $(cpu_ms "$work/agent.time"))) $(tail -1 "$work/ralph.time" | awk '{ print $1 }')"
}

# $1 = output file; prints "wall_ns writer_cpu_ms".
pipe_cat() {
  local s e
  rm -f "$work/sink"; clear_runs; settle
  s=$(now_ns)
  "${producer[@]}" cat "$1" | "${consumer[@]}" /usr/bin/time -f '%U %S' -o "$work/writer.time" cat > "$work/sink"
  e=$(now_ns)
  echo "$((e - s)) $(cpu_ms "$work/writer.time")"
}
# $1 = output file; prints wall_ns.
plain_cat() {
  local s e
  rm -f "$work/sink"; clear_runs; settle
  s=$(now_ns); "${consumer[@]}" cat "$1" > "$work/sink"; e=$(now_ns)
  echo $((e - s))
}

# The median of a file of numbers, divided by $2 (default 1).
median() { sort -n "$1" | awk -v d="${2:-1}" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f", m / d }'; }
# $1 / $2, two decimals; "n/a" where $2 is 0 or either is not a number (a tiny output's).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^-?[0-9.]+$/ || b !~ /^-?[0-9.]+$/ || b == 0) print "n/a"; else printf "%.2f", a / b }'; }

rows=() compare=()
for format in text claude; do
  file="$work/$format.out" tiny="$work/tiny-$format.out"
  bytes=$(stat -c %s "$file")
  cat "$file" > /dev/null # into the page cache
  for f in pc pcu cc; do : > "$work/t.$f"; done
  for b in "${builds[@]}"; do
    for f in big small relay bigu relayu; do : > "$work/t.$b.$f"; done
    declare "rss_$b=0"
  done
  for t in $(seq "$trials"); do
    # The builds take turns at going first (the first in a trial follows `cat | cat`).
    order=("${builds[@]}")
    [ $((t % 2)) = 0 ] && [ "${#builds[@]}" = 2 ] && order=("${builds[1]}" "${builds[0]}")
    read -r w u < <(pipe_cat "$file"); echo "$w" >> "$work/t.pc"; echo "$u" >> "$work/t.pcu"
    line="  $format trial $t: cat | cat $((w / 1000000)) ms (writer CPU $u ms)"
    for b in "${order[@]}"; do
      # (An assignment, not `< <(...)`: a run that fails stops the benchmark, set -e.)
      rm -f "$work/sink"; out=$(run_ralph "$format" "$file" "$b"); read -r big bigu r <<< "$out"
      echo "$big" >> "$work/t.$b.big"; echo "$bigu" >> "$work/t.$b.bigu"
      rss="rss_$b"; [ "$r" -gt "${!rss}" ] && declare "rss_$b=$r"
      line+=", $b $((big / 1000000)) ms (own CPU $bigu ms)"
    done
    plain_cat "$file" >> "$work/t.cc"
    for b in "${order[@]}"; do
      out=$(run_ralph "$format" "$tiny" "$b"); read -r small smallu _ <<< "$out"
      echo "$small" >> "$work/t.$b.small"
      big=$(sed -n "${t}p" "$work/t.$b.big") bigu=$(sed -n "${t}p" "$work/t.$b.bigu")
      echo $((big - small)) >> "$work/t.$b.relay"; echo $((bigu - smallu)) >> "$work/t.$b.relayu"
      line+=", $b fixed $((small / 1000000)) ms"
    done
    echo "$line" >&2
  done
  pc=$(median "$work/t.pc" 1e6) pcu=$(median "$work/t.pcu") cc=$(median "$work/t.cc" 1e6)
  for b in "${builds[@]}"; do
    big=$(median "$work/t.$b.big" 1e6) small=$(median "$work/t.$b.small" 1e6)
    relay=$(median "$work/t.$b.relay" 1e6) relayu=$(median "$work/t.$b.relayu")
    rss="rss_$b"
    rows+=("| $format | $b | $((bytes / 1048576)) MiB | $pc | $cc | $big | $small | $relay | **$(ratio "$relay" "$pc")×** | $pcu | $relayu | **$(ratio "$relayu" "$pcu")×** | $((${!rss} / 1024)) MiB |")
    declare "ratio_$b=$(ratio "$relay" "$pc")" "cpu_ratio_$b=$(ratio "$relayu" "$pcu")"
  done
  if [ "${#builds[@]}" = 2 ]; then
    compare+=("$format: time ratio $ratio_before× before, $ratio_after× after (after/before $(ratio "$ratio_after" "$ratio_before")); CPU ratio $cpu_ratio_before× before, $cpu_ratio_after× after (after/before $(ratio "$cpu_ratio_after" "$cpu_ratio_before"))")
  fi
done

echo
echo "Output relay, medians of $trials interleaved trials ($placement; files on $(df -PT "$work" | awk 'NR == 2 { print $2 }'); ${settle_s} s settle). Time (ms): ralph relay = ralph run − ralph"
echo "fixed (the same run with a 1-line output), per trial; time ratio = ralph relay / (cat | cat)."
echo "CPU (ms): the writing cat of cat | cat against ralph's own (the agent's cat excluded), less"
echo "its fixed part; CPU ratio = ralph relay CPU / writer CPU."
echo
echo "| output | build | size | cat \\| cat > file | cat > file | ralph run | ralph fixed | ralph relay | time ratio | writer CPU | ralph relay CPU | CPU ratio | ralph peak RSS |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [ "${#builds[@]}" = 2 ]; then
  echo
  echo "before = $bin_before, after = $bin_after; the same trials, the same cat | cat."
  printf '%s\n' "${compare[@]}"
fi
