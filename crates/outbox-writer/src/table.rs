//! Which table to write and what its columns are called, from the
//! forwarder's `[outbox]` section, and what the table really holds.

use std::path::Path;

use mysql_async::prelude::Queryable;
use outbox_core::table::{ColumnMapping, EventIdFormat, TablePattern};
use serde::Deserialize;

use crate::error::{ConfigError, WriteError};
use crate::insert::Outbox;

/// The outbox table a service writes, as the forwarder reads it: its
/// name, its `[outbox.columns]` and its `event_id_format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    /// `None`: the connection's current database.
    schema: Option<String>,
    table: String,
    columns: ColumnMapping,
    event_id_format: EventIdFormat,
}

/// The part of the forwarder's configuration both sides read; every other
/// key belongs to the forwarder alone.
#[derive(Deserialize)]
struct ForwarderFile {
    #[serde(default)]
    outbox: OutboxPart,
}

#[derive(Deserialize)]
struct OutboxPart {
    #[serde(default = "outbox_core::table::default_tables")]
    tables: Vec<String>,
    #[serde(default)]
    columns: ColumnMapping,
    #[serde(default)]
    event_id_format: EventIdFormat,
}

impl Default for OutboxPart {
    fn default() -> Self {
        OutboxPart {
            tables: outbox_core::table::default_tables(),
            columns: ColumnMapping::default(),
            event_id_format: EventIdFormat::default(),
        }
    }
}

impl OutboxTable {
    /// `table` (in the connection's database) or `schema.table`, with the
    /// default columns (the migration's) and UUID ids.
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::TableName(name.to_owned());
        let (schema, table) = match name.split_once('.') {
            None => (None, name),
            Some(("*", table)) => (None, table),
            Some((schema, table)) => (Some(schema.to_owned()), table),
        };
        if table.is_empty() || table.contains('.') || schema.as_deref() == Some("") {
            return Err(invalid());
        }
        Ok(OutboxTable {
            schema,
            table: table.to_owned(),
            columns: ColumnMapping::default(),
            event_id_format: EventIdFormat::default(),
        })
    }

    /// The table with `columns` named as `[outbox.columns]` names them.
    pub fn columns(mut self, columns: ColumnMapping) -> Self {
        self.columns = columns;
        self
    }

    /// The table with ids checked as `event_id_format` says.
    pub fn event_id_format(mut self, format: EventIdFormat) -> Self {
        self.event_id_format = format;
        self
    }

    /// The one table `[outbox] tables` of the forwarder's configuration
    /// (TOML text) names, with its columns and id format.
    pub fn from_forwarder_config(text: &str) -> Result<Self, ConfigError> {
        Self::from_config(text, "the configuration", None)
    }

    /// `table` (`schema.table` or `*.table`, as listed in `[outbox] tables`)
    /// of a configuration that names several.
    pub fn from_forwarder_config_for(text: &str, table: &str) -> Result<Self, ConfigError> {
        Self::from_config(text, "the configuration", Some(table))
    }

    /// [`OutboxTable::from_forwarder_config`] of the file at `path`.
    pub fn from_forwarder_config_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_config(&text, &path.display().to_string(), None)
    }

    fn from_config(text: &str, origin: &str, wanted: Option<&str>) -> Result<Self, ConfigError> {
        let file: ForwarderFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        let outbox = file.outbox;
        let patterns = outbox
            .tables
            .iter()
            .map(|t| t.parse::<TablePattern>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| ConfigError::Parse {
                path: origin.to_owned(),
                message,
            })?;
        let pattern = match wanted {
            Some(wanted) => patterns
                .iter()
                .find(|p| p.to_string() == wanted)
                .ok_or_else(|| ConfigError::NotConfigured(wanted.to_owned()))?,
            None => match &patterns[..] {
                [one] => one,
                many => {
                    return Err(ConfigError::WhichTable {
                        count: many.len(),
                        tables: outbox.tables.join(", "),
                    })
                }
            },
        };
        Ok(OutboxTable {
            schema: pattern.schema.clone(),
            table: pattern.table.clone(),
            columns: outbox.columns,
            event_id_format: outbox.event_id_format,
        })
    }

    /// Reads what the table holds through `conn` (which columns, how long
    /// each may be) and returns the writer for it. Once, at start-up: the
    /// writer keeps no connection and is shared by every request.
    pub async fn open<Q: Queryable>(self, conn: &mut Q) -> Result<Outbox, WriteError> {
        let (database, max_packet): (Option<String>, u64) = conn
            .query_first("SELECT DATABASE(), @@max_allowed_packet")
            .await
            .map_err(|source| self.inspect_failed(source))?
            .unwrap_or_default();
        let schema = match self.schema.clone().or(database) {
            Some(schema) => schema,
            None => {
                return Err(WriteError::Table(format!(
                    "outbox table {}: the connection has no database; name the schema \
                     (`schema.{}`) or connect to one",
                    self.table, self.table
                )))
            }
        };
        type ColumnRow = (
            String,
            String,
            String,
            Option<u64>,
            Option<u64>,
            Option<String>,
        );
        let rows: Vec<ColumnRow> = conn
            .exec(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH, \
                 CHARACTER_OCTET_LENGTH, CHARACTER_SET_NAME FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (&schema, &self.table),
            )
            .await
            .map_err(|source| self.inspect_failed(source))?;
        let columns = rows
            .into_iter()
            .map(|(name, data_type, column_type, chars, octets, charset)| {
                TableColumn::new(name, &data_type, chars, octets, charset.as_deref())
                    .with_integer_range(&data_type, &column_type)
            })
            .collect();
        // The unique keys on the event id alone: a 1062 naming one of them
        // is a duplicate event id, any other 1062 is not.
        let id_keys: Vec<String> = conn
            .exec(
                "SELECT INDEX_NAME FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
                 GROUP BY INDEX_NAME HAVING COUNT(*) = 1 AND LOWER(MAX(COLUMN_NAME)) = LOWER(?)",
                (&schema, &self.table, &self.columns.event_id),
            )
            .await
            .map_err(|source| self.inspect_failed(source))?;
        Outbox::new(self, schema, columns, id_keys, max_packet)
    }

    fn inspect_failed(&self, source: mysql_async::Error) -> WriteError {
        WriteError::Inspect {
            table: self.table.clone(),
            source,
        }
    }

    pub(crate) fn mapping(&self) -> &ColumnMapping {
        &self.columns
    }

    pub(crate) fn id_format(&self) -> EventIdFormat {
        self.event_id_format
    }

    pub(crate) fn name(&self) -> &str {
        &self.table
    }
}

