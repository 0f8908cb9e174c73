//! `GET /acked?gtid=G[&wait_ms=N]`: whether every transaction up to `G`
//! (one GTID, or a GTID state such as MySQL's `gtid_executed`) is
//! published and acknowledged by the brokers, waiting up to `wait_ms` (at
//! most [`MAX_WAIT`]) for it: what a service waits on before it answers (a
//! saga step, an integration test, a read-your-writes API). The writer
//! library's `Outbox::wait_published` calls it.
//!
//! Answered from the checkpoint stored after the acks (the one the store
//! held at start until this process stores one), so an answer stays true
//! across a crash; it follows the acks by up to
//! `checkpoint.flush_interval_ms`. A standby of an `[ha]` group answers
//! from the group's records it follows (each stored by the active
//! instance after the acks, and shared): any instance can be asked, the
//! standby about a second later than the active one.
//!
//! 200 `acked`; 504 `not yet acked` when the wait ran out (ask again); 400
//! for a request that names no GTID; 503 when this instance cannot tell
//! (no checkpoint with a GTID state, too many waiting).

use std::time::Duration;

use outbox_checkpoint::Checkpoint;
use outbox_core::{Gtid, GtidState, MariaDbGtidPos, MySqlGtidSet};

use super::Health;

/// The longest one request waits.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Requests waiting at once; past it, a request is answered 503 at once.
/// They hold no slot of the listener's [`super::MAX_CONNECTIONS`], which
/// stay free for scrapes and probes.
pub const MAX_WAITERS: usize = 64;

/// What a barrier asks for.
#[derive(Debug)]
enum Wanted {
    One(Gtid),
    Upto(GtidState),
}

impl Wanted {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("gtid is empty".into());
        }
        if let Ok(gtid) = text.parse::<Gtid>() {
            return Ok(Wanted::One(gtid));
        }
        if let Ok(pos) = text.parse::<MariaDbGtidPos>() {
            return Ok(Wanted::Upto(GtidState::MariaDb(pos)));
        }
        match text.parse::<MySqlGtidSet>() {
            Ok(set) => Ok(Wanted::Upto(GtidState::MySql(set))),
            Err(_) => Err(format!(
                "{text:?} is neither a GTID (domain-server-seq, uuid:n) nor a GTID state"
            )),
        }
    }

    /// Whether `state` holds what is wanted. On MariaDB, server-exact:
    /// after a failover the new primary numbers on from where it stood, so
    /// a sequence number alone could answer for a transaction the old
    /// primary took with it; a GTID of a former primary is then not
    /// answered `acked` (the wait runs out).
    fn within(&self, state: &GtidState) -> bool {
        match self {
            Wanted::One(gtid) => state.has_applied(gtid),
            Wanted::Upto(wanted) => state.has_applied_all(wanted),
        }
    }
}

/// One barrier request.
#[derive(Debug)]
pub struct Ask {
    wanted: Wanted,
    /// How long it may wait.
    pub wait: Duration,
}

/// The request's query (`gtid=...&wait_ms=...`, percent-encoded or not).
pub fn ask(query: &str) -> Result<Ask, String> {
    let mut gtid = None;
    let mut wait = Duration::ZERO;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decoded(value)?;
        match key {
            "gtid" => gtid = Some(value),
            "wait_ms" => {
                let ms: u64 = value
                    .parse()
                    .map_err(|_| format!("wait_ms {value:?} is not a number of milliseconds"))?;
                wait = Duration::from_millis(ms).min(MAX_WAIT);
            }
            _ => {}
        }
    }
    let gtid = gtid.ok_or("name the transaction: /acked?gtid=GTID[&wait_ms=N]")?;
    Ok(Ask {
        wanted: Wanted::parse(&gtid)?,
        wait,
    })
}

/// `%XX` and `+` as a query encodes them.
fn percent_decoded(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("{text:?}: a % not followed by two hex digits"))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8"))
}

/// Whether `checkpoint` covers what is asked: `Ok(true)` when it does,
/// `Ok(false)` not yet, `Err` when it cannot tell.
fn judge(checkpoint: Option<&Checkpoint>, wanted: &Wanted) -> Result<bool, String> {
    let Some(checkpoint) = checkpoint else {
        return Ok(false);
    };
    match &checkpoint.gtid {
        Some(state) => Ok(wanted.within(state)),
        None => Err(format!(
            "the checkpoint ({}) carries no GTID state (the server logs no GTIDs): a barrier \
             needs them",
            checkpoint.position
        )),
    }
}

