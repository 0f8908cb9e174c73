//! The forwarding loop: binlog → Kafka → checkpoint.
//!
//! A *session* is one binlog dump connection and one producer. A reader task
//! ([`reader`]) assembles committed transactions and hands them over a small
//! bounded channel; the session loop ([`session`]) sends their events
//! ([`publish`]), counts acks in the [`AckWatermark`], and every
//! `flush_interval` writes the watermark through the one checkpoint writer
//! ([`crate::checkpoints`]). Where a session streams from, and how it
//! resumes there, is [`source`]'s (asking [`crate::resume`]); where the next
//! one resumes is a [`point::ResumePoint`], handed from session to session;
//! what it need not publish again is [`tails`]'. In an `[ha]` group, [`group`] serves the
//! sessions between the terms of [`crate::role`].
//!
//! Backpressure: when `max_in_flight` messages are unacked the loop stops
//! taking transactions, the channel fills, and the reader stops reading.
//!
//! Failures end the session. Either way the loop first waits (bounded) for
//! the acks already under way, so the checkpoint gets as far as the broker
//! really got, then writes it. A transient failure starts a new session from
//! that watermark after a backoff; a definite one stops the forwarder. A
//! shutdown request does the same as a definite error, but exits cleanly.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::Opts;
use outbox_checkpoint::CheckpointStore;
use outbox_core::{DefiniteError, ForwarderError};
use outbox_sink::{BrokerHealth, KafkaSink};

use crate::check::{self, Status};
use crate::checkpoints::CheckpointWriter;
use crate::config::ForwarderConfig;
use crate::group::{GroupLog, KafkaLog, Leadership};
use crate::http::{self, Health};
use crate::metrics::Metrics;
use crate::resume;
use crate::shutdown::Shutdown;

#[cfg(test)]
mod fake;
mod flow;
mod group;
pub mod linger;
mod open;
mod point;
pub mod progress;
mod publish;
mod publisher;
mod reader;
pub mod replay;
mod session;
mod source;
mod tails;
#[cfg(test)]
mod tests;

pub(crate) use source::{first_checkpoint, table_entries};

/// Choices the operator makes on the command line rather than in the file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Resume a checkpoint written against a server with another identity.
    pub accept_new_source: bool,
    /// `--start-group`: in an `[ha]` group whose topic has no record, this
    /// instance may start the group at `checkpoint.start` even though it
    /// has no checkpoint of its own (see [`group`]).
    pub start_group: bool,
}

/// Runs until `shutdown` turns true (Ok) or a definite error (Err).
pub async fn run(
    config: ForwarderConfig,
    options: RunOptions,
    mut shutdown: Shutdown,
) -> Result<(), DefiniteError> {
    let store = crate::checkpoints::open_store(&config)?;
    let candidates = resume::candidates(&config)?;
    let broker = Arc::new(BrokerHealth::default());
    // Created before the preflight: the broker takes a while to hand an
    // idempotent producer its id, and that wait overlaps the checks.
    let sink = KafkaSink::new(&config.kafka_config(), broker.clone())?;
    refuse_failed_preflight(&config, &store, &options).await?;
    let metrics = Arc::new(Metrics::default());
    metrics.on_call.set_brokers(broker.clone());
    if let Some(ha) = &config.ha {
        metrics.on_call.set_group(&ha.group);
    }
    // The checkpoint as stored, for [retention] and the barrier (/acked).
    let (saved, saved_by_retention) = tokio::sync::watch::channel(None);
    // Until this process stores one, the barrier answers from the
    // checkpoint the store holds (its warnings are the start's to give).
    let stored = store
        .load_noting()
        .ok()
        .and_then(|(checkpoint, _)| checkpoint);
    let leadership = config
        .ha
        .as_ref()
        .map(|ha| Leadership::new(Duration::from_millis(ha.lease_ms)));
    let mut writer = CheckpointWriter::new(store, metrics.clone());
    let acked = Acked {
        saved: saved.subscribe(),
        adopted: writer.adopted(),
        stored,
    };
    let _listener = listen(&config, &metrics, &broker, acked).await?;
    let mut log: Option<Arc<dyn GroupLog>> = None;
    if let (Some(ha), Some(leadership)) = (&config.ha, &leadership) {
        let kafka_log: Arc<dyn GroupLog> =
            Arc::new(KafkaLog::new(&config.kafka_config(), ha, metrics.clone())?);
        writer = writer.in_group(kafka_log.clone(), leadership.clone(), &ha.instance);
        log = Some(kafka_log);
    }
    let retention = config.retention.clone().map(|section| {
        tokio::spawn(crate::tables::prune::retention(
            config.clone(),
            section,
            saved_by_retention,
            metrics.clone(),
            shutdown.clone(),
        ))
    });
    let audit = config.audit.enabled.then(|| {
        tokio::spawn(crate::tables::audit::audit(
            config.clone(),
            metrics.clone(),
            shutdown.clone(),
        ))
    });
    let mut forwarder = Forwarder {
        saved,
        decode: config.decode_config()?,
        writer: Arc::new(writer),
        candidates,
        current: 0,
        config,
        leadership,
        accept_new_source: options.accept_new_source,
        start_group: options.start_group,
        streaming_from_writable: false,
        held_off: false,
        metrics,
        broker,
        sink: Some(sink),
    };
    let served = match (forwarder.config.ha.clone(), log) {
        (Some(ha), Some(log)) => forwarder.serve_in_group(ha, log, &mut shutdown).await,
        _ => forwarder.serve(&mut shutdown).await.map(|_| ()),
    };
    for task in [retention, audit].into_iter().flatten() {
        task.abort();
    }
    served
}

