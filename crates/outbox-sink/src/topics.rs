//! Creating the topics the forwarder writes, as `[kafka.topics]` says.
//!
//! A topic template (`outbox.{aggregate_type}`) makes a new topic for each
//! new aggregate type. Where the broker does not create topics on produce
//! (most managed services; tansu), the first event of such a topic would
//! wait unacknowledged until someone created it; where it does, the topic
//! gets the broker's defaults. With `[kafka.topics]` the forwarder creates
//! a missing topic itself, before its first message, with the partitions,
//! replication factor and settings configured, as Kafka Connect's
//! `topic.creation.*` does. An account that may not create topics gets a
//! clear refusal naming the topic.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use outbox_core::{DefiniteError, ForwarderError};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};

use crate::config::{KafkaConfig, TopicSpec};
use outbox_kafka::ClientAuth;

/// Why a topic was not created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// The broker refused it (no permission, a policy, settings it does
    /// not take): asking again will not help.
    Refused(String),
    /// It could not be asked or did not answer: worth asking again.
    Failed(String),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::Refused(why) | CreateError::Failed(why) => f.write_str(why),
        }
    }
}

/// Creates `topic` as `spec` says; `Ok(false)` when it existed already.
pub async fn create_topic(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
) -> Result<bool, CreateError> {
    create(kafka, topic, spec, false).await
}

/// Asks the brokers whether `topic` may be created as `spec` says, without
/// creating it (Kafka's `validateOnly`): `Ok` if it may, or exists.
pub async fn may_create_topic(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
) -> Result<(), CreateError> {
    create(kafka, topic, spec, true).await.map(|_| ())
}

async fn create(
    kafka: &KafkaConfig,
    topic: &str,
    spec: &TopicSpec,
    validate_only: bool,
) -> Result<bool, CreateError> {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let admin = admin_client(kafka).await.map_err(CreateError::Refused)?;
    let mut new = NewTopic::new(
        topic,
        spec.partitions,
        TopicReplication::Fixed(spec.replication_factor),
    );
    for (key, value) in &spec.configs {
        new = new.set(key, value);
    }
    let results = admin
        .create_topics(
            [&new],
            // The broker's wait for the topic, and ours for the answer (not
            // the minute of socket.timeout.ms when the brokers cannot be
            // reached or refuse the sign-in).
            &AdminOptions::new()
                .operation_timeout(Some(Duration::from_secs(10)))
                .request_timeout(Some(Duration::from_secs(15)))
                .validate_only(validate_only),
        )
        .await
        .map_err(|e| CreateError::Failed(e.to_string()))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, Code::TopicAlreadyExists))) => Ok(false),
        Some(Err((
            _,
            e @ (Code::TopicAuthorizationFailed
            | Code::ClusterAuthorizationFailed
            | Code::PolicyViolation
            | Code::InvalidPartitions
            | Code::InvalidReplicationFactor
            | Code::InvalidReplicaAssignment
            | Code::InvalidConfig
            | Code::InvalidTopic),
        ))) => Err(CreateError::Refused(e.to_string())),
        Some(Err((_, e))) => Err(CreateError::Failed(e.to_string())),
        None => Err(CreateError::Failed(
            "the broker did not answer for the topic".into(),
        )),
    }
}

/// Whether `topic` exists, as the brokers' metadata of every topic says
/// (asking for it alone may create it where the brokers auto-create);
/// false when they cannot be asked.
pub async fn topic_exists(kafka: &KafkaConfig, topic: &str) -> bool {
    let Ok(admin) = admin_client(kafka).await else {
        return false;
    };
    tokio::task::block_in_place(|| {
        admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(5))
            .is_ok_and(|m| holds_topic(&m, topic))
    })
}

/// Whether `metadata` lists `topic`, without an error.
pub fn holds_topic(metadata: &rdkafka::metadata::Metadata, topic: &str) -> bool {
    metadata
        .topics()
        .iter()
        .any(|t| t.name() == topic && t.error().is_none())
}

/// An admin client with the configured sign-in. With a token command,
/// its first token is made before it is used: librdkafka asks for a token
/// on the client's main queue, which rdkafka's admin client never serves,
/// so it would never sign in.
pub async fn admin_client(kafka: &KafkaConfig) -> Result<AdminClient<ClientAuth>, String> {
    let auth = kafka.auth.for_client();
    let admin: AdminClient<ClientAuth> = kafka
        .connection_config()
        .create_with_context(auth.clone())
        .map_err(|e| outbox_kafka::shown(&e))?;
    if auth.has_token_command() {
        tokio::task::block_in_place(|| serve_token_refresh(&admin, &auth))?;
    }
    Ok(admin)
}

