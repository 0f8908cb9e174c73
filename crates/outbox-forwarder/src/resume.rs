//! Where to resume: which server, and how. One decision, made here only.
//!
//! Given the candidates of `mysql.url` and where the forwarder (or its
//! group) stopped, [`decide`] looks at every candidate and picks one:
//!
//! - **how**: by GTID when the checkpoint carries a GTID state and the
//!   server streams by GTID (then any server of the topology that holds
//!   every transaction of that state and purged none after it serves it);
//!   else by `file:pos`, on the server the checkpoint was written against
//!   (or, under `--accept-new-source`, on the one the operator names);
//! - **which**: a writable server (the primary) that serves the checkpoint,
//!   else a replica with `log_slave_updates` that does, trying the one
//!   used last first. A candidate that answers but cannot serve is passed
//!   over, with its reason, so an old primary that came back writable
//!   after a failover never hides the new one. Two writable candidates
//!   that both serve are ambiguous (a former primary left writable): the
//!   decision waits, and says so, rather than guess.
//!
//! Candidates are probed at once, so one that drops packets costs a single
//! probe timeout. When none serves, the refusal names every candidate's
//! reason. It is definite when every refusal is (a writable server lacks
//! what the checkpoint covers, or the binlog under it is gone: waiting
//! will not bring them back), and transient when any candidate only lags,
//! failed a query, or does not answer.
//!
//! `run` decides at every session start (and the connection the decision
//! used becomes the session's dump connection: one server check per
//! start); `check`, `checkpoint show|set` and `verify` ask the same.

use std::fmt;
use std::time::Duration;

use mysql_async::{Conn, Opts};
use outbox_checkpoint::Checkpoint;
use outbox_core::{DefiniteError, ForwarderError, GtidState};
use outbox_source::server::{self, Role, ServerInfo};

/// How long one candidate may take to answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a stream resumes a checkpoint on the chosen server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// After these GTIDs, wherever the server logged them.
    Gtid(GtidState),
    /// At the checkpoint's `file:pos` of this server's binlog.
    FilePos {
        /// The checkpoint was written against another server identity and
        /// the operator said this one holds its binlog.
        overridden: bool,
    },
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Via::Gtid(state) => write!(f, "by GTID after {state}"),
            Via::FilePos { overridden: false } => f.write_str("at the checkpoint's file:pos"),
            Via::FilePos { overridden: true } => f.write_str(
                "at the checkpoint's file:pos on another server identity, as asked \
                 (--accept-new-source)",
            ),
        }
    }
}

/// The chosen server, with the open connection the decision used.
pub struct Decision {
    /// Index in `mysql.url`.
    pub index: usize,
    pub conn: Conn,
    pub info: ServerInfo,
    pub role: Role,
    /// How the checkpoint resumes there (`None` without a checkpoint).
    pub via: Option<Via>,
    /// What each candidate was, in `mysql.url` order.
    pub candidates: Vec<Seen>,
}

/// What a candidate was found to be.
#[derive(Debug, Clone)]
pub enum Seen {
    /// It did not answer; `definite` when it refused the sign-in or its
    /// certificate (waiting will not help).
    Unreachable { reason: String, definite: bool },
    /// It answered; `refused` says why it cannot serve the checkpoint.
    Answered {
        role: Role,
        identity: String,
        refused: Option<String>,
    },
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Unreachable { reason, .. } => write!(f, "unreachable ({reason})"),
            Seen::Answered {
                role,
                identity,
                refused,
            } => {
                let role = match role {
                    Role::Writable => "writable",
                    Role::RelayingReplica => "read-only replica with log_slave_updates",
                    Role::Unusable => {
                        "read-only without log_slave_updates (its binlog lacks what it replicates)"
                    }
                };
                write!(f, "{identity}, {role}")?;
                if let Some(reason) = refused {
                    write!(f, "; cannot serve the checkpoint: {reason}")?;
                }
                Ok(())
            }
        }
    }
}

/// Why a server that answered cannot serve the checkpoint.
struct Refusal {
    error: ForwarderError,
    /// The binlog after the checkpoint is purged there: gone for good.
    purged: bool,
}

/// No candidate was chosen: why, and what each candidate was.
#[derive(Debug)]
pub struct Refused {
    pub error: ForwarderError,
    pub candidates: Vec<Seen>,
    /// The candidate a run would stream from, had it not purged the binlog
    /// after the checkpoint (the writable one, or the only one): the
    /// server whose gap `repair-gap` repairs.
    pub purged: Option<usize>,
}

impl From<Refused> for ForwarderError {
    fn from(refused: Refused) -> Self {
        refused.error
    }
}

