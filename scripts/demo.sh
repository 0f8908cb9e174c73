#!/usr/bin/env bash
# The main job on this machine, from nothing: installs and starts MariaDB and
# the local Kafka-protocol broker under .local/demo, applies the migrations,
# starts the forwarder, writes a few orders with their outbox events (one
# transaction each), shows the messages that arrive and the checkpoint.
# Everything it starts is stopped at the end; pass --keep to leave it running.
# --mysql runs it on Oracle MySQL 9.7 (GTIDs on) instead of MariaDB: from the
# root scripts/install-deps.sh makes, under chroot, its files inside that root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DEMO="$ROOT/.local/demo"
DB_PORT="${DEMO_DB_PORT:-13306}"
KAFKA_PORT="${DEMO_KAFKA_PORT:-19092}"
KEEP=""
FLAVOR=mariadb
for arg in "$@"; do
    case "$arg" in
        --keep) KEEP=--keep ;;
        --mysql) FLAVOR=mysql ;;
        *) echo "usage: $0 [--mysql] [--keep]" >&2; exit 2 ;;
    esac
done
MYSQL_ROOT="${OUTBOX_MYSQL_ROOT:-$HOME/.cache/outbox-forwarder/mysql-root}"
# Inside MySQL's root: where its data and logs go, as it sees it and from here.
MYSQL_DEMO=/tmp/outbox-demo

if [ "$FLAVOR" = mysql ]; then
    scripts/install-deps.sh --demo --mysql
else
    scripts/install-deps.sh --demo
fi
cargo build --workspace --bins
cargo build -p outbox-writer --example order-service
TANSU="$HOME/.cache/outbox-forwarder/tansu-0.6.0/bin/tansu"
FORWARDER="$ROOT/target/debug/outbox-forwarder"

# Stops the process whose pid is in $1 and waits (30 s at most) until it
# has exited: a database server flushes before it frees its port.
stop() {
    local pid
    pid="$(cat "$1" 2>/dev/null)" || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 300); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
}
stop_all() {
    stop "$DEMO/forwarder.pid"
    stop "$DEMO/tansu.pid"
    stop "$DEMO/mysqld.pid"
    rm -f "$DEMO"/*.pid
}
stop_all
rm -rf "$DEMO" && mkdir -p "$DEMO"
[ "$KEEP" = "--keep" ] || trap stop_all EXIT

if [ "$FLAVOR" = mysql ]; then
    echo "== MySQL 9.7 on 127.0.0.1:$DB_PORT (binlog ROW, FULL image, FULL metadata, GTIDs on; durable commits)"
    rm -rf "$MYSQL_ROOT$MYSQL_DEMO" && mkdir -p "$MYSQL_ROOT$MYSQL_DEMO"
    chroot "$MYSQL_ROOT" /usr/sbin/mysqld --no-defaults --initialize-insecure --user=root \
        --datadir="$MYSQL_DEMO/data" --log-error="$MYSQL_DEMO/initialize.log"
    chroot "$MYSQL_ROOT" /usr/sbin/mysqld --no-defaults --datadir="$MYSQL_DEMO/data" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --socket="$MYSQL_DEMO/mysqld.sock" --pid-file="$MYSQL_DEMO/mysqld.pid" \
        --log-error="$MYSQL_DEMO/mysqld.log" --user=root --mysqlx=OFF --secure-file-priv= \
        --server-id=1 --log-bin="$MYSQL_DEMO/data/binlog" --binlog-format=ROW \
        --binlog-row-image=FULL --binlog-row-metadata=FULL --gtid-mode=ON \
        --enforce-gtid-consistency=ON --sync-binlog=1 --innodb-flush-log-at-trx-commit=1 \
        --character-set-server=utf8mb4 &
    echo $! >"$DEMO/mysqld.pid"
    SQL=(chroot "$MYSQL_ROOT" /usr/bin/mysql --no-defaults -h127.0.0.1 -P"$DB_PORT" -uroot)
    STATUS="SHOW BINARY LOG STATUS"
else
    echo "== MariaDB on 127.0.0.1:$DB_PORT (binlog ROW, FULL image, FULL metadata; durable commits)"
    mariadb-install-db --no-defaults --datadir="$DEMO/mysql" --auth-root-authentication-method=normal \
        --skip-test-db --user=root >/dev/null
    /usr/sbin/mariadbd --no-defaults --datadir="$DEMO/mysql" --port="$DB_PORT" --bind-address=127.0.0.1 \
        --socket="$DEMO/mysqld.sock" --pid-file="$DEMO/mysqld.pid" --log-error="$DEMO/mysqld.log" \
        --user=root --server-id=1 --log-bin="$DEMO/mysql/binlog" --binlog-format=ROW \
        --binlog-row-image=FULL --binlog-row-metadata=FULL --sync-binlog=1 \
        --innodb-flush-log-at-trx-commit=1 --character-set-server=utf8mb4 &
    SQL=(mariadb --no-defaults -h127.0.0.1 -P"$DB_PORT" -uroot)
    STATUS="SHOW MASTER STATUS"
fi
for _ in $(seq 100); do "${SQL[@]}" -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
"${SQL[@]}" -e "CREATE USER 'repl'@'%' IDENTIFIED BY 'secret';
    GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%';
    CREATE DATABASE shop;"
cat migrations/*.sql | "${SQL[@]}" shop

echo "== tansu (Kafka protocol) on 127.0.0.1:$KAFKA_PORT"
# tansu resolves sqlite:// paths against its working directory.
(cd "$DEMO" && exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine "sqlite://tansu.db" >"$DEMO/tansu.log" 2>&1) &
echo $! >"$DEMO/tansu.pid"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null && break; sleep 0.1; done
"$TANSU" topic create outbox.order --partitions 3 --broker "tcp://127.0.0.1:$KAFKA_PORT"

echo "== forwarder"
sed -e "s#127.0.0.1:3306#127.0.0.1:$DB_PORT#" -e "s#127.0.0.1:9092#127.0.0.1:$KAFKA_PORT#" \
    -e "s#./data/checkpoint#$DEMO/checkpoint#" config/forwarder.toml >"$DEMO/forwarder.toml"
"$FORWARDER" run --config "$DEMO/forwarder.toml" 2>"$DEMO/forwarder.log" &
echo $! >"$DEMO/forwarder.pid"
for _ in $(seq 100); do grep -q "binlog stream started" "$DEMO/forwarder.log" && break; sleep 0.1; done
tail -n 3 "$DEMO/forwarder.log"

echo "== three orders, each with its outbox event in the same transaction (order-service, through the outbox writer)"
"$ROOT/target/debug/examples/order-service" --config "$DEMO/forwarder.toml" \
    --url "mysql://root@127.0.0.1:$DB_PORT/shop" alice bob carol

echo "== what reached Kafka (compared with the outbox table)"
"$FORWARDER" verify --config "$DEMO/forwarder.toml" --print-records --wait-ms 10000

echo "== stop the forwarder (SIGTERM: drain acks, write the checkpoint) and show the checkpoint"
kill -TERM "$(cat "$DEMO/forwarder.pid")"
while kill -0 "$(cat "$DEMO/forwarder.pid")" 2>/dev/null; do sleep 0.1; done
rm -f "$DEMO/forwarder.pid"
"$FORWARDER" checkpoint show --config "$DEMO/forwarder.toml"
"${SQL[@]}" -e "$STATUS"
