//! Producers: the forwarder's, the group's topic's, the inbox's dead
//! letters' and `check`'s probe are all made here, each with its own copy
//! of the configured sign-in.

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientConfig;

use crate::oauth::ClientAuth;

/// A producer over `config` (the brokers, how to reach and sign in to them,
/// and the producer's settings), reporting through the context `context`
/// makes around its own copy of `auth` (so that [`signed_in`] waits for
/// this client's first token, not another's). `what` names the producer in
/// the error: "cannot create {what}: ...".
pub fn producer<C, P>(
    config: &ClientConfig,
    auth: &ClientAuth,
    what: &str,
    context: impl FnOnce(ClientAuth) -> C,
) -> Result<P, String>
where
    C: ClientContext,
    P: FromClientConfigAndContext<C>,
{
    config
        .create_with_context(context(auth.for_client()))
        .map_err(|e| format!("cannot create {what}: {}", crate::connection::shown(&e)))
}

/// Polls `producer` until it has its first token (5 s at the most), for a
/// producer asked for metadata before anything is sent. Blocking.
pub fn signed_in(producer: &BaseProducer<ClientAuth>) {
    producer.context().sign_in(|| {
        producer.poll(Duration::from_millis(50));
    });
}
