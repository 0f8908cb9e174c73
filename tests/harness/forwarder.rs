//! The forwarder as its own OS process, configured per test.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use outbox_checkpoint::{Checkpoint, CheckpointStore};

use crate::process;

/// The `outbox-forwarder` binary of this build (`cargo build --bins` first).
pub fn forwarder_binary() -> PathBuf {
    if let Ok(path) = std::env::var("OUTBOX_FORWARDER_BIN") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/<test> → target/<profile>/outbox-forwarder
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("outbox-forwarder");
    assert!(
        path.exists(),
        "{} not found: build it first (cargo build --bins)",
        path.display()
    );
    path
}

/// A forwarder's configuration and checkpoint directory.
pub struct ForwarderSetup {
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
}

impl ForwarderSetup {
    /// `body` is the TOML; `{checkpoint}` in it is replaced by this setup's
    /// checkpoint path.
    pub fn new<T: std::fmt::Display + ?Sized>(body: &T) -> Self {
        let dir = crate::scratch_dir("forwarder");
        let config_path = dir.path().join("forwarder.toml");
        let setup = ForwarderSetup { dir, config_path };
        setup.write(&body.to_string());
        setup
    }

    pub fn write(&self, body: &str) {
        let checkpoint = self.checkpoint_path();
        std::fs::write(
            &self.config_path,
            body.replace("{checkpoint}", &checkpoint.display().to_string()),
        )
        .unwrap();
    }

    pub fn checkpoint_path(&self) -> PathBuf {
        self.dir.path().join("checkpoint")
    }

    /// The stored checkpoint (the forwarder must not be running).
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        CheckpointStore::open(&self.checkpoint_path())
            .unwrap()
            .load()
            .unwrap()
    }

    pub fn spawn(&self, extra_args: &[&str]) -> ForwarderProcess {
        ForwarderProcess::spawn(&self.config_path, self.dir.path(), extra_args, &[])
    }

    /// Like [`ForwarderSetup::spawn`], with `env` added to the process's
    /// environment (e.g. a password variable the configuration names).
    pub fn spawn_with_env(&self, extra_args: &[&str], env: &[(&str, &str)]) -> ForwarderProcess {
        ForwarderProcess::spawn(&self.config_path, self.dir.path(), extra_args, env)
    }

    /// Spawns `run` and waits until its binlog stream has started.
    pub async fn spawn_streaming(&self) -> ForwarderProcess {
        let mut forwarder = self.spawn(&[]);
        forwarder
            .wait_for_log("binlog stream started", crate::TIMEOUT)
            .await;
        forwarder
    }

    /// Runs a one-shot sub-command (e.g. `checkpoint show`) to completion.
    pub fn command(&self, args: &[&str]) -> std::process::Output {
        self.command_with_env(args, &[])
    }

    /// [`ForwarderSetup::command`] with `env` added to its environment.
    pub fn command_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        Command::new(forwarder_binary())
            .args(args)
            .arg("--config")
            .arg(&self.config_path)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }
}

/// A command's stdout and stderr, as text.
pub fn output_text(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// A number after `name ` in a command's report line, e.g. `published 12`.
pub fn reported(output: &str, name: &str) -> u64 {
    let at = output
        .find(&format!("{name} "))
        .unwrap_or_else(|| panic!("no {name:?} in:\n{output}"));
    output[at + name.len() + 1..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {name:?} in:\n{output}"))
}

/// Runs `check`, which must fail with a `FAIL` line about `name`; returns
/// its whole output and that line.
pub fn failed_check(setup: &ForwarderSetup, name: &str) -> (String, String) {
    let check = setup.command(&["check"]);
    let text = output_text(&check);
    assert!(!check.status.success(), "{text}");
    let line = check_line(&text, name);
    assert!(line.starts_with("FAIL"), "{line}");
    (text, line)
}

/// Runs `run`, which must stop at once (exit 2, a definite error) instead
/// of streaming or retrying; returns its log.
pub async fn refused_run(setup: &ForwarderSetup) -> String {
    let mut forwarder = setup.spawn(&[]);
    let status = forwarder.wait_exit(crate::TIMEOUT).await;
    let log = forwarder.log();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(!log.contains("binlog stream started"), "{log}");
    log
}

/// The `check` line about `name`.
pub fn check_line(output: &str, name: &str) -> String {
    output
        .lines()
        .find(|l| l.contains(&format!("  {name} ")))
        .unwrap_or_else(|| panic!("no {name} line in:\n{output}"))
        .to_owned()
}

/// A running `outbox-forwarder run`, logging to a file at debug level.
pub struct ForwarderProcess {
    child: Option<Child>,
    pub log_path: PathBuf,
}

impl ForwarderProcess {
    fn spawn(config: &Path, dir: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        let n = std::fs::read_dir(dir).unwrap().count();
        let log_path = dir.join(format!("forwarder-{n}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = Command::new(forwarder_binary());
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(extra_args)
            .env(
                "RUST_LOG",
                "info,outbox_forwarder=debug,outbox_source=debug",
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log);
        let child = process::spawn(command).expect("forwarder starts");
        ForwarderProcess {
            child: Some(child),
            log_path,
        }
    }

    /// Stops the process with SIGSTOP (`frozen`) or lets it go on with
    /// SIGCONT, as a long pause or a frozen VM would.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.pid().expect("running");
        process::signal(pid, if frozen { libc::SIGSTOP } else { libc::SIGCONT });
    }

    /// The process id (for reading its resource use from /proc).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    /// Waits until the log has a line containing `needle`; panics with the log otherwise.
    pub async fn wait_for_log(&mut self, needle: &str, timeout: Duration) {
        process::wait_for_lines(
            "forwarder",
            self.child.as_mut(),
            &self.log_path,
            &[needle],
            1,
            timeout,
        )
        .await;
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        process::signal(child.id(), libc::SIGTERM);
        child.wait().unwrap()
    }

    /// SIGKILL: no drain, no final checkpoint.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits for the process to exit on its own.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "forwarder still running after {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ForwarderProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
