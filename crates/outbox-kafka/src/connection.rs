//! Why the brokers refused a connection. librdkafka reports a failed TLS
//! handshake or SASL exchange to the client's error callback and then
//! answers a metadata request only with "broker transport failure"; this
//! context keeps the reason so that `check` can say what to fix.

use std::sync::Mutex;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::log::log_librdkafka;

/// A connection the brokers (or the client itself) refused: retrying with
/// the same settings cannot succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// librdkafka's reason, e.g. `ssl://127.0.0.1:9093/bootstrap: SSL
    /// handshake failed: ... certificate verify failed`.
    pub reason: String,
    /// What to change in the configuration.
    pub fix: &'static str,
}

/// A client context that logs like the producer's and remembers the last
/// TLS or authentication refusal.
pub struct ConnectionContext {
    refusal: Mutex<Option<Refusal>>,
    /// A failed `sasl.kerberos.kinit.cmd`: the cause of the GSSAPI
    /// refusals that follow it, so it is reported before them.
    kinit: Mutex<Option<Refusal>>,
    auth: crate::oauth::ClientAuth,
}

/// What to change when `sasl.kerberos.kinit.cmd` fails.
const KINIT_FIX: &str = "check sasl.kerberos.kinit.cmd, sasl.kerberos.keytab and \
     sasl.kerberos.principal (kinit's own message is in the log above), and that the KDC \
     is reachable";

impl ConnectionContext {
    /// Signing in with `auth`'s token command, if it has one.
    pub fn new(auth: crate::oauth::ClientAuth) -> Self {
        Self {
            refusal: Mutex::new(None),
            kinit: Mutex::new(None),
            auth,
        }
    }

    /// The last refusal reported, if any; a failed kinit first.
    pub fn refusal(&self) -> Option<Refusal> {
        let kinit = self.kinit.lock().expect("not poisoned").clone();
        kinit.or_else(|| self.refusal.lock().expect("not poisoned").clone())
    }
}

/// TLS alerts (RFC 8446, 6) that refuse the client's settings rather than
/// report a passing failure: handshake_failure, bad_certificate,
/// unsupported_certificate, certificate_revoked, certificate_expired,
/// certificate_unknown, unknown_ca, access_denied, protocol_version,
/// insufficient_security, certificate_required.
const REFUSING_ALERTS: [u32; 11] = [40, 42, 43, 44, 45, 46, 48, 49, 70, 71, 116];

/// Whether librdkafka's `reason` for a transport failure is a refusing TLS
/// alert the brokers sent (OpenSSL's "SSL alert number N"), such as a
/// missing client certificate under TLS 1.3, where the server answers after
/// the client's side of the handshake is done.
fn is_tls_alert(reason: &str) -> bool {
    reason.split("SSL alert number ").skip(1).any(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits
            .parse()
            .is_ok_and(|alert: u32| REFUSING_ALERTS.contains(&alert))
    })
}

/// The fix for an error of kind `code` with librdkafka's `reason`, if it is
/// a refusal rather than an outage.
pub fn refusal_fix(code: RDKafkaErrorCode, reason: &str) -> Option<&'static str> {
    match code {
        RDKafkaErrorCode::BrokerTransportFailure if is_tls_alert(reason) => {
            refusal_fix(RDKafkaErrorCode::SSL, reason)
        }
        RDKafkaErrorCode::SSL => Some(
            "check security.protocol and ssl.ca.location (the CA that signed the brokers' \
             certificates; the host in kafka.brokers must be one the certificate names), \
             and ssl.certificate.location / ssl.key.location if the brokers require a \
             client certificate",
        ),
        RDKafkaErrorCode::Authentication => Some(
            "check security.protocol, sasl.mechanism, sasl.username and the password \
             (kafka.properties_env / kafka.properties_files), for OAUTHBEARER \
             kafka.oauth_token_command or kafka.aws_msk_iam and its AWS credentials, for GSSAPI sasl.kerberos.service.name and the \
             principal",
        ),
        _ => None,
    }
}

impl ClientContext for ConnectionContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _oauthbearer_config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.auth.generate()
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log_librdkafka(level, facility, message);
        // librdkafka reports a failed kinit only as a log line.
        if facility == "SASLREFRESH" && is_error(level) {
            *self.kinit.lock().expect("not poisoned") = Some(Refusal {
                reason: message.to_string(),
                fix: KINIT_FIX,
            });
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let refused = error
            .rdkafka_error_code()
            .and_then(|code| refusal_fix(code, reason));
        if let Some(fix) = refused {
            *self.refusal.lock().expect("not poisoned") = Some(Refusal {
                reason: reason.to_string(),
                fix,
            });
        }
        tracing::debug!(%error, "kafka client error: {reason}");
    }
}

fn is_error(level: RDKafkaLogLevel) -> bool {
    matches!(
        level,
        RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
    )
}

/// A Kafka client error as it may be shown. librdkafka's configuration
/// errors carry the property's value, which may be a password (a misspelt
/// `sasl.password`): only the property's name is kept.
pub fn shown(error: &KafkaError) -> String {
    match error {
        KafkaError::ClientConfig(_, description, key, value) => {
            let description = if value.is_empty() {
                description.clone()
            } else {
                description.replace(value.as_str(), "(value not shown)")
            };
            format!("Client config error: {description} (property {key})")
        }
        other => other.to_string(),
    }
}

/// So that `check` can use it for its probe consumer.
impl ConsumerContext for ConnectionContext {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_alerts_and_handshake_and_sasl_failures_are_refusals_and_outages_are_not() {
        let transport = RDKafkaErrorCode::BrokerTransportFailure;
        let refused = [
            (
                RDKafkaErrorCode::SSL,
                "SSL handshake failed: certificate verify failed",
            ),
            (
                RDKafkaErrorCode::Authentication,
                "SASL SCRAM authentication failed",
            ),
            (
                transport,
                "Receive failed: error:0A00045C:SSL routines::tlsv13 alert certificate \
                 required: SSL alert number 116 (after 0ms in state APIVERSION_QUERY)",
            ),
        ];
        for (code, reason) in refused {
            assert!(refusal_fix(code, reason).is_some(), "{code:?}: {reason}");
        }
        let outages = [
            (
                transport,
                "Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
            ),
            (transport, "Receive failed: SSL alert number 0"),
            // internal_error: a broker or balancer restarting, not a refusal.
            (
                transport,
                "Receive failed: tlsv1 alert internal error: SSL alert number 80",
            ),
            (RDKafkaErrorCode::AllBrokersDown, "1/1 brokers are down"),
        ];
        for (code, reason) in outages {
            assert!(refusal_fix(code, reason).is_none(), "{code:?}: {reason}");
        }
    }
}
