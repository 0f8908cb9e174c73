//! Table layouts: what a TABLE_MAP event announces, resolved once per
//! table id into the outbox columns' indexes (by name, from the optional
//! metadata), cached between transactions.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use mysql_common::binlog::consts::EventType;
use mysql_common::binlog::events::{Event, OptionalMetaExtractor, TableMapEvent};
use mysql_common::constants::ColumnType;
pub(super) use outbox_core::rules::TimeColumn as TimestampColumn;
use outbox_core::{BinlogPosition, DefiniteError};

use super::TransactionAssembler;

/// Table layouts kept between transactions; ids are reused rarely, so this
/// only bounds a server with very many tables.
pub(super) const MAX_CACHED_TABLES: usize = 4096;

/// Table id → the table map's bytes and, for outbox tables, the layout
/// resolved from them.
pub(super) type Layouts =
    HashMap<u64, (Vec<u8>, Option<Arc<TableLayout>>), BuildHasherDefault<TableIdHasher>>;

/// Hashes a table id with one multiplication: the layouts are looked up
/// for every rows and table map event, and the ids are the server's own
/// counter, not input to guard against.
#[derive(Default)]
pub(super) struct TableIdHasher(u64);

impl Hasher for TableIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: an odd multiple keeps consecutive ids apart in
        // the low bits (the bucket) and spreads them over the high bits
        // (the tag the probes compare).
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Column indexes of one outbox table, resolved by name from its table map.
#[derive(Debug)]
pub(super) struct TableLayout {
    pub(super) schema: Arc<str>,
    pub(super) table: Arc<str>,
    /// Column names in table order, for dead-letter rows.
    pub(super) names: Vec<String>,
    /// Per column: type, type metadata and signedness, to parse row images.
    pub(super) shape: Vec<(ColumnType, Vec<u8>, bool)>,
    pub(super) event_id: usize,
    pub(super) payload: usize,
    pub(super) event_type: Option<usize>,
    pub(super) aggregate_type: Option<usize>,
    pub(super) aggregate_id: Option<usize>,
    pub(super) event_version: Option<usize>,
    pub(super) key: Option<usize>,
    /// Header name → column, `[outbox.headers]` then the trace context.
    pub(super) headers: Vec<(Arc<str>, usize)>,
    pub(super) partition: Option<usize>,
    pub(super) timestamp: Option<(usize, TimestampColumn)>,
    pub(super) topic: Option<usize>,
    /// Every column some role reads, once per role: a column read by two
    /// roles is copied rather than moved out of the row.
    pub(super) roles: Vec<usize>,
    /// Per column: its width in a row image when no role reads it and the
    /// width is fixed by its type, so a row is read past it rather than
    /// into a value (a `TIMESTAMP(6)` becomes text in `mysql_common`).
    pub(super) skipped: Vec<Option<usize>>,
}

impl TableLayout {
    fn with_roles(mut self) -> Self {
        self.roles = self.read_by_roles();
        self.skipped = (0..self.shape.len())
            .map(|i| {
                let (column_type, metadata, _) = &self.shape[i];
                fixed_width(*column_type, metadata).filter(|_| !self.roles.contains(&i))
            })
            .collect();
        self
    }

    fn read_by_roles(&self) -> Vec<usize> {
        let mut roles = vec![self.event_id, self.payload];
        roles.extend(
            [
                self.event_type,
                self.aggregate_type,
                self.aggregate_id,
                self.event_version,
                self.key.filter(|&key| key != self.event_id),
                self.partition,
                self.timestamp.map(|(index, _)| index),
                self.topic,
            ]
            .into_iter()
            .flatten(),
        );
        roles.extend(self.headers.iter().map(|(_, index)| *index));
        roles
    }
}

