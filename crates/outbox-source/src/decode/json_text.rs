//! MySQL's binary JSON (a JSON column in a MySQL binlog) written straight
//! to JSON text, node by node, without a tree of values in between: no
//! allocation per node but one small list of keys per object.
//!
//! The text is the one the forwarder has always published: compact, an
//! object's keys in byte order, strings escaped and numbers written as
//! `serde_json` writes them. Values a JSON document holds in MySQL's own
//! types (opaque values) are written as the server prints them
//! (`CAST(... AS CHAR)`): a DECIMAL as a number, a DATETIME or TIMESTAMP as
//! `"YYYY-MM-DD hh:mm:ss.ffffff"`, a DATE as `"YYYY-MM-DD"`, a TIME as
//! `"hh:mm:ss.ffffff"`, any other as `"base64:typeN:..."`.

use std::io;

use mysql_common::binlog::jsonb::{
    self, Array, ComplexValue, JsonDom, JsonScalar, Object, OpaqueValue, StorageFormat,
};
use mysql_common::constants::ColumnType;

/// Nesting past this is refused: MySQL's own limit is 100 levels.
const MAX_DEPTH: usize = 128;

/// Text past this is refused: more than the largest document a server
/// sends (1 GiB), which only a damaged one whose entries point at the
/// same values again and again could make.
const MAX_TEXT: usize = 1 << 30;

/// Appends `value` as JSON text to `out`.
pub(super) fn write(value: jsonb::Value<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    write_value(value, out, 0).map_err(|e| e.to_string())
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn write_value(value: jsonb::Value<'_>, out: &mut Vec<u8>, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(invalid(format!("nested deeper than {MAX_DEPTH} levels")));
    }
    if out.len() > MAX_TEXT {
        return Err(invalid(format!("longer than {MAX_TEXT} bytes as text")));
    }
    match value {
        jsonb::Value::Null => out.extend_from_slice(b"null"),
        jsonb::Value::Bool(true) => out.extend_from_slice(b"true"),
        jsonb::Value::Bool(false) => out.extend_from_slice(b"false"),
        jsonb::Value::I16(n) => integer(out, i64::from(n)),
        jsonb::Value::U16(n) => integer(out, u64::from(n)),
        jsonb::Value::I32(n) => integer(out, i64::from(n)),
        jsonb::Value::U32(n) => integer(out, u64::from(n)),
        jsonb::Value::I64(n) => integer(out, n),
        jsonb::Value::U64(n) => integer(out, n),
        jsonb::Value::F64(x) => float(out, x),
        jsonb::Value::String(s) => string(out, utf8(s.str_raw())?),
        jsonb::Value::SmallArray(a) => array(&a, out, depth)?,
        jsonb::Value::LargeArray(a) => array(&a, out, depth)?,
        jsonb::Value::SmallObject(o) => object(&o, out, depth)?,
        jsonb::Value::LargeObject(o) => object(&o, out, depth)?,
        jsonb::Value::Opaque(value) => opaque(value, out)?,
    }
    Ok(())
}

fn utf8(bytes: &[u8]) -> io::Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| invalid(format!("text that is not UTF-8: {e}")))
}

fn integer(out: &mut Vec<u8>, n: impl serde::Serialize) {
    serde_json::to_writer(&mut *out, &n).expect("a number writes to a Vec");
}

/// As `serde_json` writes a float (a non-finite one, which binary JSON
/// cannot hold, as `null`).
fn float(out: &mut Vec<u8>, x: f64) {
    serde_json::to_writer(&mut *out, &x).expect("a number writes to a Vec");
}

/// `s` as a JSON string, escaped as `serde_json` escapes it: `"` and `\`,
/// the five control characters with short escapes, the other ones below
/// U+0020 as `\u00xx`. Eight bytes at a time are checked for one that
/// needs escaping, and the runs between are copied whole: a payload is
/// mostly long strings with nothing to escape.
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(word) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let byte = bytes[i];
        if let Some(escape) = escape(byte) {
            out.extend_from_slice(&bytes[run..i]);
            match escape {
                b'u' => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(byte >> 4)]);
                    out.push(HEX[usize::from(byte & 0xf)]);
                }
                short => out.extend_from_slice(&[b'\\', short]),
            }
            run = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// Whether one of the eight bytes of `word` is below 0x20, `"` or `\`
/// (exact: the bit tricks flag a word only when one of its bytes is).
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH != 0;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH != 0;
    below_space
        || has_zero(word ^ (ONES * u64::from(b'"')))
        || has_zero(word ^ (ONES * u64::from(b'\\')))
}

