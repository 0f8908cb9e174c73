//! WRITE_ROWS rows of outbox tables into outbox events (or dead letters,
//! under that policy): each row decoded by column name.

use std::sync::Arc;

use mysql_common::binlog::events::{Event, EventData, RowsEventData};
use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;
use mysql_common::value::Value;
use outbox_core::{
    BadRowPolicy, BinlogPosition, ChangePolicy, DeadLetter, DefiniteError, MessageShape,
    OutboxEvent, RowOrigin,
};

use outbox_core::rules;
use outbox_core::table::PayloadFormat;

use super::layout::{table_id_of, TableLayout};
use super::shape::{self, column_bytes};
use super::TransactionAssembler;

impl TransactionAssembler {
    pub(super) fn on_write_rows(&mut self, event: &Event) -> Result<(), DefiniteError> {
        let Some((rows_event, layout)) = self.outbox_rows(event)? else {
            return Ok(());
        };
        if !self.in_transaction {
            self.begin()?;
        }
        let (rows_data, after_image) = match &rows_event {
            RowsEventData::WriteRowsEvent(ev) => (ev.rows_data(), ev.columns_after_image()),
            RowsEventData::WriteRowsEventV1(ev) => (ev.rows_data(), ev.columns_after_image()),
            _ => return Ok(()),
        };
        let present: Vec<bool> = after_image.iter().map(|b| *b).collect();
        let mut rows = ParseBuf(rows_data);
        let mut row_index: u32 = match self.rows_numbered {
            (start, next) if self.open_payload.is_some() && start == self.outer_start => next,
            _ => 0,
        };
        while !rows.is_empty() {
            let buffered = self.take_row(&layout, &present, &mut rows, row_index)?;
            row_index += 1;
            self.buffered_bytes += buffered;
            if self.buffered_bytes > self.config.max_transaction_bytes {
                return Err(DefiniteError::TransactionTooLarge {
                    start: BinlogPosition::new(self.file.clone(), self.transaction_start),
                    limit_bytes: self.config.max_transaction_bytes,
                });
            }
        }
        self.rows_numbered = (self.outer_start, row_index);
        Ok(())
    }

