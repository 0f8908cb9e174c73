//! From binlog events to committed outbox transactions.
//!
//! [`TransactionAssembler`] is fed every event of the stream in order and
//! returns a [`SourceTransaction`] each time a transaction boundary passes:
//! an XID, a `COMMIT` query, a DDL query outside a transaction, or a move
//! to another binlog file (a real ROTATE, or the server's fake one when the
//! old file ended without it). Outbox rows are buffered until their
//! transaction's commit event has been read, so a half-written transaction
//! at the end of a crashed primary's binlog is never published.
//!
//! Every event type is handled on purpose: the ones that carry nothing for us
//! are named and skipped; anything we cannot read (an unknown type without the
//! "ignorable" flag, MariaDB compressed or encrypted events, a compressed
//! MySQL transaction payload that did not decompress) is a [`DefiniteError`]
//! naming its position, never a silent skip.
//!
//! Positions: an event's header carries its end (`log_pos`). Events inside a
//! MySQL 8 TRANSACTION_PAYLOAD carry `log_pos = 0`; their transaction ends
//! where the payload event ends.

//!
//! One file per concern: this one dispatches events and keeps the open
//! transaction; [`statement`] reads QUERY events, [`layout`] keeps the
//! table layouts TABLE_MAP events announce, [`rows`] turns WRITE_ROWS rows
//! into outbox events, [`event_types`] names what is not in
//! `mysql_common`.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_common::binlog::consts::{EventFlags, EventType};
use mysql_common::binlog::events::{Event, GtidEvent, QueryEvent, RotateEvent, TableMapEvent};
use outbox_core::{
    BadRowPolicy, BinlogPosition, ChangePolicy, DeadLetter, DefiniteError, Gtid, GtidTag,
    OutboxEvent, SourceTransaction,
};

use outbox_core::table::{ColumnMapping, EventIdFormat, OutboxTables};

mod event_types;
mod json_text;
mod layout;
mod rows;
mod shape;
mod statement;
mod table;

use event_types::{event_type_name, format_uuid, mariadb, MYSQL_HEARTBEAT_V2};
use layout::{strip_trailing_checksum, table_id_of, Layouts, MAX_CACHED_TABLES};
pub use table::{TableColumn, TableDecoder};

/// What the decoder needs to know about the outbox.
#[derive(Debug, Clone)]
pub struct DecodeConfig {
    pub tables: OutboxTables,
    pub columns: ColumnMapping,
    pub event_id_format: EventIdFormat,
    /// Bound on the bytes of outbox events buffered for one transaction.
    pub max_transaction_bytes: usize,
    /// What to do with a row that cannot become a message.
    pub bad_rows: BadRowPolicy,
    /// Header name → column (`[outbox.headers]`), in order.
    pub headers: Vec<(String, String)>,
    /// A NULL payload is a tombstone rather than a bad row.
    pub tombstone_on_null_payload: bool,
    /// What UPDATEs and DELETEs of outbox rows mean.
    pub on_update: ChangePolicy,
    pub on_delete: ChangePolicy,
}

impl DecodeConfig {
    /// The outbox as the defaults describe it: `*.outbox_event` with the
    /// migration's columns, UUID event ids, bad rows failing.
    pub fn new(tables: OutboxTables) -> Self {
        Self {
            tables,
            columns: ColumnMapping::default(),
            event_id_format: EventIdFormat::Uuid,
            max_transaction_bytes: 64 << 20,
            bad_rows: BadRowPolicy::Fail,
            headers: Vec::new(),
            tombstone_on_null_payload: false,
            on_update: ChangePolicy::Ignore,
            on_delete: ChangePolicy::Ignore,
        }
    }
}

/// When a MySQL GTID event's transaction committed, in microseconds since
/// the epoch: on the server that first committed it, else on this one; 0
/// when the event predates both fields (before 8.0.1).
fn commit_micros(gtid: &GtidEvent) -> u64 {
    match gtid.original_commit_timestamp() {
        0 => gtid.immediate_commit_timestamp(),
        original => original,
    }
}

