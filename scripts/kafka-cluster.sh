# A Kafka cluster as production runs it, beside the single broker: KRaft
# with a controller of its own (so a broker's fault never takes the quorum
# with it) and three brokers; topics get replication factor 3 and
# min.insync.replicas=2 by default. Sourced by services.sh, which gives it
# STATE, JVM_CACHE, log, die, pid_of, stop_process and kafka_tool_at.
#
# Ports, from OUTBOX_TEST_KAFKA_CLUSTER_PORT (B, 29300 by default; the
# misconfigured brokers of `check`'s tests take 29192 to 29237):
#   B          the controller
#   B+10i+1    broker i's plain listener (clients and replication), i = 1..3
#   B+10i+2    broker i's PROXIED listener, behind Toxiproxy's kafka-i proxy
#   B+10i+3    that proxy, which the PROXIED listener advertises: a client
#              that bootstraps through the proxies reaches broker i only
#              through kafka-i, so one broker's link can be cut alone.

CLUSTER_PORT=${OUTBOX_TEST_KAFKA_CLUSTER_PORT:-29300}
CLUSTER_STATE=$STATE/cluster
CLUSTER_BROKERS=(1 2 3)
CLUSTER_CONTROLLER=100

cluster_port() { echo $((CLUSTER_PORT + 10 * $1 + $2)); }

# host:port of each broker's listener ($1: 1 plain, 3 the proxy), comma-separated.
cluster_bootstrap() {
  local i out=()
  for i in "${CLUSTER_BROKERS[@]}"; do out+=("127.0.0.1:$(cluster_port "$i" "$1")"); done
  (IFS=,; echo "${out[*]}")
}

cluster_node_conf() {
  local node=$1
  local common="controller.quorum.voters=$CLUSTER_CONTROLLER@127.0.0.1:$CLUSTER_PORT
controller.listener.names=CONTROLLER
log.dirs=$CLUSTER_STATE/node-$node"
  if [ "$node" = "$CLUSTER_CONTROLLER" ]; then
    cat <<EOF
process.roles=controller
node.id=$node
$common
listeners=CONTROLLER://127.0.0.1:$CLUSTER_PORT
listener.security.protocol.map=CONTROLLER:PLAINTEXT
# The controller creates topics, with these defaults.
num.partitions=6
default.replication.factor=3
min.insync.replicas=2
log.retention.ms=-1
EOF
    return
  fi
  cat <<EOF
process.roles=broker
node.id=$node
$common
listeners=PLAINTEXT://127.0.0.1:$(cluster_port "$node" 1),PROXIED://127.0.0.1:$(cluster_port "$node" 2)
advertised.listeners=PLAINTEXT://127.0.0.1:$(cluster_port "$node" 1),PROXIED://127.0.0.1:$(cluster_port "$node" 3)
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
# As the single broker: tests publish records stamped years back.
log.retention.ms=-1
EOF
}

cluster_pid() { pid_of "cluster-$1"; }

# Starts node $1 (the controller or a broker) if it is not running, and
# waits until it serves.
cluster_start_node() {
  local node=$1 cp="$JVM_CACHE/kafka/*" dir=$CLUSTER_STATE heap=512m
  if cluster_pid "$node" >/dev/null; then return; fi
  [ "$node" = "$CLUSTER_CONTROLLER" ] && heap=256m
  mkdir -p "$dir"
  cluster_node_conf "$node" >"$dir/node-$node.properties"
  sed -e "s#$STATE/kafka.log#$dir/node-$node.log#" "$STATE/kafka-log4j2.properties" >"$dir/node-$node-log4j2.properties"
  if [ ! -f "$dir/node-$node/meta.properties" ]; then
    [ -s "$dir/cluster-id" ] || java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1 >"$dir/cluster-id"
    java -Dlog4j2.configurationFile="$dir/node-$node-log4j2.properties" -cp "$cp" \
      kafka.tools.StorageTool format -t "$(cat "$dir/cluster-id")" -c "$dir/node-$node.properties" \
      >"$dir/node-$node-format.log" 2>&1 \
      || { cat "$dir/node-$node-format.log" >&2; die "formatting the storage of cluster node $node failed"; }
  fi
  : >"$dir/node-$node.log"
  setsid nohup java "-Xms$heap" "-Xmx$heap" -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/node-$node-log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/node-$node.properties" >"$dir/node-$node.out" 2>&1 </dev/null &
  echo $! >"$STATE/cluster-$node.pid"
  local deadline=$((SECONDS + 120))
  until grep -q "Kafka Server started" "$dir/node-$node.log" 2>/dev/null; do
    cluster_pid "$node" >/dev/null || { tail -n 40 "$dir/node-$node.out" "$dir/node-$node.log" >&2; die "cluster node $node exited during start-up"; }
    [ $SECONDS -lt $deadline ] || { tail -n 40 "$dir/node-$node.log" >&2; die "cluster node $node did not start within 120 s"; }
    sleep 0.5
  done
}

start_cluster() {
  [ -f "$STATE/kafka-log4j2.properties" ] || die "start the single broker first (start-kafka): the cluster shares its logging set-up"
  local node
  log "starting the Kafka cluster: controller on 127.0.0.1:$CLUSTER_PORT, brokers on $(cluster_bootstrap 1)"
  cluster_start_node "$CLUSTER_CONTROLLER"
  for node in "${CLUSTER_BROKERS[@]}"; do cluster_start_node "$node"; done
}

stop_cluster() {
  local node pid
  for node in "${CLUSTER_BROKERS[@]}"; do
    # A frozen broker cannot act on SIGTERM.
    if pid=$(cluster_pid "$node"); then kill -CONT "$pid" 2>/dev/null || true; fi
    stop_process "cluster-$node" "cluster broker $node"
  done
  stop_process "cluster-$CLUSTER_CONTROLLER" "the cluster's controller"
}

# cluster-broker ACTION N, for the fault tests:
#   start   start broker N and wait until it serves
#   stop    SIGTERM: a controlled shutdown (its leaders move first), waited for
#   kill    SIGKILL
#   freeze  SIGSTOP; thaw: SIGCONT
#   pid     print its process id
cluster_broker() {
  local action=${1:-} node=${2:-} pid
  [[ " ${CLUSTER_BROKERS[*]} " == *" $node "* ]] || die "usage: cluster-broker start|stop|kill|freeze|thaw|pid 1|2|3"
  case "$action" in
    start) cluster_start_node "$node" ;;
    stop) stop_process "cluster-$node" "cluster broker $node" ;;
    kill) pid=$(cluster_pid "$node") && kill -KILL "$pid" && rm -f "$STATE/cluster-$node.pid" ;;
    freeze) pid=$(cluster_pid "$node") && kill -STOP "$pid" ;;
    thaw) pid=$(cluster_pid "$node") && kill -CONT "$pid" ;;
    pid) cluster_pid "$node" ;;
    *) die "usage: cluster-broker start|stop|kill|freeze|thaw|pid 1|2|3" ;;
  esac
}

# A Kafka command-line tool against the cluster, e.g.
#   cluster-tool org.apache.kafka.tools.reassign.ReassignPartitionsCommand --execute ...
cluster_tool() { kafka_tool_at "$(cluster_bootstrap 1)" "$@"; }
