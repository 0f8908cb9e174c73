//! Certificates for the TLS tests, made with the `openssl` command line in a
//! temporary directory: a CA of its own, a server certificate for
//! 127.0.0.1 (an IP subjectAltName and nothing else) and a client
//! certificate, both signed by that CA.

use std::path::{Path, PathBuf};
use std::process::Command;

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

    /// `mariadbd` arguments that serve the server certificate and verify
    /// client certificates against this CA.
    pub fn mariadb_args(&self) -> Vec<String> {
        vec![
            format!("--ssl-ca={}", self.ca().display()),
            format!("--ssl-cert={}", self.file("server.pem").display()),
            format!("--ssl-key={}", self.file("server.key").display()),
        ]
    }
}