/// Turns the event stream into committed transactions. See the module docs.
pub struct TransactionAssembler {
    config: DecodeConfig,
    file: String,
    /// Header timestamp of the event being handled.
    timestamp: u32,
    /// When `file` was created: its FORMAT_DESCRIPTION event's time (0
    /// until that event is read).
    file_created: u32,
    /// The GTID event of the transaction being read, until its boundary.
    gtid: Option<Gtid>,
    /// The last MySQL server uuid read and its text, which the next
    /// transactions of that server share.
    server_uuid: Option<([u8; 16], Arc<str>)>,
    /// Its commit time on the server that first committed it, in
    /// microseconds since the epoch: MySQL's `original_commit_timestamp`
    /// (0 when the event lacks it, and on MariaDB).
    original_commit_us: u64,
    /// Start and end of the newest event with a real position.
    outer_start: u64,
    outer_end: u64,
    /// End of a TRANSACTION_PAYLOAD whose inner transaction has not committed yet.
    open_payload: Option<u64>,
    /// The start of the last rows event read and the index its next row
    /// would have. The rows events inside one TRANSACTION_PAYLOAD share the
    /// payload's position, so their rows are numbered on from one to the
    /// next: a row's coordinate (position, index) stays unique.
    rows_numbered: (u64, u32),
    in_transaction: bool,
    transaction_start: u64,
    events: Vec<OutboxEvent>,
    dead_letters: Vec<DeadLetter>,
    /// Savepoint name → how many events and dead letters preceded it.
    savepoints: HashMap<String, (usize, usize)>,
    buffered_bytes: usize,
    /// Outbox rows the open transaction updated or deleted (under `warn`).
    changed_rows: u32,
    /// Table id → the table map's bytes and, for outbox tables, the layout
    /// resolved from them. Kept across transactions: a table map identical
    /// to the cached one is not resolved again.
    layouts: Layouts,
}

impl TransactionAssembler {
    /// `file` is the binlog file the stream starts in.
    pub fn new(config: DecodeConfig, file: impl Into<String>) -> Self {
        Self {
            config,
            file: file.into(),
            timestamp: 0,
            file_created: 0,
            gtid: None,
            server_uuid: None,
            original_commit_us: 0,
            outer_start: 0,
            outer_end: 0,
            open_payload: None,
            rows_numbered: (0, 0),
            in_transaction: false,
            transaction_start: 0,
            events: Vec::new(),
            dead_letters: Vec::new(),
            savepoints: HashMap::new(),
            buffered_bytes: 0,
            changed_rows: 0,
            layouts: Layouts::default(),
        }
    }

    /// The end of the last event read: where an error is reported.
    pub fn position(&self) -> BinlogPosition {
        BinlogPosition::new(self.file.clone(), self.outer_end)
    }

    /// When the file the stream is in was created, once its
    /// FORMAT_DESCRIPTION event is read.
    pub fn file_created(&self) -> Option<u32> {
        (self.file_created > 0).then_some(self.file_created)
    }

    fn here(&self) -> BinlogPosition {
        BinlogPosition::new(self.file.clone(), self.outer_start)
    }

    fn unsupported(&self, event_type: u8, reason: impl Into<String>) -> DefiniteError {
        DefiniteError::UnsupportedEvent {
            position: self.here(),
            event_type: event_type_name(event_type),
            reason: reason.into(),
        }
    }

