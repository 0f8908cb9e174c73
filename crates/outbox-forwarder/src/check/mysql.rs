//! The candidates of `mysql.url`, the source a run would stream from (as
//! [`crate::resume`] decides it) and the protection of the connection.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use outbox_checkpoint::Checkpoint;
use outbox_core::ForwarderError;
use outbox_source::server::TlsMode;

use super::{checkpoint, outbox_tables, replicas, server, Report, Status};
use crate::config::ForwarderConfig;
use crate::resume::{self, Via};

/// Every candidate of `mysql.url` is connected to and described; the
/// server `run` would stream from (see [`crate::resume`]) is named and
/// checked in detail.
pub(super) async fn checks(
    config: &ForwarderConfig,
    checkpoint: Option<&Checkpoint>,
    accept_new_source: bool,
    report: &mut Report,
) {
    let candidates = match resume::candidates(config) {
        Ok(candidates) => candidates,
        Err(e) => {
            return report.add(
                Status::Fail,
                "mysql.url",
                e.to_string(),
                "mysql://user:password@host:port",
                "correct mysql.url",
            )
        }
    };
    // One connection to each candidate: the decision's probes give the
    // connection lines too.
    let decided = resume::decide(&candidates, 0, checkpoint, accept_new_source).await;
    let seen = match &decided {
        Ok(decision) => &decision.candidates,
        Err(refused) => &refused.candidates,
    };
    if connection_lines(&candidates, seen, report) == 0 {
        return;
    }
    let Some((decision, via)) = source(config, &candidates, decided, checkpoint, report).await
    else {
        return;
    };
    let need = config.mysql.publish_after_replicas;
    if need > 0 {
        replicas::checks(need, &candidates, decision.index, report).await;
    }
    let opts = &candidates[decision.index];
    let mut conn = decision.conn;
    if let Err(e) = tls_check(config, opts, &mut conn, report).await {
        report.add(
            Status::Fail,
            "mysql tls",
            e.to_string(),
            "answers",
            "see the message",
        );
    }
    let checked = async {
        let (info, retention) = server::checks(config, &mut conn, report).await?;
        outbox_tables::checks(config, &info, &mut conn, report).await?;
        let purge_after = retention.purge_after();
        checkpoint::checks(
            config,
            checkpoint,
            via.as_ref(),
            purge_after,
            &mut conn,
            report,
        )
        .await
    };
    if let Err(e) = checked.await {
        report.add(
            Status::Fail,
            "mysql queries",
            e.to_string(),
            "answers",
            "check the user's privileges",
        );
    }
    let _ = conn.disconnect().await;
}

/// A line per candidate: did it accept the resume decision's connection?
/// Returns how many did.
fn connection_lines(candidates: &[Opts], seen: &[resume::Seen], report: &mut Report) -> usize {
    let n = candidates.len();
    let mut connected = 0;
    for (i, (opts, seen)) in candidates.iter().zip(seen).enumerate() {
        let target = format!(
            "{}{}:{} as {}",
            if n > 1 {
                format!("candidate {} of {n}: ", i + 1)
            } else {
                String::new()
            },
            opts.ip_or_hostname(),
            opts.tcp_port(),
            opts.user().unwrap_or("?")
        );
        match seen {
            resume::Seen::Answered { .. } => {
                connected += 1;
                report.add(Status::Pass, "mysql connection", target, "connected", "");
            }
            // One of several down: the others may serve.
            resume::Seen::Unreachable { reason, .. } if n > 1 => report.add(
                Status::Warn,
                "mysql connection",
                format!("{target}: {reason}"),
                "connected",
                "start it or remove it from mysql.url",
            ),
            // Refused credentials or a refused certificate: waiting will not help.
            resume::Seen::Unreachable {
                reason,
                definite: true,
            } => report.add(
                Status::Fail,
                "mysql connection",
                format!("{target}: {reason}"),
                "connected",
                "see the message",
            ),
            resume::Seen::Unreachable { reason, .. } => report.unreachable(
                "mysql connection",
                format!("{target}: {reason}"),
                "start MySQL or correct mysql.url",
            ),
        }
    }
    if connected == 0 && n > 1 {
        report.unreachable(
            "mysql connection",
            format!("none of the {n} candidates answers"),
            "start MySQL or correct mysql.url",
        );
    }
    connected
}

