//! Appending events: one multi-row INSERT in the caller's transaction,
//! every value checked against its column first.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value};
use outbox_core::rules;
use outbox_core::sql::{Ident, Qualified};
use outbox_core::table::PayloadFormat;

use crate::column::{Fit, LengthUnit, TableColumn};
use crate::error::WriteError;
use crate::event::NewEvent;
use crate::table::OutboxTable;

/// Rows in one INSERT statement at most; more are sent as further statements
/// of the same transaction.
const ROWS_PER_STATEMENT: usize = 500;

/// What a statement may carry beyond its values (the statement text, the
/// protocol's framing), kept free under `max_allowed_packet`.
const PACKET_HEADROOM: u64 = 64 << 10;

/// The writer of one outbox table: cheap to clone, holds no connection.
#[derive(Debug, Clone)]
pub struct Outbox {
    table: OutboxTable,
    /// `` `schema`.`table` ``.
    qualified: String,
    /// The real table's columns for the event's parts, in statement order;
    /// the trace columns only when the table has them.
    parts: Vec<(Part, TableColumn)>,
    columns: Vec<TableColumn>,
    /// The unique keys on the event id alone (`PRIMARY` in the migration).
    id_keys: Vec<String>,
    max_packet: u64,
}

/// Which of an event's parts a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    EventId,
    AggregateType,
    AggregateId,
    EventType,
    EventVersion,
    Payload,
    Traceparent,
    Tracestate,
}

impl Part {
    /// What the part is, as `[outbox.columns]` calls it.
    fn name(self) -> &'static str {
        match self {
            Part::EventId => "event_id",
            Part::AggregateType => "aggregate_type",
            Part::AggregateId => "aggregate_id",
            Part::EventType => "event_type",
            Part::EventVersion => "event_version",
            Part::Payload => "payload",
            Part::Traceparent => "traceparent",
            Part::Tracestate => "tracestate",
        }
    }
}

impl Outbox {
    pub(crate) fn new(
        table: OutboxTable,
        schema: String,
        columns: Vec<TableColumn>,
        id_keys: Vec<String>,
        max_packet: u64,
    ) -> Result<Self, WriteError> {
        let qualified = Qualified(&schema, table.name()).to_string();
        if columns.is_empty() {
            return Err(WriteError::Table(format!(
                "outbox table {qualified} does not exist or the writer's user cannot see it; \
                 apply migrations/ or grant the user INSERT on it"
            )));
        }
        let mapping = table.mapping();
        let wanted = [
            (Part::EventId, "event_id", &mapping.event_id, true),
            (
                Part::AggregateType,
                "aggregate_type",
                &mapping.aggregate_type,
                true,
            ),
            (
                Part::AggregateId,
                "aggregate_id",
                &mapping.aggregate_id,
                true,
            ),
            (Part::EventType, "event_type", &mapping.event_type, true),
            (
                Part::EventVersion,
                "event_version",
                &mapping.event_version,
                true,
            ),
            (Part::Payload, "payload", &mapping.payload, true),
            (
                Part::Traceparent,
                "traceparent",
                &mapping.traceparent,
                false,
            ),
            (Part::Tracestate, "tracestate", &mapping.tracestate, false),
        ];
        let mut parts = Vec::new();
        for (part, setting, name, required) in wanted {
            match find(&columns, name) {
                Some(column) => parts.push((part, column.clone())),
                None if required => {
                    return Err(WriteError::Table(format!(
                        "outbox table {qualified} has no column `{name}` \
                         ([outbox.columns] {setting}); add it or name the column that holds it"
                    )))
                }
                None => {}
            }
        }
        // The columns the forwarder requires when they are named.
        for (setting, name) in mapping.required() {
            if find(&columns, name).is_none() {
                return Err(WriteError::Table(format!(
                    "outbox table {qualified} has no column `{name}`, which [outbox.columns] \
                     {setting} names; add it or correct the setting"
                )));
            }
        }
        Ok(Outbox {
            table,
            qualified,
            parts,
            columns,
            id_keys,
            max_packet,
        })
    }

    /// The table written, `` `schema`.`table` ``.
    pub fn table(&self) -> &str {
        &self.qualified
    }

    /// Whether the table has the trace-context columns, so that events
    /// carry their trace to the consumer.
    pub fn carries_trace_context(&self) -> bool {
        self.parts
            .iter()
            .any(|(part, _)| *part == Part::Traceparent)
    }

    /// Appends `event` in `tx`. Nothing is committed: the event exists once
    /// the caller commits, and a rollback leaves none.
    pub async fn append(
        &self,
        tx: &mut Transaction<'_>,
        event: &NewEvent,
    ) -> Result<(), WriteError> {
        self.append_all(tx, std::slice::from_ref(event)).await
    }

