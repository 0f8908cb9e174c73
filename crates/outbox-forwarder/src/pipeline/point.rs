//! Where the next session resumes: one value made from the checkpoint the
//! forwarder starts from, handed to each session and handed back by it at
//! the last checkpoint written. It owns the conversions between checkpoints
//! and resume points, and carries the checkpoint as stored, with its topic
//! tails, so that a session reads back from it without loading the store.

use std::collections::BTreeMap;

use outbox_checkpoint::{Checkpoint, Tails};
use outbox_core::{BinlogPosition, GtidState, SourceIdentity};

/// Where the next session starts, with everything its checkpoints carry
/// besides the position (see the module doc).
#[derive(Debug, Clone)]
pub(super) struct ResumePoint {
    /// The server's GTID state at `position`, when it logs GTIDs: the
    /// session then streams by GTID.
    pub(super) gtid: Option<GtidState>,
    /// The server streamed from (at first, the one `position` belongs to).
    pub(super) identity: SourceIdentity,
    /// A binlog file and when it was created, as the last checkpoint
    /// loaded or stored recorded it: a file of that name created at
    /// another time is refused.
    pub(super) file_created: Option<(String, u32)>,
    /// Since when this line of checkpoints has streamed (see
    /// [`Checkpoint::streaming_since_ms`]).
    pub(super) streaming_since: Option<u64>,
    /// Since when each `[outbox] tables` entry has (see
    /// [`Checkpoint::tables_since_ms`]).
    pub(super) tables_since: BTreeMap<String, u64>,
    /// A session that started on another server than `position`'s: where
    /// it started, and the server that position belongs to. Until the
    /// watermark moves past it, the position is still that server's, for
    /// the checkpoints written and for the next session's start.
    pub(super) switched_from: Option<(BinlogPosition, SourceIdentity)>,
    /// The checkpoint last loaded or written, as stored: its position is
    /// where the next session streams from, its topic tails are what that
    /// session reads back from, and a clean stop's is taken back before
    /// anything is published after it.
    stored: Checkpoint,
}

impl ResumePoint {
    /// The point of `stored`, the checkpoint the forwarder starts from (the
    /// store's, or a new line's first), for the `[outbox] tables` entries
    /// `entries`. A checkpoint of an older release has no line start: its
    /// line begins now (this host's clock, a minute ahead for a server's
    /// that differs).
    pub(super) fn from_stored(stored: Checkpoint, entries: &[String]) -> Self {
        let later = outbox_core::epoch_ms() + 60_000;
        let streaming_since = stored.streaming_since_ms.or(Some(later));
        Self {
            gtid: stored.gtid.clone(),
            identity: stored.source.clone(),
            file_created: stored
                .file_created_at
                .map(|t| (stored.position.file.clone(), t)),
            tables_since: table_starts(entries, &stored.tables_since_ms, streaming_since, later),
            streaming_since,
            switched_from: None,
            stored,
        }
    }

    /// The acked watermark, as last stored: the next session streams from
    /// here.
    pub(super) fn position(&self) -> &BinlogPosition {
        &self.stored.position
    }

    /// The server `position` belongs to: the one a session switched from
    /// while the watermark has not moved since, else `identity`.
    pub(super) fn position_owner(&self) -> &SourceIdentity {
        match &self.switched_from {
            Some((at, previous)) if at == self.position() => previous,
            _ => &self.identity,
        }
    }

    /// The position, the server it belongs to and its GTID state, as a
    /// checkpoint: what [`crate::resume::decide`] and the source watch ask
    /// the servers about.
    pub(super) fn checkpoint(&self) -> Checkpoint {
        Checkpoint::new(self.position().clone(), self.position_owner().clone())
            .with_gtid(self.gtid.clone())
    }

    /// The checkpoint of the acked watermark `position` (with the GTID
    /// state there, the topic tails after it, its commit time, and the
    /// time its binlog file was created as the stream read it, 0 if not
    /// read), on this point's line. Past where a session on a new server
    /// started, the position is that server's.
    pub(super) fn watermark(
        &mut self,
        position: &BinlogPosition,
        gtid: Option<GtidState>,
        tails: Option<Tails>,
        committed_at: u32,
        file_created_read: u32,
    ) -> Checkpoint {
        if self
            .switched_from
            .as_ref()
            .is_some_and(|(at, _)| at != position)
        {
            self.switched_from = None;
        }
        // Known from the stream, else from the checkpoint it started at.
        let file_created = match (file_created_read, &self.file_created) {
            (0, Some((file, created))) if *file == position.file => *created,
            (read, _) => read,
        };
        Checkpoint::with_tails(position.clone(), self.position_owner().clone(), tails)
            .with_gtid(gtid)
            .committed_at(committed_at)
            .file_created_at(file_created)
            .streaming_since(self.streaming_since)
            .tables_since(self.tables_since.clone())
    }

