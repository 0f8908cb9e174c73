//! A Prometheus server (Debian's `prometheus` package) started for one
//! test on a free loopback port, scraping given targets every second with
//! given rules, evaluated every second; asked through its HTTP API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;
use crate::http::try_http_get;

pub struct Prometheus {
    pub port: u16,
    _dir: tempfile::TempDir,
    child: Child,
}

impl Prometheus {
    /// Scrapes `targets` (`host:port`) as job `outbox-forwarder`, with the
    /// rules in `rules` (a rule file's text). Waits until it is ready.
    pub async fn start(targets: &[String], rules: &str) -> Prometheus {
        let dir = crate::scratch_dir("prometheus");
        std::fs::write(dir.path().join("rules.yml"), rules).unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - rules.yml\n\
             scrape_configs:\n  - job_name: outbox-forwarder\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let mut command = Command::new("prometheus");
        command
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // Keeps the trace ids OpenMetrics targets attach to samples.
            .arg("--enable-feature=exemplar-storage")
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap());
        let child = crate::process::spawn(command)
            .expect("prometheus starts (scripts/install-deps.sh installs Debian's prometheus)");
        let prometheus = Prometheus {
            port,
            _dir: dir,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(try_http_get(port, "/-/ready"), Ok((200, _))) {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready:\n{}",
                prometheus.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        prometheus
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn api(&self, path: &str) -> serde_json::Value {
        let (status, body) = try_http_get(self.port, path)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()));
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    /// The state of alert `name` (`pending`, `firing`), `None` when inactive.
    pub fn alert_state(&self, name: &str) -> Option<String> {
        let alerts = self.api("/api/v1/alerts");
        alerts["data"]["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .find(|a| a["labels"]["alertname"] == name)
            .map(|a| a["state"].as_str().unwrap_or_default().to_owned())
    }

    /// Waits until alert `name` is in `state` (`None`: inactive).
    pub async fn wait_for_alert(&self, name: &str, state: Option<&str>, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.alert_state(name);
            if now.as_deref() == state {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "alert {name} is {now:?}, not {state:?}, after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// What Prometheus says of its scrape targets (for failure messages).
    pub fn targets(&self) -> String {
        self.api("/api/v1/targets").to_string()
    }

    /// Waits until every target was scraped successfully.
    pub async fn wait_for_scrapes(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.query("min(up)") != Some(1.0) {
            assert!(
                Instant::now() < deadline,
                "targets not up: {}",
                self.targets()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The value of an instant query whose result is one number.
    pub fn query(&self, expr: &str) -> Option<f64> {
        let answer = self.api(&format!("/api/v1/query?query={}", encoded(expr)));
        let value = answer["data"]["result"].as_array()?.first()?["value"][1].clone();
        value.as_str()?.parse().ok()
    }

    /// The trace ids kept as exemplars of the series `expr` selects, over
    /// the last hour.
    pub fn exemplar_trace_ids(&self, expr: &str) -> Vec<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let answer = self.api(&format!(
            "/api/v1/query_exemplars?query={}&start={}&end={}",
            encoded(expr),
            now - 3600,
            now + 60
        ));
        answer["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["labels"]["trace_id"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `expr` as a URL query value.
fn encoded(expr: &str) -> String {
    expr.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The rule file at `path` with `from` replaced by `to` (panics if absent).
pub fn rules_with(path: &Path, replacements: &[(&str, &str)]) -> String {
    let mut text = std::fs::read_to_string(path).unwrap();
    for (from, to) in replacements {
        text = crate::replaced(&text, from, to);
    }
    text
}
