//! What the forwarder asks of the primary before and around streaming:
//! settings, identity, the binlog files it still has, and where it is now.
//! Each setting is checked by name and reported as
//! [`DefiniteError::InvalidSystemSetting`] with what was expected.
//!
//! Every connection is made from one [`MysqlConnect`]: the URL as configured
//! with the password and TLS settings kept outside it applied on top, turned
//! into driver options in one place ([`MysqlConnect::opts`]). It is never
//! logged: its `Debug` hides the URL and the password.

//!
//! One file per concern: [`access`] (`[mysql.tls]`, plaintext, passwords
//! kept outside the file, as configured), [`connect`] (the URL, TLS, the
//! connection),
//! [`iam`] (RDS's IAM sign-in), [`settings`] (identity, the settings read
//! by name, the role among the candidates), [`binlogs`] (the files it has and where it writes now) and
//! [`gtid`] (its GTID state and history).

use outbox_core::{DefiniteError, ForwarderError};

mod access;
mod binlogs;
mod connect;
mod filters;
mod gtid;
mod iam;
mod settings;

pub use access::{
    refuse_plaintext, secret_from_either, secret_from_env, secret_from_file, TlsSection,
};
pub use binlogs::{
    binary_logs, current_position, current_position_and_gtid, ensure_available, file_started_at,
    first_position,
};
use connect::tls_failure;
pub use connect::{connect, on_this_host, parse_url, MysqlConnect, MysqlTls, TlsMode};
pub use filters::replication_filters;
pub use gtid::{gtid_history, gtid_state_at, GtidHistory, NotServed};
pub use iam::{use_rds_iam, uses_rds_iam};
pub use settings::{
    binlog_expiry_seconds, binlog_retention, check_settings, now_ms, on_azure, required_settings,
    role, server_info, setting_is, variable, BinlogRetention, Flavor, ManagedRetention, PurgeAfter,
    Role, ServerInfo, REQUIRED_SETTINGS,
};

/// Server error: the requested binlog position is not available (purged,
/// never existed, or past the end of the file).
pub const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// Server errors that will not go away by retrying: bad credentials or missing privileges.
const ACCESS_ERRORS: [u16; 5] = [1044, 1045, 1142, 1227, 1698];

/// Server error: the login itself was refused (user, password, host, an
/// account that REQUIREs SSL reached without TLS, or a caching_sha2_password
/// account's first sign-in with neither TLS nor the server's RSA key).
const ER_ACCESS_DENIED_ERROR: u16 = 1045;

/// Sorts a driver error into the two kinds. Anything not known to be
/// permanent is transient: the loop retries it from the acked watermark.
pub fn classify(err: mysql_async::Error, doing: &str) -> ForwarderError {
    if let Some(why) = tls_failure(&err) {
        // A certificate the configured CA does not vouch for, or a server
        // without TLS, stays so however often the connection is retried.
        return DefiniteError::Config(format!(
            "TLS to MySQL failed during {doing}: {why}; check [mysql.tls] (mode, ca_file) \
             against the server's certificate"
        ))
        .into();
    }
    match &err {
        mysql_async::Error::Server(server)
            if server.code == ER_ACCESS_DENIED_ERROR && iam::uses_rds_iam() =>
        {
            DefiniteError::Config(format!(
                "MySQL refused {doing}: {} (error {}); with mysql.aws_iam, check that the user \
                 was created IDENTIFIED WITH AWSAuthenticationPlugin AS 'RDS', that the AWS \
                 identity's policy allows rds-db:connect on \
                 arn:aws:rds-db:REGION:ACCOUNT:dbuser:RESOURCE_ID/USER, that \
                 mysql.aws_iam.region is the database's, that mysql.url names the database's own \
                 endpoint (the token is signed for it), and that this host's clock is right",
                server.message, server.code
            ))
            .into()
        }
        mysql_async::Error::Server(server) if server.code == ER_ACCESS_DENIED_ERROR => {
            DefiniteError::Config(format!(
                "MySQL refused {doing}: {} (error {}); check the user and password \
                 (mysql.url, mysql.password_env, mysql.password_file) and, if the account \
                 REQUIREs SSL or X509, [mysql.tls]; on MySQL, an account with \
                 caching_sha2_password (the default plugin) whose password the server has \
                 not cached since it started signs in only over TLS ([mysql.tls] mode) or \
                 with the server's RSA key (caching_sha2_password_auto_generate_rsa_keys=ON, \
                 the default), and the server says only this when it has neither",
                server.message, server.code
            ))
            .into()
        }
        mysql_async::Error::Server(server) if ACCESS_ERRORS.contains(&server.code) => {
            DefiniteError::Config(format!(
                "MySQL refused {doing}: {} (error {}); the forwarder's user needs \
                 REPLICATION SLAVE, REPLICATION CLIENT and SELECT on the outbox tables",
                server.message, server.code
            ))
            .into()
        }
        mysql_async::Error::Url(e) => DefiniteError::Config(format!("mysql.url: {e}")).into(),
        _ => ForwarderError::transient(format!("MySQL {doing}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_login_names_what_caching_sha2_password_needs_besides_the_password() {
        let refused = mysql_async::Error::Server(mysql_async::ServerError {
            code: ER_ACCESS_DENIED_ERROR,
            message: "Access denied for user 'f'@'localhost' (using password: YES)".into(),
            state: "28000".into(),
        });
        let ForwarderError::Definite(e) = classify(refused, "connection") else {
            panic!("a refused login is definite")
        };
        let text = e.to_string();
        assert!(text.contains("check the user and password"), "{text}");
        assert!(
            text.contains("caching_sha2_password") && text.contains("[mysql.tls] mode"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_certificate_is_definite_and_other_io_errors_are_transient() {
        let handshake = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let err = classify(
            mysql_async::Error::Io(mysql_async::IoError::Io(handshake)),
            "connection",
        );
        let ForwarderError::Definite(e) = err else {
            panic!("retrying cannot fix a certificate: {err:?}")
        };
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        assert!(e.to_string().contains("[mysql.tls]"), "{e}");

        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let err = classify(
            mysql_async::Error::Io(mysql_async::IoError::Io(reset)),
            "connection",
        );
        assert!(matches!(err, ForwarderError::Transient(_)), "{err:?}");
    }
}
