//! `cluster up` starts a coordinator and brokers by running its own executable again as each
//! of them (the same code as the `coordinator` and `broker` binaries, whose command lines live
//! in `coordinator::cli` and `broker::cli`), puts [`crate::proxy`] proxies on the cluster's own links,
//! and serves the other commands (`pause`, `kill`, `isolate`, `down`, ...) on a Unix socket in
//! the data directory. Every process appends its fencing events to `events.jsonl` there, and
//! so does `cluster` for each fault it injects; [`crate::timeline`] draws that file.

use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};

use crate::proxy::{Node, Proxies, Target};

/// The argument that makes the executable run as a broker instead (what `cluster` passes).
pub const RUN_BROKER: &str = "__broker";
/// The argument that makes the executable run as a coordinator instead.
pub const RUN_COORDINATOR: &str = "__coordinator";

/// How long a started process may take to print its listening line, in milliseconds.
const START_MS: u64 = 30_000;
/// How long `up` waits for every Kafka listener to see the whole cluster, in milliseconds.
const READY_MS: u64 = 30_000;
/// How long a SIGTERM may take before SIGKILL, in milliseconds.
const STOP_MS: u64 = 15_000;

/// What `cluster up` starts.
#[derive(Debug, Clone)]
pub struct UpConfig {
    /// Brokers (ids 1 to `brokers`).
    pub brokers: u32,
    /// Default replication factor of topics created through the cluster.
    pub replicas: u32,
    /// First Kafka port (broker N listens on `kafka_port + N - 1`); 0 picks free ports.
    pub kafka_port: u16,
    /// Data directory; `None`: a new one under the system's temporary directory, removed at exit.
    pub data_dir: Option<PathBuf>,
    /// Extra flags for every broker.
    pub broker_args: Vec<String>,
    /// Extra flags for the coordinator.
    pub coordinator_args: Vec<String>,
    /// Print the bootstrap line as JSON with every process.
    pub json: bool,
    /// Run the coordinator as replicas on this etcd (empty: one coordinator on its journal).
    pub etcd_endpoints: Vec<String>,
    /// How many coordinator replicas, with `etcd_endpoints`.
    pub coordinators: u32,
}

/// A request on the control socket (one JSON line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlRequest {
    /// pause, resume, kill, restart, isolate, heal, status, down.
    pub action: String,
    /// "broker" or "coordinator" (for the actions that take a process).
    #[serde(default)]
    pub kind: Option<String>,
    /// Broker id (or coordinator replica number).
    #[serde(default)]
    pub n: Option<i32>,
}

/// The answer on the control socket (one JSON line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlReply {
    /// Whether it was done.
    pub ok: bool,
    /// What was done, or why not.
    pub message: String,
}

/// The control socket of the cluster whose data directory is `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join("cluster.sock")
}

/// The events file of the cluster whose data directory is `dir`.
pub fn events_path(dir: &Path) -> PathBuf {
    dir.join("events.jsonl")
}

/// Where the data directory of this user's most recent cluster is written.
pub fn latest_pointer() -> PathBuf {
    std::env::temp_dir().join(format!("epochfence-cluster-{}.latest", rustix::process::getuid().as_raw()))
}

/// The data directory a command means: the one given, or this user's most recent cluster's.
pub fn resolve_data_dir(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d);
    }
    let pointer = latest_pointer();
    let text = std::fs::read_to_string(&pointer).map_err(|_| {
        anyhow!("no cluster is running for this user (nothing at {}): start one with `cluster up`", pointer.display())
    })?;
    Ok(PathBuf::from(text.trim()))
}

/// Send `req` to the cluster of `dir` and return its answer.
pub async fn control(dir: &Path, req: &ControlRequest) -> anyhow::Result<ControlReply> {
    let path = socket_path(dir);
    let stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| {
        anyhow!(
            "no cluster answers at {} ({e}): is `cluster up` running with --data-dir {}?",
            path.display(),
            dir.display()
        )
    })?;
    let (r, mut w) = stream.into_split();
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    w.write_all(line.as_bytes()).await?;
    let mut answer = String::new();
    tokio::io::BufReader::new(r).read_line(&mut answer).await?;
    serde_json::from_str(&answer).with_context(|| format!("the cluster's answer was not understood: {answer:?}"))
}

