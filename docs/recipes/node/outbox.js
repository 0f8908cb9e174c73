// The outbox insert: the order and its event in ONE transaction (mysql2).
// Usage: node outbox.js CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
// Prints the event id it wrote. With OUTBOX_ACKED_URL (the forwarder's
// metrics listener, http://host:9464) it then waits until the event is
// published (OUTBOX_ACKED_TIMEOUT_MS, default 10000) and fails if it is not.
'use strict';
const crypto = require('node:crypto');
const mysql = require('mysql2/promise');

// 48-bit big-endian Unix ms, version 7, variant 10, random bits.
function uuidv7() {
  const b = crypto.randomBytes(16);
  b.writeUIntBE(Date.now(), 0, 6);
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString('hex');
  return [h.slice(0, 8), h.slice(8, 12), h.slice(12, 16), h.slice(16, 20), h.slice(20)].join('-');
}

// Strict for the session, whatever the server's default: a value too long for
// its column fails instead of being cut short with a warning.
const STRICT_SESSION = "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')";

async function beginStrict(conn) {
  await conn.beginTransaction();
  await conn.query(STRICT_SESSION);
}

async function placeOrder(conn, customer, amountCents, version, traceparent = null, tracestate = null) {
  const eventId = uuidv7();
  await beginStrict(conn);
  try {
    const [order] = await conn.execute(
      "INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'ACCEPTED')",
      [customer, amountCents]);
    const payload = { order_id: order.insertId, customer, amount_cents: amountCents };
    await conn.execute(
      'INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type,' +
        " event_version, payload, traceparent, tracestate) VALUES (?, 'order', ?, 'ORDER_ACCEPTED', ?, ?, ?, ?)",
      [eventId, String(order.insertId), version, JSON.stringify(payload), traceparent, tracestate]);
    await conn.commit();
  } catch (error) {
    await conn.rollback(); // neither the order nor the event
    throw error;
  }
  return eventId;
}

// After the commit: MariaDB's @@last_gtid (the session's transaction), or
// MySQL's @@GLOBAL.gtid_executed (which holds it).
async function committedGtid(conn) {
  let rows;
  try {
    [rows] = await conn.query('SELECT @@last_gtid AS gtid');
  } catch (error) { // MySQL: no such variable (1193)
    [rows] = await conn.query('SELECT @@GLOBAL.gtid_executed AS gtid');
  }
  return String(rows[0].gtid).replace(/\s+/g, '');
}

// Asks the forwarder's GET /acked until it answers 200 (published), or
// fails at the deadline.
async function waitPublished(ackedUrl, gtid, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let why = 'not asked';
  while (Date.now() < deadline) {
    const waitMs = Math.max(1, Math.min(10000, deadline - Date.now()));
    const query = new URLSearchParams({ gtid, wait_ms: String(waitMs) });
    try {
      const answer = await fetch(`${ackedUrl}/acked?${query}`, { signal: AbortSignal.timeout(waitMs + 5000) });
      if (answer.status === 200) return; // every message of the transaction is acked
      why = `${answer.status} ${(await answer.text()).trim()}`;
      if (answer.status === 400) break; // a malformed GTID: asking again will not help
    } catch (error) { // the forwarder restarting: ask again
      why = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`not published within ${timeoutMs} ms: ${why}`);
}

function connect() {
  const env = process.env;
  return mysql.createConnection({
    host: env.OUTBOX_DB_HOST || '127.0.0.1',
    port: Number(env.OUTBOX_DB_PORT || 3306),
    user: env.OUTBOX_DB_USER,
    password: env.OUTBOX_DB_PASSWORD,
    database: env.OUTBOX_DB_NAME,
  });
}

module.exports = { beginStrict, connect };

if (require.main === module) {
  (async () => {
    const [customer, amount, version, ...trace] = process.argv.slice(2);
    const conn = await connect();
    try {
      console.log(await placeOrder(conn, customer, Number(amount), Number(version), ...trace));
      const ackedUrl = process.env.OUTBOX_ACKED_URL;
      if (ackedUrl) {
        const text = process.env.OUTBOX_ACKED_TIMEOUT_MS || "10000";
        const timeoutMs = Number(text);
        if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
          throw new Error(`OUTBOX_ACKED_TIMEOUT_MS must be a positive number of milliseconds, not '${text}'`);
        }
        await waitPublished(ackedUrl, await committedGtid(conn), timeoutMs);
      }
    } finally {
      await conn.end();
    }
  })().catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });
}