    /// Feeds one event; returns the transaction it completed, if any.
    pub fn handle(&mut self, event: &Event) -> Result<Option<SourceTransaction>, DefiniteError> {
        let header = event.header();
        let raw_type = header.event_type_raw();
        let log_pos = u64::from(header.log_pos());
        let artificial = header.flags().contains(EventFlags::LOG_EVENT_ARTIFICIAL_F);
        self.timestamp = header.timestamp();
        if log_pos != 0 && !artificial {
            self.enter_outer_event(log_pos, header.event_size())?;
        }

        let Ok(event_type) = header.event_type() else {
            return self.handle_non_mysql_event(event, raw_type);
        };

        use EventType::*;
        match event_type {
            ROTATE_EVENT => self.on_rotate(event, log_pos == 0 || artificial),
            QUERY_EVENT => {
                let query: QueryEvent<'_> = event
                    .read_event()
                    .map_err(|e| self.unsupported(raw_type, e.to_string()))?;
                self.on_query(&query.query())
            }
            XID_EVENT => Ok(self.commit()),
            TABLE_MAP_EVENT => {
                self.on_table_map_event(event, raw_type)?;
                Ok(None)
            }
            WRITE_ROWS_EVENT | WRITE_ROWS_EVENT_V1 => {
                self.on_write_rows(event)?;
                Ok(None)
            }
            // Only inserts count: updates and deletes of outbox rows (such as
            // a cleanup that deletes the row in the inserting transaction) are
            // not events, but may be worth a warning or a stop.
            UPDATE_ROWS_EVENT | UPDATE_ROWS_EVENT_V1 | PARTIAL_UPDATE_ROWS_EVENT => {
                self.on_changed_rows(event, "UPDATE")?;
                Ok(None)
            }
            DELETE_ROWS_EVENT | DELETE_ROWS_EVENT_V1 => {
                self.on_changed_rows(event, "DELETE")?;
                Ok(None)
            }
            TRANSACTION_PAYLOAD_EVENT => {
                // The reader expands the payload into the events that follow;
                // `open_payload` catches a payload that expanded to nothing.
                self.open_payload = Some(log_pos);
                Ok(None)
            }
            XA_PREPARE_LOG_EVENT => self.on_xa_prepare(raw_type).map(Some),
            INCIDENT_EVENT => Err(self.unsupported(
                raw_type,
                "the primary recorded an incident: changes may be missing from the binlog",
            )),
            GTID_EVENT | GTID_TAGGED_LOG_EVENT => {
                self.on_gtid(event, raw_type)?;
                Ok(None)
            }
            // A transaction without a GTID (gtid_mode=OFF): the same body,
            // read for its commit time only (a body that does not decode
            // leaves the commit event's second).
            ANONYMOUS_GTID_EVENT => {
                if let Ok(anonymous) = event.read_event::<GtidEvent>() {
                    self.original_commit_us = commit_micros(&anonymous);
                }
                Ok(None)
            }
            // Its time is the file's creation time (also when the server
            // sends it at a stream's start inside the file).
            FORMAT_DESCRIPTION_EVENT => {
                self.file_created = header.timestamp();
                Ok(None)
            }
            // Carry nothing the forwarder needs.
            START_EVENT_V3
            | STOP_EVENT
            | HEARTBEAT_EVENT
            | PREVIOUS_GTIDS_EVENT
            | ROWS_QUERY_EVENT
            | INTVAR_EVENT
            | RAND_EVENT
            | USER_VAR_EVENT
            | IGNORABLE_EVENT
            | TRANSACTION_CONTEXT_EVENT
            | VIEW_CHANGE_EVENT => Ok(None),
            other => {
                if header.flags().contains(EventFlags::LOG_EVENT_IGNORABLE_F) {
                    return Ok(None);
                }
                Err(self.unsupported(raw_type, format!("event type {other:?} is not supported")))
            }
        }
    }

    /// An event of the binlog file itself (not one a compressed payload
    /// expanded into): the outer position moves to it. A payload still open
    /// then expanded into no complete transaction.
    fn enter_outer_event(&mut self, log_pos: u64, size: u32) -> Result<(), DefiniteError> {
        if let Some(payload_end) = self.open_payload.take() {
            return Err(DefiniteError::UnsupportedEvent {
                position: BinlogPosition::new(self.file.clone(), payload_end),
                event_type: "TRANSACTION_PAYLOAD".into(),
                reason: "the compressed transaction did not decompress into a complete \
                         transaction (no commit event inside it)"
                    .into(),
            });
        }
        self.outer_end = log_pos;
        self.outer_start = log_pos.saturating_sub(u64::from(size));
        Ok(())
    }

