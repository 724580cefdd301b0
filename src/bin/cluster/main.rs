//! `cluster`: a local epochfence cluster in one command, faults on demand, and a timeline of the
//! run, for testing a Kafka application against what fencing exists for (README, "Test your
//! application").
//!
//! ```text
//! cluster up [--brokers N] [--replicas R] [--kafka-port P] [--data-dir D] [--broker-arg A]... [--coordinator-arg A]... [--json]
//! cluster pause|resume|kill|restart broker N | coordinator [--data-dir D]
//! cluster isolate broker N | cluster heal | cluster status | cluster down   [--data-dir D]
//! cluster timeline FILE.html [--follow] [--data-dir D]
//! ```

mod proxy;
mod supervisor;
mod timeline;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use supervisor::{ControlRequest, UpConfig};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A local epochfence cluster (a coordinator and brokers as child processes) with faults on
/// demand and a timeline of the run.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Debug, Clone)]
struct Dir {
    /// The cluster's data directory (default: this user's most recent cluster).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a coordinator and brokers, print `bootstrap.servers=...`, and run until Ctrl-C,
    /// SIGTERM or `cluster down`.
    Up {
        /// Brokers to start (ids 1 to N).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
        brokers: u32,
        /// Default replication factor of topics created through the cluster (default min(3, N)).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        replicas: Option<u32>,
        /// Broker N's Kafka listener is on this port plus N - 1 (0: free ports).
        #[arg(long, default_value_t = 19092)]
        kafka_port: u16,
        /// Keep the cluster's data here (default: a new directory under the system's temporary
        /// directory, removed at exit).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// A flag for every broker (repeatable), e.g. `--broker-arg=--fsync=never`.
        #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
        broker_arg: Vec<String>,
        /// A flag for the coordinator (repeatable), e.g. `--coordinator-arg=--broker-lease-ms=1000`.
        #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
        coordinator_arg: Vec<String>,
        /// Coordinator replicas on this etcd (needs a build with the cargo feature `etcd`).
        #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
        etcd_endpoints: Vec<String>,
        /// How many coordinator replicas to run on `--etcd-endpoints` (default 1).
        #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=9))]
        coordinators: Option<u32>,
        /// Print the bootstrap line as JSON, with every process.
        #[arg(long)]
        json: bool,
    },
    /// Stop the cluster (every process with SIGTERM).
    Down(Dir),
    /// Show the cluster's processes.
    Status(Dir),
    /// Freeze a process (SIGSTOP): `pause broker N` or `pause coordinator`.
    Pause(Target),
    /// Let a paused process go on (SIGCONT).
    Resume(Target),
    /// Kill a process (SIGKILL); `restart` starts it again (the crash).
    Kill(Target),
    /// Stop a process cleanly (SIGTERM) if it runs, and start it again.
    Restart(Target),
    /// Cut a broker's links to the coordinator and the other brokers (its Kafka listener keeps
    /// serving clients): `isolate broker N`.
    Isolate(Target),
    /// Let every isolated broker's links through again.
    Heal(Dir),
    /// Draw the run's events (grants, fences, refused writes, markers, elections, group
    /// generations, the faults injected) as one self-contained HTML page.
    Timeline {
        /// The page to write.
        file: PathBuf,
        /// Rewrite the page every second as the run goes, until Ctrl-C.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        dir: Dir,
    },
    /// Write a new test CA and a certificate it signed for `localhost` and `127.0.0.1` into
    /// DIR (`ca.pem`, `server.pem`, `server.key`), for `--tls-cert`/`--tls-key` and the
    /// clients' CA location (`ssl.ca.location`, `ssl_cafile`), and with `--client NAME` a client
    /// certificate for mutual TLS (`client-NAME.pem`, `client-NAME.key`; subject
    /// `CN=NAME,OU=clients,O=epochfence`) for the broker's `--tls-client-ca`. For tests: the CA's
    /// key is not kept, so it signs nothing else.
    Certificates {
        /// The directory to write them into (made if missing).
        dir: PathBuf,
        /// Also a client certificate for NAME (repeatable).
        #[arg(long = "client", value_name = "NAME")]
        clients: Vec<String>,
    },
}

#[derive(clap::Args, Debug)]
struct Target {
    /// `broker` or `coordinator`.
    kind: String,
    /// The broker's id (or the coordinator replica's number).
    n: Option<i32>,
    #[command(flatten)]
    dir: Dir,
}

fn main() -> std::process::ExitCode {
    // Run as one of the cluster's processes (`cluster up` starts them so).
    let mut argv = std::env::args_os();
    let _exe = argv.next();
    match argv.next().as_ref().and_then(|a| a.to_str()) {
        Some(supervisor::RUN_BROKER) => {
            let args = broker::cli::Args::parse_from_command_line(std::iter::once("broker".into()).chain(argv));
            return exit(broker::cli::main(args));
        }
        Some(supervisor::RUN_COORDINATOR) => {
            use clap::Parser as _;
            let args = coordinator::cli::Args::parse_from(std::iter::once("coordinator".into()).chain(argv));
            return exit(coordinator::cli::main(args));
        }
        _ => {}
    }
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return exit(Err(e.into())),
    };
    // `up` runs on this (the main) thread: the children it starts die with it.
    exit(rt.block_on(run(cli.command)))
}