/// The bytes a non-NULL value of a column of `column_type` (with its table
/// map `metadata`) takes in a row image, when its type fixes them: as
/// `mysql_common` reads them.
pub(super) fn fixed_width(column_type: ColumnType, metadata: &[u8]) -> Option<usize> {
    use ColumnType::*;
    // Fractional seconds take half as many bytes as digits, rounded up.
    let fraction = || match metadata.first().copied()? {
        digits @ 0..=6 => Some(usize::from(digits).div_ceil(2)),
        _ => None,
    };
    match column_type {
        MYSQL_TYPE_TINY => Some(1),
        MYSQL_TYPE_SHORT => Some(2),
        MYSQL_TYPE_INT24 => Some(3),
        MYSQL_TYPE_LONG | MYSQL_TYPE_FLOAT | MYSQL_TYPE_TIMESTAMP => Some(4),
        MYSQL_TYPE_LONGLONG | MYSQL_TYPE_DOUBLE => Some(8),
        MYSQL_TYPE_TIMESTAMP2 => Some(4 + fraction()?),
        MYSQL_TYPE_DATETIME2 => Some(5 + fraction()?),
        MYSQL_TYPE_TIME2 => Some(3 + fraction()?),
        _ => None,
    }
}

/// How a column of `column_type` holds a `timestamp_column`'s time;
/// `None` for a type that cannot be one.
pub(super) fn time_column(column_type: ColumnType) -> Option<TimestampColumn> {
    use ColumnType::*;
    match column_type {
        MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2 => Some(TimestampColumn::DateTime),
        MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2 => Some(TimestampColumn::Timestamp),
        // Only a BIGINT holds today's milliseconds.
        MYSQL_TYPE_LONGLONG => Some(TimestampColumn::EpochMillis),
        _ => None,
    }
}

impl TransactionAssembler {
    pub(super) fn on_table_map(
        &mut self,
        tme: &TableMapEvent<'_>,
        bytes: &[u8],
    ) -> Result<(), DefiniteError> {
        let schema = tme.database_name();
        let table = tme.table_name();
        let layout = if self.config.tables.matches(&schema, &table) {
            Some(Arc::new(self.resolve_layout(tme, &schema, &table)?))
        } else {
            None
        };
        self.layouts
            .insert(tme.table_id(), (bytes.to_vec(), layout));
        Ok(())
    }

    pub(super) fn resolve_layout(
        &self,
        tme: &TableMapEvent<'_>,
        schema: &str,
        table: &str,
    ) -> Result<TableLayout, DefiniteError> {
        let meta = OptionalMetaExtractor::new(tme.iter_optional_meta()).map_err(|e| {
            self.unsupported(
                EventType::TABLE_MAP_EVENT as u8,
                format!("optional metadata: {e}"),
            )
        })?;
        let names = meta
            .iter_column_name()
            .map(|name| name.map(|n| n.name().into_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                self.unsupported(
                    EventType::TABLE_MAP_EVENT as u8,
                    format!("column names: {e}"),
                )
            })?;
        // Without binlog_row_metadata=FULL the table map has no names; columns
        // can then only be mapped by position, written `@1`, `@2`, ... as
        // mysqlbinlog prints them.
        let by_position = names.is_empty();
        let names: Vec<String> = if by_position {
            (1..=tme.columns_count()).map(|i| format!("@{i}")).collect()
        } else {
            names
        };
        let shape = row_shape(tme, &meta)
            .map_err(|reason| self.unsupported(EventType::TABLE_MAP_EVENT as u8, reason))?;
        self.layout_of(schema, table, names, by_position, shape, self.here())
    }

