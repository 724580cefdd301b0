//! A quick smoke run of the bench tool: it reports sane numbers (not a performance test).

/// Run the bench tool with `args` (which end in `--json`); its JSON report, once it succeeded.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bench")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bench_reports_sane_numbers_for_every_target() {
    let v = bench_json(&["--records", "20000", "--batch-records", "100", "--json"]);
    for target in ["loopback", "fenced", "unfenced"] {
        let r = &v["results"][target];
        assert_eq!(r["records"], 20000, "{target}: every record acknowledged");
        assert!(r["records_per_s"].as_f64().unwrap() > 0.0);
        let (p50, p99, max) =
            (r["p50_us"].as_u64().unwrap(), r["p99_us"].as_u64().unwrap(), r["max_us"].as_u64().unwrap());
        assert!(p50 <= p99 && p99 <= max, "{target}: percentiles in order");
        // The machine's CPU over the run: a share of all cores (absent if the run was shorter
        // than /proc/stat's tick).
        let cpu = &r["cpu_busy_pct"];
        assert!(cpu.is_null() || (0.0..=100.0).contains(&cpu.as_f64().unwrap()), "{target}: cpu {cpu}");
        let ns = &r["cpu_ns_per_record"];
        assert_eq!(ns.is_null(), cpu.is_null(), "{target}: CPU per record with the CPU busy");
        assert!(ns.is_null() || ns.as_f64().unwrap() >= 0.0, "{target}: {ns}");
        let fraction = v["fraction_of_loopback"][target].as_f64().unwrap();
        assert!(fraction > 0.0, "{target}: {fraction}");
    }
    assert!(v["fenced_over_unfenced"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_measures_durable_inits() {
    let v = bench_json(&["--mode", "inits", "--clients", "4", "--inits-per-client", "10", "--json"]);
    assert_eq!(v["grants"], 40.0);
    assert!(v["grants_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["p50_us"].as_u64().unwrap() <= v["max_us"].as_u64().unwrap());
}

#[test]
fn bench_runs_transactional_producers() {
    let v = bench_json(&[
        "--mode",
        "fenced",
        "--records",
        "4000",
        "--batch-records",
        "100",
        "--txn-batches",
        "5",
        "--producers",
        "2",
        "--json",
    ]);
    assert_eq!(v["results"]["fenced"]["records"], 4000);
}

#[test]
fn bench_runs_for_a_duration_instead_of_a_count() {
    let v = bench_json(&["--mode", "fenced", "--duration-ms", "300", "--batch-records", "100", "--json"]);
    assert_eq!(v["config"]["duration_ms"], 300);
    let r = &v["results"]["fenced"];
    // It stops on time rather than after --records (1,000,000 by default)...
    let seconds = r["seconds"].as_f64().unwrap();
    assert!(seconds >= 0.3, "ran {seconds} s, less than the duration");
    // ...and every record it sent was acknowledged in whole batches.
    let records = r["records"].as_u64().unwrap();
    assert!(records > 0 && records.is_multiple_of(100), "{records}");
}

#[test]
fn bench_measures_recovery() {
    let v = bench_json(&[
        "--mode",
        "recovery",
        "--log-mib",
        "6",
        "--segment-bytes",
        "1048576",
        "--producers",
        "10",
        "--json",
    ]);
    assert!(v["log_bytes"].as_u64().unwrap() >= 6 << 20);
    assert!(v["segments"].as_u64().unwrap() >= 6, "{v}");
    for key in ["open_after_crash_s", "open_after_clean_shutdown_s", "open_full_scan_s"] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
}

#[test]
fn bench_pairs_acks_all_with_acks_leader() {
    let v = bench_json(&[
        "--mode",
        "replication",
        "--records",
        "20000",
        "--batch-records",
        "100",
        "--repeat",
        "2",
        "--json",
    ]);
    for side in ["acks_leader", "acks_all_3_replicas"] {
        assert_eq!(v[side]["records"], 20000, "{side}: every record acknowledged");
    }
    let each = v["all_over_leader_each_repeat"].as_array().unwrap();
    assert_eq!(each.len(), 2, "one ratio per pair");
    assert!(each.iter().all(|r| r.as_f64().unwrap() > 0.0));
}

#[test]
fn bench_lingers_at_an_offered_rate() {
    // 20,000 records/s for 2 ms: 40 more records arrive after a batch's first one.
    let v = bench_json(&["--records", "4000", "--rate", "20000", "--linger-ms", "2", "--mode", "fenced", "--json"]);
    assert_eq!(v["config"]["batch_records"], 41, "a batch holds what arrives while it lingers");
    let r = &v["results"]["fenced"];
    assert!(r["records"].as_u64().unwrap() >= 4000);
    // A batch's first record waited 2 ms for its last one: every latency includes that wait.
    let p50 = r["p50_us"].as_u64().unwrap();
    assert!(p50 >= 2000, "latency counts from a batch's first record: p50 {p50} µs");
    // A linger without a rate means nothing: refused.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bench")).args(["--linger-ms", "2"]).output().unwrap();
    assert!(!out.status.success(), "--linger-ms needs --rate");
}

#[test]
fn bench_runs_the_producers_on_threads_of_their_own() {
    let v = bench_json(&[
        "--records",
        "20000",
        "--batch-records",
        "100",
        "--producers",
        "2",
        "--client-threads",
        "2",
        "--json",
    ]);
    assert_eq!(v["config"]["client_threads"], 2);
    for target in ["loopback", "fenced", "unfenced"] {
        assert_eq!(v["results"][target]["records"], 20000, "{target}: every record acknowledged");
    }
}
