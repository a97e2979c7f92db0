#!/usr/bin/env bash
# podman as this project runs it on its build and test machines: rootful,
# with runc (crun fails under a cgroup v1 hybrid hierarchy), explicit
# ulimits, the vfs storage driver (works on any file system; the images
# here are small), and only the host network (never a bridge).
#
#   scripts/podman.sh install        podman and runc from Debian's packages, if missing
#   scripts/podman.sh socket         podman's Docker-compatible API on a unix socket
#                                    with these settings (started when it does not
#                                    answer; it ends itself after 10 idle minutes);
#                                    prints its address for DOCKER_HOST: what the
#                                    image tests drive through testcontainers
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

# Writes a file only when its content changed, through a rename: podman
# runs in parallel (the image's tests), and a reader must never see a file
# being rewritten (an empty storage.conf fails with "runroot must be set").
write_conf() {
  local path=$1 content tmp
  content=$(cat)
  if [ -f "$path" ] && [ "$(cat "$path")" = "$content" ]; then return; fi
  tmp=$(mktemp "$path.XXXXXX")
  printf '%s\n' "$content" >"$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$path"
}

configure() {
  mkdir -p "$conf_dir"
  write_conf "$conf_dir/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  write_conf "$conf_dir/storage.conf" <<'CONF'
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
  export CONTAINERS_CONF=$conf_dir/containers.conf
  export CONTAINERS_STORAGE_CONF=$conf_dir/storage.conf
}

# The API socket: one per machine, as the storage is.
socket_path=${OUTBOX_TEST_PODMAN_SOCKET:-/run/outbox-cdc-podman.sock}

answers() {
  [ -S "$socket_path" ] && curl -sf --max-time 5 --unix-socket "$socket_path" http://podman/_ping >/dev/null 2>&1
}

socket() {
  install
  configure
  if ! answers; then
    rm -f "$socket_path"
    mkdir -p "$(dirname "$socket_path")" "$conf_dir"
    setsid nohup podman system service --time=600 "unix://$socket_path" \
      >"$conf_dir/service.log" 2>&1 </dev/null &
    for _ in $(seq 1 100); do
      answers && break
      sleep 0.1
    done
    answers || { cat "$conf_dir/service.log" >&2; echo "podman's API socket did not answer" >&2; exit 1; }
  fi
  echo "unix://$socket_path"
}

case "${1:-}" in
  install) install ;;
  socket) socket ;;
  "") echo "usage: $0 install | ARGS..." >&2; exit 2 ;;
  *) install; configure; exec podman "$@" ;;
esac
