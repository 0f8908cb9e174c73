//! Signed messages: with `kafka.signing_key` set, every message the
//! forwarder publishes carries [`HEADER_SIGNATURE`], an HMAC-SHA256 under
//! that key over the whole message: its topic, key, payload (by its
//! SHA-256) and every header in order, but `published_by` (an instance's
//! name, added after) and the signature itself. Whoever may write the
//! outbox topics but does not hold the key cannot make a message the
//! read-back after a restart, the table tools (`verify`, `repair-gap`,
//! `prune`) or the inbox take for one of the forwarder's: they verify the
//! signature when the key is set and pass over (or park) a message without
//! a valid one. A header added, repeated, emptied or changed, a payload or
//! key changed, or a message copied to another topic (a dead letter into a
//! consumed topic) no longer verifies.
//!
//! Each part enters the MAC as its length and its bytes (a marker when
//! absent), so no two messages share an input.

use outbox_core::headers::{HEADER_PUBLISHED_BY, HEADER_SIGNATURE};
use outbox_core::hex::hex;
use rdkafka::message::{Headers, Message};

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

    /// The signature of a message to `topic` with `key`, `payload` and
    /// `headers` (before the signature and `published_by` are added).
    pub fn sign<H: Headers>(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: &H,
    ) -> String {
        let input = signed_input(topic, key, payload, headers);
        hex(ring::hmac::sign(&self.key, &input).as_ref())
    }

    /// Whether `message` carries exactly one signature, and a valid one.
    pub fn verifies<M: Message>(&self, message: &M) -> bool {
        let Some(headers) = message.headers() else {
            return false;
        };
        let mut signatures = headers
            .iter()
            .filter(|h| h.key == HEADER_SIGNATURE)
            .map(|h| h.value);
        let (Some(Some(signature)), None) = (signatures.next(), signatures.next()) else {
            return false;
        };
        let Some(signature) = unhex(signature) else {
            return false;
        };
        let input = signed_input(message.topic(), message.key(), message.payload(), headers);
        ring::hmac::verify(&self.key, &input, &signature).is_ok()
    }
}

/// What the MAC is computed over.
fn signed_input<H: Headers>(
    topic: &str,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: &H,
) -> Vec<u8> {
    let mut input = Vec::with_capacity(512);
    let mut part = |bytes: Option<&[u8]>| match bytes {
        Some(bytes) => {
            input.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            input.extend_from_slice(bytes);
        }
        None => input.extend_from_slice(&u32::MAX.to_be_bytes()),
    };
    part(Some(topic.as_bytes()));
    part(key);
    let digest = payload.map(|p| ring::digest::digest(&ring::digest::SHA256, p));
    part(digest.as_ref().map(|d| d.as_ref()));
    for header in headers.iter() {
        if header.key == HEADER_SIGNATURE || header.key == HEADER_PUBLISHED_BY {
            continue;
        }
        part(Some(header.key.as_bytes()));
        part(header.value);
    }
    input
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
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    fn headers(pairs: &[(&str, Option<&str>)]) -> OwnedHeaders {
        pairs.iter().fold(OwnedHeaders::new(), |h, (key, value)| {
            h.insert(Header {
                key,
                value: value.map(str::as_bytes),
            })
        })
    }

    /// A message as a consumer would see it.
    fn message(topic: &str, payload: &str, pairs: &[(&str, Option<&str>)]) -> OwnedMessage {
        OwnedMessage::new(
            Some(payload.as_bytes().to_vec()),
            Some(b"e-1".to_vec()),
            topic.into(),
            Timestamp::NotAvailable,
            0,
            0,
            Some(headers(pairs)),
        )
    }

    const ROW: [(&str, Option<&str>); 4] = [
        ("event_id", Some("e-1")),
        ("event_version", Some("3")),
        ("source_table", Some("shop.outbox_event")),
        ("binlog_row", Some("0")),
    ];

    /// What the producer publishes: the headers, signed, then its name.
    fn signed(signing: &Signing, topic: &str, payload: &str) -> Vec<(String, Option<String>)> {
        let signature = signing.sign(
            topic,
            Some(b"e-1"),
            Some(payload.as_bytes()),
            &headers(&ROW),
        );
        ROW.iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
            .chain([
                (HEADER_SIGNATURE.to_owned(), Some(signature)),
                (HEADER_PUBLISHED_BY.to_owned(), Some("a".to_owned())),
            ])
            .collect()
    }

    fn verifies(
        signing: &Signing,
        topic: &str,
        payload: &str,
        pairs: &[(String, Option<String>)],
    ) -> bool {
        let pairs: Vec<(&str, Option<&str>)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        signing.verifies(&message(topic, payload, &pairs))
    }

    #[test]
    fn a_signed_message_verifies_and_any_change_to_it_does_not() {
        let signing = Signing::new(b"0123456789abcdef-key").unwrap();
        let good = signed(&signing, "outbox.order", "{}");
        assert!(verifies(&signing, "outbox.order", "{}", &good));
        for i in 0..ROW.len() {
            let mut changed = good.clone();
            changed[i].1.as_mut().unwrap().push('x');
            assert!(
                !verifies(&signing, "outbox.order", "{}", &changed),
                "{i} changed"
            );
            let mut emptied = good.clone();
            emptied[i].1 = None;
            assert!(
                !verifies(&signing, "outbox.order", "{}", &emptied),
                "{i} null"
            );
        }
        // The payload, the topic (a dead letter copied into a consumed one).
        assert!(!verifies(&signing, "outbox.order", "{\"n\":1}", &good));
        assert!(!verifies(&signing, "outbox.payment", "{}", &good));
        // A header removed, repeated, or added (the inbox reads the last
        // of a repeated one).
        assert!(!verifies(&signing, "outbox.order", "{}", &good[1..]));
        let mut repeated = good.clone();
        repeated.push(("event_id".into(), Some("e-2".into())));
        assert!(!verifies(&signing, "outbox.order", "{}", &repeated));
        let mut added = good.clone();
        added.insert(0, ("event_type".into(), Some("ORDER_CANCELLED".into())));
        assert!(!verifies(&signing, "outbox.order", "{}", &added));
        // Two signatures: refused, whichever is valid.
        let mut twice = good.clone();
        twice.push((HEADER_SIGNATURE.into(), Some("00".repeat(32))));
        assert!(!verifies(&signing, "outbox.order", "{}", &twice));
        // The instance's name is not signed.
        let mut renamed = good.clone();
        renamed.last_mut().unwrap().1 = Some("b".into());
        assert!(verifies(&signing, "outbox.order", "{}", &renamed));
    }

    #[test]
    fn another_key_no_signature_and_a_short_key_are_refused() {
        let signing = Signing::new(b"0123456789abcdef-key").unwrap();
        let other = Signing::new(b"another key of 16+ bytes").unwrap();
        let good = signed(&signing, "t", "{}");
        assert!(!verifies(&other, "t", "{}", &good));
        let unsigned: Vec<_> = good
            .iter()
            .filter(|(k, _)| k != HEADER_SIGNATURE)
            .cloned()
            .collect();
        assert!(!verifies(&signing, "t", "{}", &unsigned));
        let mut garbled = good.clone();
        garbled[ROW.len()].1 = Some("zz".into());
        assert!(!verifies(&signing, "t", "{}", &garbled));
        assert!(Signing::new(b"short").is_err());
        assert!(!format!("{signing:?}").contains("0123"));
    }
}
