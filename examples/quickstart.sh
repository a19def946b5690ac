#!/usr/bin/env bash
# Quickstart: build ralph and run a complete loop with the bundled demo agent in a temporary git
# repository. No agent CLI, no network. Usage: bash examples/quickstart.sh
# (RALPH_BIN=/path/to/ralph: use that binary instead of building one; without cargo, the ralph
# on PATH)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

if [ -n "${RALPH_BIN:-}" ]; then
    # A ralph built before: deploy/check.sh runs the quickstart inside the container image,
    # which has no cargo.
    case $RALPH_BIN in
        */*) ralph=$(cd "$(dirname "$RALPH_BIN")" && pwd)/$(basename "$RALPH_BIN") ;;
        *) ralph=$(command -v "$RALPH_BIN" || true) ;;
    esac
    if [ -z "$ralph" ] || [ ! -x "$ralph" ]; then
        echo "quickstart: RALPH_BIN=$RALPH_BIN is not an executable" >&2
        exit 1
    fi
    echo "==> ralph: $ralph"
elif ! command -v cargo >/dev/null && command -v ralph >/dev/null; then
    # No Rust toolchain here, but a ralph installed (the image, a release binary): use it.
    ralph=$(command -v ralph)
    echo "==> ralph: $ralph (no cargo to build one)"
else
    if ! command -v cargo >/dev/null; then
        echo "quickstart: neither cargo (to build ralph) nor ralph is on PATH; install Rust from https://rustup.rs, or set RALPH_BIN=/path/to/ralph" >&2
        exit 1
    fi
    echo "==> building ralph (release)"
    # Ask cargo where the binary went: CARGO_TARGET_DIR, a config's build.target-dir and the
    # default target/ all end up in its "executable" record.
    ralph=$(cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin ralph \
        --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
    if [ -z "$ralph" ] || [ ! -x "$ralph" ]; then
        echo "quickstart: cargo built no ralph executable" >&2
        exit 1
    fi
fi

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
