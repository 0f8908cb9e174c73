#!/usr/bin/env python3
"""Where a forwarder's CPU samples went, by stage, from `perf script -F
comm,ip,sym` output with call stacks. A sample is charged to the first
stage (in the order below) that a frame of its stack belongs to, so a
header built inside the send is "headers", not "pipeline"; samples of no
stage are "kernel" or "other". Also prints the share of samples whose stack
passes through allocation (mimalloc) and memcpy."""
import collections
import re
import sys

STAGES = [
    ("headers: built", r"MessageHeaders::"),
    ("headers: freed after delivery", r"rd_kafka_headers_destroy"),
    ("routing and topic checks", r"KafkaSink::topic_for|TopicTemplate::"),
    ("librdkafka: produce call (copy, partitioner)", r"rd_kafka_producev"),
    ("librdkafka: delivery reports", r"BaseProducer<.*>::poll|SinkContext"),
    ("librdkafka: batches, LZ4, requests", r"rd_kafka_broker_thread_main|rd_kafka_thread_main"),
    ("decode: MySQL JSON to text", r"json_text"),
    ("decode: rows", r"decode::rows::|parse_row"),
    ("binlog read: table maps (mysql_common)", r"TableMapEvent|on_table_map_event"),
    ("decode: transactions", r"TransactionAssembler::"),
    ("binlog read (mysql_async, mysql_common)", r"BinlogStream|mysql_async::|mysql_common::"),
    ("checkpoint (sled)", r"sled::|outbox_checkpoint"),
    ("metrics scrapes (the benchmark's)", r"http::respond|Metrics::render"),
    ("pipeline: reader, session, acks", r"outbox_forwarder::pipeline"),
    ("start-up", r"_dl_start|outbox_forwarder::config|outbox_forwarder::cli"),
    ("tokio, futures", r"tokio::|futures_"),
]


def samples(path):
    stack, comm = [], None
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if not line.strip():
            if comm is not None:
                yield stack
            stack, comm = [], None
        elif not line.startswith(("\t", " ")):
            comm = line.split()[0]
        else:
            parts = line.strip().split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else "?")
    if comm is not None:
        yield stack


def main(path):
    stages = [(name, re.compile(pattern)) for name, pattern in STAGES]
    counts = collections.Counter()
    through = collections.Counter()
    total = 0
    for stack in samples(path):
        total += 1
        for name, rx in stages:
            if any(rx.search(frame) for frame in stack):
                counts[name] += 1
                break
        else:
            leaf = stack[0] if stack else ""
            kernel = re.match(r"^(_raw|do_|__x64|entry_|finish_task|irq|asm_|schedule)", leaf)
            counts["kernel" if kernel else "other"] += 1
        if any(re.search(r"_mi_|mi_free|mi_theap", f) for f in stack):
            through["allocation (mimalloc)"] += 1
        if any("memcpy" in f or "memmove" in f for f in stack):
            through["memcpy"] += 1
    if not total:
        sys.exit(f"{path}: no samples")
    print(f"{total} samples")
    for name in [n for n, _ in STAGES] + ["kernel", "other"]:
        if counts[name]:
            print(f"{100 * counts[name] / total:5.1f} %  {name}")
    for name, n in through.items():
        print(f"of all samples, through {name}: {100 * n / total:.1f} %")


if __name__ == "__main__":
    main(sys.argv[1])
