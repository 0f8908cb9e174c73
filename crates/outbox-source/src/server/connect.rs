//! The connection to a server: the URL as configured with the password and
//! TLS settings kept outside it applied on top, turned into driver options
//! in one place ([`MysqlConnect::opts`]), never logged.

use std::fmt;
use std::path::PathBuf;

use mysql_async::{ClientIdentity, Conn, Opts, OptsBuilder, SslOpts};
use outbox_core::{DefiniteError, ForwarderError};

use super::classify;

/// What a TLS failure in `err` was, if it is one: a certificate refused,
/// unreadable TLS material, or a server that does not offer TLS.
pub(super) fn tls_failure(err: &mysql_async::Error) -> Option<String> {
    match err {
        mysql_async::Error::Io(mysql_async::IoError::Tls(e)) => Some(e.to_string()),
        // The handshake's own failures arrive as I/O errors wrapping rustls's.
        mysql_async::Error::Io(mysql_async::IoError::Io(e)) => e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .map(ToString::to_string),
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
            Some("the server does not offer TLS (start it with ssl_cert and ssl_key)".into())
        }
        _ => None,
    }
}

/// How far the client checks the server's certificate, named after the
/// MySQL client's `--ssl-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// No TLS.
    #[default]
    Disabled,
    /// Encrypted, but any certificate is accepted (no protection against an
    /// active man in the middle).
    Required,
    /// The certificate must chain to a trusted CA; the name is not compared.
    VerifyCa,
    /// The certificate must chain to a trusted CA and name the host connected to.
    VerifyIdentity,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::Required => "required",
            TlsMode::VerifyCa => "verify_ca",
            TlsMode::VerifyIdentity => "verify_identity",
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TLS to the primary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MysqlTls {
    pub mode: TlsMode,
    /// PEM file of the CA certificate(s) the server's certificate must chain
    /// to; when unset, the built-in Mozilla roots (`webpki-roots`).
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain and its private key (PEM), for accounts
    /// created with `REQUIRE X509`.
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

impl MysqlTls {
    fn ssl_opts(&self) -> Option<SslOpts> {
        let verify = match self.mode {
            TlsMode::Disabled => return None,
            TlsMode::Required => SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
            TlsMode::VerifyCa => SslOpts::default().with_danger_skip_domain_validation(true),
            TlsMode::VerifyIdentity => SslOpts::default(),
        };
        let roots = match &self.ca_file {
            // A configured CA is the only one trusted.
            Some(ca) => verify
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true),
            None => verify,
        };
        let identity = self
            .client_identity
            .as_ref()
            .map(|(cert, key)| ClientIdentity::new(cert.clone().into(), key.clone().into()));
        Some(roots.with_client_identity(identity))
    }
}

/// How to reach the primary: the configured URL, with the password and TLS
/// settings that live outside it applied on top.
#[derive(Clone)]
pub struct MysqlConnect {
    url: String,
    password: Option<String>,
    tls: MysqlTls,
}

impl fmt::Debug for MysqlConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConnect")
            .field("url", &"<hidden>")
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl<'de> serde::Deserialize<'de> for MysqlConnect {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(MysqlConnect::new)
    }
}

impl MysqlConnect {
    /// `mysql://user[:password]@host[:port][/db]`, without TLS.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            password: None,
            tls: MysqlTls::default(),
        }
    }

    /// Uses `password` instead of the URL's.
    pub fn with_password(mut self, password: String) -> Self {
        self.password = Some(password);
        self
    }

    pub fn with_tls(mut self, tls: MysqlTls) -> Self {
        self.tls = tls;
        self
    }

    pub fn tls(&self) -> &MysqlTls {
        &self.tls
    }

    /// The driver options. TLS is configured here only: a URL asking for it
    /// through its own parameters is refused rather than half-honoured.
    pub fn opts(&self) -> Result<Opts, DefiniteError> {
        let opts = Opts::from_url(&self.url)
            .map_err(|e| DefiniteError::Config(format!("mysql.url is invalid: {e}")))?;
        if opts.ssl_opts().is_some() {
            return Err(DefiniteError::Config(
                "mysql.url sets TLS parameters (require_ssl, verify_ca, verify_identity, \
                 built_in_roots); configure TLS under [mysql.tls] instead"
                    .into(),
            ));
        }
        let mut builder = OptsBuilder::from_opts(opts);
        if let Some(password) = &self.password {
            builder = builder.pass(Some(password.clone()));
        }
        if let Some(ssl) = self.tls.ssl_opts() {
            // mysql_async builds its rustls configuration with the process's
            // default crypto provider; name ring in case another dependency
            // also compiles aws-lc-rs into rustls. An error only means a
            // provider is already installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
            builder = builder
                .ssl_opts(ssl)
                // After a TCP connection to a local server the driver would
                // otherwise switch to the Unix socket, leaving the verified
                // TLS channel the operator asked for.
                .prefer_socket(false);
        }
        Ok(builder.into())
    }
}

