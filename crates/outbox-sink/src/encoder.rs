//! Routing and headers: how an [`OutboxEvent`] becomes a Kafka record.

use outbox_core::{
    BinlogPosition, DeadLetter, DefiniteError, GtidState, OutboxEvent, PartitionBy, RowOrigin,
};
use rdkafka::message::{Header, OwnedHeaders};

use outbox_core::headers::*;
use outbox_core::rules;

/// Where a backfilled row's insert lies: before this point of the server's
/// binlog. A forwarder whose checkpoint passed it has read the insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backfilled {
    /// The command that publishes it (the `backfill` header).
    pub by: &'static str,
    /// [`outbox_core::SourceIdentity::key`] of the server read.
    pub server: String,
    pub before: BinlogPosition,
    pub before_gtid: Option<GtidState>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Field(Field),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    AggregateType,
    EventType,
    Schema,
    Table,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::AggregateType => "aggregate_type",
            Field::EventType => "event_type",
            Field::Schema => "schema",
            Field::Table => "table",
        }
    }

    fn value(self, event: &OutboxEvent) -> Option<&str> {
        match self {
            Field::AggregateType => event.aggregate_type.as_deref(),
            Field::EventType => event.event_type.as_deref(),
            Field::Schema => Some(&*event.origin.schema),
            Field::Table => Some(&*event.origin.table),
        }
    }
}

/// A topic name with `{aggregate_type}`, `{event_type}`, `{schema}` or
/// `{table}` placeholders, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate(Vec<Segment>);

impl std::str::FromStr for TopicTemplate {
    type Err = DefiniteError;

    fn from_str(template: &str) -> Result<Self, Self::Err> {
        let err = |why: String| DefiniteError::Config(format!("kafka.topic {template:?}: {why}"));
        let mut segments = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                segments.push(Segment::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| err("unclosed '{'".into()))?;
            let name = &rest[open + 1..open + close];
            let field = [Field::AggregateType, Field::EventType, Field::Schema, Field::Table]
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| {
                    err(format!(
                        "unknown placeholder {{{name}}}; use aggregate_type, event_type, schema or table"
                    ))
                })?;
            segments.push(Segment::Field(field));
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Literal(rest.to_owned()));
        }
        if segments.is_empty() {
            return Err(err("empty topic".into()));
        }
        for segment in &segments {
            if let Segment::Literal(text) = segment {
                if !text.bytes().all(rules::is_topic_byte) {
                    return Err(err("topic names may only hold a-z A-Z 0-9 . _ -".into()));
                }
            }
        }
        Ok(Self(segments))
    }
}

impl TopicTemplate {
    /// The literal text before the first placeholder, and whether there is
    /// a placeholder at all.
    pub fn literal_prefix(&self) -> (&str, bool) {
        match self.0.as_slice() {
            [Segment::Literal(text)] => (text, false),
            [Segment::Literal(text), ..] => (text, true),
            _ => ("", true),
        }
    }

    /// The topic `event` goes to: the row's own (`topic_column`) when it
    /// names one, the template's otherwise.
    pub fn route(&self, event: &OutboxEvent) -> Result<String, DefiniteError> {
        let Some(topic) = &event.shape().topic else {
            return self.render(event);
        };
        match rules::topic_column(topic) {
            Ok(()) => Ok(topic.clone()),
            Err(reason) => Err(bad_route(event, reason)),
        }
    }

    /// The template's topic for `event`; a placeholder whose column is NULL or holds
    /// characters Kafka refuses in topic names is an error naming the row.
    pub fn render(&self, event: &OutboxEvent) -> Result<String, DefiniteError> {
        // Room for most topic names at once (they are built per message).
        let mut topic = String::with_capacity(64);
        for segment in &self.0 {
            match segment {
                Segment::Literal(text) => topic.push_str(text),
                Segment::Field(field) => {
                    let value = field
                        .value(event)
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| {
                            bad_route(
                                event,
                                format!(
                                    "{} is NULL or empty, so kafka.topic cannot be filled in",
                                    field.name()
                                ),
                            )
                        })?;
                    if !value.bytes().all(rules::is_topic_byte) {
                        return Err(bad_route(
                            event,
                            format!(
                                "{} {value:?} cannot be part of a topic name (a-z A-Z 0-9 . _ -)",
                                field.name()
                            ),
                        ));
                    }
                    topic.push_str(value);
                }
            }
        }
        if topic.len() > 249 {
            return Err(bad_route(
                event,
                "the topic name is longer than 249 characters".into(),
            ));
        }
        Ok(topic)
    }
}

