//! The forwarder's test configuration, built field by field.
//!
//! Variants are made with typed setters rather than by replacing text in
//! the rendered TOML: a replacement whose pattern no longer matches changes
//! nothing, silently, and the test then checks the default. Where a test
//! must edit text (a credential inside a URL, a TLS line), [`replaced`]
//! panics if the pattern is absent.

use std::fmt;
use std::ops::Add;

/// A `run` configuration for one test, rendered by its `Display`.
#[derive(Debug, Clone)]
pub struct ForwarderToml {
    /// `mysql.url`: one URL, or the candidates in order.
    urls: Vec<String>,
    server_id: u32,
    /// `[mysql]` keys beside `url`, `server_id` and `heartbeat_ms`.
    mysql: Vec<(String, String)>,
    /// `[outbox]` keys beside `tables`, as raw TOML values.
    outbox: Vec<(String, String)>,
    tables: Vec<String>,
    brokers: String,
    topic: String,
    /// `[kafka]` keys beside `brokers` and `topic`, as raw TOML values.
    kafka: Vec<(String, String)>,
    /// `[kafka.properties]`, in order.
    properties: Vec<(String, String)>,
    start: String,
    flush_interval_ms: u64,
    /// `[checkpoint]` keys beside `path`, `start` and the interval.
    checkpoint: Vec<(String, String)>,
    /// Whole sections appended after `[retry]` (`[ha]`, `[metrics]`, ...).
    sections: Vec<String>,
}

impl ForwarderToml {
    /// The standard configuration: `schema.outbox_event` → `topic`, short
    /// intervals so tests run fast, `properties` (the broker's TLS/SASL
    /// settings) after a 4 MB `message.max.bytes`.
    pub fn new(
        urls: Vec<String>,
        brokers: String,
        properties: &[(String, String)],
        schema: &str,
        topic: &str,
        server_id: u32,
    ) -> Self {
        let mut all = vec![("message.max.bytes".to_string(), "4194304".to_string())];
        all.extend(properties.iter().cloned());
        Self {
            urls,
            server_id,
            mysql: Vec::new(),
            outbox: Vec::new(),
            tables: vec![format!("{schema}.outbox_event")],
            brokers,
            topic: topic.to_owned(),
            kafka: Vec::new(),
            properties: all,
            start: "latest".into(),
            flush_interval_ms: 100,
            checkpoint: Vec::new(),
            sections: Vec::new(),
        }
    }

    /// `mysql.url`: these candidates instead.
    pub fn urls(mut self, urls: Vec<String>) -> Self {
        self.urls = urls;
        self
    }

    /// A `[mysql]` key, `value` as TOML (quote strings).
    pub fn mysql(mut self, key: &str, value: &str) -> Self {
        self.mysql.push((key.into(), value.into()));
        self
    }

    /// `outbox.tables` instead of `schema.outbox_event`.
    pub fn tables(mut self, tables: Vec<String>) -> Self {
        self.tables = tables;
        self
    }

    /// An `[outbox]` key, `value` as TOML (quote strings).
    pub fn outbox(mut self, key: &str, value: &str) -> Self {
        self.outbox.push((key.into(), value.into()));
        self
    }

    /// A `[kafka]` key, `value` as TOML (quote strings).
    pub fn kafka(mut self, key: &str, value: &str) -> Self {
        self.kafka.push((key.into(), value.into()));
        self
    }

    /// Sets a librdkafka property (replacing one already set).
    pub fn property(mut self, key: &str, value: &str) -> Self {
        match self.properties.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value.into(),
            None => self.properties.push((key.into(), value.into())),
        }
        self
    }

    /// Leaves a librdkafka property out; panics if it was not set.
    pub fn without_property(mut self, key: &str) -> Self {
        let before = self.properties.len();
        self.properties.retain(|(k, _)| k != key);
        assert!(self.properties.len() < before, "{key} was not set");
        self
    }

    /// `checkpoint.start`.
    pub fn start(mut self, start: impl fmt::Display) -> Self {
        self.start = start.to_string();
        self
    }

    /// `checkpoint.flush_interval_ms`.
    pub fn flush_interval_ms(mut self, ms: u64) -> Self {
        self.flush_interval_ms = ms;
        self
    }

    /// A `[checkpoint]` key, `value` as TOML.
    pub fn checkpoint(mut self, key: &str, value: &str) -> Self {
        self.checkpoint.push((key.into(), value.into()));
        self
    }

    /// Appends a whole section (its header included).
    pub fn section(mut self, text: &str) -> Self {
        self.sections.push(text.to_owned());
        self
    }
}

/// `config + "[section]..."` appends a section.
impl Add<&str> for ForwarderToml {
    type Output = ForwarderToml;

    fn add(self, section: &str) -> ForwarderToml {
        self.section(section)
    }
}

impl Add<&String> for ForwarderToml {
    type Output = ForwarderToml;

    fn add(self, section: &String) -> ForwarderToml {
        self.section(section)
    }
}

impl fmt::Display for ForwarderToml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| format!("{u:?}")).collect();
        let url = match urls.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let tables: Vec<String> = self.tables.iter().map(|t| format!("{t:?}")).collect();
        writeln!(f)?;
        writeln!(
            f,
            "[mysql]\nurl = {url}\nserver_id = {}\nheartbeat_ms = 1000",
            self.server_id
        )?;
        for (key, value) in &self.mysql {
            writeln!(f, "{key} = {value}")?;
        }
        writeln!(f, "[outbox]")?;
        for (key, value) in &self.outbox {
            writeln!(f, "{key} = {value}")?;
        }
        writeln!(f, "tables = [{}]", tables.join(", "))?;
        writeln!(
            f,
            "[kafka]\nbrokers = {:?}\ntopic = {:?}",
            self.brokers, self.topic
        )?;
        for (key, value) in &self.kafka {
            writeln!(f, "{key} = {value}")?;
        }
        writeln!(f, "[kafka.properties]")?;
        for (key, value) in &self.properties {
            f.write_str(&crate::workload::property_line(key, value))?;
        }
        writeln!(
            f,
            "[checkpoint]\npath = \"{{checkpoint}}\"\nstart = {:?}\nflush_interval_ms = {}",
            self.start, self.flush_interval_ms
        )?;
        for (key, value) in &self.checkpoint {
            writeln!(f, "{key} = {value}")?;
        }
        writeln!(
            f,
            "[retry]\ninitial_backoff_ms = 100\nmax_backoff_ms = 1000"
        )?;
        for section in &self.sections {
            f.write_str(section)?;
            if !section.ends_with('\n') {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

/// `text` with every `from` replaced by `to`; panics if `text` has no
/// `from`, which would otherwise leave the variant silently untested.
pub fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in:\n{text}");
    text.replace(from, to)
}
