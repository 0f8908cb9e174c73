//! AWS credentials, found where AWS's SDKs look for them, in their order:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!    `AWS_SESSION_TOKEN` (and `AWS_CREDENTIAL_EXPIRATION`, as botocore
//!    reads it);
//! 2. a web identity: EKS's IAM roles for service accounts, through STS
//!    `AssumeRoleWithWebIdentity`;
//! 3. the container endpoint: ECS task roles and EKS Pod Identity;
//! 4. the EC2 instance profile, through IMDSv2.
//!
//! The first source that is set up gives the credentials; one that is set
//! up but fails (an unreadable token file, STS refusing the role) is an
//! error, not a reason to try the next, as with the SDKs: credentials from
//! further down would be some other identity's. Shared config and
//! credentials files (`~/.aws`), SSO and `credential_process` are not read:
//! a service is given its identity by where it runs or by its environment.
//!
//! [`CredentialsChain`] keeps what it found until [`REFRESH_BEFORE`] before
//! it expires, so that each token is signed without a request. Every
//! lookup blocks, for up to a few seconds when a service is slow.

mod container;
mod found;
mod instance;
mod web_identity;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

pub use found::{Credentials, REFRESH_BEFORE};
use found::{Env, Found, Lookup};

use crate::timestamp::parse_iso8601;

/// A source of credentials: what it found, or why it failed.
type Source = fn(&Env<'_>, SystemTime) -> Result<Found, String>;

/// Finds AWS credentials (see the [module documentation](self)) and keeps
/// them until [`REFRESH_BEFORE`] before they expire. Clones share what is
/// kept.
#[derive(Clone)]
pub struct CredentialsChain {
    inner: Arc<Inner>,
}

struct Inner {
    env: Box<Lookup>,
    cached: Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for CredentialsChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialsChain")
    }
}

impl CredentialsChain {
    /// A chain that reads the process's environment.
    pub fn from_process_env() -> Self {
        Self::with_env(|name| std::env::var(name).ok())
    }

    /// The process's one chain (from its environment), shared by every
    /// Kafka client and MySQL connection that signs in, so that what it
    /// found is asked for once, not once per user.
    pub fn process() -> Self {
        static CHAIN: std::sync::OnceLock<CredentialsChain> = std::sync::OnceLock::new();
        CHAIN.get_or_init(Self::from_process_env).clone()
    }

    /// A chain that reads environment variables through `env` (the value
    /// of a variable, `None` when unset).
    pub fn with_env(env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                env: Box::new(env),
                cached: Mutex::new(None),
            }),
        }
    }

    /// Credentials: those kept, unless they expire within
    /// [`REFRESH_BEFORE`], else the first source's that has some. When
    /// fetching again fails while those kept have not yet expired, those
    /// are returned. Callers at the same time wait for one lookup.
    pub fn get(&self) -> Result<Credentials, String> {
        self.get_at(SystemTime::now())
    }

    fn get_at(&self, now: SystemTime) -> Result<Credentials, String> {
        let mut cached = self
            .inner
            .cached
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(credentials) = cached.as_ref().filter(|c| c.fresh_at(now)) {
            return Ok(credentials.clone());
        }
        match self.load(now) {
            Ok(credentials) => {
                *cached = Some(credentials.clone());
                Ok(credentials)
            }
            Err(error) => match cached.as_ref().filter(|c| !c.expired_at(now)) {
                Some(still_valid) => Ok(still_valid.clone()),
                None => Err(error),
            },
        }
    }

    /// Credentials from the first source that has some.
    fn load(&self, now: SystemTime) -> Result<Credentials, String> {
        let env = Env(self.inner.env.as_ref());
        let sources: [Source; 4] = [
            from_environment,
            web_identity::load,
            container::load,
            instance::load,
        ];
        let mut tried = Vec::with_capacity(sources.len());
        for source in sources {
            match source(&env, now)? {
                Found::Credentials(credentials) => return Ok(credentials),
                Found::Absent(why) => tried.push(why),
            }
        }
        Err(format!(
            "no AWS credentials found; tried {}. Set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for temporary ones), or give \
             the forwarder a role where it runs: on EKS a service account role \
             (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN) or a Pod Identity association, \
             on ECS a task role, on EC2 an instance profile (profiles in ~/.aws are not read)",
            tried.join("; ")
        ))
    }
}

/// Credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN` and `AWS_CREDENTIAL_EXPIRATION`.
fn from_environment(env: &Env<'_>, _now: SystemTime) -> Result<Found, String> {
    let (access_key_id, secret_access_key) = match (
        env.var("AWS_ACCESS_KEY_ID"),
        env.var("AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(id), Some(secret)) => (id, secret),
        (None, None) => {
            return Ok(Found::Absent(
                "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set)"
                    .to_owned(),
            ))
        }
        (Some(_), None) => {
            return Err(
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set \
                            both, or neither to use another source of credentials"
                    .to_owned(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not: set \
                            both, or neither to use another source of credentials"
                    .to_owned(),
            )
        }
    };
    let expires = match env.var("AWS_CREDENTIAL_EXPIRATION") {
        Some(text) => Some(
            parse_iso8601(&text).map_err(|error| format!("AWS_CREDENTIAL_EXPIRATION: {error}"))?,
        ),
        None => None,
    };
    Ok(Found::Credentials(Credentials {
        access_key_id,
        secret_access_key,
        session_token: env.var("AWS_SESSION_TOKEN"),
        expires,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, UNIX_EPOCH};

    use super::found::from_metadata_json;
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// An instance metadata endpoint on a loopback port that nothing
    /// listens on, so that the last source fails at once, and never the
    /// real address.
    fn closed_metadata_endpoint() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        drop(listener);
        format!("http://127.0.0.1:{port}")
    }

    fn chain(vars: &[(&str, &str)]) -> CredentialsChain {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        CredentialsChain::with_env(move |name| vars.get(name).cloned())
    }

    #[test]
    fn credentials_debug_hides_the_secrets() {
        let credentials = Credentials {
            access_key_id: "ASIAEXAMPLE".to_owned(),
            secret_access_key: "the-secret".to_owned(),
            session_token: Some("the-token".to_owned()),
            expires: None,
        };
        let shown = format!("{credentials:?}");
        assert!(shown.contains("ASIAEXAMPLE"), "{shown}");
        assert!(!shown.contains("the-secret"), "{shown}");
        assert!(!shown.contains("the-token"), "{shown}");
    }

    #[test]
    fn the_environment_comes_first() {
        let imds = closed_metadata_endpoint();
        // Every other source is set up too, and would fail if tried.
        let chain = chain(&[
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "token"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/outbox"),
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://127.0.0.1:1/creds",
            ),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds),
        ]);
        let credentials = chain.get().expect("the environment's credentials");
        assert_eq!(credentials.access_key_id, "AKIDENV");
        assert_eq!(credentials.secret_access_key, "secret");
        assert_eq!(credentials.session_token.as_deref(), Some("token"));
        assert_eq!(credentials.expires, None);
    }

    #[test]
    fn web_identity_comes_before_the_container_endpoint() {
        let chain = chain(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/outbox"),
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://127.0.0.1:1/creds",
            ),
        ]);
        let error = chain.get().expect_err("the token file is missing");
        assert!(error.contains("/nonexistent/token"), "{error}");
        assert!(error.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{error}");
    }

    #[test]
    fn nothing_set_up_lists_what_was_tried() {
        let imds = closed_metadata_endpoint();
        let error = chain(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds)])
            .get()
            .expect_err("no credentials anywhere");
        for part in [
            "no AWS credentials found",
            "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set)",
            "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are not set)",
            "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and \
             AWS_CONTAINER_CREDENTIALS_FULL_URI are not set)",
            &format!("the EC2 instance metadata service at {imds}"),
            "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            "instance profile",
        ] {
            assert!(error.contains(part), "{part:?} not in {error}");
        }

        let error = chain(&[("AWS_EC2_METADATA_DISABLED", "true")])
            .get()
            .expect_err("no credentials anywhere");
        assert!(
            error.contains(
                "the EC2 instance metadata service (disabled by AWS_EC2_METADATA_DISABLED)"
            ),
            "{error}"
        );
    }

    #[test]
    fn half_a_key_pair_is_an_error() {
        let error = chain(&[("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "")])
            .get()
            .expect_err("no secret");
        assert!(error.contains("AWS_SECRET_ACCESS_KEY is not"), "{error}");
    }

    /// A chain over the environment that counts its lookups, and whose
    /// credentials (expiring at 10 000 s) can be taken away.
    fn counting_chain() -> (CredentialsChain, Arc<AtomicUsize>, Arc<AtomicBool>) {
        let lookups = Arc::new(AtomicUsize::new(0));
        let gone = Arc::new(AtomicBool::new(false));
        let (counted, taken) = (lookups.clone(), gone.clone());
        let chain = CredentialsChain::with_env(move |name| {
            counted.fetch_add(1, Ordering::SeqCst);
            if taken.load(Ordering::SeqCst) {
                return match name {
                    "AWS_EC2_METADATA_DISABLED" => Some("true".to_owned()),
                    _ => None,
                };
            }
            let value = match name {
                "AWS_ACCESS_KEY_ID" => "AKID",
                "AWS_SECRET_ACCESS_KEY" => "secret",
                "AWS_CREDENTIAL_EXPIRATION" => "1970-01-01T02:46:40Z",
                _ => return None,
            };
            Some(value.to_owned())
        });
        (chain, lookups, gone)
    }

    #[test]
    fn keeps_credentials_until_shortly_before_they_expire() {
        let (chain, lookups, _) = counting_chain();
        let first = chain.get_at(at(1_000)).expect("credentials");
        assert_eq!(first.expires, Some(at(10_000)));
        let after_first = lookups.load(Ordering::SeqCst);

        // A clone shares what is kept.
        assert_eq!(chain.clone().get_at(at(9_000)), Ok(first.clone()));
        assert_eq!(lookups.load(Ordering::SeqCst), after_first);

        // Within a quarter of an hour of the expiry they are fetched again.
        assert_eq!(chain.get_at(at(9_800)), Ok(first));
        assert!(lookups.load(Ordering::SeqCst) > after_first);
    }

    #[test]
    fn a_failed_refresh_keeps_credentials_that_have_not_expired() {
        let (chain, _, gone) = counting_chain();
        let first = chain.get_at(at(1_000)).expect("credentials");
        gone.store(true, Ordering::SeqCst);
        assert_eq!(chain.get_at(at(9_800)), Ok(first));
        let error = chain
            .get_at(at(10_000))
            .expect_err("expired, and none to be had");
        assert!(error.contains("no AWS credentials found"), "{error}");
    }

    #[test]
    fn credentials_without_expiry_are_kept() {
        let lookups = Arc::new(AtomicUsize::new(0));
        let counted = lookups.clone();
        let chain = CredentialsChain::with_env(move |name| {
            counted.fetch_add(1, Ordering::SeqCst);
            match name {
                "AWS_ACCESS_KEY_ID" => Some("AKID".to_owned()),
                "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
                _ => None,
            }
        });
        chain.get_at(at(1_000)).expect("credentials");
        let after_first = lookups.load(Ordering::SeqCst);
        chain.get_at(at(1_000_000)).expect("credentials");
        assert_eq!(lookups.load(Ordering::SeqCst), after_first);
    }

    #[test]
    fn parses_metadata_json() {
        let credentials = from_metadata_json(
            r#"{"Code": "Success", "LastUpdated": "2026-12-06T15:00:00Z", "Type": "AWS-HMAC",
                "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "secret/+=",
                "Token": "token", "Expiration": "2026-12-06T21:00:00Z"}"#,
            "the test",
        )
        .expect("credentials");
        assert_eq!(
            credentials,
            Credentials {
                access_key_id: "ASIAEXAMPLE".to_owned(),
                secret_access_key: "secret/+=".to_owned(),
                session_token: Some("token".to_owned()),
                expires: Some(at(1_796_590_800)),
            }
        );

        // ECS's answer has no Code.
        let credentials = from_metadata_json(
            r#"{"AccessKeyId": "ASIA", "SecretAccessKey": "s", "Token": "t",
                "Expiration": "2026-12-06T21:00:00Z", "RoleArn": "arn"}"#,
            "the test",
        )
        .expect("credentials");
        assert_eq!(credentials.session_token.as_deref(), Some("t"));

        let error = from_metadata_json(r#"{"Code": "Failed", "Message": "no role"}"#, "the test")
            .expect_err("a failure");
        assert_eq!(error, "the test answered Failed: no role");
        let error = from_metadata_json(
            r#"{"AccessKeyId": "ASIA", "Token": "secret-token"}"#,
            "the test",
        )
        .expect_err("no secret");
        assert!(error.contains("without SecretAccessKey"), "{error}");
        assert!(!error.contains("secret-token"), "{error}");
        let error = from_metadata_json("<html>", "the test").expect_err("not JSON");
        assert!(error.contains("other than JSON"), "{error}");
        let error = from_metadata_json(
            r#"{"AccessKeyId": "A", "SecretAccessKey": "S", "Expiration": "tomorrow"}"#,
            "the test",
        )
        .expect_err("bad expiry");
        assert!(error.contains("Expiration"), "{error}");
    }
}
