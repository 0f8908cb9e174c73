//! SASL/OAUTHBEARER tokens, asked for by librdkafka at a client's start and
//! again before each expires (at 80 % of its lifetime), from one of two
//! sources:
//!
//! - `kafka.aws_msk_iam = { region = "..." }`: Amazon MSK's IAM sign-in,
//!   built in. The token is signed here ([`outbox_aws::msk_iam_token`]) with
//!   credentials from AWS's usual chain (the environment, an EKS service
//!   account's web identity, container credentials, the instance profile;
//!   [`outbox_aws::CredentialsChain`]); it is valid for 15 minutes.
//! - `kafka.oauth_token_command`: a program the Kafka clients run for a
//!   token and its expiry, as Kubernetes credential plugins are: any
//!   in-house token service.
//!
//! The program prints one JSON object on stdout:
//!
//! ```json
//! {"token": "eyJ...", "expires_at_ms": 1767225600000}
//! ```
//!
//! with the expiry as `expires_at_ms` (milliseconds since the epoch) or
//! `expires_in_seconds`, and optionally `principal` (default:
//! `sasl.username`, else `outbox-forwarder`). A non-zero exit, a run over
//! [`TIMEOUT`], or output that is not such an object is an error that names
//! the program (not its arguments, which may hold a secret) and, for a
//! failed run, the end of what it wrote to stderr, redacted ([`redact`]:
//! `curl -v`, `set -x` and cloud CLIs' debug output print credentials
//! there; the whole text is logged at debug only); neither the token nor
//! stdout is ever logged.
//!
//! The program does not inherit the forwarder's environment, which holds
//! the MySQL and Kafka passwords: it gets [`BASE_ENVIRONMENT`] and the
//! variables `kafka.oauth_token_env` names (`AWS_*` for AWS's signer, say).
//! What it prints is read up to [`MAX_OUTPUT`] bytes per stream.

use std::error::Error;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};

use crate::log::log_librdkafka;

/// How long a token command may run.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a failed command's stderr an error quotes.
const STDERR_TAIL: usize = 400;

/// The variables every token command is given, when the forwarder has them.
pub const BASE_ENVIRONMENT: [&str; 7] = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// The most a token command's stdout or stderr is read: a token is a few
/// kilobytes.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// Words that name a secret: the value after one (past `=` or `:`) is
/// redacted, whatever it looks like.
const SECRET_NAMES: [&str; 13] = [
    "bearer",
    "basic",
    "token",
    "secret",
    "password",
    "passwd",
    "key",
    "credential",
    "signature",
    "authorization",
    "session",
    "cookie",
    "auth",
];

/// `text` with what looks like a secret replaced by `[redacted]`: the
/// value after a word that names one (`password=...`, `"SessionToken":
/// "..."`, `Authorization: Bearer ...`), and any word shaped like a token or
/// a key (20 characters or more of letters, digits and `+/=_-.`, with both
/// letters and digits). What is left says what failed.
pub fn redact(text: &str) -> String {
    let secretish = |c: char| c.is_ascii_alphanumeric() || "+/=_-.".contains(c);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        // The previous word, and whether a separator naming a value
        // (`=`, `:`) came after it.
        let mut previous: Option<&str> = None;
        let mut assigned = false;
        let mut rest = line;
        while !rest.is_empty() {
            let end = rest.find(|c: char| !secretish(c)).unwrap_or(rest.len());
            if end == 0 {
                let c = rest.chars().next().expect("not empty");
                if c == ':' || c == '=' {
                    assigned = true;
                } else if !" \t\"'".contains(c) {
                    previous = None;
                    assigned = false;
                }
                out.push(c);
                rest = &rest[c.len_utf8()..];
                continue;
            }
            let (word, after) = rest.split_at(end);
            // `KEY=value` is one run: the name ends at its `=`.
            let (name, value) = match word.split_once('=') {
                Some((name, value)) if !name.is_empty() && !value.is_empty() => (name, Some(value)),
                _ => (word, None),
            };
            let named = |w: &str| {
                let lower = w.to_ascii_lowercase();
                SECRET_NAMES.iter().any(|n| lower.contains(n))
            };
            // After `name=` or `name:`; after `Bearer`/`Basic`, or a flag
            // naming a secret (`--password x`), past a space.
            let after_name = previous.is_some_and(|p| {
                named(p)
                    && (assigned
                        || p.eq_ignore_ascii_case("bearer")
                        || p.eq_ignore_ascii_case("basic")
                        || p.starts_with('-'))
            });
            match value {
                Some(value) if named(name) || looks_like_a_secret(value) => {
                    out.push_str(name);
                    out.push_str("=[redacted]");
                }
                _ if after_name || looks_like_a_secret(word) => out.push_str("[redacted]"),
                _ => out.push_str(word),
            }
            previous = Some(name);
            assigned = false;
            rest = after;
        }
    }
    out
}

