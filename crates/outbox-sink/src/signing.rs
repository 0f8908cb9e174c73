//! Signed messages: with `kafka.signing_key` set, every message the
//! forwarder publishes carries [`HEADER_SIGNATURE`], an HMAC-SHA256 under
//! that key over the headers in [`SIGNED`] (the event id and version, the
//! table and the binlog coordinates). Whoever may write the outbox topics
//! but does not hold the key cannot make a message the read-back after a
//! restart, the table tools (`verify`, `repair-gap`, `prune`, retention)
//! or the inbox take for one of the forwarder's: they verify the signature
//! when the key is set and pass over (or park) a message without a valid
//! one.
//!
//! Each signed header enters the MAC as its length and its bytes, or a
//! marker when absent, in [`SIGNED`]'s order: no two sets of headers share
//! an input.

use outbox_core::headers::{HEADER_SIGNATURE, SIGNED};
use rdkafka::message::Headers;

/// The shortest key taken, in bytes.
pub const MIN_KEY_BYTES: usize = 16;

/// An HMAC-SHA256 key that signs and verifies messages.
#[derive(Clone)]
pub struct Signing {
    key: ring::hmac::Key,
}

impl std::fmt::Debug for Signing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signing(<key>)")
    }
}

impl Signing {
    /// The key `secret` (its bytes as given); refused when shorter than
    /// [`MIN_KEY_BYTES`].
    pub fn new(secret: &[u8]) -> Result<Self, String> {
        if secret.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the signing key has {} bytes; use at least {MIN_KEY_BYTES} random ones",
                secret.len()
            ));
        }
        Ok(Self {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
        })
    }

    /// The signature of a message whose header `name` has the value
    /// `value(name)`.
    pub fn sign<'a>(&self, value: impl Fn(&str) -> Option<&'a [u8]>) -> String {
        hex(ring::hmac::sign(&self.key, &signed_input(value)).as_ref())
    }

    /// Whether `headers` carry a valid signature of themselves.
    pub fn verifies<H: Headers>(&self, headers: Option<&H>) -> bool {
        let Some(headers) = headers else {
            return false;
        };
        let value = |name: &str| headers.iter().find(|h| h.key == name).and_then(|h| h.value);
        self.verifies_with(value)
    }

    /// [`Signing::verifies`] for headers looked up by `value`.
    pub fn verifies_with<'a>(&self, value: impl Fn(&str) -> Option<&'a [u8]>) -> bool {
        let Some(signature) = value(HEADER_SIGNATURE).and_then(unhex) else {
            return false;
        };
        ring::hmac::verify(&self.key, &signed_input(value), &signature).is_ok()
    }
}

/// What the MAC is computed over.
fn signed_input<'a>(value: impl Fn(&str) -> Option<&'a [u8]>) -> Vec<u8> {
    let mut input = Vec::with_capacity(256);
    for name in SIGNED {
        match value(name) {
            Some(bytes) => {
                input.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
                input.extend_from_slice(bytes);
            }
            None => input.extend_from_slice(&u32::MAX.to_be_bytes()),
        }
    }
    input
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::headers::{EVENT_ID, EVENT_VERSION, HEADER_BINLOG_ROW, HEADER_SOURCE_TABLE};
    use rdkafka::message::{Header, OwnedHeaders};

    fn headers(pairs: &[(&str, &str)]) -> OwnedHeaders {
        pairs.iter().fold(OwnedHeaders::new(), |h, (key, value)| {
            h.insert(Header {
                key,
                value: Some(value.as_bytes()),
            })
        })
    }

    fn signed(signing: &Signing, pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        let unsigned = headers(pairs);
        let signature = signing.sign(|name| {
            unsigned
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
        });
        let mut all: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.push((HEADER_SIGNATURE.into(), signature));
        all
    }

    fn verifies(signing: &Signing, pairs: &[(String, String)]) -> bool {
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        signing.verifies(Some(&headers(&pairs)))
    }

    const ROW: [(&str, &str); 4] = [
        (EVENT_ID, "e-1"),
        (EVENT_VERSION, "3"),
        (HEADER_SOURCE_TABLE, "shop.outbox_event"),
        (HEADER_BINLOG_ROW, "0"),
    ];

    #[test]
    fn a_signed_message_verifies_and_any_change_to_what_is_signed_does_not() {
        let signing = Signing::new(b"0123456789abcdef-key").unwrap();
        let good = signed(&signing, &ROW);
        assert!(verifies(&signing, &good));
        for (i, (name, _)) in ROW.iter().enumerate() {
            let mut changed = good.clone();
            changed[i].1.push('x');
            assert!(!verifies(&signing, &changed), "{name} changed");
        }
        // A header removed, or one a signature did not cover added.
        assert!(!verifies(&signing, &good[1..]));
        let mut added = good.clone();
        added.insert(0, ("binlog_position".into(), "bin.000001:4".into()));
        assert!(!verifies(&signing, &added));
        // Headers outside what is signed may be added (published_by).
        let mut extra = good.clone();
        extra.push(("published_by".into(), "a".into()));
        assert!(verifies(&signing, &extra));
    }

    #[test]
    fn another_key_no_signature_and_a_short_key_are_refused() {
        let signing = Signing::new(b"0123456789abcdef-key").unwrap();
        let other = Signing::new(b"another key of 16+ bytes").unwrap();
        let good = signed(&signing, &ROW);
        assert!(!verifies(&other, &good));
        let unsigned: Vec<(String, String)> = good[..ROW.len()].to_vec();
        assert!(!verifies(&signing, &unsigned));
        let mut garbled = good.clone();
        garbled.last_mut().unwrap().1 = "zz".into();
        assert!(!verifies(&signing, &garbled));
        assert!(Signing::new(b"short").is_err());
        assert!(!format!("{signing:?}").contains("0123"));
    }
}