/// One process of the cluster.
struct Member {
    name: String,
    node: Node,
    /// The arguments after [`RUN_BROKER`] or [`RUN_COORDINATOR`], with the ports it bound.
    args: Vec<String>,
    run_as: &'static str,
    child: Option<Child>,
    paused: bool,
    log: PathBuf,
    internal: Option<SocketAddr>,
    kafka: Option<SocketAddr>,
    /// The proxy in front of its internal listener, forwarding here once it listens.
    target: Option<Target>,
}

impl Member {
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn state(&self) -> &'static str {
        match (&self.child, self.paused) {
            (None, _) => "stopped",
            (Some(_), true) => "paused",
            (Some(_), false) => "running",
        }
    }
}

/// The lines a child prints on stdout, also copied to its log.
struct Lines {
    rx: mpsc::UnboundedReceiver<String>,
}

impl Lines {
    /// The first line starting with `prefix`, its rest; an error if the process ends first.
    async fn wait_for(&mut self, prefix: &str, log: &Path) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(START_MS);
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(line)) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.trim().to_string());
                    }
                }
                Ok(None) => {
                    bail!("it exited before printing \"{prefix}\"; its log {} ends:\n{}", log.display(), tail(log))
                }
                Err(_) => bail!("it did not print \"{prefix}\" within {START_MS} ms; its log: {}", log.display()),
            }
        }
    }
}

/// The last lines of a log, for an error message.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

fn spawn(member: &Member) -> anyhow::Result<(Child, Lines)> {
    let exe = std::env::current_exe().context("cannot find this executable to run the cluster's processes")?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&member.log)?;
    let mut cmd = Command::new(exe);
    cmd.arg(member.run_as).args(&member.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log.try_clone()?);
    // A process group of its own: Ctrl-C in the terminal reaches `cluster` alone, which stops
    // the brokers before the coordinator.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let parent = rustix::process::getpid();
    // SAFETY: between fork and exec the closure makes two system calls (async-signal-safe) and
    // allocates nothing.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        cmd.pre_exec(move || {
            // The children watch their parent: if `cluster` dies (even by SIGKILL), so do they.
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // It may have died before the line above: then nobody would signal.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("the cluster process exited"));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", member.name))?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::unbounded_channel();
    let mut log = log;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            let _ = tx.send(line);
        }
    });
    Ok((child, Lines { rx }))
}

/// Replace the value after `flag` in `args`.
fn set_flag(args: &mut [String], flag: &str, value: &str) {
    if let Some(i) = args.iter().position(|a| a == flag) {
        if let Some(v) = args.get_mut(i + 1) {
            *v = value.to_string();
        }
    }
}

struct Supervisor {
    dir: PathBuf,
    remove_dir: bool,
    members: Vec<Member>,
    proxies: Proxies,
    events: net::events::EventsFile,
    brokers: u32,
    /// The coordinator runs as replicas on etcd.
    replicated: bool,
}

impl Supervisor {
    fn event(&self, action: &str, target: &str, extra: serde_json::Value) {
        let mut fields = serde_json::Map::new();
        fields.insert("action".into(), action.into());
        fields.insert("target".into(), target.into());
        if let serde_json::Value::Object(m) = extra {
            fields.extend(m);
        }
        self.events.append("fault", fields);
    }

    fn find(&self, kind: Option<&str>, n: Option<i32>) -> Result<usize, String> {
        let replicas = self.members.iter().filter(|m| m.node == Node::Coordinator).count();
        let name = match (kind, n) {
            (Some("broker"), Some(n)) => format!("broker {n}"),
            (Some("broker"), None) => return Err("which broker? give its id: `broker N`".into()),
            (Some("coordinator"), None | Some(1)) if !self.replicated => "coordinator".into(),
            (Some("coordinator"), Some(n)) if !self.replicated => {
                return Err(format!("this cluster has one coordinator; there is no coordinator {n}"));
            }
            (Some("coordinator"), Some(n)) => format!("coordinator {n}"),
            (Some("coordinator"), None) => self.active_coordinator().ok_or_else(|| {
                format!(
                    "no coordinator replica is active now (none took over, or the last one stepped down): name one, \
                     `coordinator K` with K from 1 to {replicas}"
                )
            })?,
            (Some(k), _) => return Err(format!("unknown process kind '{k}': broker N or coordinator")),
            (None, _) => return Err("which process? `broker N` or `coordinator`".into()),
        };
        self.members.iter().position(|m| m.name == name).ok_or_else(|| {
            let coordinators = if self.replicated {
                format!("coordinator replicas 1 to {replicas}")
            } else {
                "one coordinator".into()
            };
            format!("there is no {name}: this cluster has brokers 1 to {} and {coordinators}", self.brokers)
        })
    }

