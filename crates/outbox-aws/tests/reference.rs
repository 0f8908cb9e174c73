//! The crate against AWS's own code, run at test time: the MSK and RDS
//! tokens against `aws-msk-iam-sasl-signer-python` and boto3 for the same
//! credentials, time and inputs, byte for byte (tests/reference.py); the
//! web identity source against moto's STS; the container and instance
//! metadata sources against a stand-in (tests/metadata_fake.py), as
//! neither service exists off AWS.
//!
//! The Python packages come from the virtual environment
//! scripts/install-deps.sh makes; without them these tests fail, saying
//! so. No request leaves the loopback interface.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use outbox_aws::{msk_iam_token_with_user_agent, rds_auth_token, Credentials, CredentialsChain};

/// A program in the tests' virtual environment.
fn venv_bin(name: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    Path::new(&home)
        .join(".cache/outbox-forwarder/venv/bin")
        .join(name)
}

/// The virtual environment's Python, once it is known to have AWS's
/// packages.
fn python() -> PathBuf {
    let python = venv_bin("python3");
    let imports = Command::new(&python)
        .args(["-c", "import boto3, aws_msk_iam_sasl_signer, moto"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        imports,
        "{} cannot import boto3, aws_msk_iam_sasl_signer and moto, which these tests compare \
         with: run scripts/install-deps.sh to install them",
        python.display()
    );
    python
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

/// `command` with none of this process's environment but `PATH`, and no
/// AWS configuration to find: what AWS's code does here depends on its
/// arguments only.
fn isolated(mut command: Command, home: &Path) -> Command {
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// A child process, killed when the test ends however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An environment lookup over `vars`, for [`CredentialsChain::with_env`].
fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Send + Sync + 'static {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

// ---------------------------------------------------------------------------
// The tokens against AWS's signers.

fn key_pair() -> Credentials {
    Credentials {
        access_key_id: "AKIAIOSFODNN7EXAMPLE".to_owned(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned(),
        session_token: None,
        expires: None,
    }
}

fn temporary() -> Credentials {
    Credentials {
        access_key_id: "ASIAY34FZKBOKMUTVV7A".to_owned(),
        secret_access_key: "tmp+Secret/with=Signs0123456789abcdefghi".to_owned(),
        session_token: Some(
            "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+Example/Token+With=Signs=="
                .to_owned(),
        ),
        expires: None,
    }
}

/// One token to make both ways.
struct Case {
    /// `msk` or `rds`.
    kind: &'static str,
    /// Milliseconds since the epoch.
    millis: u64,
    region: &'static str,
    credentials: Credentials,
    host: &'static str,
    port: u16,
    user: &'static str,
}

impl Case {
    fn time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.millis)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind,
            "time": self.millis as f64 / 1000.0,
            "region": self.region,
            "access_key_id": self.credentials.access_key_id,
            "secret_access_key": self.credentials.secret_access_key,
            "session_token": self.credentials.session_token,
            "host": self.host,
            "port": self.port,
            "user": self.user,
        })
    }
}

fn cases() -> Vec<Case> {
    // New Year 2026 and a fraction, a leap day's noon, an end of month.
    let times = [1_767_225_600_750, 1_709_208_000_000, 1_751_327_999_999];
    let databases = [
        ("db.example.com", 3306, "app"),
        (
            "mydb.cluster-c1a2b3d4e5f6.eu-west-2.rds.amazonaws.com",
            3306,
            "app+user@x",
        ),
        ("DB.Example.COM", 443, "user with space/é&=?"),
        ("127.0.0.1", 5432, "x_y-z.~"),
    ];
    let mut cases = Vec::new();
    for (r, region) in ["us-east-1", "eu-west-2"].into_iter().enumerate() {
        for (c, credentials) in [key_pair(), temporary()].into_iter().enumerate() {
            for millis in times {
                cases.push(Case {
                    kind: "msk",
                    millis,
                    region,
                    credentials: credentials.clone(),
                    host: "",
                    port: 0,
                    user: "",
                });
            }
            for (d, (host, port, user)) in databases.into_iter().enumerate() {
                cases.push(Case {
                    kind: "rds",
                    millis: times[(r + c + d) % times.len()],
                    region,
                    credentials: credentials.clone(),
                    host,
                    port,
                    user,
                });
            }
        }
    }
    cases
}

