//! The outbox tables: each pattern matches a table as the server names it,
//! with the mapped columns and SELECT allowed.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_source::server::ServerInfo;
use outbox_source::{ColumnMapping, TablePattern};

use super::{Checked, Report, Status};
use crate::ForwarderConfig;

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
            table_checks(&decode.columns, &schema, &table, conn, report).await?;
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

/// One outbox table: the mapped columns exist, and SELECT is allowed.
async fn table_checks(
    cols: &ColumnMapping,
    schema: &str,
    table: &str,
    conn: &mut Conn,
    report: &mut Report,
) -> Checked {
    let columns: Vec<String> = conn
        .exec("SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ?", (schema, table))
        .await?;
    let present = |c: &str| columns.iter().any(|x| x.eq_ignore_ascii_case(c));
    let missing: Vec<&str> = [cols.event_id.as_str(), cols.payload.as_str()]
        .into_iter()
        .chain(cols.key.as_deref())
        .filter(|c| !present(c))
        .collect();
    let optional_missing: Vec<&str> = [
        &cols.event_type,
        &cols.aggregate_type,
        &cols.aggregate_id,
        &cols.event_version,
    ]
    .into_iter()
    .map(String::as_str)
    .filter(|c| !present(c))
    .collect();
    let name = format!("outbox {schema}.{table}");
    let readable = conn
        .query_drop(format!("SELECT 1 FROM `{schema}`.`{table}` LIMIT 0"))
        .await
        .is_ok();
    if !missing.is_empty() || !readable {
        report.add(
            Status::Fail,
            &name,
            format!("missing columns {missing:?}, SELECT allowed: {readable}"),
            "event_id and payload columns, SELECT",
            "map the columns under [outbox.columns] / GRANT SELECT",
        );
    } else if !optional_missing.is_empty() {
        report.add(
            Status::Warn,
            &name,
            format!("no columns {optional_missing:?} (their headers are left out)"),
            "all mapped columns",
            "map them under [outbox.columns] if they exist under other names",
        );
    } else {
        report.add(
            Status::Pass,
            &name,
            "all mapped columns, SELECT allowed",
            "all mapped columns",
            "",
        );
    }
    Ok(())
}
