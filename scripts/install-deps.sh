#!/usr/bin/env bash
# Installs what the forwarder's tests and local run need on a fresh Debian
# machine: MariaDB from Debian's packages and the tansu Kafka-protocol broker
# (built from crates.io once, then reused from ~/.cache).
set -euo pipefail

TANSU_VERSION=0.6.0
TANSU_ROOT="${HOME}/.cache/outbox-forwarder/tansu-${TANSU_VERSION}"

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    echo "installing mariadb-server from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq mariadb-server mariadb-client >/dev/null
fi

if [ ! -x "${TANSU_ROOT}/bin/tansu" ]; then
    echo "building tansu ${TANSU_VERSION} into ${TANSU_ROOT} (about 12 minutes on 2 cores, once)"
    cargo install tansu --locked --version "${TANSU_VERSION}" \
        --features dynostore,libsql --root "${TANSU_ROOT}"
fi

if ! command -v cargo-nextest >/dev/null 2>&1; then
    cargo install cargo-nextest --locked
fi

echo "MariaDB: $(/usr/sbin/mariadbd --version)"
echo "tansu:   ${TANSU_ROOT}/bin/tansu"