/// Picks the server to stream from and how to resume `checkpoint` there
/// (see the module doc); `prefer` is the index tried first.
pub async fn decide(
    candidates: &[Opts],
    prefer: usize,
    checkpoint: Option<&Checkpoint>,
    accept_new_source: bool,
) -> Result<Decision, Refused> {
    let n = candidates.len();
    let Survey {
        mut seen,
        answered,
        connect_errors,
    } = survey(candidates, prefer).await;
    let Asked {
        serving,
        refusals,
        purged,
    } = ask(answered, &mut seen, n, checkpoint, accept_new_source).await;
    let candidates_seen: Vec<Seen> = seen
        .into_iter()
        .map(|s| {
            s.unwrap_or(Seen::Unreachable {
                reason: "not tried".into(),
                definite: false,
            })
        })
        .collect();
    let listed = candidates_seen
        .iter()
        .enumerate()
        .map(|(i, s)| format!("candidate {} of {n}: {s}", i + 1))
        .collect::<Vec<_>>()
        .join("; ");
    let writable_serving = serving.iter().filter(|s| s.role == Role::Writable).count();
    if writable_serving > 1 {
        // Two servers take writes: which one the application writes to
        // cannot be told from here, and streaming (or locking) the wrong
        // one would miss, or duplicate, what the other commits.
        for s in serving {
            let _ = s.conn.disconnect().await;
        }
        return Err(Refused {
            error: ForwarderError::transient(format!(
                "{writable_serving} candidates of mysql.url take writes ({listed}): make the \
                 former primary read-only (or remove it from mysql.url); waiting until one \
                 primary is left"
            )),
            candidates: candidates_seen,
            purged: None,
        });
    }
    if let Some(chosen) = serving.into_iter().next() {
        warn_passed_over(&candidates_seen, chosen.index);
        return Ok(Decision {
            index: chosen.index,
            conn: chosen.conn,
            info: chosen.info,
            role: chosen.role,
            via: chosen.via,
            candidates: candidates_seen,
        });
    }
    Err(Refused {
        error: why_none_serves(n, refusals, connect_errors, &listed),
        candidates: candidates_seen,
        purged,
    })
}

/// Names each candidate that answered but refused the checkpoint, when
/// candidate `chosen` streams instead.
fn warn_passed_over(seen: &[Seen], chosen: usize) {
    for (i, s) in seen.iter().enumerate() {
        let refused = matches!(
            s,
            Seen::Answered {
                refused: Some(_),
                ..
            }
        );
        if i != chosen && refused {
            tracing::warn!(candidate = i + 1, of = seen.len(), "passed over: {s}");
        }
    }
}

/// The candidates probed, before any was asked about the checkpoint.
struct Survey {
    /// What each candidate was, by index (`None`: answered, not yet asked).
    seen: Vec<Option<Seen>>,
    /// Those that answered, writable first, in the order tried.
    answered: Vec<(usize, Conn, ServerInfo, Role)>,
    connect_errors: Vec<ForwarderError>,
}

/// Probes every candidate at once: a candidate that drops packets costs
/// one probe timeout, not one per candidate in front of the one that
/// answers.
async fn survey(candidates: &[Opts], prefer: usize) -> Survey {
    let n = candidates.len();
    let order: Vec<usize> = (0..n).map(|k| (prefer + k) % n).collect();
    let probed = futures_util::future::join_all(
        order
            .iter()
            .map(|&i| async move { (i, probe(&candidates[i]).await) }),
    )
    .await;
    let mut survey = Survey {
        seen: vec![None; n],
        answered: Vec::new(),
        connect_errors: Vec::new(),
    };
    for (i, result) in probed {
        match result {
            Ok((conn, info, role)) => survey.answered.push((i, conn, info, role)),
            Err(e) => {
                survey.seen[i] = Some(Seen::Unreachable {
                    reason: e.to_string(),
                    definite: matches!(e, ForwarderError::Definite(_)),
                });
                survey.connect_errors.push(e);
            }
        }
    }
    // Writable first, in the order tried (a stable sort).
    survey
        .answered
        .sort_by_key(|(_, _, _, role)| *role != Role::Writable);
    survey
}

/// A candidate that serves the checkpoint.
struct Serving {
    index: usize,
    conn: Conn,
    info: ServerInfo,
    role: Role,
    via: Option<Via>,
}

/// The answers to "do you serve the checkpoint?".
struct Asked {
    serving: Vec<Serving>,
    refusals: Vec<(Role, ForwarderError)>,
    /// A writable candidate (or the only one) that purged the binlog after
    /// the checkpoint.
    purged: Option<usize>,
}

