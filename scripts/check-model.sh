#!/usr/bin/env bash
# Checks the model of the active/standby group protocol
# (crates/outbox-forwarder/src/group/protocol.pml) with spin: the design must hold
# every property within the bound, and each defect flag (a behaviour the
# code had, or has, put back into the model) must be caught with a
# counterexample. Fails if the design breaks a property or a defect goes
# uncaught, so the check itself can fail.
#
# Bound (time unbounded, in quarter leases): five runs of the design, each
# a search of the whole bound (-DSAFETY) that stores every state whole
# (-DCOLLAPSE compresses them without loss: no state is missed, so a pass
# is a proof within the bound):
#   A  2 instances, 3 events; 1 kill of the lock's connection, 1 crash,
#      1 restart, 1 operator `checkpoint set`
#   B  2 instances, 3 events; 1 clean stop (hand-over), 1 restart
#   C  2 instances, 2 events; 1 kill, 1 clean stop, 1 restart
#   D  2 instances, 3 events; 1 kill, 1 crash, 1 restart, 1 failed read of
#      the group's topic (a step-aside, or a term begun again), 1
#      recreation of the group's topic
#   E  3 instances, 2 events; 1 kill
# Each defect is searched breadth first (the shortest counterexample)
# within one of those runs, or with fewer faults than one, and its
# counterexample printed. About 5 minutes on 2 cores, 3 GB of memory at
# most per run. Trails: target/spin-model/<flag>/protocol.pml.trail,
# replayed step by step with `spin -t -p $(cat flags) protocol.pml` in that
# directory. Each counterexample is also replayed through the role loop by
# a unit test (crates/outbox-forwarder/src/role/tests.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=crates/outbox-forwarder/src/group/protocol.pml
OUT=target/spin-model
command -v spin >/dev/null || { echo "spin is missing: scripts/install-deps.sh installs it" >&2; exit 1; }

declare -A BOUND=(
    [A]="-DMAXE=3 -DMAXKILL=1 -DMAXCRASH=1 -DMAXSTOP=0 -DMAXRESTART=1 -DMAXOPER=1"
    [B]="-DMAXE=3 -DMAXKILL=0 -DMAXCRASH=0 -DMAXSTOP=1 -DMAXRESTART=1 -DMAXOPER=0"
    [C]="-DMAXE=2 -DMAXKILL=1 -DMAXCRASH=0 -DMAXSTOP=1 -DMAXRESTART=1 -DMAXOPER=0"
    [D]="-DMAXE=3 -DMAXKILL=1 -DMAXCRASH=1 -DMAXSTOP=0 -DMAXRESTART=1 -DMAXOPER=0 -DMAXREADFAIL=1 -DMAXRECREATE=1"
    [E]="-DN=3 -DMAXE=2 -DMAXKILL=1 -DMAXCRASH=0 -DMAXSTOP=0 -DMAXRESTART=0 -DMAXOPER=0"
    # Within those: fewer faults, for the shortest counterexamples.
    [none]="-DMAXE=3 -DMAXKILL=0 -DMAXCRASH=0 -DMAXSTOP=0 -DMAXRESTART=0 -DMAXOPER=0"
    [stop]="-DMAXE=3 -DMAXKILL=0 -DMAXCRASH=0 -DMAXSTOP=1 -DMAXRESTART=0 -DMAXOPER=0"
    [kill]="-DMAXE=3 -DMAXKILL=1 -DMAXCRASH=0 -DMAXSTOP=0 -DMAXRESTART=0 -DMAXOPER=0"
    [oper]="-DMAXE=3 -DMAXKILL=0 -DMAXCRASH=0 -DMAXSTOP=0 -DMAXRESTART=0 -DMAXOPER=1"
    [recreate]="-DMAXE=3 -DMAXKILL=0 -DMAXCRASH=1 -DMAXSTOP=0 -DMAXRESTART=0 -DMAXOPER=0 -DMAXRECREATE=1"
)
# flag, bound (one of the design's runs, or fewer faults than one); each
# is fixed in the code (protocol.pml names where).
DEFECTS=(
    "UNCLEAN_UNFENCED stop"
    "SHARE_TIMEOUT none"
    "HANDOVER_ANY C"
    "ADOPT_BY_CLOCK oper"
    "LATEST_ON_EMPTY none"
    "READ_BEFORE_HOLDOFF kill"
    "TERM_UNACKED C"
    "RECREATED_BY_OFFSET recreate"
)

