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
-- again). Runs once; a second run changes nothing, as 001-005's do.
SET SESSION lock_wait_timeout = 10;
SET @outbox_trace_context = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE outbox_event ADD COLUMN traceparent VARCHAR(55) NULL, ADD COLUMN tracestate VARCHAR(512) NULL, ALGORITHM=INSTANT',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_event'
      AND COLUMN_NAME = 'traceparent');
PREPARE outbox_trace_context FROM @outbox_trace_context;
EXECUTE outbox_trace_context;
DEALLOCATE PREPARE outbox_trace_context;