fn exit(r: anyhow::Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Up {
            brokers,
            replicas,
            kafka_port,
            data_dir,
            broker_arg,
            coordinator_arg,
            etcd_endpoints,
            coordinators,
            json,
        } => {
            if (!etcd_endpoints.is_empty() || coordinators.is_some()) && !cfg!(feature = "etcd") {
                eprintln!(
                    "cluster: --etcd-endpoints and --coordinators run coordinator replicas on etcd, and this cluster \
                     was built without etcd support; build it with the cargo feature `etcd` (cargo build --release \
                     --features etcd --bin cluster, which needs protoc: scripts/etcd installs it)"
                );
                std::process::exit(2);
            }
            if coordinators.is_some() && etcd_endpoints.is_empty() {
                eprintln!("cluster: --coordinators needs --etcd-endpoints (the replicas share their state there)");
                std::process::exit(2);
            }
            let replicas = replicas.unwrap_or(brokers.min(3));
            if replicas > brokers {
                eprintln!("cluster: --replicas {replicas} is more than --brokers {brokers}");
                std::process::exit(2);
            }
            supervisor::up(UpConfig {
                brokers,
                replicas,
                kafka_port,
                data_dir,
                broker_args: broker_arg,
                coordinator_args: coordinator_arg,
                json,
                coordinators: coordinators.unwrap_or(1),
                etcd_endpoints,
            })
            .await
        }
        Cmd::Certificates { dir, clients } => {
            if let Some(bad) = clients
                .iter()
                .find(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
            {
                eprintln!(
                    "cluster: --client {bad:?}: a client name is letters, digits, '.', '_' and '-' (it names files)"
                );
                std::process::exit(2);
            }
            let names: Vec<&str> = clients.iter().map(String::as_str).collect();
            let made = epochfence::local_certificates_with_clients(&names)?;
            std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
            let mut files = vec![
                ("ca.pem".to_string(), made.ca),
                ("server.pem".to_string(), made.server_cert),
                ("server.key".to_string(), made.server_key),
            ];
            for (name, cert, key) in made.clients {
                files.push((format!("client-{name}.pem"), cert));
                files.push((format!("client-{name}.key"), key));
            }
            for (name, pem) in files {
                let path = dir.join(name);
                std::fs::write(&path, pem).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                println!("{}", path.display());
            }
            Ok(())
        }
        Cmd::Down(d) => send(d, "down", None, None).await,
        Cmd::Status(d) => send(d, "status", None, None).await,
        Cmd::Heal(d) => send(d, "heal", None, None).await,
        Cmd::Pause(t) => send(t.dir, "pause", Some(t.kind), t.n).await,
        Cmd::Resume(t) => send(t.dir, "resume", Some(t.kind), t.n).await,
        Cmd::Kill(t) => send(t.dir, "kill", Some(t.kind), t.n).await,
        Cmd::Restart(t) => send(t.dir, "restart", Some(t.kind), t.n).await,
        Cmd::Isolate(t) => send(t.dir, "isolate", Some(t.kind), t.n).await,
        Cmd::Timeline { file, follow, dir } => {
            let data_dir = supervisor::resolve_data_dir(dir.data_dir)?;
            loop {
                let n = draw(&data_dir, &file)?;
                if !follow {
                    println!("wrote {} ({n} events of {})", file.display(), data_dir.display());
                    return Ok(());
                }
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => return Ok(()),
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

async fn send(d: Dir, action: &str, kind: Option<String>, n: Option<i32>) -> anyhow::Result<()> {
    let data_dir = supervisor::resolve_data_dir(d.data_dir)?;
    let req = ControlRequest { action: action.to_string(), kind, n };
    let reply = supervisor::control(&data_dir, &req).await?;
    if d.json {
        println!("{}", serde_json::to_string(&reply)?);
    } else if reply.ok {
        print!("{}", reply.message);
        if !reply.message.ends_with('\n') {
            println!();
        }
    }
    if reply.ok {
        Ok(())
    } else {
        Err(anyhow::anyhow!("{}", reply.message))
    }
}

/// Write the timeline page of `data_dir`'s events to `file`; returns how many events it drew.
fn draw(data_dir: &std::path::Path, file: &std::path::Path) -> anyhow::Result<usize> {
    let path = supervisor::events_path(data_dir);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read the events of {} ({}): {e}", data_dir.display(), path.display()))?;
    // A line being appended while this reads is skipped, and drawn next time.
    let events: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let intro = format!(
        "{} events from {}: a lane per coordinator, broker, producer instance (its transactional id, producer id \
         and client, its epochs as bands) and group member; every grant, fence, transaction end, refused write \
         (red, with its reason), election, ISR change, group generation and injected fault as a mark.",
        events.len(),
        path.display()
    );
    let page = timeline::page(&events, "epochfence cluster run", &intro);
    let tmp = file.with_extension("html.tmp");
    std::fs::write(&tmp, page.render())?;
    std::fs::rename(&tmp, file)?;
    Ok(events.len())
}
