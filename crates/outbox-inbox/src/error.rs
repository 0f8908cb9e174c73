//! Why a consumer cannot start or go on.

/// Why a consumer cannot start or go on; each says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The configuration is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The Kafka client could not be created or subscribed.
    #[error("Kafka: {0}")]
    Kafka(String),
}
