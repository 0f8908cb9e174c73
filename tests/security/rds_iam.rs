//! `mysql.aws_iam`: RDS's IAM database authentication, against a MariaDB
//! that checks each token as RDS does. RDS's account plugin
//! (`AWSAuthenticationPlugin`) asks the client for its password in clear
//! text and verifies it as a SigV4 presigned URL for `connect` as that user,
//! signed within 15 minutes. Here the account signs in through PAM with
//! MariaDB's clear-text option (the same exchange with the client), and
//! PAM runs a script that verifies the token the same way: it signs the
//! URL again with boto3's `generate_db_auth_token` for the user, host and
//! port, with the known credentials at the token's own `X-Amz-Date`, and
//! compares; a token from more than 15 minutes ago, or one not matching,
//! is refused. The script records each token it saw.

use super::*;

const ACCESS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const REGION: &str = "us-east-1";

/// The PAM service file, removed with the test.
struct PamService(std::path::PathBuf);

impl Drop for PamService {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The verifier PAM runs: the token on stdin, the account in `PAM_USER`.
fn verifier(python: &str, seen: &std::path::Path) -> String {
    format!(
        r#"#!{python}
import datetime, os, sys, urllib.parse
import boto3, botocore.auth

token = sys.stdin.buffer.read().rstrip(b"\0").decode()
ok = False
why = ""
try:
    authority, query = token.split("/?", 1)
    host, port = authority.rsplit(":", 1)
    params = dict(urllib.parse.parse_qsl(query))
    signed = datetime.datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    now = datetime.datetime.utcnow()
    if not (now - datetime.timedelta(minutes=15) <= signed <= now + datetime.timedelta(seconds=5)):
        raise ValueError("signed at %s, now %s" % (signed, now))
    botocore.auth.get_current_datetime = lambda remove_tzinfo=True: signed
    client = boto3.client("rds", region_name="{REGION}", aws_access_key_id="{ACCESS_KEY}",
                          aws_secret_access_key="{SECRET_KEY}")
    expected = client.generate_db_auth_token(DBHostname=host, Port=int(port),
                                             DBUsername=os.environ["PAM_USER"], Region="{REGION}")
    ok = expected == token
    why = "" if ok else "expected " + expected
except Exception as e:
    why = repr(e)
with open("{seen}", "a") as f:
    f.write(("OK " if ok else "BAD ") + token + " " + why + "\n")
sys.exit(0 if ok else 1)
"#,
        seen = seen.display()
    )
}

/// The forwarder signs in with a fresh token per connection: `check`, then
/// a stream that publishes what is written; the server ends the stream's
/// connection and the forwarder signs in again, with a new token, and goes
/// on. The secret key never appears in the output or the log. A password in
/// the URL beside `aws_iam` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rds_iam_tokens_sign_in_and_every_reconnect_signs_a_new_one() {
    let scratch = harness::scratch_dir("rds-iam");
    let seen = scratch.path().join("seen");
    let script = scratch.path().join("verify.py");
    let python = std::process::Command::new("python3")
        .args(["-c", "import boto3, sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    assert!(
        python.status.success(),
        "boto3 (scripts/install-deps.sh installs it): {}",
        String::from_utf8_lossy(&python.stderr)
    );
    let python = String::from_utf8(python.stdout).unwrap();
    std::fs::write(&script, verifier(python.trim(), &seen)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let service = unique("outbox-rds-iam");
    let pam = PamService(std::path::Path::new("/etc/pam.d").join(&service));
    std::fs::write(
        &pam.0,
        format!(
            "auth required pam_exec.so expose_authtok quiet {}\naccount required pam_permit.so\n",
            script.display()
        ),
    )
    .unwrap();

    let db = &DbServer::start(
        Flavor::MariaDb,
        &[
            "--plugin-load-add=auth_pam",
            "--pam-use-cleartext-plugin=ON",
        ],
    )
    .await;
    let user = unique("iam");
    db.execute(&[
        format!("CREATE USER '{user}'@'%' IDENTIFIED VIA pam USING '{service}'"),
        format!(
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SLAVE MONITOR, SELECT ON *.* TO '{user}'@'%'"
        ),
    ])
    .await;
    let broker = Broker::shared().await;
    let url = format!("mysql://{user}@127.0.0.1:{}", db.port);
    let s = Scenario::new(db, broker, 1, |c| {
        c.urls(vec![url.clone()])
            .mysql("aws_iam", &format!("{{ region = \"{REGION}\" }}"))
    })
    .await;
    let env = [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let tokens = || -> Vec<String> {
        std::fs::read_to_string(&seen)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };

    let check = s.setup.command_with_env(&["check"], &env);
    let text = output_text(&check);
    assert!(check.status.success(), "{text}\nseen: {:?}", tokens());
    assert!(!tokens().is_empty(), "check signed in through PAM");

    let mut forwarder = s.setup.spawn_with_env(&[], &env);
    forwarder
        .wait_for_log("binlog stream started", TIMEOUT)
        .await;
    let mut conn = s.conn(db).await;
    let mut written = write_order(&mut conn, 3, true).await;
    let records =
        broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::from_secs(1));
    assert_each_once(&records, &ids(&written));

    // A new token needs a new second to be signed in.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = tokens().len();
    assert!(
        db.kill_dump_threads().await >= 1,
        "the stream's connection was ended"
    );
    written.extend(write_order(&mut conn, 3, true).await);
    let records =
        broker.consume_covering(&s.topic, &ids(&written), TIMEOUT, Duration::from_secs(1));
    assert_each_once(&records, &ids(&written));
    let log = forwarder.log();
    assert!(
        log.contains("session failed") && log.matches("binlog stream started").count() >= 2,
        "the stream was lost and started again: {log}"
    );
    assert!(forwarder.terminate().success(), "{log}");

    let seen_tokens = tokens();
    assert!(seen_tokens.len() > before, "the reconnect signed in again");
    assert!(
        seen_tokens.iter().all(|line| line.starts_with("OK ")),
        "every token verified: {seen_tokens:#?}"
    );
    let token = |line: &String| line.split(' ').nth(1).unwrap_or_default().to_owned();
    let earlier: std::collections::BTreeSet<String> =
        seen_tokens[..before].iter().map(token).collect();
    assert!(
        seen_tokens[before..]
            .iter()
            .any(|line| !earlier.contains(&token(line))),
        "the reconnect signed a token not used before: {seen_tokens:#?}"
    );
    assert!(!log.contains(SECRET_KEY) && !text.contains(SECRET_KEY));

    // A token signed with another key is refused by the server.
    let check = s.setup.command_with_env(
        &["check"],
        &[
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", "not-the-key-the-server-knows"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    let text = output_text(&check);
    assert!(!check.status.success(), "{text}");
    assert!(
        tokens().last().is_some_and(|line| line.starts_with("BAD ")),
        "{:?}",
        tokens().last()
    );

    // A password beside aws_iam: refused before anything connects.
    let with_password = replaced(
        &std::fs::read_to_string(&s.setup.config_path).unwrap(),
        &format!("//{user}@"),
        &format!("//{user}:pw@"),
    );
    let setup = ForwarderSetup::new(&with_password);
    let check = setup.command_with_env(&["check"], &env);
    let text = output_text(&check);
    assert!(
        !check.status.success()
            && text.contains("mysql.aws_iam: each connection signs in with a token"),
        "{text}"
    );
}
