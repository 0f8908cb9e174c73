//! AWS Signature Version 4 by query string ("presigned URLs"), the one form
//! of SigV4 that MSK's IAM tokens and RDS's IAM database tokens are made
//! of: a `GET` whose only signed header is `host`, with the signature and
//! everything it covers in the URL's query.
//!
//! It follows botocore's `SigV4QueryAuth`, which AWS's own token signers
//! (boto3's `generate_db_auth_token`, `aws-msk-iam-sasl-signer-python`)
//! are built on, down to the order of the URL's parameters: the
//! operation's in the order given, then `X-Amz-Algorithm`,
//! `X-Amz-Credential`, `X-Amz-Date`, `X-Amz-Expires`,
//! `X-Amz-SignedHeaders`, `X-Amz-Security-Token` (with temporary
//! credentials) and last `X-Amz-Signature`. The signature itself covers
//! them sorted by name, as SigV4 requires. The payload is signed as empty,
//! as botocore does for a `GET` over HTTPS.
//!
//! The time is passed in, never read here, so that the same inputs always
//! make the same URL.

use std::fmt::Write as _;
use std::time::SystemTime;

use ring::{digest, hmac};

use crate::credentials::Credentials;
use crate::timestamp::amz_date;

/// The signing algorithm's name, as it appears in `X-Amz-Algorithm`.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The SHA-256 of no bytes: the payload hash of a request without a body.
const EMPTY_PAYLOAD_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A `GET` request to presign.
#[derive(Debug, Clone, Copy)]
pub struct Presign<'a> {
    /// The host the request goes to, with `:port` unless it is 443, as it
    /// is written in the URL (`kafka.eu-west-2.amazonaws.com`,
    /// `db.example.com:3306`).
    pub authority: &'a str,
    /// The absolute path, `/` for the tokens.
    pub path: &'a str,
    /// The operation's query parameters, unencoded, in the order the URL
    /// gives them.
    pub params: &'a [(&'a str, &'a str)],
    /// The name the service signs under (`kafka-cluster`, `rds-db`).
    pub service: &'a str,
    /// The region, `eu-west-2` say.
    pub region: &'a str,
    /// How long the URL is valid for, in seconds (`X-Amz-Expires`).
    pub expires_in: u32,
}

/// The presigned `https://` URL for `request`, signed with `credentials`
/// at `now`.
pub fn presign(request: &Presign<'_>, credentials: &Credentials, now: SystemTime) -> String {
    presign_with_payload_hash(request, credentials, now, EMPTY_PAYLOAD_SHA256)
}

/// [`presign`] with the payload hash given: S3 signs `UNSIGNED-PAYLOAD`
/// instead, which AWS's published example of a presigned URL uses.
fn presign_with_payload_hash(
    request: &Presign<'_>,
    credentials: &Credentials,
    now: SystemTime,
    payload_hash: &str,
) -> String {
    let timestamp = amz_date(now);
    let date = &timestamp[..8];
    let scope = format!("{date}/{}/{}/aws4_request", request.region, request.service);
    let credential = format!("{}/{scope}", credentials.access_key_id);
    let expires = request.expires_in.to_string();

    // Every parameter, percent-encoded, in the URL's order.
    let mut query: Vec<(String, String)> = request
        .params
        .iter()
        .map(|(name, value)| (percent_encode(name), percent_encode(value)))
        .collect();
    let mut auth = vec![
        ("X-Amz-Algorithm", ALGORITHM),
        ("X-Amz-Credential", credential.as_str()),
        ("X-Amz-Date", timestamp.as_str()),
        ("X-Amz-Expires", expires.as_str()),
        ("X-Amz-SignedHeaders", "host"),
    ];
    if let Some(token) = &credentials.session_token {
        auth.push(("X-Amz-Security-Token", token.as_str()));
    }
    query.extend(
        auth.iter()
            .map(|(name, value)| (percent_encode(name), percent_encode(value))),
    );

    let mut sorted = query.clone();
    sorted.sort();
    let canonical_query = join_query(&sorted);
    let path = encode_path(request.path);
    let canonical_request = format!(
        "GET\n{path}\n{canonical_query}\nhost:{}\n\nhost\n{payload_hash}",
        host_header(request.authority)
    );
    let string_to_sign = format!(
        "{ALGORITHM}\n{timestamp}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let key = signing_key(
        &credentials.secret_access_key,
        date,
        request.region,
        request.service,
    );
    let signature = hex(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());

    format!(
        "https://{}{}?{}&X-Amz-Signature={signature}",
        request.authority,
        request.path,
        join_query(&query)
    )
}

/// SigV4's signing key: the secret, then the date, the region, the service
/// and `aws4_request`, each the HMAC-SHA256 key of the next.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let mut key = hmac::Key::new(hmac::HMAC_SHA256, format!("AWS4{secret}").as_bytes());
    for part in [date, region, service, "aws4_request"] {
        let tag = hmac::sign(&key, part.as_bytes());
        key = hmac::Key::new(hmac::HMAC_SHA256, tag.as_ref());
    }
    key
}

/// The `host` header botocore signs for a URL's authority: lower case,
/// without the port when it is HTTPS's own.
fn host_header(authority: &str) -> String {
    let host = authority.to_ascii_lowercase();
    match host.strip_suffix(":443") {
        Some(without) => without.to_owned(),
        None => host,
    }
}

