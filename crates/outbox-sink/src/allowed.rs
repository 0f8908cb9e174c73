//! Which topics a row may be routed to.
//!
//! A row names its topic through the template's placeholders
//! (`outbox.{aggregate_type}`) or its `topic_column`, so whoever writes the
//! outbox chooses it. Without a limit a row could write into another
//! group's checkpoint topic (that group would then resume from a forged
//! checkpoint and skip events), into `_schemas` or Connect's topics, or
//! create topics where the broker creates them on produce. A row's topic
//! must be in `kafka.allowed_topics` (by default the template's literal
//! prefix), and is never one beginning with `_`, an `[ha]` group's
//! checkpoint topic, or the dead-letter topic (the producer checks those).

use outbox_core::DefiniteError;

use crate::encoder::TopicTemplate;

/// The prefix of every `[ha]` group's default checkpoint topic.
pub const GROUP_TOPIC_PREFIX: &str = "outbox.forwarder.checkpoints.";

/// The topics rows may be routed to: exact names and prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedTopics {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl AllowedTopics {
    /// `entries` as `kafka.allowed_topics` lists them (`name`, or `prefix*`);
    /// none: the literal text of `template` before its first placeholder
    /// (the whole name when it has none).
    pub fn new(entries: &[String], template: &TopicTemplate) -> Result<Self, DefiniteError> {
        let mut allowed = Self {
            exact: Vec::new(),
            prefixes: Vec::new(),
        };
        if entries.is_empty() {
            match template.literal_prefix() {
                (name, false) => allowed.exact.push(name.to_owned()),
                (prefix, true) => allowed.prefixes.push(prefix.to_owned()),
            }
            return Ok(allowed);
        }
        for entry in entries {
            let (text, prefix) = match entry.strip_suffix('*') {
                Some(prefix) => (prefix, true),
                None => (entry.as_str(), false),
            };
            let legal = text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !legal || (text.is_empty() && !prefix) {
                return Err(DefiniteError::Config(format!(
                    "kafka.allowed_topics: {entry:?} is neither a topic name nor a prefix \
                     followed by '*' (a-z A-Z 0-9 . _ -)"
                )));
            }
            if prefix {
                allowed.prefixes.push(text.to_owned());
            } else {
                allowed.exact.push(text.to_owned());
            }
        }
        Ok(allowed)
    }

    pub fn permits(&self, topic: &str) -> bool {
        self.exact.iter().any(|t| t == topic) || self.prefixes.iter().any(|p| topic.starts_with(p))
    }
}

impl std::fmt::Display for AllowedTopics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries: Vec<String> = self
            .exact
            .iter()
            .cloned()
            .chain(self.prefixes.iter().map(|p| format!("{p}*")))
            .collect();
        write!(f, "{}", entries.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str], template: &str) -> Result<AllowedTopics, DefiniteError> {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        AllowedTopics::new(&entries, &template.parse().unwrap())
    }

    #[test]
    fn by_default_a_templated_topic_allows_its_literal_prefix_and_a_plain_one_itself() {
        let templated = allowed(&[], "outbox.{aggregate_type}").unwrap();
        assert!(templated.permits("outbox.order"));
        assert!(!templated.permits("_schemas"));
        assert!(!templated.permits("payments.order"));
        let plain = allowed(&[], "orders").unwrap();
        assert!(plain.permits("orders"));
        assert!(!plain.permits("orders2"));
        assert_eq!(templated.to_string(), "outbox.*");
    }

    #[test]
    fn listed_names_and_prefixes_replace_the_default() {
        let listed = allowed(&["invoices", "outbox.order*"], "outbox.{aggregate_type}").unwrap();
        assert!(listed.permits("invoices"));
        assert!(listed.permits("outbox.orders"));
        assert!(!listed.permits("outbox.payment"));
        assert!(!listed.permits("invoices.eu"));
        for bad in ["a b", "", "x/y*"] {
            assert!(allowed(&[bad], "t").is_err(), "{bad}");
        }
        // "*" alone: every topic (the fixed refusals still apply).
        assert!(allowed(&["*"], "t").unwrap().permits("anything"));
    }
}
