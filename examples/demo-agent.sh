#!/usr/bin/env bash
# A demo agent for the quickstart: no model, no network. Each run it does what a good agent
# should do in one iteration: take the first unchecked criterion, do the work (here: write a
# file for it), note it in .ralph/progress.md, and check the box. ralph does the rest.
set -euo pipefail
cat > /dev/null            # the prompt arrives on stdin; a real agent would read it
task=${RALPH_TASK_FILE:?ralph sets RALPH_TASK_FILE}
n=${RALPH_ITERATION:-1}

line=$(grep -n -m1 -E '^[[:space:]]*[-*+] \[ \] ' "$task" || true)
if [ -z "$line" ]; then
  echo "demo agent: nothing left to do"
  exit 0
fi
lineno=${line%%:*}
text=$(printf '%s' "${line#*:}" | sed -E 's/^[[:space:]]*[-*+] \[ \] //')

echo "demo agent: iteration $n, working on: $text"
mkdir -p demo
printf '# %s\n\nDone by the demo agent in iteration %s.\n' "$text" "$n" > "demo/criterion-$n.md"
printf -- '- Iteration %s: %s (wrote demo/criterion-%s.md)\n' "$n" "$text" "$n" >> .ralph/progress.md
sed -i.bak -E "${lineno}s/\[ \]/[x]/" "$task" && rm -f "$task.bak"
echo "demo agent: checked \"$text\""
