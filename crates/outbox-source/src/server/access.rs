//! How a client reaches a server, as a configuration says it: `[mysql.tls]`
//! ([`TlsSection`]), the rule that plaintext goes only to this host unless
//! allowed ([`refuse_plaintext`]), and a password kept outside the file
//! ([`secret_from_env`], [`secret_from_file`]). The forwarder and the inbox
//! consumer read their `[mysql]` sections through these, so that both
//! connect the same way.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use outbox_core::DefiniteError;

use super::{MysqlConnect, MysqlTls, TlsMode};

/// `[mysql.tls]`.
#[derive(serde::Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// `disabled` (the default: a local primary needs no TLS), `required`,
    /// `verify_ca` or `verify_identity`.
    #[serde(default)]
    pub mode: TlsMode,
    /// CA certificate(s) (PEM) the server's certificate must chain to;
    /// the built-in Mozilla roots when unset.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for accounts created with `REQUIRE X509`.
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub client_key_file: Option<PathBuf>,
    /// With `mode = "disabled"`, a candidate that is not on this host is
    /// refused unless this is set: over plain TCP the binlog (every
    /// table's rows) and caching_sha2_password's key exchange cross the
    /// network in clear. For a private network only (a compose project's).
    #[serde(default)]
    pub allow_plaintext: bool,
}

impl TlsSection {
    /// The TLS settings, with conflicting options refused and every named
    /// file checked to be readable now rather than at the first connection.
    pub fn resolve(&self) -> Result<MysqlTls, DefiniteError> {
        let mode = self.mode;
        let conflict = |why: &str| Err(DefiniteError::Config(format!("[mysql.tls]: {why}")));
        if self.ca_file.is_some() && !matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyIdentity) {
            return conflict(&format!(
                "ca_file is only used with mode = \"verify_ca\" or \"verify_identity\", \
                 mode is \"{mode}\""
            ));
        }
        let client_identity = match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => return conflict("client_cert_file and client_key_file go together"),
        };
        if client_identity.is_some() && mode == TlsMode::Disabled {
            return conflict("a client certificate needs TLS: set mode");
        }
        for (option, path) in [
            ("ca_file", &self.ca_file),
            ("client_cert_file", &self.client_cert_file),
            ("client_key_file", &self.client_key_file),
        ] {
            if let Some(path) = path {
                std::fs::File::open(path).map_err(|e| {
                    DefiniteError::Config(format!(
                        "mysql.tls.{option}: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        Ok(MysqlTls {
            mode,
            ca_file: self.ca_file.clone(),
            client_identity,
        })
    }
}

/// Refuses plaintext (`tls` resolved from a section whose
/// `allow_plaintext` is `allowed`) to any of `candidates` that is not on
/// this host: the replication password's exchange and the binlog (every
/// table's rows) would cross the network in clear.
pub fn refuse_plaintext(
    tls: &MysqlTls,
    allowed: bool,
    candidates: &[MysqlConnect],
) -> Result<(), DefiniteError> {
    if tls.mode != TlsMode::Disabled || allowed {
        return Ok(());
    }
    match candidates.iter().find_map(MysqlConnect::remote_host) {
        None => Ok(()),
        Some(host) => Err(DefiniteError::Config(format!(
            "mysql.url: {host} is not on this host and [mysql.tls] mode is \"disabled\": the \
             password's exchange and every row read would cross the network in clear. Set \
             [mysql.tls] mode = \"verify_identity\" (with ca_file for a private CA), or \
             allow_plaintext = true where the network is private"
        ))),
    }
}

/// The secret `<setting>_env` or `<setting>_file` names (at most one of
/// them may be set): read from that variable (through `env`) or file;
/// `None` when neither is set.
pub fn secret_from_either(
    setting: &str,
    variable: Option<&str>,
    file: Option<&Path>,
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<Option<String>, DefiniteError> {
    match (variable, file) {
        (Some(_), Some(_)) => Err(DefiniteError::Config(format!(
            "{setting}_env and {setting}_file are both set; keep one"
        ))),
        (Some(name), None) => secret_from_env(&format!("{setting}_env"), name, env).map(Some),
        (None, Some(path)) => secret_from_file(&format!("{setting}_file"), path).map(Some),
        (None, None) => Ok(None),
    }
}

/// A secret read from the environment variable `name`, for `option`.
pub fn secret_from_env(
    option: &str,
    name: &str,
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<String, DefiniteError> {
    let value = env(name).ok_or_else(|| {
        DefiniteError::Config(format!(
            "{option}: the environment variable {name} is not set"
        ))
    })?;
    let value = value.into_string().map_err(|_| {
        DefiniteError::Config(format!(
            "{option}: the environment variable {name} is not valid UTF-8"
        ))
    })?;
    if value.is_empty() {
        return Err(DefiniteError::Config(format!(
            "{option}: the environment variable {name} is empty"
        )));
    }
    Ok(value)
}

/// A secret read from the file at `path`, for `option`. One trailing
/// newline is dropped: `echo secret > file` should just work.
pub fn secret_from_file(option: &str, path: &Path) -> Result<String, DefiniteError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        DefiniteError::Config(format!("{option}: cannot read {}: {e}", path.display()))
    })?;
    let value = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if value.is_empty() {
        return Err(DefiniteError::Config(format!(
            "{option}: {} is empty",
            path.display()
        )));
    }
    Ok(value.to_owned())
}
