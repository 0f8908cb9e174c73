//! The live replication stream: one dump connection per session, from a
//! transaction boundary, yielding committed transactions.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};
use outbox_core::{
    BinlogPosition, DefiniteError, ForwarderError, GtidState, SourceIdentity, SourceTransaction,
};

use crate::decode::{DecodeConfig, TransactionAssembler};
use crate::server::{self, Flavor, ServerInfo, ER_MASTER_FATAL_ERROR_READING_BINLOG};

/// How the dump connection is set up.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// The forwarder's replica id; must be unique among the primary's replicas.
    pub server_id: u32,
    /// The primary sends a heartbeat after this much silence, so a dead
    /// connection is noticed within a few periods.
    pub heartbeat: Duration,
}

/// A binlog stream from a given position, assembled into transactions.
pub struct BinlogSource {
    stream: BinlogStream,
    assembler: TransactionAssembler,
    idle_timeout: Duration,
    identity: SourceIdentity,
    binlog_retention: server::BinlogRetention,
    /// A transaction read before it was asked for (while the stream's
    /// start was checked).
    ahead: Option<SourceTransaction>,
}

impl BinlogSource {
    /// Requests the binlog on `conn` (to the server `info` describes) from
    /// `from`, a transaction boundary; with `gtid`, by GTID instead (on
    /// MariaDB the server then starts after those GTIDs whatever file the
    /// request names, and names its own file in a ROTATE). Whether this
    /// server can serve `from` was decided before (the forwarder's
    /// `resume` module); here the settings are checked and the stream set
    /// up. `file_created`: when the file `from` names was created (recorded
    /// with the checkpoint); a file of that name created at another time
    /// is refused before any event of it is returned.
    pub async fn start_on(
        mut conn: Conn,
        info: ServerInfo,
        stream_config: &StreamConfig,
        mut decode_config: DecodeConfig,
        from: &BinlogPosition,
        by_gtid: Option<&GtidState>,
        file_created: Option<u32>,
    ) -> Result<Self, ForwarderError> {
        server::check_settings(&mut conn).await?;
        let binlog_retention = server::binlog_retention(&mut conn).await?;
        decode_config.tables = decode_config.tables.compared_as(info.table_names);

        let heartbeat_ns = stream_config.heartbeat.as_nanos() as u64;
        conn.query_drop(format!("SET @master_heartbeat_period = {heartbeat_ns}"))
            .await
            .map_err(|e| server::classify(e, "setting the heartbeat period"))?;
        if info.flavor == Flavor::MariaDb {
            // Announce GTID capability so MariaDB sends its own event types
            // (GTID, ANNOTATE_ROWS) rather than rewritten placeholders.
            conn.query_drop("SET @mariadb_slave_capability = 4")
                .await
                .map_err(|e| server::classify(e, "announcing MariaDB capabilities"))?;
        }
        if let Some(GtidState::MariaDb(pos)) = by_gtid {
            // The server then starts after these GTIDs, whatever file name
            // the request carries, and names its own file in a ROTATE.
            conn.exec_drop(
                "SET @slave_connect_state = ?, @slave_gtid_strict_mode = 1, \
                 @slave_gtid_ignore_duplicates = 0",
                (pos.to_string(),),
            )
            .await
            .map_err(|e| server::classify(e, "setting the GTID position to stream from"))?;
        }

        let request = match by_gtid {
            // COM_BINLOG_DUMP_GTID: the server sends what the set lacks.
            Some(GtidState::MySql(set)) => BinlogStreamRequest::new(stream_config.server_id)
                .with_gtid()
                .with_gtid_set(dump_sids(set)),
            _ => BinlogStreamRequest::new(stream_config.server_id)
                .with_filename(from.file.as_bytes())
                .with_pos(from.pos),
        };
        let stream = conn
            .get_binlog_stream(request)
            .await
            .map_err(|e| stream_error(e, from.clone()))?;
        let mut source = Self {
            stream,
            assembler: TransactionAssembler::new(decode_config, from.file.clone()),
            idle_timeout: stream_config.heartbeat * 3 + Duration::from_secs(1),
            identity: info.identity.clone(),
            binlog_retention,
            ahead: None,
        };
        if let (Some(expected), None) = (file_created, by_gtid) {
            source.ensure_same_file(from, expected).await?;
        }
        match by_gtid {
            Some(pos) => {
                tracing::info!(position = %from, gtid = %pos, server = %info.identity, version = %info.version, "binlog stream started")
            }
            None => {
                tracing::info!(position = %from, server = %info.identity, version = %info.version, "binlog stream started")
            }
        }
        Ok(source)
    }

