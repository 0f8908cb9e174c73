//! The control plane across failures: which instance of an `[ha]` group
//! publishes, on which server, from which checkpoint. Real processes: the
//! broker, MariaDB servers (two in GTID replication where a database fails
//! over), forwarder instances each with its own checkpoint store.
//!
//! One module per question: [`group_checkpoint`] (from where),
//! [`lock`] (who may publish), [`database_failover`] (who resumes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::inbox::{produce, OutgoingRecord};
use harness::workload::*;
use harness::{
    unique, Broker, DbServer, Flavor, ForwarderProcess, ForwarderSetup, ForwarderToml, Record,
    TIMEOUT,
};
use mysql_async::prelude::Queryable;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

const LEASE_MS: u64 = 4000;

/// The `[ha]` section of `instance` in `group`, sharing on `topic`.
fn ha(group: &str, topic: &str, instance: &str) -> String {
    format!(
        "\n[ha]\ngroup = \"{group}\"\nlease_ms = {LEASE_MS}\ncheckpoint_topic = \"{topic}\"\ninstance = \"{instance}\"\n"
    )
}

/// A group's name and checkpoint topic (created, one partition).
struct GroupNames {
    group: String,
    topic: String,
}

impl GroupNames {
    fn new(broker: &Broker) -> Self {
        let names = GroupNames {
            group: unique("group"),
            topic: unique("checkpoints"),
        };
        broker.create_topic(&names.topic, 1);
        names
    }

    fn ha(&self, instance: &str) -> String {
        ha(&self.group, &self.topic, instance)
    }
}

/// One more instance of the scenario's group: same servers, schema and
/// topic, its own replica id and checkpoint store.
fn instance(
    servers: &[&DbServer],
    broker: &Broker,
    s: &Scenario,
    names: &GroupNames,
    name: &str,
) -> ForwarderSetup {
    instance_with(servers, broker, s, names, name, |c| c)
}

/// [`instance`] with `tweak` applied to its configuration.
fn instance_with(
    servers: &[&DbServer],
    broker: &Broker,
    s: &Scenario,
    names: &GroupNames,
    name: &str,
    tweak: impl FnOnce(ForwarderToml) -> ForwarderToml,
) -> ForwarderSetup {
    let config = forwarder_config_at(servers, broker, &s.schema, &s.topic, server_id());
    ForwarderSetup::new(&(tweak(config) + &names.ha(name)))
}

/// How many lines of `process`'s log contain `needle`.
fn log_count(process: &ForwarderProcess, needle: &str) -> usize {
    process.log().lines().filter(|l| l.contains(needle)).count()
}

/// Waits until `needle` is in `count` lines of the log.
async fn wait_for_count(process: &ForwarderProcess, needle: &str, count: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while log_count(process, needle) < count {
        assert!(
            Instant::now() < deadline,
            "{count} lines with {needle:?} not seen in {timeout:?}:\n{}",
            process.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

mod database_failover;
mod group_checkpoint;
mod lock;
