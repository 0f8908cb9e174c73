// The inbox: the claim row and the side effect in ONE transaction (JDBC,
// MariaDB Connector/J).
// Usage: java Inbox EVENT_ID EVENT_VERSION PAYLOAD_JSON (a Kafka message's
// event_id and event_version headers and its value). Prints processed or
// duplicate; exits non-zero on any other error (the message is retried).
import java.sql.*;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public class Inbox {
    static final String CONSUMER_NAME = "notification-planner";
    static final String INBOX_KEY = "uq_consumed_event_identity";

    // MySQL 1062 naming the inbox key (MySQL 8+ prefixes the table name).
    static boolean isInboxDuplicate(SQLException e) {
        String message = String.valueOf(e.getMessage());
        int at = message.lastIndexOf("for key '");
        if (e.getErrorCode() != 1062 || at < 0) return false;
        String key = message.substring(at + 9).split("'")[0];
        return key.equals(INBOX_KEY) || key.endsWith("." + INBOX_KEY);
    }

    static String handle(Connection conn, String eventId, long version, long orderId) throws SQLException {
        // Strict: an over-long id fails rather than being cut into another's.
        Outbox.beginStrict(conn);
        try (PreparedStatement claim = conn.prepareStatement(
                    "INSERT INTO consumed_event (consumer_name, event_id) VALUES (?, ?)");
                PreparedStatement job = conn.prepareStatement(
                    "INSERT INTO notification_job (event_id, order_id, source_version) VALUES (?, ?, ?)")) {
            claim.setString(1, CONSUMER_NAME);
            claim.setString(2, eventId);
            try {
                claim.executeUpdate();
            } catch (SQLException e) {
                if (!isInboxDuplicate(e)) throw e;
                conn.rollback();
                return "duplicate";
            }
            job.setString(1, eventId);
            job.setLong(2, orderId);
            job.setLong(3, version);
            job.executeUpdate();
            conn.commit();
        } catch (SQLException | RuntimeException e) {
            conn.rollback();
            throw e;
        }
        return "processed";
    }

    public static void main(String[] args) throws SQLException {
        // Use the service's JSON library; a pattern does for this sketch.
        Matcher orderId = Pattern.compile("\"order_id\"\\s*:\\s*(\\d+)").matcher(args[2]);
        if (!orderId.find()) throw new IllegalArgumentException("no order_id in the payload");
        try (Connection conn = Outbox.connect()) {
            System.out.println(handle(conn, args[0], Long.parseLong(args[1]), Long.parseLong(orderId.group(1))));
            // Only now, after COMMIT (or a duplicate), commit the Kafka offset
            // of the message; after an error, do not: the message comes again.
        }
    }
}
