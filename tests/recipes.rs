//! The recipes of `docs/recipes/` for services not written in Rust: each
//! language's outbox program and inbox program, run as they are against a
//! real server, signing in as an account of their own (on MySQL with
//! caching_sha2_password, its first sign-in over plain TCP).
//!
//! For each language (`<language>::mariadb`, `<language>::mysql`): orders
//! written with their events (UUIDv7 ids in the order written, the JSON
//! payload, the caller's version and trace context), a failing event insert
//! that leaves neither the event nor its order, then one event handed to the
//! inbox twice (processed, then duplicate: one claim row, one job), a
//! duplicate on another unique key and an over-long event id both taken as
//! failures, not duplicates; with a forwarder streaming the test's schema,
//! the outbox program waits until its event is published (the barrier),
//! and fails when no forwarder answers. The SQL recipe runs in the
//! server's own client.
//!
//! The toolchains and drivers come from `scripts/install-deps.sh`; a missing
//! one fails the test with what to run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harness::http::with_metrics;
use harness::workload::{forwarder_config, server_id};
use harness::{Broker, DbServer, Flavor, ForwarderSetup};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::OnceCell;

/// Every run of a recipe program is killed after this.
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);
/// The consumer name the inbox recipes claim events under.
const CONSUMER_NAME: &str = "notification-planner";
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACESTATE: &str = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
/// The password of each test's own account.
const PASSWORD: &str = "recipe-pw-1";

harness::on_both_flavors!(sql, java, go, python, node);

fn recipes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/recipes")
}

/// Where `scripts/install-deps.sh` puts the Python and Node drivers.
fn driver_cache() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/outbox-forwarder/recipes")
}

/// Fails the test unless `path` exists.
fn require(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "{what} not found at {}: run scripts/install-deps.sh",
        path.display()
    );
}

/// The path of `name` on PATH; fails the test without it.
fn require_command(name: &str, what: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{what} ({name}) not found on PATH: run scripts/install-deps.sh"))
}

/// A recipe program: what to start, with which leading arguments and
/// environment (besides the connection settings).
#[derive(Clone)]
struct Program {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Program {
    fn new(name: &str, program: impl Into<PathBuf>) -> Self {
        Program {
            name: name.to_owned(),
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
        }
    }

    fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.args.push(arg.as_ref().to_string_lossy().into_owned());
        self
    }

    fn env(mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.envs.push((
            name.to_owned(),
            value.as_ref().to_string_lossy().into_owned(),
        ));
        self
    }
}

/// A language's two programs.
struct Recipe {
    outbox: Program,
    inbox: Program,
}

/// The schema and account a test's programs sign in to, and root on it.
struct Target {
    port: u16,
    schema: String,
    user: String,
    root: Conn,
}

async fn target(flavor: Flavor) -> Target {
    let db = DbServer::shared(flavor).await;
    let schema = harness::unique("recipes");
    let mut root = db.create_schema(&schema).await;
    // A server that is not strict by default, as legacy ones often are: it
    // would cut an over-long value short with a warning. The recipes make
    // their own sessions strict; every test of this binary wants the same.
    root.query_drop("SET GLOBAL sql_mode = ''").await.unwrap();
    let user = schema.clone();
    for statement in [
        format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON `{schema}`.* TO '{user}'@'%'"),
    ] {
        root.query_drop(&statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    if flavor == Flavor::MySql {
        assert_eq!(
            db.account_plugin(&user).await,
            "caching_sha2_password",
            "the recipes' account on MySQL must use the default plugin"
        );
    }
    Target {
        port: db.port,
        schema,
        user,
        root,
    }
}

/// Runs `program` with `args` (and `stdin`) against `target`; killed after
/// [`CHILD_TIMEOUT`].
async fn run(program: &Program, args: &[&str], stdin: Option<&str>, target: &Target) -> Output {
    let mut command = Command::new(&program.program);
    command
        .args(&program.args)
        .args(args)
        .envs(program.envs.iter().map(|(k, v)| (k, v)))
        .env("OUTBOX_DB_HOST", "127.0.0.1")
        .env("OUTBOX_DB_PORT", target.port.to_string())
        .env("OUTBOX_DB_USER", &target.user)
        .env("OUTBOX_DB_PASSWORD", PASSWORD)
        .env("OUTBOX_DB_NAME", &target.schema)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start {} ({}): {e}: run scripts/install-deps.sh",
            program.name,
            program.program.display()
        )
    });
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
        drop(pipe);
    }
    tokio::time::timeout(CHILD_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} ran over {CHILD_TIMEOUT:?}", program.name))
        .unwrap()
}

fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Runs `program`, which must succeed; its standard output, trimmed.
async fn succeed(program: &Program, args: &[&str], stdin: Option<&str>, target: &Target) -> String {
    let output = run(program, args, stdin, target).await;
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}",
        program.name,
        describe(&output)
    );
    stdout(&output)
}

/// Runs `program`, which must fail naming `cause` on its standard error and
/// print no outcome.
async fn fail(program: &Program, args: &[&str], stdin: Option<&str>, target: &Target, cause: &str) {
    let output = run(program, args, stdin, target).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains(cause),
        "{} {args:?} should have failed with {cause:?}: {}",
        program.name,
        describe(&output)
    );
    let out = stdout(&output);
    assert!(
        !out.contains("processed") && !out.contains("duplicate"),
        "{} {args:?} failed but printed an outcome: {}",
        program.name,
        describe(&output)
    );
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `id` is a UUIDv7 in its canonical text form, of a time in `from..=to` ms.
fn assert_uuid_v7(id: &str, from: u64, to: u64) {
    let uuid = uuid::Uuid::parse_str(id).unwrap_or_else(|e| panic!("{id:?} is not a UUID: {e}"));
    assert_eq!(
        id,
        uuid.hyphenated().to_string(),
        "not the 36-char lowercase form"
    );
    assert_eq!(uuid.get_version_num(), 7, "{id} is not a version 7 UUID");
    assert_eq!(
        uuid.get_variant(),
        uuid::Variant::RFC4122,
        "{id}: variant bits are not 10"
    );
    let bytes = uuid.as_bytes();
    let ms = bytes[..6]
        .iter()
        .fold(0u64, |ms, &b| (ms << 8) | u64::from(b));
    assert!(
        (from..=to).contains(&ms),
        "{id}: its timestamp {ms} ms is not the time it was written ({from}..={to} ms)"
    );
}

/// One order written through a recipe, and what its event must hold.
struct Write<'a> {
    customer: &'a str,
    amount_cents: i64,
    version: i64,
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

/// An event as stored: its order id, version and payload text.
struct Stored {
    order_id: i64,
    version: i64,
    payload: String,
}

type EventRow = (
    String,
    String,
    String,
    i64,
    String,
    Option<String>,
    Option<String>,
);

/// The event `id` and its order hold what `write` asked for.
async fn assert_written(conn: &mut Conn, id: &str, write: &Write<'_>) -> Stored {
    let event: Option<EventRow> = conn
        .exec_first(
            "SELECT aggregate_type, aggregate_id, event_type, event_version, payload, \
             traceparent, tracestate FROM outbox_event WHERE event_id = ?",
            (id,),
        )
        .await
        .unwrap();
    let (aggregate_type, aggregate_id, event_type, version, payload, traceparent, tracestate) =
        event.unwrap_or_else(|| panic!("no outbox_event row for the printed id {id}"));
    assert_eq!(
        (aggregate_type.as_str(), event_type.as_str()),
        ("order", "ORDER_ACCEPTED")
    );
    assert_eq!(version, write.version, "event_version of {id}");
    assert_eq!(
        traceparent.as_deref(),
        write.traceparent,
        "traceparent of {id}"
    );
    assert_eq!(
        tracestate.as_deref(),
        write.tracestate,
        "tracestate of {id}"
    );
    let order_id: i64 = aggregate_id
        .parse()
        .unwrap_or_else(|_| panic!("aggregate_id {aggregate_id:?} of {id} is not an order id"));
    let order: Option<(String, i64, String)> = conn
        .exec_first(
            "SELECT customer, amount_cents, status FROM orders WHERE order_id = ?",
            (order_id,),
        )
        .await
        .unwrap();
    let order =
        order.unwrap_or_else(|| panic!("event {id} committed without its order {order_id}"));
    assert_eq!(
        order,
        (
            write.customer.to_owned(),
            write.amount_cents,
            "ACCEPTED".to_owned()
        ),
        "order {order_id}"
    );
    let json: serde_json::Value = serde_json::from_str(&payload)
        .unwrap_or_else(|e| panic!("payload of {id} is not JSON ({e}): {payload}"));
    assert_eq!(
        json,
        serde_json::json!({
            "order_id": order_id,
            "customer": write.customer,
            "amount_cents": write.amount_cents,
        }),
        "payload of {id}"
    );
    Stored {
        order_id,
        version,
        payload,
    }
}

