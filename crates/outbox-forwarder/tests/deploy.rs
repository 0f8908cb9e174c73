//! The deployable files in `deploy/` against the forwarder they describe:
//! every metric the alert rules and the dashboard use is one the forwarder
//! exports, and the rules pass `promtool check rules` and their own
//! `promtool test rules`; the Kubernetes manifests pass the Kubernetes
//! schemas and name the ports, paths, files and variables the forwarder
//! has.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use outbox_forwarder::metrics::{GroupState, Metrics};

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
    // And the inbox consumers' (OpenMetrics: a counter's samples end in
    // `_total`).
    let inbox = outbox_inbox::metrics::InboxMetrics::new("c");
    for line in inbox.render().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
        let suffixes: &[&str] = match kind {
            "histogram" => &["_bucket", "_sum", "_count"],
            "counter" => &["_total"],
            _ => &[""],
        };
        for suffix in suffixes {
            names.insert(format!("{name}{suffix}"));
        }
    }
    names
}

/// The `outbox_forwarder_*` and `outbox_inbox_*` names a file mentions.
fn used_in(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = ["outbox_forwarder_", "outbox_inbox_"]
        .iter()
        .filter_map(|prefix| rest.find(prefix))
        .min()
    {
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
        ("prometheus/outbox-forwarder.rules.yml", 10),
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
    assert!(checked.contains("SUCCESS: 15 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "outbox-forwarder.rules.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// A YAML file's documents as JSON (PyYAML comes with kubernetes-validate).
fn yaml_documents(path: &Path) -> Vec<serde_json::Value> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn manifest(name: &str) -> serde_json::Value {
    let mut documents = yaml_documents(&deploy("kubernetes").join(name));
    assert_eq!(documents.len(), 1, "{name}");
    documents.remove(0)
}

/// The `.yaml` files of `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    files.sort();
    files
}

/// A kustomization's `resources`, sorted.
fn resources_of(kustomization: &serde_json::Value) -> Vec<String> {
    let mut listed: Vec<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    listed
}

/// Every Kubernetes manifest is valid against the Kubernetes schemas
/// (strictly: no unknown fields), the kustomization lists every one but
/// the Secret's example, and the monitoring component lists its own.
#[test]
fn the_kubernetes_manifests_pass_the_kubernetes_schemas_and_the_kustomization_lists_them() {
    let dir = deploy("kubernetes");
    let files = yaml_files(&dir);
    let component = yaml_files(&dir.join("components/monitoring"));
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .args(&files)
        .args(
            component
                .iter()
                .map(|f| format!("components/monitoring/{f}")),
        )
        .current_dir(&dir)
        .output()
        .expect("kubernetes-validate runs (scripts/install-deps.sh installs it from PyPI)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // Only the kinds outside Kubernetes itself go unchecked.
    for line in text.lines().filter(|l| l.contains("Couldn't find schema")) {
        assert!(
            [
                "Kustomization",
                "Component",
                "ServiceMonitor",
                "PrometheusRule"
            ]
            .iter()
            .any(|kind| line.contains(&format!("kind {kind}"))),
            "{line}"
        );
    }
    let expected: Vec<String> = files
        .into_iter()
        .filter(|f| f != "kustomization.yaml" && f != "secret.example.yaml")
        .collect();
    assert_eq!(resources_of(&manifest("kustomization.yaml")), expected);
    let expected: Vec<String> = component
        .into_iter()
        .filter(|f| f != "kustomization.yaml")
        .collect();
    assert_eq!(
        resources_of(&manifest("components/monitoring/kustomization.yaml")),
        expected
    );
}

/// `kubectl kustomize` renders the base without the Prometheus Operator's
/// kinds (a cluster without its CRDs refuses them), and with the
/// monitoring component adds its ServiceMonitor and the alert rules as a
/// PrometheusRule, the same rules as deploy/prometheus's.
#[test]
fn the_monitoring_component_adds_the_operators_kinds_and_the_same_alert_rules() {
    let kinds = |rendered: &[serde_json::Value]| -> Vec<String> {
        let mut kinds: Vec<String> = rendered
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_owned())
            .collect();
        kinds.sort();
        kinds
    };
    let base = kustomize(&deploy("kubernetes"));
    assert_eq!(
        kinds(&base),
        [
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Service"
        ]
    );
    let overlay = tempfile::tempdir().unwrap();
    // kustomize takes no absolute path to a base.
    let base = format!(
        "{}{}",
        "../".repeat(overlay.path().components().count() - 1),
        deploy("kubernetes")
            .canonicalize()
            .unwrap()
            .strip_prefix("/")
            .unwrap()
            .display()
    );
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\ncomponents:\n  - {base}/components/monitoring\n"
        ),
    )
    .unwrap();
    let with = kustomize(overlay.path());
    assert_eq!(
        kinds(&with),
        [
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "PrometheusRule",
            "Service",
            "ServiceMonitor"
        ]
    );
    let rule = with.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    let rules = yaml_documents(&deploy("prometheus/outbox-forwarder.rules.yml"));
    assert_eq!(
        rule["spec"]["groups"], rules[0]["groups"],
        "components/monitoring/prometheusrule.yaml has the rules of deploy/prometheus"
    );
    // The scrape selects the Service (the kustomization's labels).
    let monitor = with.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
    let service = with.iter().find(|d| d["kind"] == "Service").unwrap();
    for (label, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label}");
    }
}

