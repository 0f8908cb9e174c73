//! The forwarder's image under podman, run as users run it: built from the
//! repository's Dockerfile, on the host network (the harness's servers bind
//! to loopback), with a read-only root file system, as the image's
//! unprivileged user, the configuration mounted read-only and the
//! checkpoint on a volume.
//!
//! No image registry is reachable here, so the Dockerfile's public base
//! images are replaced: the runtime stage's by Debian bookworm made with
//! debootstrap (`scripts/install-deps.sh` caches it), and the build stage by
//! the binaries this suite built (the Dockerfile's `prebuilt` target), so
//! that the suite does not compile them twice. The Dockerfile's own runtime
//! stage, its user, labels, health check and entry point are the ones built.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use crate::forwarder::{forwarder_binary, ForwarderSetup};

/// The image's unprivileged user (the Dockerfile's `USER`).
pub const IMAGE_USER: &str = "10001:10001";
/// Where the image keeps its configuration and its checkpoint.
const CONFIG_IN_IMAGE: &str = "/etc/outbox-forwarder/forwarder.toml";
const DATA_IN_IMAGE: &str = "/var/lib/outbox-forwarder";
/// The debootstrapped stand-in for `debian:bookworm-slim`.
const BASE_IMAGE: &str = "localhost/outbox-test/debian:bookworm-ssl-curl-sasl-tini";
pub const IMAGE: &str = "localhost/outbox-forwarder:test";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// `podman` with the test settings (`tests/podman/containers.conf`: runc,
/// cgroupfs, no default ulimits).
pub fn podman() -> Command {
    let mut command = Command::new("podman");
    command.env(
        "CONTAINERS_CONF",
        repository().join("tests/podman/containers.conf"),
    );
    command
}

/// Runs podman with `args`; panics with its output if it fails.
pub fn podman_ok(args: &[&str]) -> Output {
    let output = podman().args(args).output().expect("podman runs");
    assert!(
        output.status.success(),
        "podman {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The base image, imported from the debootstrap tarball
/// `scripts/install-deps.sh` makes, if podman does not have it yet.
pub fn base_image() -> &'static str {
    let exists = podman()
        .args(["image", "exists", BASE_IMAGE])
        .status()
        .expect("podman runs");
    if !exists.success() {
        let home = std::env::var("HOME").expect("HOME");
        let tarball = std::env::var("OUTBOX_IMAGE_BASE").unwrap_or_else(|_| {
            format!("{home}/.cache/outbox-forwarder/debian-bookworm-ssl-curl-sasl-tini.tar")
        });
        assert!(
            Path::new(&tarball).exists(),
            "{tarball} is missing: scripts/install-deps.sh makes it"
        );
        podman_ok(&["import", &tarball, BASE_IMAGE]);
    }
    BASE_IMAGE
}

/// The forwarder's image, built once per test process from the
/// Dockerfile's runtime stage and this build's binary.
pub fn image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let base = base_image();
        // The Dockerfile's `prebuilt` target: what its COPY lines name,
        // with this build's binaries in prebuilt/.
        let context = crate::scratch_dir("image-context");
        let prebuilt = context.path().join("prebuilt");
        let docker = context.path().join("docker");
        std::fs::create_dir_all(&prebuilt).unwrap();
        std::fs::create_dir_all(&docker).unwrap();
        let forwarder = forwarder_binary();
        let planner = forwarder.with_file_name("notification-planner");
        for binary in [&forwarder, &planner] {
            assert!(binary.exists(), "{} (cargo build --bins)", binary.display());
            std::fs::copy(binary, prebuilt.join(binary.file_name().unwrap())).unwrap();
        }
        for config in ["forwarder.toml", "notification-planner.toml"] {
            std::fs::copy(
                repository().join("docker").join(config),
                docker.join(config),
            )
            .unwrap();
        }
        let dockerfile = repository().join("Dockerfile").display().to_string();
        podman_ok(&[
            "build",
            "--quiet",
            // HEALTHCHECK is a Docker image field (OCI images have none).
            "--format",
            "docker",
            "--file",
            &dockerfile,
            "--target",
            "prebuilt",
            "--build-arg",
            &format!("RUNTIME_IMAGE={base}"),
            "--build-arg",
            &format!("VERSION={}", env!("CARGO_PKG_VERSION")),
            "--build-arg",
            "COMMIT=test",
            "--tag",
            IMAGE,
            &context.path().display().to_string(),
        ]);
        // The images these replaced, so that runs do not pile them up.
        podman_ok(&["image", "prune", "--force"]);
    });
    IMAGE
}

/// A container of [`image`] running `run` on `setup`'s configuration.
pub struct Container {
    pub name: String,
    /// The checkpoint volume, on the host.
    pub volume: PathBuf,
    pub log_path: PathBuf,
}

