//! The signal that stops a task, as mini-redis's `Shutdown`: a loop that
//! may wait holds a [`Shutdown`] and selects on [`Shutdown::requested`];
//! whoever starts the task keeps the [`Trigger`].
//!
//! A run's shutdown (SIGTERM, Ctrl-C) and the release of the group's lock
//! (the lock task stops when the instance hands over) are both one.

use tokio::sync::watch;

/// Requests the shutdown of every [`Shutdown`] made with it. Dropping it
/// requests shutdown too (as mini-redis drops its sender): a task whose
/// trigger is gone has no one left to stop it otherwise.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// Listens for a shutdown request.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A trigger and the shutdown it requests.
pub fn channel() -> (Trigger, Shutdown) {
    let (sender, receiver) = watch::channel(false);
    (Trigger(sender), Shutdown(receiver))
}

impl Trigger {
    pub fn request(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Whether shutdown has been requested (or the trigger dropped).
    pub fn is_requested(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }

    /// Completes once shutdown is requested (or the trigger dropped), at
    /// once if it already was.
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_request_reaches_every_clone_even_one_that_listens_late() {
        let (trigger, mut early) = channel();
        let mut late = early.clone();
        assert!(!early.is_requested());
        let waiting = tokio::spawn(async move { early.requested().await });
        trigger.request();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting listener woke")
            .unwrap();
        assert!(late.is_requested());
        tokio::time::timeout(Duration::from_secs(5), late.requested())
            .await
            .expect("a request made before listening completes at once");
    }

    #[tokio::test]
    async fn nothing_is_requested_until_the_trigger_asks_or_goes() {
        let (trigger, mut shutdown) = channel();
        assert!(!shutdown.is_requested());
        let waited = tokio::time::timeout(Duration::from_millis(100), shutdown.requested()).await;
        assert!(waited.is_err(), "no request was made yet");
        drop(trigger);
        assert!(shutdown.is_requested());
        tokio::time::timeout(Duration::from_secs(5), shutdown.requested())
            .await
            .expect("a dropped trigger stops the task");
    }
}
