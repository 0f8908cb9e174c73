//! The outbox tables: each pattern matches a table as the server names it,
//! with the mapped columns and SELECT allowed.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_core::sql::Qualified;
use outbox_source::server::ServerInfo;
use outbox_source::{DecodeConfig, PayloadFormat, TablePattern};

use super::{Checked, Report, Status};
use crate::config::ForwarderConfig;

pub(super) async fn checks(
    config: &ForwarderConfig,
    info: &ServerInfo,
    conn: &mut Conn,
    report: &mut Report,
) -> Checked {
    let decode = match config.decode_config() {
        Ok(decode) => decode,
        Err(e) => {
            report.add(
                Status::Fail,
                "outbox config",
                e.to_string(),
                "valid",
                "correct [outbox]",
            );
            return Ok(());
        }
    };
    for pattern in decode.tables.patterns() {
        // information_schema's own comparison depends on its collation, so
        // the candidates are found regardless of case and then matched the
        // way the forwarder matches the binlog's names: as the server does.
        let candidates: Vec<(String, String)> = conn
            .exec(
                "SELECT table_schema, table_name FROM information_schema.tables \
                 WHERE LOWER(table_name) = LOWER(?) AND (? IS NULL OR LOWER(table_schema) = LOWER(?))",
                (pattern.table.as_str(), pattern.schema.as_deref(), pattern.schema.as_deref()),
            )
            .await?;
        let (tables, other_case): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|(schema, table)| pattern.matches(schema, table, info.table_names));
        if tables.is_empty() {
            no_table_matches(pattern, other_case.first(), report);
        }
        for (schema, table) in tables {
            table_checks(&decode, &schema, &table, conn, report).await?;
            if config.retention.is_some() {
                delete_check(&schema, &table, conn, report).await;
            }
        }
    }
    Ok(())
}

/// Why no table matches `pattern`: none exists, or one does under another
/// case that this server tells apart.
pub(super) fn no_table_matches(
    pattern: &TablePattern,
    other_case: Option<&(String, String)>,
    report: &mut Report,
) {
    match other_case {
        Some((schema, table)) => {
            let written = TablePattern {
                schema: pattern.schema.as_ref().map(|_| schema.clone()),
                table: table.clone(),
            };
            report.add(
                Status::Fail,
                "outbox table",
                format!(
                    "{pattern} is not {schema}.{table}: with lower_case_table_names=0 \
                     the server compares table names case-sensitively, and its binlog \
                     names the table {schema}.{table}; no row of it would be forwarded"
                ),
                "the table named as the server names it",
                &format!("write outbox.tables as \"{written}\""),
            )
        }
        None => report.add(
            Status::Fail,
            "outbox table",
            format!("no table matches {pattern}"),
            "at least one",
            "create it (migrations/) or correct outbox.tables",
        ),
    }
}

/// One outbox table: the mapped columns exist with types that fit their
/// use, and SELECT is allowed.
async fn table_checks(
    decode: &DecodeConfig,
    schema: &str,
    table: &str,
    conn: &mut Conn,
    report: &mut Report,
) -> Checked {
    let columns: Vec<(String, String)> = conn
        .exec(
            "SELECT column_name, LOWER(data_type) FROM information_schema.columns \
             WHERE table_schema = ? AND table_name = ?",
            (schema, table),
        )
        .await?;
    let fit = column_fit(decode, &columns);
    let name = format!("outbox {schema}.{table}");
    // Prepared, so that no name can add a second statement even if its
    // quoting were wrong.
    let readable = conn
        .exec_drop(
            format!("SELECT 1 FROM {} LIMIT 0", Qualified(schema, table)),
            (),
        )
        .await
        .is_ok();
    if !fit.problems.is_empty() || !readable {
        let mut found = fit.problems.join("; ");
        if !readable {
            found.push_str(if found.is_empty() { "" } else { "; " });
            found.push_str("SELECT is not allowed");
        }
        report.add(
            Status::Fail,
            &name,
            found,
            "every mapped column, of a type that fits its use; SELECT",
            "map the columns under [outbox.columns] / [outbox.headers], or alter the table; GRANT SELECT",
        );
    } else if !fit.optional_missing.is_empty() {
        report.add(
            Status::Warn,
            &name,
            format!(
                "no columns {:?} (their headers are left out)",
                fit.optional_missing
            ),
            "all mapped columns",
            "map them under [outbox.columns] if they exist under other names",
        );
    } else {
        report.add(
            Status::Pass,
            &name,
            "all mapped columns, of types that fit, SELECT allowed",
            "all mapped columns",
            "",
        );
    }
    Ok(())
}

