#!/usr/bin/env bash
# Runs the whole test suite: unit tests, decoding on recorded binlogs, and the
# end-to-end tests against a real MariaDB and a real Kafka-protocol broker
# (both started by the tests as child processes on free loopback ports).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# The end-to-end tests run the forwarder binary as its own process.
cargo build --workspace --bins
cargo test --workspace --no-fail-fast "$@"
