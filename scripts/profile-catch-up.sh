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
# change) on the same benchmark. MYSQL=1 profiles the catch-up on the
# benchmark's MySQL 9.7 too, after MariaDB's, and prints both.
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
rm -f "$out"/perf-*.data
wrapper="$out/perf-forwarder.sh"
# A stop signal goes to the forwarder under perf, and perf returns its
# exit status, which outbox-bench checks. One profile per forwarder run.
cat > "$wrapper" <<WRAP
#!/usr/bin/env bash
perf record -q -F 1999 --call-graph dwarf,32768 -o "$out/perf-\$(date +%s%N).data" \\
    -- "$forwarder" "\$@" &
perf=\$!
trap 'pkill -TERM -P \$perf' TERM INT
status=0
while kill -0 \$perf 2>/dev/null; do wait \$perf; status=\$?; done
exit \$status
WRAP
chmod +x "$wrapper"
database=()
[ "${MYSQL:-0}" = 1 ] && database=(--mysql)
"$target/release/outbox-bench" --events "$events" --rounds 1 --skip-latency --skip-crash \
    --inbox-events 0 "${database[@]}" --compare-with "$wrapper" > "$out/bench.log" 2>&1 \
    || { echo "the benchmark failed; see $out/bench.log" >&2; exit 1; }
# The profiles in the order the benchmark ran them: MariaDB, then MySQL.
mapfile -t profiles < <(ls -tr "$out"/perf-*.data 2>/dev/null)
names=(MariaDB "MySQL 9.7")
[ "${#profiles[@]}" -eq $((1 + ${#database[@]})) ] \
    || { echo "expected $((1 + ${#database[@]})) profiles, found ${#profiles[@]}; see $out/bench.log" >&2; exit 1; }
for i in "${!profiles[@]}"; do
    stacks="$out/stacks-$i.txt"
    perf script -i "${profiles[$i]}" -F comm,ip,sym 2>/dev/null > "$stacks"
    echo "## ${names[$i]}"
    python3 scripts/profile-stages.py "$stacks"
done
