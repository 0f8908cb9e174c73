-- The forwarder's account with the minimal grants, and the schema's tables.
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'secret';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%';
USE shop;
SOURCE /docker-entrypoint-initdb.d/migrations/001_outbox_event.sql;
SOURCE /docker-entrypoint-initdb.d/migrations/002_orders.sql;
