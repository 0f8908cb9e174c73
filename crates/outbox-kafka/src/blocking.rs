//! Blocking client work (a token lookup, an admin client's first token, a
//! read of the topics) called from async code.

/// Runs `work`; on a worker of a runtime with several, through
/// `block_in_place`, so that the runtime moves its other tasks (the lock
/// keeper's pings, the stream) meanwhile. Elsewhere (a plain thread,
/// librdkafka's, a single-threaded runtime) it just runs.
pub fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
