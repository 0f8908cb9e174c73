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
        (named(&mapping.topic_column)).then(|| topic(value)),
    ]
    .into_iter()
    .flatten();
    reasons.find_map(Result::err)
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

/// The integer a value holds, as the server would store it.
fn integer(value: &Value) -> Option<Result<i64, String>> {
    match value {
        Value::Int(n) => Some(Ok(*n)),
        Value::UInt(n) => Some(i64::try_from(*n).map_err(|_| format!("{n} is out of range"))),
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
        (Some(_), Value::Bytes(text)) => {
            let text = String::from_utf8_lossy(text);
            let year = text.split(['-', ' ']).next().unwrap_or_default();
            match year.trim().parse::<i64>() {
                Ok(year) => rules::calendar_year(year),
                Err(_) => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// A `topic_column`: NULL routes by the template; text must be a topic name.
fn topic(value: &Value) -> Result<(), String> {
    match value {
        Value::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(topic) => rules::topic_column(topic),
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
}
