#!/usr/bin/env bash
# Install beads_rust's `br` (the beads CLI the queue tests drive, SPEC §14) into a cache outside
# the clone, unless a `br` is on PATH already.
#
#   scripts/install-beads.sh                  # installs if needed; prints the bin directory
#   export PATH="$(scripts/install-beads.sh):$PATH"
#
# br 0.7.6's lock file needs a newer rustc than the stable toolchain here, so it builds with
# the nightly one (`cargo +nightly`), `--locked` as its authors pinned it; `--debug` and no
# default features (self-update) keep the build short — the tests need its behaviour, not its
# speed. The root (BEADS_ROOT) defaults to a cache outside the clone, ~/.cache/ralph/br-VERSION,
# so a machine builds it once (measured: 22 minutes on 2 cores, other builds beside it), not
# once per clone.
set -euo pipefail
VERSION=0.7.6
ROOT="${BEADS_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ralph/br-$VERSION}"
if command -v br >/dev/null; then
  dirname "$(command -v br)"
  exit 0
fi
if ! "$ROOT/bin/br" --version 2>/dev/null | grep -q "$VERSION"; then
  echo "install-beads: building br $VERSION (cargo +nightly install beads_rust --debug)" >&2
  cargo +nightly install beads_rust --version "$VERSION" --locked --no-default-features \
    --debug --root "$ROOT" >&2
fi
echo "$ROOT/bin"
