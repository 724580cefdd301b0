//! `admin --bootstrap ADDR create-topic T --partitions N [--config K=V]...`, `alter-config --topic T
//! [--set K=V]... [--delete K]...`, `delete-topic T`, `delete-group G...`,
//! `create-partitions T --count N`, `elect-leader T`, `delete-records T --partition P --before
//! OFFSET`, `reassign T --partition P --replicas 1,2,3` (or `--cancel`) and `describe [--json]` (brokers, partitions,
//! transactional ids and consumer groups), `acls add|remove|list` (with `--authorizer`),
//! `users set|delete|list` (SCRAM credentials of SASL logins); `--sasl-username U --sasl-password-file F`
//! logs in (SCRAM) so that, under the authorizer, the ACLs decide what the admin may do

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use producer::{Admin, ClientConfig};

/// Cluster administration through the coordinator.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The coordinator's address, or its replicas' (comma-separated: the active one is followed).
    #[arg(long)]
    bootstrap: String,
    /// Connect over TLS, trusting the CA certificates in this PEM file.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// File holding the cluster secret: with a secret set on the coordinator, creating topics
    /// and electing leaders need it (the admin proves it holds it, as brokers do).
    #[arg(long)]
    cluster_secret_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    sasl: producer::SaslArgs,
    #[command(subcommand)]
    command: Command,
}