    /// Records `checkpoint` as stored: the next session resumes from it.
    pub(super) fn stored(&mut self, checkpoint: &Checkpoint) {
        self.file_created = checkpoint
            .file_created_at
            .map(|t| (checkpoint.position.file.clone(), t));
        self.gtid = checkpoint.gtid.clone();
        self.stored = checkpoint.clone();
    }

    /// The checkpoint last loaded or written, as stored.
    pub(super) fn last_stored(&self) -> &Checkpoint {
        &self.stored
    }

    /// Records that the stored checkpoint is a clean stop's no more.
    pub(super) fn taken_back(&mut self, checkpoint: Checkpoint) {
        self.stored = checkpoint;
    }
}

/// Each table entry's start (see [`Checkpoint::tables_since_ms`]): as
/// `stored` records it; the line's start (`line`) for every entry when it
/// records none (a new line, or an older release's checkpoint); `now` for
/// an entry it does not know, added to the configuration since: the line
/// never carried that table's older rows. Nothing while the line's start is
/// unknown.
pub(crate) fn table_starts(
    entries: &[String],
    stored: &BTreeMap<String, u64>,
    line: Option<u64>,
    now: u64,
) -> BTreeMap<String, u64> {
    let Some(line) = line else {
        return BTreeMap::new();
    };
    entries
        .iter()
        .map(|entry| {
            let since = match stored.get(entry) {
                Some(since) => *since,
                None if stored.is_empty() => line,
                None => {
                    tracing::warn!(table = %entry, "an [outbox] tables entry new to this line of checkpoints: [retention] leaves its rows created before now to `prune`");
                    now
                }
            };
            (entry.clone(), since.max(line))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_entry_added_since_the_line_began_starts_now() {
        let entries = ["a.outbox".to_string(), "*.events".to_string()];
        // A new line, or an older release's checkpoint: every entry since
        // the line began.
        let first = table_starts(&entries, &BTreeMap::new(), Some(100), 500);
        assert_eq!(first.values().copied().collect::<Vec<_>>(), [100, 100]);
        // One entry added later: it starts now, the others keep theirs.
        let stored = BTreeMap::from([("a.outbox".to_string(), 100)]);
        let later = table_starts(&entries, &stored, Some(100), 500);
        assert_eq!(later["a.outbox"], 100);
        assert_eq!(later["*.events"], 500);
        // An entry removed is forgotten; an unknown line start: nothing.
        assert_eq!(table_starts(&entries[..1], &later, Some(100), 900).len(), 1);
        assert!(table_starts(&entries, &stored, None, 500).is_empty());
    }

    fn position(pos: u64) -> BinlogPosition {
        BinlogPosition::new("binlog.000001", pos)
    }

    #[test]
    fn a_point_past_a_switch_belongs_to_the_new_server() {
        let server = |server_id, host: &str| SourceIdentity {
            server_uuid: None,
            server_id,
            host: host.into(),
        };
        let (old, new) = (server(1, "old:3306"), server(2, "new:3306"));
        let stored = Checkpoint::new(position(100), old.clone()).file_created_at(7);
        let mut point = ResumePoint::from_stored(stored.clone(), &[]);
        assert_eq!(point.checkpoint().source, old);
        assert_eq!(point.file_created, Some(("binlog.000001".into(), 7)));
        // A session started on another server: until the watermark moves,
        // the position and its checkpoints are the old server's.
        point.identity = new.clone();
        point.switched_from = Some((position(100), old.clone()));
        assert_eq!(point.checkpoint().source, old);
        let same = point.watermark(&position(100), None, None, 0, 0);
        assert_eq!((same.source, same.file_created_at), (old, Some(7)));
        // Past it, the new server's; the file time is the stream's.
        let moved = point.watermark(&position(200), None, None, 0, 9);
        assert_eq!((&moved.source, moved.file_created_at), (&new, Some(9)));
        assert!(point.switched_from.is_none());
        point.stored(&moved);
        assert_eq!(point.position(), &position(200));
        assert_eq!(point.last_stored(), &moved);
        assert_eq!(point.checkpoint().source, new);
    }
}
