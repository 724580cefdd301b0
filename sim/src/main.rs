//! `sim`: run many seeds of the deterministic simulation and print the failing ones, or
//! replay one seed with a readable trace.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use sim::{run, Config, Mutation};

#[derive(Parser, Debug)]
#[command(name = "sim", about = "Deterministic simulation of epochfence's fencing under faults")]
struct Args {
    /// How many seeds to run (starting at --first-seed).
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed of the range.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Replay this one seed (overrides --seeds).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the trace of who did what at which tick (with --seed).
    #[arg(long)]
    verbose: bool,
    /// Switch one check off: none, no-producer-fencing, no-leader-epoch-checks, unsynced-commits,
    /// read-uncommitted, unversioned-isr, no-min-isr, trust-restarts, trust-damaged-logs,
    /// keep-verifications, unclean-leaders-keep-their-logs (these two with --unclean-elections),
    /// expired-ids-taken-for-idempotent, topics-by-name (with --topic-deletions),
    /// no-bump-per-transaction (transaction version 2).
    #[arg(long, default_value = "none")]
    mutation: String,
    /// An operator forces unclean elections (every in-sync replica of a partition lost, a replica
    /// outside them elected): records and markers only the lost ones held may be lost, the fence
    /// must hold.
    #[arg(long)]
    unclean_elections: bool,
    /// Run without expiry (issue 27): transactional ids and producer ids are never forgotten
    /// and producers retry a batch for as long as it takes, as the runs were before it.
    #[arg(long)]
    no_expiry: bool,
    /// An operator deletes the topic while a leader of it is paused and creates it again under
    /// the name: what was written into the deleted topic is gone with it, the fence must hold
    /// there too.
    #[arg(long)]
    topic_deletions: bool,
    /// The transaction version the transactional producers run under, as Kafka clients do: 2
    /// (epoch bump at every EndTxn, partitions added by their first write) or 1
    /// (AddPartitionsToTxn, no bump: a delayed EndTxn ending the next transaction is counted as
    /// version 1's known hole, not a failure).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i16).range(1..=2))]
    transaction_version: i16,
    /// No message held for long in the network: the network as it was before issue 31 (some
    /// pinned seeds were found under it).
    #[arg(long)]
    no_held_messages: bool,
    /// Ticks with faults.
    #[arg(long, default_value_t = 3_000)]
    fault_ticks: u64,
    /// With --seed: write the run's timeline (a lane per process, epochs as bands, every fault,
    /// election, fence and refusal as a mark) to this HTML file.
    #[arg(long, value_name = "FILE.html")]
    timeline: Option<std::path::PathBuf>,
    /// Partitions of the simulated topic (1 to 16).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i32).range(1..=16))]
    partitions: i32,
    /// Run the consumer-group simulation instead: read-process-write workers of one group,
    /// each input's output committed exactly once. Its mutations: none, no-generation-fencing.
    #[arg(long, conflicts_with_all = ["timeline", "partitions"])]
    groups: bool,
    /// With --groups: the workers are KIP-848 members (ConsumerGroupHeartbeat, member epochs);
    /// also checked: no partition owned by two members at once. no-generation-fencing then
    /// skips the member epoch check of offset commits.
    #[arg(long, requires = "groups")]
    kip848: bool,
    /// Run the coordinator-replica simulation instead: three replicas on a guarded store with
    /// leases, paused past their lease, crashed, cut off from the store; no write of a deposed
    /// replica lands. Its mutations: none, unguarded-writes.
    #[arg(long, conflicts_with_all = ["timeline", "partitions", "groups"])]
    coordinators: bool,
}

