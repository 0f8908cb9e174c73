//! Where a session streams from: the start position of a forwarder with no
//! checkpoint (`checkpoint.start`), the server and the way to resume a
//! checkpoint (decided by [`crate::resume`], on the connection that becomes
//! the dump connection), and, while streaming from one of several
//! candidates, the watch that notices a switchover.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::Opts;
use outbox_checkpoint::{Checkpoint, Tails};
use outbox_core::{ForwarderError, GtidState};
use outbox_source::{server, BinlogSource};

use super::point::{table_starts, ResumePoint};
use super::Forwarder;
use crate::config::StartPosition;
use crate::resume::{self, Via};

/// A session's binlog stream, as [`Forwarder::start_stream`] started it.
pub(super) struct Started {
    pub(super) source: BinlogSource,
    /// The GTID state the stream was requested after, if by GTID.
    pub(super) by_gtid: Option<GtidState>,
}

impl Forwarder {
    /// Where the stream starts: the stored checkpoint (whose server the
    /// session start decides), or `checkpoint.start` on the server
    /// [`resume::decide`] picks, which is then written at once (in a group,
    /// recorded as the group's first start), so a restart before the first
    /// ack does not move `latest` forward.
    pub(super) async fn resolve_start(&mut self) -> Result<ResumePoint, ForwarderError> {
        let entries = self.table_entries();
        if let Some(checkpoint) = self.writer.load()? {
            tracing::info!(checkpoint = %checkpoint.position, gtid = %checkpoint.gtid.as_ref().map(ToString::to_string).unwrap_or_default(), "resuming from the stored checkpoint");
            return Ok(ResumePoint::from_stored(checkpoint, &entries));
        }
        let decision = resume::decide(&self.candidates, self.current, None, false).await?;
        let resume::Decision {
            index,
            mut conn,
            info,
            ..
        } = decision;
        let checkpoint =
            first_checkpoint(&mut conn, &info, &self.config.checkpoint.start, &entries).await?;
        let _ = conn.disconnect().await;
        self.writer.write_first(&checkpoint).map_err(|e| {
            ForwarderError::transient(format!("cannot record the group's first start: {e}"))
        })?;
        tracing::info!(start = %checkpoint.position, "no stored checkpoint; starting at checkpoint.start");
        self.current = index;
        // Written against the server it starts on: nothing to override.
        self.accept_new_source = false;
        Ok(ResumePoint::from_stored(checkpoint, &entries))
    }

    /// The `[outbox] tables` entries, as their patterns print.
    fn table_entries(&self) -> Vec<String> {
        table_entries(&self.decode.tables)
    }

    /// Decides the server and the way to resume `resume` (see
    /// [`crate::resume`]) and starts the binlog stream on the connection
    /// the decision used. `resume` then names the server streamed from and
    /// the GTID state the session counts from.
    pub(super) async fn start_stream(
        &mut self,
        resume: &mut ResumePoint,
    ) -> Result<Started, ForwarderError> {
        let from = &resume.position().clone();
        // A session that switched servers and ended before its first ack
        // left the position the previous server's.
        let previous = resume.position_owner().clone();
        let point = resume.checkpoint();
        let decision = resume::decide(
            &self.candidates,
            self.current,
            Some(&point),
            self.accept_new_source,
        )
        .await?;
        let resume::Decision {
            index,
            mut conn,
            info,
            via,
            role,
            ..
        } = decision;
        self.streaming_from_writable = role == server::Role::Writable;
        if index != self.current {
            tracing::warn!(
                candidate = index + 1,
                of = self.candidates.len(),
                "streaming from another candidate of mysql.url"
            );
            self.current = index;
        }
        let other_server = !previous.is_same_server(&info.identity);
        let via = via.expect("decided for a checkpoint");
        let by_gtid = resume_via(via, resume, &mut conn, &info, other_server).await?;
        let identity = info.identity.clone();
        let file_created = match &resume.file_created {
            Some((file, created)) if *file == from.file && !other_server => Some(*created),
            _ => None,
        };
        // Another server's file of that name is another file: its time is
        // learnt again from this server's stream.
        if other_server {
            resume.file_created = None;
        }
        let source = BinlogSource::start_on(
            conn,
            info,
            &self.config.stream_config(),
            self.decode.clone(),
            from,
            by_gtid.as_ref(),
            file_created,
        )
        .await?;
        let retention = source.binlog_retention();
        if let server::ManagedRetention::Unreadable(why) = &retention.managed {
            tracing::warn!(server = %identity, "cannot read RDS's binlog retention hours (CALL mysql.rds_show_configuration: {why}): the purge headroom is not reported; GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration to the forwarder's user");
        }
        self.metrics
            .on_call
            .set_binlog_retention(retention.purge_after());
        if let (Some(state), true) = (&by_gtid, other_server) {
            tracing::warn!(position = %from, gtid = %state, server = %identity, previous = %previous, "binlog stream started on another server of the topology, by GTID: following it");
        }
        // --accept-new-source was for this start only.
        self.accept_new_source = false;
        // Until a transaction of its is acked, the position is the previous server's.
        resume.switched_from = other_server.then(|| (from.clone(), previous));
        resume.identity = identity;
        Ok(Started { source, by_gtid })
    }

