#!/usr/bin/env bash
# The user guide (docs/, an mdBook).
#   scripts/book.sh install   installs the pinned mdBook from crates.io (once)
#   scripts/book.sh build     writes the guide to target/book
# The test suite builds it and checks every link (tests/it/book.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MDBOOK_VERSION=0.5.4
mdbook_bin() {
  if command -v mdbook >/dev/null; then command -v mdbook; else echo "${CARGO_HOME:-$HOME/.cargo}/bin/mdbook"; fi
}

install() {
  local bin
  bin=$(mdbook_bin)
  if [ -x "$bin" ] && "$bin" --version | grep -q "v$MDBOOK_VERSION"; then return; fi
  # Without the file watcher and the web server: build needs neither.
  cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features --features search
}

case "${1:-build}" in
  install) install ;;
  build) install; "$(mdbook_bin)" build docs ;;
  *) echo "usage: scripts/book.sh install|build" >&2; exit 2 ;;
esac