/// Asks every writable candidate whether it serves the checkpoint (two
/// that serve are ambiguous), and a replica only while no candidate
/// serves; records each answer in `seen` and closes the connections of
/// those that do not serve.
async fn ask(
    answered: Vec<(usize, Conn, ServerInfo, Role)>,
    seen: &mut [Option<Seen>],
    n: usize,
    checkpoint: Option<&Checkpoint>,
    accept_new_source: bool,
) -> Asked {
    // One address (a proxy, a VIP) is streamed from whatever it says it is.
    let usable = |role: Role| n == 1 || role != Role::Unusable;
    let mut asked = Asked {
        serving: Vec::new(),
        refusals: Vec::new(),
        purged: None,
    };
    for (index, mut conn, info, role) in answered {
        let ask = usable(role) && (role == Role::Writable || asked.serving.is_empty());
        let filtered = match ask && role != Role::Writable {
            true => filtering(&mut conn, &info).await,
            false => None,
        };
        let verdict = match (ask, checkpoint) {
            (false, _) => None,
            (true, _) if filtered.is_some() => filtered.map(Err),
            (true, None) => Some(Ok(None)),
            (true, Some(c)) => Some(
                serves(&mut conn, &info, role, c, accept_new_source)
                    .await
                    .map(Some),
            ),
        };
        seen[index] = Some(Seen::Answered {
            role,
            identity: info.identity.to_string(),
            refused: match &verdict {
                Some(Err(r)) => Some(r.error.to_string()),
                _ => None,
            },
        });
        match verdict {
            Some(Ok(via)) => asked.serving.push(Serving {
                index,
                conn,
                info,
                role,
                via,
            }),
            Some(Err(Refusal { error, purged })) => {
                if purged && (role == Role::Writable || n == 1) && asked.purged.is_none() {
                    asked.purged = Some(index);
                }
                asked.refusals.push((role, error));
                let _ = conn.disconnect().await;
            }
            None => {
                let _ = conn.disconnect().await;
            }
        }
    }
    asked
}

/// The refusal when no candidate serves: definite only when waiting
/// cannot help; `listed` names every candidate's reason.
fn why_none_serves(
    n: usize,
    mut refusals: Vec<(Role, ForwarderError)>,
    connect_errors: Vec<ForwarderError>,
    listed: &str,
) -> ForwarderError {
    let unreachable = !connect_errors.is_empty();
    let any_transient = refusals
        .iter()
        .any(|(_, e)| matches!(e, ForwarderError::Transient(_)));
    // A writable server's refusal says most; then any.
    let first = refusals
        .iter()
        .position(|(role, _)| *role == Role::Writable)
        .or(if refusals.is_empty() { None } else { Some(0) });
    match first.map(|k| refusals.swap_remove(k).1) {
        // One server, which refused: its own error says it best.
        Some(e) if n == 1 => e,
        // Another candidate may serve once it answers, or once it is past
        // what made it refuse for now (a lag, a query that failed).
        Some(e) if unreachable || any_transient => ForwarderError::transient(format!(
            "{e}; waiting for a candidate that can serve the checkpoint ({listed})"
        )),
        Some(ForwarderError::Definite(e)) => DefiniteError::Config(format!(
            "no candidate of mysql.url can serve the checkpoint: {e} ({listed})"
        ))
        .into(),
        Some(e) => ForwarderError::transient(format!("{e} ({listed})")),
        // Nothing answered: refused credentials or certificates everywhere
        // will not change by waiting; anything else may.
        None => {
            let definite = connect_errors
                .iter()
                .all(|e| matches!(e, ForwarderError::Definite(_)));
            match connect_errors.into_iter().next() {
                Some(e) if n == 1 || definite => e,
                _ => ForwarderError::transient(format!(
                    "no candidate of mysql.url to stream from: {listed}"
                )),
            }
        }
    }
}

/// Whether the candidate at `opts` takes writes and serves `checkpoint`
/// now: a session streaming from a replica (chosen because no writable
/// candidate served) goes back to the primary once this holds, and not on
/// a timer before.
pub(crate) async fn writable_serves(opts: &Opts, checkpoint: &Checkpoint) -> bool {
    let Ok((mut conn, info, role)) = probe(opts).await else {
        return false;
    };
    let serving = role == Role::Writable
        && tokio::time::timeout(
            PROBE_TIMEOUT,
            serves(&mut conn, &info, role, checkpoint, false),
        )
        .await
        .is_ok_and(|verdict| verdict.is_ok());
    let _ = conn.disconnect().await;
    serving
}