/// What the barrier (`/acked`) answers from.
struct Acked {
    /// The checkpoints this process stores.
    saved: tokio::sync::watch::Receiver<Option<outbox_checkpoint::Checkpoint>>,
    /// A standby's: the group's records it adopts.
    adopted: tokio::sync::watch::Receiver<Option<outbox_checkpoint::Checkpoint>>,
    /// The one the store held at start.
    stored: Option<outbox_checkpoint::Checkpoint>,
}

/// The metrics and health endpoint, when `metrics.listen` is set.
async fn listen(
    config: &ForwarderConfig,
    metrics: &Arc<Metrics>,
    broker: &Arc<BrokerHealth>,
    Acked {
        saved,
        adopted,
        stored,
    }: Acked,
) -> Result<Option<tokio::task::JoinHandle<()>>, DefiniteError> {
    let Some(listen) = config.metrics.listen else {
        return Ok(None);
    };
    let health = Health {
        metrics: metrics.clone(),
        broker: broker.clone(),
        max_lag: Duration::from_secs(config.metrics.ready_max_lag_seconds),
        acked: saved,
        adopted,
        stored,
    };
    Ok(Some(http::bind(listen, health).await?))
}

/// How [`Forwarder::serve`] stopped without an error.
#[derive(Debug, PartialEq, Eq)]
enum Stopped {
    Shutdown,
    /// The instance lost the group's lock.
    Demoted,
}

impl Forwarder {
    /// Streams from the stored checkpoint (or `checkpoint.start`) until
    /// shutdown, a definite error, or (in a group) demotion.
    async fn serve(&mut self, shutdown: &mut Shutdown) -> Result<Stopped, DefiniteError> {
        let forwarder = self;
        let mut backoff = forwarder.initial_backoff();
        let mut resume = loop {
            match forwarder.resolve_start().await {
                Ok(resume) => break resume,
                Err(ForwarderError::Definite(e)) => return Err(e),
                Err(ForwarderError::Transient(e)) => {
                    // In a group, a start that failed after the lock was
                    // lost must not be retried: the new holder decides.
                    if forwarder.demoted() {
                        return Ok(Stopped::Demoted);
                    }
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot reach MySQL to start");
                    if forwarder.pause(&mut backoff, shutdown).await {
                        return Ok(Stopped::Shutdown);
                    }
                }
            }
        };

        loop {
            let started_at = resume.position().clone();
            let (end, next) = forwarder.session(resume, shutdown).await;
            resume = next;
            let position = resume.position();
            match end {
                SessionEnd::Shutdown => {
                    tracing::info!(checkpoint = %position, "stopped cleanly");
                    return Ok(Stopped::Shutdown);
                }
                SessionEnd::Demoted => {
                    tracing::warn!(checkpoint = %position, "stepping down: this instance no longer holds the group's lock, another one publishes now");
                    return Ok(Stopped::Demoted);
                }
                SessionEnd::Failed(ForwarderError::Definite(e)) => {
                    forwarder.metrics.error("definite");
                    tracing::error!(checkpoint = %position, "{e}");
                    return Err(e);
                }
                SessionEnd::Failed(ForwarderError::Transient(e)) => {
                    forwarder.metrics.error("transient");
                    forwarder.metrics.reconnect();
                    if *position != started_at {
                        backoff = forwarder.initial_backoff();
                    }
                    tracing::warn!(error = %e, checkpoint = %position, retry_in = ?backoff, "session failed; resuming from the acked watermark");
                    if forwarder.pause(&mut backoff, shutdown).await {
                        return Ok(Stopped::Shutdown);
                    }
                    if forwarder.demoted() {
                        tracing::warn!(checkpoint = %position, "stepping down: this instance no longer holds the group's lock, another one publishes now");
                        return Ok(Stopped::Demoted);
                    }
                }
            }
        }
    }
}

