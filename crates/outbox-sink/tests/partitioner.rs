//! `kafka.partitioner = "murmur2"` places keys where Kafka's Java client
//! does (and so Kafka Connect and Debezium). The reference is kafka-python's
//! port of the Java client's default partitioner (PyPI, installed by
//! `scripts/install-deps.sh`), asked for the partition of each key at each
//! partition count; Kafka's own test vectors are in the crate's unit tests.

use std::process::Command;

use outbox_sink::Partitioner;

/// Keys of every length from 0 to 40 bytes (each tail length of the hash),
/// UUIDs as the forwarder's keys usually are, numbers, non-ASCII text, and
/// bytes whose top bit is set (sign extension would differ in Java).
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..=40u8)
        .map(|n| (0..n).map(|i| b'a' + i % 26).collect())
        .collect();
    for i in 0..200u32 {
        keys.push(
            format!(
                "{:08x}-7d3c-4e1f-9a6b-{:012x}",
                i.wrapping_mul(2_654_435_761),
                i
            )
            .into_bytes(),
        );
        keys.push(i.to_string().into_bytes());
    }
    keys.push("Zürich-訂單-42".as_bytes().to_vec());
    keys.push(vec![0xff, 0x80, 0x7f, 0x00, 0xfe]);
    keys.push((0..=255u8).collect());
    keys
}

#[test]
fn murmur2_places_keys_where_the_java_client_does() {
    const COUNTS: [i32; 6] = [1, 2, 3, 6, 12, 100];
    let keys = keys();
    let hex: Vec<String> = keys.iter().map(|k| outbox_core::hex::hex(k)).collect();
    let script = format!(
        "import sys\n\
         from kafka.partitioner.default import DefaultPartitioner\n\
         p = DefaultPartitioner()\n\
         for line in sys.stdin.read().split():\n\
         \x20   key = bytes.fromhex(line) if line != '-' else b''\n\
         \x20   print(' '.join(str(p(key, list(range(n)), list(range(n)))) for n in {COUNTS:?}))\n"
    );
    let input: Vec<&str> = hex
        .iter()
        .map(|h| if h.is_empty() { "-" } else { h.as_str() })
        .collect();
    let output = run_python(&script, &input.join("\n"));
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), keys.len(), "one line per key:\n{output}");
    let mut spread = std::collections::BTreeSet::new();
    for (key, line) in keys.iter().zip(lines) {
        let java: Vec<i32> = line
            .split(' ')
            .map(|p| p.parse().expect("a partition"))
            .collect();
        let ours: Vec<i32> = COUNTS
            .iter()
            .map(|&n| Partitioner::Murmur2.partition(key, n))
            .collect();
        assert_eq!(ours, java, "key {}", String::from_utf8_lossy(key));
        spread.insert(ours[4]);
    }
    assert!(
        spread.len() == 12,
        "the keys used only partitions {spread:?} of 12"
    );
}

/// `python3` (the test environment's, with kafka-python) run on `script`
/// with `input`; its output.
fn run_python(script: &str, input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("the keys are written");
    let out = child.wait_with_output().expect("python3 finishes");
    assert!(
        out.status.success(),
        "kafka-python's partitioner failed (scripts/install-deps.sh installs it into \
         ~/.cache/outbox-forwarder/venv, which scripts/test.sh puts on PATH): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}