    /// The rows event `event` and its table's layout, or `None` when the
    /// table is not an outbox table.
    fn outbox_rows<'e>(
        &self,
        event: &'e Event,
    ) -> Result<Option<(RowsEventData<'e>, Arc<TableLayout>)>, DefiniteError> {
        // Rows of a table mapped as not an outbox table (most rows, on a
        // busy primary) are skipped before their event is parsed.
        if let Some((_, None)) = self.layouts.get(&table_id_of(event)) {
            return Ok(None);
        }
        let raw_type = event.header().event_type_raw();
        let data = event
            .read_data()
            .map_err(|e| self.unsupported(raw_type, e.to_string()))?;
        let Some(EventData::RowsEvent(rows_event)) = data else {
            return Err(self.unsupported(raw_type, "not a rows event"));
        };
        let table_id = rows_event.table_id();
        match self.layouts.get(&table_id) {
            Some((_, Some(layout))) => Ok(Some((rows_event, layout.clone()))),
            Some((_, None)) => Ok(None),
            None => Err(self.unsupported(
                raw_type,
                format!("rows event for table id {table_id} without a preceding table map"),
            )),
        }
    }

    /// An UPDATE or DELETE rows event (`change`): of an outbox table, it is
    /// ignored, warned about and counted, or refused, as the policy says.
    pub(super) fn on_changed_rows(
        &mut self,
        event: &Event,
        change: &'static str,
    ) -> Result<(), DefiniteError> {
        if self.change_policy(change).1 == ChangePolicy::Ignore {
            return Ok(());
        }
        let Some((rows_event, layout)) = self.outbox_rows(event)? else {
            return Ok(());
        };
        let (rows, event_id) = changed_rows(&rows_event, &layout);
        let table = format!("{}.{}", layout.schema, layout.table);
        self.outbox_rows_changed(change, table, event_id, rows, "")
    }

    /// `on_update` or `on_delete`, by `change`: the setting's name and value.
    pub(super) fn change_policy(&self, change: &str) -> (&'static str, ChangePolicy) {
        if change == "UPDATE" {
            ("on_update", self.config.on_update)
        } else {
            ("on_delete", self.config.on_delete)
        }
    }

    /// `rows` outbox rows of `table` changed (`logged`: how, for the
    /// warning): refused under `fail`, warned about and counted under
    /// `warn`.
    pub(super) fn outbox_rows_changed(
        &mut self,
        change: &'static str,
        table: String,
        event_id: Option<String>,
        rows: u32,
        logged: &str,
    ) -> Result<(), DefiniteError> {
        let (setting, policy) = self.change_policy(change);
        match policy {
            ChangePolicy::Ignore => {}
            ChangePolicy::Fail => {
                return Err(DefiniteError::OutboxRowChanged {
                    change,
                    setting,
                    table,
                    position: self.here(),
                    event_id,
                })
            }
            ChangePolicy::Warn => {
                tracing::warn!(position = %self.here(), %table, rows, event_id = event_id.as_deref().unwrap_or("?"), "{change} of outbox rows{logged}: not events, nothing is published for them ({setting} = \"warn\")");
                self.changed_rows += rows;
            }
        }
        Ok(())
    }

    /// Decodes the next row image of `rows` into an event, or into a dead
    /// letter under that policy; returns the bytes it buffers.
    fn take_row<'a>(
        &mut self,
        layout: &'a TableLayout,
        present: &[bool],
        rows: &mut ParseBuf<'a>,
        row_index: u32,
    ) -> Result<usize, DefiniteError> {
        let origin = || RowOrigin {
            schema: layout.schema.clone(),
            table: layout.table.clone(),
            event_position: self.here(),
            row_index,
        };
        let image = rows.0;
        let row = parse_row(&layout.shape, present, &layout.skipped, rows)
            .map_err(|e| bad_row(&origin(), None, format!("row image: {e}")))?;
        // The origin moves into the event; a refused row builds it again.
        match self.decode_row(layout, row, origin()) {
            Ok(event) => {
                let len = event.buffered_len();
                self.events.push(event);
                Ok(len)
            }
            Err(DefiniteError::BadRow {
                event_id, reason, ..
            }) if self.config.bad_rows == BadRowPolicy::DeadLetter => {
                let origin = origin();
                tracing::warn!(position = %origin.event_position, row = origin.row_index, table = %origin.qualified_table(), %reason, "bad outbox row goes to the dead-letter topic");
                // decode_row took the row apart: read its image again, whole.
                let row = parse_row(&layout.shape, present, &[], &mut ParseBuf(image))
                    .map_err(|e| bad_row(&origin, None, format!("row image: {e}")))?;
                let dead = DeadLetter {
                    row: row_json(&layout.names, &row),
                    origin,
                    event_id,
                    reason,
                };
                let len = dead.row.len();
                self.dead_letters.push(dead);
                Ok(len)
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn decode_row(
        &self,
        layout: &TableLayout,
        row: Vec<Option<BinlogValue<'_>>>,
        origin: RowOrigin,
    ) -> Result<OutboxEvent, DefiniteError> {
        if row.iter().any(Option::is_none) {
            return Err(DefiniteError::InvalidSystemSetting {
                setting: "binlog_row_image".into(),
                expected: "FULL".into(),
                actual: format!(
                    "a row of {}.{} at {} with {} of {} columns",
                    layout.schema,
                    layout.table,
                    origin.event_position,
                    row.len(),
                    layout.names.len()
                ),
            });
        }
        let key = layout.key.filter(|&key| key != layout.event_id);
        let mut columns = Columns {
            row,
            roles: &layout.roles,
            origin,
        };
        let event_id = columns.required(layout.event_id, "event_id is NULL", "event_id", None)?;
        let event_id = String::from_utf8(event_id)
            .map_err(|_| columns.bad(None, "event_id is not UTF-8 text".into()))?;
        if let Err(reason) = rules::event_id(&event_id, self.config.event_id_format) {
            return Err(columns.bad(Some(&event_id), reason));
        }
        let id = Some(event_id.as_str());
        let event_type = columns.text(layout.event_type, "event_type", id)?;
        let aggregate_type = columns.text(layout.aggregate_type, "aggregate_type", id)?;
        let aggregate_id = columns.text(layout.aggregate_id, "aggregate_id", id)?;
        let event_version = columns.text(layout.event_version, "event_version", id)?;
        let key = match key {
            None => None,
            Some(index) => Some(columns.required(index, "the key column is NULL", "key", id)?),
        };
        let payload = self.payload(&mut columns, layout.payload, id)?;
        let shape = columns.shape(layout, id)?;
        let origin = columns.origin;
        Ok(OutboxEvent {
            event_id,
            event_type,
            aggregate_type,
            aggregate_id,
            event_version,
            key,
            payload,
            // Known at the transaction's end (TransactionAssembler::commit).
            committed_at_ms: 0,
            shape,
            origin,
        })
    }

    /// The payload as `payload_format` says it must be; NULL is a tombstone
    /// when `tombstone_on_null_payload` allows it.
    fn payload(
        &self,
        columns: &mut Columns<'_>,
        index: usize,
        id: Option<&str>,
    ) -> Result<Option<Vec<u8>>, DefiniteError> {
        let value = columns.value(index);
        // MySQL's binary JSON is written as JSON text by `json_text`, whose
        // random-input tests hold it to valid JSON: not parsed again.
        let written_as_json = matches!(value, Some(BinlogValue::Jsonb(_)))
            && self.config.columns.payload_format == PayloadFormat::Json;
        let payload =
            match column_bytes(value) {
                Ok(Some(bytes)) => bytes,
                Ok(None) if self.config.tombstone_on_null_payload => return Ok(None),
                Ok(None) => return Err(columns.bad(
                    id,
                    "payload is NULL (set [outbox] tombstone_on_null_payload = true to publish \
                     it as a tombstone)"
                        .into(),
                )),
                Err(e) => return Err(columns.bad(id, format!("payload: {e}"))),
            };
        if written_as_json {
            return Ok(Some(payload));
        }
        match rules::payload(&payload, self.config.columns.payload_format) {
            Ok(()) => Ok(Some(payload)),
            Err(reason) => Err(columns.bad(id, reason)),
        }
    }
}

/// How many rows an UPDATE or DELETE event changed (each a before image,
/// an UPDATE's followed by an after image) and the first row's event id,
/// as far as the images can be read. A MySQL partial JSON update's after
/// images are JSON diffs: only its first row is counted.
fn changed_rows(rows_event: &RowsEventData<'_>, layout: &TableLayout) -> (u32, Option<String>) {
    let before: Vec<bool> = rows_event
        .columns_before_image()
        .map(|image| image.iter().map(|b| *b).collect())
        .unwrap_or_default();
    let after: Option<Vec<bool>> = match rows_event {
        RowsEventData::UpdateRowsEvent(_) | RowsEventData::UpdateRowsEventV1(_) => rows_event
            .columns_after_image()
            .map(|image| image.iter().map(|b| *b).collect()),
        _ => None,
    };
    let partial = matches!(rows_event, RowsEventData::PartialUpdateRowsEvent(_));
    let mut rows = ParseBuf(rows_event.rows_data());
    let (mut count, mut event_id) = (0, None);
    while !rows.is_empty() {
        let Ok(mut row) = parse_row(&layout.shape, &before, &[], &mut rows) else {
            break;
        };
        if count == 0 {
            event_id = column_bytes(row[layout.event_id].take())
                .ok()
                .flatten()
                .map(|id| String::from_utf8_lossy(&id).into_owned());
        }
        count += 1;
        if partial {
            break;
        }
        if let Some(after) = &after {
            if parse_row(&layout.shape, after, &[], &mut rows).is_err() {
                break;
            }
        }
    }
    (count.max(1), event_id)
}

/// The columns of one row, each moved out once, or copied when it serves
/// two roles (e.g. the key is aggregate_id).
struct Columns<'a> {
    row: Vec<Option<BinlogValue<'a>>>,
    /// The columns the layout maps, once per role.
    roles: &'a [usize],
    origin: RowOrigin,
}

impl<'a> Columns<'a> {
    fn read(&mut self, index: usize) -> Result<Option<Vec<u8>>, String> {
        column_bytes(self.value(index))
    }

    /// The value of column `index`, moved out of the row unless another
    /// role reads it too.
    fn value(&mut self, index: usize) -> Option<BinlogValue<'a>> {
        let shared = self.roles.iter().filter(|&&role| role == index).count() > 1;
        if shared {
            self.row[index].clone()
        } else {
            self.row[index].take()
        }
    }

    /// What the optional columns say about the message, `None` when nothing.
    fn shape(
        &mut self,
        layout: &TableLayout,
        id: Option<&str>,
    ) -> Result<Option<Box<MessageShape>>, DefiniteError> {
        let mut shape = MessageShape::default();
        for (header, index) in &layout.headers {
            let value = self.value(*index);
            match shape::header_value(value, layout.shape[*index].0) {
                Ok(Some(bytes)) => shape.headers.push((header.clone(), bytes)),
                Ok(None) => {}
                Err(e) => return Err(self.bad(id, format!("header {header}: {e}"))),
            }
        }
        if let Some(index) = layout.partition {
            let value = self.value(index);
            shape.partition = shape::partition(value, layout.shape[index].0)
                .map_err(|e| self.bad(id, format!("partition_column: {e}")))?;
        }
        if let Some((index, kind)) = layout.timestamp {
            let value = self.value(index);
            shape.timestamp_ms = shape::timestamp_ms(value, kind)
                .map_err(|e| self.bad(id, format!("timestamp_column: {e}")))?;
        }
        shape.topic = self.text(layout.topic, "topic_column", id)?;
        Ok((!shape.is_empty()).then(|| Box::new(shape)))
    }

    /// A column that must not be NULL; `null` says so when it is.
    fn required(
        &mut self,
        index: usize,
        null: &str,
        name: &str,
        event_id: Option<&str>,
    ) -> Result<Vec<u8>, DefiniteError> {
        match self.read(index) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(self.bad(event_id, null.into())),
            Err(e) => Err(self.bad(event_id, format!("{name}: {e}"))),
        }
    }

    /// A text column the layout may not map, NULL allowed.
    fn text(
        &mut self,
        index: Option<usize>,
        name: &str,
        event_id: Option<&str>,
    ) -> Result<Option<String>, DefiniteError> {
        let Some(index) = index else { return Ok(None) };
        match self.read(index) {
            Ok(Some(bytes)) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| self.bad(event_id, format!("{name} is not UTF-8 text"))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.bad(event_id, format!("{name}: {e}"))),
        }
    }

    fn bad(&self, event_id: Option<&str>, reason: String) -> DefiniteError {
        bad_row(&self.origin, event_id, reason)
    }
}

