//! The inbox consumer on the events the forwarder published.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use harness::{unique, Broker, DbServer};
use mysql_async::prelude::Queryable;

use crate::args::Args;
use crate::backlog::rate;

/// What the inbox run measured.
pub(crate) struct InboxRun {
    /// From the consumer's start to the last inbox row committed.
    pub(crate) took: Duration,
    /// From the first inbox row seen to the last, and the rows in between
    /// (without joining the group and its first fetch).
    pub(crate) steady: (Duration, usize),
    /// COMMITs the server counted meanwhile (`Com_commit`).
    pub(crate) commits: u64,
    /// Statements the server prepared meanwhile (`Com_stmt_prepare`).
    pub(crate) prepares: u64,
    /// The inbox's own transactions, by how many events each settled
    /// (from the consumer's receipts).
    pub(crate) batches: Batches,
}

/// How many events the inbox's transactions settled, from the receipts of
/// its attempts (a transaction of `n` events sends `n` receipts saying `n`).
#[derive(Default)]
pub(crate) struct Batches {
    /// Transactions per batch size.
    by_size: std::collections::BTreeMap<usize, usize>,
}

impl Batches {
    fn add(&mut self, receipt: &outbox_inbox::Receipt) {
        if matches!(receipt.status, outbox_inbox::ReceiptStatus::Settled(_)) {
            *self.by_size.entry(receipt.batch).or_default() += 1;
        }
    }

    /// Transactions in all.
    pub(crate) fn transactions(&self) -> usize {
        self.by_size
            .iter()
            .map(|(size, receipts)| receipts / size)
            .sum()
    }

    /// Events settled in all.
    pub(crate) fn events(&self) -> usize {
        self.by_size.values().sum()
    }

    /// The batch size below which `share` of the transactions fall.
    pub(crate) fn size_quantile(&self, share: f64) -> usize {
        let goal = (self.transactions() as f64 * share).ceil() as usize;
        let mut seen = 0;
        for (size, receipts) in &self.by_size {
            seen += receipts / size;
            if seen >= goal {
                return *size;
            }
        }
        0
    }
}

/// The inbox's logs, written as `notification-planner` writes them (at its
/// default level, `info`: a summary every 10 s; each event at `debug`) into
/// a file. Each run's level is
/// its settings' `RUST_LOG=FILTER` line, `info` without one; between runs
/// nothing is logged.
pub(crate) struct InboxLogs {
    filter: tracing_subscriber::reload::Handle<
        tracing_subscriber::EnvFilter,
        tracing_subscriber::Registry,
    >,
    _file: tempfile::NamedTempFile,
}

impl InboxLogs {
    pub(crate) fn install() -> Self {
        use tracing_subscriber::prelude::*;
        let file = tempfile::NamedTempFile::new().unwrap();
        let writer = Mutex::new(file.reopen().unwrap());
        let (filter, handle) =
            tracing_subscriber::reload::Layer::new(tracing_subscriber::EnvFilter::new("off"));
        tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer)
                    .with_ansi(false),
            )
            .init();
        InboxLogs {
            filter: handle,
            _file: file,
        }
    }

    fn set(&self, filter: &str) {
        self.filter
            .reload(tracing_subscriber::EnvFilter::new(filter))
            .unwrap();
    }
}

/// The `RUST_LOG=` line of `settings`: `info`, the planner's default,
/// without one.
fn log_filter(settings: &[String]) -> &str {
    settings
        .iter()
        .rev()
        .find_map(|line| line.strip_prefix("RUST_LOG="))
        .unwrap_or("info")
}

/// What a settings line sets: the text before its `=`.
fn setting_key(line: &str) -> &str {
    line.split('=').next().unwrap_or(line).trim()
}

/// The inbox settings a report names: the defaults, or those given.
pub(crate) fn inbox_settings(settings: &[String]) -> String {
    if settings.is_empty() {
        "the defaults".to_owned()
    } else {
        settings.join("; ")
    }
}

