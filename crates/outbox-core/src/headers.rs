//! The names of the headers the forwarder writes: one home for every
//! component that writes, reads or reserves them (the encoder, the
//! producer, the read-back of the topic tails, `verify`, the inbox, and the
//! configuration, which refuses `[outbox.headers]` entries that would take
//! one of them: the read-back after a crash relies on them).

/// The row's event id (also the default message key).
pub const EVENT_ID: &str = "event_id";
pub const EVENT_TYPE: &str = "event_type";
pub const AGGREGATE_TYPE: &str = "aggregate_type";
pub const AGGREGATE_ID: &str = "aggregate_id";
pub const EVENT_VERSION: &str = "event_version";
/// The W3C trace context, from the `traceparent` / `tracestate` columns.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";
/// Header with all of a message's binlog coordinates in one text (see
/// [`BinlogCoordinates`]), written in place of the six below unless
/// `kafka.coordinate_headers = "separate"`.
pub const HEADER_BINLOG: &str = "binlog";
/// Header with the binlog position (`file:pos`) of the rows event that carried the row.
pub const HEADER_BINLOG_POSITION: &str = "binlog_position";
/// Header with the row's index within that rows event.
pub const HEADER_BINLOG_ROW: &str = "binlog_row";
/// Header of a dead letter: why the row was refused.
pub const HEADER_ERROR: &str = "error";
/// Header naming the server whose binlog the coordinates are in
/// ([`crate::SourceIdentity::key`]).
pub const HEADER_BINLOG_SERVER: &str = "binlog_server";
/// Header with `schema.table` of the outbox row.
pub const HEADER_SOURCE_TABLE: &str = "source_table";
/// Header with the GTID of the row's transaction, when the server logs GTIDs.
pub const HEADER_BINLOG_GTID: &str = "binlog_gtid";
/// Header with the transaction's commit time, milliseconds since the epoch
/// (`OutboxEvent::committed_at_ms`): what a consumer measures its
/// commit-to-handled latency from.
pub const HEADER_COMMIT_MS: &str = "binlog_commit_ms";
/// Header with the message's index in that transaction (events, then dead
/// letters): with the GTID, the same on every server of the topology.
pub const HEADER_BINLOG_GTID_INDEX: &str = "binlog_gtid_index";
/// Header of a message published from the outbox table rather than the
/// binlog: the command that published it (`backfill`, `repair-gap`).
pub const HEADER_BACKFILL: &str = "backfill";
/// Header of a backfilled message: a binlog position of `binlog_server`
/// after the row's insert (read after the row was).
pub const HEADER_BACKFILL_BEFORE: &str = "backfill_before";
/// Header of a backfilled message: the server's GTID state there, as JSON
/// (`{"mariadb":"0-1-42"}`), when it logs GTIDs.
pub const HEADER_BACKFILL_BEFORE_GTID: &str = "backfill_before_gtid";
/// Header naming the instance of an active/standby group that published
/// the message.
pub const HEADER_PUBLISHED_BY: &str = "published_by";

/// Header with the message's signature, when `kafka.signing_key` is set:
/// hex HMAC-SHA256 over the message (see `outbox_kafka::Signing`).
pub const HEADER_SIGNATURE: &str = "outbox_signature";

/// Every header the forwarder sets itself: no column may fill one.
pub const RESERVED: [&str; 21] = [
    EVENT_ID,
    EVENT_TYPE,
    AGGREGATE_TYPE,
    AGGREGATE_ID,
    EVENT_VERSION,
    TRACEPARENT,
    TRACESTATE,
    HEADER_SOURCE_TABLE,
    HEADER_BINLOG,
    HEADER_BINLOG_POSITION,
    HEADER_BINLOG_ROW,
    HEADER_BINLOG_SERVER,
    HEADER_BINLOG_GTID,
    HEADER_BINLOG_GTID_INDEX,
    HEADER_COMMIT_MS,
    HEADER_ERROR,
    HEADER_BACKFILL,
    HEADER_BACKFILL_BEFORE,
    HEADER_BACKFILL_BEFORE_GTID,
    HEADER_PUBLISHED_BY,
    HEADER_SIGNATURE,
];

/// Whether `name` is one of [`RESERVED`], in any case (brokers and
/// consumers compare header names as bytes, people read them in any case).
pub fn is_reserved(name: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
}

