//! Unmodified Kafka clients against real coordinator and broker processes: confluent-kafka
//! 2.16.1 (librdkafka 2.16.0) and kafka-python 3.0.12, pinned, in a venv under `target/` that
//! `scripts/kafka-clients-venv` makes, driven by the pytest suite in `tests/kafka_clients/`
//! (its README says what each test covers): an idempotent stream read back exactly once,
//! transactions in a row, the zombie fenced in each client's own terms (and winning against
//! `--no-fencing` brokers), a write to an untouched partition, a killed leader and a frozen one,
//! compressed batches, consumer groups (subscribe, committed offsets across a coordinator
//! kill -9, a frozen read-process-write worker fenced by its group's generation, and not with
//! `--no-generation-fencing`), a transactional application through `cluster` and its faults
//! (the README's pytest fixture), SASL logins and the authorizer's ACLs; then the README's
//! `examples/kafka_zombie.py`, `examples/kafka_workers.py` and `examples/who_may_fence.py`.
//!
//! This test fails, and never skips, when Python 3, its venv module or the packages cannot be
//! had: the message says what to install.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn unmodified_kafka_clients_are_served_and_fenced_as_kafka_fences_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin_dir = common::bin("broker").parent().expect("the binaries' directory").to_path_buf();
    let python = common::kafka_clients_python();
    let status = Command::new(&python)
        .args(["-m", "pytest", "tests/kafka_clients", "-q", "-p", "no:cacheprovider"])
        .env("EPOCHFENCE_BIN", &bin_dir)
        .current_dir(root)
        .status()
        .unwrap_or_else(|e| panic!("run {python} -m pytest: {e}"));
    assert!(status.success(), "the real-client suite failed (its output above names the test and the client)");
    // The README's example with an unmodified client: fenced, and (against --no-fencing) not.
    let example = |script: &str| -> String {
        let run = Command::new(&python)
            .arg(script)
            .env("EPOCHFENCE_BIN", &bin_dir)
            .current_dir(root)
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        let out = String::from_utf8_lossy(&run.stdout).into_owned();
        assert!(run.status.success(), "{script} failed:\n{out}\n{}", String::from_utf8_lossy(&run.stderr));
        out
    };
    let out = example("examples/kafka_zombie.py");
    assert!(out.contains("read_committed view: ['B: debit 100']"), "{out}");
    assert!(out.contains("its late write 'A: debit 100 again' was ACKNOWLEDGED"), "the negative case: {out}");
    // The README's read-process-write example: a frozen worker fenced by its group's
    // generation, and (against --no-generation-fencing) its batch doubled.
    let out = example("examples/kafka_workers.py");
    assert!(out.contains("ZOMBIE REFUSED") && out.contains("40 records for 40 inputs; duplicated inputs: []"), "{out}");
    assert!(
        out.contains("ZOMBIE COMMITTED") && out.contains("the zombie's batch committed a second time: True"),
        "the negative case: {out}"
    );
    // The README's authorization example: mallory cannot fence alice under the authorizer (nor
    // write under her producer id), and (without it) does.
    let out = example("examples/who_may_fence.py");
    assert!(out.contains("forged write refused: TRANSACTIONAL_ID_AUTHORIZATION_FAILED"), "{out}");
    assert!(out.contains("without it: mallory fenced alice: True"), "the negative case: {out}");
}
