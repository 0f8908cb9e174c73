"""The outbox insert: the order and its event in ONE transaction (PyMySQL).

Usage: outbox.py CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
Prints the event id it wrote. With OUTBOX_ACKED_URL (the forwarder's
metrics listener, http://host:9464) it then waits until the event is
published (OUTBOX_ACKED_TIMEOUT_MS, default 10000) and fails if it is not.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pymysql


def uuid7():
    """48-bit big-endian Unix ms, version 7, variant 10, random bits."""
    b = bytearray(int(time.time() * 1000).to_bytes(6, "big") + os.urandom(10))
    b[6] = b[6] & 0x0F | 0x70
    b[8] = b[8] & 0x3F | 0x80
    return str(uuid.UUID(bytes=bytes(b)))


# Strict for the session, whatever the server's default: a value too long for
# its column fails instead of being cut short with a warning.
STRICT_SESSION = "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')"


def begin_strict(conn):
    conn.begin()
    with conn.cursor() as cur:
        cur.execute(STRICT_SESSION)


def place_order(conn, customer, amount_cents, version, traceparent=None, tracestate=None):
    event_id = uuid7()
    begin_strict(conn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO orders (customer, amount_cents, status) VALUES (%s, %s, 'ACCEPTED')",
                (customer, amount_cents),
            )
            order_id = cur.lastrowid
            payload = {"order_id": order_id, "customer": customer, "amount_cents": amount_cents}
            cur.execute(
                "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type,"
                " event_version, payload, traceparent, tracestate)"
                " VALUES (%s, 'order', %s, 'ORDER_ACCEPTED', %s, %s, %s, %s)",
                (event_id, str(order_id), version, json.dumps(payload), traceparent, tracestate),
            )
        conn.commit()
    except BaseException:
        conn.rollback()  # neither the order nor the event
        raise
    return event_id


def committed_gtid(conn):
    """After the commit: MariaDB's @@last_gtid (the session's transaction),
    or MySQL's @@GLOBAL.gtid_executed (which holds it)."""
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT @@last_gtid")
        except pymysql.err.MySQLError:  # MySQL: no such variable (1193)
            cur.execute("SELECT @@GLOBAL.gtid_executed")
        return "".join(cur.fetchone()[0].split())


def acked_timeout_s():
    text = os.environ.get("OUTBOX_ACKED_TIMEOUT_MS", "10000")
    try:
        ms = int(text)
    except ValueError:
        ms = 0
    if ms <= 0:
        raise SystemExit(f"OUTBOX_ACKED_TIMEOUT_MS must be a positive number of milliseconds, not {text!r}")
    return ms / 1000


def wait_published(acked_url, gtid, timeout_s):
    """Asks the forwarder's GET /acked until it answers 200 (published),
    or fails at the deadline."""
    deadline = time.monotonic() + timeout_s
    why = "not asked"
    while time.monotonic() < deadline:
        wait_ms = max(1, min(10_000, int((deadline - time.monotonic()) * 1000)))
        query = urllib.parse.urlencode({"gtid": gtid, "wait_ms": wait_ms})
        try:
            with urllib.request.urlopen(f"{acked_url}/acked?{query}", timeout=wait_ms / 1000 + 5) as answer:
                return  # 200: every message of the transaction is acked
        except urllib.error.HTTPError as e:
            why = f"{e.code} {e.read().decode().strip()}"
            if e.code == 400:
                break  # a malformed GTID: asking again will not help
        except OSError as e:  # the forwarder restarting: ask again
            why = str(e)
        time.sleep(0.2)
    raise RuntimeError(f"not published within {timeout_s} s: {why}")


def connect():
    return pymysql.connect(
        host=os.environ.get("OUTBOX_DB_HOST", "127.0.0.1"),
        port=int(os.environ.get("OUTBOX_DB_PORT", "3306")),
        user=os.environ["OUTBOX_DB_USER"],
        password=os.environ["OUTBOX_DB_PASSWORD"],
        database=os.environ["OUTBOX_DB_NAME"],
        autocommit=False,
    )


if __name__ == "__main__":
    customer, amount, version, *trace = sys.argv[1:]
    with connect() as conn:
        event_id = place_order(conn, customer, int(amount), int(version), *trace)
        print(event_id, flush=True)
        acked_url = os.environ.get("OUTBOX_ACKED_URL")
        if acked_url:
            wait_published(acked_url, committed_gtid(conn), acked_timeout_s())
