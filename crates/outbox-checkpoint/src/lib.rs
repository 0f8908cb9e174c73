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
//!
//! **A damaged store is never read as empty, nor silently as older.** sled
//! recovers a damaged log by dropping what follows the damage: a byte
//! flipped or a file cut short reads as an older record, or as none, which
//! would start at `checkpoint.start` and skip events. So each checkpoint is
//! written, numbered and checksummed, to one of two slots in turn (the
//! newest whole one is read), and its number is kept in a seal file of the
//! store's own beside sled's files. A store with no whole record where the
//! seal says one was written is refused, naming the way back; a newest
//! whole record older than the seal's is resumed from (an older checkpoint
//! repeats, never loses), and said so.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use outbox_core::{epoch_ms, BinlogPosition, DefiniteError, GtidState, SourceIdentity};
use serde::{Deserialize, Serialize};

/// The key of an older release's one record (read if no slot is whole).
const CHECKPOINT_KEY: &[u8] = b"checkpoint";
/// The two slots written in turn: record `n` goes to `SLOTS[n % 2]`.
const SLOTS: [&[u8]; 2] = [b"checkpoint.0", b"checkpoint.1"];
/// The seal file, in the store's directory: the number of the newest
/// record written (8 bytes, little-endian).
pub const SEAL_FILE: &str = "outbox-forwarder.seal";
/// A slot's header: the record's number and the CRC-32 of number and body.
const HEADER: usize = 12;

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
    seal: Arc<File>,
    /// The seal's number when opened (0: none written, or reset since).
    sealed: Arc<AtomicU64>,
    /// The number of the next record.
    next: Arc<AtomicU64>,
}

