#!/usr/bin/env bash
# Installs what the forwarder's build, tests and local run need on a fresh
# Debian machine: MariaDB and OpenSSL's headers from Debian's packages, and
# the tansu Kafka-protocol broker (built from crates.io once, then reused
# from ~/.cache).
set -euo pipefail

TANSU_VERSION=0.6.0
TANSU_ROOT="${HOME}/.cache/outbox-forwarder/tansu-${TANSU_VERSION}"

# MariaDB for the tests and the demo; OpenSSL's headers and pkg-config for
# librdkafka's TLS and SCRAM (rdkafka's `ssl` feature); the openssl command
# line makes the tests' certificates.
packages=()
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    packages+=(mariadb-server mariadb-client)
fi
if ! pkg-config --exists openssl 2>/dev/null; then
    packages+=(libssl-dev pkg-config)
fi
if ! command -v openssl >/dev/null 2>&1; then
    packages+=(openssl)
fi
# Prometheus and promtool for the alert rules' tests; systemd-analyze and
# adduser for the Debian package's.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    packages+=(prometheus)
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
    packages+=(systemd)
fi
if ! command -v adduser >/dev/null 2>&1; then
    packages+=(adduser)
fi
if [ "${#packages[@]}" -gt 0 ]; then
    echo "installing ${packages[*]} from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${packages[@]}" >/dev/null
fi

if [ ! -x "${TANSU_ROOT}/bin/tansu" ]; then
    echo "building tansu ${TANSU_VERSION} into ${TANSU_ROOT} (about 12 minutes on 2 cores, once)"
    cargo install tansu --locked --version "${TANSU_VERSION}" \
        --features dynostore,libsql --root "${TANSU_ROOT}"
fi

echo "MariaDB: $(/usr/sbin/mariadbd --version)"
echo "tansu:   ${TANSU_ROOT}/bin/tansu"