/// Where a message's row is in the binlog, as its headers carry it: the
/// one `binlog` header, or (`kafka.coordinate_headers = "separate"`, and
/// messages written before the one header) `binlog_position`, `binlog_row`,
/// `binlog_server`, `binlog_commit_ms`, `binlog_gtid` and
/// `binlog_gtid_index`.
///
/// The `binlog` header's text is six fields separated by single spaces, `-`
/// for one that is unknown:
///
/// ```text
/// FILE:POS ROW SERVER COMMIT_MS GTID GTID_INDEX
/// binlog.000001:400 2 1@db1 1714979289123 0-1-42 3
/// ```
///
/// `FILE:POS` is the rows event's position, `ROW` the row's index in it,
/// `SERVER` whose binlog ([`crate::SourceIdentity::key`]), `COMMIT_MS` the
/// transaction's commit time in milliseconds since the epoch, and `GTID`
/// with `GTID_INDEX` the transaction's GTID and the message's place in it.
/// The position comes first to be read first; it is read as what precedes
/// the last five fields, so a binlog file name with a space in it reads
/// back whole. The other fields hold no space: a server key is a
/// `server_uuid` or `server_id@host` (a host name), a GTID's text has none;
/// one that did would be written as unknown (the GTID with its index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinlogCoordinates<'a> {
    /// `file:pos` of the rows event that carried the row.
    pub position: &'a str,
    /// The row's index within that rows event.
    pub row: u32,
    pub server: Option<&'a str>,
    pub commit_ms: Option<u64>,
    /// The transaction's GTID and the message's index in it.
    pub slot: Option<(&'a str, u32)>,
}

impl<'a> BinlogCoordinates<'a> {
    /// The `binlog` header's text, appended to `out`. A field that would
    /// hold a space or nothing is written as unknown.
    pub fn write_to(&self, out: &mut String) {
        out.push_str(self.position);
        self.write_after_position(out);
    }

    /// The header's text after `FILE:POS` (from the space that ends it),
    /// appended to `out`: for a writer that wrote the position itself.
    pub fn write_after_position(&self, out: &mut String) {
        fn field(out: &mut String, text: Option<&str>) {
            out.push(' ');
            match text {
                Some(text) if !text.is_empty() && !text.contains(' ') => out.push_str(text),
                _ => out.push('-'),
            }
        }
        let mut number = itoa::Buffer::new();
        out.push(' ');
        out.push_str(number.format(self.row));
        field(out, self.server);
        field(out, self.commit_ms.map(|ms| number.format(ms)));
        // The GTID and its index are known together or not at all.
        let slot = self
            .slot
            .filter(|(gtid, _)| !gtid.is_empty() && !gtid.contains(' '));
        field(out, slot.map(|(gtid, _)| gtid));
        field(out, slot.map(|(_, index)| number.format(index)));
    }

    /// The coordinates a message's headers carry, in either form (`header`
    /// gives a header's text by name): the `binlog` header's when it reads,
    /// the separate headers' otherwise; `None` without a position and a row.
    pub fn read(header: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        if let Some(coordinates) = header(HEADER_BINLOG).and_then(Self::parse) {
            return Some(coordinates);
        }
        let slot = match (header(HEADER_BINLOG_GTID), header(HEADER_BINLOG_GTID_INDEX)) {
            (Some(gtid), Some(index)) => index.parse().ok().map(|index| (gtid, index)),
            _ => None,
        };
        Some(Self {
            position: header(HEADER_BINLOG_POSITION)?,
            row: header(HEADER_BINLOG_ROW)?.parse().ok()?,
            server: header(HEADER_BINLOG_SERVER),
            commit_ms: header(HEADER_COMMIT_MS).and_then(|ms| ms.parse().ok()),
            slot,
        })
    }

    /// The commit time a message's headers carry, in either form.
    pub fn commit_ms(header: impl Fn(&str) -> Option<&'a str>) -> Option<u64> {
        match header(HEADER_BINLOG).and_then(Self::parse) {
            Some(coordinates) => coordinates.commit_ms,
            None => header(HEADER_COMMIT_MS)?.parse().ok(),
        }
    }

