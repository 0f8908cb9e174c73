//! The one-shot commands' wait for the replicas.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Opts;
use outbox_core::GtidState;
use outbox_source::server;

use super::WAIT;

/// For the one-shot commands that publish from the tables (`backfill`,
/// `repair-gap`): waits until `need` of the candidates other than `source`
/// have applied `state` (`MASTER_GTID_WAIT` / `WAIT_FOR_EXECUTED_GTID_SET`),
/// at most `timeout`; says how many had when they have not. A replica with
/// replication filters counts for nothing, as under `run`.
pub async fn wait_until_applied(
    candidates: &[Opts],
    source: usize,
    need: usize,
    state: &GtidState,
    timeout: Duration,
) -> Result<(), String> {
    let (function, target) = match state {
        GtidState::MariaDb(pos) => ("MASTER_GTID_WAIT", pos.to_string()),
        GtidState::MySql(set) => ("WAIT_FOR_EXECUTED_GTID_SET", set.to_string()),
    };
    let query = format!("SELECT {function}(?, ?)");
    let applied = |opts: Opts| {
        let (query, target) = (query.clone(), target.clone());
        async move {
            let mut conn = server::connect(&opts).await.ok()?;
            // Filtered, or filters it may not read: it proves nothing.
            let filtered = !matches!(
                server::replication_filters(&mut conn).await,
                Ok(Some(f)) if f.is_empty()
            );
            let waited: Option<Option<i64>> = match filtered {
                true => None,
                false => conn
                    .exec_first(query, (target, timeout.as_secs().max(1)))
                    .await
                    .ok(),
            };
            let _ = conn.disconnect().await;
            // 0: applied; -1 (MariaDB) or 1 (MySQL): not in time.
            (waited.flatten() == Some(0)).then_some(())
        }
    };
    let asked = candidates
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != source)
        .map(|(_, opts)| tokio::time::timeout(timeout + WAIT * 3, applied(opts.clone())));
    let have = futures_util::future::join_all(asked)
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(Some(()))))
        .count();
    if have >= need {
        Ok(())
    } else {
        Err(format!(
            "{have} of the other candidates applied {target} within {timeout:?} ({need} needed)"
        ))
    }
}
