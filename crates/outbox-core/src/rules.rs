//! What a row must hold for the forwarder to publish it: one set of rules,
//! applied by the decoder to every row it reads and by the writer to every
//! event before it sends it, so that a row the writer accepts never stops
//! the stream as a bad row. Each rule gives the reason a bad row names.

use crate::table::{EventIdFormat, PayloadFormat};

/// An event id the consumers can deduplicate on: not empty, and a UUID
/// when `format` asks for one.
pub fn event_id(id: &str, format: EventIdFormat) -> Result<(), String> {
    if id.is_empty() {
        return Err(
            "event_id is empty (every event needs an id of its own: consumers deduplicate on it)"
                .into(),
        );
    }
    if format == EventIdFormat::Uuid && uuid::Uuid::try_parse(id).is_err() {
        return Err(format!(
            "event_id {id:?} is not a UUID (set [outbox] event_id_format = \"any\" to accept any \
             text)"
        ));
    }
    Ok(())
}

/// A payload as `payload_format` says it must be.
pub fn payload(bytes: &[u8], format: PayloadFormat) -> Result<(), String> {
    match format {
        PayloadFormat::Json => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map(drop)
            .map_err(|e| format!("payload is not valid JSON: {e}")),
        PayloadFormat::Text => std::str::from_utf8(bytes)
            .map(drop)
            .map_err(|e| format!("payload is not UTF-8 text: {e}")),
        PayloadFormat::Bytes => Ok(()),
    }
}

/// Whether Kafka takes `b` in a topic name.
pub fn is_topic_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Whether Kafka takes `name` as a topic name.
pub fn is_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name.bytes().all(is_topic_byte)
}

/// The topic a `topic_column` names.
pub fn topic_column(topic: &str) -> Result<(), String> {
    match is_topic_name(topic) {
        true => Ok(()),
        false => Err(format!(
            "topic_column {topic:?} is not a topic name (1 to 249 of a-z A-Z 0-9 . _ -)"
        )),
    }
}

/// How a `timestamp_column` holds its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeColumn {
    /// `DATETIME`: a calendar time, read as UTC.
    DateTime,
    /// `TIMESTAMP`: seconds since the epoch (with a fraction).
    Timestamp,
    /// A `BIGINT` column: milliseconds since the epoch.
    EpochMillis,
}

impl TimeColumn {
    /// The kind of a column of `data_type` as information_schema names it;
    /// `None` for a type that cannot be a `timestamp_column`.
    pub fn of_data_type(data_type: &str) -> Option<Self> {
        match data_type.to_ascii_lowercase().as_str() {
            "datetime" => Some(TimeColumn::DateTime),
            "timestamp" => Some(TimeColumn::Timestamp),
            // Only a BIGINT holds today's milliseconds.
            "bigint" => Some(TimeColumn::EpochMillis),
            _ => None,
        }
    }
}

/// A record timestamp of `ms` since the epoch, read from a column of `kind`.
pub fn timestamp_ms(ms: i64, kind: TimeColumn) -> Result<(), String> {
    // Kafka refuses negative timestamps other than -1 ("none").
    if ms < 0 {
        return Err(format!("{ms} ms is before 1970"));
    }
    // 10^11 ms is 1973-03-03, and 10^11 s thousands of years away: a value
    // below it was almost surely written in seconds.
    if kind == TimeColumn::EpochMillis && ms < 100_000_000_000 {
        return Err(format!(
            "{ms} looks like seconds since the epoch, not milliseconds (timestamp_column takes \
             a BIGINT of milliseconds)"
        ));
    }
    Ok(())
}

/// A calendar time's year, as a `DATETIME` column holds it: before 1970 a
/// record cannot carry it (year 0 is the zero date, which means no time).
pub fn calendar_year(year: i64) -> Result<(), String> {
    match year {
        1..=1969 => Err(format!("a time in {year} is before 1970")),
        _ => Ok(()),
    }
}

/// The partition a `partition_column` integer names, among `count` when
/// the topic's partition count is known.
pub fn partition_number(n: i64, count: Option<i32>) -> Result<i32, String> {
    match count {
        Some(count) if !(0..i64::from(count)).contains(&n) => Err(format!(
            "partition_column names partition {n}, but the topic has partitions 0 to {}",
            count - 1
        )),
        _ => i32::try_from(n)
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| format!("partition_column {n} is not a partition number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_refuses_what_the_forwarder_cannot_publish() {
        assert!(event_id("", EventIdFormat::Any).is_err());
        assert!(event_id("order-7", EventIdFormat::Any).is_ok());
        assert!(event_id("order-7", EventIdFormat::Uuid).is_err());
        assert!(event_id("0190a1b2-0000-7000-8000-000000000001", EventIdFormat::Uuid).is_ok());

        assert!(payload(b"{\"a\":1}", PayloadFormat::Json).is_ok());
        assert!(payload(b"not json", PayloadFormat::Json).is_err());
        assert!(payload(&[0xff, 0xfe], PayloadFormat::Text).is_err());
        assert!(payload(&[0xff, 0xfe], PayloadFormat::Bytes).is_ok());

        assert!(topic_column("orders.v1").is_ok());
        for bad in ["", ".", "..", "bad topic", "ünï", &"a".repeat(250)] {
            assert!(topic_column(bad).is_err(), "{bad:?}");
        }

        assert!(timestamp_ms(-1, TimeColumn::DateTime).is_err());
        assert!(timestamp_ms(1_700_000_000, TimeColumn::EpochMillis).is_err());
        assert!(timestamp_ms(1_700_000_000, TimeColumn::Timestamp).is_ok());
        assert!(timestamp_ms(1_700_000_000_000, TimeColumn::EpochMillis).is_ok());
        assert!(calendar_year(1969).is_err());
        assert!(calendar_year(0).is_ok());
        assert!(calendar_year(2026).is_ok());

        assert_eq!(partition_number(3, Some(4)), Ok(3));
        assert!(partition_number(4, Some(4)).is_err());
        assert!(partition_number(-1, None).is_err());
        assert!(partition_number(i64::from(i32::MAX) + 1, None).is_err());
        assert_eq!(partition_number(40, None), Ok(40));
    }
}