/// The answer to `ask`: (status, body). Every record it asks is one of
/// acks: this process's saved checkpoint, the group's records it adopts
/// (a standby stores only those; an instance promoted since keeps both),
/// and the checkpoint stored when it started; any of them covering the
/// transaction answers yes.
pub async fn answer(health: &Health, ask: Ask) -> (&'static str, String) {
    let (mut acked, mut adopted) = (health.acked.clone(), health.adopted.clone());
    let deadline = tokio::time::Instant::now() + ask.wait;
    loop {
        let (saved, taken) = (
            acked.borrow_and_update().clone(),
            adopted.borrow_and_update().clone(),
        );
        if [&saved, &taken, &health.stored]
            .into_iter()
            .flatten()
            .any(|checkpoint| judge(Some(checkpoint), &ask.wanted) == Ok(true))
        {
            return ("200 OK", "acked\n".into());
        }
        let judged = {
            // Said from the record of this instance's role.
            let own = match health.metrics.is_standby() {
                true => taken.as_ref().or(saved.as_ref()),
                false => saved.as_ref().or(taken.as_ref()),
            };
            let checkpoint = own.or(health.stored.as_ref());
            judge(checkpoint, &ask.wanted).map(|done| {
                let at = checkpoint.map_or_else(
                    || "no checkpoint stored yet".to_owned(),
                    |c| {
                        format!(
                            "the checkpoint is at {} (GTID state {})",
                            c.position,
                            c.gtid.as_ref().map(ToString::to_string).unwrap_or_default()
                        )
                    },
                );
                (done, at)
            })
        };
        match judged {
            Ok((true, _)) => return ("200 OK", "acked\n".into()),
            Ok((false, at)) => {
                // Either record moving; a closed one is not waited on.
                let changed = tokio::time::timeout_at(deadline, async {
                    tokio::select! {
                        Ok(()) = acked.changed() => true,
                        Ok(()) = adopted.changed() => true,
                        else => false,
                    }
                })
                .await;
                if !matches!(changed, Ok(true)) {
                    return (
                        "504 Gateway Timeout",
                        format!("not yet acked: {at}; ask again\n"),
                    );
                }
            }
            Err(why) => return ("503 Service Unavailable", format!("{why}\n")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_one_gtid_or_a_state_and_how_long_to_wait() {
        let one = ask("gtid=0-1-42&wait_ms=1500").unwrap();
        assert!(matches!(one.wanted, Wanted::One(_)), "{one:?}");
        assert_eq!(one.wait, Duration::from_millis(1500));
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let set = ask(&format!("gtid={uuid}%3A1-77%2C{uuid}%3A80")).unwrap();
        assert!(matches!(set.wanted, Wanted::Upto(_)), "{set:?}");
        assert_eq!(set.wait, Duration::ZERO);
        assert_eq!(ask("gtid=0-1-1&wait_ms=999999").unwrap().wait, MAX_WAIT);
        assert!(ask("wait_ms=5").is_err());
        assert!(ask("gtid=").is_err());
        assert!(ask("gtid=not-a-gtid").is_err());
        assert!(ask("gtid=0-1-1&wait_ms=soon").is_err());
    }

    #[test]
    fn a_checkpoint_answers_for_the_transactions_its_state_holds() {
        let position: outbox_core::BinlogPosition = "binlog.000001:4".parse().unwrap();
        let source = outbox_core::SourceIdentity {
            server_uuid: None,
            server_id: 1,
            host: "db:3306".into(),
        };
        let at = |gtid: &str| {
            Checkpoint::new(position.clone(), source.clone())
                .with_gtid(Some(GtidState::MariaDb(gtid.parse().unwrap())))
        };
        let wanted = Wanted::parse("0-1-42").unwrap();
        assert_eq!(judge(None, &wanted), Ok(false));
        assert_eq!(judge(Some(&at("0-1-41")), &wanted), Ok(false));
        assert_eq!(judge(Some(&at("0-1-42")), &wanted), Ok(true));
        // Another server's numbers past it: not this transaction, which the
        // old primary may have taken with it.
        assert_eq!(judge(Some(&at("0-2-50,1-1-3")), &wanted), Ok(false));
        assert_eq!(judge(Some(&at("0-1-50,1-1-3")), &wanted), Ok(true));
        let state = Wanted::parse("0-1-42,1-1-9").unwrap();
        assert_eq!(judge(Some(&at("0-1-42,1-1-8")), &state), Ok(false));
        let without = Checkpoint::new(position, source);
        assert!(judge(Some(&without), &wanted).is_err());
    }
}
