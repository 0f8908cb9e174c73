-- The example business table whose changes the outbox events describe.
CREATE TABLE IF NOT EXISTS orders (
    order_id    BIGINT       NOT NULL AUTO_INCREMENT,
    customer    VARCHAR(255) NOT NULL,
    amount_cents BIGINT      NOT NULL,
    status      VARCHAR(32)  NOT NULL,
    created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