    /// The layout of `schema`.`table` with these column names and shapes
    /// (`by_position`: the names are `@1`, `@2`, ... for want of real
    /// ones), announced at `here`.
    pub(super) fn layout_of(
        &self,
        schema: &str,
        table: &str,
        names: Vec<String>,
        by_position: bool,
        shape: Vec<(ColumnType, Vec<u8>, bool)>,
        here: BinlogPosition,
    ) -> Result<TableLayout, DefiniteError> {
        let columns = Finder {
            schema,
            table,
            names: &names,
            by_position,
            here,
        };
        let mapping = &self.config.columns;
        let mut headers = self
            .config
            .headers
            .iter()
            .map(|(header, column)| Ok((Arc::from(header.as_str()), columns.required(column)?)))
            .collect::<Result<Vec<_>, DefiniteError>>()?;
        for (header, column) in [
            ("traceparent", &mapping.traceparent),
            ("tracestate", &mapping.tracestate),
        ] {
            if let Some(index) = columns.find(column) {
                headers.push((Arc::from(header), index));
            }
        }
        let named = |column: &Option<String>| column.as_deref().map(|c| columns.required(c));
        Ok(TableLayout {
            event_id: columns.required(&mapping.event_id)?,
            payload: columns.required(&mapping.payload)?,
            event_type: columns.find(&mapping.event_type),
            aggregate_type: columns.find(&mapping.aggregate_type),
            aggregate_id: columns.find(&mapping.aggregate_id),
            event_version: columns.find(&mapping.event_version),
            key: named(&mapping.key).transpose()?,
            headers,
            partition: named(&mapping.partition_column).transpose()?,
            timestamp: columns.timestamp(mapping.timestamp_column.as_deref(), &shape)?,
            topic: named(&mapping.topic_column).transpose()?,
            schema: schema.into(),
            table: table.into(),
            shape,
            names,
            roles: Vec::new(),
            skipped: Vec::new(),
        }
        .with_roles())
    }
}

/// Finds the mapped columns of one table map by name.
struct Finder<'a> {
    schema: &'a str,
    table: &'a str,
    names: &'a [String],
    by_position: bool,
    here: BinlogPosition,
}

impl Finder<'_> {
    fn find(&self, column: &str) -> Option<usize> {
        self.names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(column))
    }

    /// A column the configuration names: its absence stops the stream.
    fn required(&self, column: &str) -> Result<usize, DefiniteError> {
        self.find(column).ok_or_else(|| {
            if self.by_position {
                DefiniteError::InvalidSystemSetting {
                    setting: "binlog_row_metadata".into(),
                    expected: "FULL".into(),
                    actual: format!(
                        "MINIMAL (the table map of {}.{} at {} has no column names, so \
                         `{column}` cannot be found)",
                        self.schema, self.table, self.here
                    ),
                }
            } else {
                self.bad(format!(
                    "the table has no column `{column}` (columns: {}); map it under [outbox.columns]",
                    self.names.join(", ")
                ))
            }
        })
    }

    /// The timestamp column, if one is named, and how it holds its time.
    fn timestamp(
        &self,
        column: Option<&str>,
        shape: &[(ColumnType, Vec<u8>, bool)],
    ) -> Result<Option<(usize, TimestampColumn)>, DefiniteError> {
        let Some(column) = column else {
            return Ok(None);
        };
        let index = self.required(column)?;
        let kind = time_column(shape[index].0).ok_or_else(|| {
            self.bad(format!(
                "timestamp_column `{column}` is of type {:?}; use DATETIME (read as UTC), \
                 TIMESTAMP, or a BIGINT of milliseconds since the epoch",
                shape[index].0
            ))
        })?;
        Ok(Some((index, kind)))
    }

    fn bad(&self, reason: String) -> DefiniteError {
        DefiniteError::BadRow {
            table: format!("{}.{}", self.schema, self.table),
            position: self.here.clone(),
            row_index: 0,
            event_id: None,
            reason,
        }
    }
}

/// The table id of a TABLE_MAP or rows event: its first 6 bytes, little-endian.
pub(super) fn table_id_of(event: &Event) -> u64 {
    let data = event.data();
    let mut id = [0u8; 8];
    let n = data.len().min(6);
    id[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(id)
}

/// `name` without its last 4 bytes if they are the CRC32 of the event
/// (header and body without them); `name` unchanged otherwise.
pub(super) fn strip_trailing_checksum<'a>(event: &Event, name: &'a [u8]) -> &'a [u8] {
    use mysql_common::proto::MySerialize;
    let data = event.data();
    if name.len() < 4 || data.len() < 4 {
        return name;
    }
    let (body, crc) = data.split_at(data.len() - 4);
    let mut header = Vec::with_capacity(19);
    event.header().serialize(&mut header);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header);
    hasher.update(body);
    if hasher.finalize().to_le_bytes() == crc {
        &name[..name.len() - 4]
    } else {
        name
    }
}

