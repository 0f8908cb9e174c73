//! The command line: its definition (for the binary, the man page and
//! the completions) and each command's outcome, printed and turned into an
//! exit code. The work is in the modules it calls.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use outbox_core::DefiniteError;

use crate::check::{preflight, Status};
use crate::config::ForwarderConfig;
use crate::pipeline::RunOptions;
use crate::tables::prune::PruneOptions;
use crate::tables::verify::VerifyOptions;

mod args;
mod checkpoint;
mod group;
mod tables;

use args::{parse_duration, time_column, KafkaWindow, Reading, RepairGapArgs, RowSelection};
use checkpoint::CheckpointAction;
use tables::Tables;

/// Forwards rows inserted into MySQL outbox tables to Kafka by reading the
/// binlog, checkpointing only what the broker has acknowledged.
#[derive(Parser)]
#[command(version = crate::metrics::VERSION)]
struct Cli {
    /// Log format on stderr: `human` or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum GroupAction {
    /// Write the group's first record unless it has one; exits 0 when the
    /// group has started (now or before).
    Start {
        #[arg(long)]
        config: PathBuf,
        /// Where the group starts (FILE:POS at a transaction boundary, or a
        /// GTID state) instead of checkpoint.start; what follows it is
        /// published again.
        #[arg(long)]
        at: Option<String>,
    },
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
        /// Print a delivery statement per table: rows written, proven in
        /// Kafka, repeats, unproven (e.g. with --since 1h).
        #[arg(long)]
        statement: bool,
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
        #[arg(long, default_value = "created_at", value_parser = time_column)]
        time_column: String,
        #[command(flatten)]
        kafka: KafkaWindow,
        /// Write the run's metrics to this file (node_exporter's textfile collector).
        #[arg(long)]
        textfile: Option<PathBuf>,
    },
    /// An `[ha]` group's first start, for a deploy to run before every
    /// instance (an init container): writes the group's first record at
    /// `checkpoint.start` (or --at) unless the group has one. Refused where
    /// the topics hold messages of an earlier forwarder (give --at then).
    Group {
        #[command(subcommand)]
        action: GroupAction,
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

/// The binary's `main`: parses the arguments, runs the command, and
/// returns its exit code (2 for an error, said on stderr).
pub fn main() -> ExitCode {
    crate::memory::no_transparent_huge_pages();
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
        Command::Checkpoint { action } => checkpoint::run(action).await,
        Command::Group {
            action: GroupAction::Start { config, at },
        } => group_start(&config, at.as_deref()).await,
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
            tables::backfill_command(&config, rows, event_ids_from, how, textfile).await
        }
        Command::RepairGap(args) => {
            let (config, options, textfile) = args.into_parts();
            tables::repair_command(&config, &options, textfile).await
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
            tables::prune_command(&config, &options, textfile).await
        }
        Command::Check { config } => check_command(&config).await,
        Command::Verify {
            config,
            rows,
            topics,
            print_records,
            wait_ms,
            statement,
            kafka,
        } => {
            let options = VerifyOptions {
                selection: rows.into(),
                topics,
                print_records,
                wait: std::time::Duration::from_millis(wait_ms),
                kafka: kafka.into(),
            };
            tables::verify_command(&config, &options, statement).await
        }
    }
}

/// `run`: until SIGINT or SIGTERM, which drain the acks first.
async fn run_command(config: &std::path::Path, options: RunOptions) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let (stop, shutdown) = crate::shutdown::channel();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: draining acks and writing the checkpoint");
        stop.request();
    });
    crate::pipeline::run(config, options, shutdown).await
}

/// `group start`: says what the group's topic held, or where the group
/// now starts.
async fn group_start(config: &std::path::Path, at: Option<&str>) -> Result<(), DefiniteError> {
    let config = ForwarderConfig::load(config)?;
    let ha = config
        .ha
        .as_ref()
        .map(|ha| ha.group.clone())
        .unwrap_or_default();
    match group::start_group(&config, at).await? {
        group::FirstStart::AlreadyStarted { offset, checkpoint } => println!(
            "group {ha} has started: its newest record (offset {offset}) is at {}; nothing written",
            checkpoint.position
        ),
        group::FirstStart::Started { offset, checkpoint } => {
            let gtid = checkpoint
                .gtid
                .as_ref()
                .map(|g| format!(" (GTID {g})"))
                .unwrap_or_default();
            println!(
                "group {ha} starts at {}{gtid}: its first record is at offset {offset}",
                checkpoint.position
            );
        }
    }
    Ok(())
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
    match crate::http::probe(listen, path, Duration::from_millis(timeout_ms)) {
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
    let checkpoint = match crate::checkpoints::open_store(&config) {
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

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