/// A word shaped like a token or a key: an AWS access key id, or 20
/// characters or more mixing capitals, small letters and digits, with no
/// dot unless it is a JWT's three parts (a host name, a path or a version
/// has dots, and stays).
fn looks_like_a_secret(word: &str) -> bool {
    let key_id = word.len() == 20
        && (word.starts_with("AKIA") || word.starts_with("ASIA"))
        && word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let mixed = word.len() >= 20
        && word.chars().any(|c| c.is_ascii_uppercase())
        && word.chars().any(|c| c.is_ascii_lowercase())
        && word.chars().any(|c| c.is_ascii_digit());
    let parts: Vec<&str> = word.split('.').collect();
    let jwt = parts.len() == 3 && parts.iter().all(|p| p.len() >= 4);
    key_id || (mixed && (parts.len() == 1 || jwt))
}

/// `kafka.oauth_token_command`: the program and its arguments.
#[derive(Clone)]
pub struct TokenCommand {
    argv: Vec<String>,
    /// When the program names none.
    principal: String,
    /// `kafka.oauth_token_env`: variables passed on besides
    /// [`BASE_ENVIRONMENT`], by name or by `PREFIX*`.
    environment: Vec<String>,
}

impl std::fmt::Debug for TokenCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Arguments may hold a secret.
        f.debug_struct("TokenCommand")
            .field("program", &self.program())
            .finish()
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Printed {
    token: String,
    expires_at_ms: Option<i64>,
    expires_in_seconds: Option<i64>,
    principal: Option<String>,
}

impl TokenCommand {
    /// `argv[0]` is the program; `principal` is used when the program
    /// prints none.
    pub fn new(argv: Vec<String>, principal: String) -> Result<Self, String> {
        if argv.first().is_none_or(|p| p.is_empty()) {
            return Err("kafka.oauth_token_command is empty: name the program to run".into());
        }
        Ok(Self {
            argv,
            principal,
            environment: Vec::new(),
        })
    }

    /// The command, passed the variables `names` names besides
    /// [`BASE_ENVIRONMENT`] (a name, or a prefix followed by `*`).
    pub fn passing(mut self, names: Vec<String>) -> Self {
        self.environment = names;
        self
    }

