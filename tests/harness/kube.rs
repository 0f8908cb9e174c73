//! `deploy/kubernetes` played with `podman kube play`: rendered by
//! `kubectl kustomize` through an overlay that points it at the suite, as
//! an operator's overlay points it at their cluster.
//!
//! What podman 4.3 cannot play is changed, and only that:
//! - the host network (the suite's servers are on loopback), where the
//!   replicas of one Deployment would share a port: each instance is an
//!   overlay of its own (`nameSuffix`, one replica), with its own
//!   configuration (its metrics port, its name); on the host network podman
//!   refuses container port mappings and so cannot resolve the probes'
//!   named port: the ports and probes go (the test asks the probes' paths
//!   itself);
//! - the Secret becomes a ConfigMap of the same files (podman reads no
//!   Secret's keys);
//! - the pod restarts a container on failure only: podman 4.3 gives an
//!   init container the pod's policy, restarts it at once when it ends
//!   well under `Always`, and then fails the play as it cannot remove it;
//! - the store's emptyDir becomes a directory of the pod's own (podman
//!   4.3 shares one volume among the pods whose emptyDirs have one name);
//! - only the ConfigMaps and the Deployment are played (a Service, a
//!   PodDisruptionBudget and a NetworkPolicy have no meaning on one host).

use std::path::{Path, PathBuf};

use crate::container::{image, podman, podman_ok, IMAGE};

fn deploy_kubernetes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

/// `to` (absolute) as a path relative to `from` (absolute): kustomize
/// takes no absolute path to a base.
pub fn relative(from: &Path, to: &Path) -> String {
    let up = "../".repeat(from.components().count() - 1);
    format!("{up}{}", to.strip_prefix("/").unwrap().display())
}

/// One instance of the manifests' Deployment, played.
pub struct KubePod {
    /// The pod's name, as podman names a Deployment's pod.
    pub pod: String,
    played: PathBuf,
    _dir: tempfile::TempDir,
}

impl KubePod {
    /// Renders the manifests with `forwarder_toml` as the ConfigMap's
    /// configuration, `secrets` as the Secret's files, `env` added to the
    /// environment of the forwarder and of its init container, under the
    /// name suffix `-suffix`, and plays them.
    pub fn play(
        suffix: &str,
        forwarder_toml: &str,
        secrets: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> KubePod {
        let image = image();
        let (name, tag) = IMAGE.rsplit_once(':').unwrap();
        let dir = crate::scratch_dir("kube-overlay");
        let at = dir.path();
        std::fs::write(at.join("forwarder.toml"), forwarder_toml).unwrap();
        for (file, value) in secrets {
            std::fs::write(at.join(file), value).unwrap();
        }
        let base = deploy_kubernetes();
        let base_image = std::fs::read_to_string(base.join("kustomization.yaml"))
            .unwrap()
            .lines()
            .find_map(|l| l.trim().strip_prefix("newName: ").map(str::to_owned))
            .expect("the base names its image");
        let secret_files: String = secrets
            .iter()
            .map(|(file, _)| format!("      - {file}\n"))
            .collect();
        let env_patches: String = env
            .iter()
            .flat_map(|(name, value)| {
                ["containers", "initContainers"].map(|kind| {
                    format!(
                        "      - op: add\n        path: /spec/template/spec/{kind}/0/env/-\n        \
                         value: {{name: {name}, value: {value:?}}}\n"
                    )
                })
            })
            .collect();
        std::fs::write(
            at.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {base}
nameSuffix: -{suffix}
images:
  - name: {base_image}
    newName: {name}
    newTag: {tag}
generatorOptions:
  disableNameSuffixHash: true
configMapGenerator:
  - name: outbox-forwarder
    behavior: replace
    files:
      - forwarder.toml
  - name: test-secrets
    files:
{secret_files}patches:
  - path: host.yaml
  - target:
      kind: Deployment
    patch: |
      - op: remove
        path: /spec/template/spec/containers/0/ports
      - op: remove
        path: /spec/template/spec/containers/0/livenessProbe
      - op: remove
        path: /spec/template/spec/containers/0/readinessProbe
      - op: remove
        path: /spec/template/spec/containers/0/startupProbe
{env_patches}",
                base = relative(at, &base)
            ),
        )
        .unwrap();
        // The pod's own store: podman 4.3 gives every pod with an emptyDir
        // of one name the same volume, where the second cannot open it.
        let data = at.join("data");
        std::fs::create_dir(&data).unwrap();
        let (uid, gid) = crate::container::IMAGE_USER.split_once(':').unwrap();
        std::os::unix::fs::chown(&data, uid.parse().ok(), gid.parse().ok()).unwrap();
        std::fs::write(
            at.join("host.yaml"),
            format!(
                "apiVersion: apps/v1
kind: Deployment
metadata:
  name: outbox-forwarder
spec:
  replicas: 1
  template:
    spec:
      hostNetwork: true
      restartPolicy: OnFailure
      volumes:
        - name: secrets
          secret: null
          configMap:
            name: test-secrets
            defaultMode: 0444
        - name: data
          emptyDir: null
          hostPath:
            path: {}
            type: Directory
",
                data.display()
            ),
        )
        .unwrap();
        let rendered = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(at)
            .output()
            .expect("kubectl runs (scripts/install-deps.sh installs it)");
        assert!(
            rendered.status.success(),
            "kubectl kustomize: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let rendered = String::from_utf8(rendered.stdout).unwrap();
        let played: Vec<&str> = rendered
            .split("\n---\n")
            .filter(|doc| {
                doc.lines()
                    .any(|l| l == "kind: ConfigMap" || l == "kind: Deployment")
            })
            .collect();
        assert_eq!(
            played.len(),
            3,
            "two ConfigMaps and the Deployment:\n{rendered}"
        );
        assert!(rendered.contains(&format!("image: {image}")), "{rendered}");
        let played_path = at.join("played.yaml");
        std::fs::write(&played_path, played.join("\n---\n")).unwrap();
        podman_ok(&[
            "kube",
            "play",
            "--log-driver",
            "k8s-file",
            &played_path.display().to_string(),
        ]);
        KubePod {
            pod: format!("outbox-forwarder-{suffix}-pod-0"),
            played: played_path,
            _dir: dir,
        }
    }

    /// What the container named `container` of the pod logged.
    pub fn logs(&self, container: &str) -> String {
        let output = podman()
            .args(["logs", &format!("{}-{container}", self.pod)])
            .output()
            .expect("podman runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    }

    /// Waits until `GET path` on `port` answers 200 (the readiness probe's
    /// path); panics with the pod's logs if it does not within `timeout`.
    pub async fn wait_for_ok(&self, port: u16, path: &str, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let answer = crate::http::try_http_get(port, path);
            if matches!(answer, Ok((200, _))) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path} answers {answer:?}\ngroup-start:\n{}\nforwarder:\n{}",
                self.logs("group-start"),
                self.logs("forwarder")
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Whether the pod exists.
    pub fn exists(&self) -> bool {
        podman()
            .args(["pod", "exists", &self.pod])
            .status()
            .expect("podman runs")
            .success()
    }

    /// `podman kube down`: the pod's containers stopped (SIGTERM, then
    /// SIGKILL after their grace) and removed, as a deleted pod is.
    pub fn down(&self) {
        podman_ok(&["kube", "down", &self.played.display().to_string()]);
    }
}

impl Drop for KubePod {
    fn drop(&mut self) {
        let _ = podman()
            .args(["pod", "rm", "--force", "--time", "0", &self.pod])
            .output();
        let _ = podman()
            .args(["kube", "down", &self.played.display().to_string()])
            .output();
    }
}