/// What one slot holds.
enum Slot {
    Empty,
    Whole(u64, Box<Checkpoint>),
    Damaged(String),
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
                match &e {
                    sled::Error::Io(io) if file_system(io).is_some() => {
                        unwritable(path, "open", io)
                    }
                    _ => damaged(path, &format!("sled cannot open it ({detail})")),
                }
            }
        })?;
        let seal_path = path.join(SEAL_FILE);
        let seal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&seal_path)
            .map_err(|e| unwritable(path, "open its seal in", &e))?;
        let mut number = [0u8; 8];
        let sealed = match seal.read_exact_at(&mut number, 0) {
            Ok(()) => u64::from_le_bytes(number),
            Err(_) => 0,
        };
        let store = Self {
            db,
            path: path.to_owned(),
            seal: Arc::new(seal),
            sealed: Arc::new(AtomicU64::new(sealed)),
            next: Arc::new(AtomicU64::new(0)),
        };
        let newest = (0..2)
            .filter_map(|i| match store.slot(i) {
                Ok(Slot::Whole(n, _)) => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        store
            .next
            .store(newest.max(sealed).saturating_add(1), Ordering::Relaxed);
        // The seal's directory entry made durable.
        if let Ok(dir) = File::open(path) {
            let _ = dir.sync_all();
        }
        Ok(store)
    }

    /// The newest whole checkpoint, `None` if none was ever stored (or it
    /// was reset); an error for a damaged store (see the module doc).
    pub fn load(&self) -> Result<Option<Checkpoint>, DefiniteError> {
        let (checkpoint, note) = self.load_noting()?;
        if let Some(note) = note {
            tracing::warn!(store = %self.path.display(), "{note}");
        }
        Ok(checkpoint)
    }

    /// [`CheckpointStore::load`], with what it has to say of a record older
    /// than the newest written, or of a damaged slot.
    pub fn load_noting(&self) -> Result<(Option<Checkpoint>, Option<String>), DefiniteError> {
        let slots = [self.slot(0)?, self.slot(1)?];
        let damage: Vec<&str> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Damaged(why) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        let newest = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Whole(n, checkpoint) => Some((*n, checkpoint)),
                _ => None,
            })
            .max_by_key(|(n, _)| *n);
        let sealed = self.sealed.load(Ordering::Relaxed);
        if let Some((n, checkpoint)) = newest {
            let note = whole_slot_note(n, sealed, &damage, &checkpoint.position);
            return Ok((Some((**checkpoint).clone()), note));
        }
        if let Some(bytes) = self.db.get(CHECKPOINT_KEY).map_err(|e| self.error(e))? {
            // An older release's record, or the plain copy beside the slots.
            return match serde_json::from_slice::<Checkpoint>(&bytes) {
                Ok(checkpoint) if sealed > 0 => {
                    let note = format!(
                        "no slot of the store holds a whole checkpoint ({}): resuming from its \
                         plain copy, {}, which may be older than record {sealed} it wrote last; \
                         the events since are read back from the topics",
                        if damage.is_empty() {
                            "none is left".to_owned()
                        } else {
                            damage.join("; ")
                        },
                        checkpoint.position
                    );
                    Ok((Some(checkpoint), Some(note)))
                }
                Ok(checkpoint) => Ok((Some(checkpoint), None)),
                Err(e) => Err(damaged(
                    &self.path,
                    &format!("its record is unreadable ({e})"),
                )),
            };
        }
        if !damage.is_empty() {
            return Err(damaged(&self.path, &damage.join("; ")));
        }
        if sealed > 0 {
            return Err(damaged(
                &self.path,
                &format!(
                    "it holds no checkpoint, but its seal ({SEAL_FILE}) says record {sealed} \
                     was written"
                ),
            ));
        }
        Ok((None, None))
    }

    /// Writes `checkpoint` and waits until it is durable on disk: into the
    /// slot the older record is in, then the seal.
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<(), DefiniteError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(checkpoint).expect("a checkpoint serialises");
        let mut bytes = Vec::with_capacity(HEADER + body.len());
        bytes.extend_from_slice(&n.to_le_bytes());
        bytes.extend_from_slice(&checksum(n, &body).to_le_bytes());
        bytes.extend_from_slice(&body);
        let body = sled::IVec::from(body);
        self.db
            .insert(SLOTS[(n % 2) as usize], bytes)
            .map_err(|e| self.error(e))?;
        // The plain record too, as the previous release reads it: rolled
        // back, it resumes from here rather than from checkpoint.start.
        self.db
            .insert(CHECKPOINT_KEY, body)
            .map_err(|e| self.error(e))?;
        self.db.flush().map_err(|e| self.error(e))?;
        self.seal_at(n)?;
        self.sealed.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// Removes the stored checkpoint; the next start uses `checkpoint.start`.
    pub fn reset(&self) -> Result<bool, DefiniteError> {
        let mut old = self
            .db
            .remove(CHECKPOINT_KEY)
            .map_err(|e| self.error(e))?
            .is_some();
        for slot in SLOTS {
            old |= self.db.remove(slot).map_err(|e| self.error(e))?.is_some();
        }
        self.db.flush().map_err(|e| self.error(e))?;
        self.seal_at(0)?;
        self.sealed.store(0, Ordering::Relaxed);
        Ok(old)
    }

    /// Records `n` as the newest record written, durably.
    fn seal_at(&self, n: u64) -> Result<(), DefiniteError> {
        let sealing = self
            .seal
            .write_all_at(&n.to_le_bytes(), 0)
            .and_then(|()| self.seal.sync_data());
        sealing.map_err(|e| unwritable(&self.path, "write its seal in", &e))
    }

    /// What slot `i` holds.
    fn slot(&self, i: usize) -> Result<Slot, DefiniteError> {
        let Some(bytes) = self.db.get(SLOTS[i]).map_err(|e| self.error(e))? else {
            return Ok(Slot::Empty);
        };
        let name = String::from_utf8_lossy(SLOTS[i]);
        if bytes.len() < HEADER {
            return Ok(Slot::Damaged(format!("{name} is cut short")));
        }
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let sum = u32::from_le_bytes(bytes[8..HEADER].try_into().expect("4 bytes"));
        let body = &bytes[HEADER..];
        if checksum(n, body) != sum {
            return Ok(Slot::Damaged(format!("{name} fails its checksum")));
        }
        match serde_json::from_slice::<Checkpoint>(body) {
            Ok(checkpoint) => Ok(Slot::Whole(n, Box::new(checkpoint))),
            Err(e) => Ok(Slot::Damaged(format!("{name} is unreadable ({e})"))),
        }
    }

    fn error(&self, e: sled::Error) -> DefiniteError {
        match &e {
            sled::Error::Io(io) if file_system(io).is_some() => unwritable(&self.path, "use", io),
            _ => DefiniteError::Checkpoint(format!("{}: {e}", self.path.display())),
        }
    }
}