    /// Whether the variable `name` is passed to the program.
    fn passes(&self, name: &str) -> bool {
        BASE_ENVIRONMENT.contains(&name)
            || self.environment.iter().any(|n| match n.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => n == name,
            })
    }

    /// The program, as errors name it.
    pub fn program(&self) -> &str {
        &self.argv[0]
    }

    /// Runs the program and reads its token.
    pub fn token(&self) -> Result<OAuthToken, String> {
        let failed = |why: String| format!("kafka.oauth_token_command {}: {why}", self.program());
        let (status, stdout, stderr) = self.run().map_err(&failed)?;
        if stdout.len() > MAX_OUTPUT {
            return Err(failed(format!(
                "it printed more than {MAX_OUTPUT} bytes, which no token is"
            )));
        }
        if !status.success() {
            let stderr = String::from_utf8_lossy(&stderr);
            let stderr = stderr.trim();
            tracing::debug!(
                program = self.program(),
                stderr,
                "the token command failed; its whole stderr, unredacted (it may hold \
                 credentials: keep this log level off where logs are shared)"
            );
            let redacted = redact(stderr);
            let tail = match redacted.char_indices().rev().nth(STDERR_TAIL) {
                Some((at, _)) => &redacted[at..],
                None => &redacted,
            };
            return Err(failed(format!("{status}; stderr (redacted): {tail}")));
        }
        let printed: Printed = serde_json::from_slice(&stdout).map_err(|e| {
            // serde's message may quote the output (a bare JSON string is
            // the token itself): only where and what kind of error.
            failed(format!(
                "its output is not {{\"token\": ..., \"expires_at_ms\" or \
                 \"expires_in_seconds\": ...}} ({:?} error at line {} column {})",
                e.classify(),
                e.line(),
                e.column()
            ))
        })?;
        let now_ms = outbox_core::epoch_ms() as i64;
        let lifetime_ms = match (printed.expires_at_ms, printed.expires_in_seconds) {
            (Some(at), None) => at,
            (None, Some(seconds)) => now_ms.saturating_add(seconds.saturating_mul(1000)),
            _ => {
                return Err(failed(
                    "it printed neither or both of expires_at_ms and expires_in_seconds".into(),
                ))
            }
        };
        if printed.token.is_empty() {
            return Err(failed("it printed an empty token".into()));
        }
        if lifetime_ms <= now_ms {
            return Err(failed(format!(
                "the token it printed expired {} ms ago",
                now_ms - lifetime_ms
            )));
        }
        Ok(OAuthToken {
            token: printed.token,
            principal_name: printed.principal.unwrap_or_else(|| self.principal.clone()),
            lifetime_ms,
        })
    }

    /// The program's exit status, stdout and stderr. It runs in a process
    /// group of its own, which is killed after [`TIMEOUT`], and also once
    /// the program has exited if something it started still holds its
    /// output open: nothing it leaves behind can hold the client up.
    fn run(&self) -> Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>), String> {
        use std::os::unix::process::CommandExt;
        let passed =
            std::env::vars_os().filter(|(name, _)| name.to_str().is_some_and(|n| self.passes(n)));
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(passed)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start it: {e}"))?;
        let group = child.id() as libc::pid_t;
        let kill_group = || {
            // SAFETY: signals, by number, the process group spawned above.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        };
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(pipe) = pipe {
                    // One byte past the limit tells that it was passed.
                    let _ = pipe.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut bytes);
                }
                let _ = sender.send(bytes);
            });
            receiver
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    kill_group();
                    let _ = child.wait();
                    return Err(format!(
                        "it ran for over {} s and was killed",
                        TIMEOUT.as_secs()
                    ));
                }
                Err(e) => return Err(format!("cannot wait for it: {e}")),
            }
        };
        let read = |receiver: std::sync::mpsc::Receiver<Vec<u8>>| {
            receiver
                .recv_timeout(Duration::from_secs(1))
                .or_else(|_| {
                    // A process it started holds the pipe: it goes too.
                    kill_group();
                    receiver.recv_timeout(Duration::from_secs(1))
                })
                .unwrap_or_default()
        };
        let stdout = read(stdout);
        let stderr = read(stderr);
        Ok((status, stdout, stderr))
    }
}

/// `kafka.aws_msk_iam`: sign in to Amazon MSK with IAM.
#[derive(serde::Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AwsMskIam {
    /// The cluster's region (`eu-west-1`).
    pub region: String,
}

impl AwsMskIam {
    /// What MSK's IAM listener needs of librdkafka, where `properties` does
    /// not say otherwise: SASL/OAUTHBEARER over TLS.
    pub fn fill_properties(&self, properties: &mut std::collections::BTreeMap<String, String>) {
        for (key, value) in [
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ] {
            properties.entry(key.into()).or_insert_with(|| value.into());
        }
    }
}

/// Where OAUTHBEARER tokens come from.
enum TokenSource {
    Command(TokenCommand),
    MskIam {
        region: String,
        principal: String,
        credentials: outbox_aws::CredentialsChain,
    },
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Command(command) => command.fmt(f),
            Self::MskIam { region, .. } => write!(f, "AwsMskIam({region})"),
        }
    }
}

