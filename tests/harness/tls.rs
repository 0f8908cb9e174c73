//! Certificates for the TLS tests, made with the `openssl` command line in a
//! temporary directory: a CA of its own, a server certificate for
//! 127.0.0.1 (an IP subjectAltName and nothing else) and a client
//! certificate, both signed by that CA. And [`TlsFront`], which serves TLS
//! with them in front of a plaintext server (the broker has no TLS of its own).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tokio_rustls::rustls;

pub struct TestPki {
    dir: tempfile::TempDir,
}

const CA_CONFIG: &str = "\
[req]
distinguished_name = dn
x509_extensions = ca
prompt = no
[dn]
CN = outbox-forwarder test {name}
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
";

const SERVER_EXTENSIONS: &str = "\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
authorityKeyIdentifier = keyid
";

const CLIENT_EXTENSIONS: &str = "\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
";

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command line is installed");
    assert!(
        output.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl TestPki {
    /// A new CA called `name` with a server and a client certificate,
    /// valid for two days.
    pub fn generate(name: &str) -> TestPki {
        let dir = tempfile::Builder::new().prefix("pki").tempdir().unwrap();
        let path = dir.path();
        std::fs::write(path.join("ca.cnf"), CA_CONFIG.replace("{name}", name)).unwrap();
        std::fs::write(path.join("server.ext"), SERVER_EXTENSIONS).unwrap();
        std::fs::write(path.join("client.ext"), CLIENT_EXTENSIONS).unwrap();
        let rsa = ["-newkey", "rsa:2048", "-nodes"];
        openssl(
            path,
            &[
                &["req", "-x509", "-days", "2", "-config", "ca.cnf"][..],
                &rsa,
                &["-keyout", "ca.key", "-out", "ca.pem"],
            ]
            .concat(),
        );
        for (name, subject) in [("server", "/CN=127.0.0.1"), ("client", "/CN=forwarder")] {
            openssl(
                path,
                &[
                    &["req", "-subj", subject][..],
                    &rsa,
                    &[
                        "-keyout",
                        &format!("{name}.key"),
                        "-out",
                        &format!("{name}.csr"),
                    ],
                ]
                .concat(),
            );
            openssl(
                path,
                &[
                    "x509",
                    "-req",
                    "-days",
                    "2",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-extfile",
                    &format!("{name}.ext"),
                    "-out",
                    &format!("{name}.pem"),
                ],
            );
        }
        TestPki { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA certificate (PEM): what a client trusts.
    pub fn ca(&self) -> PathBuf {
        self.file("ca.pem")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.file("client.pem")
    }

    pub fn client_key(&self) -> PathBuf {
        self.file("client.key")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.file("server.pem")
    }

    pub fn server_key(&self) -> PathBuf {
        self.file("server.key")
    }

    /// `mariadbd` arguments that serve the server certificate and verify
    /// client certificates against this CA.
    pub fn mariadb_args(&self) -> Vec<String> {
        vec![
            format!("--ssl-ca={}", self.ca().display()),
            format!("--ssl-cert={}", self.file("server.pem").display()),
            format!("--ssl-key={}", self.file("server.key").display()),
        ]
    }

    /// The options that make a server of `flavor` serve TLS with the
    /// server certificate. MySQL runs in its own root: the files are
    /// copied into a directory there, returned to be kept as long as the
    /// server runs.
    pub fn server_args(&self, flavor: crate::Flavor) -> (Vec<String>, Option<tempfile::TempDir>) {
        if flavor == crate::Flavor::MariaDb {
            return (self.mariadb_args(), None);
        }
        let dir = crate::scratch_dir_in(&crate::server::mysql_root().join("tmp"), "pki");
        let mut args = Vec::new();
        for (option, name) in [
            ("ssl-ca", "ca.pem"),
            ("ssl-cert", "server.pem"),
            ("ssl-key", "server.key"),
        ] {
            let copy = dir.path().join(name);
            std::fs::copy(self.file(name), &copy).expect("the PKI is copied into MySQL's root");
            args.push(format!(
                "--{option}={}",
                flavor.server_path(&copy).display()
            ));
        }
        (args, Some(dir))
    }
}

/// A TLS server on a free loopback port that hands each connection's
/// plaintext to `127.0.0.1:backend`: TLS termination, as a load balancer or
/// a TLS-serving broker listener would do it. It serves the [`TestPki`]
/// server certificate and requires a client certificate signed by its CA.
pub struct TlsFront {
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsFront {
    pub fn start(pki: &TestPki, backend: u16) -> TlsFront {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(pki.ca()).expect("CA certificate"))
            .unwrap();
        let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.into(),
            provider.clone(),
        )
        .build()
        .unwrap();
        let chain = CertificateDer::pem_file_iter(pki.server_cert())
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(pki.server_key()).expect("server key");
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(clients)
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        // Its own thread and runtime, so that it serves whatever the test's
        // runtime is doing; dropping the runtime closes every connection.
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { continue };
                            let acceptor = acceptor.clone();
                            tokio::spawn(async move {
                                // A refused handshake is the client's to report.
                                let Ok(mut tls) = acceptor.accept(stream).await else {
                                    return;
                                };
                                let Ok(mut plain) =
                                    tokio::net::TcpStream::connect(("127.0.0.1", backend)).await
                                else {
                                    return;
                                };
                                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                            });
                        }
                    }
                }
            });
        });
        TlsFront {
            port,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
