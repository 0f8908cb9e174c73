//! The checkpoint: the binlog position after the newest transaction whose
//! every outbox message the broker has acknowledged, plus the identity of the
//! server it belongs to.
//!
//! Only the pipeline's progress loop writes it, and only with a watermark it
//! computed from acks (see `outbox-forwarder`'s `progress` module); operators
//! change it through the `checkpoint set/reset` sub-commands while the
//! forwarder is stopped. sled holds an exclusive file lock on the store, so a
//! second forwarder on the same path fails to open it.
//!
//! The stored value is JSON, pinned by a test, so a checkpoint written by one
//! release stays readable by the next.
//!
//! Beside the position it records where, in each topic the forwarder writes,
//! the messages of events after that position can be: per partition, the
//! offset from which to read. At restart the forwarder reads those tails
//! back and does not publish again what it finds there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use outbox_core::{epoch_ms, BinlogPosition, DefiniteError, GtidState, SourceIdentity};
use serde::{Deserialize, Serialize};

const CHECKPOINT_KEY: &[u8] = b"checkpoint";

/// What is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Every outbox row committed before this position has been acked.
    pub position: BinlogPosition,
    /// The server that wrote the binlog `position` points into.
    pub source: SourceIdentity,
    /// When it was written, milliseconds since the epoch (for operators).
    pub written_at_ms: u64,
    /// Per topic written, per partition (the index), the offset at or
    /// after which every message of an event after `position` lies. An empty
    /// list: the topic did not exist when first written to, so read every
    /// partition from its start. `None` (a checkpoint of an older release,
    /// or one set by hand): unknown, so everything after `position` is
    /// published again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tails: Option<Tails>,
    /// The server's executed GTID state at `position`, when it logs GTIDs:
    /// what lets the forwarder resume on another server of the topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<GtidState>,
    /// When the newest transaction under `position` was committed, seconds
    /// since the epoch (the binlog's event time); `None` when unknown. What
    /// a purged gap after `position` starts from (`repair-gap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_at: Option<u32>,
    /// When the binlog file of `position` was created (its
    /// FORMAT_DESCRIPTION event's time), seconds since the epoch; `None`
    /// when unknown. A file of the same name created at another time (the
    /// binlog reset, or the server restored) is not the checkpoint's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_created_at: Option<u32>,
    /// Since when (milliseconds since the epoch, the server's clock) the
    /// line of checkpoints this one continues has streamed without a gap:
    /// a first start, or a checkpoint moved by an operator, begins a new
    /// one. Rows created before it were not published by it. `None`:
    /// unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming_since_ms: Option<u64>,
    /// Per entry of `[outbox] tables` (as the pattern prints, `shop.outbox`
    /// or `*.outbox`), since when (as `streaming_since_ms`) its rows were
    /// streamed: later than the line's start for an entry added to the
    /// configuration since. Empty: every entry since the line's start (a
    /// checkpoint of an older release, or a new line).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tables_since_ms: BTreeMap<String, u64>,
    /// Written at a clean stop: every message the forwarder published lies
    /// under `tails`' offsets, and none of an event after `position` was in
    /// the topics. The next start on the same server need not read the
    /// tails back; it clears the flag before it publishes anything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clean: bool,
}

/// Topic → the offset to read each partition from.
pub type Tails = BTreeMap<String, Vec<i64>>;

impl Checkpoint {
    /// A position with no record of the topics' tails.
    pub fn new(position: BinlogPosition, source: SourceIdentity) -> Self {
        Self::with_tails(position, source, None)
    }

    pub fn with_tails(
        position: BinlogPosition,
        source: SourceIdentity,
        tails: Option<Tails>,
    ) -> Self {
        Self {
            position,
            source,
            written_at_ms: epoch_ms(),
            tails,
            gtid: None,
            committed_at: None,
            file_created_at: None,
            streaming_since_ms: None,
            tables_since_ms: BTreeMap::new(),
            clean: false,
        }
    }