/// One column of the real table, and how much it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableColumn {
    pub name: String,
    /// The most the column holds, in `unit`s; `None`: as much as one
    /// statement carries (MySQL's JSON, numbers, dates).
    pub limit: Option<u64>,
    pub unit: LengthUnit,
    /// How the column stores text, which decides its length in bytes.
    pub encoding: Encoding,
    /// The column's character set, as the server names it.
    pub charset: Option<String>,
    /// The values an integer column holds, least and most.
    pub range: Option<(i128, i128)>,
}

/// How a column's character set stores text the service gives as UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Binary columns, and utf8mb4: the bytes as given.
    AsGiven,
    /// utf8mb3: UTF-8, without characters past U+FFFF.
    Utf8Mb3,
    /// latin1, ascii and the other one-byte character sets.
    OneByte,
    /// ucs2: two bytes a character, none past U+FFFF.
    Ucs2,
    /// utf16 and utf16le: two bytes a code unit.
    Utf16,
    /// utf32: four bytes a character.
    Utf32,
    /// A multi-byte set of its own (gbk, sjis, ...): its byte length is
    /// not worked out here, so only the statement's limit applies.
    Unknown,
}

/// MySQL's and MariaDB's one-byte character sets.
const ONE_BYTE_CHARSETS: &[&str] = &[
    "armscii8", "ascii", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852", "cp866", "dec8",
    "geostd8", "greek", "hebrew", "hp8", "keybcs2", "koi8r", "koi8u", "latin1", "latin2", "latin5",
    "latin7", "macce", "macroman", "swe7", "tis620",
];

impl Encoding {
    fn of(charset: Option<&str>) -> Self {
        let Some(charset) = charset.map(str::to_ascii_lowercase) else {
            return Encoding::AsGiven;
        };
        match charset.as_str() {
            "binary" | "utf8mb4" => Encoding::AsGiven,
            "utf8mb3" | "utf8" => Encoding::Utf8Mb3,
            "ucs2" => Encoding::Ucs2,
            "utf16" | "utf16le" => Encoding::Utf16,
            "utf32" => Encoding::Utf32,
            one if ONE_BYTE_CHARSETS.contains(&one) => Encoding::OneByte,
            _ => Encoding::Unknown,
        }
    }

