-- The W3C trace context of the request that wrote an event, when it had
-- one: the writer library (crates/outbox-writer) and the recipes fill
-- them, the forwarder copies both into the message's headers
-- ([outbox.columns] traceparent / tracestate), and the inbox handles the
-- event in a span of the same trace. NULL: no trace.
--
-- On a busy table: the columns go at the end with ALGORITHM=INSTANT (MySQL
-- 8.0.12+, MariaDB 10.3+), a change of the table's metadata only; where the
-- server cannot do that (MySQL 5.7, ROW_FORMAT=COMPRESSED) the statement
-- fails rather than copying the table. It still waits for the metadata
-- lock behind any open transaction on the table, and every insert waits
-- behind it: the short lock_wait_timeout makes it give up instead (run it
-- again). Runs once; a second run adds only what is missing, as 001-005's
-- do.
SET @outbox_lock_wait_timeout = @@SESSION.lock_wait_timeout;
SET SESSION lock_wait_timeout = 10;
SET @outbox_trace_context = (
    SELECT IF(COUNT(*) = 2, 'DO 0',
              CONCAT('ALTER TABLE outbox_event ', CONCAT_WS(', ',
                  IF(COALESCE(SUM(COLUMN_NAME = 'traceparent'), 0) = 0,
                     'ADD COLUMN traceparent VARCHAR(55) NULL', NULL),
                  IF(COALESCE(SUM(COLUMN_NAME = 'tracestate'), 0) = 0,
                     'ADD COLUMN tracestate VARCHAR(512) NULL', NULL),
                  'ALGORITHM=INSTANT')))
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_event'
      AND COLUMN_NAME IN ('traceparent', 'tracestate'));
PREPARE outbox_trace_context FROM @outbox_trace_context;
EXECUTE outbox_trace_context;
DEALLOCATE PREPARE outbox_trace_context;
SET SESSION lock_wait_timeout = @outbox_lock_wait_timeout;
