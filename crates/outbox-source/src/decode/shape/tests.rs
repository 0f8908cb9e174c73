use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType::{self, *};
use mysql_common::value::Value;
use outbox_core::PartitionBy;

use super::*;

fn header(value: Value, column_type: ColumnType) -> Option<String> {
    header_value(Some(BinlogValue::Value(value)), column_type)
        .unwrap()
        .map(|bytes| String::from_utf8(bytes).unwrap())
}

#[test]
fn integers_render_in_decimal() {
    assert_eq!(
        header(Value::Int(42), MYSQL_TYPE_LONG).as_deref(),
        Some("42")
    );
    assert_eq!(
        header(Value::Int(-7), MYSQL_TYPE_TINY).as_deref(),
        Some("-7")
    );
    assert_eq!(
        header(Value::UInt(u64::MAX), MYSQL_TYPE_LONGLONG).as_deref(),
        Some("18446744073709551615")
    );
}

#[test]
fn text_and_decimals_render_as_stored() {
    assert_eq!(
        header(Value::Bytes(b"tenant-7".to_vec()), MYSQL_TYPE_VARCHAR).as_deref(),
        Some("tenant-7")
    );
    // NEWDECIMAL values arrive as their text.
    assert_eq!(
        header(Value::Bytes(b"-12.50".to_vec()), MYSQL_TYPE_NEWDECIMAL).as_deref(),
        Some("-12.50")
    );
}

#[test]
fn binary_values_are_copied_byte_for_byte() {
    let bytes = vec![0x00, 0xff, 0x80, b'\'', 0x0a];
    let value = header_value(
        Some(BinlogValue::Value(Value::Bytes(bytes.clone()))),
        MYSQL_TYPE_BLOB,
    )
    .unwrap();
    assert_eq!(value, Some(bytes));
}

#[test]
fn floating_point_values_render_as_numbers() {
    assert_eq!(
        header(Value::Double(0.25), MYSQL_TYPE_DOUBLE).as_deref(),
        Some("0.25")
    );
    assert_eq!(
        header(Value::Float(1.5), MYSQL_TYPE_FLOAT).as_deref(),
        Some("1.5")
    );
}

#[test]
fn datetimes_and_dates_render_as_they_read() {
    assert_eq!(
        header(Value::Date(2026, 12, 2, 11, 30, 5, 0), MYSQL_TYPE_DATETIME2).as_deref(),
        Some("2026-12-02 11:30:05")
    );
    assert_eq!(
        header(
            Value::Date(2026, 12, 2, 11, 30, 5, 120),
            MYSQL_TYPE_DATETIME2
        )
        .as_deref(),
        Some("2026-12-02 11:30:05.000120")
    );
    assert_eq!(
        header(Value::Date(2024, 2, 29, 0, 0, 0, 0), MYSQL_TYPE_DATE).as_deref(),
        Some("2024-02-29")
    );
}

#[test]
fn times_render_as_they_read() {
    assert_eq!(
        header(Value::Time(false, 0, 13, 5, 9, 0), MYSQL_TYPE_TIME2).as_deref(),
        Some("13:05:09")
    );
    assert_eq!(
        header(Value::Time(true, 1, 2, 0, 0, 0), MYSQL_TYPE_TIME2).as_deref(),
        Some("-26:00:00")
    );
}

#[test]
fn timestamps_render_as_their_utc_time() {
    // 1 764 675 005 s after the epoch is 2025-12-02 11:30:05 UTC.
    assert_eq!(
        header(Value::Bytes(b"1764675005".to_vec()), MYSQL_TYPE_TIMESTAMP2).as_deref(),
        Some("2025-12-02 11:30:05")
    );
    assert_eq!(
        header(
            Value::Bytes(b"1764675005.250000".to_vec()),
            MYSQL_TYPE_TIMESTAMP2
        )
        .as_deref(),
        Some("2025-12-02 11:30:05.250000")
    );
    // A TIMESTAMP(3) still arrives with six digits; a shorter fraction is
    // read as tenths, hundredths...
    assert_eq!(
        header(Value::Bytes(b"0.5".to_vec()), MYSQL_TYPE_TIMESTAMP2).as_deref(),
        Some("1970-01-01 00:00:00.500000")
    );
}

