//! A checkpoint an operator names (`checkpoint set`, `group start --at`):
//! a binlog position or a GTID state, checked on the server a fresh start
//! would pick, as a run would resume it.

use outbox_checkpoint::Checkpoint;
use outbox_core::{BinlogPosition, DefiniteError, GtidState};
use outbox_source::server;

use crate::config::ForwarderConfig;
use crate::resume::{self, definite};

/// `position` (`FILE:POS` at a transaction boundary, or a GTID state in the
/// server's flavour) as a checkpoint that a run can resume, on the
/// writable candidate, with the time its binlog file began; its line
/// starts now (rows before it were not all published by this line). No topic tails: the next run publishes every
/// event after it, also those already in Kafka.
pub async fn operator_checkpoint(
    config: &ForwarderConfig,
    position: &str,
) -> Result<Checkpoint, DefiniteError> {
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
    let now = server::now_ms(&mut conn).await.map_err(definite)?;
    let _ = conn.disconnect().await;
    // When its file began: a reset of the binary logs before the first
    // ack is told from it, as from a checkpoint the stream wrote.
    let dump = server::connect(&candidates[decision.index])
        .await
        .map_err(definite)?;
    let file = checkpoint.position.file.clone();
    let began = server::file_started_at(dump, &file, config.tool_server_id())
        .await
        .map_err(definite)?;
    Ok(checkpoint.file_created_at(began).streaming_since(Some(now)))
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