pub(super) fn bad_row(origin: &RowOrigin, event_id: Option<&str>, reason: String) -> DefiniteError {
    DefiniteError::BadRow {
        table: origin.qualified_table(),
        position: origin.event_position.clone(),
        row_index: origin.row_index,
        event_id: event_id.map(str::to_owned),
        reason,
    }
}

/// One row image of a WRITE_ROWS event: a null bitmap over the present
/// columns, then each present non-NULL value. `None` marks a column absent
/// from the image (binlog_row_image not FULL).
///
/// Parsed here rather than with `mysql_common`'s `BinlogRow`, which builds
/// column descriptions for every row; the layout already knows them.
///
/// A column with a width in `skipped` (none when it is empty: the whole
/// row) is read past, and stands in the row as NULL: nothing reads it.
pub(super) fn parse_row<'a>(
    shape: &'a [(ColumnType, Vec<u8>, bool)],
    present: &[bool],
    skipped: &[Option<usize>],
    rows: &mut ParseBuf<'a>,
) -> std::io::Result<Vec<Option<BinlogValue<'a>>>> {
    let short = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "row image ends early");
    if present.len() != shape.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the rows event has {} columns, its table map {}",
                present.len(),
                shape.len()
            ),
        ));
    }
    let image_columns = present.iter().filter(|p| **p).count();
    let nulls = rows
        .checked_eat(image_columns.div_ceil(8))
        .ok_or_else(short)?;
    let mut values = Vec::with_capacity(shape.len());
    let mut image_index = 0;
    for (i, (column_type, metadata, unsigned)) in shape.iter().enumerate() {
        if !present.get(i).copied().unwrap_or(false) {
            values.push(None);
            continue;
        }
        let null = nulls[image_index / 8] & (1 << (image_index % 8)) != 0;
        image_index += 1;
        let skip = skipped.get(i).copied().flatten();
        values.push(Some(if null {
            BinlogValue::Value(Value::NULL)
        } else if let Some(width) = skip {
            rows.checked_eat(width).ok_or_else(short)?;
            BinlogValue::Value(Value::NULL)
        } else if *column_type == ColumnType::MYSQL_TYPE_TIME2
            && matches!(metadata.first(), Some(1 | 2))
        {
            time_in_hundredths(rows).ok_or_else(short)?
        } else {
            rows.parse::<BinlogValue<'a>>((*column_type, metadata.as_slice(), *unsigned, false))?
        }));
    }
    Ok(values)
}

