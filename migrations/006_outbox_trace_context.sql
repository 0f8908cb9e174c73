-- The W3C trace context of the request that wrote an event, when it had
-- one: the writer library (crates/outbox-writer) and the recipes fill
-- them, the forwarder copies both into the message's headers
-- ([outbox.columns] traceparent / tracestate), and the inbox handles the
-- event in a span carrying its trace id. NULL: no trace.
ALTER TABLE outbox_event
    ADD COLUMN traceparent VARCHAR(55)  NULL AFTER payload,
    ADD COLUMN tracestate  VARCHAR(512) NULL AFTER traceparent;