/// The letter after the backslash that escapes `byte`, `u` for `\u00xx`;
/// `None` when it is written as it is.
fn escape(byte: u8) -> Option<u8> {
    match byte {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        0x08 => Some(b'b'),
        0x0c => Some(b'f'),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b'\t' => Some(b't'),
        0x00..=0x1f => Some(b'u'),
        _ => None,
    }
}

fn array<T: StorageFormat>(
    array: &ComplexValue<'_, T, Array>,
    out: &mut Vec<u8>,
    depth: usize,
) -> io::Result<()> {
    out.push(b'[');
    for (i, element) in array.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_value(element?, out, depth + 1)?;
    }
    out.push(b']');
    Ok(())
}

fn object<T: StorageFormat>(
    object: &ComplexValue<'_, T, Object>,
    out: &mut Vec<u8>,
    depth: usize,
) -> io::Result<()> {
    // MySQL keeps keys by length, then bytes; the text has them in byte
    // order.
    let mut entries = Vec::with_capacity(object.element_count() as usize);
    for entry in object.iter() {
        let (key, value) = entry?;
        entries.push((key, value));
    }
    entries.sort_by(|(a, _), (b, _)| a.value_raw().cmp(b.value_raw()));
    out.push(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, utf8(key.value_raw())?);
        out.push(b':');
        write_value(value, out, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

/// A value in one of MySQL's own types, as the server prints it.
fn opaque(value: OpaqueValue<'_>, out: &mut Vec<u8>) -> io::Result<()> {
    match value.value_type() {
        ColumnType::MYSQL_TYPE_NEWDECIMAL => decimal(value.data_raw(), out),
        ColumnType::MYSQL_TYPE_DATE
        | ColumnType::MYSQL_TYPE_TIME
        | ColumnType::MYSQL_TYPE_DATETIME
        | ColumnType::MYSQL_TYPE_TIMESTAMP => {
            // The one packed value `mysql_common` cannot negate.
            if value.data_raw().get(..8) == Some(&i64::MIN.to_le_bytes()[..]) {
                return Err(invalid("a packed date or time out of range"));
            }
            match jsonb::Value::Opaque(value).parse()? {
                JsonDom::Scalar(JsonScalar::DateTime(t)) => string(out, &format!("{t:.6}")),
                _ => return Err(invalid("a date or time that is not one")),
            }
            Ok(())
        }
        _ => match jsonb::Value::Opaque(value).parse()? {
            JsonDom::Scalar(JsonScalar::Opaque(o)) => {
                string(out, &o.to_string());
                Ok(())
            }
            _ => Err(invalid("an opaque value of no known type")),
        },
    }
}

/// Bytes that hold `n` decimal digits in MySQL's packed DECIMAL.
fn decimal_bytes(n: usize) -> usize {
    const LEFTOVER: [usize; 9] = [0, 1, 1, 2, 2, 3, 3, 4, 4];
    n / 9 * 4 + LEFTOVER[n % 9]
}

/// MySQL's packed DECIMAL as the server prints it (every digit of its
/// scale): precision and scale, then the integer part and the fraction in
/// big-endian groups of nine digits (four bytes; the integer part's
/// leftover digits first, the fraction's last, each in as few bytes as
/// hold them), the first bit flipped and every byte inverted when
/// negative. Written here rather than by `mysql_common`, whose reader
/// trusts the lengths and digits a damaged value can break.
fn decimal(data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let [precision, scale, packed @ ..] = data else {
        return Err(invalid("a DECIMAL without its precision and scale"));
    };
    let (precision, scale) = (usize::from(*precision), usize::from(*scale));
    // A value's own precision and scale, not a column's: a product's may
    // pass a column's bounds (65, 30).
    if precision == 0 || scale > precision {
        return Err(invalid(format!("a DECIMAL({precision},{scale})")));
    }
    let whole = precision - scale;
    let size = decimal_bytes(whole) + decimal_bytes(scale);
    let Some(packed) = packed.get(..size) else {
        return Err(invalid(format!(
            "a DECIMAL({precision},{scale}) in {} bytes, not {size}",
            packed.len()
        )));
    };
    let negative = packed[0] & 0x80 == 0;
    let mut bytes = packed.iter().enumerate().map(|(i, &b)| {
        let b = if i == 0 { b ^ 0x80 } else { b };
        if negative {
            !b
        } else {
            b
        }
    });
    let mut group = |digits: usize, text: &mut String| -> io::Result<()> {
        let value = (0..decimal_bytes(digits))
            .filter_map(|_| bytes.next())
            .fold(0u64, |n, b| n << 8 | u64::from(b));
        if value >= 10u64.pow(digits as u32) {
            return Err(invalid(format!(
                "a DECIMAL group of {digits} digits holding {value}"
            )));
        }
        text.push_str(&format!("{value:0digits$}"));
        Ok(())
    };
    let mut text = String::with_capacity(precision + 2);
    let groups = |n: usize| {
        (!n.is_multiple_of(9))
            .then_some(n % 9)
            .into_iter()
            .chain(std::iter::repeat_n(9, n / 9))
    };
    for digits in groups(whole) {
        group(digits, &mut text)?;
    }
    let whole_digits = text.trim_start_matches('0');
    let mut printed = String::with_capacity(precision + 3);
    if negative {
        printed.push('-');
    }
    printed.push_str(if whole_digits.is_empty() {
        "0"
    } else {
        whole_digits
    });
    if scale > 0 {
        printed.push('.');
        let mut fraction = String::with_capacity(scale);
        for digits in
            std::iter::repeat_n(9, scale / 9).chain((!scale.is_multiple_of(9)).then_some(scale % 9))
        {
            group(digits, &mut fraction)?;
        }
        printed.push_str(&fraction);
    }
    out.extend_from_slice(printed.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use mysql_common::io::ParseBuf;
    use mysql_common::proto::MyDeserialize;
    use serde_json::json;

    use super::*;

    /// MySQL's binary JSON of `value`, in the small storage format (what
    /// the server writes for documents under 64 KiB).
    fn encode(value: &serde_json::Value) -> Vec<u8> {
        let (kind, body) = encode_value(value);
        let mut out = vec![kind];
        out.extend(body);
        out
    }

    /// A value's type byte and its bytes (inlined values: their 2 bytes).
    fn encode_value(value: &serde_json::Value) -> (u8, Vec<u8>) {
        use serde_json::Value::*;
        match value {
            Null => (0x04, vec![0x00, 0]),
            Bool(true) => (0x04, vec![0x01, 0]),
            Bool(false) => (0x04, vec![0x02, 0]),
            Number(n) if n.as_i64().is_some_and(|i| i16::try_from(i).is_ok()) => {
                (0x05, (n.as_i64().unwrap() as i16).to_le_bytes().to_vec())
            }
            Number(n) if n.is_i64() => (0x09, n.as_i64().unwrap().to_le_bytes().to_vec()),
            Number(n) if n.is_u64() => (0x0a, n.as_u64().unwrap().to_le_bytes().to_vec()),
            Number(n) => (0x0b, n.as_f64().unwrap().to_le_bytes().to_vec()),
            String(s) => {
                let mut out = Vec::new();
                let mut len = s.len();
                loop {
                    let byte = (len & 0x7f) as u8;
                    len >>= 7;
                    if len == 0 {
                        out.push(byte);
                        break;
                    }
                    out.push(byte | 0x80);
                }
                out.extend_from_slice(s.as_bytes());
                (0x0c, out)
            }
            Array(items) => (0x02, container(None, &items.iter().collect::<Vec<_>>())),
            Object(map) => {
                // Stored by key length, then bytes, as MySQL does.
                let mut entries: Vec<(&std::string::String, &serde_json::Value)> =
                    map.iter().collect();
                entries.sort_by(|a, b| (a.0.len(), a.0).cmp(&(b.0.len(), b.0)));
                let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
                let values: Vec<&serde_json::Value> = entries.iter().map(|(_, v)| *v).collect();
                (0x00, container(Some(&keys), &values))
            }
        }
    }

    /// A small object (with `keys`) or array: count, size, key entries,
    /// value entries, keys, values; offsets from the count.
    fn container(keys: Option<&[&str]>, values: &[&serde_json::Value]) -> Vec<u8> {
        let n = values.len();
        let entries = 4 + keys.map_or(0, |_| 4 * n) + 3 * n;
        let mut tail: Vec<u8> = Vec::new();
        let mut key_entries = Vec::new();
        for key in keys.unwrap_or_default() {
            key_entries.extend(((entries + tail.len()) as u16).to_le_bytes());
            key_entries.extend((key.len() as u16).to_le_bytes());
            tail.extend_from_slice(key.as_bytes());
        }
        let mut value_entries = Vec::new();
        for value in values {
            let (kind, body) = encode_value(value);
            value_entries.push(kind);
            if matches!(kind, 0x04 | 0x05) {
                value_entries.extend(&body);
            } else {
                value_entries.extend(((entries + tail.len()) as u16).to_le_bytes());
                tail.extend(body);
            }
        }
        let mut out = Vec::new();
        out.extend((n as u16).to_le_bytes());
        out.extend(((entries + tail.len()) as u16).to_le_bytes());
        out.extend(key_entries);
        out.extend(value_entries);
        out.extend(tail);
        out
    }

    fn text_of(bytes: &[u8]) -> Result<Vec<u8>, String> {
        let value =
            jsonb::Value::deserialize((), &mut ParseBuf(bytes)).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        write(value, &mut out)?;
        Ok(out)
    }

    /// A small xorshift generator: the same documents on every run.
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn text(&mut self) -> String {
            const PIECES: [&str; 12] = [
                "a", "Z", "0", " ", "\"", "\\", "\n", "\u{1}", "é", "你好", "🎉", "\u{7f}",
            ];
            (0..self.below(6))
                .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
                .collect()
        }

        fn document(&mut self, depth: u32) -> serde_json::Value {
            let kinds = if depth >= 4 { 7 } else { 9 };
            match self.below(kinds) {
                0 => serde_json::Value::Null,
                1 => json!(self.below(2) == 0),
                2 => json!(self.below(1 << 15) as i64 - (1 << 14)),
                3 => json!(self.next() as i64),
                4 => json!(self.next()),
                5 => json!((self.next() as i64 as f64) / 1024.0),
                6 => json!(self.text()),
                7 => serde_json::Value::Array(
                    (0..self.below(5))
                        .map(|_| self.document(depth + 1))
                        .collect(),
                ),
                _ => serde_json::Value::Object(
                    (0..self.below(5))
                        .map(|_| (self.text(), self.document(depth + 1)))
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn documents_are_written_as_the_tree_of_values_wrote_them_byte_for_byte() {
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5_000 {
            let document = random.document(0);
            let bytes = encode(&document);
            let written = text_of(&bytes).unwrap();
            // The path this replaces: a tree of values, then its text.
            let tree: serde_json::Value = serde_json::Value::try_from(
                jsonb::Value::deserialize((), &mut ParseBuf(&bytes)).unwrap(),
            )
            .unwrap();
            assert_eq!(written, serde_json::to_vec(&tree).unwrap(), "{document}");
            assert_eq!(written, serde_json::to_vec(&document).unwrap());
        }
    }

    /// Every byte below 0x80 at every place of a word and of the tail
    /// after the last whole word, and random strings of up to 39 pieces
    /// (runs of up to 15 plain bytes, quotes, backslashes, control
    /// characters, multi-byte UTF-8): written as `serde_json` writes them.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let check = |s: &str| {
            let mut written = Vec::new();
            string(&mut written, s);
            assert_eq!(written, serde_json::to_vec(s).unwrap(), "{s:?}");
        };
        for byte in 0u8..0x80 {
            for at in 0..20 {
                let mut s = "a".repeat(at);
                s.push(char::from(byte));
                s.push_str(&"é".repeat(19 - at));
                check(&s);
            }
        }
        let mut random = Random(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let pieces = random.below(40);
            let s: String = (0..pieces)
                .map(|_| match random.below(3) {
                    0 => "x".repeat(random.below(16) as usize),
                    _ => random.text(),
                })
                .collect();
            check(&s);
        }
    }

    /// What damaged input came to: refused, or written as valid JSON (a
    /// panic fails the test).
    #[derive(Default)]
    struct Outcomes {
        refused: usize,
        written: usize,
    }

    impl Outcomes {
        fn see(&mut self, bytes: &[u8]) {
            match text_of(bytes) {
                Ok(text) => {
                    serde_json::from_slice::<serde_json::Value>(&text)
                        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&text)));
                    self.written += 1;
                }
                Err(_) => self.refused += 1,
            }
        }

        /// Both outcomes were seen: the damage reached the decoder.
        fn assert_both_seen(&self) {
            let (refused, written) = (self.refused, self.written);
            assert!(
                refused > 1_000 && written > 1_000,
                "{refused} refused, {written} written"
            );
        }
    }

    #[test]
    fn damaged_documents_are_refused_or_written_as_json_never_a_panic() {
        let mut random = Random(0x2545_f491_4f6c_dd1d);
        let mut outcomes = Outcomes::default();
        for _ in 0..20_000 {
            let mut bytes = encode(&random.document(0));
            for _ in 0..=random.below(3) {
                let at = random.below(bytes.len() as u64) as usize;
                bytes[at] = random.next() as u8;
            }
            if random.below(4) == 0 {
                let cut = random.below(bytes.len() as u64) as usize;
                bytes.truncate(cut);
            }
            outcomes.see(&bytes);
        }
        outcomes.assert_both_seen();
    }

    /// A document that is one opaque value: its column type and data.
    fn opaque_document(column_type: ColumnType, data: &[u8]) -> Vec<u8> {
        let mut out = vec![0x0f, column_type as u8, u8::try_from(data.len()).unwrap()];
        out.extend_from_slice(data);
        out
    }

    fn decimal_text(data: &[u8]) -> Result<String, String> {
        text_of(&opaque_document(ColumnType::MYSQL_TYPE_NEWDECIMAL, data))
            .map(|text| String::from_utf8(text).unwrap())
    }

    #[test]
    fn decimals_are_written_with_every_digit_of_their_scale() {
        // DECIMAL(6,2) 1234.50: 1234 in two bytes, 50 in one, the first bit
        // flipped.
        assert_eq!(decimal_text(&[6, 2, 0x84, 0xd2, 0x32]).unwrap(), "1234.50");
        // Negative: every byte of the positive form inverted, then the flip.
        assert_eq!(decimal_text(&[6, 2, 0x7b, 0x2d, 0xcd]).unwrap(), "-1234.50");
        // DECIMAL(3,3) 0.500.
        assert_eq!(decimal_text(&[3, 3, 0x81, 0xf4]).unwrap(), "0.500");
        // DECIMAL(20,0) 5: groups of 2, 9 and 9 digits, leading zeros not
        // printed.
        assert_eq!(
            decimal_text(&[20, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 5]).unwrap(),
            "5"
        );
        // DECIMAL(30,20) 1.00000000000000000001: the fraction's nine-digit
        // groups, then its two-digit leftover.
        let mut data = vec![30, 20, 0x80, 0, 0, 0, 1];
        data.extend([0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(decimal_text(&data).unwrap(), "1.00000000000000000001");
    }

    #[test]
    fn damaged_decimals_and_dates_are_refused_with_what_is_wrong() {
        for (data, what) in [
            (&[0u8, 0, 0x80][..], "DECIMAL(0,0)"),
            (&[4, 6, 0x80, 0, 0], "DECIMAL(4,6)"),
            (&[6, 2, 0x84, 0xd2], "in 2 bytes, not 3"),
            (&[2, 0, 0xff], "holding 127"),
            (&[7], "without its precision"),
        ] {
            let error = decimal_text(data).unwrap_err();
            assert!(error.contains(what), "{data:?}: {error}");
        }
        let error = text_of(&opaque_document(
            ColumnType::MYSQL_TYPE_DATETIME,
            &i64::MIN.to_le_bytes(),
        ))
        .unwrap_err();
        assert!(error.contains("out of range"), "{error}");
    }

    #[test]
    fn random_opaque_values_are_refused_or_written_as_json_never_a_panic() {
        let mut random = Random(0x1234_5678_9abc_def1);
        let types = [
            ColumnType::MYSQL_TYPE_NEWDECIMAL,
            ColumnType::MYSQL_TYPE_DATE,
            ColumnType::MYSQL_TYPE_TIME,
            ColumnType::MYSQL_TYPE_DATETIME,
            ColumnType::MYSQL_TYPE_TIMESTAMP,
            ColumnType::MYSQL_TYPE_BLOB,
        ];
        let mut outcomes = Outcomes::default();
        for _ in 0..20_000 {
            let column_type = types[random.below(types.len() as u64) as usize];
            let mut data: Vec<u8> = (0..random.below(16)).map(|_| random.next() as u8).collect();
            if column_type == ColumnType::MYSQL_TYPE_NEWDECIMAL && data.len() >= 2 {
                // Mostly plausible precisions and scales, so the digits are
                // read too.
                data[0] = random.below(40) as u8;
                data[1] = random.below(12) as u8;
            }
            outcomes.see(&opaque_document(column_type, &data));
        }
        outcomes.assert_both_seen();
    }

    #[test]
    fn nesting_past_the_bound_is_refused() {
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!([deep]);
        }
        let error = text_of(&encode(&deep)).unwrap_err();
        assert!(error.contains("nested deeper"), "{error}");
    }
}