/// `event` cannot be published as it is, for `reason`: a bad row naming it.
pub(crate) fn bad_route(event: &OutboxEvent, reason: String) -> DefiniteError {
    DefiniteError::BadRow {
        table: event.origin.qualified_table(),
        position: event.origin.event_position.clone(),
        row_index: event.origin.row_index,
        event_id: Some(event.event_id.clone()),
        reason,
    }
}

/// How a message carries its binlog coordinates (`kafka.coordinate_headers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoordinateHeaders {
    /// One `binlog` header ([`outbox_core::headers::BinlogCoordinates`]):
    /// each header costs the producer an allocation and its bytes on the
    /// wire, on every message.
    #[default]
    One,
    /// `binlog_position`, `binlog_row`, `binlog_server`, `binlog_commit_ms`,
    /// `binlog_gtid` and `binlog_gtid_index`, as the forwarder wrote them
    /// before the one header, for consumers that read them.
    Separate,
}

/// The headers of one message, with its coordinates in the configured form.
#[derive(Clone, Copy, Debug, Default)]
pub struct MessageHeaders {
    pub coordinates: CoordinateHeaders,
}

/// Headers a message has room for before librdkafka grows its list.
const HEADERS_ROOM: usize = 16;

impl MessageHeaders {
    /// `event_id`, `event_type`, `aggregate_type`, `aggregate_id`,
    /// `event_version` (when present), the headers the row's columns give
    /// (`[outbox.headers]`, trace context), the outbox table, the row's binlog
    /// coordinates on `server` and its place in its transaction by GTID
    /// (`slot`: the GTID's text and the index), when known, and the
    /// transaction's commit time.
    pub fn for_event(
        self,
        event: &OutboxEvent,
        server: &str,
        slot: Option<(&str, u32)>,
    ) -> OwnedHeaders {
        let committed = (event.committed_at_ms != 0).then_some(event.committed_at_ms);
        self.with_origin(
            Self::of_event(event),
            &event.origin,
            server,
            (slot, committed),
        )
    }

    /// The headers of `event` read from its table (see [`Backfilled`]):
    /// the event's, `source_table`, `binlog_server` and the backfill
    /// headers, no binlog coordinates.
    pub fn for_backfill(event: &OutboxEvent, mark: &Backfilled) -> OwnedHeaders {
        let table = event.origin.qualified_table();
        let before = mark.before.to_string();
        let gtid = mark
            .before_gtid
            .as_ref()
            .map(|g| serde_json::to_string(g).expect("GTID states serialise"));
        let mut headers = Self::of_event(event)
            .insert(Header {
                key: HEADER_SOURCE_TABLE,
                value: Some(table.as_str()),
            })
            .insert(Header {
                key: HEADER_BINLOG_SERVER,
                value: Some(mark.server.as_str()),
            })
            .insert(Header {
                key: HEADER_BACKFILL,
                value: Some(mark.by),
            })
            .insert(Header {
                key: HEADER_BACKFILL_BEFORE,
                value: Some(before.as_str()),
            });
        if let Some(gtid) = &gtid {
            headers = headers.insert(Header {
                key: HEADER_BACKFILL_BEFORE_GTID,
                value: Some(gtid.as_str()),
            });
        }
        headers
    }