    /// The coordinator replica active now, as the events tell: the last to take over, if it has
    /// not stepped down since.
    fn active_coordinator(&self) -> Option<String> {
        let text = std::fs::read_to_string(events_path(&self.dir)).ok()?;
        let mut active = None;
        for e in text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
            let process = e["process"].as_str().unwrap_or("").to_string();
            match e["event"].as_str() {
                Some("coordinator took over") => active = Some(process),
                Some("coordinator stepped down") if active.as_deref() == Some(process.as_str()) => active = None,
                Some("fault") if e["action"] == "kill" && active.as_deref() == e["target"].as_str() => active = None,
                _ => {}
            }
        }
        active
    }

    /// Start member `i` and wait until it listens; records its ports and pid.
    async fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let (child, mut lines) = spawn(&self.members[i])?;
        let pid = child.id();
        self.members[i].child = Some(child);
        self.members[i].paused = false;
        let (node, log) = (self.members[i].node, self.members[i].log.clone());
        let waited: anyhow::Result<()> = async {
            match node {
                Node::Coordinator => {
                    let addr: SocketAddr = lines.wait_for("coordinator listening on ", &log).await?.parse()?;
                    self.members[i].internal = Some(addr);
                    set_flag(&mut self.members[i].args, "--listen", &addr.to_string());
                    if let Some(t) = &self.members[i].target {
                        *t.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr);
                    }
                }
                Node::Broker(id) => {
                    let addr: SocketAddr =
                        lines.wait_for(&format!("broker {id} listening on "), &log).await?.parse()?;
                    let kafka: SocketAddr =
                        lines.wait_for(&format!("broker {id} kafka listening on "), &log).await?.parse()?;
                    let m = &mut self.members[i];
                    m.internal = Some(addr);
                    m.kafka = Some(kafka);
                    set_flag(&mut m.args, "--listen", &addr.to_string());
                    set_flag(&mut m.args, "--kafka-listen", &kafka.to_string());
                    if let Some(t) = &m.target {
                        *t.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr);
                    }
                }
                Node::Unknown => {}
            }
            Ok(())
        }
        .await;
        if let Err(e) = waited {
            self.stop_now(i);
            return Err(e.context(format!("{} did not start", self.members[i].name)));
        }
        self.proxies.set_pid(pid, self.members[i].node);
        Ok(())
    }

    fn signal(&self, i: usize, sig: rustix::process::Signal) -> Result<u32, String> {
        let m = &self.members[i];
        let pid =
            m.pid().ok_or_else(|| format!("{} is not running (start it: `cluster restart {}`)", m.name, m.name))?;
        let raw = rustix::process::Pid::from_raw(pid as i32).ok_or("no such process")?;
        rustix::process::kill_process(raw, sig).map_err(|e| format!("cannot signal {}: {e}", m.name))?;
        Ok(pid)
    }

    /// SIGKILL member `i` and reap it.
    fn stop_now(&mut self, i: usize) -> Option<u32> {
        let child = self.members[i].child.as_mut()?;
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        self.proxies.forget_pid(pid);
        self.members[i].child = None;
        self.members[i].paused = false;
        Some(pid)
    }

    /// SIGCONT and SIGTERM member `i`, wait for it (SIGKILL after [`STOP_MS`]).
    async fn stop_clean(&mut self, i: usize) -> Option<u32> {
        let pid = self.members[i].pid()?;
        let _ = self.signal(i, rustix::process::Signal::CONT);
        let _ = self.signal(i, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_millis(STOP_MS);
        while Instant::now() < deadline {
            if let Some(child) = self.members[i].child.as_mut() {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    self.proxies.forget_pid(pid);
                    self.members[i].child = None;
                    self.members[i].paused = false;
                    return Some(pid);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop_now(i)
    }

    /// Note members that exited on their own.
    fn reap(&mut self) {
        for i in 0..self.members.len() {
            let Some(child) = self.members[i].child.as_mut() else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                let pid = child.id();
                self.proxies.forget_pid(pid);
                self.members[i].child = None;
                self.members[i].paused = false;
                let name = self.members[i].name.clone();
                eprintln!("cluster: {name} (pid {pid}) exited: {status}; its log: {}", self.members[i].log.display());
                self.event("exited", &name, serde_json::json!({"pid": pid, "status": status.to_string()}));
            }
        }
    }

    async fn handle(&mut self, req: &ControlRequest) -> Result<String, String> {
        use rustix::process::Signal;
        let kind = req.kind.as_deref();
        match req.action.as_str() {
            "status" => Ok(self.table()),
            "pause" | "resume" | "kill" | "restart" => {
                let i = self.find(kind, req.n)?;
                let name = self.members[i].name.clone();
                match req.action.as_str() {
                    "pause" => {
                        let pid = self.signal(i, Signal::STOP)?;
                        self.members[i].paused = true;
                        self.event("pause", &name, serde_json::json!({"pid": pid}));
                        Ok(format!("paused {name} (pid {pid}, SIGSTOP)"))
                    }
                    "resume" => {
                        let pid = self.signal(i, Signal::CONT)?;
                        self.members[i].paused = false;
                        self.event("resume", &name, serde_json::json!({"pid": pid}));
                        Ok(format!("resumed {name} (pid {pid}, SIGCONT)"))
                    }
                    "kill" => {
                        self.reap();
                        let pid = self.stop_now(i).ok_or_else(|| format!("{name} is not running"))?;
                        self.event("kill", &name, serde_json::json!({"pid": pid}));
                        Ok(format!("killed {name} (pid {pid}, SIGKILL)"))
                    }
                    _ => {
                        self.reap();
                        let was = self.stop_clean(i).await;
                        self.start(i).await.map_err(|e| format!("{e:#}"))?;
                        let pid = self.members[i].pid().unwrap_or(0);
                        self.event("restart", &name, serde_json::json!({"pid": pid, "previous_pid": was}));
                        Ok(match was {
                            Some(old) => format!("restarted {name} (pid {old} stopped with SIGTERM, now pid {pid})"),
                            None => format!("started {name} again (pid {pid})"),
                        })
                    }
                }
            }
            "isolate" => {
                let i = self.find(kind, req.n)?;
                let Node::Broker(id) = self.members[i].node else {
                    return Err("only a broker can be isolated: `cluster isolate broker N`".into());
                };
                let cut = self.proxies.isolate(id);
                self.event("isolate", &self.members[i].name, serde_json::json!({"connections_cut": cut}));
                Ok(format!(
                    "isolated broker {id}: its links to the coordinator and the other brokers are cut ({cut} open \
                     connections closed); its Kafka listener still serves clients"
                ))
            }
            "heal" => {
                let was = self.proxies.heal();
                let names: Vec<String> = was.iter().map(|id| format!("broker {id}")).collect();
                self.event("heal", &names.join(","), serde_json::json!({}));
                Ok(if names.is_empty() {
                    "healed: no broker was isolated".to_string()
                } else {
                    format!("healed: {} linked again", names.join(", "))
                })
            }
            other => {
                Err(format!("unknown action '{other}': pause, resume, kill, restart, isolate, heal, status or down"))
            }
        }
    }

    fn table(&self) -> String {
        let isolated = self.proxies.isolated();
        let mut out =
            format!("{:<12} {:>7}  {:<9} {:<21} {:<21} log\n", "process", "pid", "state", "kafka", "internal");
        for m in &self.members {
            let state = match m.node {
                Node::Broker(id) if isolated.contains(&id) && m.child.is_some() => "isolated",
                _ => m.state(),
            };
            out.push_str(&format!(
                "{:<12} {:>7}  {:<9} {:<21} {:<21} {}\n",
                m.name,
                m.pid().map_or("-".to_string(), |p| p.to_string()),
                state,
                m.kafka.map_or("-".to_string(), |a| a.to_string()),
                m.internal.map_or("-".to_string(), |a| a.to_string()),
                m.log.display()
            ));
        }
        out
    }

    fn bootstrap(&self) -> String {
        self.members.iter().filter_map(|m| m.kafka).map(|a| a.to_string()).collect::<Vec<_>>().join(",")
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "bootstrap_servers": self.bootstrap(),
            "data_dir": self.dir,
            "events_file": events_path(&self.dir),
            "processes": self.members.iter().map(|m| serde_json::json!({
                "name": m.name,
                "pid": m.pid(),
                "state": m.state(),
                "kafka": m.kafka.map(|a| a.to_string()),
                "internal": m.internal.map(|a| a.to_string()),
                "log": m.log,
            })).collect::<Vec<_>>(),
        })
    }

    async fn shutdown(&mut self) {
        // Brokers first (each syncs its logs), then the coordinator (its replicas).
        for i in (0..self.members.len()).rev() {
            self.stop_clean(i).await;
        }
        let _ = std::fs::remove_file(socket_path(&self.dir));
        let pointer = latest_pointer();
        if std::fs::read_to_string(&pointer).is_ok_and(|p| Path::new(p.trim()) == self.dir) {
            let _ = std::fs::remove_file(&pointer);
        }
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The etcd key prefix of the cluster of `dir`: made once and kept in the directory, so the
/// same data directory finds its state again and two clusters never share keys.
fn etcd_prefix(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("etcd-prefix");
    if let Ok(p) = std::fs::read_to_string(&path) {
        return Ok(p.trim().to_string());
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let prefix = format!("/epochfence-cluster/{}-{nanos}", std::process::id());
    std::fs::write(&path, format!("{prefix}\n"))?;
    Ok(prefix)
}

/// Wait until every Kafka listener of `addrs` sees all `brokers` brokers registered.
async fn wait_ready(addrs: &[SocketAddr], brokers: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(READY_MS);
    for addr in addrs {
        loop {
            let mut client = producer::kafka::KafkaClient::new(
                &addr.to_string(),
                producer::ClientConfig { request_timeout_ms: 2_000, ..producer::ClientConfig::default() },
            );
            let seen = match client.refresh_metadata(&[], false).await {
                Ok(()) => client.brokers().len(),
                Err(_) => 0,
            };
            if seen >= brokers {
                break;
            }
            if Instant::now() > deadline {
                bail!("the Kafka listener {addr} sees {seen} of {brokers} brokers after {READY_MS} ms");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

/// `cluster up`: start, print the bootstrap line, serve commands until Ctrl-C, SIGTERM or
/// `cluster down`, then stop everything.
pub async fn up(config: UpConfig) -> anyhow::Result<()> {
    let started = Instant::now();
    let (dir, remove_dir) = match &config.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create --data-dir {}", d.display()))?;
            (std::fs::canonicalize(d)?, false)
        }
        None => {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
            let d = std::env::temp_dir().join(format!("epochfence-cluster-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            (d, true)
        }
    };
    let sock = socket_path(&dir);
    if tokio::net::UnixStream::connect(&sock).await.is_ok() {
        bail!(
            "a cluster is already running with data dir {} (stop it first: cluster down --data-dir {0})",
            dir.display()
        );
    }
    let _ = std::fs::remove_file(&sock);
    let control = tokio::net::UnixListener::bind(&sock)
        .with_context(|| format!("cannot make the control socket {} (a shorter --data-dir helps)", sock.display()))?;
    std::fs::create_dir_all(dir.join("logs"))?;
    let events = net::events::EventsFile::open(&events_path(&dir), "cluster")?;

    // Every Kafka port named must be free before anything starts.
    let kafka_ports: Vec<u16> = (0..config.brokers)
        .map(|i| if config.kafka_port == 0 { 0 } else { config.kafka_port.saturating_add(i as u16) })
        .collect();
    for (i, port) in kafka_ports.iter().enumerate().filter(|(_, p)| **p != 0) {
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", *port)) {
            let _ = std::fs::remove_file(&sock);
            if remove_dir {
                let _ = std::fs::remove_dir_all(&dir);
            }
            bail!(
                "port {port} (broker {}'s Kafka listener) is taken: {e}; give another --kafka-port, or --kafka-port 0 for free ports",
                i + 1
            );
        }
    }

    let proxies = Proxies::default();
    let mut sup = Supervisor {
        dir: dir.clone(),
        remove_dir,
        members: Vec::new(),
        proxies: proxies.clone(),
        events,
        brokers: config.brokers,
        replicated: !config.etcd_endpoints.is_empty(),
    };
    let events_file = events_path(&dir).display().to_string();
    let result: anyhow::Result<()> = async {
        // The coordinator: one on its journal, or replicas on etcd, each behind a proxy that
        // tells its diallers apart (the address a replica publishes, which brokers follow).
        let mut coordinator_addrs = Vec::new();
        let replicas = if sup.replicated { config.coordinators.max(1) } else { 1 };
        let prefix = if sup.replicated { Some(etcd_prefix(&dir)?) } else { None };
        for k in 1..=replicas {
            let (name, data) = if sup.replicated {
                (format!("coordinator {k}"), dir.join(format!("coordinator-{k}")))
            } else {
                ("coordinator".to_string(), dir.join("coordinator"))
            };
            let target: Target = Arc::new(Mutex::new(None));
            let mut in_addr = None;
            if sup.replicated {
                let inbound = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                in_addr = Some(inbound.local_addr()?);
                proxies.spawn(inbound, None, Node::Coordinator, target.clone());
            }
            coordinator_addrs.push((in_addr, target.clone()));
            let mut args: Vec<String> = vec![
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--data-dir".into(),
                data.display().to_string(),
                "--events-file".into(),
                events_file.clone(),
                "--events-name".into(),
                name.clone(),
                "--default-replication-factor".into(),
                config.replicas.to_string(),
            ];
            if let Some(prefix) = &prefix {
                args.extend([
                    "--etcd-endpoints".into(),
                    config.etcd_endpoints.join(","),
                    "--etcd-prefix".into(),
                    prefix.clone(),
                    "--advertise".into(),
                    in_addr.map(|a| a.to_string()).unwrap_or_default(),
                ]);
            }
            args.extend(config.coordinator_args.iter().cloned());
            sup.members.push(Member {
                name: name.clone(),
                node: Node::Coordinator,
                args,
                run_as: RUN_COORDINATOR,
                child: None,
                paused: false,
                log: dir.join("logs").join(format!("{}.log", name.replace(' ', "-"))),
                internal: None,
                kafka: None,
                target: Some(target),
            });
            let i = sup.members.len() - 1;
            sup.start(i).await?;
        }
        for id in 1..=config.brokers as i32 {
            // The address it advertises to the cluster (everyone's link to it), and its link to
            // the coordinator: with one coordinator a proxy given to this broker alone, with
            // replicas their proxies (which tell this broker by its socket).
            let coordinator = if sup.replicated {
                coordinator_addrs.iter().filter_map(|(a, _)| a.map(|a| a.to_string())).collect::<Vec<_>>().join(",")
            } else {
                let to_coordinator = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let c_addr = to_coordinator.local_addr()?;
                proxies.spawn(
                    to_coordinator,
                    Some(Node::Broker(id)),
                    Node::Coordinator,
                    coordinator_addrs[0].1.clone(),
                );
                c_addr.to_string()
            };
            let inbound = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let in_addr = inbound.local_addr()?;
            let target: Target = Arc::new(Mutex::new(None));
            proxies.spawn(inbound, None, Node::Broker(id), target.clone());
            let mut args: Vec<String> = vec![
                "--id".into(),
                id.to_string(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--advertise".into(),
                in_addr.to_string(),
                "--coordinator".into(),
                coordinator,
                "--data-dir".into(),
                dir.join(format!("broker-{id}")).display().to_string(),
                "--kafka-listen".into(),
                format!("127.0.0.1:{}", kafka_ports[(id - 1) as usize]),
                "--events-file".into(),
                events_file.clone(),
            ];
            args.extend(config.broker_args.iter().cloned());
            sup.members.push(Member {
                name: format!("broker {id}"),
                node: Node::Broker(id),
                args,
                run_as: RUN_BROKER,
                child: None,
                paused: false,
                log: dir.join("logs").join(format!("broker-{id}.log")),
                internal: None,
                kafka: None,
                target: Some(target),
            });
            let i = sup.members.len() - 1;
            sup.start(i).await?;
        }
        let kafka: Vec<SocketAddr> = sup.members.iter().filter_map(|m| m.kafka).collect();
        wait_ready(&kafka, config.brokers as usize).await
    }
    .await;
    if let Err(e) = result {
        sup.shutdown().await;
        return Err(e);
    }
    std::fs::write(latest_pointer(), format!("{}\n", dir.display()))?;
    let ready_ms = started.elapsed().as_millis() as u64;
    let mut up_fields = serde_json::Map::new();
    up_fields.insert("action".into(), "up".into());
    up_fields.insert("target".into(), "".into());
    up_fields.insert("bootstrap_servers".into(), sup.bootstrap().into());
    up_fields.insert("ready_ms".into(), ready_ms.into());
    sup.events.append("fault", up_fields);
    if config.json {
        let mut j = sup.json();
        j["ready_ms"] = ready_ms.into();
        println!("{j}");
    } else {
        println!("bootstrap.servers={}", sup.bootstrap());
    }
    let _ = std::io::stdout().flush();
    eprint!(
        "epochfence cluster up in {ready_ms} ms: data dir {}, events {}\n{}",
        dir.display(),
        events_path(&dir).display(),
        sup.table()
    );
    eprintln!("faults: cluster pause|resume|kill|restart broker N | coordinator; cluster isolate broker N; cluster heal; cluster timeline FILE.html; cluster down");

    // Commands arrive on the control socket; they are carried out here, on this thread, which
    // also started the children (their parent-death signal follows the thread that forked them).
    // (the request, its answer, and word that the answer was written).
    type Call = (ControlRequest, oneshot::Sender<ControlReply>, oneshot::Receiver<()>);
    let (tx, mut rx) = mpsc::channel::<Call>(16);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = control.accept().await else { continue };
            let tx = tx.clone();
            tokio::spawn(async move {
                let (r, mut w) = stream.into_split();
                let mut line = String::new();
                if tokio::io::BufReader::new(r).read_line(&mut line).await.is_err() {
                    return;
                }
                let (written, written_rx) = oneshot::channel();
                let reply = match serde_json::from_str::<ControlRequest>(&line) {
                    Ok(req) => {
                        let (done, answer) = oneshot::channel();
                        if tx.send((req, done, written_rx)).await.is_err() {
                            return;
                        }
                        match answer.await {
                            Ok(reply) => reply,
                            Err(_) => return,
                        }
                    }
                    Err(e) => ControlReply { ok: false, message: format!("bad request: {e}") },
                };
                let mut text = serde_json::to_string(&reply).unwrap_or_default();
                text.push('\n');
                let _ = w.write_all(text.as_bytes()).await;
                let _ = w.flush().await;
                let _ = written.send(());
            });
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut down: Option<(oneshot::Sender<ControlReply>, oneshot::Receiver<()>)> = None;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            Some((req, reply, written)) = rx.recv() => {
                if req.action == "down" {
                    down = Some((reply, written));
                    break;
                }
                let answer = match sup.handle(&req).await {
                    Ok(message) => ControlReply { ok: true, message },
                    Err(message) => ControlReply { ok: false, message },
                };
                let _ = reply.send(answer);
            }
            _ = tick.tick() => sup.reap(),
        }
    }
    sup.event("down", "", serde_json::json!({}));
    sup.shutdown().await;
    eprintln!("epochfence cluster stopped");
    if let Some((reply, written)) = down {
        let _ = reply.send(ControlReply { ok: true, message: format!("stopped the cluster of {}", dir.display()) });
        // The answer leaves before the runtime goes.
        let _ = tokio::time::timeout(Duration::from_secs(1), written).await;
    }
    Ok(())
}