    /// Appends `events` in `tx`, in their order, in as few statements as
    /// the server takes. On an error none of the failing statement's events
    /// is in the table, but earlier statements' are: the caller rolls back.
    pub async fn append_all(
        &self,
        tx: &mut Transaction<'_>,
        events: &[NewEvent],
    ) -> Result<(), WriteError> {
        let mut rows = Vec::with_capacity(events.len());
        for event in events {
            rows.push(self.row(event)?);
        }
        let extra = self.extra_columns(events);
        let mut start = 0;
        while start < rows.len() {
            let end = self.statement_end(&rows, start);
            self.insert(tx, &events[start..end], &rows[start..end], &extra)
                .await?;
            start = end;
        }
        Ok(())
    }

    /// The event's values in the order of `self.parts`, each checked.
    fn row(&self, event: &NewEvent) -> Result<Row, WriteError> {
        self.check_id(&event.event_id)?;
        let mut values = Vec::with_capacity(self.parts.len() + event.columns.len());
        let mut bytes = 0u64;
        for (part, column) in &self.parts {
            let value = match part {
                Part::EventId => Some(event.event_id.as_bytes()),
                Part::AggregateType => Some(event.aggregate_type.as_bytes()),
                Part::AggregateId => Some(event.aggregate_id.as_bytes()),
                Part::EventType => Some(event.event_type.as_bytes()),
                Part::EventVersion => {
                    let version = Value::Int(event.event_version);
                    self.check_range(event, column, event.event_version)?;
                    self.check_rules(event, column, &version)?;
                    values.push(version);
                    continue;
                }
                Part::Payload => Some(event.payload.as_slice()),
                Part::Traceparent => event.trace.as_ref().map(|t| t.traceparent().as_bytes()),
                Part::Tracestate => event
                    .trace
                    .as_ref()
                    .and_then(|t| t.tracestate())
                    .map(str::as_bytes),
            };
            let Some(value) = value else {
                values.push(Value::NULL);
                continue;
            };
            self.check_length(event, column, value)?;
            self.check_part(event, *part, column, value)?;
            bytes += value.len() as u64;
            let value = Value::Bytes(value.to_vec());
            self.check_rules(event, column, &value)?;
            values.push(value);
        }
        bytes += self.check_further_columns(event)?;
        if bytes + PACKET_HEADROOM > self.max_packet {
            return Err(WriteError::TooLong {
                event_id: event.event_id.clone(),
                what: "the event".into(),
                length: bytes,
                limit: self.max_packet.saturating_sub(PACKET_HEADROOM),
                unit: LengthUnit::Bytes.name(),
                holder: "the server's max_allowed_packet (less what a statement needs)".into(),
            });
        }
        Ok(Row { values, bytes })
    }

