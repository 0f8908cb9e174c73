-- The inbox of deduplicating consumers: one row per (consumer, event) whose
-- side effects committed. The row is inserted in the same transaction as the
-- side effects, so "row exists" means "fully processed". Only a duplicate on
-- the named key uq_consumed_event_identity means "already processed": the
-- consumer checks the key name in the error, so keep the name. event_id is
-- VARCHAR(64) so that non-UUID ids fit. Rows must be kept at least as long as
-- the broker can redeliver or replay an event (retention of the topic plus
-- any manual replay window); consumed_at lets a retention job find old rows.
CREATE TABLE IF NOT EXISTS consumed_event (
    consumed_event_id BIGINT       NOT NULL AUTO_INCREMENT,
    consumer_name     VARCHAR(128) NOT NULL,
    event_id          VARCHAR(64)  NOT NULL,
    consumed_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (consumed_event_id),
    CONSTRAINT uq_consumed_event_identity UNIQUE (consumer_name, event_id),
    KEY idx_consumed_event_consumed_at (consumed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