/// `K=V` of `--config` and `--set`.
fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?}: give K=V, a config name and its value")),
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a topic.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Replicas per partition (default: the coordinator's, min(3, live brokers)).
        #[arg(long)]
        replicas: Option<i32>,
        /// The topic's min.insync.replicas: an acks=all write needs this many in-sync replicas
        /// (default: the coordinator's, 2 for three replicas or more, else 1).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        min_insync_replicas: Option<i32>,
        /// A topic config, `K=V` (repeatable): `retention.ms`, `retention.bytes`, `segment.bytes`,
        /// `segment.ms`, `max.message.bytes`, `min.insync.replicas`, `message.timestamp.type`,
        /// `message.timestamp.before.max.ms`, `message.timestamp.after.max.ms`, `cleanup.policy`
        /// (delete), `compression.type` (producer); each overrides the brokers' setting.
        #[arg(long = "config", value_name = "K=V", value_parser = key_value)]
        configs: Vec<(String, String)>,
    },
    /// Change a topic's configs: `--set K=V` and `--delete K` (repeatable; a deleted config
    /// goes back to the brokers' setting). Exit 1 if refused (nothing changes then).
    AlterConfig {
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Set a config, `K=V`.
        #[arg(long = "set", value_name = "K=V", value_parser = key_value)]
        set: Vec<(String, String)>,
        /// Remove a config.
        #[arg(long = "delete", value_name = "K")]
        delete: Vec<String>,
    },
    /// Delete a topic: every broker drops its partitions; a topic created again under the name
    /// is another topic (another id), which nothing of the old one reaches.
    DeleteTopic {
        /// Topic name.
        name: String,
    },
    /// Delete consumer groups without members, with their committed offsets (exit 1 if any is
    /// not deleted: it has members, or does not exist).
    DeleteGroup {
        /// Group ids.
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Give a topic more partitions.
    CreatePartitions {
        /// Topic name.
        name: String,
        /// The partition count afterwards.
        #[arg(long)]
        count: i32,
    },
    /// Elect a partition's leader again under the next leader epoch (older epochs are then fenced).
    ElectLeader {
        /// Topic name.
        topic: String,
        /// Partition.
        #[arg(long, default_value_t = 0)]
        partition: i32,
        /// If no in-sync or eligible replica is live (every one lost its log, say), elect the
        /// live replica with the longest log anyway: records committed only on the others are
        /// lost.
        #[arg(long, conflicts_with = "preferred")]
        unclean: bool,
        /// Kafka's preferred election: the first replica leads again, if it is live and in
        /// sync (exit 1 with ELECTION_NOT_NEEDED if it leads already).
        #[arg(long)]
        preferred: bool,
    },
    /// Delete a partition's records below an offset (Kafka's DeleteRecords): its log start moves
    /// there on the leader and every in-sync replica, durably; consumers below it get
    /// OFFSET_OUT_OF_RANGE. Prints the new log start (the low watermark).
    DeleteRecords {
        /// Topic name.
        topic: String,
        /// Partition.
        #[arg(long, default_value_t = 0)]
        partition: i32,
        /// The first offset kept (-1: the high watermark, deleting every committed record).
        #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
        before: i64,
    },
    /// Move a partition's replicas to other brokers online (Kafka's AlterPartitionReassignments):
    /// the new replicas catch up and join the ISR, the leadership moves if its broker is
    /// removed, and the removed replicas are dropped. Prints `T-P: moving to replicas [..] (adding
    /// [..], removing [..])` (`T-P: moved to replicas [..]` if it is complete already), then
    /// waits until the move is complete and prints `T-P: replicas [..], leader L, leader epoch E`.
    /// Exit 1 if refused or not complete within --timeout-ms.
    Reassign {
        /// Topic name.
        topic: String,
        /// Partition.
        #[arg(long, default_value_t = 0)]
        partition: i32,
        /// The replicas afterwards, comma-separated broker ids (the first is the preferred
        /// leader); their count may differ from the partition's.
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel", conflicts_with = "cancel")]
        replicas: Vec<i32>,
        /// Cancel the move under way: back to the replicas the partition had before it.
        #[arg(long)]
        cancel: bool,
        /// Return once the move has begun, without waiting for it to complete.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for the move to complete, in ms.
        #[arg(long, default_value_t = 600_000)]
        timeout_ms: u64,
    },
    /// ACLs (the coordinator runs with --authorizer): who may do what on which resource.
    Acls {
        #[command(subcommand)]
        action: AclAction,
    },
    /// SCRAM credentials of SASL logins (KIP-554): the password is salted here and never sent.
    Users {
        #[command(subcommand)]
        action: UserAction,
    },
    /// Show brokers, partitions (leader, leader epoch) and transactional ids (producer id, epoch).
    Describe {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum UserAction {
    /// Create or replace NAME's credentials (both mechanisms unless `--mechanism`).
    Set {
        /// The user.
        name: String,
        /// File holding the password (surrounding whitespace ignored).
        #[arg(long)]
        password_file: std::path::PathBuf,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (default: both).
        #[arg(long, value_parser = parse_scram_mechanism)]
        mechanism: Option<protocol::sasl::ScramMechanism>,
        /// PBKDF2 iterations (4096 to 16384, as Kafka takes).
        #[arg(long, default_value_t = protocol::sasl::ITERATIONS_MIN)]
        iterations: u32,
    },
    /// Delete NAME's credentials (both mechanisms unless `--mechanism`).
    Delete {
        /// The user.
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (default: both it has).
        #[arg(long, value_parser = parse_scram_mechanism)]
        mechanism: Option<protocol::sasl::ScramMechanism>,
    },
    /// Print each user's mechanisms and iterations (`--json`: a JSON array).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_scram_mechanism(s: &str) -> Result<protocol::sasl::ScramMechanism, String> {
    protocol::sasl::ScramMechanism::parse(s).ok_or_else(|| format!("`{s}`: give SCRAM-SHA-256 or SCRAM-SHA-512"))
}

/// `admin users ...`.
async fn users(admin: &mut Admin, action: UserAction) -> Result<(), String> {
    use protocol::sasl::{ScramCredential, ScramMechanism};
    let mechanisms = |m: Option<ScramMechanism>| m.map_or(ScramMechanism::ALL.to_vec(), |m| vec![m]);
    let req = match &action {
        UserAction::Set { name, password_file, mechanism, iterations } => {
            let password = std::fs::read_to_string(password_file)
                .map_err(|e| format!("cannot read --password-file {}: {e}", password_file.display()))?;
            let password = password.trim();
            let mut upserts = Vec::new();
            for m in mechanisms(*mechanism) {
                let mut salt = vec![0u8; 32];
                getrandom::fill(&mut salt).map_err(|e| format!("no random salt: {e}"))?;
                let salted = m.salted_password(password.as_bytes(), &salt, *iterations);
                let credential = ScramCredential::from_salted_password(m, &salted, salt, *iterations);
                upserts.push(protocol::UserCredential { user: name.clone(), credential });
            }
            protocol::ScramCredentialsRequest { upserts, deletions: Vec::new() }
        }
        UserAction::Delete { name, mechanism } => {
            // Without --mechanism: the ones the user has (a deletion of none is refused).
            let held = admin
                .scram_credentials(protocol::ScramCredentialsRequest::default())
                .await
                .map_err(|e| e.to_string())?;
            let deletions: Vec<_> = held
                .credentials
                .users
                .iter()
                .filter(|u| u.user == *name && mechanism.is_none_or(|m| m == u.credential.mechanism))
                .map(|u| (name.clone(), u.credential.mechanism))
                .collect();
            if deletions.is_empty() {
                return Err(format!("user '{name}' has no such credential"));
            }
            protocol::ScramCredentialsRequest { upserts: Vec::new(), deletions }
        }
        UserAction::List { .. } => protocol::ScramCredentialsRequest::default(),
    };
    let what: Vec<String> = req
        .upserts
        .iter()
        .map(|u| format!("set {} {} iterations={}", u.user, u.credential.mechanism, u.credential.iterations))
        .chain(req.deletions.iter().map(|(u, m)| format!("deleted {u} {m}")))
        .collect();
    let resp = admin.scram_credentials(req).await.map_err(|e| e.to_string())?;
    if let Some((user, status)) = resp.results.iter().find(|(_, s)| !s.is_ok()) {
        return Err(format!("{user}: {status}"));
    }
    for w in what {
        println!("{w}");
    }
    let last = Some(resp);
    if let (UserAction::List { json }, Some(resp)) = (&action, last) {
        let mut rows: Vec<(String, String, u32)> = resp
            .credentials
            .users
            .iter()
            .map(|u| (u.user.clone(), u.credential.mechanism.name().to_string(), u.credential.iterations))
            .collect();
        rows.sort();
        if *json {
            let all: Vec<serde_json::Value> = rows
                .iter()
                .map(|(u, m, i)| serde_json::json!({ "user": u, "mechanism": m, "iterations": i }))
                .collect();
            println!("{}", serde_json::to_string_pretty(&all).expect("json values serialise"));
        } else {
            for (u, m, i) in rows {
                println!("{u} {m} iterations={i}");
            }
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
enum AclAction {
    /// Allow (or with --deny, deny) a principal an operation on a resource.
    Add(AclArgs),
    /// Remove the ACL the same arguments name.
    Remove(AclArgs),
    /// Print every ACL, one per line (`--json`: a JSON array).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// One ACL: a principal, a resource, an operation.
#[derive(clap::Args, Debug)]
struct AclArgs {
    /// `User:NAME`, or `User:*` for everyone.
    #[arg(long)]
    principal: String,
    /// A topic (with --prefixed, every topic starting with it; `*`: every topic).
    #[arg(long, group = "resource")]
    topic: Option<String>,
    /// A consumer group.
    #[arg(long, group = "resource")]
    group: Option<String>,
    /// A transactional id.
    #[arg(long, group = "resource")]
    transactional_id: Option<String>,
    /// The cluster.
    #[arg(long, group = "resource")]
    cluster: bool,
    /// Kafka's operation: ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
    /// DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
    #[arg(long, value_parser = parse_operation)]
    operation: protocol::acl::Operation,
    /// The name is a prefix.
    #[arg(long)]
    prefixed: bool,
    /// Deny rather than allow (a DENY wins over every ALLOW).
    #[arg(long)]
    deny: bool,
    /// The client address it holds for (`*`: any).
    #[arg(long, default_value = "*")]
    host: String,
}

fn parse_operation(s: &str) -> Result<protocol::acl::Operation, String> {
    protocol::acl::Operation::parse(s).ok_or_else(|| {
        let all: Vec<&str> = protocol::acl::Operation::ALL_VALUES.iter().map(|o| o.name()).collect();
        format!("unknown operation `{s}`; one of {}", all.join(", "))
    })
}

impl AclArgs {
    /// The binding these arguments name (clap has checked that one resource is given).
    fn binding(&self) -> Result<protocol::acl::AclBinding, String> {
        use protocol::acl::{PatternType, Permission, ResourceType};
        let (resource_type, name) = match (&self.topic, &self.group, &self.transactional_id, self.cluster) {
            (Some(t), ..) => (ResourceType::Topic, t.clone()),
            (_, Some(g), ..) => (ResourceType::Group, g.clone()),
            (_, _, Some(t), _) => (ResourceType::TransactionalId, t.clone()),
            (.., true) => (ResourceType::Cluster, protocol::acl::CLUSTER_NAME.to_string()),
            _ => return Err("name a resource: --topic, --group, --transactional-id or --cluster".into()),
        };
        let binding = protocol::acl::AclBinding {
            resource_type,
            name,
            pattern: if self.prefixed { PatternType::Prefixed } else { PatternType::Literal },
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation,
            permission: if self.deny { Permission::Deny } else { Permission::Allow },
        };
        binding.validate().map_err(|e| e.to_string())?;
        Ok(binding)
    }
}

/// `admin acls ...`.
async fn acls(admin: &mut Admin, action: AclAction) -> Result<(), String> {
    let added = match &action {
        AclAction::Add(a) => Some(a.binding()?),
        _ => None,
    };
    let req = match &action {
        AclAction::Add(_) => protocol::AclsRequest { create: added.iter().cloned().collect(), delete: Vec::new() },
        AclAction::Remove(a) => {
            let b = a.binding()?;
            let exactly = protocol::acl::AclFilter {
                resource_type: Some(b.resource_type),
                name: Some(b.name),
                pattern: protocol::acl::PatternFilter::Exactly(b.pattern),
                principal: Some(b.principal),
                host: Some(b.host),
                operation: Some(b.operation),
                permission: Some(b.permission),
            };
            protocol::AclsRequest { create: Vec::new(), delete: vec![exactly] }
        }
        AclAction::List { .. } => protocol::AclsRequest::default(),
    };
    let resp = admin.acls(req).await.map_err(|e| e.to_string())?;
    match action {
        AclAction::Add(_) => match resp.created.first() {
            Some(s) if s.is_ok() => {
                if let Some(b) = &added {
                    println!("added: {b}");
                }
            }
            Some(s) => return Err(s.to_string()),
            None => return Err("the coordinator answered no result".into()),
        },
        AclAction::Remove(_) => match resp.deleted.first().map(Vec::as_slice) {
            Some([]) | None => return Err("no such ACL".into()),
            Some(gone) => {
                for b in gone {
                    println!("removed: {b}");
                }
            }
        },
        AclAction::List { json } => {
            if json {
                let all: Vec<serde_json::Value> = resp
                    .authorization
                    .acls
                    .iter()
                    .map(|b| {
                        serde_json::json!({
                            "resource_type": b.resource_type.name(),
                            "name": b.name,
                            "pattern": b.pattern.name(),
                            "principal": b.principal,
                            "host": b.host,
                            "operation": b.operation.name(),
                            "permission": b.permission.name(),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&all).expect("json values serialise"));
            } else {
                for b in &resp.authorization.acls {
                    println!("{b}");
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    net::init_logging("warn");
    let args = Args::parse();
    let config = match ClientConfig::with_tls_ca(args.tls_ca.as_deref()).and_then(|c| {
        let secret = args.cluster_secret_file.as_deref().map(net::read_cluster_secret).transpose();
        let sasl = args.sasl.login(false).map_err(producer::ClientError::Protocol)?;
        Ok(ClientConfig { secret: secret.map_err(producer::ClientError::Protocol)?, sasl, ..c })
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Command::AlterConfig { set, delete, .. } = &args.command {
        if set.is_empty() && delete.is_empty() {
            eprintln!("error: nothing to change: give --set K=V or --delete K");
            return ExitCode::from(2);
        }
    }
    if let Command::CreateTopic { name, .. } = &args.command {
        if protocol::names::is_reserved_topic(name) {
            // A usage error, as for a bad flag: no cluster would take it.
            eprintln!("error: {}", protocol::names::reserved_topic_refusal(name));
            return ExitCode::from(2);
        }
    }
    let mut admin = Admin::new(&args.bootstrap, config);
    if let Command::Users { action } = args.command {
        return match users(&mut admin, action).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::DeleteGroup { groups } = &args.command {
        return match admin.delete_groups(groups).await {
            Ok(statuses) => {
                let mut code = ExitCode::SUCCESS;
                for (group, status) in groups.iter().zip(statuses) {
                    if status.is_ok() {
                        println!("deleted group '{group}'");
                    } else {
                        eprintln!("error: group '{group}' not deleted: {status}");
                        code = ExitCode::FAILURE;
                    }
                }
                code
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::Acls { action } = args.command {
        return match acls(&mut admin, action).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = match args.command {
        Command::CreateTopic { name, partitions, replicas, min_insync_replicas, configs } => admin
            .create_topic_configured(
                &name,
                partitions,
                replicas.unwrap_or(-1),
                min_insync_replicas.unwrap_or(-1),
                &configs,
            )
            .await
            .map(|()| {
                println!("created topic '{name}' with {partitions} partitions");
            }),
        Command::AlterConfig { topic, set, delete } => {
            let mut changes: Vec<protocol::ConfigChange> =
                set.iter().map(|(k, v)| protocol::ConfigChange::Set(k.clone(), v.clone())).collect();
            changes.extend(delete.iter().map(|k| protocol::ConfigChange::Delete(k.clone())));
            admin.alter_configs(&topic, changes).await.map(|()| {
                let mut said: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
                said.extend(delete.iter().map(|k| format!("{k} deleted")));
                println!("altered topic '{topic}': {}", said.join(", "));
            })
        }
        Command::DeleteTopic { name } => admin.delete_topic(&name).await.map(|()| println!("deleted topic '{name}'")),
        Command::CreatePartitions { name, count } => {
            admin.create_partitions(&name, count).await.map(|()| println!("topic '{name}' has {count} partitions"))
        }
        Command::ElectLeader { topic, partition, unclean, preferred } => {
            let election = match (preferred, unclean) {
                (true, _) => protocol::Election::Preferred,
                (false, true) => protocol::Election::AgainUnclean,
                (false, false) => protocol::Election::Again,
            };
            admin.elect(&topic, partition, election).await.map(|(leader, epoch)| {
                println!("{topic}-{partition}: leader={leader} leader_epoch={epoch}");
            })
        }
        Command::DeleteRecords { topic, partition, before } => {
            admin.delete_records(&topic, partition, before).await.map(|low| {
                println!("{topic}-{partition}: log start offset {low}");
            })
        }
        Command::Reassign { topic, partition, replicas, cancel, no_wait, timeout_ms } => {
            reassign(&mut admin, &topic, partition, (!cancel).then_some(replicas), no_wait, timeout_ms).await
        }
        Command::Describe { json } => match admin.describe().await {
            Ok(d) => admin.describe_groups().await.map(|groups| {
                if json {
                    let mut v = describe_json(&d);
                    v["groups"] = groups_json(&groups);
                    println!("{}", serde_json::to_string_pretty(&v).expect("json values serialise"));
                } else {
                    print_describe(&d);
                    print_groups(&groups);
                }
            }),
            Err(e) => Err(e),
        },
        Command::Acls { .. } | Command::Users { .. } | Command::DeleteGroup { .. } => unreachable!("answered above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `admin reassign`: start (or cancel) the move, then wait for it to complete.
async fn reassign(
    admin: &mut Admin,
    topic: &str,
    partition: i32,
    replicas: Option<Vec<i32>>,
    no_wait: bool,
    timeout_ms: u64,
) -> Result<(), producer::ClientError> {
    let (cancel, target) = (replicas.is_none(), replicas.clone());
    admin.reassign(topic, partition, replicas).await?;
    let asked = Some(vec![(topic.to_string(), vec![partition])]);
    match admin.reassignments(asked.clone()).await?.first() {
        Some(m) => println!(
            "{topic}-{partition}: moving to replicas {:?} (adding {:?}, removing {:?})",
            m.replicas.iter().filter(|r| !m.removing.contains(r)).collect::<Vec<_>>(),
            m.adding,
            m.removing
        ),
        None if cancel => println!("{topic}-{partition}: move cancelled"),
        // Complete already: at once (every replica asked for was in sync), or just since.
        None => println!("{topic}-{partition}: moved to replicas {:?}", target.unwrap_or_default()),
    }
    if no_wait {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
    // Polled: the coordinator completes a move when its tick finds every new replica in sync.
    while !admin.reassignments(asked.clone()).await?.is_empty() {
        if std::time::Instant::now() >= deadline {
            return Err(producer::ClientError::Protocol(format!(
                "{topic}-{partition} is still moving after {timeout_ms} ms (its new replicas are catching up); \
                 `admin reassign {topic} --partition {partition} --cancel` cancels it"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let d = admin.describe().await?;
    if let Some(p) = d.partitions.iter().find(|p| p.topic == topic && p.partition == partition) {
        println!(
            "{topic}-{partition}: replicas {:?}, leader {}, leader epoch {}",
            p.replicas, p.leader_id, p.leader_epoch
        );
    }
    Ok(())
}

fn describe_json(d: &protocol::DescribeResponse) -> serde_json::Value {
    serde_json::json!({
        "brokers": d.brokers.iter().map(|b| serde_json::json!({"id": b.id, "addr": b.addr, "alive": b.alive})).collect::<Vec<_>>(),
        "partitions": d.partitions.iter().map(|p| serde_json::json!({
            "topic": p.topic,
            "partition": p.partition,
            "leader": p.leader_id,
            "leader_epoch": p.leader_epoch,
            "replicas": p.replicas,
            "isr": p.isr,
            "eligible_leader_replicas": p.elr,
            "adding": p.adding,
            "removing": p.removing,
            "min_insync_replicas": p.min_insync_replicas,
            "replica_progress": p.progress.iter().map(|g| serde_json::json!({
                "broker": g.broker_id, "log_end_offset": g.log_end_offset, "high_watermark": g.high_watermark,
                "problem": (!g.problem.is_empty()).then_some(&g.problem),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "transactional_ids": d.transactional_ids.iter().map(|t| serde_json::json!({
            "transactional_id": t.transactional_id,
            "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch,
            "partitions": t.partitions,
            "state": t.state,
            "age_ms": (t.age_ms >= 0).then_some(t.age_ms),
            "transaction_timeout_ms": t.transaction_timeout_ms,
            "transaction_version": (t.transaction_version > 0).then_some(t.transaction_version),
        })).collect::<Vec<_>>(),
        "held": d.held.iter().map(|h| serde_json::json!({ "kind": h.kind, "count": h.count, "max": h.max }))
            .collect::<Vec<_>>(),
    })
}

/// A member's assigned partitions as `topic-partition`, for a `consumer` group (the
/// assignment of another protocol type is opaque: its size in bytes).
fn assignment(protocol_type: &str, bytes: &bytes::Bytes) -> Vec<String> {
    match (protocol_type, producer::kafka::assigned_partitions(bytes)) {
        ("consumer", Ok(parts)) => parts.into_iter().map(|(t, p)| format!("{t}-{p}")).collect(),
        _ if bytes.is_empty() => Vec::new(),
        _ => vec![format!("({} bytes)", bytes.len())],
    }
}

/// A KIP-848 member's partitions as `topic-partition`.
fn topic_partitions(tps: &[protocol::TopicPartitions]) -> Vec<String> {
    tps.iter().flat_map(|t| t.partitions.iter().map(move |p| format!("{}-{p}", t.topic))).collect()
}

fn groups_json(groups: &[protocol::GroupState]) -> serde_json::Value {
    serde_json::Value::Array(
        groups
            .iter()
            .map(|g| {
                if let Some(c) = &g.consumer {
                    return serde_json::json!({
                        "group": g.group,
                        "group_protocol": "consumer",
                        "state": g.state,
                        "group_epoch": c.group_epoch,
                        "assignment_epoch": c.assignment_epoch,
                        "assignor": c.assignor,
                        "members": c.members.iter().map(|m| serde_json::json!({
                            "member_id": m.member_id,
                            "instance_id": m.instance_id,
                            "client_id": m.client_id,
                            "member_epoch": m.member_epoch,
                            "subscribed_topics": m.topic_names,
                            "subscribed_regex": m.topic_regex,
                            "assignment": topic_partitions(&m.assigned),
                            "target": topic_partitions(&m.target),
                        })).collect::<Vec<_>>(),
                        "committed_offsets": g.offsets.iter().map(|o| serde_json::json!({
                            "topic": o.topic, "partition": o.partition, "offset": o.offset,
                        })).collect::<Vec<_>>(),
                    });
                }
                serde_json::json!({
                    "group_protocol": "classic",
                    "group": g.group,
                    "state": g.state,
                    "protocol_type": g.protocol_type,
                    "protocol": g.protocol,
                    "generation": g.generation,
                    "leader": g.leader,
                    "members": g.members.iter().map(|m| serde_json::json!({
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "assignment": assignment(&g.protocol_type, &m.assignment),
                    })).collect::<Vec<_>>(),
                    "committed_offsets": g.offsets.iter().map(|o| serde_json::json!({
                        "topic": o.topic, "partition": o.partition, "offset": o.offset,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

fn print_groups(groups: &[protocol::GroupState]) {
    println!("groups:");
    for g in groups {
        if let Some(c) = &g.consumer {
            println!(
                "  {} state={} group_protocol=consumer group_epoch={} assignment_epoch={} assignor={}",
                g.group, g.state, c.group_epoch, c.assignment_epoch, c.assignor
            );
            for m in &c.members {
                let instance = m.instance_id.as_deref().map(|i| format!(" instance_id={i}")).unwrap_or_default();
                let (assigned, target) = (topic_partitions(&m.assigned), topic_partitions(&m.target));
                let moving = if assigned == target { String::new() } else { format!(" target=[{}]", target.join(",")) };
                println!(
                    "    member {}{instance} member_epoch={} partitions=[{}]{moving}",
                    m.member_id,
                    m.member_epoch,
                    assigned.join(",")
                );
            }
        } else {
            println!(
                "  {} state={} generation={} protocol={} leader={} group_protocol=classic",
                g.group, g.state, g.generation, g.protocol, g.leader
            );
        }
        if g.consumer.is_some() {
            let offsets =
                g.offsets.iter().map(|o| format!("{}-{}={}", o.topic, o.partition, o.offset)).collect::<Vec<_>>();
            println!("    committed [{}]", offsets.join(" "));
            continue;
        }
        for m in &g.members {
            let instance = m.instance_id.as_deref().map(|i| format!(" instance_id={i}")).unwrap_or_default();
            println!(
                "    member {}{instance} partitions=[{}]",
                m.member_id,
                assignment(&g.protocol_type, &m.assignment).join(",")
            );
        }
        let offsets = g.offsets.iter().map(|o| format!("{}-{}={}", o.topic, o.partition, o.offset)).collect::<Vec<_>>();
        println!("    committed [{}]", offsets.join(" "));
    }
}

fn ids(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn print_describe(d: &protocol::DescribeResponse) {
    println!("brokers:");
    for b in &d.brokers {
        println!("  {} {} {}", b.id, b.addr, if b.alive { "alive" } else { "lease expired" });
    }
    println!("partitions:");
    for p in &d.partitions {
        let progress = p
            .progress
            .iter()
            .map(|g| format!("{}:leo={}/hw={}", g.broker_id, g.log_end_offset, g.high_watermark))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "  {}-{} leader={} leader_epoch={} replicas=[{}] isr=[{}] elr=[{}] min_insync_replicas={} {}",
            p.topic,
            p.partition,
            p.leader_id,
            p.leader_epoch,
            ids(&p.replicas),
            ids(&p.isr),
            ids(&p.elr),
            p.min_insync_replicas,
            progress
        );
        if !p.adding.is_empty() || !p.removing.is_empty() {
            println!("    moving: adding=[{}] removing=[{}]", ids(&p.adding), ids(&p.removing));
        }
        for g in p.progress.iter().filter(|g| !g.problem.is_empty()) {
            println!("    replica {}: {}", g.broker_id, g.problem);
        }
    }
    println!("transactional ids:");
    for t in &d.transactional_ids {
        let age = if t.age_ms >= 0 { format!(" age_ms={}", t.age_ms) } else { String::new() };
        let version = if t.transaction_version > 0 {
            format!(" transaction_version={}", t.transaction_version)
        } else {
            String::new()
        };
        println!(
            "  {} producer_id={} epoch={} state={} partitions=[{}]{age}{version}",
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            t.state,
            t.partitions.join(",")
        );
    }
    if !d.held.is_empty() {
        println!("held (count/cap):");
        for h in &d.held {
            println!("  {}: {}/{}", h.kind, h.count, h.max);
        }
    }
}