/// What AWS's signers make for `cases`, and the MSK signer's user agent.
fn reference_tokens(cases: &[Case]) -> (String, Vec<serde_json::Value>) {
    let python = python();
    let home = tempfile::tempdir().expect("a home for Python");
    let mut command = isolated(Command::new(python), home.path());
    let mut child = command
        .arg(script("reference.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tests/reference.py");
    let input = serde_json::Value::Array(cases.iter().map(Case::json).collect()).to_string();
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(input.as_bytes())
        .expect("send the cases");
    let output = child.wait_with_output().expect("its output");
    assert!(
        output.status.success(),
        "tests/reference.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("tests/reference.py prints JSON");
    let user_agent = output["msk_user_agent"]
        .as_str()
        .expect("the signer's user agent")
        .to_owned();
    let results = output["results"]
        .as_array()
        .expect("a result per case")
        .clone();
    assert_eq!(results.len(), cases.len());
    (user_agent, results)
}

fn decoded(token: &str) -> String {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .expect("a base64url token");
    String::from_utf8(url).expect("a UTF-8 URL")
}

#[test]
fn tokens_match_aws_signers_byte_for_byte() {
    let cases = cases();
    let (user_agent, expected) = reference_tokens(&cases);
    assert_eq!(user_agent, "aws-msk-iam-sasl-signer-python/1.0.2");
    for (case, expected) in cases.iter().zip(&expected) {
        let token = expected["token"].as_str().expect("a token");
        match case.kind {
            "msk" => {
                let ours = msk_iam_token_with_user_agent(
                    case.region,
                    &case.credentials,
                    case.time(),
                    &user_agent,
                );
                // The URLs first, as they show a difference readably.
                assert_eq!(decoded(&ours.token), decoded(token), "{}", case.json());
                assert_eq!(ours.token, token, "{}", case.json());
                let expiry_ms = expected["expiry_ms"].as_u64().expect("an expiry");
                assert_eq!(
                    ours.expires_at,
                    UNIX_EPOCH + Duration::from_millis(expiry_ms),
                    "{}",
                    case.json()
                );
            }
            _ => {
                let ours = rds_auth_token(
                    case.host,
                    case.port,
                    case.user,
                    case.region,
                    &case.credentials,
                    case.time(),
                );
                assert_eq!(ours, token, "{}", case.json());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Web identity against moto's STS.

/// Waits until something listens on `port`.
fn wait_for_port(port: u16, server: &mut Running, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        let exited = server.0.try_wait().expect("the server's state");
        if exited.is_some() || Instant::now() > deadline {
            panic!(
                "the server did not start listening on port {port}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn web_identity_from_moto_sts() {
    let _ = python();
    let dir = tempfile::tempdir().expect("a directory");
    let port = free_port();
    let log_path = dir.path().join("moto.log");
    let log = std::fs::File::create(&log_path).expect("moto's log");
    let mut command = isolated(Command::new(venv_bin("moto_server")), dir.path());
    let mut server = Running(
        command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("moto's log"))
            .stderr(log)
            .spawn()
            .expect("start moto_server"),
    );
    wait_for_port(port, &mut server, &log_path);

    // A service account token as EKS mounts it (moto does not check it).
    let token_file = dir.path().join("token");
    std::fs::write(
        &token_file,
        "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6b3V0Ym94OmZvcndhcmRlciJ9.c2ln\n",
    )
    .expect("write the token");
    let token_file = token_file.to_str().expect("a UTF-8 path");
    let endpoint = format!("http://127.0.0.1:{port}");
    let role = "arn:aws:iam::123456789012:role/outbox-forwarder";

    for endpoint_variable in ["AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"] {
        let chain = CredentialsChain::with_env(env_of(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file),
            ("AWS_ROLE_ARN", role),
            ("AWS_REGION", "eu-west-2"),
            (endpoint_variable, &endpoint),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]));
        let before = SystemTime::now();
        let credentials = chain.get().expect("credentials from moto's STS");
        assert!(
            credentials.access_key_id.starts_with("ASIA"),
            "{credentials:?}"
        );
        assert!(!credentials.secret_access_key.is_empty());
        assert!(credentials
            .session_token
            .as_deref()
            .is_some_and(|token| !token.is_empty()));
        let expires = credentials.expires.expect("an expiry");
        assert!(
            expires > before + Duration::from_secs(600),
            "{credentials:?}"
        );
        // Kept, not asked for again.
        assert_eq!(chain.get(), Ok(credentials));
    }

    // STS unreachable: the error says where and what to check.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let error = CredentialsChain::with_env(env_of(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file),
        ("AWS_ROLE_ARN", role),
        ("AWS_ENDPOINT_URL_STS", &closed),
    ]))
    .get()
    .expect_err("nothing listens there");
    assert!(
        error.starts_with(&format!(
            "STS AssumeRoleWithWebIdentity at {closed} for {role}: "
        )),
        "{error}"
    );
}

// ---------------------------------------------------------------------------
// The container endpoint and IMDSv2 against a stand-in.

/// tests/metadata_fake.py, answering the container endpoint only with
/// `authorization`; and its port.
fn metadata_fake(authorization: &str) -> (Running, u16) {
    let python = python();
    let home = tempfile::tempdir().expect("a home for Python");
    let mut command = isolated(Command::new(python), home.path());
    let mut child = Running(
        command
            .arg(script("metadata_fake.py"))
            .arg(authorization)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tests/metadata_fake.py"),
    );
    let stdout = child.0.stdout.take().expect("its stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("its port");
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("tests/metadata_fake.py printed {line:?}, not its port"));
    (child, port)
}

/// The status of a bare `GET path` to the stand-in.
fn status_of_bare_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    reply.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn container_credentials_from_a_stand_in() {
    let authorization = "eyJhbGciOiJFUzM4NCJ9.pod-identity.token";
    let (_fake, port) = metadata_fake(authorization);
    let url = format!("http://127.0.0.1:{port}/container/credentials");
    let dir = tempfile::tempdir().expect("a directory");
    let token_file = dir.path().join("eks-pod-identity-token");
    std::fs::write(&token_file, format!("{authorization}\n")).expect("write the token");
    let token_file = token_file.to_str().expect("a UTF-8 path");

    let expected = Credentials {
        access_key_id: "ASIACONTAINEREXAMPLE".to_owned(),
        secret_access_key: "container/secret+key=".to_owned(),
        session_token: Some("container-session-token/+=".to_owned()),
        expires: Some(UNIX_EPOCH + Duration::from_secs(4_070_908_800)),
    };
    // EKS Pod Identity: the token in a file.
    let from_file = CredentialsChain::with_env(env_of(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &url),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]));
    assert_eq!(from_file.get(), Ok(expected.clone()));
    // The token in a variable.
    let from_variable = CredentialsChain::with_env(env_of(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &url),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", authorization),
    ]));
    assert_eq!(from_variable.get(), Ok(expected));

    // A wrong token: the endpoint's error, and where it came from.
    let error = CredentialsChain::with_env(env_of(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &url),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong"),
    ]))
    .get()
    .expect_err("refused");
    assert!(
        error.starts_with(&format!(
            "the container credentials endpoint {url} (AWS_CONTAINER_CREDENTIALS_FULL_URI) \
             answered HTTP 401: InvalidToken: bad authorization; "
        )),
        "{error}"
    );
    assert!(!error.contains("wrong"), "{error}");
}

