#!/usr/bin/env bash
# Profiles the forwarder's catch-up on outbox-bench's durable MariaDB and
# tansu: the benchmark's --compare-with "other build" is this build run
# under `perf record`, so the profile covers one catch-up from start to
# the last ack. Prints where the samples went, by stage (a sample is
# charged to the first stage, in scripts/profile-stages.py's order, that a
# frame of its call stack belongs to), as docs/performance.md keeps it.
#
#   scripts/profile-catch-up.sh [EVENTS] [OUT_DIR]
#
# FORWARDER=PATH profiles another forwarder binary (the build before a
# change) on the same benchmark.
#
# Needs perf (Debian's linux-perf) and a release build:
#   cargo build --release -p outbox-forwarder -p outbox-bench
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-100000}
out=$(realpath -m "${2:-target/profile}")
target=${CARGO_TARGET_DIR:-target}
forwarder=$(realpath "${FORWARDER:-$target/release/outbox-forwarder}")
mkdir -p "$out"
wrapper="$out/perf-forwarder.sh"
cat > "$wrapper" <<WRAP
#!/usr/bin/env bash
exec perf record -q -F 1999 --call-graph dwarf,32768 -o "$out/perf.data" -- "$forwarder" "\$@"
WRAP
chmod +x "$wrapper"
# The wrapped forwarder's exit is perf's, which outbox-bench's check of a
# clean stop does not expect: the profile is written before it.
"$target/release/outbox-bench" --events "$events" --rounds 1 --skip-latency --skip-crash \
    --inbox-events 0 --compare-with "$wrapper" > "$out/bench.log" 2>&1 || true
test -s "$out/perf.data" || { echo "no profile written; see $out/bench.log" >&2; exit 1; }
perf script -i "$out/perf.data" -F comm,ip,sym 2>/dev/null > "$out/stacks.txt"
python3 scripts/profile-stages.py "$out/stacks.txt"