    /// Whether the set cannot hold `text`'s characters past U+FFFF.
    fn lacks_supplementary(self, text: &str) -> bool {
        matches!(self, Encoding::Utf8Mb3 | Encoding::Ucs2)
            && text.chars().any(|c| c.len_utf8() == 4)
    }

    /// The bytes `text` takes in this set; `None` when unknown.
    fn bytes(self, text: &str) -> Option<usize> {
        match self {
            Encoding::AsGiven | Encoding::Utf8Mb3 => Some(text.len()),
            Encoding::OneByte => Some(text.chars().count()),
            Encoding::Ucs2 => Some(2 * text.chars().count()),
            Encoding::Utf16 => Some(2 * text.encode_utf16().count()),
            Encoding::Utf32 => Some(4 * text.chars().count()),
            Encoding::Unknown => None,
        }
    }
}

/// What storing a value in a column would do to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// It fits, or the column's limit cannot be worked out here.
    Fits,
    /// It is `length` units long, more than the column holds.
    TooLong(u64),
    /// It holds a character the column's character set cannot store.
    Unstorable,
}

/// What a column's length counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LengthUnit {
    Characters,
    Bytes,
}

impl LengthUnit {
    pub fn name(self) -> &'static str {
        match self {
            LengthUnit::Characters => "characters",
            LengthUnit::Bytes => "bytes",
        }
    }
}

impl TableColumn {
    /// `chars`, `octets` and `charset` as information_schema gives them:
    /// CHAR and VARCHAR are limited in characters, the TEXT types
    /// (MariaDB's JSON among them) in bytes of their character set, and the
    /// binary ones in bytes.
    fn new(
        name: String,
        data_type: &str,
        chars: Option<u64>,
        octets: Option<u64>,
        charset: Option<&str>,
    ) -> Self {
        let data_type = data_type.to_ascii_lowercase();
        let in_chars = matches!(data_type.as_str(), "char" | "varchar");
        let (limit, unit) = match in_chars {
            true => (chars, LengthUnit::Characters),
            false => (octets.or(chars), LengthUnit::Bytes),
        };
        TableColumn {
            name,
            limit,
            unit,
            encoding: Encoding::of(charset),
            charset: charset.map(str::to_owned),
            range: None,
        }
    }

    /// The column with the range of its integer type (`data_type` and
    /// `column_type` as information_schema gives them: `int`, `int(11)
    /// unsigned`); unchanged for other types.
    fn with_integer_range(mut self, data_type: &str, column_type: &str) -> Self {
        let bits: u32 = match data_type.to_ascii_lowercase().as_str() {
            "tinyint" => 8,
            "smallint" => 16,
            "mediumint" => 24,
            "int" | "integer" => 32,
            "bigint" => 64,
            _ => return self,
        };
        let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
        self.range = Some(match unsigned {
            true => (0, (1i128 << bits) - 1),
            false => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        });
        self
    }

