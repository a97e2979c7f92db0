#!/usr/bin/env bash
# Builds the Debian package and checks it where it will run:
#
#   scripts/deb.sh          cargo deb, then in a container made from a Debian
#                           bookworm root file system (mmdebstrap):
#                           dpkg -i, outbox-cdc --version, systemd-analyze verify
#   scripts/deb.sh tools    only install cargo-deb and make the root file system
#
# cargo-deb (pinned) installs into .cache/cargo; the root file system is
# cached in .cache/debian. Needs root (podman rootful, mmdebstrap).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO_DEB_VERSION=3.8.0
log() { printf '[deb] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

tools=$PWD/.cache/cargo
if [ ! -x "$tools/bin/cargo-deb" ]; then
  log "installing cargo-deb $CARGO_DEB_VERSION into .cache/cargo"
  cargo install --quiet --locked --root "$tools" cargo-deb --version "$CARGO_DEB_VERSION" >&2
fi
export PATH="$tools/bin:$PATH"

prepare_rootfs() {
  rootfs=.cache/debian/bookworm-systemd.tar
  if [ -f "$rootfs" ]; then return; fi
  command -v mmdebstrap >/dev/null || {
    [ "$(id -u)" = 0 ] || die "mmdebstrap is missing (apt-get install mmdebstrap)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
  }
  mkdir -p .cache/debian
  log "making a Debian bookworm root file system with mmdebstrap (once)"
  partial=.cache/debian/partial.tar
  mmdebstrap --quiet --variant=minbase --include=systemd,passwd,ca-certificates \
    bookworm "$partial" http://deb.debian.org/debian >&2
  mv "$partial" "$rootfs"
}
prepare_rootfs
if [ "${1:-}" = tools ]; then exit 0; fi

log "building the release binary and the package"
cargo build --release --quiet --bin outbox-cdc
release="${CARGO_TARGET_DIR:-target}/release"
"$release/outbox-cdc" man >"$release/outbox-cdc.1"
"$release/outbox-cdc" completions bash >"$release/outbox-cdc.bash"
"$release/outbox-cdc" completions zsh >"$release/_outbox-cdc"
deb=$(cargo deb --no-build --quiet 2>/dev/null | tail -1)
[ -f "$deb" ] || deb=$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/outbox-cdc_*_amd64.deb | head -1)
[ -f "$deb" ] || die "cargo deb made no package"
log "package $deb ($(du -h "$deb" | cut -f1))"

image=localhost/outbox-cdc-debian-test:bookworm
if ! scripts/podman.sh image exists "$image"; then
  scripts/podman.sh import "$rootfs" "$image" >&2
fi

log "dpkg -i, outbox-cdc --version, systemd-analyze verify, in $image"
scripts/podman.sh run --rm --network none -v "$(cd "$(dirname "$deb")" && pwd):/pkg:ro" "$image" sh -euc '
  dpkg -i /pkg/'"$(basename "$deb")"'
  id outbox-cdc
  test -f /etc/outbox-cdc/outbox-cdc.toml.example
  /usr/bin/outbox-cdc --version
  ls /usr/share/man/man1/outbox-cdc.1* /usr/share/bash-completion/completions/outbox-cdc /usr/share/zsh/vendor-completions/_outbox-cdc
  systemd-analyze verify /lib/systemd/system/outbox-cdc.service
  echo "deb: installed, runs, unit verified"
' >&2
echo "$deb"