    /// `event_id`, `event_type`, `aggregate_type`, `aggregate_id`,
    /// `event_version` (when present) and the headers the row's columns give.
    fn of_event(event: &OutboxEvent) -> OwnedHeaders {
        let optional = [
            (EVENT_TYPE, &event.event_type),
            (AGGREGATE_TYPE, &event.aggregate_type),
            (AGGREGATE_ID, &event.aggregate_id),
            (EVENT_VERSION, &event.event_version),
        ];
        // Room for every header a message carries (the event's five, the
        // table and the coordinates, separate or not, a signature and a few
        // of the row's), so that librdkafka does not grow the list for each
        // message.
        let mut headers = OwnedHeaders::new_with_capacity(HEADERS_ROOM).insert(Header {
            key: EVENT_ID,
            value: Some(event.event_id.as_str()),
        });
        for (key, value) in optional {
            if let Some(value) = value {
                headers = headers.insert(Header {
                    key,
                    value: Some(value.as_str()),
                });
            }
        }
        for (key, value) in &event.shape().headers {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        headers
    }

    /// `headers` followed by `source_table` and the row's binlog
    /// coordinates, with its GTID slot and commit time when known (`when`),
    /// in the configured form. Their texts are written into one buffer, and
    /// the numbers on the stack: every message carries them.
    fn with_origin(
        self,
        headers: OwnedHeaders,
        origin: &RowOrigin,
        server: &str,
        when: (Option<(&str, u32)>, Option<u64>),
    ) -> OwnedHeaders {
        let at = &origin.event_position;
        let mut text = String::with_capacity(
            origin.schema.len() + origin.table.len() + at.file.len() + server.len() + 96,
        );
        // `schema.table`, then `file:pos` (as `BinlogPosition` shows it).
        text.push_str(&origin.schema);
        text.push('.');
        text.push_str(&origin.table);
        let table_end = text.len();
        text.push_str(&at.file);
        text.push(':');
        text.push_str(itoa::Buffer::new().format(at.pos));
        if self.coordinates == CoordinateHeaders::One {
            let coordinates = BinlogCoordinates {
                // Already in `text`, which the rest follows.
                position: "",
                row: origin.row_index,
                server: Some(server),
                commit_ms: when.1,
                slot: when.0,
            };
            coordinates.write_after_position(&mut text);
            let (table, binlog) = text.split_at(table_end);
            return headers
                .insert(Header {
                    key: HEADER_SOURCE_TABLE,
                    value: Some(table),
                })
                .insert(Header {
                    key: HEADER_BINLOG,
                    value: Some(binlog),
                });
        }
        let (table, position) = text.split_at(table_end);
        let headers = Self::separate(headers, (table, position), origin.row_index, server);
        let (slot, committed) = when;
        let headers = match slot {
            None => headers,
            Some((gtid, index)) => headers
                .insert(Header {
                    key: HEADER_BINLOG_GTID,
                    value: Some(gtid),
                })
                .insert(Header {
                    key: HEADER_BINLOG_GTID_INDEX,
                    value: Some(itoa::Buffer::new().format(index)),
                }),
        };
        match committed {
            None => headers,
            Some(ms) => headers.insert(Header {
                key: HEADER_COMMIT_MS,
                value: Some(itoa::Buffer::new().format(ms)),
            }),
        }
    }

    /// `source_table`, `binlog_position`, `binlog_row` and `binlog_server`.
    fn separate(
        headers: OwnedHeaders,
        (table, position): (&str, &str),
        row: u32,
        server: &str,
    ) -> OwnedHeaders {
        headers
            .insert(Header {
                key: HEADER_SOURCE_TABLE,
                value: Some(table),
            })
            .insert(Header {
                key: HEADER_BINLOG_POSITION,
                value: Some(position),
            })
            .insert(Header {
                key: HEADER_BINLOG_ROW,
                value: Some(itoa::Buffer::new().format(row)),
            })
            .insert(Header {
                key: HEADER_BINLOG_SERVER,
                value: Some(server),
            })
    }
}

/// Headers of a received message as text pairs (invalid UTF-8 replaced),
/// for tools and tests that read messages back.
pub fn header_pairs<H: rdkafka::message::Headers>(headers: &H) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.key.to_owned(),
                String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
            )
        })
        .collect()
}