/// The CRC-32 of a record's number and body.
fn checksum(n: u64, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&n.to_le_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// What to do about an error of the store's file system that leaves its
/// content whole (full, read only, not allowed); `None` for any other
/// error, which may be damage (sled reports a cut segment as an I/O error).
fn file_system(e: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind::*;
    match e.kind() {
        StorageFull | QuotaExceeded => Some(
            "its file system is full: free space there (or give checkpoint.path a larger \
             volume) and start again",
        ),
        PermissionDenied | ReadOnlyFilesystem => Some(
            "the forwarder may not write there: give its user write access to the directory \
             (or a checkpoint.path it may write) and start again",
        ),
        _ => None,
    }
}

/// The store cannot be used for a reason of its file system (see
/// [`file_system`]): nothing in it is damaged, and nothing is read as
/// empty; the way back is to fix the file system.
fn unwritable(path: &Path, what: &str, e: &std::io::Error) -> DefiniteError {
    let Some(fix) = file_system(e) else {
        return DefiniteError::Checkpoint(format!(
            "cannot {what} the checkpoint store {} ({e})",
            path.display()
        ));
    };
    DefiniteError::Checkpoint(format!(
        "cannot {what} the checkpoint store {} ({e}): {fix}. The store is not damaged and \
         is not read as empty: the forwarder resumes from its last checkpoint (if any) and reads the \
         events published since back from the topics",
        path.display()
    ))
}

/// The refusal of a damaged store, with the way back.
fn damaged(path: &Path, why: &str) -> DefiniteError {
    DefiniteError::Checkpoint(format!(
        "the checkpoint store {} is damaged: {why}. It is not read as empty, which would \
         start at checkpoint.start and skip every event since. The way back: move the \
         directory aside; in an [ha] group the instance then takes the group's checkpoint from \
         its topic; else find where the topics stop (`outbox-forwarder verify --since ...`) \
         and set it (`outbox-forwarder checkpoint set FILE:POS` or a GTID state); to start at \
         checkpoint.start on purpose, `outbox-forwarder checkpoint reset`",
        path.display()
    ))
}

/// What loading record `n`, the newest whole one, at `position` has to
/// say, when the seal says record `sealed` was written last and `damage`
/// names the damaged slots: an older record resumed from, or a damaged
/// older copy; nothing when all is well.
fn whole_slot_note(
    n: u64,
    sealed: u64,
    damage: &[&str],
    position: &BinlogPosition,
) -> Option<String> {
    if n < sealed {
        Some(format!(
            "the newest whole checkpoint in the store is record {n}, older than record \
             {sealed} it wrote last (the store was damaged{}): resuming from {position}; the \
             events since are read back from the topics, and published again where they are \
             not found",
            if damage.is_empty() {
                String::new()
            } else {
                format!(": {}", damage.join("; "))
            },
        ))
    } else if !damage.is_empty() {
        Some(format!(
            "a copy older than the checkpoint resumed from is damaged ({}); the next \
             checkpoint replaces it",
            damage.join("; ")
        ))
    } else {
        None
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
        let store = reopen(dir.path()).unwrap();
        assert_eq!(store.load().unwrap(), Some(cp));
        assert!(store.reset().unwrap());
        assert_eq!(store.load().unwrap(), None);
    }

    /// The store at `dir`, opened again (sled's I/O threads may hold the
    /// lock a moment after the last handle is dropped).
    fn reopen(dir: &Path) -> Result<CheckpointStore, DefiniteError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match CheckpointStore::open(dir) {
                Err(e)
                    if std::time::Instant::now() < deadline && e.to_string().contains("in use") =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                opened => return opened,
            }
        }
    }

    /// Every file under `dir`.
    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(files(&path));
            } else {
                found.push(path);
            }
        }
        found.sort();
        found
    }

    /// `from`'s files copied into a new directory.
    fn copied(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        for file in files(from) {
            let target = to.path().join(file.strip_prefix(from).unwrap());
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(&file, &target).unwrap();
        }
        to
    }

    /// Defect: sled recovers a damaged log by dropping what follows the
    /// damage: a byte flipped, or a file cut short (a torn write), read as
    /// an older checkpoint without a word, or as none, which starts at
    /// `checkpoint.start` and skips events. Each damage now reads as the
    /// newest whole checkpoint, or as an older one said to be older, or is
    /// refused naming the way back; never as empty.
    #[test]
    fn a_damaged_store_is_refused_or_said_older_never_read_as_empty() {
        let base = tempfile::tempdir().unwrap();
        let last = {
            let store = CheckpointStore::open(base.path()).unwrap();
            for pos in 1..=60 {
                store
                    .save(&Checkpoint::new(
                        BinlogPosition::new("bin.000001", pos * 100),
                        source(),
                    ))
                    .unwrap();
            }
            store.load().unwrap().unwrap()
        };
        let written: Vec<PathBuf> = files(base.path())
            .iter()
            .map(|f| f.strip_prefix(base.path()).unwrap().to_owned())
            .collect();
        assert!(
            written.iter().any(|f| f.ends_with(SEAL_FILE)),
            "{written:?}"
        );
        // (the file, what was done, what it read as)
        let mut outcomes: Vec<(String, String, String)> = Vec::new();
        let mut read_older_silently = Vec::new();
        let mut read_empty = Vec::new();
        let mut damages = 0;
        for file in &written {
            let len = std::fs::metadata(base.path().join(file)).unwrap().len();
            let mut cuts: Vec<u64> = vec![0, len / 2, len * 9 / 10];
            // A torn tail: cut anywhere in the last 2 KiB.
            cuts.extend((1..=16).map(|i| len.saturating_sub(i * 128)));
            let flips: Vec<u64> = (0..24).map(|i| len * i / 24).collect();
            let cases = cuts
                .into_iter()
                .map(|at| (format!("cut at {at}"), Some(at), None))
                .chain(
                    flips
                        .into_iter()
                        .map(|at| (format!("byte {at} flipped"), None, Some(at))),
                );
            for (what, cut, flip) in cases {
                let damaged = copied(base.path());
                let path = damaged.path().join(file);
                if let Some(at) = cut {
                    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                    f.set_len(at).unwrap();
                }
                if let Some(at) = flip {
                    let mut bytes = std::fs::read(&path).unwrap();
                    if bytes.is_empty() {
                        continue;
                    }
                    let at = (at as usize).min(bytes.len() - 1);
                    bytes[at] ^= 0xff;
                    std::fs::write(&path, bytes).unwrap();
                }
                damages += 1;
                let read = std::panic::catch_unwind(|| {
                    reopen(damaged.path()).and_then(|store| store.load_noting())
                });
                let outcome = match read {
                    Err(_) => "a panic".to_string(),
                    Ok(Err(e)) => {
                        let e = e.to_string();
                        assert!(
                            e.contains("checkpoint set") || e.contains("cannot open"),
                            "names the way back: {e}"
                        );
                        assert!(!e.contains("not damaged"), "damage is not a full disk: {e}");
                        "refused".into()
                    }
                    Ok(Ok((None, _))) => {
                        read_empty.push(format!("{} {what}", file.display()));
                        "empty".into()
                    }
                    Ok(Ok((Some(found), note))) if found == last => {
                        format!("the newest{}", if note.is_some() { ", noted" } else { "" })
                    }
                    Ok(Ok((Some(found), note))) => {
                        if note.is_none() {
                            read_older_silently.push(format!("{} {what}", file.display()));
                        }
                        format!("older ({}), noted: {}", found.position, note.is_some())
                    }
                };
                outcomes.push((file.display().to_string(), what, outcome));
            }
        }
        let panics: Vec<_> = outcomes.iter().filter(|o| o.2 == "a panic").collect();
        assert!(damages > 100, "{damages} damages tried");
        assert!(panics.is_empty(), "{panics:?}");
        assert!(read_empty.is_empty(), "read as empty: {read_empty:?}");
        assert!(
            read_older_silently.is_empty(),
            "read as older without a word: {read_older_silently:?}"
        );
        // The fault happened: some damage did lose the newest record.
        assert!(
            outcomes
                .iter()
                .any(|o| o.2 == "refused" || o.2.starts_with("older")),
            "{outcomes:?}"
        );
    }

    /// An older release's store (one record under the old key) is read;
    /// saves write the slots and that key, so a rollback reads the newest.
    #[test]
    fn an_older_releases_store_is_read_and_kept_readable_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let old = Checkpoint::new(BinlogPosition::new("bin.000003", 1234), source());
        {
            let db = sled::open(dir.path()).unwrap();
            db.insert(CHECKPOINT_KEY, serde_json::to_vec(&old).unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        let store = reopen(dir.path()).unwrap();
        assert_eq!(store.load().unwrap(), Some(old.clone()));
        let newer = Checkpoint::new(BinlogPosition::new("bin.000003", 5678), source());
        store.save(&newer).unwrap();
        assert_eq!(store.load().unwrap(), Some(newer.clone()));
        // The previous release, rolled back to, reads the newest too.
        let plain = store.db.get(CHECKPOINT_KEY).unwrap().unwrap();
        assert_eq!(serde_json::from_slice::<Checkpoint>(&plain).unwrap(), newer);
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
