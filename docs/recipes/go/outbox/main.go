// The outbox insert: the order and its event in ONE transaction
// (database/sql with github.com/go-sql-driver/mysql).
// Usage: outbox CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
// Prints the event id it wrote. With OUTBOX_ACKED_URL (the forwarder's
// metrics listener, http://host:9464) it then waits until the event is
// published (OUTBOX_ACKED_TIMEOUT_MS, default 10000) and fails if it is not.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

const strictSession = "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')"

// uuidV7: 48-bit big-endian Unix ms, version 7, variant 10, random bits.
func uuidV7() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// placeOrder; traceparent and tracestate are "" (stored as NULL) when the
// request has no trace context.
func placeOrder(ctx context.Context, db *sql.Conn, customer string, amountCents int64, version int,
	traceparent, tracestate string) (string, error) {
	eventID := uuidV7()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // neither the order nor the event, unless committed
	// Strict for this transaction's connection, whatever the server's default:
	// a value too long for its column fails instead of being cut short.
	if _, err := tx.ExecContext(ctx, strictSession); err != nil {
		return "", err
	}
	res, err := tx.ExecContext(ctx,
		"INSERT INTO orders (customer, amount_cents, status) VALUES (?, ?, 'ACCEPTED')", customer, amountCents)
	if err != nil {
		return "", err
	}
	orderID, err := res.LastInsertId()
	if err != nil {
		return "", err
	}
	payload, _ := json.Marshal(map[string]any{"order_id": orderID, "customer": customer, "amount_cents": amountCents})
	if _, err := tx.ExecContext(ctx, "INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id,"+
		" event_type, event_version, payload, traceparent, tracestate) VALUES (?, 'order', ?, 'ORDER_ACCEPTED', ?, ?,"+
		" NULLIF(?, ''), NULLIF(?, ''))",
		eventID, strconv.FormatInt(orderID, 10), version, string(payload), traceparent, tracestate); err != nil {
		return "", err
	}
	return eventID, tx.Commit()
}

// committedGtid, on the connection that committed: MariaDB's @@last_gtid
// (the session's transaction), or MySQL's @@GLOBAL.gtid_executed (which
// holds it).
func committedGtid(ctx context.Context, conn *sql.Conn) (string, error) {
	var gtid string
	err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid)
	if err != nil { // MySQL: no such variable (1193)
		err = conn.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&gtid)
	}
	return strings.Join(strings.Fields(gtid), ""), err
}

// waitPublished asks the forwarder's GET /acked until it answers 200
// (published), or fails at the deadline.
func waitPublished(ackedURL, gtid string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := "not asked"
	for time.Now().Before(deadline) {
		wait := time.Until(deadline)
		if wait > 10*time.Second {
			wait = 10 * time.Second
		}
		query := url.Values{"gtid": {gtid}, "wait_ms": {strconv.FormatInt(wait.Milliseconds()+1, 10)}}
		client := http.Client{Timeout: wait + 5*time.Second}
		answer, err := client.Get(ackedURL + "/acked?" + query.Encode())
		if err != nil { // the forwarder restarting: ask again
			why = err.Error()
		} else {
			body, _ := io.ReadAll(answer.Body)
			answer.Body.Close()
			if answer.StatusCode == http.StatusOK {
				return nil // every message of the transaction is acked
			}
			why = fmt.Sprintf("%d %s", answer.StatusCode, strings.TrimSpace(string(body)))
			if answer.StatusCode == http.StatusBadRequest {
				break // a malformed GTID: asking again will not help
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not published within %v: %s", timeout, why)
}

func main() {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.DBName = os.Getenv("OUTBOX_DB_USER"), os.Getenv("OUTBOX_DB_PASSWORD"), os.Getenv("OUTBOX_DB_NAME")
	cfg.Net, cfg.Addr = "tcp", os.Getenv("OUTBOX_DB_HOST")+":"+os.Getenv("OUTBOX_DB_PORT")
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	amount, _ := strconv.ParseInt(os.Args[2], 10, 64)
	version, _ := strconv.Atoi(os.Args[3])
	trace := append(os.Args[4:], "", "") // traceparent, tracestate
	ctx := context.Background()
	conn, err := db.Conn(ctx) // one session: the GTID is the session's
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	eventID, err := placeOrder(ctx, conn, os.Args[1], amount, version, trace[0], trace[1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(eventID)
	if ackedURL := os.Getenv("OUTBOX_ACKED_URL"); ackedURL != "" {
		timeoutMs := 10000
		if text := os.Getenv("OUTBOX_ACKED_TIMEOUT_MS"); text != "" {
			if timeoutMs, err = strconv.Atoi(text); err != nil || timeoutMs <= 0 {
				log.Fatalf("OUTBOX_ACKED_TIMEOUT_MS must be a positive number of milliseconds, not %q", text)
			}
		}
		gtid, err := committedGtid(ctx, conn)
		if err != nil {
			log.Fatal(err)
		}
		if err := waitPublished(ackedURL, gtid, time.Duration(timeoutMs)*time.Millisecond); err != nil {
			log.Fatal(err)
		}
	}
}
