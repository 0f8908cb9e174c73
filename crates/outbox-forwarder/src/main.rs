//! `outbox-forwarder`: the command line. Thin by design; the work is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use outbox_checkpoint::{Checkpoint, CheckpointStore};
use outbox_core::{BinlogPosition, DefiniteError, GtidState};
use outbox_forwarder::check::{preflight, Status};
use outbox_forwarder::checkpoints::CheckpointWriter;
use outbox_forwarder::resume::{self, definite};
use outbox_forwarder::tables::backfill::{backfill, BackfillOptions, BackfillReport};
use outbox_forwarder::tables::prune::{prune, Proof, PruneOptions};
use outbox_forwarder::tables::repair::{repair_gap, RepairOptions, RepairReport};
use outbox_forwarder::tables::verify::{verify, Selection, VerifyOptions};
use outbox_forwarder::{ForwarderConfig, RunOptions};
use outbox_source::server;

/// See [`outbox_forwarder::memory`].
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Forwards rows inserted into MySQL outbox tables to Kafka by reading the
/// binlog, checkpointing only what the broker has acknowledged.
#[derive(Parser)]
#[command(version = outbox_forwarder::metrics::VERSION)]
struct Cli {
    /// Log format on stderr: `human` or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Stream outbox inserts to Kafka until SIGINT/SIGTERM.
    Run {
        /// Configuration file (TOML); see config/forwarder.toml.
        #[arg(long)]
        config: PathBuf,
        /// Resume a stored checkpoint even though it was written against a
        /// server with another identity (e.g. after restoring the primary).
        #[arg(long)]
        accept_new_source: bool,
        /// In an `[ha]` group: start the group at `checkpoint.start` if its
        /// topic has no record of it and this instance has no checkpoint
        /// (a group's first start; give it to one instance only, once).
        #[arg(long)]
        start_group: bool,
    },
    /// Check everything the forwarder needs (server settings, privileges,
    /// outbox tables, checkpoint, brokers); exits non-zero if a check fails.
    Check {
        #[arg(long)]
        config: PathBuf,
    },
    /// Ask the running forwarder's `/healthz` (with --ready, `/readyz`) on
    /// `metrics.listen`; exits 0 when it answers 200, 1 otherwise. For
    /// container health checks: it needs no shell or HTTP client.
    Healthcheck {
        #[arg(long)]
        config: PathBuf,
        /// Ask `/readyz` (streaming, brokers up, lag under
        /// metrics.ready_max_lag_seconds) instead of `/healthz` (alive).
        #[arg(long)]
        ready: bool,
        /// How long to wait for the answer.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
    /// Compare the outbox rows in MySQL with what is in Kafka, by event_id;
    /// exits 1 if any row is missing from Kafka.
    Verify {
        #[arg(long)]
        config: PathBuf,
        #[command(flatten)]
        rows: RowSelection,
        /// Topic to read (repeatable); by default derived from kafka.topic and the rows.
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// Print every record read from Kafka.
        #[arg(long)]
        print_records: bool,
        /// While rows are missing, keep re-reading Kafka up to this long.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
        #[command(flatten)]
        kafka: KafkaWindow,
    },
    /// Publish outbox rows from their table (by creation time or event id):
    /// by default only those missing from Kafka. Runs beside `run`.
    Backfill {
        #[arg(long)]
        config: PathBuf,
        #[command(flatten)]
        rows: RowSelection,
        /// Event ids to publish, one per line, from FILE (- for stdin).
        #[arg(long)]
        event_ids_from: Option<PathBuf>,
        /// Publish every selected row, also those already in Kafka.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        reading: Reading,
        #[command(flatten)]
        kafka: KafkaWindow,
        /// Write the run's metrics to this file (node_exporter's textfile collector).
        #[arg(long)]
        textfile: Option<PathBuf>,
    },
    /// After the binlog past the checkpoint was purged: publish the lost
    /// window's outbox rows that Kafka lacks, then move the checkpoint to
    /// the oldest binlog the server has (with the forwarder stopped).
    RepairGap(RepairGapArgs),
    /// Delete outbox rows older than --older-than whose events are in Kafka
    /// (found by `verify`'s comparison), in small batches.
    Prune {
        #[arg(long)]
        config: PathBuf,
        /// e.g. 7d, 12h.
        #[arg(long, value_parser = parse_duration)]
        older_than: std::time::Duration,
        /// Rows per DELETE.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Pause between DELETEs.
        #[arg(long, default_value = "100ms", value_parser = parse_duration)]
        pause: std::time::Duration,
        /// The rows' creation time column.
        #[arg(long, default_value = "created_at")]
        time_column: String,
        #[command(flatten)]
        kafka: KafkaWindow,
        /// Write the run's metrics to this file (node_exporter's textfile collector).
        #[arg(long)]
        textfile: Option<PathBuf>,
    },
    /// Inspect or change the stored checkpoint (with the forwarder stopped).
    Checkpoint {
        #[command(subcommand)]
        action: CheckpointAction,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish,
    /// powershell) on stdout.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) on stdout.
    #[command(hide = true)]
    Manpage,
}

/// Which outbox rows `verify` and `backfill` read.
/// `repair-gap`'s arguments.
#[derive(clap::Args)]
struct RepairGapArgs {
    #[arg(long)]
    config: PathBuf,
    /// Widen the window by this much on either side (long transactions,
    /// clocks): e.g. 10m, 1h.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    margin: std::time::Duration,
    /// The window's start, for a checkpoint that does not record when
    /// its newest transaction was committed (e.g. "2026-11-29 10:00:00").
    #[arg(long)]
    since: Option<String>,
    /// The rows' creation time column.
    #[arg(long, default_value = "created_at")]
    time_column: String,
    /// Move the checkpoint even where the table cannot prove the gap
    /// whole (no rows in the window, rows deleted before the window's start).
    #[arg(long)]
    accept_unproven: bool,
    /// Only print the window and what cannot be proved.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    reading: Reading,
    #[command(flatten)]
    kafka: KafkaWindow,
    /// Write the run's metrics to this file (node_exporter's textfile collector).
    #[arg(long)]
    textfile: Option<PathBuf>,
}

impl RepairGapArgs {
    /// The configuration file, what the command is asked, and the metrics
    /// file.
    fn into_parts(self) -> (PathBuf, RepairOptions, Option<PathBuf>) {
        let options = RepairOptions {
            margin: self.margin,
            since: self.since,
            time_column: self.time_column,
            max_rows_per_second: self.reading.max_rows_per_second,
            chunk: self.reading.chunk.max(1),
            replica_wait: self.reading.replica_wait,
            accept_unproven: self.accept_unproven,
            dry_run: self.dry_run,
            kafka: self.kafka.into(),
        };
        (self.config, options, self.textfile)
    }
}

#[derive(clap::Args)]
struct RowSelection {
    /// Only rows created at or after this time (e.g. "2026-11-29 10:00:00").
    #[arg(long)]
    since: Option<String>,
    /// Only rows created before this time.
    #[arg(long)]
    until: Option<String>,
    /// The column --since/--until apply to.
    #[arg(long, default_value = "created_at")]
    time_column: String,
    /// Only this event id (repeatable).
    #[arg(long = "event-id")]
    event_ids: Vec<String>,
}

impl From<RowSelection> for Selection {
    fn from(rows: RowSelection) -> Self {
        Selection {
            since: rows.since,
            until: rows.until,
            time_column: rows.time_column,
            event_ids: rows.event_ids,
        }
    }
}

/// How a table is read.
#[derive(clap::Args)]
struct Reading {
    /// Rows read from the outbox tables per second, at most.
    #[arg(long)]
    max_rows_per_second: Option<u32>,
    /// Rows per query.
    #[arg(long, default_value_t = 1000)]
    chunk: usize,
    /// Under mysql.publish_after_replicas: how long a chunk waits for
    /// enough replicas to have its rows before the command gives up.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    replica_wait: std::time::Duration,
}

/// How the table tools read Kafka: the rows' window, not the topics'
/// history.
#[derive(clap::Args)]
struct KafkaWindow {
    /// Read Kafka from this long before the oldest selected row's creation
    /// time (clocks of different hosts, long transactions): e.g. 15m, 2h.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    kafka_margin: std::time::Duration,
    /// Messages read from Kafka per second, at most.
    #[arg(long)]
    max_messages_per_second: Option<u32>,
}

impl From<KafkaWindow> for outbox_forwarder::tables::window::Reading {
    fn from(window: KafkaWindow) -> Self {
        Self {
            margin: window.kafka_margin,
            max_messages_per_second: window.max_messages_per_second,
        }
    }
}

/// `90s`, `10m`, `12h`, `7d`, `250ms`, or plain seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 90s, 10m, 12h, 7d)"))?;
    let seconds = match unit {
        "ms" => return Ok(std::time::Duration::from_millis(n)),
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m, h or d")),
    };
    Ok(std::time::Duration::from_secs(seconds))
}

#[derive(Subcommand)]
enum CheckpointAction {
    /// Print the stored position as FILE:POS, or say there is none.
    Show {
        #[arg(long)]
        config: PathBuf,
    },
    /// Store FILE:POS (a transaction boundary) or a GTID state as the
    /// position to resume from. The topic tails are not recorded with it:
    /// the next run publishes every event after it, even those already in
    /// Kafka.
    Set {
        /// A binlog position, e.g. mysql-bin.000003:1234, or a GTID state:
        /// MariaDB's 0-1-100[,1-2-5] or MySQL's uuid:1-100[,uuid:1-5].
        position: String,
        #[arg(long)]
        config: PathBuf,
    },
    /// Remove the stored checkpoint; the next run starts at checkpoint.start.
    Reset {
        #[arg(long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    outbox_forwarder::memory::no_transparent_huge_pages();
    let cli = Cli::parse();
    // Generated from the definitions above, for packages and shells.
    match cli.command {
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(
                shell,
                &mut command,
                "outbox-forwarder",
                &mut std::io::stdout(),
            );
            return ExitCode::SUCCESS;
        }
        Command::Manpage => {
            return match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Healthcheck {
            config,
            ready,
            timeout_ms,
        } => return healthcheck(&config, ready, timeout_ms),
        _ => {}
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(execute(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn execute(command: Command) -> Result<(), DefiniteError> {
    match command {
        // Answered before a runtime is built.
        Command::Completions { .. } | Command::Manpage | Command::Healthcheck { .. } => Ok(()),
        Command::Run {
            config,
            accept_new_source,
            start_group,
        } => {
            let options = RunOptions {
                accept_new_source,
                start_group,
            };
            run_command(&config, options).await
        }
        Command::Checkpoint { action } => checkpoint(action).await,
        Command::Backfill {
            config,
            rows,
            event_ids_from,
            all,
            reading,
            kafka,
            textfile,
        } => {
            let how = Tables {
                all,
                reading,
                kafka: kafka.into(),
            };
            backfill_command(&config, rows, event_ids_from, how, textfile).await
        }
        Command::RepairGap(args) => {
            let (config, options, textfile) = args.into_parts();
            repair_command(&config, &options, textfile).await
        }
        Command::Prune {
            config,
            older_than,
            batch,
            pause,
            time_column,
            kafka,
            textfile,
        } => {
            let mut options = PruneOptions::new(older_than, batch, pause, time_column);
            options.kafka = kafka.into();
            prune_command(&config, &options, textfile).await
        }
        Command::Check { config } => check_command(&config).await,
        Command::Verify {
            config,
            rows,
            topics,
            print_records,
            wait_ms,
            kafka,
        } => {
            let options = VerifyOptions {
                selection: rows.into(),
                topics,
                print_records,
                wait: std::time::Duration::from_millis(wait_ms),
                kafka: kafka.into(),
            };
            verify_command(&config, &options).await
        }
    }
}

/// Event ids, one per line (blank lines and `#` comments skipped), from
/// `path` or standard input (`-`).
fn read_event_ids(path: &std::path::Path) -> Result<Vec<String>, DefiniteError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| DefiniteError::Config(format!("cannot read {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// `run`: until SIGINT or SIGTERM, which drain the acks first.
async fn run_command(config: &std::path::Path, options: RunOptions) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let (stop, shutdown) = outbox_forwarder::shutdown::channel();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: draining acks and writing the checkpoint");
        stop.request();
    });
    outbox_forwarder::run(config, options, shutdown).await
}

/// `healthcheck`: 0 when the endpoint answers 200; 1 otherwise (container
/// runtimes reserve every other exit code of a health check), with why on
/// stderr.
fn healthcheck(config: &std::path::Path, ready: bool, timeout_ms: u64) -> ExitCode {
    let path = if ready { "/readyz" } else { "/healthz" };
    let listen = match ForwarderConfig::metrics_listen(config) {
        Ok(Some(listen)) => listen,
        Ok(None) => {
            eprintln!(
                "error: {} sets no metrics.listen: the health endpoints are off; set [metrics] \
                 listen (e.g. \"0.0.0.0:9464\")",
                config.display()
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match outbox_forwarder::http::probe(listen, path, Duration::from_millis(timeout_ms)) {
        Ok(body) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("unhealthy: {why}");
            ExitCode::FAILURE
        }
    }
}

/// `check`: one line per condition; fails if any failed.
async fn check_command(config: &std::path::Path) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let checkpoint = match CheckpointStore::open(&config.checkpoint.path) {
        Ok(store) => store.load()?,
        Err(e) => {
            println!("WARN  {:<28} {e}", "checkpoint store");
            None
        }
    };
    let lines = preflight(&config, checkpoint.as_ref(), false).await;
    for line in &lines {
        println!("{line}");
    }
    let failed = lines.iter().filter(|l| l.status == Status::Fail).count();
    if failed == 0 {
        Ok(())
    } else {
        Err(DefiniteError::Config(format!("{failed} check(s) failed")))
    }
}

/// `verify`: the reconciliation and its lists; fails if rows are missing.
async fn verify_command(
    config: &std::path::Path,
    options: &VerifyOptions,
) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let report = verify(&config, options).await?;
    println!("reconciliation: {report}");
    for widened in &report.widened {
        println!("read whole: {widened}");
    }
    for id in &report.missing {
        println!("missing: {id}");
    }
    for (id, count) in &report.duplicated {
        println!("duplicated: {id} x{count}");
    }
    for id in &report.unexpected {
        println!("unexpected: {id}");
    }
    if report.missing.is_empty() {
        Ok(())
    } else {
        Err(DefiniteError::Config(format!(
            "{} outbox rows are not in Kafka; if the forwarder is running and \
             caught up, move the checkpoint back before them with `checkpoint set`",
            report.missing.len()
        )))
    }
}

/// How `backfill` reads: which rows, how fast, and Kafka's window.
struct Tables {
    all: bool,
    reading: Reading,
    kafka: outbox_forwarder::tables::window::Reading,
}

/// `backfill`: the report, the rows it could not publish, the metrics.
async fn backfill_command(
    config: &std::path::Path,
    rows: RowSelection,
    event_ids_from: Option<PathBuf>,
    how: Tables,
    textfile: Option<PathBuf>,
) -> Result<(), DefiniteError> {
    let Tables {
        all,
        reading,
        kafka,
    } = how;
    let config = ForwarderConfig::load(config)?;
    let mut selection: Selection = rows.into();
    if let Some(path) = event_ids_from {
        selection.event_ids.extend(read_event_ids(&path)?);
    }
    let options = BackfillOptions {
        selection,
        all,
        max_rows_per_second: reading.max_rows_per_second,
        chunk: reading.chunk.max(1),
        replica_wait: reading.replica_wait,
        by: "backfill",
        kafka,
    };
    let report = backfill(&config, &options).await;
    if let Ok(report) = &report {
        println!("backfill: {report}");
    }
    conclude(
        "backfill",
        textfile.as_deref(),
        report,
        backfill_outcome,
        |report| report.map(backfill_values).unwrap_or_default(),
    )
}

/// `repair-gap`: the window, what is unproven, the move, the metrics.
async fn repair_command(
    config: &std::path::Path,
    options: &RepairOptions,
    textfile: Option<PathBuf>,
) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let report = repair_gap(&config, options).await;
    conclude(
        "repair-gap",
        textfile.as_deref(),
        report,
        |report| repair_outcome(report, options),
        |report| {
            let mut values = report
                .and_then(|r| r.backfill.as_ref())
                .map(backfill_values)
                .unwrap_or_default();
            let unproven = report.map_or(0, |r| r.unproven.len() as u64);
            values.push((
                "unproven",
                "What the table could not prove of the gap.",
                unproven,
            ));
            values
        },
    )
}

/// `prune`: proved by Kafka; the report and the metrics.
async fn prune_command(
    config: &std::path::Path,
    options: &PruneOptions,
    textfile: Option<PathBuf>,
) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let report = prune(&config, options, &mut Proof::Kafka).await;
    if let Ok(report) = &report {
        println!("prune: {report}");
    }
    conclude(
        "prune",
        textfile.as_deref(),
        report,
        |_| Ok(()),
        |report| {
            report.map_or_else(Vec::new, |r| {
                vec![
                    ("candidates", "Rows older than the cut-off.", r.candidates),
                    ("deleted", "Rows deleted.", r.deleted),
                    (
                        "kept",
                        "Rows older than the cut-off not proved in Kafka.",
                        r.kept,
                    ),
                ]
            })
        },
    )
}

/// A backfill's counts for `--textfile`.
fn backfill_values(report: &BackfillReport) -> Vec<(&'static str, &'static str, u64)> {
    vec![
        (
            "rows_read",
            "Rows read from the outbox tables.",
            report.rows_read,
        ),
        (
            "published",
            "Rows published and acknowledged.",
            report.published,
        ),
        (
            "bad_rows",
            "Rows that cannot become messages.",
            report.bad_rows.len() as u64,
        ),
        (
            "gone",
            "Missing rows no longer in the table.",
            report.gone.len() as u64,
        ),
    ]
}

/// A one-shot command's end: its outcome (`outcome` of its report, or the
/// error that stopped it), and its metrics (`values` of the report, if it
/// has one) written where `--textfile` says.
fn conclude<R>(
    command: &str,
    textfile: Option<&std::path::Path>,
    report: Result<R, DefiniteError>,
    outcome: impl FnOnce(&R) -> Result<(), DefiniteError>,
    values: impl FnOnce(Option<&R>) -> Vec<(&'static str, &'static str, u64)>,
) -> Result<(), DefiniteError> {
    let outcome = report.as_ref().map_err(Clone::clone).and_then(outcome);
    let values = values(report.as_ref().ok());
    write_textfile(textfile, command, &values, outcome.is_ok())?;
    outcome
}

/// Writes a one-shot command's metrics where `--textfile` says.
fn write_textfile(
    path: Option<&std::path::Path>,
    command: &str,
    values: &[(&str, &str, u64)],
    success: bool,
) -> Result<(), DefiniteError> {
    let Some(path) = path else { return Ok(()) };
    let now = outbox_core::epoch_ms() / 1000;
    let text = outbox_forwarder::metrics::textfile::render(command, values, success, now);
    outbox_forwarder::metrics::textfile::write(path, &text)
}

/// Bad rows and rows gone from the table are listed and fail the command.
fn backfill_outcome(report: &BackfillReport) -> Result<(), DefiniteError> {
    for bad in &report.bad_rows {
        println!("bad row: {bad}");
    }
    for id in &report.gone {
        println!("gone from the table: {id}");
    }
    if report.bad_rows.is_empty() && report.gone.is_empty() {
        return Ok(());
    }
    Err(DefiniteError::Config(format!(
        "{} rows cannot become messages and {} missing rows are no longer in the table: \
         they are not in Kafka (fix the rows and run the command again; `verify` lists what is missing)",
        report.bad_rows.len(),
        report.gone.len()
    )))
}

/// The repair's window, what it published, what it could not prove, and
/// where the checkpoint is now.
fn repair_outcome(report: &RepairReport, options: &RepairOptions) -> Result<(), DefiniteError> {
    println!(
        "repair-gap: window {} to {} (to the start of {}, the oldest binlog, widened by {:?})",
        report.since, report.until, report.oldest_binlog, options.margin
    );
    for line in &report.unproven {
        println!("unproven: {line}");
    }
    if let Some(checkpoint) = &report.moved_to {
        println!("checkpoint moved to {}", checkpoint.position);
    }
    if let Some(backfilled) = &report.backfill {
        println!("repair-gap: {backfilled}");
        for bad in &backfilled.bad_rows {
            println!("bad row: {bad}");
        }
        if !backfilled.bad_rows.is_empty() {
            return Err(DefiniteError::Config(format!(
                "the checkpoint was not moved: {} rows of the gap cannot become messages; fix \
                 them (the log names each), then run again",
                backfilled.bad_rows.len()
            )));
        }
    }
    match &report.moved_to {
        Some(_) => Ok(()),
        None if options.dry_run => Ok(()),
        None => Err(DefiniteError::Config(
            "the checkpoint was not moved: the table cannot prove the gap whole (see \
             `unproven`); repair what you can from elsewhere, then run again with \
             --accept-unproven"
                .into(),
        )),
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn checkpoint(action: CheckpointAction) -> Result<(), DefiniteError> {
    match action {
        CheckpointAction::Show { config } => {
            checkpoint_show(&ForwarderConfig::load(&config)?).await
        }
        CheckpointAction::Set { position, config } => {
            checkpoint_set(&ForwarderConfig::load(&config)?, &position).await
        }
        CheckpointAction::Reset { config } => {
            let config = ForwarderConfig::load(&config)?;
            let store = CheckpointStore::open(&config.checkpoint.path)?;
            if store.reset()? {
                println!("checkpoint removed");
            } else {
                println!("no checkpoint was stored");
            }
            Ok(())
        }
    }
}

/// `checkpoint show`: what is stored, and where a run would resume it now.
async fn checkpoint_show(config: &ForwarderConfig) -> Result<(), DefiniteError> {
    let store = CheckpointStore::open(&config.checkpoint.path)?;
    let stored = store.load()?;
    match &stored {
        Some(checkpoint) => {
            println!("{}", checkpoint.position);
            if let Some(gtid) = &checkpoint.gtid {
                println!("gtid: {gtid}");
            }
            println!("written against: {}", checkpoint.source);
            match &checkpoint.tails {
                Some(tails) => {
                    for (topic, read_from) in tails {
                        println!("tail of {topic}: read from offsets {read_from:?} (by partition; [] = from the start)");
                    }
                }
                None => println!(
                    "no topic tails recorded: the next run publishes every event after {} again",
                    checkpoint.position
                ),
            }
        }
        None => println!(
            "no checkpoint stored in {}; the next run starts at checkpoint.start = \"{}\"",
            config.checkpoint.path.display(),
            config.checkpoint.start
        ),
    }
    // Where a run would resume it now, as `run` decides.
    let candidates = resume::candidates(config)?;
    let n = candidates.len();
    match resume::decide(&candidates, 0, stored.as_ref(), false).await {
        Ok(decision) => {
            let how = match &decision.via {
                None => "at checkpoint.start".to_string(),
                Some(via) => via.to_string(),
            };
            println!(
                "resumes on candidate {} of {n} ({}) {how}",
                decision.index + 1,
                decision.info.identity
            );
            let _ = decision.conn.disconnect().await;
        }
        Err(refused) => println!("cannot resume now: {}", refused.error),
    }
    Ok(())
}

/// `checkpoint set`: `position` (`FILE:POS` or a GTID state) checked on
/// the server a fresh start would pick, then written by the one checkpoint
/// writer (and shared with the group, acknowledged, under `[ha]`).
async fn checkpoint_set(config: &ForwarderConfig, position: &str) -> Result<(), DefiniteError> {
    let store = CheckpointStore::open(&config.checkpoint.path)?;
    // The server a fresh start would pick: the writable candidate.
    let candidates = resume::candidates(config)?;
    let decision = resume::decide(&candidates, 0, None, false)
        .await
        .map_err(|r| definite(r.error))?;
    let (mut conn, info) = (decision.conn, decision.info);
    let by_gtid = position.parse::<BinlogPosition>().is_err();
    let checkpoint = match position.parse::<BinlogPosition>() {
        Ok(position) => {
            let gtid = server::gtid_state_at(&mut conn, info.flavor, &position)
                .await
                .map_err(definite)?;
            Checkpoint::new(position, info.identity).with_gtid(gtid)
        }
        Err(not_a_position) => {
            let gtid = parse_gtid_state(position, info.flavor).map_err(|gtid_error| {
                DefiniteError::Config(format!("{not_a_position}; nor a GTID state: {gtid_error}"))
            })?;
            // The stream starts after the GTIDs; the file position is
            // learnt from the server with the first checkpoint.
            let oldest = server::first_position(&mut conn).await.map_err(definite)?;
            Checkpoint::new(oldest, info.identity).with_gtid(Some(gtid))
        }
    };
    // Whether a run could resume it, decided as a run decides.
    match resume::decide(&candidates, decision.index, Some(&checkpoint), false).await {
        Ok(d) => {
            let _ = d.conn.disconnect().await;
            if by_gtid && !matches!(d.via, Some(resume::Via::Gtid(_))) {
                return Err(DefiniteError::Config(
                    "this server cannot stream by GTID (MySQL needs gtid_mode=ON); set FILE:POS"
                        .into(),
                ));
            }
        }
        Err(refused) => {
            return Err(DefiniteError::Config(format!(
                "{position}: {}; the checkpoint is unchanged",
                refused.error
            )))
        }
    }
    // Moved by hand: rows before now were not all published by this line.
    let now = server::now_ms(&mut conn).await.map_err(definite)?;
    let checkpoint = checkpoint.streaming_since(Some(now));
    let _ = conn.disconnect().await;
    // The group's instances follow the shared checkpoint: it is shared,
    // and acknowledged, or the command fails.
    CheckpointWriter::for_operator(config, store)?.set_by_operator(&checkpoint)?;
    if let Some(ha) = &config.ha {
        println!(
            "shared with group {} on {} (stop every instance of the group first, or \
             set it while the active one cannot establish the group's checkpoint)",
            ha.group, ha.checkpoint_topic
        );
    }
    match &checkpoint.gtid {
        Some(gtid) => println!("checkpoint set to {} (GTID {gtid})", checkpoint.position),
        None => println!("checkpoint set to {}", checkpoint.position),
    }
    Ok(())
}

/// A GTID state in the server's flavour.
fn parse_gtid_state(text: &str, flavor: server::Flavor) -> Result<GtidState, String> {
    match flavor {
        server::Flavor::MariaDb => text
            .parse::<outbox_core::MariaDbGtidPos>()
            .map(GtidState::MariaDb)
            .map_err(|e| e.to_string()),
        server::Flavor::MySql => text
            .parse::<outbox_core::MySqlGtidSet>()
            .map(GtidState::MySql)
            .map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        let s = std::time::Duration::from_secs;
        assert_eq!(parse_duration("90s"), Ok(s(90)));
        assert_eq!(parse_duration("90"), Ok(s(90)));
        assert_eq!(parse_duration("10m"), Ok(s(600)));
        assert_eq!(parse_duration("12h"), Ok(s(43_200)));
        assert_eq!(parse_duration("7d"), Ok(s(604_800)));
        assert_eq!(
            parse_duration("250ms"),
            Ok(std::time::Duration::from_millis(250))
        );
        assert!(parse_duration("7w").unwrap_err().contains("unit"));
        assert!(parse_duration("soon").is_err());
    }
}
