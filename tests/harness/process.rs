use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

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