/// Print a line; a closed stdout (`sim ... | head`) ends the run quietly instead of panicking.
macro_rules! say {
    ($($t:tt)*) => {
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            return ExitCode::from(1);
        }
    };
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.groups {
        return groups(&args);
    }
    if args.coordinators {
        return coordinators(&args);
    }
    let Some(mutation) = Mutation::parse(&args.mutation) else {
        eprintln!(
            "error: unknown mutation '{}'; use none, no-producer-fencing, no-leader-epoch-checks, unsynced-commits, read-uncommitted, unversioned-isr, no-min-isr, trust-restarts, trust-damaged-logs, keep-verifications, unclean-leaders-keep-their-logs, expired-ids-taken-for-idempotent, topics-by-name or no-bump-per-transaction",
            args.mutation
        );
        return ExitCode::from(2);
    };
    if mutation == Mutation::NoBumpPerTransaction && args.transaction_version < 2 {
        eprintln!("error: no-bump-per-transaction mutates transaction version 2: drop --transaction-version 1");
        return ExitCode::from(2);
    }
    if args.timeline.is_some() && args.seed.is_none() {
        eprintln!("error: --timeline draws one run: give it with --seed S");
        return ExitCode::from(2);
    }
    let cfg = Config {
        mutation,
        unclean_elections: args.unclean_elections,
        expiry: !args.no_expiry,
        topic_deletions: args.topic_deletions,
        transaction_version: args.transaction_version,
        held_messages: !args.no_held_messages,
        fault_ticks: args.fault_ticks,
        partitions: args.partitions,
        // The timeline is drawn from the trace.
        verbose: args.verbose || args.timeline.is_some(),
        ..Config::default()
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first_seed..args.first_seed + args.seeds).collect(),
    };
    let mut failing = Vec::new();
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut decisions: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut steps, mut acked, mut fenced, mut elections, mut consumed) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut committed, mut aborted, mut timed_out, mut skipped, mut spanning) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // A bar (or plain lines on stderr) for a range of seeds; nothing for one replayed seed.
    let progress = net::progress::Progress::new("sim", Some(seeds.len() as u64), "seeds", seeds.len() <= 1);
    for &seed in &seeds {
        let out = run(seed, cfg.clone());
        progress.inc(1);
        if args.verbose && std::io::stdout().write_all(out.trace.as_bytes()).is_err() {
            return ExitCode::from(1);
        }
        if let Some(path) = &args.timeline {
            let mut page = timeline::Page::new(
                format!("epochfence simulation, seed {seed}"),
                format!(
                    "One simulated run (mutation {}): a lane per process, producer epochs and leaderships as bands, \
                     every crash, pause, election, grant, append, marker and refusal as a mark, in the trace's order. \
                     Replay it with: sim --seed {seed} --verbose",
                    args.mutation
                ),
            );
            page.push(sim::timeline::timeline_of(seed, &out.trace));
            if let Err(e) = std::fs::write(path, page.render()) {
                eprintln!("error: cannot write the timeline to {}: {e}", path.display());
                return ExitCode::from(2);
            }
            say!("timeline written to {}", path.display());
        }
        for (k, v) in &out.faults {
            *faults.entry(k).or_default() += v;
        }
        for (k, v) in &out.decisions {
            *decisions.entry(k).or_default() += v;
        }
        steps += out.steps;
        acked += out.acked;
        fenced += out.fenced;
        elections += out.elections;
        consumed += out.consumed;
        committed += out.txns_committed;
        aborted += out.txns_aborted;
        timed_out += out.txns_timed_out;
        spanning += out.txns_spanning;
        skipped += out.aborted_skipped;
        if let Some(v) = out.violation {
            say!("seed {seed} FAILED: {v}");
            failing.push(seed);
        }
    }
    progress.finish();
    say!(
        "{} seeds, mutation {}: {} failed; {steps} steps, {acked} records acknowledged, {fenced} zombie writes \
         refused, {elections} elections, {consumed} batches read by the consumer",
        seeds.len(),
        args.mutation,
        failing.len()
    );
    say!(
        "transactions: {committed} committed ({spanning} across partitions), {aborted} aborted on EndTxn, \
         {timed_out} aborted on timeout; {skipped} aborted batches skipped by the read_committed consumer"
    );
    let decisions: Vec<String> = decisions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    say!("decisions: {}", decisions.join(", "));
    let faults: Vec<String> = faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
    say!("faults: {}", faults.join(", "));
    if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        say!("replay one with: cargo run -p sim --release -- --seed {} --verbose", failing[0]);
        ExitCode::from(1)
    }
}