    /// Reads the stream up to the FORMAT_DESCRIPTION event of `from`'s
    /// file (the server sends it first) and refuses a file created at
    /// another time than `expected`: the binlog was reset (`RESET BINARY
    /// LOGS AND GTIDS`, `RESET MASTER`) or the server restored, and the
    /// name is reused by other events.
    async fn ensure_same_file(
        &mut self,
        from: &BinlogPosition,
        expected: u32,
    ) -> Result<(), ForwarderError> {
        while self.ahead.is_none() && self.assembler.file_created().is_none() {
            self.ahead = self.next_event_transaction().await?;
        }
        match self.assembler.file_created() {
            Some(created) if created != expected && self.assembler.position().file == from.file => {
                Err(DefiniteError::BinlogReset {
                    position: from.clone(),
                    server: Box::new(self.identity.clone()),
                    expected,
                    created,
                }
                .into())
            }
            _ => Ok(()),
        }
    }

    /// How long the server keeps a binlog file.
    pub fn binlog_retention(&self) -> &server::BinlogRetention {
        &self.binlog_retention
    }

    /// The server streaming.
    pub fn identity(&self) -> &SourceIdentity {
        &self.identity
    }

    /// The next committed transaction (possibly with no outbox events).
    pub async fn next_transaction(&mut self) -> Result<SourceTransaction, ForwarderError> {
        if let Some(transaction) = self.ahead.take() {
            return Ok(transaction);
        }
        loop {
            if let Some(transaction) = self.next_event_transaction().await? {
                return Ok(transaction);
            }
        }
    }

    /// The next committed transaction if the events it needs have been
    /// received already; `None` when the stream would wait for the server
    /// first (what was read so far stays assembled). A catch-up reads
    /// millions of transactions this way, without a future for each.
    pub fn ready_transaction(&mut self) -> Option<Result<SourceTransaction, ForwarderError>> {
        if let Some(transaction) = self.ahead.take() {
            return Some(Ok(transaction));
        }
        let mut cx = std::task::Context::from_waker(futures_util::task::noop_waker_ref());
        loop {
            let Poll::Ready(next) = self.stream.poll_next_unpin(&mut cx) else {
                return None;
            };
            match self.on_event(next) {
                Ok(Some(transaction)) => return Some(Ok(transaction)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Reads one event; returns the transaction it completed, if any.
    async fn next_event_transaction(
        &mut self,
    ) -> Result<Option<SourceTransaction>, ForwarderError> {
        // An event already received needs no timer (a catch-up reads
        // millions); only a wait for the server is bounded. Dropping the
        // pending read loses nothing: the stream keeps its state.
        let next = match self.stream.next().now_or_never() {
            Some(next) => next,
            None => silence(self.stream.next(), self.idle_timeout)
                .await
                .map_err(|Silent| {
                    ForwarderError::transient(format!(
                        "nothing received from the server for {:?} (no binlog data, no \
                         heartbeat); the connection looks dead",
                        self.idle_timeout
                    ))
                })?,
        };
        self.on_event(next)
    }

    /// What the stream yielded, handed to the assembler: the transaction
    /// it completed, if any.
    fn on_event(
        &mut self,
        next: Option<mysql_async::Result<mysql_common::binlog::events::Event>>,
    ) -> Result<Option<SourceTransaction>, ForwarderError> {
        let event = match next {
            Some(Ok(event)) => event,
            Some(Err(e)) => return Err(stream_error(e, self.assembler.position())),
            None => {
                return Err(ForwarderError::transient(
                    "the server ended the binlog stream",
                ))
            }
        };
        Ok(self.assembler.handle(&event)?)
    }

    /// Closes the dump connection.
    pub async fn close(self) {
        let _ = self.stream.close().await;
    }
}

/// The blocks of a `COM_BINLOG_DUMP_GTID` request for `set`: per source
/// uuid (and tag, MySQL 8.3+) its intervals, whose ends the protocol takes
/// as exclusive. A tagged block makes mysql_common send the request in the
/// tagged format.
fn dump_sids(set: &outbox_core::MySqlGtidSet) -> Vec<mysql_common::packets::Sid<'static>> {
    use mysql_common::packets::{GnoInterval, Sid, Tag};
    set.tsids()
        .map(|(uuid, tag, intervals)| {
            let hex: Vec<u8> = uuid.bytes().filter(|b| *b != b'-').collect();
            let mut bytes = [0u8; 16];
            for (i, pair) in hex.chunks(2).enumerate().take(16) {
                let digits = std::str::from_utf8(pair).unwrap_or("00");
                bytes[i] = u8::from_str_radix(digits, 16).unwrap_or(0);
            }
            let sid = Sid::new(bytes).with_intervals(
                intervals
                    .iter()
                    .map(|&(start, end)| GnoInterval::new(start, end + 1))
                    .collect(),
            );
            match tag {
                Some(tag) => sid
                    .with_tag(Tag::new(tag.as_str().to_owned()).expect("a GtidTag is a valid tag")),
                None => sid,
            }
        })
        .collect()
}

/// The read `inner` fell silent: nothing arrived for the whole limit.
#[derive(Debug, PartialEq, Eq)]
struct Silent;

/// `inner`, failing with [`Silent`] once `limit` passes without it being
/// woken. A read is woken when bytes arrive on its socket, so this measures
/// silence, not the time one event takes to arrive: a huge row received
/// slowly but steadily is not taken for a dead connection, which would
/// restart the session from the same checkpoint, and time out again, forever.
async fn silence<F: Future + Unpin>(mut inner: F, limit: Duration) -> Result<F::Output, Silent> {
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = Pin::new(&mut inner).poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(Silent));
        }
        // Polled before the deadline: `inner` was woken (or this is the
        // first poll), so the silence starts again from now.
        deadline.as_mut().reset(tokio::time::Instant::now() + limit);
        let _ = deadline.as_mut().poll(cx);
        Poll::Pending
    })
    .await
}

