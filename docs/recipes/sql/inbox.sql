-- The inbox: a consumer's claim row and its side effect in ONE transaction.
-- Runs as is in the mariadb/mysql client:
--   mariadb -h HOST -u USER -p --batch --skip-column-names DB < inbox.sql
-- The inputs are user variables, taken from the Kafka message: the
-- event_id and event_version headers and the payload's order_id.
SET @consumer_name = 'notification-planner',
    @event_id = '01890a5d-ac96-774b-bcce-b302099a8057',
    @event_version = 1,
    @order_id = 1;

-- Strict: an over-long event id fails rather than being cut into another's.
SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES');

START TRANSACTION;
INSERT INTO consumed_event (consumer_name, event_id)
VALUES (@consumer_name, @event_id);
-- The second time the same event comes, the client stops here with
--   ERROR 1062 (23000) at line 15: Duplicate entry
--   'notification-planner-01890a5d-...' for key 'uq_consumed_event_identity'
-- (MySQL 8+ names it 'consumed_event.uq_consumed_event_identity') and the
-- transaction is rolled back with the connection. An application checks the
-- error: code 1062 naming uq_consumed_event_identity, and only that, means
-- "already processed": ROLLBACK and commit the offset. Any other error is a
-- failure: ROLLBACK and retry, offset not committed. INSERT IGNORE would be
-- wrong: it turns every error of the row (another key, a value too long and
-- truncated into another event's id) into a warning and a silent skip.
INSERT INTO notification_job (event_id, order_id, source_version)
VALUES (@event_id, @order_id, @event_version);
COMMIT;
-- Only now may the consumer commit the message's Kafka offset.

SELECT 'processed' AS outcome;