    /// The same checkpoint, written now.
    pub fn rewritten_now(mut self) -> Self {
        self.written_at_ms = epoch_ms();
        self
    }

    /// The same checkpoint, with the commit time of the newest transaction
    /// under its position (0: unknown).
    pub fn committed_at(mut self, seconds: u32) -> Self {
        self.committed_at = (seconds > 0).then_some(seconds);
        self
    }

    /// The same checkpoint, with the creation time of its position's
    /// binlog file (0: unknown).
    pub fn file_created_at(mut self, seconds: u32) -> Self {
        self.file_created_at = (seconds > 0).then_some(seconds);
        self
    }

    /// The same checkpoint, in the line of streaming begun at `since_ms`.
    pub fn streaming_since(mut self, since_ms: Option<u64>) -> Self {
        self.streaming_since_ms = since_ms;
        self
    }

    /// The same checkpoint, with each table entry's start (see
    /// [`Checkpoint::tables_since_ms`]).
    pub fn tables_since(mut self, tables: BTreeMap<String, u64>) -> Self {
        self.tables_since_ms = tables;
        self
    }

    /// The same checkpoint, with the GTID state at its position.
    pub fn with_gtid(mut self, gtid: Option<GtidState>) -> Self {
        self.gtid = gtid;
        self
    }
}

/// The sled-backed store of one forwarder (clones share it).
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    db: sled::Db,
    path: PathBuf,
}

impl CheckpointStore {
    /// Opens (or creates) the store at `path`. Fails with a clear message if
    /// another process holds it.
    pub fn open(path: &Path) -> Result<Self, DefiniteError> {
        let db = sled::Config::new().path(path).open().map_err(|e| {
            let detail = e.to_string();
            if detail.contains("could not acquire lock") {
                DefiniteError::Checkpoint(format!(
                    "the checkpoint store {} is in use by another process (is another \
                     forwarder running with the same checkpoint.path?); give each \
                     forwarder its own path",
                    path.display()
                ))
            } else {
                DefiniteError::Checkpoint(format!("cannot open {}: {detail}", path.display()))
            }
        })?;
        Ok(Self {
            db,
            path: path.to_owned(),
        })
    }

