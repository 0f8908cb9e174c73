//! librdkafka's own log lines, in `tracing`.

use rdkafka::config::RDKafkaLogLevel;

/// Writes one of librdkafka's own log lines to `tracing`, at the matching level.
pub fn log_librdkafka(level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(facility, "kafka: {message}"),
        RDKafkaLogLevel::Warning => tracing::warn!(facility, "kafka: {message}"),
        _ => tracing::debug!(facility, "kafka: {message}"),
    }
}
