-- The outbox: one row per event, inserted in the same transaction as the
-- business change it describes. Nothing polls or updates it; the forwarder
-- reads the inserts from the binlog. Works on MySQL 8 and MariaDB 10.5+
-- (where JSON is LONGTEXT with a JSON_VALID check).
CREATE TABLE IF NOT EXISTS outbox_event (
    event_id       CHAR(36)     NOT NULL,
    aggregate_type VARCHAR(255) NOT NULL,
    aggregate_id   VARCHAR(255) NOT NULL,
    event_type     VARCHAR(255) NOT NULL,
    event_version  INT          NOT NULL DEFAULT 1,
    payload        JSON         NOT NULL,
    created_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (event_id),
    KEY idx_outbox_event_created_at (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
