#!/usr/bin/env bash
# Quickstart: build ralph and run a complete loop with the bundled demo agent in a temporary git
# repository. No agent CLI, no network. Usage: bash examples/quickstart.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

echo "==> building ralph (release)"
cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin ralph
ralph="$root/target/release/ralph"

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-quickstart.XXXXXX")
echo "==> demo repository: $work"
cd "$work"
git init -q
git config user.name >/dev/null || git config user.name "ralph quickstart"
git config user.email >/dev/null || git config user.email "quickstart@localhost"
cp "$here/sample-task.md" RALPH_TASK.md
git add -A && git commit -q -m "Add the demo task"

echo "==> ralph run"
"$ralph" run --agent-cmd "bash '$here/demo-agent.sh'" --yes

echo
echo "==> what the loop left behind"
git log --oneline
echo
cat .ralph/iterations.log
echo
"$ralph" status
echo
echo "The demo repository stays at $work"