/// Sorts an error of the dump connection; `at` is where the stream was.
fn stream_error(err: mysql_async::Error, at: BinlogPosition) -> ForwarderError {
    match &err {
        mysql_async::Error::Server(server)
            if server.code == ER_MASTER_FATAL_ERROR_READING_BINLOG =>
        {
            DefiniteError::DumpRefused {
                position: at,
                server_message: server.message.clone(),
            }
            .into()
        }
        mysql_async::Error::Io(mysql_async::IoError::Io(io))
            if io.kind() == std::io::ErrorKind::InvalidData =>
        {
            DefiniteError::UnsupportedEvent {
                position: at,
                event_type: "?".into(),
                reason: format!("the binlog event after this position could not be parsed: {io}"),
            }
            .into()
        }
        _ => server::classify(err, "binlog stream"),
    }
}

#[cfg(test)]
mod tests {
    use std::task::Context;

    use super::*;

    /// Resolves after `steps` wake-ups, one every `every`: a slow but
    /// steady transfer.
    struct Trickle {
        steps: u32,
        every: Duration,
        tick: Pin<Box<tokio::time::Sleep>>,
    }

    impl Trickle {
        fn new(steps: u32, every: Duration) -> Self {
            Self {
                steps,
                every,
                tick: Box::pin(tokio::time::sleep(every)),
            }
        }
    }

    impl Future for Trickle {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            while self.tick.as_mut().poll(cx).is_ready() {
                self.steps -= 1;
                if self.steps == 0 {
                    return Poll::Ready(());
                }
                let next = tokio::time::Instant::now() + self.every;
                self.tick.as_mut().reset(next);
            }
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_slow_steady_read_is_not_silence_however_long_it_takes() {
        let limit = Duration::from_secs(1);
        // 3 s in all, something every 100 ms.
        let trickle = || Trickle::new(30, Duration::from_millis(100));
        let started = tokio::time::Instant::now();
        assert_eq!(silence(trickle(), limit).await, Ok(()));
        assert!(started.elapsed() >= Duration::from_secs(3));
        // A timer on the whole read gives up on the same transfer.
        assert!(tokio::time::timeout(limit, trickle()).await.is_err());
    }

    #[tokio::test]
    async fn a_read_that_hears_nothing_fails_after_the_limit() {
        let limit = Duration::from_millis(300);
        let started = tokio::time::Instant::now();
        let silent = silence(std::future::pending::<()>(), limit).await;
        assert_eq!(silent, Err(Silent));
        assert!(started.elapsed() >= limit);
        // Quiet for longer than the limit after some activity: silent too.
        let stalls = Trickle::new(3, Duration::from_millis(500));
        assert_eq!(silence(stalls, limit).await, Err(Silent));
    }

    #[test]
    fn a_dump_request_carries_the_gtid_set_with_exclusive_ends() {
        let set: outbox_core::MySqlGtidSet =
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7,5a5a5a5a-0000-4000-8000-000000000001:3"
                .parse()
                .unwrap();
        let sids = dump_sids(&set);
        assert_eq!(sids.len(), 2);
        assert_eq!(
            sids[0].uuid(),
            [
                0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
                0x95, 0x62
            ]
        );
        let intervals: Vec<(u64, u64)> = sids[0]
            .intervals()
            .iter()
            .map(|i| (i.start(), i.end()))
            .collect();
        assert_eq!(intervals, [(1, 6), (7, 8)]);
        let intervals: Vec<(u64, u64)> = sids[1]
            .intervals()
            .iter()
            .map(|i| (i.start(), i.end()))
            .collect();
        assert_eq!(intervals, [(3, 4)]);
    }

    #[test]
    fn a_dump_request_carries_tagged_gtids_as_blocks_of_their_own() {
        let set: outbox_core::MySqlGtidSet = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:tag_a:1-3"
            .parse()
            .unwrap();
        let sids = dump_sids(&set);
        assert_eq!(sids.len(), 2);
        assert!(sids[0].tag().is_none());
        assert_eq!(sids[1].tag().map(|t| t.to_string()), Some("tag_a".into()));
        let intervals: Vec<(u64, u64)> = sids[1]
            .intervals()
            .iter()
            .map(|i| (i.start(), i.end()))
            .collect();
        assert_eq!(intervals, [(1, 4)]);
    }
}