fn join_query(pairs: &[(String, String)]) -> String {
    let mut out = String::new();
    for (name, value) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// `path` percent-encoded as [`percent_encode`] does, but for its `/`.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(percent_encode)
        .collect::<Vec<_>>()
        .join("/")
}

/// `text` percent-encoded by AWS's rules: its UTF-8 bytes, with the
/// unreserved `A-Z a-z 0-9 - _ . ~` kept and every other byte as `%XX` in
/// capitals (a space is `%20`, never `+`).
pub fn percent_encode(text: &str) -> String {
    encode(text, false)
}

/// `text` encoded as an HTML form (and Python's `urlencode`) encodes a
/// value: as [`percent_encode`], but a space is `+`. The MSK token's
/// `User-Agent`, added after signing, is encoded so.
pub fn form_encode(text: &str) -> String {
    encode(text, true)
}

fn encode(text: &str, space_as_plus: bool) -> String {
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' if space_as_plus => out.push('+'),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// Bytes as lower-case hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn credentials(secret: &str, token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".to_owned(),
            secret_access_key: secret.to_owned(),
            session_token: token.map(str::to_owned),
            expires: None,
        }
    }

    #[test]
    fn encodes_by_aws_rules() {
        assert_eq!(percent_encode("AZaz09-_.~"), "AZaz09-_.~");
        assert_eq!(
            percent_encode("app+user@x/y z=1&é"),
            "app%2Buser%40x%2Fy%20z%3D1%26%C3%A9"
        );
        assert_eq!(
            percent_encode("kafka-cluster:Connect"),
            "kafka-cluster%3AConnect"
        );
        assert_eq!(form_encode("a b/1.0"), "a+b%2F1.0");
    }

    #[test]
    fn host_header_drops_https_port_only() {
        assert_eq!(
            host_header("Kafka.EU-West-2.amazonaws.com"),
            "kafka.eu-west-2.amazonaws.com"
        );
        assert_eq!(host_header("db.example.com:3306"), "db.example.com:3306");
        assert_eq!(host_header("db.example.com:443"), "db.example.com");
    }

    /// The signing key derived in AWS's SigV4 documentation ("Examples of
    /// how to derive a signing key").
    #[test]
    fn derives_the_documented_signing_key() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        // A key cannot be read back; its HMAC of nothing is compared with
        // that under the documented key's bytes.
        let documented = [
            0xf4, 0x78, 0x0e, 0x2d, 0x9f, 0x65, 0xfa, 0x89, 0x5f, 0x9c, 0x67, 0xb3, 0x2c, 0xe1,
            0xba, 0xf0, 0xb0, 0xd8, 0xa4, 0x35, 0x05, 0xa0, 0x00, 0xa1, 0xa9, 0xe0, 0x90, 0xd4,
            0x14, 0xdb, 0x40, 0x4d,
        ];
        let expected = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &documented), b"");
        assert_eq!(hmac::sign(&key, b"").as_ref(), expected.as_ref());
    }

    /// The presigned URL of Amazon S3's "Authenticating Requests: Using
    /// Query Parameters": S3 signs `UNSIGNED-PAYLOAD` where the tokens sign
    /// an empty payload, and the rest is the same.
    #[test]
    fn matches_the_documented_s3_presigned_url() {
        let request = Presign {
            authority: "examplebucket.s3.amazonaws.com",
            path: "/test.txt",
            params: &[],
            service: "s3",
            region: "us-east-1",
            expires_in: 86_400,
        };
        let url = presign_with_payload_hash(
            &request,
            &credentials("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None),
            UNIX_EPOCH + Duration::from_secs(1_369_353_600),
            "UNSIGNED-PAYLOAD",
        );
        assert_eq!(
            url,
            "https://examplebucket.s3.amazonaws.com/test.txt\
             ?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z\
             &X-Amz-Expires=86400\
             &X-Amz-SignedHeaders=host\
             &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn keeps_the_url_order_and_adds_the_session_token() {
        let request = Presign {
            authority: "db.example.com:3306",
            path: "/",
            params: &[("Action", "connect"), ("DBUser", "app+user@x")],
            service: "rds-db",
            region: "eu-west-2",
            expires_in: 900,
        };
        let url = presign(
            &request,
            &credentials("secret", Some("token/with+=")),
            UNIX_EPOCH + Duration::from_secs(1_767_225_600),
        );
        let query = url
            .strip_prefix("https://db.example.com:3306/?")
            .expect("the URL starts with the host and path");
        let names: Vec<&str> = query
            .split('&')
            .map(|pair| pair.split_once('=').map_or(pair, |(name, _)| name))
            .collect();
        assert_eq!(
            names,
            [
                "Action",
                "DBUser",
                "X-Amz-Algorithm",
                "X-Amz-Credential",
                "X-Amz-Date",
                "X-Amz-Expires",
                "X-Amz-SignedHeaders",
                "X-Amz-Security-Token",
                "X-Amz-Signature"
            ]
        );
        assert!(query.contains("DBUser=app%2Buser%40x&"), "{query}");
        assert!(
            query.contains("X-Amz-Security-Token=token%2Fwith%2B%3D&"),
            "{query}"
        );
    }
}