/// A row that decoded but cannot be published (its topic cannot be filled
/// in, or Kafka refuses it), as a dead letter: the event's fields as JSON.
pub fn dead_letter_for_event(event: &OutboxEvent, reason: String) -> DeadLetter {
    let row = serde_json::json!({
        "event_id": event.event_id,
        "event_type": event.event_type,
        "aggregate_type": event.aggregate_type,
        "aggregate_id": event.aggregate_id,
        "event_version": event.event_version,
        "payload": event.payload.as_deref().map(payload_text),
        "headers": event
            .shape()
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), payload_text(value).into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "topic": event.shape().topic,
        "partition": match &event.shape().partition {
            None => serde_json::Value::Null,
            Some(PartitionBy::Number(n)) => (*n).into(),
            Some(PartitionBy::Hash(value)) => payload_text(value).into(),
        },
        "timestamp_ms": event.shape().timestamp_ms,
    });
    DeadLetter {
        origin: event.origin.clone(),
        event_id: Some(event.event_id.clone()),
        reason,
        row: serde_json::to_vec(&row).expect("JSON values serialise"),
    }
}

/// A payload or column value as dead-letter text: as it is when UTF-8, lowercase hex
/// otherwise (a `bytes` payload), clipped.
fn payload_text(payload: &[u8]) -> String {
    match std::str::from_utf8(payload) {
        Ok(text) => DeadLetter::clip(text),
        Err(_) => DeadLetter::clip(&outbox_core::hex::hex(payload)),
    }
}