    /// Whether `value` (UTF-8 text, or bytes for a binary column) can be
    /// stored whole. Bytes that are not UTF-8 count as bytes.
    pub fn fit(&self, value: &[u8]) -> Fit {
        let length = match std::str::from_utf8(value) {
            Ok(text) if self.encoding.lacks_supplementary(text) => return Fit::Unstorable,
            Ok(text) => match self.unit {
                LengthUnit::Characters => Some(text.chars().count()),
                LengthUnit::Bytes => self.encoding.bytes(text),
            },
            Err(_) => Some(value.len()),
        };
        let length = length.map(|l| u64::try_from(l).unwrap_or(u64::MAX));
        match (length, self.limit) {
            (Some(length), Some(limit)) if length > limit => Fit::TooLong(length),
            _ => Fit::Fits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarders_configuration_names_the_table_and_its_columns() {
        let text = "[mysql]\nurl = \"mysql://u:p@h/\"\n\n[outbox]\ntables = [\"shop.events\"]\n\
                    event_id_format = \"any\"\n\n[outbox.columns]\nevent_id = \"id\"\n\
                    traceparent = \"trace_parent\"\n";
        let table = OutboxTable::from_forwarder_config(text).unwrap();
        assert_eq!(table.schema.as_deref(), Some("shop"));
        assert_eq!(table.table, "events");
        assert_eq!(table.columns.event_id, "id");
        assert_eq!(table.columns.traceparent, "trace_parent");
        assert_eq!(table.columns.payload, "payload");
        assert_eq!(table.event_id_format, EventIdFormat::Any);
    }

    #[test]
    fn without_an_outbox_section_both_sides_mean_the_migrations_table() {
        let table = OutboxTable::from_forwarder_config("[mysql]\nurl = \"x\"\n").unwrap();
        assert_eq!(table, OutboxTable::new("outbox_event").unwrap());
        assert_eq!(table.event_id_format, EventIdFormat::Uuid);
    }

    #[test]
    fn several_tables_need_one_named_and_a_misspelt_column_key_is_refused() {
        let text = "[outbox]\ntables = [\"a.outbox\", \"*.outbox_event\"]\n";
        let err = OutboxTable::from_forwarder_config(text).unwrap_err();
        assert!(
            matches!(err, ConfigError::WhichTable { count: 2, .. }),
            "{err}"
        );
        let table = OutboxTable::from_forwarder_config_for(text, "a.outbox").unwrap();
        assert_eq!(
            (table.schema.as_deref(), table.table.as_str()),
            (Some("a"), "outbox")
        );
        let err = OutboxTable::from_forwarder_config_for(text, "b.outbox").unwrap_err();
        assert!(matches!(err, ConfigError::NotConfigured(_)), "{err}");

        let text = "[outbox.columns]\nevent_idd = \"id\"\n";
        let err = OutboxTable::from_forwarder_config(text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("event_idd"), "{err}");
    }

    #[test]
    fn a_text_columns_length_is_counted_in_its_character_set() {
        let text = |charset| TableColumn::new("p".into(), "text", Some(10), Some(10), charset);
        let accents = "é".repeat(6).into_bytes(); // 12 bytes of UTF-8, 6 characters
        assert_eq!(text(Some("latin1")).fit(&accents), Fit::Fits);
        assert_eq!(text(Some("utf8mb4")).fit(&accents), Fit::TooLong(12));
        assert_eq!(text(None).fit(&accents), Fit::TooLong(12));
        assert_eq!(text(Some("utf16")).fit(&accents), Fit::TooLong(12));
        assert_eq!(text(Some("utf32")).fit("ab".as_bytes()), Fit::Fits);
        assert_eq!(text(Some("utf32")).fit("abc".as_bytes()), Fit::TooLong(12));
        assert_eq!(text(Some("gbk")).fit(&[b'x'; 40]), Fit::Fits);
        let coffee = "☕".as_bytes(); // U+2615: three bytes, in the BMP
        assert_eq!(text(Some("utf8mb3")).fit(coffee), Fit::Fits);
        let emoji = "😀".as_bytes(); // U+1F600: past the BMP
        assert_eq!(text(Some("utf8mb3")).fit(emoji), Fit::Unstorable);
        assert_eq!(text(Some("ucs2")).fit(emoji), Fit::Unstorable);
        assert_eq!(text(Some("utf16")).fit(emoji), Fit::Fits);
        let varchar = TableColumn::new("a".into(), "varchar", Some(2), Some(6), Some("utf8mb3"));
        assert_eq!(varchar.fit("☕☕".as_bytes()), Fit::Fits);
        assert_eq!(varchar.fit("☕☕☕".as_bytes()), Fit::TooLong(3));
    }

    #[test]
    fn integer_columns_know_their_range() {
        let column = |data_type, column_type| {
            TableColumn::new("v".into(), data_type, None, None, None)
                .with_integer_range(data_type, column_type)
                .range
        };
        assert_eq!(
            column("int", "int(11)"),
            Some((-2_147_483_648, 2_147_483_647))
        );
        assert_eq!(column("tinyint", "tinyint(3) unsigned"), Some((0, 255)));
        assert_eq!(
            column("bigint", "bigint unsigned"),
            Some((0, i128::from(u64::MAX)))
        );
        assert_eq!(column("varchar", "varchar(10)"), None);
    }

    #[test]
    fn table_names_are_checked() {
        for bad in ["", "a.", ".b", "a.b.c"] {
            assert!(OutboxTable::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            OutboxTable::new("*.t").unwrap(),
            OutboxTable::new("t").unwrap()
        );
    }
}
