//! Helpers for tests that run the real binaries as separate processes.

#![allow(dead_code)]

pub mod kafka;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

static BUILD: Once = Once::new();

/// A loopback port for a process a test starts later, to listen on (given on its command
/// line). Not `bind(0)`: a port found free that way is in Linux's ephemeral range (32768-60999),
/// where another test's `bind(0)` or any outgoing connection may take it before the process
/// binds it (a CI run's etcd member could not bind its port that way, and another test's etcd
/// answered on it). Below that range, from one counter for all the tests of this binary (the
/// test binaries run one at a time), each checked free.
pub fn spare_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (std::process::id().wrapping_mul(7919).wrapping_add(n) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Path of a workspace binary, built (or rebuilt if stale) once per test process with the
/// same profile as this test.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf();
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--bins", "-p", "coordinator", "-p", "broker", "-p", "producer", "-p", "fencecheck"]);
        // The etcd tests (`--features etcd`) need a coordinator built with etcd support.
        if cfg!(feature = "etcd") {
            cmd.args(["--features", "coordinator/etcd"]);
        }
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd.status().expect("run cargo build for the binaries");
        assert!(status.success(), "building the binaries failed");
    });
    profile_dir.join(name)
}

/// A server process; killed with SIGKILL when dropped.
pub struct Proc {
    pub child: Child,
    pub addr: String,
    stdout: Option<BufReader<ChildStdout>>,
}

/// The lines a process prints, read by a thread of their own (see [`Proc::watch`]).
#[derive(Clone, Default)]
pub struct Lines {
    seen: std::sync::Arc<(std::sync::Mutex<Vec<String>>, std::sync::Condvar)>,
}

impl Lines {
    /// Wait (up to `timeout`) for the `n`-th line (1 = the first) that starts with `prefix`,
    /// counting from the lines printed after [`Proc::watch`].
    pub fn wait_for(&self, prefix: &str, n: usize, timeout: std::time::Duration) -> Option<String> {
        let (lock, ready) = &*self.seen;
        let deadline = std::time::Instant::now() + timeout;
        let mut seen = lock.lock().unwrap();
        loop {
            if let Some(line) = seen.iter().filter(|l| l.starts_with(prefix)).nth(n - 1) {
                return Some(line.clone());
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            seen = ready.wait_timeout(seen, left).unwrap().0;
        }
    }

    /// How many lines so far start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.seen.0.lock().unwrap().iter().filter(|l| l.starts_with(prefix)).count()
    }
}

impl Proc {
    /// Start `name args...`, wait for its "listening on ADDR" line, log stderr to `log`.
    pub fn start(name: &str, args: &[&str], log: &Path) -> Proc {
        Self::spawn(name, Command::new(bin(name)).args(args), log)
    }

    /// [`Proc::start`] with every file the process writes limited to `blocks` of `ulimit -f`
    /// (RLIMIT_FSIZE) and SIGXFSZ ignored: a write past it fails with EFBIG, as on a full disk.
    pub fn start_with_file_limit(name: &str, args: &[&str], log: &Path, blocks: u32) -> Proc {
        let script = format!("trap '' XFSZ; ulimit -f {blocks} && exec \"$0\" \"$@\"");
        Self::spawn(name, Command::new("sh").arg("-c").arg(script).arg(bin(name)).args(args), log)
    }

    fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the listening line");
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|a| a.contains(':'))
            .unwrap_or_else(|| panic!("{name} did not print its address; log: {}", log.display()))
            .to_string();
        Proc { child, addr, stdout: Some(stdout) }
    }

    /// The next line the process prints after its first (a broker's Kafka listening line).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        let stdout = self.stdout.as_mut().expect("stdout is not watched");
        stdout.read_line(&mut line).expect("read a line of the process's output");
        line.trim().to_string()
    }

    /// Read every later line of the process's output on a thread, into the returned [`Lines`].
    pub fn watch(&mut self) -> Lines {
        let mut stdout = self.stdout.take().expect("stdout is watched once");
        let lines = Lines::default();
        let feed = lines.clone();
        std::thread::spawn(move || loop {
            let mut line = String::new();
            match stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let (lock, ready) = &*feed.seen;
                    lock.lock().unwrap().push(line.trim().to_string());
                    ready.notify_all();
                }
            }
        });
        lines
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Start a coordinator on an ephemeral port with its journal in `dir`.
pub fn coordinator(dir: &Path) -> Proc {
    coordinator_with(dir, &[])
}

/// [`coordinator`] with extra flags.
pub fn coordinator_with(dir: &Path, extra: &[&str]) -> Proc {
    let data = dir.join("coordinator");
    let mut args = vec!["--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()];
    args.extend_from_slice(extra);
    Proc::start("coordinator", &args, &dir.join("coordinator.log"))
}

/// Start broker `id` on an ephemeral port with its logs in `dir`.
pub fn broker(id: i32, coordinator: &str, dir: &Path) -> Proc {
    broker_with(id, coordinator, dir, &[])
}

/// [`broker`] with extra flags (a `--heartbeat-ms` among them replaces the 50 ms default).
pub fn broker_with(id: i32, coordinator: &str, dir: &Path, extra: &[&str]) -> Proc {
    let data = dir.join(format!("broker-{id}"));
    let id = id.to_string();
    let mut args = vec![
        "--id",
        &id,
        "--listen",
        "127.0.0.1:0",
        "--coordinator",
        coordinator,
        "--data-dir",
        data.to_str().unwrap(),
    ];
    if !extra.contains(&"--heartbeat-ms") {
        args.extend_from_slice(&["--heartbeat-ms", "50"]);
    }
    args.extend_from_slice(extra);
    Proc::start("broker", &args, &dir.join(format!("broker-{id}.log")))
}

/// Run a client binary to completion.
pub fn run(name: &str, args: &[&str]) -> Output {
    Command::new(bin(name)).args(args).output().unwrap_or_else(|e| panic!("run {name}: {e}"))
}

/// `admin create-topic`, retried while the broker has not registered yet (bounded).
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    create_topic_replicated(bootstrap, topic, partitions, None)
}