    /// A `binlog` header's text; `None` when it is not six fields with a
    /// position and a row.
    pub fn parse(text: &'a str) -> Option<Self> {
        let known = |field: &'a str| (field != "-").then_some(field);
        let mut fields = text.rsplitn(6, ' ');
        let gtid_index = known(fields.next()?);
        let gtid = known(fields.next()?);
        let commit_ms = known(fields.next()?);
        let server = known(fields.next()?);
        let row = fields.next()?.parse().ok()?;
        let position = fields.next().filter(|p| !p.is_empty())?;
        let slot = match (gtid, gtid_index) {
            (Some(gtid), Some(index)) => Some((gtid, index.parse().ok()?)),
            (None, None) => None,
            _ => return None,
        };
        Some(Self {
            position,
            row,
            server,
            commit_ms: commit_ms.map(str::parse).transpose().ok()?,
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn written(coordinates: &BinlogCoordinates<'_>) -> String {
        let mut text = String::new();
        coordinates.write_to(&mut text);
        text
    }

    #[test]
    fn the_binlog_header_reads_back_what_it_wrote() {
        let full = BinlogCoordinates {
            position: "binlog.000001:400",
            row: 2,
            server: Some("1@db1"),
            commit_ms: Some(1_714_979_289_123),
            slot: Some(("0-1-42", 3)),
        };
        assert_eq!(
            written(&full),
            "binlog.000001:400 2 1@db1 1714979289123 0-1-42 3"
        );
        let mysql = BinlogCoordinates {
            position: "my bin.000007:123456",
            server: Some("3e11fa47-71ca-11e1-9e33-c80aa9429562"),
            slot: Some(("3e11fa47-71ca-11e1-9e33-c80aa9429562:tag:77", 0)),
            ..full
        };
        let bare = BinlogCoordinates {
            server: None,
            commit_ms: None,
            slot: None,
            ..full
        };
        assert_eq!(written(&bare), "binlog.000001:400 2 - - - -");
        for coordinates in [full, mysql, bare] {
            let text = written(&coordinates);
            assert_eq!(BinlogCoordinates::parse(&text), Some(coordinates), "{text}");
        }
        // A server name or a GTID that would split the fields is written as
        // unknown (the GTID with its index), and the rest reads back.
        let spaced = BinlogCoordinates {
            server: Some("a b"),
            slot: Some(("0-1 42", 3)),
            ..full
        };
        let text = written(&spaced);
        assert_eq!(
            BinlogCoordinates::parse(&text),
            Some(BinlogCoordinates {
                server: None,
                slot: None,
                ..full
            })
        );
    }

    #[test]
    fn a_malformed_binlog_header_carries_no_coordinates() {
        for bad in [
            "",
            "binlog.000001:400",
            "binlog.000001:400 2 s 1 0-1-42",
            "binlog.000001:400 x s 1 0-1-42 3",
            "binlog.000001:400 2 s soon 0-1-42 3",
            "binlog.000001:400 2 s 1 0-1-42 -",
            "binlog.000001:400 2 s 1 - 3",
            "binlog.000001:400 2 s 1 0-1-42 third",
            " 2 s 1 - -",
        ] {
            assert_eq!(BinlogCoordinates::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn both_forms_are_read() {
        let one: HashMap<&str, &str> = HashMap::from([(
            HEADER_BINLOG,
            "binlog.000001:400 2 1@db1 1714979289123 0-1-42 3",
        )]);
        let separate: HashMap<&str, &str> = HashMap::from([
            (HEADER_BINLOG_POSITION, "binlog.000001:400"),
            (HEADER_BINLOG_ROW, "2"),
            (HEADER_BINLOG_SERVER, "1@db1"),
            (HEADER_COMMIT_MS, "1714979289123"),
            (HEADER_BINLOG_GTID, "0-1-42"),
            (HEADER_BINLOG_GTID_INDEX, "3"),
        ]);
        let read = |headers: &HashMap<&str, &'static str>| {
            BinlogCoordinates::read(|name| headers.get(name).copied())
        };
        assert_eq!(read(&one), read(&separate));
        assert_eq!(read(&one).unwrap().slot, Some(("0-1-42", 3)));
        for headers in [&one, &separate] {
            assert_eq!(
                BinlogCoordinates::commit_ms(|name| headers.get(name).copied()),
                Some(1_714_979_289_123)
            );
        }
        // The separate form without a row: no coordinates; its commit time
        // alone is still read.
        let partial: HashMap<&str, &str> = HashMap::from([
            (HEADER_BINLOG_POSITION, "binlog.000001:400"),
            (HEADER_COMMIT_MS, "5"),
        ]);
        assert_eq!(read(&partial), None);
        assert_eq!(
            BinlogCoordinates::commit_ms(|name| partial.get(name).copied()),
            Some(5)
        );
        // A `binlog` header that does not read (a column's, before the name
        // was the forwarder's) leaves the separate headers to be read.
        let mut shadowed = separate.clone();
        shadowed.insert(HEADER_BINLOG, "from a column");
        assert_eq!(read(&shadowed), read(&separate));
        assert_eq!(
            BinlogCoordinates::commit_ms(|name| shadowed.get(name).copied()),
            Some(1_714_979_289_123)
        );
    }
}
