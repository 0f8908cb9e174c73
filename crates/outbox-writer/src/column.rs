//! One column of the real table: how much it holds, counted as its type
//! and character set count, and which integers it takes. A value that
//! does not fit is refused before it is sent, since a server outside
//! strict mode would cut, replace or clamp it with only a warning.

use outbox_core::rules::TimeColumn;

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
    /// How the column would hold a `timestamp_column`'s time.
    pub time: Option<TimeColumn>,
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

    /// Whether the set stores `value` (UTF-8) as the same bytes, which the
    /// binlog then carries: other bytes are not UTF-8 to the forwarder.
    pub(crate) fn keeps_utf8(self, value: &[u8]) -> bool {
        match self {
            Encoding::AsGiven | Encoding::Utf8Mb3 => true,
            Encoding::OneByte | Encoding::Unknown => value.is_ascii(),
            Encoding::Ucs2 | Encoding::Utf16 | Encoding::Utf32 => value.is_empty(),
        }
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
    /// `data_type`, `column_type`, `chars`, `octets` and `charset` as
    /// information_schema gives them: CHAR and VARCHAR are limited in
    /// characters, the TEXT types (MariaDB's JSON among them) in bytes of
    /// their character set, the binary ones in bytes, and the integer types
    /// (`int`, `int(11) unsigned`) by their range.
    pub(crate) fn new(
        name: String,
        data_type: &str,
        column_type: &str,
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
            range: integer_range(&data_type, column_type),
            time: TimeColumn::of_data_type(&data_type),
        }
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

/// The least and most an integer type holds (`data_type` lowercase);
/// `None` for other types.
fn integer_range(data_type: &str, column_type: &str) -> Option<(i128, i128)> {
    let bits: u32 = match data_type {
        "tinyint" => 8,
        "smallint" => 16,
        "mediumint" => 24,
        "int" | "integer" => 32,
        "bigint" => 64,
        _ => return None,
    };
    let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
    Some(match unsigned {
        true => (0, (1i128 << bits) - 1),
        false => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_columns_length_is_counted_in_its_character_set() {
        let text =
            |charset| TableColumn::new("p".into(), "text", "text", Some(10), Some(10), charset);
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
        let varchar = TableColumn::new(
            "a".into(),
            "varchar",
            "varchar(2)",
            Some(2),
            Some(6),
            Some("utf8mb3"),
        );
        assert_eq!(varchar.fit("☕☕".as_bytes()), Fit::Fits);
        assert_eq!(varchar.fit("☕☕☕".as_bytes()), Fit::TooLong(3));
    }

    #[test]
    fn integer_columns_know_their_range() {
        let column = |data_type, column_type| {
            TableColumn::new("v".into(), data_type, column_type, None, None, None).range
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
}
