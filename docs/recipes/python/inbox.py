"""The inbox: the claim row and the side effect in ONE transaction (PyMySQL).

Usage: inbox.py EVENT_ID EVENT_VERSION PAYLOAD_JSON (a Kafka message's
event_id and event_version headers and its value). Prints processed or
duplicate; exits non-zero on any other error (the message is retried).
"""
import json
import sys

import pymysql

from outbox import begin_strict, connect

CONSUMER_NAME = "notification-planner"
INBOX_KEY = "uq_consumed_event_identity"


def is_inbox_duplicate(error):
    """MySQL 1062 naming the inbox key (MySQL 8+ prefixes the table name)."""
    code, message = error.args[0], error.args[1]
    key = message.rsplit("for key '", 1)[-1].split("'")[0]
    return code == 1062 and key.split(".")[-1] == INBOX_KEY


def handle(conn, event_id, version, payload):
    begin_strict(conn)  # an over-long id fails rather than being cut into another's
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(
                    "INSERT INTO consumed_event (consumer_name, event_id) VALUES (%s, %s)",
                    (CONSUMER_NAME, event_id),
                )
            except pymysql.err.IntegrityError as error:
                if not is_inbox_duplicate(error):
                    raise
                conn.rollback()
                return "duplicate"
            cur.execute(
                "INSERT INTO notification_job (event_id, order_id, source_version)"
                " VALUES (%s, %s, %s)",
                (event_id, payload["order_id"], version),
            )
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return "processed"


if __name__ == "__main__":
    event_id, version, payload = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    with connect() as conn:
        print(handle(conn, event_id, version, payload))
    # Only now, after COMMIT (or a duplicate), commit the Kafka offset of
    # the message; after an error, do not: the message comes again.
