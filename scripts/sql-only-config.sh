# Sourced by the measurement scripts: writes a relay configuration for the
# test PostgreSQL (from `scripts/services.sh env`) whose commands only touch
# the database, such as `migrate`; its Kafka is deliberately unreachable.
#   write_sql_only_config FILE DBNAME
write_sql_only_config() {
    cat > "$1" <<TOML
[postgres]
host = "$OUTBOX_TEST_PG_HOST"
port = $OUTBOX_TEST_PG_PORT
dbname = "$2"
user = "$OUTBOX_TEST_PG_USER"
password = { env = "PGPASSWORD" }
sslmode = "disable"
[outbox]
topic_prefix = "outbox."
[kafka]
bootstrap_servers = "127.0.0.1:1"
TOML
}
