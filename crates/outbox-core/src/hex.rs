//! Bytes as hexadecimal text, written in one allocation: a GTID's server
//! UUID is written for every MySQL transaction.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` in lowercase hexadecimal, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    push_hex(&mut text, bytes);
    text
}

/// A 16-byte UUID as MySQL prints a `server_uuid`:
/// `3e11fa47-71ca-11e1-9e33-c80aa9429562`.
pub fn uuid(bytes: &[u8; 16]) -> String {
    let mut text = String::with_capacity(36);
    for (i, part) in [
        &bytes[..4],
        &bytes[4..6],
        &bytes[6..8],
        &bytes[8..10],
        &bytes[10..],
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            text.push('-');
        }
        push_hex(&mut text, part);
    }
    text
}

fn push_hex(text: &mut String, bytes: &[u8]) {
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_written_as_the_formatter_writes_them() {
        let bytes: Vec<u8> = (0..=255).collect();
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), formatted);
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert_eq!(uuid(&sid), "3e11fa47-71ca-11e1-9e33-c80aa9429562");
    }
}
