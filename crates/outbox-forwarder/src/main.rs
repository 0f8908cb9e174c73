//! `outbox-forwarder`: the command line. Thin by design; the work is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use outbox_checkpoint::{Checkpoint, CheckpointStore};
use outbox_core::{BinlogPosition, DefiniteError, GtidState};
use outbox_forwarder::check::{preflight, Status};
use outbox_forwarder::checkpoints::{CheckpointShare, CheckpointWriter};
use outbox_forwarder::resume::{self, definite};
use outbox_forwarder::verify::{verify, VerifyOptions};
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
    },
    /// Check everything the forwarder needs (server settings, privileges,
    /// outbox tables, checkpoint, brokers); exits non-zero if a check fails.
    Check {
        #[arg(long)]
        config: PathBuf,
    },
    /// Compare the outbox rows in MySQL with what is in Kafka, by event_id;
    /// exits 1 if any row is missing from Kafka.
    Verify {
        #[arg(long)]
        config: PathBuf,
        /// Only rows created at or after this time (e.g. "2026-11-29 10:00:00").
        #[arg(long)]
        since: Option<String>,
        /// Only rows created before this time.
        #[arg(long)]
        until: Option<String>,
        /// The column --since/--until apply to.
        #[arg(long, default_value = "created_at")]
        time_column: String,
        /// Topic to read (repeatable); by default derived from kafka.topic and the rows.
        #[arg(long = "topic")]
        topics: Vec<String>,
        /// Print every record read from Kafka.
        #[arg(long)]
        print_records: bool,
        /// While rows are missing, keep re-reading Kafka up to this long.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
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
        // Printed before a runtime is built.
        Command::Completions { .. } | Command::Manpage => Ok(()),
        Command::Run {
            config,
            accept_new_source,
        } => {
            let config = ForwarderConfig::load(&config)?;
            let (stop, shutdown) = outbox_forwarder::shutdown::channel();
            tokio::spawn(async move {
                wait_for_signal().await;
                tracing::info!("shutdown requested: draining acks and writing the checkpoint");
                stop.request();
            });
            outbox_forwarder::run(config, RunOptions { accept_new_source }, shutdown).await
        }
        Command::Checkpoint { action } => checkpoint(action).await,
        Command::Check { config } => {
            let config = ForwarderConfig::load(&config)?;
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
        Command::Verify {
            config,
            since,
            until,
            time_column,
            topics,
            print_records,
            wait_ms,
        } => {
            let config = ForwarderConfig::load(&config)?;
            let options = VerifyOptions {
                since,
                until,
                time_column,
                topics,
                print_records,
                wait: std::time::Duration::from_millis(wait_ms),
            };
            let report = verify(&config, &options).await?;
            println!("reconciliation: {report}");
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
                Some(resume::Via::Gtid(state)) => format!("by GTID after {state}"),
                Some(resume::Via::FilePos { .. }) => "at the checkpoint's file:pos".into(),
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
    let checkpoint = match position.parse::<BinlogPosition>() {
        Ok(position) => {
            server::ensure_available(&mut conn, &position)
                .await
                .map_err(definite)?;
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
            let wanted = Checkpoint::new(oldest, info.identity).with_gtid(Some(gtid.clone()));
            // Whether a run could resume it, decided as a run decides.
            match resume::decide(&candidates, decision.index, Some(&wanted), false).await {
                Ok(d) => {
                    let _ = d.conn.disconnect().await;
                    if !matches!(d.via, Some(resume::Via::Gtid(_))) {
                        return Err(DefiniteError::Config(
                            "this server cannot stream by GTID (MySQL needs gtid_mode=ON); set FILE:POS".into(),
                        ));
                    }
                }
                Err(refused) => {
                    return Err(DefiniteError::Config(format!("{gtid}: {}", refused.error)))
                }
            }
            wanted
        }
    };
    let _ = conn.disconnect().await;
    let metrics = std::sync::Arc::new(outbox_forwarder::metrics::Metrics::default());
    let mut writer = CheckpointWriter::new(store, metrics.clone());
    if let Some(ha) = &config.ha {
        // The group's instances follow the shared checkpoint: it is
        // shared, and acknowledged, or the command fails.
        let share = CheckpointShare::new(&config.kafka_config(), ha, metrics)?;
        let leadership =
            outbox_forwarder::ha::Leadership::new(std::time::Duration::from_millis(ha.lease_ms));
        writer = writer.in_group(share, leadership, &ha.instance);
    }
    writer.set_by_operator(&checkpoint)?;
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