/// `kubectl kustomize dir`, as JSON documents.
fn kustomize(dir: &Path) -> Vec<serde_json::Value> {
    let out = Command::new("kubectl")
        .args(["kustomize"])
        .arg(dir)
        .output()
        .expect("kubectl runs (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(rendered.path(), &out.stdout).unwrap();
    yaml_documents(rendered.path())
}

/// What the manifests name exists: the configuration in the ConfigMap
/// loads, with the variables the Deployment sets from the Secret's keys;
/// the metrics port, the probes' paths (asked of the forwarder's own
/// listener), the config path and the checkpoint's volume agree; the
/// user is the image's.
#[test]
fn the_kubernetes_manifests_name_what_the_forwarder_has() {
    let configmap = manifest("configmap.yaml");
    let deployment = manifest("deployment.yaml");
    let secret = manifest("secret.example.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let init = &pod["initContainers"][0];

    let mounts = container["volumeMounts"].as_array().unwrap();
    let mount_of = |volume: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == volume)
            .and_then(|m| m["mountPath"].as_str())
            .unwrap()
            .to_owned()
    };

    // No service-account token, no secret in the environment: the
    // Secret's keys are files the configuration reads, each of them.
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert!(container["env"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["valueFrom"].is_null()));
    let secrets_volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "secrets")
        .unwrap();
    assert_eq!(
        secrets_volume["secret"]["secretName"],
        secret["metadata"]["name"]
    );
    let dir = tempfile::tempdir().unwrap();
    let toml = configmap["data"]["forwarder.toml"].as_str().unwrap();
    let secrets_at = mount_of("secrets");
    for (key, _) in secret["stringData"].as_object().unwrap() {
        assert!(
            toml.contains(&format!("\"{secrets_at}/{key}\"")),
            "{key} is read"
        );
        std::fs::write(dir.path().join(key), "from-the-secret").unwrap();
    }
    let config_path = dir.path().join("forwarder.toml");
    std::fs::write(
        &config_path,
        toml.replace(&secrets_at, &dir.path().display().to_string()),
    )
    .unwrap();
    let config = outbox_forwarder::ForwarderConfig::load(&config_path).unwrap();
    assert!(config.ha.is_some(), "two replicas are an [ha] group");

    // The config file is where the container is told to read it.
    let args_of = |container: &serde_json::Value| -> Vec<String> {
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        args_of(container),
        [
            "run",
            "--config",
            &format!("{}/forwarder.toml", mount_of("config"))
        ]
    );
    assert!(config
        .checkpoint
        .path
        .starts_with(mount_of("data").as_str()));
    // Before it, the group's first start, on the same image, file and
    // secrets.
    assert_eq!(
        args_of(init),
        [
            "group",
            "start",
            "--config",
            &format!("{}/forwarder.toml", mount_of("config"))
        ]
    );
    assert_eq!(init["image"], container["image"]);
    for mount in init["volumeMounts"].as_array().unwrap() {
        assert!(mounts.contains(mount), "{mount}");
    }
    assert_eq!(init["securityContext"], container["securityContext"]);

    // The port, and the probes' paths on it, as the forwarder serves them.
    let listen = config.metrics.listen.expect("metrics on");
    assert_eq!(container["ports"][0]["name"], "metrics");
    assert_eq!(container["ports"][0]["containerPort"], listen.port());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let metrics = Arc::new(Metrics::default());
    metrics
        .on_call
        .set_group(&config.ha.as_ref().unwrap().group);
    let _server = runtime
        .block_on(outbox_forwarder::http::bind(
            address,
            outbox_forwarder::http::Health {
                metrics: metrics.clone(),
                broker: Arc::new(outbox_sink::BrokerHealth::default()),
                max_lag: std::time::Duration::from_secs(60),
                acked: tokio::sync::watch::channel(None).1,
                adopted: tokio::sync::watch::channel(None).1,
                stored: None,
            },
        ))
        .unwrap();
    let ask = |probe: &str| {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["port"], "metrics", "{probe}");
        let path = get["path"].as_str().unwrap();
        outbox_forwarder::http::probe(address, path, std::time::Duration::from_secs(5))
    };
    for probe in ["livenessProbe", "startupProbe"] {
        assert_eq!(ask(probe), Ok("ok\n".to_string()), "{probe}");
    }
    // Ready once the group has started, whether active or standby; not
    // while it never started, saying what starts it.
    let never = (GroupState::NeverStarted, "group start");
    let unread = (GroupState::Unknown, "not been read yet");
    for (state, said) in [never, unread] {
        metrics.set_group_state(state);
        let answer = ask("readinessProbe");
        assert!(
            answer
                .as_ref()
                .is_err_and(|e| e.contains("503") && e.contains(said)),
            "{state:?}: {answer:?}"
        );
    }
    metrics.set_group_state(GroupState::Started);
    metrics.set_active(false);
    assert_eq!(
        ask("readinessProbe"),
        Ok("ready\n".to_string()),
        "a standby"
    );
    let missing =
        outbox_forwarder::http::probe(address, "/nope", std::time::Duration::from_secs(5));
    assert!(
        missing.as_ref().is_err_and(|e| e.contains("404")),
        "a path the forwarder lacks fails: {missing:?}"
    );

    // The image's user (the Dockerfile's USER) and the Service's port.
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Dockerfile"))
            .unwrap();
    let user = &pod["securityContext"];
    assert!(dockerfile.contains(&format!(
        "USER {}:{}",
        user["runAsUser"], user["runAsGroup"]
    )));
    let service = manifest("service.yaml");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
    let monitor = manifest("components/monitoring/servicemonitor.yaml");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
}