/// `[retention]` deletes from the table: DELETE must be allowed (asked with
/// `EXPLAIN`, which deletes nothing).
async fn delete_check(schema: &str, table: &str, conn: &mut Conn, report: &mut Report) {
    let name = format!("retention {schema}.{table}");
    match conn
        .exec_drop(
            format!(
                "EXPLAIN DELETE FROM {} WHERE 1 = 0",
                Qualified(schema, table)
            ),
            (),
        )
        .await
    {
        Ok(()) => report.add(Status::Pass, &name, "DELETE allowed", "DELETE allowed", ""),
        Err(e) => report.add(
            Status::Fail,
            &name,
            format!("DELETE is not allowed: {e}"),
            "DELETE allowed",
            &format!(
                "GRANT DELETE ON {} TO the forwarder's user, or remove [retention]",
                Qualified(schema, table)
            ),
        ),
    }
}

/// What a table's columns (name, lower-case `data_type`) lack for the
/// configuration.
#[derive(Debug, Default)]
pub(super) struct ColumnFit {
    /// Required columns missing or of a type that does not fit, one text each.
    pub(super) problems: Vec<String>,
    /// Optional columns (event_type, aggregate_type, ...) the table lacks.
    pub(super) optional_missing: Vec<String>,
}

const TEXT_TYPES: [&str; 7] = [
    "char",
    "varchar",
    "tinytext",
    "text",
    "mediumtext",
    "longtext",
    "json",
];
/// Types whose binlog value is not their text: ENUM is logged as its
/// index, SET as a bitmap.
const CODED_TYPES: [&str; 2] = ["enum", "set"];
/// Why a coded column cannot serve where text is needed.
fn coded(column: &str, setting: &str, data_type: &str) -> String {
    format!(
        "`{column}` ({setting}) is {data_type}: the binlog holds its index, not its text; use VARCHAR"
    )
}

const BINARY_TYPES: [&str; 6] = [
    "binary",
    "varbinary",
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
];
const TIME_TYPES: [&str; 3] = ["datetime", "timestamp", "bigint"];

pub(super) fn column_fit(decode: &DecodeConfig, columns: &[(String, String)]) -> ColumnFit {
    let type_of = |c: &str| {
        columns
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(c))
            .map(|(_, data_type)| data_type.as_str())
    };
    let mapping = &decode.columns;
    let mut fit = ColumnFit::default();
    let mut need = |setting: &str, column: &str, types: &[&str], why: &str| match type_of(column) {
        None => fit
            .problems
            .push(format!("no column `{column}` ({setting})")),
        // A partition is as stable placed by an index as by a text.
        Some(t) if CODED_TYPES.contains(&t) && setting != "partition_column" => {
            fit.problems.push(coded(column, setting, t))
        }
        Some(t) if !types.is_empty() && !types.contains(&t) => fit
            .problems
            .push(format!("`{column}` ({setting}) is {t}: {why}")),
        Some(_) => {}
    };
    let text_or_binary: Vec<&str> = TEXT_TYPES.iter().chain(&BINARY_TYPES).copied().collect();
    // Text and JSON may be stored in binary columns too: the decoder checks
    // each value.
    let payload_types: &[&str] = match mapping.payload_format {
        PayloadFormat::Bytes => &[],
        PayloadFormat::Json | PayloadFormat::Text => &text_or_binary,
    };
    for (setting, column) in mapping.required() {
        let (types, why): (&[&str], &str) = match setting {
            "payload" => (payload_types, "payload_format = \"json\" or \"text\" needs a text, JSON or binary column; other values need payload_format = \"bytes\""),
            "timestamp_column" => (&TIME_TYPES, "use DATETIME (read as UTC), TIMESTAMP, or a BIGINT of milliseconds since the epoch"),
            "topic_column" => (&text_or_binary, "a topic name is text"),
            _ => (&[], ""),
        };
        need(setting, column, types, why);
    }
    for (header, column) in &decode.headers {
        need(&format!("header {header}"), column, &[], "");
    }
    for (setting, column) in mapping.optional() {
        let trace = setting.starts_with("trace");
        match type_of(column) {
            // Trace context is used where a table has it; the rest are headers
            // a check should point out when absent, and so is a trace column
            // given another name (a misspelt one would be ignored).
            None if trace && column == setting => {}
            None => fit.optional_missing.push(column.to_owned()),
            Some(t) if CODED_TYPES.contains(&t) => fit.problems.push(coded(column, setting, t)),
            Some(t) if trace && !TEXT_TYPES.contains(&t) && !BINARY_TYPES.contains(&t) => {
                fit.problems.push(format!(
                    "`{column}` ({setting}) is {t}: trace context is text"
                ))
            }
            Some(_) => {}
        }
    }
    fit
}
