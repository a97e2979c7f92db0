#!/usr/bin/env bash
# What building the relay needs beyond Rust: a C toolchain, make, pkg-config
# and OpenSSL's headers (rdkafka builds librdkafka from source), and curl,
# which the quickstart uses. Installed from Debian's packages when missing
# and running as root; otherwise says what to install.
set -euo pipefail
if command -v cc >/dev/null && command -v make >/dev/null && command -v curl >/dev/null \
  && pkg-config --exists openssl 2>/dev/null; then
  exit 0
fi
packages="build-essential pkg-config libssl-dev curl"
if [ "$(id -u)" = 0 ]; then
  echo "installing build prerequisites: $packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
else
  echo "missing a C toolchain, make, pkg-config, OpenSSL's headers or curl (as root: apt-get install $packages)" >&2
  exit 1
fi
