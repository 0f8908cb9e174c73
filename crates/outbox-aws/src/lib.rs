//! AWS sign-in built into the forwarder, without AWS's SDK: IAM tokens for
//! Amazon MSK (SASL/OAUTHBEARER) and for RDS and Aurora MySQL (IAM
//! database authentication), and the credentials they are signed with,
//! found where AWS's SDKs find them.
//!
//! Both tokens are SigV4 presigned URLs ([`sigv4`]), made here exactly as
//! AWS's own signers make them for the same inputs: [`msk_iam_token`] as
//! `aws-msk-iam-sasl-signer-python`, [`rds_auth_token`] as boto3's
//! `generate_db_auth_token`. The tests compare the two byte for byte. A
//! token is valid for [`TOKEN_LIFETIME`] from its signing time; MSK and RDS
//! check it at sign-in only, so a connection outlives it.
//!
//! [`CredentialsChain`] finds the credentials: the environment, a web
//! identity (EKS service account roles), the container endpoint (ECS task
//! roles, EKS Pod Identity), then the EC2 instance profile, and keeps them
//! until shortly before they expire. Everything here blocks: it is called
//! from librdkafka's token refresh callback and from the MySQL connect
//! path, neither of which runs on an async runtime's workers.

pub mod credentials;
mod http;
pub mod sigv4;
pub mod timestamp;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;

pub use credentials::{Credentials, CredentialsChain};
pub use http::USER_AGENT;

/// How long an MSK or RDS token is valid for (`X-Amz-Expires`), as AWS's
/// signers make them.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// An MSK IAM token, the SASL/OAUTHBEARER token a Kafka client signs in to
/// MSK with.
#[derive(Clone, PartialEq, Eq)]
pub struct MskToken {
    /// The token: the presigned URL in base64url without padding.
    pub token: String,
    /// When it stops being valid: [`TOKEN_LIFETIME`] after its signing
    /// time, in whole seconds (the URL's `X-Amz-Date`), as AWS's signer
    /// reckons it.
    pub expires_at: SystemTime,
}

impl std::fmt::Debug for MskToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskToken")
            .field("token", &"<hidden>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Refuses `region` (the setting `option`) unless it looks like an AWS
/// region: lower-case letters, digits and dashes (`eu-west-1`).
pub fn check_region(option: &str, region: &str) -> Result<(), String> {
    let valid = !region.is_empty()
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{option} {region:?} is not an AWS region (e.g. \"eu-west-1\")"
        ))
    }
}

/// The MSK IAM token for a cluster in `region`, signed with `credentials`
/// at `now`, naming the forwarder ([`USER_AGENT`]).
pub fn msk_iam_token(region: &str, credentials: &Credentials, now: SystemTime) -> MskToken {
    msk_iam_token_with_user_agent(region, credentials, now, USER_AGENT)
}

/// [`msk_iam_token`] with the user agent given. AWS's signer names itself
/// (`aws-msk-iam-sasl-signer-python/1.0.2`); MSK records the name and
/// signs nothing with it, as it is added to the URL after signing.
pub fn msk_iam_token_with_user_agent(
    region: &str,
    credentials: &Credentials,
    now: SystemTime,
    user_agent: &str,
) -> MskToken {
    let authority = format!("kafka.{region}.amazonaws.com");
    let url = sigv4::presign(
        &sigv4::Presign {
            authority: &authority,
            path: "/",
            params: &[("Action", "kafka-cluster:Connect")],
            service: "kafka-cluster",
            region,
            expires_in: TOKEN_LIFETIME.as_secs() as u32,
        },
        credentials,
        now,
    );
    let url = format!("{url}&User-Agent={}", sigv4::form_encode(user_agent));
    let signed_at = Duration::from_secs(timestamp::unix_seconds(now));
    MskToken {
        token: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url),
        expires_at: UNIX_EPOCH + signed_at + TOKEN_LIFETIME,
    }
}

/// The RDS IAM database token for `user` on the database at `host` and
/// `port` in `region`, signed with `credentials` at `now`: the password a
/// MySQL client sends (in clear text, so over TLS only) for a user created
/// `IDENTIFIED WITH AWSAuthenticationPlugin AS 'RDS'`. It is the presigned
/// URL without its `https://`, `host` written as given.
pub fn rds_auth_token(
    host: &str,
    port: u16,
    user: &str,
    region: &str,
    credentials: &Credentials,
    now: SystemTime,
) -> String {
    let authority = format!("{host}:{port}");
    let url = sigv4::presign(
        &sigv4::Presign {
            authority: &authority,
            path: "/",
            params: &[("Action", "connect"), ("DBUser", user)],
            service: "rds-db",
            region,
            expires_in: TOKEN_LIFETIME.as_secs() as u32,
        },
        credentials,
        now,
    );
    match url.strip_prefix("https://") {
        Some(token) => token.to_owned(),
        None => url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".to_owned(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned(),
            session_token: None,
            expires: None,
        }
    }

    #[test]
    fn msk_token_is_the_url_in_base64url_with_our_user_agent() {
        let now = UNIX_EPOCH + Duration::from_millis(1_767_225_600_750);
        let token = msk_iam_token("eu-west-2", &credentials(), now);
        assert_eq!(
            token.expires_at,
            UNIX_EPOCH + Duration::from_secs(1_767_225_600 + 900)
        );
        assert!(!token.token.contains('='), "no padding");
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&token.token)
            .expect("base64url");
        let url = String::from_utf8(url).expect("UTF-8");
        assert!(
            url.starts_with(
                "https://kafka.eu-west-2.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm="
            ),
            "{url}"
        );
        assert!(
            url.ends_with(&format!(
                "&User-Agent=outbox-forwarder%2F{}",
                env!("CARGO_PKG_VERSION")
            )),
            "{url}"
        );
        assert!(!format!("{token:?}").contains(&token.token));
    }

    #[test]
    fn a_region_is_lower_case_letters_digits_and_dashes() {
        assert_eq!(check_region("r", "eu-west-1"), Ok(()));
        for bad in ["", "EU-WEST-1", "eu west 1", "eu-west-1/x"] {
            let why = check_region("kafka.aws_msk_iam.region", bad).unwrap_err();
            assert!(why.starts_with("kafka.aws_msk_iam.region "), "{why}");
        }
    }

    #[test]
    fn rds_token_has_no_scheme() {
        let now = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let token = rds_auth_token(
            "db.example.com",
            3306,
            "app",
            "us-east-1",
            &credentials(),
            now,
        );
        assert!(
            token.starts_with("db.example.com:3306/?Action=connect&DBUser=app&X-Amz-Algorithm="),
            "{token}"
        );
        assert!(
            token.contains("%2Fus-east-1%2Frds-db%2Faws4_request&"),
            "{token}"
        );
    }
}