/// `sim --groups`: the consumer-group simulation over a range of seeds (or one, replayed).
fn groups(args: &Args) -> ExitCode {
    let generation_fencing = match args.mutation.as_str() {
        "none" => true,
        "no-generation-fencing" => false,
        other => {
            eprintln!("error: unknown mutation '{other}' for --groups; use none or no-generation-fencing");
            return ExitCode::from(2);
        }
    };
    let cfg = sim::groups::GroupsConfig {
        fault_ticks: args.fault_ticks,
        generation_fencing,
        kip848: args.kip848,
        verbose: args.verbose,
        ..sim::groups::GroupsConfig::default()
    };
    let flag = if args.kip848 { "groups --kip848" } else { "groups" };
    side_seeds(args, flag, "sim --groups", |seed| {
        let out = sim::groups::run_groups(seed, cfg.clone());
        let counts = vec![
            ("transactions committed", out.committed),
            ("aborted", out.aborted),
            ("offset commits refused by the generation check", out.generation_refusals),
            ("rebalances", out.generations),
        ];
        SideRun { violation: out.violation, trace: out.trace, faults: out.faults, counts }
    })
}

/// `sim --coordinators`: the coordinator-replica simulation over a range of seeds (or one).
fn coordinators(args: &Args) -> ExitCode {
    let guarded = match args.mutation.as_str() {
        "none" => true,
        "unguarded-writes" => false,
        other => {
            eprintln!("error: unknown mutation '{other}' for --coordinators; use none or unguarded-writes");
            return ExitCode::from(2);
        }
    };
    let cfg = sim::replicas::ReplicasConfig { fault_ticks: args.fault_ticks, guarded, verbose: args.verbose };
    side_seeds(args, "coordinators", "sim --coordinators", |seed| {
        let out = sim::replicas::run_replicas(seed, cfg.clone());
        let counts = vec![
            ("grants", out.grants),
            ("takeovers", out.takeovers),
            ("writes of deposed replicas refused", out.deposed_writes_refused),
        ];
        SideRun { violation: out.violation, trace: out.trace, faults: out.faults, counts }
    })
}

/// One seed of a side simulation (`--groups`, `--coordinators`), as [`side_seeds`] reports it.
struct SideRun {
    violation: Option<String>,
    trace: String,
    faults: BTreeMap<&'static str, u64>,
    /// Totals summed over the seeds, with what they count.
    counts: Vec<(&'static str, u64)>,
}

/// Run `run` over the seeds `args` asks for (`--flag`'s simulation, its progress shown as
/// `label`): the failing seeds, the totals and the faults, then how to replay the first failure.
fn side_seeds(args: &Args, flag: &str, label: &'static str, run: impl Fn(u64) -> SideRun) -> ExitCode {
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first_seed..args.first_seed + args.seeds).collect(),
    };
    let progress = net::progress::Progress::new(label, Some(seeds.len() as u64), "seeds", seeds.len() <= 1);
    let mut failing = Vec::new();
    let mut totals: Vec<(&'static str, u64)> = Vec::new();
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    for &seed in &seeds {
        let out = run(seed);
        progress.inc(1);
        if args.verbose && std::io::stdout().write_all(out.trace.as_bytes()).is_err() {
            return ExitCode::from(1);
        }
        if totals.is_empty() {
            totals = out.counts.iter().map(|(what, _)| (*what, 0)).collect();
        }
        for ((_, total), (_, n)) in totals.iter_mut().zip(&out.counts) {
            *total += n;
        }
        for (k, v) in &out.faults {
            *faults.entry(k).or_default() += v;
        }
        if let Some(v) = out.violation {
            say!("seed {seed} FAILED: {v}");
            failing.push(seed);
        }
    }
    progress.finish();
    let totals: Vec<String> = totals.iter().map(|(what, n)| format!("{n} {what}")).collect();
    say!("{} seeds ({flag}), mutation {}: {} failed; {}", seeds.len(), args.mutation, failing.len(), totals.join(", "));
    let faults: Vec<String> = faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
    say!("faults: {}", faults.join(", "));
    if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        let mutation = if args.mutation == "none" { String::new() } else { format!(" --mutation {}", args.mutation) };
        say!("replay one with: cargo run -p sim --release -- --{flag}{mutation} --seed {} --verbose", failing[0]);
        ExitCode::from(1)
    }
}
