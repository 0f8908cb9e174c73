//! Serving as one instance of an active/standby group: the lock keeper
//! beside the role loop ([`crate::role`]), which says when this
//! instance may publish; the sessions in between; the hand-over at the end.

use std::sync::Arc;

use outbox_core::DefiniteError;

use super::{Forwarder, Stopped};
use crate::config::HaSection;
use crate::group::{self, GroupLog};
use crate::role::{Role, StoreCheck};
use crate::shutdown::Shutdown;

impl Forwarder {
    /// Serves as one instance of the `ha` group until shutdown or a
    /// definite error.
    pub(super) async fn serve_in_group(
        &mut self,
        ha: HaSection,
        log: Arc<dyn GroupLog>,
        shutdown: &mut Shutdown,
    ) -> Result<(), DefiniteError> {
        let leadership = self.leadership.clone().expect("an [ha] group has a lease");
        let (release, released) = crate::shutdown::channel();
        let lock = tokio::spawn(group::hold_lock(
            self.candidates.clone(),
            self.writer.store().clone(),
            ha.clone(),
            leadership.clone(),
            self.metrics.clone(),
            released,
        ));
        let role = Role {
            log,
            writer: self.writer.clone(),
            leadership,
            metrics: self.metrics.clone(),
            ha,
            start_group: Arc::new(self.start_group.into()),
            store_check: Some(store_check(self.candidates.clone())),
        };
        let result = loop {
            if !role.next_term(shutdown).await {
                break Ok(());
            }
            self.held_off = true;
            self.metrics.set_active(true);
            match self.serve(shutdown).await {
                Ok(Stopped::Demoted) => {
                    // The producer may hold messages: it goes, unsent.
                    self.sink = None;
                    self.held_off = false;
                }
                Ok(Stopped::Shutdown) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // Hand over: the last checkpoint is shared (as a hand-over, so the
        // next holder need not hold off), then the lock freed. Only after a
        // term that got past its hold-off: before it, the previous holder
        // may still be publishing, and the next one must hold off.
        // Nor with messages still unacked: the session keeps its producer
        // only when the drain left nothing in it.
        if self.held_off && self.sink.is_some() {
            self.writer.hand_over();
        }
        release.request();
        let _ = lock.await;
        result
    }
}

/// Whether the servers can resume a checkpoint (the run's own decision,
/// [`crate::resume::decide`], without `--accept-new-source`): the vetting
/// of an instance's store before it starts a group.
fn store_check(candidates: Vec<mysql_async::Opts>) -> StoreCheck {
    Arc::new(move |own| {
        let candidates = candidates.clone();
        Box::pin(async move {
            let budget = crate::resume::PROBE_TIMEOUT * 2;
            match tokio::time::timeout(
                budget,
                crate::resume::decide(&candidates, 0, Some(&own), false),
            )
            .await
            {
                Ok(Ok(decided)) => {
                    let _ = decided.conn.disconnect().await;
                    Ok(())
                }
                Ok(Err(refused)) => Err(refused.error.to_string()),
                Err(_) => Err(format!("the servers did not answer within {budget:?}")),
            }
        })
    })
}
