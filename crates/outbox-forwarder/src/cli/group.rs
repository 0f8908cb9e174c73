//! A group's first start by an operator's command (`group start`): the
//! group's first record written to its topic before any instance
//! publishes, at `checkpoint.start` (resolved now on the primary) or at a
//! position the operator names. A declarative deploy runs it before every
//! instance (an init container) instead of giving `--start-group` to one
//! instance once.
//!
//! It may run any number of times:
//! - a group that has a record is left as it is;
//! - the record is written holding the group's lock, so no instance starts
//!   the group from a checkpoint of its own meanwhile (an instance writes a
//!   first record only holding the lock, and publishes only after one);
//! - it never starts at `checkpoint.start` where a topic the rows may write
//!   holds messages: a forwarder of this outbox published before (the
//!   group's topic was recreated, a forwarder was turned into the group),
//!   and `checkpoint.start` would skip what was written since. The
//!   operator names the position then (`--at`), and what follows it is
//!   published again.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use outbox_checkpoint::Checkpoint;
use outbox_core::DefiniteError;
use outbox_source::server::{Role, ServerInfo};

use crate::config::{ForwarderConfig, HaSection};
use crate::group::{self, GroupCheckpoint, GroupLog, KafkaLog, Kind, LogError, Record};
use crate::metrics::Metrics;
use crate::resume::{self, definite};

/// What `group start` found or did.
#[derive(Debug)]
pub(super) enum FirstStart {
    /// The group has a record: nothing was written.
    AlreadyStarted {
        offset: i64,
        checkpoint: Box<Checkpoint>,
    },
    /// The group's first record, written at `offset`.
    Started {
        offset: i64,
        checkpoint: Box<Checkpoint>,
    },
}

/// Topics named in a refusal; the rest are counted.
const NAMED: usize = 5;

/// Starts the group `config` belongs to unless it has started (see the
/// module doc), at `at` (`FILE:POS` or a GTID state) if given, else at
/// `checkpoint.start`.
pub(super) async fn start_group(
    config: &ForwarderConfig,
    at: Option<&str>,
) -> Result<FirstStart, DefiniteError> {
    let Some(ha) = &config.ha else {
        return Err(DefiniteError::Config(
            "group start needs an [ha] section: without one the forwarder starts at \
             checkpoint.start by itself"
                .into(),
        ));
    };
    if let Some(started) = already_started(config, ha).await? {
        return Ok(started);
    }
    // The group's lock, on the server an instance takes it on (the
    // writable candidate: no instance holds a checkpoint to prefer another).
    let candidates = resume::candidates(config)?;
    let decision = resume::decide(&candidates, 0, None, false)
        .await
        .map_err(|r| definite(r.error))?;
    if decision.role != Role::Writable {
        let _ = decision.conn.disconnect().await;
        return Err(DefiniteError::Config(
            "no candidate in mysql.url takes writes: the group's lock lives on the primary; \
             run it again once one does"
                .into(),
        ));
    }
    let (mut conn, info) = (decision.conn, decision.info);
    let lock = ha.lock_name();
    if let Err(e) = take_lock(&mut conn, &lock, ha).await {
        let _ = conn.disconnect().await;
        return Err(e);
    }
    let written = async {
        // An instance may have started the group from its own checkpoint
        // before the lock was ours.
        if let Some(started) = already_started(config, ha).await? {
            return Ok(started);
        }
        let checkpoint = match at {
            Some(at) => crate::checkpoints::operator_checkpoint(config, at).await?,
            None => {
                refuse_over_history(config, ha).await?;
                at_start(config, &mut conn, &info).await?
            }
        };
        let log = KafkaLog::for_operator(&config.kafka_config(), ha, Arc::new(Metrics::default()))?;
        // Still ours: the reads above may have taken long enough for the
        // connection to be cut and the lock taken by an instance.
        still_held(&mut conn, &lock).await?;
        let offset = log
            .append_acked(Record {
                checkpoint: &checkpoint,
                kind: Kind::FirstStart,
                by: "group start",
            })
            .map_err(|e| {
                DefiniteError::Config(format!("the group's first record was not written: {e}"))
            })?;
        still_held(&mut conn, &lock).await.map_err(|e| {
            DefiniteError::Config(format!(
                "{e}, while the group's first record was written (offset {offset}): an instance \
                 may have started the group meanwhile; `outbox-forwarder checkpoint show` with an \
                 instance's configuration says where it resumes"
            ))
        })?;
        Ok(FirstStart::Started {
            offset,
            checkpoint: Box::new(checkpoint),
        })
    }
    .await;
    let _ = conn
        .exec_drop("SELECT RELEASE_LOCK(?)", (lock.as_str(),))
        .await;
    let _ = conn.disconnect().await;
    written
}