/// A TIME(1) or TIME(2) value, read as MySQL's `my_time_packed_from_binary`
/// reads it: for a negative one with a fraction, `mysql_common` 0.37
/// subtracts 256 from the fraction in unsigned arithmetic (a panic in a
/// debug build, a time days off in a release one). `None` when the row
/// ends first.
fn time_in_hundredths<'a>(rows: &mut ParseBuf<'_>) -> Option<BinlogValue<'a>> {
    use mysql_common::binlog::misc::{my_packed_time_make, time_from_packed, TIMEF_INT_OFS};
    let &[a, b, c, fraction] = rows.checked_eat(4)? else {
        return None;
    };
    let mut int_part = i64::from(u32::from_be_bytes([0, a, b, c])) - TIMEF_INT_OFS;
    let mut fraction = i64::from(fraction);
    if int_part < 0 && fraction > 0 {
        int_part += 1;
        fraction -= 0x100;
    }
    let packed = my_packed_time_make(int_part, fraction * 10_000);
    Some(BinlogValue::Value(time_from_packed(packed)))
}

/// The row as a JSON object of column name to value (text as strings,
/// numbers as numbers, binary as lowercase hex), for the dead-letter topic.
pub(super) fn row_json(names: &[String], row: &[Option<BinlogValue<'_>>]) -> Vec<u8> {
    let mut object = serde_json::Map::new();
    for (name, value) in names.iter().zip(row) {
        let value = match value.as_ref() {
            None | Some(BinlogValue::Value(Value::NULL)) => serde_json::Value::Null,
            Some(BinlogValue::Value(Value::Int(n))) => (*n).into(),
            Some(BinlogValue::Value(Value::UInt(n))) => (*n).into(),
            Some(value) => match column_bytes(Some(value.clone())) {
                Ok(Some(bytes)) => match String::from_utf8(bytes) {
                    Ok(text) => DeadLetter::clip(&text).into(),
                    Err(e) => DeadLetter::clip(&outbox_core::hex::hex(e.as_bytes())).into(),
                },
                Ok(None) => serde_json::Value::Null,
                Err(e) => format!("<{e}>").into(),
            },
        };
        object.insert(name.clone(), value);
    }
    serde_json::to_vec(&object).expect("JSON values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TIME(`digits`) value as MySQL's `my_time_packed_to_binary` writes
    /// it: the packed time's integer part (rounded down) after an offset
    /// in three big-endian bytes, then its fraction's remainder (negative
    /// for a negative time) in hundredths, one byte.
    fn time_image(negative: bool, hms: (i64, i64, i64), hundredths: i64) -> Vec<u8> {
        let (h, m, s) = hms;
        let magnitude = ((h << 12 | m << 6 | s) << 24) + hundredths * 10_000;
        let packed = if negative { -magnitude } else { magnitude };
        let int_part = packed >> 24;
        let fraction = (packed % (1 << 24)) / 10_000;
        let stored = (0x80_0000 + int_part).to_be_bytes();
        // The row's null bitmap, then the value.
        let mut image = vec![0];
        image.extend_from_slice(&stored[5..]);
        image.push(fraction as i8 as u8);
        image
    }

    /// TIME(1) and TIME(2) share the layout; a TIME(1) holds tenths only,
    /// and the hundredths here read the same way.
    #[test]
    fn negative_times_with_hundredths_read_as_the_server_wrote_them() {
        let cases = [
            (
                false,
                (0, 0, 1),
                50,
                Value::Time(false, 0, 0, 0, 1, 500_000),
            ),
            (true, (0, 0, 1), 50, Value::Time(true, 0, 0, 0, 1, 500_000)),
            (true, (0, 0, 0), 1, Value::Time(true, 0, 0, 0, 0, 10_000)),
            (
                true,
                (12, 34, 56),
                78,
                Value::Time(true, 0, 12, 34, 56, 780_000),
            ),
            (
                true,
                (838, 59, 58),
                99,
                Value::Time(true, 34, 22, 59, 58, 990_000),
            ),
            (true, (1, 0, 0), 0, Value::Time(true, 0, 1, 0, 0, 0)),
        ];
        for digits in [1, 2] {
            let shape = [(ColumnType::MYSQL_TYPE_TIME2, vec![digits], false)];
            for (negative, hms, hundredths, expected) in cases.clone() {
                let image = time_image(negative, hms, hundredths);
                let mut buf = ParseBuf(&image);
                let row = parse_row(&shape, &[true], &[], &mut buf).unwrap();
                assert!(buf.is_empty(), "the whole value is read");
                match &row[..] {
                    [Some(BinlogValue::Value(value))] => assert_eq!(
                        value, &expected,
                        "TIME({digits}) {negative} {hms:?} .{hundredths:02}"
                    ),
                    other => panic!("not one value: {other:?}"),
                }
            }
        }
    }
}