impl TokenSource {
    /// A token, or why there is none.
    fn token(&self) -> Result<OAuthToken, String> {
        match self {
            Self::Command(command) => command.token(),
            Self::MskIam {
                region,
                principal,
                credentials,
            } => {
                // The lookup may ask STS or the metadata service; a client
                // polled on a runtime's worker (the inbox's stream) lets the
                // runtime move its other tasks meanwhile.
                let credentials = crate::blocking::off_the_runtime(|| credentials.get())
                    .map_err(|why| format!("kafka.aws_msk_iam: {why}"))?;
                let token =
                    outbox_aws::msk_iam_token(region, &credentials, std::time::SystemTime::now());
                // Never past the credentials it was signed with: librdkafka
                // asks again at 80 % of the life it is told.
                let expires_at = credentials
                    .expires
                    .map_or(token.expires_at, |c| c.min(token.expires_at));
                let expires = expires_at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                Ok(OAuthToken {
                    token: token.token,
                    principal_name: principal.clone(),
                    lifetime_ms: expires,
                })
            }
        }
    }

    /// The source, as logs name it.
    fn name(&self) -> &str {
        match self {
            Self::Command(command) => command.program(),
            Self::MskIam { .. } => "kafka.aws_msk_iam",
        }
    }
}

/// What every Kafka client of the project signs in with beyond its
/// properties: the OAUTHBEARER token source, when one is configured.
#[derive(Clone, Default, Debug)]
pub struct ClientAuth {
    token: Option<Arc<TokenSource>>,
    /// Tokens got for the client this was made for ([`ClientAuth::for_client`]).
    tokens: Arc<AtomicU64>,
}

impl ClientAuth {
    /// `kafka.oauth_token_command` (`command`) or `kafka.aws_msk_iam`
    /// (`msk`), at most one of them; a token whose source names no
    /// principal is `properties`' `sasl.username`'s, else
    /// `outbox-forwarder`'s.
    pub fn from_config(
        command: Option<&[String]>,
        environment: &[String],
        msk: Option<&AwsMskIam>,
        properties: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let principal = properties
            .get("sasl.username")
            .cloned()
            .unwrap_or_else(|| "outbox-forwarder".into());
        let source = match (command, msk) {
            (None, None) => return Ok(Self::default()),
            (Some(_), Some(_)) => {
                return Err(
                    "kafka.oauth_token_command and kafka.aws_msk_iam are both set: keep one".into(),
                )
            }
            (Some(argv), None) => {
                needs_oauthbearer("kafka.oauth_token_command", properties)?;
                TokenSource::Command(
                    TokenCommand::new(argv.to_vec(), principal)?.passing(environment.to_vec()),
                )
            }
            (None, Some(msk)) => {
                needs_oauthbearer("kafka.aws_msk_iam", properties)?;
                outbox_aws::check_region("kafka.aws_msk_iam.region", &msk.region)?;
                let protocol = properties.get("security.protocol").map(String::as_str);
                if !protocol.is_some_and(|p| p.to_ascii_lowercase().starts_with("sasl_")) {
                    return Err(format!(
                        "kafka.aws_msk_iam signs in with SASL, but security.protocol is {}: set \
                         \"sasl_ssl\" (or leave it unset)",
                        protocol.unwrap_or("unset")
                    ));
                }
                TokenSource::MskIam {
                    region: msk.region.clone(),
                    principal,
                    credentials: outbox_aws::CredentialsChain::process(),
                }
            }
        };
        Ok(Self {
            token: Some(Arc::new(source)),
            tokens: Arc::default(),
        })
    }

    /// The same command, for a new client, whose own tokens
    /// [`ClientAuth::sign_in`] waits for.
    pub fn for_client(&self) -> Self {
        Self {
            token: self.token.clone(),
            tokens: Arc::default(),
        }
    }

    /// Whether clients sign in with a token the forwarder gets (from the
    /// command or signed for MSK).
    pub fn has_token_command(&self) -> bool {
        self.token.is_some()
    }