    /// While streaming from candidate `current` of several: a check, every
    /// few seconds, that it is still the one to stream from. Turns true
    /// when the session should end so that the next one streams elsewhere:
    /// - streaming from the primary, when it no longer takes writes and
    ///   another candidate does (a switchover; the next session's decision
    ///   says what to do if that one cannot serve);
    /// - streaming from a replica (no writable candidate served when the
    ///   session began), when a writable candidate serves the acked
    ///   watermark (`saved`, or the session's start `from` until a save):
    ///   back to the primary then, and not before, so a primary that still
    ///   cannot serve does not end the session again and again.
    pub(super) fn watch_source(
        &self,
        from: &ResumePoint,
    ) -> Option<(Arc<AtomicBool>, tokio::task::JoinHandle<()>)> {
        if self.candidates.len() < 2 {
            return None;
        }
        let moved = Arc::new(AtomicBool::new(false));
        let (current, candidates, flag) = (self.current, self.candidates.clone(), moved.clone());
        let from_writable = self.streaming_from_writable;
        let start = from.checkpoint();
        let saved = self.saved.subscribe();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(SOURCE_CHECK_EVERY).await;
                if from_writable
                    && candidate_role(&candidates[current]).await == Some(server::Role::Writable)
                {
                    continue;
                }
                let watermark = saved.borrow().clone().unwrap_or_else(|| start.clone());
                let mut following = 0;
                for (i, opts) in candidates.iter().enumerate() {
                    if i == current {
                        continue;
                    }
                    let follow = match from_writable {
                        true => candidate_role(opts).await == Some(server::Role::Writable),
                        false => resume::writable_serves(opts, &watermark).await,
                    };
                    following += usize::from(follow);
                }
                // From a replica, one primary only: two writable servers
                // that serve are ambiguous, and the next session's decision
                // would wait rather than stream.
                if following == 1 || (from_writable && following > 0) {
                    flag.store(true, Ordering::Relaxed);
                    return;
                }
            }
        });
        Some((moved, task))
    }
}

/// How the stream resumes `resume` on the server `info` describes, as
/// [`resume::decide`] chose (`via`): after the GTID state returned, or by
/// file:pos, when `resume` is given the GTID state the session counts from.
async fn resume_via(
    via: Via,
    resume: &mut ResumePoint,
    conn: &mut mysql_async::Conn,
    info: &server::ServerInfo,
    other_server: bool,
) -> Result<Option<GtidState>, ForwarderError> {
    let (previous, from) = (&resume.identity, &resume.position().clone());
    match via {
        Via::Gtid(state) => {
            if other_server {
                tracing::warn!(stored = %previous, actual = %info.identity, gtid = %state, "the checkpoint was written against another server; this one has every transaction it covers, so it is followed by GTID");
            }
            Ok(Some(state))
        }
        Via::FilePos { overridden } => {
            resume.gtid = if overridden {
                tracing::warn!(stored = %previous, actual = %info.identity, "resuming a checkpoint of another server identity as asked (--accept-new-source)");
                server::gtid_state_at(conn, info.flavor, from).await?
            } else if resume.gtid.is_some() {
                // Resumed by file:pos (GTIDs off now): the state would
                // go stale as the position moves on.
                None
            } else {
                // No GTID state (an older release's checkpoint): the
                // server tells it for its own position.
                server::gtid_state_at(conn, info.flavor, from).await?
            };
            Ok(None)
        }
    }
}

/// How often a session streaming from one of several candidates checks that
/// it is still the writable one.
const SOURCE_CHECK_EVERY: Duration = Duration::from_secs(3);

/// The role of the server at `opts`, `None` if it does not answer.
async fn candidate_role(opts: &Opts) -> Option<server::Role> {
    let asked = tokio::time::timeout(SOURCE_CHECK_EVERY, async {
        let mut conn = server::connect(opts).await.ok()?;
        let role = server::role(&mut conn).await.ok();
        let _ = conn.disconnect().await;
        role
    });
    asked.await.ok().flatten()
}

/// `[outbox] tables` entries, as their patterns print.
pub(crate) fn table_entries(tables: &outbox_source::OutboxTables) -> Vec<String> {
    tables.patterns().iter().map(ToString::to_string).collect()
}

/// The first checkpoint of a line that has none: `start` resolved on the
/// server `conn` is connected to (`latest` is where that server's binlog
/// ends now), every table entry starting now, no topic written yet.
pub(crate) async fn first_checkpoint(
    conn: &mut mysql_async::Conn,
    info: &server::ServerInfo,
    start: &StartPosition,
    entries: &[String],
) -> Result<Checkpoint, ForwarderError> {
    let (position, gtid) = match start.clone() {
        StartPosition::Latest => server::current_position_and_gtid(conn, info.flavor).await?,
        StartPosition::Earliest => {
            let position = server::first_position(conn).await?;
            let gtid = server::gtid_state_at(conn, info.flavor, &position).await?;
            (position, gtid)
        }
        StartPosition::At(position) => {
            server::ensure_available(conn, &position).await?;
            let gtid = server::gtid_state_at(conn, info.flavor, &position).await?;
            (position, gtid)
        }
    };
    let since = server::now_ms(conn).await?;
    // Nothing published yet: every topic is recorded as it is first
    // written to.
    let tables_since = table_starts(entries, &BTreeMap::new(), Some(since), since);
    Ok(
        Checkpoint::with_tails(position, info.identity.clone(), Some(Tails::new()))
            .with_gtid(gtid)
            .streaming_since(Some(since))
            .tables_since(tables_since),
    )
}