async fn count(conn: &mut Conn, sql: &str) -> i64 {
    conn.query_first(sql).await.unwrap().unwrap()
}

/// (orders, outbox events) in the schema.
async fn rows(conn: &mut Conn) -> (i64, i64) {
    (
        count(conn, "SELECT COUNT(*) FROM orders").await,
        count(conn, "SELECT COUNT(*) FROM outbox_event").await,
    )
}

/// The event ids `printed`, in the order written, sort in that order, in
/// Rust and in the primary key.
async fn assert_time_ordered(conn: &mut Conn, printed: &[String]) {
    let mut sorted = printed.to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted, printed,
        "event ids do not sort in the order written"
    );
    let in_key: Vec<String> = conn
        .query("SELECT event_id FROM outbox_event ORDER BY event_id")
        .await
        .unwrap();
    assert_eq!(in_key, printed, "the primary key's order");
}

/// (claim rows of the consumer, jobs) for `event_id`.
async fn inbox_rows(conn: &mut Conn, event_id: &str) -> (i64, Vec<(i64, i64, String)>) {
    let claims: i64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM consumed_event WHERE consumer_name = ? AND event_id = ?",
            (CONSUMER_NAME, event_id),
        )
        .await
        .unwrap()
        .unwrap();
    let jobs = conn
        .exec(
            "SELECT order_id, source_version, status FROM notification_job WHERE event_id = ?",
            (event_id,),
        )
        .await
        .unwrap();
    (claims, jobs)
}