/// Whether the server `opts` reach is on this host: a loopback address,
/// `localhost`, or a Unix socket. Anything else crosses a network.
pub fn on_this_host(opts: &Opts) -> bool {
    let host = opts.ip_or_hostname();
    // An IPv6 address keeps the URL's brackets.
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    opts.socket().is_some()
        || host
            .parse::<std::net::IpAddr>()
            .map_or(host.eq_ignore_ascii_case("localhost"), |ip| {
                ip.is_loopback()
            })
}

impl MysqlConnect {
    /// The host of the URL when it is not on this host ([`on_this_host`]);
    /// `None` for a local server or a URL that does not parse (refused
    /// where it is used).
    pub fn remote_host(&self) -> Option<String> {
        let opts = Opts::from_url(&self.url).ok()?;
        (!on_this_host(&opts)).then(|| opts.ip_or_hostname().to_owned())
    }
}

/// The driver options for `connect` (never logged: they may hold a password).
pub fn parse_url(connect: &MysqlConnect) -> Result<Opts, DefiniteError> {
    connect.opts()
}

/// A connection to the server `opts` name, signed in as `mysql.aws_iam`
/// chose when it is set ([`super::iam`]).
pub async fn connect(opts: &Opts) -> Result<Conn, ForwarderError> {
    let signed = super::iam::signed(opts).await?;
    Conn::new(signed.unwrap_or_else(|| opts.clone()))
        .await
        .map_err(|e| classify(e, "connection"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "mysql://repl:in-the-url@db.example:3306";

    #[test]
    fn a_password_from_outside_the_url_replaces_the_urls() {
        let opts = MysqlConnect::new(URL)
            .with_password("from-a-file".into())
            .opts()
            .unwrap();
        assert_eq!(opts.pass(), Some("from-a-file"));
        assert_eq!(opts.user(), Some("repl"));
        assert_eq!(opts.ip_or_hostname(), "db.example");
        assert!(opts.ssl_opts().is_none());
        let plain = MysqlConnect::new(URL).opts().unwrap();
        assert_eq!(plain.pass(), Some("in-the-url"));
    }

    #[test]
    fn debug_shows_neither_the_url_nor_the_password() {
        let connect = MysqlConnect::new(URL).with_password("pw-from-env".into());
        let shown = format!("{connect:?}");
        assert!(!shown.contains("in-the-url") && !shown.contains("pw-from-env"));
        assert!(!shown.contains("db.example"), "{shown}");
    }

    fn tls(mode: TlsMode, ca: Option<&str>) -> MysqlTls {
        MysqlTls {
            mode,
            ca_file: ca.map(PathBuf::from),
            client_identity: None,
        }
    }

    #[test]
    fn each_tls_mode_maps_to_the_drivers_verification_switches() {
        let opts = |t| MysqlConnect::new(URL).with_tls(t).opts().unwrap();
        assert!(opts(tls(TlsMode::Disabled, None)).ssl_opts().is_none());

        let required = opts(tls(TlsMode::Required, None));
        let ssl = required.ssl_opts().unwrap();
        assert!(ssl.accept_invalid_certs() && ssl.skip_domain_validation());
        assert!(
            !required.prefer_socket(),
            "TLS must not switch to the socket"
        );

        let ca = opts(tls(TlsMode::VerifyCa, Some("/etc/ca.pem")));
        let ssl = ca.ssl_opts().unwrap();
        assert!(!ssl.accept_invalid_certs() && ssl.skip_domain_validation());
        assert!(
            ssl.disable_built_in_roots(),
            "only the configured CA is trusted"
        );
        assert_eq!(ssl.root_certs(), [PathBuf::from("/etc/ca.pem").into()]);

        let identity = opts(MysqlTls {
            client_identity: Some(("/c.pem".into(), "/k.pem".into())),
            ..tls(TlsMode::VerifyIdentity, None)
        });
        let ssl = identity.ssl_opts().unwrap();
        assert!(!ssl.accept_invalid_certs() && !ssl.skip_domain_validation());
        assert!(!ssl.disable_built_in_roots() && ssl.root_certs().is_empty());
        let client = ssl.client_identity().unwrap();
        assert_eq!(client.cert_chain(), PathBuf::from("/c.pem").into());
        assert_eq!(client.priv_key(), PathBuf::from("/k.pem").into());
    }

    #[test]
    fn tls_parameters_in_the_url_are_refused() {
        let err = MysqlConnect::new(format!("{URL}?require_ssl=true"))
            .opts()
            .expect_err("TLS belongs to [mysql.tls]");
        assert!(err.to_string().contains("[mysql.tls]"), "{err}");
        assert!(!err.to_string().contains("in-the-url"), "{err}");
    }
}