    /// Checks the event's further columns against the table (there, not one
    /// of the event's own parts, not too long) and that the Kafka key column
    /// `[outbox.columns] key` names is set; their size.
    fn check_further_columns(&self, event: &NewEvent) -> Result<u64, WriteError> {
        let mut bytes = 0;
        for (name, value) in &event.columns {
            let Some(column) = find(&self.columns, name) else {
                return Err(WriteError::Table(format!(
                    "event {}: outbox table {} has no column `{name}`",
                    event.event_id, self.qualified
                )));
            };
            if let Some((part, _)) = self.parts.iter().find(|(_, c)| c.name == column.name) {
                return Err(WriteError::Table(format!(
                    "event {}: column `{name}` of {} holds the event's {}; set it through \
                     the event, not as a further column",
                    event.event_id,
                    self.qualified,
                    part.name()
                )));
            }
            if let Value::Bytes(value) = value {
                self.check_length(event, column, value)?;
                bytes += value.len() as u64;
            }
            if let Value::Int(n) = value {
                self.check_range(event, column, *n)?;
            }
            self.check_rules(event, column, value)?;
        }
        // A key column that holds one of the event's parts (the aggregate id,
        // say) is set by it.
        let key = self.table.mapping().key.as_deref();
        let key = key.filter(|k| {
            !self
                .parts
                .iter()
                .any(|(_, c)| c.name.eq_ignore_ascii_case(k))
        });
        if let Some(key) = key {
            let set = event
                .columns
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(key) && *v != Value::NULL);
            if !set {
                return Err(WriteError::Table(format!(
                    "event {}: [outbox.columns] key names `{key}` as the Kafka key, and the \
                     forwarder refuses a row without one; set it with .column({key:?}, ..)",
                    event.event_id
                )));
            }
        }
        Ok(bytes)
    }

    fn check_id(&self, event_id: &str) -> Result<(), WriteError> {
        match rules::event_id(event_id, self.table.id_format()) {
            Ok(()) => Ok(()),
            Err(_) if event_id.is_empty() => Err(WriteError::EmptyEventId),
            Err(_) => Err(WriteError::NotAUuid {
                event_id: event_id.to_owned(),
            }),
        }
    }

    /// Refuses one of the event's parts the forwarder would take for a bad
    /// row: a payload not as `payload_format` says, text the column's
    /// character set stores as other bytes than UTF-8 where the forwarder
    /// reads UTF-8 (every part but the trace context and a bytes payload).
    fn check_part(
        &self,
        event: &NewEvent,
        part: Part,
        column: &TableColumn,
        value: &[u8],
    ) -> Result<(), WriteError> {
        let format = self.table.mapping().payload_format;
        let refused = |reason| self.refused_value(event, column, crate::rules::bad_row(reason));
        if part == Part::Payload {
            rules::payload(value, format).map_err(refused)?;
        }
        let bytes = matches!(part, Part::Traceparent | Part::Tracestate)
            || (part == Part::Payload && format == PayloadFormat::Bytes);
        let text = !bytes;
        match text.then(|| crate::rules::stored_as_utf8(column, value)) {
            Some(Some(reason)) => Err(refused(reason)),
            _ => Ok(()),
        }
    }

    /// Refuses a value the forwarder's row rules refuse in `column`.
    fn check_rules(
        &self,
        event: &NewEvent,
        column: &TableColumn,
        value: &Value,
    ) -> Result<(), WriteError> {
        let mapping = self.table.mapping();
        match crate::rules::refusal(column, value, mapping, self.table.partitions()) {
            Some(reason) => Err(self.refused_value(event, column, reason)),
            None => Ok(()),
        }
    }

    fn refused_value(&self, event: &NewEvent, column: &TableColumn, reason: String) -> WriteError {
        WriteError::Refused {
            event_id: event.event_id.clone(),
            column: column.name.clone(),
            table: self.qualified.clone(),
            reason,
        }
    }

    /// Refuses a number the integer column cannot hold, which a server
    /// outside strict mode would clamp to its limit silently.
    fn check_range(
        &self,
        event: &NewEvent,
        column: &TableColumn,
        value: i64,
    ) -> Result<(), WriteError> {
        match column.range {
            Some((min, max)) if !(min..=max).contains(&i128::from(value)) => {
                Err(WriteError::OutOfRange {
                    event_id: event.event_id.clone(),
                    column: column.name.clone(),
                    value,
                    min,
                    max,
                    table: self.qualified.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    fn check_length(
        &self,
        event: &NewEvent,
        column: &TableColumn,
        value: &[u8],
    ) -> Result<(), WriteError> {
        match column.fit(value) {
            Fit::Fits => Ok(()),
            Fit::TooLong(length) => Err(WriteError::TooLong {
                event_id: event.event_id.clone(),
                what: format!("`{}`", column.name),
                length,
                limit: column.limit.unwrap_or_default(),
                unit: column.unit.name(),
                holder: format!("the column of {}", self.qualified),
            }),
            Fit::Unstorable => Err(WriteError::Unstorable {
                event_id: event.event_id.clone(),
                column: column.name.clone(),
                table: self.qualified.clone(),
                charset: column.charset.clone().unwrap_or_default(),
            }),
        }
    }

    /// The columns beyond the event's parts that any of `events` sets, as
    /// the table names them; an event that does not set one gets the
    /// column's default, as it would appended alone.
    fn extra_columns(&self, events: &[NewEvent]) -> Vec<String> {
        let mut extra: Vec<String> = Vec::new();
        for (name, _) in events.iter().flat_map(|e| &e.columns) {
            if let Some(column) = find(&self.columns, name) {
                if !extra.contains(&column.name) {
                    extra.push(column.name.clone());
                }
            }
        }
        extra
    }

    /// Where the statement starting at `start` ends: at most
    /// [`ROWS_PER_STATEMENT`] rows, and under the packet limit.
    fn statement_end(&self, rows: &[Row], start: usize) -> usize {
        let budget = self.max_packet.saturating_sub(PACKET_HEADROOM);
        let mut bytes = 0;
        let mut end = start;
        while end < rows.len() && end - start < ROWS_PER_STATEMENT {
            if end > start && bytes + rows[end].bytes > budget {
                break;
            }
            bytes += rows[end].bytes;
            end += 1;
        }
        end
    }

    async fn insert(
        &self,
        tx: &mut Transaction<'_>,
        events: &[NewEvent],
        rows: &[Row],
        extra: &[String],
    ) -> Result<(), WriteError> {
        let names: Vec<String> = self
            .parts
            .iter()
            .map(|(_, c)| Ident(&c.name).to_string())
            .chain(extra.iter().map(|n| Ident(n).to_string()))
            .collect();
        let mut tuples = Vec::with_capacity(rows.len());
        let mut params = Vec::with_capacity(rows.len() * names.len());
        for (event, row) in events.iter().zip(rows) {
            let mut cells = vec!["?"; row.values.len()];
            params.extend(row.values.iter().cloned());
            for name in extra {
                // Set twice: the last value holds.
                let value = event
                    .columns
                    .iter()
                    .rev()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name));
                match value {
                    Some((_, value)) => {
                        cells.push("?");
                        params.push(value.clone());
                    }
                    // Not NULL: a topic or key column's default routes the
                    // event as it would appended alone.
                    None => cells.push("DEFAULT"),
                }
            }
            tuples.push(format!("({})", cells.join(", ")));
        }
        let statement = format!(
            "INSERT INTO {} ({}) VALUES {}",
            self.qualified,
            names.join(", "),
            tuples.join(", ")
        );
        tx.exec_drop(statement, Params::Positional(params))
            .await
            .map_err(|source| self.refused(events, source))
    }

    /// What the server's refusal of a statement of `events` means.
    fn refused(&self, events: &[NewEvent], source: mysql_async::Error) -> WriteError {
        if let mysql_async::Error::Server(server) = &source {
            let on_id_key = duplicate_key(&server.message)
                .is_some_and(|key| self.id_keys.iter().any(|k| k.eq_ignore_ascii_case(key)));
            if server.code == ER_DUP_ENTRY && on_id_key {
                // The entry names the id, unless the server shortened or
                // escaped it; then the statement's events are named.
                let entry = duplicate_entry(&server.message);
                let event_id = match events.iter().find(|e| Some(e.event_id.as_str()) == entry) {
                    Some(event) => event.event_id.clone(),
                    None => statement_events(events),
                };
                return WriteError::DuplicateEventId {
                    event_id,
                    table: self.qualified.clone(),
                };
            }
        }
        WriteError::Database {
            event_id: statement_events(events),
            table: self.qualified.clone(),
            source,
        }
    }
}

/// One event's values, and their size.
struct Row {
    values: Vec<Value>,
    bytes: u64,
}

/// `ER_DUP_ENTRY`: a unique key already holds the value.
const ER_DUP_ENTRY: u16 = 1062;

/// The events of one statement, as an error names them.
fn statement_events(events: &[NewEvent]) -> String {
    match events {
        [one] => one.event_id.clone(),
        [first, .., last] => format!(
            "{} .. {} ({} events)",
            first.event_id,
            last.event_id,
            events.len()
        ),
        [] => String::new(),
    }
}

/// The key of a `Duplicate entry 'x' for key 'k'` message, without the
/// table MySQL 8+ puts before it (`outbox_event.PRIMARY`).
fn duplicate_key(message: &str) -> Option<&str> {
    let key = message.rsplit_once("' for key '")?.1.strip_suffix('\'')?;
    Some(key.rsplit_once('.').map_or(key, |(_, k)| k))
}

/// The entry of a `Duplicate entry 'x' for key 'k'` message.
fn duplicate_entry(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("Duplicate entry '")?;
    let end = rest.rfind("' for key")?;
    Some(&rest[..end])
}

/// The table's column `name`, compared as MySQL compares column names.
fn find<'a>(columns: &'a [TableColumn], name: &str) -> Option<&'a TableColumn> {
    columns.iter().find(|c| c.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_of_a_duplicate_is_read_from_either_servers_message() {
        let mariadb = "Duplicate entry '0190a1b2-0000-7000-8000-000000000001' for key 'PRIMARY'";
        let mysql = "Duplicate entry 'it''s' for key 'outbox_event.PRIMARY'";
        assert_eq!(
            duplicate_entry(mariadb),
            Some("0190a1b2-0000-7000-8000-000000000001")
        );
        assert_eq!(duplicate_entry(mysql), Some("it''s"));
        assert_eq!(duplicate_entry("Lock wait timeout exceeded"), None);
        assert_eq!(duplicate_key(mariadb), Some("PRIMARY"));
        assert_eq!(duplicate_key(mysql), Some("PRIMARY"));
        assert_eq!(duplicate_key("Lock wait timeout exceeded"), None);
    }
}
