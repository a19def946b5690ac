#!/usr/bin/env bash
# Install Playwright for Python (the driver of the browser tests, tests/web/page.py) into a venv
# outside the clone, unless one with this version is there already.
#
#   scripts/install-playwright.sh                  # installs if needed; prints the venv's python
#   export RALPH_PLAYWRIGHT_PYTHON="$(scripts/install-playwright.sh)"
#
# Only the Python package: `playwright install` is never run (it downloads browsers, which a
# closed network refuses). The tests launch Debian's /usr/bin/chromium instead (apt-get install
# chromium; .ci/run does). The venv (RALPH_PLAYWRIGHT_VENV) defaults to
# ~/.cache/ralph/playwright-venv, so a machine installs it once, not once per clone.
set -euo pipefail
VERSION=1.65.3
VENV="${RALPH_PLAYWRIGHT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ralph/playwright-venv}"
PY="$VENV/bin/python"
have() {
  "$PY" -c 'import sys, importlib.metadata as m; sys.exit(m.version("playwright") != sys.argv[1])' \
    "$VERSION" 2>/dev/null
}
if ! have; then
  echo "install-playwright: installing playwright $VERSION into $VENV" >&2
  command -v python3 >/dev/null || { echo "install-playwright: python3 is not installed" >&2; exit 1; }
  python3 -m venv "$VENV" >&2
  "$PY" -m pip install --quiet "playwright==$VERSION" >&2
  have || { echo "install-playwright: playwright $VERSION did not install into $VENV" >&2; exit 1; }
fi
echo "$PY"