/// The `source` line: the candidate a run would stream from and how it
/// would resume there. When none serves the checkpoint, the line fails
/// (or warns, if waiting may help) and any candidate that answers is
/// returned for the other checks, without a way to resume.
async fn source(
    config: &ForwarderConfig,
    candidates: &[Opts],
    decided: Result<resume::Decision, resume::Refused>,
    checkpoint: Option<&Checkpoint>,
    report: &mut Report,
) -> Option<(resume::Decision, Option<Via>)> {
    let n = candidates.len();
    let decision = match decided {
        Ok(decision) => decision,
        Err(refused) => {
            describe_candidates(&refused.candidates, report);
            let lag_only = matches!(refused.error, ForwarderError::Transient(_));
            report.add(
                if lag_only { Status::Warn } else { Status::Fail },
                "source",
                refused.error.to_string(),
                "a candidate that serves the checkpoint",
                "point the forwarder at a server of the checkpoint's topology that has it; or \
                 decide what to republish and run `outbox-forwarder checkpoint set`; or, if this \
                 server really holds the checkpoint's binlog, run with --accept-new-source",
            );
            // The other checks on a server that answers.
            let any = resume::decide(candidates, 0, None, false).await.ok()?;
            return Some((any, None));
        }
    };
    let via = decision.via.clone();
    if via.is_some() || checkpoint.is_none() {
        describe_candidates(&decision.candidates, report);
        let how = match &via {
            None => format!(
                "starts at checkpoint.start = \"{}\"",
                config.checkpoint.start
            ),
            Some(via) => format!("resumes {via}"),
        };
        report.add(
            Status::Pass,
            "source",
            format!(
                "candidate {} of {n} ({}): {how}",
                decision.index + 1,
                decision.info.identity
            ),
            "a candidate that serves the checkpoint",
            "",
        );
    }
    Some((decision, via))
}

/// A line per candidate of several: what it is.
pub(super) fn describe_candidates(candidates: &[resume::Seen], report: &mut Report) {
    let n = candidates.len();
    if n < 2 {
        return;
    }
    for (i, seen) in candidates.iter().enumerate() {
        report.add(
            Status::Pass,
            "mysql candidate",
            format!("candidate {} of {n}: {seen}", i + 1),
            "-",
            "",
        );
    }
}

/// What protects the connection: the TLS version and cipher the server
/// reports for this session, or, without TLS, whether that is acceptable
/// (a loopback address) or worth a warning.
async fn tls_check(
    config: &ForwarderConfig,
    opts: &Opts,
    conn: &mut Conn,
    report: &mut Report,
) -> Result<(), mysql_async::Error> {
    let mode = config.mysql.url.tls().mode;
    let status: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        .await?;
    let value = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (version, cipher) = (value("Ssl_version"), value("Ssl_cipher"));
    if mode != TlsMode::Disabled {
        let encrypted = !cipher.is_empty();
        let (status, fix) = match (encrypted, mode) {
            (false, _) => (Status::Fail, "check [mysql.tls]"),
            // Encrypted to whoever answers: anyone on the path can.
            (true, TlsMode::Required) => (
                Status::Warn,
                "set [mysql.tls] mode = \"verify_identity\" (and ca_file): \"required\" accepts \
                 any certificate, so whoever is on the path can pose as the server",
            ),
            (true, _) => (Status::Pass, ""),
        };
        report.add(
            status,
            "mysql tls",
            format!("mode {mode}, {version} {cipher}"),
            "an encrypted session with a verified certificate",
            fix,
        );
        return Ok(());
    }
    let loopback = outbox_source::server::on_this_host(opts);
    report.add(
        if loopback { Status::Pass } else { Status::Warn },
        "mysql tls",
        "mode disabled: the session is not encrypted",
        "TLS unless the primary is on this host",
        "set [mysql.tls] mode = \"verify_identity\" (and ca_file): the binlog carries \
         every outbox payload",
    );
    Ok(())
}
