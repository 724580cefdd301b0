//! Measures a broker's resident memory with 10,000 live producer ids over 100 partitions.
//!
//! `cargo run --release --example broker_memory [-- PRODUCERS PARTITIONS]` builds and starts the
//! real `coordinator` and `broker` binaries as processes, creates a topic with PARTITIONS
//! partitions (default 100), has PRODUCERS producers (default 10,000) each initialise and
//! write one acknowledged batch to a partition (producer i to partition i mod PARTITIONS), and
//! prints the broker's VmRSS before and after. docs/BENCHMARKS.md records the result.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use bytes::Bytes;
use producer::{Admin, ClientConfig, Producer, ProducerConfig};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn spawn(bin: &std::path::Path, args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(bin).args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("listening line");
    let addr = line.trim().rsplit(' ').next().expect("address").to_string();
    (child, addr)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let producers: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(10_000);
    let partitions: i32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "coordinator", "-p", "broker"])
        .status()?;
    if !status.success() {
        return Err("building the binaries failed".into());
    }
    let bin_dir = std::env::current_exe()?.parent().and_then(|p| p.parent()).ok_or("target dir")?.to_path_buf();
    let dir = tempfile::tempdir()?;
    let data = |n: &str| dir.path().join(n).display().to_string();
    let (mut c, caddr) = spawn(&bin_dir.join("coordinator"), &["--listen", "127.0.0.1:0", "--data-dir", &data("c")]);
    let (mut b, _) = spawn(
        &bin_dir.join("broker"),
        &[
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--coordinator",
            &caddr,
            "--data-dir",
            &data("b"),
            "--fsync",
            "never",
        ],
    );
    let mut admin = Admin::new(&caddr, ClientConfig::default());
    while admin.create_topic("mem", partitions).await.is_err() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let before = rss_kib(b.id());
    let mut tasks = Vec::new();
    let workers = 32;
    for w in 0..workers {
        let caddr = caddr.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..producers).step_by(workers) {
                let mut p = Producer::init(&caddr, ProducerConfig::transactional(format!("p{i}"))).await?;
                p.send("mem", (i % partitions as usize) as i32, Bytes::from_static(b"0123456789")).await?;
            }
            Ok::<_, producer::ClientError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let after = rss_kib(b.id());
    println!(
        "broker resident memory: {before} KiB with {partitions} empty partitions, {after} KiB with {producers} live producer ids ({:.0} bytes per producer id beyond that)",
        (after.saturating_sub(before) as f64 * 1024.0) / producers as f64
    );
    let _ = b.kill();
    let _ = c.kill();
    Ok(())
}
