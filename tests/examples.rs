//! The runnable scenarios keep telling the truth: each exits 0 only if it saw both the fenced
//! and the unfenced outcome.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `cargo test` builds the examples next to the test executables' directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--example", name]);
        if profile_dir.ends_with("release") {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success());
    }
    path
}

fn run(name: &str) -> String {
    let out = Command::new(example(name)).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{name} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn zombie_producer_example_sees_both_outcomes() {
    let out = run("zombie_producer");
    assert!(out.contains("REJECTED") && out.contains("LANDED"), "{out}");
    assert!(
        out.contains("fenced: transactional id 'balance-writer' is at epoch 1, this producer holds epoch 0"),
        "{out}"
    );
}

#[test]
fn stale_leader_example_sees_both_outcomes() {
    let out = run("stale_leader");
    assert!(out.contains("FENCED_LEADER_EPOCH") && out.contains("the replicas diverge"), "{out}");
}

#[test]
fn exactly_once_example_invoices_each_order_once() {
    let out = run("exactly_once");
    assert!(out.contains("its commit is REFUSED") && out.contains("each order invoiced exactly once: true"), "{out}");
}
