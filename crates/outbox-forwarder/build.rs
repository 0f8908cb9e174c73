//! Names the commit the binary is built from (`--version`, the
//! `build_info` metric): `OUTBOX_FORWARDER_COMMIT` when set (a build outside
//! a git checkout), else `git rev-parse HEAD` in the source tree, else
//! `unknown`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=OUTBOX_FORWARDER_COMMIT");
    let commit = std::env::var("OUTBOX_FORWARDER_COMMIT")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Built again when HEAD moves (a commit, a checkout). Only files that
    // exist are named: cargo runs a build script again every time when one
    // it watches is missing.
    let watched = ["HEAD".to_owned(), "packed-refs".to_owned()]
        .into_iter()
        .chain(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!(
        "cargo:rustc-env=OUTBOX_FORWARDER_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
}
