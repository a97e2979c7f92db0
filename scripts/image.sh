#!/usr/bin/env bash
# Builds outbox-cdc's container image with podman and exports it as an OCI
# archive:
#
#   scripts/image.sh            build (release), assemble, podman build, save
#
# Prints the image's name and the archive's path. The root file system is
# made here from the build machine: the release binary, the shared
# libraries `ldd` says it loads (glibc, OpenSSL, zlib, ...), the CA
# certificates and a user 65532; the image is `FROM scratch` over it.
# Needs root (podman is used rootful) and installs podman and runc from
# Debian's packages when they are missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

scripts/podman.sh install

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
image="localhost/outbox-cdc:$version"
out=target/image
rootfs=$out/rootfs

log "building the release binary"
cargo build --release --quiet --bin outbox-cdc
bin=${CARGO_TARGET_DIR:-target}/release/outbox-cdc

log "assembling the root file system"
rm -rf "$rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/etc/outbox-cdc" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
cp "$bin" "$rootfs/usr/local/bin/outbox-cdc"
# Every library the binary loads, at the path the loader looks for it.
ldd "$bin" | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u | while read -r lib; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done
[ -f /etc/ssl/certs/ca-certificates.crt ] || die "no CA bundle at /etc/ssl/certs/ca-certificates.crt (apt-get install ca-certificates)"
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/nonexistent:/sbin/nologin\noutbox-cdc:x:65532:65532:outbox-cdc:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\noutbox-cdc:x:65532:\n' >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
cp outbox-cdc.example.toml "$rootfs/etc/outbox-cdc/outbox-cdc.example.toml"

log "podman build $image"
scripts/podman.sh build \
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
  -t "$image" -f deploy/image/Containerfile "$out" >&2
archive="$out/outbox-cdc-$version.oci.tar"
rm -f "$archive"
scripts/podman.sh save --format oci-archive -o "$archive" "$image" >&2
log "image $image, archive $archive ($(du -h "$archive" | cut -f1))"
echo "$image"
echo "$archive"
