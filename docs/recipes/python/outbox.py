"""The outbox insert: the order and its event in ONE transaction (PyMySQL).

Usage: outbox.py CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
Prints the event id it wrote.
"""
import json
import os
import sys
import time
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
        print(place_order(conn, customer, int(amount), int(version), *trace))