/// Takes the group's lock `lock` on `conn`, waiting up to three leases:
/// an instance that holds it with nothing to start the group from gives
/// it back for two.
async fn take_lock(conn: &mut Conn, lock: &str, ha: &HaSection) -> Result<(), DefiniteError> {
    let wait = (ha.lease_ms * 3).div_ceil(1000);
    let taken: Option<Option<i64>> = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (lock, wait))
        .await
        .map_err(|e| DefiniteError::Config(format!("cannot ask for the group's lock: {e}")))?;
    if taken == Some(Some(1)) {
        return Ok(());
    }
    Err(DefiniteError::Config(format!(
        "the group's lock ({lock}) stayed held by another session for {wait} s: an instance of \
         the group is active (then the group has a record: run this again and it does nothing), \
         or another session holds it (`check` names the holder)"
    )))
}

/// Whether this connection still holds the group's lock `lock`.
async fn still_held(conn: &mut Conn, lock: &str) -> Result<(), DefiniteError> {
    let held: Option<Option<i64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?) = CONNECTION_ID()", (lock,))
        .await
        .map_err(|e| DefiniteError::Config(format!("cannot confirm the group's lock: {e}")))?;
    match held {
        Some(Some(1)) => Ok(()),
        _ => Err(DefiniteError::Config(format!(
            "the group's lock ({lock}) is no longer held by this command"
        ))),
    }
}

/// The group's first checkpoint at `checkpoint.start`, resolved on the
/// server of `conn` (described by `info`) as a run without a checkpoint
/// resolves it.
async fn at_start(
    config: &ForwarderConfig,
    conn: &mut Conn,
    info: &ServerInfo,
) -> Result<Checkpoint, DefiniteError> {
    let entries = crate::pipeline::table_entries(&config.decode_config()?.tables);
    crate::pipeline::first_checkpoint(conn, info, &config.checkpoint.start, &entries)
        .await
        .map_err(definite)
}

/// The group's newest record, if it has one; its topic is created if it
/// does not exist (as an instance does).
async fn already_started(
    config: &ForwarderConfig,
    ha: &HaSection,
) -> Result<Option<FirstStart>, DefiniteError> {
    let log: Arc<dyn GroupLog> = Arc::new(KafkaLog::for_operator(
        &config.kafka_config(),
        ha,
        Arc::new(Metrics::default()),
    )?);
    let within = Duration::from_secs(10);
    let mut found = group::read_newest(&log, within).await;
    if let Err(LogError::Missing(_)) = &found {
        log.create().await.map_err(DefiniteError::Config)?;
        found = group::read_newest(&log, within).await;
    }
    match found.map_err(|e| DefiniteError::Config(e.to_string()))? {
        GroupCheckpoint::NeverStarted => Ok(None),
        GroupCheckpoint::Found {
            checkpoint, offset, ..
        } => Ok(Some(FirstStart::AlreadyStarted { offset, checkpoint })),
        GroupCheckpoint::Unreadable(why) => Err(DefiniteError::Config(format!(
            "{why}: the group has a history that cannot be read; set where it resumes with \
             `outbox-forwarder checkpoint set`"
        ))),
    }
}

/// Refuses to start the group at `checkpoint.start` where a topic the rows
/// may write holds messages.
async fn refuse_over_history(
    config: &ForwarderConfig,
    ha: &HaSection,
) -> Result<(), DefiniteError> {
    let template = config.kafka.topic.parse::<outbox_sink::TopicTemplate>()?;
    let allowed = outbox_sink::AllowedTopics::new(&config.kafka.allowed_topics, &template)?;
    let (kafka, group_topic) = (config.kafka_config(), ha.checkpoint_topic.clone());
    let holding = tokio::task::spawn_blocking(move || {
        outbox_sink::holding_messages(&kafka, &allowed, &[group_topic.as_str()])
    })
    .await
    .expect("listing topics does not panic")
    .map_err(|e| DefiniteError::Config(format!("cannot tell whether the group ran before: {e}")))?;
    if holding.is_empty() {
        return Ok(());
    }
    let mut named: Vec<String> = holding.iter().take(NAMED).cloned().collect();
    if holding.len() > NAMED {
        named.push(format!("and {} more", holding.len() - NAMED));
    }
    Err(DefiniteError::Config(format!(
        "group {} has no record on {}, but topics its rows may write hold messages: {}. A \
         forwarder of this outbox published before (the group's topic was recreated, or a \
         forwarder is being turned into the group), and starting at checkpoint.start would \
         skip every event written since it stopped. Start the group where that forwarder \
         stopped or earlier: `outbox-forwarder group start --at FILE:POS|GTID` (its last \
         checkpoint: `outbox-forwarder checkpoint show` with its configuration); what follows \
         is published again, and consumers drop the repeats by event_id",
        ha.group,
        ha.checkpoint_topic,
        named.join(", ")
    )))
}
