//! The handlers the tests plug in, each failing or waiting in its own way.

use super::*;

/// The planner, slowed down inside its transaction so that a second
/// consumer's inbox insert meets the first one's uncommitted row.
pub(crate) struct SlowPlanner;

impl Handler for SlowPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        NotificationPlanner.handle(tx, event).await?;
        tokio::time::sleep(Duration::from_millis(150)).await;
        Ok(())
    }
}

/// The planner, failing its first attempt at one event after writing the
/// job, to show that the rollback takes the job and the inbox row along.
pub(crate) struct FlakyPlanner {
    pub(crate) fail_event: String,
    pub(crate) calls: Arc<AtomicUsize>,
}

impl Handler for FlakyPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        NotificationPlanner.handle(tx, event).await?;
        if event.event_id == self.fail_event && self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(HandlerError::retry("notification service unavailable"));
        }
        Ok(())
    }
}

/// Applies `{"account_id", "amount"}` events to `account` by version.
pub(crate) struct BalanceProjection {
    pub(crate) accounts: VersionedAggregate,
    pub(crate) results: Arc<std::sync::Mutex<Vec<(String, ApplyResult)>>>,
}

impl BalanceProjection {
    pub(crate) fn new() -> Self {
        BalanceProjection {
            accounts: VersionedAggregate::new("account", "account_id", "version").unwrap(),
            results: Arc::default(),
        }
    }
}

impl Handler for BalanceProjection {
    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        let account = event.payload["account_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let amount = event.payload["amount"].as_i64().unwrap_or_default();
        let version = event
            .event_version
            .ok_or_else(|| HandlerError::reject("no event_version"))?;
        let result = self
            .accounts
            .apply(
                tx,
                account,
                version,
                "balance = balance + ?",
                vec![amount.into()],
            )
            .await?;
        self.results
            .lock()
            .unwrap()
            .push((event.event_id.clone(), result));
        match result {
            ApplyResult::Applied | ApplyResult::Duplicate => Ok(()),
            ApplyResult::Gap { current } => Err(HandlerError::retry(format!(
                "version gap: account at {current}, event brings {version}"
            ))),
            ApplyResult::Stale { current } => Err(HandlerError::reject(format!(
                "stale: account at {current}, event brings {version}"
            ))),
            ApplyResult::Missing => Err(HandlerError::reject("no such account")),
        }
    }
}

pub(crate) fn account_event(id: &str, version: i64, amount: i64) -> InboxEvent {
    InboxEvent {
        event_id: id.into(),
        event_type: Some("BALANCE_CHANGED".into()),
        aggregate_type: Some("account".into()),
        aggregate_id: Some("order-42".into()),
        event_version: Some(version),
        payload: serde_json::json!({"account_id": "order-42", "amount": amount}),
        headers: BTreeMap::new(),
        location: MessageLocation {
            topic: "balance".into(),
            partition: 0,
            offset: 0,
        },
    }
}

pub(crate) async fn account_state(pool: &Pool) -> (i64, i64, u64) {
    let mut conn = pool.get_conn().await.unwrap();
    let (balance, version): (i64, i64) = conn
        .query_first("SELECT balance, version FROM account WHERE account_id = 'order-42'")
        .await
        .unwrap()
        .unwrap();
    let inbox = count(
        pool,
        "SELECT COUNT(*) FROM consumed_event WHERE consumer_name = 'balance-v1'",
    )
    .await;
    (balance, version, inbox)
}

pub(crate) fn balance_record(id: &str, version: i64, amount: i64) -> OutgoingRecord {
    OutgoingRecord::event(
        id,
        "BALANCE_CHANGED",
        "account",
        "order-42",
        version,
        &format!(r#"{{"account_id":"order-42","amount":{amount}}}"#),
    )
}

/// The planner, whose first transaction loses its connection after the
/// handler is done and before COMMIT: the consumer sees a COMMIT fail and
/// cannot know whether it committed.
pub(crate) struct ConnectionKillingPlanner {
    pub(crate) db: &'static DbServer,
    pub(crate) kills: Arc<AtomicUsize>,
}

impl Handler for ConnectionKillingPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        NotificationPlanner.handle(tx, event).await?;
        if self.kills.fetch_add(1, Ordering::SeqCst) == 0 {
            let id: u64 = tx
                .query_first("SELECT CONNECTION_ID()")
                .await?
                .unwrap_or_default();
            let mut root = self.db.root().await;
            root.query_drop(format!("KILL CONNECTION {id}")).await?;
        }
        Ok(())
    }
}

/// The planner, failing one event's attempts while `hold` is set.
pub(crate) struct HeldPlanner {
    pub(crate) held_event: String,
    pub(crate) hold: Arc<AtomicBool>,
}

impl Handler for HeldPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        if event.event_id == self.held_event && self.hold.load(Ordering::SeqCst) {
            return Err(HandlerError::retry("held by the test"));
        }
        NotificationPlanner.handle(tx, event).await
    }
}

/// The planner, after a `SET SESSION` of its own (which outlives the
/// transaction on its connection): `IMPATIENT` waits a second for a lock, so
/// a locked table fails its insert with 1205 quickly; `LAX` loosens
/// `sql_mode`.
pub(crate) struct SessionPlanner(pub(crate) &'static str);

/// See [`SessionPlanner`].
pub(crate) const IMPATIENT: SessionPlanner = SessionPlanner("SET SESSION lock_wait_timeout = 1");
/// See [`SessionPlanner`].
pub(crate) const LAX: SessionPlanner = SessionPlanner("SET SESSION sql_mode = ''");

impl Handler for SessionPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        tx.query_drop(self.0).await?;
        NotificationPlanner.handle(tx, event).await
    }
}

/// The planner, whose multi-row batch fails without saying why when it
/// holds `poison`, and whose single event `poison` always fails; it counts
/// how often each event was handled.
pub(crate) struct PoisonedPlanner {
    pub(crate) poison: String,
    pub(crate) handled: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

impl Handler for PoisonedPlanner {
    fn accepts(&self, event: &InboxEvent) -> bool {
        NotificationPlanner.accepts(event)
    }

    async fn handle(
        &self,
        tx: &mut Transaction<'_>,
        event: &InboxEvent,
    ) -> Result<(), HandlerError> {
        *self
            .handled
            .lock()
            .unwrap()
            .entry(event.event_id.clone())
            .or_default() += 1;
        if event.event_id == self.poison {
            return Err(HandlerError::retry("the notification template is missing"));
        }
        NotificationPlanner.handle(tx, event).await
    }

    async fn handle_batch(
        &self,
        tx: &mut Transaction<'_>,
        events: &[&InboxEvent],
    ) -> Result<(), BatchFailure> {
        if events.iter().any(|e| e.event_id == self.poison) {
            return Err(HandlerError::retry("a row of the batch was refused").into());
        }
        NotificationPlanner.handle_batch(tx, events).await
    }
}
