#!/bin/sh
# Reads the INTERNAL listener of KAFKA_ADVERTISED_LISTENERS (the one the
# compose services use) and serves it with tansu; the example's topics are
# created once it listens.
set -eu
internal=$(echo "${KAFKA_ADVERTISED_LISTENERS}" | tr ',' '\n' | sed -n 's|^INTERNAL://||p')
port=${internal##*:}
tansu broker --kafka-listener-url "tcp://0.0.0.0:${port}" \
    --kafka-advertised-listener-url "tcp://${internal}" \
    --storage-engine memory://tansu/ &
pid=$!
for topic in ${STANDIN_TOPICS:-}; do
    tries=0
    until tansu topic create "$topic" --partitions 2 --broker "tcp://127.0.0.1:${port}" 2>/dev/null; do
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || { echo "entrypoint: cannot create $topic" >&2; exit 1; }
        sleep 0.2
    done
done
wait "$pid"