/// The whole scenario for a language's two programs.
async fn check_recipe(flavor: Flavor, recipe: Recipe) {
    let mut target = target(flavor).await;
    let outbox = &recipe.outbox;
    let inbox = &recipe.inbox;

    let writes = [
        Write {
            customer: "ada",
            amount_cents: 1200,
            version: 1,
            traceparent: None,
            tracestate: None,
        },
        Write {
            customer: "grace \"amazing\" o'hopper",
            amount_cents: 2500,
            version: 3,
            traceparent: Some(TRACEPARENT),
            tracestate: Some(TRACESTATE),
        },
        Write {
            customer: "alan",
            amount_cents: 990,
            version: 7,
            traceparent: Some(TRACEPARENT),
            tracestate: None,
        },
    ];
    let mut printed = Vec::new();
    let mut stored = Vec::new();
    for write in &writes {
        let (amount, version) = (write.amount_cents.to_string(), write.version.to_string());
        let mut args = vec![write.customer, amount.as_str(), version.as_str()];
        args.extend(write.traceparent);
        args.extend(write.tracestate);
        let from = now_ms();
        let id = succeed(outbox, &args, None, &target).await;
        assert_uuid_v7(&id, from, now_ms());
        stored.push(assert_written(&mut target.root, &id, write).await);
        printed.push(id);
    }
    assert_time_ordered(&mut target.root, &printed).await;
    assert_eq!(rows(&mut target.root).await, (3, 3), "(orders, events)");

    // The event insert fails after the order's (a traceparent longer than
    // the column): neither stays.
    let last_order = stored.last().unwrap().order_id;
    let too_long = "0".repeat(60);
    fail(
        outbox,
        &["eve", "100", "1", &too_long],
        None,
        &target,
        "traceparent",
    )
    .await;
    assert_eq!(
        rows(&mut target.root).await,
        (3, 3),
        "(orders, events) after a rolled-back write"
    );
    let write = Write {
        customer: "edsger",
        amount_cents: 100,
        version: 2,
        traceparent: None,
        tracestate: None,
    };
    let from = now_ms();
    let id = succeed(outbox, &["edsger", "100", "2"], None, &target).await;
    assert_uuid_v7(&id, from, now_ms());
    let next = assert_written(&mut target.root, &id, &write).await;
    printed.push(id);
    assert!(
        next.order_id > last_order + 1,
        "order {} follows {last_order}: the rolled-back write took no order id, so its \
         order was never inserted and the rollback was not exercised",
        next.order_id
    );
    assert_time_ordered(&mut target.root, &printed).await;
    assert_eq!(rows(&mut target.root).await, (4, 4), "(orders, events)");

    // The inbox: processed once, then a duplicate.
    let (event_id, event) = (&printed[1], &stored[1]);
    let version = event.version.to_string();
    let args = [event_id.as_str(), version.as_str(), event.payload.as_str()];
    assert_eq!(succeed(inbox, &args, None, &target).await, "processed");
    assert_eq!(succeed(inbox, &args, None, &target).await, "duplicate");
    let expected_job = vec![(event.order_id, event.version, "PENDING".to_owned())];
    assert_eq!(
        inbox_rows(&mut target.root, event_id).await,
        (1, expected_job.clone()),
        "(claims, jobs) of {event_id} after two deliveries"
    );

    // Only the inbox key means duplicate: a duplicate on another key (a
    // second event of the same order, with one job per order enforced) and
    // a claim the table refuses are failures, and leave nothing.
    target
        .root
        .query_drop(
            "ALTER TABLE notification_job ADD UNIQUE KEY uq_notification_job_order (order_id)",
        )
        .await
        .unwrap();
    let other = uuid::Uuid::new_v4().to_string();
    let args = [other.as_str(), version.as_str(), event.payload.as_str()];
    fail(inbox, &args, None, &target, "uq_notification_job_order").await;
    assert_eq!(
        inbox_rows(&mut target.root, &other).await,
        (0, Vec::new()),
        "(claims, jobs) of an event whose side effect failed"
    );
    let over_long = "e".repeat(65);
    let args = [over_long.as_str(), version.as_str(), event.payload.as_str()];
    fail(
        inbox,
        &args,
        None,
        &target,
        "Data too long for column 'event_id'",
    )
    .await;
    assert_eq!(
        inbox_rows(&mut target.root, &over_long).await,
        (0, Vec::new()),
        "(claims, jobs) of an over-long event id"
    );
    assert_eq!(
        count(&mut target.root, "SELECT COUNT(*) FROM notification_job").await,
        1,
        "jobs in all"
    );
    assert_eq!(
        inbox_rows(&mut target.root, event_id).await,
        (1, expected_job),
        "(claims, jobs) of {event_id} at the end"
    );
    check_barrier(flavor, outbox, &target).await;
}

/// The outbox program with `OUTBOX_ACKED_URL` waits on the forwarder's
/// `/acked` (a forwarder streaming the test's schema to the shared broker):
/// it returns once its event is published, and fails naming "not
/// published" when no forwarder answers before its timeout.
async fn check_barrier(flavor: Flavor, outbox: &Program, target: &Target) {
    let db = DbServer::shared(flavor).await;
    let broker = Broker::shared().await;
    let topic = harness::unique("recipes");
    broker.create_topic(&topic, 1);
    let port = harness::free_port();
    let config = forwarder_config(db, broker, &target.schema, &topic, server_id());
    let setup = ForwarderSetup::new(&with_metrics(config, port));
    let mut forwarder = setup.spawn_streaming().await;
    let waiting = outbox
        .clone()
        .env("OUTBOX_ACKED_URL", format!("http://127.0.0.1:{port}"));
    let id = succeed(&waiting, &["barbara", "4200", "1"], None, target).await;
    let published = broker.consume_covering(
        &topic,
        &HashSet::from([id.clone()]),
        harness::TIMEOUT,
        Duration::ZERO,
    );
    assert!(
        published.iter().any(|r| r.key_str() == id),
        "{id} is in Kafka once the program returned"
    );
    assert!(forwarder.terminate().success(), "{}", forwarder.log());
    let unanswered = waiting.env("OUTBOX_ACKED_TIMEOUT_MS", "1500");
    fail(
        &unanswered,
        &["barbara", "4200", "1"],
        None,
        target,
        "not published",
    )
    .await;
}