#[test]
fn null_leaves_the_header_out() {
    assert_eq!(header(Value::NULL, MYSQL_TYPE_VARCHAR), None);
    assert_eq!(header_value(None, MYSQL_TYPE_VARCHAR).unwrap(), None);
}

#[test]
fn record_timestamps_from_each_kind_of_column() {
    let ms = |value: Value, kind| timestamp_ms(Some(BinlogValue::Value(value)), kind).unwrap();
    assert_eq!(
        ms(
            Value::Date(2025, 12, 2, 11, 30, 5, 250_000),
            TimestampColumn::DateTime
        ),
        Some(1_764_675_005_250)
    );
    assert_eq!(
        ms(
            Value::Bytes(b"1764675005.250000".to_vec()),
            TimestampColumn::Timestamp
        ),
        Some(1_764_675_005_250)
    );
    assert_eq!(
        ms(Value::Int(1_764_675_005), TimestampColumn::Timestamp),
        Some(1_764_675_005_000)
    );
    assert_eq!(
        ms(Value::Int(1_764_675_005_250), TimestampColumn::EpochMillis),
        Some(1_764_675_005_250)
    );
    assert_eq!(ms(Value::NULL, TimestampColumn::DateTime), None);
    // The zero DATETIME and TIMESTAMP are no time at all.
    assert_eq!(
        ms(Value::Date(0, 0, 0, 0, 0, 0, 0), TimestampColumn::DateTime),
        None
    );
    assert_eq!(
        ms(Value::Bytes(b"0".to_vec()), TimestampColumn::Timestamp),
        None
    );
}

#[test]
fn epoch_seconds_in_a_milliseconds_column_are_refused() {
    let seconds = timestamp_ms(
        Some(BinlogValue::Value(Value::Int(1_764_675_005))),
        TimestampColumn::EpochMillis,
    );
    assert!(seconds.unwrap_err().contains("looks like seconds"));
}

#[test]
fn a_time_before_1970_is_refused() {
    let before = timestamp_ms(
        Some(BinlogValue::Value(Value::Date(1969, 12, 31, 23, 59, 59, 0))),
        TimestampColumn::DateTime,
    );
    assert!(before.unwrap_err().contains("before 1970"));
}

#[test]
fn an_integer_column_names_the_partition_and_any_other_is_hashed() {
    let partition_of = |value: Value, column_type| {
        partition(Some(BinlogValue::Value(value)), column_type).unwrap()
    };
    assert_eq!(
        partition_of(Value::Int(3), MYSQL_TYPE_LONG),
        Some(PartitionBy::Number(3))
    );
    assert_eq!(
        partition_of(Value::UInt(5), MYSQL_TYPE_LONGLONG),
        Some(PartitionBy::Number(5))
    );
    assert_eq!(
        partition_of(Value::Bytes(b"tenant-7".to_vec()), MYSQL_TYPE_VARCHAR),
        Some(PartitionBy::Hash(b"tenant-7".to_vec()))
    );
    assert_eq!(partition_of(Value::NULL, MYSQL_TYPE_LONG), None);
    assert!(partition(
        Some(BinlogValue::Value(Value::UInt(u64::MAX))),
        MYSQL_TYPE_LONGLONG
    )
    .is_err());
}

#[test]
fn calendar_days_round_trip() {
    for (date, days) in [
        ((1970, 1, 1), 0),
        ((2000, 2, 29), 11_016),
        ((2000, 3, 1), 11_017),
        ((2025, 12, 2), 20_424),
        ((1969, 12, 31), -1),
        ((2100, 3, 1), 47_541),
    ] {
        assert_eq!(days_from_civil(date.0, date.1, date.2), days, "{date:?}");
        assert_eq!(civil_from_days(days), date, "{days}");
    }
}
