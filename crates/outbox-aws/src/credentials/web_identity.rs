//! Credentials for a web identity: on EKS, an IAM role for the pod's
//! service account (IRSA). EKS mounts the service account's OIDC token in
//! a file and sets `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`; STS's
//! `AssumeRoleWithWebIdentity` trades the token for the role's temporary
//! credentials. The request is not signed (the token is the proof), so
//! this needs no credentials of its own.
//!
//! The token file is read at each exchange, as EKS replaces it before it
//! expires. STS is reached at its regional endpoint for `AWS_REGION` (or
//! `AWS_DEFAULT_REGION`), the global one without a region, or at
//! `AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, when set, as AWS's SDKs
//! do. `AWS_ROLE_SESSION_NAME` names the session, `outbox-forwarder-` and
//! the time in seconds by default.

use std::time::{Duration, SystemTime};

use super::found::{Credentials, Env, Found};
use crate::http;
use crate::timestamp::{parse_iso8601, unix_seconds};

/// The STS API version the request names.
const STS_VERSION: &str = "2011-06-15";

/// How long connecting to STS may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the whole exchange with STS may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Credentials for the role in `AWS_ROLE_ARN`, with the token in
/// `AWS_WEB_IDENTITY_TOKEN_FILE`.
pub(crate) fn load(env: &Env<'_>, now: SystemTime) -> Result<Found, String> {
    let (token_file, role_arn) = match (
        env.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
        env.var("AWS_ROLE_ARN"),
    ) {
        (Some(file), Some(role)) => (file, role),
        (None, None) => {
            return Ok(Found::Absent(
                "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are not set)"
                    .to_owned(),
            ))
        }
        (Some(_), None) => {
            return Err(
                "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not: set the \
                        role to assume (on EKS, annotate the service account with \
                        eks.amazonaws.com/role-arn)"
                    .to_owned(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "AWS_ROLE_ARN is set but AWS_WEB_IDENTITY_TOKEN_FILE is not: set the \
                        file holding the web identity token, or unset AWS_ROLE_ARN"
                    .to_owned(),
            )
        }
    };
    let token = std::fs::read_to_string(&token_file).map_err(|error| {
        format!(
            "cannot read the web identity token {token_file} (AWS_WEB_IDENTITY_TOKEN_FILE): \
             {error}; check that the service account token is mounted there"
        )
    })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!(
            "the web identity token {token_file} (AWS_WEB_IDENTITY_TOKEN_FILE) is empty"
        ));
    }
    let session_name = env
        .var("AWS_ROLE_SESSION_NAME")
        .unwrap_or_else(|| format!("outbox-forwarder-{}", unix_seconds(now)));
    let endpoint = endpoint(env);

    let agent = http::agent(CONNECT_TIMEOUT, TIMEOUT, false);
    let sent = agent
        .post(&endpoint)
        .header("Accept", "text/xml")
        .send_form([
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", STS_VERSION),
            ("RoleArn", role_arn.as_str()),
            ("RoleSessionName", session_name.as_str()),
            ("WebIdentityToken", token),
        ]);
    let reply = http::reply(sent).map_err(|error| {
        format!(
            "STS AssumeRoleWithWebIdentity at {endpoint} for {role_arn}: {error}; check \
             that STS is reachable from here (AWS_REGION, AWS_ENDPOINT_URL_STS, HTTPS_PROXY)"
        )
    })?;
    parse_reply(reply.status, &reply.body, &endpoint, &role_arn).map(Found::Credentials)
}

/// Where STS is: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, the region's
/// endpoint, or the global one.
fn endpoint(env: &Env<'_>) -> String {
    if let Some(url) = env
        .var("AWS_ENDPOINT_URL_STS")
        .or_else(|| env.var("AWS_ENDPOINT_URL"))
    {
        return url;
    }
    match env
        .var("AWS_REGION")
        .or_else(|| env.var("AWS_DEFAULT_REGION"))
    {
        Some(region) if region.starts_with("cn-") => {
            format!("https://sts.{region}.amazonaws.com.cn/")
        }
        Some(region) => format!("https://sts.{region}.amazonaws.com/"),
        None => "https://sts.amazonaws.com/".to_owned(),
    }
}

/// The credentials in STS's reply, or its error's code and message.
pub(crate) fn parse_reply(
    status: u16,
    body: &str,
    endpoint: &str,
    role_arn: &str,
) -> Result<Credentials, String> {
    if !(200..300).contains(&status) || body.contains("<ErrorResponse") {
        return Err(match xml_text(body, "Code") {
            Some(code) => format!(
                "STS at {endpoint} refused AssumeRoleWithWebIdentity for {role_arn}: {code}: \
                 {}; check that the role's trust policy allows this identity provider and \
                 service account",
                xml_text(body, "Message").unwrap_or_default()
            ),
            None => format!(
                "STS at {endpoint} answered AssumeRoleWithWebIdentity for {role_arn} with \
                 HTTP {status} and no error code; check AWS_ENDPOINT_URL_STS"
            ),
        });
    }
    let field = |tag: &str| {
        xml_text(body, tag)
            .filter(|text| !text.is_empty())
            .ok_or_else(|| {
                format!(
                    "STS at {endpoint} answered AssumeRoleWithWebIdentity for {role_arn} without \
                 {tag}"
                )
            })
    };
    let expires = parse_iso8601(&field("Expiration")?)
        .map_err(|error| format!("STS at {endpoint} answered an Expiration that is not {error}"))?;
    Ok(Credentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
        expires: Some(expires),
    })
}

