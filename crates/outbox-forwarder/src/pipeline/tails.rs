//! Reading back what an earlier run published after the checkpoint (see
//! [`crate::pipeline::replay`]): by binlog coordinate on the checkpoint's server, by
//! GTID slot on another server of the topology, or not at all (and said)
//! where the tails cannot be trusted.

use std::time::Duration;

use outbox_checkpoint::Tails;
use outbox_core::{BinlogPosition, GtidState};
use outbox_sink::tail::Coordinates;

use super::point::ResumePoint;
use super::Forwarder;
use crate::pipeline::replay::{Replay, Resumption};

impl Forwarder {
    /// Reads back the tails that `point`'s stored checkpoint records, to
    /// resume at it on the server it now names (after the GTID state
    /// `by_gtid` when the stream was requested by GTID) without publishing
    /// again what Kafka already has: what the session need not publish
    /// again, `None` without `checkpoint.skip_published`.
    pub(super) async fn read_back_tails(
        &self,
        point: &mut ResumePoint,
        by_gtid: Option<&GtidState>,
    ) -> Option<Replay> {
        if !self.config.checkpoint.skip_published {
            return None;
        }
        let (from, identity) = (&point.position().clone(), &point.identity.clone());
        let stored = point.last_stored();
        // Resumed against another server as asked (--accept-new-source):
        // the coordinates in the topics are the old server's. Once a
        // checkpoint of this server is stored, its tails are this server's.
        let other_server = !identity.is_same_server(&stored.source);
        // On another server of the topology, followed by GTID: the rows are
        // recognised by their GTID slots instead of their coordinates.
        let across = match (other_server, by_gtid) {
            (true, Some(state)) => Some(state.clone()),
            _ => None,
        };
        if let Some(replay) = self.resumed_after_clean_stop(point, other_server).await {
            return Some(replay);
        }
        let mut scanned = (Duration::ZERO, 0);
        let (replay, resumption) = match point.last_stored().tails.clone() {
            _ if other_server && across.is_none() => Replay::at_least_once(
                Default::default(),
                vec!["the checkpoint was written against another server (--accept-new-source), whose binlog coordinates the topics hold".into()],
            ),
            None => Replay::at_least_once(
                Default::default(),
                vec!["the checkpoint records no topic tails (it was written by an older release or by `checkpoint set`)".into()],
            ),
            Some(tails) if tails.is_empty() => Replay::from_scan(from, Default::default()),
            Some(tails) => {
                let (resumed, took_read) = self
                    .scan_tails(&tails, from, identity.key(), across.as_ref())
                    .await;
                scanned = took_read;
                resumed
            }
        };
        if !resumption.fallback.is_empty() {
            self.metrics.replay_fallback();
        }
        let Resumption {
            already_published,
            backfilled,
            fallback,
        } = resumption;
        if fallback.is_empty() {
            let (took, read) = scanned;
            tracing::info!(checkpoint = %from, already_published, backfilled, scan_read = read, scan_ms = took.as_millis() as u64, "resuming at {from}; {already_published} events already in Kafka will not be republished");
        } else {
            tracing::warn!(checkpoint = %from, "resuming at {from}; every event after it is published again, as the topic tails cannot be trusted: {}", fallback.join("; "));
        }
        Some(replay)
    }

    /// Reads back what the topics hold after `tails`, by binlog coordinate
    /// on this server or, with `across`, by GTID slot; with how long the
    /// scan took and how many messages it read.
    async fn scan_tails(
        &self,
        tails: &Tails,
        from: &BinlogPosition,
        server: String,
        across: Option<&GtidState>,
    ) -> ((Replay, Resumption), (Duration, usize)) {
        let requests = Replay::requests(tails);
        let kafka = self.config.kafka_config();
        let limit = self
            .config
            .kafka
            .max_in_flight
            .saturating_mul(10)
            .max(1_000_000);
        let by_slot = across.is_some();
        let scan = tokio::task::spawn_blocking(move || {
            let accepted = if by_slot {
                Coordinates::ByGtid
            } else {
                Coordinates::OfServer(&server)
            };
            outbox_sink::tail::scan(&kafka, &requests, accepted, limit, TAIL_SCAN_TIMEOUT)
        })
        .await
        .expect("the tail scan does not panic");
        let scanned = (scan.took, scan.messages_read);
        self.metrics.tails_read(scan.took);
        let replay = match across {
            Some(state) => Replay::from_scan_by_gtid(state, scan),
            None => Replay::from_scan(from, scan),
        };
        (replay, scanned)
    }

    /// Resumes at `point` without reading back if its stored checkpoint is
    /// a clean stop's at its position on this server, and takes its promise
    /// back first; `None` (read the tails back) otherwise.
    async fn resumed_after_clean_stop(
        &self,
        point: &mut ResumePoint,
        other_server: bool,
    ) -> Option<Replay> {
        let checkpoint = point.last_stored();
        let from = &checkpoint.position;
        if !checkpoint.clean || other_server {
            return None;
        }
        let tails = checkpoint.tails.as_ref()?;
        // Written to since (a backfill, another producer): read it back.
        let (kafka, recorded) = (self.config.kafka_config(), tails.clone());
        let unwritten = tokio::task::spawn_blocking(move || unwritten_since(&kafka, &recorded))
            .await
            .expect("the watermark requests do not panic");
        if let Err(why) = unwritten {
            tracing::info!(checkpoint = %from, "a clean stop, but {why}: reading the topics back");
            return None;
        }
        // Taken back before anything is published after it; if it cannot
        // be, the tails are read back as after any other stop.
        match self.writer.unclean(checkpoint) {
            Ok(taken_back) => {
                tracing::info!(checkpoint = %from, "resuming at {from} after a clean stop: nothing after it is in the topics, none read back");
                let replay = Replay::after_clean_stop(tails);
                point.taken_back(taken_back);
                Some(replay)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take back the clean stop's checkpoint; reading the topics back");
                None
            }
        }
    }
}

/// Whether no partition of `tails` ends past its recorded offset (a topic
/// recorded as `[]` holds nothing); why not, otherwise. A few metadata
/// requests, not a read.
fn unwritten_since(
    config: &outbox_sink::KafkaConfig,
    tails: &outbox_checkpoint::Tails,
) -> Result<(), String> {
    use rdkafka::consumer::Consumer;
    let consumer = outbox_kafka::reader(config.connection_config(), &config.auth, &[])
        .map_err(|e| format!("no client to ask the topics: {}", outbox_kafka::shown(&e)))?;
    for (topic, recorded) in tails {
        let marks = outbox_kafka::watermarks(consumer.client(), topic)
            .map_err(|e| format!("cannot read the partitions of {topic}: {e}"))?
            .unwrap_or_default();
        let past = marks
            .iter()
            .enumerate()
            .any(|(p, &(_, high))| high > recorded.get(p).copied().unwrap_or(0));
        if past || (!recorded.is_empty() && marks.len() != recorded.len()) {
            return Err(format!("topic {topic} was written to after it"));
        }
    }
    Ok(())
}

/// How long reading back the topic tails may take before the forwarder
/// gives up on it and publishes everything after the checkpoint again.
const TAIL_SCAN_TIMEOUT: Duration = Duration::from_secs(60);
