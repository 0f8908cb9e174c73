#!/bin/sh
# The official mysql image's first start, for MariaDB: a new data directory,
# the root password, the database, then each *.sql of
# /docker-entrypoint-initdb.d with it selected; then the server in the
# foreground with the container's arguments.
set -eu
datadir=/var/lib/mysql
if [ ! -d "$datadir/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db >/dev/null
    socket=/run/mysqld/init.sock
    mariadbd --user=mysql --datadir="$datadir" --skip-networking --socket="$socket" "$@" &
    pid=$!
    until mariadb-admin --socket="$socket" ping >/dev/null 2>&1; do sleep 0.2; done
    mariadb --socket="$socket" <<SQL
ALTER USER 'root'@'localhost' IDENTIFIED BY '${MYSQL_ROOT_PASSWORD}';
CREATE USER 'root'@'%' IDENTIFIED BY '${MYSQL_ROOT_PASSWORD}';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS \`${MYSQL_DATABASE:-test}\`;
SQL
    for f in /docker-entrypoint-initdb.d/*.sql; do
        [ -f "$f" ] || continue
        echo "entrypoint: running $f"
        mariadb --socket="$socket" -uroot -p"${MYSQL_ROOT_PASSWORD}" "${MYSQL_DATABASE:-test}" < "$f"
    done
    kill "$pid"
    wait "$pid" || true
fi
exec mariadbd --user=mysql --datadir="$datadir" --bind-address=0.0.0.0 "$@"