    /// For a client that asks the brokers (metadata, watermarks) before
    /// anything polls it: with a token command, polls it (`poll`) until it
    /// has its first token, 5 s at the most. librdkafka queues the refresh
    /// on the client's own queue within a second of its start and serves
    /// it only when polled; until then the client cannot connect. rdkafka's
    /// admin clients are never polled so: [`crate::admin()`] answers
    /// their refresh itself.
    pub fn sign_in(&self, mut poll: impl FnMut()) {
        if self.token.is_none() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.tokens.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
            poll();
        }
    }

    /// The token for librdkafka's refresh; a failure is also logged, since
    /// librdkafka only retries it.
    pub fn generate(&self) -> Result<OAuthToken, Box<dyn Error>> {
        let Some(source) = &self.token else {
            return Err(
                "sasl.mechanism is OAUTHBEARER but none of kafka.oauth_token_command, \
                 kafka.aws_msk_iam and sasl.oauthbearer.method = \"oidc\" is set"
                    .into(),
            );
        };
        match source.token() {
            Ok(token) => {
                self.tokens.fetch_add(1, Ordering::Release);
                tracing::debug!(
                    source = source.name(),
                    lifetime_ms = token.lifetime_ms,
                    "OAUTHBEARER token refreshed"
                );
                Ok(token)
            }
            Err(why) => {
                tracing::error!("cannot get an OAUTHBEARER token: {why}");
                Err(why.into())
            }
        }
    }
}

/// Refuses `option` unless `properties` sign in with OAUTHBEARER.
fn needs_oauthbearer(
    option: &str,
    properties: &std::collections::BTreeMap<String, String>,
) -> Result<(), String> {
    let mechanism = properties.get("sasl.mechanism").map(String::as_str);
    if mechanism.is_some_and(|m| m.eq_ignore_ascii_case("OAUTHBEARER")) {
        return Ok(());
    }
    Err(format!(
        "{option} is set but sasl.mechanism is {}: set \"sasl.mechanism\" = \"OAUTHBEARER\" \
         in [kafka.properties], or remove {option}",
        mechanism.unwrap_or("unset")
    ))
}

/// Implements [`ClientContext::generate_oauth_token`] (and its switch) by
/// the context's [`ClientAuth`] field named in the macro call.
#[macro_export]
macro_rules! oauth_from {
    ($field:ident) => {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

        fn generate_oauth_token(
            &self,
            _oauthbearer_config: Option<&str>,
        ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            self.$field.generate()
        }
    };
}

/// The context of clients with nothing of their own to report (the table
/// tools' and the read-back's consumers, admin clients, the dead-letter
/// producer): librdkafka's logs into `tracing`, and the token command.
impl ClientContext for ClientAuth {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log_librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, "kafka client error: {reason}");
    }

    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _oauthbearer_config: Option<&str>,
    ) -> Result<OAuthToken, Box<dyn Error>> {
        self.generate()
    }
}

impl ConsumerContext for ClientAuth {}

impl ProducerContext for ClientAuth {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error of a run that must fail.
    fn refused(command: &TokenCommand) -> String {
        match command.token() {
            Ok(_) => panic!("{command:?} gave a token"),
            Err(why) => why,
        }
    }

    fn command(script: &str) -> TokenCommand {
        TokenCommand::new(vec!["sh".into(), "-c".into(), script.into()], "svc".into()).unwrap()
    }

