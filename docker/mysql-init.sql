-- The forwarder's account with the minimal grants, the example consumer's,
-- and the schema's tables.
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'secret';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%';
CREATE USER IF NOT EXISTS 'planner'@'%' IDENTIFIED BY 'secret';
USE shop;
SOURCE /docker-entrypoint-initdb.d/migrations/001_outbox_event.sql;
SOURCE /docker-entrypoint-initdb.d/migrations/002_orders.sql;
SOURCE /docker-entrypoint-initdb.d/migrations/003_consumed_event.sql;
SOURCE /docker-entrypoint-initdb.d/migrations/004_notification_job.sql;
SOURCE /docker-entrypoint-initdb.d/migrations/006_outbox_trace_context.sql;
GRANT SELECT, INSERT ON shop.consumed_event TO 'planner'@'%';
GRANT SELECT, INSERT ON shop.notification_job TO 'planner'@'%';
