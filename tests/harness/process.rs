use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `command` from the keeper thread so that the child gets SIGKILL
/// when this process exits.
pub fn spawn(command: Command) -> std::io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("child-keeper".into())
            .spawn(move || {
                // The sender lives in a static, so this thread, the parent of
                // every child, lives until the process exits.
                for (mut command, reply) in rx {
                    let _ = reply.send(spawn_with_death_signal(&mut command));
                }
            })
            .expect("keeper thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    keeper
        .lock()
        .unwrap()
        .send((command, reply_tx))
        .expect("keeper alive");
    reply_rx.recv().expect("keeper replies")
}

fn spawn_with_death_signal(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: i32) {
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// Reads a growing log file from where the previous read stopped, so that
/// a wait polling it costs the new bytes, not the whole log each time.
pub struct LogScanner {
    path: PathBuf,
    offset: u64,
    /// The start of a line whose newline has not been written yet.
    partial: Vec<u8>,
}

impl LogScanner {
    /// A scanner at the start of `path`.
    pub fn new(path: &Path) -> Self {
        LogScanner {
            path: path.to_owned(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The lines completed since the last call.
    pub fn new_lines(&mut self) -> Vec<String> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut bytes = std::mem::take(&mut self.partial);
        let read = file.read_to_end(&mut bytes).unwrap_or(0);
        self.offset += read as u64;
        let complete = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(end) => end + 1,
            None => 0,
        };
        self.partial = bytes.split_off(complete);
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Waits until at least `count` lines of the log at `path` contain every
/// one of `needles`; panics with the log if `child` (called `who`) exits
/// first or `timeout` passes.
pub async fn wait_for_lines(
    who: &str,
    child: Option<&mut Child>,
    path: &Path,
    needles: &[&str],
    count: usize,
    timeout: Duration,
) {
    let log = || std::fs::read_to_string(path).unwrap_or_default();
    let deadline = Instant::now() + timeout;
    let mut scanner = LogScanner::new(path);
    let mut found = 0;
    let mut child = child;
    loop {
        found += scanner
            .new_lines()
            .iter()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .count();
        if found >= count {
            return;
        }
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().unwrap()) {
            panic!(
                "{who} exited ({status}) before logging {count} x {needles:?}:\n{}",
                log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {count} x {needles:?} in the {who}'s log within {timeout:?}:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