# verify NAME SEARCH SPIN_FLAGS...: builds and runs the verifier in
# $OUT/NAME; its report in $OUT/NAME/report.
verify() {
    local name=$1 search=$2
    shift 2
    local dir="$OUT/$name"
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$MODEL" "$dir/protocol.pml"
    (
        cd "$dir"
        spin -a "$@" protocol.pml >/dev/null
        if [ "$search" = bfs ]; then
            gcc -w -O2 -DSAFETY -DCOLLAPSE -DBFS -DMEMLIM=4000 -o pan pan.c
            ./pan -E >report 2>&1 || true
        else
            gcc -w -O2 -DSAFETY -DCOLLAPSE -DMEMLIM=6000 -o pan pan.c
            ./pan -E -m3000000 -w26 >report 2>&1 || true
        fi
        echo "$*" >flags
    )
}

errors() { sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$OUT/$1/report"; }
summary() {
    local r="$OUT/$1/report"
    printf '%s states, %s s' \
        "$(awk '/states, stored/ {print $1; exit}' "$r")" \
        "$(awk '/elapsed time/ {print $4; exit}' "$r")"
}

# trace NAME: the counterexample's steps, as the model's printfs tell them
# (instance: step; record kinds: 1 checkpoint, 2 hand-over, 3 first start,
# 4 operator's, 5 term).
trace() {
    (
        cd "$OUT/$1"
        # shellcheck disable=SC2046
        spin -t $(cat flags) protocol.pml 2>&1 | sed 's/^ *//' \
            | awk '/^spin: text of failed assertion/ {print; exit} /^spin: .*Error/ {next} {print}' \
            | grep -v '^spin: trail ends\|processes created'
    )
}

mkdir -p "$OUT"
start=$(date +%s)
failed=0

echo "model: $MODEL (time unbounded)"
# Two at a time: the longest runs beside the others in turn.
{
    verify design-C dfs ${BOUND[C]}
    verify design-E dfs ${BOUND[E]}
} &
{
    verify design-A dfs ${BOUND[A]}
    verify design-B dfs ${BOUND[B]}
    verify design-D dfs ${BOUND[D]}
    for entry in "${DEFECTS[@]}"; do
        read -r flag run <<<"$entry"
        verify "$flag" bfs "-D$flag" ${BOUND[$run]}
    done
} &
wait

for run in A B C D E; do
    n=$(errors "design-$run")
    if [ "$n" = 0 ] && grep -q "depth reached" "$OUT/design-$run/report" \
        && ! grep -q "Search not completed\|max search depth too small\|out of memory" "$OUT/design-$run/report"; then
        echo "design, run $run (${BOUND[$run]}): holds ($(summary "design-$run"))"
    else
        echo "design, run $run (${BOUND[$run]}): FAILS, see $OUT/design-$run/report"
        grep -m1 "violated" "$OUT/design-$run/report" || true
        failed=1
    fi
done
echo "counterexamples (instance: step; record kinds: 1 checkpoint, 2 hand-over, 3 first start, 4 operator's, 5 term):"
for entry in "${DEFECTS[@]}"; do
    read -r flag run <<<"$entry"
    n=$(errors "$flag")
    if [ -n "$n" ] && [ "$n" -gt 0 ]; then
        why=$(grep -m1 "violated" "$OUT/$flag/report" | sed 's/^pan:1: //; s/ (at depth.*//')
        echo "defect $flag ($run: ${BOUND[$run]}): caught, $why ($(summary "$flag"))"
        trace "$flag" | sed 's/^/    /'
    else
        echo "defect $flag ($run: ${BOUND[$run]}): NOT caught, see $OUT/$flag/report"
        failed=1
    fi
done
echo "model checked in $(($(date +%s) - start)) s"
exit $failed
