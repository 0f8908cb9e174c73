//! How a column's value becomes bytes of a message ([`column_bytes`]), and
//! the optional columns that shape a row's message: header values rendered
//! as text, the partition column, the record timestamp.

use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::value::Value;
use outbox_core::PartitionBy;

use outbox_core::rules;

use super::layout::{time_column, TimestampColumn};

/// Bytes of JSON text a document's buffer starts with.
const JSON_TEXT_ROOM: usize = 256;

/// A column's value as bytes: strings and JSON text as stored, numbers in
/// decimal, MySQL binary JSON rendered as JSON text. `None` for NULL.
pub(super) fn column_bytes(value: Option<BinlogValue<'_>>) -> Result<Option<Vec<u8>>, String> {
    match value {
        None | Some(BinlogValue::Value(Value::NULL)) => Ok(None),
        Some(BinlogValue::Value(Value::Bytes(bytes))) => Ok(Some(bytes)),
        Some(BinlogValue::Value(Value::Int(n))) => Ok(Some(itoa::Buffer::new().format(n).into())),
        Some(BinlogValue::Value(Value::UInt(n))) => Ok(Some(itoa::Buffer::new().format(n).into())),
        // As MySQL prints a TIME: hours in two digits at least.
        Some(BinlogValue::Value(Value::Time(negative, days, hours, minutes, seconds, micros))) => {
            let hours = days * 24 + u32::from(hours);
            let sign = if negative { "-" } else { "" };
            let fraction = if micros == 0 {
                String::new()
            } else {
                format!(".{micros:06}")
            };
            Ok(Some(
                format!("{sign}{hours:02}:{minutes:02}:{seconds:02}{fraction}").into_bytes(),
            ))
        }
        Some(BinlogValue::Value(other)) => {
            let sql = other.as_sql(true);
            Ok(Some(sql.trim_matches('\'').as_bytes().to_vec()))
        }
        Some(BinlogValue::Jsonb(jsonb)) => {
            // Room for a typical event's document, so that the text is not
            // copied as it grows.
            let mut text = Vec::with_capacity(JSON_TEXT_ROOM);
            super::json_text::write(jsonb, &mut text).map_err(|e| format!("binary JSON: {e}"))?;
            Ok(Some(text))
        }
        Some(BinlogValue::JsonDiff(_)) => Err("partial JSON update in an insert".into()),
    }
}

/// A column's value as a header: its text as [`column_bytes`] renders it,
/// but a `TIMESTAMP` (which the binlog holds as seconds since the epoch) as
/// its UTC time, `YYYY-MM-DD hh:mm:ss[.ffffff]`, the way `DATETIME`
/// columns read. `None` for NULL.
pub(super) fn header_value(
    value: Option<BinlogValue<'_>>,
    column_type: ColumnType,
) -> Result<Option<Vec<u8>>, String> {
    let bytes = column_bytes(value)?;
    if !is_timestamp(column_type) {
        return Ok(bytes);
    }
    bytes
        .map(|text| {
            let micros = epoch_micros(&text)?;
            Ok(utc_text(micros).into_bytes())
        })
        .transpose()
}

/// The partition a column's value asks for: an integer column names it,
/// any other column's text is hashed.
pub(super) fn partition(
    value: Option<BinlogValue<'_>>,
    column_type: ColumnType,
) -> Result<Option<PartitionBy>, String> {
    use ColumnType::*;
    let integer = matches!(
        column_type,
        MYSQL_TYPE_TINY
            | MYSQL_TYPE_SHORT
            | MYSQL_TYPE_INT24
            | MYSQL_TYPE_LONG
            | MYSQL_TYPE_LONGLONG
    );
    match value {
        Some(BinlogValue::Value(Value::Int(n))) if integer => Ok(Some(PartitionBy::Number(n))),
        Some(BinlogValue::Value(Value::UInt(n))) if integer => i64::try_from(n)
            .map(|n| Some(PartitionBy::Number(n)))
            .map_err(|_| format!("{n} is not a partition number")),
        other => Ok(column_bytes(other)?.map(PartitionBy::Hash)),
    }
}

/// The record timestamp a column holds, in milliseconds since the epoch.
pub(super) fn timestamp_ms(
    value: Option<BinlogValue<'_>>,
    kind: TimestampColumn,
) -> Result<Option<i64>, String> {
    let value = match value {
        None | Some(BinlogValue::Value(Value::NULL)) => return Ok(None),
        Some(BinlogValue::Value(value)) => value,
        Some(_) => return Err("not a time".into()),
    };
    let ms = match (kind, value) {
        (TimestampColumn::EpochMillis, Value::Int(ms)) => ms,
        (TimestampColumn::EpochMillis, Value::UInt(ms)) => {
            i64::try_from(ms).map_err(|_| format!("{ms} ms is out of range"))?
        }
        // The zero TIMESTAMP and DATETIME ('0000-00-00 00:00:00') mean no time.
        (TimestampColumn::Timestamp, Value::Int(0)) => return Ok(None),
        (TimestampColumn::Timestamp, Value::Int(seconds)) => seconds * 1000,
        (TimestampColumn::Timestamp, Value::Bytes(text)) => match epoch_micros(&text)? {
            0 => return Ok(None),
            micros => micros / 1000,
        },
        (TimestampColumn::DateTime, Value::Date(0, ..)) => return Ok(None),
        (
            TimestampColumn::DateTime,
            Value::Date(year, month, day, hour, minute, second, micros),
        ) => {
            let days = days_from_civil(i64::from(year), u32::from(month), u32::from(day));
            let seconds =
                days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
            seconds * 1000 + i64::from(micros) / 1000
        }
        (_, other) => return Err(format!("{other:?} is not a time")),
    };
    rules::timestamp_ms(ms, kind)?;
    Ok(Some(ms))
}

fn is_timestamp(column_type: ColumnType) -> bool {
    time_column(column_type) == Some(TimestampColumn::Timestamp)
}

/// `seconds` or `seconds.micros` (six digits), as the binlog's TIMESTAMP
/// values are read, into microseconds since the epoch.
fn epoch_micros(text: &[u8]) -> Result<i64, String> {
    let text = std::str::from_utf8(text).map_err(|_| "a TIMESTAMP that is not text")?;
    let bad = || format!("TIMESTAMP value {text:?}");
    let (seconds, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let seconds: i64 = seconds.parse().map_err(|_| bad())?;
    let fraction = format!("{fraction:0<6}");
    let micros: i64 = fraction
        .get(..6)
        .ok_or_else(bad)?
        .parse()
        .map_err(|_| bad())?;
    Ok(seconds * 1_000_000 + micros)
}

/// `YYYY-MM-DD hh:mm:ss`, with `.ffffff` when there is a fraction.
fn utc_text(micros: i64) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let time = seconds.rem_euclid(86_400);
    let text = format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        time / 3600,
        time / 60 % 60,
        time % 60
    );
    if fraction == 0 {
        text
    } else {
        format!("{text}.{fraction:06}")
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
