// The outbox insert: the order and its event in ONE transaction (JDBC,
// MariaDB Connector/J).
// Usage: java Outbox CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
// Prints the event id it wrote. With OUTBOX_ACKED_URL (the forwarder's
// metrics listener, http://host:9464) it then waits until the event is
// published (OUTBOX_ACKED_TIMEOUT_MS, default 10000) and fails if it is not.
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.sql.*;
import java.time.Duration;
import java.util.UUID;

public class Outbox {
    private static final SecureRandom RANDOM = new SecureRandom();

    // 48-bit big-endian Unix ms, version 7, variant 10, random bits.
    static String uuidV7() {
        byte[] b = new byte[16];
        RANDOM.nextBytes(b);
        long ms = System.currentTimeMillis();
        for (int i = 0; i < 6; i++) b[i] = (byte) (ms >>> (40 - 8 * i));
        b[6] = (byte) ((b[6] & 0x0f) | 0x70);
        b[8] = (byte) ((b[8] & 0x3f) | 0x80);
        ByteBuffer bb = ByteBuffer.wrap(b);
        return new UUID(bb.getLong(), bb.getLong()).toString();
    }

    // Strict for this session, whatever the server's default: a value too long
    // for its column fails instead of being cut short with a warning.
    static void beginStrict(Connection conn) throws SQLException {
        conn.setAutoCommit(false);
        try (Statement s = conn.createStatement()) {
            s.execute("SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')");
        }
    }

    static String placeOrder(Connection conn, String customer, long amountCents, int version,
            String traceparent, String tracestate) throws SQLException {
        String eventId = uuidV7();
        beginStrict(conn);
        try (PreparedStatement order = conn.prepareStatement(
                    "INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'ACCEPTED')",
                    Statement.RETURN_GENERATED_KEYS);
                PreparedStatement event = conn.prepareStatement(
                    "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type,"
                    + " event_version, payload, traceparent, tracestate)"
                    + " VALUES (?, 'order', ?, 'ORDER_ACCEPTED', ?, ?, ?, ?)")) {
            order.setString(1, customer);
            order.setLong(2, amountCents);
            order.executeUpdate();
            ResultSet keys = order.getGeneratedKeys();
            keys.next();
            long orderId = keys.getLong(1);
            // Use the service's JSON library; the quoting below is only for this sketch.
            String payload = String.format("{\"order_id\": %d, \"customer\": \"%s\", \"amount_cents\": %d}",
                    orderId, customer.replace("\\", "\\\\").replace("\"", "\\\""), amountCents);
            event.setString(1, eventId);
            event.setString(2, Long.toString(orderId));
            event.setInt(3, version);
            event.setString(4, payload);
            event.setString(5, traceparent); // null when the request has no trace context
            event.setString(6, tracestate);
            event.executeUpdate();
            conn.commit();
        } catch (SQLException | RuntimeException e) {
            conn.rollback(); // neither the order nor the event
            throw e;
        }
        return eventId;
    }

    // After the commit, on the same connection: MariaDB's @@last_gtid (the
    // session's transaction), or MySQL's @@GLOBAL.gtid_executed (which holds it).
    static String committedGtid(Connection conn) throws SQLException {
        String gtid;
        try (Statement s = conn.createStatement(); ResultSet r = s.executeQuery("SELECT @@last_gtid")) {
            r.next();
            gtid = r.getString(1);
        } catch (SQLException e) { // MySQL: no such variable (1193)
            try (Statement s = conn.createStatement();
                    ResultSet r = s.executeQuery("SELECT @@GLOBAL.gtid_executed")) {
                r.next();
                gtid = r.getString(1);
            }
        }
        return gtid.replaceAll("\\s+", "");
    }

    // Asks the forwarder's GET /acked until it answers 200 (published), or
    // fails at the deadline.
    static void waitPublished(String ackedUrl, String gtid, long timeoutMs) throws InterruptedException {
        HttpClient http = HttpClient.newHttpClient();
        long deadline = System.currentTimeMillis() + timeoutMs;
        String why = "not asked";
        while (System.currentTimeMillis() < deadline) {
            long waitMs = Math.max(1, Math.min(10_000, deadline - System.currentTimeMillis()));
            URI uri = URI.create(ackedUrl + "/acked?gtid=" + URLEncoder.encode(gtid, StandardCharsets.UTF_8)
                    + "&wait_ms=" + waitMs);
            HttpRequest request = HttpRequest.newBuilder(uri).timeout(Duration.ofMillis(waitMs + 5000)).build();
            try {
                HttpResponse<String> answer = http.send(request, HttpResponse.BodyHandlers.ofString());
                if (answer.statusCode() == 200) return; // every message of the transaction is acked
                why = answer.statusCode() + " " + answer.body().trim();
                if (answer.statusCode() == 400) break; // a malformed GTID: asking again will not help
            } catch (IOException e) { // the forwarder restarting: ask again
                why = e.toString();
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("not published within " + timeoutMs + " ms: " + why);
    }

    static Connection connect() throws SQLException {
        String url = String.format("jdbc:mariadb://%s:%s/%s",
                System.getenv().getOrDefault("OUTBOX_DB_HOST", "127.0.0.1"),
                System.getenv().getOrDefault("OUTBOX_DB_PORT", "3306"), System.getenv("OUTBOX_DB_NAME"))
                // MySQL 8+'s caching_sha2_password without TLS; with TLS, drop it.
                + "?allowPublicKeyRetrieval=true";
        return DriverManager.getConnection(url, System.getenv("OUTBOX_DB_USER"), System.getenv("OUTBOX_DB_PASSWORD"));
    }

    static long ackedTimeoutMs() {
        String text = System.getenv().getOrDefault("OUTBOX_ACKED_TIMEOUT_MS", "10000");
        try {
            long ms = Long.parseLong(text.trim());
            if (ms > 0) return ms;
        } catch (NumberFormatException e) {
            // said below
        }
        throw new IllegalArgumentException("OUTBOX_ACKED_TIMEOUT_MS must be a positive number of milliseconds, not '" + text + "'");
    }

    public static void main(String[] args) throws SQLException, InterruptedException {
        try (Connection conn = connect()) {
            System.out.println(placeOrder(conn, args[0], Long.parseLong(args[1]), Integer.parseInt(args[2]),
                    args.length > 3 ? args[3] : null, args.length > 4 ? args[4] : null));
            String ackedUrl = System.getenv("OUTBOX_ACKED_URL");
            if (ackedUrl != null && !ackedUrl.isEmpty()) {
                waitPublished(ackedUrl, committedGtid(conn), ackedTimeoutMs());
            }
        }
    }
}