impl Container {
    /// Starts the forwarder's container on `setup`: its configuration,
    /// with the checkpoint path moved to the image's volume, mounted
    /// read-only; `extra` are more `podman run` options.
    pub fn run(setup: &ForwarderSetup, extra: &[&str]) -> Container {
        let image = image();
        let host_checkpoint = setup.checkpoint_path().display().to_string();
        let config = std::fs::read_to_string(&setup.config_path).unwrap();
        assert!(config.contains(&host_checkpoint), "{config}");
        let config = config.replace(&host_checkpoint, &format!("{DATA_IN_IMAGE}/checkpoint"));
        let config_path = setup.dir.path().join("container.toml");
        std::fs::write(&config_path, config).unwrap();
        let volume = setup.dir.path().join("volume");
        std::fs::create_dir_all(&volume).unwrap();
        // The image's user owns its volume, as a fresh named volume would be.
        let (uid, gid) = IMAGE_USER.split_once(':').unwrap();
        std::os::unix::fs::chown(&volume, uid.parse().ok(), gid.parse().ok()).unwrap();
        let name = setup
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
        let log_path = setup.dir.path().join("container.log");
        let mut args: Vec<String> = [
            "run",
            "--detach",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
            // The health check is run by `healthcheck` below: podman's
            // timer for it needs systemd.
            "--health-interval",
            "disable",
            "--log-driver",
            "k8s-file",
            "--log-opt",
            &format!("path={}", log_path.display()),
            "--env",
            "RUST_LOG=info,outbox_forwarder=debug,outbox_source=debug",
            "--volume",
            &format!("{}:{CONFIG_IN_IMAGE}:ro", config_path.display()),
            "--volume",
            &format!("{}:{DATA_IN_IMAGE}", volume.display()),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(image.to_owned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        podman_ok(&args);
        Container {
            name,
            volume,
            log_path,
        }
    }

    /// What the container wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits until the log has a line containing `needle`, `count` times
    /// in all from the start (across restarts).
    pub async fn wait_for_log_count(&self, needle: &str, count: usize, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let log = self.log();
            if log.lines().filter(|l| l.contains(needle)).count() >= count {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "container {} logged {needle:?} fewer than {count} times:\n{log}",
                self.name
            );
            assert_ne!(
                self.state(),
                "exited",
                "container {} exited:\n{log}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `running`, `exited`, ...
    pub fn state(&self) -> String {
        self.inspect("{{.State.Status}}")
    }

    /// What `command` prints, run inside the container.
    pub fn exec(&self, command: &[&str]) -> String {
        let mut args = vec!["exec", self.name.as_str()];
        args.extend_from_slice(command);
        let output = podman_ok(&args);
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    pub fn inspect(&self, format: &str) -> String {
        let output = podman_ok(&["inspect", "--format", format, &self.name]);
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The exit code of the stopped container.
    pub fn exit_code(&self) -> i32 {
        self.inspect("{{.State.ExitCode}}").parse().unwrap()
    }

    /// The image's HEALTHCHECK, run now: whether it passed.
    pub fn healthcheck(&self) -> bool {
        podman()
            .args(["healthcheck", "run", &self.name])
            .status()
            .expect("podman runs")
            .success()
    }

    /// `podman stop`: SIGTERM (the image's STOPSIGNAL), SIGKILL after
    /// `grace`. Returns the exit code.
    pub fn stop(&self, grace: Duration) -> i32 {
        podman_ok(&["stop", "--time", &grace.as_secs().to_string(), &self.name]);
        self.exit_code()
    }

    /// `podman kill` (SIGKILL): no drain, no last checkpoint.
    pub fn kill9(&self) -> i32 {
        podman_ok(&["kill", "--signal", "KILL", &self.name]);
        podman_ok(&["wait", &self.name]);
        self.exit_code()
    }

    /// Starts the stopped container again (same volume, same options).
    pub fn start(&self) {
        podman_ok(&["start", &self.name]);
    }

    /// Runs `command` in the image (not in this container) as `podman run
    /// --rm` would, with `extra` options.
    pub fn one_off(extra: &[&str], command: &[&str]) -> Output {
        let image = image();
        let mut args = vec!["run", "--rm"];
        args.extend_from_slice(extra);
        args.push(image);
        args.extend_from_slice(command);
        podman().args(&args).output().expect("podman runs")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--volumes", "--time", "0", &self.name])
            .output();
    }
}

/// The stand-ins for docker-compose.yml's public images, built once per
/// test process: `(mysql, kafka)`.
pub fn stand_in_images() -> (&'static str, &'static str) {
    const MYSQL: &str = "localhost/outbox-test/mariadb";
    const KAFKA: &str = "localhost/outbox-test/kafka";
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let base = format!("BASE={}", base_image());
        let podman_dir = repository().join("tests/podman");
        // MariaDB from Debian's packages (the build reaches the mirror).
        podman_ok(&[
            "build",
            "--quiet",
            "--network",
            "host",
            "--build-arg",
            &base,
            "--tag",
            MYSQL,
            &podman_dir.join("mariadb").display().to_string(),
        ]);
        let context = crate::scratch_dir("kafka-image");
        for (from, name) in [
            (crate::broker::tansu_binary(), "tansu"),
            (podman_dir.join("kafka/entrypoint.sh"), "entrypoint.sh"),
            (podman_dir.join("kafka/Containerfile"), "Containerfile"),
        ] {
            std::fs::copy(from, context.path().join(name)).unwrap();
        }
        podman_ok(&[
            "build",
            "--quiet",
            "--build-arg",
            &base,
            "--tag",
            KAFKA,
            &context.path().display().to_string(),
        ]);
        podman_ok(&["image", "prune", "--force"]);
    });
    (MYSQL, KAFKA)
}

/// `docker-compose.yml` brought up by `podman-compose` under a project of
/// its own, on the stand-in images and the forwarder's [`image`], with
/// its host ports; brought down (volumes too) when dropped.
pub struct Compose {
    project: String,
    env: Vec<(&'static str, String)>,
    pub mysql_port: u16,
    pub kafka_port: u16,
    pub metrics_port: u16,
    /// The planner's metrics.
    pub planner_port: u16,
}

impl Compose {
    pub fn up() -> Compose {
        let forwarder = image();
        let (mysql, kafka) = stand_in_images();
        let (mysql_port, kafka_port, metrics_port, planner_port) = (
            crate::free_port(),
            crate::free_port(),
            crate::free_port(),
            crate::free_port(),
        );
        let compose = Compose {
            project: format!("outbox{}", std::process::id()),
            env: vec![
                ("MYSQL_IMAGE", mysql.to_owned()),
                ("KAFKA_IMAGE", kafka.to_owned()),
                ("FORWARDER_IMAGE", forwarder.to_owned()),
                ("MYSQL_PORT", mysql_port.to_string()),
                ("KAFKA_PORT", kafka_port.to_string()),
                ("METRICS_PORT", metrics_port.to_string()),
                ("PLANNER_METRICS_PORT", planner_port.to_string()),
            ],
            mysql_port,
            kafka_port,
            metrics_port,
            planner_port,
        };
        let output = compose.command(&["up", "--detach", "--no-build"]);
        assert!(
            output.status.success(),
            "podman-compose up: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        compose
    }

    fn command(&self, args: &[&str]) -> Output {
        let mut command = Command::new("podman-compose");
        command
            .current_dir(repository())
            .env(
                "CONTAINERS_CONF",
                repository().join("tests/podman/containers.conf"),
            )
            .args([
                "--project-name",
                &self.project,
                "--file",
                "docker-compose.yml",
            ])
            .args(args);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
            .output()
            .expect("podman-compose runs (pip install podman-compose)")
    }

    /// The host addresses the service's ports are published on
    /// (`podman port`: `3306/tcp -> 127.0.0.1:13306` each).
    pub fn published(&self, service: &str) -> Vec<String> {
        let output = podman()
            .args(["port", &format!("{}_{service}_1", self.project)])
            .output()
            .expect("podman runs");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| l.split_once(" -> ").map(|(_, host)| host.trim().to_owned()))
            .collect()
    }

    /// What the service's container logged.
    pub fn logs(&self, service: &str) -> String {
        let output = podman()
            .args(["logs", &format!("{}_{service}_1", self.project)])
            .output()
            .expect("podman runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        // The image's VOLUME gives a service that does not mount it (the
        // planner) an anonymous volume, which `down --volumes` leaves.
        let containers = podman()
            .args(["ps", "--all", "--quiet", "--filter"])
            .arg(format!("label=io.podman.compose.project={}", self.project))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut volumes = String::new();
        for container in containers.split_whitespace() {
            if let Ok(output) = podman()
                .args(["inspect", "--format"])
                .arg("{{range .Mounts}}{{if eq .Type \"volume\"}}{{.Name}} {{end}}{{end}}")
                .arg(container)
                .output()
            {
                volumes += &String::from_utf8_lossy(&output.stdout);
            }
        }
        let _ = self.command(&["down", "--volumes", "--timeout", "5"]);
        for volume in volumes.split_whitespace() {
            let _ = podman().args(["volume", "rm", "--force", volume]).output();
        }
    }
}