/// The version is the workspace's: the changelog's newest entry and the
/// kustomization's image tag name it.
#[test]
fn the_version_is_stated_once_and_followed() {
    let version = env!("CARGO_PKG_VERSION");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    let newest = changelog
        .lines()
        .find(|l| l.starts_with("## "))
        .expect("an entry");
    assert!(newest.starts_with(&format!("## {version} ")), "{newest}");
    let kustomization = manifest("kustomization.yaml");
    assert_eq!(kustomization["images"][0]["newTag"], version);
}

/// Every alert links its runbook entry, and the entry is in
/// docs/operations.md under that anchor.
#[test]
fn every_alert_links_its_runbook_entry() {
    let rules = yaml_documents(&deploy("prometheus/outbox-forwarder.rules.yml"));
    let operations = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .unwrap();
    let mut alerts = 0;
    for group in rules[0]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let anchor = alert.to_ascii_lowercase();
            assert_eq!(
                rule["annotations"]["runbook_url"],
                format!("docs/operations.md#{anchor}"),
                "{alert}"
            );
            let entry = format!("<a id=\"{anchor}\"></a>");
            let at = operations
                .find(&entry)
                .unwrap_or_else(|| panic!("no runbook entry for {alert}"));
            let heading = operations[at + entry.len()..].trim_start();
            assert!(
                heading.starts_with('#') && heading.lines().next().unwrap().contains(alert),
                "the entry for {alert} is headed by its name: {}",
                heading.lines().next().unwrap_or("")
            );
        }
    }
    assert_eq!(alerts, 15, "the rules' alerts");
}

/// `scripts/image.sh`, with an engine that records what it is asked: the
/// build gets the workspace's version and the checkout's commit, the image
/// both tags, and the script prints the engine's digest of it (and nothing
/// else on stdout, for a release job to capture).
#[test]
fn the_image_script_tags_the_version_and_the_commit_and_prints_the_digest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let asked = dir.path().join("asked");
    let engine = dir.path().join("engine");
    std::fs::write(
        &engine,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nif [ \"$1 $2\" = \"image inspect\" ]; then echo sha256:0123abcd; fi\n",
            asked.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&engine, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(root.join("scripts/image.sh"))
        .env("IMAGE", "registry.example.com/outbox-forwarder")
        .env("CONTAINER_ENGINE", &engine)
        .args(["--", "--target", "runtime"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sha256:0123abcd\n");
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(&root)
        .output()
        .unwrap();
    let commit = String::from_utf8(commit.stdout).unwrap().trim().to_owned();
    let version = env!("CARGO_PKG_VERSION");
    let asked = std::fs::read_to_string(&asked).unwrap();
    let build = asked.lines().next().unwrap();
    let tag = format!("registry.example.com/outbox-forwarder:{version}-{commit}");
    for expected in [
        format!("build --build-arg VERSION={version} --build-arg COMMIT={commit}"),
        format!("--tag registry.example.com/outbox-forwarder:{version} --tag {tag}"),
        "--target runtime .".to_string(),
    ] {
        assert!(build.contains(&expected), "{expected} in {build}");
    }
    // The digest is the commit's tag's (a checkout with changes has
    // "-dirty" after the commit, in the build argument and the tag).
    let inspect = asked.lines().nth(1).unwrap();
    assert!(inspect.starts_with("image inspect --format {{.Id}} "));
    assert!(inspect.contains(&tag), "{inspect}");
}
