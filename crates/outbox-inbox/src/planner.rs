//! The example service's handler: one pending `notification_job` row per
//! `ORDER_ACCEPTED` event, written in the inbox transaction.
//!
//! The job table has no unique key on the event: that there is exactly one
//! job per event comes from the inbox alone (see `migrations/004_*.sql`).

use mysql_async::prelude::Queryable;
use mysql_async::{Transaction, Value};

use crate::event::InboxEvent;
use crate::inbox::{BatchFailure, Handler, HandlerError};

/// The event type the planner acts on.
pub const ORDER_ACCEPTED: &str = "ORDER_ACCEPTED";

/// Plans a notification for every accepted order.
#[derive(Debug, Clone, Copy, Default)]
pub struct NotificationPlanner;

impl NotificationPlanner {
    /// The order an event is about: `order_id` in the payload, else the
    /// aggregate id. `None` when neither is an integer.
    pub fn order_id(event: &InboxEvent) -> Option<i64> {
        event
            .payload
            .get("order_id")
            .and_then(serde_json::Value::as_i64)
            .or_else(|| event.aggregate_id.as_deref()?.parse().ok())
    }
}

impl NotificationPlanner {
    /// The job's order, or the rejection of an event without one.
    fn job_order(event: &InboxEvent) -> Result<i64, HandlerError> {
        Self::order_id(event).ok_or_else(|| {
            HandlerError::reject(format!(
                "{ORDER_ACCEPTED} event {} ({}) has no integer order_id in its payload or \
                 aggregate_id; fix the producer and publish a corrected event",
                event.event_id, event.location
            ))
        })
    }
}

impl Handler for NotificationPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        event.event_type.as_deref() == Some(ORDER_ACCEPTED)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        let order_id = Self::job_order(event)?;
        tx.exec_drop(
            "INSERT INTO notification_job (event_id, order_id, source_version, status) \
             VALUES (?, ?, ?, 'PENDING')",
            (
                event.event_id.as_str(),
                order_id,
                event.event_version.unwrap_or(1),
            ),
        )
        .await?;
        Ok(())
    }

    /// One multi-row INSERT for the batch's jobs.
    async fn handle_batch(
        &self,
        tx: &mut Transaction<'_>,
        events: &[&InboxEvent],
    ) -> Result<(), BatchFailure> {
        let mut params: Vec<Value> = Vec::with_capacity(events.len() * 3);
        for (index, event) in events.iter().enumerate() {
            let order_id = Self::job_order(event).map_err(|error| BatchFailure {
                index: Some(index),
                error,
            })?;
            params.push(event.event_id.as_str().into());
            params.push(order_id.into());
            params.push(event.event_version.unwrap_or(1).into());
        }
        let rows = vec!["(?, ?, ?, 'PENDING')"; events.len()].join(", ");
        tx.exec_drop(
            format!(
                "INSERT INTO notification_job (event_id, order_id, source_version, status) \
                 VALUES {rows}"
            ),
            params,
        )
        .await?;
        Ok(())
    }
}
