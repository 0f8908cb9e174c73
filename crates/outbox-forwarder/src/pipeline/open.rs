//! Opening a session: the producer (kept from the last session unless it
//! failed fatally), the binlog stream where [`super::source`] decides, the
//! topic tails read back, and the replica gate; then the [`Session`] runs,
//! and hands the producer back if nothing is left in it.

use std::sync::Arc;

use outbox_core::{DefiniteError, ForwarderError};
use outbox_sink::KafkaSink;
use tokio::sync::{mpsc, watch};

use super::point::ResumePoint;
use super::reader::{read_transactions, READ_AHEAD_BATCHES};
use super::session::{Ended, Feed, Lasting, Limits, Session};
use super::source::Started;
use super::{Forwarder, SessionEnd};
use crate::pipeline::replay::Replay;
use crate::replicas::ReplicaGate;
use crate::shutdown::Shutdown;

impl Forwarder {
    /// One session from `from`; returns how it ended and where the next
    /// one resumes: as of the last checkpoint written.
    pub(super) async fn session(
        &mut self,
        mut from: ResumePoint,
        shutdown: &mut Shutdown,
    ) -> (SessionEnd, ResumePoint) {
        let (sink, started, replay) = match self.open(&mut from, shutdown).await {
            Ok(opened) => opened,
            Err(end) => return (end, from),
        };
        let gate = match self.replica_gate(&from) {
            Ok(gate) => gate,
            Err(e) => {
                started.source.close().await;
                self.sink = Some(sink);
                return (SessionEnd::Failed(e.into()), from);
            }
        };
        let (transactions_tx, transactions) = mpsc::channel(READ_AHEAD_BATCHES);
        let (failed_tx, source_failed) = watch::channel(false);
        let mut tasks = vec![tokio::spawn(read_transactions(
            started.source,
            transactions_tx,
            self.metrics.clone(),
            failed_tx,
        ))];
        let source_moved = self.watch_source(&from).map(|(moved, task)| {
            tasks.push(task);
            moved
        });
        let feed = Feed {
            transactions,
            source_failed,
            source_moved,
            gate,
            tasks,
        };
        let lasting = Lasting {
            writer: self.writer.clone(),
            saved: self.saved.clone(),
            metrics: self.metrics.clone(),
            leadership: self.leadership.clone(),
            limits: Limits::of(&self.config, &self.decode),
        };
        let session = Session::new(sink, lasting, from, replay);
        let Ended {
            end,
            resume,
            publisher,
        } = session.run(feed, shutdown).await;
        self.sink = publisher;
        (end, resume)
    }

    /// The session's producer and binlog stream, with the topic tails read
    /// back; `Err` with how the session ends if either cannot be had.
    async fn open(
        &mut self,
        from: &mut ResumePoint,
        shutdown: &mut Shutdown,
    ) -> Result<(KafkaSink, Started, Option<Replay>), SessionEnd> {
        let mut sink = match self.sink.take().filter(|sink| !sink.is_fatal()) {
            Some(sink) => sink,
            None => KafkaSink::new(&self.config.kafka_config(), self.broker.clone())
                .map_err(|e| SessionEnd::Failed(e.into()))?,
        };
        let source = tokio::select! {
            source = self.start_stream(from) => source,
            _ = shutdown.requested() => Err(ForwarderError::transient("shutdown")),
        };
        sink.set_server(from.identity.key());
        if let Some(ha) = &self.config.ha {
            sink.set_instance(ha.instance.clone());
        }
        // The fence, asked right before each hand-over to the producer:
        // after every await of `publish` (a metadata lookup, a full queue).
        if let Some(leadership) = &self.leadership {
            let leadership = leadership.clone();
            sink.set_fence(Arc::new(move || leadership.may_publish()));
        }
        let opened = match source {
            Ok(started) => {
                let replay = self.read_back_tails(from, started.by_gtid.as_ref()).await;
                Ok((started, replay))
            }
            Err(e) => Err(e),
        };
        match opened {
            Ok((started, replay)) => Ok((sink, started, replay)),
            Err(e) => {
                self.sink = Some(sink);
                Err(if shutdown.is_requested() {
                    SessionEnd::Shutdown
                } else {
                    SessionEnd::Failed(e)
                })
            }
        }
    }

    /// The replica gate of `mysql.publish_after_replicas`, which needs a
    /// GTID state to start from.
    fn replica_gate(&self, from: &ResumePoint) -> Result<Option<ReplicaGate>, DefiniteError> {
        let need = self.config.mysql.publish_after_replicas;
        if need == 0 {
            return Ok(None);
        }
        if from.gtid.is_none() {
            return Err(DefiniteError::Config(
                "mysql.publish_after_replicas needs the stream to start from a GTID state, to \
                 ask the replicas which transactions they have: a server that logs GTIDs \
                 (on MySQL: gtid_mode=ON), and on MySQL a checkpoint with a GTID state or \
                 checkpoint.start = \"latest\""
                    .into(),
            ));
        }
        Ok(Some(ReplicaGate::start(
            need,
            &self.candidates,
            self.current,
            self.metrics.clone(),
        )))
    }
}
