//! Sending at once what the producer holds, without waiting out `linger.ms`.
//!
//! librdkafka keeps a partition's messages up to `linger.ms` so that one
//! produce request carries many. A forwarder reading a backlog wants that;
//! one that has caught up with the binlog only pays the wait, once per
//! transaction. librdkafka cannot change `linger.ms` on a live producer, but
//! while a call to `rd_kafka_flush` lasts its broker threads take the linger
//! as elapsed (they are woken for it and send what they hold). [`Kicker`]
//! makes such a call, a few milliseconds long at most, on a thread of its
//! own, each time it is asked: the asking task never blocks. Calls are at
//! least [`INTERVAL`] apart, requests made meanwhile are served by one more
//! call, so that however often it is asked, kicks cannot turn a steady
//! stream into one produce request per message. When to ask is the caller's
//! business (the forwarder's rule is `outbox_forwarder::pipeline::linger`).

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};

/// How long one kick holds librdkafka's flushing state at most, in
/// milliseconds (the call returns once every message is delivered): long
/// enough for the broker threads it wakes to run and send on a busy machine,
/// since one that wakes after the call waits out the linger.
const HOLD_MS: i32 = 3;

/// The shortest time from one kick's start to the next's.
const INTERVAL: Duration = Duration::from_millis(2);

#[derive(Default)]
struct State {
    requested: bool,
    stopped: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The thread that sends a producer's held messages on request.
pub(crate) struct Kicker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Kicker {
    /// A kicker for `producer`; it stops when dropped (or when the producer
    /// is gone).
    pub(crate) fn start<C: ProducerContext + 'static>(
        producer: Weak<ThreadedProducer<C>>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("producer kick".into())
            .spawn({
                let shared = shared.clone();
                move || serve(&shared, &producer)
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for what the producer holds to be sent now; returns at once.
    pub(crate) fn kick(&self) {
        let mut state = self.shared.state.lock().expect("not poisoned");
        if !state.requested {
            state.requested = true;
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Kicker {
    fn drop(&mut self) {
        self.shared.state.lock().expect("not poisoned").stopped = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve<C: ProducerContext + 'static>(shared: &Shared, producer: &Weak<ThreadedProducer<C>>) {
    loop {
        {
            let mut state = shared.state.lock().expect("not poisoned");
            while !state.requested && !state.stopped {
                state = shared.wake.wait(state).expect("not poisoned");
            }
            if state.stopped {
                return;
            }
            state.requested = false;
        }
        let started = Instant::now();
        let Some(producer) = producer.upgrade() else {
            return;
        };
        // SAFETY: the handle belongs to a live producer, kept alive by
        // `producer` for the whole call; librdkafka's flush may be called
        // from any thread, concurrently with producing and polling. Its
        // result (whether every message was delivered within HOLD_MS) is of
        // no interest here: the delivery reports say that.
        unsafe {
            rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), HOLD_MS);
        }
        drop(producer);
        // The rest of the interval, unless told to stop meanwhile.
        let rest = INTERVAL.saturating_sub(started.elapsed());
        let state = shared.state.lock().expect("not poisoned");
        drop(
            shared
                .wake
                .wait_timeout_while(state, rest, |state| !state.stopped)
                .expect("not poisoned"),
        );
    }
}
