// The outbox insert: the order and its event in ONE transaction
// (database/sql with github.com/go-sql-driver/mysql).
// Usage: outbox CUSTOMER AMOUNT_CENTS EVENT_VERSION [TRACEPARENT [TRACESTATE]]
// Prints the event id it wrote.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
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
func placeOrder(ctx context.Context, db *sql.DB, customer string, amountCents int64, version int,
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
	eventID, err := placeOrder(context.Background(), db, os.Args[1], amount, version, trace[0], trace[1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(eventID)
}
