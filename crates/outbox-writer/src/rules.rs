//! The forwarder's row rules ([`outbox_core::rules`]) applied to an
//! event's values before they are sent: a row the forwarder would refuse
//! as bad (which stops the stream under the default `bad_row_policy =
//! "fail"`) is never written, and what the writer accepts is published.

use mysql_async::Value;
use outbox_core::rules::{self, TimeColumn};
use outbox_core::table::ColumnMapping;

use crate::column::TableColumn;

/// Why storing `value` in `column` would make a row the forwarder refuses,
/// or one that reads back as another value; `None` when it is fine.
/// `partitions` is the topics' partition count, when the service gave it.
pub(crate) fn refusal(
    column: &TableColumn,
    value: &Value,
    mapping: &ColumnMapping,
    partitions: Option<i32>,
) -> Option<String> {
    if let Some(reason) = integer_text(column, value) {
        return Some(reason);
    }
    let named = |setting: &Option<String>| {
        setting
            .as_deref()
            .is_some_and(|name| name.eq_ignore_ascii_case(&column.name))
    };
    let mut reasons = [
        (named(&mapping.partition_column)).then(|| partition(column, value, partitions)),
        (named(&mapping.timestamp_column)).then(|| timestamp(column, value)),
        (named(&mapping.topic_column)).then(|| topic(column, value)),
    ]
    .into_iter()
    .flatten();
    reasons.find_map(Result::err).map(bad_row)
}

/// A forwarder rule's reason, with what breaking it does.
pub(crate) fn bad_row(reason: String) -> String {
    format!(
        "{reason} (the forwarder refuses such a row as a bad row, which stops its stream under \
         bad_row_policy = \"fail\")"
    )
}

/// Text given for an integer column: a server converts it, and one outside
/// strict mode converts `"12abc"` or `" 7"` to a number that reads back as
/// another value (an id written so can come back as a false duplicate).
/// Only an integer's own decimal form, in the column's range, is taken.
fn integer_text(column: &TableColumn, value: &Value) -> Option<String> {
    let ((min, max), Value::Bytes(bytes)) = (column.range?, value) else {
        return None;
    };
    let text = String::from_utf8_lossy(bytes);
    match text.parse::<i128>() {
        Ok(n) if n.to_string() == text && (min..=max).contains(&n) => None,
        Ok(n) if n.to_string() == text => Some(format!(
            "{n} is outside the {min}..={max} the integer column holds"
        )),
        _ => Some(format!(
            "the integer column was given the text {text:?}, which the server would convert to \
             another value; give it a number"
        )),
    }
}

/// Text for a column the forwarder reads as UTF-8 (the event id, type
/// and aggregate, a `json` or `text` payload, the topic column) in a
/// character set that stores it as other bytes (latin1 past ASCII, ucs2,
/// utf16, utf32), which the binlog carries as they are stored.
pub(crate) fn stored_as_utf8(column: &TableColumn, value: &[u8]) -> Option<String> {
    match column.encoding.keeps_utf8(value) {
        true => None,
        false => Some(format!(
            "its character set {} stores this text as bytes that are not UTF-8 (convert the \
             column to utf8mb4, or store a payload as bytes: payload_format = \"bytes\")",
            column.charset.as_deref().unwrap_or("?")
        )),
    }
}

/// The integer a value holds, as the server would store it (a float
/// rounded).
fn integer(value: &Value) -> Option<Result<i64, String>> {
    let float = |f: f64| match f.is_finite() && f.abs() < 9.2e18 {
        true => Ok(f.round() as i64),
        false => Err(format!("{f} is out of range")),
    };
    match value {
        Value::Int(n) => Some(Ok(*n)),
        Value::UInt(n) => Some(i64::try_from(*n).map_err(|_| format!("{n} is out of range"))),
        Value::Double(f) => Some(float(*f)),
        Value::Float(f) => Some(float(f64::from(*f))),
        Value::Bytes(text) => std::str::from_utf8(text).ok()?.parse().ok().map(Ok),
        _ => None,
    }
}