/// Runs the `check` preflight; a failed check is a definite error, except
/// an unreachable server, which the start-up retry loop waits for.
async fn refuse_failed_preflight(
    config: &ForwarderConfig,
    store: &CheckpointStore,
    options: &RunOptions,
) -> Result<(), DefiniteError> {
    // In a group, the own checkpoint is replaced by the group's before this
    // instance publishes (and decided on then).
    let checkpoint = match &config.ha {
        Some(_) => None,
        None => store.load()?,
    };
    let lines = check::preflight(config, checkpoint.as_ref(), options.accept_new_source).await;
    for line in &lines {
        match line.status {
            Status::Pass => tracing::debug!("preflight: {line}"),
            Status::Warn => tracing::warn!("preflight: {line}"),
            Status::Fail if line.unreachable => tracing::warn!("preflight: {line}"),
            Status::Fail => tracing::error!("preflight: {line}"),
        }
    }
    let failed: Vec<String> = lines
        .iter()
        .filter(|l| l.status == Status::Fail && !l.unreachable)
        .map(ToString::to_string)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(DefiniteError::Config(format!(
            "the preflight check failed (run `outbox-forwarder check` for the full list):\n{}",
            failed.join("\n")
        )))
    }
}

pub(super) enum SessionEnd {
    Shutdown,
    /// The instance lost the group's lock (or its lease ran out).
    Demoted,
    Failed(ForwarderError),
}

struct Forwarder {
    config: ForwarderConfig,
    decode: outbox_source::DecodeConfig,
    /// The only writer of checkpoints (see [`crate::checkpoints`]).
    writer: Arc<CheckpointWriter>,
    /// `mysql.url`: the servers to stream from, in order of preference, and
    /// the one used last (tried first by the next decision).
    candidates: Vec<Opts>,
    current: usize,
    /// In an `[ha]` group: this instance's lease.
    leadership: Option<Leadership>,
    /// `--accept-new-source`, until the first session started with it.
    accept_new_source: bool,
    /// `--start-group`: may start a group that has no record at
    /// `checkpoint.start`.
    start_group: bool,
    /// The session streams from the writable candidate (not a replica).
    streaming_from_writable: bool,
    /// In a group: this term's hold-off is over, so this instance may have
    /// published (and may hand over on a clean stop).
    held_off: bool,
    metrics: Arc<Metrics>,
    broker: Arc<BrokerHealth>,
    /// The producer, kept across sessions (its id is costly to obtain) and
    /// replaced only after it failed fatally.
    sink: Option<KafkaSink>,
    /// The last checkpoint this process stored (what `[retention]` proves
    /// rows published by).
    saved: tokio::sync::watch::Sender<Option<outbox_checkpoint::Checkpoint>>,
}

impl Forwarder {
    /// In a group: this instance no longer holds the lock.
    fn demoted(&self) -> bool {
        self.leadership.as_ref().is_some_and(|l| !l.is_active())
    }

    fn initial_backoff(&self) -> Duration {
        Duration::from_millis(self.config.retry.initial_backoff_ms)
    }

    /// Sleeps for `backoff` (doubling it for next time); true if shutdown came first.
    async fn pause(&self, backoff: &mut Duration, shutdown: &mut Shutdown) -> bool {
        let wait = *backoff;
        *backoff = (*backoff * 2).min(Duration::from_millis(self.config.retry.max_backoff_ms));
        tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            _ = shutdown.requested() => true,
        }
    }
}