    /// A table map is parsed only when it differs from the one cached for
    /// its table id (the same table is mapped again in every transaction).
    fn on_table_map_event(&mut self, event: &Event, raw_type: u8) -> Result<(), DefiniteError> {
        let known = self
            .layouts
            .get(&table_id_of(event))
            .is_some_and(|(bytes, _)| bytes.as_slice() == event.data());
        if !known {
            let tme: TableMapEvent<'_> = event
                .read_event()
                .map_err(|e| self.unsupported(raw_type, e.to_string()))?;
            self.on_table_map(&tme, event.data())?;
        }
        Ok(())
    }

    /// XA PREPARE ends the binlog's part of an XA transaction; its outcome
    /// comes later, so one that wrote outbox rows cannot be forwarded.
    fn on_xa_prepare(&mut self, raw_type: u8) -> Result<SourceTransaction, DefiniteError> {
        if !self.events.is_empty() || !self.dead_letters.is_empty() {
            return Err(self.unsupported(
                raw_type,
                "an XA transaction wrote outbox rows; its outcome is decided by a later \
                 XA COMMIT/ROLLBACK, which the forwarder does not track",
            ));
        }
        self.in_transaction = false;
        Ok(self.boundary())
    }

    /// A MySQL GTID event names the transaction that follows: `uuid:gno`
    /// (GTID_EVENT) or, since 8.3, `uuid:tag:gno` (GTID_TAGGED_LOG_EVENT,
    /// whose body is a `mysql::serialization` message `mysql_common` reads).
    fn on_gtid(&mut self, event: &Event, raw_type: u8) -> Result<(), DefiniteError> {
        let gtid: GtidEvent = event.read_event().map_err(|e| {
            self.unsupported(raw_type, format!("the GTID event does not decode: {e}"))
        })?;
        let tag = gtid
            .tag()
            .map(|tag| tag.as_str().parse::<GtidTag>())
            .transpose()
            .map_err(|e| self.unsupported(raw_type, format!("the GTID event's tag: {e}")))?;
        if tag.is_none() && raw_type == EventType::GTID_TAGGED_LOG_EVENT as u8 {
            return Err(self.unsupported(raw_type, "the tagged GTID event names no tag"));
        }
        let sid = gtid.sid();
        let uuid = match &self.server_uuid {
            Some((known, text)) if *known == sid => text.clone(),
            _ => {
                let text: Arc<str> = format_uuid(&sid).into();
                self.server_uuid = Some((sid, text.clone()));
                text
            }
        };
        self.gtid = Some(Gtid::MySql {
            uuid,
            tag,
            gno: gtid.gno(),
        });
        self.original_commit_us = commit_micros(&gtid);
        Ok(())
    }

    fn handle_non_mysql_event(
        &mut self,
        event: &Event,
        raw_type: u8,
    ) -> Result<Option<SourceTransaction>, DefiniteError> {
        match raw_type {
            MYSQL_HEARTBEAT_V2
            | mariadb::ANNOTATE_ROWS
            | mariadb::BINLOG_CHECKPOINT
            | mariadb::GTID_LIST => Ok(None),
            mariadb::GTID => {
                // seq_no u64, domain_id u32, flags2 u8
                let data = event.data();
                if let (Some(seq), Some(domain)) = (data.get(..8), data.get(8..12)) {
                    self.gtid = Some(Gtid::MariaDb {
                        domain: u32::from_le_bytes(domain.try_into().expect("4 bytes")),
                        server: event.header().server_id(),
                        seq: u64::from_le_bytes(seq.try_into().expect("8 bytes")),
                    });
                }
                let flags = data.get(12).copied().unwrap_or_default();
                if flags & mariadb::FL_STANDALONE == 0 {
                    self.begin()?;
                }
                Ok(None)
            }
            mariadb::START_ENCRYPTION => Err(self.unsupported(
                raw_type,
                "the binlog is encrypted (encrypt_binlog=ON); the forwarder cannot read it",
            )),
            mariadb::FIRST_COMPRESSED..=mariadb::LAST_COMPRESSED => Err(self.unsupported(
                raw_type,
                "MariaDB compressed binlog events (log_bin_compress=ON) are not supported; \
                 set log_bin_compress=OFF on the server",
            )),
            _ if event
                .header()
                .flags()
                .contains(EventFlags::LOG_EVENT_IGNORABLE_F) =>
            {
                Ok(None)
            }
            _ => Err(self.unsupported(raw_type, "unknown event type")),
        }
    }