    /// librdkafka takes the MSK IAM token the source signs (it checks a
    /// token's characters, principal and lifetime), and the expiry it is
    /// given is the token's own, 15 minutes on.
    #[test]
    fn librdkafka_takes_the_msk_iam_token() {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIAIOSFODNN7EXAMPLE".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned()),
            "AWS_SESSION_TOKEN" => Some("IQoJb3JpZ2luX2VjE+/=".to_owned()),
            _ => None,
        };
        let source = TokenSource::MskIam {
            region: "eu-west-1".into(),
            principal: "outbox-forwarder".into(),
            credentials: outbox_aws::CredentialsChain::with_env(env),
        };
        let now = outbox_core::epoch_ms() as i64;
        let token = source.token().unwrap();
        assert!(
            (now + 899_000..=now + 901_000).contains(&token.lifetime_ms),
            "{} ms from now",
            token.lifetime_ms - now
        );
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("security.protocol", "sasl_plaintext")
            .set("sasl.mechanism", "OAUTHBEARER")
            .create()
            .unwrap();
        let auth = ClientAuth {
            token: Some(Arc::new(source)),
            tokens: Arc::default(),
        };
        // SAFETY: the consumer's client lives for the whole call.
        let taken = unsafe { crate::admin::set_token(consumer.client().native_ptr(), &auth) };
        assert_eq!(taken, Ok(()));
    }

    #[test]
    fn a_token_and_its_expiry_in_either_form() {
        let token = command(r#"echo '{"token": "abc", "expires_at_ms": 99999999999999}'"#)
            .token()
            .unwrap();
        assert_eq!(
            (
                token.token.as_str(),
                token.principal_name.as_str(),
                token.lifetime_ms
            ),
            ("abc", "svc", 99_999_999_999_999)
        );
        let now = outbox_core::epoch_ms() as i64;
        let token =
            command(r#"echo '{"token": "t", "expires_in_seconds": 900, "principal": "p"}'"#)
                .token()
                .unwrap();
        assert_eq!(token.principal_name, "p");
        assert!((now + 899_000..=now + 905_000).contains(&token.lifetime_ms));
    }

    #[test]
    fn failures_name_the_program_and_never_the_output_or_the_arguments() {
        let secret = "s3cr3t-in-args";
        let failing = TokenCommand::new(
            vec![
                "sh".into(),
                "-c".into(),
                format!("echo '{{\"token\": \"{secret}\"'; echo 'signer: no credentials' >&2; exit 3 # {secret}"),
            ],
            "svc".into(),
        )
        .unwrap();
        let why = refused(&failing);
        assert!(why.starts_with("kafka.oauth_token_command sh: "), "{why}");
        assert!(
            why.contains("exit status: 3") && why.contains("signer: no credentials"),
            "{why}"
        );
        assert!(!why.contains(secret), "{why}");
        assert!(!format!("{failing:?}").contains(secret));

        let garbled = refused(&command("echo 'token=s3cr3t'"));
        assert!(garbled.contains("its output is not"), "{garbled}");
        assert!(!garbled.contains("s3cr3t"), "{garbled}");
        let expired = refused(&command(r#"echo '{"token": "t", "expires_at_ms": 1000}'"#));
        assert!(expired.contains("expired"), "{expired}");
        let missing =
            refused(&TokenCommand::new(vec!["/nonexistent/signer".into()], "svc".into()).unwrap());
        assert!(
            missing.starts_with("kafka.oauth_token_command /nonexistent/signer: cannot start it"),
            "{missing}"
        );
        assert!(TokenCommand::new(Vec::new(), "svc".into()).is_err());

        // A bare JSON string (jq without -r) is the token itself.
        let bare = refused(&command(r#"echo '"eyJ-the-token"'"#));
        assert!(
            bare.contains("its output is not") && !bare.contains("eyJ"),
            "{bare}"
        );
    }

    /// Defect: a failing program's stderr was quoted as it came, and
    /// `curl -v`, `set -x` or a cloud CLI's debug output put credentials
    /// and tokens there. What is quoted is redacted: anything that looks
    /// like a token, a key or a secret's value is removed; the rest stays.
    #[test]
    fn a_failing_programs_stderr_is_quoted_without_what_looks_like_a_secret() {
        let stderr = [
            "> Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtc2sifQ.c2lnbmF0dXJl",
            "+ export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
            "+ export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "{\"SessionToken\": \"IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ\"}",
            "password=hunter2 client_secret: s3cr3tValue",
            "> Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "+ curl --password hunter3 https://sts.us-east-1.amazonaws.com/",
            "botocore/5.15.0-1051-aws Linux/5.15.0-1051-aws python3.11",
            "signer: no AWS credentials found",
        ]
        .join("\n");
        let script = format!("cat >&2 <<'EOF'\n{stderr}\nEOF\nexit 3");
        let why = refused(&command(&script));
        for secret in [
            "eyJhbGciOiJSUzI1NiJ9",
            "c2lnbmF0dXJl",
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI",
            "IQoJb3JpZ2luX2VjEJr",
            "hunter2",
            "s3cr3tValue",
            "dXNlcjpwYXNzd29yZA",
            "hunter3",
        ] {
            assert!(!why.contains(secret), "{secret} in: {why}");
        }
        assert!(
            why.contains("exit status: 3")
                && why.contains("signer: no AWS credentials found")
                && why.contains("sts.us-east-1.amazonaws.com")
                && why.contains("Linux/5.15.0-1051-aws")
                && why.contains("[redacted]"),
            "{why}"
        );
    }

    /// Defect: the program inherited the whole environment, the MySQL and
    /// Kafka passwords with it. It gets the base variables and those
    /// `kafka.oauth_token_env` names, by name or prefix.
    #[test]
    fn the_program_sees_only_the_base_environment_and_the_variables_named() {
        // Names of this test's own, set before its commands run.
        std::env::set_var("OAUTH_TEST_MYSQL_PASSWORD", "hunter2");
        std::env::set_var("OAUTH_TEST_AWS_REGION", "eu-west-1");
        std::env::set_var("OAUTH_TEST_ROLE", "signer");
        let script = r#"printf '{"token": "%s|%s|%s|%s", "expires_in_seconds": 60}' \
            "${OAUTH_TEST_MYSQL_PASSWORD:-}" "${OAUTH_TEST_AWS_REGION:-}" "${OAUTH_TEST_ROLE:-}" \
            "$(command -v sh)""#;
        let seen = |names: &[&str]| {
            command(script)
                .passing(names.iter().map(|n| n.to_string()).collect())
                .token()
                .unwrap()
                .token
        };
        let parts =
            |token: String| -> Vec<String> { token.split('|').map(str::to_owned).collect() };
        let base = parts(seen(&[]));
        assert_eq!(base[..3], ["", "", ""]);
        // PATH is passed: sh is found.
        assert!(base[3].ends_with("/sh"), "{base:?}");
        let named = parts(seen(&["OAUTH_TEST_AWS_*", "OAUTH_TEST_ROLE"]));
        assert_eq!(named[..3], ["", "eu-west-1", "signer"]);
    }

    #[test]
    fn output_past_the_limit_is_refused_without_reading_it_all() {
        let flood = refused(&command(
            r#"printf '{"token": "'; head -c 10000000 /dev/zero | tr '\0' a; echo '", "expires_in_seconds": 60}'"#,
        ));
        assert!(flood.contains("more than 65536 bytes"), "{flood}");
    }

    /// Something the program leaves running with its output open cannot
    /// hold the client up: it is killed with the program's process group.
    #[test]
    fn a_process_left_behind_holding_the_output_is_killed() {
        let started = Instant::now();
        let token = command(r#"sleep 60 & echo '{"token": "t", "expires_in_seconds": 60}'"#)
            .token()
            .unwrap();
        assert_eq!(token.token, "t");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    /// librdkafka itself (no broker needed: the refresh is the client's):
    /// the command runs when the client starts and again before the token
    /// it printed expires: once 80 % of its 10 s have passed, as
    /// librdkafka's one-second timer sees it.
    #[test]
    fn librdkafka_runs_the_command_at_start_and_again_before_the_token_expires() {
        use rdkafka::consumer::BaseConsumer;
        let runs = std::env::temp_dir().join(format!("oauth-runs-{}", std::process::id()));
        let _ = std::fs::remove_file(&runs);
        let script = format!(
            "date +%s%3N >> {}; echo '{{\"token\": \"t\", \"expires_in_seconds\": 10}}'",
            runs.display()
        );
        let command = ["sh".to_string(), "-c".into(), script];
        let properties = [("sasl.mechanism".to_string(), "OAUTHBEARER".to_string())].into();
        assert!(ClientAuth::from_config(Some(&command), &[], None, &Default::default()).is_err());
        let auth = ClientAuth::from_config(Some(&command), &[], None, &properties).unwrap();
        let consumer: BaseConsumer<ClientAuth> = rdkafka::ClientConfig::new()
            // Nothing listens there: only the token's life is exercised.
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("security.protocol", "sasl_plaintext")
            .set("sasl.mechanism", "OAUTHBEARER")
            .create_with_context(auth)
            .unwrap();
        let read = || -> Vec<u64> {
            std::fs::read_to_string(&runs)
                .unwrap_or_default()
                .lines()
                .map(|l| l.trim().parse().unwrap())
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while read().len() < 2 && Instant::now() < deadline {
            consumer.poll(Duration::from_millis(100));
        }
        let times = read();
        let _ = std::fs::remove_file(&runs);
        assert!(times.len() >= 2, "runs at {times:?}");
        let gap = times[1] - times[0];
        assert!(
            (7_000..10_000).contains(&gap),
            "refreshed {gap} ms after the first run, before the 10 s token expired"
        );
    }
}