/// Connects to a candidate and learns what it is.
async fn probe(opts: &Opts) -> Result<(Conn, ServerInfo, Role), ForwarderError> {
    let probed = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut conn = server::connect(opts).await?;
        let info = server::server_info(&mut conn).await?;
        let role = server::role(&mut conn).await?;
        Ok::<_, ForwarderError>((conn, info, role))
    })
    .await;
    probed.unwrap_or_else(|_| {
        Err(ForwarderError::transient(format!(
            "{}:{} did not answer in {PROBE_TIMEOUT:?}",
            opts.ip_or_hostname(),
            opts.tcp_port()
        )))
    })
}

/// A replica whose replication or binlog filters may leave the outbox
/// rows out: its binlog may lack them while its GTID position moves past
/// their transactions, so it is never streamed from; nor one whose
/// filters cannot be read (it may have any).
async fn filtering(conn: &mut Conn, info: &ServerInfo) -> Option<Refusal> {
    let filters = match server::replication_filters(conn).await {
        Ok(Some(filters)) => filters,
        // Not read this time (a lost connection): tried again.
        Err(e) => {
            return Some(Refusal {
                purged: false,
                error: ForwarderError::transient(format!(
                    "{}: its replication filters could not be read ({e}); a replica that may \
                     filter the outbox rows out is not streamed from",
                    info.identity
                )),
            })
        }
        Ok(None) => {
            return Some(Refusal {
                purged: false,
                error: DefiniteError::Config(format!(
                    "{}: its replication filters cannot be read (its account may not read the \
                     replication status: grant SLAVE MONITOR and BINLOG MONITOR on MariaDB, \
                     REPLICATION CLIENT on MySQL); a replica that may filter the outbox rows \
                     out is not streamed from",
                    info.identity
                ))
                .into(),
            })
        }
    };
    if filters.is_empty() {
        return None;
    }
    Some(Refusal {
        purged: false,
        error: DefiniteError::Config(format!(
            "{} replicates with replication filters ({}): its binlog may lack outbox rows \
             while its GTID position passes their transactions; it is not streamed from. \
             Remove the filters, or the server from mysql.url",
            info.identity,
            filters.join(", ")
        ))
        .into(),
    })
}

/// Whether the server behind `conn` can resume `checkpoint`, and how.
async fn serves(
    conn: &mut Conn,
    info: &ServerInfo,
    role: Role,
    checkpoint: &Checkpoint,
    accept_new_source: bool,
) -> Result<Via, Refusal> {
    let refuse = |error: ForwarderError| Refusal {
        error,
        purged: false,
    };
    let same_server = checkpoint.source.is_same_server(&info.identity);
    let overridden = accept_new_source && !same_server;
    if let (Some(state), false) = (&checkpoint.gtid, overridden) {
        let history = server::gtid_history(conn, info.flavor)
            .await
            .map_err(refuse)?;
        if let Some(history) = history {
            return match history.cannot_serve(state) {
                None => Ok(Via::Gtid(state.clone())),
                // A replica may only lag: it is asked again later.
                Some(reason) if role != Role::Writable => {
                    Err(refuse(ForwarderError::transient(format!(
                        "{} cannot serve the checkpoint's GTID state {state} yet: {reason}",
                        info.identity
                    ))))
                }
                Some(reason) => Err(Refusal {
                    purged: reason.is_purged(),
                    error: DefiniteError::GtidNotServed {
                        position: checkpoint.position.clone(),
                        gtid: state.to_string(),
                        stored: Box::new(checkpoint.source.clone()),
                        server: Box::new(info.identity.clone()),
                        reason: reason.to_string(),
                    }
                    .into(),
                }),
            };
        }
    }
    if !same_server && !overridden {
        return Err(refuse(
            DefiniteError::CheckpointFromOtherServer {
                position: checkpoint.position.clone(),
                stored: Box::new(checkpoint.source.clone()),
                actual: Box::new(info.identity.clone()),
            }
            .into(),
        ));
    }
    server::ensure_available(conn, &checkpoint.position)
        .await
        .map_err(|error| Refusal {
            purged: matches!(
                error,
                ForwarderError::Definite(DefiniteError::BinlogNotAvailable { .. })
            ),
            error,
        })?;
    Ok(Via::FilePos { overridden })
}

/// The candidates of `mysql.url` as connection options.
pub fn candidates(config: &crate::config::ForwarderConfig) -> Result<Vec<Opts>, DefiniteError> {
    config
        .mysql
        .url
        .all()
        .iter()
        .map(server::parse_url)
        .collect()
}

/// For the one-shot commands, which have no retry loop: every failure is final.
pub fn definite(e: ForwarderError) -> DefiniteError {
    match e {
        ForwarderError::Definite(e) => e,
        ForwarderError::Transient(e) => DefiniteError::Config(e),
    }
}
