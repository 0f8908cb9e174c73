// The inbox: the claim row and the side effect in ONE transaction (mysql2).
// Usage: node inbox.js EVENT_ID EVENT_VERSION PAYLOAD_JSON (a Kafka message's
// event_id and event_version headers and its value). Prints processed or
// duplicate; exits non-zero on any other error (the message is retried).
'use strict';
const { beginStrict, connect } = require('./outbox');

const CONSUMER_NAME = 'notification-planner';
const INBOX_KEY = 'uq_consumed_event_identity';

// MySQL 1062 naming the inbox key (MySQL 8+ prefixes the table name).
function isInboxDuplicate(error) {
  const key = String(error.sqlMessage).split("for key '").pop().split("'")[0];
  return error.errno === 1062 && key.split('.').pop() === INBOX_KEY;
}

async function handle(conn, eventId, version, payload) {
  await beginStrict(conn); // an over-long id fails rather than being cut into another's
  try {
    try {
      await conn.execute('INSERT INTO consumed_event (consumer_name, event_id) VALUES (?, ?)',
        [CONSUMER_NAME, eventId]);
    } catch (error) {
      if (!isInboxDuplicate(error)) throw error;
      await conn.rollback();
      return 'duplicate';
    }
    await conn.execute(
      'INSERT INTO notification_job (event_id, order_id, source_version) VALUES (?, ?, ?)',
      [eventId, payload.order_id, version]);
    await conn.commit();
  } catch (error) {
    await conn.rollback();
    throw error;
  }
  return 'processed';
}

(async () => {
  const [eventId, version, payload] = process.argv.slice(2);
  const conn = await connect();
  try {
    console.log(await handle(conn, eventId, Number(version), JSON.parse(payload)));
    // Only now, after COMMIT (or a duplicate), commit the Kafka offset of
    // the message; after an error, do not: the message comes again.
  } finally {
    await conn.end();
  }
})().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