/// `admin create-topic --replicas R`, retried while too few brokers have registered (bounded).
pub fn create_topic_replicated(bootstrap: &str, topic: &str, partitions: i32, replicas: Option<i32>) {
    let partitions = partitions.to_string();
    let replicas = replicas.map(|r| r.to_string());
    for _ in 0..200 {
        let mut args = vec!["--bootstrap", bootstrap, "create-topic", topic, "--partitions", &partitions];
        if let Some(r) = &replicas {
            args.extend(["--replicas", r.as_str()]);
        }
        let out = run("admin", &args);
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("BROKER_NOT_AVAILABLE") || err.contains("INVALID_REPLICATION_FACTOR"),
            "admin create-topic failed: {err}"
        );
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("no broker registered in time");
}

/// Broker `id`'s directory of `topic-partition` under `dir`.
pub fn log_path(dir: &Path, id: i32, topic: &str, partition: i32) -> PathBuf {
    dir.join(format!("broker-{id}")).join(format!("{topic}-{partition}"))
}

/// The bytes of the batches below `end_offset` in a replica's log (its segment files in `dir`).
pub fn committed_bytes(dir: &Path, end_offset: i64) -> Vec<u8> {
    let files = broker::log::segment_files(dir).unwrap_or_default();
    let raw: bytes::Bytes =
        files.iter().flat_map(|(_, p)| std::fs::read(p).unwrap_or_default()).collect::<Vec<u8>>().into();
    let mut out = Vec::new();
    for item in protocol::batch::BatchIter::new(raw) {
        let Ok((h, b)) = item else { break };
        if h.last_offset() < end_offset {
            out.extend_from_slice(&b);
        }
    }
    out
}

/// Send a POSIX signal (`STOP`, `CONT`) to a process.
pub fn signal(proc: &Proc, sig: &str) {
    let status = Command::new("kill").args([format!("-{sig}"), proc.child.id().to_string()]).status().expect("kill");
    assert!(status.success(), "kill -{sig} failed");
}

/// The last `lines` lines of each log file, headed by its name: for a failing test's message,
/// since the files go with the test's temporary directory.
pub fn log_tails(logs: &[&Path], lines: usize) -> String {
    let mut out = String::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_else(|e| format!("(cannot read: {e})"));
        let all: Vec<&str> = text.lines().collect();
        out.push_str(&format!("\n--- {} (last {} lines)\n", log.display(), lines.min(all.len())));
        for line in &all[all.len().saturating_sub(lines)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The python of the venv of pinned Kafka clients (`scripts/kafka-clients-venv` makes it, or
/// finds it made); fails, never skips, when it cannot be had.
pub fn kafka_clients_python() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = Command::new(root.join("scripts/kafka-clients-venv"))
        .current_dir(root)
        .output()
        .expect("run scripts/kafka-clients-venv (it needs bash)");
    assert!(
        venv.status.success(),
        "scripts/kafka-clients-venv could not make the venv of pinned Kafka clients:\n{}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let stdout = String::from_utf8_lossy(&venv.stdout);
    stdout.lines().last().expect("the venv's python on the script's last line").trim().to_string()
}

/// A process started with `--metrics-listen 127.0.0.1:0`: the address from its "metrics
/// listening on" line, after skipping `lines_before` lines of its output.
pub fn metrics_addr(p: &mut Proc, lines_before: usize) -> String {
    for _ in 0..lines_before {
        p.next_line();
    }
    let line = p.next_line();
    assert!(line.starts_with("metrics listening on "), "{line}");
    line.rsplit(' ').next().unwrap().to_string()
}

/// The `/metrics` text served at `addr`.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: epochfence\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body.to_string()
}

/// The value of the sample `name` (with its labels, as printed) in a `/metrics` text, 0 if absent.
pub fn sample(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// The flags the machine's notes give for a headless Chromium on a closed network.
pub const CHROMIUM_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Debian's chromium, installed by the project's script if missing: its path.
pub fn chromium() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = Command::new(root.join("scripts/chromium")).output().expect("run scripts/chromium (it needs bash)");
    assert!(found.status.success(), "scripts/chromium: {}", String::from_utf8_lossy(&found.stderr));
    String::from_utf8_lossy(&found.stdout).lines().last().unwrap().trim().to_string()
}

/// Debian's kcat, installed by the project's script if missing: its path.
pub fn kcat() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = Command::new(root.join("scripts/kcat")).output().expect("run scripts/kcat (it needs bash)");
    assert!(found.status.success(), "scripts/kcat: {}", String::from_utf8_lossy(&found.stderr));
    String::from_utf8_lossy(&found.stdout).lines().last().unwrap().trim().to_string()
}

/// The DOM a headless Chromium builds from `page` (profile under `scratch`).
pub fn browser_dom(page: &Path, scratch: &Path) -> String {
    let out = Command::new(chromium())
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", scratch.join("chromium-profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