/// Column types, metadata and signedness of a table map, in column order.
pub(super) fn row_shape(
    tme: &TableMapEvent<'_>,
    meta: &OptionalMetaExtractor<'_>,
) -> Result<Vec<(ColumnType, Vec<u8>, bool)>, String> {
    let mut signedness = meta.iter_signedness();
    (0..tme.columns_count() as usize)
        .map(|i| {
            let column_type = match tme.get_column_type(i) {
                Ok(Some(t)) => t,
                Ok(None) => return Err(format!("column {i} has no type")),
                Err(e) => return Err(format!("column {i}: {e}")),
            };
            let unsigned = column_type
                .is_numeric_type()
                .then(|| signedness.next())
                .flatten()
                .unwrap_or_default();
            let metadata = tme.get_column_metadata(i).unwrap_or(&[]).to_vec();
            Ok((column_type, metadata, unsigned))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use mysql_common::binlog::value::BinlogValue;
    use mysql_common::io::ParseBuf;

    use super::*;

    /// What `mysql_common` reads of a value of this column, from bytes
    /// longer than any fixed width (a positive time: the sign bit set).
    fn read_by_mysql_common(column_type: ColumnType, metadata: &[u8], unsigned: bool) -> usize {
        let image: Vec<u8> = [0x80].into_iter().chain(1u8..32).collect();
        let mut buf = ParseBuf(&image);
        buf.parse::<BinlogValue<'_>>((column_type, metadata, unsigned, false))
            .expect("the value reads");
        image.len() - buf.0.len()
    }

    #[test]
    fn a_fixed_width_is_what_mysql_common_reads_of_the_value() {
        use ColumnType::*;
        let mut checked = 0;
        for column_type in [
            MYSQL_TYPE_TINY,
            MYSQL_TYPE_SHORT,
            MYSQL_TYPE_INT24,
            MYSQL_TYPE_LONG,
            MYSQL_TYPE_FLOAT,
            MYSQL_TYPE_TIMESTAMP,
            MYSQL_TYPE_LONGLONG,
            MYSQL_TYPE_DOUBLE,
            MYSQL_TYPE_TIMESTAMP2,
            MYSQL_TYPE_DATETIME2,
            MYSQL_TYPE_TIME2,
        ] {
            for digits in 0..=6u8 {
                let metadata = [digits];
                let width = fixed_width(column_type, &metadata).expect("a fixed width");
                for unsigned in [false, true] {
                    assert_eq!(
                        width,
                        read_by_mysql_common(column_type, &metadata, unsigned),
                        "{column_type:?} with {digits} fractional digits"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 11 * 7 * 2);
    }

    #[test]
    fn a_column_whose_width_varies_has_none() {
        use ColumnType::*;
        for column_type in [
            MYSQL_TYPE_VARCHAR,
            MYSQL_TYPE_VAR_STRING,
            MYSQL_TYPE_STRING,
            MYSQL_TYPE_BLOB,
            MYSQL_TYPE_JSON,
            MYSQL_TYPE_NEWDECIMAL,
            MYSQL_TYPE_BIT,
            MYSQL_TYPE_ENUM,
        ] {
            assert_eq!(fixed_width(column_type, &[0, 0]), None, "{column_type:?}");
        }
        // Fractional digits past MySQL's six are not guessed at.
        assert_eq!(fixed_width(MYSQL_TYPE_TIMESTAMP2, &[7]), None);
        assert_eq!(fixed_width(MYSQL_TYPE_DATETIME2, &[]), None);
    }
}
