-- The outbox insert: the order and the event describing it in ONE
-- transaction. Runs as is in the mariadb/mysql client:
--   mariadb -h HOST -u USER -p --batch --skip-column-names DB < outbox.sql
-- The inputs are user variables; an application binds the same values as
-- statement parameters instead.
SET @customer = 'ada',
    @amount_cents = 1200,
    @event_version = 1, -- the aggregate's version after this change
    -- The W3C traceparent of the request, or NULL when it has none.
    @traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    @tracestate = NULL;

-- A UUIDv7 event id: 48-bit Unix time in ms, version 7, variant 10, random
-- bits. Time-ordered, so the primary key grows at its end. (Applications
-- make it in their own language; MariaDB 11.7+ has UUID_v7().) Its time
-- is read in UTC, whatever the session's zone: a zone's hour that repeats
-- in autumn would make ids jump back.
SET time_zone = '+00:00';
SET @r = HEX(RANDOM_BYTES(10));
SET @h = CONCAT(LPAD(HEX(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)), 12, '0'),
                '7', SUBSTR(@r, 1, 3),
                HEX(8 | (CONV(SUBSTR(@r, 4, 1), 16, 10) & 3)), SUBSTR(@r, 5, 15));
SET @event_id = LOWER(CONCAT_WS('-', SUBSTR(@h, 1, 8), SUBSTR(@h, 9, 4),
                      SUBSTR(@h, 13, 4), SUBSTR(@h, 17, 4), SUBSTR(@h, 21, 12)));

-- Strict for the session, whatever the server's default: a value too long
-- for its column fails instead of being cut short with a warning.
SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES');
START TRANSACTION;
INSERT INTO orders (customer, amount_cents, status)
VALUES (@customer, @amount_cents, 'ACCEPTED');
SET @order_id = LAST_INSERT_ID();
INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type,
                          event_version, payload, traceparent, tracestate)
VALUES (@event_id, 'order', @order_id, 'ORDER_ACCEPTED', @event_version,
        -- (CAST: MariaDB puts a user variable in JSON as a string.)
        JSON_OBJECT('order_id', CAST(@order_id AS SIGNED), 'customer', @customer,
                    'amount_cents', CAST(@amount_cents AS SIGNED)),
        @traceparent, @tracestate);
-- Never the event alone: if a statement above fails, the client stops and
-- disconnects, and the server rolls the whole transaction back. A ROLLBACK
-- here instead of COMMIT leaves neither the order nor the event.
COMMIT;

SELECT @event_id AS event_id;
