//! A TCP relay on loopback whose server-to-client direction carries at most
//! a given number of bytes per second: a slow link between the forwarder
//! and its primary.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// How often the relay sends its share of bytes.
const TICK: Duration = Duration::from_millis(50);

pub struct SlowLink {
    /// Where clients connect instead of the server's port.
    pub port: u16,
}

impl SlowLink {
    /// Relays 127.0.0.1:`port` to 127.0.0.1:`upstream`, sending the
    /// server's bytes at `bytes_per_second`. Lives until the test process
    /// ends.
    pub fn start(upstream: u16, bytes_per_second: usize) -> SlowLink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().unwrap().port();
        let chunk = (bytes_per_second * TICK.as_millis() as usize / 1000).max(1);
        std::thread::Builder::new()
            .name("slow-link".into())
            .spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        continue;
                    };
                    let (mut client_read, mut server_write) =
                        (client.try_clone().unwrap(), server.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut client_read, &mut server_write);
                        let _ = server_write.shutdown(std::net::Shutdown::Write);
                    });
                    std::thread::spawn(move || relay_slowly(server, client, chunk));
                }
            })
            .expect("relay thread");
        SlowLink { port }
    }
}

fn relay_slowly(mut from: TcpStream, mut to: TcpStream, chunk: usize) {
    let mut buffer = vec![0; chunk];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
        std::thread::sleep(TICK);
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}
