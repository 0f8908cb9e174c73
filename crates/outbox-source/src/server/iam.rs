//! RDS and Aurora IAM database authentication (`mysql.aws_iam = { region }`):
//! no database password is kept; each connection signs a token of its own
//! (a SigV4 presigned URL, valid 15 minutes, [`outbox_aws::rds_auth_token`])
//! for the host, port and user it connects to, with credentials from AWS's
//! usual chain, and sends it as the password through the client's
//! `mysql_clear_password` plugin, as RDS asks of an account
//! `IDENTIFIED WITH AWSAuthenticationPlugin AS 'RDS'`. The token is checked
//! at sign-in only, so a long binlog stream outlives it and every
//! reconnect signs a new one.
//!
//! The password travels in clear text: off this host, `[mysql.tls]` must
//! encrypt the connection (`refuse_plaintext` applies to every URL).
//!
//! One process signs in one way. The choice is made once, when the
//! configuration is loaded ([`use_rds_iam`]), and [`super::connect`] applies
//! it to every connection, since the driver's options are otherwise built
//! once and reused.

use std::sync::OnceLock;

use mysql_async::{Opts, OptsBuilder};
use outbox_core::ForwarderError;

/// How every connection of this process signs in, once chosen.
static SIGN_IN: OnceLock<RdsIam> = OnceLock::new();

/// Signing in to RDS with IAM: the region and where credentials come from.
struct RdsIam {
    region: String,
    credentials: outbox_aws::CredentialsChain,
}

/// Makes every later connection of this process sign in with an RDS IAM
/// token for `region`, with credentials from the environment's AWS chain.
/// Choosing another region afterwards is refused.
pub fn use_rds_iam(region: &str) -> Result<(), String> {
    outbox_aws::check_region("mysql.aws_iam.region", region)?;
    let chosen = SIGN_IN.get_or_init(|| RdsIam {
        region: region.to_owned(),
        credentials: outbox_aws::CredentialsChain::process(),
    });
    if chosen.region != region {
        return Err(format!(
            "mysql.aws_iam.region is {region}, but this process already signs in for {}",
            chosen.region
        ));
    }
    Ok(())
}

/// Whether connections sign in with RDS IAM tokens.
pub fn uses_rds_iam() -> bool {
    SIGN_IN.get().is_some()
}

/// `opts` with a fresh token as the password and the clear-text plugin
/// allowed, when IAM sign-in was chosen; `None` otherwise.
pub(super) async fn signed(opts: &Opts) -> Result<Option<Opts>, ForwarderError> {
    let Some(iam) = SIGN_IN.get() else {
        return Ok(None);
    };
    let host = opts.ip_or_hostname().to_owned();
    let port = opts.tcp_port();
    let user = opts.user().unwrap_or_default().to_owned();
    if user.is_empty() {
        return Err(ForwarderError::transient(
            "mysql.aws_iam: the URL names no user to sign in as (mysql://USER@host:port)",
        ));
    }
    let region = iam.region.clone();
    let credentials = iam.credentials.clone();
    // The credentials may take a request to STS or the metadata service.
    let token = tokio::task::spawn_blocking(move || {
        credentials.get().map(|c| {
            outbox_aws::rds_auth_token(
                &host,
                port,
                &user,
                &region,
                &c,
                std::time::SystemTime::now(),
            )
        })
    })
    .await
    .map_err(|e| ForwarderError::transient(format!("mysql.aws_iam: signing stopped: {e}")))?
    .map_err(|why| ForwarderError::transient(format!("mysql.aws_iam: {why}")))?;
    Ok(Some(
        OptsBuilder::from_opts(opts.clone())
            .pass(Some(token))
            .enable_cleartext_plugin(true)
            .into(),
    ))
}
