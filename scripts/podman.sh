#!/usr/bin/env bash
# podman as this project runs it on its build and test machines: rootful,
# with runc (crun fails under a cgroup v1 hybrid hierarchy), explicit
# ulimits, the vfs storage driver (works on any file system; the images
# here are small), and only the host network (never a bridge).
#
#   scripts/podman.sh install        podman and runc from Debian's packages, if missing
#   scripts/podman.sh ARGS...        podman ARGS... with this project's settings
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
conf_dir=$here/../.cache/podman

install() {
  if command -v podman >/dev/null && command -v runc >/dev/null; then return; fi
  [ "$(id -u)" = 0 ] || { echo "podman and runc are missing (apt-get install podman runc)" >&2; exit 1; }
  echo "[podman] installing podman and runc from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null
}

configure() {
  mkdir -p "$conf_dir"
  cat >"$conf_dir/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  cat >"$conf_dir/storage.conf" <<'CONF'
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
  export CONTAINERS_CONF=$conf_dir/containers.conf
  export CONTAINERS_STORAGE_CONF=$conf_dir/storage.conf
}

case "${1:-}" in
  install) install ;;
  "") echo "usage: $0 install | ARGS..." >&2; exit 2 ;;
  *) install; configure; exec podman "$@" ;;
esac