// SQL -------------------------------------------------------------------

/// What `docs/recipes/sql/outbox.sql` writes, as it stands.
const SQL_WRITE: Write<'static> = Write {
    customer: "ada",
    amount_cents: 1200,
    version: 1,
    traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    tracestate: None,
};
/// The event `docs/recipes/sql/inbox.sql` claims, as it stands.
const SQL_INBOX_EVENT: &str = "01890a5d-ac96-774b-bcce-b302099a8057";

/// The server's own command-line client, signing in as the test's account.
fn sql_client(flavor: Flavor, target: &Target) -> Program {
    let client = match flavor {
        Flavor::MariaDb => {
            Program::new("mariadb", require_command("mariadb", "the MariaDB client"))
        }
        Flavor::MySql => {
            let root = harness::server::mysql_root();
            require(&root.join("usr/bin/mysql"), "the MySQL client");
            Program::new("mysql", "chroot")
                .arg(root)
                .arg("/usr/bin/mysql")
        }
    };
    client
        .arg("--host=127.0.0.1")
        .arg(format!("--port={}", target.port))
        .arg(format!("--user={}", target.user))
        .arg(format!("--password={PASSWORD}"))
        .arg("--batch")
        .arg("--skip-column-names")
        .arg(&target.schema)
}

async fn sql(flavor: Flavor) {
    let mut target = target(flavor).await;
    let client = sql_client(flavor, &target);
    let read = |name: &str| {
        std::fs::read_to_string(recipes().join("sql").join(name))
            .unwrap_or_else(|e| panic!("docs/recipes/sql/{name}: {e}"))
    };
    let outbox = read("outbox.sql");
    let inbox = read("inbox.sql");

    let mut printed = Vec::new();
    for _ in 0..2 {
        let from = now_ms();
        let id = succeed(&client, &[], Some(&outbox), &target).await;
        assert_uuid_v7(&id, from, now_ms());
        assert_written(&mut target.root, &id, &SQL_WRITE).await;
        printed.push(id);
    }
    assert_time_ordered(&mut target.root, &printed).await;
    assert_eq!(rows(&mut target.root).await, (2, 2), "(orders, events)");

    // The same transaction ending in ROLLBACK leaves nothing.
    assert_eq!(
        outbox.matches("COMMIT;").count(),
        1,
        "outbox.sql has one COMMIT"
    );
    let rolled_back = outbox.replace("COMMIT;", "ROLLBACK;");
    let id = succeed(&client, &[], Some(&rolled_back), &target).await;
    assert_uuid_v7(&id, 0, now_ms());
    assert_eq!(
        rows(&mut target.root).await,
        (2, 2),
        "(orders, events) after ROLLBACK"
    );

    // The claim twice: the second stops at the inbox key's 1062.
    assert!(
        inbox.contains(SQL_INBOX_EVENT),
        "inbox.sql claims {SQL_INBOX_EVENT}"
    );
    assert_eq!(
        succeed(&client, &[], Some(&inbox), &target).await,
        "processed"
    );
    let second = run(&client, &[], Some(&inbox), &target).await;
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success()
            && stderr.contains("ERROR 1062")
            && stderr.contains("uq_consumed_event_identity")
            && stdout(&second).is_empty(),
        "the second claim should stop at the inbox key: {}",
        describe(&second)
    );
    assert_eq!(
        inbox_rows(&mut target.root, SQL_INBOX_EVENT).await,
        (1, vec![(1, 1, "PENDING".to_owned())]),
        "(claims, jobs) after two runs of inbox.sql"
    );
}

// Java ------------------------------------------------------------------