    fn on_rotate(
        &mut self,
        event: &Event,
        fake: bool,
    ) -> Result<Option<SourceTransaction>, DefiniteError> {
        let rotate: RotateEvent<'_> = event
            .read_event()
            .map_err(|e| self.unsupported(EventType::ROTATE_EVENT as u8, e.to_string()))?;
        let raw = rotate.name_raw();
        // A fake ROTATE is read before the stream's format description says
        // whether events carry a checksum, so MariaDB's arrives with its 4
        // CRC32 bytes glued to the file name: recognise and drop them.
        let name = if fake {
            strip_trailing_checksum(event, raw)
        } else {
            raw
        };
        let name = String::from_utf8_lossy(name);
        if fake && name == self.file {
            return Ok(None);
        }
        self.file = name.into_owned();
        self.file_created = 0;
        if self.in_transaction {
            return Ok(None);
        }
        // A real ROTATE ends its file. A fake one naming another file means
        // the server went on to the next file without one: the old file
        // ended with a STOP event (a restart) or with nothing (a crash).
        // Either way the new file's start is a boundary, and without it an
        // idle server would leave the watermark in a file it may purge.
        Ok(Some(SourceTransaction::empty(
            BinlogPosition::new(self.file.clone(), rotate.position()),
            self.timestamp,
        )))
    }

    /// Starts a transaction. Rows still buffered mean the previous one's end
    /// was missed: fail loudly rather than drop them.
    fn begin(&mut self) -> Result<(), DefiniteError> {
        if self.in_transaction && (!self.events.is_empty() || !self.dead_letters.is_empty()) {
            return Err(self.unsupported(
                EventType::QUERY_EVENT as u8,
                "a transaction began while outbox rows of the previous one were still \
                 waiting for its commit event",
            ));
        }
        self.in_transaction = true;
        self.transaction_start = self.outer_start;
        self.discard();
        Ok(())
    }

    fn discard(&mut self) {
        self.events.clear();
        self.dead_letters.clear();
        self.savepoints.clear();
        self.buffered_bytes = 0;
        self.changed_rows = 0;
    }

    fn commit(&mut self) -> Option<SourceTransaction> {
        self.in_transaction = false;
        self.open_payload = None;
        self.buffered_bytes = 0;
        self.savepoints.clear();
        // Bound the cache of table layouts, between transactions only: a
        // statement may map several tables before its rows.
        if self.layouts.len() >= MAX_CACHED_TABLES {
            self.layouts.clear();
        }
        let committed_at_ms = match std::mem::take(&mut self.original_commit_us) {
            0 => u64::from(self.timestamp) * 1000,
            us => us / 1000,
        };
        for event in &mut self.events {
            event.committed_at_ms = committed_at_ms;
        }
        Some(SourceTransaction {
            events: std::mem::take(&mut self.events),
            dead_letters: std::mem::take(&mut self.dead_letters),
            end: BinlogPosition::new(self.file.clone(), self.outer_end),
            commit_timestamp: self.timestamp,
            committed_at_ms,
            file_created_at: self.file_created,
            gtid: self.gtid.take(),
            changed_rows: std::mem::take(&mut self.changed_rows),
        })
    }

    fn boundary(&mut self) -> SourceTransaction {
        let mut boundary = SourceTransaction::empty(
            BinlogPosition::new(self.file.clone(), self.outer_end),
            self.timestamp,
        );
        boundary.gtid = self.gtid.take();
        if let us @ 1.. = std::mem::take(&mut self.original_commit_us) {
            boundary.committed_at_ms = us / 1000;
        }
        boundary.file_created_at = self.file_created;
        boundary
    }
}
