-- A versioned aggregate for consumers that apply incremental events in
-- order: an event of version v applies only when the row is at v - 1.
CREATE TABLE IF NOT EXISTS account (
    account_id VARCHAR(64) NOT NULL,
    balance    BIGINT      NOT NULL,
    version    BIGINT      NOT NULL,
    PRIMARY KEY (account_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