async fn java(flavor: Flavor) {
    static CLASSES: OnceCell<tempfile::TempDir> = OnceCell::const_new();
    let javac = require_command("javac", "javac (a JDK)");
    let java = require_command("java", "java");
    let jar = Path::new("/usr/share/java/mariadb-java-client.jar");
    require(jar, "MariaDB Connector/J (Debian's libmariadb-java)");
    let classes = CLASSES
        .get_or_init(|| async {
            // Removed by a later run once this process has exited.
            let dir = harness::scratch_dir("recipes-java");
            let sources = recipes().join("java");
            let compile = Program::new("javac", javac)
                .arg("-d")
                .arg(dir.path())
                .arg("-cp")
                .arg(jar)
                .arg(sources.join("Outbox.java"))
                .arg(sources.join("Inbox.java"));
            let output = tokio::time::timeout(
                CHILD_TIMEOUT,
                Command::new(&compile.program)
                    .args(&compile.args)
                    .kill_on_drop(true)
                    .output(),
            )
            .await
            .expect("javac in time")
            .expect("javac starts");
            assert!(
                output.status.success(),
                "javac failed: {}",
                describe(&output)
            );
            dir
        })
        .await;
    let classpath = format!("{}:{}", jar.display(), classes.path().display());
    let program = |class: &str| {
        Program::new(class, &java)
            .arg("-cp")
            .arg(&classpath)
            .arg(class)
    };
    let recipe = Recipe {
        outbox: program("Outbox"),
        inbox: program("Inbox"),
    };
    check_recipe(flavor, recipe).await;
}

// Go --------------------------------------------------------------------

async fn go(flavor: Flavor) {
    static BINARIES: OnceCell<tempfile::TempDir> = OnceCell::const_new();
    let go = require_command("go", "Go (Debian's golang-go)");
    require(
        Path::new("/usr/share/gocode/src/github.com/go-sql-driver/mysql"),
        "the Go MySQL driver (Debian's golang-github-go-sql-driver-mysql-dev)",
    );
    let binaries = BINARIES
        .get_or_init(|| async {
            // Removed by a later run once this process has exited.
            let dir = harness::scratch_dir("recipes-go");
            for name in ["outbox", "inbox"] {
                let output = tokio::time::timeout(
                    CHILD_TIMEOUT,
                    Command::new(&go)
                        .arg("build")
                        .arg("-o")
                        .arg(dir.path().join(name))
                        .arg(recipes().join("go").join(name).join("main.go"))
                        // GOPATH mode, on the driver Debian installs.
                        .env("GO111MODULE", "off")
                        .env("GOPATH", "/usr/share/gocode")
                        .kill_on_drop(true)
                        .output(),
                )
                .await
                .expect("go build in time")
                .expect("go starts");
                assert!(
                    output.status.success(),
                    "go build of {name} failed: {}",
                    describe(&output)
                );
            }
            dir
        })
        .await;
    let recipe = Recipe {
        outbox: Program::new("outbox (Go)", binaries.path().join("outbox")),
        inbox: Program::new("inbox (Go)", binaries.path().join("inbox")),
    };
    check_recipe(flavor, recipe).await;
}

// Python ----------------------------------------------------------------

async fn python(flavor: Flavor) {
    let python = require_command("python3", "Python 3");
    let packages = driver_cache().join("python");
    require(&packages.join("pymysql"), "PyMySQL");
    require(
        &packages.join("cryptography"),
        "cryptography (PyMySQL's RSA sign-in)",
    );
    let program = |script: &str| {
        Program::new(script, &python)
            .arg(recipes().join("python").join(script))
            .env("PYTHONPATH", &packages)
            // No __pycache__ beside the recipes.
            .env("PYTHONDONTWRITEBYTECODE", "1")
    };
    let recipe = Recipe {
        outbox: program("outbox.py"),
        inbox: program("inbox.py"),
    };
    check_recipe(flavor, recipe).await;
}

// Node ------------------------------------------------------------------

async fn node(flavor: Flavor) {
    let node = require_command("node", "Node.js");
    let modules = driver_cache().join("node/node_modules");
    require(&modules.join("mysql2"), "mysql2");
    let program = |script: &str| {
        Program::new(script, &node)
            .arg(recipes().join("node").join(script))
            .env("NODE_PATH", &modules)
    };
    let recipe = Recipe {
        outbox: program("outbox.js"),
        inbox: program("inbox.js"),
    };
    check_recipe(flavor, recipe).await;
}