    pub fn load(&self) -> Result<Option<Checkpoint>, DefiniteError> {
        let Some(bytes) = self.db.get(CHECKPOINT_KEY).map_err(|e| self.error(e))? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            DefiniteError::Checkpoint(format!(
                "the checkpoint in {} is unreadable ({e}); inspect it or run `checkpoint reset`",
                self.path.display()
            ))
        })
    }

    /// Writes `checkpoint` and waits until it is durable on disk.
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<(), DefiniteError> {
        let bytes = serde_json::to_vec(checkpoint).expect("a checkpoint serialises");
        self.db
            .insert(CHECKPOINT_KEY, bytes)
            .map_err(|e| self.error(e))?;
        self.db.flush().map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Removes the stored checkpoint; the next start uses `checkpoint.start`.
    pub fn reset(&self) -> Result<bool, DefiniteError> {
        let old = self.db.remove(CHECKPOINT_KEY).map_err(|e| self.error(e))?;
        self.db.flush().map_err(|e| self.error(e))?;
        Ok(old.is_some())
    }

    fn error(&self, e: sled::Error) -> DefiniteError {
        DefiniteError::Checkpoint(format!("{}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> SourceIdentity {
        SourceIdentity {
            server_uuid: None,
            server_id: 1,
            host: "db1:3306".into(),
        }
    }

    #[test]
    fn saved_checkpoint_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(BinlogPosition::new("bin.000003", 1234), source());
        {
            let store = CheckpointStore::open(dir.path()).unwrap();
            assert_eq!(store.load().unwrap(), None);
            store.save(&cp).unwrap();
        }
        // sled's I/O threads may hold the file lock for a moment after the
        // last handle is dropped; a new process, the case this stands for,
        // never sees that.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let store = loop {
            match CheckpointStore::open(dir.path()) {
                Ok(store) => break store,
                Err(e)
                    if std::time::Instant::now() < deadline && e.to_string().contains("in use") =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(store.load().unwrap(), Some(cp));
        assert!(store.reset().unwrap());
        assert_eq!(store.load().unwrap(), None);
    }

    /// Each table entry's start is stored under its pattern, and a
    /// checkpoint without one (an older release's) reads as none.
    #[test]
    fn table_starts_are_pinned_and_optional() {
        let cp = Checkpoint::new(BinlogPosition::new("bin.000003", 1234), source())
            .tables_since(BTreeMap::from([("*.outbox".to_string(), 5)]));
        let json = serde_json::to_string(&cp).unwrap();
        assert!(
            json.contains(r#""tables_since_ms":{"*.outbox":5}"#),
            "{json}"
        );
        let old = r#"{"position":{"file":"bin.000003","pos":1234},"source":{"server_uuid":null,"server_id":1,"host":"db1:3306"},"written_at_ms":7}"#;
        let read: Checkpoint = serde_json::from_str(old).unwrap();
        assert!(read.tables_since_ms.is_empty());
    }

    #[test]
    fn checkpoint_json_is_pinned() {
        let cp = Checkpoint {
            position: BinlogPosition::new("bin.000003", 1234),
            source: source(),
            written_at_ms: 7,
            tails: None,
            gtid: None,
            committed_at: None,
            file_created_at: None,
            streaming_since_ms: None,
            tables_since_ms: BTreeMap::new(),
            clean: false,
        };
        let without_tails = r#"{"position":{"file":"bin.000003","pos":1234},"source":{"server_uuid":null,"server_id":1,"host":"db1:3306"},"written_at_ms":7}"#;
        assert_eq!(serde_json::to_string(&cp).unwrap(), without_tails);
        let with_tails = Checkpoint {
            tails: Some(Tails::from([
                ("orders".to_string(), vec![120, 0, 37]),
                ("outbox.new".to_string(), vec![]),
            ])),
            ..cp.clone()
        };
        assert_eq!(
            serde_json::to_string(&with_tails).unwrap(),
            r#"{"position":{"file":"bin.000003","pos":1234},"source":{"server_uuid":null,"server_id":1,"host":"db1:3306"},"written_at_ms":7,"tails":{"orders":[120,0,37],"outbox.new":[]}}"#
        );
        let with_gtid = Checkpoint {
            gtid: Some(GtidState::MariaDb("0-1-42".parse().unwrap())),
            ..cp.clone()
        };
        assert_eq!(
            serde_json::to_string(&with_gtid).unwrap(),
            r#"{"position":{"file":"bin.000003","pos":1234},"source":{"server_uuid":null,"server_id":1,"host":"db1:3306"},"written_at_ms":7,"gtid":{"mariadb":"0-1-42"}}"#
        );
        let committed = cp.clone().committed_at(1_764_000_000);
        assert_eq!(
            serde_json::to_string(&committed).unwrap(),
            r#"{"position":{"file":"bin.000003","pos":1234},"source":{"server_uuid":null,"server_id":1,"host":"db1:3306"},"written_at_ms":7,"committed_at":1764000000}"#
        );
        let created = cp.clone().file_created_at(1_763_990_000);
        assert_eq!(
            serde_json::to_string(&created).unwrap(),
            r#"{"position":{"file":"bin.000003","pos":1234},"source":{"server_uuid":null,"server_id":1,"host":"db1:3306"},"written_at_ms":7,"file_created_at":1763990000}"#
        );
        // A checkpoint written before tails were recorded still loads.
        assert_eq!(
            serde_json::from_str::<Checkpoint>(without_tails).unwrap(),
            cp
        );
    }

    #[test]
    fn second_open_of_the_same_path_fails_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let _first = CheckpointStore::open(dir.path()).unwrap();
        let err = CheckpointStore::open(dir.path()).expect_err("second open must fail");
        assert!(
            err.to_string().contains("in use by another process"),
            "{err}"
        );
    }
}
