//! What the sources of credentials find, and what they read: the
//! credentials themselves, the environment as they see it, and the JSON the
//! container endpoint and the instance metadata service answer with.

use std::time::{Duration, SystemTime};

use crate::timestamp::parse_iso8601;

/// How long before their expiry credentials are fetched again.
/// A quarter of an hour, as botocore: a token signed with them (valid 15
/// minutes) never outlives them.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(15 * 60);

/// AWS credentials: a key pair, temporary ones with a session token and an
/// expiry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (`AKIA...` for a user's key, `ASIA...` for
    /// temporary credentials); not a secret.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
    /// When temporary credentials expire.
    pub expires: Option<SystemTime>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<hidden>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<hidden>"),
            )
            .field("expires", &self.expires)
            .finish()
    }
}

impl Credentials {
    /// Whether these are still good at `now` for at least [`REFRESH_BEFORE`].
    pub(super) fn fresh_at(&self, now: SystemTime) -> bool {
        self.expires
            .is_none_or(|expires| now + REFRESH_BEFORE < expires)
    }

    /// Whether these have expired at `now`.
    pub(super) fn expired_at(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|expires| now >= expires)
    }
}

/// How the chain reads an environment variable.
pub(super) type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// The environment as the sources see it: a variable set empty is taken as
/// unset.
pub(crate) struct Env<'a>(pub(super) &'a Lookup);

impl Env<'_> {
    /// The variable `name`, when set and not empty.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|value| !value.is_empty())
    }
}

/// What a source found.
pub(crate) enum Found {
    /// Credentials.
    Credentials(Credentials),
    /// Nothing, as the source is not set up here: the source, and why
    /// (`the environment (AWS_ACCESS_KEY_ID ... are not set)`).
    Absent(String),
}

/// Credentials from the JSON the container endpoint and the instance
/// metadata service answer with (`AccessKeyId`, `SecretAccessKey`, `Token`,
/// `Expiration`, and from the metadata service `Code`). `source` names the
/// service in errors; the body is never quoted, as it may hold a secret.
pub(crate) fn from_metadata_json(body: &str, source: &str) -> Result<Credentials, String> {
    let value: serde_json::Value = serde_json::from_str(body)
        .map_err(|error| format!("{source} answered with something other than JSON ({error})"))?;
    let field = |name: &str| {
        value
            .get(name)
            .and_then(serde_json::Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_owned)
    };
    if let Some(code) = field("Code").filter(|code| code != "Success") {
        let message = field("Message").unwrap_or_default();
        return Err(format!("{source} answered {code}: {message}"));
    }
    let required = |name: &str| {
        field(name).ok_or_else(|| format!("{source} answered without {name} in its credentials"))
    };
    let expires = match field("Expiration") {
        Some(text) => Some(
            parse_iso8601(&text)
                .map_err(|error| format!("{source} answered an Expiration that is not {error}"))?,
        ),
        None => None,
    };
    Ok(Credentials {
        access_key_id: required("AccessKeyId")?,
        secret_access_key: required("SecretAccessKey")?,
        session_token: field("Token"),
        expires,
    })
}
