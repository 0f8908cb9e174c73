//! `notification-planner`: the example inbox consumer. Reads outbox events
//! from Kafka and creates one `notification_job` row per `ORDER_ACCEPTED`
//! event, exactly once per event however often it is delivered. Thin by
//! design; the work is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use outbox_inbox::planner::NotificationPlanner;
use outbox_inbox::{InboxConfig, InboxConsumer, InboxError};
use tokio::sync::watch;

/// Plans a notification for every accepted order, deduplicating redelivered
/// events through the consumed_event inbox.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// Configuration file (TOML); see config/notification-planner.toml.
    #[arg(long)]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> Result<(), InboxError> {
    let config = InboxConfig::load(&cli.config)?;
    let consumer = InboxConsumer::new(config)?;
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: finishing the current event and committing offsets");
        let _ = stop.send(true);
    });
    consumer.run(NotificationPlanner, shutdown).await
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(%e, "no SIGTERM handler; stop with Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