impl MessageHeaders {
    /// `error`, `source_table`, the binlog coordinates, the GTID slot and
    /// `event_id` when known.
    pub fn for_dead_letter(
        self,
        dead: &DeadLetter,
        server: &str,
        slot: Option<(&str, u32)>,
    ) -> OwnedHeaders {
        let error = OwnedHeaders::new_with_capacity(5).insert(Header {
            key: HEADER_ERROR,
            value: Some(dead.reason.as_str()),
        });
        let mut headers = self.with_origin(error, &dead.origin, server, (slot, None));
        if let Some(event_id) = &dead.event_id {
            headers = headers.insert(Header {
                key: EVENT_ID,
                value: Some(event_id.as_str()),
            });
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{BinlogPosition, RowOrigin};

    fn event(aggregate_type: Option<&str>) -> OutboxEvent {
        OutboxEvent {
            event_id: "e1".into(),
            event_type: Some("ORDER_ACCEPTED".into()),
            aggregate_type: aggregate_type.map(str::to_owned),
            aggregate_id: Some("42".into()),
            event_version: None,
            key: None,
            payload: Some(b"{}".to_vec()),
            committed_at_ms: 0,
            shape: Default::default(),
            origin: RowOrigin {
                schema: "shop".into(),
                table: "outbox_event".into(),
                event_position: BinlogPosition::new("bin.000001", 400),
                row_index: 2,
            },
        }
    }

    #[test]
    fn template_fills_placeholders_from_the_row() {
        let t: TopicTemplate = "outbox.{aggregate_type}".parse().unwrap();
        assert_eq!(t.render(&event(Some("order"))).unwrap(), "outbox.order");
        let t: TopicTemplate = "{schema}-{table}.{event_type}".parse().unwrap();
        assert_eq!(
            t.render(&event(None)).unwrap(),
            "shop-outbox_event.ORDER_ACCEPTED"
        );
        let fixed: TopicTemplate = "orders".parse().unwrap();
        assert_eq!(fixed.render(&event(None)).unwrap(), "orders");
    }

    #[test]
    fn a_null_or_illegal_placeholder_value_is_a_bad_row_with_its_position() {
        let t: TopicTemplate = "outbox.{aggregate_type}".parse().unwrap();
        let err = t.render(&event(None)).unwrap_err().to_string();
        assert!(
            err.contains("bin.000001:400") && err.contains("event_id e1"),
            "{err}"
        );
        assert!(t.render(&event(Some("a b"))).is_err());
    }

    #[test]
    fn malformed_templates_are_config_errors() {
        for bad in ["", "outbox.{aggregate_type", "outbox.{nope}", "out box"] {
            assert!(bad.parse::<TopicTemplate>().is_err(), "{bad:?}");
        }
    }

    fn pairs(headers: &OwnedHeaders) -> Vec<(String, String)> {
        super::header_pairs(headers)
    }

    /// The coordinates `pairs` carry, in either form.
    fn read(pairs: &[(String, String)]) -> Option<BinlogCoordinates<'_>> {
        BinlogCoordinates::read(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        })
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const SEPARATE: MessageHeaders = MessageHeaders {
        coordinates: CoordinateHeaders::Separate,
    };

    #[test]
    fn headers_carry_identity_and_binlog_coordinates_and_skip_absent_columns() {
        let identity = [
            ("event_id", "e1"),
            ("event_type", "ORDER_ACCEPTED"),
            ("aggregate_type", "order"),
            ("aggregate_id", "42"),
            ("source_table", "shop.outbox_event"),
        ];
        let headers =
            MessageHeaders::default().for_event(&event(Some("order")), "1@db1:3306", None);
        let mut expected = identity.to_vec();
        expected.push(("binlog", "bin.000001:400 2 1@db1:3306 - - -"));
        assert_eq!(pairs(&headers), owned(&expected));
        // With the transaction's GTID slot (the same text on every server
        // of the topology) and its commit time, once its commit was read.
        let mut committed = event(Some("order"));
        committed.committed_at_ms = 1_714_979_289_123;
        let headers =
            MessageHeaders::default().for_event(&committed, "1@db1:3306", Some(("0-1-42", 3)));
        assert_eq!(
            pairs(&headers).last().unwrap().1,
            "bin.000001:400 2 1@db1:3306 1714979289123 0-1-42 3"
        );

        // The six headers the forwarder wrote before the one, on request.
        let mut expected = identity.to_vec();
        expected.extend([
            ("binlog_position", "bin.000001:400"),
            ("binlog_row", "2"),
            ("binlog_server", "1@db1:3306"),
        ]);
        let headers = SEPARATE.for_event(&event(Some("order")), "1@db1:3306", None);
        assert_eq!(pairs(&headers), owned(&expected));
        let headers = SEPARATE.for_event(&committed, "1@db1:3306", Some(("0-1-42", 3)));
        expected.extend([
            ("binlog_gtid", "0-1-42"),
            ("binlog_gtid_index", "3"),
            ("binlog_commit_ms", "1714979289123"),
        ]);
        assert_eq!(pairs(&headers), owned(&expected));
    }

    /// Both forms carry the same coordinates, read by the same reader.
    #[test]
    fn both_forms_read_back_to_the_same_coordinates() {
        let mut committed = event(Some("order"));
        committed.committed_at_ms = 1_714_979_289_123;
        for slot in [None, Some(("0-1-42", 3))] {
            let one = pairs(&MessageHeaders::default().for_event(&committed, "1@db1:3306", slot));
            let separate = pairs(&SEPARATE.for_event(&committed, "1@db1:3306", slot));
            let expected = BinlogCoordinates {
                position: "bin.000001:400",
                row: 2,
                server: Some("1@db1:3306"),
                commit_ms: Some(1_714_979_289_123),
                slot,
            };
            assert_eq!(read(&one), Some(expected));
            assert_eq!(read(&separate), Some(expected));
        }
    }

    #[test]
    fn a_row_topic_replaces_the_template_and_must_be_a_topic_name() {
        let t: TopicTemplate = "outbox.{aggregate_type}".parse().unwrap();
        let mut routed = event(None);
        routed.shape_mut().topic = Some("invoices.v2".into());
        assert_eq!(t.route(&routed).unwrap(), "invoices.v2");
        // Without one, the template (here failing on the NULL placeholder).
        assert!(t.route(&event(None)).is_err());
        assert_eq!(t.route(&event(Some("order"))).unwrap(), "outbox.order");
        for bad in ["", "in voices", &"x".repeat(250)] {
            routed.shape_mut().topic = Some(bad.to_string());
            let err = t.route(&routed).unwrap_err().to_string();
            assert!(
                err.contains("topic_column") && err.contains("event_id e1"),
                "{err}"
            );
        }
    }

    #[test]
    fn column_headers_follow_the_fixed_ones_byte_for_byte() {
        use rdkafka::message::Headers;
        let mut shaped = event(Some("order"));
        shaped.shape_mut().headers = vec![
            ("tenant".into(), b"acme".to_vec()),
            ("raw".into(), vec![0xff, 0x00]),
        ];
        let headers = MessageHeaders::default().for_event(&shaped, "s", None);
        let all: Vec<(&str, &[u8])> = headers.iter().map(|h| (h.key, h.value.unwrap())).collect();
        let tenant = all.iter().position(|(k, _)| *k == "tenant").unwrap();
        assert_eq!(all[tenant - 1].0, "aggregate_id");
        assert_eq!(all[tenant].1, b"acme");
        assert_eq!(all[tenant + 1], ("raw", [0xff, 0x00].as_slice()));
        assert_eq!(all[tenant + 2].0, HEADER_SOURCE_TABLE);
    }

    /// Every header the forwarder writes, on an event, a backfilled one and
    /// a dead letter, is reserved: a column cannot fill one (a `backfill`
    /// column made every message look backfilled to the read-back).
    #[test]
    fn every_header_the_forwarder_writes_is_reserved() {
        let mut shaped = event(Some("order"));
        shaped.event_version = Some("7".into());
        shaped.shape_mut().headers = vec![("tenant".into(), b"acme".to_vec())];
        let mark = Backfilled {
            by: "backfill",
            server: "s".into(),
            before: "bin.000001:4".parse().unwrap(),
            before_gtid: Some(GtidState::MariaDb("0-1-1".parse().unwrap())),
        };
        let dead = dead_letter_for_event(&shaped, "r".into());
        let mut committed = shaped.clone();
        committed.committed_at_ms = 1;
        let written: Vec<(String, String)> = [MessageHeaders::default(), SEPARATE]
            .into_iter()
            .flat_map(|form| {
                [
                    form.for_event(&committed, "s", Some(("0-1-42", 3))),
                    MessageHeaders::for_backfill(&shaped, &mark),
                    form.for_dead_letter(&dead, "s", Some(("0-1-42", 3))),
                ]
            })
            .collect::<Vec<_>>()
            .iter()
            .flat_map(crate::header_pairs)
            .collect();
        let names: std::collections::BTreeSet<&str> =
            written.iter().map(|(k, _)| k.as_str()).collect();
        let unreserved: Vec<&str> = names.iter().copied().filter(|n| !is_reserved(n)).collect();
        assert_eq!(unreserved, ["tenant"], "only the column's own header");
        // And each backfill header among them.
        for name in [
            HEADER_BACKFILL,
            HEADER_BACKFILL_BEFORE,
            HEADER_BACKFILL_BEFORE_GTID,
        ] {
            assert!(names.contains(name), "{name} written: {names:?}");
        }
        assert!(is_reserved(HEADER_PUBLISHED_BY) && is_reserved("Backfill"));
    }

    #[test]
    fn a_dead_letter_keeps_a_binary_payload_as_hex_and_a_tombstone_as_null() {
        let mut binary = event(Some("order"));
        binary.payload = Some(vec![0x0a, 0xff]);
        let row: serde_json::Value =
            serde_json::from_slice(&dead_letter_for_event(&binary, "r".into()).row).unwrap();
        assert_eq!(row["payload"], "0aff");
        binary.payload = None;
        let row: serde_json::Value =
            serde_json::from_slice(&dead_letter_for_event(&binary, "r".into()).row).unwrap();
        assert!(row["payload"].is_null());
    }
}
