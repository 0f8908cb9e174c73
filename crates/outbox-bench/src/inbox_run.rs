//! The inbox consumer on the events the forwarder published.

use super::*;

/// What the inbox run measured.
pub(crate) struct InboxRun {
    /// From the consumer's start to the last inbox row committed.
    pub(crate) took: Duration,
    /// From the first inbox row seen to the last, and the rows in between
    /// (without joining the group and its first fetch).
    pub(crate) steady: (Duration, usize),
    /// COMMITs the server counted meanwhile (`Com_commit`).
    pub(crate) commits: u64,
}

pub(crate) async fn global_status(db: &MariaDb, name: &str) -> u64 {
    let mut conn = db.root().await;
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .await
        .unwrap();
    row.and_then(|(_, v)| v.parse().ok()).unwrap_or_default()
}

/// Runs `notification-planner`'s consumer (default settings, a fresh group)
/// on `topic` until `events` inbox rows are committed in `schema`.
pub(crate) async fn inbox_run(
    db: &MariaDb,
    broker: &Broker,
    schema: &str,
    topic: &str,
    events: usize,
) -> InboxRun {
    use outbox_inbox::planner::NotificationPlanner;
    use outbox_inbox::{InboxConfig, InboxConsumer};

    let dead_letter = unique("parked");
    broker.create_topic(&dead_letter, 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planner.toml");
    std::fs::write(
        &path,
        format!(
            "[mysql]\nurl = \"mysql://root@127.0.0.1:{port}/{schema}\"\n\
             [kafka]\nbrokers = \"{brokers}\"\ngroup_id = \"{group}\"\ntopics = [\"{topic}\"]\n\
             dead_letter_topic = \"{dead_letter}\"\n\
             [inbox]\nconsumer_name = \"notification-planner\"\n",
            port = db.port,
            brokers = broker.bootstrap(),
            group = unique("planner"),
        ),
    )
    .unwrap();
    let config = InboxConfig::load(&path).unwrap();
    let pool =
        mysql_async::Pool::new(format!("mysql://root@127.0.0.1:{}/{schema}", db.port).as_str());
    let mut conn = pool.get_conn().await.unwrap();

    let commits_before = global_status(db, "Com_commit").await;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let consumer = InboxConsumer::new(config).unwrap();
    let started = Instant::now();
    let task = tokio::spawn(async move { consumer.run(NotificationPlanner, shutdown).await });
    let deadline = started + Duration::from_secs(3600);
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let done: u64 = conn
            .query_first("SELECT COUNT(*) FROM consumed_event")
            .await
            .unwrap()
            .unwrap();
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done));
        }
        if done >= events as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "the inbox run took over an hour");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    let (first_at, first_done) = first.expect("rows were committed");
    let steady = (
        first_at.elapsed(),
        events.saturating_sub(first_done as usize),
    );
    let commits = global_status(db, "Com_commit").await - commits_before;
    let _ = stop.send(true);
    task.await.unwrap().unwrap();
    drop(conn);
    pool.disconnect().await.unwrap();
    InboxRun {
        took,
        steady,
        commits,
    }
}