/// The text of the first `<tag>` element in `xml`, unescaped: STS's
/// replies are small and flat enough that no XML parser is needed.
pub(crate) fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let length = xml[start..].find(&close)?;
    Some(unescape(&xml[start..start + length]))
}

/// `text` with XML's character references replaced: the five named ones
/// and numeric ones. Any other `&` is kept as it is.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let replaced = rest.find(';').and_then(|end| {
            let character = match &rest[1..end] {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                number => number
                    .strip_prefix("#x")
                    .or_else(|| number.strip_prefix("#X"))
                    .map(|hex| u32::from_str_radix(hex, 16))
                    .or_else(|| number.strip_prefix('#').map(str::parse))
                    .and_then(Result::ok)
                    .and_then(char::from_u32),
            };
            character.map(|c| (c, end + 1))
        });
        match replaced {
            Some((character, length)) => {
                out.push(character);
                rest = &rest[length..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::UNIX_EPOCH;

    use super::*;

    const REPLY: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:outbox:forwarder</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/outbox/outbox-forwarder-1</Arn>
      <AssumedRoleId>AROAEXAMPLE:outbox-forwarder-1</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>FwoGZXIvYXdzE&amp;token/+=</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY</SecretAccessKey>
      <Expiration>2026-12-06T21:00:00Z</Expiration>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
    </Credentials>
    <Provider>arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-2.amazonaws.com/id/EXAMPLE</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;

    #[test]
    fn parses_the_credentials() {
        let credentials =
            parse_reply(200, REPLY, "https://sts.amazonaws.com/", "arn:role").expect("credentials");
        assert_eq!(
            credentials,
            Credentials {
                access_key_id: "ASIAEXAMPLE".to_owned(),
                secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned(),
                session_token: Some("FwoGZXIvYXdzE&token/+=".to_owned()),
                expires: Some(UNIX_EPOCH + Duration::from_secs(1_796_590_800)),
            }
        );
    }

    #[test]
    fn an_error_reply_gives_its_code_and_message() {
        let reply = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>Sender</Type>
    <Code>InvalidIdentityToken</Code>
    <Message>No OpenIDConnect provider found in your account for https://oidc.example/&quot;x&quot;</Message>
  </Error>
  <RequestId>01234567-89ab-cdef-0123-456789abcdef</RequestId>
</ErrorResponse>"#;
        let error = parse_reply(
            400,
            reply,
            "https://sts.eu-west-2.amazonaws.com/",
            "arn:role",
        )
        .expect_err("refused");
        assert!(
            error.starts_with(
                "STS at https://sts.eu-west-2.amazonaws.com/ refused AssumeRoleWithWebIdentity \
                 for arn:role: InvalidIdentityToken: No OpenIDConnect provider found in your \
                 account for https://oidc.example/\"x\"; "
            ),
            "{error}"
        );

        let error = parse_reply(503, "busy", "https://sts.amazonaws.com/", "arn:role")
            .expect_err("refused");
        assert!(error.contains("HTTP 503"), "{error}");
    }

    #[test]
    fn a_reply_without_credentials_is_an_error() {
        let reply = REPLY.replace("<AccessKeyId>ASIAEXAMPLE</AccessKeyId>", "");
        let error =
            parse_reply(200, &reply, "https://sts.amazonaws.com/", "arn:role").expect_err("no key");
        assert!(error.ends_with("without AccessKeyId"), "{error}");
        assert!(!error.contains("wJalr"), "{error}");
    }

    #[test]
    fn unescapes_character_references() {
        assert_eq!(
            unescape("a&amp;b&lt;c&gt;d&quot;e&apos;f&#65;&#x42;&unknown;&"),
            "a&b<c>d\"e'fAB&unknown;&"
        );
        assert_eq!(
            xml_text("<a><b>x &amp; y</b></a>", "b").as_deref(),
            Some("x & y")
        );
        assert_eq!(xml_text("<a><b>x</a>", "b"), None);
    }

    #[test]
    fn finds_the_endpoint() {
        let endpoint_for = |vars: &[(&str, &str)]| {
            let vars: HashMap<String, String> = vars
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect();
            let lookup = move |name: &str| vars.get(name).cloned();
            endpoint(&Env(&lookup))
        };
        assert_eq!(endpoint_for(&[]), "https://sts.amazonaws.com/");
        assert_eq!(
            endpoint_for(&[("AWS_DEFAULT_REGION", "eu-west-2")]),
            "https://sts.eu-west-2.amazonaws.com/"
        );
        assert_eq!(
            endpoint_for(&[
                ("AWS_REGION", "us-east-1"),
                ("AWS_DEFAULT_REGION", "eu-west-2")
            ]),
            "https://sts.us-east-1.amazonaws.com/"
        );
        assert_eq!(
            endpoint_for(&[("AWS_REGION", "cn-north-1")]),
            "https://sts.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(
            endpoint_for(&[
                ("AWS_REGION", "us-east-1"),
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            ]),
            "http://127.0.0.1:1"
        );
        assert_eq!(
            endpoint_for(&[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
                ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:2")
            ]),
            "http://127.0.0.1:2"
        );
    }
}