/// Waits (5 s at the most) on the admin client's main queue for
/// librdkafka's token refresh and answers it with a token from `auth`'s
/// command. Blocking.
fn serve_token_refresh(admin: &AdminClient<ClientAuth>, auth: &ClientAuth) -> Result<(), String> {
    use rdkafka::bindings as rd;
    let client = admin.inner().native_ptr();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // SAFETY: `client` is the live client `admin` owns for the whole call;
    // the queue reference and each event polled from it are destroyed
    // here, once each.
    unsafe {
        let queue = rd::rd_kafka_queue_get_main(client);
        let mut served = Err("librdkafka asked for no token within 5 s".to_owned());
        while std::time::Instant::now() < deadline {
            let event = rd::rd_kafka_queue_poll(queue, 100);
            if event.is_null() {
                continue;
            }
            let refresh =
                rd::rd_kafka_event_type(event) == rd::RD_KAFKA_EVENT_OAUTHBEARER_TOKEN_REFRESH;
            rd::rd_kafka_event_destroy(event);
            if refresh {
                served = set_token(client, auth);
                break;
            }
        }
        rd::rd_kafka_queue_destroy(queue);
        served
    }
}

/// Hands librdkafka a token from `auth`'s command, or the command's failure.
///
/// # Safety
/// `client` must be a live librdkafka client.
unsafe fn set_token(
    client: *mut rdkafka::bindings::rd_kafka_t,
    auth: &ClientAuth,
) -> Result<(), String> {
    use rdkafka::bindings as rd;
    use std::ffi::{CStr, CString};
    let token = match auth.generate() {
        Ok(token) => token,
        Err(why) => {
            let text = CString::new(why.to_string().replace('\0', " ")).unwrap_or_default();
            rd::rd_kafka_oauthbearer_set_token_failure(client, text.as_ptr());
            return Err(why.to_string());
        }
    };
    let (value, principal) = match (
        CString::new(token.token),
        CString::new(token.principal_name),
    ) {
        (Ok(value), Ok(principal)) => (value, principal),
        _ => return Err("the token command's token holds a NUL byte".to_owned()),
    };
    let mut error = [0 as std::os::raw::c_char; 512];
    let code = rd::rd_kafka_oauthbearer_set_token(
        client,
        value.as_ptr(),
        token.lifetime_ms,
        principal.as_ptr(),
        std::ptr::null_mut(),
        0,
        error.as_mut_ptr(),
        error.len(),
    );
    if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(CStr::from_ptr(error.as_ptr())
            .to_string_lossy()
            .into_owned())
    }
}

/// The topics known to exist, and how to create those that do not.
pub(crate) struct Creation {
    spec: TopicSpec,
    existing: Mutex<HashSet<String>>,
}

impl Creation {
    pub(crate) fn new(spec: TopicSpec) -> Self {
        Self {
            spec,
            existing: Mutex::default(),
        }
    }

    pub(crate) fn exists(&self, topic: &str) -> bool {
        self.existing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(topic)
    }

    pub(crate) fn note(&self, topic: &str) {
        self.existing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(topic.to_owned());
    }

    /// Creates `topic` (found missing); a refusal is definite and names
    /// what to do, a failure to ask is transient.
    pub(crate) async fn create(
        &self,
        kafka: &KafkaConfig,
        topic: &str,
    ) -> Result<(), ForwarderError> {
        match create_topic(kafka, topic, &self.spec).await {
            Ok(created) => {
                if created {
                    tracing::info!(
                        topic,
                        partitions = self.spec.partitions,
                        replication_factor = self.spec.replication_factor,
                        "created the topic ([kafka.topics])"
                    );
                }
                self.note(topic);
                Ok(())
            }
            Err(CreateError::Refused(why)) => Err(DefiniteError::Config(format!(
                "cannot create topic {topic} ([kafka.topics]): {why}; create it, or let the \
                 forwarder's principal create topics (CreateTopics on the cluster or the topic)"
            ))
            .into()),
            Err(CreateError::Failed(why)) => Err(ForwarderError::transient(format!(
                "cannot create topic {topic} ([kafka.topics]) now: {why}"
            ))),
        }
    }
}

/// The topics on the brokers that `allowed` lets rows write and that hold
/// messages now, but `except`, those beginning with `_` and `[ha]` groups'
/// topics: what a forwarder of this outbox published before (as far as
/// retention kept it). Blocking.
pub fn holding_messages(
    kafka: &KafkaConfig,
    allowed: &crate::allowed::AllowedTopics,
    except: &[&str],
) -> Result<Vec<String>, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    const REQUEST: Duration = Duration::from_secs(10);
    let consumer: BaseConsumer<ClientAuth> =
        outbox_kafka::reader(kafka.connection_config(), &kafka.auth, &[])
            .map_err(|e| outbox_kafka::shown(&e))?;
    let metadata = consumer.fetch_metadata(None, REQUEST).map_err(|e| {
        format!(
            "cannot list the brokers' topics: {}",
            outbox_kafka::shown(&e)
        )
    })?;
    let mut holding = Vec::new();
    for topic in metadata.topics() {
        let name = topic.name();
        if name.starts_with('_')
            || name.starts_with(crate::allowed::GROUP_TOPIC_PREFIX)
            || except.contains(&name)
            || !allowed.permits(name)
        {
            continue;
        }
        for partition in topic.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(name, partition.id(), REQUEST)
                .map_err(|e| {
                    format!(
                        "cannot read the offsets of {name}: {}",
                        outbox_kafka::shown(&e)
                    )
                })?;
            if high > low {
                holding.push(name.to_owned());
                break;
            }
        }
    }
    holding.sort();
    Ok(holding)
}
