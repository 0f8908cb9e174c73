// The outbox insert: the order and its event in ONE transaction (JDBC,
// MariaDB Connector/J).
// Usage: java Outbox CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
// Prints the event id it wrote.
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.sql.*;
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

    static Connection connect() throws SQLException {
        String url = String.format("jdbc:mariadb://%s:%s/%s",
                System.getenv().getOrDefault("OUTBOX_DB_HOST", "127.0.0.1"),
                System.getenv().getOrDefault("OUTBOX_DB_PORT", "3306"), System.getenv("OUTBOX_DB_NAME"))
                // MySQL 8+'s caching_sha2_password without TLS; with TLS, drop it.
                + "?allowPublicKeyRetrieval=true";
        return DriverManager.getConnection(url, System.getenv("OUTBOX_DB_USER"), System.getenv("OUTBOX_DB_PASSWORD"));
    }

    public static void main(String[] args) throws SQLException {
        try (Connection conn = connect()) {
            System.out.println(placeOrder(conn, args[0], Long.parseLong(args[1]), Integer.parseInt(args[2]),
                    args.length > 3 ? args[3] : null, args.length > 4 ? args[4] : null));
        }
    }
}
