// The inbox: the claim row and the side effect in ONE transaction
// (database/sql with github.com/go-sql-driver/mysql).
// Usage: inbox EVENT_ID EVENT_VERSION PAYLOAD_JSON (a Kafka message's
// event_id and event_version headers and its value). Prints processed or
// duplicate; exits non-zero on any other error (the message is retried).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

const consumerName = "notification-planner"
const inboxKey = "uq_consumed_event_identity"
const strictSession = "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')"

// isInboxDuplicate: MySQL 1062 naming the inbox key (MySQL 8+ prefixes the table name).
func isInboxDuplicate(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 {
		return false
	}
	parts := strings.Split(me.Message, "for key '")
	key := strings.SplitN(parts[len(parts)-1], "'", 2)[0]
	return key == inboxKey || strings.HasSuffix(key, "."+inboxKey)
}

func handle(ctx context.Context, db *sql.DB, eventID string, version int64, orderID int64) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // unless committed: a duplicate or an error
	// Strict: an over-long event id fails rather than being cut into another's.
	if _, err := tx.ExecContext(ctx, strictSession); err != nil {
		return "", err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO consumed_event (consumer_name, event_id) VALUES (?, ?)", consumerName, eventID)
	if isInboxDuplicate(err) {
		return "duplicate", nil
	} else if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO notification_job (event_id, order_id, source_version) VALUES (?, ?, ?)",
		eventID, orderID, version); err != nil {
		return "", err
	}
	return "processed", tx.Commit()
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
	version, _ := strconv.ParseInt(os.Args[2], 10, 64)
	var payload struct {
		OrderID int64 `json:"order_id"`
	}
	if err := json.Unmarshal([]byte(os.Args[3]), &payload); err != nil {
		log.Fatal(err)
	}
	outcome, err := handle(context.Background(), db, os.Args[1], version, payload.OrderID)
	if err != nil {
		log.Fatal(err) // the offset is not committed: the message comes again
	}
	fmt.Println(outcome) // only now commit the Kafka offset of the message
}
