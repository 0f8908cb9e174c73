//! `checkpoint show`, `set` and `reset`: the stored position, read and
//! moved by an operator.

use std::path::PathBuf;

use clap::Subcommand;

use outbox_core::DefiniteError;

use crate::checkpoints::{self, CheckpointWriter};
use crate::config::ForwarderConfig;
use crate::resume;

#[derive(Subcommand)]
pub(super) enum CheckpointAction {
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

/// Runs `action`.
pub(super) async fn run(action: CheckpointAction) -> Result<(), DefiniteError> {
    match action {
        CheckpointAction::Show { config } => {
            checkpoint_show(&ForwarderConfig::load(&config)?).await
        }
        CheckpointAction::Set { position, config } => {
            checkpoint_set(&ForwarderConfig::load(&config)?, &position).await
        }
        CheckpointAction::Reset { config } => {
            let config = ForwarderConfig::load(&config)?;
            let writer =
                CheckpointWriter::new(checkpoints::open_store(&config)?, Default::default());
            if writer.reset_by_operator()? {
                println!("checkpoint removed");
            } else {
                println!("no checkpoint was stored");
            }
            if let Some(ha) = &config.ha {
                println!(
                    "group {}'s checkpoint on {} is unchanged: this instance takes it again \
                     when it starts; `checkpoint set` moves the group",
                    ha.group, ha.checkpoint_topic
                );
            }
            Ok(())
        }
    }
}

/// `checkpoint show`: what is stored, and where a run would resume it now.
async fn checkpoint_show(config: &ForwarderConfig) -> Result<(), DefiniteError> {
    let store = checkpoints::open_store(config)?;
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
    let store = checkpoints::open_store(config)?;
    let checkpoint = checkpoints::operator_checkpoint(config, position).await?;
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