/// A `partition_column`: an integer column names the partition, any other
/// column's value is hashed (and so always places the row).
fn partition(column: &TableColumn, value: &Value, partitions: Option<i32>) -> Result<(), String> {
    if column.range.is_none() {
        return Ok(());
    }
    match integer(value) {
        Some(n) => rules::partition_number(n?, partitions).map(drop),
        None => Ok(()),
    }
}

/// A `timestamp_column`: milliseconds in a BIGINT, a calendar time in a
/// DATETIME or TIMESTAMP.
fn timestamp(column: &TableColumn, value: &Value) -> Result<(), String> {
    match (column.time, value) {
        (Some(TimeColumn::EpochMillis), value) => match integer(value) {
            Some(ms) => rules::timestamp_ms(ms?, TimeColumn::EpochMillis),
            None => Ok(()),
        },
        (Some(_), Value::Date(year, ..)) => rules::calendar_year(i64::from(*year)),
        (Some(_), Value::Bytes(text)) => match year_of(&String::from_utf8_lossy(text)) {
            Some(year) => rules::calendar_year(year),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The year of a DATETIME literal as the server reads it: `YYYY-...`,
/// `YYYYMMDD...`; a two-digit year is 1970-2069. `None` when not read
/// here (the server's answer then stands).
fn year_of(text: &str) -> Option<i64> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (year, short) = match (digits, text.as_bytes().get(digits)) {
        // Delimited: the digits before the first delimiter.
        (1..=4, Some(_)) => (&text[..digits], digits <= 2),
        // Compact: YYYYMMDD[hhmmss], or YYMMDD[hhmmss].
        (8 | 14, _) => (&text[..4], false),
        (6 | 12, _) => (&text[..2], true),
        _ => return None,
    };
    let year: i64 = year.parse().ok()?;
    Some(match short {
        true => year + if year < 70 { 2000 } else { 1900 },
        false => year,
    })
}

/// A `topic_column`: NULL routes by the template; text must be a topic
/// name, stored as such.
fn topic(column: &TableColumn, value: &Value) -> Result<(), String> {
    match value {
        Value::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(topic) => rules::topic_column(topic)
                .and_then(|()| stored_as_utf8(column, bytes).map_or(Ok(()), Err)),
            Err(_) => Err("topic_column is not UTF-8 text".into()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(data_type: &str) -> TableColumn {
        TableColumn::new("c".into(), data_type, data_type, None, None, None)
    }

    #[test]
    fn text_for_an_integer_column_is_taken_only_in_the_integers_own_form() {
        let int = column("int");
        let text = |t: &str| integer_text(&int, &Value::Bytes(t.into()));
        assert_eq!(text("42"), None);
        assert_eq!(text("-7"), None);
        for converted in ["12abc", " 7", "007", "4.2", "", "1e3"] {
            assert!(text(converted).is_some(), "{converted:?}");
        }
        assert!(text("2147483648").unwrap().contains("outside"));
        assert_eq!(
            integer_text(&column("varchar"), &Value::Bytes("x".into())),
            None
        );
    }

    #[test]
    fn a_datetimes_year_is_read_as_the_server_reads_it() {
        assert_eq!(year_of("1969-12-31 23:00:00"), Some(1969));
        assert_eq!(year_of("19691231"), Some(1969));
        assert_eq!(year_of("19691231235959"), Some(1969));
        assert_eq!(year_of("12-01-01"), Some(2012));
        assert_eq!(year_of("691231"), Some(2069));
        assert_eq!(year_of("70-01-01"), Some(1970));
        assert_eq!(year_of("2026-12-06T08:00:00+05:00"), Some(2026));
        assert_eq!(year_of("now"), None);
        let datetime = column("datetime");
        let at = |text: &str| timestamp(&datetime, &Value::Bytes(text.into()));
        assert!(at("19691231").is_err());
        assert!(at("12-01-01").is_ok());
        let millis = column("bigint");
        assert!(timestamp(&millis, &Value::Double(1.7e9)).is_err());
        assert!(timestamp(&millis, &Value::Double(1.7e12)).is_ok());
    }
}
