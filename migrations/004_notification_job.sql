-- The example consumer's side effect (notification-planner): one pending
-- notification per ORDER_ACCEPTED event. Deliberately no unique key on
-- event_id: exactly one job per event must come from the inbox alone.
CREATE TABLE IF NOT EXISTS notification_job (
    job_id         BIGINT       NOT NULL AUTO_INCREMENT,
    event_id       VARCHAR(64)  NOT NULL,
    order_id       BIGINT       NOT NULL,
    source_version BIGINT       NOT NULL,
    status         VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
    created_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (job_id),
    KEY idx_notification_job_event_id (event_id),
    KEY idx_notification_job_order_id (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