#[test]
fn instance_profile_from_a_stand_in() {
    let (_fake, port) = metadata_fake("unused");
    // The stand-in refuses IMDSv1, as an instance requiring IMDSv2 does:
    // the credentials below come through the session token.
    assert_eq!(
        status_of_bare_get(port, "/latest/meta-data/iam/security-credentials/"),
        "HTTP/1.1 401 Unauthorized"
    );

    let endpoint = format!("http://127.0.0.1:{port}/");
    let chain =
        CredentialsChain::with_env(env_of(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &endpoint)]));
    assert_eq!(
        chain.get(),
        Ok(Credentials {
            access_key_id: "ASIAINSTANCEEXAMPLE".to_owned(),
            secret_access_key: "instance/secret+key=".to_owned(),
            session_token: Some("instance-session-token/+=".to_owned()),
            expires: Some(UNIX_EPOCH + Duration::from_secs(4_070_908_800)),
        })
    );

    // An instance without an instance profile: nothing found, and why.
    let endpoint = format!("http://127.0.0.1:{port}/no-profile");
    let error =
        CredentialsChain::with_env(env_of(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &endpoint)]))
            .get()
            .expect_err("no instance profile");
    assert!(
        error.contains(&format!(
            "the EC2 instance metadata service at {endpoint} (no instance profile is attached \
             to this instance)"
        )),
        "{error}"
    );
    assert!(
        error.starts_with("no AWS credentials found; tried "),
        "{error}"
    );
}
