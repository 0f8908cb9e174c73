//! The deployable files in `deploy/` against the forwarder they describe:
//! every metric the alert rules and the dashboard use is one the forwarder
//! exports, and the rules pass `promtool check rules` and their own
//! `promtool test rules`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use outbox_forwarder::metrics::Metrics;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path)
}

/// Every series name the forwarder can export, as its `# TYPE` lines say
/// (with every optional gauge present), histograms with their suffixes.
fn exported() -> BTreeSet<String> {
    let metrics = Metrics::default();
    metrics.on_call.set_group("g");
    metrics
        .on_call
        .set_binlog_retention(Some(outbox_source::server::PurgeAfter::Never));
    metrics
        .on_call
        .set_brokers(Arc::new(outbox_sink::BrokerHealth::default()));
    let mut names = BTreeSet::new();
    for line in metrics.render().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
        names.insert(name.to_owned());
    }
    names
}

/// The `outbox_forwarder_*` names a file mentions.
fn used_in(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("outbox_forwarder_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_metric_the_rules_and_the_dashboard_use_is_exported() {
    let exported = exported();
    for (file, at_least) in [
        ("prometheus/outbox-forwarder.rules.yml", 9),
        ("grafana/outbox-forwarder.json", 20),
    ] {
        let used = used_in(&deploy(file));
        assert!(
            used.len() >= at_least,
            "{file} names only {used:?}: is the scan reading it?"
        );
        let unknown: Vec<&String> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics the forwarder does not export: {unknown:?}\nexported: {exported:?}"
        );
    }
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(deploy("prometheus"))
        .output()
        .expect("promtool runs (scripts/install-deps.sh installs Debian's prometheus)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "outbox-forwarder.rules.yml"]);
    assert!(checked.contains("SUCCESS: 12 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "outbox-forwarder.rules.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}
