//! What protects the Kafka connection and the OIDC token request, judged
//! from the configuration: a secret that would cross the network in clear
//! fails; an unencrypted or unverified connection to a host that is not on
//! this one warns.

use std::collections::BTreeMap;

use super::{Report, Status};

/// The `kafka transport` line (and `kafka token endpoint` when OIDC is set)
/// for librdkafka `properties` and the `brokers` list.
pub(super) fn transport(brokers: &str, properties: &BTreeMap<String, String>, report: &mut Report) {
    let get = |key: &str| properties.get(key).map(|v| v.to_ascii_lowercase());
    let protocol = get("security.protocol").unwrap_or_else(|| "plaintext".into());
    let mechanism = get("sasl.mechanism")
        .or_else(|| get("sasl.mechanisms"))
        .unwrap_or_else(|| "gssapi".into());
    let local = brokers.split(',').all(|b| on_this_host(b.trim()));
    let encrypted = protocol.ends_with("ssl");
    let unverified = get("enable.ssl.certificate.verification").as_deref() == Some("false");
    let no_name_check = get("ssl.endpoint.identification.algorithm").as_deref() == Some("none");
    let found = format!("security.protocol={protocol}");
    let (status, found, fix) = if protocol == "sasl_plaintext" && !local {
        match mechanism.as_str() {
            // The password or the token itself is sent.
            "plain" | "oauthbearer" => (
                Status::Fail,
                format!(
                    "{found}, sasl.mechanism={mechanism}: the secret crosses the network in clear"
                ),
                "set \"security.protocol\" = \"sasl_ssl\"",
            ),
            _ => (
                Status::Warn,
                format!("{found}: every message crosses the network in clear"),
                "set \"security.protocol\" = \"sasl_ssl\"",
            ),
        }
    } else if !encrypted && !local {
        (
            Status::Warn,
            format!("{found}: every message crosses the network in clear"),
            "set \"security.protocol\" = \"ssl\" or \"sasl_ssl\"",
        )
    } else if encrypted && (unverified || no_name_check) {
        (
            Status::Warn,
            format!(
                "{found} without {}: whoever is on the path can pose as the brokers",
                if unverified {
                    "certificate verification"
                } else {
                    "the host name check"
                }
            ),
            "remove enable.ssl.certificate.verification / ssl.endpoint.identification.algorithm \
             and set ssl.ca.location for a private CA",
        )
    } else {
        (Status::Pass, found, "")
    };
    report.add(
        status,
        "kafka transport",
        found,
        "TLS with verified certificates to brokers not on this host",
        fix,
    );
    if let Some(endpoint) = properties.get("sasl.oauthbearer.token.endpoint.url") {
        token_endpoint(endpoint, report);
    }
}

/// The `kafka token endpoint` line: librdkafka's OIDC client posts its
/// client secret to `endpoint`.
fn token_endpoint(endpoint: &str, report: &mut Report) {
    let plain = endpoint.to_ascii_lowercase().starts_with("http://");
    let host = endpoint
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(['/', '?']).next())
        .unwrap_or("");
    let (status, fix) = match (plain, on_this_host(host)) {
        (false, _) => (Status::Pass, ""),
        (true, true) => (Status::Warn, "use an https:// token endpoint"),
        // The client secret is posted to it.
        (true, false) => (Status::Fail, "use an https:// token endpoint"),
    };
    report.add(
        status,
        "kafka token endpoint",
        if plain {
            format!("{endpoint}: the client secret is posted in clear")
        } else {
            endpoint.to_owned()
        },
        "https://",
        fix,
    );
}

/// Whether `host[:port]` names this host (a loopback address or localhost).
fn on_this_host(address: &str) -> bool {
    let host = match address.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => address.rsplit_once(':').map_or(address, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(brokers: &str, properties: &[(&str, &str)]) -> Vec<(Status, String)> {
        let properties = properties
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut report = Report(Vec::new());
        transport(brokers, &properties, &mut report);
        report.0.into_iter().map(|l| (l.status, l.found)).collect()
    }

    #[test]
    fn a_password_or_token_over_plaintext_to_a_remote_broker_fails() {
        for mechanism in ["PLAIN", "OAUTHBEARER"] {
            let found = line(
                "kafka.example:9092",
                &[
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", mechanism),
                ],
            );
            assert_eq!(found[0].0, Status::Fail, "{found:?}");
            assert!(found[0].1.contains("in clear"), "{found:?}");
        }
        let scram = line(
            "kafka.example:9092",
            &[
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
            ],
        );
        assert_eq!(scram[0].0, Status::Warn);
    }

    #[test]
    fn plaintext_warns_off_this_host_and_passes_on_it() {
        assert_eq!(line("kafka.example:9092", &[])[0].0, Status::Warn);
        assert_eq!(
            line("127.0.0.1:9092,[::1]:9093,localhost:9094", &[])[0].0,
            Status::Pass
        );
        assert_eq!(
            line(
                "127.0.0.1:9092",
                &[
                    ("security.protocol", "sasl_plaintext"),
                    ("sasl.mechanism", "PLAIN")
                ]
            )[0]
            .0,
            Status::Pass
        );
    }

    #[test]
    fn tls_without_verification_warns_and_verified_tls_passes() {
        let off = line(
            "kafka.example:9093",
            &[
                ("security.protocol", "ssl"),
                ("enable.ssl.certificate.verification", "false"),
            ],
        );
        assert_eq!(off[0].0, Status::Warn);
        assert!(off[0].1.contains("certificate verification"), "{off:?}");
        let no_name = line(
            "kafka.example:9093",
            &[
                ("security.protocol", "sasl_ssl"),
                ("ssl.endpoint.identification.algorithm", "none"),
            ],
        );
        assert_eq!(no_name[0].0, Status::Warn);
        assert_eq!(
            line("kafka.example:9093", &[("security.protocol", "SSL")])[0].0,
            Status::Pass
        );
    }

    #[test]
    fn an_http_token_endpoint_fails_off_this_host_and_warns_on_it() {
        let endpoint = |url: &str| {
            line(
                "kafka.example:9093",
                &[
                    ("security.protocol", "sasl_ssl"),
                    ("sasl.oauthbearer.token.endpoint.url", url),
                ],
            )[1]
            .0
        };
        assert_eq!(endpoint("http://idp.example/token"), Status::Fail);
        assert_eq!(endpoint("http://127.0.0.1:8080/token"), Status::Warn);
        assert_eq!(endpoint("https://idp.example/token"), Status::Pass);
    }
}