/// The inbox runs of `--inbox-rounds` rounds, each set of settings in
/// turn, and their report.
pub(crate) async fn inbox_runs(
    args: &Args,
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    topic: &str,
    events: usize,
    catch_up: f64,
) {
    let base: Vec<String> = args
        .inbox_setting
        .iter()
        .map(|l| l.trim().to_owned())
        .collect();
    let mut sets = vec![base.clone()];
    for other in &args.inbox_compare {
        let lines: Vec<String> = other.split(';').map(|l| l.trim().to_owned()).collect();
        // A key set here replaces the same key of `--inbox-setting`.
        let mut set: Vec<String> = base
            .iter()
            .filter(|line| !lines.iter().any(|l| setting_key(l) == setting_key(line)))
            .cloned()
            .collect();
        set.extend(lines);
        sets.push(set);
    }
    let mut runs: Vec<Vec<InboxRun>> = sets.iter().map(|_| Vec::new()).collect();
    let logs = InboxLogs::install();
    for round in 0..args.inbox_rounds as usize {
        for turn in 0..sets.len() {
            let which = (turn + round) % sets.len();
            let settings = &sets[which];
            eprintln!(
                "inbox round {}: notification-planner on {events} events ({})",
                round + 1,
                inbox_settings(settings)
            );
            logs.set(log_filter(settings));
            runs[which].push(inbox_run(db, broker, schema, topic, events, settings).await);
            logs.set("off");
        }
    }
    println!(
        "\n## Inbox consumer (notification-planner, {events} events already in the topic, {} \
         partitions; medians of {} runs)\n",
        args.partitions, args.inbox_rounds
    );
    println!(
        "| settings | consumer start → last inbox row, events/s | first inbox row → last | \
         MySQL transactions per event | inbox transactions/s | events per transaction p10 / \
         median / max | statements prepared |"
    );
    println!("|---|---:|---:|---:|---:|---|---:|");
    for (settings, runs) in sets.iter().zip(&runs) {
        let mid = |f: &dyn Fn(&InboxRun) -> f64| {
            let mut values: Vec<f64> = runs.iter().map(f).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let sizes = |share| mid(&|r| r.batches.size_quantile(share) as f64);
        println!(
            "| {} | {:.0} | {:.0} | {:.4} | {:.0} | {} / {} / {} | {:.0} |",
            inbox_settings(settings),
            mid(&|r| rate(events, r.took)),
            mid(&|r| rate(r.steady.1, r.steady.0)),
            mid(&|r| r.commits as f64 / events as f64),
            mid(&|r| r.batches.transactions() as f64 / r.took.as_secs_f64()),
            sizes(0.1),
            sizes(0.5),
            sizes(1.0),
            mid(&|r| r.prepares as f64),
        );
    }
    println!("\nforwarder catch-up of the same run (median): {catch_up:.0} events/s");
}

pub(crate) async fn global_status(db: &DbServer, name: &str) -> u64 {
    let mut conn = db.root().await;
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .await
        .unwrap();
    row.and_then(|(_, v)| v.parse().ok()).unwrap_or_default()
}

/// `notification-planner`'s configuration for this run: a fresh group and
/// dead-letter topic, `settings` added (`mysql.KEY = VALUE` to `[mysql]`,
/// `RUST_LOG=` aside, the rest to `[inbox]`).
fn planner_config(
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    topic: &str,
    settings: &[String],
) -> outbox_inbox::InboxConfig {
    let dead_letter = unique("parked");
    broker.create_topic(&dead_letter, 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planner.toml");
    let (mysql, settings): (Vec<&String>, Vec<&String>) = settings
        .iter()
        .filter(|line| !line.starts_with("RUST_LOG="))
        .partition(|line| line.starts_with("mysql."));
    let mysql: Vec<&str> = mysql.iter().map(|line| &line["mysql.".len()..]).collect();
    let settings: Vec<&str> = settings.iter().map(|line| line.as_str()).collect();
    std::fs::write(
        &path,
        format!(
            "[mysql]\nurl = \"mysql://root@127.0.0.1:{port}/{schema}\"\n{mysql}\n\
             [kafka]\nbrokers = \"{brokers}\"\ngroup_id = \"{group}\"\ntopics = [\"{topic}\"]\n\
             dead_letter_topic = \"{dead_letter}\"\n\
             [inbox]\nconsumer_name = \"notification-planner\"\n{settings}\n",
            port = db.port,
            settings = settings.join("\n"),
            mysql = mysql.join("\n"),
            brokers = broker.bootstrap(),
            group = unique("planner"),
        ),
    )
    .unwrap();
    outbox_inbox::InboxConfig::load(&path).unwrap()
}

/// Runs `notification-planner`'s consumer (default settings and
/// `settings`, a fresh group) on `topic` until `events` inbox rows are
/// committed in `schema`, then checks there is one job per inbox row.
pub(crate) async fn inbox_run(
    db: &DbServer,
    broker: &Broker,
    schema: &str,
    topic: &str,
    events: usize,
    settings: &[String],
) -> InboxRun {
    use outbox_inbox::planner::NotificationPlanner;
    use outbox_inbox::InboxConsumer;

    let config = planner_config(db, broker, schema, topic, settings);
    let pool =
        mysql_async::Pool::new(format!("mysql://root@127.0.0.1:{}/{schema}", db.port).as_str());
    let mut conn = pool.get_conn().await.unwrap();
    // Each run starts from an empty inbox.
    conn.query_drop("TRUNCATE consumed_event").await.unwrap();
    conn.query_drop("TRUNCATE notification_job").await.unwrap();

    let commits_before = global_status(db, "Com_commit").await;
    let prepares_before = global_status(db, "Com_stmt_prepare").await;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let (receipts, mut receipt_rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = InboxConsumer::new(config).unwrap().with_receipts(receipts);
    let started = Instant::now();
    let task = tokio::spawn(async move { consumer.run(NotificationPlanner, shutdown).await });
    // Receipts come after each transaction's COMMIT returned: the time of
    // the last is when the last inbox row was committed. (Polling a count
    // of the inbox instead scans it on the same server and slows it.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
    let mut batches = Batches::default();
    let mut first: Option<(Instant, usize)> = None;
    while batches.events() < events {
        let receipt = tokio::time::timeout_at(deadline, receipt_rx.recv())
            .await
            .expect("the inbox run took over an hour")
            .expect("the consumer stopped early");
        if let outbox_inbox::ReceiptStatus::Parked { error } = &receipt.status {
            panic!("the inbox parked {}: {error}", receipt.location);
        }
        batches.add(&receipt);
        if first.is_none() && batches.events() > 0 {
            first = Some((Instant::now(), receipt.batch));
        }
    }
    let took = started.elapsed();
    let (first_at, first_done) = first.expect("rows were committed");
    let steady = (first_at.elapsed(), events.saturating_sub(first_done));
    let commits = global_status(db, "Com_commit").await - commits_before;
    let prepares = global_status(db, "Com_stmt_prepare").await - prepares_before;
    let _ = stop.send(true);
    task.await.unwrap().unwrap();
    while let Ok(receipt) = receipt_rx.try_recv() {
        batches.add(&receipt);
    }
    one_job_per_event(&mut conn, batches.events()).await;
    drop(conn);
    pool.disconnect().await.unwrap();
    InboxRun {
        took,
        steady,
        commits,
        prepares,
        batches,
    }
}

/// Exactly one side effect per event: an inbox row per settled event and
/// a job for each inbox row, no more.
async fn one_job_per_event(conn: &mut mysql_async::Conn, settled: usize) {
    let (inbox_rows, jobs, jobs_distinct): (u64, u64, u64) = conn
        .query_first(
            "SELECT (SELECT COUNT(*) FROM consumed_event), COUNT(*), COUNT(DISTINCT event_id) \
             FROM notification_job",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        inbox_rows as usize, settled,
        "an inbox row per settled event"
    );
    assert_eq!(
        (jobs, jobs_distinct),
        (inbox_rows, inbox_rows),
        "one job per event"
    );
}
