//! The benchmark's command line.

use clap::Parser;

#[derive(Parser)]
#[command(about = "Measures the forwarder's catch-up throughput, its ceilings, latency and memory")]
pub(crate) struct Args {
    /// Outbox events in the catch-up backlog (one order + one event per transaction).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) events: usize,
    /// Approximate payload size in bytes.
    #[arg(long, default_value_t = 200)]
    pub(crate) payload_bytes: usize,
    /// Commit rates (events/s) of the latency runs.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000")]
    pub(crate) rates: Vec<u32>,
    /// Measure the catch-up only.
    #[arg(long)]
    pub(crate) skip_latency: bool,
    /// Skip the restarts after kill -9.
    #[arg(long)]
    pub(crate) skip_crash: bool,
    /// Events the inbox run processes (at most `--events`); 0 skips it.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) inbox_events: usize,
    /// Extra forwarder settings as TOML lines appended to its `[kafka]`
    /// section, e.g. `--kafka-setting 'max_in_flight = 20000'`, to compare
    /// settings in one environment.
    #[arg(long)]
    pub(crate) kafka_setting: Vec<String>,
    /// Extra inbox consumer settings as TOML lines appended to its
    /// `[inbox]` section, e.g. `--inbox-setting 'max_batch = 1000'`, or to
    /// its `[mysql]` section when they start with `mysql.`.
    #[arg(long)]
    pub(crate) inbox_setting: Vec<String>,
    /// Another set of inbox settings (`;` between TOML lines; a key set
    /// here replaces the same key of `--inbox-setting`), run on the same
    /// events in turn with the default (and `--inbox-setting`) ones and
    /// reported beside them. The consumer logs as
    /// `notification-planner` does, at `info`; a line `RUST_LOG=FILTER`
    /// sets another filter.
    #[arg(long)]
    pub(crate) inbox_compare: Vec<String>,
    /// Inbox runs per set of settings (which set goes first rotates); the
    /// medians are reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) inbox_rounds: u32,
    /// Extra librdkafka properties for the forwarder, `KEY=VALUE`.
    #[arg(long)]
    pub(crate) kafka_property: Vec<String>,
    /// Seconds measured per rate and round, after a warm-up; the forwarder
    /// and the broker's floor are measured in turn in each round.
    #[arg(long, default_value_t = 10)]
    pub(crate) latency_seconds: u64,
    /// Measure the broker's floor while the benchmark's writers commit at
    /// the same rate (the forwarder stopped), so that it shares the two
    /// cores with MariaDB as the forwarder's measurement does.
    #[arg(long)]
    pub(crate) floor_under_load: bool,
    /// Latency rounds per rate; the medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) latency_rounds: u64,
    /// Partitions of the benchmark topics.
    #[arg(long, default_value_t = 3)]
    pub(crate) partitions: u32,
    /// Catch-up rounds (ceilings and forwarder each time); the medians are
    /// reported, since one run on a shared 2-core machine varies by ±20%.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) rounds: u32,
    /// Another `outbox-forwarder` binary (say, the release build before a
    /// change): its catch-up is measured in the same rounds, in turn with
    /// this build's (which goes first alternates), and reported beside it;
    /// so is its steady-state latency, in each latency round.
    #[arg(long)]
    pub(crate) compare_with: Option<std::path::PathBuf>,
    /// After the latency runs: the cost of `mysql.publish_after_replicas`,
    /// commit read → ack with it off and at 1 (one replica on loopback),
    /// side by side at each `--rates`.
    #[arg(long)]
    pub(crate) replica_gate: bool,
    /// The outbox rows carry three more columns (a tenant, a region, W3C
    /// trace context); in each round this build's catch-up also runs with
    /// them mapped to headers, in turn with the plain one (which goes first
    /// alternates), and is reported beside it.
    #[arg(long)]
    pub(crate) extra_headers: bool,
    /// Other `compression.type` values (comma-separated, e.g. `none,zstd`):
    /// in each round this build's catch-up also runs with each, in turn
    /// with the default (lz4), and is reported beside it.
    #[arg(long, value_delimiter = ',')]
    pub(crate) codecs: Vec<String>,
    /// Run the benchmark's MariaDB with `innodb_flush_log_at_trx_commit=2`
    /// and `sync_binlog=0` (the test suite's settings) instead of the
    /// durable 1 and 1 a production primary runs with (and `check` asks for).
    #[arg(long)]
    pub(crate) relaxed_durability: bool,
    /// Only measure `repair-gap` and `prune` in front of topics with this
    /// many messages of history each (comma-separated), e.g.
    /// `200000,2000000`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) table_tools: Vec<usize>,
    /// Only measure `[retention]` on a primary written continuously, in
    /// front of topics with this many messages of recent history each
    /// (comma-separated), e.g. `0,2000000`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) retention: Vec<usize>,
    /// After MariaDB's catch-up rounds, the same rounds on MySQL 9.7 (a
    /// server of its own, as durable, the same backlog), reported beside
    /// them.
    #[arg(long)]
    pub(crate) mysql: bool,
    /// Only measure what `[audit]` costs: the forwarder streaming at each
    /// of `--rates` with the auditor off and on, in `--latency-rounds`
    /// rounds.
    #[arg(long)]
    pub(crate) audit_cost: bool,
    /// Only measure outbox inserts with UUIDv4 against UUIDv7 event ids,
    /// up to this many rows of each, on two durable servers of their own
    /// (MySQL 9.7's with `--mysql`).
    #[arg(long)]
    pub(crate) id_keys: Option<usize>,
    /// The buffer pool of the `--id-keys` servers, in MB.
    #[arg(long, default_value_t = 16)]
    pub(crate) id_keys_pool_mb: usize,
    /// Events per transaction of the `--id-keys` writers.
    #[arg(long, default_value_t = 10)]
    pub(crate) id_keys_batch: usize,
}

impl Args {
    /// The benchmark's MariaDB settings, as its reports name them.
    pub(crate) fn durability(&self) -> &'static str {
        if self.relaxed_durability {
            "relaxed durability: innodb_flush_log_at_trx_commit=2, sync_binlog=0"
        } else {
            "durable: innodb_flush_log_at_trx_commit=1, sync_binlog=1"
        }
    }
}
